// Driver side of docs/simhca.md §9 (event queues).
#include "hca/event_queue.hpp"

#include <atomic>
#include <cstring>

#include "hca/prm.hpp"
#include "prm/uar.hpp"

namespace openib::hca {

using namespace prm;

Result<std::unique_ptr<EventQueue>> EventQueue::create(dma::DmaPool& pool, uint8_t log_size) {
  auto eq = std::make_unique<EventQueue>();
  eq->log_size_ = log_size;
  // §6.4: 32-byte entries, 64-byte aligned ring (the device zeroes it).
  OPENIB_TRY_ASSIGN(eq->ring_, pool.alloc((size_t{1} << log_size) * kEqeSize, 64));
  return eq;
}

std::vector<EventEntry> EventQueue::poll() {
  std::vector<EventEntry> out;
  const uint32_t size = 1u << log_size_;
  auto* base = static_cast<std::byte*>(ring_.data());
  for (uint32_t n = 0; n < size; ++n) {
    std::byte* e = base + size_t{consumer_ & (size - 1)} * kEqeSize;
    // §9.2: valid when owner == ((c >> log_size) & 1) ^ 1.
    const uint8_t owner =
        std::atomic_ref<uint8_t>(*reinterpret_cast<uint8_t*>(e + 0x1f)).load(std::memory_order_acquire);
    if ((owner & 1) != (((consumer_ >> log_size_) & 1) ^ 1)) break;
    std::span<const std::byte> s(e, kEqeSize);
    EventEntry ev;
    ev.type = get8(s, 0x00);
    ev.subtype = get8(s, 0x01);
    std::memcpy(ev.data.data(), e + 0x04, ev.data.size());
    out.push_back(ev);
    ++consumer_;
  }
  return out;
}

Result<void> EventQueue::arm(vfio::Device& dev) {
  // §4/§9.3 EQ_DOORBELL, the value by src/prm/uar.hpp; posted, as every
  // doorbell (ibd's loop does not wait for the device to take it).
  return dev.write64_posted(VFIO_PCI_BAR2_REGION_INDEX, uar_ * kUarPageSize + kUarEqDoorbell,
                     dp::eq_doorbell(eqn_, true, consumer_));
}

}  // namespace openib::hca
