// The RDMA CM against a hostile remote host and a hostile local user
// (issue 29, findings 3, 4 and 10; docs/cma.md "Security"). The remote host
// is an IB CM client on the other ibd writing REQs with rdma_cm's service
// IDs and whatever CMA header it likes (the wire format Linux's rdma_cm
// writes, docs/cma.md "Wire"); the local user is `nobody` (run_as_nobody).
//  - Headers Linux refuses are refused (REJ 28, counted), above all a
//    destination on the loopback address: a service bound to 127.0.0.1 is
//    out of another host's reach, whatever source the header claims.
//  - RDMA CM ids are bounded per client and per uid, the ids connect
//    requests make for a listener included; a listener's backlog holds.
//  - A connect request the listener never answers expires.
//  - Queued events are charged to the event-bytes budget.
//  - CMA_INFO shows an unprivileged user its own ids only.
#include <netinet/in.h>
#include <poll.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "clientproto/socket.hpp"
#include "cm_path.hpp"
#include "cma/header.hpp"
#include "cma_addr.hpp"
#include "cma_expect.hpp"
#include "harness.hpp"
#include "json_flat.hpp"
#include "openib/cm.hpp"
#include "openib/cma.hpp"
#include "openib/path.hpp"
#include "rc_link.hpp"

using namespace openib;
using namespace openib::testing;
using namespace std::chrono_literals;
namespace proto = openib::proto;

namespace {

constexpr int kWaitMs = 5000;   // an event that must come
constexpr int kQuietMs = 300;   // how long one that must not come is given to show up

template <class T>
T must(Result<T> r, const char* what) {
  INFO(what << ": " << (r.ok() ? std::string() : r.error().str()));
  REQUIRE(r.ok());
  return std::move(r).value();
}
void must(Result<void> r, const char* what) {
  INFO(what << ": " << (r.ok() ? std::string() : r.error().str()));
  REQUIRE(r.ok());
}
template <class T>
int error_of(const Result<T>& r) {
  return r.ok() ? 0 : r.error().code;
}

cma::Addr v4(uint8_t a, uint8_t b, uint8_t c, uint8_t d, uint16_t port) { return ipv4<cma::Addr>(a, b, c, d, port); }
IpEndpoint ep4(uint8_t a, uint8_t b, uint8_t c, uint8_t d, uint16_t port) { return ipv4<IpEndpoint>(a, b, c, d, port); }

// A counter of `ibdctl counters` (its JSON flattened; the key's last
// components), or -1.
double counter(const Ibd& ibd, const std::string& name) {
  auto flat = flatten_json(ibdctl(ibd.socket(), "counters").out);
  for (const auto& [k, v] : flat)
    if (k == name || (k.size() > name.size() && k.compare(k.size() - name.size() - 1, std::string::npos, "." + name) == 0))
      return v;
  return -1;
}

// An RDMA CM channel on ibd A (Context first, channel closed before it).
struct Cma {
  std::string socket;
  std::unique_ptr<Context> ctx;
  std::unique_ptr<RdmaEventChannel> ch;
  explicit Cma(const std::string& sock) : socket(sock) {
    ctx = must(Context::open(ContextOptions{.socket = sock}), "Context::open");
    ch = must(RdmaEventChannel::open(*ctx), "RdmaEventChannel::open");
  }
  ~Cma() { ch.reset(); }
  uint32_t listen(const IpEndpoint& at, int backlog = 0) {
    const uint32_t id = must(ch->create_id(RdmaPortSpace::kTcp), "create_id");
    must(ch->bind_addr(id, at), "bind_addr");
    // Right after ibd starts its CM may still be coming up (the port's MAD
    // layer opens after the socket accepts): the listen waits for it, it
    // does not fail (docs/cm.md "Listening before the engine runs"); the
    // test goes on once the engine has taken it.
    must(ch->listen(id, backlog), "listen");
    REQUIRE(wait_cm_running(socket));
    return id;
  }
};

// The hostile remote host: an IB CM client on ibd B sending REQs to A's
// port with rdma_cm's service ID and a CMA header of its choosing.
struct Remote {
  std::unique_ptr<Side> side;
  std::unique_ptr<CmChannel> cm;
  uint16_t a_lid = 1;
  explicit Remote(const std::string& sock_b) {
    side = must(open_side(sock_b, 65536), "open_side");
    cm = must(CmChannel::open(*side->ctx), "CmChannel::open");
  }
  // A REQ on a fresh QP; the QP is kept (the connection may stay pending).
  void req(uint16_t port, const cma::Addr& src, const cma::Addr& dst, CmConnParams cp = {}) {
    QpInit init;
    init.type = QpType::kRc;
    init.send_cq = init.recv_cq = side->cq.get();
    qps.push_back(must(side->ctx->create_qp(*side->pd, init), "create_qp"));
    cp.private_data = with_cma_header(src, dst, {});
    // (B's CM runs once its MAD layer is up: ENETDOWN before.)
    Result<uint32_t> r = err(ENETDOWN, "not tried");
    REQUIRE(wait_until(
        [&] {
          r = cm->connect(*qps.back(), decode_path_record(wire_path(side->lid, a_lid)),
                          cma::service_id(cma::kPsTcp, port), cp);
          return r.ok() || r.error().code != ENETDOWN;
        },
        10s));
    must(std::move(r), "IB CM connect");
  }
  // The next event on B's CM channel, of type `want`.
  CmEvent expect(CmEventType want) {
    auto e = cm->get_event(kWaitMs);
    INFO("get_event: " << (e ? std::string(cm_event_str(e->type)) : e.error().str()));
    REQUIRE(e.ok());
    REQUIRE(e->type == want);
    return *e;
  }
  std::vector<std::unique_ptr<Qp>> qps;
};

RdmaCmEvent expect_cma(RdmaEventChannel& ch, RdmaCmEventType want) { return expect_cma_event(ch, want); }
void expect_quiet(RdmaEventChannel& ch) {
  auto e = ch.get_event(kQuietMs);
  INFO((e ? std::string("unexpected ") + rdma_event_str(e->type) : e.error().str()));
  CHECK(!e.ok());
}

// CMA_INFO's JSON as the calling process sees it (a raw connection of its
// own: HELLO, then CMA_INFO); empty on any failure.
std::string cma_info(const std::string& sock) {
  auto s = proto::connect_socket(sock);
  if (!s) return {};
  auto call = [&](proto::Op op, const proto::Bytes& body, uint32_t seq) -> std::string {
    proto::Header h;
    h.op = static_cast<uint16_t>(op);
    h.seq = seq;
    if (!proto::send_message(s->get(), h, body, {})) return {};
    pollfd p{s->get(), POLLIN, 0};
    if (::poll(&p, 1, kWaitMs) != 1) return {};
    auto m = proto::recv_message(s->get(), true);
    if (!m) return {};
    auto v = proto::decode_reply(m->body);
    if (!v || v->status) return {};
    return std::string(reinterpret_cast<const char*>(v->payload.data()), v->payload.size()) + " ";
  };
  proto::HelloReq hello;
  hello.flags = proto::kHelloNoUar;
  if (call(proto::Op::kHello, proto::encode(hello), 1).empty()) return {};
  std::string j = call(proto::Op::kCmaInfo, proto::encode(proto::Empty{}), 2);
  if (!j.empty()) j.pop_back();
  return j;
}

}  // namespace

// Finding 3: Linux's rdma_cm (cma.c: cma_ib_id_from_event, validate_net_dev,
// cma_find_listener) takes a REQ only for a unicast, non-loopback
// destination of the receiving device, from a unicast, non-loopback source,
// and gives an id bound to an address only the REQs for that address;
// otherwise the IB CM rejects with reason 28 (consumer reject: the handler
// refused). ibd A here runs no IPoIB: only the address classes can be
// checked (docs/cma.md "Security").
TEST_CASE("CMA: a REQ for a loopback-bound service, or with loopback, wildcard, multicast or broadcast endpoints, is REJ 28",
          "[hostile][cma]") {
  TempDir dir;
  IbdPair pair(dir.path(), "warn", /*distinct_guids=*/true);
  Cma server(pair.a->socket());
  const uint32_t lo = server.listen(ep4(127, 0, 0, 1, 7800));   // a local-only service
  const uint32_t any = server.listen(ep4(0, 0, 0, 0, 7801));    // every address
  Remote evil(pair.b->socket());
  const cma::Addr third = v4(198, 18, 0, 3, 40000);  // a third host's address as the source

  struct Case {
    const char* what;
    uint16_t port;
    cma::Addr src, dst;
  };
  const std::vector<Case> bad = {
      {"a service on 127.0.0.1, a third host's source", 7800, third, v4(127, 0, 0, 1, 7800)},
      {"127.0.0.1 from the loopback address", 7800, v4(127, 0, 0, 1, 1), v4(127, 0, 0, 1, 7800)},
      {"the wildcard listener, destination 127.0.0.1", 7801, third, v4(127, 0, 0, 1, 7801)},
      {"the wildcard listener, destination 127.9.9.9", 7801, third, v4(127, 9, 9, 9, 7801)},
      {"a loopback source", 7801, v4(127, 0, 0, 1, 40000), v4(198, 18, 0, 1, 7801)},
      {"a wildcard destination", 7801, third, v4(0, 0, 0, 0, 7801)},
      {"a wildcard source", 7801, v4(0, 0, 0, 0, 40000), v4(198, 18, 0, 1, 7801)},
      {"a multicast destination", 7801, third, v4(224, 0, 0, 1, 7801)},
      {"a multicast source", 7801, v4(239, 1, 1, 1, 40000), v4(198, 18, 0, 1, 7801)},
      {"a broadcast destination", 7801, third, v4(255, 255, 255, 255, 7801)},
  };
  for (const Case& c : bad) {
    INFO(c.what);
    evil.req(c.port, c.src, c.dst);
    const CmEvent rej = evil.expect(CmEventType::kRejected);
    CHECK(rej.reason == cm_rej::kConsumerReject);
  }
  expect_quiet(*server.ch);
  CHECK(counter(*pair.a, "cma.requests_bad_address") == double(bad.size()));
  CHECK(counter(*pair.a, "cma.requests_refused") == double(bad.size()));
  CHECK(counter(*pair.a, "cma.connect_requests") == 0);

  // The IPv6 loopback, and an IPv4-mapped one, for the wildcard (IPv4) listener's IPv6 sibling.
  Cma server6(pair.a->socket());
  const uint32_t any6 = must(server6.ch->create_id(RdmaPortSpace::kTcp), "create_id");
  IpEndpoint w6{};
  w6.family = AF_INET6;
  w6.port = 7802;
  must(server6.ch->bind_addr(any6, w6), "bind_addr [::]");
  must(server6.ch->listen(any6), "listen");
  cma::Addr lo6{}, mapped{}, src6{};
  lo6.family = mapped.family = src6.family = AF_INET6;
  lo6.port = mapped.port = 7802;
  lo6.addr[15] = 1;
  mapped.addr[10] = mapped.addr[11] = 0xFF;
  mapped.addr[12] = 127;
  mapped.addr[15] = 1;
  src6.port = 40000;
  src6.addr[0] = 0xfd;
  src6.addr[15] = 3;
  for (const cma::Addr& d : {lo6, mapped}) {
    INFO("destination " << d.str());
    evil.req(7802, src6, d);
    CHECK(evil.expect(CmEventType::kRejected).reason == cm_rej::kConsumerReject);
  }
  expect_quiet(*server6.ch);

  // What Linux takes, ibd takes: a unicast source and destination for the
  // wildcard listener (the loopback-bound one never hears of it).
  evil.req(7801, v4(198, 18, 0, 2, 40001), v4(198, 18, 0, 1, 7801));
  const RdmaCmEvent req = expect_cma(*server.ch, RdmaCmEventType::kConnectRequest);
  CHECK(req.listen_id == any);
  CHECK(req.dst.str() == "198.18.0.2:40001");
  must(server.ch->reject(req.id), "reject");
  CHECK(evil.expect(CmEventType::kRejected).reason == cm_rej::kConsumerReject);
  expect_quiet(*server.ch);
  CHECK(counter(*pair.a, "cma.requests_bad_address") == double(bad.size() + 2));
  must(server.ch->destroy_id(lo), "destroy_id");
}

// With an IPoIB interface configured (the ARP module runs; no SM here, so
// the interface has no address), a destination that is no address of the
// receiving port's interface finds no listener, wildcard or not: what
// Linux's ib_get_net_dev_by_params answers (no net_dev: -ENODEV).
TEST_CASE("CMA: with IPoIB configured, a destination that is no address of the interface is REJ 28", "[hostile][cma]") {
  TempDir dir;
  IbdPair pair(dir.path(), "warn", /*distinct_guids=*/true, /*shm_cable=*/false,
               {"--ipoib", "oibc" + std::to_string(::getpid() % 100000)});
  Cma server(pair.a->socket());
  (void)server.listen(ep4(0, 0, 0, 0, 7810));
  Remote evil(pair.b->socket());
  for (const cma::Addr& dst : {v4(198, 18, 0, 1, 7810), v4(10, 1, 2, 3, 7810)}) {
    INFO("destination " << dst.str());
    evil.req(7810, v4(198, 18, 0, 2, 40000), dst);
    CHECK(evil.expect(CmEventType::kRejected).reason == cm_rej::kConsumerReject);
  }
  expect_quiet(*server.ch);
  CHECK(counter(*pair.a, "cma.requests_bad_address") == 2);
  CHECK(counter(*pair.a, "cma.connect_requests") == 0);
}

// Finding 4: RDMA CM ids per client (--client-max-cma-ids) and per uid
// (--uid-max-cma-ids; uid 0 exempt) are bounded: EDQUOT, and given back
// when an id or its client goes.
TEST_CASE("CMA: RDMA CM ids per client and per uid are bounded (EDQUOT), given back when they go", "[hostile][cma]") {
  TempDir dir;
  IbdOptions o;
  o.extra_args = {"--client-max-cma-ids", "8", "--uid-max-cma-ids", "12"};
  Ibd ibd(dir.path(), "a", o);
  const std::string sock = ibd.socket();
  // Ids created until refused (at most 20): how many, and the refusal's errno.
  auto fill = [](RdmaEventChannel& ch, std::vector<uint32_t>* ids = nullptr) {
    for (int n = 0; n < 20; ++n) {
      auto id = ch.create_id(RdmaPortSpace::kTcp);
      if (!id) return std::vector<int>{n, id.error().code};
      if (ids) ids->push_back(*id);
    }
    return std::vector<int>{20, 0};
  };
  auto nobody = run_as_nobody([&] {
    std::vector<int> out;
    auto c1 = Context::open(ContextOptions{.socket = sock});
    auto c2 = Context::open(ContextOptions{.socket = sock});
    if (!c1 || !c2) return std::vector<int>{-1};
    auto ch1 = RdmaEventChannel::open(**c1);
    auto ch2 = RdmaEventChannel::open(**c2);
    if (!ch1 || !ch2) return std::vector<int>{-2};
    std::vector<uint32_t> ids1;
    for (int v : fill(**ch1, &ids1)) out.push_back(v);  // the client's 8
    for (int v : fill(**ch2)) out.push_back(v);         // the uid's other 4
    out.push_back(error_of((*ch1)->destroy_id(ids1.at(0))));
    out.push_back(error_of((*ch2)->create_id(RdmaPortSpace::kUdp)));  // the one given back
    out.push_back(error_of((*ch2)->create_id(RdmaPortSpace::kUdp)));
    return out;
  });
  REQUIRE(nobody.size() == 7);
  CHECK(nobody[0] == 8);
  CHECK(nobody[1] == EDQUOT);
  CHECK(nobody[2] == 4);
  CHECK(nobody[3] == EDQUOT);
  CHECK(nobody[4] == 0);
  CHECK(nobody[5] == 0);
  CHECK(nobody[6] == EDQUOT);
  // nobody's connections closed: its ids went and were given back.
  REQUIRE(wait_until([&] { return counter(ibd, "cma.ids") == 0; }, 10s));
  // Root: the per-client bound only (uid 0 is exempt from the per-uid one).
  Cma r1(sock), r2(sock);
  CHECK(fill(*r1.ch) == std::vector<int>{8, EDQUOT});
  CHECK(fill(*r2.ch) == std::vector<int>{8, EDQUOT});
  CHECK(counter(ibd, "cma.ids") == 16);
  CHECK(counter(ibd, "cma.ids_denied") == 5);  // nobody's 3, root's 2
}

// Findings 4 and 10: the ids a remote host's connect requests make for a
// listener are charged to the listener's client, and held to the
// listener's backlog; past either, REJ 28, counted; an answered request
// frees its place.
TEST_CASE("CMA: a remote host's connect requests are bounded by the listener's id budget and backlog", "[hostile][cma]") {
  TempDir dir;
  IbdPair pair(dir.path(), "warn", /*distinct_guids=*/true, /*shm_cable=*/false, {"--client-max-cma-ids", "4"});
  Remote evil(pair.b->socket());
  const cma::Addr src = v4(198, 18, 0, 2, 40000);

  // The budget: a listener and an id of the client's own leave room for two requests.
  {
    Cma server(pair.a->socket());
    const uint32_t l = server.listen(ep4(0, 0, 0, 0, 7820));
    (void)must(server.ch->create_id(RdmaPortSpace::kTcp), "create_id");
    std::vector<uint32_t> got;
    for (int i = 0; i < 3; ++i) evil.req(7820, src, v4(198, 18, 0, 1, 7820));
    for (int i = 0; i < 2; ++i) got.push_back(expect_cma(*server.ch, RdmaCmEventType::kConnectRequest).id);
    CHECK(evil.expect(CmEventType::kRejected).reason == cm_rej::kConsumerReject);
    expect_quiet(*server.ch);
    CHECK(counter(*pair.a, "cma.requests_over_budget") == 1);
    CHECK(error_of(server.ch->create_id(RdmaPortSpace::kTcp)) == EDQUOT);
    // One answered and destroyed: room for one more.
    must(server.ch->reject(got[0]), "reject");
    CHECK(evil.expect(CmEventType::kRejected).reason == cm_rej::kConsumerReject);
    must(server.ch->destroy_id(got[0]), "destroy_id");
    evil.req(7820, src, v4(198, 18, 0, 1, 7820));
    CHECK(expect_cma(*server.ch, RdmaCmEventType::kConnectRequest).listen_id == l);
  }
  // (The client went: its pending requests were rejected.)
  REQUIRE(wait_until([&] { return counter(*pair.a, "cma.ids") == 0; }, 10s));
  for (int i = 0; i < 2; ++i) CHECK(evil.expect(CmEventType::kRejected).type == CmEventType::kRejected);

  // The backlog: 1 unanswered request at a time.
  Cma server(pair.a->socket());
  (void)server.listen(ep4(0, 0, 0, 0, 7821), 1);
  evil.req(7821, src, v4(198, 18, 0, 1, 7821));
  evil.req(7821, src, v4(198, 18, 0, 1, 7821));
  const RdmaCmEvent first = expect_cma(*server.ch, RdmaCmEventType::kConnectRequest);
  CHECK(evil.expect(CmEventType::kRejected).reason == cm_rej::kConsumerReject);
  expect_quiet(*server.ch);
  CHECK(counter(*pair.a, "cma.requests_over_backlog") == 1);
  must(server.ch->reject(first.id), "reject");  // answered: out of the backlog
  CHECK(evil.expect(CmEventType::kRejected).reason == cm_rej::kConsumerReject);
  evil.req(7821, src, v4(198, 18, 0, 1, 7821));
  (void)expect_cma(*server.ch, RdmaCmEventType::kConnectRequest);
}

// Finding 10: a connect request the listener's client never answers
// expires when the IB CM gives up on it (the peer's own wait: its CM
// response timeout and retries, IBA 12.6.5): the client hears UNREACHABLE
// (-ETIMEDOUT, as Linux's cma_ib_handler reports a connection that timed
// out), the id is gone, its backlog place and budget free.
TEST_CASE("CMA: a connect request left unanswered expires: UNREACHABLE, the id gone, its place free", "[hostile][cma]") {
  TempDir dir;
  IbdPair pair(dir.path(), "warn", /*distinct_guids=*/true);
  Cma server(pair.a->socket());
  (void)server.listen(ep4(0, 0, 0, 0, 7830), 1);
  Remote evil(pair.b->socket());
  CmConnParams quick;
  quick.cm_response_timeout = 14;  // about 67 ms
  quick.max_cm_retries = 1;
  evil.req(7830, v4(198, 18, 0, 2, 40000), v4(198, 18, 0, 1, 7830), quick);
  const RdmaCmEvent req = expect_cma(*server.ch, RdmaCmEventType::kConnectRequest);
  CHECK(counter(*pair.a, "cma.ids") == 2);
  // Nothing answered: the request expires (within the IB CM's cap, 60 s).
  auto e = server.ch->get_event(70000);
  REQUIRE(e.ok());
  CHECK(e->type == RdmaCmEventType::kUnreachable);
  CHECK(e->id == req.id);
  CHECK(e->status == -ETIMEDOUT);
  CHECK(error_of(server.ch->query(req.id)) == ENOENT);
  CHECK(error_of(server.ch->accept(req.id, nullptr, {})) == ENOENT);
  CHECK(counter(*pair.a, "cma.ids") == 1);
  CHECK(counter(*pair.a, "cma.requests_expired") == 1);
  // The backlog's one place is free again.
  evil.req(7830, v4(198, 18, 0, 2, 40001), v4(198, 18, 0, 1, 7830));
  (void)expect_cma(*server.ch, RdmaCmEventType::kConnectRequest);
}

// Finding 4: events a client leaves unread are charged to the event-bytes
// budget (--client-max-event-bytes), well before --cm-max-queued-events:
// past it the event socket is closed, counted, and ibd serves on.
TEST_CASE("CMA: unread events are bounded by the event-bytes budget", "[hostile][cma]") {
  TempDir dir;
  IbdOptions o;
  o.extra_args = {"--client-max-event-bytes", "4096", "--cm-max-queued-events", "100000"};
  Ibd ibd(dir.path(), "a", o);
  Cma c(ibd.socket());
  std::vector<uint32_t> ids;
  for (int i = 0; i < 32; ++i) ids.push_back(must(c.ch->create_id(RdmaPortSpace::kTcp), "create_id"));
  const uint32_t id = ids[0];
  // Address resolutions (no IPoIB: each an ADDR_ERROR), none read: the
  // socket's buffer (4 MiB) takes a few thousand, the queue behind it
  // 4096 bytes' worth, not 100,000 events.
  int sent = 0;
  for (int round = 0; round < 2000; ++round) {
    if (round % 50 == 0 && counter(ibd, "cma.sessions_overrun") >= 1) break;
    for (uint32_t i : ids) {
      auto r = c.ch->resolve_addr(i, nullptr, ep4(198, 18, 0, 2, 7471), 1000);
      sent += r.ok();
      REQUIRE((r.ok() || r.error().code == EINVAL));  // (EINVAL: the previous one not answered yet)
    }
  }
  INFO(sent << " resolutions");
  CHECK(counter(ibd, "cma.sessions_overrun") == 1);
  int read = 0;
  while (c.ch->get_event(1000).ok()) ++read;
  CHECK(read > 0);
  CHECK(read < sent);
  CHECK(ibd.alive());
  CHECK(must(c.ch->query(id), "query").src.port >= 32768);
}

// The lower finding: CMA_INFO listed every user's endpoints and QPNs to
// anyone. An unprivileged user sees its own uid's ids only (ibdctl runs on
// a connection of its own); root sees all; the counters stay global.
TEST_CASE("CMA_INFO: an unprivileged user sees its own ids only, root all; counters global", "[hostile][cma]") {
  TempDir dir;
  Ibd ibd(dir.path(), "a", IbdOptions{});
  const std::string sock = ibd.socket();
  Cma root(sock), root2(sock);
  (void)root.listen(ep4(127, 0, 0, 1, 7840));
  (void)root2.listen(ep4(0, 0, 0, 0, 7841));
  auto seen = [](const std::string& text) {
    auto j = nlohmann::json::parse(text, nullptr, false);
    if (j.is_discarded() || !j.contains("ids")) return std::vector<int>{-1, -1, -1, -1};
    std::set<int> clients, ports;
    for (const auto& id : j["ids"]) {
      clients.insert(id.value("client", -1));
      const std::string src = id.value("src", "");
      ports.insert(std::atoi(src.substr(src.rfind(':') + 1).c_str()));
    }
    const int total = j["counters"].value("cma.ids", -1);
    return std::vector<int>{int(j["ids"].size()), int(clients.size()), int(ports.count(7840) + ports.count(7841)), total};
  };
  auto nobody = run_as_nobody([&] {
    auto ctx = Context::open(ContextOptions{.socket = sock});
    if (!ctx) return std::vector<int>{-2};
    auto ch = RdmaEventChannel::open(**ctx);
    if (!ch) return std::vector<int>{-3};
    for (int i = 0; i < 3; ++i)
      if (!(*ch)->create_id(RdmaPortSpace::kTcp)) return std::vector<int>{-4};
    return seen(cma_info(sock));
  });
  REQUIRE(nobody.size() == 4);
  CHECK(nobody[0] == 3);  // its own three ids
  CHECK(nobody[1] == 1);  // of one client, its own
  CHECK(nobody[2] == 0);  // none of root's endpoints
  CHECK(nobody[3] == 5);  // the gauge counts everyone's
  // Root (on a connection with no ids of its own) sees both clients' ids.
  REQUIRE(wait_until([&] { return counter(ibd, "cma.ids") == 2; }, 10s));  // (nobody's went with it)
  const std::vector<int> all = seen(cma_info(sock));
  CHECK(all[0] == 2);
  CHECK(all[1] == 2);
  CHECK(all[2] == 2);
  CHECK(all[3] == 2);
}
