// The kernel's membership of a multicast group (group_membership.hpp).
#include "arp/group_membership.hpp"

#include <netinet/in.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

namespace openib::arp {

Result<UniqueFd> join_group(int ifindex, const Ip& group) {
  const bool v4 = group.family == AF_INET;
  if (v4 ? (group.bytes[0] & 0xF0) != 0xE0 : group.family != AF_INET6 || group.bytes[0] != 0xFF)
    return err(EINVAL, "{} is no multicast group (224.0.0.0/4, ff00::/8)", group.str());
  UniqueFd fd(::socket(group.family, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, IPPROTO_UDP));
  if (!fd) {
    const int e = errno;
    return err(e, "a UDP socket for group {}: {}", group.str(), std::strerror(e));
  }
  int rc;
  if (v4) {
    ip_mreqn m{};
    std::memcpy(&m.imr_multiaddr, group.bytes.data(), 4);
    m.imr_ifindex = ifindex;
    rc = ::setsockopt(fd.get(), IPPROTO_IP, IP_ADD_MEMBERSHIP, &m, sizeof m);
  } else {
    ipv6_mreq m{};
    std::memcpy(&m.ipv6mr_multiaddr, group.bytes.data(), 16);
    m.ipv6mr_interface = static_cast<unsigned>(ifindex);
    rc = ::setsockopt(fd.get(), IPPROTO_IPV6, IPV6_JOIN_GROUP, &m, sizeof m);
  }
  if (rc != 0) {
    const int e = errno;
    return err(e, "joining {} on interface {}: {}", group.str(), ifindex, std::strerror(e));
  }
  return fd;
}

}  // namespace openib::arp
