// The Ethernet destination of a RoCE address vector that the GID alone
// decides (docs/arp.md "RoCE destinations"), as Linux's
// ib_resolve_eth_dmac does before it asks the neighbour table: a
// link-local GID (fe80::/64 with a modified EUI-64, RFC 4291 2.5.1 and
// 2.5.6) carries its MAC (rdma_get_ll_mac), a multicast GID maps to its
// group MAC (RFC 1112 6.4: 01:00:5e and the low 23 bits of an IPv4-mapped
// 224.0.0.0/4 group; RFC 2464 7: 33:33 and the last 32 bits of an IPv6
// group). Any other GID (an IPv4-mapped or global IPv6 unicast address)
// needs the neighbour table of the port's netdev: nullopt here.
#pragma once

#include <array>
#include <cstdint>
#include <optional>

namespace openib::arp {

using Mac = std::array<std::uint8_t, 6>;

std::optional<Mac> dmac_from_gid(const std::array<std::uint8_t, 16>& gid);

}  // namespace openib::arp
