// IP -> GID address resolution for ibd (docs/arp.md), as Linux's ib_addr
// (drivers/infiniband/core/addr.c) does it: the kernel's routing table
// picks the outgoing IPoIB interface and the next hop (RTM_GETROUTE), the
// kernel's neighbour table holds the next hop's link-layer address
// (RTM_GETNEIGH), and when it does not, the kernel is made to resolve it
// (ARP for IPv4, ND for IPv6: RTM_NEWNEIGH with NTF_USE) and the resolver
// waits for the neighbour event. The link-layer address is the TAP's MAC
// the IPoIB bridge gave the neighbour; the LinkDirectory turns it into the
// neighbour's GID.
//
// Retries and timeouts are the resolver's own; concurrent requests for
// one (src, dst) share one resolution; results are cached and dropped on
// neighbour, address and route events (rtnetlink(7)).
//
// Single-threaded: everything runs on the io_context's thread; callbacks
// run on it too, never inside resolve(), and may call into the resolver
// (resolve() again included) but must not destroy it.
#pragma once

#include <array>
#include <chrono>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "common/result.hpp"

namespace openib::arp {

struct Ip {                         // an IPv4/IPv6 address
  int family = 0;                   // AF_INET / AF_INET6
  std::array<uint8_t, 16> bytes{};  // network order; IPv4 in bytes[0..3]
  uint32_t scope_id = 0;            // IPv6 link-local: the ifindex
  auto operator<=>(const Ip&) const = default;
  std::string str() const;          // "198.18.30.2", "fd00::1", "fe80::1%3"
  // The inverse of str() (the scope a number); nullopt if not an address.
  static std::optional<Ip> parse(std::string_view text);
};

struct Link {                       // an IPoIB interface ibd serves
  int ifindex = 0;
  uint8_t port = 1;                 // the HCA port
  std::array<uint8_t, 16> gid{};    // the port's GID 0
  uint16_t pkey = 0xFFFF;
  // A RoCE port's netdev (docs/arp.md "RoCE destinations"): the GIDs are
  // the IP addresses themselves and a neighbour's lladdr is its MAC.
  bool ethernet = false;
};

// What ibd tells the resolver about its IPoIB interfaces (ibd: IpoibService; tests: a fake).
class LinkDirectory {
 public:
  virtual ~LinkDirectory() = default;
  virtual std::optional<Link> link(int ifindex) const = 0;  // nullopt: not an IPoIB interface of ours
  virtual std::vector<Link> links() const = 0;               // all of them (loopback/local: the first)
  // The GID behind a neighbour's link-layer address (the TAP's MAC the IPoIB bridge gave it).
  virtual std::optional<std::array<uint8_t, 16>> gid_of(int ifindex, std::span<const uint8_t> lladdr) const = 0;
};

struct Resolved {
  Ip src;                           // the source address (given, or the route's preferred source)
  Ip dst;
  std::array<uint8_t, 16> sgid{}, dgid{};
  uint16_t pkey = 0;
  uint8_t port = 1;
  int ifindex = 0;
  bool local = false;               // dst is an address of this host (loopback too): dgid = sgid
  // An Ethernet link: the next hop's MAC (Linux: sa_path_rec.roce.dmac);
  // zero when local, a group's MAC for a multicast destination.
  std::array<uint8_t, 6> dmac{};
  bool ethernet = false;            // through a RoCE netdev (Link::ethernet)
};

struct Config {
  std::chrono::milliseconds retry_every{1000};  // re-trigger the kernel's resolution this often
  unsigned max_tries = 3;                        // then EHOSTUNREACH (unless the caller's timeout is sooner: ETIMEDOUT)
  size_t max_cache = 4096;
};

struct Counters {
  uint64_t requests = 0;            // resolve() calls
  uint64_t cache_hits = 0;          // answered from the cache
  uint64_t shared = 0;              // joined a resolution already under way
  uint64_t kernel_resolutions = 0;  // resolutions that asked the kernel (route, neighbour)
  uint64_t retries = 0;             // neighbour resolutions triggered again
  uint64_t failures = 0;            // requests answered with an error other than ETIMEDOUT
  uint64_t timeouts = 0;            // requests answered ETIMEDOUT (the caller's timeout)
  uint64_t invalidations = 0;       // cache entries dropped (by events or flush)
  uint64_t netlink_errors = 0;      // socket overruns (ENOBUFS), refused requests, recv errors
  uint64_t udp_probes = 0;          // resolutions triggered by a UDP datagram, not NTF_USE (docs/arp.md)
  uint64_t malformed = 0;           // netlink messages dropped as malformed
};

class Resolver {
 public:
  using Callback = std::function<void(Result<Resolved>)>;
  using AddrChangeFn = std::function<void(int ifindex, const Ip& addr, bool added)>;

  Resolver(boost::asio::io_context& io, const LinkDirectory& links, Config cfg = {});
  ~Resolver();
  Resolver(const Resolver&) = delete;
  Resolver& operator=(const Resolver&) = delete;

  // Opens the rtnetlink sockets, joins RTNLGRP_NEIGH, RTNLGRP_IPV4_IFADDR,
  // RTNLGRP_IPV6_IFADDR.
  Result<void> start();
  // src nullopt: any. Callback runs later on the io_context (never inside resolve()).
  void resolve(const std::optional<Ip>& src, const Ip& dst, std::chrono::milliseconds timeout, Callback cb);
  // Every RTM_NEWADDR/RTM_DELADDR (the RDMA CM sends ADDR_CHANGE).
  void set_addr_change_handler(AddrChangeFn f);
  // Is `a` an address of one of the links (bind checks it: EADDRNOTAVAIL otherwise)? Which link?
  std::optional<Link> link_of_address(const Ip& a) const;
  // Is `a` an address of this host, on any interface (loopback included)?
  // (The RDMA CM refuses a REQ from another host claiming one as its source.)
  bool is_local_address(const Ip& a) const;
  // The interfaces holding `a` (none: no address of this host).
  std::vector<int> interfaces_of_address(const Ip& a) const;
  void flush();  // drops the cache
  const Counters& counters() const;
  std::string json() const;  // for ibdctl (counters, cache entries)

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace openib::arp
