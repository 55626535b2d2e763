// The CM MAD codec (src/cm/wire): every message against a byte string
// written by hand from its IBA table (IBA 12.6.5 - 12.6.11, 12.8.1,
// 12.8.2, 12.11.1, 12.11.2; Byte[Bit] positions counted in the 232-byte
// data area after the 24-byte common header), then decoded back; each
// malformed case decode() refuses; the ClassPortInfo answer; and every
// message inside a real IBA packet (LRH, BTH, DETH to QP1) decoded by
// tshark as the CM message it is.
#include <catch2/catch.hpp>

#include <filesystem>
#include <set>
#include <string>
#include <string_view>
#include <unistd.h>

#include "cm/wire.hpp"
#include "hex_bytes.hpp"
#include "gmp_capture.hpp"
#include "tshark.hpp"

using namespace openib;
using namespace openib::cm;

using openib::test::hex;

namespace {

constexpr std::uint64_t kTid = 0x0102030405060708ull;

// The common header of a CM Send (IBA 13.4.2): base version 1, class 0x07,
// class version 2, method 0x03, status 0, class specific 0, the TID above,
// attribute `attr` (4 hex digits), reserved 0, modifier 0.
std::string send_header(std::string_view attr) {
  return "01 07 02 03 0000 0000 0102030405060708 " + std::string(attr) + " 0000 00000000";
}
// n zero bytes, in hex.
std::string zeros(std::size_t n) { return std::string(2 * n, '0'); }

// Private data as the tests set it: first byte 0xA5, last 0x5A, the rest 0.
template <std::size_t N>
void mark(std::array<std::uint8_t, N>& pd) {
  pd.front() = 0xA5;
  pd.back() = 0x5A;
}
// The whole expected MAD: `header`, then `fixed` (the data area from Byte 0
// up to the private data), then private data of `pd_bytes` marked as above.
ByteVec expected(const std::string& header, const std::string& fixed, std::size_t pd_bytes) {
  ByteVec out = hex(header);
  REQUIRE(out.size() == kDataOff);
  const ByteVec f = hex(fixed);
  REQUIRE(f.size() == kDataBytes - pd_bytes);
  out.insert(out.end(), f.begin(), f.end());
  out.resize(mad::kMadBytes);
  out[kDataOff + f.size()] = std::byte{0xA5};
  out[mad::kMadBytes - 1] = std::byte{0x5A};
  return out;
}

// Encodes m, compares with `want`, decodes back.
void round_trip(const Message& m, const ByteVec& want) {
  const ByteVec got = encode(m, kTid);
  REQUIRE(got.size() == mad::kMadBytes);
  CHECK(got == want);
  auto d = decode(got);
  REQUIRE(d.ok());
  CHECK(d->tid == kTid);
  CHECK(d->attr_id == attr_id_of(m));
  CHECK(d->msg == m);
}

Gid gid(std::uint64_t guid) {
  Gid g{0xfe, 0x80};
  for (int i = 0; i < 8; ++i) g[15 - i] = static_cast<std::uint8_t>(guid >> (8 * i));
  return g;
}

Req sample_req() {
  Req r;
  r.local_comm_id = 0x11223344;
  r.service_id = 0x0000000001064E21ull;  // RDMA CM's TCP port space, port 20001
  r.local_ca_guid = 0x0002C90300A1B2C3ull;
  r.local_qkey = 0x12345678;
  r.local_qpn = 0x000123;
  r.responder_resources = 4;
  r.initiator_depth = 3;
  r.remote_cm_response_timeout = 20;
  r.transport_service_type = transport::kRc;
  r.end_to_end_flow_control = true;
  r.starting_psn = 0xABCDEF;
  r.local_cm_response_timeout = 18;
  r.retry_count = 7;
  r.pkey = 0xFFFF;
  r.path_mtu = 5;
  r.rnr_retry_count = 7;
  r.max_cm_retries = 15;
  r.srq = true;
  // CmPath: local/remote LID, local/remote GID, flow label, packet rate,
  // traffic class, hop limit, SL, subnet local, local ACK timeout.
  r.primary = {1, 2, gid(0x0002C90300A1B2C3ull), gid(0x0002C90300D4E5F6ull), 0x12345, 3, 0x20, 0x40, 5, true, 14};
  r.has_alternate = true;
  r.alternate = {3, 4, gid(0x0002C90300A1B2C4ull), gid(0x0002C90300D4E5F7ull), 0, 2, 0, 0, 0, true, 15};
  r.sap_supported = true;
  mark(r.private_data);
  return r;
}
// IBA 12.6.5, Byte 0 .. 139.
const std::string kReqFixed =
    "11223344 00000000"                      // 0 local comm ID, 4 reserved
    "0000000001064E21"                       // 8 service ID
    "0002C90300A1B2C3"                       // 16 local CA GUID
    "00000000 12345678"                      // 24 reserved, 28 local Q_Key
    "000123 04"                              // 32 local QPN, 35 responder resources
    "000000 03"                              // 36 local EECN, 39 initiator depth
    "000000 A1"                              // 40 remote EECN; 43: timeout 20 | RC 0 | E2E 1
    "ABCDEF 97"                              // 44 starting PSN; 47: timeout 18 | retry 7
    "FFFF 57 F8"                             // 48 P_Key; 50: MTU 5 | RDC 0 | RNR 7; 51: CM retries 15 | SRQ 1 | ext 0
    "0001 0002"                              // 52 primary local / remote LID
    "FE80000000000000 0002C90300A1B2C3"      // 56 primary local GID
    "FE80000000000000 0002C90300D4E5F6"      // 72 primary remote GID
    "12345003"                               // 88 flow label 0x12345 | rsvd | packet rate 3
    "20 40 58 70"                            // 92 TC, 93 hop limit, 94 SL 5 | subnet local, 95 ACK timeout 14
    "0003 0004"                              // 96 alternate local / remote LID
    "FE80000000000000 0002C90300A1B2C4"      // 100 alternate local GID
    "FE80000000000000 0002C90300D4E5F7"      // 116 alternate remote GID
    "00000002"                               // 132 flow label 0, packet rate 2
    "00 00 08 7C";                           // 136 TC, HL, SL 0 | subnet local, 139 ACK timeout 15 | SAP

Rej sample_rej() {
  Rej j;
  j.local_comm_id = 0x0A0B0C0D;
  j.remote_comm_id = 0x01020304;
  j.message_rejected = MsgRejected::kRep;
  j.ari_length = 16;
  j.reason = RejReason::kConsumerReject;
  j.ari[0] = 0xEE;
  j.ari[15] = 0xFF;
  mark(j.private_data);
  return j;
}

Lap sample_lap() {
  Lap l;
  l.local_comm_id = 0x11223344;
  l.remote_comm_id = 0x33333333;
  l.remote_qpn_eecn = 0x000123;
  l.remote_cm_response_timeout = 20;
  l.alternate = {5, 6, gid(0x0002C90300A1B2C5ull), gid(0x0002C90300D4E5F8ull), 0xABCDE, 6, 0x12, 0x40, 3, false, 19};
  mark(l.private_data);
  return l;
}

SidrRep sample_sidr_rep() {
  SidrRep s;
  s.request_id = 0x55667788;
  s.status = SidrStatus::kRedirect;
  s.add_info_length = 72;
  s.qpn = 0x000789;
  s.service_id = 0x0000000001114E21ull;
  s.qkey = 0x0000CAFE;
  s.class_port_info[0] = 0x01;
  s.class_port_info[1] = 0x02;
  s.class_port_info[71] = 0x77;
  mark(s.private_data);
  return s;
}

// One of each message (the tshark check's frames).
std::vector<Message> one_of_each() {
  Mra mra{0x11111111, 0x22222222, MsgMraed::kRep, 21, {}};
  Rep rep;
  rep.local_comm_id = 0x33333333;
  rep.remote_comm_id = 0x11223344;
  rep.local_qkey = 0x01020304;
  rep.local_qpn = 0x000456;
  rep.starting_psn = 0x654321;
  rep.responder_resources = 4;
  rep.initiator_depth = 4;
  rep.target_ack_delay = 15;
  rep.failover_accepted = 1;
  rep.end_to_end_flow_control = true;
  rep.rnr_retry_count = 7;
  rep.srq = true;
  rep.local_ca_guid = 0x0002C90300D4E5F6ull;
  Rtu rtu{0x11223344, 0x33333333, {}};
  Dreq dreq{0x11223344, 0x33333333, 0x000456, {}};
  Drep drep{0x33333333, 0x11223344, {}};
  SidrReq sreq{0x55667788, 0x8001, 0x0000000001114E21ull, {}};
  Apr apr{0x33333333, 0x11223344, 0, AprStatus::kUnsupported, {}, {}};
  return {sample_req(), mra, sample_rej(), rep, rtu, dreq, drep, sreq, sample_sidr_rep(), sample_lap(), apr};
}

// Flips one field of an encoded message: Byte `byte` of the data area.
ByteVec with_data_byte(const Message& m, std::size_t byte, std::uint8_t v) {
  ByteVec b = encode(m, kTid);
  b[kDataOff + byte] = std::byte{v};
  return b;
}

void expect_error(const ByteVec& mad, int code, std::string_view words) {
  auto d = decode(mad);
  REQUIRE_FALSE(d.ok());
  INFO(d.error().message);
  CHECK(d.error().code == code);
  CHECK(d.error().message.find(words) != std::string::npos);
}

}  // namespace

TEST_CASE("REQ: IBA 12.6.5's layout, both paths, private data at Byte 140", "[cm]") {
  round_trip(sample_req(), expected(send_header("0010"), kReqFixed, pdata::kReq));
}

TEST_CASE("REQ without an alternate path: its 44 bytes are 0, and read back as none", "[cm]") {
  Req r = sample_req();
  r.has_alternate = false;
  r.alternate = {};
  r.sap_supported = false;
  std::string fixed = kReqFixed.substr(0, kReqFixed.find("0003 0004"));
  fixed += zeros(44);
  round_trip(r, expected(send_header("0010"), fixed, pdata::kReq));
  // An alternate local LID of 0 means "no alternate path", whatever the
  // rest of the (then meaningless) bytes hold.
  ByteVec b = encode(r, kTid);
  b[kDataOff + 100] = std::byte{0xFE};
  auto d = decode(b);
  REQUIRE(d.ok());
  CHECK(std::get<Req>(d->msg) == r);
}

TEST_CASE("MRA: IBA 12.6.6", "[cm]") {
  Mra m{0x11111111, 0x22222222, MsgMraed::kRep, 21, {}};
  mark(m.private_data);
  // 8: MRAed 1 (REP) in bits 7:6; 9: service timeout 21 in bits 7:3.
  round_trip(m, expected(send_header("0011"), "11111111 22222222 40 A8", pdata::kMra));
}

TEST_CASE("REJ: IBA 12.6.7, reason, ARI length and ARI", "[cm]") {
  // 8: REP rejected (1) in bits 7:6; 9: ARI length 16 in bits 7:1; 10:
  // reason 28 (consumer reject); 12: 72 bytes of ARI.
  const std::string fixed = "0A0B0C0D 01020304 40 20 001C EE" + zeros(14) + "FF" + zeros(56);
  round_trip(sample_rej(), expected(send_header("0012"), fixed, pdata::kRej));
}

TEST_CASE("REP: IBA 12.6.8", "[cm]") {
  Rep rep = std::get<Rep>(one_of_each()[3]);
  mark(rep.private_data);
  const std::string fixed =
      "33333333 11223344 01020304"   // IDs, local Q_Key
      "00045600 00000000 65432100"   // local QPN, EECN, starting PSN (each + a reserved byte)
      "04 04 7B F0"                  // resources, depth; 26: ACK delay 15 | failover 1 | E2E; 27: RNR 7 | SRQ
      "0002C90300D4E5F6";            // 28 local CA GUID
  round_trip(rep, expected(send_header("0013"), fixed, pdata::kRep));
}

TEST_CASE("RTU, DREQ, DREP: IBA 12.6.9 - 12.6.11", "[cm]") {
  Rtu rtu{0x11223344, 0x33333333, {}};
  mark(rtu.private_data);
  round_trip(rtu, expected(send_header("0014"), "11223344 33333333", pdata::kRtu));
  Dreq dreq{0x11223344, 0x33333333, 0x000456, {}};
  mark(dreq.private_data);
  round_trip(dreq, expected(send_header("0015"), "11223344 33333333 00045600", pdata::kDreq));
  Drep drep{0x33333333, 0x11223344, {}};
  mark(drep.private_data);
  round_trip(drep, expected(send_header("0016"), "33333333 11223344", pdata::kDrep));
}

TEST_CASE("SIDR_REQ and SIDR_REP: IBA 12.11.1, 12.11.2", "[cm]") {
  SidrReq q{0x55667788, 0x8001, 0x0000000001114E21ull, {}};
  mark(q.private_data);
  round_trip(q, expected(send_header("0017"), "55667788 8001 0000 0000000001114E21", pdata::kSidrReq));
  // 4 status 4 (redirect), 5 additional info length 72, 8 QPN, 12 service
  // ID, 20 Q_Key, 24 the 72-byte ClassPortInfo.
  const std::string fixed =
      "55667788 04 48 0000 00078900 0000000001114E21 0000CAFE 0102" + zeros(69) + "77";
  round_trip(sample_sidr_rep(), expected(send_header("0018"), fixed, pdata::kSidrRep));
}

TEST_CASE("LAP and APR: IBA 12.8.1, 12.8.2", "[cm]") {
  const std::string lap =
      "11223344 33333333 00000000"   // IDs, reserved
      "000123 A0 00000000"           // remote QPN; 15: timeout 20 | rsvd; reserved
      "0005 0006"                    // 20 alternate local / remote LID
      "FE80000000000000 0002C90300A1B2C5"
      "FE80000000000000 0002C90300D4E5F8"
      "ABCDE0 12"                    // 56 flow label 0xABCDE | rsvd, 59 TC
      "40 06 30 98";                 // 60 hop limit, 61 packet rate 6, 62 SL 3, 63 ACK timeout 19
  round_trip(sample_lap(), expected(send_header("0019"), lap, pdata::kLap));
  Apr apr{0x33333333, 0x11223344, 2, AprStatus::kUnsupported, {}, {}};
  apr.add_info[0] = 0xAB;
  apr.add_info[1] = 0xCD;
  mark(apr.private_data);
  round_trip(apr, expected(send_header("001A"), "33333333 11223344 02 02 0000 ABCD" + zeros(70), pdata::kApr));
}

TEST_CASE("decode() refuses what is no CM Send MAD", "[cm]") {
  const ByteVec good = encode(sample_req(), kTid);
  expect_error(ByteVec(good.begin(), good.end() - 1), EBADMSG, "255 bytes");
  auto with = [&](std::size_t off, std::uint8_t v) {
    ByteVec b = good;
    b[off] = std::byte{v};
    return b;
  };
  expect_error(with(0, 2), EBADMSG, "base version");
  expect_error(with(1, 0x03), EBADMSG, "management class");
  expect_error(with(2, 1), EBADMSG, "class version");
  expect_error(with(3, 0x81), EBADMSG, "method");
  expect_error(with(17, 0x20), EPROTONOSUPPORT, "0x0020");
  expect_error(with(17, 0x01), EPROTONOSUPPORT, "0x0001");  // ClassPortInfo is no Send
  // Longer is fine (a receive buffer): the MAD is the first 256 bytes.
  ByteVec longer = good;
  longer.resize(300, std::byte{0xFF});
  CHECK(decode(longer).ok());
}

TEST_CASE("decode() refuses reserved and forbidden field values", "[cm]") {
  const Req req = sample_req();
  // TransportServiceType 3 needs ExtendedTransportType 1 (XRC).
  expect_error(with_data_byte(req, 43, 0xA7), EBADMSG, "extended transport type");
  {
    ByteVec xrc = with_data_byte(req, 43, 0xA7);
    xrc[kDataOff + 51] = std::byte{0xF9};
    auto d = decode(xrc);
    REQUIRE(d.ok());
    CHECK(std::get<Req>(d->msg).transport_service_type == transport::kExtended);
    CHECK(std::get<Req>(d->msg).extended_transport_type == transport::kExtXrc);
  }
  {
    ByteVec b = encode(req, kTid);
    b[kDataOff + 52] = b[kDataOff + 53] = std::byte{0};
    expect_error(b, EBADMSG, "primary local port LID");
    b = encode(req, kTid);
    b[kDataOff + 54] = b[kDataOff + 55] = std::byte{0};
    expect_error(b, EBADMSG, "primary remote port LID");
    b = encode(req, kTid);
    b[kDataOff + 98] = b[kDataOff + 99] = std::byte{0};
    expect_error(b, EBADMSG, "alternate remote port LID");
  }
  expect_error(with_data_byte(req, 50, 0x07), EBADMSG, "MTU 0");
  expect_error(with_data_byte(req, 50, 0x67), EBADMSG, "MTU 6");

  Mra mra{1, 2, MsgMraed::kReq, 0, {}};
  expect_error(with_data_byte(mra, 8, 0xC0), EBADMSG, "message MRAed");
  const Rej rej = sample_rej();
  expect_error(with_data_byte(rej, 8, 0xC0), EBADMSG, "message rejected");
  expect_error(with_data_byte(rej, 9, 73 << 1), EBADMSG, "ARI length (> 72) 73");
  CHECK(decode(with_data_byte(rej, 9, 72 << 1)).ok());
  expect_error(with_data_byte(sample_sidr_rep(), 5, 73), EBADMSG, "additional information length");
  Apr apr{1, 2, 0, AprStatus::kSuccess, {}, {}};
  expect_error(with_data_byte(apr, 8, 73), EBADMSG, "additional information length");
  {
    ByteVec b = encode(sample_lap(), kTid);
    b[kDataOff + 20] = b[kDataOff + 21] = std::byte{0};
    expect_error(b, EBADMSG, "LAP: alternate local port LID");
  }
}

TEST_CASE("Reserved bits are written 0 and ignored on reading", "[cm]") {
  const Rep rep = std::get<Rep>(one_of_each()[3]);
  ByteVec b = encode(rep, kTid);
  b[kDataOff + 15] = std::byte{0xFF};  // reserved byte after the local QPN
  b[kDataOff + 27] |= std::byte{0x0F};  // reserved bits after SRQ
  auto d = decode(b);
  REQUIRE(d.ok());
  CHECK(std::get<Rep>(d->msg) == rep);
}

TEST_CASE("ClassPortInfo: the GetResp to a Get (IBA 13.4.8.1)", "[cm]") {
  const ByteVec get = hex("01 07 02 01 0000 0000 1122334455667788 0001 0000 00000000") ;
  ByteVec req = get;
  req.resize(mad::kMadBytes);
  auto r = class_port_info_response(req, 18);
  REQUIRE(r.ok());
  // GetResp, same TID; BaseVersion 1, ClassVersion 2, CapabilityMask RC
  // (bit 9) | UC (12) | SIDR (13), CapabilityMask2 0 | RespTimeValue 18.
  ByteVec want = hex("01 07 02 81 0000 0000 1122334455667788 0001 0000 00000000  01 02 3200 00000012");
  want.resize(mad::kMadBytes);
  CHECK(*r == want);
  CHECK(class_port_info_response(req, 18, cm_cap::kRc)->at(kDataOff + 2) == std::byte{0x02});

  ByteVec wrong = req;
  wrong[17] = std::byte{0x10};
  CHECK(class_port_info_response(wrong, 18).error().code == EBADMSG);
  wrong = req;
  wrong[3] = std::byte{0x03};
  CHECK(class_port_info_response(wrong, 18).error().code == EBADMSG);
  CHECK(class_port_info_response(get, 18).error().code == EBADMSG);  // 24 bytes
}

TEST_CASE("Names and timeouts", "[cm]") {
  CHECK(std::string(attr_name(attr::kReq)) == "REQ");
  CHECK(std::string(attr_name(attr::kApr)) == "APR");
  CHECK(std::string(attr_name(0x0099)) == "unknown");
  CHECK(std::string(rej_reason_name(28)) == "consumer reject");
  CHECK(std::string(rej_reason_name(1)) == "no QP available");
  CHECK(std::string(rej_reason_name(35)) == "vendor option not supported");
  CHECK(std::string(rej_reason_name(0)) == "unknown");
  CHECK(std::string(rej_reason_name(34)) == "unknown");
  CHECK(std::string(rej_reason_name(0xFFFF)) == "unknown");
  // 4.096 us * 2^t (IBA 12.7.34): t 20 is about 4.3 s, t 31 about 2.4 hours.
  CHECK(cm_timeout_ns(0) == 4096);
  CHECK(cm_timeout_ns(20) == 4096ull << 20);
  CHECK(cm_timeout_ns(31) == 4096ull << 31);
  CHECK(cm_timeout_ns(200) == 4096ull << 31);
}

TEST_CASE("Every CM message in an IBA packet is decoded by tshark as that message", "[cm][tshark]") {
  const openib::test::GmpCapture capture("openib_cm_wire");
  const auto msgs = one_of_each();
  // The eleven messages, then the GetResp(ClassPortInfo) to a Get.
  std::vector<ByteVec> mads;
  for (std::size_t i = 0; i < msgs.size(); ++i) mads.push_back(encode(msgs[i], kTid + i));
  {
    ByteVec get = hex("01 07 02 01 0000 0000 0102030405060713 0001 0000 00000000");
    get.resize(mad::kMadBytes);
    auto cpi = class_port_info_response(get, 18);
    REQUIRE(cpi.ok());
    mads.push_back(*cpi);
  }
  capture.write(mads);
  const std::string tshark = capture.tshark();
  int status = 0;
  auto out = openib::test::run_command(
      tshark + " -T fields -E separator=, -e infiniband.mad.mgmtclass -e infiniband.mad.attributeid"
               " -e infiniband.mad.transactionid -e _ws.malformed -e infiniband.cm.req"
               " -e infiniband.cm.req.serviceid -e infiniband.cm.req.localqpn -e infiniband.cm.rej.reason"
               " -e infiniband.cm.rep.localqpn -e infiniband.cm.req.remoteqpneecn",
      status);
  INFO(out);
  REQUIRE(status == 0);
  std::vector<std::string> lines;
  for (std::size_t pos = 0, nl; (nl = out.find('\n', pos)) != std::string::npos; pos = nl + 1)
    lines.push_back(out.substr(pos, nl - pos));
  REQUIRE(lines.size() == mads.size());
  for (std::size_t i = 0; i < msgs.size(); ++i) {
    INFO(attr_name(attr_id_of(msgs[i])));
    char want[64];
    std::snprintf(want, sizeof want, "0x07,0x%04x,0x%016llx,", attr_id_of(msgs[i]),
                  static_cast<unsigned long long>(kTid + i));
    CHECK(lines[i].rfind(want, 0) == 0);  // and _ws.malformed empty
  }
  // Fields read back as encoded: the REQ's local comm ID, service ID and
  // local QPN; the REJ's reason; the REP's local QPN; the DREQ's remote QPN.
  CHECK(lines[0].find(",0x11223344,0x0000000001064e21,0x000123,") != std::string::npos);
  CHECK(lines[2].find(",0x001c,") != std::string::npos);  // reason 28
  CHECK(lines[3].find(",0x000456,") != std::string::npos);
  CHECK(lines[5].find(",0x000456") == lines[5].size() - 9);
  CHECK(lines[11].rfind("0x07,0x0001,0x0102030405060713,", 0) == 0);

  // (tshark 4.0 reads the REQ's flow label and packet rate from the wrong
  // bytes, and dissects no field of MRA, SIDR_*, LAP, APR: those are
  // compared above by their attribute ID and TID only.)

  // tshark's summary line names the CM message of each frame.
  auto info = openib::test::run_command(tshark + " -T fields -e _ws.col.Info", status);
  INFO(info);
  REQUIRE(status == 0);
  const char* names[] = {"ConnectRequest", "MsgRcptAck", "ConnectReject", "ConnectReply",
                         "ReadyToUse", "DisconnectRequest", "DisconnectReply", "ServiceIDResReq",
                         "ServiceIDResReqResp", "LoadAlternatePath", "AlternatePathResponse"};
  std::size_t pos = 0;
  for (const char* n : names) {
    const std::string line = "CM: " + std::string(n) + "\n";
    const auto at = info.find(line, pos);
    CHECK(at == pos);
    if (at != std::string::npos) pos = at + line.size();
  }
  auto expert = openib::test::run_command(tshark + " -q -z expert", status);
  INFO(expert);
  REQUIRE(status == 0);
  for (const char* sev : {"Errors (", "Warns ("}) CHECK(expert.find(sev) == std::string::npos);
}
