// simhca's UD multicast in process (docs/simhca.md §6.11, §12.7, §12.8):
// ATTACH_MCG / DETACH_MCG and their errors, delivery to every attached QP
// of a port, the sending port's own copy without the sender, and the
// drops of multicast packets without a GRH or a group; and three hosts
// behind a switch whose multicast forwarding table is programmed.
#include <catch2/catch.hpp>
#include <map>

#include "mad/sma_attrs.hpp"
#include "sim/fabric/switch.hpp"
#include "sim/fabric/topology.hpp"
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
  Bytes in(56);
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

namespace {

// A host's cable end into a switch port: what the host sends waits in
// `wire` until the test's loop hands it to the switch.
class SwitchPortLink final : public sim::Link {
 public:
  SwitchPortLink(unsigned port, std::vector<std::pair<unsigned, Bytes>>& wire) : port_(port), wire_(wire) {}
  Result<void> send(std::span<const std::byte> p) override {
    wire_.emplace_back(port_, Bytes(p.begin(), p.end()));
    return ok();
  }
  void set_receiver(Receiver) override {}
  sim::LinkStats stats() const override { return {}; }

 private:
  unsigned port_;
  std::vector<std::pair<unsigned, Bytes>>& wire_;
};

}  // namespace

TEST_CASE("multicast through a switch: its MFT reaches both other hosts, not the sender's port again",
          "[multicast][fabric]") {
  auto topo = sim::fabric::parse_topology(R"(Switch 3 "S" # "s" enhanced port 0 lid 20
[1] "H1"[1]
[2] "H2"[1]
[3] "H3"[1]

Ca 1 "H1"
Ca 1 "H2"
Ca 1 "H3"
)");
  REQUIRE(topo.ok());
  sim::fabric::Switch sw(topo->nodes[0]);
  Node h1{1}, h2{2}, h3{3};
  Node* host[] = {nullptr, &h1, &h2, &h3};
  std::vector<std::pair<unsigned, Bytes>> to_switch, to_host;
  sw.set_emit([&](unsigned port, std::span<const std::byte> p, unsigned) {
    to_host.emplace_back(port, Bytes(p.begin(), p.end()));
  });
  std::vector<std::unique_ptr<SwitchPortLink>> links;
  for (unsigned p = 1; p <= 3; ++p) {
    sw.set_link(p, true);
    mad::PortInfo pi = sw.port_info(static_cast<uint8_t>(p));
    pi.port_state = static_cast<uint8_t>(mad::PortState::kActive);
    REQUIRE(sw.set_port_info(static_cast<uint8_t>(p), pi) == mad::status::kOk);
    links.push_back(std::make_unique<SwitchPortLink>(p, to_switch));
    host[p]->hca.attach_link(1, links.back().get());
  }
  // What OpenSM programs for a group whose members are behind ports 1..3.
  mad::MftBlock b{};
  b[kMlid - 0xc000] = (1u << 1) | (1u << 2) | (1u << 3);
  REQUIRE(sw.set_mft_block(0, 0, b) == mad::status::kOk);

  UdQp s(h1), m1(h1), m2(h2), m3(h3), other(h2);
  attach(h1, m1.q.qpn);
  attach(h2, m2.q.qpn);
  attach(h3, m3.q.qpn);
  s.send(group_ah(h1), 0x77);
  std::map<const Node*, std::vector<Cqe>> rx;
  Hca::Clock::time_point now{};
  for (int turn = 0; turn < 50; ++turn) {
    now += std::chrono::microseconds(10);
    for (unsigned p = 1; p <= 3; ++p) host[p]->hca.run_due(now);
    for (auto& [port, pkt] : std::exchange(to_switch, {})) sw.receive(port, pkt);
    for (auto& [port, pkt] : std::exchange(to_host, {})) host[port]->hca.receive_packet(pkt, now);
    for (unsigned p = 1; p <= 3; ++p)
      for (const Cqe& c : host[p]->poll(host[p]->cq))
        if (c.opcode == kWcRecv) rx[host[p]].push_back(c);
  }
  REQUIRE(rx[&h1].size() == 1);  // m1, by h1's own copy; the switch sent nothing back to port 1
  CHECK(rx[&h1][0].qpn == m1.q.qpn);
  REQUIRE(rx[&h2].size() == 1);
  CHECK(rx[&h2][0].qpn == m2.q.qpn);
  REQUIRE(rx[&h3].size() == 1);
  CHECK(rx[&h3][0].qpn == m3.q.qpn);
  CHECK(rx[&h3][0].src_qp == s.q.qpn);
  CHECK(sw.port_counters(1).multicast_rcv_pkts == 1);
  CHECK(sw.port_counters(1).multicast_xmit_pkts == 0);
  CHECK(sw.port_counters(2).multicast_xmit_pkts == 1);
  CHECK(sw.port_counters(3).multicast_xmit_pkts == 1);
  for (unsigned p = 1; p <= 3; ++p) host[p]->hca.attach_link(1, nullptr);
}
