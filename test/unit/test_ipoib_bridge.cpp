// The IPoIB bridge (src/ipoib_tap/bridge.cpp) on a fake BridgeIo: ARP
// both ways (RFC 4391 §8), unicast through a neighbour's path with its
// queue of pending packets, received packets' Ethernet headers, and the
// drops by reason. Expected bytes are written from RFC 826 / RFC 4391.
#include <algorithm>

#include <catch2/catch.hpp>

#include "ipoib_fixture.hpp"

using namespace openib::test::ipoib;

namespace {

const Bytes kOwnIp = hx("c6120001");   // 198.18.0.1
const Bytes kPeerIp = hx("c6120002");  // 198.18.0.2
const Bytes kBcastMac = hx("ffffffffffff");
const Bytes kOwnHw = hx("00 000048 fe800000000000000002c90300000001");
const Bytes kPeerHw = hx("00 000049 fe800000000000000002c90300000002");

// An IPv4 packet of `total` bytes (header 20) from 198.18.0.1 to `dst`.
Bytes ipv4(const Bytes& dst, std::size_t total = 28, std::uint8_t proto = 17) {
  Bytes p = cat({hx("4500"), Bytes{static_cast<std::uint8_t>(total >> 8), static_cast<std::uint8_t>(total)},
                 hx("0000 4000 40"), Bytes{proto}, hx("0000"), kOwnIp, dst});
  p.resize(total, 0xAB);
  return p;
}

struct Fixture {
  FakeIo io;
  Bridge bridge{io, link_params()};
  Bytes own_mac() const { return bytes(bridge.own_mac()); }

  // The peer answers our ARP request; returns the MAC the bridge gave it.
  Bytes learn_peer() {
    Bridge::RxInfo rx{0x49, 2, std::nullopt, std::nullopt};
    bridge.from_ib(rx, cat({hx("0806 0000 0020 0800 14 04 0002"), kPeerHw, kPeerIp, kOwnHw, kOwnIp}));
    REQUIRE(io.frames.size() == 1);
    Bytes f = io.frames.back();
    io.frames.clear();
    return Bytes(f.begin() + 6, f.begin() + 12);
  }
};

}  // namespace

TEST_CASE("ARP request from the TAP goes to the broadcast group as IB ARP (RFC 4391 8)", "[ipoib]") {
  Fixture f;
  const Bytes frame = cat({kBcastMac, f.own_mac(), hx("0806"),
                           hx("0001 0800 06 04 0001"), f.own_mac(), kOwnIp, hx("000000000000"), kPeerIp});
  f.bridge.from_tap(frame);
  REQUIRE(f.io.sent.size() == 1);
  CHECK(f.io.sent[0].to.multicast);
  CHECK(bytes(f.io.sent[0].to.gid) == hx("ff12401bffff000000000000ffffffff"));
  CHECK(f.io.sent[0].to.qpn == 0xFFFFFF);
  CHECK(f.io.sent[0].packet == cat({hx("0806 0000"), hx("0020 0800 14 04 0001"), kOwnHw, kOwnIp,
                                    Bytes(20, 0), kPeerIp}));
  CHECK(f.bridge.counters().arp_out == 1);
  CHECK(f.bridge.counters().ib_tx == 1);
}

TEST_CASE("IB ARP reply becomes an Ethernet ARP reply from the neighbour's MAC", "[ipoib]") {
  Fixture f;
  Bridge::RxInfo rx{0x49, 2, std::nullopt, std::nullopt};
  f.bridge.from_ib(rx, cat({hx("0806 0000 0020 0800 14 04 0002"), kPeerHw, kPeerIp, kOwnHw, kOwnIp}));
  REQUIRE(f.io.frames.size() == 1);
  const auto n = f.bridge.neighbours();
  REQUIRE(n.size() == 1);
  CHECK(n[0].addr == kPeer);
  CHECK(n[0].ips == std::vector<std::string>{"198.18.0.2"});
  CHECK(n[0].state == "none");
  const Bytes peer_mac = bytes(n[0].mac);
  CHECK((peer_mac[0] & 3) == 2);
  CHECK(f.io.frames[0] == cat({f.own_mac(), peer_mac, hx("0806"), hx("0001 0800 06 04 0002"), peer_mac, kPeerIp,
                               f.own_mac(), kOwnIp}));
  CHECK(f.bridge.counters().arp_in == 1);
  CHECK(f.bridge.counters().tap_tx == 1);
}

TEST_CASE("broadcast IB ARP request reaches the TAP as a broadcast", "[ipoib]") {
  Fixture f;
  Bridge::RxInfo rx{0x49, 2, kPeerGid, broadcast_mgid(0xFFFF)};
  f.bridge.from_ib(rx, cat({hx("0806 0000 0020 0800 14 04 0001"), kPeerHw, kPeerIp, Bytes(20, 0), kOwnIp}));
  REQUIRE(f.io.frames.size() == 1);
  const Bytes peer_mac = bytes(derive_mac(kPeer));
  CHECK(f.io.frames[0] == cat({kBcastMac, peer_mac, hx("0806 0001 0800 06 04 0001"), peer_mac, kPeerIp,
                               hx("000000000000"), kOwnIp}));
}

TEST_CASE("ARP reply from the TAP names the neighbour's 20-byte address", "[ipoib]") {
  Fixture f;
  const Bytes peer_mac = f.learn_peer();
  f.bridge.path_resolved(kPeerGid, true);
  f.bridge.from_tap(cat({peer_mac, f.own_mac(), hx("0806 0001 0800 06 04 0002"), f.own_mac(), kOwnIp, peer_mac,
                         kPeerIp}));
  REQUIRE(f.io.sent.size() == 1);
  CHECK_FALSE(f.io.sent[0].to.multicast);
  CHECK(f.io.sent[0].to.qpn == 0x49);
  CHECK(f.io.sent[0].to.gid == kPeerGid);
  CHECK(f.io.sent[0].packet == cat({hx("0806 0000 0020 0800 14 04 0002"), kOwnHw, kOwnIp, kPeerHw, kPeerIp}));
}

TEST_CASE("unicast waits for the path: 3 held, older dropped, sent once resolved", "[ipoib]") {
  Fixture f;
  const Bytes peer_mac = f.learn_peer();
  std::vector<Bytes> ips;
  for (std::uint8_t i = 0; i < 4; ++i) {
    ips.push_back(ipv4(kPeerIp, 28 + i));
    f.bridge.from_tap(cat({peer_mac, f.own_mac(), hx("0800"), ips.back()}));
  }
  CHECK(f.io.resolves == std::vector<Gid>{kPeerGid});
  CHECK(f.io.sent.empty());
  CHECK(f.bridge.counters().drop_queue_full == 1);
  CHECK(f.bridge.neighbours()[0].state == "resolving");
  CHECK(f.bridge.neighbours()[0].pending == 3);
  f.bridge.path_resolved(kPeerGid, true);
  REQUIRE(f.io.sent.size() == 3);
  for (std::size_t i = 0; i < 3; ++i) {
    CHECK(f.io.sent[i].to.gid == kPeerGid);
    CHECK(f.io.sent[i].to.qpn == 0x49);
    CHECK(f.io.sent[i].packet == cat({hx("0800 0000"), ips[i + 1]}));
  }
  // Ready: straight through.
  f.bridge.from_tap(cat({peer_mac, f.own_mac(), hx("0800"), ips[0]}));
  CHECK(f.io.sent.size() == 4);
  CHECK(f.io.resolves.size() == 1);
  // A lost path is resolved again on the next send.
  f.bridge.path_lost(kPeerGid);
  f.bridge.from_tap(cat({peer_mac, f.own_mac(), hx("0800"), ips[0]}));
  CHECK(f.io.sent.size() == 4);
  CHECK(f.io.resolves.size() == 2);
}

TEST_CASE("a failed path drops its pending packets and counts them", "[ipoib]") {
  Fixture f;
  const Bytes peer_mac = f.learn_peer();
  f.bridge.from_tap(cat({peer_mac, f.own_mac(), hx("0800"), ipv4(kPeerIp)}));
  f.bridge.from_tap(cat({peer_mac, f.own_mac(), hx("0800"), ipv4(kPeerIp)}));
  f.bridge.path_resolved(kPeerGid, false);
  CHECK(f.io.sent.empty());
  CHECK(f.bridge.counters().drop_no_path == 2);
  CHECK(f.bridge.neighbours()[0].state == "failed");
  // The next packet asks again.
  f.bridge.from_tap(cat({peer_mac, f.own_mac(), hx("0800"), ipv4(kPeerIp)}));
  CHECK(f.io.resolves.size() == 2);
}

TEST_CASE("carrier off drops what waits and what comes", "[ipoib]") {
  Fixture f;
  const Bytes peer_mac = f.learn_peer();
  f.bridge.from_tap(cat({peer_mac, f.own_mac(), hx("0800"), ipv4(kPeerIp)}));
  f.bridge.set_carrier(false);
  CHECK(f.bridge.counters().drop_down == 1);
  f.bridge.from_tap(cat({peer_mac, f.own_mac(), hx("0800"), ipv4(kPeerIp)}));
  CHECK(f.bridge.counters().drop_down == 2);
  f.bridge.path_resolved(kPeerGid, true);
  CHECK(f.io.sent.empty());
  f.bridge.set_carrier(true);
  f.bridge.from_tap(cat({peer_mac, f.own_mac(), hx("0800"), ipv4(kPeerIp)}));
  CHECK(f.io.sent.size() == 1);
}

TEST_CASE("received unicast IPv4: own MAC as destination, the sender's as source", "[ipoib]") {
  Fixture f;
  const Bytes peer_mac = f.learn_peer();
  const Bytes ip = ipv4(kOwnIp, 40);
  // Without GRH: the only neighbour with QPN 0x49.
  f.bridge.from_ib(Bridge::RxInfo{0x49, 7, std::nullopt, std::nullopt}, cat({hx("0800 0000"), ip}));
  // With GRH: from the SGID.
  f.bridge.from_ib(Bridge::RxInfo{0x49, 7, kPeerGid, kOwnGid}, cat({hx("0800 0000"), ip}));
  // An unknown QPN without GRH: 06, QPN, SLID.
  f.bridge.from_ib(Bridge::RxInfo{0x123456, 0x0102, std::nullopt, std::nullopt}, cat({hx("0800 0000"), ip}));
  REQUIRE(f.io.frames.size() == 3);
  CHECK(f.io.frames[0] == cat({f.own_mac(), peer_mac, hx("0800"), ip}));
  CHECK(f.io.frames[1] == f.io.frames[0]);
  CHECK(f.io.frames[2] == cat({f.own_mac(), hx("06 123456 0102"), hx("0800"), ip}));
}

TEST_CASE("two neighbours with one QPN: the path's LID tells them apart", "[ipoib]") {
  Fixture f;
  const HwAddr other{0x49, gid_of("fe80000000000000 0002c90300000003")};
  const Bytes other_hw = cat({hx("00 000049"), bytes(other.gid)});
  f.learn_peer();
  f.bridge.from_ib(Bridge::RxInfo{0x49, 3, std::nullopt, std::nullopt},
                   cat({hx("0806 0000 0020 0800 14 04 0002"), other_hw, hx("c6120003"), kOwnHw, kOwnIp}));
  f.io.frames.clear();
  const Bytes ip = ipv4(kOwnIp);
  f.bridge.from_ib(Bridge::RxInfo{0x49, 3, std::nullopt, std::nullopt}, cat({hx("0800 0000"), ip}));
  CHECK(Bytes(f.io.frames[0].begin() + 6, f.io.frames[0].begin() + 12) == hx("06 000049 0003"));
  f.bridge.path_lid(other.gid, 3);
  f.bridge.from_ib(Bridge::RxInfo{0x49, 3, std::nullopt, std::nullopt}, cat({hx("0800 0000"), ip}));
  CHECK(Bytes(f.io.frames[1].begin() + 6, f.io.frames[1].begin() + 12) == bytes(derive_mac(other)));
}

TEST_CASE("frames the bridge cannot translate are dropped by reason, never forwarded", "[ipoib]") {
  Fixture f;
  const Bytes peer_mac = f.learn_peer();
  const Bytes own = f.own_mac();
  f.bridge.from_tap(hx("ffffffffffff 0200000000"));  // 11 bytes
  f.bridge.from_tap(cat({kBcastMac, own, hx("88cc"), Bytes(40, 0)}));  // LLDP
  f.bridge.from_tap(cat({kBcastMac, own, hx("8100 0001 0800"), ipv4(kPeerIp)}));  // VLAN tag
  f.bridge.from_tap(cat({kBcastMac, own, hx("0806 0001 0800 05 04 0001"), Bytes(20, 0)}));  // hlen 5
  f.bridge.from_tap(cat({kBcastMac, own, hx("0806 0001 0800 06 04")}));  // short ARP
  Bytes long_ip = ipv4(kPeerIp, 60);
  long_ip.resize(40);  // total length 60 in 40 bytes
  f.bridge.from_tap(cat({peer_mac, own, hx("0800"), long_ip}));
  f.bridge.from_tap(cat({hx("01005e010203"), own, hx("0800"), ipv4(kPeerIp)}));  // group MAC, unicast IP
  f.bridge.from_tap(cat({hx("02aabbccddee"), own, hx("0800"), ipv4(kPeerIp)}));  // no neighbour
  f.bridge.from_tap(cat({own, own, hx("0800"), ipv4(kPeerIp)}));                 // to itself
  f.bridge.from_tap(cat({peer_mac, own, hx("0800"), ipv4(kPeerIp, 2045)}));      // above the MTU
  const auto& c = f.bridge.counters();
  CHECK(c.drop_malformed_frame == 5);
  CHECK(c.drop_ethertype == 2);
  CHECK(c.drop_unknown_mac == 2);
  CHECK(c.drop_too_big == 1);
  CHECK(c.tap_rx == 10);
  CHECK(f.io.sent.empty());
  CHECK(f.io.resolves.empty());
  // Exactly the MTU (2048 - 4) passes.
  CHECK(f.bridge.mtu() == 2044);
  f.bridge.path_resolved(kPeerGid, true);
  f.bridge.from_tap(cat({peer_mac, own, hx("0800"), ipv4(kPeerIp, 2044)}));
  REQUIRE(f.io.sent.size() == 1);
  CHECK(f.io.sent[0].packet.size() == 2048);
}

TEST_CASE("packets the bridge cannot translate are dropped by reason", "[ipoib]") {
  Fixture f;
  const Bridge::RxInfo rx{0x49, 2, kPeerGid, kOwnGid};
  f.bridge.from_ib(rx, hx("080000"));
  f.bridge.from_ib(rx, cat({hx("88cc 0000"), Bytes(40, 0)}));
  f.bridge.from_ib(rx, cat({hx("0806 0000 0001 0800 06 04 0001"), Bytes(20, 0)}));  // Ethernet ARP on IB
  f.bridge.from_ib(rx, cat({hx("0806 0000 0020 0800 14 04 0002"), kPeerHw}));  // short
  f.bridge.from_ib(rx, cat({hx("0800 0000"), hx("4500 0014")}));  // short IPv4
  f.bridge.from_ib(rx, cat({hx("86dd 0000"), hx("6000 0000 0010 3a ff"), Bytes(32, 0)}));  // payload past the end
  // Our own multicast looped back.
  f.bridge.from_ib(Bridge::RxInfo{0x48, 1, kOwnGid, broadcast_mgid(0xFFFF)}, cat({hx("0800 0000"), ipv4(kPeerIp)}));
  const auto& c = f.bridge.counters();
  CHECK(c.drop_malformed_packet == 5);
  CHECK(c.drop_ethertype == 1);
  CHECK(c.drop_own == 1);
  CHECK(c.ib_rx == 7);
  CHECK(f.io.frames.empty());
}

// Issue 29, finding 11 (docs/ipoib.md "Security"): an unprivileged user on
// a third host (its UD QP 0x51, LID 3, GID ...03; that host's IPoIB QP is
// 0x4a) sends this host forged ARP replies saying that the peer's address
// 198.18.0.2 is at another 20-byte address than the packet's source.
namespace {
const Gid kThirdGid = gid_of("fe80000000000000 0002c90300000003");
const Bytes kThirdIpoibHw = cat({hx("00 00004a"), bytes(kThirdGid)});
const Bridge::RxInfo kFromAttacker{0x51, 3, std::nullopt, std::nullopt};

Bytes arp_reply(const Bytes& sender_hw, const Bytes& sender_ip) {
  return cat({hx("0806 0000 0020 0800 14 04 0002"), sender_hw, sender_ip, kOwnHw, kOwnIp});
}

// The peer known, with its path (LID 2) resolved; what the table says of
// 198.18.0.2: the MAC of the neighbour holding it.
struct Victim : Fixture {
  Bytes peer_mac;
  Victim() {
    peer_mac = learn_peer();
    bridge.path_lid(kPeerGid, 2);
    bridge.path_resolved(kPeerGid, true);
  }
  std::vector<Bytes> holders_of(const std::string& ip) const {
    std::vector<Bytes> out;
    for (const auto& n : bridge.neighbours())
      if (std::find(n.ips.begin(), n.ips.end(), ip) != n.ips.end()) out.push_back(bytes(n.mac));
    return out;
  }
};
}  // namespace

TEST_CASE("a forged ARP naming another QPN than its source is dropped and counted", "[ipoib][security]") {
  Victim v;
  // Another host's IPoIB QP, and the peer's own address, claimed from the attacker's QP.
  v.bridge.from_ib(kFromAttacker, arp_reply(kThirdIpoibHw, kPeerIp));
  v.bridge.from_ib(kFromAttacker, arp_reply(kPeerHw, kPeerIp));
  // The same with a GRH: the SGID is the attacker's host's.
  v.bridge.from_ib(Bridge::RxInfo{0x51, 3, kThirdGid, std::nullopt}, arp_reply(kThirdIpoibHw, kPeerIp));
  CHECK(v.bridge.counters().drop_spoofed == 3);
  CHECK(v.bridge.counters().arp_in == 1);  // the peer's own, at the start
  CHECK(v.io.frames.empty());              // the kernel heard nothing
  CHECK(v.holders_of("198.18.0.2") == std::vector<Bytes>{v.peer_mac});
  CHECK(v.bridge.neighbours().size() == 1);
}

TEST_CASE("a forged ARP from a QPN that repeats the claimed one is told apart by SGID or SLID", "[ipoib][security]") {
  Victim v;
  const Bytes third_hw_as_peer_qpn = cat({hx("00 000049"), bytes(kThirdGid)});
  // The attacker got QPN 0x49 on its host, as the peer's IPoIB QP is there.
  // With a GRH: its own SGID is not the peer's.
  v.bridge.from_ib(Bridge::RxInfo{0x49, 3, kThirdGid, std::nullopt}, arp_reply(kPeerHw, kPeerIp));
  // Without: LID 3 is not the peer's path's LID 2.
  v.bridge.from_ib(Bridge::RxInfo{0x49, 3, std::nullopt, std::nullopt}, arp_reply(kPeerHw, kPeerIp));
  // Nor may LID 2 (the peer's) speak for another GID.
  v.bridge.from_ib(Bridge::RxInfo{0x49, 2, std::nullopt, std::nullopt}, arp_reply(third_hw_as_peer_qpn, kPeerIp));
  CHECK(v.bridge.counters().drop_spoofed == 3);
  CHECK(v.io.frames.empty());
  CHECK(v.holders_of("198.18.0.2") == std::vector<Bytes>{v.peer_mac});
  // What stays possible (documented): the attacker's QP claiming an address for itself.
  v.bridge.from_ib(kFromAttacker, arp_reply(cat({hx("00 000051"), bytes(kThirdGid)}), hx("c6120009")));
  CHECK(v.bridge.counters().drop_spoofed == 3);
  CHECK(v.io.frames.size() == 1);
  // And the peer still answers for itself.
  v.bridge.from_ib(Bridge::RxInfo{0x49, 2, std::nullopt, std::nullopt}, arp_reply(kPeerHw, kPeerIp));
  CHECK(v.io.frames.size() == 2);
}

TEST_CASE("a lost path's LID no longer speaks against its neighbour's ARP", "[ipoib][security]") {
  Victim v;
  // The peer's LID changed (an SM reassigned LIDs): until the path is
  // resolved again, its ARP from LID 7 is refused, then taken.
  v.bridge.from_ib(Bridge::RxInfo{0x49, 7, std::nullopt, std::nullopt}, arp_reply(kPeerHw, kPeerIp));
  CHECK(v.bridge.counters().drop_spoofed == 1);
  v.bridge.path_lost(kPeerGid);
  v.bridge.from_ib(Bridge::RxInfo{0x49, 7, std::nullopt, std::nullopt}, arp_reply(kPeerHw, kPeerIp));
  CHECK(v.bridge.counters().drop_spoofed == 1);
  CHECK(v.io.frames.size() == 1);
}
