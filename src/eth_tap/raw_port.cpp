#include "eth_tap/raw_port.hpp"

namespace openib::eth {

// §16.5: a RAW QP takes its port at creation and goes RESET -> INIT ->
// RTR -> RTS with STATE alone; a receive is the whole frame from the
// slot's first byte (no GRH area), a send slot holds one whole frame.
hca::SlotQpConfig RawPort::slot_config(const RawPortConfig& c) {
  return {.type = hca::QpType::kRaw, .port = c.port, .create_port = c.port,
          .recv_bytes = uint32_t(kMaxFrameBytes), .min_recv_bytes = uint32_t(kMinFrameBytes),
          .log_slots = c.log_slots, .log_send_slots = c.log_send_slots, .log_name = "netdev", .what = "raw Ethernet QP"};
}

void RawPort::set_receiver(Receiver r) {
  if (!r) return qp_->set_receiver(nullptr);
  qp_->set_receiver([r = std::move(r)](const hca::WorkCompletion&, std::span<const uint8_t> frame) { r(frame); });
}

// §16.5: the gathered bytes are the whole frame (no address segment).
Result<void> RawPort::send(std::span<const uint8_t> frame) {
  if (frame.size() < kMinFrameBytes || frame.size() > kMaxFrameBytes)
    return err(EMSGSIZE, "frame of {} bytes outside {}..{}", frame.size(), kMinFrameBytes, kMaxFrameBytes);
  return qp_->send(frame);
}

}  // namespace openib::eth
