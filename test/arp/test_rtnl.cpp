// src/arp's rtnetlink codec (src/arp/rtnl.hpp) on messages laid out as
// the kernel's (rtnetlink(7)), and on broken ones: each parses to what it
// says or to a Malformed, never past its bytes. No root, no sockets.
#include <arpa/inet.h>
#include <libmnl/libmnl.h>
#include <linux/neighbour.h>
#include <linux/rtnetlink.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <vector>

#include "arp/rtnl.hpp"

using namespace openib::arp;

namespace {

Ip ip(const char* text) {
  auto a = Ip::parse(text);
  REQUIRE(a);
  return *a;
}

// A message as the kernel writes it: header, fixed part, attributes.
struct Msg {
  alignas(nlmsghdr) uint8_t buf[512] = {};
  nlmsghdr* nlh;
  Msg(uint16_t type, uint32_t seq = 7) : nlh(mnl_nlmsg_put_header(buf)) {
    nlh->nlmsg_type = type;
    nlh->nlmsg_seq = seq;
  }
  template <typename T>
  T* fixed() { return static_cast<T*>(mnl_nlmsg_put_extra_header(nlh, sizeof(T))); }
  void ip_attr(uint16_t type, const Ip& a) { mnl_attr_put(nlh, type, a.family == AF_INET ? 4 : 16, a.bytes.data()); }
  std::span<const uint8_t> bytes() const { return {buf, nlh->nlmsg_len}; }
};

Msg neigh(const char* addr, uint16_t state, std::vector<uint8_t> lladdr, uint16_t type = RTM_NEWNEIGH) {
  Msg m(type);
  auto* nd = m.fixed<ndmsg>();
  nd->ndm_family = ip(addr).family;
  nd->ndm_ifindex = 4;
  nd->ndm_state = state;
  m.ip_attr(NDA_DST, ip(addr));
  if (!lladdr.empty()) mnl_attr_put(m.nlh, NDA_LLADDR, lladdr.size(), lladdr.data());
  return m;
}

}  // namespace

TEST_CASE("rtnl: a neighbour message gives its interface, address, state and lladdr", "[arp][rtnl]") {
  auto m = rtnl::parse(neigh("198.18.30.2", NUD_REACHABLE, {2, 0, 0, 0x18, 0x30, 2}).bytes());
  auto* n = std::get_if<rtnl::Neigh>(&m);
  REQUIRE(n);
  CHECK_FALSE(n->deleted);
  CHECK(n->ifindex == 4);
  CHECK(n->addr == ip("198.18.30.2"));
  CHECK(n->state == NUD_REACHABLE);
  CHECK(n->lladdr == std::vector<uint8_t>{2, 0, 0, 0x18, 0x30, 2});
  CHECK(rtnl::usable_state(n->state));

  auto ll = rtnl::parse(neigh("fe80::1", NUD_STALE, {}, RTM_DELNEIGH).bytes());
  auto* d = std::get_if<rtnl::Neigh>(&ll);
  REQUIRE(d);
  CHECK(d->deleted);
  CHECK(d->addr.scope_id == 4);  // link-local: scoped to its interface
  CHECK(d->lladdr.empty());
  CHECK_FALSE(rtnl::usable_state(NUD_INCOMPLETE));
  CHECK_FALSE(rtnl::usable_state(NUD_FAILED));
  CHECK(rtnl::state_name(NUD_FAILED) == "FAILED");
}

TEST_CASE("Ip: str() and parse() are inverses; bad text is refused", "[arp]") {
  for (const char* t : {"198.18.30.2", "fd00:198:18:30::2", "fe80::1%3", "::1"}) {
    auto a = Ip::parse(t);
    REQUIRE(a);
    CHECK(a->str() == t);
  }
  CHECK(Ip::parse("fe80::1%3")->scope_id == 3);
  for (const char* t : {"", "198.18.30", "198.18.30.2%1", "fe80::1%", "fe80::1%x", "fe80::1%0", "zz::1"})
    CHECK_FALSE(Ip::parse(t));
}

TEST_CASE("rtnl: a route answer gives its type, interface, gateway and source", "[arp][rtnl]") {
  Msg m(RTM_NEWROUTE);
  auto* rt = m.fixed<rtmsg>();
  rt->rtm_family = AF_INET;
  rt->rtm_type = RTN_UNICAST;
  m.ip_attr(RTA_DST, ip("198.18.31.5"));
  mnl_attr_put_u32(m.nlh, RTA_OIF, 3);
  m.ip_attr(RTA_GATEWAY, ip("198.18.30.2"));
  m.ip_attr(RTA_PREFSRC, ip("198.18.30.1"));
  auto parsed = rtnl::parse(m.bytes());
  auto* r = std::get_if<rtnl::Route>(&parsed);
  REQUIRE(r);
  CHECK(r->type == RTN_UNICAST);
  CHECK(r->oif == 3);
  CHECK(r->gateway == ip("198.18.30.2"));
  CHECK(r->prefsrc == ip("198.18.30.1"));
}

TEST_CASE("rtnl: broken messages are Malformed, an error answer an errno", "[arp][rtnl]") {
  auto malformed = [](std::span<const uint8_t> b) { return std::holds_alternative<rtnl::Malformed>(rtnl::parse(b)); };
  // An attribute longer than its message.
  auto over = neigh("198.18.30.2", NUD_REACHABLE, {1, 2, 3, 4, 5, 6});
  auto* last = reinterpret_cast<nlattr*>(over.buf + over.nlh->nlmsg_len - MNL_ALIGN(sizeof(nlattr) + 6));
  last->nla_len = 200;
  CHECK(malformed(over.bytes()));
  // NDA_DST of the wrong size, NDA_LLADDR over 32 bytes.
  Msg bad_dst(RTM_NEWNEIGH);
  bad_dst.fixed<ndmsg>()->ndm_family = AF_INET;
  mnl_attr_put_u16(bad_dst.nlh, NDA_DST, 1);
  CHECK(malformed(bad_dst.bytes()));
  CHECK(malformed(neigh("198.18.30.2", NUD_REACHABLE, std::vector<uint8_t>(33, 1)).bytes()));
  // Shorter than its fixed part; nlmsg_len beyond the bytes.
  auto whole = neigh("198.18.30.2", NUD_REACHABLE, {});
  whole.nlh->nlmsg_len = sizeof(nlmsghdr) + 4;
  CHECK(malformed(whole.bytes()));
  CHECK(malformed(whole.bytes().first(sizeof(nlmsghdr) - 1)));
  // A length that is not a multiple of 4, its last attribute in the padding
  // (the fuzzer's first find: libmnl reads to the aligned end).
  for (uint32_t cut : {1u, 2u, 3u}) {
    auto odd = neigh("198.18.30.2", NUD_REACHABLE, {1, 2, 3, 4, 5, 6});  // NDA_LLADDR: 10 bytes + 2 of padding
    odd.nlh->nlmsg_len -= cut;
    std::vector<uint8_t> exact(odd.bytes().begin(), odd.bytes().end());
    auto m = rtnl::parse(exact);
    if (cut <= 2) {
      REQUIRE(std::holds_alternative<rtnl::Neigh>(m));
      CHECK(std::get<rtnl::Neigh>(m).lladdr == std::vector<uint8_t>{1, 2, 3, 4, 5, 6});
    } else {
      CHECK(std::holds_alternative<rtnl::Malformed>(m));
    }
  }

  Msg e(NLMSG_ERROR);
  e.fixed<nlmsgerr>()->error = -ENOENT;
  auto ack = rtnl::parse(e.bytes());
  REQUIRE(std::holds_alternative<rtnl::Ack>(ack));
  CHECK(std::get<rtnl::Ack>(ack).error == ENOENT);

  // A datagram of two messages and a truncated tail: three reports.
  std::vector<uint8_t> d;
  for (int i = 0; i < 2; ++i) {
    auto one = neigh("198.18.30.2", NUD_STALE, {1, 2, 3, 4, 5, 6});
    d.insert(d.end(), one.bytes().begin(), one.bytes().end());
  }
  d.insert(d.end(), 5, 0);
  std::vector<bool> bad;
  rtnl::for_each_message(d, [&](const rtnl::Header&, const rtnl::Message& m) { bad.push_back(std::holds_alternative<rtnl::Malformed>(m)); });
  CHECK(bad == std::vector<bool>{false, false, true});
}

TEST_CASE("rtnl: the requests are what `ip route get` and `ip neigh replace ... use` send", "[arp][rtnl]") {
  alignas(nlmsghdr) uint8_t buf[rtnl::kRequestBytes];
  Ip dst = ip("fe80::2");
  dst.scope_id = 5;
  size_t len = rtnl::get_route(buf, 9, std::nullopt, dst);
  auto* nlh = reinterpret_cast<nlmsghdr*>(buf);
  CHECK(len == nlh->nlmsg_len);
  CHECK(nlh->nlmsg_type == RTM_GETROUTE);
  CHECK(nlh->nlmsg_seq == 9);
  auto* rt = static_cast<rtmsg*>(mnl_nlmsg_get_payload(nlh));
  CHECK(rt->rtm_family == AF_INET6);
  CHECK(rt->rtm_dst_len == 128);
  bool oif = false;
  rtnl::for_each_message({buf, len}, [](const rtnl::Header& h, const rtnl::Message& m) {
    CHECK(h.type == RTM_GETROUTE);
    CHECK(std::holds_alternative<rtnl::Ignored>(m));  // a request, not an answer
  });
  for (size_t off = NLMSG_LENGTH(sizeof(rtmsg)); off + sizeof(nlattr) <= len;) {
    auto* a = reinterpret_cast<const nlattr*>(buf + off);
    if (mnl_attr_get_type(a) == RTA_OIF) oif = mnl_attr_get_u32(a) == 5;
    off += MNL_ALIGN(a->nla_len);
  }
  CHECK(oif);

  len = rtnl::neigh_use(buf, 10, 3, ip("198.18.30.2"), true);
  CHECK(nlh->nlmsg_type == RTM_NEWNEIGH);
  CHECK(nlh->nlmsg_flags == (NLM_F_REQUEST | NLM_F_CREATE | NLM_F_EXCL | NLM_F_ACK));
  rtnl::neigh_use(buf, 11, 3, ip("198.18.30.2"), false);
  CHECK(nlh->nlmsg_flags == (NLM_F_REQUEST | NLM_F_ACK));  // never NLM_F_REPLACE
  auto* nd = static_cast<ndmsg*>(mnl_nlmsg_get_payload(nlh));
  CHECK(nd->ndm_flags == NTF_USE);
  CHECK(nd->ndm_ifindex == 3);
  CHECK(nd->ndm_state == NUD_NONE);
}
