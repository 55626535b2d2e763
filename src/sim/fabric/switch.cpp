// The emulated switch (switch.hpp; docs/ibfabric.md "The switch").
#include "sim/fabric/switch.hpp"

#include <algorithm>
#include <bit>

#include "common/byte_order.hpp"
#include "common/log.hpp"
#include "mad/mad.hpp"
#include "mad/smp.hpp"

namespace openib::sim::fabric {

namespace {

// The switch is hardware: like simhca it keeps its own reading of these
// numbers, the other side of the driver's (common/iba.hpp), with the same
// citations.
constexpr std::uint16_t kPermissiveLid = 0xFFFF;   // IBA 4.1.5
constexpr std::uint16_t kMulticastBase = 0xC000;   // IBA 4.1.1: 0xC000..0xFFFE multicast
constexpr std::uint32_t kGsiQkey = 0x80010000;     // IBA 13.5.3.1: QP1's well-known Q_Key
constexpr std::uint8_t kUdSendOnly = 0x64;         // IBA 9.2.1: UD SEND Only

// PortInfo:LinkWidth bits (IBA 14.2.5.6): the widest in a mask.
std::uint8_t widest(std::uint8_t mask) {
  for (std::uint8_t b : {8, 4, 2, 16, 1})  // 12x, 8x, 4x, 2x, 1x
    if (mask & b) return b;
  return 2;
}
std::uint8_t fastest(std::uint8_t mask) {  // LinkSpeed bits: 1 SDR, 2 DDR, 4 QDR
  for (std::uint8_t b : {4, 2, 1})
    if (mask & b) return b;
  return 1;
}
std::uint8_t fastest_ext(std::uint8_t mask) {  // LinkSpeedExt bits: 1 FDR, 2 EDR, 4 HDR, 8 NDR
  for (std::uint8_t b : {8, 4, 2, 1})
    if (mask & b) return b;
  return 0;
}

// PortXmitData / PortRcvData octets (IBA 16.1.3.5): LRH through ICRC.
std::uint64_t wire_octets(std::size_t datagram) {
  return datagram > wire::kVcrcBytes ? datagram - wire::kVcrcBytes : 0;
}

}  // namespace

Switch::Switch(const TopoNode& node)
    : ports_(node.num_ports + 1), plugged_(node.num_ports + 1, false), lft_(kLftCap, kNoPort), mft_(kMftCap), sma_(*this), pma_(*this) {
  id_.type = mad::NodeType::kSwitch;
  id_.num_ports = static_cast<std::uint8_t>(node.num_ports);
  id_.node_guid = node.guid;
  id_.system_image_guid = node.sys_image_guid;
  id_.partition_cap = kPKeyCap;
  id_.device_id = node.device_id;
  id_.vendor_id = node.vendor_id;
  id_.description = node.description;

  // SwitchInfo, IBA 14.2.5.4: what this model offers.
  si_.linear_fdb_cap = static_cast<std::uint16_t>(kLftCap);
  si_.random_fdb_cap = 0;
  si_.multicast_fdb_cap = static_cast<std::uint16_t>(kMftCap);
  si_.linear_fdb_top = 0;
  si_.life_time_value = 0x12;  // ~ 1 s switch lifetime (IBA 18.2.5.4)
  si_.lids_per_port = 0;
  si_.partition_enforcement_cap = kPKeyCap;
  si_.enhanced_port0 = node.enhanced_port0;
  si_.multicast_fdb_top = 0xBFFF;  // no multicast entry in use yet (IBA 14.2.5.4)

  for (unsigned i = 0; i <= node.num_ports; ++i) {
    Port& p = ports_[i];
    mad::PortInfo& pi = p.pi;
    const TopoPort& tp = node.ports[i];
    pi.local_port_num = static_cast<std::uint8_t>(i);
    pi.link_width_supported = 1 | 2 | 4 | 8;  // 1x, 4x, 8x, 12x
    pi.link_width_enabled = tp.width_enabled ? tp.width_enabled : pi.link_width_supported;
    pi.link_speed_supported = 1 | 2 | 4;       // SDR, DDR, QDR
    pi.link_speed_enabled = tp.speed_enabled ? tp.speed_enabled : pi.link_speed_supported;
    pi.link_speed_ext_supported = tp.speed_ext_enabled ? 15 : 0;
    pi.link_speed_ext_enabled = tp.speed_ext_enabled;
    pi.link_width_active = widest(pi.link_width_enabled);
    pi.link_speed_active = fastest(pi.link_speed_enabled);
    pi.link_speed_ext_active = fastest_ext(pi.link_speed_ext_enabled);
    pi.link_down_default_state = 2;  // Polling
    pi.mtu_cap = 5;                   // 4096 (IBA 14.2.5.6)
    pi.neighbor_mtu = 5;
    pi.vl_cap = 1;                    // VL0 only (plus VL15)
    pi.operational_vls = 1;
    pi.vl_high_limit = 0;
    pi.vl_arb_high_cap = 8;
    pi.vl_arb_low_cap = 8;
    pi.guid_cap = 1;
    pi.resp_time_value = 18;
    p.pkeys.fill(0);
    p.pkeys[0] = mad::kDefaultPKey;
    p.sl2vl.assign(node.num_ports + 1, mad::SlToVlTable{});
    if (i == 0) {
      // Management port 0 (IBA 17.2.1.2): always up; its LID is the switch's.
      pi.capability_mask = mad::port_cap::kIsTrapSupported | mad::port_cap::kIsNoticeSupported |
                           mad::port_cap::kIsSystemImageGuidSupported;
      pi.port_state = static_cast<std::uint8_t>(mad::PortState::kActive);
      pi.port_phys_state = static_cast<std::uint8_t>(mad::PhysState::kLinkUp);
      pi.lid = node.lid;
      pi.lmc = node.enhanced_port0 ? node.lmc : 0;
    } else {
      pi.port_state = static_cast<std::uint8_t>(mad::PortState::kDown);
      pi.port_phys_state = static_cast<std::uint8_t>(mad::PhysState::kPolling);
    }
  }
}

// ---- cabling and link state ---------------------------------------------

void Switch::attach(unsigned port, Link* link) {
  if (port == 0 || port >= ports_.size()) return;
  ports_[port].link = link;
}

bool Switch::link_up(unsigned port) const {
  return port < ports_.size() &&
         ports_[port].pi.port_phys_state == static_cast<std::uint8_t>(mad::PhysState::kLinkUp);
}

void Switch::set_link(unsigned port, bool up, Clock::time_point now) {
  if (port == 0 || port >= ports_.size()) return;
  mad::PortInfo& pi = ports_[port].pi;
  const bool disabled = pi.port_phys_state == static_cast<std::uint8_t>(mad::PhysState::kDisabled);
  if (disabled) {  // the SM disabled it: stays so until the SM sets Polling again
    plugged_[port] = up;
    return;
  }
  plugged_[port] = up;
  if (up == link_up(port)) return;
  if (up) {
    // Training done (IBA 5.6.2): LinkUp, and the logical link starts in Init (IBA 7.2).
    pi.port_phys_state = static_cast<std::uint8_t>(mad::PhysState::kLinkUp);
    pi.port_state = static_cast<std::uint8_t>(mad::PortState::kInit);
  } else {
    pi.port_phys_state = static_cast<std::uint8_t>(mad::PhysState::kPolling);
    pi.port_state = static_cast<std::uint8_t>(mad::PortState::kDown);
    ++ports_[port].ctr.link_downed;  // IBA 16.1.3.5 LinkDownedCounter
  }
  link_changed(port, now);
}

// IBA 14.2.5.4 PortStateChange: set when a port goes Down->Init or to Down;
// IBA 14.2.5.1 trap 128 tells the SM (14.3.x: the SM then resweeps).
void Switch::link_changed(unsigned port, Clock::time_point now) {
  si_.port_state_change = true;
  log::get("fabric")->info("{}: port {} link {}", name(), port, link_up(port) ? "up (Init)" : "down");
  if (auto t = sma_.send_trap_128(now)) {
    ++stats_.traps_sent;
    send_smp_out(*t, nullptr, 0);
  }
}

void Switch::tick(Clock::time_point now) {
  for (const sma::Outgoing& o : sma_.trap_resends(now)) send_smp_out(o, nullptr, 0);
}

// ---- forwarding, IBA 18.2.4 ---------------------------------------------

bool Switch::is_own_lid(std::uint16_t dlid) const {
  const mad::PortInfo& p0 = ports_[0].pi;
  if (p0.lid == 0) return false;
  const unsigned span = 1u << (p0.lmc & 7);
  return dlid >= p0.lid && dlid < p0.lid + span;
}

// A port takes data packets in Armed or Active (IBA 7.2: only SMPs in Init).
bool Switch::in_state_for_data(unsigned port) const {
  const std::uint8_t s = ports_[port].pi.port_state;
  return link_up(port) && (s == static_cast<std::uint8_t>(mad::PortState::kArmed) ||
                           s == static_cast<std::uint8_t>(mad::PortState::kActive));
}

void Switch::receive(unsigned port, std::span<const std::byte> pkt, unsigned hops, Clock::time_point now) {
  ++stats_.rx_packets;
  if (port == 0 || port >= ports_.size()) return;
  Port& in = ports_[port];
  if (!link_up(port)) {
    ++stats_.rx_link_down;
    return;
  }
  // IBA 16.1.3.5: received packets are counted, errors included; data
  // octets are those from the LRH through the ICRC (not the VCRC), so the
  // PMA's words are exactly LRH.PktLen.
  ++in.ctr.rcv_pkts;
  in.ctr.rcv_bytes += wire_octets(pkt.size());
  if (hops > kMaxHops) {
    ++stats_.loop_drops;
    ++in.ctr.rcv_switch_relay_errors;
    return;
  }
  auto lrh = wire::decode_lrh(pkt);
  if (!lrh || pkt.size() < wire::kLrhBytes + wire::kBthBytes + wire::kIcrcBytes + wire::kVcrcBytes) {
    ++stats_.rx_malformed;
    ++in.ctr.rcv_errors;
    return;
  }
  const std::uint16_t dlid = lrh->dlid;
  if (lrh->vl == 15) {  // subnet management (IBA 7.6.5: VL15 carries SMPs only)
    auto p = wire::parse_packet(pkt);
    if (!p) {
      ++stats_.rx_malformed;
      ++in.ctr.rcv_errors;
      return;
    }
    handle_smp(port, *p, pkt, hops, now);
    return;
  }
  if (dlid >= kMulticastBase && dlid != kPermissiveLid) {
    ++in.ctr.multicast_rcv_pkts;
  } else {
    ++in.ctr.unicast_rcv_pkts;
  }
  if (!in_state_for_data(port)) {
    ++stats_.rx_port_not_active;
    return;
  }
  if (dlid == 0 || dlid == kPermissiveLid) {  // IBA 7.11.1: permissive DLID only on SMPs
    ++stats_.bad_dlid;
    ++in.ctr.rcv_errors;
    return;
  }
  if (dlid >= kMulticastBase) {
    relay_multicast(port, dlid, pkt, hops);
    return;
  }
  if (is_own_lid(dlid)) {  // to port 0: the switch's own GSI (PMA)
    auto p = wire::parse_packet(pkt);
    if (!p) {
      ++stats_.rx_malformed;
      ++in.ctr.rcv_errors;
      return;
    }
    handle_local_gmp(port, *p);
    return;
  }
  relay_unicast(port, dlid, pkt, false, hops);
}

void Switch::relay_unicast(unsigned in_port, std::uint16_t dlid, std::span<const std::byte> pkt, bool smp,
                           unsigned hops) {
  // IBA 14.2.5.4: DLIDs above LinearFDBTop are discarded; IBA 14.2.5.10:
  // entry 0xFF (or a port the switch does not have) means no route.
  const std::uint8_t out = dlid <= si_.linear_fdb_top ? lft(dlid) : kNoPort;
  if (out == kNoPort || out == 0 || out >= ports_.size()) {
    ++stats_.no_route;
    if (in_port != 0) ++ports_[in_port].ctr.rcv_switch_relay_errors;
    return;
  }
  // Data leaves only through an Active port; SMPs through any port that is
  // up (IBA 7.2: Init and Armed pass SMPs).
  const std::uint8_t st = ports_[out].pi.port_state;
  const bool ok = link_up(out) && (smp ? st >= static_cast<std::uint8_t>(mad::PortState::kInit)
                                       : st == static_cast<std::uint8_t>(mad::PortState::kActive));
  if (!ok) {
    ++stats_.out_port_down;
    ++ports_[out].ctr.xmit_discards;
    if (smp) ++stats_.vl15_dropped;
    return;
  }
  transmit(out, pkt, hops + 1);
}

void Switch::relay_multicast(unsigned in_port, std::uint16_t dlid, std::span<const std::byte> pkt, unsigned hops) {
  const unsigned entry = dlid - kMulticastBase;
  bool any = false;
  if (entry < mft_.size()) {
    // IBA 18.2.4.3.3: every port of the MFT entry's mask except the one it came in by.
    for (unsigned out = 1; out < ports_.size(); ++out) {
      if (out == in_port || !((mft_[entry][out / 16] >> (out % 16)) & 1u)) continue;
      any = true;
      if (ports_[out].pi.port_state != static_cast<std::uint8_t>(mad::PortState::kActive) || !link_up(out)) {
        ++ports_[out].ctr.xmit_discards;
        continue;
      }
      transmit(out, pkt, hops + 1);
    }
  }
  if (!any) {
    ++stats_.no_route;
    ++ports_[in_port].ctr.rcv_switch_relay_errors;
  }
}

void Switch::transmit(unsigned out_port, std::span<const std::byte> pkt, unsigned hops) {
  Port& out = ports_[out_port];
  // IBA 7.8.2: the VCRC is the link's; every hop computes it anew.
  scratch_.assign(pkt.begin(), pkt.end());
  wire::rewrite_vcrc(scratch_);
  ++out.ctr.xmit_pkts;
  out.ctr.xmit_bytes += wire_octets(scratch_.size());
  const std::uint16_t dlid = bytes::ld_be16(scratch_.data() + 2);  // IBA 7.7: the LRH DLID, bytes 2-3
  if (dlid >= kMulticastBase && dlid != kPermissiveLid) ++out.ctr.multicast_xmit_pkts;
  else ++out.ctr.unicast_xmit_pkts;
  ++stats_.forwarded;
  if (emit_) {
    emit_(out_port, scratch_, hops);
  } else if (out.link) {
    (void)out.link->send(scratch_);  // a full socket buffer is loss, counted by the link
  }
}

// ---- management ---------------------------------------------------------

void Switch::handle_smp(unsigned in_port, const wire::ParsedPacket& p, std::span<const std::byte> pkt,
                        unsigned hops, Clock::time_point now) {
  const auto& h = p.hdr;
  // IBA 14.2.1: SMPs are UD SEND to QP0 and are exactly one MAD.
  if (h.bth.opcode != kUdSendOnly || h.bth.dest_qp != 0 || !h.deth || p.payload.size() != mad::kMadBytes) {
    ++stats_.vl15_dropped;
    ++ports_[in_port].ctr.vl15_dropped;
    return;
  }
  const std::uint8_t cls = mad::mad_class(p.payload);
  if (cls == mad::mgmt_class::kSubnLid && h.lrh.dlid != kPermissiveLid && !is_own_lid(h.lrh.dlid)) {
    relay_unicast(in_port, h.lrh.dlid, pkt, true, hops);  // a LID-routed SMP passing through
    return;
  }
  if (!mad::is_smp_class(cls)) {
    ++stats_.vl15_dropped;
    ++ports_[in_port].ctr.vl15_dropped;
    return;
  }
  ++stats_.smps_local;
  // Directed-route SMPs at every hop and LID-routed ones for us: the engine
  // (IBA 14.2.2 for the route, 14.2.5 for the attributes).
  sma::SmpAction a = sma_.handle_smp(p.payload, static_cast<std::uint8_t>(in_port), h.lrh.slid, now);
  if (a.trap) send_smp_out(*a.trap, nullptr, hops);
  switch (a.kind) {
    case sma::SmpActionKind::kReply:
    case sma::SmpActionKind::kForward:
      send_smp_out(a.out, &h.lrh, hops);
      break;
    case sma::SmpActionKind::kDeliverLocal:  // no SM runs on a switch of ours
    case sma::SmpActionKind::kDrop:
      ++stats_.vl15_dropped;
      break;
  }
}

void Switch::send_smp_out(const sma::Outgoing& o, const wire::Lrh* req_lrh, unsigned hops) {
  wire::Headers h;
  h.lrh.vl = 15;
  h.lrh.sl = 0;
  h.lrh.dlid = o.dlid;
  const std::uint16_t own = lid();
  h.lrh.slid = (o.out_port != 0 && o.dlid == kPermissiveLid) || own == 0 ? kPermissiveLid : own;
  if (o.out_port == 0 && req_lrh == nullptr) h.lrh.sl = ports_[0].pi.master_sm_sl;  // traps (IBA 14.2.5.1)
  h.bth.opcode = kUdSendOnly;
  h.bth.pkey = mad::kDefaultPKey;
  h.bth.dest_qp = 0;
  h.deth = wire::Deth{0, 0};  // QP0: Q_Key 0 (IBA 14.2.1)
  auto pkt = wire::build_packet(h, o.mad);
  if (!pkt) {
    ++stats_.vl15_dropped;
    return;
  }
  if (o.out_port != 0) {
    // A directed-route hop: out of that port if its link is up (any PortState, IBA 14.2.2).
    if (o.out_port >= ports_.size() || !link_up(o.out_port)) {
      ++stats_.vl15_dropped;
      if (o.out_port < ports_.size()) ++ports_[o.out_port].ctr.xmit_discards;
      return;
    }
    transmit(o.out_port, *pkt, hops + 1);
    return;
  }
  if (is_own_lid(o.dlid)) {  // nothing of ours listens on QP0 but the SMA
    ++stats_.vl15_dropped;
    return;
  }
  relay_unicast(0, o.dlid, *pkt, true, hops);
}

void Switch::handle_local_gmp(unsigned in_port, const wire::ParsedPacket& p) {
  const auto& h = p.hdr;
  // QP1, class PerfMgmt (IBA 16.1): the PMA of every port, answered through port 0.
  if (h.bth.opcode != kUdSendOnly || h.bth.dest_qp != 1 || !h.deth || p.payload.size() != mad::kMadBytes ||
      mad::mad_class(p.payload) != mad::mgmt_class::kPerfMgmt) {
    ++stats_.local_dropped;
    return;
  }
  ++stats_.gmps_local;
  sma::PmaAction a = pma_.handle_gmp(p.payload, static_cast<std::uint8_t>(in_port));
  if (a.kind != sma::PmaActionKind::kReply) return;
  wire::Headers r;
  r.lrh.vl = h.lrh.vl;
  r.lrh.sl = h.lrh.sl;
  r.lrh.dlid = h.lrh.slid;
  r.lrh.slid = lid();
  r.bth.opcode = kUdSendOnly;
  r.bth.pkey = h.bth.pkey;
  r.bth.dest_qp = h.deth->src_qp;
  r.deth = wire::Deth{kGsiQkey, 1};
  if (h.grh) {  // answer a global request globally (IBA 13.5.2)
    r.grh = wire::Grh{};
    r.grh->hop_lmt = 255;
    r.grh->sgid = h.grh->dgid;
    r.grh->dgid = h.grh->sgid;
  }
  auto pkt = wire::build_packet(r, a.mad);
  if (!pkt) return;
  if (is_own_lid(r.lrh.dlid) || r.lrh.dlid == 0 || r.lrh.dlid >= kMulticastBase) {
    ++stats_.local_dropped;
    return;
  }
  relay_unicast(0, r.lrh.dlid, *pkt, false, 0);
}

// ---- sma::NodeModel -----------------------------------------------------

mad::PortInfo Switch::port_info(std::uint8_t port) const { return ports_.at(port).pi; }

sma::Status Switch::set_port_info(std::uint8_t port, const mad::PortInfo& next) {
  if (port >= ports_.size()) return mad::status::kInvalidAttrValue;
  Port& p = ports_[port];
  const mad::PortInfo prev = p.pi;
  p.pi = next;
  p.pi.local_port_num = port;
  if (port == 0) {  // port 0 is always up (IBA 17.2.1.2)
    p.pi.port_phys_state = prev.port_phys_state;
    if (next.port_state == static_cast<std::uint8_t>(mad::PortState::kDown))
      p.pi.port_state = static_cast<std::uint8_t>(mad::PortState::kInit);
    return mad::status::kOk;
  }
  // External ports: the SM may disable the physical link, re-enable it
  // (Polling), or take the logical link Down (it retrains, back in Init).
  const auto disabled = static_cast<std::uint8_t>(mad::PhysState::kDisabled);
  if (next.port_phys_state == disabled) {
    p.pi.port_state = static_cast<std::uint8_t>(mad::PortState::kDown);
    if (prev.port_phys_state != disabled) si_.port_state_change = true;
    return mad::status::kOk;
  }
  if (prev.port_phys_state == disabled) {  // re-enabled: trains if a cable is there
    const bool up = plugged_[port];
    p.pi.port_phys_state = static_cast<std::uint8_t>(up ? mad::PhysState::kLinkUp : mad::PhysState::kPolling);
    p.pi.port_state = static_cast<std::uint8_t>(up ? mad::PortState::kInit : mad::PortState::kDown);
    if (up) si_.port_state_change = true;
    return mad::status::kOk;
  }
  p.pi.port_phys_state = prev.port_phys_state;  // the SM does not make a link come up
  if (!link_up(port)) {
    p.pi.port_state = static_cast<std::uint8_t>(mad::PortState::kDown);
  } else if (next.port_state == static_cast<std::uint8_t>(mad::PortState::kDown)) {
    p.pi.port_state = static_cast<std::uint8_t>(mad::PortState::kInit);  // retrained at once
    si_.port_state_change = true;
  }
  return mad::status::kOk;
}

std::optional<mad::PKeyBlock> Switch::pkey_block(std::uint8_t port, std::uint16_t block) const {
  if (port >= ports_.size() || block != 0) return std::nullopt;
  return ports_[port].pkeys;
}

sma::Status Switch::set_pkey_block(std::uint8_t port, std::uint16_t block, const mad::PKeyBlock& v) {
  if (port >= ports_.size() || block != 0) return mad::status::kInvalidAttrValue;
  ports_[port].pkeys = v;
  return mad::status::kOk;
}

std::optional<mad::SlToVlTable> Switch::sl2vl(std::uint8_t in_port, std::uint8_t out_port) const {
  if (in_port >= ports_.size() || out_port >= ports_.size()) return std::nullopt;
  return ports_[out_port].sl2vl[in_port];
}

sma::Status Switch::set_sl2vl(std::uint8_t in_port, std::uint8_t out_port, const mad::SlToVlTable& v) {
  if (in_port >= ports_.size() || out_port >= ports_.size()) return mad::status::kInvalidAttrValue;
  ports_[out_port].sl2vl[in_port] = v;
  return mad::status::kOk;
}

std::optional<mad::VlArbBlock> Switch::vlarb(std::uint8_t port, std::uint8_t part) const {
  if (port >= ports_.size() || part < 1 || part > 4) return std::nullopt;
  return ports_[port].vlarb[part - 1];
}

sma::Status Switch::set_vlarb(std::uint8_t port, std::uint8_t part, const mad::VlArbBlock& v) {
  if (port >= ports_.size() || part < 1 || part > 4) return mad::status::kInvalidAttrValue;
  ports_[port].vlarb[part - 1] = v;
  return mad::status::kOk;
}

sma::Status Switch::set_switch_info(const mad::SwitchInfo& next) {
  mad::SwitchInfo n = next;
  // Capabilities are the switch's, not the SM's.
  n.linear_fdb_cap = si_.linear_fdb_cap;
  n.random_fdb_cap = si_.random_fdb_cap;
  n.multicast_fdb_cap = si_.multicast_fdb_cap;
  n.partition_enforcement_cap = si_.partition_enforcement_cap;
  n.enhanced_port0 = si_.enhanced_port0;
  if (n.linear_fdb_top >= kLftCap) return mad::status::kInvalidAttrValue;
  si_ = n;
  return mad::status::kOk;
}

std::optional<mad::LftBlock> Switch::lft_block(std::uint16_t block) const {
  if (static_cast<size_t>(block) * mad::kLftEntriesPerBlock >= lft_.size()) return std::nullopt;
  mad::LftBlock b;
  std::copy_n(lft_.begin() + block * mad::kLftEntriesPerBlock, b.size(), b.begin());
  return b;
}

sma::Status Switch::set_lft_block(std::uint16_t block, const mad::LftBlock& v) {
  if (static_cast<size_t>(block) * mad::kLftEntriesPerBlock >= lft_.size()) return mad::status::kInvalidAttrValue;
  std::copy(v.begin(), v.end(), lft_.begin() + block * mad::kLftEntriesPerBlock);
  return mad::status::kOk;
}

std::optional<mad::MftBlock> Switch::mft_block(std::uint16_t block, std::uint8_t position) const {
  if (static_cast<size_t>(block) * mad::kMftEntriesPerBlock >= mft_.size() || position * 16u >= ports_.size())
    return std::nullopt;
  mad::MftBlock b;
  for (size_t i = 0; i < b.size(); ++i) b[i] = mft_[block * mad::kMftEntriesPerBlock + i][position];
  return b;
}

sma::Status Switch::set_mft_block(std::uint16_t block, std::uint8_t position, const mad::MftBlock& v) {
  if (static_cast<size_t>(block) * mad::kMftEntriesPerBlock >= mft_.size() || position * 16u >= ports_.size())
    return mad::status::kInvalidAttrValue;
  for (size_t i = 0; i < v.size(); ++i) mft_[block * mad::kMftEntriesPerBlock + i][position] = v[i];
  return mad::status::kOk;
}

std::optional<sma::PortCounterValues> Switch::counters(std::uint8_t port) const {
  if (port >= ports_.size()) return std::nullopt;
  return ports_[port].ctr;
}

void Switch::reset_counters(std::uint8_t port, std::uint32_t counter_bits) {
  if (port < ports_.size()) sma::reset_counter_values(ports_[port].ctr, counter_bits);
}

}  // namespace openib::sim::fabric
