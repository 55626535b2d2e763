// The datagram rsockets' headers (datagram.hpp; docs/rsockets.md
// "Datagram sockets"): writing ours, and checking a peer's as the receiver
// does, before anything of it is used. Pure functions, fuzzed by
// test/fuzz/fuzz_rsocket_dgram.cpp.
#include <endian.h>

#include <algorithm>
#include <cstring>

#include "abi/rdmacm/rsocket/datagram.hpp"

namespace openib::rsocket {

socklen_t addr_len(const SockAddr& a) { return a.sa.sa_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in); }

bool same_addr(const SockAddr& a, const SockAddr& b) {
  if (a.sa.sa_family != b.sa.sa_family) return false;
  if (a.sa.sa_family == AF_INET)
    return a.sin.sin_port == b.sin.sin_port && a.sin.sin_addr.s_addr == b.sin.sin_addr.s_addr;
  return a.sin6.sin6_port == b.sin6.sin6_port && std::memcmp(&a.sin6.sin6_addr, &b.sin6.sin6_addr, 16) == 0;
}

void format_hdr(DsHeader& h, const SockAddr& a) {
  h = DsHeader{};
  if (a.sa.sa_family == AF_INET) {
    h.version = 4;
    h.length = kDsHdr4;
    h.port = a.sin.sin_port;
    h.addr.ipv4 = a.sin.sin_addr.s_addr;
  } else {
    h.version = 6;
    h.length = kDsHdr6;
    h.port = a.sin6.sin6_port;
    h.addr.ipv6.flowinfo = a.sin6.sin6_flowinfo;
    std::memcpy(h.addr.ipv6.addr, &a.sin6.sin6_addr, 16);
  }
}

SockAddr from_hdr(const DsHeader& h) {
  SockAddr a{};
  if (h.version == 4) {
    a.sin.sin_family = AF_INET;
    a.sin.sin_port = h.port;
    a.sin.sin_addr.s_addr = h.addr.ipv4;
  } else {
    a.sin6.sin6_family = AF_INET6;
    a.sin6.sin6_port = h.port;
    a.sin6.sin6_flowinfo = h.addr.ipv6.flowinfo;
    std::memcpy(&a.sin6.sin6_addr, h.addr.ipv6.addr, 16);
  }
  return a;
}

bool parse_udp_datagram(const uint8_t* buf, size_t len, int from_family, UdpDatagram& out) {
  if (len < kDsUdpHdr4) return false;
  DsUdpHeader h{};
  std::memcpy(&h, buf, std::min(len, sizeof h));
  const bool v4 = h.version == 4 && from_family == AF_INET && h.length == kDsUdpHdr4;
  const bool v6 = h.version == 6 && from_family == AF_INET6 && h.length == kDsUdpHdr6;
  if (be32toh(h.tag) != kDsUdpTag || !(v4 || v6) || len < h.length) return false;
  if (h.op != kDsOpData && h.op != kDsOpCtrl) return false;
  const uint32_t qpn = be32toh(h.qpn) & 0xFFFFFF;
  if (qpn < 2) return false;  // QP0 and QP1 are no datagram socket's
  if (len - h.length > ds_max_payload(from_family)) return false;
  out.op = h.op;
  out.qpn = qpn;
  out.payload = h.length;
  return true;
}

bool parse_ud_message(const uint8_t* msg, size_t len, int family, SockAddr& from, size_t& payload) {
  if (len < kDsHdr4 || len > kDsSlot) return false;
  DsHeader h{};
  std::memcpy(&h, msg, std::min(len, sizeof h));
  const bool known = family == AF_INET ? h.version == 4 && h.length == kDsHdr4 : h.version == 6 && h.length == kDsHdr6;
  if (!known || len < h.length) return false;
  from = from_hdr(h);
  payload = h.length;
  return true;
}

}  // namespace openib::rsocket
