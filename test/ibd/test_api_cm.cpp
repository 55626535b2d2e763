// The connection manager through libopenib (include/openib/cm.hpp,
// docs/cm.md "Library"; IBA 12): a listener on ibd A, a connector on ibd
// B, REQ/REP/RTU with private data, RC data over the connection ibd
// brought up, reject with reason and private data, the manual_qp protocol
// (init_qp_attr, the RTU by accept), SIDR, disconnect and timewait, a
// client that destroys or closes everything, and the errors a user can
// provoke.
#include <nlohmann/json.hpp>

#include "cm_path.hpp"
#include "openib/cm.hpp"
#include "openib/path.hpp"
#include "test_api.hpp"

using namespace openib;
using namespace openib::testing;
using namespace openib::testing::api;

namespace {

constexpr uint64_t kService = 0x0000000100c0ffeeull;
constexpr int kTimewaitMs = 20000;  // timewait is the local ACK timeout (IBA 12.9.8.2): well under this

// One side: an Ep (RC QP in RESET by default) and its CM channel (closed first).
struct CmSide {
  std::unique_ptr<Ep> ep;
  std::unique_ptr<CmChannel> cm;
};
CmSide cm_side(const std::string& socket, const EpOptions& o = {}) {
  CmSide s;
  s.ep = open_ep(socket, o);
  s.cm = must(CmChannel::open(*s.ep->ctx), "CmChannel::open");
  return s;
}

// The path from `from` to `to` (no SM here: made from their LIDs and GIDs).
PathRecord path(const Ep& from, const Ep& to) {
  return decode_path_record(wire_path(from.lid, to.lid, from.gid.raw, to.gid.raw));
}

// Another QP on the side's Context (its CQ and PD).
std::unique_ptr<Qp> another_qp(Ep& e, QpType type) {
  QpInit init;
  init.type = type;
  init.send_cq = init.recv_cq = e.cq.get();
  return must(e.ctx->create_qp(*e.pd, init), "create_qp");
}

std::vector<uint8_t> pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  fill(v.data(), n, seed);
  return v;
}

CmEvent next_event(CmChannel& c, int timeout_ms = kWaitMs) {
  auto e = c.get_event(timeout_ms);
  INFO("get_event: " << (e ? std::string() : e.error().str()));
  REQUIRE(e.ok());
  return std::move(e).value();
}
CmEvent expect_event(CmChannel& c, CmEventType want, int timeout_ms = kWaitMs) {
  CmEvent e = next_event(c, timeout_ms);
  INFO("wanted '" << cm_event_str(want) << "', got '" << cm_event_str(e.type) << "' (id " << e.id << ", status "
                  << e.status << ", reason " << e.reason << ")");
  REQUIRE(e.type == want);
  return e;
}
void expect_no_event(CmChannel& c) {
  auto e = c.get_event(kQuietMs);
  INFO("unexpected event: " << (e ? cm_event_str(e->type) : ""));
  CHECK((!e.ok() && e.error().code == ETIMEDOUT));
}

// A message each way over a connected RC pair, its bytes checked.
void exchange(Ep& x, Ep& y, uint32_t len, uint8_t seed) {
  for (auto [from, to] : {std::pair<Ep*, Ep*>{&x, &y}, std::pair<Ep*, Ep*>{&y, &x}}) {
    REQUIRE(post_recv(*to->qp, to->sge(16384, 4096), 1) == 0);
    fill(from->buf(), len, seed);
    REQUIRE(post_send(*from->qp, from->sge(0, len), 2) == 0);
    Wc s = wait_wc(*from->cq);
    CHECK(s.status == kWcSuccess);
    Wc r = wait_wc(*to->cq);
    CHECK(r.status == kWcSuccess);
    CHECK(r.byte_len == len);
    CHECK(first_diff(to->buf() + 16384, len, seed) == len);
    ++seed;
  }
}

template <class T>
int error_of(const Result<T>& r) {
  return r.ok() ? 0 : r.error().code;
}

// `ibdctl --json cm` of ibd `socket`.
nlohmann::json cm_info(const std::string& socket) {
  RunResult r = ibdctl(socket, "cm");
  INFO(r.err);
  REQUIRE(r.exited_ok());
  auto j = nlohmann::json::parse(r.out, nullptr, false);
  REQUIRE_FALSE(j.is_discarded());
  return j;
}

// A listener on A, a connector on B, connected with ibd moving both QPs
// (REQ, REP, RTU); each side's connection id.
struct Connected {
  CmSide a, b;
  uint32_t listen_id = 0, a_id = 0, b_id = 0;
};
Connected connect_pair(uint64_t service) {
  Connected c{cm_side(sock_a()), cm_side(sock_b())};
  c.listen_id = must(c.a.cm->listen(1, service), "listen");
  c.b_id = must(c.b.cm->connect(*c.b.ep->qp, path(*c.b.ep, *c.a.ep), service, {}), "connect");
  CmEvent req = expect_event(*c.a.cm, CmEventType::kRequest);
  c.a_id = req.id;
  must(c.a.cm->accept(c.a_id, *c.a.ep->qp, {}), "accept");
  expect_event(*c.b.cm, CmEventType::kReply);
  expect_event(*c.b.cm, CmEventType::kEstablished);
  expect_event(*c.a.cm, CmEventType::kEstablished);
  return c;
}

}  // namespace

TEST_CASE("CM connect/accept: REQ and REP private data whole, established both sides, RC data both "
          "ways; disconnect: the peer's request, ours answered, timewait exit on both",
          "[api][cm]") {
  CmSide a = cm_side(sock_a()), b = cm_side(sock_b());
  const uint32_t lid = must(a.cm->listen(1, kService), "listen");
  CmConnParams cp;
  cp.private_data = pattern(cm_private::kReq, 3);
  const uint32_t bid = must(b.cm->connect(*b.ep->qp, path(*b.ep, *a.ep), kService, cp), "connect");
  CHECK(bid != 0);

  CmEvent req = expect_event(*a.cm, CmEventType::kRequest);
  CHECK(req.listen_id == lid);
  CHECK(req.id != lid);
  CHECK(req.port == 1);
  CHECK(req.service_id == kService);
  CHECK(req.remote_qpn == b.ep->qp->qp_num());
  CHECK(req.remote_lid == b.ep->lid);
  CHECK(req.remote_gid.raw == b.ep->gid.raw);
  CHECK(req.private_data == cp.private_data);

  CmConnParams ap;
  ap.private_data = pattern(cm_private::kRep, 9);
  must(a.cm->accept(req.id, *a.ep->qp, ap), "accept");
  CmEvent rep = expect_event(*b.cm, CmEventType::kReply);
  CHECK(rep.id == bid);
  CHECK(rep.remote_qpn == a.ep->qp->qp_num());
  CHECK(rep.private_data == ap.private_data);
  CHECK(expect_event(*b.cm, CmEventType::kEstablished).id == bid);
  CHECK(expect_event(*a.cm, CmEventType::kEstablished).id == req.id);
  CHECK(must(a.ep->qp->query(), "query A").state == QpState::kRts);
  CHECK(must(b.ep->qp->query(), "query B").state == QpState::kRts);

  exchange(*b.ep, *a.ep, 3000, 40);
  exchange(*a.ep, *b.ep, 100, 50);

  must(b.cm->disconnect(bid, pattern(20, 1)), "disconnect");
  CmEvent dreq = expect_event(*a.cm, CmEventType::kDisconnectRequest);
  CHECK(dreq.id == req.id);
  // The DREQ's private data field is 220 bytes on the wire: ours, then zeros.
  REQUIRE(dreq.private_data.size() == cm_private::kDreq);
  CHECK(std::vector<uint8_t>(dreq.private_data.begin(), dreq.private_data.begin() + 20) == pattern(20, 1));
  CHECK(all_bytes(dreq.private_data.data() + 20, cm_private::kDreq - 20, 0));
  CmEvent done = expect_event(*b.cm, CmEventType::kDisconnected);
  CHECK(done.id == bid);
  CHECK(done.status == 0);
  CHECK(expect_event(*b.cm, CmEventType::kTimewaitExit, kTimewaitMs).id == bid);
  CHECK(expect_event(*a.cm, CmEventType::kTimewaitExit, kTimewaitMs).id == req.id);
  // ibd moved both QPs to ERROR at the disconnect.
  CHECK(must(a.ep->qp->query(), "query A").state == QpState::kErr);
  CHECK(must(b.ep->qp->query(), "query B").state == QpState::kErr);
  expect_no_event(*a.cm);
  expect_no_event(*b.cm);
}

TEST_CASE("CM reject: reason 28 and 148 bytes of private data reach the connector; no listener: reason 8",
          "[api][cm]") {
  CmSide a = cm_side(sock_a()), b = cm_side(sock_b());
  must(a.cm->listen(1, kService + 1), "listen");
  // A short CM response timeout: the rejecting side keeps its REJ for the
  // connector's retries (twice their span) before it forgets the id.
  CmConnParams quick;
  quick.cm_response_timeout = 12;
  const uint32_t bid = must(b.cm->connect(*b.ep->qp, path(*b.ep, *a.ep), kService + 1, quick), "connect");
  CmEvent req = expect_event(*a.cm, CmEventType::kRequest);
  const auto pd = pattern(cm_private::kRej, 77);
  must(a.cm->reject(req.id, cm_rej::kConsumerReject, pd), "reject");
  CmEvent rej = expect_event(*b.cm, CmEventType::kRejected);
  CHECK(rej.id == bid);
  CHECK(rej.reason == cm_rej::kConsumerReject);
  CHECK(rej.private_data == pd);
  CHECK(must(b.ep->qp->query(), "query B").state == QpState::kErr);

  // Nobody listens on this service: ibd A's CM rejects (IBA 12.6.7.2: 8, invalid service ID).
  CmSide c = cm_side(sock_b());
  const uint32_t cid = must(c.cm->connect(*c.ep->qp, path(*c.ep, *a.ep), kService + 2, {}), "connect");
  CmEvent none = expect_event(*c.cm, CmEventType::kRejected);
  CHECK(none.id == cid);
  CHECK(none.reason == cm_rej::kInvalidServiceId);
  expect_no_event(*a.cm);
}

TEST_CASE("CM manual_qp: both sides move their QPs with init_qp_attr, the connector sends the RTU "
          "by accept; data flows",
          "[api][cm]") {
  CmSide a = cm_side(sock_a()), b = cm_side(sock_b());
  must(a.cm->listen(1, kService + 3), "listen");
  CmConnParams manual;
  manual.manual_qp = true;
  // The active side: INIT by itself first (its attributes need no id).
  QpAttr init;
  init.state = QpState::kInit;
  init.port = 1;
  init.access = kAllAccess;
  must(b.ep->qp->modify(init, qp_attr::kState | qp_attr::kPort | qp_attr::kPkeyIndex | qp_attr::kAccessFlags),
       "B to INIT");
  const uint32_t bid = must(b.cm->connect(*b.ep->qp, path(*b.ep, *a.ep), kService + 3, manual), "connect");
  CmEvent req = expect_event(*a.cm, CmEventType::kRequest);

  // Passive: INIT, RTR, RTS with the id's attributes, then the REP.
  auto [ai, ai_mask] = must(a.cm->init_qp_attr(req.id, QpState::kInit), "init_qp_attr INIT");
  CHECK(ai.state == QpState::kInit);
  CHECK((ai_mask & (qp_attr::kState | qp_attr::kPort | qp_attr::kAccessFlags)) ==
        (qp_attr::kState | qp_attr::kPort | qp_attr::kAccessFlags));
  CHECK(ai.port == 1);
  must(a.ep->qp->modify(ai, ai_mask), "A to INIT");
  auto [ar, ar_mask] = must(a.cm->init_qp_attr(req.id, QpState::kRtr), "init_qp_attr RTR");
  const uint32_t rtr_needs = qp_attr::kState | qp_attr::kAv | qp_attr::kPathMtu | qp_attr::kDestQpn |
                             qp_attr::kRqPsn | qp_attr::kMaxDestRdAtomic | qp_attr::kMinRnrTimer;
  CHECK((ar_mask & rtr_needs) == rtr_needs);
  CHECK(ar.state == QpState::kRtr);
  CHECK(ar.dest_qpn == b.ep->qp->qp_num());
  CHECK(ar.rq_psn != req.starting_psn);  // (the REQ's is A's send PSN: docs/cm.md "PSNs")
  CHECK(ar.av.dlid == b.ep->lid);
  must(a.ep->qp->modify(ar, ar_mask), "A to RTR");
  auto [as, as_mask] = must(a.cm->init_qp_attr(req.id, QpState::kRts), "init_qp_attr RTS");
  const uint32_t rts_needs =
      qp_attr::kState | qp_attr::kSqPsn | qp_attr::kTimeout | qp_attr::kRetryCnt | qp_attr::kRnrRetry | qp_attr::kMaxQpRdAtomic;
  CHECK((as_mask & rts_needs) == rts_needs);
  CHECK(as.sq_psn == req.starting_psn);  // A sends with the PSN B receives from
  must(a.ep->qp->modify(as, as_mask), "A to RTS");
  must(a.cm->accept(req.id, *a.ep->qp, manual), "accept");

  // Active: the REP, then RTR and RTS by hand, then the RTU by accept().
  CmEvent rep = expect_event(*b.cm, CmEventType::kReply);
  CHECK(rep.remote_qpn == a.ep->qp->qp_num());
  CHECK(must(b.ep->qp->query(), "query B").state == QpState::kInit);  // ibd left it alone
  auto [br, br_mask] = must(b.cm->init_qp_attr(bid, QpState::kRtr), "init_qp_attr RTR (B)");
  CHECK((br_mask & rtr_needs) == rtr_needs);
  CHECK(br.dest_qpn == a.ep->qp->qp_num());
  CHECK(br.rq_psn == req.starting_psn);  // B's own, sent in its REQ (docs/cm.md "PSNs")
  CHECK(br.av.dlid == a.ep->lid);
  must(b.ep->qp->modify(br, br_mask), "B to RTR");
  auto [bs, bs_mask] = must(b.cm->init_qp_attr(bid, QpState::kRts), "init_qp_attr RTS (B)");
  CHECK((bs_mask & rts_needs) == rts_needs);
  CHECK(bs.sq_psn == ar.rq_psn);  // what the passive side expects
  CHECK(bs.sq_psn == rep.starting_psn);  // which its REP said
  must(b.ep->qp->modify(bs, bs_mask), "B to RTS");
  must(b.cm->accept(bid, *b.ep->qp, manual), "accept (the RTU)");
  CHECK(expect_event(*b.cm, CmEventType::kEstablished).id == bid);
  CHECK(expect_event(*a.cm, CmEventType::kEstablished).id == req.id);

  exchange(*b.ep, *a.ep, 2000, 90);
  // init_qp_attr for a state it does not cover.
  CHECK(error_of(b.cm->init_qp_attr(bid, QpState::kSqd)) == EINVAL);
}

TEST_CASE("CM SIDR: the listener answers with its UD QP and Q_Key; the querier gets them and the private data",
          "[api][cm]") {
  EpOptions ud;
  ud.type = QpType::kUd;
  CmSide a = cm_side(sock_a(), ud), b = cm_side(sock_b(), ud);
  const uint32_t lid = must(a.cm->listen(1, kService + 4, ~uint64_t{0}, /*sidr=*/true), "listen (SIDR)");
  const auto qpd = pattern(cm_private::kSidrReq, 5);
  const uint32_t bid = must(b.cm->sidr_query(path(*b.ep, *a.ep), kService + 4, qpd), "sidr_query");
  CmEvent q = expect_event(*a.cm, CmEventType::kSidrRequest);
  CHECK(q.listen_id == lid);
  CHECK(q.service_id == kService + 4);
  CHECK(q.private_data == qpd);
  const auto rpd = pattern(cm_private::kSidrRep, 6);
  must(a.cm->sidr_reply(q.id, 0, a.ep->qp.get(), kQkey, rpd), "sidr_reply");
  CmEvent r = expect_event(*b.cm, CmEventType::kSidrReply);
  CHECK(r.id == bid);
  CHECK(r.sidr_status == 0);
  CHECK(r.remote_qpn == a.ep->qp->qp_num());
  CHECK(r.qkey == kQkey);
  CHECK(r.private_data == rpd);
  // An RC QP does not answer SIDR (EINVAL); another status needs no QP.
  must(b.cm->sidr_query(path(*b.ep, *a.ep), kService + 4), "sidr_query");
  CmEvent q2 = expect_event(*a.cm, CmEventType::kSidrRequest);
  auto rc = another_qp(*a.ep, QpType::kRc);
  CHECK(error_of(a.cm->sidr_reply(q2.id, 0, rc.get(), kQkey)) == EINVAL);
  must(a.cm->sidr_reply(q2.id, 2, nullptr, 0), "sidr_reply (rejected)");
  CmEvent r2 = expect_event(*b.cm, CmEventType::kSidrReply);
  CHECK(r2.sidr_status == 2);
}

TEST_CASE("CM destroy of an established id, and a client that closes its Context: the peer gets a "
          "disconnect request; ibd keeps no id of the closed client",
          "[api][cm]") {
  {
    Connected c = connect_pair(kService + 5);
    must(c.b.cm->destroy(c.b_id), "destroy");
    CHECK(expect_event(*c.a.cm, CmEventType::kDisconnectRequest).id == c.a_id);
    expect_no_event(*c.b.cm);  // a destroyed id says nothing more
    CHECK(error_of(c.b.cm->disconnect(c.b_id)) == ENOENT);
  }
  Connected c = connect_pair(kService + 6);
  // `ibdctl cm` (a table) shows the connection and the listener on A, and the messages.
  RunResult t = run({env_path("OPENIB_IBDCTL"), "--socket", sock_a(), "cm"}, std::chrono::seconds(10));
  INFO(t.out << t.err);
  CHECK(t.exited_ok());
  CHECK(t.out.find("established  1") != std::string::npos);
  CHECK(t.out.find("listen       1") != std::string::npos);
  CHECK(t.out.find("REQ") != std::string::npos);
  const nlohmann::json before = cm_info(sock_b());
  // The connector's client goes (as if it died): its channel, QP and Context close.
  c.b.cm.reset();
  c.b.ep.reset();
  CHECK(expect_event(*c.a.cm, CmEventType::kDisconnectRequest).id == c.a_id);
  nlohmann::json after;
  CHECK(wait_until(
      [&] {
        after = cm_info(sock_b());
        return after["sessions"].get<int>() == before["sessions"].get<int>() - 1;
      },
      std::chrono::seconds(5)));
  INFO("before " << before.dump() << "\nafter " << after.dump());
  CHECK(after["ids"].get<int>() == before["ids"].get<int>() - 1);  // the closed client's one connection
  for (const auto& cl : after["clients"]) CHECK(cl["ids"].get<int>() == 0);
  // The survivor's id is gone once it destroys it.
  must(c.a.cm->destroy(c.a_id), "destroy (A)");
  // B's CM engine forgets the closed client's connection once its timewait is over.
  auto engine_ids = [](const nlohmann::json& j) {
    size_t n = 0;
    for (const auto& p : j["ports"])
      if (p.contains("engine"))
        for (const auto& v : p["engine"]["ids_by_state"]) n += v.get<size_t>();
    return n;
  };
  nlohmann::json last;
  CHECK(wait_until([&] { return engine_ids(last = cm_info(sock_b())) == 0; }, std::chrono::seconds(10)));
  INFO(last.dump());
  CHECK(last["sessions"].get<int>() == 0);
  // And A's, once the survivor closes too.
  c.a.cm.reset();
  c.a.ep.reset();
  const bool a_clear = wait_until([&] { return engine_ids(last = cm_info(sock_a())) == 0; }, std::chrono::seconds(10));
  INFO("A: " << last.dump());
  CHECK(a_clear);
  CHECK(last["sessions"].get<int>() == 0);
}

TEST_CASE("CM errors: an overlapping listener, private data too long, accept on a listener, an "
          "unknown id, a second channel, a UD QP or one in RTS given to connect",
          "[api][cm]") {
  CmSide a = cm_side(sock_a()), b = cm_side(sock_b());
  constexpr uint64_t kRange = 0x0000000200000000ull;  // and the 255 IDs above it
  const uint32_t lid = must(a.cm->listen(1, kRange, ~uint64_t{0xff}), "listen (a range)");
  CHECK(error_of(a.cm->listen(1, kRange | 0x42)) == EADDRINUSE);
  CHECK(error_of(a.cm->listen(1, kRange, ~uint64_t{0xfff})) == EADDRINUSE);
  CHECK(error_of(b.cm->listen(1, kRange | 0x42)) == 0);  // another ibd: its own service IDs

  CmConnParams big;
  big.private_data.resize(cm_private::kReq + 1);
  CHECK(error_of(b.cm->connect(*b.ep->qp, path(*b.ep, *a.ep), kService, big)) == EINVAL);
  CHECK(error_of(a.cm->reject(lid, cm_rej::kConsumerReject, pattern(cm_private::kRej + 1, 0))) == EINVAL);
  CHECK(error_of(a.cm->disconnect(lid, pattern(cm_private::kDreq + 1, 0))) == EINVAL);
  CHECK(error_of(a.cm->accept(lid, *a.ep->qp, {})) == EINVAL);
  CHECK(error_of(a.cm->accept(0x7777, *a.ep->qp, {})) == ENOENT);
  CHECK(error_of(a.cm->destroy(0x7777)) == ENOENT);
  CHECK(error_of(a.cm->init_qp_attr(0x7777, QpState::kRtr)) == ENOENT);
  CHECK(error_of(CmChannel::open(*a.ep->ctx)) == EBUSY);

  auto u = another_qp(*b.ep, QpType::kUd);
  CHECK(error_of(b.cm->connect(*u, path(*b.ep, *a.ep), kService + 0x100, {})) == EINVAL);
  auto rts = another_qp(*b.ep, QpType::kRc);
  must(to_rts(*rts, a.ep->qp->qp_num(), a.ep->lid, a.ep->gid), "to RTS");
  CHECK(error_of(b.cm->connect(*rts, path(*b.ep, *a.ep), kService + 0x100, {})) == EINVAL);
  // None of it reached A's listener.
  expect_no_event(*a.cm);
}
