// The doorbell scanner and the device loop's idle wait (docs/simhca.md
// §12.5, §13).
//
// DoorbellScanner watches the UAR pages in use for doorbells stored through
// a client's mmap of the page, which the device cannot trap. It has no
// thread: the device loop calls scan() on every pass, so a doorbell is
// taken by the same thread that runs the device, with no hand-off.
//
// DeviceWaiter is that loop's idle policy. Busy, the loop polls every
// source (UAR pages, shared-memory cables, its inbox and socket flags),
// yielding the CPU between empty passes; idle for the spin window, it
// publishes SCANNER_SLEEPING in every watched page and RX_SLEEPING in every
// shared-memory cable, re-checks every source after a full fence and sleeps
// in futex_waitv(2) on all those words and one private word of its own
// (Dekker-style: either the re-check sees the client's doorbell or the
// peer's packet, or they see the flag and wake the loop).
#pragma once

#include <linux/futex.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <ctime>
#include <mutex>
#include <span>
#include <vector>

#include "common/result.hpp"
#include "sim/simhca/registers.hpp"

namespace openib::sim {
class ShmLink;
}

namespace openib::simhca {

// A 64-bit word of a UAR page (the device's mapping `page` of it, offset
// `off`), read and written atomically: the device's threads and the
// client's mapping share it.
inline std::atomic_ref<uint64_t> uar_word64(std::byte* page, uint64_t off) {
  return std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(page + off));
}

struct ScannerCounts {
  uint64_t sleeps = 0;    // futex_waitv entered with SCANNER_SLEEPING published
  uint64_t wakeups = 0;   // ... and left because a client woke a page's word
  uint64_t timeouts = 0;  // ... and left by its timeout
  uint64_t notices = 0;   // changed pages handed to the device
  uint64_t polled_sleeps = 0;  // naps without SCANNER_SLEEPING (no futex_waitv, or too many pages)
};

class DoorbellScanner {
 public:
  DoorbellScanner();

  // A page joins the watched set (§12.5: an allocated UAR that has an EQ,
  // CQ or QP), read through `mem`, the device's mapping of that page alone
  // (§4: each UAR page is its own memfd); or leaves it (`mem` null). The
  // mapping must stay until the page leaves.
  void watch(uint32_t page, std::byte* mem);
  void unwatch_all();
  size_t watched() const { return npages_; }
  // Changes each time the watched set does (a sleeper must re-arm).
  uint64_t generation() const { return generation_; }

  // One pass over the watched pages: f(page) for each page whose doorbell
  // words changed since the last pass. Returns how many changed.
  template <typename F>
  size_t scan(F&& f) {
    size_t n = 0;
    for (uint32_t w = 0; w < kWords; ++w) {
      // A page that just joined is handed over once unseen: a doorbell
      // stored before we looked must not be taken for the page's old contents.
      const uint64_t joined = watched_[w] & ~seen_watched_[w];
      seen_watched_[w] = watched_[w];
      for (uint64_t bits = watched_[w]; bits; bits &= bits - 1) {
        const uint32_t bit = static_cast<uint32_t>(__builtin_ctzll(bits));
        const uint32_t page = w * 64 + bit;
        if (changed(page) || ((joined >> bit) & 1)) {
          ++counts_.notices;
          ++n;
          f(page);
        }
      }
    }
    return n;
  }

  // §12.5.2 steps 1-2: publishes SCANNER_SLEEPING in every watched page if
  // they fit in `room` futex_waitv entries (appending them to `w`); false,
  // publishing nothing, if not. disarm_sleep() undoes it (step 5) and says
  // whether a client cleared a word (woke us).
  bool arm_sleep(std::vector<futex_waitv>& w, size_t room);
  bool disarm_sleep();

  ScannerCounts counts() const { return counts_; }
  ScannerCounts& mutable_counts() { return counts_; }

 private:
  static constexpr uint32_t kWords = kNumUars / 64;

  // True if a doorbell word of `page` differs from the last seen.
  bool changed(uint32_t page) {
    auto& last = last_[page];
    bool c = false;
    for (size_t i = 0; i < kUarDoorbellOffsets.size(); ++i) {
      const uint64_t v = uar_word64(pages_[page], kUarDoorbellOffsets[i]).load(std::memory_order_acquire);
      c |= v != last[i];
      last[i] = v;
    }
    return c;
  }
  uint32_t* sleeping_ptr(std::byte* mem) const;

  std::vector<std::byte*> pages_;      // per page: the mapping watched, or null
  std::array<uint64_t, kWords> watched_{};
  std::array<uint64_t, kWords> seen_watched_{};
  size_t npages_ = 0;
  uint64_t generation_ = 0;
  std::vector<UarWords> last_;         // per page: the doorbell words last seen
  // The pages whose SCANNER_SLEEPING we set, with the mapping we set it
  // in: a page that left meanwhile (its UAR freed, the mapping gone) is
  // not touched again.
  std::vector<std::pair<uint32_t, std::byte*>> sleeping_on_;
  ScannerCounts counts_;
};

// The device loop's spin-then-sleep policy (§13 "The device loop").
class DeviceWaiter {
 public:
  static constexpr auto kDefaultSpin = std::chrono::microseconds(200);
  static constexpr auto kMaxSleep = std::chrono::milliseconds(100);
  // With too many pages for futex_waitv (or none of it), the loop naps
  // this long between passes instead.
  static constexpr auto kNap = std::chrono::microseconds(100);
  // A sched_yield that comes back later than this (--contended-us) means
  // other tasks want the CPU (we were descheduled for their slice):
  // spinning then only delays whoever we wait for, so the loop goes to
  // sleep at once and leaves the wake-up to the futex (§13 "The device
  // loop"). 0: never.
  static constexpr auto kDefaultContended = std::chrono::microseconds(200);
  // ... and then sleeps at once when idle for this long before it tries
  // spinning again.
  static constexpr auto kContendedFor = std::chrono::milliseconds(20);

  // `spin`: how long the loop keeps polling after its last work; `yield`:
  // sched_yield between empty passes (else a CPU pause hint only);
  // `contended`: a yield longer than this means contended CPUs (0: never).
  explicit DeviceWaiter(std::chrono::microseconds spin = kDefaultSpin, bool yield = true,
                        std::chrono::microseconds contended = kDefaultContended)
      : spin_(spin), yield_(yield), contended_(contended) {}

  // Any thread: something for the loop (a packet in its inbox, a message
  // on its socket) was published; wakes the loop if it sleeps. The
  // publication must come before this call (it fences).
  void notify();

  // Loop thread. After a pass: `work` says whether it did anything. While
  // busy or within the spin window it yields the CPU (sched_yield) and
  // returns; once idle past the window it sleeps: publishes the flags of
  // every scanner (one per device) and of `links`, calls `recheck()`
  // (true: work arrived, do not sleep) and waits on every word until
  // woken, a flag changed, or `deadline` (CLOCK_MONOTONIC; at most
  // kMaxSleep away). The `devices` locks (held by the loop) are released
  // while it sleeps, so another thread may run a device meanwhile (§13:
  // the socket watchers).
  template <typename Recheck>
  void after_pass(bool work, std::span<DoorbellScanner* const> scanners, std::span<sim::ShmLink* const> links,
                  std::chrono::steady_clock::time_point deadline,
                  std::span<std::unique_lock<std::mutex>* const> devices, Recheck&& recheck) {
    const auto now = std::chrono::steady_clock::now();
    if (work) {
      last_work_ = now;
      return;
    }
    if (now - last_work_ < spin_ && now >= contended_until_) {
      relax();
      return;
    }
    // §12.5.2 steps 1-2 for every word at once, then step 3 (recheck).
    const bool pages = arm(scanners, links);
    if (!pending_ && !recheck()) {
      for (auto* d : devices) d->unlock();
      wait(pages, scanners, pages ? deadline : std::min(deadline, now + kNap));
      for (auto* d : devices) d->lock();
    }
    disarm(pages, scanners);
    last_work_ = std::chrono::steady_clock::now();
  }

  // Loop thread: a recent yield came back late (other tasks want the CPUs).
  bool contended() const { return std::chrono::steady_clock::now() < contended_until_; }
  // True if a sched_yield that took `d` says the CPUs are contended.
  bool late_yield(std::chrono::steady_clock::duration d) const {
    return contended_.count() > 0 && d > contended_;
  }

  // True while the loop sleeps (or is about to): any thread.
  bool asleep() const { return sleeping_.load(std::memory_order_acquire) != 0; }
  uint64_t sleeps() const { return sleeps_; }
  uint64_t naps() const { return naps_; }

 private:
  void relax();
  // Publishes every flag; true if every scanner's pages' SCANNER_SLEEPING
  // are among them.
  bool arm(std::span<DoorbellScanner* const> scanners, std::span<sim::ShmLink* const> links);
  void disarm(bool pages, std::span<DoorbellScanner* const> scanners);
  void wait(bool pages, std::span<DoorbellScanner* const> scanners, std::chrono::steady_clock::time_point until);

  std::chrono::microseconds spin_;
  bool yield_;
  std::chrono::microseconds contended_;
  // A long yield was seen: until then the loop sleeps as soon as it is
  // idle instead of spinning (each idle spell would otherwise give a whole
  // time slice to the other tasks first).
  std::chrono::steady_clock::time_point contended_until_{};
  std::chrono::steady_clock::time_point last_work_{};
  std::atomic<uint32_t> word_{0};      // bumped by notify(); the loop's private futex
  std::atomic<uint32_t> sleeping_{0};  // 1 while the loop is (about to be) asleep
  std::vector<futex_waitv> waitv_;
  std::vector<sim::ShmLink*> armed_links_;
  std::vector<bool> armed_scanners_;
  bool pending_ = false;  // a cable had a packet when we armed it
  bool have_waitv_ = true;
  uint64_t sleeps_ = 0, naps_ = 0;
};

}  // namespace openib::simhca
