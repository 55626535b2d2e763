// This host's addresses, as the kernel has them (rtnetlink(7): RTM_GETADDR
// dumps, RTM_NEWADDR / RTM_DELADDR events; docs/arp.md "Addresses"): what
// tells the resolver a local destination or source, and the RDMA CM's bind
// an address of an IPoIB link. The owner joins RTNLGRP_IPV4_IFADDR and
// RTNLGRP_IPV6_IFADDR before the first dump, then feeds the events.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "arp/rtnl.hpp"
#include "common/result.hpp"

namespace openib::arp {

class HostAddresses {
 public:
  // An address that appeared or went (IPv6 link-local ones scoped).
  using Report = std::function<void(int ifindex, const Ip& addr, bool added)>;

  // A dump on a socket of its own (blocking, bounded by a 2 s receive
  // timeout: the kernel answers at once), again if the kernel marks it
  // inconsistent (NLM_F_DUMP_INTR, up to 3 times). It replaces the set;
  // `report`, when given (and not empty), is told the differences. Malformed messages
  // are counted into `malformed`.
  Result<void> dump(const Report* report, uint64_t& malformed);
  // An event: a change of the set goes to `report` (an address whose DAD
  // failed counts as gone; a repeat of a known address is no change).
  void apply(const rtnl::Addr& a, const Report& report);

  // The interfaces carrying `a` (for a scoped address, only its own).
  std::vector<int> interfaces_of(const Ip& a) const;
  // The first address of `family` on `ifindex`.
  std::optional<Ip> first(int ifindex, int family) const;

 private:
  Result<void> dump_once(std::set<std::pair<Ip, int>>& got, bool& intr, uint64_t& malformed);
  std::set<std::pair<Ip, int>> set_;  // (address with scope_id 0, ifindex)
};

}  // namespace openib::arp
