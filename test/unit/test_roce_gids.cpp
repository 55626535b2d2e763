// src/eth_tap/roce_gids: which addresses of a RoCE port's netdev become
// RoCEv2 GIDs and at which entries of the GID table (docs/operations.md
// "RoCE ports"; RFC 4291 2.5.5.2 for the IPv4-mapped form).
#include <sys/socket.h>

#include <catch2/catch.hpp>

#include "eth_tap/roce_gids.hpp"

using openib::eth::Gid;
using openib::eth::GidStep;
using openib::eth::GidTable;
using openib::eth::roce_gid_of;
using openib::ipoib::IpAddr;

namespace {

IpAddr ip(const char* text) {
  auto a = IpAddr::parse(text);
  REQUIRE(a.ok());
  return *a;
}

Gid gid(std::initializer_list<uint8_t> tail, bool v4) {
  Gid g{};
  if (v4) g[10] = g[11] = 0xff;
  size_t i = 16 - tail.size();
  for (uint8_t b : tail) g[i++] = b;
  return g;
}

// Applies every step the table asks for, answering `ok`; returns them.
std::vector<GidStep> drain(GidTable& t, bool ok = true) {
  std::vector<GidStep> steps;
  for (int i = 0; i < 64; ++i) {
    auto s = t.next_step();
    if (!s) break;
    steps.push_back(*s);
    t.done(*s, ok);
  }
  return steps;
}

}  // namespace

TEST_CASE("roce gids: the GID of an address", "[roce-gids]") {
  CHECK(roce_gid_of(ip("198.18.92.1/24")) == gid({198, 18, 92, 1}, true));
  Gid v6{};
  v6[0] = 0xfd;
  v6[3] = 0x92;
  v6[15] = 1;
  CHECK(roce_gid_of(ip("fd00:92::1/64")) == v6);
  // No GID: link-local (GID 0 is the interface's own), multicast,
  // loopback, unspecified, 0.0.0.0 and 127/8.
  CHECK(!roce_gid_of(ip("fe80::3:ff:fe00:a01/64")));
  CHECK(!roce_gid_of(ip("febf::1/64")));
  CHECK(!roce_gid_of(ip("ff02::1/128")));
  CHECK(!roce_gid_of(ip("::1/128")));
  CHECK(!roce_gid_of(ip("::/128")));
  CHECK(!roce_gid_of(ip("127.0.0.1/8")));
  CHECK(!roce_gid_of(ip("0.0.0.0/0")));
  IpAddr other;
  other.family = AF_UNIX;
  CHECK(!roce_gid_of(other));
}

TEST_CASE("roce gids: entries follow the addresses", "[roce-gids]") {
  GidTable t(16);
  CHECK(!t.next_step());
  t.address(true, ip("198.18.92.1/24"));
  t.address(true, ip("fd00:92::1/64"));
  t.address(true, ip("fe80::1/64"));  // no GID
  auto steps = drain(t);
  REQUIRE(steps.size() == 2);
  CHECK(steps[0].index == 1);  // entry 0 is the port's own
  CHECK(steps[1].index == 2);
  CHECK(t.programmed().size() == 2);
  // The same address with another prefix length: one GID, removed with the last.
  t.address(true, ip("198.18.92.1/16"));
  CHECK(!t.next_step());
  t.address(false, ip("198.18.92.1/24"));
  CHECK(!t.next_step());
  t.address(false, ip("198.18.92.1/16"));
  steps = drain(t);
  REQUIRE(steps.size() == 1);
  CHECK(!steps[0].gid);
  CHECK(steps[0].index == 1);  // the IPv4 address had entry 1
  CHECK(t.programmed().size() == 1);
  // The freed entry is taken again first.
  t.address(true, ip("198.18.92.7/24"));
  steps = drain(t);
  REQUIRE(steps.size() == 1);
  CHECK(steps[0].index == 1);
  CHECK(steps[0].gid == gid({198, 18, 92, 7}, true));
  // A removal comes before a write (an entry freed first).
  t.address(false, ip("198.18.92.7/24"));
  t.address(true, ip("198.18.92.8/24"));
  auto s = t.next_step();
  REQUIRE(s);
  CHECK(!s->gid);
  // An address removed that was never added changes nothing.
  GidTable u(16);
  u.address(false, ip("198.18.92.9/24"));
  CHECK(!u.next_step());
}

TEST_CASE("roce gids: a full table is counted and waited out; refused writes are not retried", "[roce-gids]") {
  GidTable t(4);  // entries 1..3
  for (int i = 1; i <= 5; ++i) t.address(true, ip(("198.18.92." + std::to_string(i) + "/24").c_str()));
  auto steps = drain(t);
  CHECK(steps.size() == 3);
  CHECK(t.programmed().size() == 3);
  CHECK(t.counters().table_full == 2);
  CHECK(!t.next_step());  // no loop over the addresses that found no room
  // One goes: a waiting one takes its entry, without being said again.
  t.address(false, ip("198.18.92.1/24"));
  steps = drain(t);
  REQUIRE(steps.size() == 2);
  CHECK(!steps[0].gid);
  CHECK(steps[1].gid == gid({198, 18, 92, 4}, true));
  CHECK(t.counters().table_full == 2);  // (each address counted once)
  // Another goes: the last waiting one gets its entry too.
  t.address(false, ip("198.18.92.2/24"));
  steps = drain(t);
  REQUIRE(steps.size() == 2);
  CHECK(steps[1].gid == gid({198, 18, 92, 5}, true));
  CHECK(!t.next_step());
  // A refused write is not tried again until its address comes again.
  GidTable r(16);
  r.address(true, ip("198.18.92.1/24"));
  steps = drain(r, false);
  CHECK(steps.size() == 1);
  CHECK(r.counters().failed == 1);
  CHECK(r.programmed().empty());
  CHECK(!r.next_step());
  // The device lost and back: its table is empty, everything written again.
  r.forget_device();
  steps = drain(r);
  CHECK(steps.size() == 1);
  CHECK(r.programmed().size() == 1);
  r.forget_device();
  CHECK(r.programmed().empty());
  CHECK(drain(r).size() == 1);
}
