// PMA attribute codecs (IBA 16.1.3, 16.1.4) and ClassPortInfo (IBA 13.4.8.1).
#include "mad/pma_attrs.hpp"

#include <algorithm>

namespace openib::mad {
// ---- ClassPortInfo, IBA 13.4.8.1 Table 109 -----------------------------
void encode_class_port_info(MutBytes out, const ClassPortInfo& v) {
  zero(out, kClassPortInfoBytes);
  put_bits(out, 0, 8, v.base_version);
  put_bits(out, 8, 8, v.class_version);
  put_bits(out, 16, 16, v.capability_mask);
  put_bits(out, 32, 27, v.capability_mask2);
  put_bits(out, 59, 5, v.resp_time_value);
  for (std::size_t i = 0; i < 16; ++i) put8(out, 8 + i, v.redirect_gid[i]);
  put_bits(out, 192, 8, v.redirect_tc);
  put_bits(out, 200, 4, v.redirect_sl);
  put_bits(out, 204, 20, v.redirect_fl);
  put_bits(out, 224, 16, v.redirect_lid);
  put_bits(out, 240, 16, v.redirect_pkey);
  put_bits(out, 264, 24, v.redirect_qp);
  put_bits(out, 288, 32, v.redirect_qkey);
  for (std::size_t i = 0; i < 16; ++i) put8(out, 40 + i, v.trap_gid[i]);
  put_bits(out, 448, 8, v.trap_tc);
  put_bits(out, 456, 4, v.trap_sl);
  put_bits(out, 460, 20, v.trap_fl);
  put_bits(out, 480, 16, v.trap_lid);
  put_bits(out, 496, 16, v.trap_pkey);
  put_bits(out, 512, 8, v.trap_hl);
  put_bits(out, 520, 24, v.trap_qp);
  put_bits(out, 544, 32, v.trap_qkey);
}

Result<ClassPortInfo> decode_class_port_info(ConstBytes in) {
  if (auto r = need(in, kClassPortInfoBytes, "ClassPortInfo"); !r) return r.take_error();
  ClassPortInfo v;
  v.base_version = bits<std::uint8_t>(in, 0, 8);
  v.class_version = bits<std::uint8_t>(in, 8, 8);
  v.capability_mask = bits<std::uint16_t>(in, 16, 16);
  v.capability_mask2 = bits<std::uint32_t>(in, 32, 27);
  v.resp_time_value = bits<std::uint8_t>(in, 59, 5);
  for (std::size_t i = 0; i < 16; ++i) v.redirect_gid[i] = get8(in, 8 + i);
  v.redirect_tc = bits<std::uint8_t>(in, 192, 8);
  v.redirect_sl = bits<std::uint8_t>(in, 200, 4);
  v.redirect_fl = bits<std::uint32_t>(in, 204, 20);
  v.redirect_lid = bits<std::uint16_t>(in, 224, 16);
  v.redirect_pkey = bits<std::uint16_t>(in, 240, 16);
  v.redirect_qp = bits<std::uint32_t>(in, 264, 24);
  v.redirect_qkey = bits<std::uint32_t>(in, 288, 32);
  for (std::size_t i = 0; i < 16; ++i) v.trap_gid[i] = get8(in, 40 + i);
  v.trap_tc = bits<std::uint8_t>(in, 448, 8);
  v.trap_sl = bits<std::uint8_t>(in, 456, 4);
  v.trap_fl = bits<std::uint32_t>(in, 460, 20);
  v.trap_lid = bits<std::uint16_t>(in, 480, 16);
  v.trap_pkey = bits<std::uint16_t>(in, 496, 16);
  v.trap_hl = bits<std::uint8_t>(in, 512, 8);
  v.trap_qp = bits<std::uint32_t>(in, 520, 24);
  v.trap_qkey = bits<std::uint32_t>(in, 544, 32);
  return v;
}

// ---- PortCounters, IBA 16.1.3.5 Table 210 ------------------------------
void encode_port_counters(MutBytes out, const PortCounters& v) {
  zero(out, kPortCountersBytes);
  put_bits(out, 8, 8, v.port_select);
  put_bits(out, 16, 16, v.counter_select);
  put_bits(out, 32, 16, v.symbol_error_counter);
  put_bits(out, 48, 8, v.link_error_recovery_counter);
  put_bits(out, 56, 8, v.link_downed_counter);
  put_bits(out, 64, 16, v.port_rcv_errors);
  put_bits(out, 80, 16, v.port_rcv_remote_physical_errors);
  put_bits(out, 96, 16, v.port_rcv_switch_relay_errors);
  put_bits(out, 112, 16, v.port_xmit_discards);
  put_bits(out, 128, 8, v.port_xmit_constraint_errors);
  put_bits(out, 136, 8, v.port_rcv_constraint_errors);
  put_bits(out, 144, 8, v.counter_select2);
  put_bits(out, 152, 4, v.local_link_integrity_errors);
  put_bits(out, 156, 4, v.excessive_buffer_overrun_errors);
  put_bits(out, 176, 16, v.vl15_dropped);
  put_bits(out, 192, 32, v.port_xmit_data);
  put_bits(out, 224, 32, v.port_rcv_data);
  put_bits(out, 256, 32, v.port_xmit_pkts);
  put_bits(out, 288, 32, v.port_rcv_pkts);
  put_bits(out, 320, 32, v.port_xmit_wait);
}

Result<PortCounters> decode_port_counters(ConstBytes in) {
  if (auto r = need(in, kPortCountersBytes, "PortCounters"); !r) return r.take_error();
  PortCounters v;
  v.port_select = bits<std::uint8_t>(in, 8, 8);
  v.counter_select = bits<std::uint16_t>(in, 16, 16);
  v.symbol_error_counter = bits<std::uint16_t>(in, 32, 16);
  v.link_error_recovery_counter = bits<std::uint8_t>(in, 48, 8);
  v.link_downed_counter = bits<std::uint8_t>(in, 56, 8);
  v.port_rcv_errors = bits<std::uint16_t>(in, 64, 16);
  v.port_rcv_remote_physical_errors = bits<std::uint16_t>(in, 80, 16);
  v.port_rcv_switch_relay_errors = bits<std::uint16_t>(in, 96, 16);
  v.port_xmit_discards = bits<std::uint16_t>(in, 112, 16);
  v.port_xmit_constraint_errors = bits<std::uint8_t>(in, 128, 8);
  v.port_rcv_constraint_errors = bits<std::uint8_t>(in, 136, 8);
  v.counter_select2 = bits<std::uint8_t>(in, 144, 8);
  v.local_link_integrity_errors = bits<std::uint8_t>(in, 152, 4);
  v.excessive_buffer_overrun_errors = bits<std::uint8_t>(in, 156, 4);
  v.vl15_dropped = bits<std::uint16_t>(in, 176, 16);
  v.port_xmit_data = bits<std::uint32_t>(in, 192, 32);
  v.port_rcv_data = bits<std::uint32_t>(in, 224, 32);
  v.port_xmit_pkts = bits<std::uint32_t>(in, 256, 32);
  v.port_rcv_pkts = bits<std::uint32_t>(in, 288, 32);
  v.port_xmit_wait = bits<std::uint32_t>(in, 320, 32);
  return v;
}

// ---- PortCountersExtended, IBA 16.1.4.11 Table 226 ---------------------
void encode_port_counters_ext(MutBytes out, const PortCountersExtended& v) {
  zero(out, kPortCountersExtBytes);
  put_bits(out, 8, 8, v.port_select);
  put_bits(out, 16, 16, v.counter_select);
  put64(out, 8, v.port_xmit_data);
  put64(out, 16, v.port_rcv_data);
  put64(out, 24, v.port_xmit_pkts);
  put64(out, 32, v.port_rcv_pkts);
  put64(out, 40, v.port_unicast_xmit_pkts);
  put64(out, 48, v.port_unicast_rcv_pkts);
  put64(out, 56, v.port_multicast_xmit_pkts);
  put64(out, 64, v.port_multicast_rcv_pkts);
}

Result<PortCountersExtended> decode_port_counters_ext(ConstBytes in) {
  if (auto r = need(in, kPortCountersExtBytes, "PortCountersExtended"); !r) return r.take_error();
  PortCountersExtended v;
  v.port_select = bits<std::uint8_t>(in, 8, 8);
  v.counter_select = bits<std::uint16_t>(in, 16, 16);
  v.port_xmit_data = get64(in, 8);
  v.port_rcv_data = get64(in, 16);
  v.port_xmit_pkts = get64(in, 24);
  v.port_rcv_pkts = get64(in, 32);
  v.port_unicast_xmit_pkts = get64(in, 40);
  v.port_unicast_rcv_pkts = get64(in, 48);
  v.port_multicast_xmit_pkts = get64(in, 56);
  v.port_multicast_rcv_pkts = get64(in, 64);
  return v;
}

}  // namespace openib::mad
