// rtnetlink(7) RTM_GETADDR with NLM_F_DUMP; libmnl for the socket.
#include "arp/host_addresses.hpp"

#include <libmnl/libmnl.h>
#include <linux/if_addr.h>
#include <linux/rtnetlink.h>
#include <sys/socket.h>

namespace openib::arp {

namespace {

bool is_link_local(const Ip& a) { return a.family == AF_INET6 && a.bytes[0] == 0xfe && (a.bytes[1] & 0xc0) == 0x80; }

bool unready(uint32_t flags) { return flags & (IFA_F_TENTATIVE | IFA_F_OPTIMISTIC); }

Ip unscoped(Ip a) {
  a.scope_id = 0;
  return a;
}

Ip scoped(Ip a, int ifindex) {
  if (is_link_local(a)) a.scope_id = static_cast<uint32_t>(ifindex);
  return a;
}

}  // namespace

Result<void> HostAddresses::dump(const Report* report, uint64_t& malformed) {
  for (int attempt = 0; attempt < 3; ++attempt) {
    Set got, unready;
    bool intr = false;
    OPENIB_TRY(dump_once(got, unready, intr, malformed));
    if (intr) continue;  // NLM_F_DUMP_INTR: inconsistent, again
    if (report && *report) {
      for (const auto& [a, i] : set_)
        if (!got.count({a, i})) (*report)(i, scoped(a, i), false);
      for (const auto& [a, i] : got)
        if (!set_.count({a, i})) (*report)(i, scoped(a, i), true);
    }
    set_ = std::move(got);
    unready_ = std::move(unready);
    return ok();
  }
  return err(EAGAIN, "RTM_GETADDR dump interrupted 3 times");
}

Result<void> HostAddresses::dump_once(Set& got, Set& unready_got, bool& intr, uint64_t& malformed) {
  mnl_socket* nl = mnl_socket_open2(NETLINK_ROUTE, SOCK_CLOEXEC);
  if (!nl) return sys_err("netlink socket for the address dump");
  struct Closer {
    mnl_socket* nl;
    ~Closer() { mnl_socket_close(nl); }
  } closer{nl};
  timeval tv{2, 0};  // a bound, not an expectation
  ::setsockopt(mnl_socket_get_fd(nl), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  if (mnl_socket_bind(nl, 0, MNL_SOCKET_AUTOPID) < 0) return sys_err("netlink bind for the address dump");
  alignas(nlmsghdr) uint8_t msg[rtnl::kRequestBytes];
  size_t len = rtnl::dump_addrs(msg, 1);
  if (mnl_socket_sendto(nl, msg, len) < 0) return sys_err("RTM_GETADDR dump request");
  std::vector<uint8_t> buf(MNL_SOCKET_BUFFER_SIZE * 4);
  for (bool done = false; !done;) {
    ssize_t n = mnl_socket_recvfrom(nl, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return sys_err("RTM_GETADDR dump");
    Result<void> r = ok();
    rtnl::for_each_message({buf.data(), static_cast<size_t>(n)}, [&](const rtnl::Header& h, const rtnl::Message& m) {
      if (h.flags & NLM_F_DUMP_INTR) intr = true;
      if (std::holds_alternative<rtnl::Done>(m)) done = true;
      if (auto* a = std::get_if<rtnl::Ack>(&m); a && a->error) {
        r = err(a->error, "RTM_GETADDR dump refused");
        done = true;
      }
      if (std::holds_alternative<rtnl::Malformed>(m)) ++malformed;
      if (auto* a = std::get_if<rtnl::Addr>(&m); a && !a->deleted && !(a->flags & IFA_F_DADFAILED)) {
        got.insert({unscoped(a->addr), a->ifindex});
        if (unready(a->flags)) unready_got.insert({unscoped(a->addr), a->ifindex});
      }
    });
    OPENIB_TRY(r);
  }
  return ok();
}

void HostAddresses::apply(const rtnl::Addr& a, const Report& report) {
  std::pair<Ip, int> k{unscoped(a.addr), a.ifindex};
  // RFC 4862 §5.4.5: an address whose DAD failed is another node's.
  bool gone = a.deleted || (a.flags & IFA_F_DADFAILED);
  bool changed = gone ? set_.erase(k) > 0 : set_.insert(k).second;
  // DAD's end is an RTM_NEWADDR of a known address without IFA_F_TENTATIVE.
  if (gone || !unready(a.flags))
    unready_.erase(k);
  else
    unready_.insert(k);
  if (changed && report) report(a.ifindex, scoped(a.addr, a.ifindex), !gone);
}

std::vector<int> HostAddresses::interfaces_of(const Ip& a) const {
  std::vector<int> out;
  Ip k = unscoped(a);
  for (auto it = set_.lower_bound({k, 0}); it != set_.end() && it->first == k; ++it)
    if (!a.scope_id || static_cast<uint32_t>(it->second) == a.scope_id) out.push_back(it->second);
  return out;
}

std::optional<Ip> HostAddresses::first(int ifindex, int family) const {
  for (const auto& [a, i] : set_)
    if (i == ifindex && a.family == family) return scoped(a, i);
  return std::nullopt;
}

bool HostAddresses::has_ready_link_local(int ifindex) const {
  for (const auto& k : set_)
    if (k.second == ifindex && is_link_local(k.first) && !unready_.count(k)) return true;
  return false;
}

}  // namespace openib::arp
