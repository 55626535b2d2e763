// Issue 29's attacks on ibd's SA client by an unprivileged user (nobody),
// replayed through the client protocol against one ibd (no SM here: what
// reaches the SA fails with ENETUNREACH, so each case shows what ibd
// refuses before the SA would see it). The attacks that need the SA's
// answers (replacing the host's ATS record, holding the subnet's MLIDs)
// are replayed against OpenSM in test/sandbox/mcast.sh.
#include <poll.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "clientproto/socket.hpp"
#include "harness.hpp"
#include "json_flat.hpp"
#include "sa/service_record.hpp"

using namespace openib;
using namespace openib::testing;
using namespace std::chrono_literals;
using proto::Op;

namespace {

// One connection speaking the client protocol: each request's status
// (-1: no reply within `wait`, or the connection closed).
class Session {
 public:
  explicit Session(const std::string& socket) {
    if (auto s = proto::connect_socket(socket)) fd_ = std::move(*s);
  }
  template <class Req>
  int ask(Op op, const Req& req, std::chrono::milliseconds wait = 10s) {
    return send(op, req) ? reply(wait) : -1;
  }
  template <class Req>
  bool send(Op op, const Req& req) {
    proto::Header h;
    h.op = static_cast<uint16_t>(op);
    h.seq = ++seq_;
    return fd_.valid() && proto::send_message(fd_.get(), h, proto::encode(req), {});
  }
  int reply(std::chrono::milliseconds wait) {
    pollfd p{fd_.get(), POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(wait.count())) != 1) return -1;
    auto m = proto::recv_message(fd_.get(), true);
    if (!m) return -1;
    auto v = proto::decode_reply(m->body);
    return v ? static_cast<int>(v->status) : -1;
  }
  int hello() {
    proto::HelloReq h;
    h.flags = proto::kHelloNoUar;
    return ask(Op::kHello, h);
  }

 private:
  UniqueFd fd_;
  uint32_t seq_ = 0;
};

// The value of INFO counter `name` (ibdctl --json counters), -1 if absent.
double counter(const Ibd& ibd, const std::string& name) {
  for (const auto& [k, v] : flatten_json(ibdctl(ibd.socket(), "counters").out))
    if (k == name || k.ends_with("." + name)) return v;
  return -1;
}

proto::ServiceReq service(uint64_t id, const std::string& name) {
  sa::ServiceRecord r;
  r.service_id = id;
  r.service_pkey = 0xFFFF;
  r.service_lease = sa::kInfiniteLease;
  r.service_name = name;
  proto::ServiceReq q;
  sa::encode_service_record(std::as_writable_bytes(std::span(q.record)), r);
  return q;
}

proto::McastJoinReq join(std::array<uint8_t, 16> mgid) {
  proto::McastJoinReq j;
  j.mgid = mgid;
  j.flags = proto::kMcastCreate;
  j.qkey = 0xBAD;  // the attacker's bogus creation components
  j.mtu = 1;
  return j;
}

// Waits until ibd's SA client is attached (ENODEV before): a join of an
// ordinary group then meets the missing SM.
void wait_sa(const Ibd& ibd) {
  Session s(ibd.socket());
  REQUIRE(s.hello() == 0);
  const auto j = join({0xff, 0x12, 0x12, 0x34, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1});
  REQUIRE(wait_until([&] { return s.ask(Op::kMcastJoin, j) != ENODEV; }, 10s));
}

// One ibd (with `args`), its SA client attached.
struct Host {
  TempDir dir;
  std::unique_ptr<Ibd> ibd;
  std::string sock;
  explicit Host(std::vector<std::string> args = {}) {
    IbdOptions o;
    o.extra_args = std::move(args);
    ibd = std::make_unique<Ibd>(dir.path(), "a", o);
    sock = ibd->socket();
    wait_sa(*ibd);
  }
};

constexpr uint64_t kAts = 0x10000CE100415453ull;  // ipoib_tap/ats.hpp
const char* const kAtsName = "DAPL Address Translation Service";

}  // namespace

// Finding 2: nobody's SERVICE_SET of a GID-0 ATS record replaced the
// host's own (the SA keys both as the port's GID), published other hosts'
// addresses as this host's, and deleted the host's record when it left.
// ATS records are ibd's: EACCES for every client, whatever the slot, and
// for the ATS name under another ServiceID (DAPL looks them up by name).
TEST_CASE("SERVICE_SET of an ATS record is EACCES for nobody and for root", "[hostile][sa]") {
  Host h;
  const Ibd& ibd = *h.ibd;
  const std::string sock = h.sock;
  auto attempts = [sock] {
    Session s(sock);
    if (s.hello() != 0) return std::vector<int>{-2};
    return std::vector<int>{s.ask(Op::kServiceSet, service(kAts, kAtsName)),
                            s.ask(Op::kServiceSet, service(kAts | (uint64_t{7} << 24), kAtsName)),
                            s.ask(Op::kServiceSet, service(kAts | (uint64_t{0xFF} << 24), "x")),
                            s.ask(Op::kServiceSet, service(0x1234, kAtsName)),
                            s.ask(Op::kServiceSet, service(0x1234, "an ordinary service"))};
  };
  const auto nobody = run_as_nobody(attempts);
  REQUIRE(nobody.size() == 5);
  for (int i = 0; i < 4; ++i) {
    INFO("attempt " << i);
    CHECK(nobody[i] == EACCES);
  }
  CHECK(nobody[4] == ENETUNREACH);  // an ordinary service goes to the SA (none here)
  const auto root = attempts();
  REQUIRE(root.size() == 5);
  for (int i = 0; i < 4; ++i) CHECK(root[i] == EACCES);
  CHECK(root[4] == ENETUNREACH);
  CHECK(counter(ibd, "service_reserved_refused") == 8);
  CHECK(counter(ibd, "service_sets") == 2);  // only the ordinary ones were asked of the SA
  REQUIRE(ibd.alive());
}

// Finding 7: a client's join of IPoIB's broadcast group with bogus
// creation components became the group's for every later rejoin. IPoIB's
// groups (RFC 4391 section 4: ff1x:401b:<pkey>::, ff1x:601b:<pkey>::) are
// ibd's: EACCES for any client's MCAST_JOIN, before the SA is asked.
TEST_CASE("MCAST_JOIN of IPoIB's groups is EACCES for nobody and for root", "[hostile][sa]") {
  Host h;
  const Ibd& ibd = *h.ibd;
  const std::string sock = h.sock;
  const double sets = counter(ibd, "mcast_sets");
  auto attempts = [sock] {
    Session s(sock);
    if (s.hello() != 0) return std::vector<int>{-2};
    return std::vector<int>{
        s.ask(Op::kMcastJoin, join({0xff, 0x12, 0x40, 0x1b, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff})),
        s.ask(Op::kMcastJoin, join({0xff, 0x15, 0x40, 0x1b, 0x80, 0x01, 0, 0, 0, 0, 0, 0, 0xe0, 0, 0, 1})),
        s.ask(Op::kMcastJoin, join({0xff, 0x12, 0x60, 0x1b, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1})),
        s.ask(Op::kMcastJoin, join({0xff, 0x12, 0x12, 0x34, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2}))};
  };
  const auto nobody = run_as_nobody(attempts);
  REQUIRE(nobody.size() == 4);
  CHECK(nobody[0] == EACCES);
  CHECK(nobody[1] == EACCES);
  CHECK(nobody[2] == EACCES);
  CHECK(nobody[3] == ENETUNREACH);  // any other group is anyone's (no SM here)
  const auto root = attempts();
  REQUIRE(root.size() == 4);
  CHECK(root == std::vector<int>{EACCES, EACCES, EACCES, ENETUNREACH});
  CHECK(counter(ibd, "mcast_sets") == sets + 2);  // only the ordinary group was asked of the SA
  REQUIRE(ibd.alive());
}

// Finding 6: the multicast and service quotas were per connection, so 16
// connections of one user took 16 times as much. The per-uid bound holds
// across a uid's connections (here 0: nothing for nobody, however many
// connections), root is exempt from it.
TEST_CASE("the per-uid multicast and service bounds hold across a uid's connections", "[hostile][sa]") {
  Host h({"--uid-max-mcast-joins=0", "--uid-max-services=0"});
  const Ibd& ibd = *h.ibd;
  const std::string sock = h.sock;
  auto attempts = [sock] {
    std::vector<int> out;
    for (int c = 0; c < 16; ++c) {
      Session s(sock);
      if (s.hello() != 0) return std::vector<int>{-2};
      out.push_back(s.ask(Op::kMcastJoin, join({0xff, 0x12, 0x12, 0x34, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                                static_cast<uint8_t>(c)})));
      out.push_back(s.ask(Op::kServiceSet, service(0x5000 + c, "svc")));
    }
    return out;
  };
  const auto nobody = run_as_nobody(attempts);
  REQUIRE(nobody.size() == 32);
  for (size_t i = 0; i < nobody.size(); ++i) {
    INFO("request " << i);
    CHECK(nobody[i] == EDQUOT);
  }
  const auto root = attempts();
  REQUIRE(root.size() == 32);
  for (int r : root) CHECK(r == ENETUNREACH);  // past the bound's check: the SA (none here)
  CHECK(counter(ibd, "mcast_quota_denied") == 16);
  CHECK(counter(ibd, "service_quota_denied") == 16);
  REQUIRE(ibd.alive());
}

// The lower finding: fresh PATH_QUERYs reached the SA unthrottled (20,000
// a second from one user). A uid's queries that miss the cache spend a
// token of its bucket (here 2 at once, 2 more a second); without one, a
// query waits for its token while no more than a burst's worth wait, and
// is EAGAIN past that, without asking the SA. root is not bounded.
TEST_CASE("PATH_QUERY misses past the uid's token bucket wait, then are EAGAIN; root is not bounded",
          "[hostile][sa]") {
  Host h({"--uid-sa-queries-per-sec=2", "--uid-sa-query-burst=2"});
  const Ibd& ibd = *h.ibd;
  const std::string sock = h.sock;
  constexpr int kConns = 12;
  // Every connection's query sent before any answer is read: they meet
  // the bucket together. Last: the milliseconds the sending took.
  auto attempts = [sock] {
    std::vector<std::unique_ptr<Session>> conns;
    for (int i = 0; i < kConns; ++i) {
      conns.push_back(std::make_unique<Session>(sock));
      if (conns.back()->hello() != 0) return std::vector<int>{-2};
    }
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < kConns; ++i) {
      proto::PathQueryReq q;
      q.dgid = {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10, static_cast<uint8_t>(i)};
      if (!conns[i]->send(Op::kPathQuery, q)) return std::vector<int>{-3};
    }
    const auto sent = std::chrono::steady_clock::now() - start;
    std::vector<int> out;
    for (auto& c : conns) out.push_back(c->reply(20s));
    out.push_back(static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(sent).count()));
    return out;
  };
  const auto nobody = run_as_nobody(attempts, 60s);
  REQUIRE(nobody.size() == kConns + 1);
  // Tokens the sending may have earned besides the burst: 2 a second.
  const int earned = nobody.back() * 2 / 1000 + 1;
  int again = 0, went = 0;
  for (int i = 0; i < kConns; ++i) {
    INFO("query " << i << ": " << nobody[i]);
    CHECK(nobody[i] != -1);  // every query answered, the waiting ones too
    CHECK(nobody[i] != 0);   // no SM here: an error, never a path
    (nobody[i] == EAGAIN ? again : went)++;
  }
  INFO("EAGAIN " << again << ", to the SA " << went << ", sent in " << nobody.back() << " ms");
  CHECK(went >= 4);                  // the burst, and a burst's worth that waited
  CHECK(went <= 4 + earned);         // no more
  CHECK(counter(ibd, "sa_queries_throttled") == again);
  CHECK(counter(ibd, "sa_queries_paced") >= 2);
  const auto root = attempts();
  REQUIRE(root.size() == kConns + 1);
  for (int i = 0; i < kConns; ++i) CHECK((root[i] != EAGAIN && root[i] != -1));
  REQUIRE(ibd.alive());
}
