// libopenib's data path (src/lib/wqe.hpp over src/prm, doorbell.hpp)
// against simhca's decoders (src/sim/simhca/wqe.hpp): the driver's and the
// device's readings of the same manual (docs/simhca.md §12) must agree
// byte for byte. test_prm.cpp checks src/prm against the manual's examples.
#include <catch2/catch.hpp>

#include <array>
#include <cstring>

#include "lib/doorbell.hpp"
#include "lib/wqe.hpp"
#include "sim/simhca/registers.hpp"
#include "sim/simhca/wqe.hpp"

using namespace openib;
namespace sim = openib::simhca;

namespace {

struct Slot {
  alignas(64) std::array<std::byte, 2048> b{};
  std::span<const std::byte> view(size_t stride) const { return {b.data(), stride}; }
};

sim::WqeLimits lim16() { return {16, 512}; }

}  // namespace

TEST_CASE("RC SEND with two SGEs decodes as sent", "[lib][wqe]") {
  Slot s;
  s.b.fill(std::byte{0xee});  // stale bytes of an old WQE must not leak into this one
  std::array<Sge, 2> sg{{{0x1000, 100, 0x11}, {0x2000, 28, 0x22}}};
  SendWr wr;
  wr.wr_id = 0x0102030405060708ull;
  wr.opcode = WrOpcode::kSendImm;
  wr.flags = kSendSignaled | kSendSolicited;
  wr.imm = 0xdeadbeef;
  wr.sg = sg;
  REQUIRE(lib::encode_send_wqe(s.b.data(), 128, QpType::kRc, wr, 0, {2, 0}) == 0);
  auto d = sim::decode_send_wqe(s.view(128), sim::kQpRc, lim16());
  REQUIRE(d.ok());
  CHECK(d->opcode == sim::kWrSendImm);
  CHECK(d->flags == (sim::kWqeSignaled | sim::kWqeSolicited));
  CHECK(d->num_ds == 3);
  CHECK(d->imm == 0xdeadbeef);
  CHECK(d->wr_id == 0x0102030405060708ull);
  REQUIRE(d->sges.size() == 2);
  CHECK(d->sges[0].addr == 0x1000);
  CHECK(d->sges[0].length == 100);
  CHECK(d->sges[0].lkey == 0x11);
  CHECK(d->sges[1].addr == 0x2000);
  CHECK(d->length() == 128);
  CHECK(std::to_integer<int>(s.b[3]) == 0);  // reserved
}

TEST_CASE("RDMA WRITE and READ carry the remote address segment", "[lib][wqe]") {
  Slot s;
  Sge sg{0xabc000, 4096, 7};
  SendWr wr;
  wr.opcode = WrOpcode::kRead;
  wr.sg = std::span(&sg, 1);
  wr.remote_addr = 0x7fff00001000ull;
  wr.rkey = 0x1234;
  REQUIRE(lib::encode_send_wqe(s.b.data(), 64, QpType::kRc, wr, 0, {1, 0}) == 0);
  auto d = sim::decode_send_wqe(s.view(64), sim::kQpRc, lim16());
  REQUIRE(d.ok());
  CHECK(d->opcode == sim::kWrRead);
  CHECK(d->remote_va == 0x7fff00001000ull);
  CHECK(d->rkey == 0x1234);
  CHECK(d->sges.size() == 1);

  wr.opcode = WrOpcode::kWriteImm;
  REQUIRE(lib::encode_send_wqe(s.b.data(), 64, QpType::kUc, wr, 0, {1, 0}) == 0);
  d = sim::decode_send_wqe(s.view(64), sim::kQpUc, lim16());
  REQUIRE(d.ok());
  CHECK(d->opcode == sim::kWrWriteImm);
  CHECK(d->num_ds == 3);
}

TEST_CASE("atomics: swap/add and compare in the atomic segment", "[lib][wqe]") {
  Slot s;
  Sge sg{0x5000, 8, 9};
  SendWr wr;
  wr.opcode = WrOpcode::kCmpSwap;
  wr.sg = std::span(&sg, 1);
  wr.remote_addr = 0x9000;
  wr.rkey = 3;
  wr.compare_add = 111;
  wr.swap = 222;
  REQUIRE(lib::encode_send_wqe(s.b.data(), 64, QpType::kRc, wr, 0, {1, 0}) == 0);
  auto d = sim::decode_send_wqe(s.view(64), sim::kQpRc, lim16());
  REQUIRE(d.ok());
  CHECK(d->swap_add == 222);
  CHECK(d->compare == 111);
  CHECK(d->num_ds == 4);

  wr.opcode = WrOpcode::kFetchAdd;
  REQUIRE(lib::encode_send_wqe(s.b.data(), 64, QpType::kRc, wr, 0, {1, 0}) == 0);
  d = sim::decode_send_wqe(s.view(64), sim::kQpRc, lim16());
  REQUIRE(d.ok());
  CHECK(d->swap_add == 111);

  Sge bad{0x5000, 4, 9};  // the device wants one 8-byte SGE: refuse before posting
  wr.sg = std::span(&bad, 1);
  CHECK(lib::encode_send_wqe(s.b.data(), 64, QpType::kRc, wr, 0, {1, 0}) == EINVAL);
  wr.sg = std::span(&sg, 1);
  CHECK(lib::encode_send_wqe(s.b.data(), 64, QpType::kUc, wr, 0, {1, 0}) == EINVAL);
}

TEST_CASE("UD SEND with inline data and the address segment", "[lib][wqe]") {
  Slot s;
  s.b.fill(std::byte{0xee});
  std::array<char, 45> msg{};
  for (size_t i = 0; i < msg.size(); ++i) msg[i] = char('a' + i % 26);
  std::array<Sge, 2> sg{{{reinterpret_cast<uint64_t>(msg.data()), 20, 0},
                         {reinterpret_cast<uint64_t>(msg.data() + 20), 25, 0}}};
  SendWr wr;
  wr.opcode = WrOpcode::kSend;
  wr.flags = kSendInline | kSendSignaled;
  wr.sg = sg;
  wr.remote_qpn = 0x123456;
  wr.remote_qkey = 0x11111111;
  const uint32_t stride = 1u << dp::log_sq_stride(dp::QpType::kUd, 1, 64);
  CHECK(stride == 128);
  REQUIRE(lib::encode_send_wqe(s.b.data(), stride, QpType::kUd, wr, 77, {1, 64}) == 0);
  auto d = sim::decode_send_wqe(s.view(stride), sim::kQpUd, lim16());
  REQUIRE(d.ok());
  CHECK(d->ahn == 77);
  CHECK(d->dest_qpn == 0x123456);
  CHECK(d->qkey == 0x11111111);
  CHECK(d->num_ds == 2 + 4);  // ctrl, UD, ceil((4 + 45) / 16)
  REQUIRE(d->inline_data.size() == 45);
  CHECK(std::memcmp(d->inline_data.data(), msg.data(), 45) == 0);

  wr.opcode = WrOpcode::kWrite;  // UD sends only
  CHECK(lib::encode_send_wqe(s.b.data(), stride, QpType::kUd, wr, 77, {1, 64}) == EINVAL);
  wr.opcode = WrOpcode::kSend;  // over the QP's inline limit
  CHECK(lib::encode_send_wqe(s.b.data(), stride, QpType::kUd, wr, 77, {1, 44}) == EINVAL);
}

TEST_CASE("too many SGEs for the QP or the stride are refused", "[lib][wqe]") {
  Slot s;
  std::array<Sge, 4> sg{};
  SendWr wr;
  wr.sg = sg;
  CHECK(lib::encode_send_wqe(s.b.data(), 128, QpType::kRc, wr, 0, {3, 0}) == EINVAL);
  CHECK(lib::encode_send_wqe(s.b.data(), 64, QpType::kRc, wr, 0, {4, 0}) == EINVAL);
  CHECK(lib::encode_send_wqe(s.b.data(), 128, QpType::kRc, wr, 0, {4, 0}) == 0);
}

TEST_CASE("receive WQE decodes as posted", "[lib][wqe]") {
  Slot s;
  s.b.fill(std::byte{0xee});
  std::array<Sge, 3> sg{{{0x1000, 10, 1}, {0x2000, 20, 2}, {0x3000, 30, 3}}};
  RecvWr wr{42, sg};
  REQUIRE(lib::encode_recv_wqe(s.b.data(), 64, wr, 3) == 0);
  auto d = sim::decode_recv_wqe(s.view(64), 16);
  REQUIRE(d.ok());
  CHECK(d->wr_id == 42);
  REQUIRE(d->sges.size() == 3);
  CHECK(d->sges[2].addr == 0x3000);
  CHECK(d->sges[2].lkey == 3);
  CHECK(d->capacity() == 60);
  CHECK(lib::encode_recv_wqe(s.b.data(), 32, wr, 3) == EINVAL);
}

TEST_CASE("CQEs written by the device decode, with the owner phase of §9.2", "[lib][cqe]") {
  sim::Cqe c;
  c.wr_id = 0xfeedface12345678ull;
  c.byte_len = 4096;
  c.imm = 0xcafe;
  c.qpn = 0x1234;
  c.src_qp = 0x777;
  c.slid = 9;
  c.sl = 3;
  c.dlid_path_bits = 1;
  c.opcode = sim::kWcRecvRdmaWithImm;
  c.status = sim::kWcRemAccessErr;
  c.flags = sim::kCqeFlagImm | sim::kCqeFlagSolicited;
  c.vendor_err = 5;
  c.pkey_index = 2;
  c.wqe_index = 0x1ff;
  auto first = sim::encode_cqe(c, 1);  // first pass over a ring of 2^4
  CHECK(dp::cqe_owned(first.data(), 0, 4));
  CHECK(dp::cqe_owned(first.data(), 15, 4));
  CHECK_FALSE(dp::cqe_owned(first.data(), 16, 4));  // second pass expects owner 0
  auto second = sim::encode_cqe(c, 0);
  CHECK(dp::cqe_owned(second.data(), 16, 4));
  std::array<std::byte, 64> zero{};
  CHECK_FALSE(dp::cqe_owned(zero.data(), 0, 4));  // a zeroed ring: nothing yet

  Wc wc;
  CHECK(lib::decode_cqe(first.data(), wc) == 0x1ff);
  CHECK(wc.wr_id == c.wr_id);
  CHECK(wc.byte_len == 4096);
  CHECK(wc.imm == 0xcafe);
  CHECK(wc.qp_num == 0x1234);
  CHECK(wc.src_qp == 0x777);
  CHECK(wc.slid == 9);
  CHECK(wc.sl == 3);
  CHECK(wc.dlid_path_bits == 1);
  CHECK(wc.opcode == kWcRecvRdmaWithImm);
  CHECK(wc.status == kWcRemAccessErr);
  CHECK(wc.has_imm);
  CHECK(wc.solicited);
  CHECK_FALSE(wc.grh);
  CHECK(wc.vendor_err == 5);
  CHECK(wc.pkey_index == 2);
}

TEST_CASE("doorbells: record counters big-endian, UAR words per §4", "[lib][doorbell]") {
  alignas(4096) static std::array<std::byte, 4096> page{};
  alignas(8) std::array<std::byte, 8> rec{};
  lib::dbr_store(rec.data(), dp::kDbrQpSq, 0x01020304);
  lib::dbr_store(rec.data(), dp::kDbrQpRq, 0x0a0b0c0d);
  CHECK(sim::get32(rec, 0) == 0x0a0b0c0d);  // §12.3 RQ producer counter at 0x00
  CHECK(sim::get32(rec, 4) == 0x01020304);  // SQ producer counter at 0x04

  lib::Uar uar(page.data());
  uar.ring_sq(0xabcdef, 0x12345678);
  uint64_t w;
  std::memcpy(&w, page.data() + 0x800, 8);  // a little-endian 64-bit register (§1)
  CHECK(w == 0x12345678'00abcdefull);
  uar.arm_cq(0x42, dp::CqArm::kSolicited, 3, 0x99);
  std::memcpy(&w, page.data() + 0x20, 8);
  CHECK((w & 0xffffff) == 0x42);
  CHECK(((w >> 24) & 3) == 2);   // solicited
  CHECK(((w >> 28) & 3) == 3);   // arm sequence number
  CHECK((w >> 32) == 0x99);      // consumer counter
  // A sleeping scanner gets a FUTEX_WAKE (nobody waits here: a no-op).
  uint32_t one = 1;
  std::memcpy(page.data(), &one, 4);
  uar.ring_sq(1, 1);
  std::memcpy(&w, page.data() + 0x800, 8);
  CHECK(w == 0x1'00000001ull);
  uint32_t sleeping;
  std::memcpy(&sleeping, page.data(), 4);
  CHECK(sleeping == 0);  // §12.5.2 step 6: the client clears it before its wake
}
