// The path of a port without an SA (an Ethernet port, hca::cap_ib_sa
// false), built from the addresses alone: Linux's cma_resolve_iboe_route
// (drivers/infiniband/core/cma.c). The RDMA CM asks the SA on an
// InfiniBand port and builds the route here on an Ethernet one; both give
// a PathRecord (IBA 15.2.5.16) to the same CM code.
#pragma once

#include <cstdint>

#include "sa/path_record.hpp"

namespace openib::sa {

struct RouteAddresses {
  Gid sgid{};  // the source IP's entry of the port's GID table (RoCEv2)
  Gid dgid{};  // the destination IP as a GID (::ffff:a.b.c.d for IPv4)
  std::uint8_t mtu = 0;        // the port's active MTU (IBA code: 1 = 256 .. 5 = 4096)
  std::uint8_t rate = 0;       // the port's rate (IBA 15.2.5.16 code, ib_rate_code())
  std::uint8_t hop_limit = 64;  // the route's (Linux: addr->dev_addr.hoplimit)
  std::uint8_t tos = 0;        // the id's type of service (rdma_set_option TOS)
  std::uint64_t service_id = 0;
};

// PathRecord fields as cma_resolve_iboe_route fills them: SGID and DGID,
// no LIDs, reversible, one path, the default P_Key 0xffff, traffic class
// = ToS and SL = its precedence bits (iboe_tos_to_sl without a VLAN), MTU,
// rate and packet lifetime "exactly" (selector 2), packet lifetime
// CMA_IBOE_PACKET_LIFETIME (16). The destination MAC that Linux keeps in
// the record (sa_path_rec.roce.dmac) is not a PathRecord field: the RoCE
// issue resolves it (neighbour table) for the address handle.
PathRecord route_from_addresses(const RouteAddresses& a);

// The IBA 15.2.5.16 rate code of a port's LinkWidthActive (1 = 1x, 2 = 4x,
// 4 = 8x, 8 = 12x) and LinkSpeedActive (1 = SDR, 2 = DDR, 4 = QDR); 0 if
// either is unknown.
std::uint8_t ib_rate_code(std::uint8_t active_width, std::uint8_t active_speed);

}  // namespace openib::sa
