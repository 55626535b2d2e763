// MAD codecs (src/mad): the common header, SMP/PMA attributes byte-exact
// against reference bytes, the directed-route algorithm of IBA 14.2.2 walked
// over a 3-hop path and back, and RMPP segmentation/reassembly.
//
// The reference byte strings were produced once with rdma-core's libibmad
// (mad_set_field / mad_set_field64 with the values checked next to each
// string) in a scratch program; the tests do not link libibmad.
#include <catch2/catch.hpp>

#include <string>
#include <string_view>
#include <vector>

#include "mad/mad.hpp"
#include "mad/pma_attrs.hpp"
#include "mad/rmpp.hpp"
#include "mad/sma_attrs.hpp"
#include "mad/smp.hpp"
#include "hex_bytes.hpp"

using namespace openib::mad;

using openib::test::hex;
using openib::test::prefix;

TEST_CASE("MAD common header encodes at the IBA 13.4.2 offsets", "[mad]") {
  MadHeader h;
  h.mgmt_class = mgmt_class::kPerfMgmt;
  h.class_version = 1;
  h.method = method::kGet;
  h.status = 0x001C;
  h.class_specific = 0x0102;
  h.tid = 0x1122334455667788ULL;
  h.attr_id = attr::kPortCounters;
  h.attr_mod = 0xA0B0C0D0;
  Mad m = make_mad(h);
  CHECK(prefix(m, 24) == hex("01 04 01 01 001c 0102 1122334455667788 0012 0000 a0b0c0d0"));
  auto d = decode_header(m);
  REQUIRE(d.ok());
  CHECK(*d == h);
  CHECK_FALSE(decode_header(ConstBytes(m).first(23)).ok());
  CHECK(response_method(method::kGet) == method::kGetResp);
  CHECK(response_method(method::kSet) == method::kGetResp);
  CHECK(response_method(method::kGetTable) == method::kGetTableResp);
  CHECK(status::kMethodAttrUnsupported == 0x000C);
  CHECK(status::kInvalidAttrValue == 0x001C);
  make_response(m, status::kMethodAttrUnsupported);
  CHECK(mad_method(m) == method::kGetResp);
  CHECK(mad_status(m) == 0x000C);
  CHECK(mad_tid(m) == h.tid);
}

TEST_CASE("NodeInfo matches the IBA 14.2.5.3 layout", "[mad]") {
  const ByteVec ref = hex("010102240002c903000012340002c903000056780002c9030000567a0008c738000000a0070002c9");
  auto ni = decode_node_info(ref);
  REQUIRE(ni.ok());
  CHECK(ni->node_type == 2);
  CHECK(ni->num_ports == 36);
  CHECK(ni->system_image_guid == 0x0002c90300001234ULL);
  CHECK(ni->node_guid == 0x0002c90300005678ULL);
  CHECK(ni->port_guid == 0x0002c9030000567aULL);
  CHECK(ni->partition_cap == 8);
  CHECK(ni->device_id == 0xc738);
  CHECK(ni->revision == 0xa0);
  CHECK(ni->local_port_num == 7);
  CHECK(ni->vendor_id == 0x0002c9);
  ByteVec out(kNodeInfoBytes, std::byte{0xEE});
  encode_node_info(out, *ni);
  CHECK(out == ref);
  CHECK_FALSE(decode_node_info(ConstBytes(ref).first(39)).ok());
}

TEST_CASE("PortInfo matches the IBA 14.2.5.6 layout field by field", "[mad]") {
  // libibmad: every PortInfo field set to 1, 2, 3, ... in table order
  // (truncated to its width), M_Key and GIDPrefix 64-bit values.
  const ByteVec ref = hex(
      "1122334455667788fe8000000000000000010002000000030004000506070809abcd870123451617189a7cd5002200230024256809ab002c0000002d00000000");
  auto pi = decode_port_info(ref);
  REQUIRE(pi.ok());
  CHECK(pi->mkey == 0x1122334455667788ULL);
  CHECK(pi->gid_prefix == 0xfe80000000000000ULL);
  CHECK(pi->lid == 1);
  CHECK(pi->master_sm_lid == 2);
  CHECK(pi->capability_mask == 3);
  CHECK(pi->diag_code == 4);
  CHECK(pi->mkey_lease_period == 5);
  CHECK(pi->local_port_num == 6);
  CHECK(pi->link_width_enabled == 7);
  CHECK(pi->link_width_supported == 8);
  CHECK(pi->link_width_active == 9);
  CHECK(pi->link_speed_supported == 10);
  CHECK(pi->port_state == 11);
  CHECK(pi->port_phys_state == 12);
  CHECK(pi->link_down_default_state == 13);
  CHECK(pi->mkey_protect_bits == 2);
  CHECK(pi->lmc == 7);
  CHECK(pi->link_speed_active == 0);
  CHECK(pi->link_speed_enabled == 1);
  CHECK(pi->neighbor_mtu == 2);
  CHECK(pi->master_sm_sl == 3);
  CHECK(pi->vl_cap == 4);
  CHECK(pi->init_type == 5);
  CHECK(pi->vl_high_limit == 22);
  CHECK(pi->vl_arb_high_cap == 23);
  CHECK(pi->vl_arb_low_cap == 24);
  CHECK(pi->init_type_reply == 9);
  CHECK(pi->mtu_cap == 10);
  CHECK(pi->vl_stall_count == 3);
  CHECK(pi->hoq_life == 28);
  CHECK(pi->operational_vls == 13);
  CHECK_FALSE(pi->partition_enforcement_inbound);
  CHECK(pi->partition_enforcement_outbound);
  CHECK_FALSE(pi->filter_raw_inbound);
  CHECK(pi->filter_raw_outbound);
  CHECK(pi->mkey_violations == 34);
  CHECK(pi->pkey_violations == 35);
  CHECK(pi->qkey_violations == 36);
  CHECK(pi->guid_cap == 37);
  CHECK_FALSE(pi->client_reregister);
  CHECK(pi->mcast_pkey_trap_suppression == 3);
  CHECK(pi->subnet_timeout == 8);
  CHECK(pi->resp_time_value == 9);
  CHECK(pi->local_phy_errors == 10);
  CHECK(pi->overrun_errors == 11);
  CHECK(pi->max_credit_hint == 44);
  CHECK(pi->link_round_trip_latency == 45);
  ByteVec out(kPortInfoBytes, std::byte{0xEE});
  encode_port_info(out, *pi);
  CHECK(out == ref);
}

TEST_CASE("PortInfo CapabilityMask2 and extended speeds sit in the last 4 bytes", "[mad]") {
  PortInfo pi;
  pi.capability_mask2 = 0x1234;
  pi.link_speed_ext_active = 1;
  pi.link_speed_ext_supported = 3;
  pi.link_speed_ext_enabled = 0x1F;
  pi.client_reregister = true;
  ByteVec out(kPortInfoBytes);
  encode_port_info(out, pi);
  CHECK(ByteVec(out.begin() + 60, out.end()) == hex("1234 13 1f"));
  CHECK(out[51] == std::byte{0x80});  // ClientReregister, bit 408
  CHECK(*decode_port_info(out) == pi);
}

TEST_CASE("SwitchInfo matches the IBA 14.2.5.4 layout", "[mad]") {
  const ByteVec ref = hex("000100020003000405060746000b000ca8000012");
  auto si = decode_switch_info(ref);
  REQUIRE(si.ok());
  CHECK(si->linear_fdb_cap == 1);
  CHECK(si->random_fdb_cap == 2);
  CHECK(si->multicast_fdb_cap == 3);
  CHECK(si->linear_fdb_top == 4);
  CHECK(si->default_port == 5);
  CHECK(si->default_mcast_primary_port == 6);
  CHECK(si->default_mcast_not_primary_port == 7);
  CHECK(si->life_time_value == 8);
  CHECK(si->port_state_change);
  CHECK(si->optimized_sl2vl_programming == 2);
  CHECK(si->lids_per_port == 11);
  CHECK(si->partition_enforcement_cap == 12);
  CHECK(si->inbound_enforcement_cap);
  CHECK_FALSE(si->outbound_enforcement_cap);
  CHECK(si->filter_raw_inbound_cap);
  CHECK_FALSE(si->filter_raw_outbound_cap);
  CHECK(si->enhanced_port0);
  CHECK(si->multicast_fdb_top == 18);
  ByteVec out(kSwitchInfoBytes, std::byte{0xEE});
  encode_switch_info(out, *si);
  CHECK(out == ref);
}

TEST_CASE("SMInfo, tables and Notice layouts", "[mad]") {
  const ByteVec sm_ref = hex("0002c90300000001000000000000000100001234e3");
  auto sm = decode_sm_info(sm_ref);
  REQUIRE(sm.ok());
  CHECK(sm->guid == 0x0002c90300000001ULL);
  CHECK(sm->sm_key == 1);
  CHECK(sm->act_count == 0x1234);
  CHECK(sm->priority == 14);
  CHECK(sm->sm_state == static_cast<std::uint8_t>(SmState::kMaster));
  ByteVec out(kSmInfoBytes);
  encode_sm_info(out, *sm);
  CHECK(out == sm_ref);

  // Trap 128 as libibmad lays it out: generic, urgent, producer switch,
  // trap 128, issuer LID 0x12, LIDADDR 0x12 at DataDetails byte 0.
  const ByteVec t128 = hex("81000002 0080 0012 0000 0012") ;
  ByteVec n(kNoticeBytes);
  encode_notice(n, make_trap_128(0x12, 0x12));
  CHECK(prefix(n, 12) == t128);
  auto dn = decode_notice(n);
  REQUIRE(dn.ok());
  CHECK(dn->trap_number == trap::kLinkStateChange);
  Notice t;
  t.notice_toggle = true;
  t.notice_count = 0x7FFF;
  encode_notice(n, t);
  CHECK(prefix(ConstBytes(n).subspan(8), 2) == hex("ffff"));

  // Trap 144: LIDADDR at data byte 2 (bit 96 of the Notice), CapabilityMask at byte 6 (bit 128).
  encode_notice(n, make_trap_144(5, 5, 0x02510868));
  CHECK(prefix(ConstBytes(n).subspan(12), 2) == hex("0005"));
  CHECK(prefix(ConstBytes(n).subspan(16), 4) == hex("02510868"));

  SlToVlTable s2v{};
  for (std::uint8_t i = 0; i < 16; ++i) s2v[i] = static_cast<std::uint8_t>(i & 0xF);
  ByteVec sb(8);
  encode_sl2vl(sb, s2v);
  CHECK(sb == hex("0123456789abcdef"));  // SL0 in the high nibble of byte 0 (IBA 14.2.5.8)
  CHECK(*decode_sl2vl(sb) == s2v);

  VlArbBlock va{};
  va[0] = {1, 0x40};
  va[31] = {15, 0xFF};
  ByteVec vb(64);
  encode_vlarb_block(vb, va);
  CHECK(prefix(vb, 2) == hex("0140"));
  CHECK(ByteVec(vb.begin() + 62, vb.end()) == hex("0fff"));
  CHECK(*decode_vlarb_block(vb) == va);

  MftBlock mf{};
  mf[0] = 0x8001;
  mf[31] = 0x0006;
  ByteVec mb(64);
  encode_mft_block(mb, mf);
  CHECK(prefix(mb, 2) == hex("8001"));
  CHECK(*decode_mft_block(mb) == mf);
  CHECK(mft_position(0x20000003) == 2);
  CHECK(mft_block(0x20000003) == 3);

  ByteVec nd(64);
  encode_node_description(nd, "switch-1 ");
  CHECK(*decode_node_description(nd) == "switch-1 ");
  encode_node_description(nd, std::string(100, 'x'));
  CHECK(decode_node_description(nd)->size() == 64);
}

TEST_CASE("PMA ClassPortInfo, PortCounters and PortCountersExtended layouts", "[mad]") {
  const ByteVec cpi_ref = hex(
      "01011300000000b200000000000000000000000000000000123456780009ffff0012345680010000000000000000000000000000000000002149876500777fff4000000180010000");
  auto cpi = decode_class_port_info(cpi_ref);
  REQUIRE(cpi.ok());
  CHECK(cpi->capability_mask == 0x1300);
  CHECK(cpi->capability_mask2 == 5);
  CHECK(cpi->resp_time_value == 18);
  CHECK(cpi->redirect_tc == 0x12);
  CHECK(cpi->redirect_sl == 3);
  CHECK(cpi->redirect_fl == 0x45678);
  CHECK(cpi->redirect_lid == 9);
  CHECK(cpi->redirect_qp == 0x123456);
  CHECK(cpi->redirect_qkey == 0x80010000);
  CHECK(cpi->trap_fl == 0x98765);
  CHECK(cpi->trap_lid == 0x77);
  CHECK(cpi->trap_hl == 0x40);
  CHECK(cpi->trap_qp == 1);
  ByteVec out(kClassPortInfoBytes);
  encode_class_port_info(out, *cpi);
  CHECK(out == cpi_ref);

  const ByteVec pc_ref = hex("00110022003344550066007700880099aabbccde000000ff0000011000000121000001320000014300000154");
  auto pc = decode_port_counters(pc_ref);
  REQUIRE(pc.ok());
  CHECK(pc->port_select == 0x11);
  CHECK(pc->counter_select == 0x22);
  CHECK(pc->symbol_error_counter == 0x33);
  CHECK(pc->link_error_recovery_counter == 0x44);
  CHECK(pc->link_downed_counter == 0x55);
  CHECK(pc->port_rcv_errors == 0x66);
  CHECK(pc->port_xmit_discards == 0x99);
  CHECK(pc->port_xmit_constraint_errors == 0xaa);
  CHECK(pc->port_rcv_constraint_errors == 0xbb);
  CHECK(pc->counter_select2 == 0xcc);
  CHECK(pc->local_link_integrity_errors == 0xd);
  CHECK(pc->excessive_buffer_overrun_errors == 0xe);
  CHECK(pc->vl15_dropped == 0xff);
  CHECK(pc->port_xmit_data == 0x110);
  CHECK(pc->port_rcv_data == 0x121);
  CHECK(pc->port_xmit_pkts == 0x132);
  CHECK(pc->port_rcv_pkts == 0x143);
  CHECK(pc->port_xmit_wait == 0x154);
  ByteVec pout(kPortCountersBytes);
  encode_port_counters(pout, *pc);
  CHECK(pout == pc_ref);

  const ByteVec pce_ref = hex(
      "000300ff0000000001020304050607081112131415161718212223242526272831323334353637384142434445464748515253545556575861626364656667687172737475767778");
  auto pce = decode_port_counters_ext(pce_ref);
  REQUIRE(pce.ok());
  CHECK(pce->port_select == 3);
  CHECK(pce->counter_select == 0xff);
  CHECK(pce->port_xmit_data == 0x0102030405060708ULL);
  CHECK(pce->port_multicast_rcv_pkts == 0x7172737475767778ULL);
  ByteVec eout(kPortCountersExtBytes);
  encode_port_counters_ext(eout, *pce);
  CHECK(eout == pce_ref);
}

// ---- directed route ------------------------------------------------------

namespace {
// SM on CA "A" port 1 -> switch S1 (in 2, out 5) -> switch S2 (in 3, out 7) -> CA "B" port 1.
Mad three_hop_request() {
  SmpRequest r;
  r.attr_id = attr::kNodeInfo;
  r.tid = 0x42;
  r.hop_cnt = 3;
  r.initial_path[1] = 1;
  r.initial_path[2] = 5;
  r.initial_path[3] = 7;
  return make_smp(r);
}
}  // namespace

TEST_CASE("directed route: a 3-hop walk out and back (IBA 14.2.2)", "[mad][dr]") {
  Mad m = three_hop_request();
  CHECK(mad_class(m) == mgmt_class::kSubnDirected);
  CHECK(smp_dr_slid(m) == kPermissiveLid);
  CHECK(smp_dr_dlid(m) == kPermissiveLid);

  auto d = dr_send(m, false, 1);  // the SM's node, C14-9:1
  REQUIRE(d.action == DrAction::kForward);
  CHECK(d.port == 1);
  CHECK(smp_hop_ptr(m) == 1);

  d = dr_receive(m, true, 2, 8);  // S1, C14-9:2
  REQUIRE(d.action == DrAction::kForward);
  CHECK(d.port == 5);
  CHECK(smp_return_path(m, 1) == 2);
  CHECK(smp_hop_ptr(m) == 2);

  d = dr_receive(m, true, 3, 8);  // S2
  REQUIRE(d.action == DrAction::kForward);
  CHECK(d.port == 7);
  CHECK(smp_return_path(m, 2) == 3);
  CHECK(smp_hop_ptr(m) == 3);

  d = dr_receive(m, false, 1, 1);  // B, C14-9:3: end of the path
  REQUIRE(d.action == DrAction::kLocal);
  CHECK(smp_return_path(m, 3) == 1);
  CHECK(smp_hop_ptr(m) == 4);

  smp_make_response(m, status::kOk);
  CHECK(mad_method(m) == method::kGetResp);
  CHECK(smp_direction(m));
  CHECK(smp_status(m) == 0);
  CHECK(get16(m, 4) == 0x8000);  // D bit in the status word

  d = dr_send(m, false, 1);  // B sends the response, C14-13:1
  REQUIRE(d.action == DrAction::kForward);
  CHECK(d.port == 1);
  CHECK(smp_hop_ptr(m) == 3);

  d = dr_receive(m, true, 7, 8);  // S2, C14-13:2
  REQUIRE(d.action == DrAction::kForward);
  CHECK(d.port == 3);
  CHECK(smp_hop_ptr(m) == 2);

  d = dr_receive(m, true, 5, 8);  // S1
  REQUIRE(d.action == DrAction::kForward);
  CHECK(d.port == 2);
  CHECK(smp_hop_ptr(m) == 1);

  d = dr_receive(m, false, 1, 1);  // A, C14-13:3: to the SM
  REQUIRE(d.action == DrAction::kLocal);
  CHECK(smp_hop_ptr(m) == 0);
  CHECK(mad_tid(m) == 0x42);
}

TEST_CASE("directed route: the rejections of C14-6, C14-9 and C14-13", "[mad][dr]") {
  SECTION("a CA does not relay an intermediate hop") {
    Mad m = three_hop_request();
    (void)dr_send(m, false, 1);
    auto d = dr_receive(m, false, 1, 2);
    CHECK(d.action == DrAction::kDrop);
    CHECK(d.reason == DrDrop::kNotSwitch);
  }
  SECTION("a path naming a port the switch lacks") {
    Mad m = three_hop_request();
    (void)dr_send(m, false, 1);
    auto d = dr_receive(m, true, 2, 4);  // S1 has 4 ports, the path says 5
    CHECK(d.action == DrAction::kDrop);
    CHECK(d.reason == DrDrop::kBadPort);
  }
  SECTION("HopCount 64") {
    Mad m = three_hop_request();
    smp_set_hop_cnt(m, 64);
    CHECK(dr_receive(m, true, 1, 8).reason == DrDrop::kBadHopCount);
    CHECK(dr_send(m, false, 1).reason == DrDrop::kBadHopCount);
  }
  SECTION("the sender's port is not the path's") {
    Mad m = three_hop_request();
    CHECK(dr_send(m, false, 2).reason == DrDrop::kWrongPort);
  }
  SECTION("an outbound SMP with HopPointer 0 arriving at a CA") {
    Mad m = three_hop_request();
    CHECK(dr_receive(m, false, 1, 1).reason == DrDrop::kBadHopPointer);
  }
  SECTION("a hop pointer beyond HopCount+1") {
    Mad m = three_hop_request();
    smp_set_hop_ptr(m, 9);
    CHECK(dr_receive(m, true, 1, 8).reason == DrDrop::kBadHopPointer);
  }
  SECTION("a LID-routed SMP is not directed") {
    SmpRequest r;
    r.directed = false;
    Mad m = make_smp(r);
    CHECK(dr_receive(m, true, 1, 8).reason == DrDrop::kNotDirected);
  }
}

TEST_CASE("directed route: HopCount 0 and a LID-routed end part", "[mad][dr]") {
  SECTION("HopCount 0: the SM's own node, and back") {
    SmpRequest r;
    r.attr_id = attr::kNodeInfo;
    Mad m = make_smp(r);
    CHECK(dr_send(m, false, 1).action == DrAction::kLocal);
    CHECK(smp_hop_ptr(m) == 1);
    CHECK(dr_receive(m, false, 1, 1).action == DrAction::kLocal);  // C14-9:4
    smp_make_response(m, 0);
    CHECK(dr_send(m, false, 1).action == DrAction::kLocal);
    CHECK(smp_hop_ptr(m) == 0);
  }
  SECTION("DrDLID names the final node: the last switch LID-routes it") {
    SmpRequest r;
    r.attr_id = attr::kNodeInfo;
    r.hop_cnt = 1;
    r.initial_path[1] = 1;
    r.dr_dlid = 0x22;
    Mad m = make_smp(r);
    REQUIRE(dr_send(m, false, 1).action == DrAction::kForward);
    auto d = dr_receive(m, true, 4, 8);  // the switch ends the DR part
    REQUIRE(d.action == DrAction::kLidRoute);
    CHECK(d.lid == 0x22);
    CHECK(smp_hop_ptr(m) == 2);
    CHECK(dr_receive(m, false, 1, 1).action == DrAction::kLocal);  // C14-9:4 at LID 0x22
    smp_make_response(m, 0);
    d = dr_send(m, false, 1);
    CHECK(d.action == DrAction::kLidRoute);  // back to the request's LRH SLID
    d = dr_receive(m, true, 2, 8);           // the switch takes it up again
    REQUIRE(d.action == DrAction::kForward);
    CHECK(d.port == 4);
    CHECK(smp_hop_ptr(m) == 1);
    CHECK(dr_receive(m, false, 1, 1).action == DrAction::kLocal);
  }
}

// ---- RMPP ------------------------------------------------------------------

namespace {
// An SA GetTableResp message: common header, RMPP header, SA header (20), data.
ByteVec sa_message(std::size_t data_len) {
  MadHeader h;
  h.mgmt_class = mgmt_class::kSubnAdm;
  h.class_version = kSaClassVersion;
  h.method = method::kGetTableResp;
  h.tid = 0xABCDEF;
  h.attr_id = 0x0011;
  ByteVec msg(kRmppPayloadOff + 20 + data_len);
  encode_header(msg, h);
  for (std::size_t i = 0; i < 20; ++i) msg[kRmppPayloadOff + i] = std::byte(static_cast<std::uint8_t>(0xA0 + i));
  for (std::size_t i = 0; i < data_len; ++i) msg[56 + i] = std::byte(static_cast<std::uint8_t>(i * 7 + 3));
  return msg;
}
}  // namespace

TEST_CASE("RMPP segments carry the headers IBA 13.6.2 wants", "[mad][rmpp]") {
  ByteVec msg = sa_message(1050);  // 200 data bytes per SA segment -> 6 segments, 150 pad
  auto segs = rmpp_segment(msg, 20);
  REQUIRE(segs.ok());
  REQUIRE(segs->size() == 6);
  for (std::size_t i = 0; i < 6; ++i) {
    const Mad& s = (*segs)[i];
    auto h = decode_rmpp_header(s);
    REQUIRE(h.ok());
    CHECK(h->version == 1);
    CHECK(h->type == rmpp_type::kData);
    CHECK(h->seg_num == i + 1);
    CHECK((h->flags & rmpp_flag::kActive) != 0);
    CHECK(((h->flags & rmpp_flag::kFirst) != 0) == (i == 0));
    CHECK(((h->flags & rmpp_flag::kLast) != 0) == (i == 5));
    CHECK(mad_tid(s) == 0xABCDEF);
    CHECK(get8(s, 36) == 0xA0);  // SA header repeated in every segment
  }
  CHECK(decode_rmpp_header((*segs)[0])->paylen_newwin == 6 * 220 - 150);
  CHECK(decode_rmpp_header((*segs)[5])->paylen_newwin == 70);
  CHECK(get8((*segs)[1], 56) == static_cast<std::uint8_t>(200 * 7 + 3));

  auto one = rmpp_segment(sa_message(0), 20);
  REQUIRE(one.ok());
  REQUIRE(one->size() == 1);
  CHECK(decode_rmpp_header((*one)[0])->flags == (rmpp_flag::kActive | rmpp_flag::kFirst | rmpp_flag::kLast));
  CHECK(decode_rmpp_header((*one)[0])->paylen_newwin == 20);
  CHECK_FALSE(rmpp_segment(ConstBytes(msg).first(40), 20).ok());
  CHECK_FALSE(rmpp_segment(msg, 20, 5).ok());
}

TEST_CASE("RMPP reassembly: ACKs per window, the whole message at the end", "[mad][rmpp]") {
  ByteVec msg = sa_message(1050);
  auto segs = *rmpp_segment(msg, 20);
  RmppReassembler r(20, {1 << 20, 2});
  std::vector<std::uint32_t> acked;
  std::optional<ByteVec> got;
  for (auto& s : segs) {
    auto step = r.feed(s);
    CHECK_FALSE(step.failed);
    for (auto& a : step.to_send) {
      auto h = decode_rmpp_header(a);
      CHECK(h->type == rmpp_type::kAck);
      CHECK(mad_method(a) == method::kGetTable);  // R bit flipped
      acked.push_back(h->seg_num);
    }
    if (step.message) got = step.message;
  }
  CHECK(acked == std::vector<std::uint32_t>{1, 3, 5, 6});
  REQUIRE(got);
  REQUIRE(got->size() == msg.size());
  CHECK(ByteVec(got->begin() + 36, got->end()) == ByteVec(msg.begin() + 36, msg.end()));
  CHECK(prefix(*got, 24) == prefix(msg, 24));
  CHECK(r.done());
}

TEST_CASE("RMPP sender and receiver recover a lost segment", "[mad][rmpp]") {
  ByteVec msg = sa_message(3000);  // 15 segments
  auto segs = *rmpp_segment(msg, 20);
  REQUIRE(segs.size() == 15);
  RmppSender tx(segs);
  RmppReassembler rx(20, {1 << 20, 4});
  bool dropped_once = false;
  std::optional<ByteVec> got;
  auto wire = tx.start();
  int rounds = 0;
  while (!tx.complete() && rounds++ < 50) {
    std::vector<Mad> acks;
    for (auto& s : wire.to_send) {
      if (!dropped_once && decode_rmpp_header(s)->seg_num == 7) {
        dropped_once = true;  // lost on the wire
        continue;
      }
      auto st = rx.feed(s);
      REQUIRE_FALSE(st.failed);
      for (auto& a : st.to_send) acks.push_back(a);
      if (st.message) got = st.message;
    }
    wire = {};
    for (auto& a : acks) {
      auto st = tx.on_mad(a);
      REQUIRE_FALSE(st.failed);
      for (auto& s : st.to_send) wire.to_send.push_back(s);
    }
    if (wire.to_send.empty() && !tx.complete()) wire = tx.on_timeout();
  }
  CHECK(dropped_once);
  CHECK(tx.complete());
  REQUIRE(got);
  CHECK(ByteVec(got->begin() + 36, got->end()) == ByteVec(msg.begin() + 36, msg.end()));
}

TEST_CASE("RMPP rejects bad sequences with ABORT and STOP", "[mad][rmpp]") {
  auto segs = *rmpp_segment(sa_message(1000), 20);
  SECTION("unsupported RMPP version") {
    RmppReassembler r(20);
    Mad s = segs[0];
    put8(s, 24, 2);
    auto st = r.feed(s);
    CHECK(st.failed);
    REQUIRE(st.to_send.size() == 1);
    CHECK(decode_rmpp_header(st.to_send[0])->type == rmpp_type::kAbort);
    CHECK(decode_rmpp_header(st.to_send[0])->status == rmpp_status::kUnsupportedVersion);
    CHECK(r.feed(segs[0]).to_send.empty());  // the transfer is over
  }
  SECTION("first segment without the First flag") {
    RmppReassembler r(20);
    Mad s = segs[0];
    put8(s, 26, get8(s, 26) & ~rmpp_flag::kFirst);
    auto st = r.feed(s);
    CHECK(st.failed);
    CHECK(decode_rmpp_header(st.to_send.at(0))->status == rmpp_status::kInconsistentFirstAndSegNum);
  }
  SECTION("segment number 0") {
    RmppReassembler r(20);
    Mad s = segs[1];
    put32(s, 28, 0);
    CHECK(r.feed(s).failed);
  }
  SECTION("a last segment claiming more than a segment holds") {
    RmppReassembler r(20);
    for (std::size_t i = 0; i + 1 < segs.size(); ++i) CHECK_FALSE(r.feed(segs[i]).failed);
    Mad s = segs.back();
    put32(s, 32, 221);
    auto st = r.feed(s);
    CHECK(st.failed);
    CHECK(decode_rmpp_header(st.to_send.at(0))->status == rmpp_status::kInconsistentLastAndLength);
  }
  SECTION("a message larger than the bound is STOPped") {
    RmppReassembler r(20, {500, 64});
    auto st = r.feed(segs[0]);
    CHECK(st.failed);
    CHECK(decode_rmpp_header(st.to_send.at(0))->type == rmpp_type::kStop);
    CHECK(decode_rmpp_header(st.to_send.at(0))->status == rmpp_status::kResourcesExhausted);
  }
  SECTION("out of order segments are dropped, duplicates re-ACKed") {
    RmppReassembler r(20, {1 << 20, 64});
    CHECK(r.feed(segs[0]).to_send.size() == 1);  // ACK 1 (first window is 1)
    CHECK(r.feed(segs[2]).to_send.empty());      // 3 before 2: dropped
    auto dup = r.feed(segs[0]);
    REQUIRE(dup.to_send.size() == 1);
    CHECK(decode_rmpp_header(dup.to_send[0])->seg_num == 1);
    CHECK(r.next_expected() == 2);
  }
  SECTION("the sender gives up after its retries and ABORTs") {
    RmppSender tx(segs, 2);
    (void)tx.start();
    CHECK_FALSE(tx.on_timeout().failed);
    CHECK_FALSE(tx.on_timeout().failed);
    auto st = tx.on_timeout();
    CHECK(st.failed);
    CHECK(decode_rmpp_header(st.to_send.at(0))->status == rmpp_status::kTooManyRetries);
    CHECK(mad_method(st.to_send[0]) == method::kGetTableResp);
  }
  SECTION("a receiver's STOP ends the sender") {
    RmppSender tx(segs);
    (void)tx.start();
    auto st = tx.on_mad(rmpp_make_stop_abort(segs[0], rmpp_type::kStop, rmpp_status::kResourcesExhausted));
    CHECK(st.failed);
    CHECK(st.status == rmpp_status::kResourcesExhausted);
  }
}

TEST_CASE("a DR SMP request is laid out as libibmad's mad_encode does it", "[mad][dr]") {
  SmpRequest r;
  r.attr_id = attr::kNodeInfo;
  r.attr_mod = 0x12;
  r.tid = 0x42;
  r.mkey = 0x1122334455667788ULL;
  r.hop_cnt = 3;
  r.initial_path[1] = 1;
  r.initial_path[2] = 5;
  r.initial_path[3] = 7;
  Mad m = make_smp(r);
  CHECK(prefix(m, 36) == hex("0181010100000003 0000000000000042 00110000 00000012 1122334455667788 ffffffff"));
  CHECK(prefix(ConstBytes(m).subspan(kSmpInitialPathOff), 4) == hex("00010507"));
  CHECK(ByteVec(m.begin() + 36, m.begin() + 128) == ByteVec(92));
  CHECK(ByteVec(m.begin() + 132, m.end()) == ByteVec(124));
}
