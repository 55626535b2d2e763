// The IPoIB address codecs (src/ipoib_tap/codec.cpp) against byte strings
// written from RFC 4391: the 20-byte link-layer address (§9.1.1) and the
// multicast GIDs (§4); the MACs the TAP side shows (docs/ipoib.md "MAC
// addresses").
#include <catch2/catch.hpp>

#include <set>

#include "ipoib_fixture.hpp"
#include "ipoib_tap/neighbours.hpp"

using namespace openib::test::ipoib;

TEST_CASE("20-byte address: flags byte, 24-bit QPN, GID (RFC 4391 9.1.1)", "[ipoib]") {
  std::array<std::uint8_t, 20> b{};
  encode_hwaddr(b, HwAddr{0x123456, kPeerGid});
  CHECK(bytes(b) == hx("00 123456 fe800000000000000002c90300000002"));
  // Linux sets 0x80 in the flags byte for connected mode: not part of the address.
  const Bytes linux_addr = hx("80 000049 fe800000000000000002c90300000002");
  const HwAddr a = decode_hwaddr(std::span<const std::uint8_t, 20>(linux_addr.data(), 20));
  CHECK(a == kPeer);
}

TEST_CASE("broadcast and IPv4 multicast MGIDs (RFC 4391 4, 4.1)", "[ipoib]") {
  CHECK(bytes(broadcast_mgid(0xFFFF)) == hx("ff12 401b ffff 0000 0000 0000 ffff ffff"));
  CHECK(bytes(broadcast_mgid(0x8001)) == hx("ff12 401b 8001 0000 0000 0000 ffff ffff"));
  CHECK(bytes(broadcast_mgid(0xFFFF, 5)) == hx("ff15 401b ffff 0000 0000 0000 ffff ffff"));
  // 224.0.0.251: the low 28 bits.
  CHECK(bytes(ipv4_mgid(0xE00000FB, 0xFFFF)) == hx("ff12 401b ffff 0000 0000 0000 0000 00fb"));
  // 239.1.2.3: 0xef010203 -> 0x0f010203.
  CHECK(bytes(ipv4_mgid(0xEF010203, 0x8001)) == hx("ff12 401b 8001 0000 0000 0000 0f01 0203"));
}

TEST_CASE("IPv6 multicast MGIDs: low 80 bits, the broadcast group's scope (RFC 4391 4, as Linux maps them)", "[ipoib]") {
  std::array<std::uint8_t, 16> g{};
  const Bytes sn = hx("ff02 0000 0000 0000 0000 0001 ff00 0002");  // solicited-node
  std::copy(sn.begin(), sn.end(), g.begin());
  CHECK(bytes(ipv6_mgid(g, 0xFFFF)) == hx("ff12 601b ffff 0000 0000 0001 ff00 0002"));
  const Bytes site = hx("ff05 0000 0000 0000 0000 0000 0001 0003");
  std::copy(site.begin(), site.end(), g.begin());
  CHECK(bytes(ipv6_mgid(g, 0x8001)) == hx("ff12 601b 8001 0000 0000 0000 0001 0003"));
}

TEST_CASE("derived MACs: locally administered unicast, stable, one per address", "[ipoib]") {
  const Mac m = derive_mac(kPeer);
  CHECK((m[0] & 0x03) == 0x02);  // local, not group (IEEE 802 8.2)
  CHECK(derive_mac(HwAddr{0x49, kPeerGid}) == m);
  CHECK(derive_mac(HwAddr{0x4A, kPeerGid}) != m);
  CHECK(derive_mac(kOwn) != m);
}

TEST_CASE("the neighbour table never hands out the own MAC, and MACs map back", "[ipoib]") {
  NeighbourTable nt(kOwn);
  CHECK(nt.mac_for(kOwn) == nt.own_mac());
  const Mac m = nt.mac_for(kPeer);
  CHECK(m == derive_mac(kPeer));
  CHECK(nt.addr_of(m) == kPeer);
  CHECK(nt.addr_of(nt.own_mac()) == kOwn);
  CHECK_FALSE(nt.addr_of(Mac{0x02, 0, 0, 0, 0, 1}).has_value());
  // Many addresses, one MAC each, all distinct, none the own MAC.
  std::set<Mac> seen{nt.own_mac(), m};
  for (std::uint32_t q = 0; q < 2000; ++q) {
    const Mac x = nt.mac_for(HwAddr{q | 0x100000, kPeerGid});
    CHECK((x[0] & 0x03) == 0x02);
    seen.insert(x);
  }
  CHECK(seen.size() == 2002);
}

TEST_CASE("the neighbour table is bounded: the least recently used goes", "[ipoib]") {
  NeighbourTable nt(kOwn);
  const Mac first = nt.mac_for(kPeer);
  for (std::uint32_t q = 0; q < NeighbourTable::kMaxNeighbours + 10; ++q) {
    nt.mac_for(HwAddr{q | 0x100000, kOwnGid});
    (void)nt.mac_for(kPeer);  // kept in use
  }
  CHECK(nt.all().size() == NeighbourTable::kMaxNeighbours);
  CHECK(nt.addr_of(first) == kPeer);
  CHECK_FALSE(nt.addr_of(derive_mac(HwAddr{0x100000, kOwnGid})).has_value());
}
