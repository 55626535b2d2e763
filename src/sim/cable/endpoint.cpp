#include "sim/cable/endpoint.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace openib::sim {

namespace {

Result<std::uint16_t> parse_port(std::string_view s, std::string_view whole) {
  if (s.empty() || s.size() > 5) return err(EINVAL, "endpoint '{}': port must be 0..65535", whole);
  unsigned v = 0;
  for (char ch : s) {
    if (ch < '0' || ch > '9') return err(EINVAL, "endpoint '{}': port must be decimal", whole);
    v = v * 10 + static_cast<unsigned>(ch - '0');
  }
  if (v > 65535) return err(EINVAL, "endpoint '{}': port {} out of range", whole, v);
  return static_cast<std::uint16_t>(v);
}

}  // namespace

std::uint16_t Endpoint::port() const {
  if (family() == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(&addr)->sin_port);
  if (family() == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6*>(&addr)->sin6_port);
  return 0;
}

std::string Endpoint::str() const {
  char buf[INET6_ADDRSTRLEN] = {};
  if (family() == AF_INET) {
    ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&addr)->sin_addr, buf, sizeof buf);
    return std::string(buf) + ":" + std::to_string(port());
  }
  if (family() == AF_INET6) {
    ::inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(&addr)->sin6_addr, buf, sizeof buf);
    return "[" + std::string(buf) + "]:" + std::to_string(port());
  }
  return "(none)";
}

bool Endpoint::same_as(const sockaddr* sa, socklen_t sa_len) const {
  if (sa->sa_family != family()) return false;
  if (family() == AF_INET && sa_len >= static_cast<socklen_t>(sizeof(sockaddr_in))) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&addr);
    const auto* b = reinterpret_cast<const sockaddr_in*>(sa);
    return a->sin_port == b->sin_port && a->sin_addr.s_addr == b->sin_addr.s_addr;
  }
  if (family() == AF_INET6 && sa_len >= static_cast<socklen_t>(sizeof(sockaddr_in6))) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&addr);
    const auto* b = reinterpret_cast<const sockaddr_in6*>(sa);
    return a->sin6_port == b->sin6_port &&
           std::memcmp(&a->sin6_addr, &b->sin6_addr, sizeof a->sin6_addr) == 0;
  }
  return false;
}

Endpoint Endpoint::from_sockaddr(const sockaddr* sa, socklen_t sa_len) {
  Endpoint e;
  const auto n = std::min<std::size_t>(static_cast<std::size_t>(sa_len), sizeof e.addr);
  std::memcpy(&e.addr, sa, n);
  e.len = static_cast<socklen_t>(n);
  return e;
}

Result<Endpoint> parse_endpoint(std::string_view s) {
  Endpoint e;
  std::string host;
  std::string_view port;
  if (!s.empty() && s.front() == '[') {
    const auto close = s.find(']');
    if (close == std::string_view::npos) return err(EINVAL, "endpoint '{}': missing ']'", s);
    if (close + 1 >= s.size() || s[close + 1] != ':')
      return err(EINVAL, "endpoint '{}': expected ':port' after ']'", s);
    host = std::string(s.substr(1, close - 1));
    port = s.substr(close + 2);
    auto* a6 = reinterpret_cast<sockaddr_in6*>(&e.addr);
    if (::inet_pton(AF_INET6, host.c_str(), &a6->sin6_addr) != 1)
      return err(EINVAL, "endpoint '{}': '{}' is not a numeric IPv6 address", s, host);
    OPENIB_TRY_ASSIGN(std::uint16_t p, parse_port(port, s));
    a6->sin6_family = AF_INET6;
    a6->sin6_port = htons(p);
    e.len = sizeof(sockaddr_in6);
    return e;
  }
  const auto colon = s.rfind(':');
  if (colon == std::string_view::npos) return err(EINVAL, "endpoint '{}': expected address:port", s);
  host = std::string(s.substr(0, colon));
  port = s.substr(colon + 1);
  if (host.find(':') != std::string::npos)
    return err(EINVAL, "endpoint '{}': write an IPv6 address in brackets, [addr]:port", s);
  auto* a4 = reinterpret_cast<sockaddr_in*>(&e.addr);
  if (::inet_pton(AF_INET, host.c_str(), &a4->sin_addr) != 1)
    return err(EINVAL, "endpoint '{}': '{}' is not a numeric IPv4 address", s, host);
  OPENIB_TRY_ASSIGN(std::uint16_t p, parse_port(port, s));
  a4->sin_family = AF_INET;
  a4->sin_port = htons(p);
  e.len = sizeof(sockaddr_in);
  return e;
}

}  // namespace openib::sim
