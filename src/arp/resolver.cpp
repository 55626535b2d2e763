// The resolver (docs/arp.md): Linux's ib_addr (drivers/infiniband/core/
// addr.c: addr4_resolve / addr6_resolve, then the neighbour) done from
// user space over rtnetlink(7), on asio.
#include "arp/resolver.hpp"

#include <arpa/inet.h>
#include <libmnl/libmnl.h>
#include <linux/neighbour.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/post.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cstdlib>
#include <cstring>
#include <list>
#include <map>

#include "arp/eth_dmac.hpp"
#include "arp/host_addresses.hpp"
#include "arp/neigh_lookup.hpp"
#include "arp/rtnl.hpp"
#include "common/log.hpp"
#include "ipoib_tap/bridge.hpp"  // the IPoIB multicast MGIDs (RFC 4391 §4)

namespace openib::arp {

namespace asio = boost::asio;
using Gid = std::array<uint8_t, 16>;

std::string Ip::str() const {
  char text[INET6_ADDRSTRLEN] = "?";
  if (family == AF_INET || family == AF_INET6) ::inet_ntop(family, bytes.data(), text, sizeof text);
  std::string s = family == AF_INET || family == AF_INET6 ? text : fmt::format("(family {})", family);
  if (scope_id) s += fmt::format("%{}", scope_id);
  return s;
}

std::optional<Ip> Ip::parse(std::string_view text) {
  Ip a;
  std::string addr(text.substr(0, text.find('%')));
  if (text.find('%') != std::string_view::npos) {
    std::string scope(text.substr(text.find('%') + 1));
    char* end = nullptr;
    unsigned long v = std::strtoul(scope.c_str(), &end, 10);
    if (scope.empty() || *end || v == 0 || v > UINT32_MAX) return std::nullopt;
    a.scope_id = static_cast<uint32_t>(v);
  }
  a.family = addr.find(':') != std::string::npos ? AF_INET6 : AF_INET;
  if (a.scope_id && a.family != AF_INET6) return std::nullopt;
  if (::inet_pton(a.family, addr.c_str(), a.bytes.data()) != 1) return std::nullopt;
  return a;
}

namespace {

std::string ifname(int ifindex) {
  char name[IF_NAMESIZE] = {};
  if (ifindex > 0 && ::if_indextoname(static_cast<unsigned>(ifindex), name)) return name;
  return fmt::format("ifindex {}", ifindex);
}

std::string gid_str(const Gid& g) {
  std::string s;
  for (size_t i = 0; i < 16; i += 2) s += fmt::format("{}{:02x}{:02x}", i ? ":" : "", g[i], g[i + 1]);
  return s;
}

std::string hex(std::span<const uint8_t> b) {
  std::string s;
  for (size_t i = 0; i < b.size(); ++i) s += fmt::format("{}{:02x}", i ? ":" : "", b[i]);
  return s;
}

bool same_addr(const Ip& a, const Ip& b) { return a.family == b.family && a.bytes == b.bytes; }

bool is_multicast(const Ip& a) {
  return a.family == AF_INET ? (a.bytes[0] & 0xf0) == 0xe0 : a.family == AF_INET6 && a.bytes[0] == 0xff;
}

bool is_loopback(const Ip& a) {
  static const Gid v6_one = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  return a.family == AF_INET ? a.bytes[0] == 127 : a.family == AF_INET6 && a.bytes == v6_one;
}

// One rtnetlink socket in the io_context (as src/ipoib_tap/addr_watch.*).
struct NlSocket {
  explicit NlSocket(asio::io_context& io) : sd(io) {}
  ~NlSocket() { close(); }
  void close() {
    if (sd.is_open()) {
      boost::system::error_code ec;
      sd.cancel(ec);
      sd.release();  // the fd is libmnl's: mnl_socket_close closes it
    }
    if (nl) mnl_socket_close(nl);
    nl = nullptr;
  }
  // (Again after a failed start(): the half-opened socket goes first.)
  Result<void> open(std::initializer_list<int> groups) {
    close();
    nl = mnl_socket_open2(NETLINK_ROUTE, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (!nl) return sys_err("netlink socket");
    if (mnl_socket_bind(nl, 0, MNL_SOCKET_AUTOPID) < 0) return sys_err("netlink bind");
    portid = mnl_socket_get_portid(nl);
    for (int group : groups)
      if (mnl_socket_setsockopt(nl, NETLINK_ADD_MEMBERSHIP, &group, sizeof group) < 0)
        return sys_err("NETLINK_ADD_MEMBERSHIP {}", group);
    boost::system::error_code ec;
    sd.assign(mnl_socket_get_fd(nl), ec);
    if (ec) return err(ec.value(), "asio assign of the netlink socket: {}", ec.message());
    return ok();
  }
  mnl_socket* nl = nullptr;
  asio::posix::stream_descriptor sd;
  unsigned portid = 0;
};

}  // namespace

struct Resolver::Impl {
  // The cache's and the resolutions' key: (source or none, destination).
  using Key = std::pair<Ip, Ip>;
  enum class Phase { Route, Neigh, Wait };
  enum class Ask { Route, Neigh, Use, Del };

  struct Waiter {
    uint64_t id;
    Callback cb;
    std::unique_ptr<asio::steady_timer> timer;
  };
  struct Resolution {
    explicit Resolution(asio::io_context& io) : timer(io) {}
    Key key;
    std::optional<Ip> src;
    Ip dst;
    Phase phase = Phase::Route;
    unsigned tries = 0;          // kernel resolutions triggered (and requests resent)
    uint64_t generation = 0;     // the cache's when it began: a later flush makes it uncacheable
    asio::steady_timer timer;    // retry_every
    Resolved partial;            // from the route
    Ip nexthop;
    std::string note;            // what the last neighbour answer said (for the error)
    bool entry = false;          // the kernel has an entry for the next hop (as last seen)
    bool foreign_lladdr = false; // a dynamic entry with an lladdr of no GID: deleted before the next try
    bool deleting = false;       // our RTM_DELNEIGH's own FAILED event is still to come
    std::vector<Waiter> waiters;
  };
  struct Entry {
    Resolved r;
    bool has_neigh = false;      // false: local or multicast (no neighbour behind it)
    Ip nexthop;
    std::vector<uint8_t> lladdr;
    std::list<Key>::iterator age;
  };

  Impl(asio::io_context& io_, const LinkDirectory& links_, Config cfg_)
      : io(io_), links(links_), cfg(cfg_), req(io_), ev(io_), buf(MNL_SOCKET_BUFFER_SIZE * 4) {}

  asio::io_context& io;
  const LinkDirectory& links;
  Config cfg;
  std::shared_ptr<bool> alive = std::make_shared<bool>(true);  // for handlers queued past our end
  NlSocket req;  // requests and their answers
  NlSocket ev;   // RTNLGRP_NEIGH, _IPV4_IFADDR, _IPV6_IFADDR, _IPV4_ROUTE, _IPV6_ROUTE
  bool started = false;
  bool use_refused = false;    // the kernel refused NTF_USE once: UDP probes instead
  uint32_t next_seq = 1;
  uint64_t next_waiter = 1;
  uint64_t generation = 0;
  std::vector<uint8_t> buf;
  Counters counters;
  AddrChangeFn addr_change;
  HostAddresses addrs;
  std::map<Key, Entry> cache;
  std::list<Key> ages;                 // oldest first
  std::map<Key, std::unique_ptr<Resolution>> pending;
  std::map<uint32_t, std::pair<Key, Ask>> asked;  // request seq -> its resolution

  // ---- sockets ----
  Result<void> start() {
    if (started) return err(EALREADY, "ARP resolver already started");
    OPENIB_TRY(req.open({}));
    // Subscribe before the address dump: nothing falls between the two.
    OPENIB_TRY(ev.open({RTNLGRP_NEIGH, RTNLGRP_IPV4_IFADDR, RTNLGRP_IPV6_IFADDR, RTNLGRP_IPV4_ROUTE,
                        RTNLGRP_IPV6_ROUTE}));
    OPENIB_TRY(addrs.dump(nullptr, counters.malformed));
    started = true;
    wait(req, [this](std::span<const uint8_t> d) { on_answers(d); });
    wait(ev, [this](std::span<const uint8_t> d) { on_events(d); });
    return ok();
  }

  template <typename Fn>
  void wait(NlSocket& s, Fn fn) {
    std::weak_ptr<bool> w = alive;
    s.sd.async_wait(asio::posix::stream_descriptor::wait_read, [this, w, &s, fn](const boost::system::error_code& ec) {
      if (ec || w.expired()) return;  // cancelled: the resolver is going away
      read(s, fn);
      wait(s, fn);
    });
  }

  template <typename Fn>
  void read(NlSocket& s, Fn& fn) {
    for (;;) {
      ssize_t n = mnl_socket_recvfrom(s.nl, buf.data(), buf.size());
      if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK) return;
        if (errno == EINTR) continue;
        ++counters.netlink_errors;
        if (errno == ENOBUFS) {  // the kernel dropped messages for us
          overrun(&s == &ev ? "events" : "answers");
          continue;
        }
        log::get("arp")->error("netlink recv: {}", std::strerror(errno));
        return;
      }
      fn(std::span<const uint8_t>(buf.data(), static_cast<size_t>(n)));
    }
  }

  uint32_t send(const uint8_t* msg, size_t len, Key key, Ask what) {
    uint32_t seq = reinterpret_cast<const nlmsghdr*>(msg)->nlmsg_seq;
    if (mnl_socket_sendto(req.nl, msg, len) < 0) {
      ++counters.netlink_errors;
      log::get("arp")->warn("netlink send for {}: {} (the retry timer resends)", key.second.str(), std::strerror(errno));
      return seq;
    }
    asked[seq] = {std::move(key), what};
    return seq;
  }
  uint32_t seq() {
    uint32_t s = next_seq++;
    if (next_seq == 0) next_seq = 1;
    return s;
  }

  // ---- the answers to our requests ----
  void on_answers(std::span<const uint8_t> d) {
    rtnl::for_each_message(d, [&](const rtnl::Header& h, const rtnl::Message& m) {
      if (std::holds_alternative<rtnl::Malformed>(m)) {
        ++counters.malformed;
        return;
      }
      auto it = asked.find(h.seq);
      if (it == asked.end()) return;  // of a resolution already over
      auto [key, what] = it->second;
      asked.erase(it);
      auto p = pending.find(key);
      if (p == pending.end()) return;
      Resolution& res = *p->second;
      if (auto* a = std::get_if<rtnl::Ack>(&m)) return on_ack(res, what, a->error);
      if (auto* r = std::get_if<rtnl::Route>(&m); r && what == Ask::Route && res.phase == Phase::Route)
        return on_route(res, *r);
      if (auto* n = std::get_if<rtnl::Neigh>(&m); n && what == Ask::Neigh) return on_neigh_answer(res, *n);
    });
  }

  void on_ack(Resolution& res, Ask what, int e) {
    if (e == 0) return;  // NTF_USE accepted
    const Key key = res.key;
    switch (what) {
      case Ask::Route:
        if (res.phase != Phase::Route) return;
        if (e == ENETUNREACH) return finish(key, err(ENETUNREACH, "no route to {}", res.dst.str()));
        if (e == EINVAL && res.src)
          return finish(key, err(EADDRNOTAVAIL, "no route to {} from {} (is it an address of this host?)",
                                 res.dst.str(), res.src->str()));
        return finish(key, err(e, "route lookup for {}{} refused", res.dst.str(),
                               res.src ? " from " + res.src->str() : std::string()));
      case Ask::Neigh:  // ENOENT: the kernel has no entry yet
        res.entry = false;
        if (res.phase == Phase::Neigh) trigger(res);
        return;
      case Ask::Del:  // ENOENT: gone already
        return;
      case Ask::Use:
        // The entry came or went since we looked: the next try asks the
        // other way (within max_tries).
        if (e == EEXIST || e == ENOENT) {
          res.entry = e == EEXIST;
          return;
        }
        if (!use_refused)
          log::get("arp")->warn("RTM_NEWNEIGH NTF_USE refused ({}): zero-length UDP datagrams trigger resolution instead",
                                std::strerror(e));
        use_refused = true;
        ++counters.netlink_errors;
        udp_probe(res);
        return;
    }
  }

  // addr4_resolve / addr6_resolve: the route gives the interface, the
  // source and the next hop.
  void on_route(Resolution& res, const rtnl::Route& r) {
    const Key key = res.key;
    const Ip& dst = res.dst;
    if (r.type == RTN_LOCAL || is_loopback(dst)) return finish_local(res, r);
    switch (r.type) {
      case RTN_UNICAST:
      case RTN_MULTICAST: break;
      case RTN_UNREACHABLE: return finish(key, err(EHOSTUNREACH, "{} is unreachable (an unreachable route)", dst.str()));
      case RTN_PROHIBIT: return finish(key, err(EACCES, "{} is prohibited (a prohibit route)", dst.str()));
      case RTN_BLACKHOLE: return finish(key, err(EHOSTUNREACH, "{} routes into a blackhole", dst.str()));
      case RTN_BROADCAST: return finish(key, err(EINVAL, "{} is a broadcast address", dst.str()));
      default: return finish(key, err(ENETUNREACH, "no usable route to {} (route type {})", dst.str(), r.type));
    }
    auto link = links.link(r.oif);
    if (!link)
      return finish(key, err(ENODEV, "{} routes via {}, not an IPoIB interface", dst.str(), ifname(r.oif)));
    std::optional<Ip> src = res.src ? res.src : r.prefsrc;
    if (!src) src = addrs.first(link->ifindex, dst.family);
    if (!src)
      return finish(key, err(EADDRNOTAVAIL, "{} routes via {}, which has no {} address", dst.str(),
                             ifname(r.oif), dst.family == AF_INET ? "IPv4" : "IPv6"));
    Resolved& p = res.partial;
    p.src = *src;
    p.dst = dst;
    // A RoCE link's GIDs are its IP addresses (docs/arp.md "RoCE
    // destinations"; Linux's rdma_ip2gid): the source's, not GID 0.
    p.sgid = link->ethernet ? gid_of_ip(*src) : link->gid;
    p.pkey = link->pkey;
    p.port = link->port;
    p.ifindex = link->ifindex;
    p.ethernet = link->ethernet;
    if (is_multicast(dst) && link->ethernet) {  // the group's IP as the MGID, its group MAC (RFC 1112 6.4, RFC 2464 7)
      p.dgid = gid_of_ip(dst);
      if (auto m = dmac_from_gid(p.dgid)) p.dmac = *m;
      return finish(key, p);
    }
    if (is_multicast(dst)) {  // no neighbour: the group's MGID (RFC 4391 §4, as ip_ib_mc_map)
      uint32_t group = 0;
      std::memcpy(&group, dst.bytes.data(), 4);
      p.dgid = dst.family == AF_INET ? ipoib::ipv4_mgid(ntohl(group), link->pkey) : ipoib::ipv6_mgid(dst.bytes, link->pkey);
      return finish(key, p);
    }
    res.nexthop = r.gateway ? *r.gateway : dst;
    if (res.nexthop.family == AF_INET6 && res.nexthop.bytes[0] == 0xfe && (res.nexthop.bytes[1] & 0xc0) == 0x80)
      res.nexthop.scope_id = static_cast<uint32_t>(link->ifindex);
    else
      res.nexthop.scope_id = 0;
    res.phase = Phase::Neigh;
    ask_neigh(res);
  }

  void finish_local(Resolution& res, const rtnl::Route& r) {
    const Key key = res.key;
    auto link = link_of_address(res.dst);
    if (!link && res.src) link = link_of_address(*res.src);
    if (!link) {
      auto all = links.links();
      if (all.empty()) return finish(key, err(ENODEV, "{} is local, but there is no IPoIB interface", res.dst.str()));
      link = all.front();
    }
    Resolved out;
    out.src = res.src ? *res.src : r.prefsrc ? *r.prefsrc : res.dst;
    out.dst = res.dst;
    out.sgid = out.dgid = link->gid;
    // RoCE: the device loops a packet to its own IP GIDs back (docs/simhca.md
    // §16.2); loopback addresses have no GID entry and keep GID 0.
    if (link->ethernet && !is_loopback(res.dst)) {
      out.sgid = gid_of_ip(is_loopback(out.src) ? res.dst : out.src);
      out.dgid = gid_of_ip(res.dst);
    }
    out.pkey = link->pkey;
    out.port = link->port;
    out.ifindex = link->ifindex;
    out.ethernet = link->ethernet;
    out.local = true;
    finish(key, out);
  }

  void ask_neigh(Resolution& res) {
    alignas(nlmsghdr) uint8_t msg[rtnl::kRequestBytes];
    send(msg, rtnl::get_neigh(msg, seq(), res.partial.ifindex, res.nexthop), res.key, Ask::Neigh);
  }

  void on_neigh_answer(Resolution& res, const rtnl::Neigh& n) {
    if (res.phase == Phase::Route || n.ifindex != res.partial.ifindex || !same_addr(n.addr, res.nexthop)) return;
    if (use_neigh(res, n)) return;
    if (res.phase == Phase::Neigh) trigger(res);
  }

  // A usable entry whose lladdr the bridge knows finishes the resolution.
  bool use_neigh(Resolution& res, const rtnl::Neigh& n) {
    res.note = fmt::format("neighbour {}", rtnl::state_name(n.state));
    res.entry = true;
    if (!rtnl::usable_state(n.state) || n.lladdr.empty()) return false;
    if (res.partial.ifindex == n.ifindex && is_ethernet(n.ifindex)) {
      // RoCE: the destination's own IP is its GID; the lladdr is the next hop's MAC.
      if (n.lladdr.size() != 6) {
        res.note = fmt::format("neighbour {} with lladdr {}, not a MAC", rtnl::state_name(n.state), hex(n.lladdr));
        return false;
      }
      Resolved out = res.partial;
      out.dgid = gid_of_ip(res.dst);
      std::copy(n.lladdr.begin(), n.lladdr.end(), out.dmac.begin());
      finish(res.key, out, &n);
      return true;
    }
    auto gid = links.gid_of(n.ifindex, n.lladdr);
    if (!gid) {
      res.note = fmt::format("neighbour {} with lladdr {}, which maps to no GID", rtnl::state_name(n.state), hex(n.lladdr));
      // A static entry (`ip neigh add ... nud permanent`) is not the
      // kernel's to resolve again: no retry changes it.
      if (n.state & (NUD_PERMANENT | NUD_NOARP)) {
        finish(res.key, err(EHOSTUNREACH, "{} is unreachable: {} on {}", res.dst.str(), res.note, ifname(n.ifindex)));
        return true;
      }
      // A dynamic one is stale beyond the kernel's knowing (the bridge
      // gave the neighbour another MAC since): probing it would go to the
      // old MAC (unicast, DELAY then PROBE) and fail seconds later.
      // Deleted, the next try broadcasts.
      res.foreign_lladdr = true;
      return false;
    }
    Resolved out = res.partial;
    out.dgid = *gid;
    finish(res.key, out, &n);
    return true;
  }

  // Makes the kernel resolve the next hop (neigh_event_send through
  // NTF_USE), then waits retry_every for the neighbour event.
  void trigger(Resolution& res) {
    if (res.tries >= cfg.max_tries) {
      return finish(res.key, err(EHOSTUNREACH, "{} is unreachable: no {} answer for {} on {} after {} tries ({})",
                                 res.dst.str(), res.nexthop.family == AF_INET ? "ARP" : "ND", res.nexthop.str(),
                                 ifname(res.partial.ifindex), res.tries, res.note));
    }
    if (res.tries > 0) ++counters.retries;
    ++res.tries;
    if (res.phase == Phase::Wait) ask_neigh(res);  // in case its event was lost
    res.phase = Phase::Wait;
    if (res.foreign_lladdr) {
      alignas(nlmsghdr) uint8_t msg[rtnl::kRequestBytes];
      send(msg, rtnl::del_neigh(msg, seq(), res.partial.ifindex, res.nexthop), res.key, Ask::Del);
      res.foreign_lladdr = false;
      res.entry = false;
      res.deleting = true;
    }
    // A bare NTF_USE makes Linux solicit from a link-local address past
    // DAD; while the link has none (its link-local still tentative for a
    // second or two after the carrier came), no solicitation goes out at
    // all. A probe datagram from the route's source is a queued packet the
    // kernel takes the solicitation's source from (ndisc_solicit).
    const bool no_source = res.nexthop.family == AF_INET6 && !addrs.has_ready_link_local(res.partial.ifindex);
    if (use_refused || no_source) {
      udp_probe(res);
    } else {
      alignas(nlmsghdr) uint8_t msg[rtnl::kRequestBytes];
      send(msg, rtnl::neigh_use(msg, seq(), res.partial.ifindex, res.nexthop, !res.entry), res.key, Ask::Use);
    }
    arm(res);
  }

  // The fallback (docs/arp.md): a zero-length datagram to the discard
  // port through the interface makes the kernel resolve the next hop.
  void udp_probe(Resolution& res) {
    int fd = ::socket(res.nexthop.family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return;
    std::string name = ifname(res.partial.ifindex);
    ::setsockopt(fd, SOL_SOCKET, SO_BINDTODEVICE, name.c_str(), static_cast<socklen_t>(name.size()));
    ++counters.udp_probes;
    // From the route's source when it can be bound (not while it is
    // tentative itself): the solicitation's source, as the connection's.
    if (res.partial.src.family == res.nexthop.family) {
      auto from = sockaddr_of(res.partial.src, 0);
      (void)::bind(fd, reinterpret_cast<const sockaddr*>(&from.first), from.second);
    }
    auto to = sockaddr_of(res.nexthop, 9);
    ::sendto(fd, "", 0, 0, reinterpret_cast<const sockaddr*>(&to.first), to.second);
    ::close(fd);
  }

  static std::pair<sockaddr_storage, socklen_t> sockaddr_of(const Ip& a, uint16_t port) {
    std::pair<sockaddr_storage, socklen_t> out{};
    if (a.family == AF_INET) {
      auto* s = reinterpret_cast<sockaddr_in*>(&out.first);
      s->sin_family = AF_INET;
      s->sin_port = htons(port);
      std::memcpy(&s->sin_addr, a.bytes.data(), 4);
      out.second = sizeof *s;
    } else {
      auto* s = reinterpret_cast<sockaddr_in6*>(&out.first);
      s->sin6_family = AF_INET6;
      s->sin6_port = htons(port);
      std::memcpy(&s->sin6_addr, a.bytes.data(), 16);
      s->sin6_scope_id = a.scope_id;
      out.second = sizeof *s;
    }
    return out;
  }

  void arm(Resolution& res) {
    res.timer.expires_after(cfg.retry_every);
    std::weak_ptr<bool> w = alive;
    Key key = res.key;
    res.timer.async_wait([this, w, key](const boost::system::error_code& ec) {
      if (ec || w.expired()) return;
      auto p = pending.find(key);
      if (p != pending.end()) on_retry_timer(*p->second);
    });
  }

  void on_retry_timer(Resolution& res) {
    if (res.phase == Phase::Wait) return trigger(res);
    // An answer lost (an overrun of the request socket): ask again, bounded.
    if (++res.tries > cfg.max_tries)
      return finish(res.key, err(EHOSTUNREACH, "{}: the kernel did not answer the {} lookup", res.dst.str(),
                                 res.phase == Phase::Route ? "route" : "neighbour"));
    ++counters.retries;
    if (res.phase == Phase::Route) ask_route(res);
    else ask_neigh(res);
    arm(res);
  }

  void ask_route(Resolution& res) {
    alignas(nlmsghdr) uint8_t msg[rtnl::kRequestBytes];
    send(msg, rtnl::get_route(msg, seq(), res.src, res.dst), res.key, Ask::Route);
  }

  // ---- events ----
  void on_events(std::span<const uint8_t> d) {
    rtnl::for_each_message(d, [&](const rtnl::Header&, const rtnl::Message& m) {
      if (std::holds_alternative<rtnl::Malformed>(m)) {
        ++counters.malformed;
      } else if (auto* n = std::get_if<rtnl::Neigh>(&m)) {
        on_neigh_event(*n);
      } else if (auto* a = std::get_if<rtnl::Addr>(&m)) {
        on_addr_event(*a);
      } else if (std::holds_alternative<rtnl::Route>(m)) {
        drop_all();  // any route may change where an address goes
      }
    });
  }

  void on_neigh_event(const rtnl::Neigh& n) {
    // The cache: an entry goes when its neighbour is deleted, fails or
    // changes lladdr.
    for (auto it = cache.begin(); it != cache.end();) {
      const Entry& e = it->second;
      bool stale = e.has_neigh && e.r.ifindex == n.ifindex && same_addr(e.nexthop, n.addr) &&
                   (n.deleted || (n.state & NUD_FAILED) || (!n.lladdr.empty() && n.lladdr != e.lladdr));
      if (stale) {
        ++counters.invalidations;
        ages.erase(e.age);
        it = cache.erase(it);
      } else {
        ++it;
      }
    }
    if (n.deleted) return;
    // The resolutions waiting for it. (finish() erases from `pending`.)
    std::vector<Key> waiting;
    for (const auto& [key, res] : pending)
      if (res->phase == Phase::Wait && res->partial.ifindex == n.ifindex && same_addr(res->nexthop, n.addr))
        waiting.push_back(key);
    for (const auto& key : waiting) {
      auto p = pending.find(key);
      if (p == pending.end()) continue;
      Resolution& res = *p->second;
      if (use_neigh(res, n)) continue;
      if (!(n.state & NUD_FAILED)) continue;
      // The kernel deletes an entry by making it FAILED first
      // (neigh_delete): after our own deletion, that is no answer.
      if (res.deleting) {
        res.deleting = false;
        continue;
      }
      trigger(res);  // the kernel gave up: again now (bounded by max_tries)
    }
  }

  void on_addr_event(const rtnl::Addr& a) {
    drop_all();  // a new or lost address changes sources and local routes
    addrs.apply(a, addr_change);
  }

  void overrun(const char* which) {
    log::get("arp")->warn("rtnetlink overrun ({}): the cache is dropped and the addresses dumped again", which);
    drop_all();
    if (auto r = addrs.dump(&addr_change, counters.malformed); !r) log::get("arp")->error("{}", r.error().str());
    // Neighbour events may be lost: those waiting ask the kernel again.
    for (auto& [key, res] : pending)
      if (res->phase == Phase::Wait) ask_neigh(*res);
  }

  void drop_all() {
    counters.invalidations += cache.size();
    cache.clear();
    ages.clear();
    ++generation;
  }

  // ---- requests ----
  void resolve(const std::optional<Ip>& src, const Ip& dst, std::chrono::milliseconds timeout, Callback cb) {
    ++counters.requests;
    auto fail_later = [&](Error e) {
      ++counters.failures;
      post(std::move(cb), std::move(e));
    };
    if (dst.family != AF_INET && dst.family != AF_INET6)
      return fail_later(err(EAFNOSUPPORT, "destination of address family {}: IPv4 or IPv6 only", dst.family));
    if (src && src->family != dst.family)
      return fail_later(err(EINVAL, "source {} and destination {} of different families", src->str(), dst.str()));
    if (!started) return fail_later(err(ENOTCONN, "ARP resolver not started"));
    // The kernel's route lookup answers ENETUNREACH for a foreign source:
    // told apart here.
    if (src && !is_local_address(*src))
      return fail_later(err(EADDRNOTAVAIL, "source {} is not an address of this host", src->str()));
    Key key{src ? *src : Ip{}, dst};
    if (auto c = cache.find(key); c != cache.end()) {
      ++counters.cache_hits;
      return post(std::move(cb), c->second.r);
    }
    auto p = pending.find(key);
    if (p != pending.end()) {
      ++counters.shared;
    } else {
      ++counters.kernel_resolutions;
      auto res = std::make_unique<Resolution>(io);
      res->key = key;
      res->src = src;
      res->dst = dst;
      res->generation = generation;
      p = pending.emplace(key, std::move(res)).first;
      ask_route(*p->second);
      arm(*p->second);
    }
    add_waiter(*p->second, timeout, std::move(cb));
  }

  void add_waiter(Resolution& res, std::chrono::milliseconds timeout, Callback cb) {
    Waiter w{next_waiter++, std::move(cb), std::make_unique<asio::steady_timer>(io)};
    w.timer->expires_after(timeout);
    std::weak_ptr<bool> alive_w = alive;
    w.timer->async_wait([this, alive_w, key = res.key, id = w.id, timeout](const boost::system::error_code& ec) {
      if (ec || alive_w.expired()) return;
      auto p = pending.find(key);
      if (p == pending.end()) return;
      auto& ws = p->second->waiters;
      for (auto it = ws.begin(); it != ws.end(); ++it) {
        if (it->id != id) continue;
        Callback late = std::move(it->cb);
        ws.erase(it);
        ++counters.timeouts;
        // The resolution itself goes on (bounded by max_tries): its answer is cached.
        late(err(ETIMEDOUT, "resolving {}: no answer within {} ms", key.second.str(), timeout.count()));
        return;
      }
    });
    res.waiters.push_back(std::move(w));
  }

  void finish(const Key& key, Result<Resolved> r, const rtnl::Neigh* n = nullptr) {
    auto p = pending.find(key);
    if (p == pending.end()) return;
    std::unique_ptr<Resolution> res = std::move(p->second);
    pending.erase(p);
    for (auto it = asked.begin(); it != asked.end();)
      it = it->second.first == key ? asked.erase(it) : std::next(it);
    if (r.ok() && res->generation == generation) remember(key, *r, n ? &res->nexthop : nullptr, n);
    if (!r.ok()) log::get("arp")->debug("{}", r.error().str());
    for (auto& w : res->waiters) {
      w.timer->cancel();
      if (!r.ok()) ++counters.failures;
      post(std::move(w.cb), r);
    }
  }

  void remember(const Key& key, const Resolved& r, const Ip* nexthop, const rtnl::Neigh* n) {
    while (!cache.empty() && cache.size() >= cfg.max_cache) {
      cache.erase(ages.front());
      ages.pop_front();
    }
    if (cfg.max_cache == 0) return;
    Entry e;
    e.r = r;
    if (nexthop) {
      e.has_neigh = true;
      e.nexthop = *nexthop;
      e.lladdr = n->lladdr;
    }
    e.age = ages.insert(ages.end(), key);
    cache[key] = std::move(e);
  }

  void post(Callback cb, Result<Resolved> r) {
    std::weak_ptr<bool> w = alive;
    asio::post(io, [w, cb = std::move(cb), r = std::move(r)]() mutable {
      if (!w.expired()) cb(std::move(r));
    });
  }

  bool is_local_address(const Ip& a) const { return is_loopback(a) || !addrs.interfaces_of(a).empty(); }

  bool is_ethernet(int ifindex) const {
    auto l = links.link(ifindex);
    return l && l->ethernet;
  }

  std::optional<Link> link_of_address(const Ip& a) const {
    for (int ifindex : addrs.interfaces_of(a))
      if (auto l = links.link(ifindex)) return l;
    return std::nullopt;
  }

  std::string json() const {
    const Counters& c = counters;
    std::string s = fmt::format(
        "{{\"counters\":{{\"requests\":{},\"cache_hits\":{},\"shared\":{},\"kernel_resolutions\":{},"
        "\"retries\":{},\"failures\":{},\"timeouts\":{},\"invalidations\":{},\"netlink_errors\":{},"
        "\"udp_probes\":{},\"malformed\":{}}},\"pending\":{},\"cache\":[",
        c.requests, c.cache_hits, c.shared, c.kernel_resolutions, c.retries, c.failures, c.timeouts,
        c.invalidations, c.netlink_errors, c.udp_probes, c.malformed, pending.size());
    bool first = true;
    for (const auto& [key, e] : cache) {
      const Resolved& r = e.r;
      s += fmt::format(
          "{}{{\"src\":\"{}\",\"dst\":\"{}\",\"sgid\":\"{}\",\"dgid\":\"{}\",\"pkey\":\"0x{:04x}\","
          "\"port\":{},\"ifindex\":{},\"local\":{},\"lladdr\":\"{}\"}}",
          first ? "" : ",", r.src.str(), r.dst.str(), gid_str(r.sgid), gid_str(r.dgid), r.pkey, r.port, r.ifindex,
          r.local ? "true" : "false", hex(e.lladdr));
      first = false;
    }
    return s + "]}";
  }
};

Resolver::Resolver(asio::io_context& io, const LinkDirectory& links, Config cfg)
    : impl_(std::make_unique<Impl>(io, links, cfg)) {}
Resolver::~Resolver() = default;
Result<void> Resolver::start() { return impl_->start(); }
void Resolver::resolve(const std::optional<Ip>& src, const Ip& dst, std::chrono::milliseconds timeout, Callback cb) {
  impl_->resolve(src, dst, timeout, std::move(cb));
}
void Resolver::set_addr_change_handler(AddrChangeFn f) { impl_->addr_change = std::move(f); }
std::optional<Link> Resolver::link_of_address(const Ip& a) const { return impl_->link_of_address(a); }
bool Resolver::is_local_address(const Ip& a) const { return impl_->is_local_address(a); }
std::vector<int> Resolver::interfaces_of_address(const Ip& a) const { return impl_->addrs.interfaces_of(a); }
void Resolver::flush() { impl_->drop_all(); }
const Counters& Resolver::counters() const { return impl_->counters; }
std::string Resolver::json() const { return impl_->json(); }

}  // namespace openib::arp
