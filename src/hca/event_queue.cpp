// Driver side of docs/simhca.md §9 (event queues).
#include "hca/event_queue.hpp"

#include <atomic>
#include <cstring>

#include "hca/prm.hpp"
#include "prm/uar.hpp"

namespace openib::hca {

using namespace prm;

// prm has an Event of its own.
using Ev = ::openib::hca::Event;

std::optional<Ev> decode_event(const EventEntry& e) {
  using K = Ev::Kind;
  Ev ev;
  ev.number = get32(e.data, 0);  // §9.4: the CQ, QP or SRQ number first
  auto affiliated = [&](K k) { return ev.kind = k, std::optional<Ev>(ev); };
  auto port_event = [&](K k) {
    Ev p;
    p.kind = k;
    p.port = get8(e.data, 0);
    return std::optional<Ev>(p);
  };
  switch (e.type) {
    case kEvCqCompletion: return affiliated(K::kCqCompletion);
    case kEvCqError: return affiliated(K::kCqError);
    case kEvQpFatal: return affiliated(K::kQpFatal);
    case kEvQpReqErr: return affiliated(K::kQpReqErr);
    case kEvQpAccessErr: return affiliated(K::kQpAccessErr);
    case kEvQpLastWqeReached: return affiliated(K::kQpLastWqeReached);
    case kEvQpCommEst: return affiliated(K::kQpCommEst);
    case kEvSqDrained: return affiliated(K::kSqDrained);
    case kEvSrqLimit: return affiliated(K::kSrqLimit);
    case kEvSrqCatas: return affiliated(K::kSrqError);
    case kEvPortStateChange: {
      auto p = port_event(K::kPortState);
      p->old_state = get8(e.data, 1);
      p->new_state = get8(e.data, 2);
      return p;
    }
    case kEvLidChange: {
      auto p = port_event(K::kLidChange);
      p->lid = get16(e.data, 2);
      return p;
    }
    case kEvSmChange: return port_event(K::kSmChange);
    case kEvClientReregister: return port_event(K::kClientReregister);
    case kEvPkeyChange: return port_event(K::kPkeyChange);
    case kEvGidChange: return port_event(K::kGidChange);
    case kEvDeviceFatal: {
      Ev f;
      f.kind = K::kDeviceFatal;
      f.syndrome = get32(e.data, 0);
      return f;
    }
    default: return std::nullopt;
  }
}

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
