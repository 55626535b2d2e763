// IPv6 neighbour discovery through the IPoIB bridge (RFC 4861, RFC 4391
// §9.1.1): the link-layer address options go from Ethernet's form (length
// 1, the MAC) to IPoIB's (length 3, 2 reserved bytes, the 20-byte
// address) and back, the payload length and the ICMPv6 checksum redone.
// Checksums are checked by the fixture's own sum, not the bridge's.
#include <catch2/catch.hpp>

#include "ipoib_fixture.hpp"

using namespace openib::test::ipoib;

namespace {

const Bytes kOwnLl = hx("fe80 0000 0000 0000 0000 0000 0000 0001");
const Bytes kPeerLl = hx("fe80 0000 0000 0000 0000 0000 0000 0002");
const Bytes kSolicitedPeer = hx("ff02 0000 0000 0000 0000 0001 ff00 0002");
const Bytes kOwnHw = hx("00 000048 fe800000000000000002c90300000001");
const Bytes kPeerHw = hx("00 000049 fe800000000000000002c90300000002");

Bytes ipv6_icmp(const Bytes& src, const Bytes& dst, const Bytes& icmp) {
  const auto len = static_cast<std::uint16_t>(icmp.size());
  return with_icmpv6_checksum(cat({hx("6000 0000"), Bytes{static_cast<std::uint8_t>(len >> 8), static_cast<std::uint8_t>(len)},
                                   hx("3a ff"), src, dst, icmp}));
}

// The packet with its checksum field zeroed: to compare the rest exactly.
Bytes no_checksum(Bytes p, std::size_t ipv6_at) {
  p[ipv6_at + 42] = p[ipv6_at + 43] = 0;
  return p;
}

struct Fixture {
  FakeIo io;
  Bridge bridge{io, link_params()};
  Bytes own_mac() const { return bytes(bridge.own_mac()); }
};

}  // namespace

TEST_CASE("NS from the TAP: SLLA of length 1 becomes length 3 with the 20-byte address", "[ipoib]") {
  Fixture f;
  const Bytes ns = ipv6_icmp(kOwnLl, kSolicitedPeer,
                             cat({hx("87 00 0000 00000000"), kPeerLl, hx("01 01"), f.own_mac()}));
  REQUIRE(icmpv6_checksum_ok(ns));
  f.bridge.from_tap(cat({hx("3333ff000002"), f.own_mac(), hx("86dd"), ns}));
  // The solicited-node group, joined send-only first (RFC 4391 4).
  const Gid mgid = gid_of("ff12 601b ffff 0000 0000 0001 ff00 0002");
  REQUIRE(f.io.joins.size() == 3);  // all-hosts, all-nodes, then this one
  CHECK(f.io.joins[2] == std::pair{mgid, true});
  CHECK(f.io.sent.empty());
  f.bridge.joined(mgid, true);
  REQUIRE(f.io.sent.size() == 1);
  CHECK(f.io.sent[0].to.multicast);
  CHECK(f.io.sent[0].to.gid == mgid);
  const Bytes& p = f.io.sent[0].packet;
  const Bytes expect = cat({hx("86dd 0000"), hx("6000 0000 0030 3a ff"), kOwnLl, kSolicitedPeer,
                            hx("87 00 0000 00000000"), kPeerLl, hx("01 03 0000"), kOwnHw});
  CHECK(no_checksum(p, 4) == expect);
  CHECK(icmpv6_checksum_ok(Bytes(p.begin() + 4, p.end())));
  CHECK(f.bridge.counters().nd_out == 1);
}

TEST_CASE("NA from IB: TLLA of length 3 becomes the neighbour's MAC, length 1", "[ipoib]") {
  Fixture f;
  const Bytes na = ipv6_icmp(kPeerLl, kOwnLl, cat({hx("88 00 0000 60000000"), kPeerLl, hx("02 03 0000"), kPeerHw}));
  f.bridge.from_ib(Bridge::RxInfo{0x49, 2, std::nullopt, std::nullopt}, cat({hx("86dd 0000"), na}));
  REQUIRE(f.io.frames.size() == 1);
  const Bytes peer_mac = bytes(derive_mac(kPeer));
  const Bytes& fr = f.io.frames[0];
  CHECK(no_checksum(fr, 14) == cat({f.own_mac(), peer_mac, hx("86dd"), hx("6000 0000 0020 3a ff"), kPeerLl,
                                    kOwnLl, hx("88 00 0000 60000000"), kPeerLl, hx("02 01"), peer_mac}));
  CHECK(icmpv6_checksum_ok(Bytes(fr.begin() + 14, fr.end())));
  const auto n = f.bridge.neighbours();
  REQUIRE(n.size() == 1);
  CHECK(n[0].ips == std::vector<std::string>{"fe80::2"});
  CHECK(f.bridge.counters().nd_in == 1);
}

TEST_CASE("ND with a bad checksum or a bad option is dropped, not repaired", "[ipoib]") {
  Fixture f;
  Bytes na = ipv6_icmp(kPeerLl, kOwnLl, cat({hx("88 00 0000 60000000"), kPeerLl, hx("02 03 0000"), kPeerHw}));
  na[43] ^= 1;
  const Bridge::RxInfo rx{0x49, 2, std::nullopt, std::nullopt};
  f.bridge.from_ib(rx, cat({hx("86dd 0000"), na}));
  // Ethernet-length option on IB, then a zero-length option.
  f.bridge.from_ib(rx, cat({hx("86dd 0000"), ipv6_icmp(kPeerLl, kOwnLl, cat({hx("88 00 0000 60000000"), kPeerLl,
                                                                                hx("02 01 020000000001")}))}));
  f.bridge.from_ib(rx, cat({hx("86dd 0000"), ipv6_icmp(kPeerLl, kOwnLl, cat({hx("88 00 0000 60000000"), kPeerLl,
                                                                                hx("02 00 020000000001")}))}));
  CHECK(f.bridge.counters().drop_malformed_packet == 3);
  // From the TAP: an SLLA of IB length, and a TLLA naming no neighbour.
  f.bridge.from_tap(cat({hx("3333ff000002"), f.own_mac(), hx("86dd"),
                         ipv6_icmp(kOwnLl, kSolicitedPeer, cat({hx("87 00 0000 00000000"), kPeerLl, hx("01 03 0000"), kOwnHw}))}));
  f.bridge.from_tap(cat({hx("333300000001"), f.own_mac(), hx("86dd"),
                         ipv6_icmp(kOwnLl, hx("ff020000000000000000000000000001"),
                                   cat({hx("88 00 0000 20000000"), kOwnLl, hx("02 01 02aabbccddee")}))}));
  CHECK(f.bridge.counters().drop_malformed_frame == 1);
  CHECK(f.bridge.counters().drop_unknown_mac == 1);
  CHECK(f.io.frames.empty());
  CHECK(f.io.sent.empty());
}

TEST_CASE("ND from IB with a good option before a bad one teaches the neighbour table nothing", "[ipoib]") {
  Fixture f;
  // TLLA of IPoIB's length, then one of Ethernet's length: malformed.
  f.bridge.from_ib(Bridge::RxInfo{0x49, 2, std::nullopt, std::nullopt},
                   cat({hx("86dd 0000"), ipv6_icmp(kPeerLl, kOwnLl, cat({hx("88 00 0000 60000000"), kPeerLl,
                                                                          hx("02 03 0000"), kPeerHw,
                                                                          hx("02 01 020000000001")}))}));
  CHECK(f.bridge.counters().drop_malformed_packet == 1);
  CHECK(f.io.frames.empty());
  CHECK(f.bridge.neighbours().empty());
}

TEST_CASE("RA from IB: SLLA shrunk, the other options kept in order", "[ipoib]") {
  Fixture f;
  const Bytes mtu_opt = hx("05 01 0000 000007fc");
  const Bytes prefix_opt = hx("03 04 40 c0 00278d00 00093a80 00000000 20010db8000000000000000000000000");
  const Bytes all_nodes = hx("ff020000000000000000000000000001");
  const Bytes ra = ipv6_icmp(kPeerLl, all_nodes, cat({hx("86 00 0000 40 00 0708 00000000 00000000"), hx("01 03 0000"),
                                                      kPeerHw, mtu_opt, prefix_opt}));
  f.bridge.from_ib(Bridge::RxInfo{0x49, 2, kPeerGid, ipv6_mgid({0xff, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}, 0xFFFF)},
                   cat({hx("86dd 0000"), ra}));
  REQUIRE(f.io.frames.size() == 1);
  const Bytes peer_mac = bytes(derive_mac(kPeer));
  const Bytes& fr = f.io.frames[0];
  const std::size_t icmp_len = 16 + 8 + 8 + 32;
  CHECK(no_checksum(fr, 14) == cat({hx("333300000001"), peer_mac, hx("86dd 6000 0000"),
                                    Bytes{0, static_cast<std::uint8_t>(icmp_len)}, hx("3a ff"), kPeerLl, all_nodes,
                                    hx("86 00 0000 40 00 0708 00000000 00000000"), hx("01 01"), peer_mac, mtu_opt,
                                    prefix_opt}));
  CHECK(icmpv6_checksum_ok(Bytes(fr.begin() + 14, fr.end())));
}

TEST_CASE("RS and Redirect from the TAP are translated too", "[ipoib]") {
  Fixture f;
  // Learn the peer (its NA), make its path ready.
  f.bridge.from_ib(Bridge::RxInfo{0x49, 2, std::nullopt, std::nullopt},
                   cat({hx("86dd 0000"), ipv6_icmp(kPeerLl, kOwnLl, cat({hx("88 00 0000 60000000"), kPeerLl,
                                                                          hx("02 03 0000"), kPeerHw}))}));
  const Bytes peer_mac = bytes(derive_mac(kPeer));
  f.bridge.path_resolved(kPeerGid, true);
  const Bytes all_routers = hx("ff020000000000000000000000000002");
  f.bridge.from_tap(cat({hx("333300000002"), f.own_mac(), hx("86dd"),
                         ipv6_icmp(kOwnLl, all_routers, cat({hx("85 00 0000 00000000 01 01"), f.own_mac()}))}));
  // Redirect: target fe80::2 (TLLA the peer), destination 2001:db8::9.
  const Bytes dest = hx("20010db8000000000000000000000009");
  f.bridge.from_tap(cat({peer_mac, f.own_mac(), hx("86dd"),
                         ipv6_icmp(kOwnLl, kPeerLl, cat({hx("89 00 0000 00000000"), kPeerLl, dest, hx("02 01"), peer_mac}))}));
  f.bridge.joined(gid_of("ff12 601b ffff 0000 0000 0000 0000 0002"), true);
  REQUIRE(f.io.sent.size() == 2);
  const Bytes& redirect = f.io.sent[0].packet;
  CHECK(no_checksum(redirect, 4) == cat({hx("86dd 0000 6000 0000 0040 3a ff"), kOwnLl, kPeerLl,
                                         hx("89 00 0000 00000000"), kPeerLl, dest, hx("02 03 0000"), kPeerHw}));
  CHECK(icmpv6_checksum_ok(Bytes(redirect.begin() + 4, redirect.end())));
  const Bytes& rs = f.io.sent[1].packet;
  CHECK(no_checksum(rs, 4) == cat({hx("86dd 0000 6000 0000 0020 3a ff"), kOwnLl, all_routers,
                                   hx("85 00 0000 00000000 01 03 0000"), kOwnHw}));
  CHECK(icmpv6_checksum_ok(Bytes(rs.begin() + 4, rs.end())));
  CHECK(f.bridge.counters().nd_out == 2);
}

// Issue 29, finding 11 (docs/ipoib.md "Security"): ND claims checked like
// ARP's. From QPN 0x51 (LID 3) an NA whose TLLA is the peer's 20-byte
// address, and an NS whose SLLA is; a Redirect's TLLA names another node
// and is not held to its source.
TEST_CASE("NA and NS claiming another QPN than their source are dropped and counted", "[ipoib][security]") {
  Fixture f;
  const Bridge::RxInfo attacker{0x51, 3, std::nullopt, std::nullopt};
  const Bytes na = ipv6_icmp(kPeerLl, kOwnLl, cat({hx("88 00 0000 60000000"), kPeerLl, hx("02 03 0000"), kPeerHw}));
  const Bytes ns = ipv6_icmp(kPeerLl, kOwnLl, cat({hx("87 00 0000 00000000"), kOwnLl, hx("01 03 0000"), kPeerHw}));
  f.bridge.from_ib(attacker, cat({hx("86dd 0000"), na}));
  f.bridge.from_ib(attacker, cat({hx("86dd 0000"), ns}));
  CHECK(f.bridge.counters().drop_spoofed == 2);
  CHECK(f.bridge.counters().nd_in == 0);
  CHECK(f.io.frames.empty());
  CHECK(f.bridge.neighbours().empty());
  // From the peer's own QPN both pass.
  f.bridge.from_ib(Bridge::RxInfo{0x49, 2, std::nullopt, std::nullopt}, cat({hx("86dd 0000"), na}));
  f.bridge.from_ib(Bridge::RxInfo{0x49, 2, std::nullopt, std::nullopt}, cat({hx("86dd 0000"), ns}));
  CHECK(f.bridge.counters().nd_in == 2);
  CHECK(f.io.frames.size() == 2);
}
