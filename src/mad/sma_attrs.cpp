// SMP attribute codecs, IBA 14.2.5. Each field is (bit offset, bit length)
// as in the IBA attribute tables (bit 0 = MSB of byte 0).
#include "mad/sma_attrs.hpp"

#include <algorithm>

namespace openib::mad {
// ---- NodeInfo, IBA 14.2.5.3 Table 135 ----------------------------------
void encode_node_info(MutBytes out, const NodeInfo& v) {
  zero(out, kNodeInfoBytes);
  put_bits(out, 0, 8, v.base_version);
  put_bits(out, 8, 8, v.class_version);
  put_bits(out, 16, 8, v.node_type);
  put_bits(out, 24, 8, v.num_ports);
  put_bits(out, 32, 64, v.system_image_guid);
  put_bits(out, 96, 64, v.node_guid);
  put_bits(out, 160, 64, v.port_guid);
  put_bits(out, 224, 16, v.partition_cap);
  put_bits(out, 240, 16, v.device_id);
  put_bits(out, 256, 32, v.revision);
  put_bits(out, 288, 8, v.local_port_num);
  put_bits(out, 296, 24, v.vendor_id);
}

Result<NodeInfo> decode_node_info(ConstBytes in) {
  if (auto r = need(in, kNodeInfoBytes, "NodeInfo"); !r) return r.take_error();
  NodeInfo v;
  v.base_version = bits<std::uint8_t>(in, 0, 8);
  v.class_version = bits<std::uint8_t>(in, 8, 8);
  v.node_type = bits<std::uint8_t>(in, 16, 8);
  v.num_ports = bits<std::uint8_t>(in, 24, 8);
  v.system_image_guid = get_bits(in, 32, 64);
  v.node_guid = get_bits(in, 96, 64);
  v.port_guid = get_bits(in, 160, 64);
  v.partition_cap = bits<std::uint16_t>(in, 224, 16);
  v.device_id = bits<std::uint16_t>(in, 240, 16);
  v.revision = bits<std::uint32_t>(in, 256, 32);
  v.local_port_num = bits<std::uint8_t>(in, 288, 8);
  v.vendor_id = bits<std::uint32_t>(in, 296, 24);
  return v;
}

// ---- NodeDescription, IBA 14.2.5.2 -------------------------------------
void encode_node_description(MutBytes out, std::string_view text) {
  zero(out, kNodeDescriptionBytes);
  std::size_t n = std::min({text.size(), kNodeDescriptionBytes, out.size()});
  for (std::size_t i = 0; i < n; ++i) out[i] = std::byte(static_cast<std::uint8_t>(text[i]));
}

Result<std::string> decode_node_description(ConstBytes in) {
  if (auto r = need(in, kNodeDescriptionBytes, "NodeDescription"); !r) return r.take_error();
  std::string s;
  for (std::size_t i = 0; i < kNodeDescriptionBytes; ++i) {
    auto c = std::to_integer<char>(in[i]);
    if (c == '\0') break;
    s.push_back(c);
  }
  return s;
}

// ---- PortInfo, IBA 14.2.5.6 Table 146 ----------------------------------
void encode_port_info(MutBytes out, const PortInfo& v) {
  zero(out, kPortInfoBytes);
  put_bits(out, 0, 64, v.mkey);
  put_bits(out, 64, 64, v.gid_prefix);
  put_bits(out, 128, 16, v.lid);
  put_bits(out, 144, 16, v.master_sm_lid);
  put_bits(out, 160, 32, v.capability_mask);
  put_bits(out, 192, 16, v.diag_code);
  put_bits(out, 208, 16, v.mkey_lease_period);
  put_bits(out, 224, 8, v.local_port_num);
  put_bits(out, 232, 8, v.link_width_enabled);
  put_bits(out, 240, 8, v.link_width_supported);
  put_bits(out, 248, 8, v.link_width_active);
  put_bits(out, 256, 4, v.link_speed_supported);
  put_bits(out, 260, 4, v.port_state);
  put_bits(out, 264, 4, v.port_phys_state);
  put_bits(out, 268, 4, v.link_down_default_state);
  put_bits(out, 272, 2, v.mkey_protect_bits);
  put_bits(out, 277, 3, v.lmc);
  put_bits(out, 280, 4, v.link_speed_active);
  put_bits(out, 284, 4, v.link_speed_enabled);
  put_bits(out, 288, 4, v.neighbor_mtu);
  put_bits(out, 292, 4, v.master_sm_sl);
  put_bits(out, 296, 4, v.vl_cap);
  put_bits(out, 300, 4, v.init_type);
  put_bits(out, 304, 8, v.vl_high_limit);
  put_bits(out, 312, 8, v.vl_arb_high_cap);
  put_bits(out, 320, 8, v.vl_arb_low_cap);
  put_bits(out, 328, 4, v.init_type_reply);
  put_bits(out, 332, 4, v.mtu_cap);
  put_bits(out, 336, 3, v.vl_stall_count);
  put_bits(out, 339, 5, v.hoq_life);
  put_bits(out, 344, 4, v.operational_vls);
  put_bits(out, 348, 1, v.partition_enforcement_inbound);
  put_bits(out, 349, 1, v.partition_enforcement_outbound);
  put_bits(out, 350, 1, v.filter_raw_inbound);
  put_bits(out, 351, 1, v.filter_raw_outbound);
  put_bits(out, 352, 16, v.mkey_violations);
  put_bits(out, 368, 16, v.pkey_violations);
  put_bits(out, 384, 16, v.qkey_violations);
  put_bits(out, 400, 8, v.guid_cap);
  put_bits(out, 408, 1, v.client_reregister);
  put_bits(out, 409, 2, v.mcast_pkey_trap_suppression);
  put_bits(out, 411, 5, v.subnet_timeout);
  put_bits(out, 419, 5, v.resp_time_value);
  put_bits(out, 424, 4, v.local_phy_errors);
  put_bits(out, 428, 4, v.overrun_errors);
  put_bits(out, 432, 16, v.max_credit_hint);
  put_bits(out, 456, 24, v.link_round_trip_latency);
  put_bits(out, 480, 16, v.capability_mask2);
  put_bits(out, 496, 4, v.link_speed_ext_active);
  put_bits(out, 500, 4, v.link_speed_ext_supported);
  put_bits(out, 507, 5, v.link_speed_ext_enabled);
}

Result<PortInfo> decode_port_info(ConstBytes in) {
  if (auto r = need(in, kPortInfoBytes, "PortInfo"); !r) return r.take_error();
  PortInfo v;
  v.mkey = get_bits(in, 0, 64);
  v.gid_prefix = get_bits(in, 64, 64);
  v.lid = bits<std::uint16_t>(in, 128, 16);
  v.master_sm_lid = bits<std::uint16_t>(in, 144, 16);
  v.capability_mask = bits<std::uint32_t>(in, 160, 32);
  v.diag_code = bits<std::uint16_t>(in, 192, 16);
  v.mkey_lease_period = bits<std::uint16_t>(in, 208, 16);
  v.local_port_num = bits<std::uint8_t>(in, 224, 8);
  v.link_width_enabled = bits<std::uint8_t>(in, 232, 8);
  v.link_width_supported = bits<std::uint8_t>(in, 240, 8);
  v.link_width_active = bits<std::uint8_t>(in, 248, 8);
  v.link_speed_supported = bits<std::uint8_t>(in, 256, 4);
  v.port_state = bits<std::uint8_t>(in, 260, 4);
  v.port_phys_state = bits<std::uint8_t>(in, 264, 4);
  v.link_down_default_state = bits<std::uint8_t>(in, 268, 4);
  v.mkey_protect_bits = bits<std::uint8_t>(in, 272, 2);
  v.lmc = bits<std::uint8_t>(in, 277, 3);
  v.link_speed_active = bits<std::uint8_t>(in, 280, 4);
  v.link_speed_enabled = bits<std::uint8_t>(in, 284, 4);
  v.neighbor_mtu = bits<std::uint8_t>(in, 288, 4);
  v.master_sm_sl = bits<std::uint8_t>(in, 292, 4);
  v.vl_cap = bits<std::uint8_t>(in, 296, 4);
  v.init_type = bits<std::uint8_t>(in, 300, 4);
  v.vl_high_limit = bits<std::uint8_t>(in, 304, 8);
  v.vl_arb_high_cap = bits<std::uint8_t>(in, 312, 8);
  v.vl_arb_low_cap = bits<std::uint8_t>(in, 320, 8);
  v.init_type_reply = bits<std::uint8_t>(in, 328, 4);
  v.mtu_cap = bits<std::uint8_t>(in, 332, 4);
  v.vl_stall_count = bits<std::uint8_t>(in, 336, 3);
  v.hoq_life = bits<std::uint8_t>(in, 339, 5);
  v.operational_vls = bits<std::uint8_t>(in, 344, 4);
  v.partition_enforcement_inbound = get_bits(in, 348, 1) != 0;
  v.partition_enforcement_outbound = get_bits(in, 349, 1) != 0;
  v.filter_raw_inbound = get_bits(in, 350, 1) != 0;
  v.filter_raw_outbound = get_bits(in, 351, 1) != 0;
  v.mkey_violations = bits<std::uint16_t>(in, 352, 16);
  v.pkey_violations = bits<std::uint16_t>(in, 368, 16);
  v.qkey_violations = bits<std::uint16_t>(in, 384, 16);
  v.guid_cap = bits<std::uint8_t>(in, 400, 8);
  v.client_reregister = get_bits(in, 408, 1) != 0;
  v.mcast_pkey_trap_suppression = bits<std::uint8_t>(in, 409, 2);
  v.subnet_timeout = bits<std::uint8_t>(in, 411, 5);
  v.resp_time_value = bits<std::uint8_t>(in, 419, 5);
  v.local_phy_errors = bits<std::uint8_t>(in, 424, 4);
  v.overrun_errors = bits<std::uint8_t>(in, 428, 4);
  v.max_credit_hint = bits<std::uint16_t>(in, 432, 16);
  v.link_round_trip_latency = bits<std::uint32_t>(in, 456, 24);
  v.capability_mask2 = bits<std::uint16_t>(in, 480, 16);
  v.link_speed_ext_active = bits<std::uint8_t>(in, 496, 4);
  v.link_speed_ext_supported = bits<std::uint8_t>(in, 500, 4);
  v.link_speed_ext_enabled = bits<std::uint8_t>(in, 507, 5);
  return v;
}

// ---- SwitchInfo, IBA 14.2.5.4 Table 136 --------------------------------
void encode_switch_info(MutBytes out, const SwitchInfo& v) {
  zero(out, kSwitchInfoBytes);
  put_bits(out, 0, 16, v.linear_fdb_cap);
  put_bits(out, 16, 16, v.random_fdb_cap);
  put_bits(out, 32, 16, v.multicast_fdb_cap);
  put_bits(out, 48, 16, v.linear_fdb_top);
  put_bits(out, 64, 8, v.default_port);
  put_bits(out, 72, 8, v.default_mcast_primary_port);
  put_bits(out, 80, 8, v.default_mcast_not_primary_port);
  put_bits(out, 88, 5, v.life_time_value);
  put_bits(out, 93, 1, v.port_state_change);
  put_bits(out, 94, 2, v.optimized_sl2vl_programming);
  put_bits(out, 96, 16, v.lids_per_port);
  put_bits(out, 112, 16, v.partition_enforcement_cap);
  put_bits(out, 128, 1, v.inbound_enforcement_cap);
  put_bits(out, 129, 1, v.outbound_enforcement_cap);
  put_bits(out, 130, 1, v.filter_raw_inbound_cap);
  put_bits(out, 131, 1, v.filter_raw_outbound_cap);
  put_bits(out, 132, 1, v.enhanced_port0);
  put_bits(out, 144, 16, v.multicast_fdb_top);
}

Result<SwitchInfo> decode_switch_info(ConstBytes in) {
  if (auto r = need(in, kSwitchInfoBytes, "SwitchInfo"); !r) return r.take_error();
  SwitchInfo v;
  v.linear_fdb_cap = bits<std::uint16_t>(in, 0, 16);
  v.random_fdb_cap = bits<std::uint16_t>(in, 16, 16);
  v.multicast_fdb_cap = bits<std::uint16_t>(in, 32, 16);
  v.linear_fdb_top = bits<std::uint16_t>(in, 48, 16);
  v.default_port = bits<std::uint8_t>(in, 64, 8);
  v.default_mcast_primary_port = bits<std::uint8_t>(in, 72, 8);
  v.default_mcast_not_primary_port = bits<std::uint8_t>(in, 80, 8);
  v.life_time_value = bits<std::uint8_t>(in, 88, 5);
  v.port_state_change = get_bits(in, 93, 1) != 0;
  v.optimized_sl2vl_programming = bits<std::uint8_t>(in, 94, 2);
  v.lids_per_port = bits<std::uint16_t>(in, 96, 16);
  v.partition_enforcement_cap = bits<std::uint16_t>(in, 112, 16);
  v.inbound_enforcement_cap = get_bits(in, 128, 1) != 0;
  v.outbound_enforcement_cap = get_bits(in, 129, 1) != 0;
  v.filter_raw_inbound_cap = get_bits(in, 130, 1) != 0;
  v.filter_raw_outbound_cap = get_bits(in, 131, 1) != 0;
  v.enhanced_port0 = get_bits(in, 132, 1) != 0;
  v.multicast_fdb_top = bits<std::uint16_t>(in, 144, 16);
  return v;
}

// ---- GUIDInfo, IBA 14.2.5.5 --------------------------------------------
void encode_guid_block(MutBytes out, const GuidBlock& v) {
  for (std::size_t i = 0; i < kGuidsPerBlock; ++i) put64(out, 8 * i, v[i]);
}
Result<GuidBlock> decode_guid_block(ConstBytes in) {
  if (auto r = need(in, 8 * kGuidsPerBlock, "GUIDInfo"); !r) return r.take_error();
  GuidBlock v{};
  for (std::size_t i = 0; i < kGuidsPerBlock; ++i) v[i] = get64(in, 8 * i);
  return v;
}

// ---- P_KeyTable, IBA 14.2.5.7 ------------------------------------------
void encode_pkey_block(MutBytes out, const PKeyBlock& v) {
  for (std::size_t i = 0; i < kPKeysPerBlock; ++i) put16(out, 2 * i, v[i]);
}
Result<PKeyBlock> decode_pkey_block(ConstBytes in) {
  if (auto r = need(in, 2 * kPKeysPerBlock, "P_KeyTable"); !r) return r.take_error();
  PKeyBlock v{};
  for (std::size_t i = 0; i < kPKeysPerBlock; ++i) v[i] = get16(in, 2 * i);
  return v;
}

// ---- SLtoVLMappingTable, IBA 14.2.5.8: SL0 in bits 0..3 (high nibble of byte 0)
void encode_sl2vl(MutBytes out, const SlToVlTable& v) {
  zero(out, 8);
  for (std::size_t sl = 0; sl < 16; ++sl) put_bits(out, 4 * sl, 4, v[sl]);
}
Result<SlToVlTable> decode_sl2vl(ConstBytes in) {
  if (auto r = need(in, 8, "SLtoVLMappingTable"); !r) return r.take_error();
  SlToVlTable v{};
  for (std::size_t sl = 0; sl < 16; ++sl) v[sl] = bits<std::uint8_t>(in, 4 * sl, 4);
  return v;
}

// ---- VLArbitrationTable, IBA 14.2.5.9: {reserved 4, VL 4, weight 8} -----
void encode_vlarb_block(MutBytes out, const VlArbBlock& v) {
  zero(out, 2 * kVlArbEntriesPerBlock);
  for (std::size_t i = 0; i < kVlArbEntriesPerBlock; ++i) {
    put_bits(out, 16 * i + 4, 4, v[i].vl);
    put_bits(out, 16 * i + 8, 8, v[i].weight);
  }
}
Result<VlArbBlock> decode_vlarb_block(ConstBytes in) {
  if (auto r = need(in, 2 * kVlArbEntriesPerBlock, "VLArbitrationTable"); !r) return r.take_error();
  VlArbBlock v{};
  for (std::size_t i = 0; i < kVlArbEntriesPerBlock; ++i) {
    v[i].vl = bits<std::uint8_t>(in, 16 * i + 4, 4);
    v[i].weight = bits<std::uint8_t>(in, 16 * i + 8, 8);
  }
  return v;
}

// ---- LinearForwardingTable, IBA 14.2.5.10 ------------------------------
void encode_lft_block(MutBytes out, const LftBlock& v) {
  for (std::size_t i = 0; i < kLftEntriesPerBlock; ++i) put8(out, i, v[i]);
}
Result<LftBlock> decode_lft_block(ConstBytes in) {
  if (auto r = need(in, kLftEntriesPerBlock, "LinearForwardingTable"); !r) return r.take_error();
  LftBlock v{};
  for (std::size_t i = 0; i < kLftEntriesPerBlock; ++i) v[i] = get8(in, i);
  return v;
}

// ---- MulticastForwardingTable, IBA 14.2.5.12 ---------------------------
void encode_mft_block(MutBytes out, const MftBlock& v) {
  for (std::size_t i = 0; i < kMftEntriesPerBlock; ++i) put16(out, 2 * i, v[i]);
}
Result<MftBlock> decode_mft_block(ConstBytes in) {
  if (auto r = need(in, 2 * kMftEntriesPerBlock, "MulticastForwardingTable"); !r) return r.take_error();
  MftBlock v{};
  for (std::size_t i = 0; i < kMftEntriesPerBlock; ++i) v[i] = get16(in, 2 * i);
  return v;
}

// ---- SMInfo, IBA 14.2.5.13 Table 154 -----------------------------------
void encode_sm_info(MutBytes out, const SmInfo& v) {
  zero(out, kSmInfoBytes);
  put_bits(out, 0, 64, v.guid);
  put_bits(out, 64, 64, v.sm_key);
  put_bits(out, 128, 32, v.act_count);
  put_bits(out, 160, 4, v.priority);
  put_bits(out, 164, 4, v.sm_state);
}
Result<SmInfo> decode_sm_info(ConstBytes in) {
  if (auto r = need(in, kSmInfoBytes, "SMInfo"); !r) return r.take_error();
  SmInfo v;
  v.guid = get_bits(in, 0, 64);
  v.sm_key = get_bits(in, 64, 64);
  v.act_count = bits<std::uint32_t>(in, 128, 32);
  v.priority = bits<std::uint8_t>(in, 160, 4);
  v.sm_state = bits<std::uint8_t>(in, 164, 4);
  return v;
}

// ---- Notice, IBA 13.4.8.2 Table 111 ------------------------------------
void encode_notice(MutBytes out, const Notice& v) {
  zero(out, kNoticeBytes);
  put_bits(out, 0, 1, v.is_generic);
  put_bits(out, 1, 7, v.type);
  put_bits(out, 8, 24, v.producer_type);
  put_bits(out, 32, 16, v.trap_number);
  put_bits(out, 48, 16, v.issuer_lid);
  put_bits(out, 64, 1, v.notice_toggle);
  put_bits(out, 65, 15, v.notice_count);
  for (std::size_t i = 0; i < kNoticeDataDetailsBytes; ++i) put8(out, 10 + i, v.data_details[i]);
  for (std::size_t i = 0; i < 16; ++i) put8(out, 64 + i, v.issuer_gid[i]);
}
Result<Notice> decode_notice(ConstBytes in) {
  // In an SMP only the first 64 bytes fit (no IssuerGID); GMPs carry all 80.
  if (auto r = need(in, kNoticeSmpBytes, "Notice"); !r) return r.take_error();
  Notice v;
  v.is_generic = get_bits(in, 0, 1) != 0;
  v.type = bits<std::uint8_t>(in, 1, 7);
  v.producer_type = bits<std::uint32_t>(in, 8, 24);
  v.trap_number = bits<std::uint16_t>(in, 32, 16);
  v.issuer_lid = bits<std::uint16_t>(in, 48, 16);
  v.notice_toggle = get_bits(in, 64, 1) != 0;
  v.notice_count = bits<std::uint16_t>(in, 65, 15);
  for (std::size_t i = 0; i < kNoticeDataDetailsBytes; ++i) v.data_details[i] = get8(in, 10 + i);
  if (in.size() >= kNoticeBytes)
    for (std::size_t i = 0; i < 16; ++i) v.issuer_gid[i] = get8(in, 64 + i);
  return v;
}

namespace {
void dd16(Notice& n, std::size_t off, std::uint16_t v) {
  n.data_details[off] = static_cast<std::uint8_t>(v >> 8);
  n.data_details[off + 1] = static_cast<std::uint8_t>(v);
}
void dd32(Notice& n, std::size_t off, std::uint32_t v) {
  dd16(n, off, static_cast<std::uint16_t>(v >> 16));
  dd16(n, off + 2, static_cast<std::uint16_t>(v));
}
}  // namespace

// IBA 14.2.5.1 Table 131: trap 128, urgent, producer switch.
Notice make_trap_128(std::uint16_t issuer_lid, std::uint16_t lid_addr) {
  Notice n;
  n.is_generic = true;
  n.type = static_cast<std::uint8_t>(NoticeType::kUrgent);
  n.producer_type = static_cast<std::uint32_t>(NodeType::kSwitch);
  n.trap_number = trap::kLinkStateChange;
  n.issuer_lid = issuer_lid;
  dd16(n, 0, lid_addr);
  return n;
}

// IBA 14.2.5.1 Table 131: trap 144, informational, producer CA.
Notice make_trap_144(std::uint16_t issuer_lid, std::uint16_t lid_addr, std::uint32_t capability_mask,
                     std::uint16_t change_flags, std::uint16_t capability_mask2) {
  Notice n;
  n.is_generic = true;
  n.type = static_cast<std::uint8_t>(NoticeType::kInfo);
  n.producer_type = static_cast<std::uint32_t>(NodeType::kCa);
  n.trap_number = trap::kLocalChanges;
  n.issuer_lid = issuer_lid;
  dd16(n, 2, lid_addr);
  dd32(n, 6, capability_mask);
  dd16(n, 12, change_flags);
  dd16(n, 14, capability_mask2);
  return n;
}

// IBA 14.2.5.1 Table 131: trap 256, security, producer = the node.
Notice make_trap_256(std::uint16_t issuer_lid, std::uint16_t lid_addr, std::uint8_t method,
                     std::uint16_t attr_id, std::uint32_t attr_mod, std::uint64_t mkey) {
  Notice n;
  n.is_generic = true;
  n.type = static_cast<std::uint8_t>(NoticeType::kSecurity);
  n.producer_type = static_cast<std::uint32_t>(NodeType::kCa);
  n.trap_number = trap::kBadMKey;
  n.issuer_lid = issuer_lid;
  dd16(n, 2, lid_addr);
  n.data_details[6] = method;
  dd16(n, 8, attr_id);
  dd32(n, 10, attr_mod);
  dd32(n, 14, static_cast<std::uint32_t>(mkey >> 32));
  dd32(n, 18, static_cast<std::uint32_t>(mkey));
  return n;
}

}  // namespace openib::mad
