// The doorbell scanner (docs/simhca.md §12.5): a thread that watches the
// UAR pages in use for doorbells stored through a client's mmap of the
// page, which the device cannot trap, and hands the pages that changed to
// the device's loop thread. It only notices; the device's loop (the one
// serving vfio-user) decides what a change means, so device state stays
// single-threaded.
//
// Busy, it polls; idle for kSpinWindow, it publishes SCANNER_SLEEPING in
// every watched page, re-checks the pages after a full fence and sleeps in
// futex_waitv(2) on those words (Dekker-style: either the re-check sees the
// client's doorbell or the client sees SCANNER_SLEEPING and wakes it).
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <unistd.h>
#include <vector>

#include "common/fd.hpp"
#include "common/result.hpp"
#include "sim/simhca/registers.hpp"

namespace openib::simhca {

// A 64-bit word of BAR2 (UAR `page`, offset `off`), read and written
// atomically: the device's threads and the clients' mappings share it.
inline std::atomic_ref<uint64_t> uar_word64(std::byte* bar2, uint64_t page, uint64_t off) {
  return std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(bar2 + page * kUarPageSize + off));
}

struct ScannerCounts {
  uint64_t sleeps = 0;    // futex_waitv entered with SCANNER_SLEEPING published
  uint64_t wakeups = 0;   // ... and left because a client woke a page's word
  uint64_t timeouts = 0;  // ... and left by its 100 ms timeout
  uint64_t notices = 0;   // pages handed to the device loop
  uint64_t polled_sleeps = 0;  // 100 µs naps instead (no futex_waitv, or too many pages)
};

class DoorbellScanner {
 public:
  static constexpr auto kSpinWindow = std::chrono::microseconds(100);
  static constexpr auto kPollPeriod = std::chrono::microseconds(100);
  static constexpr auto kSleepTimeout = std::chrono::milliseconds(100);
  // FUTEX_WAITV_MAX is 128 words; one is the scanner's own wake word.
  static constexpr size_t kMaxSleepPages = 127;

  // `bar2`: the device's mapping of the BAR2 memfd (kNumUars pages), which
  // outlives the scanner.
  explicit DoorbellScanner(std::byte* bar2);
  ~DoorbellScanner();
  DoorbellScanner(const DoorbellScanner&) = delete;
  DoorbellScanner& operator=(const DoorbellScanner&) = delete;

  Result<void> start();
  void stop();

  // Device thread: a page joins or leaves the watched set (§12.5: an
  // allocated UAR that has an EQ, CQ or QP).
  void watch(uint32_t page, bool on);
  void unwatch_all();

  // Device thread: readable when pages were noticed; drain() calls
  // f(page) once for each page noticed since the last drain.
  int notify_fd() const { return notify_.get(); }
  template <typename F>
  void drain(F&& f) {
    uint64_t n = 0;
    (void)!::read(notify_.get(), &n, sizeof n);
    for (uint32_t w = 0; w < kWords; ++w)
      for (uint64_t bits = pending_[w].exchange(0, std::memory_order_acq_rel); bits; bits &= bits - 1)
        f(w * 64 + static_cast<uint32_t>(__builtin_ctzll(bits)));
  }

  ScannerCounts counts() const;

 private:
  static constexpr uint32_t kWords = kNumUars / 64;

  void run();
  // One pass over the watched pages; true if a page was noticed.
  bool scan();
  void notice(uint32_t page);
  void sleep();
  bool sleep_on_futexes(uint32_t gen);
  void set_sleeping(uint32_t value);
  uint32_t* sleeping_ptr(uint32_t page) const;
  std::atomic_ref<uint32_t> sleeping_word(uint32_t page) const;

  std::byte* bar2_;
  UniqueFd notify_;  // eventfd to the device thread
  std::thread thread_;
  std::atomic<bool> stop_{false};
  // Bumped (and futex-woken) by the device thread when the watched set
  // changes or the scanner must stop; the scanner's own futex word.
  std::atomic<uint32_t> gen_{0};
  std::array<std::atomic<uint64_t>, kWords> watched_{};
  std::array<std::atomic<uint64_t>, kWords> pending_{};

  // Scanner thread only.
  std::array<uint64_t, kWords> seen_watched_{};
  std::vector<uint32_t> pages_;        // watched, this pass
  std::vector<UarWords> last_;  // per page: the doorbell words last seen
  std::vector<uint32_t> sleeping_on_;  // pages whose SCANNER_SLEEPING we set
  bool have_waitv_ = true;

  std::atomic<uint64_t> sleeps_{0}, wakeups_{0}, timeouts_{0}, notices_{0}, polled_{0};
};

}  // namespace openib::simhca
