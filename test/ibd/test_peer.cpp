// ibd's peer credentials and fd kinds, unit level (src/ibd/peer.hpp,
// src/ibd/fd_closer.hpp): the seams the daemon's accept and request checks
// go through.
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include "harness.hpp"
#include "ibd/fd_closer.hpp"
#include "ibd/peer.hpp"

using namespace openib;
using namespace openib::ibd;

TEST_CASE("peer credentials: unreadable ones are an error, never uid 0", "[peer]") {
  // SO_PEERCRED on something that is not a connected socket fails: the
  // caller (Server::on_acceptable) refuses the connection on this error.
  int p[2];
  REQUIRE(::pipe(p) == 0);
  UniqueFd r(p[0]), w(p[1]);
  auto c = peer_credentials(r.get());
  REQUIRE_FALSE(c.ok());
  CHECK(c.error().code == ENOTSOCK);
  UniqueFd unconnected(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  auto u = peer_credentials(unconnected.get());
  // An unconnected UNIX socket: Linux reports no peer (pid 0, uid -1), not root.
  if (u) {
    CHECK(u->uid != 0);
    CHECK_FALSE(u->net_admin);
    CHECK_FALSE(u->net_raw);
  }
}

TEST_CASE("peer credentials: root has the privileges, nobody none", "[peer]") {
  int sv[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) == 0);
  UniqueFd a(sv[0]), b(sv[1]);
  auto me = peer_credentials(a.get());
  REQUIRE(me.ok());
  CHECK(me->pid == ::getpid());
  CHECK(me->uid == ::geteuid());
  if (::geteuid() == 0) {
    CHECK(me->net_admin);
    CHECK(me->net_raw);
  }
  // A process whose pid was reused by another user's: its capabilities do not count.
  CHECK(peer_cap_eff(::getpid(), ::geteuid() + 1) == 0);
  auto nobody = openib::testing::run_as_nobody([] {
    int s[2];
    if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, s) != 0) return std::vector<int>{-1};
    auto c = peer_credentials(s[0]);
    if (!c) return std::vector<int>{-2};
    return std::vector<int>{int(c->uid), c->net_admin ? 1 : 0, c->net_raw ? 1 : 0};
  });
  REQUIRE(nobody.size() == 3);
  CHECK(nobody[0] != 0);
  CHECK(nobody[1] == 0);
  CHECK(nobody[2] == 0);
}

TEST_CASE("fd kinds: eventfd, memfd, anything else", "[peer]") {
  UniqueFd e(::eventfd(0, EFD_CLOEXEC));
  UniqueFd m(::memfd_create("k", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  int p[2];
  REQUIRE(::pipe(p) == 0);
  UniqueFd r(p[0]), w(p[1]);
  UniqueFd s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  CHECK(fd_kind(e.get()) == FdKind::kEventfd);
  CHECK(fd_kind(m.get()) == FdKind::kMemfd);
  CHECK(fd_kind(r.get()) == FdKind::kOther);
  CHECK(fd_kind(s.get()) == FdKind::kOther);
  const uint64_t before = fds_closed_off_loop();
  std::vector<UniqueFd> v;
  v.push_back(std::move(e));
  v.push_back(std::move(s));
  dispose_fds(v);
  CHECK(v.empty());
  CHECK(fds_closed_off_loop() == before + 1);  // the socket, not the eventfd
}
