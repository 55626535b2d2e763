// Snooping of the multicast membership reports the kernel sends on the
// TAP (igmp_mld.cpp): which IP multicast groups the interface joins or
// leaves, so that the bridge joins or leaves their IB groups as a full
// member (RFC 4391 §4; Linux's ipoib joins the groups of the interface's
// multicast list the same way).
#pragma once

#include <array>
#include <vector>

#include "ipoib_tap/wire.hpp"

namespace openib::ipoib {

struct MembershipChange {
  bool join = false;
  bool ipv6 = false;
  std::array<std::uint8_t, 16> group{};  // IPv4: the first 4 bytes
};

// The changes an IPv4 packet (IGMPv1/v2/v3, RFC 1112, RFC 2236, RFC 3376)
// or an IPv6 packet (MLDv1/v2, RFC 2710, RFC 3810) carries; none for
// anything else or for a report too short to read.
std::vector<MembershipChange> snoop_ipv4(wire::Bytes ipv4);
std::vector<MembershipChange> snoop_ipv6(wire::Bytes ipv6);

}  // namespace openib::ipoib
