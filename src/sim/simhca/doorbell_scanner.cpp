// The doorbell scanner and the device loop's idle wait: docs/simhca.md
// §12.5 (the client's half of the protocol is written there; this is the
// device's half) and §13.
#include "sim/simhca/doorbell_scanner.hpp"

#include <sched.h>
#include <sys/syscall.h>

#include <cerrno>
#include <algorithm>
#include <climits>
#include <ctime>

#include "common/log.hpp"
#include "sim/cable/shm_link.hpp"

namespace openib::simhca {

namespace {

#ifndef SYS_futex_waitv
constexpr long SYS_futex_waitv = 449;  // Linux >= 5.16
#endif

timespec to_timespec(std::chrono::steady_clock::time_point t) {
  // steady_clock is CLOCK_MONOTONIC on Linux (libstdc++).
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
  return timespec{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
}

}  // namespace

DoorbellScanner::DoorbellScanner() : pages_(kNumUars, nullptr), last_(kNumUars) {}

void DoorbellScanner::watch(uint32_t page, std::byte* mem) {
  if (page >= kNumUars) return;
  const bool on = mem != nullptr;
  const uint64_t bit = uint64_t{1} << (page % 64);
  uint64_t& w = watched_[page / 64];
  pages_[page] = mem;
  if (((w & bit) != 0) == on) return;
  ++generation_;
  if (on) {
    w |= bit;
    ++npages_;
  } else {
    w &= ~bit;
    --npages_;
  }
}

void DoorbellScanner::unwatch_all() {
  ++generation_;
  watched_ = {};
  npages_ = 0;
  std::fill(pages_.begin(), pages_.end(), nullptr);
}

uint32_t* DoorbellScanner::sleeping_ptr(std::byte* mem) const {
  return reinterpret_cast<uint32_t*>(mem + kUarScannerSleeping);
}

bool DoorbellScanner::arm_sleep(std::vector<futex_waitv>& w, size_t room) {
  sleeping_on_.clear();
  // §12.5.2 limits: with more pages than futex_waitv takes, nothing is
  // published and the loop naps instead.
  if (npages_ > room) return false;
  for (uint32_t i = 0; i < kWords; ++i)
    for (uint64_t bits = watched_[i]; bits; bits &= bits - 1) {
      const uint32_t page = i * 64 + static_cast<uint32_t>(__builtin_ctzll(bits));
      std::byte* mem = pages_[page];
      std::atomic_ref<uint32_t>(*sleeping_ptr(mem)).store(1, std::memory_order_seq_cst);
      sleeping_on_.emplace_back(page, mem);
      // Shared futexes: the client wakes them from its own mapping.
      w.push_back({1, reinterpret_cast<uint64_t>(sleeping_ptr(mem)), FUTEX_32, 0});
    }
  return true;
}

bool DoorbellScanner::disarm_sleep() {
  bool woken = false;
  for (auto [page, mem] : sleeping_on_) {
    if (pages_[page] != mem) continue;  // left while we slept: its mapping may be gone
    woken |= std::atomic_ref<uint32_t>(*sleeping_ptr(mem)).exchange(0, std::memory_order_seq_cst) != 1;
  }
  sleeping_on_.clear();
  return woken;
}

// ---- DeviceWaiter ----------------------------------------------------------

void DeviceWaiter::notify() {
  std::atomic_thread_fence(std::memory_order_seq_cst);  // the caller's publication, then our flag
  if (sleeping_.load(std::memory_order_relaxed) == 0) return;
  word_.fetch_add(1, std::memory_order_seq_cst);
  ::syscall(SYS_futex, &word_, FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0);
}

void DeviceWaiter::relax() {
  if (yield_) {
    const auto t0 = std::chrono::steady_clock::now();
    ::sched_yield();
    const auto t1 = std::chrono::steady_clock::now();
    if (late_yield(t1 - t0)) contended_until_ = t1 + kContendedFor;
    return;
  }
#if defined(__x86_64__) || defined(__i386__)
  for (int i = 0; i < 16; ++i) __builtin_ia32_pause();
#endif
}

bool DeviceWaiter::arm(std::span<DoorbellScanner* const> scanners, std::span<sim::ShmLink* const> links) {
  sleeping_.store(1, std::memory_order_seq_cst);
  waitv_.clear();
  waitv_.push_back({word_.load(std::memory_order_seq_cst), reinterpret_cast<uint64_t>(&word_),
                    FUTEX_32 | FUTEX_PRIVATE_FLAG, 0});
  pending_ = false;
  armed_links_.clear();
  for (sim::ShmLink* l : links) {
    if (!l) continue;
    if (!l->arm_sleep()) {
      pending_ = true;  // a packet is waiting: no sleep this time
      continue;
    }
    armed_links_.push_back(l);
    waitv_.push_back({1, reinterpret_cast<uint64_t>(l->wake_word()), FUTEX_32, 0});
  }
  // Every scanner's pages, or (too many for one futex_waitv) naps.
  bool pages = have_waitv_;
  armed_scanners_.assign(scanners.size(), false);
  for (size_t i = 0; i < scanners.size(); ++i) {
    if (!scanners[i]) continue;
    armed_scanners_[i] = have_waitv_ && scanners[i]->arm_sleep(waitv_, FUTEX_WAITV_MAX - waitv_.size());
    pages = pages && armed_scanners_[i];
  }
  // Step 2: our stores before the re-check's loads (the clients and the
  // peer do the mirror image).
  std::atomic_thread_fence(std::memory_order_seq_cst);
  return pages;
}

void DeviceWaiter::disarm(bool pages, std::span<DoorbellScanner* const> scanners) {
  for (size_t i = 0; i < scanners.size(); ++i) {
    if (!scanners[i]) continue;
    const bool woken = scanners[i]->disarm_sleep();
    if (pages && woken && armed_scanners_[i]) ++scanners[i]->mutable_counts().wakeups;
  }
  for (sim::ShmLink* l : armed_links_) l->disarm_sleep();
  armed_links_.clear();
  sleeping_.store(0, std::memory_order_relaxed);
}

void DeviceWaiter::wait(bool pages, std::span<DoorbellScanner* const> scanners,
                        std::chrono::steady_clock::time_point until) {
  auto each = [&](auto f) {
    for (DoorbellScanner* sc : scanners)
      if (sc) f(sc->mutable_counts());
  };
  if (!have_waitv_) {
    each([](ScannerCounts& c) { ++c.polled_sleeps; });
    ++naps_;
    const timespec nap{0, std::chrono::nanoseconds(kNap).count()};
    ::nanosleep(&nap, nullptr);
    return;
  }
  const timespec ts = to_timespec(until);
  const long r = ::syscall(SYS_futex_waitv, waitv_.data(), waitv_.size(), 0, &ts, CLOCK_MONOTONIC);
  const int e = errno;
  if (r < 0 && e == ENOSYS) {
    have_waitv_ = false;
    log::get("simhca")->warn("simhca: futex_waitv(2) not available; the device loop naps {} us when idle",
                             kNap.count());
    return;
  }
  if (pages) {
    each([&](ScannerCounts& c) {
      ++c.sleeps;
      if (r < 0 && e == ETIMEDOUT) ++c.timeouts;
    });
  } else {
    each([](ScannerCounts& c) { ++c.polled_sleeps; });
  }
  ++sleeps_;
}

}  // namespace openib::simhca
