// The CM state machine (src/cm/engine.hpp, docs/cm.md "State machine"):
// engines back to back through a fake wire in one io_context, the wire a
// pipe that can lose, duplicate and reorder MADs (seeded RNG). Short CM
// timeouts (4.096 us * 2^8 ~ 1 ms) keep the runs short; nothing here
// asserts on wall-clock time.
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <vector>

#include "cm/engine.hpp"

using namespace openib;
using namespace openib::cm;

namespace {

constexpr uint64_t kService = 0x1000000000000042ull;
constexpr uint8_t kCmT = 8;       // CM response timeout: ~1 ms
constexpr uint8_t kLifeT = 4;     // packet lifetime: ~65 us
constexpr uint8_t kAckDelay = 4;  // timewait ~262 us

// An event as the test keeps it (spans copied).
struct Seen {
  EventType type{};
  uint32_t id = 0, listen_id = 0, remote_qpn = 0, starting_psn = 0, qkey = 0, remote_comm_id = 0;
  uint64_t owner = 0;
  uint16_t reason = 0, attr_id = 0;
  uint8_t sidr_status = 0, service_timeout = 0;
  std::vector<std::byte> pdata, ari;
};

struct Fabric;

struct Node {
  Fabric& fab;
  uint16_t lid;
  uint64_t guid;
  std::unique_ptr<Engine> engine;
  std::vector<Seen> events;
  std::map<EventType, size_t> counts;
  std::function<void(Node&, const Event&)> on_event;  // the consumer
  std::vector<mad::ByteVec> sent;                      // every MAD it sent, if `record`
  bool record = false;
  std::function<bool(uint64_t owner, uint32_t listen_id)> admit;  // Env::admit, if set
  std::optional<std::array<uint8_t, 16>> roce_gid;  // set by roce(): an Ethernet port, MADs with a GRH from it
  // `salt`: another random sequence for the same LID and GUID (a restart).
  Node(Fabric& f, uint16_t l, uint64_t g, uint64_t salt = 0);
  size_t count(EventType t) const {
    auto it = counts.find(t);
    return it == counts.end() ? 0 : it->second;
  }
  // The port becomes a RoCE port (IBA Annex A17) with source address `gid`:
  // its MADs carry a GRH with that SGID, and its engine checks REQs' GIDs.
  void roce(std::array<uint8_t, 16> gid) {
    roce_gid = gid;
    PortInfo p;
    p.ca_guid = guid;
    p.lid = lid;
    p.gid = gid;
    p.ca_ack_delay = 4;
    p.ethernet = true;
    engine->set_port(p);
  }
  const Seen* last(EventType t) const {
    for (auto it = events.rbegin(); it != events.rend(); ++it)
      if (it->type == t) return &*it;
    return nullptr;
  }
};

struct Fabric {
  boost::asio::io_context io;
  std::mt19937_64 rng{12345};
  double loss = 0, dup = 0;
  int max_delay_us = 0;  // > 0: each MAD is delayed 0..max_delay_us, so they reorder
  std::map<uint16_t, Node*> nodes;

  void carry(uint16_t from_lid, const mad::MadAddress& to, const mad::ByteVec& m) {
    std::uniform_real_distribution<double> u(0, 1);
    if (u(rng) < loss) return;
    int copies = u(rng) < dup ? 2 : 1;
    for (int i = 0; i < copies; ++i) {
      auto t = std::make_shared<boost::asio::steady_timer>(io);
      int d = max_delay_us > 0 ? static_cast<int>(rng() % static_cast<unsigned>(max_delay_us)) : 0;
      t->expires_after(std::chrono::microseconds(d));
      t->async_wait([this, t, from_lid, to, m](const boost::system::error_code&) {
        auto it = nodes.find(to.lid);
        if (it == nodes.end()) return;  // nobody there: silence
        mad::MadAddress from;
        from.lid = from_lid;
        from.qpn = 1;
        from.qkey = mad::kGsiQkey;
        if (auto s = nodes.find(from_lid); s != nodes.end() && s->second->roce_gid) {
          from.grh = true;
          from.gid = *s->second->roce_gid;
        }
        it->second->engine->on_mad(from, m);
      });
    }
  }
  // Runs the loop until `done` (or the loop has nothing left, or a 60 s cap
  // against a hang); the caller REQUIREs `done` afterwards.
  void run_until(const std::function<bool()>& done) {
    auto cap = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    io.restart();
    while (!done() && std::chrono::steady_clock::now() < cap) {
      if (io.run_one_for(std::chrono::milliseconds(100)) == 0 && io.stopped()) io.restart();
    }
  }
};

Node::Node(Fabric& f, uint16_t l, uint64_t g, uint64_t salt) : fab(f), lid(l), guid(g) {
  Env env;
  env.send = [this](const mad::MadAddress& to, mad::ByteVec m) -> Result<void> {
    REQUIRE(m.size() == mad::kMadBytes);
    CHECK(to.qkey == mad::kGsiQkey);
    if (record) sent.push_back(m);
    fab.carry(lid, to, m);
    return {};
  };
  env.event = [this](const Event& e) {
    Seen s;
    s.type = e.type;
    s.id = e.id;
    s.listen_id = e.listen_id;
    s.owner = e.owner;
    s.remote_qpn = e.remote_qpn;
    s.remote_comm_id = e.remote_comm_id;
    s.starting_psn = e.starting_psn;
    s.qkey = e.qkey;
    s.reason = e.reason;
    s.attr_id = e.attr_id;
    s.sidr_status = e.sidr_status;
    s.service_timeout = e.service_timeout;
    s.pdata.assign(e.private_data.begin(), e.private_data.end());
    s.ari.assign(e.ari.begin(), e.ari.end());
    events.push_back(std::move(s));
    counts[e.type]++;
    if (on_event) on_event(*this, e);
  };
  env.admit = [this](uint64_t owner, uint32_t listen_id) { return !admit || admit(owner, listen_id); };
  uint64_t seed = g * 31 + l + salt * 0x9e3779b97f4a7c15ull;
  env.random = [seed](uint32_t n, uint8_t* out) mutable {
    for (uint32_t i = 0; i < n; ++i) {
      seed = seed * 6364136223846793005ull + 1442695040888963407ull;
      out[i] = static_cast<uint8_t>(seed >> 56);
    }
  };
  PortInfo p;
  p.ca_guid = g;
  p.lid = l;
  p.ca_ack_delay = kAckDelay;
  engine = std::make_unique<Engine>(f.io, std::move(env), p);
  f.nodes[l] = this;
}

ConnectParams params(const Node& from, uint16_t to_lid, uint32_t qpn, uint64_t service = kService) {
  ConnectParams p;
  p.service_id = service;
  p.peer.lid = to_lid;
  p.peer.qpn = 1;
  p.primary.local_lid = from.lid;
  p.primary.remote_lid = to_lid;
  p.primary.subnet_local = true;
  p.primary.sl = 3;
  p.packet_life_time = kLifeT;
  p.path_mtu = 5;
  p.qpn = qpn;
  p.responder_resources = 4;
  p.initiator_depth = 2;
  p.cm_response_timeout = kCmT;
  return p;
}

// A SIDR_REQ to LID `to` for kService, short timeouts.
SidrParams sidr_params(uint16_t to) {
  SidrParams sp;
  sp.service_id = kService;
  sp.peer.lid = to;
  sp.cm_response_timeout = kCmT;
  return sp;
}

AcceptParams accept_params(uint32_t qpn) {
  AcceptParams a;
  a.qpn = qpn;
  a.responder_resources = 2;
  a.initiator_depth = 4;
  a.target_ack_delay = kAckDelay;
  return a;
}

// A MAD an engine sent, decoded as the message it must be.
template <typename T>
T decoded_as(const mad::ByteVec& m) {
  auto d = decode(m);
  REQUIRE(d);
  REQUIRE(std::holds_alternative<T>(d->msg));
  return std::get<T>(d->msg);
}

std::vector<std::byte> bytes_of(size_t n, uint8_t seed) {
  std::vector<std::byte> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = std::byte(static_cast<uint8_t>(seed + i * 7));
  return v;
}

// The consumers most tests use: the passive side accepts each REQ with a
// fresh QPN and answers DREQs; the active side sends RTU on REP and DREP on
// DREQ; both destroy an id when its timewait is over.
void auto_passive(Node& n, uint32_t first_qpn) {
  n.on_event = [qpn = first_qpn](Node& me, const Event& e) mutable {
    if (e.type == EventType::kReqReceived) REQUIRE(me.engine->accept(e.id, accept_params(qpn++)));
    if (e.type == EventType::kDreqReceived) REQUIRE(me.engine->send_drep(e.id, {}));
    if (e.type == EventType::kTimewaitExit) me.engine->destroy(e.id);
  };
}
void auto_active(Node& n) {
  n.on_event = [](Node& me, const Event& e) {
    if (e.type == EventType::kRepReceived) REQUIRE(me.engine->send_rtu(e.id, {}));
    if (e.type == EventType::kDreqReceived) REQUIRE(me.engine->send_drep(e.id, {}));
    if (e.type == EventType::kTimewaitExit) me.engine->destroy(e.id);
  };
}

// A and B on one wire, B listening for kService (owner 7), both with the
// automatic consumers.
struct Pair {
  Fabric f;
  Node a{f, 1, 0xa0a0}, b{f, 2, 0xb0b0};
  explicit Pair(uint32_t b_first_qpn = 0x200) {
    REQUIRE(b.engine->listen(kService, ~0ull, 7));
    auto_active(a);
    auto_passive(b, b_first_qpn);
  }
  // Connects A's QPN `qpn` to B and runs until B has the RTU: A's id.
  uint32_t establish(uint32_t qpn) {
    size_t rtus = b.count(EventType::kRtuReceived);
    auto id = a.engine->connect(params(a, 2, qpn), 1);
    REQUIRE(id);
    f.run_until([&] { return b.count(EventType::kRtuReceived) == rtus + 1; });
    REQUIRE(b.count(EventType::kRtuReceived) == rtus + 1);
    return *id;
  }
  uint32_t b_id() const { return b.last(EventType::kRtuReceived)->id; }
};

}  // namespace

TEST_CASE("cm engine: connect, accept, RTU: established on both sides with matching QP parameters") {
  Fabric f;
  Node a(f, 1, 0xa0a0), b(f, 2, 0xb0b0);
  REQUIRE(b.engine->listen(kService, ~0ull, 7));
  auto pd = bytes_of(92, 1);
  std::optional<QpParams> a_rtr, a_rts;
  a.on_event = [&](Node& me, const Event& e) {
    if (e.type != EventType::kRepReceived) return;
    auto r = me.engine->qp_params(e.id, 2);
    REQUIRE(r);
    a_rtr = *r;
    auto s = me.engine->qp_params(e.id, 3);
    REQUIRE(s);
    a_rts = *s;
    REQUIRE(me.engine->send_rtu(e.id, {}));
  };
  std::vector<std::byte> b_pd;
  b.on_event = [&](Node& me, const Event& e) {
    if (e.type != EventType::kReqReceived) return;
    CHECK(e.owner == 7);
    CHECK(e.service_id == kService);
    CHECK(e.remote_qpn == 0x100);
    CHECK(e.path.has_value());
    b_pd.assign(e.private_data.begin(), e.private_data.end());
    REQUIRE(me.engine->accept(e.id, accept_params(0x200)));
  };
  auto p = params(a, 2, 0x100);
  p.private_data = pd;
  p.starting_psn = 0x123456;
  auto id = a.engine->connect(p, 9);
  REQUIRE(id);
  f.run_until([&] { return b.count(EventType::kRtuReceived) == 1; });
  REQUIRE(b.count(EventType::kRtuReceived) == 1);
  CHECK(a.engine->state(*id) == State::kEstablished);
  CHECK(b_pd == pd);
  uint32_t bid = b.last(EventType::kRtuReceived)->id;
  CHECK(b.engine->state(bid) == State::kEstablished);
  // The two ends' QP parameters agree: each one's receive PSN is the
  // other's send PSN, the destination QPNs cross, RDMA reads line up.
  REQUIRE(a_rtr);
  auto b_rtr = b.engine->qp_params(bid, 2);
  auto b_rts = b.engine->qp_params(bid, 3);
  REQUIRE(b_rtr);
  REQUIRE(b_rts);
  CHECK(a_rtr->attr.dest_qpn == 0x200);
  CHECK(b_rtr->attr.dest_qpn == 0x100);
  // The REQ's Starting PSN is the active side's receive PSN, the REP's the
  // passive side's (Linux's ib_cm, and so every rdma-core peer; rxe sends
  // with the one it got: test qemu-rxe-cm).
  CHECK(a_rtr->attr.rq_psn == 0x123456);
  CHECK(b_rts->attr.sq_psn == 0x123456);
  CHECK(b_rtr->attr.rq_psn == a_rts->attr.sq_psn);
  CHECK(b_rtr->attr.rq_psn != 0x123456);
  CHECK(a_rtr->attr.av.dlid == 2);
  CHECK(b_rtr->attr.av.dlid == 1);
  CHECK(b_rtr->attr.av.sl == 3);
  CHECK(a_rtr->attr.path_mtu == 5);
  CHECK(a_rts->attr.max_rd_atomic == 2);       // B's responder resources
  CHECK(b_rtr->attr.max_dest_rd_atomic == 2);
  CHECK(b_rts->attr.max_rd_atomic == 4);
  CHECK(a_rtr->attr.max_dest_rd_atomic == 4);  // B's initiator depth
  // Local ACK timeout: 2 * packet lifetime + ACK delay (the passive side
  // knows the lifetime only as the REQ's timeout - 1, so it may be one more).
  CHECK(a_rts->attr.timeout == 6);
  CHECK(b_rts->attr.timeout >= a_rts->attr.timeout);
  CHECK(b.engine->counters().sent[attr::kRep & 0x1f] == 1);
  auto j = b.engine->json();
  CHECK(j.find("\"established\":1") != std::string::npos);
  CHECK(j.find("\"REP\":1") != std::string::npos);
}

TEST_CASE("cm engine: a REJ with private data arrives whole; no listener is REJ 8") {
  Fabric f;
  Node a(f, 1, 0xa0a0), b(f, 2, 0xb0b0);
  REQUIRE(b.engine->listen(kService, ~0ull, 7));
  auto pd = bytes_of(148, 3);
  auto ari = bytes_of(5, 9);
  b.on_event = [&](Node& me, const Event& e) {
    if (e.type == EventType::kReqReceived)
      REQUIRE(me.engine->reject(e.id, static_cast<uint16_t>(RejReason::kConsumerReject), ari, pd));
  };
  auto id = a.engine->connect(params(a, 2, 0x100), 1);
  REQUIRE(id);
  f.run_until([&] { return a.count(EventType::kRejReceived) == 1; });
  auto* r = a.last(EventType::kRejReceived);
  REQUIRE(r);
  CHECK(r->id == *id);
  CHECK(r->reason == 28);
  CHECK(r->pdata == pd);
  CHECK(r->ari == ari);
  CHECK(a.engine->state(*id) == State::kIdle);
  // Its QPN is free again (rejected before any connection existed).
  a.engine->destroy(*id);
  auto id2 = a.engine->connect(params(a, 2, 0x100, 0x77), 1);
  REQUIRE(id2);
  f.run_until([&] { return a.count(EventType::kRejReceived) == 2; });
  REQUIRE(a.count(EventType::kRejReceived) == 2);
  CHECK(a.last(EventType::kRejReceived)->reason == static_cast<uint16_t>(RejReason::kInvalidServiceId));
  CHECK(b.engine->counters().rej_no_listener == 1);
  CHECK(b.count(EventType::kReqReceived) == 1);
}

TEST_CASE("cm engine: a slow consumer: MRA goes out, the active side waits, accept still works") {
  Fabric f;
  Node a(f, 1, 0xa0a0), b(f, 2, 0xb0b0);
  REQUIRE(b.engine->listen(kService, ~0ull, 7));
  auto_active(a);
  auto p = params(a, 2, 0x100);
  p.max_cm_retries = 2;  // without the MRA, ~3 ms would end it
  REQUIRE(a.engine->connect(p, 1));
  f.run_until([&] { return a.count(EventType::kMraReceived) == 1; });
  REQUIRE(a.count(EventType::kMraReceived) == 1);
  CHECK(a.last(EventType::kMraReceived)->service_timeout > kCmT);
  CHECK(b.engine->counters().mra_sent_auto == 1);
  REQUIRE(b.count(EventType::kReqReceived) == 1);
  uint32_t bid = b.events[0].id;
  CHECK(b.engine->state(bid) == State::kMraReqSent);
  REQUIRE(b.engine->accept(bid, accept_params(0x200)));
  f.run_until([&] { return b.count(EventType::kRtuReceived) == 1; });
  CHECK(b.count(EventType::kRtuReceived) == 1);
  CHECK(a.count(EventType::kTimeout) == 0);
  CHECK(b.count(EventType::kReqReceived) == 1);  // a resent REQ was no new one
}

TEST_CASE("cm engine: a silent peer: REQ sent 1 + max CM retries times, then kTimeout and REJ(timeout)") {
  Fabric f;
  Node a(f, 1, 0xa0a0);
  a.record = true;
  auto p = params(a, 99, 0x100);
  p.max_cm_retries = 4;
  auto id = a.engine->connect(p, 1);
  REQUIRE(id);
  f.run_until([&] { return a.count(EventType::kTimeout) == 1; });
  REQUIRE(a.count(EventType::kTimeout) == 1);
  CHECK(a.last(EventType::kTimeout)->attr_id == attr::kReq);
  CHECK(a.engine->counters().sent[attr::kReq & 0x1f] == 5);
  CHECK(a.engine->counters().retries == 4);
  REQUIRE(a.sent.size() == 6);
  auto rej = decoded_as<Rej>(a.sent.back());
  CHECK(rej.reason == RejReason::kTimeout);
  CHECK(rej.ari_length == 8);  // the CA GUID (IBA 12.6.7.2)
  CHECK(a.engine->state(*id) == State::kIdle);
}

TEST_CASE("cm engine: disconnect from either side: DREQ, DREP, timewait, exit; the QPN is busy until then") {
  Pair t;
  auto& f = t.f;  // (no structured binding: clang 14 cannot capture one in a lambda)
  auto& a = t.a;
  auto& b = t.b;
  for (int from_active = 1; from_active >= 0; --from_active) {
    size_t base_a = a.count(EventType::kTimewaitExit), base_b = b.count(EventType::kTimewaitExit);
    Node& closer = from_active ? a : b;
    size_t base_drep = closer.count(EventType::kDrepReceived);
    auto id = std::optional<uint32_t>(t.establish(0x100));
    REQUIRE(a.engine->state(*id) == State::kEstablished);
    uint32_t bid = t.b_id();
    uint32_t cid = from_active ? *id : bid;
    auto pd = bytes_of(20, 5);
    REQUIRE(closer.engine->disconnect(cid, pd));
    Node& other = from_active ? b : a;
    f.run_until([&] { return closer.count(EventType::kDrepReceived) == base_drep + 1; });
    REQUIRE(closer.count(EventType::kDrepReceived) == base_drep + 1);
    auto got = other.last(EventType::kDreqReceived)->pdata;
    REQUIRE(got.size() == pdata::kDreq);  // the whole field; the wire has no length
    CHECK(std::equal(pd.begin(), pd.end(), got.begin()));
    // In timewait the QPN may not be used again (IBA 12.9.8.2).
    if (a.engine->state(*id) == State::kTimewait) {
      auto busy = a.engine->connect(params(a, 2, 0x100), 1);
      REQUIRE_FALSE(busy);
      CHECK(busy.error().code == EBUSY);
    }
    f.run_until([&] {
      return a.count(EventType::kTimewaitExit) == base_a + 1 && b.count(EventType::kTimewaitExit) == base_b + 1;
    });
    CHECK(a.count(EventType::kTimewaitExit) == base_a + 1);
    CHECK(b.count(EventType::kTimewaitExit) == base_b + 1);
    CHECK_FALSE(a.engine->state(*id).has_value());  // destroyed on exit
  }
  CHECK(a.engine->counters().timeouts == 0);
}

TEST_CASE("cm engine: 5% loss and 5% duplication, reordered: 1,000 connections, each established once, all torn down") {
  Pair t(0x10000);
  auto& f = t.f;  // (no structured binding: clang 14 cannot capture one in a lambda)
  auto& a = t.a;
  auto& b = t.b;
  f.loss = 0.05;
  f.dup = 0.05;
  f.max_delay_us = 200;
  constexpr int kN = 1000;
  std::set<uint32_t> ids;
  for (int i = 0; i < kN; ++i) {
    auto id = a.engine->connect(params(a, 2, 0x100 + static_cast<uint32_t>(i)), 1);
    REQUIRE(id);
    ids.insert(*id);
  }
  REQUIRE(ids.size() == kN);
  auto established = [&] {
    int n = 0;
    for (uint32_t id : ids) n += a.engine->state(id) == State::kEstablished;
    return n;
  };
  f.run_until([&] { return established() == kN && b.count(EventType::kRtuReceived) == kN; });
  REQUIRE(established() == kN);
  CHECK(b.count(EventType::kReqReceived) == kN);  // each REQ acted on once
  CHECK(b.count(EventType::kRtuReceived) == kN);
  CHECK(a.count(EventType::kRepReceived) == kN);
  std::map<uint32_t, uint32_t> b_for_a;  // A's id -> B's
  for (auto& e : b.events)
    if (e.type == EventType::kRtuReceived) b_for_a[e.remote_comm_id] = e.id;
  CHECK(b_for_a.size() == kN);
  // Half close from each side, a tenth from both at once.
  int i = 0;
  for (uint32_t id : ids) {
    REQUIRE(b_for_a.contains(id));
    if (i % 2 == 0 || i % 10 == 1) REQUIRE(a.engine->disconnect(id, {}));
    if (i % 2 == 1) REQUIRE(b.engine->disconnect(b_for_a[id], {}));
    ++i;
  }
  f.run_until([&] {
    return a.count(EventType::kTimewaitExit) == kN && b.count(EventType::kTimewaitExit) == kN;
  });
  CHECK(a.count(EventType::kTimewaitExit) == kN);
  CHECK(b.count(EventType::kTimewaitExit) == kN);
  CHECK(a.count(EventType::kTimeout) == 0);
  CHECK(b.count(EventType::kTimeout) == 0);
  CHECK(a.engine->counters().retries + b.engine->counters().retries > 0);
  CHECK(a.engine->counters().duplicates + b.engine->counters().duplicates > 0);
  std::printf("cm engine loss test: retries %lu/%lu, duplicates %lu/%lu\n",
              static_cast<unsigned long>(a.engine->counters().retries),
              static_cast<unsigned long>(b.engine->counters().retries),
              static_cast<unsigned long>(a.engine->counters().duplicates),
              static_cast<unsigned long>(b.engine->counters().duplicates));
  for (uint32_t id : ids) CHECK_FALSE(a.engine->state(id).has_value());
  f.run_until([&] { return a.engine->states()[static_cast<size_t>(State::kIdle)] == 0; });
}

TEST_CASE("cm engine: a REQ from a QPN that is still connected is stale: REJ 10, and the old connection goes") {
  Pair t;
  auto& f = t.f;  // (no structured binding: clang 14 cannot capture one in a lambda)
  auto& a = t.a;
  auto& b = t.b;
  t.establish(0x100);
  Node a2(f, 1, 0xa0a0, 1);  // A restarted: the same CA GUID and LID (the fabric's LID 1 is a2 now)
  auto_active(a2);
  uint32_t b_old = t.b_id();
  auto fresh = a2.engine->connect(params(a2, 2, 0x100), 1);
  REQUIRE(fresh);
  f.run_until([&] { return a2.count(EventType::kRejReceived) == 1 && b.count(EventType::kDrepReceived) == 1; });
  REQUIRE(a2.count(EventType::kRejReceived) == 1);
  CHECK(a2.last(EventType::kRejReceived)->reason == static_cast<uint16_t>(RejReason::kStaleConn));
  CHECK(b.count(EventType::kStale) == 1);
  CHECK(b.last(EventType::kStale)->id == b_old);
  CHECK(a2.engine->counters().received[attr::kDreq & 0x1f] == 1);  // the old peer's port is told
  CHECK(a.count(EventType::kDreqReceived) == 0);
  CHECK(b.count(EventType::kDrepReceived) == 1);
  CHECK(b.count(EventType::kReqReceived) == 1);
  CHECK(b.engine->counters().stale == 1);
}

TEST_CASE("cm engine: a QPN in timewait is EBUSY for connect, then free after the exit") {
  Pair t;
  auto& f = t.f;  // (no structured binding: clang 14 cannot capture one in a lambda)
  auto& a = t.a;
  a.on_event = [](Node& me, const Event& e) {  // keeps the ids after timewait
    if (e.type == EventType::kRepReceived) REQUIRE(me.engine->send_rtu(e.id, {}));
  };
  auto id = std::optional<uint32_t>(t.establish(0x100));
  REQUIRE(a.engine->disconnect(*id, {}));
  f.run_until([&] { return a.engine->state(*id) == State::kTimewait; });
  REQUIRE(a.engine->state(*id) == State::kTimewait);
  auto busy = a.engine->connect(params(a, 2, 0x100), 1);
  REQUIRE_FALSE(busy);
  CHECK(busy.error().code == EBUSY);
  f.run_until([&] { return a.count(EventType::kTimewaitExit) == 1; });
  REQUIRE(a.engine->state(*id) == State::kIdle);
  auto again = a.engine->connect(params(a, 2, 0x100), 1);
  REQUIRE(again);
  CHECK(*again != *id);
}

TEST_CASE("cm engine: accept() with a QPN that is connected or in timewait is EBUSY") {
  Pair t;
  auto& f = t.f;  // (no structured binding: clang 14 cannot capture one in a lambda)
  auto& a = t.a;
  auto& b = t.b;
  uint32_t a1 = t.establish(0x100);  // B's QPN 0x200
  uint32_t b1 = t.b_id();
  b.on_event = [](Node& me, const Event& e) {  // answers DREQs, keeps its ids, accepts nothing
    if (e.type == EventType::kDreqReceived) REQUIRE(me.engine->send_drep(e.id, {}));
  };
  REQUIRE(a.engine->connect(params(a, 2, 0x101), 1));
  f.run_until([&] { return b.count(EventType::kReqReceived) == 2; });
  REQUIRE(b.count(EventType::kReqReceived) == 2);
  uint32_t b2 = b.last(EventType::kReqReceived)->id;
  auto connected = b.engine->accept(b2, accept_params(0x200));
  REQUIRE_FALSE(connected);
  CHECK(connected.error().code == EBUSY);
  REQUIRE(a.engine->disconnect(a1, {}));
  f.run_until([&] { return b.engine->state(b1) == State::kTimewait; });
  REQUIRE(b.engine->state(b1) == State::kTimewait);
  auto in_timewait = b.engine->accept(b2, accept_params(0x200));
  REQUIRE_FALSE(in_timewait);
  CHECK(in_timewait.error().code == EBUSY);
  f.run_until([&] { return b.count(EventType::kTimewaitExit) == 1; });
  REQUIRE(b.engine->state(b1) == State::kIdle);
  REQUIRE(b.engine->accept(b2, accept_params(0x200)));
  f.run_until([&] { return b.count(EventType::kRtuReceived) == 2; });
  CHECK(b.count(EventType::kRtuReceived) == 2);
}

TEST_CASE("cm engine: SIDR request and reply; SIDR with no listener") {
  Fabric f;
  Node a(f, 1, 0xa0a0), b(f, 2, 0xb0b0);
  REQUIRE(b.engine->listen(kService, ~0ull, 7, true));
  auto pd = bytes_of(136, 2);
  b.on_event = [&](Node& me, const Event& e) {
    if (e.type == EventType::kSidrReqReceived) {
      CHECK(e.service_id == kService);
      REQUIRE(me.engine->sidr_reply(e.id, 0, 0x4321, 0x11112222, pd));
    }
  };
  SidrParams sp;
  sp.service_id = kService;
  sp.peer.lid = 2;
  sp.cm_response_timeout = kCmT;
  auto id = a.engine->sidr_request(sp, 3);
  REQUIRE(id);
  f.run_until([&] { return a.count(EventType::kSidrRepReceived) == 1; });
  auto* r = a.last(EventType::kSidrRepReceived);
  REQUIRE(r);
  CHECK(r->id == *id);
  CHECK(r->sidr_status == 0);
  CHECK(r->remote_qpn == 0x4321);
  CHECK(r->qkey == 0x11112222);
  CHECK(r->pdata == pd);
  sp.service_id = 0x999;
  REQUIRE(a.engine->sidr_request(sp, 3));
  f.run_until([&] { return a.count(EventType::kSidrRepReceived) == 2; });
  CHECK(a.last(EventType::kSidrRepReceived)->sidr_status == 1);
  CHECK(b.engine->counters().sidr_no_listener == 1);
  // Nobody at all: retries, then kTimeout.
  sp.peer.lid = 77;
  sp.max_cm_retries = 2;
  REQUIRE(a.engine->sidr_request(sp, 3));
  f.run_until([&] { return a.count(EventType::kTimeout) == 1; });
  CHECK(a.last(EventType::kTimeout)->attr_id == attr::kSidrReq);
}

TEST_CASE("cm engine: LAP is answered by APR 'not supported'; ClassPortInfo Get answered; garbage is a counted drop") {
  Pair t;
  auto& b = t.b;
  auto id = std::optional<uint32_t>(t.establish(0x100));
  uint32_t bid = t.b_id();
  b.record = true;
  Lap lap;
  lap.local_comm_id = *id;
  lap.remote_comm_id = bid;
  lap.remote_qpn_eecn = 0x200;
  lap.alternate.local_lid = 1;
  lap.alternate.remote_lid = 2;
  mad::MadAddress from;
  from.lid = 1;
  from.qpn = 1;
  b.engine->on_mad(from, encode(lap, 5));
  REQUIRE(b.sent.size() == 1);
  auto apr = decoded_as<Apr>(b.sent[0]);
  CHECK(apr.status == AprStatus::kUnsupported);
  CHECK(apr.remote_comm_id == *id);
  CHECK(b.count(EventType::kLapReceived) == 1);
  // ClassPortInfo Get -> GetResp
  mad::ByteVec get(mad::kMadBytes);
  get[0] = std::byte{1};
  get[1] = std::byte{kMgmtClass};
  get[2] = std::byte{kClassVersion};
  get[3] = std::byte{kMethodGet};
  get[17] = std::byte{1};
  b.engine->on_mad(from, get);
  REQUIRE(b.sent.size() == 2);
  CHECK(std::to_integer<uint8_t>(b.sent[1][3]) == kMethodGetResp);
  // Garbage: short, wrong class, unknown attribute: dropped and counted.
  auto before = b.engine->counters().dropped_malformed;
  b.engine->on_mad(from, mad::ByteVec(10));
  b.engine->on_mad(from, mad::ByteVec(mad::kMadBytes));
  auto junk = encode(lap, 5);
  junk[17] = std::byte{0x1f};
  b.engine->on_mad(from, junk);
  CHECK(b.engine->counters().dropped_malformed == before + 3);
  // A DREQ for no connection still gets a DREP (IBA 12.9.7).
  Dreq d;
  d.local_comm_id = 0x5555;
  d.remote_comm_id = 0x6666;
  b.engine->on_mad(from, encode(d, 6));
  REQUIRE(b.sent.size() == 3);
  CHECK(decoded_as<Drep>(b.sent[2]).remote_comm_id == 0x5555);
  CHECK(b.engine->state(bid) == State::kEstablished);
}

TEST_CASE("cm engine: destroy: an established connection is disconnected, no events follow; destroy_owner") {
  Pair t;
  auto& f = t.f;  // (no structured binding: clang 14 cannot capture one in a lambda)
  auto& a = t.a;
  auto& b = t.b;
  auto id = std::optional<uint32_t>(t.establish(0x100));
  size_t a_events = a.events.size();
  a.engine->destroy(*id);
  CHECK_FALSE(a.engine->state(*id).has_value());
  f.run_until([&] { return b.count(EventType::kTimewaitExit) == 1; });
  CHECK(b.count(EventType::kDreqReceived) == 1);
  CHECK(a.events.size() == a_events);  // no event for a destroyed id
  // It lingered through timewait and then went.
  f.run_until([&] { return a.engine->states()[static_cast<size_t>(State::kTimewait)] == 0; });
  auto n = a.engine->states();
  CHECK(n[static_cast<size_t>(State::kTimewait)] == 0);
  // destroy_owner: a pending REQ on the passive side is rejected (consumer reject).
  b.on_event = nullptr;
  REQUIRE(a.engine->connect(params(a, 2, 0x101), 1));
  f.run_until([&] { return b.count(EventType::kReqReceived) == 2; });
  b.engine->destroy_owner(7);
  f.run_until([&] { return a.count(EventType::kRejReceived) == 1; });
  CHECK(a.last(EventType::kRejReceived)->reason == static_cast<uint16_t>(RejReason::kConsumerReject));
  // The listener went with its owner: a new REQ finds nobody.
  REQUIRE(a.engine->connect(params(a, 2, 0x102), 1));
  f.run_until([&] { return a.count(EventType::kRejReceived) == 2; });
  CHECK(a.last(EventType::kRejReceived)->reason == static_cast<uint16_t>(RejReason::kInvalidServiceId));
}

TEST_CASE("cm engine: listeners: overlapping service IDs are EADDRINUSE; masks match") {
  Fabric f;
  Node b(f, 2, 0xb0b0);
  REQUIRE(b.engine->listen(0x1000, ~0xffull, 1));
  auto r = b.engine->listen(0x1042, ~0ull, 2);
  REQUIRE_FALSE(r);
  CHECK(r.error().code == EADDRINUSE);
  REQUIRE(b.engine->listen(0x2042, ~0ull, 2));
}

TEST_CASE("cm engine: 10,000 connections open at once stay within 1 KiB each") {
  Pair t(0x100000);
  auto& f = t.f;  // (no structured binding: clang 14 cannot capture one in a lambda)
  auto& a = t.a;
  auto& b = t.b;
  constexpr int kN = 10000;
  for (int i = 0; i < kN; ++i) REQUIRE(a.engine->connect(params(a, 2, 0x1000 + static_cast<uint32_t>(i)), 1));
  f.run_until([&] { return b.count(EventType::kRtuReceived) == kN; });
  REQUIRE(b.count(EventType::kRtuReceived) == kN);
  REQUIRE(a.engine->states()[static_cast<size_t>(State::kEstablished)] == kN);
  double pa = static_cast<double>(a.engine->memory_bytes()) / kN;
  double pb = static_cast<double>(b.engine->memory_bytes()) / kN;
  std::printf("cm engine: %d established connections: %.0f bytes each (active), %.0f (passive)\n", kN, pa, pb);
  CHECK(pa <= 1024);
  CHECK(pb <= 1024);
}

TEST_CASE("cm engine: notify_established before the RTU: kEstablished once, the RTU is then a duplicate") {
  Fabric f;
  Node a(f, 1, 0xa0a0), b(f, 2, 0xb0b0);
  REQUIRE(b.engine->listen(kService, ~0ull, 7));
  auto_active(a);
  b.on_event = [](Node& me, const Event& e) {
    if (e.type != EventType::kReqReceived) return;
    REQUIRE(me.engine->accept(e.id, accept_params(0x200)));
    REQUIRE(me.engine->notify_established(e.id));  // data came first (IBA 12.9.5 COMM_EST)
    CHECK(me.count(EventType::kEstablished) == 0);  // reported from the loop, not from inside the call
  };
  REQUIRE(a.engine->connect(params(a, 2, 0x100), 1));
  f.run_until([&] {
    return b.count(EventType::kEstablished) == 1 && b.engine->counters().received[attr::kRtu & 0x1f] == 1;
  });
  CHECK(b.count(EventType::kEstablished) == 1);
  CHECK(b.count(EventType::kRtuReceived) == 0);
  CHECK(b.engine->counters().duplicates == 1);
}

// ---- issue 29: hostile peers and crowds of listeners (docs/cm.md "Security") ----

TEST_CASE("cm engine: REQ and SIDR listeners are apart: each hears only its own kind; both may hold one service ID") {
  Fabric f;
  Node a(f, 1, 0xa0a0), b(f, 2, 0xb0b0);
  constexpr uint64_t kReqOnly = 0x2000, kSidrOnly = 0x3000;
  REQUIRE(b.engine->listen(kService, ~0ull, 7));        // REQs
  REQUIRE(b.engine->listen(kService, ~0ull, 8, true));  // SIDR_REQs, the same service ID
  REQUIRE(b.engine->listen(kReqOnly, ~0ull, 7));
  REQUIRE(b.engine->listen(kSidrOnly, ~0ull, 8, true));
  auto again = b.engine->listen(kService, ~0ull, 9, true);
  REQUIRE_FALSE(again);
  CHECK(again.error().code == EADDRINUSE);
  // Even a mask of 0 (every service ID) in one space leaves the other alone.
  REQUIRE_FALSE(b.engine->listen(0, 0, 9, true));  // overlaps the SIDR listeners above
  b.on_event = [](Node& me, const Event& e) {
    if (e.type == EventType::kReqReceived) REQUIRE(me.engine->accept(e.id, accept_params(0x200)));
    if (e.type == EventType::kSidrReqReceived) REQUIRE(me.engine->sidr_reply(e.id, 0, 0x4321, 0x1111, {}));
  };
  auto_active(a);
  REQUIRE(a.engine->connect(params(a, 2, 0x100), 1));
  f.run_until([&] { return b.count(EventType::kRtuReceived) == 1; });
  REQUIRE(b.count(EventType::kReqReceived) == 1);
  CHECK(b.last(EventType::kReqReceived)->owner == 7);
  SidrParams sp = sidr_params(2);
  REQUIRE(a.engine->sidr_request(sp, 3));
  f.run_until([&] { return a.count(EventType::kSidrRepReceived) == 1; });
  REQUIRE(b.count(EventType::kSidrReqReceived) == 1);
  CHECK(b.last(EventType::kSidrReqReceived)->owner == 8);
  CHECK(a.last(EventType::kSidrRepReceived)->sidr_status == 0);
  // A SIDR_REQ for a REQ-only service ID: not supported; a REQ for a SIDR-only one: REJ 8.
  sp.service_id = kReqOnly;
  REQUIRE(a.engine->sidr_request(sp, 3));
  f.run_until([&] { return a.count(EventType::kSidrRepReceived) == 2; });
  CHECK(a.last(EventType::kSidrRepReceived)->sidr_status == 1);
  REQUIRE(a.engine->connect(params(a, 2, 0x101, kSidrOnly), 1));
  f.run_until([&] { return a.count(EventType::kRejReceived) == 1; });
  CHECK(a.last(EventType::kRejReceived)->reason == static_cast<uint16_t>(RejReason::kInvalidServiceId));
  CHECK(b.count(EventType::kReqReceived) == 1);
  CHECK(b.count(EventType::kSidrReqReceived) == 1);
}

TEST_CASE("cm engine: 40,000 exact listeners by hash; masked ones few and bounded; overlaps refused both ways") {
  Fabric f;
  Node a(f, 1, 0xa0a0), b(f, 2, 0xb0b0);
  constexpr uint64_t kBase = 0x5000000;
  constexpr int kN = 40000;
  for (int i = 0; i < kN; ++i) REQUIRE(b.engine->listen(kBase + static_cast<uint64_t>(i), ~0ull, 100 + i));
  auto dup = b.engine->listen(kBase + 12345, ~0ull, 1);
  REQUIRE_FALSE(dup);
  CHECK(dup.error().code == EADDRINUSE);
  // A masked listen covering an exact one overlaps it; one beside them does not.
  auto over = b.engine->listen(kBase, ~0xffffull, 1);
  REQUIRE_FALSE(over);
  CHECK(over.error().code == EADDRINUSE);
  EngineLimits lim;
  lim.max_masked_listeners = 2;
  b.engine->set_limits(lim);
  REQUIRE(b.engine->listen(0x7000000, ~0xffull, 1));
  REQUIRE(b.engine->listen(0x7000100, ~0xffull, 1));
  auto third = b.engine->listen(0x7000200, ~0xffull, 1);
  REQUIRE_FALSE(third);
  CHECK(third.error().code == ENOSPC);
  // An exact listen inside a masked one overlaps it.
  auto inside = b.engine->listen(0x7000042, ~0ull, 1);
  REQUIRE_FALSE(inside);
  CHECK(inside.error().code == EADDRINUSE);
  // REQs find the last exact listener and a masked one.
  b.on_event = [](Node& me, const Event& e) {
    if (e.type == EventType::kReqReceived) REQUIRE(me.engine->reject(e.id, 28, {}, {}));
  };
  REQUIRE(a.engine->connect(params(a, 2, 0x100, kBase + kN - 1), 1));
  REQUIRE(a.engine->connect(params(a, 2, 0x101, 0x7000142), 1));
  f.run_until([&] { return b.count(EventType::kReqReceived) == 2; });
  REQUIRE(b.count(EventType::kReqReceived) == 2);
  std::set<uint64_t> owners{b.events[0].owner, b.events[1].owner};
  CHECK(owners == std::set<uint64_t>{1, static_cast<uint64_t>(100 + kN - 1)});
  CHECK(b.engine->counters().rej_no_listener == 0);
}

TEST_CASE("cm engine: a 'stale' REQ from another LID with the peer's CA GUID and QPN is refused; the connection stays") {
  Pair t;
  auto& f = t.f;
  auto& b = t.b;
  t.establish(0x100);
  uint32_t b_old = t.b_id();
  Node evil(f, 3, 0xa0a0);  // knows A's CA GUID, guessed its QPN
  auto fresh = evil.engine->connect(params(evil, 2, 0x100), 1);
  REQUIRE(fresh);
  f.run_until([&] { return evil.count(EventType::kRejReceived) == 1; });
  REQUIRE(evil.count(EventType::kRejReceived) == 1);
  CHECK(b.engine->counters().stale_foreign == 1);
  CHECK(b.engine->counters().stale == 0);
  CHECK(b.count(EventType::kStale) == 0);
  CHECK(b.count(EventType::kReqReceived) == 1);
  CHECK(b.engine->state(b_old) == State::kEstablished);
  CHECK(t.a.count(EventType::kDreqReceived) == 0);
}

TEST_CASE("cm engine: REJ, DREQ, DREP, RTU naming an established connection with comm ID 0 or a wrong one are dropped") {
  Pair t;
  auto& b = t.b;
  uint32_t aid = t.establish(0x100);
  uint32_t bid = t.b_id();
  mad::MadAddress from;
  from.lid = 1;
  from.qpn = 1;
  auto dropped = b.engine->counters().dropped_unknown_id;
  for (uint32_t their : {0u, aid ^ 1u}) {
    for (auto what : {MsgRejected::kReq, MsgRejected::kRep}) {
      Rej r;
      r.local_comm_id = their;
      r.remote_comm_id = bid;
      r.message_rejected = what;
      r.reason = RejReason::kConsumerReject;
      b.engine->on_mad(from, encode(r, 11));
    }
    Dreq d;
    d.local_comm_id = their;
    d.remote_comm_id = bid;
    d.remote_qpn_eecn = 0x200;
    b.engine->on_mad(from, encode(d, 12));
    Drep p;
    p.local_comm_id = their;
    p.remote_comm_id = bid;
    b.engine->on_mad(from, encode(p, 13));
    Rtu u;
    u.local_comm_id = their;
    u.remote_comm_id = bid;
    b.engine->on_mad(from, encode(u, 15));
  }
  CHECK(b.engine->state(bid) == State::kEstablished);
  CHECK(b.count(EventType::kRejReceived) == 0);
  CHECK(b.count(EventType::kDreqReceived) == 0);
  CHECK(b.engine->counters().dropped_unknown_id == dropped + 10);
  // The real peer's DREQ (both IDs) still works.
  Dreq d;
  d.local_comm_id = aid;
  d.remote_comm_id = bid;
  d.remote_qpn_eecn = 0x200;
  b.engine->on_mad(from, encode(d, 14));
  CHECK(b.count(EventType::kDreqReceived) == 1);
}

TEST_CASE("cm engine: a REQ its consumer never answers expires: MRA, then REJ(Timeout) to the peer and kTimeout") {
  Fabric f;
  Node a(f, 1, 0xa0a0), b(f, 2, 0xb0b0);
  REQUIRE(b.engine->listen(kService, ~0ull, 7));
  EngineLimits lim;
  lim.passive_timeout_cap = std::chrono::milliseconds(3);  // more than the auto MRA's ~0.5 ms
  b.engine->set_limits(lim);
  auto p = params(a, 2, 0x100);
  p.max_cm_retries = 15;  // the peer would wait far longer than the cap
  REQUIRE(a.engine->connect(p, 1));
  f.run_until([&] { return b.count(EventType::kTimeout) == 1 && a.count(EventType::kRejReceived) == 1; });
  REQUIRE(b.count(EventType::kTimeout) == 1);
  CHECK(b.last(EventType::kTimeout)->attr_id == attr::kReq);
  uint32_t bid = b.last(EventType::kReqReceived)->id;
  CHECK(b.last(EventType::kTimeout)->id == bid);
  CHECK(b.engine->state(bid) == State::kIdle);
  CHECK(b.engine->counters().mra_sent_auto == 1);
  CHECK(b.engine->counters().passive_expired == 1);
  REQUIRE(a.count(EventType::kRejReceived) == 1);
  CHECK(a.last(EventType::kRejReceived)->reason == static_cast<uint16_t>(RejReason::kTimeout));
  b.engine->destroy(bid);
  CHECK_FALSE(b.engine->state(bid).has_value());
  // A SIDR_REQ nobody answers: SIDR_REP "rejected" after the cap.
  REQUIRE(b.engine->listen(kService, ~0ull, 7, true));
  SidrParams sp;
  sp.service_id = kService;
  sp.peer.lid = 2;
  sp.cm_response_timeout = 12;  // ~16 ms a try: the cap comes first
  REQUIRE(a.engine->sidr_request(sp, 3));
  f.run_until([&] { return a.count(EventType::kSidrRepReceived) == 1; });
  REQUIRE(a.count(EventType::kSidrRepReceived) == 1);
  CHECK(a.last(EventType::kSidrRepReceived)->sidr_status == static_cast<uint8_t>(SidrStatus::kRejected));
  CHECK(b.last(EventType::kTimeout)->attr_id == attr::kSidrReq);
  CHECK(b.engine->counters().passive_expired >= 2);
}

TEST_CASE("cm engine: REQs and SIDR_REQs past the listener's budget are refused (REJ 3, SIDR rejected) and counted") {
  Fabric f;
  Node a(f, 1, 0xa0a0), b(f, 2, 0xb0b0);
  REQUIRE(b.engine->listen(kService, ~0ull, 7));
  REQUIRE(b.engine->listen(kService, ~0ull, 7, true));
  int room = 2;
  b.admit = [&](uint64_t owner, uint32_t) {
    CHECK(owner == 7);
    return room-- > 0;
  };
  for (uint32_t i = 0; i < 3; ++i) REQUIRE(a.engine->connect(params(a, 2, 0x100 + i), 1));
  f.run_until([&] { return a.count(EventType::kRejReceived) == 1 && b.count(EventType::kReqReceived) == 2; });
  CHECK(b.count(EventType::kReqReceived) == 2);
  REQUIRE(a.count(EventType::kRejReceived) == 1);
  CHECK(a.last(EventType::kRejReceived)->reason == static_cast<uint16_t>(RejReason::kNoResources));
  SidrParams sp = sidr_params(2);
  REQUIRE(a.engine->sidr_request(sp, 3));
  f.run_until([&] { return a.count(EventType::kSidrRepReceived) == 1; });
  CHECK(a.last(EventType::kSidrRepReceived)->sidr_status == static_cast<uint8_t>(SidrStatus::kRejected));
  CHECK(b.count(EventType::kSidrReqReceived) == 0);
  CHECK(b.engine->counters().rej_no_resources == 2);
}

// RoCE (IBA Annex A17; docs/cm.md "Security"): a REQ's Primary Local Port
// GID must be the GRH's source, the address the network carried it from.
std::array<uint8_t, 16> v4_gid(uint8_t last) {
  return {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 198, 18, 93, last};
}

TEST_CASE("cm engine: RoCE: a REQ whose Primary Local Port GID is not its GRH's source is REJ 12, counted; the true one connects") {
  Pair t;
  auto& f = t.f;
  auto& b = t.b;
  t.a.roce(v4_gid(1));
  b.roce(v4_gid(2));
  auto p = params(t.a, 2, 0x100);
  p.primary.local_gid = v4_gid(1);
  p.primary.remote_gid = v4_gid(2);
  REQUIRE(t.a.engine->connect(p, 1));
  f.run_until([&] { return b.count(EventType::kRtuReceived) == 1; });
  REQUIRE(b.count(EventType::kRtuReceived) == 1);
  CHECK(b.engine->counters().rej_foreign_gid == 0);
  // Another host claims A's address (or one of B's own) as its source.
  Node evil(f, 3, 0xe0e0);
  evil.roce(v4_gid(66));
  auto_active(evil);
  uint32_t qpn = 0x300;
  for (auto claimed : {v4_gid(1), v4_gid(2)}) {
    auto q = params(evil, 2, qpn++);
    q.primary.local_gid = claimed;
    q.primary.remote_gid = v4_gid(2);
    REQUIRE(evil.engine->connect(q, 1));
  }
  f.run_until([&] { return evil.count(EventType::kRejReceived) == 2; });
  REQUIRE(evil.count(EventType::kRejReceived) == 2);
  CHECK(evil.last(EventType::kRejReceived)->reason == static_cast<uint16_t>(RejReason::kInvalidGid));
  CHECK(b.engine->counters().rej_foreign_gid == 2);
  CHECK(b.count(EventType::kReqReceived) == 1);
  // Its own address as the source is a REQ like any other.
  auto q = params(evil, 2, 0x310);
  q.primary.local_gid = v4_gid(66);
  q.primary.remote_gid = v4_gid(2);
  REQUIRE(evil.engine->connect(q, 1));
  f.run_until([&] { return b.count(EventType::kRtuReceived) == 2; });
  CHECK(b.count(EventType::kRtuReceived) == 2);
  CHECK(b.engine->counters().rej_foreign_gid == 2);
}

TEST_CASE("cm engine: RoCE: SIDR_REQs of two hosts with one request ID and one LID are two requests, not a duplicate") {
  Fabric f;
  Node b(f, 2, 0xb0b0), x(f, 3, 0xc0c0);
  b.roce(v4_gid(2));
  REQUIRE(b.engine->listen(kService, ~0ull, 7, true));
  std::vector<uint32_t> answered;
  b.on_event = [&](Node& me, const Event& e) {
    if (e.type == EventType::kSidrReqReceived) REQUIRE(me.engine->sidr_reply(e.id, 0, 0x4321, 0x11112222, {}));
  };
  SidrReq q;
  q.request_id = 0x5151;
  q.service_id = kService;
  // Both senders' LID is the same (RoCE: 0xFFFF); only the GRH tells them apart.
  for (uint8_t host : {10, 11}) {
    mad::MadAddress from;
    from.lid = 3;
    from.qpn = 1;
    from.qkey = mad::kGsiQkey;
    from.grh = true;
    from.gid = v4_gid(host);
    b.engine->on_mad(from, encode(q, 20 + host));
  }
  f.run_until([&] { return b.count(EventType::kSidrReqReceived) == 2; });
  CHECK(b.count(EventType::kSidrReqReceived) == 2);
  CHECK(b.engine->counters().duplicates == 0);
}
