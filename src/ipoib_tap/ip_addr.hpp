// An interface address as rtnetlink reports it (rtnetlink(7) ifaddrmsg):
// the family, the address (IPv4 in the first 4 bytes) and the prefix
// length. Shared by the address watch and the ATS records.
#pragma once

#include <array>
#include <compare>
#include <cstdint>
#include <string>

#include "common/result.hpp"

namespace openib::ipoib {

struct IpAddr {
  int family = 0;  // AF_INET or AF_INET6
  std::array<std::uint8_t, 16> bytes{};  // network order; IPv4 uses bytes[0..3]
  std::uint8_t prefix_len = 0;
  auto operator<=>(const IpAddr&) const = default;

  // "198.18.0.1/24", "fe80::1/64".
  std::string to_string() const;
  // The inverse of to_string() ("ADDR/LEN"; without "/LEN" the full length).
  static Result<IpAddr> parse(const std::string& text);
};

}  // namespace openib::ipoib
