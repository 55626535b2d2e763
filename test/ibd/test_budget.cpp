// The services' per-client and per-uid budgets (src/ibd/budget.hpp) and
// the event socket's charge of queued event bytes to one
// (src/ibd/event_socket.hpp): what bounds ibd's memory against one user
// with many connections (docs/operations.md "Security model", issue 29
// finding 4).
#include <sys/socket.h>

#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>
#include <vector>

#include "ibd/budget.hpp"
#include "ibd/event_socket.hpp"

using namespace openib;
using namespace openib::ibd;

TEST_CASE("budget: per client, per uid across clients, uid 0 exempt from the per-uid bound", "[budget]") {
  Budget b("CM ids", "cm-ids", BudgetLimit{3, 5});
  // One client: three, the fourth is EDQUOT naming the per-client option.
  for (int i = 0; i < 3; ++i) REQUIRE(b.take(1, 1000).ok());
  auto r = b.take(1, 1000);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == EDQUOT);
  CHECK_THAT(r.error().message, Catch::Contains("--client-max-cm-ids"));
  // A second client of the same uid: two more, then the uid's bound.
  REQUIRE(b.take(2, 1000).ok());
  REQUIRE(b.take(2, 1000).ok());
  auto u = b.take(2, 1000);
  REQUIRE_FALSE(u.ok());
  CHECK(u.error().code == EDQUOT);
  CHECK_THAT(u.error().message, Catch::Contains("--uid-max-cm-ids"));
  CHECK(b.uid_usage(1000) == 5);
  // Another uid is not held back by uid 1000.
  REQUIRE(b.take(3, 1001).ok());
  // uid 0: the per-client bound only.
  for (uint32_t c = 10; c < 20; ++c) REQUIRE(b.take(c, 0, 3).ok());
  CHECK_FALSE(b.take(10, 0).ok());
  // Given back: room again; never below zero.
  b.give(1, 1000, 2);
  CHECK(b.client_usage(1) == 1);
  CHECK(b.uid_usage(1000) == 3);
  REQUIRE(b.take(2, 1000).ok());
  b.give(1, 1000, 100);
  CHECK(b.client_usage(1) == 0);
  CHECK(b.denied() == 3);
  // A take of several that does not fit takes nothing.
  Budget bytes("event bytes", "event-bytes", BudgetLimit{100, 150});
  REQUIRE(bytes.take(1, 7, 90).ok());
  CHECK_FALSE(bytes.take(1, 7, 20).ok());
  CHECK(bytes.client_usage(1) == 90);
}

TEST_CASE("event socket: unread events are charged to the uid's bytes budget, and closed past it",
          "[budget]") {
  boost::asio::io_context io;
  Budget bytes("event bytes", "event-bytes", BudgetLimit{1u << 20, 48u << 10});
  // Two sessions of one uid that never read: each may queue past what the
  // socket holds only until the uid's bytes are spent; then the session
  // that asked for more is closed (it learns by EOF), the other keeps its
  // events, and what the closed one held is given back.
  auto a = EventSocket::open(io, 1u << 20, EventCharge{&bytes, 1, 1000});
  auto b = EventSocket::open(io, 1u << 20, EventCharge{&bytes, 2, 1000});
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  auto& [sa, fa] = *a;
  auto& [sb, fb] = *b;
  const std::vector<std::byte> ev(1000);
  // Fill a's socket buffer (the kernel's), then its queue (ibd's).
  size_t pushed = 0;
  while (sa->queued() == 0 && pushed < 100000) {
    REQUIRE(sa->push(ev) == EventSocket::Push::kOk);
    ++pushed;
  }
  REQUIRE(sa->queued() == 1);
  // b fills its own buffer too before anything is charged for it.
  while (sb->queued() == 0) REQUIRE(sb->push(ev) == EventSocket::Push::kOk);
  const uint64_t before = bytes.uid_usage(1000);
  CHECK(before == sa->queued_bytes() + sb->queued_bytes());
  // a queues on until the uid's 48 KiB are spent: overrun, socket closed.
  EventSocket::Push p = EventSocket::Push::kOk;
  for (int i = 0; i < 1000 && p == EventSocket::Push::kOk; ++i) p = sa->push(ev);
  CHECK(p == EventSocket::Push::kOverrun);
  CHECK_FALSE(sa->is_open());
  CHECK(bytes.client_usage(1) == 0);
  // b's events are still queued and charged; the uid has room again.
  CHECK(sb->is_open());
  CHECK(bytes.uid_usage(1000) == sb->queued_bytes());
  CHECK(sb->push(ev) == EventSocket::Push::kOk);
  // b's client reads: the queue drains and its bytes come back.
  std::vector<char> buf(2000);
  for (int i = 0; i < 100000; ++i) {
    if (::recv(fb.get(), buf.data(), buf.size(), MSG_DONTWAIT) < 0) break;
    io.poll();
  }
  io.poll();
  CHECK(sb->queued() == 0);
  CHECK(bytes.uid_usage(1000) == 0);
  // Closing the socket with events queued gives them back too.
  while (sb->queued() == 0) REQUIRE(sb->push(ev) == EventSocket::Push::kOk);
  CHECK(bytes.uid_usage(1000) > 0);
  sb.reset();
  CHECK(bytes.uid_usage(1000) == 0);
}
