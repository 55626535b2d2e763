// Multicast through the IPoIB bridge (RFC 4391 §4): IPv4/IPv6 groups to
// their MGIDs, joined SendOnlyNonMember before the first send; the IGMP
// and MLD reports the kernel sends joined / left as a full member and
// forwarded to their groups; received multicast reaches the TAP with the
// group's MAC (RFC 1112 §6.4, RFC 2464 §7).
#include <catch2/catch.hpp>

#include "ipoib_fixture.hpp"

using namespace openib::test::ipoib;

namespace {

const Bytes kOwnIp = hx("c6120001");
const Gid kAllHosts = gid_of("ff12 401b ffff 0000 0000 0000 0000 0001");
const Gid kAllNodes = gid_of("ff12 601b ffff 0000 0000 0000 0000 0001");
const Gid kGroup = gid_of("ff12 401b ffff 0000 0000 0000 0f01 0203");  // 239.1.2.3

// IPv4 with the router alert option (RFC 2113), as the kernel sends IGMP.
Bytes igmp(const Bytes& dst, const Bytes& msg) {
  const auto total = static_cast<std::uint8_t>(24 + msg.size());
  return cat({hx("4600 00"), Bytes{total}, hx("0000 0000 01 02 0000"), kOwnIp, dst, hx("94040000"), msg});
}

Bytes mld(const Bytes& dst, const Bytes& msg) {
  const auto len = static_cast<std::uint8_t>(8 + msg.size());
  return cat({hx("6000 0000 00"), Bytes{len}, hx("00 01"), hx("fe800000000000000000000000000001"), dst,
              hx("3a00 0502 0000 0100"), msg});  // hop-by-hop: router alert (RFC 2711), PadN
}

struct Fixture {
  FakeIo io;
  Bridge bridge{io, link_params()};
  Fixture() { bridge.set_carrier(true); }
  Bytes own_mac() const { return bytes(bridge.own_mac()); }
  void tap(const Bytes& dst_mac, const char* type, const Bytes& body) {
    bridge.from_tap(cat({dst_mac, own_mac(), hx(type), body}));
  }
};

}  // namespace

TEST_CASE("the interface is a member of all-hosts and all-nodes once up", "[ipoib]") {
  FakeIo io;
  Bridge bridge{io, link_params()};
  CHECK(io.joins.empty());  // not from the constructor
  bridge.from_tap(hx("ffff"));  // the first frame, even a bad one
  CHECK(io.joins == std::vector<std::pair<Gid, bool>>{{kAllHosts, false}, {kAllNodes, false}});
  Fixture f;
  CHECK(f.io.joins == std::vector<std::pair<Gid, bool>>{{kAllHosts, false}, {kAllNodes, false}});
  const auto g = f.bridge.groups();
  REQUIRE(g.size() == 3);
  CHECK(g[0].mgid == broadcast_mgid(0xFFFF));
  CHECK(g[0].state == "joined");
}

TEST_CASE("IPv4 multicast: send-only join, held until joined, then straight through", "[ipoib]") {
  Fixture f;
  f.io.joins.clear();
  const Bytes udp = cat({hx("4500 001c 0000 4000 01 11 0000"), kOwnIp, hx("ef010203"), Bytes(8, 1)});
  f.tap(hx("01005e010203"), "0800", udp);
  CHECK(f.io.joins == std::vector<std::pair<Gid, bool>>{{kGroup, true}});
  CHECK(f.io.sent.empty());
  f.bridge.joined(kGroup, true);
  f.tap(hx("01005e010203"), "0800", udp);
  REQUIRE(f.io.sent.size() == 2);
  CHECK(f.io.sent[1].to.multicast);
  CHECK(f.io.sent[1].to.gid == kGroup);
  CHECK(f.io.sent[1].to.qpn == 0xFFFFFF);
  CHECK(f.io.sent[1].packet == cat({hx("0800 0000"), udp}));
  CHECK(f.io.joins.size() == 1);
  // A failed join drops what waited.
  const Gid other = gid_of("ff12 401b ffff 0000 0000 0000 0f01 0204");
  Bytes udp2 = udp;
  udp2[19] = 4;
  f.tap(hx("01005e010204"), "0800", udp2);
  f.bridge.joined(other, false);
  CHECK(f.bridge.counters().drop_no_group == 1);
  CHECK(f.io.sent.size() == 2);
}

TEST_CASE("broadcast frames go to the broadcast group at once", "[ipoib]") {
  Fixture f;
  const Bytes dhcp = cat({hx("4500 001c 0000 4000 01 11 0000 00000000 ffffffff"), Bytes(8, 2)});
  f.tap(hx("ffffffffffff"), "0800", dhcp);
  REQUIRE(f.io.sent.size() == 1);
  CHECK(f.io.sent[0].to.gid == broadcast_mgid(0xFFFF));
}

TEST_CASE("IGMPv2 report joins as full member, leave leaves; both are forwarded", "[ipoib]") {
  Fixture f;
  f.io.joins.clear();
  const Bytes report = igmp(hx("ef010203"), hx("16 00 0000 ef010203"));
  f.tap(hx("01005e010203"), "0800", report);
  CHECK(f.io.joins == std::vector<std::pair<Gid, bool>>{{kGroup, false}});
  f.bridge.joined(kGroup, true);
  REQUIRE(f.io.sent.size() == 1);
  CHECK(f.io.sent[0].to.gid == kGroup);
  CHECK(f.io.sent[0].packet == cat({hx("0800 0000"), report}));
  // Periodic reports join nothing new.
  f.tap(hx("01005e010203"), "0800", report);
  CHECK(f.io.joins.size() == 1);
  const auto gs = f.bridge.groups();
  CHECK(std::any_of(gs.begin(), gs.end(), [](const GroupInfo& g) {
    return g.mgid == kGroup && g.full_member && g.state == "joined";
  }));
  // The leave goes to 224.0.0.2 (all routers, send-only) and leaves the group.
  f.tap(hx("01005e000002"), "0800", igmp(hx("e0000002"), hx("17 00 0000 ef010203")));
  CHECK(f.io.leaves == std::vector<Gid>{kGroup});
  CHECK(f.io.joins.back() == std::pair{gid_of("ff12 401b ffff 0000 0000 0000 0000 0002"), true});
}

TEST_CASE("IGMPv3 records: TO_EX joins, TO_IN with no sources leaves", "[ipoib]") {
  Fixture f;
  f.bridge.member_join(kGroup);
  f.io.joins.clear();
  const Bytes v3 = hx("22 00 0000 0000 0003"
                      "04 00 0000 ef010204"           // CHANGE_TO_EXCLUDE {} 239.1.2.4
                      "03 00 0000 ef010203"           // CHANGE_TO_INCLUDE {} 239.1.2.3
                      "01 00 0001 ef010205 c6120009"  // MODE_IS_INCLUDE {198.18.0.9} 239.1.2.5
  );
  f.tap(hx("01005e000016"), "0800", igmp(hx("e0000016"), v3));
  CHECK(f.io.leaves == std::vector<Gid>{kGroup});
  CHECK(f.io.joins == std::vector<std::pair<Gid, bool>>{
                          {gid_of("ff12 401b ffff 0000 0000 0000 0f01 0204"), false},
                          {gid_of("ff12 401b ffff 0000 0000 0000 0f01 0205"), false},
                          {gid_of("ff12 401b ffff 0000 0000 0000 0000 0016"), true}});
}

TEST_CASE("MLDv2 and MLDv1: join on report, leave on done", "[ipoib]") {
  Fixture f;
  f.io.joins.clear();
  const Bytes sn = hx("ff0200000000000000000001ff000005");
  const Gid sn_mgid = gid_of("ff12 601b ffff 0000 0000 0001 ff00 0005");
  f.tap(hx("333300000016"), "86dd", mld(hx("ff020000000000000000000000000016"), cat({hx("8f00 0000 0000 0001 04 00 0000"), sn})));
  REQUIRE(f.io.joins.size() == 2);
  CHECK(f.io.joins[0] == std::pair{sn_mgid, false});
  f.tap(hx("333300000002"), "86dd", mld(hx("ff020000000000000000000000000002"), cat({hx("8400 0000 0000 0000"), sn})));
  CHECK(f.io.leaves == std::vector<Gid>{sn_mgid});
  // MLDv1 report for ff05::1:3 (site scope).
  const Bytes site = hx("ff050000000000000000000000010003");
  f.tap(hx("333300010003"), "86dd", mld(site, cat({hx("8300 0000 0000 0000"), site})));
  CHECK(f.io.joins.back() == std::pair{gid_of("ff12 601b ffff 0000 0000 0000 0001 0003"), false});
}

TEST_CASE("received multicast gets the group's MAC; our own echo is dropped", "[ipoib]") {
  Fixture f;
  const Bytes udp = cat({hx("4500 001c 0000 4000 01 11 0000 c6120002 ef810203"), Bytes(8, 3)});
  f.bridge.from_ib(Bridge::RxInfo{0x49, 2, kPeerGid, gid_of("ff12 401b ffff 0000 0000 0000 0f81 0203")},
                   cat({hx("0800 0000"), udp}));
  const Bytes v6 = cat({hx("6000 0000 0008 11 01 fe800000000000000000000000000002 ff020000000000000000000000010203"),
                        Bytes(8, 4)});
  f.bridge.from_ib(Bridge::RxInfo{0x49, 2, kPeerGid, kAllNodes}, cat({hx("86dd 0000"), v6}));
  f.bridge.from_ib(Bridge::RxInfo{0x48, 1, kOwnGid, kGroup}, cat({hx("0800 0000"), udp}));
  REQUIRE(f.io.frames.size() == 2);
  const Bytes peer_mac = bytes(derive_mac(kPeer));
  // 239.129.2.3: the 24th bit from the end is not carried (RFC 1112 6.4).
  CHECK(f.io.frames[0] == cat({hx("01005e010203"), peer_mac, hx("0800"), udp}));
  CHECK(f.io.frames[1] == cat({hx("333300010203"), peer_mac, hx("86dd"), v6}));
  CHECK(f.bridge.counters().drop_own == 1);
}

TEST_CASE("carrier back: member groups joined again, send-only ones on demand", "[ipoib]") {
  Fixture f;
  f.bridge.member_join(kGroup);
  f.bridge.joined(kGroup, true);
  f.io.joins.clear();
  f.bridge.set_carrier(false);
  f.bridge.set_carrier(true);
  CHECK(std::count(f.io.joins.begin(), f.io.joins.end(), std::pair{kGroup, false}) == 1);
  f.bridge.member_leave(kGroup);
  CHECK(f.io.leaves == std::vector<Gid>{kGroup});
}
