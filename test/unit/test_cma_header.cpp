// src/cma/header.hpp (docs/cma.md "Wire"): the RDMA CM's service IDs, its
// 36-byte header against bytes written by hand from struct cma_hdr's
// layout (cma.c) and decoded back, each decode error, the MGIDs of
// cma_set_mgid worked out by hand from RFC 4391 §4, and the header in a
// REQ's private data as tshark's "IP CM" dissector reads it.
#include <catch2/catch.hpp>

#include <string>

#include <sys/socket.h>

#include "cm/wire.hpp"
#include "cma/header.hpp"
#include "cma_addr.hpp"
#include "gmp_capture.hpp"
#include "hex_bytes.hpp"
#include "tshark.hpp"

using namespace openib;
using namespace openib::cma;
using openib::test::ip;

namespace {

std::vector<std::uint8_t> u8(std::string_view h) {
  std::vector<std::uint8_t> out;
  for (std::byte b : openib::test::hex(h)) out.push_back(std::to_integer<std::uint8_t>(b));
  return out;
}

std::array<std::uint8_t, 16> gid(std::string_view h) {
  const auto b = u8(h);
  REQUIRE(b.size() == 16);
  std::array<std::uint8_t, 16> g{};
  std::copy(b.begin(), b.end(), g.begin());
  return g;
}

std::vector<std::uint8_t> header(const Addr& src, const Addr& dst) {
  std::array<std::uint8_t, kHeaderBytes> out{};
  out.fill(0xEE);  // every byte must be written
  encode_header(out, src, dst);
  return {out.begin(), out.end()};
}

// 198.18.0.1:40000 -> 198.18.0.2:7174 and [fd00::1]:4660 -> [fd00::2]:7174.
const Addr kSrc4 = ip("198.18.0.1", 40000), kDst4 = ip("198.18.0.2", 7174);
const Addr kSrc6 = ip("fd00::1", 0x1234), kDst6 = ip("fd00::2", 7174);
// struct cma_hdr: version, ip_version << 4, source port, then the source
// and destination as union cma_ip_addr (IPv4: 12 zero bytes, then it).
const std::string kHdr4 =
    "00 40 9C40"
    "000000000000000000000000 C6120001"
    "000000000000000000000000 C6120002";
const std::string kHdr6 =
    "00 60 1234"
    "FD000000000000000000000000000001"
    "FD000000000000000000000000000002";

void expect_error(const Result<Header>& r, int code) {
  REQUIRE_FALSE(r.ok());
  INFO(r.error().message);
  CHECK(r.error().code == code);
  CHECK_FALSE(r.error().message.empty());
}

}  // namespace

TEST_CASE("Service IDs: (port space << 16) + port, and back", "[cma]") {
  CHECK(service_id(kPsTcp, 7174) == 0x0000000001061C06ull);
  CHECK(service_id(kPsUdp, 7174) == 0x0000000001111C06ull);
  CHECK(service_id(kPsIpoib, 1) == 0x0000000000020001ull);
  CHECK(service_id(kPsIb, 0xFFFF) == 0x00000000013FFFFFull);
  CHECK(split_service_id(0x0000000001061C06ull) == std::pair<std::uint16_t, std::uint16_t>{kPsTcp, 7174});
  CHECK(split_service_id(0x0000000001110000ull) == std::pair<std::uint16_t, std::uint16_t>{kPsUdp, 0});
  CHECK(split_service_id(0x000000000002FFFFull) == std::pair<std::uint16_t, std::uint16_t>{kPsIpoib, 0xFFFF});
  // The IB port space's IDs of an IP-addressed id too (as Linux's); other IDs are not the RDMA CM's.
  CHECK(split_service_id(0x00000000013F1C06ull) == std::pair<std::uint16_t, std::uint16_t>{kPsIb, 7174});
  CHECK_FALSE(split_service_id(0x0000000101061C06ull));
  CHECK_FALSE(split_service_id(0x1000000000000001ull));
  CHECK(carries_header(kPsTcp));
  CHECK(carries_header(kPsUdp));
  CHECK(carries_header(kPsIpoib));
  CHECK(carries_header(kPsIb));
  CHECK(kUdpQkey == 0x01234567u);
}

TEST_CASE("Addresses print as host:port, wildcards are recognised", "[cma]") {
  CHECK(kSrc4.str() == "198.18.0.1:40000");
  CHECK(ip("fd00::1", 7174).str() == "[fd00::1]:7174");
  CHECK(ip("0.0.0.0", 1).any());
  CHECK(ip("::", 1).any());
  CHECK_FALSE(kSrc4.any());
  CHECK_FALSE(kSrc6.any());
  Addr v4 = ip("0.0.0.0", 1);
  v4.addr[4] = 1;  // past the IPv4 address: not part of it
  CHECK(v4.any());
}

TEST_CASE("The CMA header of IPv4 and IPv6 endpoints: bytes and back", "[cma]") {
  SECTION("IPv4") {
    CHECK(header(kSrc4, kDst4) == u8(kHdr4));
    auto h = decode_header(u8(kHdr4), service_id(kPsTcp, 7174));
    REQUIRE(h.ok());
    CHECK(h->src == kSrc4);
    CHECK(h->dst == kDst4);
  }
  SECTION("IPv6") {
    CHECK(header(kSrc6, kDst6) == u8(kHdr6));
    auto h = decode_header(u8(kHdr6), service_id(kPsUdp, 7174));
    REQUIRE(h.ok());
    CHECK(h->src == kSrc6);
    CHECK(h->dst == kDst6);
  }
  SECTION("the destination port is the service ID's, not encoded") {
    Addr other = kDst4;
    other.port = 1;
    CHECK(header(kSrc4, other) == u8(kHdr4));
    auto h = decode_header(u8(kHdr4), service_id(kPsIpoib, 5555));
    REQUIRE(h.ok());
    CHECK(h->dst.port == 5555);
  }
  SECTION("the consumer's private data after the header is left alone") {
    auto pd = u8(kHdr4 + "A5A5");
    auto h = decode_header(pd, service_id(kPsTcp, 7174));
    REQUIRE(h.ok());
    CHECK(h->src == kSrc4);
  }
}

TEST_CASE("The CMA header's decode errors", "[cma]") {
  const std::uint64_t sid = service_id(kPsTcp, 7174);
  auto pd = u8(kHdr4);
  expect_error(decode_header(std::span(pd).first(kHeaderBytes - 1), sid), EBADMSG);
  expect_error(decode_header({}, sid), EBADMSG);
  expect_error(decode_header(pd, 0x0000000101061C06ull), EINVAL);
  auto bad = pd;
  bad[0] = 0x10;
  expect_error(decode_header(bad, sid), EPROTONOSUPPORT);
  for (std::uint8_t ipv : {0x00, 0x50, 0x70, 0xF0}) {
    bad = pd;
    bad[1] = ipv;
    INFO(int{ipv});
    expect_error(decode_header(bad, sid), EAFNOSUPPORT);
  }
}

TEST_CASE("Multicast MGIDs as cma_set_mgid makes them", "[cma]") {
  // RFC 4391 §4: ff1<scope 2>:<401b | 601b>:<P_Key>, then the group's low
  // 28 (IPv4) or 80 (IPv6) bits; the UDP port space puts 01 in byte 3.
  const Addr v4 = ip("224.1.2.3", 0);
  CHECK(*mgid_for(v4, kPsUdp, 0xFFFF) == gid("FF12 4001 FFFF 0000 0000 0000 0001 0203"));
  CHECK(*mgid_for(v4, kPsIpoib, 0xFFFF) == gid("FF12 401B FFFF 0000 0000 0000 0001 0203"));
  CHECK(*mgid_for(v4, kPsTcp, 0x8001) == gid("FF12 401B 8001 0000 0000 0000 0001 0203"));
  CHECK(*mgid_for(ip("239.255.0.9", 0), kPsIpoib, 0xFFFF) == gid("FF12 401B FFFF 0000 0000 0000 0FFF 0009"));
  const Addr v6 = ip("ff0e::1", 0);
  CHECK(*mgid_for(v6, kPsIpoib, 0xFFFF) == gid("FF12 601B FFFF 0000 0000 0000 0000 0001"));
  CHECK(*mgid_for(v6, kPsUdp, 0xFFFF) == gid("FF12 6001 FFFF 0000 0000 0000 0000 0001"));
  // An MGID the SA assigned (ff1x:a01b::) is used as it is, in any port space.
  const Addr sa = ip("ff12:a01b:ffff::dead:beef", 0);
  CHECK(*mgid_for(sa, kPsUdp, 0x8001) == sa.addr);
  CHECK(*mgid_for(sa, kPsIpoib, 0xFFFF) == sa.addr);
  // Flags other than 1 (transient): not an SA MGID, mapped like any group.
  CHECK(*mgid_for(ip("ff02:a01b::1", 0), kPsIpoib, 0xFFFF) == gid("FF12 601B FFFF 0000 0000 0000 0000 0001"));
  for (const Addr& a : {ip("198.18.0.1", 0), ip("0.0.0.0", 0), ip("fd00::1", 0), ip("::", 0), Addr{}}) {
    auto m = mgid_for(a, kPsUdp, 0xFFFF);
    INFO(a.str());
    REQUIRE_FALSE(m.ok());
    CHECK(m.error().code == EINVAL);
  }
}

TEST_CASE("tshark reads the CMA header in a REQ as its IP CM private data", "[cma][tshark]") {
  const openib::test::GmpCapture capture("openib_cma_header");
  // Two REQs for TCP port 7174, from an IPv4 and an IPv6 endpoint.
  std::vector<mad::ByteVec> mads;
  const std::pair<Addr, Addr> ends[] = {{kSrc4, kDst4}, {kSrc6, kDst6}};
  for (std::uint32_t i = 0; i < 2; ++i) {
    cm::Req r;
    r.local_comm_id = 0x11223344 + i;
    r.service_id = service_id(kPsTcp, 7174);
    r.local_qpn = 0x000123;
    r.pkey = 0xFFFF;
    r.path_mtu = 5;
    encode_header(std::span(r.private_data).first<kHeaderBytes>(), ends[i].first, ends[i].second);
    r.private_data[kHeaderBytes] = 0xA5;  // the consumer's first byte
    mads.push_back(cm::encode(r, 0x0102030405060708ull + i));
  }
  capture.write(mads);
  const std::string tshark = capture.tshark();
  int status = 0;
  auto out = openib::test::run_command(
      tshark + " -T fields -E separator=, -e _ws.malformed -e infiniband.cm.req.serviceid.dport"
               " -e infiniband.cm.req.ip_cm.majv -e infiniband.cm.req.ip_cm.minv"
               " -e infiniband.cm.req.ip_cm.ipv -e infiniband.cm.req.ip_cm.sport"
               " -e infiniband.cm.req.ip_cm.sip4 -e infiniband.cm.req.ip_cm.dip4"
               " -e infiniband.cm.req.ip_cm.sip6 -e infiniband.cm.req.ip_cm.dip6",
      status);
  INFO(out);
  REQUIRE(status == 0);
  CHECK(out ==
        ",0x1c06,0x00,0x00,0x04,0x9c40,198.18.0.1,198.18.0.2,,\n"
        ",0x1c06,0x00,0x00,0x06,0x1234,,,fd00::1,fd00::2\n");
  // The consumer's private data starts right after the header.
  out = openib::test::run_command(tshark + " -T fields -e infiniband.cm.req.ip_cm.private", status);
  REQUIRE(status == 0);
  CHECK(out.rfind("a5000000", 0) == 0);
}

// What a REQ's header may name as either end (docs/cma.md "Security"):
// Linux's validate_ipv4_net_dev refuses loopback, wildcard ("this
// network"), multicast and limited-broadcast addresses before routes.
TEST_CASE("Header endpoints: unicast host addresses only; loopback told apart", "[cma]") {
  for (const char* good : {"198.18.0.1", "10.0.0.1", "1.0.0.0", "223.255.255.255", "fd00::1", "fe80::1",
                           "2001:db8::1", "::ffff:198.18.0.1"}) {
    INFO(good);
    CHECK(is_unicast_endpoint(ip(good, 1)));
    CHECK_FALSE(is_loopback(ip(good, 1)));
  }
  for (const char* lo : {"127.0.0.1", "127.1.2.3", "::1", "::ffff:127.0.0.1"}) {
    INFO(lo);
    CHECK(is_loopback(ip(lo, 1)));
    CHECK_FALSE(is_unicast_endpoint(ip(lo, 1)));
  }
  for (const char* bad : {"0.0.0.0", "0.1.2.3", "224.0.0.1", "239.255.255.255", "255.255.255.255", "::", "ff02::1",
                          "::ffff:0.0.0.0", "::ffff:224.1.1.1", "::ffff:255.255.255.255"}) {
    INFO(bad);
    CHECK_FALSE(is_unicast_endpoint(ip(bad, 1)));
    CHECK_FALSE(is_loopback(ip(bad, 1)));
  }
  CHECK_FALSE(is_unicast_endpoint(Addr{}));  // no family
  CHECK_FALSE(is_loopback(Addr{}));
}
