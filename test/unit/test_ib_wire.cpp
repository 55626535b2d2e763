// IBA wire codecs (src/sim/wire): headers against byte strings written by
// hand from the spec's field tables, the OpCode table, CRCs against
// independently computed values, and parse_packet()'s rejections.
#include <catch2/catch.hpp>

#include <cerrno>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "sim/wire/crc.hpp"
#include "sim/wire/headers.hpp"
#include "sim/wire/packet.hpp"

using namespace openib::sim::wire;

namespace {

std::vector<std::byte> hex(std::string_view s) {
  std::vector<std::byte> out;
  for (std::size_t i = 0; i + 1 < s.size(); i += 2)
    out.push_back(static_cast<std::byte>(std::stoi(std::string(s.substr(i, 2)), nullptr, 16)));
  return out;
}

std::vector<std::byte> bytes(std::string_view s) {
  std::vector<std::byte> out(s.size());
  std::memcpy(out.data(), s.data(), s.size());
  return out;
}

template <typename T, typename Append, typename Decode>
void check_codec(const T& h, Append append, Decode decode, std::string_view expect_hex) {
  ByteVec out;
  append(out, h);
  CHECK(out == hex(expect_hex));
  auto d = decode(out);
  REQUIRE(d.ok());
  CHECK(*d == h);
  // One byte short is an error, not a read past the end.
  auto shortr = decode(std::span<const std::byte>(out).first(out.size() - 1));
  REQUIRE_FALSE(shortr.ok());
  CHECK(shortr.error().code == EPROTO);
}

// Vector 1: RC SEND Only, local (LNH 2), DLID 2, SLID 1, P_Key 0xffff,
// DestQP 0x12, AckReq, PSN 0x34, payload "hello" + 3 pad bytes. Header
// bytes written from IBA 7.7 / 9.2; ICRC and VCRC computed with Python's
// zlib.crc32 and a bitwise CRC-16 (poly 0x100B, reflected) -- not this code.
constexpr std::string_view kVec1 =
    "0002000200080001"          // LRH: VL0 LVer0 | SL0 LNH2 | DLID 2 | PktLen 8 | SLID 1
    "0430ffff00000012 80000034"  // BTH: SEND Only, PadCnt 3, P_Key, QP 0x12, A, PSN 0x34
    "68656c6c6f000000"          // "hello" + pad
    "84322d01"                  // ICRC 0x012d3284, LSB first
    "4877";                     // VCRC 0x7748, LSB first

// Vector 2: UD SEND Only with GRH; every variant field non-zero (VL 3,
// TClass 0xa5, FlowLabel 0x12345, HopLmt 0x40, BTH resv8a 0xc0).
constexpr std::string_view kVec2 =
    "3073000400140003"                           // LRH: VL3 LVer0 | SL7 LNH3 | DLID 4 | 20 words | SLID 3
    "6a512345 0020 1b 40"                        // GRH: IPVer 6, TClass, FlowLabel, PayLen 32, NxtHdr, HopLmt
    "fe800000000000000002c90300000001"           // SGID
    "fe800000000000000002c90300000002"           // DGID
    "64008001c0000001 00000007"                  // BTH: UD SEND Only, P_Key 0x8001, QP 1, PSN 7
    "8001000000000002"                           // DETH: Q_Key 0x80010000, SrcQP 2
    "0102030405060708"                           // payload
    "6c26282b"                                   // ICRC 0x2b28266c
    "fda6";                                      // VCRC 0xa6fd

std::vector<std::byte> vec(std::string_view s) {
  std::string clean;
  for (char c : s)
    if (c != ' ') clean.push_back(c);
  return hex(clean);
}

Headers rc_send_only() {
  Headers h;
  h.lrh.dlid = 2;
  h.lrh.slid = 1;
  h.bth.opcode = opcode(Transport::kRc, Op::kSendOnly);
  h.bth.pkey = 0xFFFF;
  h.bth.dest_qp = 0x12;
  h.bth.ack_req = true;
  h.bth.psn = 0x34;
  return h;
}

}  // namespace

TEST_CASE("CRC-32 and the VCRC CRC-16 match their reference check values", "[wire][crc]") {
  auto check = bytes("123456789");
  CHECK(crc32(0, check) == 0xCBF43926u);     // CRC-32/ISO-HDLC (zlib) check value
  CHECK(crc16_vcrc(0, check) == 0x0A3Du);    // poly 0x100B refl., init/xorout 0xFFFF
  // Chaining over split input gives the same result.
  auto s = std::span<const std::byte>(check);
  CHECK(crc32(crc32(0, s.first(4)), s.subspan(4)) == 0xCBF43926u);
  CHECK(crc16_vcrc(crc16_vcrc(0, s.first(4)), s.subspan(4)) == 0x0A3Du);
  // The masked LRH leaves the CRC register at 0xDEBB20E3, the seed
  // rdma-core's rxe_icrc.c starts RoCE ICRCs from ("a CRC with a seed of
  // 0xffffffff and 8 bytes of 0xff representing a masked LRH").
  std::vector<std::byte> ff(8, std::byte{0xFF});
  CHECK(~crc32(0, ff) == 0xDEBB20E3u);
}

TEST_CASE("LRH encodes per IBA 7.7", "[wire][headers]") {
  Lrh h{.vl = 0xF, .lver = 0, .sl = 0x9, .resv2 = 0, .lnh = Lnh::kIbaGlobal, .dlid = 0xC001,
        .resv5 = 0, .pkt_len = 0x7FF, .slid = 0x1234};
  check_codec(h, append_lrh, decode_lrh, "f093c00107ff1234");
  Lrh r{.vl = 1, .lver = 2, .sl = 3, .resv2 = 3, .lnh = Lnh::kRaw, .dlid = 0xFFFF, .resv5 = 0x1F,
        .pkt_len = 5, .slid = 0};
  check_codec(r, append_lrh, decode_lrh, "123cfffff8050000");
}

TEST_CASE("GRH encodes per IBA 8.3", "[wire][headers]") {
  Grh g;
  g.tclass = 0xA5;
  g.flow_label = 0xFEDCB;
  g.pay_len = 0x0102;
  g.hop_lmt = 0xFF;
  for (std::size_t i = 0; i < 16; ++i) {
    g.sgid[i] = static_cast<std::uint8_t>(i);
    g.dgid[i] = static_cast<std::uint8_t>(0xF0 + i);
  }
  check_codec(g, append_grh, decode_grh,
              "6a5fedcb01021bff000102030405060708090a0b0c0d0e0f"
              "f0f1f2f3f4f5f6f7f8f9fafbfcfdfeff");
}

TEST_CASE("BTH encodes per IBA 9.2", "[wire][headers]") {
  Bth b{.opcode = 0x0A, .se = true, .mig_req = true, .pad_cnt = 2, .tver = 0, .pkey = 0x7FFF,
        .resv8a = 0x80, .dest_qp = 0xABCDEF, .ack_req = true, .resv7 = 0, .psn = 0xFFFFFF};
  check_codec(b, append_bth, decode_bth, "0ae07fff80abcdef80ffffff");
  Bth z{.opcode = 0x11, .se = false, .mig_req = false, .pad_cnt = 0, .tver = 0xF, .pkey = 0,
        .resv8a = 0, .dest_qp = 1, .ack_req = false, .resv7 = 0x7F, .psn = 0};
  check_codec(z, append_bth, decode_bth, "110f0000000000017f000000");
}

TEST_CASE("BTH encoder masks values to their field widths", "[wire][headers]") {
  Bth b;
  b.dest_qp = 0x1000001;
  b.psn = 0xF000002;
  b.pad_cnt = 7;
  ByteVec out;
  append_bth(out, b);
  auto d = decode_bth(out);
  REQUIRE(d.ok());
  CHECK(d->dest_qp == 1);
  CHECK(d->psn == 2);
  CHECK(d->pad_cnt == 3);
}

TEST_CASE("Extended transport headers encode per IBA 9.3", "[wire][headers]") {
  check_codec(Rdeth{0x123456}, append_rdeth, decode_rdeth, "00123456");
  check_codec(Deth{0x80010000, 0xFFFFFF}, append_deth, decode_deth, "8001000000ffffff");
  check_codec(Reth{0x0102030405060708, 0xAABBCCDD, 0x10000}, append_reth, decode_reth,
              "0102030405060708aabbccdd00010000");
  check_codec(AtomicEth{0x1000, 0x42, 0x1111111122222222, 0x3333333344444444}, append_atomic_eth,
              decode_atomic_eth, "0000000000001000000000421111111122222222" "3333333344444444");
  check_codec(Aeth{0x1F, 0xABCDEF}, append_aeth, decode_aeth, "1fabcdef");
  check_codec(AtomicAckEth{0xDEADBEEFCAFEF00D}, append_atomic_ack_eth, decode_atomic_ack_eth,
              "deadbeefcafef00d");
  check_codec(ImmDt{0x01020304}, append_imm_dt, decode_imm_dt, "01020304");
  check_codec(Ieth{0xFEEDFACE}, append_ieth, decode_ieth, "feedface");
}

TEST_CASE("AETH syndromes: ACK, RNR NAK and NAK codes (IBA 9.3.5)", "[wire][headers]") {
  auto a = Aeth::ack(0x123, 5);
  CHECK(a.syndrome == 0x05);
  CHECK(a.kind() == AckKind::kAck);
  CHECK(a.value() == 5);
  CHECK(Aeth::ack(1, kAethInvalidCredits).syndrome == 0x1F);

  auto r = Aeth::rnr_nak(7, 0x0E);
  CHECK(r.syndrome == 0x2E);  // 0 01 01110
  CHECK(r.kind() == AckKind::kRnrNak);
  CHECK(r.value() == 0x0E);
  CHECK(rnr_timer_us(0) == 655360);
  CHECK(rnr_timer_us(1) == 10);
  CHECK(rnr_timer_us(0x0E) == 1280);
  CHECK(rnr_timer_us(0x1F) == 491520);

  CHECK(Aeth::nak(0, NakCode::kPsnSequenceError).syndrome == 0x60);
  CHECK(Aeth::nak(0, NakCode::kInvalidRequest).syndrome == 0x61);
  CHECK(Aeth::nak(0, NakCode::kRemoteAccessError).syndrome == 0x62);
  CHECK(Aeth::nak(0, NakCode::kRemoteOperationalError).syndrome == 0x63);
  CHECK(Aeth::nak(0, NakCode::kInvalidRdRequest).syndrome == 0x64);
  CHECK(Aeth::nak(0x1000000, NakCode::kInvalidRequest).msn == 0);
  CHECK(Aeth{0x63, 0}.kind() == AckKind::kNak);
  CHECK(Aeth{0x63, 0}.value() == 3);
}

TEST_CASE("OpCode table follows IBA 9.2.1 table 35", "[wire][opcode]") {
  auto rc = [](Op op) { return opcode(Transport::kRc, op); };
  CHECK(rc(Op::kSendOnly) == 0x04);
  CHECK(opcode(Transport::kUc, Op::kWriteOnly) == 0x2A);
  CHECK(opcode(Transport::kRd, Op::kResync) == 0x55);
  CHECK(opcode(Transport::kUd, Op::kSendOnlyImm) == 0x65);

  CHECK(ext_headers(0x04) == kExtNone);
  CHECK(ext_headers(0x05) == kExtImmDt);
  CHECK(ext_headers(0x06) == kExtReth);
  CHECK(ext_headers(0x07) == kExtNone);
  CHECK(ext_headers(0x0B) == (kExtReth | kExtImmDt));
  CHECK(ext_headers(0x0C) == kExtReth);
  CHECK(ext_headers(0x0D) == kExtAeth);
  CHECK(ext_headers(0x0E) == kExtNone);
  CHECK(ext_headers(0x11) == kExtAeth);
  CHECK(ext_headers(0x12) == (kExtAeth | kExtAtomicAckEth));
  CHECK(ext_headers(0x13) == kExtAtomicEth);
  CHECK(ext_headers(0x14) == kExtAtomicEth);
  CHECK(ext_headers(0x16) == kExtIeth);
  CHECK(ext_headers(0x17) == kExtIeth);
  CHECK(ext_headers(0x64) == kExtDeth);
  CHECK(ext_headers(0x65) == (kExtDeth | kExtImmDt));
  CHECK(ext_headers(0x44) == (kExtRdeth | kExtDeth));              // RD SEND Only
  CHECK(ext_headers(0x4C) == (kExtRdeth | kExtDeth | kExtReth));   // RD READ Request
  CHECK(ext_headers(0x51) == (kExtRdeth | kExtAeth));              // RD Acknowledge
  CHECK(ext_headers(0x4E) == kExtRdeth);                           // RD READ resp. Middle
  CHECK(ext_headers(0x55) == (kExtRdeth | kExtDeth));              // RD RESYNC

  CHECK(has_payload(0x00));
  CHECK(has_payload(0x10));
  CHECK_FALSE(has_payload(0x0C));
  CHECK_FALSE(has_payload(0x11));
  CHECK_FALSE(has_payload(0x12));
  CHECK_FALSE(has_payload(0x13));

  REQUIRE(opcode_info(0x0A));
  CHECK(opcode_info(0x0A)->name == "RC RDMA WRITE Only");
  CHECK(opcode_info(0x64)->name == "UD SEND Only");

  // Reserved and unsupported: RC RESYNC, UC READ, UD RDMA, invalidate
  // outside RC, CNP (0x80), XRC (0xA0...), manufacturer-specific.
  for (int opc : {0x15, 0x18, 0x1F, 0x2C, 0x31, 0x36, 0x56, 0x57, 0x60, 0x66, 0x6A, 0x80, 0xA4, 0xC0, 0xFF}) {
    INFO("opcode " << opc);
    CHECK_FALSE(opcode_info(static_cast<std::uint8_t>(opc)));
    CHECK(ext_headers(static_cast<std::uint8_t>(opc)) == kExtNone);
  }
  // 23 RC + 12 UC + 22 RD + 2 UD opcodes.
  int valid = 0;
  for (int i = 0; i < 256; ++i) valid += opcode_info(static_cast<std::uint8_t>(i)) ? 1 : 0;
  CHECK(valid == 59);
}

TEST_CASE("Known packet: RC SEND Only, local", "[wire][packet]") {
  auto wire = vec(kVec1);
  auto p = parse_packet(wire);
  REQUIRE(p.ok());
  CHECK(p->hdr.lrh.lnh == Lnh::kIbaLocal);
  CHECK(p->hdr.lrh.pkt_len == 8);
  CHECK_FALSE(p->hdr.grh);
  CHECK(p->hdr.bth.opcode == 0x04);
  CHECK(p->hdr.bth.pad_cnt == 3);
  CHECK(p->payload.size() == 5);
  CHECK(std::memcmp(p->payload.data(), "hello", 5) == 0);
  CHECK(p->icrc == 0x012D3284u);
  CHECK(p->vcrc == 0x7748u);

  auto built = build_packet(rc_send_only(), bytes("hello"));
  REQUIRE(built.ok());
  CHECK(*built == wire);
}

TEST_CASE("Known packet: UD SEND Only with GRH; variant fields outside the ICRC", "[wire][packet]") {
  auto wire = vec(kVec2);
  auto p = parse_packet(wire);
  INFO((p.ok() ? std::string() : p.error().str()));
  REQUIRE(p.ok());
  REQUIRE(p->hdr.grh);
  CHECK(p->hdr.grh->tclass == 0xA5);
  CHECK(p->hdr.grh->flow_label == 0x12345);
  CHECK(p->hdr.grh->pay_len == 32);
  CHECK(p->hdr.bth.resv8a == 0xC0);
  REQUIRE(p->hdr.deth);
  CHECK(p->hdr.deth->qkey == 0x80010000u);
  CHECK(p->hdr.deth->src_qp == 2);
  CHECK(p->payload.size() == 8);
  CHECK(p->icrc == 0x2B28266Cu);

  // The builder reproduces the bytes from the decoded headers.
  auto built = build_packet(p->hdr, p->payload);
  REQUIRE(built.ok());
  CHECK(*built == wire);

  // Zeroing VL, TClass, FlowLabel, HopLmt, resv8a keeps the ICRC
  // (Python gave 0x2b28266c again) and changes only the VCRC (0x8ee1).
  Headers h = p->hdr;
  h.lrh.vl = 0;
  h.grh->tclass = 0;
  h.grh->flow_label = 0;
  h.grh->hop_lmt = 0;
  h.bth.resv8a = 0;
  auto b2 = build_packet(h, p->payload);
  REQUIRE(b2.ok());
  auto p2 = parse_packet(*b2);
  REQUIRE(p2.ok());
  CHECK(p2->icrc == 0x2B28266Cu);
  CHECK(p2->vcrc == 0x8EE1u);

  // An invariant field (SLID is variant, DGID is not) changes the ICRC.
  h.grh->dgid[15] ^= 1;
  auto b3 = build_packet(h, p->payload);
  REQUIRE(b3.ok());
  CHECK(parse_packet(*b3)->icrc != 0x2B28266Cu);
}

TEST_CASE("Every header round-trips through build_packet and parse_packet", "[wire][packet]") {
  Headers h;
  h.lrh = Lrh{.vl = 2, .lver = 0, .sl = 5, .resv2 = 0, .lnh = Lnh::kIbaLocal, .dlid = 0x10,
              .resv5 = 0, .pkt_len = 0, .slid = 0x20};
  std::vector<std::byte> payload = bytes("0123456789abc");  // 13 bytes -> pad 3

  SECTION("RC RDMA WRITE Only with Immediate") {
    h.bth.opcode = opcode(Transport::kRc, Op::kWriteOnlyImm);
    h.reth = Reth{0xFFFF000011112222, 0x1234, 13};
    h.imm_dt = ImmDt{0xCAFE};
  }
  SECTION("RC CmpSwap") {
    h.bth.opcode = opcode(Transport::kRc, Op::kCompareSwap);
    h.atomic_eth = AtomicEth{0x8000, 7, 1, 2};
    payload.clear();
  }
  SECTION("RC ATOMIC Acknowledge") {
    h.bth.opcode = opcode(Transport::kRc, Op::kAtomicAcknowledge);
    h.aeth = Aeth::ack(9, 3);
    h.atomic_ack_eth = AtomicAckEth{42};
    payload.clear();
  }
  SECTION("RC SEND Last with Invalidate") {
    h.bth.opcode = opcode(Transport::kRc, Op::kSendLastInv);
    h.ieth = Ieth{0x77};
  }
  SECTION("RD SEND Only") {
    h.bth.opcode = opcode(Transport::kRd, Op::kSendOnly);
    h.rdeth = Rdeth{0xABCDEF};
    h.deth = Deth{0x11, 0x22};
  }
  SECTION("UD SEND Only with Immediate, global") {
    h.grh = Grh{};
    h.grh->hop_lmt = 1;
    h.grh->sgid[0] = 0xFE;
    h.grh->dgid[15] = 9;
    h.bth.opcode = opcode(Transport::kUd, Op::kSendOnlyImm);
    h.deth = Deth{0x11, 0x22};
    h.imm_dt = ImmDt{5};
  }

  auto built = build_packet(h, payload);
  REQUIRE(built.ok());
  CHECK(built->size() % 4 == 2);  // whole words plus the VCRC
  auto p = parse_packet(*built);
  REQUIRE(p.ok());
  // The computed fields are the only differences.
  Headers expect = h;
  expect.lrh.lnh = h.grh ? Lnh::kIbaGlobal : Lnh::kIbaLocal;
  expect.lrh.pkt_len = static_cast<std::uint16_t>((built->size() - 2) / 4);
  expect.bth.pad_cnt = static_cast<std::uint8_t>((4 - payload.size() % 4) % 4);
  if (expect.grh) expect.grh->pay_len = static_cast<std::uint16_t>(built->size() - 2 - 48);
  CHECK(p->hdr == expect);
  CHECK(std::vector<std::byte>(p->payload.begin(), p->payload.end()) == payload);
}

TEST_CASE("build_packet refuses headers that do not fit the OpCode", "[wire][packet]") {
  Headers h = rc_send_only();
  h.reth = Reth{};
  auto r = build_packet(h, {});
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == EINVAL);

  Headers ack = rc_send_only();
  ack.bth.opcode = opcode(Transport::kRc, Op::kAcknowledge);
  ack.aeth = Aeth::ack(0, 0);
  CHECK(build_packet(ack, {}).ok());
  CHECK_FALSE(build_packet(ack, bytes("x")).ok());  // ACK carries no payload

  Headers bad = rc_send_only();
  bad.bth.opcode = 0x15;  // RC RESYNC is reserved
  CHECK_FALSE(build_packet(bad, {}).ok());

  std::vector<std::byte> huge(8192);
  CHECK_FALSE(build_packet(rc_send_only(), huge).ok());
  std::vector<std::byte> max(0x7FF * 4 - 8 - 12 - 4);  // largest that fits PktLen
  CHECK(build_packet(rc_send_only(), max).ok());
}

namespace {

// Fix both CRCs after a deliberate header edit, so the test hits the check
// it aims at rather than the CRC check.
void recrc(std::vector<std::byte>& w) {
  std::size_t n = w.size() - 6;
  std::uint32_t i = compute_icrc(std::span<const std::byte>(w).first(n));
  for (int k = 0; k < 4; ++k) w[n + k] = static_cast<std::byte>((i >> (8 * k)) & 0xFF);
  rewrite_vcrc(w);
}

int parse_error(const std::vector<std::byte>& w) {
  auto p = parse_packet(w);
  return p.ok() ? 0 : p.error().code;
}

}  // namespace

TEST_CASE("parse_packet rejects malformed packets", "[wire][packet]") {
  const auto good = vec(kVec1);
  REQUIRE(parse_error(good) == 0);

  SECTION("truncated") {
    for (std::size_t n = 0; n < good.size(); ++n) {
      std::vector<std::byte> w(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(n));
      INFO("length " << n);
      CHECK(parse_error(w) != 0);
    }
  }
  SECTION("datagram longer than PktLen") {
    auto w = good;
    w.push_back(std::byte{0});
    CHECK(parse_error(w) == EMSGSIZE);
  }
  SECTION("wrong PktLen") {
    auto w = good;
    w[5] = std::byte{0x09};
    recrc(w);
    CHECK(parse_error(w) == EMSGSIZE);
  }
  SECTION("PktLen too small for the headers") {
    std::vector<std::byte> w = hex("0002000200040001" "0430ffff0000001280000034");
    w.resize(4 * 4 + 2);
    recrc(w);
    CHECK(parse_error(w) == EPROTO);
  }
  SECTION("raw packets (LNH 0 and 1)") {
    for (std::byte lnh : {std::byte{0x00}, std::byte{0x01}}) {
      auto w = good;
      w[1] = lnh;
      recrc(w);
      CHECK(parse_error(w) == EPROTONOSUPPORT);
    }
  }
  SECTION("LNH says global but no GRH is there") {
    auto w = good;
    w[1] = std::byte{0x03};
    rewrite_vcrc(w);
    CHECK(parse_error(w) == EPROTO);
  }
  SECTION("bad VCRC") {
    auto w = good;
    w.back() ^= std::byte{0x01};
    CHECK(parse_error(w) == EBADMSG);
  }
  SECTION("bad ICRC (payload bit flipped, VCRC repaired as a switch would)") {
    auto w = good;
    w[20] ^= std::byte{0x20};
    rewrite_vcrc(w);
    CHECK(parse_error(w) == EBADMSG);
    auto p = parse_packet(w);
    CHECK(p.error().message.find("ICRC") != std::string::npos);
  }
  SECTION("BTH.TVer not 0") {
    auto w = good;
    w[9] |= std::byte{0x01};
    recrc(w);
    CHECK(parse_error(w) == EPROTONOSUPPORT);
  }
  SECTION("unknown OpCode") {
    auto w = good;
    w[8] = std::byte{0x15};
    recrc(w);
    CHECK(parse_error(w) == EPROTONOSUPPORT);
  }
  SECTION("PadCnt larger than the payload") {
    // SEND Only, PktLen 6 words = LRH + BTH + ICRC: no payload bytes at
    // all, yet PadCnt 3.
    std::vector<std::byte> w = hex("0002000200060001" "0430ffff0000001280000034" "00000000" "0000");
    recrc(w);
    CHECK(parse_error(w) == EPROTO);
  }
  SECTION("payload on an OpCode without payload") {
    auto w = good;
    w[8] = std::byte{0x0C};  // READ Request: needs a RETH (16 bytes), 8 follow the BTH
    recrc(w);
    CHECK(parse_error(w) == EPROTO);
    Headers ack = rc_send_only();
    ack.bth.opcode = opcode(Transport::kRc, Op::kAcknowledge);
    ack.aeth = Aeth::nak(3, NakCode::kRemoteAccessError);
    auto a = *build_packet(ack, {});
    REQUIRE(parse_error(a) == 0);
    // Grow it by a word of "payload".
    a.insert(a.end() - 6, 4, std::byte{0});
    a[5] = static_cast<std::byte>(std::to_integer<unsigned>(a[5]) + 1);
    recrc(a);
    CHECK(parse_error(a) == EPROTO);
  }
  SECTION("headers missing for the OpCode") {
    Headers h = rc_send_only();
    h.bth.opcode = opcode(Transport::kRc, Op::kCompareSwap);
    h.atomic_eth = AtomicEth{};
    auto w = *build_packet(h, {});
    // Cut the AtomicETH to 24 bytes (PktLen one word shorter).
    w.erase(w.begin() + 8 + 12 + 24, w.begin() + 8 + 12 + 28);
    w[5] = static_cast<std::byte>(std::to_integer<unsigned>(w[5]) - 1);
    recrc(w);
    CHECK(parse_error(w) == EPROTO);
  }
  SECTION("GRH PayLen and NxtHdr") {
    auto g = vec(kVec2);
    REQUIRE(parse_error(g) == 0);
    auto w = g;
    w[8 + 5] = std::byte{0x21};
    recrc(w);
    CHECK(parse_error(w) == EMSGSIZE);
    w = g;
    w[8 + 6] = std::byte{0x3B};
    recrc(w);
    CHECK(parse_error(w) == EPROTO);
  }
}

TEST_CASE("rewrite_vcrc repairs the VCRC after a VL change", "[wire][packet]") {
  auto w = vec(kVec1);
  w[0] = std::byte{0x30};  // VL 3: variant, so the ICRC still holds
  CHECK(parse_error(w) == EBADMSG);
  rewrite_vcrc(w);
  auto p = parse_packet(w);
  REQUIRE(p.ok());
  CHECK(p->hdr.lrh.vl == 3);
  CHECK(p->icrc == 0x012D3284u);
}
