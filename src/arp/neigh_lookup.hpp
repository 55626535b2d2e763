// The Ethernet destination of a RoCEv2 address vector whose GID is a
// unicast IP address (docs/arp.md "RoCE destinations"), as Linux's
// ib_resolve_unicast_gid_dmac (drivers/infiniband/core/addr.c:
// rdma_addr_find_l2_eth_by_grh) finds it: the kernel's route from the
// port's netdev towards the address (RTM_GETROUTE with RTA_OIF: on-link,
// or a gateway), then the next hop's entry in the neighbour table
// (RTM_GETNEIGH). An entry in a usable state (rtnl::usable_state) gives
// the MAC. Without one the kernel is made to resolve it (RTM_NEWNEIGH
// with NTF_USE, as the resolver does) and the answer is "not yet":
// EAGAIN, the caller asks again (a verbs consumer's CREATE_AH or
// MODIFY_QP; the CM's MADs are sent again by its retry timer). Linux
// answers ENODATA there; EAGAIN says what to do about it. A next hop the
// kernel gave up on (FAILED) is EHOSTUNREACH (resolution triggered once
// more). The route is asked with the netdev as RTA_OIF, as Linux's
// addr4_resolve / addr6_resolve do with the GID's netdev bound: the kernel
// then takes a destination it has no route for through that interface as
// on-link (ARP on the netdev); a route it still refuses is ENETUNREACH,
// one out of another interface ENETUNREACH too.
// An address of this host (RTN_LOCAL) needs no MAC: the device loops a
// packet to its own GIDs back (docs/simhca.md §16.2); the answer is the
// zero MAC.
//
// The kernel sits behind NeighSource so that unit tests need none;
// KernelNeighbours asks it over a blocking rtnetlink socket (each request
// answered in microseconds; bounded by a receive timeout), on ibd's loop,
// as Linux resolves in the verbs call.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>

#include "arp/eth_dmac.hpp"
#include "arp/resolver.hpp"
#include "arp/rtnl.hpp"
#include "common/result.hpp"

namespace openib::arp {

using Gid = std::array<uint8_t, 16>;

// A RoCEv2 GID as an IP address (RFC 4291 2.5.5.2: ::ffff:a.b.c.d is the
// IPv4 address; any other the IPv6 address); fe80::/10 gets scope `ifindex`.
Ip ip_of_gid(const Gid& gid, int ifindex = 0);
// An IP address as a RoCEv2 GID (the GID table's form, docs/simhca.md §16.1).
Gid gid_of_ip(const Ip& a);

// What the lookup asks the kernel (tests: a fake).
class NeighSource {
 public:
  virtual ~NeighSource() = default;
  // RTM_GETROUTE towards dst out of `ifindex`; an error when the kernel refuses.
  virtual Result<rtnl::Route> route(int ifindex, const Ip& dst) = 0;
  // RTM_GETNEIGH: the entry for `addr` on `ifindex`, nullopt if there is none.
  virtual Result<std::optional<rtnl::Neigh>> neighbour(int ifindex, const Ip& addr) = 0;
  // RTM_NEWNEIGH with NTF_USE (creating the entry when `create`).
  virtual void trigger(int ifindex, const Ip& addr, bool create) = 0;
};

// The kernel's tables over rtnetlink (one blocking socket, one request at a time).
class KernelNeighbours final : public NeighSource {
 public:
  explicit KernelNeighbours(std::chrono::milliseconds timeout = std::chrono::milliseconds(200));
  ~KernelNeighbours() override;
  KernelNeighbours(const KernelNeighbours&) = delete;
  KernelNeighbours& operator=(const KernelNeighbours&) = delete;
  Result<rtnl::Route> route(int ifindex, const Ip& dst) override;
  Result<std::optional<rtnl::Neigh>> neighbour(int ifindex, const Ip& addr) override;
  void trigger(int ifindex, const Ip& addr, bool create) override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

struct NeighCounters {
  uint64_t lookups = 0;    // dmac() calls for a unicast IP GID
  uint64_t found = 0;      // answered with a neighbour's MAC (or local)
  uint64_t triggered = 0;  // the kernel asked to resolve (the answer EAGAIN or EHOSTUNREACH)
  uint64_t failures = 0;   // no route, another interface, the kernel refused
};

class NeighLookup {
 public:
  explicit NeighLookup(NeighSource& src) : src_(src) {}
  // The MAC for `dgid` out of the netdev `ifindex`: dmac_from_gid's first
  // (link-local, multicast), else the neighbour table's (above).
  Result<Mac> dmac(int ifindex, const Gid& dgid);
  const NeighCounters& counters() const { return counters_; }

 private:
  NeighSource& src_;
  NeighCounters counters_;
};

}  // namespace openib::arp
