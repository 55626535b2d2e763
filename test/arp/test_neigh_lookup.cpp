// arp::NeighLookup (docs/arp.md "RoCE destinations") over a fake kernel:
// which MAC a RoCE address vector gets for each kind of GID, what the
// lookup asks the kernel, and its answers while a neighbour is being
// resolved, unreachable, or behind another interface. No root, no kernel.
#include <linux/neighbour.h>
#include <linux/rtnetlink.h>
#include <netinet/in.h>

#include <catch2/catch.hpp>
#include <map>
#include <vector>

#include "arp/neigh_lookup.hpp"

using namespace openib;
using namespace openib::arp;

namespace {

constexpr int kNetdev = 7, kOther = 9;

Ip ip(const char* text) {
  auto a = Ip::parse(text);
  REQUIRE(a);
  return *a;
}

struct FakeKernel : NeighSource {
  // dst text -> the route; neighbour text -> the entry
  std::map<std::string, rtnl::Route> routes;
  std::map<std::string, rtnl::Neigh> neighs;
  std::vector<std::pair<std::string, bool>> triggered;  // (next hop, create)
  std::vector<int> route_oifs;
  Result<rtnl::Route> route(int ifindex, const Ip& dst) override {
    route_oifs.push_back(ifindex);
    auto it = routes.find(dst.str());
    if (it == routes.end()) return err(ENETUNREACH, "no route");
    return it->second;
  }
  Result<std::optional<rtnl::Neigh>> neighbour(int ifindex, const Ip& addr) override {
    auto it = neighs.find(addr.str());
    if (it == neighs.end() || it->second.ifindex != ifindex) return std::optional<rtnl::Neigh>();
    return std::optional<rtnl::Neigh>(it->second);
  }
  void trigger(int, const Ip& addr, bool create) override { triggered.emplace_back(addr.str(), create); }

  void on_link(const char* dst, int oif = kNetdev) {
    rtnl::Route r;
    r.type = RTN_UNICAST;
    r.oif = oif;
    routes[dst] = r;
  }
  void via(const char* dst, const char* gw) {
    on_link(dst);
    routes[dst].gateway = ip(gw);
  }
  void neigh(const char* addr, uint16_t state, std::vector<uint8_t> mac = {}) {
    rtnl::Neigh n;
    n.ifindex = kNetdev;
    n.addr = ip(addr);
    n.state = state;
    n.lladdr = std::move(mac);
    neighs[addr] = n;
  }
};

Gid gid(const char* text) { return gid_of_ip(ip(text)); }

const std::vector<uint8_t> kMac = {0x02, 0x00, 0x00, 0x93, 0x00, 0x02};
const Mac kMacArr = {0x02, 0x00, 0x00, 0x93, 0x00, 0x02};

}  // namespace

TEST_CASE("GIDs and IP addresses: IPv4-mapped both ways, IPv6 as it is", "[roce-neigh]") {
  const Gid g = gid("198.18.93.2");
  CHECK(g == Gid{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 198, 18, 93, 2});
  CHECK(ip_of_gid(g).str() == "198.18.93.2");
  CHECK(ip_of_gid(gid("fd00:198:18:93::2")).str() == "fd00:198:18:93::2");
  CHECK(ip_of_gid(gid("fe80::1"), 7).str() == "fe80::1%7");
}

TEST_CASE("An on-link neighbour's MAC from the table, asked out of the port's netdev", "[roce-neigh]") {
  FakeKernel k;
  NeighLookup l(k);
  k.on_link("198.18.93.2");
  k.neigh("198.18.93.2", NUD_REACHABLE, kMac);
  auto m = l.dmac(kNetdev, gid("198.18.93.2"));
  REQUIRE(m.ok());
  CHECK(*m == kMacArr);
  CHECK(k.route_oifs == std::vector<int>{kNetdev});
  CHECK(k.triggered.empty());
  k.neigh("198.18.93.2", NUD_STALE, kMac);  // STALE is usable: the kernel probes it itself
  CHECK(l.dmac(kNetdev, gid("198.18.93.2")).ok());
  CHECK(l.counters().found == 2);
}

TEST_CASE("Through a gateway: the gateway's MAC", "[roce-neigh]") {
  FakeKernel k;
  NeighLookup l(k);
  k.via("198.18.94.5", "198.18.93.254");
  k.neigh("198.18.93.254", NUD_PERMANENT, kMac);
  k.neigh("198.18.94.5", NUD_REACHABLE, {0x02, 9, 9, 9, 9, 9});  // not the next hop: not used
  auto m = l.dmac(kNetdev, gid("198.18.94.5"));
  REQUIRE(m.ok());
  CHECK(*m == kMacArr);
}

TEST_CASE("No entry yet: the kernel is made to resolve it and the answer is EAGAIN; then the MAC", "[roce-neigh]") {
  FakeKernel k;
  NeighLookup l(k);
  k.on_link("198.18.93.2");
  auto m = l.dmac(kNetdev, gid("198.18.93.2"));
  REQUIRE_FALSE(m.ok());
  CHECK(m.error().code == EAGAIN);
  REQUIRE(k.triggered.size() == 1);
  CHECK(k.triggered[0] == std::make_pair(std::string("198.18.93.2"), true));  // created
  k.neigh("198.18.93.2", NUD_INCOMPLETE);
  m = l.dmac(kNetdev, gid("198.18.93.2"));
  CHECK(m.error().code == EAGAIN);
  CHECK(k.triggered.back() == std::make_pair(std::string("198.18.93.2"), false));  // the entry exists
  k.neigh("198.18.93.2", NUD_REACHABLE, kMac);
  m = l.dmac(kNetdev, gid("198.18.93.2"));
  REQUIRE(m.ok());
  CHECK(*m == kMacArr);
  CHECK(l.counters().triggered == 2);
}

TEST_CASE("A FAILED neighbour is EHOSTUNREACH (asked again); a static one without a MAC too (left alone)", "[roce-neigh]") {
  FakeKernel k;
  NeighLookup l(k);
  k.on_link("198.18.93.3");
  k.neigh("198.18.93.3", NUD_FAILED);
  CHECK(l.dmac(kNetdev, gid("198.18.93.3")).error().code == EHOSTUNREACH);
  CHECK(k.triggered.size() == 1);
  k.neigh("198.18.93.3", NUD_NOARP);
  CHECK(l.dmac(kNetdev, gid("198.18.93.3")).error().code == EHOSTUNREACH);
  CHECK(k.triggered.size() == 1);
}

TEST_CASE("No route, a route out of another interface, no netdev: ENETUNREACH / ENETDOWN, nothing triggered", "[roce-neigh]") {
  FakeKernel k;
  NeighLookup l(k);
  CHECK(l.dmac(kNetdev, gid("198.18.99.1")).error().code == ENETUNREACH);
  k.on_link("198.18.95.1", kOther);
  CHECK(l.dmac(kNetdev, gid("198.18.95.1")).error().code == ENETUNREACH);
  CHECK(l.dmac(0, gid("198.18.95.1")).error().code == ENETDOWN);
  CHECK(k.triggered.empty());
  CHECK(l.counters().failures == 3);
}

TEST_CASE("A local address needs no MAC (the device loops it back); link-local and multicast GIDs ask nobody", "[roce-neigh]") {
  FakeKernel k;
  NeighLookup l(k);
  k.routes["198.18.93.1"].type = RTN_LOCAL;
  k.routes["198.18.93.1"].oif = 1;  // (the kernel names lo)
  auto m = l.dmac(kNetdev, gid("198.18.93.1"));
  REQUIRE(m.ok());
  CHECK(*m == Mac{});
  k.route_oifs.clear();
  // fe80:: with a MAC's EUI-64, and groups: arp::dmac_from_gid
  m = l.dmac(kNetdev, gid("fe80::ff:fe93:2"));
  REQUIRE(m.ok());
  CHECK(*m == Mac{0x02, 0x00, 0x00, 0x93, 0x00, 0x02});
  m = l.dmac(kNetdev, gid("239.1.2.3"));
  REQUIRE(m.ok());
  CHECK(*m == Mac{0x01, 0x00, 0x5e, 0x01, 0x02, 0x03});
  CHECK(k.route_oifs.empty());
}

TEST_CASE("An IPv6 neighbour, link-local next hop scoped to the netdev", "[roce-neigh]") {
  FakeKernel k;
  NeighLookup l(k);
  k.via("fd00:198:18:94::5", "fe80::1");
  k.neighs["fe80::1%7"] = rtnl::Neigh{false, kNetdev, ip("fe80::1%7"), NUD_REACHABLE, 0, kMac};
  auto m = l.dmac(kNetdev, gid("fd00:198:18:94::5"));
  REQUIRE(m.ok());
  CHECK(*m == kMacArr);
}
