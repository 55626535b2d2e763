// What a user sees when things go wrong, through libopenib (IBA 9.7.5.2,
// 10.8.3, 11.6.2, 11.6.3; docs/simhca.md §12.4, §12.8): error completions
// on both sides, flushes, and the affiliated async events. (A wrong rkey
// and missing atomic rights are in test_api_rc.cpp.)
#include "test_api.hpp"

using namespace openib;
using namespace openib::testing::api;

namespace {
auto is(AsyncEventType t) {
  return [t](const AsyncEvent& e) { return e.type == t; };
}
}  // namespace

TEST_CASE("RC SEND into a receive buffer too small: LOC_LEN_ERR at the receiver, REM_INV_REQ_ERR at "
          "the sender, a QP request error event, both QPs in ERR",
          "[api]") {
  Link l = link();
  fill(l.a->buf(), 200, 1);
  REQUIRE(post_recv(*l.b->qp, l.b->sge(0, 100), 1) == 0);
  REQUIRE(post_recv(*l.b->qp, l.b->sge(1024, 1024), 2) == 0);
  REQUIRE(post_send(*l.a->qp, l.a->sge(0, 200), 3) == 0);
  Wc s = wait_wc(*l.a->cq);
  CHECK(s.wr_id == 3);
  CHECK(s.status == kWcRemInvReqErr);
  Wc r = wait_wc(*l.b->cq);
  CHECK(r.wr_id == 1);
  CHECK(r.status == kWcLocLenErr);
  Wc f = wait_wc(*l.b->cq);  // the other receive: flushed (IBA 10.8.3)
  CHECK(f.wr_id == 2);
  CHECK(f.status == kWcWrFlushErr);
  CHECK(f.opcode == kWcRecv);
  auto evs = wait_async(*l.b->ctx, is(AsyncEventType::kQpReqErr), kWaitMs);
  REQUIRE(count_events(evs, AsyncEventType::kQpReqErr) == 1);
  CHECK(evs.back().qp == l.b->qp.get());
  CHECK(must(l.a->qp->query(), "query A").state == QpState::kErr);
  CHECK(must(l.b->qp->query(), "query B").state == QpState::kErr);
}

TEST_CASE("RC SEND with no receive posted and rnr_retry 1: RNR_RETRY_EXC_ERR, nothing delivered",
          "[api]") {
  PathOptions p;
  p.rnr_retry = 1;
  Link l = link({}, {}, p);
  REQUIRE(post_send(*l.a->qp, l.a->sge(0, 64), 1) == 0);
  Wc s = wait_wc(*l.a->cq);
  CHECK(s.wr_id == 1);
  CHECK(s.status == kWcRnrRetryExcErr);
  CHECK(std::string(wc_status_str(s.status)) == "RNR retry counter exceeded");
  expect_no_wc(*l.b->cq);
  // The receiver is untouched: still RTS, and a receive posted now stays unused.
  CHECK(must(l.b->qp->query(), "query B").state == QpState::kRts);
}

TEST_CASE("a send whose lkey is wrong: LOC_PROT_ERR at the sender, nothing sent", "[api]") {
  Link l = link();
  REQUIRE(post_recv(*l.b->qp, l.b->sge(0, 256), 1) == 0);
  Sge bad = l.a->sge(0, 64);
  bad.lkey ^= 0x100;
  REQUIRE(post_send(*l.a->qp, bad, 2) == 0);  // checked by the device, not at post
  Wc s = wait_wc(*l.a->cq);
  CHECK(s.wr_id == 2);
  CHECK(s.status == kWcLocProtErr);
  // Out of bounds of a valid key: the same.
  Link l2 = link();
  Sge oob{l2.a->va(0) + 60 * 1024, 8 * 1024, l2.a->mr->lkey()};  // past the 64 KiB MR
  REQUIRE(post_send(*l2.a->qp, oob, 3) == 0);
  CHECK(wait_wc(*l2.a->cq).status == kWcLocProtErr);
  expect_no_wc(*l.b->cq);
  expect_no_wc(*l2.b->cq);
}

TEST_CASE("communication established: a QP in RTR that receives gets the COMM_EST event", "[api]") {
  auto a = open_ep(sock_a());
  auto b = open_ep(sock_b());
  // B only to RTR: take its to_rts apart.
  QpAttr i;
  i.state = QpState::kInit;
  i.port = 1;
  i.access = kAllAccess;
  must(b->qp->modify(i, qp_attr::kState | qp_attr::kPort | qp_attr::kPkeyIndex | qp_attr::kAccessFlags),
       "B to INIT");
  QpAttr r;
  r.state = QpState::kRtr;
  r.path_mtu = Mtu::k1024;
  r.dest_qpn = a->qp->qp_num();
  r.av.dlid = a->lid;
  r.max_dest_rd_atomic = 1;
  r.min_rnr_timer = 12;
  must(b->qp->modify(r, qp_attr::kState | qp_attr::kPathMtu | qp_attr::kDestQpn | qp_attr::kRqPsn |
                            qp_attr::kAv | qp_attr::kMaxDestRdAtomic | qp_attr::kMinRnrTimer),
       "B to RTR");
  must(to_rts(*a->qp, b->qp->qp_num(), b->lid, b->gid), "A to RTS");

  fill(a->buf(), 64, 8);
  REQUIRE(post_recv(*b->qp, b->sge(0, 64), 1) == 0);
  REQUIRE(post_send(*a->qp, a->sge(0, 64), 2) == 0);
  CHECK(wait_wc(*a->cq).status == kWcSuccess);
  Wc w = wait_wc(*b->cq);
  CHECK(w.status == kWcSuccess);
  CHECK(first_diff(b->buf(), 64, 8) == 64);
  auto evs = wait_async(*b->ctx, is(AsyncEventType::kCommEst), kWaitMs);
  REQUIRE(count_events(evs, AsyncEventType::kCommEst) == 1);
  CHECK(evs.back().qp == b->qp.get());
  CHECK(must(b->qp->query(), "query B").state == QpState::kRtr);
}
