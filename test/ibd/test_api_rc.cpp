// RC operations through libopenib between two ibds (IBA 9.7, docs/simhca.md
// §12.1, §12.4, §12.8): SEND and RDMA WRITE with immediate, RDMA READ, both
// atomics, fenced sends, inline and gathered sends, and the errors of a bad
// rkey or a region without atomic rights.
#include "test_api.hpp"

using namespace openib;
using namespace openib::testing::api;

TEST_CASE("RC SEND with immediate: payload, immediate and the completion fields arrive", "[api]") {
  Link l = link();
  constexpr uint32_t kLen = 3000;  // three packets at the 1024-byte path MTU
  REQUIRE(post_recv(*l.b->qp, l.b->sge(0, 4096), 11) == 0);
  fill(l.a->buf(), kLen, 5);
  REQUIRE(post_send(*l.a->qp, l.a->sge(0, kLen), 12, {.op = WrOpcode::kSendImm, .imm = 0xdeadbeef}) == 0);

  Wc s = wait_wc(*l.a->cq);
  CHECK(s.status == kWcSuccess);
  CHECK(s.wr_id == 12);
  CHECK(s.opcode == kWcSend);
  CHECK(s.qp_num == l.a->qp->qp_num());
  CHECK(s.byte_len == kLen);  // docs/simhca.md §12.4: a send CQE's byte_len is the message length

  Wc r = wait_wc(*l.b->cq);
  CHECK(r.status == kWcSuccess);
  CHECK(r.wr_id == 11);
  CHECK(r.opcode == kWcRecv);
  CHECK(r.byte_len == kLen);
  CHECK(r.has_imm);
  CHECK(r.imm == 0xdeadbeef);
  CHECK_FALSE(r.grh);
  CHECK_FALSE(r.solicited);
  CHECK(r.qp_num == l.b->qp->qp_num());
  CHECK(r.slid == l.a->lid);
  CHECK(first_diff(l.b->buf(), kLen, 5) == kLen);
  CHECK(l.b->buf()[kLen] == 0);  // nothing past the message

  // A plain SEND right after: no immediate flag.
  REQUIRE(post_recv(*l.b->qp, l.b->sge(0, 4096), 13) == 0);
  REQUIRE(post_send(*l.a->qp, l.a->sge(0, 100), 14) == 0);
  CHECK(wait_wc(*l.a->cq).status == kWcSuccess);
  Wc r2 = wait_wc(*l.b->cq);
  CHECK(r2.byte_len == 100);
  CHECK_FALSE(r2.has_imm);
}

TEST_CASE("RC RDMA WRITE with immediate: data at remote_addr, a RECV_RDMA_WITH_IMM completion "
          "consuming a receive WQE whose buffer stays untouched",
          "[api]") {
  Link l = link();
  constexpr uint32_t kLen = 2500;
  constexpr size_t kTarget = 8192, kRecvBuf = 32768;
  std::memset(l.b->buf() + kRecvBuf, 0xee, 256);
  REQUIRE(post_recv(*l.b->qp, l.b->sge(kRecvBuf, 256), 21) == 0);
  fill(l.a->buf(), kLen, 9);
  REQUIRE(post_send(*l.a->qp, l.a->sge(0, kLen), 22,
                    {.op = WrOpcode::kWriteImm, .imm = 0x01020304, .remote_addr = l.b->va(kTarget),
                     .rkey = l.b->mr->rkey()}) == 0);
  Wc s = wait_wc(*l.a->cq);
  CHECK(s.status == kWcSuccess);
  CHECK(s.opcode == kWcRdmaWrite);
  CHECK(s.wr_id == 22);

  Wc r = wait_wc(*l.b->cq);
  CHECK(r.status == kWcSuccess);
  CHECK(r.opcode == kWcRecvRdmaWithImm);
  CHECK(r.wr_id == 21);
  CHECK(r.byte_len == kLen);
  CHECK(r.has_imm);
  CHECK(r.imm == 0x01020304);
  CHECK(first_diff(l.b->buf() + kTarget, kLen, 9) == kLen);
  CHECK(l.b->buf()[kTarget - 1] == 0);
  CHECK(l.b->buf()[kTarget + kLen] == 0);
  CHECK(all_bytes(l.b->buf() + kRecvBuf, 256, 0xee));

  // A plain WRITE consumes no receive WQE and completes nothing on B.
  fill(l.a->buf(), 64, 33);
  REQUIRE(post_send(*l.a->qp, l.a->sge(0, 64), 23,
                    {.op = WrOpcode::kWrite, .remote_addr = l.b->va(0), .rkey = l.b->mr->rkey()}) == 0);
  CHECK(wait_wc(*l.a->cq).status == kWcSuccess);
  CHECK(first_diff(l.b->buf(), 64, 33) == 64);
  expect_no_wc(*l.b->cq);
}

TEST_CASE("RC RDMA READ: the remote bytes land in the local buffer", "[api]") {
  Link l = link();
  constexpr uint32_t kLen = 5000;
  fill(l.b->buf() + 4096, kLen, 17);
  REQUIRE(post_send(*l.a->qp, l.a->sge(16384, kLen), 31,
                    {.op = WrOpcode::kRead, .remote_addr = l.b->va(4096), .rkey = l.b->mr->rkey()}) == 0);
  Wc s = wait_wc(*l.a->cq);
  CHECK(s.status == kWcSuccess);
  CHECK(s.opcode == kWcRdmaRead);
  CHECK(s.byte_len == kLen);
  CHECK(first_diff(l.a->buf() + 16384, kLen, 17) == kLen);
  expect_no_wc(*l.b->cq);
}

TEST_CASE("RC atomic fetch-and-add: the old value comes back, the target is incremented", "[api]") {
  Link l = link();
  uint64_t* target = reinterpret_cast<uint64_t*>(l.b->buf() + 256);
  uint64_t* result = reinterpret_cast<uint64_t*>(l.a->buf() + 512);
  *target = 0x1000000000000005ull;
  *result = 0;
  REQUIRE(post_send(*l.a->qp, l.a->sge(512, 8), 41,
                    {.op = WrOpcode::kFetchAdd, .remote_addr = l.b->va(256), .rkey = l.b->mr->rkey(),
                     .compare_add = 10}) == 0);
  Wc s = wait_wc(*l.a->cq);
  CHECK(s.status == kWcSuccess);
  CHECK(s.opcode == kWcFetchAdd);
  CHECK(s.byte_len == 8);
  CHECK(*result == 0x1000000000000005ull);
  CHECK(*target == 0x100000000000000full);

  // Again, with an addend that carries across the 32-bit halves.
  REQUIRE(post_send(*l.a->qp, l.a->sge(512, 8), 42,
                    {.op = WrOpcode::kFetchAdd, .remote_addr = l.b->va(256), .rkey = l.b->mr->rkey(),
                     .compare_add = 0xfffffff1ull}) == 0);
  CHECK(wait_wc(*l.a->cq).status == kWcSuccess);
  CHECK(*result == 0x100000000000000full);
  CHECK(*target == 0x1000000100000000ull);
  expect_no_wc(*l.b->cq);
}

TEST_CASE("RC atomic compare-and-swap: swaps when equal, not when different; the old value comes "
          "back both times",
          "[api]") {
  Link l = link();
  uint64_t* target = reinterpret_cast<uint64_t*>(l.b->buf() + 1024);
  uint64_t* result = reinterpret_cast<uint64_t*>(l.a->buf() + 2048);
  *target = 0x1111222233334444ull;
  *result = 0;
  Post cas{.op = WrOpcode::kCmpSwap, .remote_addr = l.b->va(1024), .rkey = l.b->mr->rkey()};

  cas.compare_add = 0x1111222233334444ull;  // equal: swapped
  cas.swap = 0xaaaabbbbccccddddull;
  REQUIRE(post_send(*l.a->qp, l.a->sge(2048, 8), 51, cas) == 0);
  Wc s = wait_wc(*l.a->cq);
  CHECK(s.status == kWcSuccess);
  CHECK(s.opcode == kWcCompSwap);
  CHECK(s.byte_len == 8);
  CHECK(*result == 0x1111222233334444ull);
  CHECK(*target == 0xaaaabbbbccccddddull);

  cas.compare_add = 0x1111222233334444ull;  // no longer equal: untouched
  cas.swap = 0x5555555555555555ull;
  REQUIRE(post_send(*l.a->qp, l.a->sge(2048, 8), 52, cas) == 0);
  CHECK(wait_wc(*l.a->cq).status == kWcSuccess);
  CHECK(*result == 0xaaaabbbbccccddddull);
  CHECK(*target == 0xaaaabbbbccccddddull);
}

TEST_CASE("RC atomic on a region without REMOTE_ATOMIC: remote access error, target untouched",
          "[api]") {
  EpOptions ob;
  ob.mr_access = kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead;
  Link l = link({}, ob);
  uint64_t* target = reinterpret_cast<uint64_t*>(l.b->buf());
  *target = 42;
  REQUIRE(post_send(*l.a->qp, l.a->sge(0, 8), 61,
                    {.op = WrOpcode::kFetchAdd, .remote_addr = l.b->va(0), .rkey = l.b->mr->rkey(),
                     .compare_add = 1}) == 0);
  Wc s = wait_wc(*l.a->cq);
  CHECK(s.wr_id == 61);
  CHECK(s.status == kWcRemAccessErr);
  CHECK(*target == 42);
}

TEST_CASE("RC wrong rkey: RDMA WRITE completes with remote access error, the next WR is flushed, "
          "the target is untouched and the responder gets a QP access error event",
          "[api]") {
  Link l = link();
  fill(l.a->buf(), 128, 3);
  REQUIRE(post_send(*l.a->qp, l.a->sge(0, 128), 71,
                    {.op = WrOpcode::kWrite, .remote_addr = l.b->va(0), .rkey = l.b->mr->rkey() ^ 0x100}) ==
          0);
  REQUIRE(post_send(*l.a->qp, l.a->sge(0, 128), 72) == 0);
  Wc s = wait_wc(*l.a->cq);
  CHECK(s.wr_id == 71);
  CHECK(s.status == kWcRemAccessErr);
  CHECK(std::string(wc_status_str(s.status)) == "remote access error");
  Wc f = wait_wc(*l.a->cq);
  CHECK(f.wr_id == 72);
  CHECK(f.status == kWcWrFlushErr);
  CHECK(all_bytes(l.b->buf(), 128, 0));
  CHECK(must(l.a->qp->query(), "query requester").state == QpState::kErr);

  auto evs = wait_async(*l.b->ctx, [](const AsyncEvent& e) { return e.type == AsyncEventType::kQpAccessErr; },
                        kWaitMs);
  REQUIRE(count_events(evs, AsyncEventType::kQpAccessErr) == 1);
  CHECK(evs.back().qp == l.b->qp.get());
  CHECK(must(l.b->qp->query(), "query responder").state == QpState::kErr);
}

TEST_CASE("RC fence: a SEND fenced behind an RDMA READ carries the bytes the READ fetched", "[api]") {
  Link l = link();
  constexpr uint32_t kLen = 4000;
  constexpr size_t kStage = 8192;  // A's buffer: READ destination and SEND source
  fill(l.b->buf(), kLen, 77);      // what the READ fetches from B
  std::memset(l.a->buf() + kStage, 0, kLen);
  REQUIRE(post_recv(*l.b->qp, l.b->sge(16384, kLen), 80) == 0);
  REQUIRE(post_send(*l.a->qp, l.a->sge(kStage, kLen), 81,
                    {.op = WrOpcode::kRead, .remote_addr = l.b->va(0), .rkey = l.b->mr->rkey()}) == 0);
  REQUIRE(post_send(*l.a->qp, l.a->sge(kStage, kLen), 82, {.flags = kSendSignaled | kSendFence}) == 0);
  Wc r1 = wait_wc(*l.a->cq);
  Wc r2 = wait_wc(*l.a->cq);
  CHECK(r1.wr_id == 81);
  CHECK(r1.opcode == kWcRdmaRead);
  CHECK(r2.wr_id == 82);
  CHECK(r2.opcode == kWcSend);
  Wc r = wait_wc(*l.b->cq);
  CHECK(r.status == kWcSuccess);
  CHECK(r.byte_len == kLen);
  // Without the fence the SEND would gather A's buffer before the READ's
  // response filled it (zeros).
  CHECK(first_diff(l.b->buf() + 16384, kLen, 77) == kLen);
}

TEST_CASE("RC inline SEND from unregistered memory and a SEND gathered from three SGEs", "[api]") {
  QpCap cap;
  cap.max_send_sge = 3;
  cap.max_inline_data = 64;
  EpOptions oa;
  oa.cap = cap;
  Link l = link(oa);
  REQUIRE(l.a->qp->cap().max_inline_data >= 64);

  // Inline: the bytes are copied into the WQE, so a stack buffer with no MR will do.
  uint8_t stack[48];
  fill(stack, sizeof stack, 90);
  REQUIRE(post_recv(*l.b->qp, l.b->sge(0, 256), 91) == 0);
  Sge in{reinterpret_cast<uint64_t>(stack), sizeof stack, 0};
  REQUIRE(post_send(*l.a->qp, in, 92, {.flags = kSendSignaled | kSendInline}) == 0);
  std::memset(stack, 0, sizeof stack);  // after posting: too late to matter
  CHECK(wait_wc(*l.a->cq).status == kWcSuccess);
  Wc r = wait_wc(*l.b->cq);
  CHECK(r.byte_len == sizeof stack);
  CHECK(first_diff(l.b->buf(), sizeof stack, 90) == sizeof stack);

  // Gather: three pieces of A's MR arrive as one contiguous message.
  fill(l.a->buf() + 1000, 100, 1);
  fill(l.a->buf() + 3000, 200, 2);
  fill(l.a->buf() + 6000, 300, 3);
  Sge sg[3] = {l.a->sge(1000, 100), l.a->sge(3000, 200), l.a->sge(6000, 300)};
  SendWr wr;
  wr.wr_id = 93;
  wr.sg = sg;
  REQUIRE(post_recv(*l.b->qp, l.b->sge(1024, 1024), 94) == 0);
  REQUIRE(l.a->qp->post_send(wr) == 0);
  CHECK(wait_wc(*l.a->cq).status == kWcSuccess);
  Wc g = wait_wc(*l.b->cq);
  CHECK(g.byte_len == 600);
  CHECK(first_diff(l.b->buf() + 1024, 100, 1) == 100);
  CHECK(first_diff(l.b->buf() + 1124, 200, 2) == 200);
  CHECK(first_diff(l.b->buf() + 1324, 300, 3) == 300);

  // Post-time checks: inline on a READ, an atomic without its 8-byte SGE.
  CHECK(post_send(*l.a->qp, in, 95, {.op = WrOpcode::kRead, .flags = kSendSignaled | kSendInline,
                                     .remote_addr = l.b->va(0), .rkey = l.b->mr->rkey()}) == EINVAL);
  CHECK(post_send(*l.a->qp, l.a->sge(0, 16), 96,
                  {.op = WrOpcode::kFetchAdd, .remote_addr = l.b->va(0), .rkey = l.b->mr->rkey()}) == EINVAL);
}

TEST_CASE("RC QP taken back to RESET and connected again: the queues restart and data flows", "[api]") {
  Link l = link();
  for (int round = 0; round < 2; ++round) {
    // Enough messages to wrap a 16-entry send queue in the first round.
    for (uint8_t i = 0; i < 20; ++i) {
      const uint8_t seed = static_cast<uint8_t>(round * 50 + i);
      REQUIRE(post_recv(*l.b->qp, l.b->sge(0, 256), i) == 0);
      fill(l.a->buf(), 256, seed);
      REQUIRE(post_send(*l.a->qp, l.a->sge(0, 256), i) == 0);
      Wc s = wait_wc(*l.a->cq);
      REQUIRE(s.status == kWcSuccess);
      Wc r = wait_wc(*l.b->cq);
      REQUIRE(r.wr_id == i);
      REQUIRE(first_diff(l.b->buf(), 256, seed) == 256);
    }
    QpAttr reset;
    reset.state = QpState::kReset;
    must(l.a->qp->modify(reset, qp_attr::kState), "A to RESET");
    must(l.b->qp->modify(reset, qp_attr::kState), "B to RESET");
    CHECK(must(l.a->qp->query(), "query").state == QpState::kReset);
    connect(*l.a, *l.b, {.psn = 0x1000});
  }
}

TEST_CASE("RC long messages: SEND_WITH_IMM and WRITE_WITH_IMM of hundreds of packets, a READ over "
          "the 128-response window",
          "[api]") {
  EpOptions o;
  o.mr_len = 1 << 20;
  Link l = link(o, o);
  constexpr uint32_t kSend = 200 * 1024 + 17;  // 201 packets at the 1024-byte path MTU
  constexpr uint32_t kRead = 300 * 1024 + 5;   // 301 responses: three READ requests' worth
  fill(l.a->buf(), kSend, 11);
  REQUIRE(post_recv(*l.b->qp, l.b->sge(0, kSend), 1) == 0);
  REQUIRE(post_send(*l.a->qp, l.a->sge(0, kSend), 2, {.op = WrOpcode::kSendImm, .imm = 0x600d}) == 0);
  CHECK(wait_wc(*l.a->cq).status == kWcSuccess);
  Wc r = wait_wc(*l.b->cq);
  CHECK(r.status == kWcSuccess);
  CHECK(r.byte_len == kSend);
  CHECK(r.imm == 0x600d);
  CHECK(first_diff(l.b->buf(), kSend, 11) == kSend);

  fill(l.a->buf() + 262144, kSend, 12);
  REQUIRE(post_recv(*l.b->qp, l.b->sge(0, 0), 3) == 0);
  REQUIRE(post_send(*l.a->qp, l.a->sge(262144, kSend), 4,
                    {.op = WrOpcode::kWriteImm, .imm = 0xbeef, .remote_addr = l.b->va(262144),
                     .rkey = l.b->mr->rkey()}) == 0);
  CHECK(wait_wc(*l.a->cq).status == kWcSuccess);
  Wc w = wait_wc(*l.b->cq);
  CHECK(w.status == kWcSuccess);
  CHECK(w.opcode == kWcRecvRdmaWithImm);
  CHECK(w.byte_len == kSend);
  CHECK(w.imm == 0xbeef);
  CHECK(first_diff(l.b->buf() + 262144, kSend, 12) == kSend);

  fill(l.b->buf() + 524288, kRead, 13);
  REQUIRE(post_send(*l.a->qp, l.a->sge(524288, kRead), 5,
                    {.op = WrOpcode::kRead, .remote_addr = l.b->va(524288), .rkey = l.b->mr->rkey()}) == 0);
  Wc rd = wait_wc(*l.a->cq);
  CHECK(rd.status == kWcSuccess);
  CHECK(rd.byte_len == kRead);
  CHECK(first_diff(l.a->buf() + 524288, kRead, 13) == kRead);
}

TEST_CASE("queue bounds: a full send or receive queue is ENOMEM until a polled completion frees it",
          "[api]") {
  Link l = link();  // 16 send and 16 receive WRs
  REQUIRE(l.a->qp->cap().max_send_wr == 16);
  REQUIRE(l.b->qp->cap().max_recv_wr == 16);
  for (uint64_t i = 0; i < 16; ++i) REQUIRE(post_recv(*l.b->qp, l.b->sge(i * 64, 64), i) == 0);
  CHECK(post_recv(*l.b->qp, l.b->sge(0, 64), 99) == ENOMEM);
  // 15 unsignaled and one signaled: the queue is full until that one's CQE is polled.
  for (uint64_t i = 0; i < 16; ++i) {
    fill(l.a->buf() + i * 64, 64, uint8_t(i));
    REQUIRE(post_send(*l.a->qp, l.a->sge(i * 64, 64), i, {.flags = i == 15 ? kSendSignaled : 0u}) == 0);
  }
  CHECK(post_send(*l.a->qp, l.a->sge(0, 64), 99) == ENOMEM);
  for (uint64_t i = 0; i < 16; ++i) {
    Wc r = wait_wc(*l.b->cq);
    REQUIRE(r.wr_id == i);
    CHECK(first_diff(l.b->buf() + i * 64, 64, uint8_t(i)) == 64);
  }
  // The receives polled freed the RQ; the signaled CQE not yet polled: the SQ is still full.
  CHECK(post_recv(*l.b->qp, l.b->sge(0, 64), 100) == 0);
  CHECK(post_send(*l.a->qp, l.a->sge(0, 64), 99) == ENOMEM);
  Wc s = wait_wc(*l.a->cq);
  CHECK(s.wr_id == 15);
  expect_no_wc(*l.a->cq);
  // Now all 16 slots are free again.
  REQUIRE(post_send(*l.a->qp, l.a->sge(0, 64), 16) == 0);
  CHECK(wait_wc(*l.a->cq).wr_id == 16);
  CHECK(wait_wc(*l.b->cq).wr_id == 100);
}
