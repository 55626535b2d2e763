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
  // Whether `ifindex` has an IPv6 link-local address that has passed
  // duplicate address detection (neither tentative nor optimistic): the
  // source Linux's ndisc_send_ns takes for a solicitation no queued packet
  // gives a source to (RFC 4861 §7.2.2, RFC 4862 §5.4). Without one the
  // kernel sends no solicitation for a bare NTF_USE.
  bool has_ready_link_local(int ifindex) const;

 private:
  using Set = std::set<std::pair<Ip, int>>;
  Result<void> dump_once(Set& got, Set& unready, bool& intr, uint64_t& malformed);
  Set set_;      // (address with scope_id 0, ifindex)
  Set unready_;  // those of set_ still tentative or optimistic (DAD under way)
};

}  // namespace openib::arp
