// ATS ServiceRecords (src/ipoib_tap/ats.hpp; docs/ipoib.md "ATS
// registration"): the bytes the SA receives for an IPv4 and an IPv6
// address, against DAPL's layout (ServiceID 0x10000CE100415453, the name,
// the address in ServiceData8 with IPv4 at offset 12).
#include <sys/socket.h>

#include <catch2/catch.hpp>

#include "hex_bytes.hpp"
#include "ipoib_tap/ats.hpp"
#include "ipoib_tap/ip_addr.hpp"
#include "sa/sa_mad.hpp"
#include "sa/service_record.hpp"

using namespace openib;
using namespace openib::ipoib;
using openib::test::hex;
using openib::test::prefix;

namespace {

const sa::Gid kPortGid = sa::make_gid(0xfe80000000000000ull, 0x0002c90300000007ull);

IpAddr ip(const char* text) {
  auto a = IpAddr::parse(text);
  REQUIRE(a.ok());
  return *a;
}

sa::ByteVec encoded(const sa::ServiceRecord& r) {
  sa::ByteVec out(sa::kServiceRecordBytes, std::byte{0xEE});
  sa::encode_service_record(out, r);
  return out;
}

// "DAPL Address Translation Service" (32 bytes) and its NUL padding.
const auto kName = hex("4441504c 20416464 72657373 20547261 6e736c61 74696f6e 20536572 76696365 00000000");

}  // namespace

TEST_CASE("An IPv4 address's ATS record is DAPL's: the ID, the name, the address at ServiceData8[12]", "[ats]") {
  auto out = encoded(ats_record(kPortGid, 0xFFFF, ip("198.18.0.17/24")));
  // ServiceID, ServiceGID, ServiceP_Key, reserved, ServiceLease (none), ServiceKey (zero).
  CHECK(prefix(out, 48) == hex("10000ce100415453 fe80000000000000 0002c90300000007 ffff 0000 ffffffff"
                              "00000000000000000000000000000000"));
  CHECK(prefix(sa::ConstBytes(out).subspan(48), 36) == kName);
  CHECK(prefix(sa::ConstBytes(out).subspan(112), 16) == hex("00000000 00000000 00000000 c6120011"));
  // ServiceData16/32/64 are zero.
  CHECK(prefix(sa::ConstBytes(out).subspan(128), 48) == sa::ByteVec(48, std::byte{0}));
}

TEST_CASE("An IPv6 address's ATS record carries its 16 bytes in ServiceData8", "[ats]") {
  auto r = ats_record(kPortGid, 0x8001, ip("fe80::202:c903:0:7/64"));
  auto out = encoded(r);
  CHECK(prefix(out, 32) == hex("10000ce100415453 fe80000000000000 0002c90300000007 8001 0000 ffffffff"));
  CHECK(prefix(sa::ConstBytes(out).subspan(112), 16) == hex("fe800000 00000000 0202c903 00000007"));
}

TEST_CASE("Each slot has its own ServiceID in OpenIB's ATS range", "[ats]") {
  CHECK(ats_service_id(0) == 0x10000CE100415453ull);
  CHECK(ats_service_id(1) == 0x10000CE101415453ull);
  CHECK(ats_service_id(255) == 0x10000CE1FF415453ull);  // IB_ATS_LAST_SERVICE_ID
  auto out = encoded(ats_record(kPortGid, 0xFFFF, ip("198.18.0.18"), 2));
  CHECK(prefix(out, 8) == hex("10000ce102415453"));
}

TEST_CASE("The address comes back out of a decoded ATS record; other services are refused", "[ats]") {
  for (const char* text : {"198.18.0.17", "198.18.255.1", "fe80::1", "2001:db8::5"}) {
    auto a = ip(text);
    auto d = sa::decode_service_record(encoded(ats_record(kPortGid, 0xFFFF, a, 9)));
    REQUIRE(d.ok());
    auto back = ats_address(*d);
    REQUIRE(back.ok());
    CHECK(back->to_string() == a.to_string());
  }
  sa::ServiceRecord other;
  other.service_name = "something else";
  auto r = ats_address(other);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == ENOENT);
}

TEST_CASE("IpAddr prints and parses addresses with their prefix length", "[ats]") {
  CHECK(ip("198.18.0.1/24").to_string() == "198.18.0.1/24");
  CHECK(ip("198.18.0.1").prefix_len == 32);
  CHECK(ip("fe80::1/64").to_string() == "fe80::1/64");
  CHECK(ip("fe80::1/64").family == AF_INET6);
  for (const char* bad : {"", "198.18.0.1/33", "198.18.0.1/", "198.18.0.1/2x", "fe80::1/129", "no.such", "1.2.3"})
    CHECK_FALSE(IpAddr::parse(bad).ok());
  IpAddr unknown;
  unknown.family = 99;
  CHECK(unknown.to_string() == "family99?/0");
}

TEST_CASE("ATS slots: the lowest free one per address; one record per address whatever its prefixes", "[ats]") {
  AtsSlots slots;
  auto a = slots.take(ip("198.18.0.1/24"));
  REQUIRE(a.ok());
  CHECK(a->slot == 0);
  CHECK(a->fresh);
  auto b = slots.take(ip("fe80::1/64"));
  REQUIRE(b.ok());
  CHECK(b->slot == 1);
  // The same address with another prefix: the same record.
  auto a2 = slots.take(ip("198.18.0.1/16"));
  REQUIRE(a2.ok());
  CHECK(a2->slot == 0);
  CHECK_FALSE(a2->fresh);
  auto g = slots.give_back(ip("198.18.0.1/24"));
  REQUIRE(g.ok());
  CHECK_FALSE(g->last);
  g = slots.give_back(ip("198.18.0.1/16"));
  REQUIRE(g.ok());
  CHECK(g->last);
  CHECK(g->slot == 0);
  // Slot 0 is free again and goes to the next address.
  auto c = slots.take(ip("198.18.0.2/24"));
  REQUIRE(c.ok());
  CHECK(c->slot == 0);
  auto none = slots.give_back(ip("198.18.0.9/24"));
  REQUIRE_FALSE(none.ok());
  CHECK(none.error().code == ENOENT);
}

TEST_CASE("ATS slots run out after 256 addresses with a clear error", "[ats]") {
  AtsSlots slots;
  for (unsigned i = 0; i < kAtsSlots; ++i) {
    IpAddr a;
    a.family = AF_INET6;
    a.bytes = {0x20, 0x01, 0x0d, 0xb8};
    a.bytes[15] = static_cast<std::uint8_t>(i);
    a.bytes[14] = static_cast<std::uint8_t>(i >> 8);
    auto t = slots.take(a);
    REQUIRE(t.ok());
    CHECK(t->slot == i);
  }
  auto full = slots.take(ip("198.18.0.1"));
  REQUIRE_FALSE(full.ok());
  CHECK(full.error().code == ENOSPC);
  CHECK(slots.size() == kAtsSlots);
}
