#include "ipoib_tap/ud_port.hpp"

#include <cstring>

namespace openib::ipoib {
namespace {

// A receive slot: the 40-byte GRH area, then the packet (IBA 11.4.1.2);
// a send slot: the packet only.
constexpr size_t kGrhBytes = 40;

}  // namespace

// IBA 10.3.1: a UD QP's INIT takes the port, P_Key index and Q_Key; RTS
// its SQ PSN (0).
hca::SlotQpConfig UdPort::slot_config(const UdPortConfig& c) {
  namespace qa = hca::qp_attr;
  return {.type = hca::QpType::kUd, .port = c.port,
          .attr = {.port = c.port, .pkey_index = c.pkey_index, .qkey = c.qkey},
          .init_mask = qa::kPkeyIndex | qa::kPort | qa::kQkey, .rts_mask = qa::kSqPsn,
          .recv_bytes = uint32_t(kGrhBytes + c.max_payload), .min_recv_bytes = kGrhBytes,
          .log_slots = c.log_slots, .log_send_slots = c.log_send_slots, .log_name = "ipoib", .what = "IPoIB QP"};
}

void UdPort::set_receiver(Receiver r) {
  if (!r) return qp_->set_receiver(nullptr);
  qp_->set_receiver([r = std::move(r)](const hca::WorkCompletion& wc, std::span<const uint8_t> b) {
    UdReceived u;
    u.src_qpn = wc.src_qp & 0xFFFFFF;
    u.slid = wc.slid;
    u.grh = wc.grh;
    if (wc.grh) {  // IBA 8.3.1: SGID at bytes 8..23, DGID at 24..39
      std::memcpy(u.sgid.data(), b.data() + 8, 16);
      std::memcpy(u.dgid.data(), b.data() + 24, 16);
    }
    u.payload = b.subspan(kGrhBytes);  // SlotQp: at least min_recv_bytes
    r(u);
  });
}

Result<void> UdPort::send(uint32_t ahn, uint32_t qpn, uint32_t qkey, std::span<const uint8_t> packet) {
  if (packet.size() > cfg_.max_payload) return err(EMSGSIZE, "IPoIB packet of {} bytes > {}", packet.size(), cfg_.max_payload);
  hca::SendWr wr;
  wr.ahn = ahn;
  wr.remote_qpn = qpn;
  wr.remote_qkey = qkey;
  return qp_->send(packet, std::move(wr));
}

}  // namespace openib::ipoib
