// simhca's SMA and PMA (docs/simhca.md §14, §15): two device cores cabled
// back to back in process (the harness of test/unit/test_transport.cpp),
// one acting as the subnet manager's host. Its driver side — QP0 and QP1,
// address handles, WQEs, CQEs, the event queue — is written from the
// manual's tables; MADs are built with the project's MAD codecs (src/mad).
#include <catch2/catch.hpp>

#include "../unit/transport_harness.hpp"
#include "test_simhca_fixture.hpp"
#include "mad/mad.hpp"
#include "mad/pma_attrs.hpp"
#include "mad/sma_attrs.hpp"
#include "mad/smp.hpp"
#include "sim/cable/udp_link.hpp"
#include "sim/wire/packet.hpp"

using namespace openib;
using namespace openib::test;
using Wr = Node::Wr;

namespace {

constexpr size_t kRecvBytes = 40 + 256;  // §12.2: GRH area, then the MAD

// A driver's management QP (QP0 or QP1) of port 1 in RTS with receive
// buffers posted, and an event queue for the port events (§9.4).
struct Mgmt {
  Mgmt(Node& n, uint8_t type, uint8_t port = 1) : node(n) {
    q.type = type;
    q.sq = n.alloc((size_t{1} << q.log_sq) << q.sq_stride, 64);
    q.rq = n.alloc((size_t{1} << q.log_rq) << q.rq_stride, 64);
    q.dbr = n.alloc(8, 8);
    Bytes in(64);
    put8(in, 0, type);
    put8(in, 1, port);
    put32(in, 4, n.pd);
    put32(in, 8, n.cq.cqn);
    put32(in, 0x0c, n.cq.cqn);
    put64(in, 0x18, q.sq);
    put64(in, 0x20, q.rq);
    put64(in, 0x28, q.dbr);
    put8(in, 0x30, q.log_sq);
    put8(in, 0x31, q.sq_stride);
    put8(in, 0x32, q.log_rq);
    put8(in, 0x33, q.rq_stride);
    q.qpn = Node::num(n.cmd(kOpCreateQp, in));
    using namespace attr;
    n.modify(q.qpn, kState | kPkeyIndex | kQkey, [&](auto a) {  // §8.2: SMI/GSI RESET->INIT
      put8(a, 0, kInit);
      put32(a, 8, type == kQpGsi ? kGsiQkey : 0);
    });
    n.to_state(q.qpn, kRtr);
    n.modify(q.qpn, kState | kSqPsn, [&](auto a) { put8(a, 0, kRts); });
    q.type = kQpUd;  // the WQEs of SMI/GSI have the UD layout (§12.1)
    buf = n.alloc(64 * 512, 64);
    key = n.reg_mr(buf, 64 * 512, kMrLocalWrite);
    for (int i = 0; i < 32; ++i) post_recv();
  }
  void post_recv() {
    const uint64_t at = buf + 512 * (recv_seq % 32);
    node.post_recv(q, recv_seq++, {{static_cast<uint32_t>(kRecvBytes), key, Node::va(at)}});
  }
  // Sends one MAD to `dlid` (QP `dest_qpn`) with Q_Key `qkey`.
  void send(const mad::Mad& m, uint16_t dlid, uint32_t dest_qpn, uint32_t qkey) {
    const uint64_t at = buf + 512 * 32 + 512 * (send_seq % 32);
    std::copy(m.begin(), m.end(), node.mem(at, 256).begin());
    Wr wr;
    wr.opcode = kWrSend;
    wr.wr_id = 1000 + send_seq++;
    wr.ahn = node.create_ah(dlid);
    wr.dest_qpn = dest_qpn;
    wr.qkey = qkey;
    wr.sges = {{256, key, Node::va(at)}};
    node.post_send(q, wr);
  }
  // The MAD of a receive CQE (after the 40-byte GRH area).
  mad::Mad received(const Cqe& c) {
    mad::Mad m{};
    auto b = node.mem(buf + 512 * (c.wr_id % 32) + 40, 256);
    std::copy(b.begin(), b.end(), m.begin());
    return m;
  }
  Node& node;
  TQp q;
  uint64_t buf = 0;
  uint32_t key = 0;
  uint64_t recv_seq = 0, send_seq = 0;
};

// Port events (§9.4) through an EQ of their own.
struct PortEvents {
  explicit PortEvents(Node& n) : node(n) {
    ring = n.alloc(32 * 64, 64);
    Bytes in(32);
    put64(in, 0, ring);
    put64(in, 8, (1ull << kEvPortStateChange) | (1ull << kEvLidChange) | (1ull << kEvPkeyChange) |
                     (1ull << kEvSmChange) | (1ull << kEvClientReregister) | (1ull << kEvGidChange));
    put8(in, 0x10, 6);
    eqn = Node::num(n.cmd(kOpCreateEq, in));
  }
  struct Ev {
    uint8_t type, b0, b1, b2;
    uint16_t lid;
  };
  std::vector<Ev> take() {  // §9.2 ownership phase
    std::vector<Ev> out;
    for (;;) {
      auto e = node.mem(ring + 32 * (ci % 64), 32);
      if ((get8(e, 0x1f) & 1) != (((ci >> 6) & 1) ^ 1)) break;
      out.push_back({get8(e, 0), get8(e, 4), get8(e, 5), get8(e, 6), get16(e, 6)});
      ++ci;
    }
    return out;
  }
  Node& node;
  uint64_t ring = 0;
  uint32_t eqn = 0, ci = 0;
};

struct PortView {
  uint8_t state, phys;
  uint16_t lid, sm_lid;
  uint64_t port_guid;
};
PortView query_port(Node& n, uint8_t port = 1) {
  Bytes in(4);
  put8(in, 0, port);
  Bytes o = n.cmd(kOpQueryPort, in);
  return {get8(o, 0), get8(o, 1), get16(o, 2), get16(o, 4), get64(o, 0x18)};
}

// A directed-route SMP to the node at the other end of port 1 (hop count
// 1), as the SM's MAD layer sends it: after its SMI step (IBA 14.2.2.2).
mad::Mad dr_smp(uint8_t method, uint16_t attr, uint32_t mod, uint64_t tid, uint8_t hops = 1,
                mad::ConstBytes data = {}, uint64_t mkey = 0) {
  mad::SmpRequest r;
  r.method = method;
  r.attr_id = attr;
  r.attr_mod = mod;
  r.tid = tid;
  r.mkey = mkey;
  r.hop_cnt = hops;
  r.initial_path[1] = 1;
  mad::Mad m = mad::make_smp(r, data);
  (void)mad::dr_send(m, false, 1);
  return m;
}

// SM host `a` (QP0 up) and the managed node `b`.
struct Subnet {
  Subnet() : sm(w.a, kQpSmi) {}
  // Sends `m` from a's QP0 (to the permissive LID) and returns the first
  // MAD a's QP0 receives, if any within the deadline.
  std::optional<mad::Mad> ask(const mad::Mad& m, uint16_t dlid = 0xffff) {
    sm.send(m, dlid, 0, 0);
    return wait_mad();
  }
  std::optional<mad::Mad> wait_mad(std::chrono::milliseconds limit = std::chrono::milliseconds(50)) {
    std::optional<mad::Mad> got;
    w.run([&] {
      for (const Cqe& c : w.a.poll(w.a.cq)) {
        if (c.opcode != kWcRecv) continue;
        REQUIRE(c.status == kWcSuccess);
        got = sm.received(c);
        sm.post_recv();
      }
      return got.has_value();
    }, limit);
    return got;
  }
  mad::PortInfo port_info(uint64_t tid, uint64_t mkey = 0) {
    auto r = ask(dr_smp(mad::method::kGet, mad::attr::kPortInfo, 0, tid, 1, {}, mkey));
    REQUIRE(r);
    REQUIRE(mad::smp_status(*r) == 0);
    auto pi = mad::decode_port_info(mad::smp_data(mad::ConstBytes(*r)));
    REQUIRE(pi.ok());
    return *pi;
  }
  // Set PortInfo from the current value with `edit` applied; the response.
  mad::Mad set_port_info(uint64_t tid, const std::function<void(mad::PortInfo&)>& edit, uint64_t mkey = 0) {
    mad::PortInfo pi = port_info(tid + 1000, mkey);
    pi.port_state = 0;       // no change unless edit says
    pi.port_phys_state = 0;
    edit(pi);
    std::array<std::byte, 64> data{};
    mad::encode_port_info(data, pi);
    auto r = ask(dr_smp(mad::method::kSet, mad::attr::kPortInfo, 0, tid, 1, data, mkey));
    REQUIRE(r);
    return *r;
  }
  Wire w;
  Mgmt sm;
};

}  // namespace

TEST_CASE("SMA: directed-route Get NodeInfo, NodeDescription, GUIDInfo from across the cable",
          "[sma]") {
  Subnet s;
  auto r = s.ask(dr_smp(mad::method::kGet, mad::attr::kNodeInfo, 0, 0x11));
  REQUIRE(r);
  CHECK(mad::mad_method(*r) == mad::method::kGetResp);
  CHECK(mad::mad_tid(*r) == 0x11);
  CHECK(mad::smp_status(*r) == 0);
  CHECK(mad::smp_direction(*r));
  auto ni = mad::decode_node_info(mad::smp_data(mad::ConstBytes(*r)));
  REQUIRE(ni.ok());
  const uint64_t guid = HcaOptions{}.caps.node_guid;
  CHECK(ni->node_type == 1);  // CA
  CHECK(ni->num_ports == 1);
  CHECK(ni->node_guid == guid);
  CHECK(ni->system_image_guid == guid);
  CHECK(ni->port_guid == guid + 1);  // §14.2: node GUID + port number
  CHECK(ni->local_port_num == 1);
  CHECK(ni->partition_cap == 1);
  CHECK(ni->device_id == 0x1b1e);
  CHECK(ni->vendor_id == 0x1234);
  CHECK(ni->revision == 1);
  CHECK(query_port(s.w.b).port_guid == guid + 1);  // QUERY_PORT agrees

  r = s.ask(dr_smp(mad::method::kGet, mad::attr::kNodeDescription, 0, 0x12));
  REQUIRE(r);
  auto nd = mad::decode_node_description(mad::smp_data(mad::ConstBytes(*r)));
  REQUIRE(nd.ok());
  CHECK(*nd == "simhca 0x123400fffe000001");

  r = s.ask(dr_smp(mad::method::kGet, mad::attr::kGuidInfo, 0, 0x13));
  REQUIRE(r);
  auto gb = mad::decode_guid_block(mad::smp_data(mad::ConstBytes(*r)));
  REQUIRE(gb.ok());
  CHECK((*gb)[0] == guid + 1);

  r = s.ask(dr_smp(mad::method::kGet, mad::attr::kPKeyTable, 0, 0x14));
  REQUIRE(r);
  auto pk = mad::decode_pkey_block(mad::smp_data(mad::ConstBytes(*r)));
  REQUIRE(pk.ok());
  CHECK((*pk)[0] == 0xffff);
  CHECK(s.w.b.hca.data_stats().smps_answered == 4);
}

TEST_CASE("SMA: PortInfo Set drives the port Down -> Init -> Armed -> Active with a LID", "[sma]") {
  Subnet s;
  PortEvents ev(s.w.b);
  mad::PortInfo pi = s.port_info(1);
  CHECK(pi.port_state == 4);  // the harness set it up statically (SET_PORT, §6.3)
  CHECK(pi.port_phys_state == 5);
  CHECK(pi.lid == 2);
  CHECK(pi.local_port_num == 1);
  CHECK((pi.capability_mask & (1u << 25)) != 0);  // IsClientReregistrationSupported
  CHECK((pi.capability_mask & 2u) == 0);          // no SM on b yet
  {  // §6.3 SET_PORT capability mask: the driver announces an SM (IsSM)
    Bytes in(32);
    put8(in, 0, 1);
    put8(in, 0x0c, kSel2CapMask);
    put32(in, 0x18, 2u);
    s.w.b.cmd(kOpSetPort, in);
    Bytes bad(24);  // the extension without its 8 bytes
    put8(bad, 0, 1);
    put8(bad, 0x0c, kSel2CapMask);
    s.w.b.cmd(kOpSetPort, bad, kBadInputLen);
    Bytes other(32);  // a bit the driver does not own
    put8(other, 0, 1);
    put8(other, 0x0c, kSel2CapMask);
    put32(other, 0x18, 1u << 25);
    s.w.b.cmd(kOpSetPort, other, kBadParam);
  }
  CHECK((s.port_info(9).capability_mask & 2u) != 0);

  // Down: the link retrains at once and the port comes back in Init.
  auto r = s.set_port_info(2, [](mad::PortInfo& p) { p.port_state = 1; });
  CHECK(mad::smp_status(r) == 0);
  CHECK(query_port(s.w.b).state == 2);
  auto e = ev.take();
  REQUIRE(e.size() == 2);
  CHECK(e[0].type == kEvPortStateChange);
  CHECK((e[0].b0 == 1 && e[0].b1 == 4 && e[0].b2 == 1));
  CHECK((e[1].b1 == 1 && e[1].b2 == 2));

  // Init -> Armed with the SM's LID assignment, then Active.
  r = s.set_port_info(3, [](mad::PortInfo& p) {
    p.port_state = 3;
    p.lid = 0x21;
    p.master_sm_lid = 1;
    p.master_sm_sl = 0;
    p.subnet_timeout = 18;
  });
  CHECK(mad::smp_status(r) == 0);
  auto now = mad::decode_port_info(mad::smp_data(mad::ConstBytes(r)));
  REQUIRE(now.ok());
  CHECK(now->port_state == 3);
  CHECK(now->lid == 0x21);
  CHECK(now->subnet_timeout == 18);
  PortView q = query_port(s.w.b);
  CHECK(q.state == 3);
  CHECK(q.lid == 0x21);
  CHECK(q.sm_lid == 1);
  e = ev.take();
  bool saw_state = false, saw_lid = false, saw_sm = false;
  for (auto& x : e) {
    saw_state |= x.type == kEvPortStateChange && x.b1 == 2 && x.b2 == 3;
    saw_lid |= x.type == kEvLidChange && x.lid == 0x21;
    saw_sm |= x.type == kEvSmChange;
  }
  CHECK(saw_state);
  CHECK(saw_lid);
  CHECK(saw_sm);

  r = s.set_port_info(4, [](mad::PortInfo& p) {
    p.port_state = 4;
    p.client_reregister = true;
  });
  CHECK(mad::smp_status(r) == 0);
  CHECK(query_port(s.w.b).state == 4);
  e = ev.take();
  REQUIRE(e.size() == 2);
  CHECK((e[0].type == kEvPortStateChange && e[0].b1 == 3 && e[0].b2 == 4));
  CHECK(e[1].type == kEvClientReregister);

  // LID routed now: the SM reaches the port by its new LID.
  mad::SmpRequest lr;
  lr.directed = false;
  lr.attr_id = mad::attr::kPortInfo;
  lr.tid = 5;
  auto lrr = s.ask(mad::make_smp(lr), 0x21);
  REQUIRE(lrr);
  CHECK(mad::smp_status(*lrr) == 0);
  auto lpi = mad::decode_port_info(mad::smp_data(mad::ConstBytes(*lrr)));
  REQUIRE(lpi.ok());
  CHECK(lpi->lid == 0x21);
}

TEST_CASE("SMA: an invalid PortState transition is refused and changes nothing", "[sma]") {
  Subnet s;
  (void)s.set_port_info(1, [](mad::PortInfo& p) { p.port_state = 1; });  // -> Init
  REQUIRE(query_port(s.w.b).state == 2);
  PortEvents ev(s.w.b);
  auto r = s.set_port_info(2, [](mad::PortInfo& p) {
    p.port_state = 4;  // IBA 14.2.5.6: Active only from Armed
    p.lid = 0x33;
  });
  CHECK(mad::smp_status(r) == mad::status::kInvalidAttrValue);
  PortView q = query_port(s.w.b);
  CHECK(q.state == 2);
  CHECK(q.lid == 2);  // the LID of the refused Set was not applied either
  CHECK(ev.take().empty());
}

TEST_CASE("SMA: unsupported attributes and methods are answered at once", "[sma]") {
  Subnet s;
  auto r = s.ask(dr_smp(mad::method::kGet, mad::attr::kLinearFwdTable, 0, 7));  // switches only
  REQUIRE(r);
  CHECK(mad::mad_method(*r) == mad::method::kGetResp);
  CHECK(mad::smp_status(*r) == mad::status::kMethodAttrUnsupported);
  r = s.ask(dr_smp(mad::method::kGet, 0x00ee, 0, 8));
  REQUIRE(r);
  CHECK(mad::smp_status(*r) == mad::status::kMethodAttrUnsupported);
  r = s.ask(dr_smp(mad::method::kSend, mad::attr::kNodeInfo, 0, 9));
  REQUIRE(r);
  CHECK(mad::smp_status(*r) == mad::status::kMethodUnsupported);
}

TEST_CASE("SMA: M_Key protects Set; a wrong key is dropped, counted and trapped", "[sma][mkey]") {
  Subnet s;
  constexpr uint64_t kKey = 0x1122334455667788ull;
  auto r = s.set_port_info(1, [&](mad::PortInfo& p) {
    p.mkey = kKey;
    p.mkey_protect_bits = 1;  // Gets pass but hide the key (IBA 14.2.4.1)
    p.master_sm_lid = 1;      // where trap 256 goes: the SM's port (a)
  });
  REQUIRE(mad::smp_status(r) == 0);
  // A Set with the wrong key: no answer, but a Trap(Notice 256) to the SM.
  std::array<std::byte, 64> data{};
  mad::PortInfo pi = s.port_info(2);
  CHECK(pi.mkey == 0);  // hidden from a Get without the key
  pi.lid = 0x77;
  pi.port_state = 0;
  pi.port_phys_state = 0;
  mad::encode_port_info(data, pi);
  auto got = s.ask(dr_smp(mad::method::kSet, mad::attr::kPortInfo, 0, 3, 1, data, 0xbad));
  REQUIRE(got);
  CHECK(mad::mad_method(*got) == mad::method::kTrap);
  auto n = mad::decode_notice(mad::smp_data(mad::ConstBytes(*got)));
  REQUIRE(n.ok());
  CHECK(n->trap_number == mad::trap::kBadMKey);
  CHECK(s.w.b.hca.data_stats().mkey_violations == 1);
  CHECK(query_port(s.w.b).lid == 2);  // unchanged
  // With the key: the violation is counted in PortInfo:M_KeyViolations.
  pi = s.port_info(4, kKey);
  CHECK(pi.mkey == kKey);
  CHECK(pi.mkey_violations == 1);
  r = s.set_port_info(5, [](mad::PortInfo& p) { p.lid = 0x77; }, kKey);
  CHECK(mad::smp_status(r) == 0);
  CHECK(query_port(s.w.b).lid == 0x77);
}

TEST_CASE("SMA: the M_Key lease runs out after a violation", "[sma][mkey]") {
  Subnet s;
  constexpr uint64_t kKey = 0xabcdef;
  auto r = s.set_port_info(1, [&](mad::PortInfo& p) {
    p.mkey = kKey;
    p.mkey_protect_bits = 2;  // Gets need the key too
    p.mkey_lease_period = 2;  // seconds
  });
  REQUIRE(mad::smp_status(r) == 0);
  CHECK(!s.ask(dr_smp(mad::method::kGet, mad::attr::kPortInfo, 0, 2)));  // dropped
  CHECK(s.w.b.hca.data_stats().mkey_violations == 1);
  // No SMP with the key for the lease period: the protection lapses (IBA 14.2.4.2).
  (void)s.w.run([] { return false; }, std::chrono::milliseconds(2100));
  mad::PortInfo pi = s.port_info(3);
  CHECK(pi.mkey_protect_bits == 0);
  CHECK(pi.mkey == kKey);  // protect bits 0: a Get shows the key
  CHECK(pi.mkey_violations == 1);
}

TEST_CASE("SMA: the driver's own QP0 gets its port's answer by loopback", "[sma][loopback]") {
  Wire w;
  Mgmt b0(w.b, kQpSmi);
  const uint64_t a_rx = w.a.hca.data_stats().rx_packets;
  const uint64_t b_tx = w.b.hca.pma_counters(1).xmit_pkts;
  b0.send(dr_smp(mad::method::kGet, mad::attr::kNodeInfo, 0, 0x42, 0), 0xffff, 0, 0);
  std::optional<mad::Mad> got;
  w.run([&] {
    for (const Cqe& c : w.b.poll(w.b.cq))
      if (c.opcode == kWcRecv) got = b0.received(c);
    return got.has_value();
  }, std::chrono::milliseconds(50));
  REQUIRE(got);
  CHECK(mad::mad_tid(*got) == 0x42);
  CHECK(mad::mad_method(*got) == mad::method::kGetResp);
  CHECK(mad::smp_hop_ptr(*got) == 0);  // back at node 0 (IBA 14.2.2.4 C14-13:3)
  auto ni = mad::decode_node_info(mad::smp_data(mad::ConstBytes(*got)));
  REQUIRE(ni.ok());
  CHECK(ni->node_guid == w.b.hca.port_info(1).port_guid - 1);
  CHECK(w.a.hca.data_stats().rx_packets == a_rx);              // nothing crossed the cable
  CHECK(w.b.hca.pma_counters(1).xmit_pkts == b_tx);
  CHECK(w.b.hca.data_stats().loopback_packets >= 1);

  // LID routed to the port's own LID: also looped back (and answered).
  mad::SmpRequest lr;
  lr.directed = false;
  lr.attr_id = mad::attr::kPortInfo;
  lr.tid = 0x43;
  got.reset();
  b0.send(mad::make_smp(lr), 2, 0, 0);
  w.run([&] {
    for (const Cqe& c : w.b.poll(w.b.cq))
      if (c.opcode == kWcRecv) got = b0.received(c);
    return got.has_value();
  }, std::chrono::milliseconds(50));
  REQUIRE(got);
  CHECK(mad::mad_tid(*got) == 0x43);
  CHECK(w.a.hca.data_stats().rx_packets == a_rx);
}

TEST_CASE("SMA: SMPs flow while the port is Init; QP0 takes VL15 only", "[sma]") {
  Subnet s;
  (void)s.set_port_info(1, [](mad::PortInfo& p) { p.port_state = 1; });  // -> Init
  REQUIRE(query_port(s.w.b).state == 2);
  auto r = s.ask(dr_smp(mad::method::kGet, mad::attr::kNodeInfo, 0, 2));
  REQUIRE(r);
  CHECK(mad::smp_status(*r) == 0);

  // The same SMP on VL0, and a VL15 packet for a data QP: both dropped (IBA 7.6.5).
  auto raw = [&](uint8_t vl, uint32_t dest_qp) {
    sim::wire::Headers h;
    h.lrh.vl = vl;
    h.lrh.dlid = 0xffff;
    h.lrh.slid = 0xffff;
    h.bth.opcode = sim::wire::opcode(sim::wire::Transport::kUd, sim::wire::Op::kSendOnly);
    h.bth.pkey = 0xffff;
    h.bth.dest_qp = dest_qp;
    h.deth = sim::wire::Deth{0, 0};
    mad::Mad m = dr_smp(mad::method::kGet, mad::attr::kNodeInfo, 0, 3);
    auto pkt = sim::wire::build_packet(h, m);
    REQUIRE(pkt.ok());
    return *pkt;
  };
  const DataStats before = s.w.b.hca.data_stats();
  s.w.b.hca.receive_packet(raw(0, 0), s.w.now);
  s.w.b.hca.receive_packet(raw(15, 5), s.w.now);
  (void)s.w.run([] { return false; }, std::chrono::milliseconds(5));
  const DataStats& after = s.w.b.hca.data_stats();
  CHECK(after.rx_bad_vl == before.rx_bad_vl + 2);
  CHECK(after.smps_answered == before.smps_answered);

  // Garbage MADs into QP0 never get an answer and never stop the SMA.
  for (int i = 0; i < 64; ++i) {
    mad::Mad m{};
    for (size_t k = 0; k < m.size(); ++k) m[k] = std::byte(static_cast<uint8_t>(k * 31 + i * 7));
    put8(m, 1, i % 2 ? 0x81 : 0x01);
    s.sm.send(m, 0xffff, 0, 0);
  }
  while (s.wait_mad(std::chrono::milliseconds(20))) {
  }
  r = s.ask(dr_smp(mad::method::kGet, mad::attr::kNodeInfo, 0, 4));
  REQUIRE(r);
  CHECK(mad::mad_tid(*r) == 4);
}

TEST_CASE("PMA: PortCounters count real traffic; Set CounterSelect resets", "[pma]") {
  Wire w;
  Mgmt gsi(w.a, kQpGsi);
  // UD traffic a -> b: 10 messages of 1000 bytes.
  TQp ua = w.a.create_qp(kQpUd), ub = w.b.create_qp(kQpUd);
  Node::Path pa, pb;
  pa.qkey = pb.qkey = 0x1234;
  w.a.connect(ua, pa);
  w.b.connect(ub, pb);
  const uint64_t src = w.a.alloc(4096, 64), dst = w.b.alloc(64 * 2048, 64);
  const uint32_t ks = w.a.reg_mr(src, 4096, kMrLocalWrite), kd = w.b.reg_mr(dst, 64 * 2048, kMrLocalWrite);
  for (int i = 0; i < 10; ++i) w.b.post_recv(ub, i, {{2048, kd, Node::va(dst + 2048 * i)}});
  const uint32_t ah = w.a.create_ah(2);
  for (int i = 0; i < 10; ++i) {
    Wr wr;
    wr.ahn = ah;
    wr.dest_qpn = ub.qpn;
    wr.qkey = 0x1234;
    wr.sges = {{1000, ks, Node::va(src)}};
    w.a.post_send(ua, wr);
  }
  size_t got = 0;
  REQUIRE(w.run([&] {
    for (const Cqe& c : w.b.poll(w.b.cq)) got += c.status == kWcSuccess;
    return got == 10;
  }));
  (void)w.a.poll(w.a.cq);

  auto pma_get = [&](uint16_t attr, uint64_t tid, uint8_t method = mad::method::kGet, uint16_t select = 0) {
    mad::MadHeader h;
    h.mgmt_class = mad::mgmt_class::kPerfMgmt;
    h.class_version = 1;
    h.method = method;
    h.tid = tid;
    h.attr_id = attr;
    mad::Mad m = mad::make_mad(h);
    mad::PortCounters pc;
    pc.port_select = 1;
    pc.counter_select = select;
    if (attr == mad::attr::kPortCounters) mad::encode_port_counters(mad::pma_data(mad::MutBytes(m)), pc);
    if (attr == mad::attr::kPortCountersExtended) {
      mad::PortCountersExtended pe;
      pe.port_select = 1;
      pe.counter_select = select;
      mad::encode_port_counters_ext(mad::pma_data(mad::MutBytes(m)), pe);
    }
    gsi.send(m, 2, 1, kGsiQkey);
    std::optional<mad::Mad> r;
    w.run([&] {
      for (const Cqe& c : w.a.poll(w.a.cq))
        if (c.opcode == kWcRecv) {
          REQUIRE(c.status == kWcSuccess);
          CHECK(c.src_qp == 1);
          r = gsi.received(c);
          gsi.post_recv();
        }
      return r.has_value();
    }, std::chrono::milliseconds(50));
    REQUIRE(r);
    CHECK(mad::mad_method(*r) == mad::method::kGetResp);
    CHECK(mad::mad_status(*r) == 0);
    return *r;
  };

  auto r = pma_get(mad::attr::kPortCounters, 1);
  auto pc = mad::decode_port_counters(mad::pma_data(mad::ConstBytes(r)));
  REQUIRE(pc.ok());
  CHECK(pc->port_rcv_pkts >= 10);
  CHECK(pc->port_rcv_pkts <= 12);
  // 10 x (LRH 8 + BTH 12 + DETH 8 + 1000 + ICRC 4) / 4 words at least.
  CHECK(pc->port_rcv_data >= 10 * (1032 / 4));

  r = pma_get(mad::attr::kPortCountersExtended, 2);
  auto pe = mad::decode_port_counters_ext(mad::pma_data(mad::ConstBytes(r)));
  REQUIRE(pe.ok());
  CHECK(pe->port_rcv_pkts >= 10);
  CHECK(pe->port_rcv_data >= 10 * (1032 / 4));
  CHECK(pe->port_xmit_pkts >= 1);  // its first answer

  r = pma_get(mad::attr::kClassPortInfo, 3);
  auto cpi = mad::decode_class_port_info(mad::pma_data(mad::ConstBytes(r)));
  REQUIRE(cpi.ok());
  CHECK((cpi->capability_mask & mad::pma_cap::kExtWidthSupported) != 0);

  // Set with every CounterSelect bit: reset (IBA 16.1.3.5).
  (void)pma_get(mad::attr::kPortCounters, 4, mad::method::kSet, 0xffff);
  r = pma_get(mad::attr::kPortCounters, 5);
  pc = mad::decode_port_counters(mad::pma_data(mad::ConstBytes(r)));
  REQUIRE(pc.ok());
  CHECK(pc->port_rcv_pkts <= 1);  // this very Get
  CHECK(pc->port_rcv_data < 1032 / 4);
  CHECK(pc->port_xmit_pkts <= 1);
}

TEST_CASE("Ports: two ports, port 2 without a cable polls", "[sma][ports]") {
  HcaOptions o;
  o.caps.num_ports = 2;
  o.node_desc = "hostA HCA-1";
  Node n(5, 8u << 20, o);
  Bytes caps = n.cmd(kOpQueryDeviceCap, {});
  CHECK(get8(caps, 0x28) == 2);
  PortView p2 = query_port(n, 2);
  CHECK(p2.state == 1);  // Down
  CHECK(p2.phys == 2);   // Polling
  CHECK(p2.port_guid == o.caps.node_guid + 2);
  // Port 2's QP0 is QPN 2 inside the device (§6.10), and a second SMI on
  // port 1 is refused.
  Mgmt q2(n, kQpSmi, 2);
  CHECK(q2.q.qpn == 2);
  TQp rc = n.create_qp(kQpRc);
  CHECK(rc.qpn >= 4);

  // §13 --node-desc, read through port 1's QP0 by loopback (no cable at all).
  Mgmt q1(n, kQpSmi, 1);
  q1.send(dr_smp(mad::method::kGet, mad::attr::kNodeDescription, 0, 9, 0), 0xffff, 0, 0);
  std::optional<mad::Mad> got;
  for (int i = 0; i < 10 && !got; ++i) {
    n.hca.run_due(Hca::Clock::now());
    for (const Cqe& c : n.poll(n.cq))
      if (c.opcode == kWcRecv && c.qpn == q1.q.qpn) got = q1.received(c);
  }
  REQUIRE(got);
  auto nd = mad::decode_node_description(mad::smp_data(mad::ConstBytes(*got)));
  REQUIRE(nd.ok());
  CHECK(*nd == "hostA HCA-1");
}

TEST_CASE("Ports: the SMA answers on port 2 with that port's identity", "[sma][ports]") {
  // Node A has two ports; its port 2 is cabled to node B's port 1, where the SM runs.
  HcaOptions o;
  o.caps.num_ports = 2;
  o.caps.node_guid = 0x0002c90300001000ull;
  Node a(7, 8u << 20, o);
  Node b(1);
  auto pair = sim::make_loopback_pair();
  auto now = Hca::Clock::time_point{};
  pair->a().set_receiver([&](std::span<const std::byte> p) { a.hca.receive_packet(2, p, now); });
  pair->b().set_receiver([&](std::span<const std::byte> p) { b.hca.receive_packet(p, now); });
  a.hca.attach_link(2, &pair->a());
  b.hca.attach_link(1, &pair->b());
  CHECK(query_port(a, 2).state == 2);  // cabled: Init, LinkUp
  CHECK(query_port(a, 2).phys == 5);
  Mgmt sm(b, kQpSmi);
  auto ask = [&](const mad::Mad& m) {
    sm.send(m, 0xffff, 0, 0);
    std::optional<mad::Mad> got;
    for (int i = 0; i < 50 && !got; ++i) {
      now += std::chrono::microseconds(10);
      a.hca.run_due(now);
      b.hca.run_due(now);
      pair->pump();
      for (const Cqe& c : b.poll(b.cq))
        if (c.opcode == kWcRecv) {
          got = sm.received(c);
          sm.post_recv();
        }
    }
    return got;
  };
  auto r = ask(dr_smp(mad::method::kGet, mad::attr::kNodeInfo, 0, 1));
  REQUIRE(r);
  auto ni = mad::decode_node_info(mad::smp_data(mad::ConstBytes(*r)));
  REQUIRE(ni.ok());
  CHECK(ni->num_ports == 2);
  CHECK(ni->local_port_num == 2);
  CHECK(ni->port_guid == o.caps.node_guid + 2);
  // Port 2 to Armed with a LID; port 1 (statically Active) is untouched.
  r = ask(dr_smp(mad::method::kGet, mad::attr::kPortInfo, 0, 2));
  REQUIRE(r);
  auto pi = mad::decode_port_info(mad::smp_data(mad::ConstBytes(*r)));
  REQUIRE(pi.ok());
  CHECK(pi->local_port_num == 2);
  pi->port_state = 3;
  pi->port_phys_state = 0;
  pi->lid = 0x40;
  std::array<std::byte, 64> data{};
  mad::encode_port_info(data, *pi);
  r = ask(dr_smp(mad::method::kSet, mad::attr::kPortInfo, 0, 3, 1, data));
  REQUIRE(r);
  CHECK(mad::smp_status(*r) == 0);
  CHECK(query_port(a, 2).state == 3);
  CHECK(query_port(a, 2).lid == 0x40);
  CHECK(query_port(a, 1).state == 4);
  CHECK(query_port(a, 1).lid == 7);
  CHECK(a.hca.pma_counters(2).rcv_pkts == 3);
  CHECK(a.hca.pma_counters(1).rcv_pkts == 0);
  // §14.3: the far end pulls the cable (docs/cables.md "Link state"):
  // Down, Polling, and nothing crosses, SMPs included; a repeat changes
  // nothing; an SM's Set of PortState Down does not retrain it; plugged
  // back, it trains (Init) and answers again.
  const uint64_t downed = a.hca.pma_counters(2).link_downed;
  a.hca.set_cable_light(2, false);
  CHECK(query_port(a, 2).state == 1);
  CHECK(query_port(a, 2).phys == 2);
  CHECK(a.hca.pma_counters(2).link_downed == downed + 1);
  a.hca.set_cable_light(2, false);
  CHECK(a.hca.pma_counters(2).link_downed == downed + 1);
  const uint64_t rcv = a.hca.pma_counters(2).rcv_pkts;
  CHECK_FALSE(ask(dr_smp(mad::method::kGet, mad::attr::kNodeInfo, 0, 4)));
  CHECK(a.hca.pma_counters(2).rcv_pkts == rcv);
  CHECK(query_port(a, 1).state == 4);  // port 1 is not on that cable
  a.hca.set_cable_light(2, true);
  CHECK(query_port(a, 2).state == 2);
  CHECK(query_port(a, 2).phys == 5);
  CHECK(query_port(a, 2).lid == 0x40);  // the configuration stays
  CHECK(ask(dr_smp(mad::method::kGet, mad::attr::kNodeInfo, 0, 5)));
  a.hca.attach_link(2, nullptr);
  b.hca.attach_link(1, nullptr);
  CHECK(query_port(a, 2).state == 1);  // unplugged: Down, Polling
  CHECK(query_port(a, 2).phys == 2);
}

TEST_CASE("simhca program: --ports 2 with a cable on port 2 only, through the driver", "[sma][program]") {
  // Port 2 cabled to a UDP end nobody answers: the link is "up" as soon as
  // the cable is there (§14.3), port 1 has none.
  const int base = 40000 + static_cast<int>(::getpid() % 10000) * 2;
  const std::string local = "127.0.0.1:" + std::to_string(base), peer = "127.0.0.1:" + std::to_string(base + 1);
  HcaFixture f({"--ports", "2", "--port2", "LOCAL=" + local + ",PEER=" + peer, "--node-desc", "node x"});
  CHECK(f.hca->caps().num_ports == 2);
  auto p1 = f.hca->query_port(1);
  auto p2 = f.hca->query_port(2);
  REQUIRE(p1.ok());
  REQUIRE(p2.ok());
  CHECK(p1->state == 1);
  CHECK(p1->phys_state == 2);
  CHECK(p2->state == 2);
  CHECK(p2->phys_state == 5);
  CHECK(p2->port_guid == f.hca->caps().node_guid + 2);
  CHECK(p1->port_guid == f.hca->caps().node_guid + 1);
  CHECK((f.reg(0x03c) & 0xff) == 2);  // §3 CAP_SUMMARY
}

TEST_CASE("simhca program: a pulled cable's far end takes the port Down, and Init when plugged back", "[sma][program]") {
  // docs/cables.md "Link state", §14.3: the test is the far end of port
  // 1's UDP cable and sends the link-state signals ibfabric sends.
  const int base = 30000 + static_cast<int>(::getpid() % 10000) * 2;
  const std::string local = "127.0.0.1:" + std::to_string(base), peer = "127.0.0.1:" + std::to_string(base + 1);
  sim::UdpLinkOptions lo;
  lo.local = peer;
  lo.peer = local;
  auto far = sim::UdpLink::create(lo);
  REQUIRE(far.ok());
  HcaFixture f({"--port1", "LOCAL=" + local + ",PEER=" + peer});
  auto state = [&] {
    auto p = f.hca->query_port(1);
    REQUIRE(p.ok());
    return std::pair<int, int>(p->state, p->phys_state);
  };
  CHECK(state() == std::pair(2, 5));  // Init, LinkUp
  // The signal crosses asynchronously: asked again until it has (or 5 s).
  auto wait_for = [&](std::pair<int, int> want) {
    for (int i = 0; i < 500 && state() != want; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    return state();
  };
  REQUIRE((*far)->send_link_state(false).ok());
  CHECK(wait_for({1, 2}) == std::pair(1, 2));  // Down, Polling
  REQUIRE((*far)->send_link_state(false).ok());  // a repeat
  REQUIRE((*far)->send_link_state(true).ok());
  CHECK(wait_for({2, 5}) == std::pair(2, 5));  // Init, LinkUp
  CHECK((*far)->stats().tx_link_signals == 3);
}
