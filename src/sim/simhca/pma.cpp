// simhca's performance management agent (docs/simhca.md §15; IBA 16.1):
// GMPs of class PerfMgmt arriving for QP1 are answered by the device from
// its port counters; every other GMP goes to the driver's QP1 receive queue.
#include "mad/mad.hpp"
#include "sim/simhca/hca.hpp"
#include "sim/wire/packet.hpp"

namespace openib::simhca {

namespace w = sim::wire;

// §14.1 routing of what arrives for QP1 (IBA 13.5.3: GMPs are LID routed,
// partitioned, and carry the GSI Q_Key).
void Hca::receive_gmp(uint8_t port, const w::ParsedPacket& p, bool local) {
  Port& pt = port_at(port);
  if (!is_ethernet(port) && !for_own_port(port, p.hdr.lrh.dlid)) {
    ++dstats_.rx_bad_dlid;
    ++pt.pma.rcv_switch_relay_errors;
    return;
  }
  if (!pkey_matches(p.hdr.bth.pkey, pt.info.pkey0)) {  // IBA 10.9.3
    ++dstats_.rx_bad_pkey;
    ++pt.info.pkey_violations;
    ++pt.pma.rcv_constraint_errors;
    return;
  }
  const w::Op o = w::opcode_op(p.hdr.bth.opcode);
  if (!p.hdr.deth || (o != w::Op::kSendOnly && o != w::Op::kSendOnlyImm) ||
      w::opcode_transport(p.hdr.bth.opcode) != w::Transport::kUd) {
    ++dstats_.rx_malformed;
    return;
  }
  if (p.hdr.deth->qkey != kGsiQkey) {  // IBA 13.5.3.1: QP1 takes the GSI Q_Key only
    ++dstats_.rx_bad_qkey;
    ++pt.info.qkey_violations;
    return;
  }
  if (p.payload.size() == mad::kMadBytes) {
    const auto mad = p.payload;
    const uint8_t meth = mad::mad_method(mad);
    // IBA 16.1.1: the PMA answers Get and Set of class PerfMgmt.
    // (Not on an Ethernet port, §16.4: its GMPs are all the driver's.)
    if (mad::mad_class(mad) == mad::mgmt_class::kPerfMgmt && (meth == mad::method::kGet || meth == mad::method::kSet) &&
        !is_ethernet(port)) {
      const sim::sma::PmaAction a = pma_->handle_gmp(mad, port);
      if (a.kind != sim::sma::PmaActionKind::kReply) {
        ++dstats_.mads_dropped;
        return;
      }
      ++dstats_.gmps_answered;
      reply_gmp(port, p, a.mad, local);
      return;
    }
  }
  if (deliver_to_qp(1, port, p)) ++dstats_.gmps_to_driver;
  else ++dstats_.mads_dropped;
}

}  // namespace openib::simhca
