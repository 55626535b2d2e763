// src/prm, the driver's one reading of docs/simhca.md §12, against the
// manual's worked examples (the hex dumps in §12.1-§12.4, copied here as
// printed there) and against the refusals §12.1 "Decoding" implies.
#include <catch2/catch.hpp>

#include <array>
#include <cctype>
#include <cstring>
#include <string_view>
#include <vector>

#include "hca/work_queue.hpp"
#include "prm/cqe.hpp"
#include "prm/uar.hpp"
#include "prm/wqe.hpp"

using namespace openib;

namespace {

// A hex dump as the manual prints it ("10: 00 ff ..."): the offsets before
// each colon are dropped, the rest is bytes.
std::vector<std::byte> dump(std::string_view s) {
  std::vector<std::byte> out;
  bool in_offset = true;
  int hi = -1;
  for (char c : s) {
    if (c == '\n') in_offset = true;
    if (c == ':') {
      in_offset = false;
      continue;
    }
    if (in_offset || !std::isxdigit(static_cast<unsigned char>(c))) continue;
    const int v = std::isdigit(static_cast<unsigned char>(c)) ? c - '0' : (std::tolower(c) - 'a' + 10);
    if (hi < 0) {
      hi = v;
    } else {
      out.push_back(std::byte(static_cast<uint8_t>(hi << 4 | v)));
      hi = -1;
    }
  }
  return out;
}

struct Sge {
  uint64_t addr = 0;
  uint32_t length = 0;
  uint32_t lkey = 0;
};

struct Slot {
  alignas(64) std::array<std::byte, 2048> b{};
  Slot() { b.fill(std::byte{0xee}); }  // stale bytes of an older WQE must not show
  std::vector<std::byte> first(size_t n) const { return {b.begin(), b.begin() + static_cast<ptrdiff_t>(n)}; }
};

constexpr dp::SqLimits kLim{4, 64};

// §12.1 first example.
constexpr std::string_view kRcSendImm = R"(
00: 01 03 03 00 de ad be ef 01 02 03 04 05 06 07 08
10: 00 00 00 64 00 00 00 11 00 00 00 00 00 00 10 00
20: 00 00 00 1c 00 00 00 22 00 00 00 00 00 00 20 00
)";
// §12.1 second example.
constexpr std::string_view kUdInline = R"(
00: 00 05 03 00 00 00 00 00 00 00 00 00 00 00 00 2a
10: 00 00 00 07 00 12 34 56 80 00 00 00 00 00 00 00
20: 80 00 00 05 68 65 6c 6c 6f 00 00 00 00 00 00 00
)";
// §12.1 third example.
constexpr std::string_view kRcCmpSwap = R"(
00: 05 01 04 00 00 00 00 00 00 00 00 00 00 00 00 99
10: 00 00 7f 00 00 00 10 00 00 00 12 34 00 00 00 00
20: 00 00 00 00 00 00 00 de 00 00 00 00 00 00 00 6f
30: 00 00 00 08 00 00 00 09 00 00 00 00 00 00 50 00
)";
// §12.2 example.
constexpr std::string_view kRecv = R"(
00: 00 00 00 00 00 00 00 2a 01 00 00 00 00 00 00 00
10: 00 00 01 00 00 00 00 0a 00 00 7f 00 00 00 20 00
)";
// §12.4 example.
constexpr std::string_view kUdRecvCqe = R"(
00: 00 00 00 00 00 00 00 2a 00 00 00 2d 00 00 ca fe
10: 00 00 00 10 00 12 34 56 00 09 03 01 80 00 03 00
20: 00 00 01 ff 00 00 00 00 00 00 00 00 00 00 00 00
30: 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 01
)";

dp::SendWqe rc_send_imm() {
  dp::SendWqe w;
  w.opcode = dp::Opcode::kSendImm;
  w.flags = dp::kFlagSignaled | dp::kFlagSolicited;
  w.imm = 0xdeadbeef;
  w.wr_id = 0x0102030405060708ull;
  return w;
}

dp::SendWqe rc_cmp_swap() {
  dp::SendWqe w;
  w.opcode = dp::Opcode::kCmpSwap;
  w.wr_id = 0x99;
  w.remote_va = 0x7f0000001000ull;
  w.rkey = 0x1234;
  w.swap_add = 222;
  w.compare = 111;
  return w;
}

}  // namespace

TEST_CASE("send WQE: RC SEND_WITH_IMM with two SGEs is §12.1's example", "[prm][wqe]") {
  Slot s;
  const std::array<Sge, 2> sg{{{0x1000, 100, 0x11}, {0x2000, 28, 0x22}}};
  REQUIRE(dp::encode_send_wqe(s.b.data(), 64, dp::QpType::kRc, rc_send_imm(), std::span<const Sge>(sg), kLim) ==
          dp::WqeError::kNone);
  CHECK(s.first(48) == dump(kRcSendImm));
}

TEST_CASE("send WQE: UD SEND with inline data is §12.1's example", "[prm][wqe]") {
  Slot s;
  const char msg[] = "hello";
  const std::array<Sge, 2> sg{{{reinterpret_cast<uint64_t>(msg), 2, 0}, {reinterpret_cast<uint64_t>(msg + 2), 3, 0}}};
  dp::SendWqe w;
  w.flags = dp::kFlagSignaled | dp::kFlagInline;
  w.wr_id = 0x2a;
  w.ahn = 7;
  w.dest_qpn = 0x123456;
  REQUIRE(w.qkey == dp::kQkeyOfQp);  // the default: the QP's own Q_Key
  REQUIRE(dp::encode_send_wqe(s.b.data(), 64, dp::QpType::kUd, w, std::span<const Sge>(sg), kLim) ==
          dp::WqeError::kNone);
  CHECK(s.first(48) == dump(kUdInline));
  // GSI (QP1) WQEs have the same UD address segment (§12.1).
  Slot g;
  REQUIRE(dp::encode_send_wqe(g.b.data(), 64, dp::QpType::kGsi, w, std::span<const Sge>(sg), kLim) ==
          dp::WqeError::kNone);
  CHECK(g.first(48) == dump(kUdInline));
}

TEST_CASE("send WQE: RC ATOMIC_CMP_AND_SWP is §12.1's example", "[prm][wqe]") {
  Slot s;
  const Sge sg{0x5000, 8, 9};
  REQUIRE(dp::encode_send_wqe(s.b.data(), 64, dp::QpType::kRc, rc_cmp_swap(), std::span<const Sge>(&sg, 1), kLim) ==
          dp::WqeError::kNone);
  CHECK(s.first(64) == dump(kRcCmpSwap));
}

TEST_CASE("send WQE: what the device would refuse is refused before posting", "[prm][wqe]") {
  Slot s;
  const Sge eight{0x5000, 8, 9}, four{0x5000, 4, 9};
  const std::array<Sge, 5> five{};
  auto enc = [&](dp::QpType t, const dp::SendWqe& w, std::span<const Sge> sg, size_t stride = 256,
                 dp::SqLimits lim = kLim) { return dp::encode_send_wqe(s.b.data(), stride, t, w, sg, lim); };
  using E = dp::WqeError;

  SECTION("an atomic with a data segment other than one of 8 bytes, or inline") {
    CHECK(enc(dp::QpType::kRc, rc_cmp_swap(), std::span(&four, 1)) == E::kAtomicSge);
    CHECK(enc(dp::QpType::kRc, rc_cmp_swap(), {}) == E::kAtomicSge);
    auto w = rc_cmp_swap();
    w.flags |= dp::kFlagInline;
    CHECK(enc(dp::QpType::kRc, w, std::span(&eight, 1)) == E::kAtomicSge);
  }
  SECTION("inline data with RDMA READ, or over the QP's max_inline") {
    dp::SendWqe w;
    w.opcode = dp::Opcode::kRead;
    w.flags = dp::kFlagInline;
    CHECK(enc(dp::QpType::kRc, w, std::span(&eight, 1)) == E::kInlineRead);
    w.opcode = dp::Opcode::kSend;
    const Sge big{0, 65, 0};
    CHECK(enc(dp::QpType::kRc, w, std::span(&big, 1)) == E::kInlineLen);
  }
  SECTION("an opcode the QP type does not carry") {
    CHECK(enc(dp::QpType::kUd, rc_cmp_swap(), std::span(&eight, 1)) == E::kOpcode);
    CHECK(enc(dp::QpType::kUc, rc_cmp_swap(), std::span(&eight, 1)) == E::kOpcode);
    dp::SendWqe w;
    w.opcode = dp::Opcode::kWrite;
    CHECK(enc(dp::QpType::kGsi, w, {}) == E::kOpcode);
    CHECK(enc(dp::QpType::kUc, w, {}) == E::kNone);
  }
  SECTION("reserved flag bits") {
    dp::SendWqe w;
    w.flags = 0x10;
    CHECK(enc(dp::QpType::kRc, w, {}) == E::kFlags);
  }
  SECTION("more SGEs than the QP holds, or a WQE over the stride") {
    CHECK(enc(dp::QpType::kRc, rc_send_imm(), five) == E::kSgeCount);
    CHECK(enc(dp::QpType::kRc, rc_send_imm(), std::span(five).first(4), 64) == E::kStride);
    CHECK(enc(dp::QpType::kRc, rc_send_imm(), std::span(five).first(4), 80) == E::kNone);  // 16 + 4 x 16
  }
}

TEST_CASE("send WQE: strides hold the worst-case WQE of §12.1 (§6.10 ranges)", "[prm][wqe]") {
  CHECK(dp::log_sq_stride(dp::QpType::kRc, 1, 0) == 6);   // 48 + 16
  CHECK(dp::log_sq_stride(dp::QpType::kRc, 2, 0) == 7);   // 48 + 32
  CHECK(dp::log_sq_stride(dp::QpType::kRc, 1, 64) == 7);  // 48 + 80
  CHECK(dp::log_sq_stride(dp::QpType::kUd, 16, 0) == 9);  // 32 + 256
  CHECK(dp::log_rq_stride(1) == 5);
  CHECK(dp::log_rq_stride(2) == 6);
  CHECK(dp::log_rq_stride(16) == 9);
}

TEST_CASE("receive WQE is §12.2's example; too many SGEs are refused", "[prm][wqe]") {
  Slot s;
  const Sge sg{0x7f0000002000ull, 256, 0x0a};
  REQUIRE(dp::encode_recv_wqe(s.b.data(), 32, 42, std::span(&sg, 1), 1) == dp::WqeError::kNone);
  CHECK(s.first(32) == dump(kRecv));
  const std::array<Sge, 2> two{};
  CHECK(dp::encode_recv_wqe(s.b.data(), 64, 42, std::span<const Sge>(two), 1) == dp::WqeError::kSgeCount);
  CHECK(dp::encode_recv_wqe(s.b.data(), 32, 42, std::span<const Sge>(two), 2) == dp::WqeError::kStride);
}

TEST_CASE("CQE: §12.4's example decodes field by field, owner phase of §9.2", "[prm][cqe]") {
  const auto c = dump(kUdRecvCqe);
  REQUIRE(c.size() == dp::kCqeSize);
  const dp::Cqe e = dp::decode_cqe(c.data());
  CHECK(e.wr_id == 0x2a);
  CHECK(e.byte_len == 45);
  CHECK(e.imm == 0xcafe);
  CHECK(e.qpn == 0x10);
  CHECK(e.src_qp == 0x123456);
  CHECK(e.slid == 9);
  CHECK(e.sl == 3);
  CHECK(e.dlid_path_bits == 1);
  CHECK(e.opcode == dp::kWcRecv);
  CHECK(e.status == dp::kWcSuccess);
  CHECK(e.grh);
  CHECK(e.has_imm);
  CHECK_FALSE(e.solicited);
  CHECK(e.vendor_err == 0);
  CHECK(e.pkey_index == 0);
  CHECK(e.wqe_index == 0x1ff);
  // Owner 1: the consumer's on the first pass over a ring of 2^4, not on the second.
  CHECK(dp::cqe_owned(c.data(), 0, 4));
  CHECK(dp::cqe_owned(c.data(), 15, 4));
  CHECK_FALSE(dp::cqe_owned(c.data(), 16, 4));
  const std::array<std::byte, dp::kCqeSize> zero{};
  CHECK_FALSE(dp::cqe_owned(zero.data(), 0, 4));  // a zeroed ring holds nothing yet
  CHECK(dp::cqe_owned(zero.data(), 16, 4));
}

TEST_CASE("doorbells: §12.3's record and SQ_DOORBELL example, §7.3 CQ_ARM, §9.3 EQ_DOORBELL", "[prm][doorbell]") {
  CHECK(dp::sq_doorbell(0x10, 5) == 0x0000000500000010ull);
  CHECK(dp::sq_doorbell(0x7abcdef, 1) == 0x0000000100abcdefull);  // 24-bit QPN
  CHECK(dp::kUarSqDoorbell == 0x800);
  CHECK(dp::cq_arm(0x42, dp::CqArm::kSolicited, 3, 0x99) == 0x00000099'32000042ull);
  CHECK(dp::cq_arm(0x42, dp::CqArm::kNext, 5, 0) == 0x00000000'11000042ull);  // the sn wraps at 2 bits
  CHECK(dp::eq_doorbell(0x3, true, 0x10) == 0x00000010'80000003ull);
  CHECK(dp::eq_doorbell(0x3, false, 0x10) == 0x00000010'00000003ull);
}

TEST_CASE("hca's work queue uses the same encoder and checks", "[prm][hca]") {
  hca::SendWr wr;
  wr.wr_id = 0x0102030405060708ull;
  wr.opcode = hca::WrOpcode::kSendImm;
  wr.solicited = true;
  wr.imm = 0xdeadbeef;
  wr.sg = {{0x1000, 100, 0x11}, {0x2000, 28, 0x22}};
  auto w = hca::encode_send_wqe(wr, hca::QpType::kRc);
  REQUIRE(w.ok());
  CHECK(*w == dump(kRcSendImm));

  hca::SendWr at;  // checks the driver's encoder lacked before src/prm
  at.opcode = hca::WrOpcode::kFetchAdd;
  at.sg = {{0x5000, 4, 9}};
  CHECK(hca::encode_send_wqe(at, hca::QpType::kRc).error().code == EINVAL);
  hca::SendWr rd;
  rd.opcode = hca::WrOpcode::kRead;
  rd.inline_data = true;
  CHECK(hca::encode_send_wqe(rd, hca::QpType::kRc).error().code == EINVAL);
  hca::SendWr ud_write;
  ud_write.opcode = hca::WrOpcode::kWrite;
  CHECK(hca::encode_send_wqe(ud_write, hca::QpType::kGsi).error().code == EINVAL);

  hca::RecvWr rw{42, {{0x7f0000002000ull, 256, 0x0a}}};
  CHECK(hca::encode_recv_wqe(rw) == dump(kRecv));

  const auto c = dump(kUdRecvCqe);
  const hca::WorkCompletion wc = hca::decode_cqe(c);
  CHECK(wc.wqe_index == 0x1ff);
  CHECK(wc.src_qp == 0x123456);
  CHECK(hca::decode_cqe(std::span(c).first(0x20)).wqe_index == 0);  // a short span reads as zeros
}
