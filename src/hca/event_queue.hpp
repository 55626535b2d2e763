// An event queue, driver side (docs/simhca.md §9): the ring in a DmaBuffer,
// the consumer counter and ownership phase (§9.2), and the EQ doorbell that
// reports progress and re-arms the interrupt (§9.3).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "common/result.hpp"
#include "dma/dma_pool.hpp"
#include "hca/device.hpp"
#include "vfio/device.hpp"

namespace openib::hca {

struct EventEntry {
  uint8_t type = 0, subtype = 0;
  std::array<std::byte, 24> data{};  // §9.4 per-type layout
};
// §9.4's event types to the device-neutral ones (IBA 11.6.3); nothing for
// a command completion (the command interface's) or an unknown type.
std::optional<Event> decode_event(const EventEntry& e);

class EventQueue {
 public:
  static Result<std::unique_ptr<EventQueue>> create(dma::DmaPool& pool, uint8_t log_size);

  uint64_t ring_iova() const { return ring_.iova(); }
  uint8_t log_size() const { return log_size_; }
  // Set once CREATE_EQ has answered.
  void bind(uint32_t eqn, uint32_t uar) {
    eqn_ = eqn;
    uar_ = uar;
  }
  uint32_t eqn() const { return eqn_; }
  uint32_t consumer() const { return consumer_; }

  // Consumes every entry the device has written (§9.2 phase rule).
  std::vector<EventEntry> poll();
  // §9.3: EQ_DOORBELL with the consumer counter and ARM.
  Result<void> arm(vfio::Device& dev);

 private:
  dma::DmaBuffer ring_;
  uint8_t log_size_ = 0;
  uint32_t eqn_ = 0, uar_ = 0, consumer_ = 0;
};

}  // namespace openib::hca
