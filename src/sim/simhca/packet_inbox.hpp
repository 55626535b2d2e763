// simhca's device loop (docs/simhca.md §13): the inbox that hands packets
// from a UDP link's receive thread to the device loop (§12.7).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <span>
#include <utility>
#include <vector>

#include "sim/simhca/doorbell_scanner.hpp"

namespace openib::simhca::server {

// Packets from a UDP link's receive thread to the device loop (§12.7).
class PacketInbox {
 public:
  explicit PacketInbox(openib::simhca::DeviceWaiter& w) : waiter_(w) {}
  void push(std::span<const std::byte> p) {
    {
      std::lock_guard lk(mu_);
      if (q_.size() >= kMax) {  // the device is behind: dropped, like a full buffer
        ++dropped_;
        return;
      }
      q_.emplace_back(p.begin(), p.end());
      nonempty_.store(true, std::memory_order_release);
    }
    waiter_.notify();
  }
  bool nonempty() const { return nonempty_.load(std::memory_order_acquire); }
  std::deque<std::vector<std::byte>> take() {
    std::lock_guard lk(mu_);
    nonempty_.store(false, std::memory_order_relaxed);
    return std::exchange(q_, {});
  }
  uint64_t dropped() const {
    std::lock_guard lk(mu_);
    return dropped_;
  }

 private:
  static constexpr size_t kMax = 65536;
  openib::simhca::DeviceWaiter& waiter_;
  mutable std::mutex mu_;
  std::deque<std::vector<std::byte>> q_;
  std::atomic<bool> nonempty_{false};
  uint64_t dropped_ = 0;
};

}  // namespace openib::simhca::server
