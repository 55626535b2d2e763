// src/cma/port_table.hpp (docs/cma.md "Ports"): rdma_bind_addr's rules.
// Wildcard and specific binds on one port, two specific addresses sharing
// one, port spaces apart, privileged ports, ephemeral ports, unbind, which
// listener a connection reaches, and who is bound to an address.
#include <catch2/catch.hpp>

#include <set>

#include <sys/socket.h>

#include "cma/port_table.hpp"
#include "cma_addr.hpp"

using namespace openib;
using namespace openib::cma;
using openib::test::ip;

namespace {

// bind() that must succeed; the port bound.
std::uint16_t must_bind(PortTable& t, std::uint64_t owner, std::uint16_t ps, const Addr& a) {
  auto r = t.bind(owner, ps, a, false);
  INFO(a.str() << ": " << (r.ok() ? std::string() : r.error().str()));
  REQUIRE(r.ok());
  return *r;
}

int bind_error(PortTable& t, std::uint64_t owner, std::uint16_t ps, const Addr& a, bool privileged = false) {
  auto r = t.bind(owner, ps, a, privileged);
  INFO(a.str());
  REQUIRE_FALSE(r.ok());
  CHECK_FALSE(r.error().message.empty());
  return r.error().code;
}

}  // namespace

TEST_CASE("A wildcard bind takes the port from every address, and needs it free", "[cma]") {
  PortTable t;
  must_bind(t, 1, kPsTcp, ip("0.0.0.0", 7174));
  CHECK(bind_error(t, 2, kPsTcp, ip("198.18.0.1", 7174)) == EADDRINUSE);
  CHECK(bind_error(t, 2, kPsTcp, ip("0.0.0.0", 7174)) == EADDRINUSE);
  CHECK(bind_error(t, 2, kPsTcp, ip("::", 7174)) == EADDRINUSE);
  CHECK(bind_error(t, 2, kPsTcp, ip("fd00::1", 7174)) == EADDRINUSE);
  CHECK(t.size() == 1);

  PortTable u;
  must_bind(u, 1, kPsTcp, ip("198.18.0.1", 7174));
  CHECK(bind_error(u, 2, kPsTcp, ip("0.0.0.0", 7174)) == EADDRINUSE);
  CHECK(bind_error(u, 2, kPsTcp, ip("::", 7174)) == EADDRINUSE);
  CHECK(bind_error(u, 2, kPsTcp, ip("198.18.0.1", 7174)) == EADDRINUSE);
}

TEST_CASE("Two specific addresses share a port; port spaces are apart", "[cma]") {
  PortTable t;
  must_bind(t, 1, kPsTcp, ip("198.18.0.1", 7174));
  must_bind(t, 2, kPsTcp, ip("198.18.0.2", 7174));
  must_bind(t, 3, kPsTcp, ip("fd00::1", 7174));
  must_bind(t, 4, kPsUdp, ip("198.18.0.1", 7174));
  must_bind(t, 5, kPsIpoib, ip("0.0.0.0", 7174));
  must_bind(t, 6, kPsIb, ip("::", 7174));
  CHECK(bind_error(t, 7, kPsUdp, ip("198.18.0.1", 7174)) == EADDRINUSE);
  CHECK(t.size() == 6);
  CHECK(t.bound(2) == ip("198.18.0.2", 7174));
  CHECK_FALSE(t.bound(7));
}

TEST_CASE("Ports below 1024 are for privileged clients only", "[cma]") {
  PortTable t;
  CHECK(bind_error(t, 1, kPsTcp, ip("198.18.0.1", 100)) == EACCES);
  CHECK(bind_error(t, 1, kPsTcp, ip("0.0.0.0", 1)) == EACCES);
  CHECK(bind_error(t, 1, kPsUdp, ip("::", 1023)) == EACCES);
  CHECK(t.size() == 0);
  CHECK(*t.bind(1, kPsTcp, ip("198.18.0.1", 100), true) == 100);
  CHECK(*t.bind(2, kPsTcp, ip("198.18.0.1", 1023), true) == 1023);
  CHECK(must_bind(t, 3, kPsTcp, ip("198.18.0.1", 1024)) == 1024);
  // A taken privileged port is in use, also for a privileged client.
  CHECK(bind_error(t, 4, kPsTcp, ip("198.18.0.1", 100), true) == EADDRINUSE);
}

TEST_CASE("Bad binds: an owner bound twice, no family, not a port space", "[cma]") {
  PortTable t;
  must_bind(t, 1, kPsTcp, ip("198.18.0.1", 7174));
  CHECK(bind_error(t, 1, kPsTcp, ip("198.18.0.1", 7175)) == EINVAL);
  Addr none;
  none.port = 7176;
  CHECK(bind_error(t, 2, kPsTcp, none) == EINVAL);
  Addr unix_family = ip("198.18.0.1", 7176);
  unix_family.family = AF_UNIX;
  CHECK(bind_error(t, 2, kPsTcp, unix_family) == EINVAL);
  CHECK(bind_error(t, 2, 0x0107, ip("198.18.0.1", 7176)) == EPROTONOSUPPORT);
  CHECK(t.size() == 1);
  CHECK(t.bound(1)->port == 7174);
}

TEST_CASE("Port 0 binds distinct ephemeral ports in range, until it is full", "[cma]") {
  SECTION("the default range") {
    PortTable t;
    std::set<std::uint16_t> seen;
    for (std::uint64_t o = 0; o < 2000; ++o) {
      const std::uint16_t p = must_bind(t, o, kPsTcp, ip("198.18.0.1", 0));
      CHECK(p >= 32768);
      CHECK(p <= 60999);
      CHECK(t.bound(o)->port == p);
      seen.insert(p);
    }
    CHECK(seen.size() == 2000);
  }
  SECTION("a range of 5 ports") {
    PortTable t(PortTable::Config{40000, 40004});
    // A wildcard on 40002 takes it from every address.
    must_bind(t, 100, kPsTcp, ip("0.0.0.0", 40002));
    std::set<std::uint16_t> seen;
    for (std::uint64_t o = 0; o < 4; ++o) seen.insert(must_bind(t, o, kPsTcp, ip("198.18.0.1", 0)));
    CHECK(seen == std::set<std::uint16_t>{40000, 40001, 40003, 40004});
    CHECK(bind_error(t, 4, kPsTcp, ip("198.18.0.1", 0)) == EADDRNOTAVAIL);
    // Another address may still share those ports (not the wildcard's);
    // another port space has its own.
    CHECK(must_bind(t, 5, kPsTcp, ip("198.18.0.2", 0)) != 40002);
    CHECK(must_bind(t, 6, kPsUdp, ip("198.18.0.1", 0)) >= 40000);
    // A wildcard finds none free, in use by the specific binds.
    CHECK(bind_error(t, 7, kPsTcp, ip("::", 0)) == EADDRNOTAVAIL);
    // Unbinding frees a port for the next ephemeral bind.
    const std::uint16_t freed = t.bound(2)->port;
    t.unbind(2);
    CHECK(must_bind(t, 8, kPsTcp, ip("198.18.0.1", 0)) == freed);
  }
  SECTION("ephemeral ports need no privilege, whatever the range") {
    PortTable t(PortTable::Config{600, 600});
    CHECK(must_bind(t, 1, kPsTcp, ip("198.18.0.1", 0)) == 600);
  }
}

TEST_CASE("Unbinding frees the port and the owner", "[cma]") {
  PortTable t;
  must_bind(t, 1, kPsTcp, ip("0.0.0.0", 7174));
  t.unbind(1);
  t.unbind(1);   // no-op
  t.unbind(42);  // never bound
  CHECK(t.size() == 0);
  CHECK_FALSE(t.bound(1));
  must_bind(t, 2, kPsTcp, ip("198.18.0.1", 7174));
  must_bind(t, 1, kPsTcp, ip("198.18.0.2", 7174));  // owner 1 may bind again
  t.unbind(2);
  must_bind(t, 3, kPsTcp, ip("198.18.0.1", 7174));
  CHECK(t.size() == 2);
}

TEST_CASE("A connection reaches the listener on its address, else a wildcard", "[cma]") {
  PortTable t;
  must_bind(t, 1, kPsTcp, ip("198.18.0.1", 7174));
  must_bind(t, 2, kPsTcp, ip("0.0.0.0", 7175));
  must_bind(t, 3, kPsTcp, ip("::", 7176));
  must_bind(t, 4, kPsTcp, ip("198.18.0.2", 7174));
  must_bind(t, 5, kPsUdp, ip("198.18.0.1", 7177));
  // Bound, not listening: reached by nothing.
  CHECK_FALSE(t.listener(kPsTcp, ip("198.18.0.1", 7174)));
  for (std::uint64_t o = 1; o <= 5; ++o) t.set_listening(o, true);
  t.set_listening(99, true);  // not bound: no-op
  CHECK(t.listener(kPsTcp, ip("198.18.0.1", 7174)) == 1u);
  CHECK(t.listener(kPsTcp, ip("198.18.0.2", 7174)) == 4u);
  CHECK_FALSE(t.listener(kPsTcp, ip("198.18.0.3", 7174)));
  // The IPv4 wildcard takes any IPv4 address, not IPv6 ones.
  CHECK(t.listener(kPsTcp, ip("198.18.0.9", 7175)) == 2u);
  CHECK_FALSE(t.listener(kPsTcp, ip("fd00::1", 7175)));
  // The IPv6 wildcard takes both.
  CHECK(t.listener(kPsTcp, ip("fd00::1", 7176)) == 3u);
  CHECK(t.listener(kPsTcp, ip("198.18.0.1", 7176)) == 3u);
  // Port spaces apart: TCP's listener is not UDP's.
  CHECK_FALSE(t.listener(kPsUdp, ip("198.18.0.1", 7174)));
  CHECK(t.listener(kPsUdp, ip("198.18.0.1", 7177)) == 5u);
  CHECK_FALSE(t.listener(kPsTcp, ip("198.18.0.1", 7177)));
  t.set_listening(1, false);
  CHECK_FALSE(t.listener(kPsTcp, ip("198.18.0.1", 7174)));
  t.unbind(4);
  CHECK_FALSE(t.listener(kPsTcp, ip("198.18.0.2", 7174)));
}

TEST_CASE("bound_to: the owners bound to exactly an address", "[cma]") {
  PortTable t;
  must_bind(t, 1, kPsTcp, ip("198.18.0.1", 7174));
  must_bind(t, 2, kPsUdp, ip("198.18.0.1", 0));
  must_bind(t, 3, kPsTcp, ip("198.18.0.2", 7174));
  must_bind(t, 4, kPsTcp, ip("0.0.0.0", 7175));
  must_bind(t, 5, kPsIpoib, ip("fd00::1", 7174));
  CHECK(t.bound_to(ip("198.18.0.1", 0)) == std::vector<std::uint64_t>{1, 2});
  CHECK(t.bound_to(ip("198.18.0.1", 9)) == std::vector<std::uint64_t>{1, 2});  // the port is ignored
  CHECK(t.bound_to(ip("fd00::1", 0)) == std::vector<std::uint64_t>{5});
  CHECK(t.bound_to(ip("198.18.0.3", 0)).empty());
  // An exact match: the wildcard address finds the wildcard binds.
  CHECK(t.bound_to(ip("0.0.0.0", 0)) == std::vector<std::uint64_t>{4});
  t.unbind(1);
  CHECK(t.bound_to(ip("198.18.0.1", 0)) == std::vector<std::uint64_t>{2});
}
