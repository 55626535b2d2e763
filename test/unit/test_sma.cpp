// The SMA/PMA engine (src/sim/sma) against fake switch and CA models:
// what an SM or perfquery on the other end would see.
#include <catch2/catch.hpp>

#include "mad/pma_attrs.hpp"
#include "mad/sma_attrs.hpp"
#include "mad/smp.hpp"
#include "sim/sma/engine.hpp"
#include "test_sma_models.hpp"

using namespace openib::mad;
using namespace openib::sim::sma;
using openib::sim::sma::testing::FakeNode;

namespace {

constexpr std::uint64_t kCaGuid = 0x0002C90300001000ULL;
constexpr std::uint64_t kSwGuid = 0x0002C90300002000ULL;

// A DR SMP as it arrives at the node at the end of a `hops`-hop path
// (HopPointer == HopCount, as the previous hop left it).
Mad dr_arriving(std::uint8_t meth, std::uint16_t attr_id, std::uint32_t mod, std::uint8_t hops,
                std::uint64_t mkey = 0) {
  SmpRequest r;
  r.method = meth;
  r.attr_id = attr_id;
  r.attr_mod = mod;
  r.tid = 0x77;
  r.mkey = mkey;
  r.hop_cnt = hops;
  for (std::uint8_t i = 1; i <= hops; ++i) r.initial_path[i] = 1;
  Mad m = make_smp(r);
  smp_set_hop_ptr(m, hops == 0 ? 1 : hops);
  return m;
}

Mad lid_routed(std::uint8_t meth, std::uint16_t attr_id, std::uint32_t mod, std::uint64_t mkey = 0) {
  SmpRequest r;
  r.directed = false;
  r.method = meth;
  r.attr_id = attr_id;
  r.attr_mod = mod;
  r.tid = 0x99;
  r.mkey = mkey;
  return make_smp(r);
}

PortInfo reply_port_info(const SmpAction& a) { return *decode_port_info(smp_data(ConstBytes(a.out.mad))); }

// Set PortInfo of `port` with `edit` applied to its current value.
template <typename F>
SmpAction set_port_info(SmaEngine& e, FakeNode& n, std::uint8_t port, F edit, std::uint64_t mkey = 0) {
  PortInfo pi = n.port_info(port);
  pi.port_state = 0;  // no change unless edit says so
  pi.port_phys_state = 0;
  edit(pi);
  Mad m = lid_routed(method::kSet, attr::kPortInfo, port, mkey);
  encode_port_info(smp_data(MutBytes(m)), pi);
  return e.handle_smp(m, port == 0 ? 1 : port, 0x0001);
}

}  // namespace

TEST_CASE("SMA: Get NodeInfo of a CA over a 1-hop directed route", "[sma]") {
  FakeNode ca(NodeType::kCa, 2, kCaGuid);
  SmaEngine e(ca);
  Mad m = dr_arriving(method::kGet, attr::kNodeInfo, 0, 1);
  auto a = e.handle_smp(m, 2, kPermissiveLid);
  REQUIRE(a.kind == SmpActionKind::kReply);
  CHECK(a.out.out_port == 2);
  CHECK(a.out.dlid == kPermissiveLid);
  CHECK(mad_method(a.out.mad) == method::kGetResp);
  CHECK(smp_direction(a.out.mad));
  CHECK(smp_status(a.out.mad) == 0);
  CHECK(smp_hop_ptr(a.out.mad) == 1);  // left the CA: HopCount+1 decremented once
  CHECK(smp_return_path(a.out.mad, 1) == 2);
  CHECK(mad_tid(a.out.mad) == 0x77);
  auto ni = decode_node_info(smp_data(ConstBytes(a.out.mad)));
  REQUIRE(ni.ok());
  CHECK(ni->node_type == 1);
  CHECK(ni->num_ports == 2);
  CHECK(ni->node_guid == kCaGuid);
  CHECK(ni->port_guid == kCaGuid + 2);  // port GUID = node GUID + port
  CHECK(ni->local_port_num == 2);
  CHECK(ni->vendor_id == 0x0002C9);
  CHECK(e.stats().replied == 1);
}

TEST_CASE("SMA: a switch relays DR hops and answers at the end", "[sma]") {
  FakeNode sw(NodeType::kSwitch, 8, kSwGuid);
  SmaEngine e(sw);
  SECTION("intermediate hop: forwarded out InitialPath[2]") {
    SmpRequest r;
    r.attr_id = attr::kNodeInfo;
    r.hop_cnt = 2;
    r.initial_path[1] = 1;
    r.initial_path[2] = 6;
    Mad m = make_smp(r);
    smp_set_hop_ptr(m, 1);
    auto a = e.handle_smp(m, 3, kPermissiveLid);
    REQUIRE(a.kind == SmpActionKind::kForward);
    CHECK(a.out.out_port == 6);
    CHECK(smp_hop_ptr(a.out.mad) == 2);
    CHECK(smp_return_path(a.out.mad, 1) == 3);
    CHECK(e.stats().forwarded == 1);
  }
  SECTION("destination: NodeInfo of the switch, answered out the arrival port") {
    Mad m = dr_arriving(method::kGet, attr::kNodeInfo, 0, 1);
    auto a = e.handle_smp(m, 5, kPermissiveLid);
    REQUIRE(a.kind == SmpActionKind::kReply);
    CHECK(a.out.out_port == 5);
    auto ni = decode_node_info(smp_data(ConstBytes(a.out.mad)));
    CHECK(ni->node_type == 2);
    CHECK(ni->port_guid == kSwGuid);  // switch: port 0's GUID = node GUID
    CHECK(ni->local_port_num == 5);
  }
  SECTION("SwitchInfo, LFT and MFT blocks round trip through Set/Get") {
    Mad m = dr_arriving(method::kGet, attr::kSwitchInfo, 0, 1);
    auto a = e.handle_smp(m, 1, kPermissiveLid);
    REQUIRE(a.kind == SmpActionKind::kReply);
    CHECK(decode_switch_info(smp_data(ConstBytes(a.out.mad)))->linear_fdb_cap == 0xC000);

    LftBlock lft;
    for (std::size_t i = 0; i < lft.size(); ++i) lft[i] = static_cast<std::uint8_t>(i % 8 + 1);
    m = dr_arriving(method::kSet, attr::kLinearFwdTable, 2, 1);
    encode_lft_block(smp_data(MutBytes(m)), lft);
    a = e.handle_smp(m, 1, kPermissiveLid);
    CHECK(smp_status(a.out.mad) == 0);
    CHECK(sw.lft_block(2) == lft);
    m = dr_arriving(method::kGet, attr::kLinearFwdTable, 2, 1);
    a = e.handle_smp(m, 1, kPermissiveLid);
    CHECK(*decode_lft_block(smp_data(ConstBytes(a.out.mad))) == lft);

    MftBlock mft{};
    mft[3] = 0x0006;
    m = dr_arriving(method::kSet, attr::kMulticastFwdTable, 1, 1);  // position 0, block 1
    encode_mft_block(smp_data(MutBytes(m)), mft);
    a = e.handle_smp(m, 1, kPermissiveLid);
    CHECK(smp_status(a.out.mad) == 0);
    CHECK(sw.mft_block(1, 0) == mft);
    m = dr_arriving(method::kGet, attr::kMulticastFwdTable, 0x10000001, 1);  // position 1 > 8 ports
    CHECK(smp_status(e.handle_smp(m, 1, kPermissiveLid).out.mad) == status::kInvalidAttrValue);
  }
  SECTION("PortInfo of every port, port 0 included") {
    for (std::uint8_t p = 0; p <= 8; ++p) {
      Mad m = dr_arriving(method::kGet, attr::kPortInfo, p, 1);
      auto a = e.handle_smp(m, 4, kPermissiveLid);
      REQUIRE(smp_status(a.out.mad) == 0);
      CHECK(reply_port_info(a).local_port_num == 4);  // the port the SMP came in by
    }
    Mad m = dr_arriving(method::kGet, attr::kPortInfo, 9, 1);
    CHECK(smp_status(e.handle_smp(m, 4, kPermissiveLid).out.mad) == status::kInvalidAttrValue);
  }
}

TEST_CASE("SMA: PortInfo Set drives Down/Init/Armed/Active as IBA 14.2.5.6 allows", "[sma]") {
  FakeNode ca(NodeType::kCa, 1, kCaGuid);
  SmaEngine e(ca);
  auto state = [&] { return ca.port_info(1).port_state; };
  auto set_state = [&](PortState s) {
    return set_port_info(e, ca, 1, [&](PortInfo& pi) { pi.port_state = static_cast<std::uint8_t>(s); });
  };
  REQUIRE(state() == 2);  // Init

  auto a = set_state(PortState::kActive);  // Init -> Active skips Armed
  CHECK(smp_status(a.out.mad) == status::kInvalidAttrValue);
  CHECK(state() == 2);
  CHECK(reply_port_info(a).port_state == 2);  // the response carries the unchanged value

  a = set_port_info(e, ca, 1, [](PortInfo& pi) {
    pi.port_state = static_cast<std::uint8_t>(PortState::kArmed);
    pi.lid = 0x0007;
    pi.master_sm_lid = 0x0001;
    pi.lmc = 0;
  });
  REQUIRE(smp_status(a.out.mad) == 0);
  CHECK(state() == 3);
  CHECK(ca.port_info(1).lid == 7);
  CHECK(reply_port_info(a).lid == 7);
  CHECK(a.out.dlid == 0x0001);  // LID routed: back to the requester's SLID
  CHECK(a.out.out_port == 1);

  CHECK(smp_status(set_state(PortState::kInit).out.mad) == status::kInvalidAttrValue);  // SM cannot set Init
  CHECK(smp_status(set_state(PortState::kActive).out.mad) == 0);
  CHECK(state() == 4);
  CHECK(smp_status(set_state(PortState::kArmed).out.mad) == status::kInvalidAttrValue);  // Active -> Armed
  CHECK(smp_status(set_state(PortState::kDown).out.mad) == 0);
  CHECK(ca.link_retrains == 1);
  CHECK(state() == 2);  // the fake link came back up in Init

  SECTION("an invalid field leaves every field as it was") {
    auto before = ca.port_info(1);
    a = set_port_info(e, ca, 1, [](PortInfo& pi) {
      pi.lid = 0x55;
      pi.neighbor_mtu = 6;  // above MTUCap 5
    });
    CHECK(smp_status(a.out.mad) == status::kInvalidAttrValue);
    CHECK(ca.port_info(1) == before);
  }
  SECTION("width/speed 'set to supported' codes") {
    a = set_port_info(e, ca, 1, [](PortInfo& pi) {
      pi.link_width_enabled = 0xFF;
      pi.link_speed_enabled = 0xF;
    });
    CHECK(smp_status(a.out.mad) == 0);
    CHECK(ca.port_info(1).link_width_enabled == 3);
    CHECK(ca.port_info(1).link_speed_enabled == 1);
    a = set_port_info(e, ca, 1, [](PortInfo& pi) { pi.link_width_enabled = 8; });  // 12x not supported
    CHECK(smp_status(a.out.mad) == status::kInvalidAttrValue);
  }
}

TEST_CASE("SMA: unsupported attributes and methods are answered at once", "[sma]") {
  FakeNode ca(NodeType::kCa, 1, kCaGuid);
  SmaEngine e(ca);
  struct Case {
    std::uint8_t method;
    std::uint16_t attr;
    std::uint16_t status;
  };
  const Case cases[] = {
      {method::kGet, 0xFF10, status::kMethodAttrUnsupported},
      {method::kGet, attr::kSwitchInfo, status::kMethodAttrUnsupported},  // a CA has none
      {method::kGet, attr::kRandomFwdTable, status::kMethodAttrUnsupported},
      {method::kGet, attr::kSmInfo, status::kMethodAttrUnsupported},      // no SM here
      {method::kSet, attr::kNodeInfo, status::kMethodAttrUnsupported},    // read-only
      {method::kSend, attr::kNodeInfo, status::kMethodUnsupported},
      {0x04, attr::kNodeInfo, status::kMethodUnsupported},
  };
  for (const auto& c : cases) {
    Mad m = dr_arriving(c.method, c.attr, 0, 1);
    auto a = e.handle_smp(m, 1, kPermissiveLid);
    INFO("attr " << c.attr << " method " << int(c.method));
    REQUIRE(a.kind == SmpActionKind::kReply);
    CHECK(smp_status(a.out.mad) == c.status);
    CHECK(mad_method(a.out.mad) == method::kGetResp);
    CHECK(smp_direction(a.out.mad));
  }
  Mad m = lid_routed(method::kGet, attr::kNodeInfo, 0);
  put8(m, 2, 2);  // class version 2
  auto a = e.handle_smp(m, 1, 5);
  REQUIRE(a.kind == SmpActionKind::kReply);
  CHECK(mad_status(a.out.mad) == status::kBadVersion);
  CHECK(e.stats().unsupported == 7);
  CHECK(e.stats().bad_version == 1);

  ca.sm = true;  // with an SM on the node, SMInfo goes to it
  m = dr_arriving(method::kGet, attr::kSmInfo, 0, 1);
  CHECK(e.handle_smp(m, 1, kPermissiveLid).kind == SmpActionKind::kDeliverLocal);
}

TEST_CASE("SMA: responses and traps for an SM on this node are delivered", "[sma]") {
  FakeNode ca(NodeType::kCa, 1, kCaGuid);
  SmaEngine e(ca);
  // A DR GetResp coming back to HopPointer 1 at the SM's node.
  Mad m = dr_arriving(method::kGet, attr::kNodeInfo, 0, 2);
  smp_make_response(m, 0);
  smp_set_hop_ptr(m, 1);
  auto a = e.handle_smp(m, 1, kPermissiveLid);
  REQUIRE(a.kind == SmpActionKind::kDeliverLocal);
  CHECK(smp_hop_ptr(a.out.mad) == 0);
  Mad t = lid_routed(method::kTrap, attr::kNotice, 0);
  CHECK(e.handle_smp(t, 1, 9).kind == SmpActionKind::kDeliverLocal);
  CHECK(e.stats().delivered == 2);
}

TEST_CASE("SMA: M_Key protection (IBA 14.2.4)", "[sma]") {
  FakeNode ca(NodeType::kCa, 1, kCaGuid);
  ca.port(1).mkey = 0xABCDEF;
  ca.port(1).master_sm_lid = 1;
  ca.port(1).lid = 4;
  SmaEngine e(ca);
  const auto t0 = std::chrono::steady_clock::time_point{} + std::chrono::seconds(5);

  SECTION("protect bits 0: Get with a wrong key answered, Set dropped") {
    Mad g = lid_routed(method::kGet, attr::kPortInfo, 1, 0x1);
    auto a = e.handle_smp(g, 1, 1);
    REQUIRE(a.kind == SmpActionKind::kReply);
    CHECK(reply_port_info(a).mkey == 0xABCDEF);
    a = set_port_info(e, ca, 1, [](PortInfo& pi) { pi.lid = 9; }, 0x1);
    CHECK(a.kind == SmpActionKind::kDrop);
    CHECK(ca.port_info(1).lid == 4);
    CHECK(ca.port_info(1).mkey_violations == 1);
    CHECK(e.stats().mkey_violations == 1);
  }
  SECTION("protect bits 1: Get answered with M_Key 0") {
    ca.port(1).mkey_protect_bits = 1;
    auto a = e.handle_smp(lid_routed(method::kGet, attr::kPortInfo, 1, 0x1), 1, 1);
    REQUIRE(a.kind == SmpActionKind::kReply);
    CHECK(reply_port_info(a).mkey == 0);
    a = e.handle_smp(lid_routed(method::kGet, attr::kPortInfo, 1, 0xABCDEF), 1, 1);
    CHECK(reply_port_info(a).mkey == 0xABCDEF);
  }
  SECTION("protect bits 2: Get with a wrong key dropped, counted and trapped") {
    ca.port(1).mkey_protect_bits = 2;
    auto a = e.handle_smp(lid_routed(method::kGet, attr::kNodeInfo, 0, 0x1), 1, 1, t0);
    CHECK(a.kind == SmpActionKind::kDrop);
    CHECK(ca.port_info(1).mkey_violations == 1);
    REQUIRE(a.trap);
    CHECK(a.trap->dlid == 1);
    CHECK(mad_method(a.trap->mad) == method::kTrap);
    auto n = decode_notice(smp_data(ConstBytes(a.trap->mad)));
    CHECK(n->trap_number == trap::kBadMKey);
    CHECK(n->issuer_lid == 4);
    a = e.handle_smp(lid_routed(method::kGet, attr::kNodeInfo, 0, 0xABCDEF), 1, 1, t0);
    CHECK(a.kind == SmpActionKind::kReply);
  }
}

TEST_CASE("SMA: trap 128 goes to the SM until it is repressed", "[sma]") {
  FakeNode sw(NodeType::kSwitch, 4, kSwGuid);
  sw.port(0).lid = 3;
  SmaConfig cfg;
  cfg.trap_resend_interval = std::chrono::milliseconds(100);
  cfg.trap_max_sends = 3;
  SmaEngine e(sw, cfg);
  const auto t0 = std::chrono::steady_clock::time_point{} + std::chrono::seconds(1);
  CHECK_FALSE(e.send_trap_128(t0));  // no SM known yet
  sw.port(0).master_sm_lid = 1;
  auto out = e.send_trap_128(t0);
  REQUIRE(out);
  CHECK(out->dlid == 1);
  CHECK(out->out_port == 0);  // LID routed through the LFT
  CHECK(mad_class(out->mad) == mgmt_class::kSubnLid);
  CHECK(mad_attr_id(out->mad) == attr::kNotice);
  auto n = decode_notice(smp_data(ConstBytes(out->mad)));
  CHECK(n->trap_number == 128);
  CHECK(n->producer_type == 2);
  CHECK(n->issuer_lid == 3);
  CHECK(get16(smp_data(ConstBytes(out->mad)), 10) == 3);  // LIDADDR

  CHECK(e.trap_resends(t0 + std::chrono::milliseconds(50)).empty());
  CHECK(e.trap_resends(t0 + std::chrono::milliseconds(150)).size() == 1);

  Mad rep = out->mad;
  put8(rep, 3, method::kTrapRepress);
  auto a = e.handle_smp(rep, 2, 1);
  CHECK(a.kind == SmpActionKind::kDrop);
  CHECK(e.traps_outstanding() == 0);
  CHECK(e.stats().traps_repressed == 1);
  CHECK(e.trap_resends(t0 + std::chrono::seconds(5)).empty());

  // Unrepressed traps stop after trap_max_sends.
  REQUIRE(e.send_trap_128(t0));
  CHECK(e.trap_resends(t0 + std::chrono::milliseconds(200)).size() == 1);
  CHECK(e.trap_resends(t0 + std::chrono::milliseconds(400)).size() == 1);
  CHECK(e.trap_resends(t0 + std::chrono::milliseconds(600)).empty());
  CHECK(e.traps_outstanding() == 0);
}

TEST_CASE("SMA: P_KeyTable and SLtoVL by modifier", "[sma]") {
  FakeNode sw(NodeType::kSwitch, 4, kSwGuid);
  SmaEngine e(sw);
  PKeyBlock pk{};
  pk[0] = 0xFFFF;
  pk[1] = 0x8001;
  Mad m = dr_arriving(method::kSet, attr::kPKeyTable, (3u << 16) | 0, 1);  // port 3, block 0
  encode_pkey_block(smp_data(MutBytes(m)), pk);
  auto a = e.handle_smp(m, 1, kPermissiveLid);
  CHECK(smp_status(a.out.mad) == 0);
  CHECK(sw.pkey_block(3, 0) == pk);
  m = dr_arriving(method::kGet, attr::kPKeyTable, (3u << 16) | 1, 1);  // block 1 >= 32 entries
  CHECK(smp_status(e.handle_smp(m, 1, kPermissiveLid).out.mad) == status::kInvalidAttrValue);

  // A CA ignores bits 31:16 (smpquery puts the port number there).
  FakeNode ca(NodeType::kCa, 1, kCaGuid);
  SmaEngine ce(ca);
  m = lid_routed(method::kGet, attr::kPKeyTable, (1u << 16) | 0);
  a = ce.handle_smp(m, 1, 1);
  CHECK(smp_status(a.out.mad) == 0);
  CHECK(decode_pkey_block(smp_data(ConstBytes(a.out.mad)))->at(0) == 0xFFFF);

  SlToVlTable t{};
  t[1] = 1;
  m = dr_arriving(method::kSet, attr::kSlToVlTable, (2u << 8) | 4, 1);
  encode_sl2vl(smp_data(MutBytes(m)), t);
  CHECK(smp_status(e.handle_smp(m, 1, kPermissiveLid).out.mad) == 0);
  CHECK(sw.sl2vl(2, 4) == t);
}

TEST_CASE("PMA: ClassPortInfo and PortCounters as perfquery reads them", "[pma]") {
  FakeNode sw(NodeType::kSwitch, 4, kSwGuid);
  PmaEngine p(sw);
  auto gmp = [](std::uint8_t meth, std::uint16_t attr_id) {
    MadHeader h;
    h.mgmt_class = mgmt_class::kPerfMgmt;
    h.class_version = 1;
    h.method = meth;
    h.tid = 5;
    h.attr_id = attr_id;
    return make_mad(h);
  };
  Mad m = gmp(method::kGet, attr::kClassPortInfo);
  auto a = p.handle_gmp(m, 1);
  REQUIRE(a.kind == PmaActionKind::kReply);
  CHECK(mad_method(a.mad) == method::kGetResp);
  CHECK(mad_status(a.mad) == 0);
  auto cpi = decode_class_port_info(pma_data(ConstBytes(a.mad)));
  CHECK((cpi->capability_mask & pma_cap::kAllPortSelect) != 0);
  CHECK((cpi->capability_mask & pma_cap::kExtWidthSupported) != 0);

  sw.counter(2).xmit_bytes = 4000;
  sw.counter(2).rcv_bytes = 8000;
  sw.counter(2).xmit_pkts = 10;
  sw.counter(2).rcv_pkts = 20;
  sw.counter(2).symbol_errors = 70000;  // saturates at 0xFFFF
  sw.counter(2).link_downed = 3;
  sw.counter(3).xmit_pkts = 5;
  sw.counter(3).xmit_bytes = 0x8'0000'0000ULL;  // > 32-bit words

  auto read_pc = [&](std::uint8_t port) {
    Mad q = gmp(method::kGet, attr::kPortCounters);
    PortCounters req;
    req.port_select = port;
    encode_port_counters(pma_data(MutBytes(q)), req);
    auto r = p.handle_gmp(q, 1);
    REQUIRE(r.kind == PmaActionKind::kReply);
    return std::make_pair(mad_status(r.mad), *decode_port_counters(pma_data(ConstBytes(r.mad))));
  };
  auto [st, pc] = read_pc(2);
  CHECK(st == 0);
  CHECK(pc.port_select == 2);
  CHECK(pc.port_xmit_data == 1000);  // words
  CHECK(pc.port_rcv_data == 2000);
  CHECK(pc.port_xmit_pkts == 10);
  CHECK(pc.port_rcv_pkts == 20);
  CHECK(pc.symbol_error_counter == 0xFFFF);
  CHECK(pc.link_downed_counter == 3);
  CHECK(read_pc(3).second.port_xmit_data == 0xFFFFFFFFu);
  CHECK(read_pc(0xFF).second.port_xmit_pkts == 15);  // AllPortSelect sums
  CHECK(read_pc(9).first == status::kInvalidAttrValue);

  // perfquery -R: Set with CounterSelect = all.
  Mad rst = gmp(method::kSet, attr::kPortCounters);
  PortCounters req;
  req.port_select = 2;
  req.counter_select = pc_select::kXmitData | pc_select::kXmitPkts | pc_select::kSymbolError;
  encode_port_counters(pma_data(MutBytes(rst)), req);
  a = p.handle_gmp(rst, 1);
  CHECK(mad_status(a.mad) == 0);
  auto after = *decode_port_counters(pma_data(ConstBytes(a.mad)));
  CHECK(after.port_xmit_data == 0);
  CHECK(after.port_xmit_pkts == 0);
  CHECK(after.symbol_error_counter == 0);
  CHECK(after.port_rcv_data == 2000);  // not selected: kept
  CHECK(sw.counter(2).xmit_bytes == 0);

  // PortCountersExtended: 64-bit, in words.
  Mad ext = gmp(method::kGet, attr::kPortCountersExtended);
  PortCountersExtended ereq;
  ereq.port_select = 3;
  encode_port_counters_ext(pma_data(MutBytes(ext)), ereq);
  a = p.handle_gmp(ext, 1);
  CHECK(mad_status(a.mad) == 0);
  CHECK(decode_port_counters_ext(pma_data(ConstBytes(a.mad)))->port_xmit_data == 0x2'0000'0000ULL);

  CHECK(mad_status(p.handle_gmp(gmp(method::kGet, attr::kPortSamplesControl), 1).mad) ==
        status::kMethodAttrUnsupported);
  CHECK(mad_status(p.handle_gmp(gmp(method::kSet, attr::kClassPortInfo), 1).mad) ==
        status::kMethodAttrUnsupported);
  CHECK(p.handle_gmp(gmp(method::kGetResp, attr::kPortCounters), 1).kind == PmaActionKind::kDrop);
}

TEST_CASE("SMA: a switch ends the DR part and LID-routes the rest", "[sma]") {
  FakeNode sw(NodeType::kSwitch, 8, kSwGuid);
  SmaEngine e(sw);
  SmpRequest r;
  r.attr_id = attr::kNodeInfo;
  r.hop_cnt = 1;
  r.initial_path[1] = 1;
  r.dr_dlid = 0x0033;
  Mad m = make_smp(r);
  smp_set_hop_ptr(m, 1);
  auto a = e.handle_smp(m, 6, kPermissiveLid);
  REQUIRE(a.kind == SmpActionKind::kForward);
  CHECK(a.out.out_port == 0);  // route by the LFT
  CHECK(a.out.dlid == 0x0033);
  CHECK(smp_hop_ptr(a.out.mad) == 2);
  CHECK(smp_return_path(a.out.mad, 1) == 6);

  // A CA at the end of such a path answers; the reply goes LID routed back
  // to the switch that sent it (the request's LRH SLID).
  FakeNode ca(NodeType::kCa, 1, kCaGuid);
  SmaEngine ce(ca);
  auto b = ce.handle_smp(a.out.mad, 1, 0x0005);
  REQUIRE(b.kind == SmpActionKind::kReply);
  CHECK(b.out.dlid == 0x0005);
  CHECK(b.out.out_port == 1);
  // ... where the switch takes it up again and sends it out ReturnPath[1].
  auto c = e.handle_smp(b.out.mad, 2, 0x0033);
  REQUIRE(c.kind == SmpActionKind::kForward);
  CHECK(c.out.out_port == 6);
  CHECK(c.out.dlid == kPermissiveLid);
}

TEST_CASE("SMA: GUIDInfo of a CA port and a DR SMP with a broken path", "[sma]") {
  FakeNode ca(NodeType::kCa, 2, kCaGuid);
  SmaEngine e(ca);
  Mad m = dr_arriving(method::kGet, attr::kGuidInfo, 0, 1);
  auto a = e.handle_smp(m, 2, kPermissiveLid);
  REQUIRE(a.kind == SmpActionKind::kReply);
  CHECK(decode_guid_block(smp_data(ConstBytes(a.out.mad)))->at(0) == kCaGuid + 2);
  m = dr_arriving(method::kGet, attr::kGuidInfo, 1, 1);  // GUIDCap 8: one block
  CHECK(smp_status(e.handle_smp(m, 2, kPermissiveLid).out.mad) == status::kInvalidAttrValue);

  // HopPointer 1 of HopCount 3 arriving at a CA: it would have to relay.
  m = dr_arriving(method::kGet, attr::kNodeInfo, 0, 3);
  smp_set_hop_ptr(m, 1);
  a = e.handle_smp(m, 1, kPermissiveLid);
  CHECK(a.kind == SmpActionKind::kDrop);
  CHECK_FALSE(a.reason.empty());
  CHECK(e.handle_smp(m, 3, kPermissiveLid).kind == SmpActionKind::kDrop);  // no port 3
  CHECK(e.stats().dropped == 2);
}

TEST_CASE("PMA: a CA's PortSelect and bad versions", "[pma]") {
  FakeNode ca(NodeType::kCa, 1, kCaGuid);
  PmaConfig cfg;
  cfg.capability_mask = pma_cap::kExtWidthSupported;  // no AllPortSelect
  PmaEngine p(ca, cfg);
  auto pc_get = [&](std::uint8_t port, std::uint8_t class_version = 1) {
    MadHeader h;
    h.mgmt_class = mgmt_class::kPerfMgmt;
    h.class_version = class_version;
    h.method = method::kGet;
    h.attr_id = attr::kPortCounters;
    Mad m = make_mad(h);
    PortCounters req;
    req.port_select = port;
    encode_port_counters(pma_data(MutBytes(m)), req);
    auto a = p.handle_gmp(m, 1);
    REQUIRE(a.kind == PmaActionKind::kReply);
    return mad_status(a.mad);
  };
  CHECK(pc_get(1) == 0);
  CHECK(pc_get(0) == status::kInvalidAttrValue);     // a CA has no port 0
  CHECK(pc_get(0xFF) == status::kInvalidAttrValue);  // AllPortSelect not advertised
  CHECK(pc_get(1, 2) == status::kBadVersion);
  CHECK(p.stats().invalid_value == 2);
}

TEST_CASE("SMA: the M_Key lease expires and lifts the protection (IBA 14.2.4.2)", "[sma]") {
  FakeNode ca(NodeType::kCa, 1, kCaGuid);
  ca.port(1).mkey = 0x5;
  ca.port(1).mkey_protect_bits = 3;
  ca.port(1).mkey_lease_period = 10;  // seconds
  SmaEngine e(ca);
  const auto t0 = std::chrono::steady_clock::time_point{} + std::chrono::seconds(100);
  Mad g = lid_routed(method::kGet, attr::kNodeInfo, 0, 0x6);
  CHECK(e.handle_smp(g, 1, 1, t0).kind == SmpActionKind::kDrop);  // starts the lease
  CHECK(e.handle_smp(g, 1, 1, t0 + std::chrono::seconds(9)).kind == SmpActionKind::kDrop);
  e.tick(t0 + std::chrono::seconds(10));
  CHECK(ca.port_info(1).mkey_protect_bits == 0);
  CHECK(e.handle_smp(g, 1, 1, t0 + std::chrono::seconds(11)).kind == SmpActionKind::kReply);

  SECTION("the right M_Key in time stops the timer") {
    ca.port(1).mkey_protect_bits = 3;
    const auto t1 = t0 + std::chrono::seconds(20);
    CHECK(e.handle_smp(g, 1, 1, t1).kind == SmpActionKind::kDrop);
    Mad ok = lid_routed(method::kGet, attr::kNodeInfo, 0, 0x5);
    CHECK(e.handle_smp(ok, 1, 1, t1 + std::chrono::seconds(1)).kind == SmpActionKind::kReply);
    e.tick(t1 + std::chrono::seconds(60));
    CHECK(ca.port_info(1).mkey_protect_bits == 3);
  }
}
