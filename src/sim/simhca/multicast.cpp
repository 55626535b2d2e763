// simhca's UD multicast (docs/simhca.md §6.11, §12.7, §12.8; IBA 10.5.2
// multicast, 11.3.1 Attach/Detach QP to multicast group): the two
// commands over the group table (mcast_groups.hpp), and the receive side
// that hands one packet to every attached QP of its port. The send side
// is send_packet's (port_agent.cpp): the packet goes out on the wire, and a
// copy comes back into the port for its other members.
#include "sim/simhca/hca.hpp"
#include "sim/wire/packet.hpp"

namespace openib::simhca {

namespace w = sim::wire;

namespace {
bool receiving(uint8_t st) { return st == kRtr || st == kRts || st == kSqd || st == kSqe; }  // IBA 10.3.1
}  // namespace

// §6.11: checks in order, then the change; a failure changes nothing.
Outcome Hca::cmd_mcg(ByteView in, bool attach) {
  auto m = decode_mcg(in);
  if (!m) return {static_cast<uint8_t>(m.error().code), 0};
  if (m->reserved) return {kBadParam, 1};
  // IBA 4.1.1: a multicast GID and LID (§16.4 on Ethernet: also an
  // IPv4-mapped group, and no LID to check).
  const bool eth = is_ethernet(1);  // every port has the device's link layer
  if (m->mgid[0] != 0xff && !(eth && is_roce_multicast_gid(m->mgid))) return {kBadParam, 2};
  if (!eth && !is_multicast_lid(m->mlid)) return {kBadParam, 3};  // 0xC000..0xFFFE
  Qp* qp = tables_.qps.get(m->qpn);
  if (!qp) return {kBadResource, 4};
  if (qp->cfg.type != kQpUd) return {kBadParam, 5};  // IBA 11.3.1.1: UD QPs only
  if (!attach) {
    if (!tables_.mcgs.detach(m->mgid, m->qpn)) return {kBadResource, 6};
    --qp->mcast_groups;
    return {};
  }
  switch (tables_.mcgs.attach(m->mgid, m->mlid, m->qpn)) {
    case McastGroups::Attach::kAttached: ++qp->mcast_groups; return {};
    case McastGroups::Attach::kAlready: return {};
    case McastGroups::Attach::kGroupFull: return {kNoResources, 7};
    case McastGroups::Attach::kTableFull: return {kNoResources, 8};
  }
  return {kInternalError, 0};
}

bool Hca::other_local_members(uint8_t port, const Mgid& mgid, uint32_t sender) const {
  const McastGroup* g = tables_.mcgs.find(mgid);
  if (!g) return false;
  for (uint32_t qpn : g->qpns) {
    const Qp* qp = tables_.qps.get(qpn);
    if (qpn != sender && qp && qp_port(*qp) == port) return true;
  }
  return false;
}

// §12.8: a packet to a multicast LID that came in on `port` (from the
// wire, or `local`: a copy of one this port sent, §12.7). The port is
// Active (receive_on_port checked).
void Hca::receive_multicast(uint8_t port, const w::ParsedPacket& p, bool local) {
  Port& pt = port_at(port);
  if (!p.hdr.grh) {  // IBA 8.3, 10.5.2: a multicast packet carries a GRH; its DGID names the group
    ++dstats_.rx_mcast_no_grh;
    return;
  }
  if (!pkey_matches(p.hdr.bth.pkey, pt.info.pkey0)) {  // IBA 10.9.3: the port's one P_Key
    ++dstats_.rx_bad_pkey;
    ++pt.info.pkey_violations;
    ++pt.pma.rcv_constraint_errors;
    return;
  }
  const w::Op o = w::opcode_op(p.hdr.bth.opcode);
  if (w::opcode_transport(p.hdr.bth.opcode) != w::Transport::kUd ||
      (o != w::Op::kSendOnly && o != w::Op::kSendOnlyImm) || !p.hdr.deth) {
    ++dstats_.rx_malformed;  // IBA 10.5.2: multicast is UD SENDs only
    return;
  }
  const McastGroup* g = tables_.mcgs.find(p.hdr.grh->dgid);
  // Loopback suppression: the sending QP does not get its own packet back
  // (as IBV_QP_CREATE_BLOCK_SELF_MCAST_LB asks of an HCA; §12.7).
  const uint32_t sender = local ? p.hdr.deth->src_qp : kNoQp;
  size_t members = 0;
  for (size_t i = 0; g && i < g->qpns.size(); ++i) {
    const uint32_t qpn = g->qpns[i];
    Qp* qp = tables_.qps.get(qpn);
    if (!qp || qp_port(*qp) != port) continue;
    ++members;
    if (qpn == sender) continue;
    if (!receiving(qp->attrs.state)) {
      ++dstats_.rx_bad_state;
      continue;
    }
    // Each member as a unicast UD receive: its Q_Key, its own receive WQE.
    const uint64_t before = queues_.stats().messages_received;
    ud_.receive(qpn, *qp, p, port);
    if (queues_.stats().messages_received != before) ++dstats_.mcast_delivered;
  }
  if (members == 0) ++dstats_.rx_mcast_no_group;
}

}  // namespace openib::simhca
