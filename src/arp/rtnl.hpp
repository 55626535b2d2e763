// The rtnetlink messages the resolver sends and reads (rtnetlink(7),
// netlink(7); docs/arp.md "The rtnetlink messages"): built and parsed by
// pure functions over bytes, so the unit tests and fuzz_arp_netlink call
// them without a socket. Parsing never trusts a length: a message too
// short for its header, an attribute overrunning its message, an address
// of the wrong size is Malformed (counted by the resolver, dropped).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <variant>
#include <vector>

#include "arp/resolver.hpp"

namespace openib::arp::rtnl {

// RTM_NEWROUTE: the answer to RTM_GETROUTE (or a route event).
struct Route {
  bool deleted = false;       // RTM_DELROUTE
  int family = 0;
  uint8_t type = 0;           // RTN_UNICAST, RTN_LOCAL, ...
  uint8_t table = 0;
  int oif = 0;                // RTA_OIF (0: none)
  std::optional<Ip> gateway;  // RTA_GATEWAY
  std::optional<Ip> prefsrc;  // RTA_PREFSRC
};

// RTM_NEWNEIGH / RTM_DELNEIGH.
struct Neigh {
  bool deleted = false;
  int ifindex = 0;
  Ip addr;                    // NDA_DST (IPv6 link-local: scope_id = ifindex)
  uint16_t state = 0;         // NUD_*
  uint8_t flags = 0;          // NTF_*
  std::vector<uint8_t> lladdr;  // NDA_LLADDR (empty: none; at most 32 bytes)
};

// RTM_NEWADDR / RTM_DELADDR.
struct Addr {
  bool deleted = false;
  int ifindex = 0;
  Ip addr;                    // IFA_LOCAL, else IFA_ADDRESS (IPv6 link-local: scope_id = ifindex)
  uint32_t flags = 0;         // IFA_F_* (IFA_FLAGS when present)
};

// NLMSG_ERROR: error 0 is an acknowledgement; otherwise a positive errno.
struct Ack {
  int error = 0;
};
struct Done {};       // NLMSG_DONE (the end of a dump)
struct Ignored {};    // a type the resolver has no use for (NLMSG_NOOP, RTM_NEWLINK, ...)
struct Malformed {
  const char* why = "";
};

using Message = std::variant<Ignored, Malformed, Route, Neigh, Addr, Ack, Done>;

struct Header {
  uint16_t type = 0;
  uint16_t flags = 0;
  uint32_t seq = 0;
  uint32_t pid = 0;
};

// Every message of one datagram: fn(header, message). A trailing part
// too short for a message is reported once as Malformed (header zeroed).
void for_each_message(std::span<const uint8_t> datagram,
                      const std::function<void(const Header&, const Message&)>& fn);
// One message (its nlmsghdr first; the span ends where nlmsg_len says).
Message parse(std::span<const uint8_t> msg);

// Requests, written into `buf` (at least kRequestBytes); answer the length.
constexpr size_t kRequestBytes = 256;
// RTM_GETROUTE for dst (from src if given; RTA_OIF = dst.scope_id when set).
size_t get_route(std::span<uint8_t> buf, uint32_t seq, const std::optional<Ip>& src, const Ip& dst);
// RTM_GETNEIGH for one neighbour (the kernel's doit handler, Linux >= 5.0).
size_t get_neigh(std::span<uint8_t> buf, uint32_t seq, int ifindex, const Ip& addr);
// RTM_NEWNEIGH with NTF_USE and NLM_F_ACK: the kernel calls
// neigh_event_send(), which starts ARP / ND for an entry not yet valid
// (STALE: a unicast probe). `create`: NLM_F_CREATE | NLM_F_EXCL, for a
// next hop without an entry (an existing one is left alone: EEXIST);
// otherwise no flag, for an existing entry (none: ENOENT). Never
// NLM_F_REPLACE, nor NTF_USE on a PERMANENT entry: Linux 6.x turns such
// an entry INCOMPLETE, the administrator's lladdr lost.
size_t neigh_use(std::span<uint8_t> buf, uint32_t seq, int ifindex, const Ip& addr, bool create);
// RTM_DELNEIGH (NLM_F_ACK) for one neighbour: `ip neigh del ADDR dev IF`.
size_t del_neigh(std::span<uint8_t> buf, uint32_t seq, int ifindex, const Ip& addr);
// RTM_GETADDR, NLM_F_DUMP: every address of every interface.
size_t dump_addrs(std::span<uint8_t> buf, uint32_t seq);

// Usable neighbour states (the kernel sends to them without resolving):
// NUD_REACHABLE, STALE, DELAY, PROBE, PERMANENT, NOARP.
bool usable_state(uint16_t state);
std::string state_name(uint16_t state);

}  // namespace openib::arp::rtnl
