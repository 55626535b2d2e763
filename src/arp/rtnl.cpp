// rtnetlink(7): struct rtmsg, ndmsg, ifaddrmsg and their attributes
// (linux/rtnetlink.h, linux/neighbour.h, linux/if_addr.h); libmnl walks
// the messages and attributes.
#include "arp/rtnl.hpp"

#include <libmnl/libmnl.h>
#include <linux/if_addr.h>
#include <linux/neighbour.h>
#include <linux/rtnetlink.h>
#include <sys/socket.h>

#include <cstring>
#include <string>

namespace openib::arp::rtnl {

namespace {

size_t addr_len(int family) { return family == AF_INET ? 4 : family == AF_INET6 ? 16 : 0; }

bool link_local6(const Ip& a) { return a.family == AF_INET6 && a.bytes[0] == 0xfe && (a.bytes[1] & 0xc0) == 0x80; }

// An address attribute of `family`'s size, or nullopt.
std::optional<Ip> attr_ip(const nlattr* a, int family) {
  size_t n = addr_len(family);
  if (!a || n == 0 || mnl_attr_get_payload_len(a) != n) return std::nullopt;
  Ip ip;
  ip.family = family;
  std::memcpy(ip.bytes.data(), mnl_attr_get_payload(a), n);
  return ip;
}

// The attributes after a fixed header of `hdr` bytes, by type (the last
// of a type wins); false if one overruns the message.
template <size_t N>
bool attrs(const nlmsghdr* nlh, size_t hdr, std::array<const nlattr*, N>& out) {
  // The message's own end, not libmnl's aligned one: an attribute
  // reaching into the padding is the message's fault.
  const char* tail = reinterpret_cast<const char*>(nlh) + nlh->nlmsg_len;
  const char* p = static_cast<const char*>(mnl_nlmsg_get_payload_offset(nlh, hdr));
  while (p < tail) {
    auto* a = reinterpret_cast<const nlattr*>(p);
    if (!mnl_attr_ok(a, static_cast<int>(tail - p))) return false;
    uint16_t t = mnl_attr_get_type(a);
    if (t < N) out[t] = a;
    p = reinterpret_cast<const char*>(mnl_attr_next(a));
  }
  return true;
}

Message parse_route(const nlmsghdr* nlh) {
  if (nlh->nlmsg_len < mnl_nlmsg_size(sizeof(rtmsg))) return Malformed{"route message shorter than rtmsg"};
  const auto* rt = static_cast<const rtmsg*>(mnl_nlmsg_get_payload(nlh));
  std::array<const nlattr*, RTA_MAX + 1> a{};
  if (!attrs(nlh, sizeof(rtmsg), a)) return Malformed{"route attribute overruns its message"};
  Route r;
  r.deleted = nlh->nlmsg_type == RTM_DELROUTE;
  r.family = rt->rtm_family;
  r.type = rt->rtm_type;
  r.table = rt->rtm_table;
  if (a[RTA_TABLE]) {
    if (mnl_attr_get_payload_len(a[RTA_TABLE]) != 4) return Malformed{"RTA_TABLE not 4 bytes"};
    r.table = static_cast<uint8_t>(mnl_attr_get_u32(a[RTA_TABLE]));
  }
  if (a[RTA_OIF]) {
    if (mnl_attr_get_payload_len(a[RTA_OIF]) != 4) return Malformed{"RTA_OIF not 4 bytes"};
    r.oif = static_cast<int>(mnl_attr_get_u32(a[RTA_OIF]));
  }
  if (r.family != AF_INET && r.family != AF_INET6) return Ignored{};  // MPLS, multicast families
  if (a[RTA_GATEWAY] && !(r.gateway = attr_ip(a[RTA_GATEWAY], r.family)))
    return Malformed{"RTA_GATEWAY of the wrong size"};
  if (a[RTA_PREFSRC] && !(r.prefsrc = attr_ip(a[RTA_PREFSRC], r.family)))
    return Malformed{"RTA_PREFSRC of the wrong size"};
  for (auto* a6 : {&r.gateway, &r.prefsrc})
    if (*a6 && link_local6(**a6)) (*a6)->scope_id = static_cast<uint32_t>(r.oif);
  return r;
}

Message parse_neigh(const nlmsghdr* nlh) {
  if (nlh->nlmsg_len < mnl_nlmsg_size(sizeof(ndmsg))) return Malformed{"neighbour message shorter than ndmsg"};
  const auto* nd = static_cast<const ndmsg*>(mnl_nlmsg_get_payload(nlh));
  if (nd->ndm_family != AF_INET && nd->ndm_family != AF_INET6) return Ignored{};  // bridge FDB, ...
  std::array<const nlattr*, NDA_MAX + 1> a{};
  if (!attrs(nlh, sizeof(ndmsg), a)) return Malformed{"neighbour attribute overruns its message"};
  Neigh n;
  n.deleted = nlh->nlmsg_type == RTM_DELNEIGH;
  n.ifindex = nd->ndm_ifindex;
  n.state = nd->ndm_state;
  n.flags = nd->ndm_flags;
  auto dst = attr_ip(a[NDA_DST], nd->ndm_family);
  if (!dst) return Malformed{"neighbour without an NDA_DST of its family's size"};
  n.addr = *dst;
  if (link_local6(n.addr)) n.addr.scope_id = static_cast<uint32_t>(n.ifindex);
  if (a[NDA_LLADDR]) {
    size_t len = mnl_attr_get_payload_len(a[NDA_LLADDR]);
    if (len > 32) return Malformed{"NDA_LLADDR longer than 32 bytes"};
    const auto* p = static_cast<const uint8_t*>(mnl_attr_get_payload(a[NDA_LLADDR]));
    n.lladdr.assign(p, p + len);
  }
  return n;
}

Message parse_addr(const nlmsghdr* nlh) {
  if (nlh->nlmsg_len < mnl_nlmsg_size(sizeof(ifaddrmsg))) return Malformed{"address message shorter than ifaddrmsg"};
  const auto* ifa = static_cast<const ifaddrmsg*>(mnl_nlmsg_get_payload(nlh));
  if (ifa->ifa_family != AF_INET && ifa->ifa_family != AF_INET6) return Ignored{};
  std::array<const nlattr*, IFA_MAX + 1> a{};
  if (!attrs(nlh, sizeof(ifaddrmsg), a)) return Malformed{"address attribute overruns its message"};
  Addr r;
  r.deleted = nlh->nlmsg_type == RTM_DELADDR;
  r.ifindex = static_cast<int>(ifa->ifa_index);
  r.flags = ifa->ifa_flags;
  if (a[IFA_FLAGS]) {
    if (mnl_attr_get_payload_len(a[IFA_FLAGS]) != 4) return Malformed{"IFA_FLAGS not 4 bytes"};
    r.flags = mnl_attr_get_u32(a[IFA_FLAGS]);
  }
  // IPv4: IFA_LOCAL is the interface's own address (IFA_ADDRESS the
  // peer's on a point-to-point link); IPv6 sends IFA_ADDRESS alone.
  auto ip = attr_ip(a[IFA_LOCAL] ? a[IFA_LOCAL] : a[IFA_ADDRESS], ifa->ifa_family);
  if (!ip) return Malformed{"address without an IFA_LOCAL/IFA_ADDRESS of its family's size"};
  r.addr = *ip;
  if (link_local6(r.addr)) r.addr.scope_id = static_cast<uint32_t>(r.ifindex);
  return r;
}

Message parse_aligned(const nlmsghdr* nlh) {
  switch (nlh->nlmsg_type) {
    case NLMSG_DONE: return Done{};
    case NLMSG_ERROR: {
      if (nlh->nlmsg_len < mnl_nlmsg_size(sizeof(nlmsgerr))) return Malformed{"NLMSG_ERROR shorter than nlmsgerr"};
      int e = static_cast<const nlmsgerr*>(mnl_nlmsg_get_payload(nlh))->error;
      if (e > 0 || e < -4095) return Malformed{"NLMSG_ERROR with an error that is no errno"};
      return Ack{-e};
    }
    case RTM_NEWROUTE:
    case RTM_DELROUTE: return parse_route(nlh);
    case RTM_NEWNEIGH:
    case RTM_DELNEIGH: return parse_neigh(nlh);
    case RTM_NEWADDR:
    case RTM_DELADDR: return parse_addr(nlh);
    default: return Ignored{};
  }
}

nlmsghdr* put_header(std::span<uint8_t> buf, uint16_t type, uint16_t flags, uint32_t seq) {
  std::memset(buf.data(), 0, kRequestBytes);
  nlmsghdr* nlh = mnl_nlmsg_put_header(buf.data());
  nlh->nlmsg_type = type;
  nlh->nlmsg_flags = static_cast<uint16_t>(NLM_F_REQUEST | flags);
  nlh->nlmsg_seq = seq;
  return nlh;
}

void put_ip(nlmsghdr* nlh, uint16_t type, const Ip& ip) {
  mnl_attr_put(nlh, type, addr_len(ip.family), ip.bytes.data());
}

}  // namespace

Message parse(std::span<const uint8_t> msg) {
  if (msg.size() < sizeof(nlmsghdr)) return Malformed{"shorter than nlmsghdr"};
  nlmsghdr h;
  std::memcpy(&h, msg.data(), sizeof h);
  if (h.nlmsg_len < sizeof(nlmsghdr) || h.nlmsg_len > msg.size()) return Malformed{"nlmsg_len outside the datagram"};
  // libmnl reads up to NLMSG_ALIGN(nlmsg_len) from an aligned header: a
  // message not so (a fuzzer's; the kernel's are) is copied and padded.
  std::vector<uint32_t> copy;
  const void* p = msg.data();
  if (reinterpret_cast<uintptr_t>(p) % alignof(nlmsghdr) != 0 || h.nlmsg_len % NLMSG_ALIGNTO != 0) {
    copy.resize(NLMSG_ALIGN(h.nlmsg_len) / 4);
    std::memcpy(copy.data(), msg.data(), h.nlmsg_len);
    p = copy.data();
  }
  return parse_aligned(static_cast<const nlmsghdr*>(p));
}

void for_each_message(std::span<const uint8_t> datagram,
                      const std::function<void(const Header&, const Message&)>& fn) {
  size_t off = 0;
  while (off < datagram.size()) {
    auto rest = datagram.subspan(off);
    nlmsghdr h{};
    if (rest.size() >= sizeof h) std::memcpy(&h, rest.data(), sizeof h);
    if (rest.size() < sizeof h || h.nlmsg_len < sizeof h || h.nlmsg_len > rest.size()) {
      fn(Header{}, Malformed{"truncated netlink message"});
      return;
    }
    fn(Header{h.nlmsg_type, h.nlmsg_flags, h.nlmsg_seq, h.nlmsg_pid}, parse(rest.first(h.nlmsg_len)));
    off += NLMSG_ALIGN(h.nlmsg_len);
  }
}

size_t get_route(std::span<uint8_t> buf, uint32_t seq, const std::optional<Ip>& src, const Ip& dst) {
  nlmsghdr* nlh = put_header(buf, RTM_GETROUTE, 0, seq);
  auto* rt = static_cast<rtmsg*>(mnl_nlmsg_put_extra_header(nlh, sizeof(rtmsg)));
  rt->rtm_family = static_cast<uint8_t>(dst.family);
  rt->rtm_dst_len = static_cast<uint8_t>(addr_len(dst.family) * 8);
  put_ip(nlh, RTA_DST, dst);
  if (src) {
    rt->rtm_src_len = static_cast<uint8_t>(addr_len(src->family) * 8);
    put_ip(nlh, RTA_SRC, *src);
  }
  uint32_t oif = dst.scope_id ? dst.scope_id : src ? src->scope_id : 0;
  if (oif) mnl_attr_put_u32(nlh, RTA_OIF, oif);
  return nlh->nlmsg_len;
}

size_t get_neigh(std::span<uint8_t> buf, uint32_t seq, int ifindex, const Ip& addr) {
  nlmsghdr* nlh = put_header(buf, RTM_GETNEIGH, 0, seq);
  auto* nd = static_cast<ndmsg*>(mnl_nlmsg_put_extra_header(nlh, sizeof(ndmsg)));
  nd->ndm_family = static_cast<uint8_t>(addr.family);
  nd->ndm_ifindex = ifindex;
  put_ip(nlh, NDA_DST, addr);
  return nlh->nlmsg_len;
}

size_t neigh_use(std::span<uint8_t> buf, uint32_t seq, int ifindex, const Ip& addr, bool create) {
  nlmsghdr* nlh = put_header(buf, RTM_NEWNEIGH, create ? NLM_F_CREATE | NLM_F_EXCL | NLM_F_ACK : NLM_F_ACK, seq);
  auto* nd = static_cast<ndmsg*>(mnl_nlmsg_put_extra_header(nlh, sizeof(ndmsg)));
  nd->ndm_family = static_cast<uint8_t>(addr.family);
  nd->ndm_ifindex = ifindex;
  nd->ndm_state = NUD_NONE;  // not PERMANENT: the entry stays the kernel's to age
  nd->ndm_flags = NTF_USE;
  put_ip(nlh, NDA_DST, addr);
  return nlh->nlmsg_len;
}

size_t del_neigh(std::span<uint8_t> buf, uint32_t seq, int ifindex, const Ip& addr) {
  nlmsghdr* nlh = put_header(buf, RTM_DELNEIGH, NLM_F_ACK, seq);
  auto* nd = static_cast<ndmsg*>(mnl_nlmsg_put_extra_header(nlh, sizeof(ndmsg)));
  nd->ndm_family = static_cast<uint8_t>(addr.family);
  nd->ndm_ifindex = ifindex;
  put_ip(nlh, NDA_DST, addr);
  return nlh->nlmsg_len;
}

size_t dump_addrs(std::span<uint8_t> buf, uint32_t seq) {
  nlmsghdr* nlh = put_header(buf, RTM_GETADDR, NLM_F_DUMP, seq);
  auto* ifa = static_cast<ifaddrmsg*>(mnl_nlmsg_put_extra_header(nlh, sizeof(ifaddrmsg)));
  ifa->ifa_family = AF_UNSPEC;
  return nlh->nlmsg_len;
}

bool usable_state(uint16_t state) {
  return state & (NUD_REACHABLE | NUD_STALE | NUD_DELAY | NUD_PROBE | NUD_PERMANENT | NUD_NOARP);
}

std::string state_name(uint16_t state) {
  static const std::pair<uint16_t, const char*> names[] = {
      {NUD_INCOMPLETE, "INCOMPLETE"}, {NUD_REACHABLE, "REACHABLE"}, {NUD_STALE, "STALE"},
      {NUD_DELAY, "DELAY"},           {NUD_PROBE, "PROBE"},         {NUD_FAILED, "FAILED"},
      {NUD_NOARP, "NOARP"},           {NUD_PERMANENT, "PERMANENT"}};
  std::string s;
  for (auto [bit, name] : names)
    if (state & bit) s += (s.empty() ? "" : "|") + std::string(name);
  return s.empty() ? "NONE" : s;
}

}  // namespace openib::arp::rtnl
