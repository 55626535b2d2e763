// ibfabric's socket_drops counter: the kernel's per-socket UDP receive
// drops parsed from /proc/net/udp{,6} (src/sim/fabric/socket_drops.hpp).
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include "sim/fabric/socket_drops.hpp"

using namespace openib::sim::fabric;

TEST_CASE("socket drops: /proc/net/udp and udp6 lines", "[socket-drops]") {
  const char* udp =
      "   sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref "
      "pointer drops            \n"
      " 7410: 010413C6:4650 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 6539177 2 "
      "0000000030d23276 0       \n"
      " 7412: 010413C6:4652 0B0413C6:4653 01 00000000:00034000 00:00000000 00000000     0        0 6539178 2 "
      "00000000bf164953 5185\n";
  auto m = parse_udp_drops(udp);
  REQUIRE(m.size() == 2);
  CHECK(m.at(6539177) == 0);
  CHECK(m.at(6539178) == 5185);

  const char* udp6 =
      "  sl  local_address                         remote_address                        st tx_queue rx_queue tr "
      "tm->when retrnsmt   uid  timeout inode ref pointer drops\n"
      "   55: 00000000000000000000000001000000:4650 00000000000000000000000000000000:0000 07 00000000:00000000 "
      "00:00000000 00000000     0        0 42 2 0000000000000000 7\n";
  CHECK(parse_udp_drops(udp6).at(42) == 7);
}

TEST_CASE("socket drops: malformed text is skipped, not a crash", "[socket-drops]") {
  CHECK(parse_udp_drops("").empty());
  CHECK(parse_udp_drops("header only").empty());
  // Too few columns, non-numbers, a missing "sl:" colon, inode 0.
  const char* bad =
      "header\n"
      " 1: 0:0 0:0 07 0:0 00:0 0 0 0 123 2 0\n"
      " 2: 0:0 0:0 07 0:0 00:0 0 0 0 abc 2 0 9\n"
      " 3: 0:0 0:0 07 0:0 00:0 0 0 0 124 2 0 -1\n"
      " 4 0:0 0:0 07 0:0 00:0 0 0 0 125 2 0 9\n"
      " 5: 0:0 0:0 07 0:0 00:0 0 0 0 0 2 0 9\n"
      " 6: 0:0 0:0 07 0:0 00:0 0 0 0 126 2 0 18446744073709551616\n"
      " 7: 0:0 0:0 07 0:0 00:0 0 0 0 127 2 0 3";  // no newline at the end
  auto m = parse_udp_drops(bad);
  REQUIRE(m.size() == 1);
  CHECK(m.at(127) == 3);
}

TEST_CASE("socket drops: a full receive buffer shows at the socket's inode", "[socket-drops]") {
  const int rx = ::socket(AF_INET, SOCK_DGRAM, 0), tx = ::socket(AF_INET, SOCK_DGRAM, 0);
  REQUIRE(rx >= 0);
  REQUIRE(tx >= 0);
  int small = 1;  // the kernel's minimum: a few datagrams fill it
  REQUIRE(::setsockopt(rx, SOL_SOCKET, SO_RCVBUF, &small, sizeof small) == 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  REQUIRE(::bind(rx, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  REQUIRE(::getsockname(rx, reinterpret_cast<sockaddr*>(&a), &len) == 0);
  const std::uint64_t ino = socket_inode(rx);
  REQUIRE(ino != 0);
  REQUIRE(udp_socket_drops().count(ino) == 1);
  CHECK(udp_socket_drops().at(ino) == 0);
  char buf[1024] = {};
  for (int i = 0; i < 200; ++i)
    (void)::sendto(tx, buf, sizeof buf, 0, reinterpret_cast<sockaddr*>(&a), sizeof a);
  CHECK(udp_socket_drops().at(ino) > 0);  // never read: most of the 200 were dropped
  CHECK(socket_inode(-1) == 0);
  ::close(rx);
  ::close(tx);
}
