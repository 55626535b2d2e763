// libopenib's RDMA CM address helpers (include/openib/cma.hpp): IpEndpoint
// to and from sockaddrs and text, rdma_getaddrinfo on numeric addresses and
// ports (no name service asked), rdma_event_str's names.
#include <arpa/inet.h>

#include <catch2/catch.hpp>
#include <cstring>

#include "openib/cma.hpp"

using namespace openib;

TEST_CASE("IpEndpoint: IPv4 through a sockaddr_in and back", "[lib][cma]") {
  sockaddr_in in{};
  in.sin_family = AF_INET;
  in.sin_port = htons(7174);
  REQUIRE(::inet_pton(AF_INET, "198.18.31.132", &in.sin_addr) == 1);
  const IpEndpoint e = IpEndpoint::from_sockaddr(reinterpret_cast<const sockaddr*>(&in));
  CHECK(e.family == AF_INET);
  CHECK(e.port == 7174);
  CHECK(e.addr[0] == 198);
  CHECK(e.addr[3] == 132);
  CHECK(e.str() == "198.18.31.132:7174");
  CHECK_FALSE(e.any());
  sockaddr_storage ss;
  REQUIRE(e.to_sockaddr(ss) == sizeof(sockaddr_in));
  CHECK(std::memcmp(&ss, &in, sizeof in) == 0);
}

TEST_CASE("IpEndpoint: IPv6 with a scope", "[lib][cma]") {
  sockaddr_in6 in6{};
  in6.sin6_family = AF_INET6;
  in6.sin6_port = htons(1);
  in6.sin6_scope_id = 2;
  REQUIRE(::inet_pton(AF_INET6, "fe80::1", &in6.sin6_addr) == 1);
  const IpEndpoint e = IpEndpoint::from_sockaddr(reinterpret_cast<const sockaddr*>(&in6));
  CHECK(e.str() == "[fe80::1%2]:1");
  sockaddr_storage ss;
  REQUIRE(e.to_sockaddr(ss) == sizeof(sockaddr_in6));
  CHECK(std::memcmp(&ss, &in6, sizeof in6) == 0);
  CHECK(IpEndpoint{}.to_sockaddr(ss) == 0);  // family 0: no address
}

TEST_CASE("rdma_getaddrinfo: numeric addresses, ports and the wildcard", "[lib][cma]") {
  auto a = rdma_getaddrinfo("198.18.0.1", "7471");
  REQUIRE(a);
  CHECK(a->str() == "198.18.0.1:7471");
  auto b = rdma_getaddrinfo("::1", "80", AF_INET6);
  REQUIRE(b);
  CHECK(b->family == AF_INET6);
  CHECK(b->str() == "[::1]:80");
  auto w = rdma_getaddrinfo(nullptr, "7174", AF_INET);
  REQUIRE(w);
  CHECK(w->any());
  CHECK(w->str() == "0.0.0.0:7174");
  auto none = rdma_getaddrinfo("198.18.0.1", nullptr);
  REQUIRE(none);
  CHECK(none->port == 0);
}

TEST_CASE("rdma_getaddrinfo: bad ports and families are EINVAL, a v4 address asked as v6 EADDRNOTAVAIL",
          "[lib][cma]") {
  for (const char* port : {"http", "65536", "-1", "12ab", " 1"}) {
    auto r = rdma_getaddrinfo("198.18.0.1", port);
    REQUIRE_FALSE(r);
    CHECK(r.error().code == EINVAL);
    CHECK(r.error().message.find(port) != std::string::npos);
  }
  auto f = rdma_getaddrinfo("198.18.0.1", "1", AF_UNIX);
  REQUIRE_FALSE(f);
  CHECK(f.error().code == EINVAL);
  auto v6 = rdma_getaddrinfo("198.18.0.1", "1", AF_INET6);
  REQUIRE_FALSE(v6);
  CHECK(v6.error().code == EADDRNOTAVAIL);
}

TEST_CASE("rdma_event_str: rdma_cm's names", "[lib][cma]") {
  CHECK(std::string(rdma_event_str(RdmaCmEventType::kAddrResolved)) == "RDMA_CM_EVENT_ADDR_RESOLVED");
  CHECK(std::string(rdma_event_str(RdmaCmEventType::kEstablished)) == "RDMA_CM_EVENT_ESTABLISHED");
  CHECK(std::string(rdma_event_str(RdmaCmEventType::kTimewaitExit)) == "RDMA_CM_EVENT_TIMEWAIT_EXIT");
  CHECK(std::string(rdma_event_str(static_cast<RdmaCmEventType>(200))) == "UNKNOWN EVENT");
}
