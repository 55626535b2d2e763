// arp::join_group (group_membership.hpp; docs/cma.md "RoCE"): the kernel's
// membership of a multicast group on an interface lasts as long as the
// descriptor. Run in a network namespace of the test's own (root): the
// groups show in its /proc/self/net/igmp and igmp6, on its lo.
#include <arpa/inet.h>
#include <net/if.h>
#include <sched.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "arp/group_membership.hpp"

using namespace openib;
using namespace openib::arp;

namespace {

Ip ip(const char* text) {
  auto a = Ip::parse(text);
  REQUIRE(a);
  return *a;
}

std::string read_all(const char* path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// The kernel's listing of a group: IPv4 as the raw 32-bit value in hex
// (its /proc/net/igmp prints it so), IPv6 as 32 hex digits.
std::string listed(const Ip& g) {
  char b[40] = {};
  if (g.family == AF_INET) {
    uint32_t raw;
    std::memcpy(&raw, g.bytes.data(), 4);
    std::snprintf(b, sizeof b, "%08X", raw);
  } else {
    for (int i = 0; i < 16; ++i) std::snprintf(b + 2 * i, 3, "%02x", g.bytes[i]);
  }
  return b;
}

void own_netns() {
  static bool done = false;
  if (done) return;
  REQUIRE(::unshare(CLONE_NEWNET) == 0);  // (root)
  done = true;
}

}  // namespace

TEST_CASE("A group joined on lo is the kernel's until the descriptor closes", "[arp-group]") {
  own_netns();
  const int lo = static_cast<int>(if_nametoindex("lo"));
  REQUIRE(lo > 0);
  for (const char* text : {"239.93.0.1", "ff15::93"}) {
    const Ip g = ip(text);
    const char* table = g.family == AF_INET ? "/proc/self/net/igmp" : "/proc/self/net/igmp6";
    CAPTURE(text);
    {
      auto m = join_group(lo, g);
      REQUIRE(m);
      CHECK(read_all(table).find(listed(g)) != std::string::npos);
    }
    CHECK(read_all(table).find(listed(g)) == std::string::npos);
  }
}

TEST_CASE("No multicast address, or no such interface: an error, nothing joined", "[arp-group]") {
  own_netns();
  auto u = join_group(1, ip("198.18.93.1"));
  REQUIRE(!u);
  CHECK(u.error().code == EINVAL);
  auto u6 = join_group(1, ip("fd00:93::1"));
  REQUIRE(!u6);
  CHECK(u6.error().code == EINVAL);
  auto nodev = join_group(9999, ip("239.93.0.1"));
  REQUIRE(!nodev);
  CHECK(nodev.error().code == ENODEV);
}
