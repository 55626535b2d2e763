// simhca's subnet management agent, the device's firmware half of QP0
// (docs/simhca.md §14; IBA 14.2): SMPs arriving on a port — from its
// cable, or looped back from the driver's own QP0 — go through the shared
// SMA engine (src/sim/sma), which answers Get/Set of the CA's attributes
// over the node model below, or hands them to the driver's QP0 receive
// queue (responses, traps, SMInfo: where a subnet manager on this host reads
// them). The model keeps the port state machine of IBA 7.2 / 14.2.5.6 and
// raises the port events of §9.4.
#include <algorithm>

#include "mad/mad.hpp"
#include "mad/smp.hpp"
#include "sim/simhca/hca.hpp"
#include "sim/wire/packet.hpp"

namespace openib::simhca {

namespace w = sim::wire;
using SmaStatus = sim::sma::Status;

// §14.2: the node model of the engine (node_model.hpp) for this CA.
class Hca::CaNode final : public sim::sma::NodeModel {
 public:
  explicit CaNode(Hca& h) : h_(h) {}

  const sim::sma::NodeIdentity& identity() const override { return h_.identity_; }
  mad::PortInfo port_info(uint8_t port) const override { return h_.sma_port_info(port); }
  SmaStatus set_port_info(uint8_t port, const mad::PortInfo& next) override { return h_.sma_set_port_info(port, next); }

  // §14.4 P_KeyTable: one entry, the P_Key of §6.3 (pkey0).
  std::optional<mad::PKeyBlock> pkey_block(uint8_t port, uint16_t block) const override {
    if (block != 0) return std::nullopt;
    mad::PKeyBlock b{};
    b[0] = h_.port_at(port).info.pkey0;
    return b;
  }
  SmaStatus set_pkey_block(uint8_t port, uint16_t block, const mad::PKeyBlock& v) override {
    if (block != 0) return mad::status::kInvalidAttrValue;
    PortInfo& pi = h_.port_at(port).info;
    if (v[0] != pi.pkey0) {  // entries beyond PartitionCap are ignored (IBA 14.2.5.7)
      pi.pkey0 = v[0];
      h_.port_event(kEvPkeyChange, port);
    }
    return mad::status::kOk;
  }

  // §14.4 SLtoVLMappingTable and VLArbitrationTable: stored and reported;
  // with VLCap 1 everything travels on VL0 whatever the table says, except
  // that the table's VL is what goes into LRH.VL (§12.7).
  std::optional<mad::SlToVlTable> sl2vl(uint8_t, uint8_t out_port) const override {
    return h_.port_at(out_port).sma.sl2vl;
  }
  SmaStatus set_sl2vl(uint8_t, uint8_t out_port, const mad::SlToVlTable& v) override {
    // IBA 14.2.5.8: VL15 is no data VL; VLs beyond the operational ones are refused.
    for (uint8_t vl : v)
      if (vl >= kVlCap) return mad::status::kInvalidAttrValue;
    h_.port_at(out_port).sma.sl2vl = v;
    return mad::status::kOk;
  }
  std::optional<mad::VlArbBlock> vlarb(uint8_t port, uint8_t part) const override {
    return h_.port_at(port).sma.vlarb[(part - 1) & 3];
  }
  SmaStatus set_vlarb(uint8_t port, uint8_t part, const mad::VlArbBlock& v) override {
    h_.port_at(port).sma.vlarb[(part - 1) & 3] = v;
    return mad::status::kOk;
  }

  // §14.4 GUIDInfo: GUIDCap 1, entry 0 = the port GUID (read only: a Set
  // is answered with the table as it stays).
  std::optional<mad::GuidBlock> guid_block(uint8_t port, uint16_t block) const override {
    if (block != 0) return std::nullopt;
    mad::GuidBlock b{};
    b[0] = h_.port_at(port).info.port_guid;
    return b;
  }
  SmaStatus set_guid_block(uint8_t, uint16_t block, const mad::GuidBlock&) override {
    return block == 0 ? mad::status::kOk : mad::status::kInvalidAttrValue;
  }

  // §14.1: SMInfo goes to the driver's QP0 when one is ready to receive.
  bool has_sm() const override {
    for (uint8_t p = 1; p <= h_.opts_.caps.num_ports; ++p) {
      const Qp* qp = h_.tables_.qps.get(special_qpn(p, false));
      if (qp && qp->attrs.state >= kRtr && qp->attrs.state <= kSqe) return true;
    }
    return false;
  }

  // §15 PMA.
  std::optional<sim::sma::PortCounterValues> counters(uint8_t port) const override { return h_.port_at(port).pma; }
  void reset_counters(uint8_t port, uint32_t bits) override {
    sim::sma::reset_counter_values(h_.port_at(port).pma, bits);
  }

 private:
  Hca& h_;
};

Hca::~Hca() = default;

void Hca::init_agents() {
  sim::sma::NodeIdentity& id = identity_;
  id.type = mad::NodeType::kCa;
  id.num_ports = opts_.caps.num_ports;
  id.node_guid = opts_.caps.node_guid;
  id.system_image_guid = opts_.caps.node_guid;
  id.partition_cap = 1;  // §14.4: one P_Key per port
  id.device_id = kDeviceId;
  id.revision = kRevisionId;
  id.vendor_id = kVendorId;  // §2: the PCI vendor ID, as a 24-bit OUI
  id.description = opts_.node_desc.empty() ? fmt::format("simhca {:#018x}", opts_.caps.node_guid) : opts_.node_desc;
  if (id.description.size() > mad::kNodeDescriptionBytes) id.description.resize(mad::kNodeDescriptionBytes);
  node_ = std::make_unique<CaNode>(*this);
  sim::sma::SmaConfig sc;
  sc.resp_time_value = 8;  // 4.096 us x 2^8 ~ 1 ms: the device answers at once
  sma_ = std::make_unique<sim::sma::SmaEngine>(*node_, sc);
  sim::sma::PmaConfig pc;
  pc.resp_time_value = 8;
  pma_ = std::make_unique<sim::sma::PmaEngine>(*node_, pc);
}

// §14.2 power-on values of the SM-writable PortInfo fields.
void Hca::init_sma_port(uint8_t port) {
  Port& pt = port_at(port);
  pt.sma = SmaPortState{};
  mad::PortInfo& p = pt.sma.pi;
  p.link_width_enabled = kLinkWidthSupported;
  p.link_speed_enabled = kLinkSpeedSupported;
  p.link_down_default_state = 2;  // Polling
  p.operational_vls = 1;          // VL0
  p.vl_high_limit = 0;
  p.guid_cap = 1;
  p.resp_time_value = 8;
  p.subnet_timeout = 0;
  p.local_phy_errors = 8;
  p.overrun_errors = 8;
  p.hoq_life = 7;
}

// §14.2: PortInfo as the SM reads it: the live values of §6.3 over the
// stored SM-writable fields.
mad::PortInfo Hca::sma_port_info(uint8_t port) const {
  const Port& pt = port_at(port);
  const PortInfo& i = pt.info;
  mad::PortInfo p = pt.sma.pi;
  p.gid_prefix = i.gid_prefix;
  p.lid = i.lid;
  p.master_sm_lid = i.sm_lid;
  p.capability_mask = i.cap_flags;
  p.local_port_num = port;
  p.link_width_supported = kLinkWidthSupported;
  p.link_width_active = i.active_width;
  p.link_speed_supported = kLinkSpeedSupported;
  p.link_speed_active = i.active_speed;
  p.port_state = i.state;
  p.port_phys_state = i.phys_state;
  p.lmc = i.lmc;
  p.neighbor_mtu = i.active_mtu;  // IBA 14.2.5.6: the MTU the port sends with
  p.master_sm_sl = i.sm_sl;
  p.vl_cap = kVlCap;
  p.vl_arb_high_cap = kVlArbCap;
  p.vl_arb_low_cap = kVlArbCap;
  p.mtu_cap = i.max_mtu;
  p.pkey_violations = static_cast<uint16_t>(std::min<uint32_t>(i.pkey_violations, 0xffff));
  p.qkey_violations = static_cast<uint16_t>(std::min<uint32_t>(i.qkey_violations, 0xffff));
  p.client_reregister = false;  // IBA 14.2.5.6: a request, not a state
  return p;
}

// §14.3: the link goes down (a Set of PortState Down, or PortPhysicalState
// Polling/Disabled) and, with a cable (not pulled at its far end) and not
// disabled, trains again at once:
// the port comes back in Init (IBA 7.2, 14.2.5.6). The LID and the rest of
// the configuration stay.
void Hca::port_bounce(uint8_t port, bool disable) {
  Port& pt = port_at(port);
  const uint8_t was = pt.info.state;
  if (was != kPsDown) ++pt.pma.link_downed;  // IBA 16.1.3.5 LinkDownedCounter
  pt.info.state = kPsDown;
  pt.info.phys_state = disable ? kPhysDisabled : kPhysPolling;
  if (was != kPsDown) port_event_state(port, was, kPsDown);
  if (!disable && pt.can_train()) {
    pt.info.phys_state = kPhysLinkUp;
    pt.info.state = kPsInit;
    port_event_state(port, kPsDown, kPsInit);
  }
}

// §14.3: a Set(PortInfo) the engine has merged and validated (PortState
// transitions of IBA 14.2.5.6 Table 147: Down from any state, Armed from
// Init, Active from Armed; PhysState Polling or Disabled).
uint16_t Hca::sma_set_port_info(uint8_t port, const mad::PortInfo& n) {
  Port& pt = port_at(port);
  PortInfo& i = pt.info;
  if (n.lid >= 0xc000 && n.lid != 0) return mad::status::kInvalidAttrValue;  // IBA 14.2.5.6: unicast LIDs only
  if (n.master_sm_lid >= 0xc000 && n.master_sm_lid != 0) return mad::status::kInvalidAttrValue;
  if (n.neighbor_mtu < 1 || n.neighbor_mtu > i.max_mtu) return mad::status::kInvalidAttrValue;
  const PortInfo old = i;
  pt.sma.pi = n;
  i.lid = n.lid;
  i.lmc = n.lmc;
  i.sm_lid = n.master_sm_lid;
  i.sm_sl = n.master_sm_sl;
  i.gid_prefix = n.gid_prefix;
  i.active_mtu = n.neighbor_mtu;
  i.pkey_violations = n.pkey_violations;  // the SM may clear the counters
  i.qkey_violations = n.qkey_violations;
  // Port state machine (IBA 7.2).
  if (n.port_phys_state == kPhysDisabled && old.phys_state != kPhysDisabled) {
    port_bounce(port, true);
  } else if (n.port_phys_state == kPhysPolling && old.phys_state != kPhysPolling) {
    port_bounce(port, false);  // retrain (from LinkUp or Disabled)
  } else if (n.port_state == kPsDown && i.phys_state != kPhysDisabled) {
    port_bounce(port, false);
  } else if (n.port_state != old.state && (n.port_state == kPsArmed || n.port_state == kPsActive)) {
    i.state = n.port_state;
    port_event_state(port, old.state, i.state);
  }
  if (i.lid != old.lid || i.lmc != old.lmc) port_event_lid(port, i.lid);
  if (i.sm_lid != old.sm_lid || i.sm_sl != old.sm_sl) port_event(kEvSmChange, port);
  if (n.client_reregister) port_event(kEvClientReregister, port);
  if (i.gid_prefix != old.gid_prefix) port_event(kEvGidChange, port);
  return mad::status::kOk;
}

// §14.1: an SMP the driver sends on its QP0 that is for this very port: a
// directed route of hop count 0 (IBA 14.2.2.2: the DR part is this node
// alone). LID-routed SMPs to the port's own LID are caught by the general
// loopback (for_own_port).
bool Hca::smi_is_local(uint8_t, std::span<const std::byte> mad, uint16_t) const {
  return mad.size() >= mad::kMadBytes && mad::mad_class(mad) == mad::mgmt_class::kSubnDirected &&
         mad::smp_hop_cnt(mad) == 0 && !mad::smp_direction(mad);
}

// §14.1 what arrives for QP0 (IBA 14.2.1: SMPs on VL15, to the permissive
// LID or the port's own, no P_Key or Q_Key check).
void Hca::receive_smp(uint8_t port, const w::ParsedPacket& p, bool local) {
  Port& pt = port_at(port);
  if (p.hdr.lrh.vl != 15) {  // IBA 7.6.5: QP0 takes VL15 only
    ++dstats_.rx_bad_vl;
    ++dstats_.smps_dropped;
    return;
  }
  if (pt.info.state < kPsInit) {
    ++dstats_.rx_port_down;
    return;
  }
  const uint16_t dlid = p.hdr.lrh.dlid;
  if (dlid != kPermissiveLid && !for_own_port(port, dlid)) {
    ++dstats_.rx_bad_dlid;
    ++dstats_.smps_dropped;
    return;
  }
  if (!p.hdr.deth || p.hdr.bth.opcode != w::opcode(w::Transport::kUd, w::Op::kSendOnly) ||
      p.payload.size() != mad::kMadBytes) {
    ++dstats_.rx_malformed;
    ++dstats_.smps_dropped;
    return;
  }
  const uint64_t mkey_before = sma_->stats().mkey_violations;
  const uint64_t key = mad::smp_mkey(p.payload);
  const sim::sma::SmpAction a = sma_->handle_smp(p.payload, port, p.hdr.lrh.slid, now_);
  const uint64_t violations = sma_->stats().mkey_violations - mkey_before;
  dstats_.mkey_violations += violations;
  // IBA 14.2.4.2 M_Key lease: a violation starts the timer (if a lease
  // period is set and it is not running); an SMP with the right key stops it.
  mad::PortInfo& spi = pt.sma.pi;
  if (spi.mkey != 0 && key == spi.mkey) pt.sma.lease_end.reset();
  else if (violations && spi.mkey_lease_period != 0 && !pt.sma.lease_end)
    pt.sma.lease_end = now_ + std::chrono::seconds(spi.mkey_lease_period);
  if (a.trap) send_smp(port, a.trap->mad, a.trap->dlid, 0, false, nullptr);  // trap 256 to the SM
  switch (a.kind) {
    case sim::sma::SmpActionKind::kReply:
      ++dstats_.smps_answered;
      send_smp(port, a.out.mad, a.out.dlid, p.hdr.deth->src_qp, local, &p);
      return;
    case sim::sma::SmpActionKind::kDeliverLocal:
      if (deliver_to_qp(0, port, p, a.out.mad)) {
        ++dstats_.smps_to_driver;
      } else {
        ++dstats_.smps_dropped;
        ++pt.pma.vl15_dropped;  // IBA 16.1.3.5 VL15Dropped: nobody to take the SMP
      }
      return;
    case sim::sma::SmpActionKind::kForward:  // a CA relays nothing (IBA 14.2.2)
    case sim::sma::SmpActionKind::kDrop:
      ++dstats_.smps_dropped;
      log_->debug("simhca: port {}: SMP {} dropped: {}", port, mad::smp_attr_name(mad::mad_attr_id(p.payload)),
                  a.kind == sim::sma::SmpActionKind::kDrop ? a.reason : "forward");
      return;
  }
}

// §14.6: traps the SM has not repressed are sent again; §14.5: M_Key
// leases that ran out drop the port's protection (IBA 14.2.4.2).
void Hca::trap_tick() {
  for (uint8_t n = 1; n <= opts_.caps.num_ports; ++n) {
    SmaPortState& st = port_at(n).sma;
    if (st.lease_end && *st.lease_end <= now_) {
      st.lease_end.reset();
      st.pi.mkey_protect_bits = 0;
      log_->info("simhca: port {}: M_Key lease expired, protection off", n);
    }
  }
  if (!sma_->traps_outstanding()) return;
  for (const sim::sma::Outgoing& o : sma_->trap_resends(now_))
    send_smp(o.out_port ? o.out_port : 1, o.mad, o.dlid, 0, false, nullptr);
}

}  // namespace openib::simhca
