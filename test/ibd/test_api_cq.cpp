// Completion queues with completion channels through libopenib: arming
// (Cq::req_notify, docs/simhca.md §7.3), the channel's fd and get_event
// (with its ack), solicited-only arms, unsignaled sends and sq_sig_all;
// and polling that yields the CPU (docs/library.md "Polling").
#include "test_api.hpp"

using namespace openib;
using namespace openib::testing::api;

namespace {

// B's CQ has a channel; A sends message `i` (64 bytes of fill(i)) to B,
// which has a receive posted for it. `flags` go on the send.
void send_one(Link& l, uint8_t i, uint32_t flags = kSendSignaled) {
  REQUIRE(post_recv(*l.b->qp, l.b->sge(size_t{i} * 64, 64), 100 + i) == 0);
  fill(l.a->buf() + size_t{i} * 64, 64, i);
  REQUIRE(post_send(*l.a->qp, l.a->sge(size_t{i} * 64, 64), i, {.flags = flags}) == 0);
  Wc s = wait_wc(*l.a->cq);
  CHECK(s.status == kWcSuccess);
  CHECK(s.wr_id == i);
}

// The receive completion of message `i` on B, with its bytes checked.
Wc recv_one(Link& l, uint8_t i) {
  Wc wc = wait_wc(*l.b->cq);
  CHECK(wc.status == kWcSuccess);
  CHECK(wc.wr_id == 100u + i);
  CHECK(wc.opcode == kWcRecv);
  CHECK(wc.byte_len == 64);
  CHECK(first_diff(l.b->buf() + size_t{i} * 64, 64, i) == 64);
  return wc;
}

EpOptions with_channel() {
  EpOptions o;
  o.channel = true;
  return o;
}

}  // namespace

TEST_CASE("completion channel: an armed CQ's completion makes the fd readable and get_event returns "
          "the CQ once per arm",
          "[api]") {
  Link l = link({}, with_channel());
  Cq* cq = l.b->cq.get();
  CompChannel& ch = *l.b->ch;

  // Not armed: a completion raises no event.
  send_one(l, 0);
  recv_one(l, 0);
  CHECK_FALSE(readable(ch.fd(), kQuietMs));

  // Armed: the next completion wakes the channel (poll(2) on fd(), then get_event).
  must(cq->req_notify(), "req_notify");
  send_one(l, 1);
  REQUIRE(readable(ch.fd(), kWaitMs));
  CHECK(must(ch.get_event(kWaitMs), "get_event") == cq);
  recv_one(l, 1);

  // get_event acked the event and the arm is used up: another completion
  // arrives on the CQ but the channel stays quiet.
  send_one(l, 2);
  recv_one(l, 2);
  CHECK_FALSE(readable(ch.fd(), kQuietMs));
  auto none = ch.get_event(0);
  REQUIRE_FALSE(none.ok());
  CHECK(none.error().code == ETIMEDOUT);

  // A completion that came before the arm and is not yet polled signals at
  // once (§7.3: no lost wake-up between the last poll and the arm).
  // send_one returns after A's completion, i.e. after B's ACK, which B's
  // device sends once it has written the receive CQE: the CQE is there,
  // unpolled, when the CQ is armed.
  send_one(l, 3);
  must(cq->req_notify(), "req_notify with a CQE pending");
  CHECK(must(ch.get_event(kWaitMs), "get_event (pending CQE)") == cq);
  recv_one(l, 3);
}

TEST_CASE("req_notify on a CQ made without a channel is EINVAL", "[api]") {
  auto a = open_ep(sock_a());
  auto r = a->cq->req_notify();
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == EINVAL);
}

TEST_CASE("solicited-only arm: an unsolicited SEND does not wake the channel, a solicited one does",
          "[api]") {
  Link l = link({}, with_channel());
  Cq* cq = l.b->cq.get();
  CompChannel& ch = *l.b->ch;

  must(cq->req_notify(true), "req_notify(solicited)");
  send_one(l, 0);  // no kSendSolicited
  Wc w0 = recv_one(l, 0);
  CHECK_FALSE(w0.solicited);
  CHECK_FALSE(readable(ch.fd(), kQuietMs));

  send_one(l, 1, kSendSignaled | kSendSolicited);
  REQUIRE(readable(ch.fd(), kWaitMs));
  CHECK(must(ch.get_event(0), "get_event") == cq);
  Wc w1 = recv_one(l, 1);
  CHECK(w1.solicited);

  // The same with immediate data: SEND_WITH_IMM solicited sets the flag too.
  must(cq->req_notify(true), "req_notify(solicited) again");
  REQUIRE(post_recv(*l.b->qp, l.b->sge(2 * 64, 64), 102) == 0);
  fill(l.a->buf() + 2 * 64, 64, 2);
  REQUIRE(post_send(*l.a->qp, l.a->sge(2 * 64, 64), 2,
                    {.op = WrOpcode::kSendImm, .flags = kSendSignaled | kSendSolicited, .imm = 77}) == 0);
  CHECK(wait_wc(*l.a->cq).status == kWcSuccess);
  CHECK(must(ch.get_event(kWaitMs), "get_event (imm)") == cq);
  Wc w2 = recv_one(l, 2);
  CHECK(w2.solicited);
  CHECK(w2.has_imm);
  CHECK(w2.imm == 77);
}

TEST_CASE("two CQs on one channel: get_event names the CQ that completed", "[api]") {
  // One CQ armed at a time (both armed at once: the next case).
  auto a = open_ep(sock_a());
  // B: its own send CQ and receive CQ, both on one channel.
  auto b = std::make_unique<Ep>();
  ContextOptions co;
  co.socket = sock_b();
  b->ctx = must(Context::open(co), "open");
  b->lid = must(b->ctx->query_port(1), "query_port").lid;
  b->pd = must(b->ctx->alloc_pd(), "alloc_pd");
  b->mr = must(b->ctx->alloc_mr(*b->pd, 4096, kAllAccess), "alloc_mr");
  b->ch = must(b->ctx->create_comp_channel(), "channel");
  b->cq = must(b->ctx->create_cq(16, b->ch.get()), "recv CQ");
  b->send_cq = must(b->ctx->create_cq(16, b->ch.get()), "send CQ");
  Cq* send_cq = b->send_cq.get();
  QpInit init;
  init.send_cq = send_cq;
  init.recv_cq = b->cq.get();
  b->qp = must(b->ctx->create_qp(*b->pd, init), "create_qp");
  connect(*a, *b);

  // A -> B: B's receive CQ.
  must(b->cq->req_notify(), "arm recv CQ");
  REQUIRE(post_recv(*b->qp, b->sge(0, 64), 1) == 0);
  REQUIRE(post_send(*a->qp, a->sge(0, 64), 2) == 0);
  CHECK(must(b->ch->get_event(kWaitMs), "event for the receive") == b->cq.get());
  CHECK(wait_wc(*b->cq).opcode == kWcRecv);
  CHECK(wait_wc(*a->cq).status == kWcSuccess);
  expect_no_wc(*send_cq);
  // B -> A: B's send CQ.
  must(send_cq->req_notify(), "arm send CQ");
  REQUIRE(post_recv(*a->qp, a->sge(64, 64), 3) == 0);
  REQUIRE(post_send(*b->qp, b->sge(64, 64), 4) == 0);
  CHECK(must(b->ch->get_event(kWaitMs), "event for the send") == send_cq);
  Wc s = wait_wc(*send_cq);
  CHECK(s.opcode == kWcSend);
  CHECK(s.wr_id == 4);
  CHECK(wait_wc(*a->cq).wr_id == 3);
  expect_no_wc(*b->cq);
  CHECK_FALSE(readable(b->ch->fd(), 0));
}

TEST_CASE("two CQs on one channel, both armed at once: each completion raises its CQ's event",
          "[api]") {
  auto a = open_ep(sock_a());
  auto b = std::make_unique<Ep>();
  ContextOptions co;
  co.socket = sock_b();
  b->ctx = must(Context::open(co), "open");
  b->lid = must(b->ctx->query_port(1), "query_port").lid;
  b->pd = must(b->ctx->alloc_pd(), "alloc_pd");
  b->mr = must(b->ctx->alloc_mr(*b->pd, 4096, kAllAccess), "alloc_mr");
  b->ch = must(b->ctx->create_comp_channel(), "channel");
  b->cq = must(b->ctx->create_cq(16, b->ch.get()), "recv CQ");
  b->send_cq = must(b->ctx->create_cq(16, b->ch.get()), "send CQ");
  Cq* send_cq = b->send_cq.get();
  QpInit init;
  init.send_cq = send_cq;
  init.recv_cq = b->cq.get();
  b->qp = must(b->ctx->create_qp(*b->pd, init), "create_qp");
  connect(*a, *b);

  // Both armed, one store right after the other (the usual libibverbs
  // pattern with separate send and receive CQs on one channel): the page's
  // one CQ_ARM word then shows only the second arm; the first is taken from
  // its CQ's doorbell record (docs/simhca.md §12.5.1).
  must(b->cq->req_notify(), "arm recv CQ");
  must(send_cq->req_notify(), "arm send CQ");
  // A -> B: B's receive CQ.
  REQUIRE(post_recv(*b->qp, b->sge(0, 64), 1) == 0);
  REQUIRE(post_send(*a->qp, a->sge(0, 64), 2) == 0);
  CHECK(must(b->ch->get_event(kWaitMs), "event for the receive") == b->cq.get());
  CHECK(wait_wc(*b->cq).opcode == kWcRecv);
  CHECK(wait_wc(*a->cq).status == kWcSuccess);
  // B -> A: B's send CQ, armed since before the receive.
  REQUIRE(post_recv(*a->qp, a->sge(64, 64), 3) == 0);
  REQUIRE(post_send(*b->qp, b->sge(64, 64), 4) == 0);
  CHECK(must(b->ch->get_event(kWaitMs), "event for the send") == send_cq);
  Wc s = wait_wc(*send_cq);
  CHECK(s.opcode == kWcSend);
  CHECK(s.wr_id == 4);
  CHECK(wait_wc(*a->cq).wr_id == 3);
  // One event per arm, no more.
  expect_no_wc(*b->cq);
  CHECK_FALSE(readable(b->ch->fd(), 0));
}

TEST_CASE("unsignaled sends complete nothing until a signaled one; sq_sig_all signals every send",
          "[api]") {
  SECTION("unsignaled, then signaled") {
    Link l = link();
    for (uint8_t i = 0; i < 3; ++i) {
      REQUIRE(post_recv(*l.b->qp, l.b->sge(size_t{i} * 64, 64), 100 + i) == 0);
      fill(l.a->buf() + size_t{i} * 64, 64, uint8_t(i + 40));
    }
    REQUIRE(post_send(*l.a->qp, l.a->sge(0, 64), 0, {.flags = 0}) == 0);
    REQUIRE(post_send(*l.a->qp, l.a->sge(64, 64), 1, {.flags = 0}) == 0);
    // Both arrive, neither completes on A.
    for (uint8_t i = 0; i < 2; ++i) {
      Wc r = wait_wc(*l.b->cq);
      CHECK(r.wr_id == 100u + i);
      CHECK(first_diff(l.b->buf() + size_t{i} * 64, 64, uint8_t(i + 40)) == 64);
    }
    expect_no_wc(*l.a->cq);
    REQUIRE(post_send(*l.a->qp, l.a->sge(128, 64), 2) == 0);
    Wc s = wait_wc(*l.a->cq);
    CHECK(s.wr_id == 2);
    CHECK(wait_wc(*l.b->cq).wr_id == 102);
    expect_no_wc(*l.a->cq);
  }
  SECTION("sq_sig_all") {
    EpOptions o;
    o.sig_all = true;
    Link l = link(o);
    REQUIRE(post_recv(*l.b->qp, l.b->sge(0, 64), 100) == 0);
    REQUIRE(post_send(*l.a->qp, l.a->sge(0, 64), 7, {.flags = 0}) == 0);
    Wc s = wait_wc(*l.a->cq);
    CHECK(s.wr_id == 7);
    CHECK(s.status == kWcSuccess);
    CHECK(wait_wc(*l.b->cq).wr_id == 100);
  }
}

TEST_CASE("Cq::size rounds up to a power of two; one poll returns several completions in order", "[api]") {
  EpOptions ob;
  ob.cqe = 100;
  Link l = link({}, ob);
  CHECK(l.b->cq->size() == 128);
  CHECK(l.a->cq->size() == 64);
  for (uint8_t i = 0; i < 5; ++i) {
    REQUIRE(post_recv(*l.b->qp, l.b->sge(size_t{i} * 64, 64), 100 + i) == 0);
    fill(l.a->buf() + size_t{i} * 64, 64, i);
    REQUIRE(post_send(*l.a->qp, l.a->sge(size_t{i} * 64, 64), i) == 0);
  }
  for (uint8_t i = 0; i < 5; ++i) CHECK(wait_wc(*l.a->cq).wr_id == i);
  // A's completions follow B's ACKs, which follow B's receive CQEs: all five are there.
  Wc wc[8];
  REQUIRE(l.b->cq->poll(wc) == 5);
  for (uint8_t i = 0; i < 5; ++i) {
    CHECK(wc[i].wr_id == 100u + i);
    CHECK(wc[i].byte_len == 64);
    CHECK(first_diff(l.b->buf() + size_t{i} * 64, 64, i) == 64);
  }
  CHECK(l.b->cq->poll(wc) == 0);
}

TEST_CASE("polling that yields the CPU loses no completion; a malformed OPENIB_POLL_YIELD is not fatal",
          "[api]") {
  // A: the variable is not a count (a warning, the default); B: a yield
  // after every empty poll.
  ::setenv("OPENIB_POLL_YIELD", "often", 1);
  auto a = open_ep(sock_a());
  ::unsetenv("OPENIB_POLL_YIELD");
  auto b = open_ep(sock_b(), {.poll_yield = 1});
  connect(*a, *b);
  constexpr uint8_t kN = 16;
  for (uint8_t i = 0; i < kN; ++i) REQUIRE(post_recv(*b->qp, b->sge(size_t{i} * 64, 64), 100 + i) == 0);
  for (uint8_t i = 0; i < kN; ++i) {
    fill(a->buf() + size_t{i} * 64, 64, i);
    REQUIRE(post_send(*a->qp, a->sge(size_t{i} * 64, 64), i, {.flags = kSendSignaled}) == 0);
  }
  for (uint8_t i = 0; i < kN; ++i) {
    Wc r = wait_wc(*b->cq);
    CHECK(r.status == kWcSuccess);
    CHECK(r.wr_id == 100u + i);
    CHECK(first_diff(b->buf() + size_t{i} * 64, 64, i) == 64);
    CHECK(wait_wc(*a->cq).wr_id == i);
  }
  expect_no_wc(*b->cq);
}
