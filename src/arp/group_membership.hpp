// The kernel's membership of an IP multicast group on one interface, as
// Linux's rdma_cm takes it for a RoCEv2 join (cma_iboe_join_multicast ->
// cma_igmp_send -> ip_mc_inc_group; docs/cma.md "RoCE"): with it the
// kernel sends the IGMP membership report (RFC 3376; MLD for IPv6, RFC
// 3810) on the RoCE port's netdev and answers the queries, so that
// snooping switches forward the group's frames to this port. It is held by
// a UDP socket joined to the group on that interface (IP_ADD_MEMBERSHIP
// with ip_mreqn's ifindex, IPV6_JOIN_GROUP; ip(7), ipv6(7)) and never
// bound, so it receives nothing; closing the socket leaves (the kernel
// sends the leave when its last membership of the group goes). One socket
// per membership: a socket holds at most net.ipv4.igmp_max_memberships.
#pragma once

#include "arp/resolver.hpp"
#include "common/fd.hpp"
#include "common/result.hpp"

namespace openib::arp {

// EINVAL: `group` is no multicast address; the kernel's errors otherwise
// (ENODEV: no interface `ifindex` in this network namespace).
Result<UniqueFd> join_group(int ifindex, const Ip& group);

}  // namespace openib::arp
