// simhca's UD multicast in process (docs/simhca.md §6.11, §12.7, §12.8):
// ATTACH_MCG / DETACH_MCG and their errors, delivery to every attached QP
// of a port, the sending port's own copy without the sender, and the
// drops of multicast packets without a GRH or a group.
#include <catch2/catch.hpp>
#include <map>

#include "transport_harness.hpp"

using namespace openib;
using namespace openib::test;
using Wr = Node::Wr;

namespace {

constexpr Mgid kGroup{0xff, 0x12, 0x40, 0x1b, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff};
constexpr uint16_t kMlid = 0xc001;
constexpr uint32_t kQkey = 0x11111111;  // Node::Path's

Bytes mcg_input(uint32_t qpn, const Mgid& mgid = kGroup, uint16_t mlid = kMlid) {
  Bytes in(24);  // §6.11
  put32(in, 0, qpn);
  put16(in, 6, mlid);
  for (size_t i = 0; i < 16; ++i) put8(in, 8 + i, mgid[i]);
  return in;
}
void attach(Node& n, uint32_t qpn, uint8_t want = kOk, const Mgid& mgid = kGroup) {
  n.cmd(kOpAttachMcg, mcg_input(qpn, mgid), want);
}
void detach(Node& n, uint32_t qpn, uint8_t want = kOk, const Mgid& mgid = kGroup) {
  n.cmd(kOpDetachMcg, mcg_input(qpn, mgid), want);
}
Mgid group(uint32_t i) {
  Mgid g = kGroup;
  for (int k = 0; k < 4; ++k) g[15 - k] = static_cast<uint8_t>(i >> (8 * k));
  return g;
}
Bytes u32(uint32_t v) {
  Bytes b(4);
  put32(b, 0, v);
  return b;
}

// §6.8: an AH to the group: multicast DLID and a GRH with the MGID.
uint32_t group_ah(Node& n, bool grh = true, uint8_t want = kOk) {
  Bytes in(40);
  put32(in, 0, n.pd);
  put16(in, 8, kMlid);
  put8(in, 8 + 5, 1);
  put8(in, 8 + 6, grh ? 1 : 0);
  put8(in, 8 + 7, 64);
  for (size_t i = 0; i < 16; ++i) put8(in, 8 + 0x10 + i, kGroup[i]);
  Bytes out = n.cmd(kOpCreateAh, in, want);
  return want == kOk ? Node::num(out) : 0;
}

// A UD QP in RTS with receive buffers posted.
struct UdQp {
  UdQp(Node& node, int nbufs = 4) : n(node) {
    q = n.create_qp(kQpUd);
    n.connect(q, Node::Path{});
    buf = n.alloc(4096 * nbufs, 4096);
    key = n.reg_mr(buf, 4096 * nbufs, kMrLocalWrite);
    for (int i = 0; i < nbufs; ++i) n.post_recv(q, i, {{4096, key, Node::va(buf + 4096 * i)}});
  }
  void send(uint32_t ah, uint8_t tag) {
    Wr s;
    s.flags = kWqeSignaled | kWqeInline;
    s.ahn = ah;
    s.dest_qpn = 0xffffff;  // IBA: the multicast QPN
    s.qkey = 0x80000000;    // the QP's own
    s.inline_data = Bytes(100, std::byte{tag});
    n.post_send(q, s);
  }
  Node& n;
  TQp q;
  uint64_t buf = 0;
  uint32_t key = 0;
};

// The receive completions per QPN after the wire went quiet.
struct Rx {
  std::map<std::pair<const Node*, uint32_t>, std::vector<Cqe>> by_qp;  // QPNs repeat across nodes
  size_t count(const UdQp& u) const {
    auto it = by_qp.find({&u.n, u.q.qpn});
    return it == by_qp.end() ? 0 : it->second.size();
  }
};
Rx settle(Wire& w) {
  Rx rx;
  auto take = [&](Node& n) {
    for (const Cqe& c : n.poll(n.cq))
      if (c.opcode == kWcRecv) rx.by_qp[{&n, c.qpn}].push_back(c);
  };
  w.run([&] {
    take(w.a);
    take(w.b);
    return false;
  }, std::chrono::milliseconds(5));
  return rx;
}

}  // namespace

TEST_CASE("multicast: ATTACH_MCG / DETACH_MCG refuse what §6.11 refuses and change nothing", "[multicast]") {
  Node n{1};
  TQp ud = n.create_qp(kQpUd), rc = n.create_qp(kQpRc);
  Bytes bad = mcg_input(ud.qpn);
  put8(bad, 4, 1);  // reserved
  n.cmd(kOpAttachMcg, bad, kBadParam);
  Mgid unicast = kGroup;
  unicast[0] = 0xfe;
  n.cmd(kOpAttachMcg, mcg_input(ud.qpn, unicast), kBadParam);
  n.cmd(kOpAttachMcg, mcg_input(ud.qpn, kGroup, 0xbfff), kBadParam);  // a unicast LID
  n.cmd(kOpAttachMcg, mcg_input(ud.qpn, kGroup, 0xffff), kBadParam);  // the permissive LID
  n.cmd(kOpAttachMcg, Bytes(23), kBadInputLen);
  attach(n, 9999, kBadResource);
  attach(n, rc.qpn, kBadParam);  // UD QPs only (IBA 11.3.1.1)
  // Nothing was attached: detaching is BAD_RESOURCE.
  detach(n, ud.qpn, kBadResource);
  // Twice attached is once attached (ibv_attach_mcast(3)): one detach undoes it.
  attach(n, ud.qpn);
  attach(n, ud.qpn);
  detach(n, ud.qpn);
  detach(n, ud.qpn, kBadResource);
  detach(n, rc.qpn, kBadParam);
  // §6.8: an AH to a multicast LID needs a GRH.
  group_ah(n, false, kBadParam);
  CHECK(group_ah(n, true) != 0xffffffff);
}

TEST_CASE("multicast: the limits of §6.11; DESTROY_QP and INIT_HCA empty the table", "[multicast]") {
  Node n{1};
  std::vector<TQp> qps;
  for (uint32_t i = 0; i <= kMaxMcgQps; ++i) qps.push_back(n.create_qp(kQpUd));
  for (uint32_t i = 0; i < kMaxMcgQps; ++i) attach(n, qps[i].qpn);
  attach(n, qps[kMaxMcgQps].qpn, kNoResources);  // the group is full
  detach(n, qps[0].qpn);
  attach(n, qps[kMaxMcgQps].qpn);
  // Groups: kMaxMcgs in all (kGroup is one of them).
  const uint32_t solo = qps[1].qpn;
  for (uint32_t i = 1; i < kMaxMcgs; ++i) attach(n, solo, kOk, group(i));
  attach(n, solo, kNoResources, group(kMaxMcgs));
  // Destroying the QP takes it out of every group: kMaxMcgs - 1 of them go.
  n.cmd(kOpDestroyQp, u32(solo));
  for (uint32_t i = 1; i < kMaxMcgs; ++i) attach(n, qps[2].qpn, kOk, group(kMaxMcgs + i));
  attach(n, qps[2].qpn, kNoResources, group(3 * kMaxMcgs));
  // TEARDOWN_HCA (force) and INIT_HCA: an empty table.
  n.cmd(kOpTeardownHca, u32(1));
  n.cmd(kOpInitHca, {});
  n.set_port(4, 1, 5);
  n.cmd(kOpCreateEq, [&] {
    Bytes eq(32);
    put64(eq, 0, n.alloc(64 * 32, 64));
    put8(eq, 0x10, 6);
    return eq;
  }());
  n.pd = Node::num(n.cmd(kOpAllocPd, {}));
  n.cq = n.create_cq(6);
  TQp fresh = n.create_qp(kQpUd);
  for (uint32_t i = 0; i < kMaxMcgs; ++i) attach(n, fresh.qpn, kOk, group(i));
}

TEST_CASE("multicast: every attached QP of a port gets a copy, the sender none, unattached QPs none",
          "[multicast]") {
  Wire w;
  UdQp a1(w.a), a2(w.a), a3(w.a), a4(w.a);  // a1, a2 attached; a3 sends; a4 not attached
  UdQp b1(w.b), b2(w.b);                    // b1 attached; b2 not
  attach(w.a, a1.q.qpn);
  attach(w.a, a2.q.qpn);
  attach(w.b, b1.q.qpn);
  const uint32_t ah_a = group_ah(w.a);
  // Receive completions of a1 a2 a3 a4 b1 b2, in that order.
  auto counts = [&](const Rx& rx) {
    std::vector<size_t> v;
    for (const UdQp* u : {&a1, &a2, &a3, &a4, &b1, &b2}) v.push_back(rx.count(*u));
    return v;
  };
  using V = std::vector<size_t>;

  SECTION("from an unattached QP: a1, a2 (through the port's own copy) and b1 (the wire)") {
    a3.send(ah_a, 0x33);
    Rx rx = settle(w);
    CHECK(counts(rx) == V{1, 1, 0, 0, 1, 0});
    for (const auto& [qpn, cqes] : rx.by_qp) {
      REQUIRE(cqes.size() == 1);
      CHECK(cqes[0].status == kWcSuccess);
      CHECK(cqes[0].src_qp == a3.q.qpn);
      CHECK(cqes[0].slid == 1);
      CHECK(cqes[0].byte_len == 40 + 100);
      CHECK((cqes[0].flags & kCqeFlagGrh) != 0);
    }
    CHECK(w.b.mem(b1.buf + 40, 1)[0] == std::byte{0x33});
    CHECK(w.a.mem(a1.buf + 40, 1)[0] == std::byte{0x33});
    // The GRH area holds the group as DGID (§12.2).
    CHECK(get8(w.b.mem(b1.buf, 40), 24) == 0xff);
    CHECK(w.a.hca.pma_counters(1).multicast_xmit_pkts == 1);
    CHECK(w.a.hca.pma_counters(1).unicast_xmit_pkts == 0);
    CHECK(w.b.hca.pma_counters(1).multicast_rcv_pkts == 1);
    CHECK(w.a.hca.data_stats().mcast_loopback == 1);
    CHECK(w.a.hca.data_stats().mcast_delivered == 2);
    CHECK(w.b.hca.data_stats().mcast_delivered == 1);
  }
  SECTION("from an attached QP: the other member of its port and b1, never itself") {
    a1.send(ah_a, 0x11);
    Rx rx = settle(w);
    CHECK(counts(rx) == V{0, 1, 0, 0, 1, 0});
    // Alone on its port in the group: no copy at all for the port.
    detach(w.a, a2.q.qpn);
    a1.send(ah_a, 0x12);
    CHECK(counts(settle(w)) == V{0, 0, 0, 0, 1, 0});
    CHECK(w.a.hca.data_stats().mcast_loopback == 1);
  }
  SECTION("each member checks its own Q_Key; a destroyed member is out of the group") {
    w.a.modify(a2.q.qpn, attr::kQkey, [](auto a) { put32(a, 8, 0x22222222); });
    a3.send(ah_a, 0x44);
    Rx rx = settle(w);
    CHECK(rx.count(a1) == 1);
    CHECK(rx.count(a2) == 0);
    CHECK(w.a.hca.data_stats().rx_bad_qkey == 1);
    w.b.cmd(kOpDestroyQp, u32(b1.q.qpn));
    a3.send(ah_a, 0x45);
    rx = settle(w);
    CHECK(rx.count(a1) == 1);
    CHECK(w.b.hca.data_stats().rx_mcast_no_group == 1);
  }
}

TEST_CASE("multicast: a packet without a GRH, or for no group of the port, is dropped and counted",
          "[multicast]") {
  Wire w;
  UdQp b1(w.b);
  attach(w.b, b1.q.qpn);
  namespace wr = openib::sim::wire;
  wr::Headers h;
  h.lrh.dlid = kMlid;
  h.lrh.slid = 1;
  h.lrh.lnh = wr::Lnh::kIbaLocal;
  h.bth.opcode = wr::opcode(wr::Transport::kUd, wr::Op::kSendOnly);
  h.bth.pkey = 0xffff;
  h.bth.dest_qp = 0xffffff;
  h.deth = wr::Deth{kQkey, 7};
  const Bytes payload(64, std::byte{1});
  auto no_grh = wr::build_packet(h, payload);
  REQUIRE(no_grh);
  w.b.hca.receive_packet(*no_grh, w.now);
  wr::Grh g;
  g.hop_lmt = 64;
  g.dgid = group(77);  // nobody's group
  h.grh = g;
  h.lrh.lnh = wr::Lnh::kIbaGlobal;
  auto other = wr::build_packet(h, payload);
  REQUIRE(other);
  w.b.hca.receive_packet(*other, w.now);
  Rx rx = settle(w);
  CHECK(rx.count(b1) == 0);
  CHECK(w.b.hca.data_stats().rx_mcast_no_grh == 1);
  CHECK(w.b.hca.data_stats().rx_mcast_no_group == 1);
  CHECK(w.b.hca.pma_counters(1).multicast_rcv_pkts == 2);
  // The same packet to the group is taken.
  h.grh->dgid = kGroup;
  auto good = wr::build_packet(h, payload);
  REQUIRE(good);
  w.b.hca.receive_packet(*good, w.now);
  rx = settle(w);
  CHECK(rx.count(b1) == 1);
}
