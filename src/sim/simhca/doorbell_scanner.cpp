// The doorbell scanner, docs/simhca.md §12.5 (the client's half of the
// protocol is written there; this is the device's half).
#include "sim/simhca/doorbell_scanner.hpp"

#include <linux/futex.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <time.h>

#include <cerrno>
#include <climits>

#include "common/log.hpp"

namespace openib::simhca {

namespace {

#ifndef SYS_futex_waitv
constexpr long SYS_futex_waitv = 449;  // Linux >= 5.16
#endif

using Clock = std::chrono::steady_clock;

void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  std::this_thread::yield();
#endif
}

// The scanner's own word lives in this process only: private futex ops.
void futex_wake_private(std::atomic<uint32_t>& w) {
  ::syscall(SYS_futex, &w, FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0);
}

void futex_wait_private(std::atomic<uint32_t>& w, uint32_t expected, std::chrono::nanoseconds rel) {
  timespec ts{static_cast<time_t>(rel.count() / 1000000000), static_cast<long>(rel.count() % 1000000000)};
  ::syscall(SYS_futex, &w, FUTEX_WAIT_PRIVATE, expected, &ts, nullptr, 0);
}

timespec monotonic_after(std::chrono::nanoseconds d) {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  const int64_t ns = ts.tv_nsec + d.count();
  ts.tv_sec += static_cast<time_t>(ns / 1000000000);
  ts.tv_nsec = static_cast<long>(ns % 1000000000);
  return ts;
}

}  // namespace

DoorbellScanner::DoorbellScanner(std::byte* bar2)
    : bar2_(bar2), notify_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)), last_(kNumUars) {}

DoorbellScanner::~DoorbellScanner() { stop(); }

Result<void> DoorbellScanner::start() {
  if (!notify_) return sys_err("simhca: eventfd for the doorbell scanner");
  if (thread_.joinable()) return ok();
  stop_.store(false);
  thread_ = std::thread([this] { run(); });
  return ok();
}

void DoorbellScanner::stop() {
  if (!thread_.joinable()) return;
  stop_.store(true, std::memory_order_release);
  gen_.fetch_add(1, std::memory_order_release);
  futex_wake_private(gen_);
  thread_.join();
}

void DoorbellScanner::watch(uint32_t page, bool on) {
  if (page >= kNumUars) return;
  const uint64_t bit = uint64_t{1} << (page % 64);
  if (on) watched_[page / 64].fetch_or(bit, std::memory_order_release);
  else watched_[page / 64].fetch_and(~bit, std::memory_order_release);
  // A sleeping scanner waits on the old set's words: wake it to take the new set.
  gen_.fetch_add(1, std::memory_order_release);
  futex_wake_private(gen_);
}

void DoorbellScanner::unwatch_all() {
  for (auto& w : watched_) w.store(0, std::memory_order_release);
  gen_.fetch_add(1, std::memory_order_release);
  futex_wake_private(gen_);
}

ScannerCounts DoorbellScanner::counts() const {
  return {sleeps_.load(), wakeups_.load(), timeouts_.load(), notices_.load(), polled_.load()};
}

uint32_t* DoorbellScanner::sleeping_ptr(uint32_t page) const {
  return reinterpret_cast<uint32_t*>(bar2_ + page * kUarPageSize + kUarScannerSleeping);
}

std::atomic_ref<uint32_t> DoorbellScanner::sleeping_word(uint32_t page) const {
  return std::atomic_ref<uint32_t>(*sleeping_ptr(page));
}

// §12.5: busy, poll; idle for kSpinWindow, sleep until a doorbell or a
// change of the watched set wakes us (or the timeout).
void DoorbellScanner::run() {
  auto last_activity = Clock::now();
  while (!stop_.load(std::memory_order_acquire)) {
    if (scan()) {
      last_activity = Clock::now();
      continue;
    }
    if (Clock::now() - last_activity < kSpinWindow) {
      cpu_relax();
      continue;
    }
    sleep();
    last_activity = Clock::now();
  }
}

bool DoorbellScanner::scan() {
  pages_.clear();
  bool any = false;
  for (uint32_t w = 0; w < kWords; ++w) {
    const uint64_t cur = watched_[w].load(std::memory_order_acquire);
    // A page that just joined is handed over once unseen: a doorbell stored
    // before we looked must not be taken for the page's old contents.
    const uint64_t joined = cur & ~seen_watched_[w];
    seen_watched_[w] = cur;
    for (uint64_t bits = cur; bits; bits &= bits - 1) {
      const uint32_t bit = static_cast<uint32_t>(__builtin_ctzll(bits));
      const uint32_t page = w * 64 + bit;
      pages_.push_back(page);
      bool changed = (joined >> bit) & 1;
      auto& last = last_[page];
      for (size_t i = 0; i < kUarDoorbellOffsets.size(); ++i) {
        const uint64_t v = uar_word64(bar2_, page, kUarDoorbellOffsets[i]).load(std::memory_order_acquire);
        changed |= v != last[i];
        last[i] = v;
      }
      if (changed) {
        notice(page);
        any = true;
      }
    }
  }
  return any;
}

void DoorbellScanner::notice(uint32_t page) {
  notices_.fetch_add(1, std::memory_order_relaxed);
  const uint64_t bit = uint64_t{1} << (page % 64);
  // One eventfd write per batch: the device thread reads the fd before it
  // takes the bits, so a bit set after its take writes the fd again.
  if (!(pending_[page / 64].fetch_or(bit, std::memory_order_acq_rel) & bit)) {
    const uint64_t one = 1;
    (void)!::write(notify_.get(), &one, sizeof one);
  }
}

void DoorbellScanner::sleep() {
  const uint32_t gen = gen_.load(std::memory_order_acquire);
  if (pages_.empty()) {  // nothing to watch: wait for watch() or stop()
    futex_wait_private(gen_, gen, kSleepTimeout);
    return;
  }
  // §12.5: without futex_waitv, or with more pages than it takes, the
  // scanner never publishes SCANNER_SLEEPING and polls every 100 µs.
  if (have_waitv_ && pages_.size() <= kMaxSleepPages && sleep_on_futexes(gen)) return;
  polled_.fetch_add(1, std::memory_order_relaxed);
  std::this_thread::sleep_for(kPollPeriod);
}

void DoorbellScanner::set_sleeping(uint32_t value) {
  for (uint32_t p : sleeping_on_) sleeping_word(p).store(value, std::memory_order_seq_cst);
  if (value == 0) sleeping_on_.clear();
}

// Returns false if futex_waitv is missing (the caller polls instead).
bool DoorbellScanner::sleep_on_futexes(uint32_t gen) {
  sleeping_on_ = pages_;
  set_sleeping(1);
  // Dekker with the client (§12.5): our SCANNER_SLEEPING stores, a full
  // fence, then the doorbell words; the client stores its doorbell, a full
  // fence, then reads SCANNER_SLEEPING.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (scan() || gen_.load(std::memory_order_acquire) != gen) {
    set_sleeping(0);
    return true;
  }
  std::array<futex_waitv, FUTEX_WAITV_MAX> w{};
  w[0] = {gen, reinterpret_cast<uint64_t>(&gen_), FUTEX_32 | FUTEX_PRIVATE_FLAG, 0};
  size_t n = 1;
  for (uint32_t p : sleeping_on_)  // shared futexes: the client wakes them from its own mapping
    w[n++] = {1, reinterpret_cast<uint64_t>(sleeping_ptr(p)), FUTEX_32, 0};
  timespec until = monotonic_after(kSleepTimeout);
  const long r = ::syscall(SYS_futex_waitv, w.data(), n, 0, &until, CLOCK_MONOTONIC);
  const int e = errno;
  bool woken_by_client = r >= 1;
  if (r < 0 && e == EAGAIN)  // a client cleared its word before we slept
    for (uint32_t p : sleeping_on_) woken_by_client |= sleeping_word(p).load() != 1;
  set_sleeping(0);
  if (r < 0 && e == ENOSYS) {
    have_waitv_ = false;
    log::get("simhca")->warn("simhca: futex_waitv(2) not available; doorbell scanner polls every 100 us");
    return false;
  }
  sleeps_.fetch_add(1, std::memory_order_relaxed);
  if (woken_by_client) wakeups_.fetch_add(1, std::memory_order_relaxed);
  else if (r < 0 && e == ETIMEDOUT) timeouts_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

}  // namespace openib::simhca
