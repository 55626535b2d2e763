// simhca's device loop (docs/simhca.md §13 "Several devices"): the helper
// thread.
#pragma once

#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "sim/simhca/device.hpp"

namespace openib::simhca::server {

// Shared loop (several devices): a second thread that runs devices too
// while a bulk flow keeps the loop behind, so that a flow between two
// devices of this process has a CPU for each end; idle, it sleeps, and a
// ping-pong between the devices stays on the loop alone, without
// hand-offs (§13 "Several devices"). Each pass holds the device's lock.
class Helper {
 public:
  static constexpr uint64_t kBacklog = 32;  // packets waiting in a ring: wake the helper
  static constexpr auto kLinger = std::chrono::microseconds(200);  // idle this long: sleep again

  Helper(std::vector<std::unique_ptr<Device>>& devs, openib::simhca::DeviceWaiter& loop)
      : devs_(devs), loop_(loop), split_(devs.size() / 2) {}
  // While the helper is awake it runs devices [split, n) and the loop the
  // others, so the two threads do not contend for the devices' locks
  // (each pass still takes its device's lock: the socket watchers and the
  // hand-overs at wake and sleep).
  bool owns(size_t device) const { return device >= split_ && active_.load(std::memory_order_acquire); }
  ~Helper() { stop(); }
  void start() {
    thread_ = std::thread([this] { run(); });
  }
  void wake() {
    if (!asleep_.load(std::memory_order_acquire)) return;
    word_.fetch_add(1, std::memory_order_seq_cst);
    ::syscall(SYS_futex, &word_, FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0);
  }
  void stop() {
    if (!thread_.joinable()) return;
    stop_.store(true);
    word_.fetch_add(1, std::memory_order_seq_cst);
    ::syscall(SYS_futex, &word_, FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0);
    thread_.join();
  }
  bool failed() const { return failed_.load(std::memory_order_relaxed); }

 private:
  void run() {
    while (!stop_.load()) {
      // Sleep until the loop sees a backlog (Dekker: asleep_ then word_).
      const uint32_t w = word_.load(std::memory_order_seq_cst);
      asleep_.store(true, std::memory_order_seq_cst);
      if (!stop_.load()) ::syscall(SYS_futex, &word_, FUTEX_WAIT_PRIVATE, w, nullptr, nullptr, 0);
      asleep_.store(false, std::memory_order_seq_cst);
      active_.store(true, std::memory_order_release);
      auto last = std::chrono::steady_clock::now();
      while (!stop_.load() && std::chrono::steady_clock::now() - last < kLinger) {
        bool work = false;
        for (size_t i = split_; i < devs_.size(); ++i) {
          std::lock_guard lk(devs_[i]->mutex());
          const int r = devs_[i]->pass();
          if (r < 0) {
            failed_.store(true);
            active_.store(false);
            return;
          }
          work = work || r > 0;
        }
        if (work) {
          last = std::chrono::steady_clock::now();
          continue;
        }
        // Other tasks want this CPU (the yield came back late): sleep.
        const auto t0 = std::chrono::steady_clock::now();
        ::sched_yield();
        if (loop_.late_yield(std::chrono::steady_clock::now() - t0)) break;
      }
      active_.store(false, std::memory_order_release);
      loop_.notify();  // the loop takes the devices and their timers over again
    }
  }

  std::vector<std::unique_ptr<Device>>& devs_;
  openib::simhca::DeviceWaiter& loop_;
  size_t split_;
  std::atomic<bool> active_{false};
  std::thread thread_;
  std::atomic<uint32_t> word_{0};
  std::atomic<bool> asleep_{false}, stop_{false}, failed_{false};
};


}  // namespace openib::simhca::server
