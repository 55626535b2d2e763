// UD (with and without a GRH in the address handle), RC over a GRH path,
// and UC QPs through libopenib between two ibds (IBA 8.3, 9.8, 10.2.5;
// docs/simhca.md §12.7, §12.8).
#include "test_api.hpp"

using namespace openib;
using namespace openib::testing::api;

namespace {

constexpr size_t kGrh = 40;  // IBA 8.3: the receive buffer's first 40 bytes

uint32_t be32(const uint8_t* p) { return uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | p[3]; }
uint16_t be16(const uint8_t* p) { return uint16_t(p[0] << 8 | p[1]); }

EpOptions ud() {
  EpOptions o;
  o.type = QpType::kUd;
  return o;
}

}  // namespace

TEST_CASE("UD SEND with a GRH: the receiver finds the GRH in its first 40 bytes, then the payload",
          "[api]") {
  Link l = link(ud(), ud());
  AddressVector av;
  av.dlid = l.b->lid;
  av.port = 1;
  av.grh = true;
  av.dgid = l.b->gid;
  av.sgid_index = 0;
  av.hop_limit = 9;
  av.traffic_class = 0x5a;
  av.flow_label = 0xabcde;
  auto ah = must(l.a->ctx->create_ah(*l.a->pd, av), "create_ah");
  constexpr uint32_t kLen = 100;

  std::memset(l.b->buf(), 0xcc, 512);
  REQUIRE(post_recv(*l.b->qp, l.b->sge(0, 512), 1) == 0);
  fill(l.a->buf() + 4096, kLen, 21);
  REQUIRE(post_send(*l.a->qp, l.a->sge(4096, kLen), 2,
                    {.ah = ah.get(), .remote_qpn = l.b->qp->qp_num()}) == 0);
  CHECK(wait_wc(*l.a->cq).status == kWcSuccess);

  Wc r = wait_wc(*l.b->cq);
  REQUIRE(r.status == kWcSuccess);
  CHECK(r.opcode == kWcRecv);
  CHECK(r.grh);
  CHECK(r.byte_len == kGrh + kLen);
  CHECK(r.src_qp == l.a->qp->qp_num());
  CHECK(r.slid == l.a->lid);
  CHECK_FALSE(r.has_imm);
  const uint8_t* g = l.b->buf();
  const uint32_t w0 = be32(g);
  CHECK(w0 >> 28 == 6);              // IPVer
  CHECK(((w0 >> 20) & 0xff) == 0x5a);  // TClass
  CHECK((w0 & 0xfffff) == 0xabcde);  // FlowLabel
  CHECK(be16(g + 4) == 12 + 8 + kLen + 4);  // PayLen: BTH, DETH, payload, ICRC (IBA 8.3.3)
  CHECK(g[6] == 0x1b);               // NxtHdr: IBA transport
  CHECK(g[7] == 9);                  // HopLmt
  CHECK(std::memcmp(g + 8, l.a->gid.raw.data(), 16) == 0);   // SGID: the sender's GID 0
  CHECK(std::memcmp(g + 24, l.b->gid.raw.data(), 16) == 0);  // DGID
  CHECK(first_diff(g + kGrh, kLen, 21) == kLen);
  CHECK(g[kGrh + kLen] == 0xcc);
}

TEST_CASE("UD SEND without a GRH, with immediate; a wrong Q_Key is dropped, bit 31 means the QP's own",
          "[api]") {
  Link l = link(ud(), ud());
  AddressVector av;
  av.dlid = l.b->lid;
  av.port = 1;
  auto ah = must(l.a->ctx->create_ah(*l.a->pd, av), "create_ah");
  for (uint8_t i = 0; i < 3; ++i) {
    std::memset(l.b->buf() + size_t{i} * 1024, 0xcc, 1024);
    REQUIRE(post_recv(*l.b->qp, l.b->sge(size_t{i} * 1024, 1024), 10 + i) == 0);
  }
  fill(l.a->buf(), 200, 1);
  fill(l.a->buf() + 1000, 200, 2);
  fill(l.a->buf() + 2000, 200, 3);
  // Wrong Q_Key: dropped by B (IBA 10.2.5), so the next message takes B's first receive.
  REQUIRE(post_send(*l.a->qp, l.a->sge(0, 200), 1,
                    {.ah = ah.get(), .remote_qpn = l.b->qp->qp_num(), .remote_qkey = kQkey ^ 1}) == 0);
  REQUIRE(post_send(*l.a->qp, l.a->sge(1000, 200), 2,
                    {.op = WrOpcode::kSendImm, .imm = 0xcafef00d, .ah = ah.get(),
                     .remote_qpn = l.b->qp->qp_num()}) == 0);
  // Bit 31: A's own Q_Key (kQkey, set by to_rts), which B has.
  REQUIRE(post_send(*l.a->qp, l.a->sge(2000, 200), 3,
                    {.ah = ah.get(), .remote_qpn = l.b->qp->qp_num(), .remote_qkey = 0x80000000}) == 0);
  for (uint64_t id = 1; id <= 3; ++id) {
    Wc s = wait_wc(*l.a->cq);  // UD: a send completes once sent, delivered or not
    CHECK(s.wr_id == id);
    CHECK(s.status == kWcSuccess);
  }
  Wc r = wait_wc(*l.b->cq);
  CHECK(r.wr_id == 10);
  CHECK_FALSE(r.grh);
  CHECK(r.byte_len == kGrh + 200);
  CHECK(r.has_imm);
  CHECK(r.imm == 0xcafef00d);
  CHECK(r.src_qp == l.a->qp->qp_num());
  CHECK(first_diff(l.b->buf() + kGrh, 200, 2) == 200);
  Wc r2 = wait_wc(*l.b->cq);
  CHECK(r2.wr_id == 11);
  CHECK_FALSE(r2.has_imm);
  CHECK(first_diff(l.b->buf() + 1024 + kGrh, 200, 3) == 200);
  expect_no_wc(*l.b->cq);

  // Post-time checks: no AH, or an opcode UD cannot carry.
  CHECK(post_send(*l.a->qp, l.a->sge(0, 8), 4, {.remote_qpn = l.b->qp->qp_num()}) == EINVAL);
  CHECK(post_send(*l.a->qp, l.a->sge(0, 8), 5,
                  {.op = WrOpcode::kWrite, .remote_addr = l.b->va(0), .rkey = l.b->mr->rkey(), .ah = ah.get(),
                   .remote_qpn = l.b->qp->qp_num()}) == EINVAL);
}

TEST_CASE("RC over a path with a GRH: data arrives and Qp::query returns the GRH fields", "[api]") {
  PathOptions p;
  p.grh = true;
  Link l = link({}, {}, p);
  QpAttr q = must(l.a->qp->query(), "query");
  CHECK(q.av.grh);
  CHECK(q.av.dgid.raw == l.b->gid.raw);
  CHECK(q.av.hop_limit == 1);
  CHECK(q.av.dlid == l.b->lid);

  constexpr uint32_t kLen = 2100;
  fill(l.a->buf(), kLen, 44);
  REQUIRE(post_recv(*l.b->qp, l.b->sge(0, 4096), 1) == 0);
  REQUIRE(post_send(*l.a->qp, l.a->sge(0, kLen), 2) == 0);
  CHECK(wait_wc(*l.a->cq).status == kWcSuccess);
  Wc r = wait_wc(*l.b->cq);
  CHECK(r.status == kWcSuccess);
  CHECK(r.byte_len == kLen);
  CHECK(first_diff(l.b->buf(), kLen, 44) == kLen);  // RC: no GRH in the buffer

  // And back, with an RDMA WRITE over B's GRH path.
  fill(l.b->buf() + 8192, 300, 45);
  REQUIRE(post_send(*l.b->qp, l.b->sge(8192, 300), 3,
                    {.op = WrOpcode::kWrite, .remote_addr = l.a->va(8192), .rkey = l.a->mr->rkey()}) == 0);
  CHECK(wait_wc(*l.b->cq).status == kWcSuccess);
  CHECK(first_diff(l.a->buf() + 8192, 300, 45) == 300);
}

TEST_CASE("UC QP: SEND and RDMA WRITE with immediate arrive; READ and atomics are refused at post",
          "[api]") {
  EpOptions uc;
  uc.type = QpType::kUc;
  Link l = link(uc, uc);
  CHECK(l.a->qp->type() == QpType::kUc);
  CHECK(must(l.a->qp->query(), "query").state == QpState::kRts);

  constexpr uint32_t kLen = 2500;  // three packets
  fill(l.a->buf(), kLen, 50);
  REQUIRE(post_recv(*l.b->qp, l.b->sge(0, 4096), 1) == 0);
  REQUIRE(post_send(*l.a->qp, l.a->sge(0, kLen), 2) == 0);
  Wc s = wait_wc(*l.a->cq);
  CHECK(s.status == kWcSuccess);
  CHECK(s.opcode == kWcSend);
  Wc r = wait_wc(*l.b->cq);
  CHECK(r.status == kWcSuccess);
  CHECK(r.opcode == kWcRecv);
  CHECK(r.byte_len == kLen);
  CHECK(r.qp_num == l.b->qp->qp_num());
  CHECK(first_diff(l.b->buf(), kLen, 50) == kLen);

  fill(l.a->buf() + 4096, 1500, 51);
  REQUIRE(post_recv(*l.b->qp, l.b->sge(0, 64), 3) == 0);
  REQUIRE(post_send(*l.a->qp, l.a->sge(4096, 1500), 4,
                    {.op = WrOpcode::kWriteImm, .imm = 0x55aa, .remote_addr = l.b->va(16384),
                     .rkey = l.b->mr->rkey()}) == 0);
  Wc w = wait_wc(*l.a->cq);
  CHECK(w.status == kWcSuccess);
  CHECK(w.opcode == kWcRdmaWrite);
  Wc rw = wait_wc(*l.b->cq);
  CHECK(rw.wr_id == 3);
  CHECK(rw.opcode == kWcRecvRdmaWithImm);
  CHECK(rw.imm == 0x55aa);
  CHECK(rw.byte_len == 1500);
  CHECK(first_diff(l.b->buf() + 16384, 1500, 51) == 1500);

  // UC has no READ and no atomics (IBA 9.8): refused before anything is sent.
  CHECK(post_send(*l.a->qp, l.a->sge(0, 64), 5,
                  {.op = WrOpcode::kRead, .remote_addr = l.b->va(0), .rkey = l.b->mr->rkey()}) == EINVAL);
  CHECK(post_send(*l.a->qp, l.a->sge(0, 8), 6,
                  {.op = WrOpcode::kFetchAdd, .remote_addr = l.b->va(0), .rkey = l.b->mr->rkey(),
                   .compare_add = 1}) == EINVAL);
  expect_no_wc(*l.a->cq);
}
