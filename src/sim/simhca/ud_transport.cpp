// UD (docs/simhca.md §12.8; IBA 9.8.4, 10.2.5).
#include "sim/simhca/ud_transport.hpp"

#include "sim/simhca/port.hpp"

namespace openib::simhca {

namespace w = sim::wire;
using w::Op;

bool ud_address(const QueueOps& q, uint32_t qpn, const Qp& qp, const SendOp& op, w::Headers& h, Av& av) {
  const Ah* ah = q.ah(op.w.ahn);
  if (!ah) return false;
  av = ah->av;
  // IBA 10.2.5: a WQE Q_Key with bit 31 set means the QP's own Q_Key.
  // §6.10: QP0 and QP1 are QPN 0 and 1 on the wire, whatever their number inside.
  const uint32_t src = qp.cfg.type == kQpSmi ? 0 : qp.cfg.type == kQpGsi ? 1 : qpn;
  h.deth = w::Deth{(op.w.qkey & 0x80000000u) ? qp.attrs.qkey : op.w.qkey, src};
  return true;
}

// IBA 10.2.5: a Q_Key mismatch is dropped. QP1 takes only the well-known
// GSI Q_Key (IBA 13.5.3.1); QP0 checks none (IBA 14.2.1).
bool UdTransport::qkey_ok(const Qp& qp, const w::ParsedPacket& p, uint8_t port) {
  const uint32_t want = qp.cfg.type == kQpGsi ? kGsiQkey : qp.attrs.qkey;
  if (qp.cfg.type == kQpSmi || p.hdr.deth->qkey == want) return true;
  ++stats_.rx_bad_qkey;
  wire_.count_qkey_violation(port);
  return false;
}

// The held receive WQE's buffer takes the GRH area and the payload
// (§12.2); the completion status.
uint8_t UdTransport::place(Qp& qp, const w::ParsedPacket& p) {
  RecvCtx& rw = qp.rt.rwqe;
  uint8_t status = kWcSuccess;
  if (!rw.resolved) {
    for (const Sge& s : rw.w.sges)
      if (s.length && q_.resolve(s.lkey, qp.cfg.pdn, s.addr, s.length, kMrLocalWrite, rw.ext) != KeyFault::kNone)
        status = kWcLocProtErr;
    rw.resolved = true;
  }
  constexpr size_t kGrhArea = w::kGrhBytes;
  if (status == kWcSuccess && kGrhArea + p.payload.size() > rw.w.capacity()) status = kWcLocLenErr;
  if (status == kWcSuccess && p.hdr.grh) {
    w::ByteVec g;
    w::append_grh(g, *p.hdr.grh);
    if (!q_.scatter(rw.ext, 0, g)) status = kWcLocProtErr;
  }
  if (status == kWcSuccess && !q_.scatter(rw.ext, kGrhArea, p.payload)) status = kWcLocProtErr;
  return status;
}

void UdTransport::receive(uint32_t qpn, Qp& qp, const w::ParsedPacket& p, uint8_t port) {
  const Op o = w::opcode_op(p.hdr.bth.opcode);
  if ((o != Op::kSendOnly && o != Op::kSendOnlyImm) || !p.hdr.deth) {
    ++stats_.rx_malformed;
    return;
  }
  if (!qkey_ok(qp, p, port)) return;
  const int r = q_.fetch_recv(qpn, qp);
  if (r <= 0) {
    if (r == 0) ++stats_.rx_no_wqe;  // IBA 9.8.4: no receive WQE, silently dropped
    return;
  }
  Cqe c;
  c.status = place(qp, p);
  if (c.status != kWcSuccess) {
    q_.complete_recv(qpn, qp, c);
    q_.qp_to_error(qpn, qp, kErr);
    return;
  }
  c.opcode = kWcRecv;
  c.byte_len = static_cast<uint32_t>(w::kGrhBytes + p.payload.size());
  c.src_qp = p.hdr.deth->src_qp;
  c.slid = p.hdr.lrh.slid;
  c.sl = p.hdr.lrh.sl;
  c.dlid_path_bits = static_cast<uint8_t>(p.hdr.lrh.dlid & ((1u << wire_.port_lmc(port)) - 1));
  if (p.hdr.grh) c.flags |= kCqeFlagGrh;
  if (o == Op::kSendOnlyImm && p.hdr.imm_dt) {
    c.imm = p.hdr.imm_dt->imm;
    c.flags |= kCqeFlagImm;
  }
  if (p.hdr.bth.se) c.flags |= kCqeFlagSolicited;
  q_.complete_recv(qpn, qp, c);
}

}  // namespace openib::simhca
