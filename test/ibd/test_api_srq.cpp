// Shared receive queues through libopenib (IBA 10.2.9, 11.2.3; docs/simhca.md
// §6.9): create_srq, Srq::post_recv, QPs that receive from it, arm_limit and
// the SRQ limit event.
#include "test_api.hpp"

using namespace openib;
using namespace openib::testing::api;

TEST_CASE("SRQ: two RC QPs receive from one SRQ, in the order its WQEs were posted", "[api]") {
  // B: one SRQ, two QPs on it, each connected to a QP of its own context on A.
  EpOptions ob;
  ob.srq = true;
  ob.srq_wr = 8;
  auto b = open_ep(sock_b(), ob);
  CHECK(b->qp->cap().max_recv_wr == 0);
  QpInit init;
  init.send_cq = init.recv_cq = b->cq.get();
  init.srq = b->srq.get();
  auto qp2 = must(b->ctx->create_qp(*b->pd, init), "second QP on the SRQ");
  auto a1 = open_ep(sock_a());
  auto a2 = open_ep(sock_a());
  connect(*a1, *b);
  must(to_rts(*a2->qp, qp2->qp_num(), b->lid, b->gid), "A2 to RTS");
  must(to_rts(*qp2, a2->qp->qp_num(), a1->lid, a1->gid), "B2 to RTS");

  // The QPs have no receive queue of their own.
  CHECK(post_recv(*b->qp, b->sge(0, 64), 99) == EINVAL);

  for (uint64_t i = 0; i < 4; ++i) REQUIRE(post_recv(*b->srq, b->sge(i * 1024, 1024), 100 + i) == 0);
  fill(a1->buf(), 300, 1);
  fill(a2->buf(), 400, 2);
  fill(a1->buf() + 1000, 500, 3);
  REQUIRE(post_send(*a1->qp, a1->sge(0, 300), 1) == 0);
  CHECK(wait_wc(*a1->cq).status == kWcSuccess);
  REQUIRE(post_send(*a2->qp, a2->sge(0, 400), 2) == 0);
  CHECK(wait_wc(*a2->cq).status == kWcSuccess);
  REQUIRE(post_send(*a1->qp, a1->sge(1000, 500), 3) == 0);
  CHECK(wait_wc(*a1->cq).status == kWcSuccess);

  Wc r[3] = {wait_wc(*b->cq), wait_wc(*b->cq), wait_wc(*b->cq)};
  CHECK(r[0].wr_id == 100);
  CHECK(r[0].qp_num == b->qp->qp_num());
  CHECK(r[0].byte_len == 300);
  CHECK(first_diff(b->buf(), 300, 1) == 300);
  CHECK(r[1].wr_id == 101);
  CHECK(r[1].qp_num == qp2->qp_num());
  CHECK(r[1].byte_len == 400);
  CHECK(first_diff(b->buf() + 1024, 400, 2) == 400);
  CHECK(r[2].wr_id == 102);
  CHECK(r[2].qp_num == b->qp->qp_num());
  CHECK(r[2].byte_len == 500);
  CHECK(first_diff(b->buf() + 2048, 500, 3) == 500);
  for (auto& w : r) CHECK(w.opcode == kWcRecv);

  // Completions polled free SRQ slots: 8 more posts fit after 3 of 4 were used.
  for (uint64_t i = 0; i < 7; ++i) REQUIRE(post_recv(*b->srq, b->sge(4096, 64), 200 + i) == 0);
  CHECK(post_recv(*b->srq, b->sge(4096, 64), 300) == ENOMEM);

  qp2.reset();
}

TEST_CASE("SRQ limit: the event fires once when fewer than `limit` WQEs remain, then the SRQ is disarmed",
          "[api]") {
  EpOptions ob;
  ob.srq = true;
  ob.srq_wr = 16;
  Link l = link({}, ob);
  Srq& srq = *l.b->srq;
  Context& bctx = *l.b->ctx;

  // A limit of the SRQ's size or more is refused.
  CHECK_FALSE(srq.arm_limit(16).ok());

  for (uint64_t i = 0; i < 8; ++i) REQUIRE(post_recv(srq, l.b->sge(i * 256, 256), i) == 0);
  must(srq.arm_limit(4), "arm_limit(4)");
  auto is_limit = [](const AsyncEvent& e) { return e.type == AsyncEventType::kSrqLimitReached; };

  auto send = [&](uint64_t i) {
    REQUIRE(post_send(*l.a->qp, l.a->sge(0, 32), 100 + i) == 0);
    CHECK(wait_wc(*l.a->cq).status == kWcSuccess);
    Wc r = wait_wc(*l.b->cq);
    CHECK(r.wr_id == i);
  };
  // 8 posted; after 4 messages 4 remain: not below the limit.
  for (uint64_t i = 0; i < 4; ++i) send(i);
  CHECK(count_events(wait_async(bctx, is_limit, kQuietMs), AsyncEventType::kSrqLimitReached) == 0);
  // The 5th leaves 3: the event, naming this SRQ.
  send(4);
  auto evs = wait_async(bctx, is_limit, kWaitMs);
  REQUIRE(count_events(evs, AsyncEventType::kSrqLimitReached) == 1);
  CHECK(evs.back().srq == &srq);
  CHECK(evs.back().qp == nullptr);
  // Disarmed: 2 remain, then 1, and no second event.
  send(5);
  send(6);
  CHECK(count_events(wait_async(bctx, is_limit, kQuietMs), AsyncEventType::kSrqLimitReached) == 0);

  // Armed again with 3 posted: fires when a WQE taken leaves 1.
  for (uint64_t i = 8; i < 10; ++i) REQUIRE(post_recv(srq, l.b->sge(i * 256, 256), i) == 0);
  must(srq.arm_limit(2), "arm_limit(2)");
  send(7);  // 3 posted before it, 2 after: not below 2
  CHECK(count_events(wait_async(bctx, is_limit, kQuietMs), AsyncEventType::kSrqLimitReached) == 0);
  send(8);  // 1 left
  evs = wait_async(bctx, is_limit, kWaitMs);
  CHECK(count_events(evs, AsyncEventType::kSrqLimitReached) == 1);
}

TEST_CASE("a QP on an SRQ that an error puts in ERR raises LAST_WQE_REACHED; the SRQ's other WQEs stay",
          "[api]") {
  EpOptions ob;
  ob.srq = true;
  Link l = link({}, ob);
  REQUIRE(post_recv(*l.b->srq, l.b->sge(0, 64), 1) == 0);     // too small for the message
  REQUIRE(post_recv(*l.b->srq, l.b->sge(1024, 1024), 2) == 0);
  fill(l.a->buf(), 200, 4);
  REQUIRE(post_send(*l.a->qp, l.a->sge(0, 200), 3) == 0);
  CHECK(wait_wc(*l.a->cq).status == kWcRemInvReqErr);
  Wc r = wait_wc(*l.b->cq);
  CHECK(r.wr_id == 1);
  CHECK(r.status == kWcLocLenErr);
  auto evs = wait_async(*l.b->ctx, [](const AsyncEvent& ev) { return ev.type == AsyncEventType::kQpLastWqeReached; },
                        kWaitMs);
  REQUIRE(count_events(evs, AsyncEventType::kQpLastWqeReached) == 1);
  CHECK(evs.back().qp == l.b->qp.get());
  CHECK(must(l.b->qp->query(), "query").state == QpState::kErr);
  // The SRQ's second WQE is not the QP's: no flush completion; a new QP on
  // the SRQ receives into it.
  expect_no_wc(*l.b->cq);
  QpInit init;
  init.send_cq = init.recv_cq = l.b->cq.get();
  init.srq = l.b->srq.get();
  auto qp2 = must(l.b->ctx->create_qp(*l.b->pd, init), "second QP on the SRQ");
  auto a2 = open_ep(sock_a());
  must(to_rts(*a2->qp, qp2->qp_num(), l.b->lid, l.b->gid), "A2 to RTS");
  must(to_rts(*qp2, a2->qp->qp_num(), a2->lid, a2->gid), "B2 to RTS");
  fill(a2->buf(), 300, 5);
  REQUIRE(post_send(*a2->qp, a2->sge(0, 300), 4) == 0);
  CHECK(wait_wc(*a2->cq).status == kWcSuccess);
  Wc r2 = wait_wc(*l.b->cq);
  CHECK(r2.wr_id == 2);
  CHECK(r2.qp_num == qp2->qp_num());
  CHECK(first_diff(l.b->buf() + 1024, 300, 5) == 300);
  qp2.reset();
}

TEST_CASE("a QP on an SRQ modified to ERR raises LAST_WQE_REACHED", "[api]") {
  EpOptions ob;
  ob.srq = true;
  Link l = link({}, ob);
  REQUIRE(post_recv(*l.b->srq, l.b->sge(0, 64), 1) == 0);
  QpAttr e;
  e.state = QpState::kErr;
  must(l.b->qp->modify(e, qp_attr::kState), "to ERR");
  auto evs = wait_async(*l.b->ctx, [](const AsyncEvent& ev) { return ev.type == AsyncEventType::kQpLastWqeReached; },
                        kWaitMs);
  REQUIRE(count_events(evs, AsyncEventType::kQpLastWqeReached) == 1);
  CHECK(evs.back().qp == l.b->qp.get());
  // The SRQ's WQE is not the QP's: it stays, no flush completion for it.
  expect_no_wc(*l.b->cq);
}
