// UDP endpoints of a cable, written "127.0.0.1:7001" or "[::1]:7001"
// (docs/cables.md "Addresses"). Numeric addresses only: a cable names
// the interface it is bound to, so no name resolution (and no DNS wait)
// sits between a port and its link. Port 0 binds an ephemeral port.
#pragma once

#include <sys/socket.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "common/result.hpp"

namespace openib::sim {

struct Endpoint {
  sockaddr_storage addr{};  // sockaddr_in or sockaddr_in6
  socklen_t len = 0;

  int family() const { return addr.ss_family; }
  std::uint16_t port() const;
  std::string str() const;  // "127.0.0.1:7001" / "[::1]:7001"
  // Same family, address and port (IPv6 scope and flow info ignored).
  bool same_as(const sockaddr* sa, socklen_t sa_len) const;

  static Endpoint from_sockaddr(const sockaddr* sa, socklen_t sa_len);
};

// Parses "a.b.c.d:port" or "[ipv6]:port", port 0..65535 in decimal.
// EINVAL, with the reason in the message, for anything else.
Result<Endpoint> parse_endpoint(std::string_view s);

}  // namespace openib::sim
