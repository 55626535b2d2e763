// IPoIB connected mode's wire pieces (src/ipoib_tap/cm_wire.hpp; RFC 4755
// §3.5, §6): the service ID a REQ names and the 8 bytes of private data
// of the REQ and REP, against byte strings written from the RFC's layout
// and what Linux's ipoib_cm sends (its UD QPN, receive MTU 65524).
#include <catch2/catch.hpp>

#include "ipoib_fixture.hpp"
#include "ipoib_tap/cm_wire.hpp"

using namespace openib::test::ipoib;

TEST_CASE("The IPoIB-CM service ID is 0x10000000_00 and the UD QPN, and only such IDs name a QPN", "[ipoib-cm]") {
  CHECK(cm_service_id(0x48) == 0x1000000000000048ULL);
  CHECK(cm_service_id(0xABCDEF) == 0x1000000000ABCDEFULL);
  CHECK(cm_service_id(0x12345678) == 0x1000000000345678ULL);  // 24 bits of QPN
  CHECK(cm_service_qpn(cm_service_id(0x48)) == 0x48u);
  CHECK(cm_service_qpn(0x1000000000FFFFFFULL) == 0xFFFFFFu);
  // Other services: the RDMA CM's TCP port space (port 20001), an ID one
  // bit above the QPN, one bit off in the top byte, and 0.
  CHECK_FALSE(cm_service_qpn(0x0000000001064E21ULL));
  CHECK_FALSE(cm_service_qpn(0x1000000001000048ULL));
  CHECK_FALSE(cm_service_qpn(0x3000000000000048ULL));
  CHECK_FALSE(cm_service_qpn(0));
  CHECK((kCmServiceIdBase & ~kCmServiceIdMask) == 0);
  CHECK((0xFFFFFFULL & kCmServiceIdMask) == 0);
}

TEST_CASE("IPoIB-CM private data: the UD QPN and the receive MTU, big-endian, as Linux sends them", "[ipoib-cm]") {
  CHECK(kCmMtu == 65520);
  CHECK(kCmBufBytes == 65524);
  CHECK(kHwFlagRc == 0x80);
  CHECK(kHwFlagUc == 0x40);
  const auto b = encode_cm_private_data({0x000048, kCmBufBytes});
  CHECK(bytes(b) == hx("00000048 0000FFF4"));
  CHECK(bytes(encode_cm_private_data({0xABCDEF, 2048})) == hx("00ABCDEF 00000800"));
  // The reserved byte stays 0 whatever the caller's high bits.
  CHECK(bytes(encode_cm_private_data({0x7F000049, 4096})) == hx("00000049 00001000"));

  // A REQ's 92 bytes of private data: the 8, then the CM's zero padding.
  Bytes req = hx("00000049 0000FFF4");
  req.resize(92);
  auto d = decode_cm_private_data(req);
  REQUIRE(d.ok());
  CHECK(d->qpn == 0x49);
  CHECK(d->mtu == 65524);
  // Exactly 8 bytes, and what follows them, whatever it is, is not read.
  Bytes rep = hx("00012345 00000A00 DEADBEEF");
  auto r = decode_cm_private_data(rep);
  REQUIRE(r.ok());
  CHECK(*r == CmPrivateData{0x12345, 2560});
  CHECK(decode_cm_private_data(std::span(rep).first(8)).ok());
  // Round trip over the range.
  for (std::uint32_t qpn : {2u, 0x48u, 0xFFFFFEu})
    for (std::uint32_t mtu : {kCmMinMtu, 2048u, kCmBufBytes, 0xFFFFFFFFu}) {
      auto e = encode_cm_private_data({qpn, mtu});
      auto back = decode_cm_private_data(e);
      REQUIRE(back.ok());
      CHECK(*back == CmPrivateData{qpn, mtu});
    }
}

namespace {
void expect_refused(const Bytes& in, const std::string& why) {
  auto r = decode_cm_private_data(in);
  INFO(why);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == EBADMSG);
  INFO(r.error().message);
  CHECK(r.error().message.find(why) != std::string::npos);
}
}  // namespace

TEST_CASE("Malformed IPoIB-CM private data is refused with EBADMSG naming what is wrong", "[ipoib-cm]") {
  for (std::size_t n = 0; n < kCmPrivateDataBytes; ++n) expect_refused(Bytes(n, 0x11), "bytes, need 8");
  expect_refused(hx("01000048 0000FFF4"), "reserved byte");
  expect_refused(hx("80000048 0000FFF4"), "reserved byte");
  expect_refused(hx("00000000 0000FFF4"), "UD QPN 0x0");
  expect_refused(hx("00000001 0000FFF4"), "UD QPN 0x1");
  expect_refused(hx("00FFFFFF 0000FFF4"), "UD QPN 0xffffff");
  expect_refused(hx("00000048 00000000"), "receive MTU 0");
  expect_refused(hx("00000048 00000004"), "receive MTU 4");  // Linux's own limit: nothing fits
  expect_refused(hx("00000048 00000243"), "receive MTU 579");
  CHECK(decode_cm_private_data(hx("00000048 00000244")).ok());  // 576 + 4
  CHECK(decode_cm_private_data(hx("00000002 00000244")).ok());
}
