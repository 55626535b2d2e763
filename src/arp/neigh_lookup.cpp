// RoCE destination MACs from the kernel's route and neighbour tables
// (neigh_lookup.hpp, docs/arp.md "RoCE destinations").
#include "arp/neigh_lookup.hpp"

#include <libmnl/libmnl.h>
#include <linux/neighbour.h>
#include <linux/rtnetlink.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <netinet/in.h>

#include <cerrno>
#include <cstring>
#include <variant>
#include <vector>

namespace openib::arp {

Ip ip_of_gid(const Gid& g, int ifindex) {
  Ip a;
  bool mapped = g[10] == 0xff && g[11] == 0xff;  // RFC 4291 2.5.5.2
  for (int i = 0; i < 10; ++i) mapped = mapped && g[i] == 0;
  if (mapped) {
    a.family = AF_INET;
    std::copy(g.begin() + 12, g.end(), a.bytes.begin());
    return a;
  }
  a.family = AF_INET6;
  a.bytes = g;
  if (g[0] == 0xfe && (g[1] & 0xc0) == 0x80) a.scope_id = static_cast<uint32_t>(ifindex);
  return a;
}

Gid gid_of_ip(const Ip& a) {
  if (a.family != AF_INET) return a.bytes;
  Gid g{};
  g[10] = g[11] = 0xff;
  std::copy(a.bytes.begin(), a.bytes.begin() + 4, g.begin() + 12);
  return g;
}

// ---- the kernel ----------------------------------------------------------------

struct KernelNeighbours::Impl {
  mnl_socket* nl = nullptr;
  uint32_t seq = 0;
  std::vector<uint8_t> buf = std::vector<uint8_t>(MNL_SOCKET_BUFFER_SIZE);

  Result<void> open(std::chrono::milliseconds timeout) {
    if (nl) return ok();
    nl = mnl_socket_open2(NETLINK_ROUTE, SOCK_CLOEXEC);
    if (!nl) return sys_err("netlink socket");
    if (mnl_socket_bind(nl, 0, MNL_SOCKET_AUTOPID) < 0) {
      Error e = sys_err("netlink bind");
      close();
      return e;
    }
    timeval tv{};
    tv.tv_sec = timeout.count() / 1000;
    tv.tv_usec = static_cast<suseconds_t>((timeout.count() % 1000) * 1000);
    ::setsockopt(mnl_socket_get_fd(nl), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    return ok();
  }
  void close() {
    if (nl) mnl_socket_close(nl);
    nl = nullptr;
  }

  // Sends one request and reads until its answer (a message or an ack of its seq).
  Result<rtnl::Message> ask(std::span<uint8_t> msg, size_t len) {
    const uint32_t s = reinterpret_cast<const nlmsghdr*>(msg.data())->nlmsg_seq;
    if (mnl_socket_sendto(nl, msg.data(), len) < 0) return sys_err("rtnetlink send");
    for (int reads = 0; reads < 64; ++reads) {
      ssize_t n = mnl_socket_recvfrom(nl, buf.data(), buf.size());
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return err(ETIMEDOUT, "the kernel did not answer (rtnetlink)");
        return sys_err("rtnetlink recv");
      }
      std::optional<rtnl::Message> got;
      rtnl::for_each_message(std::span<const uint8_t>(buf.data(), static_cast<size_t>(n)),
                             [&](const rtnl::Header& h, const rtnl::Message& m) {
                               if (h.seq == s && !got) got = m;
                             });
      if (got) return *got;
    }
    return err(EPROTO, "no rtnetlink answer for request {}", s);
  }
  uint32_t next() { return ++seq ? seq : ++seq; }
};

KernelNeighbours::KernelNeighbours(std::chrono::milliseconds timeout) : impl_(std::make_unique<Impl>()) {
  (void)impl_->open(timeout);  // a failure shows in each answer
}
KernelNeighbours::~KernelNeighbours() { impl_->close(); }

Result<rtnl::Route> KernelNeighbours::route(int ifindex, const Ip& dst) {
  if (!impl_->nl) return err(ENOTCONN, "no rtnetlink socket");
  alignas(nlmsghdr) uint8_t msg[rtnl::kRequestBytes];
  Ip d = dst;
  d.scope_id = static_cast<uint32_t>(ifindex);  // RTA_OIF: the netdev's route
  OPENIB_TRY_ASSIGN(rtnl::Message m, impl_->ask(msg, rtnl::get_route(msg, impl_->next(), std::nullopt, d)));
  if (auto* r = std::get_if<rtnl::Route>(&m)) return *r;
  if (auto* a = std::get_if<rtnl::Ack>(&m); a && a->error) return err(a->error, "route lookup for {}", dst.str());
  return err(EPROTO, "an unexpected answer to the route lookup for {}", dst.str());
}

Result<std::optional<rtnl::Neigh>> KernelNeighbours::neighbour(int ifindex, const Ip& addr) {
  if (!impl_->nl) return err(ENOTCONN, "no rtnetlink socket");
  alignas(nlmsghdr) uint8_t msg[rtnl::kRequestBytes];
  OPENIB_TRY_ASSIGN(rtnl::Message m, impl_->ask(msg, rtnl::get_neigh(msg, impl_->next(), ifindex, addr)));
  if (auto* n = std::get_if<rtnl::Neigh>(&m)) return std::optional<rtnl::Neigh>(*n);
  if (auto* a = std::get_if<rtnl::Ack>(&m)) {
    if (a->error == ENOENT) return std::optional<rtnl::Neigh>();
    if (a->error) return err(a->error, "neighbour lookup for {}", addr.str());
  }
  return err(EPROTO, "an unexpected answer to the neighbour lookup for {}", addr.str());
}

void KernelNeighbours::trigger(int ifindex, const Ip& addr, bool create) {
  if (!impl_->nl) return;
  alignas(nlmsghdr) uint8_t msg[rtnl::kRequestBytes];
  (void)impl_->ask(msg, rtnl::neigh_use(msg, impl_->next(), ifindex, addr, create));  // the ack (EEXIST, ENOENT: raced)
}

// ---- the lookup ------------------------------------------------------------------

Result<Mac> NeighLookup::dmac(int ifindex, const Gid& dgid) {
  if (auto m = dmac_from_gid(dgid)) return *m;
  ++counters_.lookups;
  const Ip dst = ip_of_gid(dgid, ifindex);
  auto fail = [&](Error e) -> Result<Mac> {
    ++counters_.failures;
    return e;
  };
  if (ifindex <= 0) return fail(err(ENETDOWN, "the port has no netdev: no neighbour table for {}", dst.str()));
  auto r = src_.route(ifindex, dst);
  if (!r) return fail(err(r.error().code == EINVAL ? ENETUNREACH : r.error().code, "no route to {}: {}", dst.str(),
                          r.error().message));
  if (r->type == RTN_LOCAL) {
    ++counters_.found;
    return Mac{};  // the device's own GID: looped back (docs/simhca.md §16.2)
  }
  if (r->type != RTN_UNICAST) return fail(err(ENETUNREACH, "{}: route type {}, not unicast", dst.str(), r->type));
  if (r->oif != ifindex)
    return fail(err(ENETUNREACH, "{} routes out of ifindex {}, not the port's netdev ({})", dst.str(), r->oif, ifindex));
  Ip hop = r->gateway ? *r->gateway : dst;
  hop.scope_id = hop.family == AF_INET6 && hop.bytes[0] == 0xfe && (hop.bytes[1] & 0xc0) == 0x80
                     ? static_cast<uint32_t>(ifindex)
                     : 0;
  auto n = src_.neighbour(ifindex, hop);
  if (!n) return fail(err(n.error().code, "neighbour {}: {}", hop.str(), n.error().message));
  if (*n && rtnl::usable_state((*n)->state) && (*n)->lladdr.size() == 6) {
    ++counters_.found;
    Mac m;
    std::copy((*n)->lladdr.begin(), (*n)->lladdr.end(), m.begin());
    return m;
  }
  // Not there yet: the kernel resolves it (ARP / ND); the caller asks again.
  // A PERMANENT entry without a usable MAC stays as the administrator left it.
  if (*n && ((*n)->state & (NUD_PERMANENT | NUD_NOARP)))
    return fail(err(EHOSTUNREACH, "{}: a static neighbour entry without a MAC", hop.str()));
  ++counters_.triggered;
  src_.trigger(ifindex, hop, !*n);
  if (*n && ((*n)->state & NUD_FAILED))
    return err(EHOSTUNREACH, "{} is unreachable: the kernel's last ARP/ND for {} failed (asked again)", dst.str(),
               hop.str());
  return err(EAGAIN, "{}: the MAC of {} is not known yet (ARP/ND under way; ask again)", dst.str(), hop.str());
}

}  // namespace openib::arp
