// simhca's port agent (docs/simhca.md §12.7, §14.1): power-on state and cables,
// the port-state events (§9.4), the receive side's first steps for every
// packet (which port, CRCs, the QP0/QP1 split of §14.1, the data checks of
// §12.8), loopback to the device's own port, and the PMA's traffic counters
// (§15), and the packets out for the transport units (WireOps). The SMA is
// in sma.cpp, the PMA in pma.cpp.
#include "mad/mad.hpp"
#include "sim/simhca/hca.hpp"
#include "sim/wire/packet.hpp"

namespace openib::simhca {

namespace w = sim::wire;

namespace {

// IBA 16.1.3.5: PortXmitData/PortRcvData count the octets from the LRH
// through the ICRC (not the VCRC); the PMA reports them divided by 4.
uint64_t data_octets(size_t bytes) { return bytes > w::kVcrcBytes ? bytes - w::kVcrcBytes : 0; }

w::Transport transport_of_type(uint8_t t) {
  return t == kQpRc ? w::Transport::kRc : t == kQpUc ? w::Transport::kUc : w::Transport::kUd;
}

bool is_response_opcode(uint8_t opcode) {
  const w::Op o = w::opcode_op(opcode);
  return (o >= w::Op::kReadResponseFirst && o <= w::Op::kReadResponseOnly) || o == w::Op::kAcknowledge ||
         o == w::Op::kAtomicAcknowledge;
}

}  // namespace

// §6.3 / §14.2 power-on values. A port with a cable trains its link at
// once (PortPhysicalState LinkUp, PortState Init, IBA 7.2); one without
// polls for a peer (Polling, Down).
void Hca::reset_ports() {
  for (uint8_t n = 1; n <= kMaxPorts; ++n) {
    Port& pt = port_at(n);
    pt.info = PortInfo{};
    pt.clear_gids();
    pt.info.port_guid = opts_.caps.node_guid + n;  // §14.2: port GUID = node GUID + port number
    pt.info.cap_flags = kPortCapFlags;
    pt.sma = SmaPortState{};
    pt.pma = sim::sma::PortCounterValues{};
    init_sma_port(n);
    if (opts_.link_layer == kLinkLayerEthernet) init_ethernet_port(n);
    const bool up = pt.can_train() && n <= opts_.caps.num_ports;
    pt.info.phys_state = up ? kPhysLinkUp : kPhysPolling;
    pt.info.state = up ? trained_state(n) : uint8_t{kPsDown};
  }
}

// A link that comes up: Init, for a subnet manager to take further (IBA
// 7.2); an Ethernet port has none and is Active at once (§16.1).
uint8_t Hca::trained_state(uint8_t port) const { return is_ethernet(port) ? kPsActive : kPsInit; }

uint8_t Hca::qp_port(const Qp& qp) const {
  if (qp.cfg.type == kQpSmi || qp.cfg.type == kQpGsi || qp.cfg.type == kQpRaw) return qp.cfg.port;
  const uint8_t p = qp.attrs.port;
  return p >= 1 && p <= opts_.caps.num_ports ? p : 1;
}

// §9.4 PORT_STATE_CHANGE / LID_CHANGE: after the completion of the command
// that caused them, or at once when the SM (a MAD) did.
void Hca::port_event_state(uint8_t port, uint8_t from, uint8_t to) {
  PendingEvent ev;
  ev.type = kEvPortStateChange;
  put8(ev.data, 0, port);
  put8(ev.data, 1, from);
  put8(ev.data, 2, to);
  events_.post(ev);
}

void Hca::port_event_lid(uint8_t port, uint16_t lid) {
  PendingEvent ev;
  ev.type = kEvLidChange;
  put8(ev.data, 0, port);
  put16(ev.data, 2, lid);
  events_.post(ev);
}

void Hca::port_event(uint8_t type, uint8_t port) {
  PendingEvent ev;
  ev.type = type;
  put8(ev.data, 0, port);
  events_.post(ev);
}

// §12.7: cabling a port brings its link up (Init); unplugging takes it
// down. No event before INIT_HCA (there is no EQ).
void Hca::attach_link(uint8_t port, sim::Link* link) {
  if (port < 1 || port > kMaxPorts) return;
  Port& pt = port_at(port);
  pt.link = link;
  pt.pulled = false;  // a new cable (or none): no word from a far end yet
  if (port > opts_.caps.num_ports) return;
  const uint8_t was = pt.info.state;
  if (link && pt.info.state == kPsDown && pt.info.phys_state != kPhysDisabled) {
    pt.info.phys_state = kPhysLinkUp;
    pt.info.state = trained_state(port);
  } else if (link) {
    pt.info.phys_state = kPhysLinkUp;
  } else {
    pt.info.phys_state = kPhysPolling;
    pt.info.state = kPsDown;
  }
  if (initialized_ && was != pt.info.state) port_event_state(port, was, pt.info.state);
}

// §14.3, docs/cables.md "Link state": the far end pulled the cable (the
// port loses its link as when the cable is removed, IBA 7.2: Polling,
// Down; LinkDownedCounter + 1 from Init or later) or plugged it back (it
// trains: LinkUp, Init, unless the SM disabled it). PORT_STATE_CHANGE as
// for attach_link(). A port in Disabled stays so.
void Hca::set_cable_light(uint8_t port, bool up) {
  if (port < 1 || port > kMaxPorts) return;
  Port& pt = port_at(port);
  if (pt.pulled == !up) return;  // a repeat
  pt.pulled = !up;
  if (!pt.link || port > opts_.caps.num_ports) return;
  const uint8_t was = pt.info.state;
  const bool disabled = pt.info.phys_state == kPhysDisabled;
  if (!up) {
    if (was != kPsDown) ++pt.pma.link_downed;  // IBA 16.1.3.5
    if (!disabled) pt.info.phys_state = kPhysPolling;
    pt.info.state = kPsDown;
  } else if (!disabled && pt.info.state == kPsDown) {
    pt.info.phys_state = kPhysLinkUp;
    pt.info.state = trained_state(port);
  }
  if (initialized_ && was != pt.info.state) port_event_state(port, was, pt.info.state);
}

bool Hca::for_own_port(uint8_t port, uint16_t dlid) const {
  const PortInfo& pi = port_at(port).info;
  const uint16_t mask = static_cast<uint16_t>(~((1u << pi.lmc) - 1));
  return pi.lid != 0 && dlid < 0xc000 && (dlid & mask) == (pi.lid & mask);
}

// §12.7: what may leave a port (IBA 7.2): nothing while the link is not
// up; SMPs (QP0) and GMPs (QP1) from Init on; every other packet only when
// Active. A packet for the port itself never reaches the wire: it is
// queued and received by this device on its next turn (run_due).
// The state check alone, for every way out of a port (transmit,
// transmit_frame, send_frame): false, counted, when nothing may leave.
bool Hca::port_may_send(uint8_t port, bool management, bool local) {
  Port& pt = port_at(port);
  const uint8_t st = pt.info.state;
  if (port > opts_.caps.num_ports || (management ? st < kPsInit : st != kPsActive) ||
      (!local && pt.info.phys_state != kPhysLinkUp)) {
    ++dstats_.tx_port_down;
    ++pt.pma.xmit_discards;
    return false;
  }
  return true;
}

bool Hca::transmit(uint8_t port, size_t len, sim::Link::Filler fill, bool management, bool local,
                   size_t payload_at, const sim::Segment* seg, bool multicast) {
  if (!port_may_send(port, management, local)) return false;
  Port& pt = port_at(port);
  if (local) {  // (never a segment: RcRequester::segment_len)
    std::vector<std::byte> pkt(len);
    if (!fill(pkt)) return false;
    w::seal_packet(pkt);
    ++dstats_.loopback_packets;
    loopback_.emplace_back(port, std::move(pkt));
    return true;
  }
  if (!pt.link) {
    ++pt.pma.xmit_discards;
    return false;
  }
  if (auto r = seg ? pt.link->send_segment(*seg, fill) : pt.link->send_with(len, fill, payload_at); !r) {
    if (r.error().code != ECANCELED) ++pt.pma.xmit_discards;
    return false;
  }
  if (!seg) {
    count_tx(port, len, multicast);
  } else {
    for (size_t i = 0; i < seg->count; ++i) count_tx(port, seg->packet_bytes(i), false);
  }
  return true;
}

bool Hca::transmit(uint8_t port, std::vector<std::byte> pkt, bool management, bool local) {
  return transmit(
      port, pkt.size(),
      [&](std::span<std::byte> out) {  // built whole, CRCs too (sealed again: the same values)
        std::copy(pkt.begin(), pkt.end(), out.begin());
        return true;
      },
      management, local);
}

// IBA 16.1.4.11 PortCountersExtended: unicast and multicast packets apart (§15).
void Hca::count_tx(uint8_t port, size_t bytes, bool multicast) {
  auto& c = port_at(port).pma;
  c.xmit_bytes += data_octets(bytes);
  ++c.xmit_pkts;
  ++(multicast ? c.multicast_xmit_pkts : c.unicast_xmit_pkts);
}

void Hca::count_rx(uint8_t port, size_t bytes, bool multicast) {
  auto& c = port_at(port).pma;
  c.rcv_bytes += data_octets(bytes);
  ++c.rcv_pkts;
  ++(multicast ? c.multicast_rcv_pkts : c.unicast_rcv_pkts);
}

void Hca::deliver_loopback() {
  // Packets queued while these are received (a reply to a loopback SMP)
  // wait for the next turn.
  auto batch = std::exchange(loopback_, {});
  for (auto& [port, pkt] : batch) receive_on_port(port, pkt, true);
}

void Hca::receive_packet(std::span<const std::byte> packet, Clock::time_point now) {
  receive_packet(1, packet, now);
}

void Hca::receive_packet(uint8_t port, std::span<const std::byte> packet, Clock::time_point now) {
  receive_from_link(port, packet, nullptr, packet.size(), now);
}

void Hca::receive_packet(uint8_t port, size_t wire_bytes, const w::ParsedPacket& parsed, Clock::time_point now) {
  receive_from_link(port, {}, &parsed, wire_bytes, now);
}

void Hca::receive_from_link(uint8_t port, std::span<const std::byte> packet, const w::ParsedPacket* parsed,
                            size_t wire_bytes, Clock::time_point now) {
  now_ = now;
  queues_.set_now(now);
  if (port < 1 || port > opts_.caps.num_ports) {
    ++dstats_.rx_port_down;
    return;
  }
  if (is_ethernet(port)) {  // a frame (an Ethernet cable hands no parsed packets)
    if (!parsed) receive_frame(port, packet);
    return;
  }
  receive_on_port(port, packet, false, parsed, wire_bytes);
}

// §12.8 / §14.1: checks in order; each failure drops the packet and counts it.
void Hca::receive_on_port(uint8_t port, std::span<const std::byte> packet, bool local,
                          const w::ParsedPacket* given, size_t wire_bytes) {
  Port& pt = port_at(port);
  if (!initialized_ || fatal_ || (!local && pt.info.phys_state != kPhysLinkUp)) {
    ++dstats_.rx_port_down;
    return;
  }
  // Framing and the opcode table (IBA 7.7, 9.2). The CRCs (IBA 7.8) are
  // checked once, by the Link, before a packet gets here (link.hpp);
  // loopback packets are the device's own.
  std::optional<w::ParsedPacket> own;
  if (!given) {
    auto parsed = w::parse_packet(packet, w::ParseOptions{.check_vcrc = false, .check_icrc = false});
    if (!parsed) {
      ++dstats_.rx_malformed;
      ++pt.pma.rcv_errors;
      return;
    }
    own = std::move(*parsed);
    given = &*own;
    if (wire_bytes == 0) wire_bytes = packet.size();  // (an Ethernet port gave the frame's size)
  }
  const w::ParsedPacket& p = *given;
  ++dstats_.rx_packets;
  if (!local) count_rx(port, wire_bytes, is_multicast_lid(p.hdr.lrh.dlid));
  const uint32_t dest = p.hdr.bth.dest_qp;
  if (dest == 0 && is_ethernet(port)) {  // §16.3: RoCE has no QP0
    ++dstats_.rx_bad_addr;
    return;
  }
  if (dest == 0) return receive_smp(port, p, local);  // sma.cpp
  if (p.hdr.lrh.vl == 15) {  // IBA 7.6.5: VL15 carries SMPs only
    ++dstats_.rx_bad_vl;
    return;
  }
  if (pt.info.state < kPsInit) {
    ++dstats_.rx_port_down;
    return;
  }
  if (dest == 1) return receive_gmp(port, p, local);  // pma.cpp
  if (pt.info.state != kPsActive) {  // data moves only through an Active port (IBA 7.2)
    ++dstats_.rx_port_down;
    return;
  }
  if (is_multicast_lid(p.hdr.lrh.dlid)) return receive_multicast(port, p, local);  // multicast.cpp
  const uint16_t lmc_mask = static_cast<uint16_t>(~((1u << pt.info.lmc) - 1));
  if (!is_ethernet(port) && (p.hdr.lrh.dlid >= 0xc000 || (p.hdr.lrh.dlid & lmc_mask) != (pt.info.lid & lmc_mask))) {
    ++dstats_.rx_bad_dlid;  // IBA 7.11.1: not ours (the permissive LID is QP0's)
    ++pt.pma.rcv_switch_relay_errors;
    return;
  }
  // IBA 9.6.1.1 / 10.9.3: P_Keys match in their low 15 bits, one side a full member.
  if (!pkey_matches(p.hdr.bth.pkey, pt.info.pkey0)) {
    ++dstats_.rx_bad_pkey;
    ++pt.info.pkey_violations;
    ++pt.pma.rcv_constraint_errors;
    return;
  }
  Qp* qp = tables_.qps.get(dest);
  if (!qp || qp->cfg.type == kQpSmi || qp->cfg.type == kQpGsi || qp->cfg.type == kQpRaw || qp_port(*qp) != port ||
      w::opcode_transport(p.hdr.bth.opcode) != transport_of_type(qp->cfg.type)) {
    ++dstats_.rx_no_qp;
    return;
  }
  const uint8_t st = qp->attrs.state;
  if (st != kRtr && st != kRts && st != kSqd && st != kSqe) {  // IBA 10.3.1
    ++dstats_.rx_bad_state;
    return;
  }
  const bool connected = qp->cfg.type == kQpRc || qp->cfg.type == kQpUc;
  // §16.3 (as rxe_chk_addr): on an Ethernet port, an RC/UC packet comes
  // from the QP's peer's IP to the QP's own, or it is not the
  // connection's; a packet looped back inside the device too.
  if (connected && is_ethernet(port) && !addressed_to_connection(port, *qp, p)) {
    ++dstats_.rx_bad_addr;
    return;
  }
  if (connected && st == kRtr && !qp->rt.comm_est) {  // IBA 11.6.3.1
    qp->rt.comm_est = true;
    emit_event(kEvQpCommEst, dest);
  }
  if (qp->cfg.type == kQpRc && is_response_opcode(p.hdr.bth.opcode)) requester_.on_response(dest, *qp, p);
  else if (connected) responder_.request(dest, *qp, p);
  else ud_.receive(dest, *qp, p, port);
}

// §14.1: a MAD for the driver's QP0 or QP1 of `port` (wire QPN 0 or 1),
// received as on any UD QP (§12.8: a receive WQE, the GRH area, a CQE).
bool Hca::deliver_to_qp(uint32_t wire_qpn, uint8_t port, const w::ParsedPacket& p,
                        std::span<const std::byte> mad) {
  const uint32_t qpn = special_qpn(port, wire_qpn == 1);
  Qp* qp = tables_.qps.get(qpn);
  if (!qp) {
    ++dstats_.rx_no_qp;
    return false;
  }
  const uint8_t st = qp->attrs.state;
  if (st != kRtr && st != kRts && st != kSqd && st != kSqe) {
    ++dstats_.rx_bad_state;
    return false;
  }
  w::ParsedPacket q = p;
  if (!mad.empty()) q.payload = mad;
  const uint64_t before = queues_.stats().messages_received;
  ud_.receive(qpn, *qp, q, port);
  return queues_.stats().messages_received != before;
}

namespace {
void put_gid(w::Gid& g, uint64_t prefix, uint64_t guid) {
  for (int i = 0; i < 8; ++i) {
    g[i] = static_cast<uint8_t>(prefix >> (56 - 8 * i));
    g[8 + i] = static_cast<uint8_t>(guid >> (56 - 8 * i));
  }
}
}  // namespace

// §14.1: an SMP the device itself sends (the SMA's response, a trap): a UD
// SEND from QP0 on VL15 with the default P_Key (IBA 14.2.1), to `dlid`
// (the permissive LID for a directed route), out of `port` or back into
// this device (`local`: the request came from the driver's own QP0).
void Hca::send_smp(uint8_t port, std::span<const std::byte> mad, uint16_t dlid, uint32_t dest_qp, bool local,
                   const w::ParsedPacket* req) {
  const Port& pt = port_at(port);
  w::Headers h;
  h.lrh.vl = 15;
  h.lrh.sl = req ? req->hdr.lrh.sl : 0;
  h.lrh.dlid = dlid;
  // IBA 14.2.2: directed-route packets, and a port without a LID, use the permissive LID.
  h.lrh.slid = (dlid == kPermissiveLid || pt.info.lid == 0) ? kPermissiveLid : pt.info.lid;
  h.lrh.lnh = w::Lnh::kIbaLocal;
  h.bth.opcode = w::opcode(w::Transport::kUd, w::Op::kSendOnly);
  h.bth.pkey = 0xffff;
  h.bth.dest_qp = dest_qp;
  h.deth = w::Deth{0, 0};
  auto pkt = w::build_packet(h, mad);
  if (!pkt || !transmit(port, std::move(*pkt), true, local || for_own_port(port, dlid))) {
    ++dstats_.smps_dropped;
    return;
  }
  ++dstats_.tx_packets;
}

// §15: the PMA's response: a UD SEND from QP1 back to the requester's QP
// with the request's P_Key and SL and the GSI Q_Key (IBA 13.5.4.2), where
// the request came from (the wire, or this device itself).
void Hca::reply_gmp(uint8_t port, const w::ParsedPacket& req, std::span<const std::byte> mad, bool local) {
  const Port& pt = port_at(port);
  w::Headers h;
  h.lrh.vl = pt.sma.sl2vl[req.hdr.lrh.sl & 0xf];
  h.lrh.sl = req.hdr.lrh.sl;
  h.lrh.dlid = req.hdr.lrh.slid;
  h.lrh.slid = req.hdr.lrh.dlid;  // the LID (with path bits) the request was sent to
  h.bth.opcode = w::opcode(w::Transport::kUd, w::Op::kSendOnly);
  h.bth.pkey = req.hdr.bth.pkey;
  h.bth.dest_qp = req.hdr.deth ? req.hdr.deth->src_qp : 1;
  h.deth = w::Deth{kGsiQkey, 1};
  h.lrh.lnh = w::Lnh::kIbaLocal;
  if (req.hdr.grh) {  // IBA 13.5.4.2: a request with a GRH is answered with one
    w::Grh g;
    g.tclass = req.hdr.grh->tclass;
    g.flow_label = req.hdr.grh->flow_label;
    g.hop_lmt = 0xff;
    put_gid(g.sgid, pt.info.gid_prefix, pt.info.port_guid);
    g.dgid = req.hdr.grh->sgid;
    h.grh = g;
    h.lrh.lnh = w::Lnh::kIbaGlobal;
  }
  auto pkt = w::build_packet(h, mad);
  if (!pkt || !transmit(port, std::move(*pkt), true, local || for_own_port(port, h.lrh.dlid))) {
    ++dstats_.mads_dropped;
    return;
  }
  ++dstats_.tx_packets;
}

}  // namespace openib::simhca

namespace openib::simhca {

// §12.7: the packet's addressing from the LRH on; GRH when the path says
// so (IBA 8.3). QP0 sends on VL15 with the default P_Key (IBA 7.6.5,
// 14.2.1: SMPs are not partitioned); everything else on its SL's VL with
// P_Key entry 0.
void Hca::address_packet(w::Headers& h, const Av& av, uint8_t port) const {
  const Port& pt = port_at(port);
  const bool smi = h.deth && h.deth->src_qp == 0;
  h.lrh.vl = smi ? 15 : pt.sma.sl2vl[av.sl & 0xf];
  h.lrh.sl = av.sl & 0xf;
  // §16.2: on an Ethernet port the GRH addresses the packet; the LID
  // fields only steer it inside the device (a multicast DLID for a group,
  // as a received frame gets).
  h.lrh.dlid = is_ethernet(port) ? (av_is_multicast(port, av) ? uint16_t{0xc000} : uint16_t{0}) : av.dlid;
  h.lrh.slid = static_cast<uint16_t>(pt.info.lid | (av.src_path_bits & ((1u << pt.info.lmc) - 1)));
  if (smi && pt.info.lid == 0) h.lrh.slid = 0xffff;  // IBA 14.2.2: no LID yet: permissive
  h.bth.pkey = smi ? 0xffff : pt.info.pkey0;  // P_Key index 0, the table's only entry (§6.3)
  if (!av.grh()) {
    h.lrh.lnh = w::Lnh::kIbaLocal;
    return;
  }
  w::Grh g;
  g.tclass = av.traffic_class;
  g.flow_label = av.flow_label;
  g.hop_lmt = av.hop_limit;
  // §6.12: the SGID is the path's GID table entry; one removed since the
  // AH or the QP's path was made sends as entry 0 (the port's own GID).
  const GidEntry& sgid = pt.source_gid(av.sgid_index);
  std::copy(sgid.gid.begin(), sgid.gid.end(), g.sgid.begin());
  g.dgid = av.dgid;
  h.grh = g;
  h.lrh.lnh = w::Lnh::kIbaGlobal;
}

bool Hca::send_packet(w::Headers& h, const Payload& payload, const Av& av, uint8_t port, const sim::Segment* seg) {
  address_packet(h, av, port);
  const bool smi = h.deth && h.deth->src_qp == 0;
  const bool gsi = h.deth && h.deth->src_qp == 1;
  // An SMP is looked at before it leaves (loopback, §14.1): read it first.
  Bytes smp;
  const Payload* pl = &payload;
  Payload staged;
  if (smi && payload.ext) {
    smp.resize(payload.len);
    if (!queues_.gather(*payload.ext, payload.off, smp)) return false;
    staged.bytes = smp;
    pl = &staged;
  }
  // A segment's first packet is framed as if alone, with an MTU of payload.
  auto frame = w::frame_packet(h, seg ? seg->mtu : pl->size());
  if (!frame) {
    ++dstats_.tx_dropped;
    return true;
  }
  sim::Segment sg;
  if (seg) {
    sg = *seg;
    sg.hdr_len = static_cast<uint16_t>(frame->payload_offset());
    sg.later_hdr_len = static_cast<uint16_t>(w::kLrhBytes + (h.grh ? w::kGrhBytes : 0) + w::kBthBytes);
  }
  // §12.7 loopback: to this port's own LID, or (QP0) an SMP for this very
  // port (a directed route of hop count 0, §14.1).
  const bool local = av_is_local(port, av) || (smi && smi_is_local(port, pl->bytes, av.dlid));
  // Headers, then the payload straight from host memory (or the bytes
  // given), then pad and CRCs, all into the packet's final place.
  bool readable = true;
  auto fill = [&](std::span<std::byte> out) {
    std::copy(frame->headers().begin(), frame->headers().end(), out.begin());
    auto dst = out.subspan(frame->payload_offset(), pl->size());
    if (pl->ext) {
      if (!queues_.gather(*pl->ext, pl->off, dst)) return readable = false;
    } else {
      std::copy(pl->bytes.begin(), pl->bytes.end(), dst.begin());
    }
    if (seg)  // the last packet's pad; no CRCs in a segment (Link::send_segment)
      std::fill_n(dst.end(), sg.last_pad(), std::byte{0});
    else
      w::pad_packet(*frame, out);  // the CRCs are the link's (Link::send_with)
    return true;
  };
  // §12.7 multicast: onto the wire for the other ports of the group (the
  // switches never send it back out of this port), and a copy into this
  // port for its other attached QPs, not the sender (multicast.cpp).
  const bool mcast = !seg && h.grh && av_is_multicast(port, av);
  const bool sent = is_ethernet(port) && !local && !seg
                        ? transmit_frame(port, frame->size, fill, av, mcast)
                        : transmit(port, seg ? sg.bytes() : frame->size, fill, smi || gsi, local,
                                   pl->size() ? frame->payload_offset() : 0, seg ? &sg : nullptr, mcast);
  if (mcast && readable && h.deth && other_local_members(port, av.dgid, h.deth->src_qp) &&
      transmit(port, frame->size, fill, smi || gsi, true))
    ++dstats_.mcast_loopback;
  if (!sent) {
    if (readable) ++dstats_.tx_dropped;
    return readable;
  }
  dstats_.tx_packets += seg ? sg.count : 1;
  return true;
}

uint32_t Hca::mtu_bytes(const Qp& qp) const {
  // IBA 9.7.1: RC/UC segment by the path MTU; UD by the port's (§6.3).
  uint8_t code = (qp.cfg.type == kQpRc || qp.cfg.type == kQpUc) ? qp.attrs.path_mtu : port_at(qp_port(qp)).info.active_mtu;
  code = static_cast<uint8_t>(std::clamp<int>(code, 1, 5));
  return 128u << code;
}

// The cable a QP's packets leave by: none for a port without one, or for
// packets that loop back inside the device (§12.7).
sim::Link* Hca::qp_link(const Qp& qp) {
  const uint8_t port = qp_port(qp);
  if (port > opts_.caps.num_ports || av_is_local(port, qp.attrs.av)) return nullptr;
  return port_at(port).link;
}

}  // namespace openib::simhca
