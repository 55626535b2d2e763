// The SMA engine: SMP receipt, directed route, M_Key, Get/Set dispatch,
// traps (IBA 14.2.2 - 14.2.5). See engine.hpp and docs/mad.md.
#include <algorithm>

#include "mad/sma_attrs.hpp"
#include "sim/sma/engine.hpp"

namespace openib::sim::sma {

using namespace openib::mad;

namespace {

constexpr std::uint16_t kOk = status::kOk;
constexpr std::uint16_t kUnsupported = status::kMethodAttrUnsupported;
constexpr std::uint16_t kInvalid = status::kInvalidAttrValue;

SmpAction drop_action(std::string_view why) {
  SmpAction a;
  a.kind = SmpActionKind::kDrop;
  a.reason = why;
  return a;
}

bool valid_port_state_set(std::uint8_t cur, std::uint8_t req) {
  // IBA 14.2.5.6 Table 146/147: PortState written by the SM.
  switch (static_cast<PortState>(req)) {
    case PortState::kNoChange: return true;
    case PortState::kDown: return true;
    case PortState::kArmed: return cur == static_cast<std::uint8_t>(PortState::kInit) ||
                                   cur == static_cast<std::uint8_t>(PortState::kArmed);
    case PortState::kActive: return cur == static_cast<std::uint8_t>(PortState::kArmed) ||
                                    cur == static_cast<std::uint8_t>(PortState::kActive);
    default: return false;  // Init cannot be set; 5..15 reserved
  }
}

}  // namespace

struct SmaEngineAccess {
  SmaEngine& e;

  bool is_switch() const { return e.model_.identity().type == NodeType::kSwitch; }
  std::uint8_t num_ports() const { return e.model_.identity().num_ports; }
  // The port whose PortInfo holds the M_Key and MasterSMLID (IBA 14.2.4):
  // a switch's port 0, a CA's receiving port.
  std::uint8_t mgmt_port(std::uint8_t in_port) const { return is_switch() ? 0 : in_port; }

  // ---- M_Key, IBA 14.2.4.1 ----
  enum class MKey { kPass, kPassHideKey, kFail };
  MKey check_mkey(ConstBytes smp, std::uint8_t in_port) const {
    if (!e.cfg_.mkey_checks) return MKey::kPass;
    const std::uint8_t p = mgmt_port(in_port);
    PortInfo pi = e.model_.port_info(p);
    if (pi.mkey == 0) return MKey::kPass;
    if (smp_mkey(smp) == pi.mkey) {
      // IBA 14.2.4.2: a matching M_Key stops the lease timer.
      std::erase_if(e.leases_, [&](const auto& l) { return l.first == p; });
      return MKey::kPass;
    }
    std::uint8_t m = mad_method(smp);
    if (m == method::kGet) {
      if (pi.mkey_protect_bits == 0) return MKey::kPass;
      if (pi.mkey_protect_bits == 1) return MKey::kPassHideKey;
    }
    return MKey::kFail;
  }

  SmpAction mkey_violation(ConstBytes smp, std::uint8_t in_port, std::chrono::steady_clock::time_point now) {
    ++e.stats_.mkey_violations;
    std::uint8_t p = mgmt_port(in_port);
    PortInfo pi = e.model_.port_info(p);
    // IBA 14.2.4.2: a failed check starts the lease timer (if not running);
    // when it expires the protection bits are cleared (tick()).
    if (pi.mkey_lease_period != 0 &&
        std::none_of(e.leases_.begin(), e.leases_.end(), [&](const auto& l) { return l.first == p; }))
      e.leases_.emplace_back(p, now + std::chrono::seconds(pi.mkey_lease_period));
    if (pi.mkey_violations != 0xFFFF) {
      pi.mkey_violations = static_cast<std::uint16_t>(pi.mkey_violations + 1);
      (void)e.model_.set_port_info(p, pi);
    }
    SmpAction a = drop_action("M_Key violation");
    if (e.cfg_.trap_on_mkey_violation) {
      Notice n = make_trap_256(pi.lid, pi.lid, mad_method(smp), mad_attr_id(smp), mad_attr_mod(smp), smp_mkey(smp));
      n.producer_type = static_cast<std::uint32_t>(e.model_.identity().type);
      a.trap = e.send_trap(n, is_switch() ? 0 : in_port, now);
    }
    return a;
  }

  // ---- attributes: each fills `data` (64 bytes) and returns a status ----
  std::uint16_t node_info(MutBytes data, std::uint8_t in_port) {
    const NodeIdentity& id = e.model_.identity();
    NodeInfo ni;
    ni.base_version = kBaseVersion;
    ni.class_version = kSmpClassVersion;
    ni.node_type = static_cast<std::uint8_t>(id.type);
    ni.num_ports = id.num_ports;
    ni.system_image_guid = id.system_image_guid;
    ni.node_guid = id.node_guid;
    ni.port_guid = e.model_.port_guid(is_switch() ? 0 : in_port);
    ni.partition_cap = id.partition_cap;
    ni.device_id = id.device_id;
    ni.revision = id.revision;
    ni.local_port_num = in_port;
    ni.vendor_id = id.vendor_id & 0xFFFFFF;
    encode_node_info(data, ni);
    return kOk;
  }

  // PortInfo modifier -> port (IBA 14.2.5.6: a CA's 0 = the receiving port).
  std::optional<std::uint8_t> port_of(std::uint32_t mod, std::uint8_t in_port) const {
    if (mod > 0xFF) return std::nullopt;
    auto p = static_cast<std::uint8_t>(mod);
    if (!is_switch() && p == 0) p = in_port;
    if (p > num_ports()) return std::nullopt;
    return p;
  }

  void put_port_info(MutBytes data, std::uint8_t port, std::uint8_t in_port, bool hide_key) {
    PortInfo pi = e.model_.port_info(port);
    pi.local_port_num = in_port;
    if (hide_key) pi.mkey = 0;
    encode_port_info(data, pi);
  }

  // IBA 14.2.5.6: merge the writable fields of a Set into the current value,
  // validating each; nullopt = some value invalid (nothing applied).
  std::optional<PortInfo> merge_port_info(const PortInfo& cur, const PortInfo& req) const {
    PortInfo n = cur;
    n.mkey = req.mkey;
    n.gid_prefix = req.gid_prefix;
    n.lid = req.lid;
    n.master_sm_lid = req.master_sm_lid;
    n.mkey_lease_period = req.mkey_lease_period;
    if (req.link_width_enabled == 0xFF) {
      n.link_width_enabled = cur.link_width_supported;
    } else if (req.link_width_enabled != 0) {
      if (req.link_width_enabled & ~cur.link_width_supported) return std::nullopt;
      n.link_width_enabled = req.link_width_enabled;
    }
    if (!valid_port_state_set(cur.port_state, req.port_state)) return std::nullopt;
    if (req.port_state != 0) n.port_state = req.port_state;
    switch (static_cast<PhysState>(req.port_phys_state)) {
      case PhysState::kNoChange: break;
      case PhysState::kPolling:
      case PhysState::kDisabled: n.port_phys_state = req.port_phys_state; break;
      default: return std::nullopt;
    }
    if (req.link_down_default_state > 2) return std::nullopt;  // 0 no change, 1 sleep, 2 polling
    if (req.link_down_default_state != 0) n.link_down_default_state = req.link_down_default_state;
    n.mkey_protect_bits = req.mkey_protect_bits;
    n.lmc = req.lmc;
    if (req.link_speed_enabled == 0xF) {
      n.link_speed_enabled = cur.link_speed_supported;
    } else if (req.link_speed_enabled != 0) {
      if (req.link_speed_enabled & ~cur.link_speed_supported) return std::nullopt;
      n.link_speed_enabled = req.link_speed_enabled;
    }
    if (req.neighbor_mtu != 0) {  // 0: keep (lenient; the spec reserves 0)
      if (req.neighbor_mtu > 5 || (cur.mtu_cap != 0 && req.neighbor_mtu > cur.mtu_cap)) return std::nullopt;
      n.neighbor_mtu = req.neighbor_mtu;
    }
    n.master_sm_sl = req.master_sm_sl;
    n.vl_high_limit = req.vl_high_limit;
    n.init_type_reply = req.init_type_reply;
    n.vl_stall_count = req.vl_stall_count;
    n.hoq_life = req.hoq_life;
    if (req.operational_vls != 0) {  // 0 = no change
      if (req.operational_vls > 5 || (cur.vl_cap != 0 && req.operational_vls > cur.vl_cap)) return std::nullopt;
      n.operational_vls = req.operational_vls;
    }
    n.partition_enforcement_inbound = req.partition_enforcement_inbound;
    n.partition_enforcement_outbound = req.partition_enforcement_outbound;
    n.filter_raw_inbound = req.filter_raw_inbound;
    n.filter_raw_outbound = req.filter_raw_outbound;
    n.mkey_violations = req.mkey_violations;
    n.pkey_violations = req.pkey_violations;
    n.qkey_violations = req.qkey_violations;
    n.client_reregister = req.client_reregister;
    n.mcast_pkey_trap_suppression = req.mcast_pkey_trap_suppression;
    n.subnet_timeout = req.subnet_timeout;
    n.local_phy_errors = req.local_phy_errors;
    n.overrun_errors = req.overrun_errors;
    if (req.link_speed_ext_enabled != 0) n.link_speed_ext_enabled = req.link_speed_ext_enabled;
    return n;
  }

  std::uint16_t port_info(MutBytes data, bool set, std::uint32_t mod, std::uint8_t in_port, bool hide_key) {
    auto port = port_of(mod, in_port);
    if (!port) return kInvalid;
    std::uint16_t st = kOk;
    if (set) {
      auto req = decode_port_info(data);
      if (!req) return kInvalid;
      auto next = merge_port_info(e.model_.port_info(*port), *req);
      if (!next) {
        st = kInvalid;
      } else {
        st = e.model_.set_port_info(*port, *next);
      }
    }
    put_port_info(data, *port, in_port, hide_key);
    return st;
  }

  std::uint16_t pkey_table(MutBytes data, bool set, std::uint32_t mod, std::uint8_t in_port) {
    auto block = static_cast<std::uint16_t>(mod & 0xFFFF);
    std::uint8_t port = in_port;  // a CA: its receiving port; bits 31:16 ignored (smpquery sets them)
    std::size_t cap = e.model_.identity().partition_cap;
    if (is_switch()) {
      if ((mod >> 16) > num_ports()) return kInvalid;
      port = static_cast<std::uint8_t>(mod >> 16);
      // External ports: SwitchInfo:PartitionEnforcementCap entries (IBA 14.2.5.4).
      if (auto si = e.model_.switch_info(); port != 0 && si && si->partition_enforcement_cap != 0)
        cap = si->partition_enforcement_cap;
    }
    if (std::size_t{block} * kPKeysPerBlock >= std::max<std::size_t>(cap, 1)) return kInvalid;
    std::uint16_t st = kOk;
    if (set) {
      auto v = decode_pkey_block(data);
      st = v ? e.model_.set_pkey_block(port, block, *v) : kInvalid;
    }
    auto cur = e.model_.pkey_block(port, block);
    if (!cur) return kInvalid;
    encode_pkey_block(data, *cur);
    return st;
  }

  // The Set-then-Get of a table attribute block: a Set decodes and stores
  // the block (undecodable or refused: kInvalid; a table the model does not
  // have: kUnsupported, answered at once); then the block as it now is
  // answers, or `missing` when the model has no such block.
  template <class Decode, class Store, class Load, class Encode>
  static std::uint16_t table_block(MutBytes data, bool set, Decode decode, Store store, Load load, Encode encode,
                                   std::uint16_t missing = kUnsupported) {
    std::uint16_t st = kOk;
    if (set) {
      auto v = decode(data);
      st = v ? store(*v) : kInvalid;
      if (st == kUnsupported) return st;
    }
    auto cur = load();
    if (!cur) return missing;
    encode(data, *cur);
    return st;
  }

  std::uint16_t sl2vl(MutBytes data, bool set, std::uint32_t mod, std::uint8_t in_port) {
    std::uint8_t in = 0, out = in_port;
    if (is_switch()) {
      in = static_cast<std::uint8_t>(mod >> 8);
      out = static_cast<std::uint8_t>(mod);
      if ((mod >> 16) != 0 || in > num_ports() || out > num_ports()) return kInvalid;
    }
    return table_block(
        data, set, [&](ConstBytes d) { return decode_sl2vl(d); },
        [&](const auto& v) { return e.model_.set_sl2vl(in, out, v); }, [&] { return e.model_.sl2vl(in, out); },
        [&](MutBytes d, const auto& v) { encode_sl2vl(d, v); });
  }

  std::uint16_t vlarb(MutBytes data, bool set, std::uint32_t mod, std::uint8_t in_port) {
    auto part = static_cast<std::uint8_t>(mod >> 16);
    if (part < 1 || part > 4 || (mod >> 16) > 4) return kInvalid;
    std::uint8_t port = in_port;
    if (is_switch()) {
      if ((mod & 0xFFFF) > num_ports()) return kInvalid;
      port = static_cast<std::uint8_t>(mod & 0xFFFF);
    }
    return table_block(
        data, set, [&](ConstBytes d) { return decode_vlarb_block(d); },
        [&](const auto& v) { return e.model_.set_vlarb(port, part, v); }, [&] { return e.model_.vlarb(port, part); },
        [&](MutBytes d, const auto& v) { encode_vlarb_block(d, v); });
  }

  std::uint16_t guid_info(MutBytes data, bool set, std::uint32_t mod, std::uint8_t in_port) {
    std::uint8_t port = is_switch() ? 0 : in_port;
    PortInfo pi = e.model_.port_info(port);
    if (mod > 0xFFFF) return kInvalid;
    auto block = static_cast<std::uint16_t>(mod);
    if (pi.guid_cap != 0 && std::size_t{block} * kGuidsPerBlock >= pi.guid_cap) return kInvalid;
    return table_block(
        data, set, [&](ConstBytes d) { return decode_guid_block(d); },
        [&](const auto& v) { return e.model_.set_guid_block(port, block, v); }, [&] { return e.model_.guid_block(port, block); },
        [&](MutBytes d, const auto& v) { encode_guid_block(d, v); }, block == 0 ? kUnsupported : kInvalid);
  }

  std::uint16_t switch_info(MutBytes data, bool set) {
    auto cur = e.model_.switch_info();
    if (!cur) return kUnsupported;
    std::uint16_t st = kOk;
    if (set) {
      auto req = decode_switch_info(data);
      if (!req) return kInvalid;
      // IBA 14.2.5.4: the SM-writable fields.
      SwitchInfo n = *cur;
      n.linear_fdb_top = req->linear_fdb_top;
      n.default_port = req->default_port;
      n.default_mcast_primary_port = req->default_mcast_primary_port;
      n.default_mcast_not_primary_port = req->default_mcast_not_primary_port;
      n.life_time_value = req->life_time_value;
      if (req->port_state_change) n.port_state_change = false;  // write 1 to clear
      n.multicast_fdb_top = req->multicast_fdb_top;
      if (n.linear_fdb_top >= kMulticastLidBase) {  // a unicast LID bound
        st = kInvalid;
      } else {
        st = e.model_.set_switch_info(n);
      }
      cur = e.model_.switch_info();
      if (!cur) return kUnsupported;
    }
    encode_switch_info(data, *cur);
    return st;
  }

  std::uint16_t lft(MutBytes data, bool set, std::uint32_t mod) {
    auto si = e.model_.switch_info();
    if (!si) return kUnsupported;
    if (mod > 0xFFFF) return kInvalid;
    auto block = static_cast<std::uint16_t>(mod);
    if (std::size_t{block} * kLftEntriesPerBlock >= std::max<std::size_t>(si->linear_fdb_cap, 1)) return kInvalid;
    return table_block(
        data, set, [&](ConstBytes d) { return decode_lft_block(d); },
        [&](const auto& v) { return e.model_.set_lft_block(block, v); }, [&] { return e.model_.lft_block(block); },
        [&](MutBytes d, const auto& v) { encode_lft_block(d, v); });
  }

  std::uint16_t mft(MutBytes data, bool set, std::uint32_t mod) {
    auto si = e.model_.switch_info();
    if (!si) return kUnsupported;
    std::uint8_t pos = mft_position(mod);
    std::uint16_t block = mft_block(mod);
    if ((mod & 0x0FFFFE00u) != 0) return kInvalid;
    if (std::size_t{pos} * 16 > num_ports()) return kInvalid;
    if (std::size_t{block} * kMftEntriesPerBlock >= std::max<std::size_t>(si->multicast_fdb_cap, 1)) return kInvalid;
    return table_block(
        data, set, [&](ConstBytes d) { return decode_mft_block(d); },
        [&](const auto& v) { return e.model_.set_mft_block(block, pos, v); }, [&] { return e.model_.mft_block(block, pos); },
        [&](MutBytes d, const auto& v) { encode_mft_block(d, v); });
  }

  // Dispatch of one Get/Set at this node's SMA (IBA 14.2.5 Table 145).
  std::uint16_t dispatch(Mad& m, std::uint8_t in_port, bool hide_key) {
    const std::uint8_t meth = mad_method(m);
    const bool set = meth == method::kSet;
    const std::uint32_t mod = mad_attr_mod(m);
    MutBytes data = smp_data(MutBytes(m));
    switch (mad_attr_id(m)) {
      case attr::kNodeDescription:
        if (set) return kUnsupported;
        encode_node_description(data, e.model_.identity().description);
        return kOk;
      case attr::kNodeInfo:
        if (set) return kUnsupported;
        return node_info(data, in_port);
      case attr::kPortInfo: return port_info(data, set, mod, in_port, hide_key);
      case attr::kPKeyTable: return pkey_table(data, set, mod, in_port);
      case attr::kSlToVlTable: return sl2vl(data, set, mod, in_port);
      case attr::kVlArbTable: return vlarb(data, set, mod, in_port);
      case attr::kGuidInfo: return guid_info(data, set, mod, in_port);
      case attr::kSwitchInfo:
        if (!is_switch()) return kUnsupported;
        return switch_info(data, set);
      case attr::kLinearFwdTable:
        if (!is_switch()) return kUnsupported;
        return lft(data, set, mod);
      case attr::kMulticastFwdTable:
        if (!is_switch()) return kUnsupported;
        return mft(data, set, mod);
      default: return kUnsupported;
    }
  }

  // Turn `m` (the request as received, DR fields already updated by
  // dr_receive) into the response and address it.
  SmpAction reply(Mad& m, std::uint16_t st, std::uint8_t in_port, std::uint16_t slid) {
    smp_make_response(m, st);
    SmpAction a;
    a.kind = SmpActionKind::kReply;
    if (st == status::kMethodUnsupported || st == kUnsupported) ++e.stats_.unsupported;
    if (st == kInvalid) ++e.stats_.invalid_value;
    if (mad_class(m) == mgmt_class::kSubnDirected) {
      DrDecision d = dr_send(m, is_switch(), in_port);
      switch (d.action) {
        case DrAction::kForward:
          a.out = Outgoing{m, d.port, kPermissiveLid};
          break;
        case DrAction::kLidRoute:
          a.out = Outgoing{m, static_cast<std::uint8_t>(is_switch() ? 0 : in_port), d.lid != 0 ? d.lid : slid};
          break;
        case DrAction::kLocal:
          a.kind = SmpActionKind::kDeliverLocal;  // HopCount 0: the SM is on this very node
          a.out = Outgoing{m, in_port, kPermissiveLid};
          ++e.stats_.delivered;
          return a;
        case DrAction::kDrop:
          ++e.stats_.dropped;
          return drop_action(dr_drop_name(d.reason));
      }
    } else {
      a.out = Outgoing{m, static_cast<std::uint8_t>(is_switch() ? 0 : in_port), slid};
    }
    ++e.stats_.replied;
    return a;
  }

  SmpAction deliver(const Mad& m, std::uint8_t in_port) {
    ++e.stats_.delivered;
    SmpAction a;
    a.kind = SmpActionKind::kDeliverLocal;
    a.out = Outgoing{m, in_port, 0};
    return a;
  }

  SmpAction trap_repress(const Mad& m) {
    std::uint64_t tid = mad_tid(m);
    auto it = std::find_if(e.traps_.begin(), e.traps_.end(), [&](const auto& t) { return t.tid == tid; });
    if (it == e.traps_.end()) {
      ++e.stats_.dropped;
      return drop_action("TrapRepress for no outstanding trap");
    }
    e.traps_.erase(it);
    ++e.stats_.traps_repressed;
    SmpAction a;
    a.kind = SmpActionKind::kDrop;
    a.reason = "TrapRepress consumed";
    return a;
  }
};

SmaEngine::SmaEngine(NodeModel& model, SmaConfig cfg) : model_(model), cfg_(cfg) {}

SmpAction SmaEngine::handle_smp(ConstBytes smp, std::uint8_t in_port, std::uint16_t slid,
                                std::chrono::steady_clock::time_point now) {
  SmaEngineAccess x{*this};
  tick(now);
  ++stats_.received;
  auto dropped = [&](std::string_view why) {
    ++stats_.dropped;
    return drop_action(why);
  };
  if (smp.size() < kMadBytes) return dropped("short SMP");
  Mad m{};
  std::copy_n(smp.begin(), kMadBytes, m.begin());
  const std::uint8_t cls = mad_class(m);
  if (!is_smp_class(cls)) return dropped("not a subnet-management class");
  if (get8(m, 0) != kBaseVersion) {  // IBA 13.4.7: unknown format, cannot answer
    ++stats_.bad_version;
    return dropped("bad base version");
  }
  if (in_port == 0 || in_port > x.num_ports()) return dropped("arrival port out of range");

  if (cls == mgmt_class::kSubnDirected) {
    DrDecision d = dr_receive(m, x.is_switch(), in_port, x.num_ports());
    switch (d.action) {
      case DrAction::kDrop: return dropped(dr_drop_name(d.reason));
      case DrAction::kForward: {
        ++stats_.forwarded;
        SmpAction a;
        a.kind = SmpActionKind::kForward;
        a.out = Outgoing{m, d.port, kPermissiveLid};
        return a;
      }
      case DrAction::kLidRoute: {
        ++stats_.forwarded;
        SmpAction a;
        a.kind = SmpActionKind::kForward;
        a.out = Outgoing{m, 0, d.lid};
        return a;
      }
      case DrAction::kLocal: break;
    }
  }

  const std::uint8_t meth = mad_method(m);
  // Responses, traps and reports are for an SM on this node (IBA 13.5.1).
  if (is_response(meth) || meth == method::kTrap || meth == method::kReport) return x.deliver(m, in_port);
  if (meth == method::kTrapRepress) return x.trap_repress(m);

  if (get8(m, 2) != kSmpClassVersion) {
    ++stats_.bad_version;
    return x.reply(m, status::kBadVersion, in_port, slid);
  }
  if (meth != method::kGet && meth != method::kSet) return x.reply(m, status::kMethodUnsupported, in_port, slid);

  auto mk = x.check_mkey(m, in_port);
  if (mk == SmaEngineAccess::MKey::kFail) {
    ++stats_.dropped;
    return x.mkey_violation(m, in_port, now);
  }
  if (mad_attr_id(m) == attr::kSmInfo) {
    if (model_.has_sm()) return x.deliver(m, in_port);
    return x.reply(m, status::kMethodAttrUnsupported, in_port, slid);
  }
  std::uint16_t st = x.dispatch(m, in_port, mk == SmaEngineAccess::MKey::kPassHideKey);
  return x.reply(m, st, in_port, slid);
}

std::optional<Outgoing> SmaEngine::send_trap(const Notice& notice, std::uint8_t port,
                                             std::chrono::steady_clock::time_point now) {
  const bool sw = model_.identity().type == NodeType::kSwitch;
  if (port > model_.identity().num_ports || (!sw && port == 0)) return std::nullopt;
  PortInfo pi = model_.port_info(sw ? 0 : port);
  if (pi.master_sm_lid == 0) return std::nullopt;
  // IBA 14.2.5.1: Trap(Notice), LID routed to the SM, with the port's M_Key.
  SmpRequest r;
  r.directed = false;
  r.method = method::kTrap;
  r.attr_id = attr::kNotice;
  r.tid = next_tid_++;
  r.mkey = pi.mkey;
  Notice n = notice;
  if (n.issuer_lid == 0) n.issuer_lid = pi.lid;
  n.notice_count = notice_count_;
  notice_count_ = static_cast<std::uint16_t>((notice_count_ + 1) & 0x7FFF);
  Mad m = make_smp(r);
  encode_notice(smp_data(MutBytes(m)), n);
  Outgoing out{m, static_cast<std::uint8_t>(sw ? 0 : port), pi.master_sm_lid};
  ++stats_.traps_sent;
  if (cfg_.trap_max_sends > 1) {
    if (traps_.size() >= 64) traps_.pop_front();  // bounded: oldest given up
    traps_.push_back(PendingTrap{out, r.tid, 1, now + cfg_.trap_resend_interval});
  }
  return out;
}

std::optional<Outgoing> SmaEngine::send_trap_128(std::chrono::steady_clock::time_point now) {
  if (model_.identity().type != NodeType::kSwitch) return std::nullopt;
  PortInfo pi = model_.port_info(0);
  return send_trap(make_trap_128(pi.lid, pi.lid), 0, now);
}

void SmaEngine::tick(std::chrono::steady_clock::time_point now) {
  for (auto it = leases_.begin(); it != leases_.end();) {
    if (now < it->second) {
      ++it;
      continue;
    }
    PortInfo pi = model_.port_info(it->first);
    pi.mkey_protect_bits = 0;  // IBA 14.2.4.2: lease expired, protection off
    (void)model_.set_port_info(it->first, pi);
    it = leases_.erase(it);
  }
}

std::vector<Outgoing> SmaEngine::trap_resends(std::chrono::steady_clock::time_point now) {
  tick(now);
  std::vector<Outgoing> out;
  for (auto it = traps_.begin(); it != traps_.end();) {
    if (now < it->next) {
      ++it;
      continue;
    }
    if (it->sends >= cfg_.trap_max_sends) {
      it = traps_.erase(it);
      continue;
    }
    ++it->sends;
    it->next = now + cfg_.trap_resend_interval;
    ++stats_.traps_sent;
    out.push_back(it->out);
    ++it;
  }
  return out;
}

}  // namespace openib::sim::sma
