// src/arp's resolver against the real kernel (docs/arp.md "Tests"): ARP
// and ND over a veth pair between two network namespaces, routes through
// a gateway, local and loopback addresses, an interface that is not
// IPoIB, no route, an address nobody has, and the cache's invalidation by
// neighbour and address events. ibd's IPoIB interfaces are stood in for
// by a fake LinkDirectory that knows the veth peer's MAC as a made-up GID.
//
// The process moves itself into a network namespace of its own (unshare);
// the peer's namespace is held by a child that dies with the process
// (PR_SET_PDEATHSIG): both, and every interface in them, end with the
// test however it ends. Needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN).
#include <arpa/inet.h>
#include <net/if.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "arp/neigh_lookup.hpp"
#include "arp/resolver.hpp"
#include "../unit/shell.hpp"

using namespace openib;
using openib::test::must;
using openib::test::sh;
using namespace openib::arp;
using namespace std::chrono_literals;
using Gid = std::array<uint8_t, 16>;

namespace {

constexpr auto kPatience = std::chrono::seconds(20);  // a bound, not a measure

const Gid kGidA = {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x00, 0x02, 0xc9, 0x03, 0x00, 0x18, 0x30, 0x01};
const Gid kGidB = {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x00, 0x02, 0xc9, 0x03, 0x00, 0x18, 0x30, 0x02};
const std::vector<uint8_t> kMacB = {0x02, 0x00, 0x00, 0x18, 0x30, 0x02};

Ip ip(const char* text) {
  auto a = Ip::parse(text);
  REQUIRE(a);
  return *a;
}

// The namespaces (once per process): ours, with sbaa0 (the "IPoIB"
// interface) and sbax0 (another interface); the peer's, with sbab0.
struct Net {
  pid_t peer = 0;
  int a = 0;  // sbaa0's ifindex
  int x = 0;  // sbax0's
  std::string in_peer;
};
const Net& net() {
  static Net n = [] {
    Net s;
    int r = ::unshare(CLONE_NEWNET);
    INFO("unshare(CLONE_NEWNET) needs root: " << std::strerror(errno));
    REQUIRE(r == 0);
    int ready[2];
    REQUIRE(::pipe(ready) == 0);
    pid_t parent = ::getpid();
    s.peer = ::fork();
    REQUIRE(s.peer >= 0);
    if (s.peer == 0) {  // holds the peer's namespace until the test ends
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent || ::unshare(CLONE_NEWNET) != 0) ::_exit(1);
      (void)!::write(ready[1], "x", 1);
      for (;;) ::pause();
    }
    char c;
    REQUIRE(::read(ready[0], &c, 1) == 1);
    ::close(ready[0]);
    ::close(ready[1]);
    s.in_peer = "nsenter -t " + std::to_string(s.peer) + " -n ";
    // No duplicate address detection: the link-local addresses are there
    // once the links are up, not a second later (an address event drops
    // the resolver's cache, as it should, but mid-test).
    must("sysctl -qw net.ipv6.conf.default.accept_dad=0 net.ipv6.conf.all.accept_dad=0");
    must(s.in_peer + "sysctl -qw net.ipv6.conf.default.accept_dad=0 net.ipv6.conf.all.accept_dad=0");
    must("ip link set lo up");
    must("ip link add sbaa0 address 02:00:00:18:30:01 type veth peer name sbab0 address 02:00:00:18:30:02");
    must("ip link set sbab0 netns " + std::to_string(s.peer));
    must("ip addr add 198.18.30.1/24 dev sbaa0");
    must("ip -6 addr add fd00:198:18:30::1/64 dev sbaa0 nodad");
    must("ip link set sbaa0 up");
    must(s.in_peer + "ip link set lo up");
    must(s.in_peer + "ip addr add 198.18.30.2/24 dev sbab0");
    must(s.in_peer + "ip -6 addr add fd00:198:18:30::2/64 dev sbab0 nodad");
    must(s.in_peer + "ip link set sbab0 up");
    must("ip route add 198.18.31.0/24 via 198.18.30.2");
    must("ip -6 route add fd00:198:18:31::/64 via fd00:198:18:30::2");
    must("ip route add 224.0.0.0/4 dev sbaa0");
    must("ip link add sbax0 type veth peer name sbay0");
    must("ip addr add 198.18.32.1/24 dev sbax0");
    must("ip link set sbax0 up && ip link set sbay0 up");
    s.a = static_cast<int>(::if_nametoindex("sbaa0"));
    s.x = static_cast<int>(::if_nametoindex("sbax0"));
    REQUIRE(s.a > 0);
    REQUIRE(s.x > 0);
    return s;
  }();
  return n;
}

// ibd's IPoIB interfaces, faked: sbaa0 is one; the peer's MAC is a GID.
struct FakeLinks : LinkDirectory {
  std::optional<Link> link(int ifindex) const override {
    if (ifindex != net().a) return std::nullopt;
    return Link{net().a, 1, kGidA, 0xFFFF};
  }
  std::vector<Link> links() const override { return {*link(net().a)}; }
  std::optional<Gid> gid_of(int ifindex, std::span<const uint8_t> lladdr) const override {
    if (ifindex == net().a && std::vector<uint8_t>(lladdr.begin(), lladdr.end()) == kMacB) return kGidB;
    return std::nullopt;
  }
};

template <typename Pred>
bool run_until(boost::asio::io_context& io, Pred done) {
  auto deadline = std::chrono::steady_clock::now() + kPatience;
  while (!done() && std::chrono::steady_clock::now() < deadline) {
    io.restart();
    io.run_for(std::chrono::milliseconds(10));
  }
  return done();
}

// An address given as text, or one with its scope.
struct Dst {
  Dst(const char* text) : a(ip(text)), text(text) {}
  Dst(const char* text, int scope) : a(ip(text)), text(text) { a.scope_id = static_cast<uint32_t>(scope); }
  Ip a;
  const char* text;
};

struct Fixture {
  Fixture(Config cfg = {}) : resolver(io, links, cfg) {
    net();
    auto r = resolver.start();
    INFO((r.ok() ? std::string() : r.error().str()));
    REQUIRE(r.ok());
  }
  Result<Resolved> resolve(const Dst& dst, std::optional<Ip> src = std::nullopt,
                           std::chrono::milliseconds timeout = 15s) {
    std::optional<Result<Resolved>> got;
    bool returned = false;
    resolver.resolve(src, dst.a, timeout, [&](Result<Resolved> r) {
      CHECK(returned);  // never inside resolve()
      got = std::move(r);
    });
    returned = true;
    REQUIRE(run_until(io, [&] { return got.has_value(); }));
    return std::move(*got);
  }
  Resolved ok(const Dst& dst) {
    auto r = resolve(dst);
    INFO(dst.text << ": " << (r.ok() ? std::string() : r.error().str()));
    REQUIRE(r.ok());
    return *r;
  }
  Error fails(const Dst& dst, std::optional<Ip> src = std::nullopt, std::chrono::milliseconds timeout = 15s) {
    auto r = resolve(dst, src, timeout);
    REQUIRE_FALSE(r.ok());
    INFO(r.error().str());
    return r.error();
  }
  boost::asio::io_context io;
  FakeLinks links;
  Resolver resolver;
};

void forget_neighbours() {
  net();
  must("ip neigh flush dev sbaa0");
}

}  // namespace

TEST_CASE("A neighbour resolves to its GID through the kernel's ARP / ND, then from the cache", "[arp]") {
  struct Case {
    const char* dst;
    const char* src;
    const char* show;
  };
  for (const Case c : {Case{"198.18.30.2", "198.18.30.1", "ip neigh show 198.18.30.2 dev sbaa0"},
                       Case{"fd00:198:18:30::2", "fd00:198:18:30::1", "ip -6 neigh show fd00:198:18:30::2 dev sbaa0"}}) {
    INFO(c.dst);
    forget_neighbours();
    Fixture f;
    Resolved r = f.ok(c.dst);
    CHECK(r.dgid == kGidB);
    CHECK(r.sgid == kGidA);
    CHECK(r.src == ip(c.src));
    CHECK(r.dst == ip(c.dst));
    CHECK(r.ifindex == net().a);
    CHECK(r.pkey == 0xFFFF);
    CHECK(r.port == 1);
    CHECK_FALSE(r.local);
    CHECK(f.resolver.counters().kernel_resolutions == 1);
    // The kernel resolved it: its neighbour table has the peer's MAC.
    CHECK(sh(c.show).out.find("02:00:00:18:30:02") != std::string::npos);

    Resolved again = f.ok(c.dst);
    CHECK(again.dgid == kGidB);
    CHECK(f.resolver.counters().cache_hits == 1);
    CHECK(f.resolver.counters().kernel_resolutions == 1);
    CHECK(f.resolver.json().find(std::string("\"dst\":\"") + c.dst + "\"") != std::string::npos);

    // With the source given.
    auto from = f.resolve(c.dst, ip(c.src));
    REQUIRE(from.ok());
    CHECK(from->dgid == kGidB);
  }
}

TEST_CASE("20 concurrent requests for one address share one resolution", "[arp]") {
  forget_neighbours();
  Fixture f;
  std::vector<Result<Resolved>> got;
  for (int i = 0; i < 20; ++i)
    f.resolver.resolve(std::nullopt, ip("198.18.30.2"), 15s, [&](Result<Resolved> r) { got.push_back(std::move(r)); });
  REQUIRE(run_until(f.io, [&] { return got.size() == 20; }));
  for (auto& r : got) {
    REQUIRE(r.ok());
    CHECK(r->dgid == kGidB);
  }
  CHECK(f.resolver.counters().kernel_resolutions == 1);
  CHECK(f.resolver.counters().shared == 19);
  CHECK(f.resolver.counters().requests == 20);
}

TEST_CASE("An address nobody has fails EHOSTUNREACH after max_tries; the caller's shorter timeout ETIMEDOUT", "[arp]") {
  forget_neighbours();
  Fixture f(Config{200ms, 3, 4096});
  Error e = f.fails("198.18.30.99");
  CHECK(e.code == EHOSTUNREACH);
  CHECK(e.message.find("198.18.30.99") != std::string::npos);
  CHECK(e.message.find("sbaa0") != std::string::npos);
  CHECK(f.resolver.counters().retries == 2);
  CHECK(f.resolver.counters().failures == 1);

  Fixture slow(Config{1000ms, 3, 4096});
  Error t = slow.fails("198.18.30.98", std::nullopt, 100ms);
  CHECK(t.code == ETIMEDOUT);
  CHECK(slow.resolver.counters().timeouts == 1);

  Error v6 = f.fails("fd00:198:18:30::99");
  CHECK(v6.code == EHOSTUNREACH);
}

TEST_CASE("Through a gateway, the gateway's GID", "[arp]") {
  forget_neighbours();
  Fixture f;
  Resolved r = f.ok("198.18.31.5");
  CHECK(r.dgid == kGidB);
  CHECK(r.dst == ip("198.18.31.5"));
  CHECK(r.src == ip("198.18.30.1"));
  Resolved r6 = f.ok("fd00:198:18:31::5");
  CHECK(r6.dgid == kGidB);
  CHECK(r6.src == ip("fd00:198:18:30::1"));
}

TEST_CASE("An IPv6 link-local neighbour resolves on the interface its scope names", "[arp]") {
  forget_neighbours();
  Fixture f;
  Resolved r = f.ok(Dst("fe80::ff:fe18:3002", net().a));  // sbab0's, from its MAC (EUI-64)
  CHECK(r.dgid == kGidB);
  CHECK(r.src == Dst("fe80::ff:fe18:3001", net().a).a);
  CHECK(r.src.str() == "fe80::ff:fe18:3001%" + std::to_string(net().a));
}

TEST_CASE("A multicast address resolves to its IPoIB MGID (RFC 4391 4), no neighbour", "[arp]") {
  Fixture f;
  Resolved r = f.ok("239.1.2.3");
  const Gid v4 = {0xff, 0x12, 0x40, 0x1b, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0x0f, 0x01, 0x02, 0x03};
  CHECK(r.dgid == v4);
  CHECK(r.sgid == kGidA);
  CHECK(r.src == ip("198.18.30.1"));
  CHECK_FALSE(r.local);
  const Gid v6 = {0xff, 0x12, 0x60, 0x1b, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0x01, 0, 0x03};
  CHECK(f.ok(Dst("ff02::1:3", net().a)).dgid == v6);
}

TEST_CASE("Local and loopback addresses resolve to the local port", "[arp]") {
  Fixture f;
  for (const char* a : {"198.18.30.1", "fd00:198:18:30::1"}) {
    Resolved r = f.ok(a);
    CHECK(r.local);
    CHECK(r.sgid == kGidA);
    CHECK(r.dgid == kGidA);
    CHECK(r.ifindex == net().a);
    CHECK(r.src == ip(a));
  }
  // Not an address of a link (loopback, another interface's): the first link.
  for (const char* a : {"127.0.0.1", "::1", "198.18.32.1"}) {
    Resolved r = f.ok(a);
    CHECK(r.local);
    CHECK(r.dgid == kGidA);
    CHECK(r.ifindex == net().a);
  }
  CHECK(f.resolver.counters().kernel_resolutions == 5);  // route lookups only
}

TEST_CASE("An address routed via another interface fails ENODEV; no route ENETUNREACH", "[arp]") {
  Fixture f;
  Error e = f.fails("198.18.32.7");
  CHECK(e.code == ENODEV);
  CHECK(e.message == "198.18.32.7 routes via sbax0, not an IPoIB interface");
  CHECK(f.fails("198.19.200.1").code == ENETUNREACH);
  CHECK(f.fails("fd00:198:18:99::1").code == ENETUNREACH);
  // A source that is not this host's.
  CHECK(f.fails("198.18.30.2", ip("198.18.30.77")).code == EADDRNOTAVAIL);
  CHECK(f.resolver.counters().failures == 4);
}

TEST_CASE("link_of_address tells the links' addresses from others", "[arp]") {
  Fixture f;
  auto l = f.resolver.link_of_address(ip("198.18.30.1"));
  REQUIRE(l);
  CHECK(l->ifindex == net().a);
  CHECK(l->gid == kGidA);
  CHECK(f.resolver.link_of_address(ip("fd00:198:18:30::1")));
  CHECK_FALSE(f.resolver.link_of_address(ip("198.18.32.1")));  // this host's, not a link's
  CHECK_FALSE(f.resolver.link_of_address(ip("198.18.30.2")));  // the peer's
}

TEST_CASE("A neighbour deleted or an address removed drops the cache: the next resolve asks the kernel", "[arp]") {
  forget_neighbours();
  Fixture f;
  std::vector<std::tuple<int, std::string, bool>> changes;
  f.resolver.set_addr_change_handler([&](int ifindex, const Ip& a, bool added) { changes.emplace_back(ifindex, a.str(), added); });
  f.ok("198.18.30.2");
  f.ok("198.18.30.2");
  CHECK(f.resolver.counters().kernel_resolutions == 1);

  must("ip neigh del 198.18.30.2 dev sbaa0");
  REQUIRE(run_until(f.io, [&] { return f.resolver.counters().invalidations >= 1; }));
  CHECK(f.ok("198.18.30.2").dgid == kGidB);
  CHECK(f.resolver.counters().kernel_resolutions == 2);

  must("ip addr add 198.18.30.50/24 dev sbaa0");
  REQUIRE(run_until(f.io, [&] { return !changes.empty(); }));
  CHECK(changes.back() == std::tuple<int, std::string, bool>(net().a, "198.18.30.50", true));
  CHECK(f.resolver.link_of_address(ip("198.18.30.50")));
  f.ok("198.18.30.2");
  CHECK(f.resolver.counters().kernel_resolutions == 3);  // the addition dropped the cache
  f.ok("198.18.30.2");
  CHECK(f.resolver.counters().kernel_resolutions == 3);

  must("ip addr del 198.18.30.50/24 dev sbaa0");
  REQUIRE(run_until(f.io, [&] { return std::get<2>(changes.back()) == false; }));
  CHECK(changes.back() == std::tuple<int, std::string, bool>(net().a, "198.18.30.50", false));
  CHECK_FALSE(f.resolver.link_of_address(ip("198.18.30.50")));
  f.ok("198.18.30.2");
  CHECK(f.resolver.counters().kernel_resolutions == 4);

  f.resolver.flush();
  f.ok("198.18.30.2");
  CHECK(f.resolver.counters().kernel_resolutions == 5);
}

TEST_CASE("Requests the resolver cannot take fail with a clear error, later", "[arp]") {
  Fixture f;
  Ip bad;
  bad.family = AF_UNIX;
  std::optional<Result<Resolved>> got;
  f.resolver.resolve(std::nullopt, bad, 1s, [&](Result<Resolved> r) { got = std::move(r); });
  CHECK_FALSE(got);
  REQUIRE(run_until(f.io, [&] { return got.has_value(); }));
  REQUIRE_FALSE(got->ok());
  CHECK(got->error().code == EAFNOSUPPORT);
  CHECK(f.fails("198.18.30.2", ip("fd00:198:18:30::1")).code == EINVAL);
}

TEST_CASE("A resolver destroyed with requests under way calls none of their callbacks", "[arp]") {
  net();
  boost::asio::io_context io;
  FakeLinks links;
  auto r = std::make_unique<Resolver>(io, links, Config{100ms, 3, 4096});
  REQUIRE(r->start().ok());
  bool unreachable_called = false;
  r->resolve(std::nullopt, ip("198.18.30.97"), 10s, [&](Result<Resolved>) { unreachable_called = true; });
  io.run_for(std::chrono::milliseconds(1));  // its route asked, its neighbour perhaps
  r.reset();
  io.restart();
  io.run_for(std::chrono::milliseconds(500));  // past every timer the resolver had set
  CHECK_FALSE(unreachable_called);
  CHECK(io.stopped());  // nothing of the resolver's is left in the io_context
}

TEST_CASE("An overrun of the event socket drops the cache, is counted, and the addresses are dumped again", "[arp]") {
  Fixture f;
  std::vector<std::pair<std::string, bool>> changes;
  f.resolver.set_addr_change_handler([&](int, const Ip& a, bool added) { changes.emplace_back(a.str(), added); });
  f.ok("198.18.30.1");  // cached
  // 1,024 addresses (and their local routes) on the other interface while
  // the resolver does not read: more events than its socket holds. Then
  // one on the link, whose event may or may not be among those lost.
  std::string adds = "/tmp/sba-arp-adds." + std::to_string(::getpid());
  std::string dels = adds + ".del";
  struct Remove {
    std::string path;
    ~Remove() { std::remove(path.c_str()); }
  } remove_adds{adds}, remove_dels{dels};
  {
    std::FILE* a = std::fopen(adds.c_str(), "w");
    std::FILE* d = std::fopen(dels.c_str(), "w");
    REQUIRE((a && d));
    for (int i = 0; i < 1024; ++i) {
      std::fprintf(a, "addr add 198.18.%d.%d/32 dev sbax0\n", 40 + i / 256, i % 256);
      std::fprintf(d, "addr del 198.18.%d.%d/32 dev sbax0\n", 40 + i / 256, i % 256);
    }
    std::fprintf(a, "addr add 198.18.30.60/24 dev sbaa0\n");
    std::fprintf(d, "addr del 198.18.30.60/24 dev sbaa0\n");
    std::fclose(a);
    std::fclose(d);
  }
  auto r = sh("ip -batch " + adds);
  INFO(r.out);
  REQUIRE(r.status == 0);
  REQUIRE(run_until(f.io, [&] { return f.resolver.counters().netlink_errors >= 1; }));
  REQUIRE(run_until(f.io, [&] { return f.resolver.link_of_address(ip("198.18.30.60")).has_value(); }));
  CHECK(f.resolver.counters().invalidations >= 1);
  bool told = false;
  for (const auto& c : changes) told |= c == std::pair<std::string, bool>("198.18.30.60", true);
  CHECK(told);
  auto again = f.resolve("198.18.30.1");
  REQUIRE(again.ok());
  CHECK(f.resolver.counters().kernel_resolutions == 2);  // not from the cache
  CHECK(sh("ip -batch " + dels).status == 0);
}

TEST_CASE("A permanent neighbour entry is used as it is; one whose MAC has no GID fails at once, left as it was", "[arp]") {
  Fixture f(Config{100ms, 3, 4096});
  must("ip neigh replace 198.18.30.70 lladdr 02:00:00:18:30:02 dev sbaa0 nud permanent");
  must("ip neigh replace 198.18.30.71 lladdr 02:00:00:18:30:99 dev sbaa0 nud permanent");
  Resolved r = f.ok("198.18.30.70");  // nobody has it, but the table says who: no ARP
  CHECK(r.dgid == kGidB);
  Error e = f.fails("198.18.30.71");
  CHECK(e.code == EHOSTUNREACH);
  INFO(e.message);
  CHECK(e.message.find("02:00:00:18:30:99, which maps to no GID") != std::string::npos);
  CHECK(f.resolver.counters().retries == 0);
  // The administrator's entry is untouched (NTF_USE would have made it INCOMPLETE).
  CHECK(sh("ip neigh show 198.18.30.71 dev sbaa0").out.find("lladdr 02:00:00:18:30:99 PERMANENT") != std::string::npos);
  must("ip neigh del 198.18.30.70 dev sbaa0");
  must("ip neigh del 198.18.30.71 dev sbaa0");
}

TEST_CASE("A dynamic entry whose MAC has no GID is resolved afresh, with the right MAC", "[arp]") {
  forget_neighbours();
  Fixture f;
  must("ip neigh replace 198.18.30.2 lladdr 02:00:00:18:30:77 dev sbaa0 nud stale");  // a MAC of no GID
  Resolved r = f.ok("198.18.30.2");
  CHECK(r.dgid == kGidB);
  CHECK(f.resolver.counters().retries == 0);  // at the first try: no wait for the kernel's DELAY and PROBE
  CHECK(sh("ip neigh show 198.18.30.2 dev sbaa0").out.find("02:00:00:18:30:02") != std::string::npos);
}

TEST_CASE("An IPv6 neighbour resolves while the link's link-local address is still tentative", "[arp]") {
  // The second or two after an interface comes up: Linux sends no
  // solicitation for a bare NTF_USE then (no link-local past DAD to send it
  // from), so the entry would fail after its probes; the resolver's probe
  // datagram from the route's source makes it solicit (docs/arp.md, step 5).
  forget_neighbours();
  must("ip -6 addr flush dev sbaa0 scope link");
  must("sysctl -qw net.ipv6.conf.sbaa0.accept_dad=1 net.ipv6.conf.sbaa0.dad_transmits=60");  // DAD for a minute
  must("ip -6 addr add fe80::ff:fe18:3001/64 dev sbaa0");
  struct Restore {
    ~Restore() {
      sh("ip -6 addr del fe80::ff:fe18:3001/64 dev sbaa0");
      sh("sysctl -qw net.ipv6.conf.sbaa0.accept_dad=0 net.ipv6.conf.sbaa0.dad_transmits=1");
      sh("ip -6 addr add fe80::ff:fe18:3001/64 dev sbaa0 nodad");
    }
  } restore;
  REQUIRE(sh("ip -6 addr show dev sbaa0 tentative").out.find("fe80::ff:fe18:3001") != std::string::npos);
  Fixture f;
  auto r = f.resolve("fd00:198:18:30::2", std::nullopt, 2500ms);  // less than the kernel's 3 probes
  INFO((r.ok() ? std::string() : r.error().str()));
  REQUIRE(r.ok());
  CHECK(r->dgid == kGidB);
  CHECK(r->src == ip("fd00:198:18:30::1"));
  CHECK(f.resolver.counters().udp_probes >= 1);
  // Still tentative: the answer did not come from a link-local past DAD.
  CHECK(sh("ip -6 addr show dev sbaa0 tentative").out.find("fe80::ff:fe18:3001") != std::string::npos);

  // A link with a link-local address past DAD: NTF_USE as before, no probe.
  must("ip -6 addr del fe80::ff:fe18:3001/64 dev sbaa0");
  must("ip -6 addr add fe80::ff:fe18:3001/64 dev sbaa0 nodad");
  forget_neighbours();
  Fixture g;
  CHECK(g.ok("fd00:198:18:30::2").dgid == kGidB);
  CHECK(g.resolver.counters().udp_probes == 0);
}

// ---- RoCE (docs/arp.md "RoCE destinations") ----------------------------------

namespace {
// sbaa0 as a RoCE port's netdev: ethernet set, no GID behind a MAC.
struct EthLinks : LinkDirectory {
  std::optional<Link> link(int ifindex) const override {
    if (ifindex != net().a) return std::nullopt;
    Link l{net().a, 1, kGidA, 0xFFFF};
    l.ethernet = true;
    return l;
  }
  std::vector<Link> links() const override { return {*link(net().a)}; }
  std::optional<Gid> gid_of(int, std::span<const uint8_t>) const override { return std::nullopt; }
};
}  // namespace

TEST_CASE("On a RoCE netdev the GIDs are the IP addresses and the neighbour's MAC comes with them", "[arp][roce-neigh]") {
  forget_neighbours();
  boost::asio::io_context io;
  EthLinks links;
  Resolver resolver(io, links);
  REQUIRE(resolver.start().ok());
  auto resolve = [&](const char* dst) {
    std::optional<Result<Resolved>> got;
    resolver.resolve(std::nullopt, ip(dst), 15s, [&](Result<Resolved> r) { got = std::move(r); });
    REQUIRE(run_until(io, [&] { return got.has_value(); }));
    INFO(dst << ": " << (got->ok() ? std::string() : got->error().str()));
    REQUIRE(got->ok());
    return **got;
  };
  Resolved r = resolve("198.18.30.2");
  CHECK(r.sgid == gid_of_ip(ip("198.18.30.1")));
  CHECK(r.dgid == gid_of_ip(ip("198.18.30.2")));
  CHECK(r.dmac == std::array<uint8_t, 6>{0x02, 0x00, 0x00, 0x18, 0x30, 0x02});
  CHECK_FALSE(r.local);
  r = resolve("fd00:198:18:30::2");
  CHECK(r.sgid == gid_of_ip(ip("fd00:198:18:30::1")));
  CHECK(r.dgid == gid_of_ip(ip("fd00:198:18:30::2")));
  CHECK(r.dmac == std::array<uint8_t, 6>{0x02, 0x00, 0x00, 0x18, 0x30, 0x02});
  r = resolve("198.18.31.7");  // through the gateway: its MAC, the destination's GID
  CHECK(r.dgid == gid_of_ip(ip("198.18.31.7")));
  CHECK(r.dmac == std::array<uint8_t, 6>{0x02, 0x00, 0x00, 0x18, 0x30, 0x02});
  r = resolve("198.18.30.1");  // local: the device loops it back, no MAC
  CHECK(r.local);
  CHECK(r.sgid == gid_of_ip(ip("198.18.30.1")));
  CHECK(r.dgid == r.sgid);
  r = resolve("239.1.2.3");  // a group: its IP as the GID, its group MAC
  CHECK(r.dgid == gid_of_ip(ip("239.1.2.3")));
  CHECK(r.dmac == std::array<uint8_t, 6>{0x01, 0x00, 0x5e, 0x01, 0x02, 0x03});
}

TEST_CASE("NeighLookup on the kernel: EAGAIN while ARP runs, then the MAC, always out of the netdev", "[arp][roce-neigh]") {
  forget_neighbours();
  KernelNeighbours kernel;
  NeighLookup lookup(kernel);
  const Gid peer = gid_of_ip(ip("198.18.30.2"));
  auto m = lookup.dmac(net().a, peer);
  REQUIRE_FALSE(m.ok());
  CHECK(m.error().code == EAGAIN);
  auto deadline = std::chrono::steady_clock::now() + kPatience;
  while (!m.ok() && m.error().code == EAGAIN && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(20ms);
    m = lookup.dmac(net().a, peer);
  }
  INFO((m.ok() ? std::string() : m.error().str()));
  REQUIRE(m.ok());
  CHECK(*m == std::array<uint8_t, 6>{0x02, 0x00, 0x00, 0x18, 0x30, 0x02});
  m = lookup.dmac(net().a, gid_of_ip(ip("198.18.31.9")));  // via the gateway 198.18.30.2 (known now)
  REQUIRE(m.ok());
  CHECK(*m == std::array<uint8_t, 6>{0x02, 0x00, 0x00, 0x18, 0x30, 0x02});
  // Out of the netdev whatever the table says (Linux's route lookup with
  // the netdev as oif takes a destination it has no route for as on-link):
  // ARP on the netdev, not yet answered.
  CHECK(lookup.dmac(net().a, gid_of_ip(ip("198.18.32.7"))).error().code == EAGAIN);  // sbax0's subnet
  CHECK(lookup.dmac(net().a, gid_of_ip(ip("203.0.113.1"))).error().code == EAGAIN);  // no route at all
  CHECK(lookup.dmac(net().x + 100, peer).error().code != 0);  // no such interface: refused
}
