// ARP translation (RFC 4391 §8): on IB the hardware type is 32 and the
// hardware addresses are the 20-byte link-layer addresses (§9.1.1); on
// the TAP, ordinary Ethernet ARP (RFC 826: htype 1, hlen 6).
//
//   0 htype(2) 2 ptype(2) 4 hlen(1) 5 plen(1) 6 oper(2) 8 sha(hlen)
//   spa(4) tha(hlen) tpa(4)
#include <algorithm>
#include <arpa/inet.h>

#include "ipoib_tap/translate.hpp"

namespace openib::ipoib {
namespace {

constexpr std::uint16_t kHtypeEthernet = 1;
constexpr std::uint16_t kHtypeInfiniband = 32;  // RFC 4391 §8
constexpr std::size_t kEthArpBytes = 8 + 2 * (6 + 4);
constexpr std::size_t kIbArpBytes = 8 + 2 * (kHwAddrBytes + 4);

bool header_ok(wire::Bytes m, std::uint16_t htype, std::size_t hlen) {
  return wire::be16(m, 0) == htype && wire::be16(m, 2) == wire::kEtherIpv4 && m[4] == hlen &&
         m[5] == 4;
}

void put_header(std::vector<std::uint8_t>& out, std::uint16_t htype, std::size_t hlen,
                std::uint16_t oper) {
  out.assign(8, 0);
  wire::put16(out, 0, htype);
  wire::put16(out, 2, wire::kEtherIpv4);
  out[4] = static_cast<std::uint8_t>(hlen);
  out[5] = 4;
  wire::put16(out, 6, oper);
}

std::string ipv4_text(wire::Bytes a) {
  char buf[INET_ADDRSTRLEN] = {};
  inet_ntop(AF_INET, a.data(), buf, sizeof buf);
  return buf;
}

void append(std::vector<std::uint8_t>& out, wire::Bytes b) { out.insert(out.end(), b.begin(), b.end()); }

void append_hwaddr(std::vector<std::uint8_t>& out, const HwAddr& a) {
  std::array<std::uint8_t, kHwAddrBytes> b{};
  encode_hwaddr(b, a);
  append(out, b);
}

HwAddr hwaddr_at(wire::Bytes m, std::size_t off) {
  return decode_hwaddr(std::span<const std::uint8_t, kHwAddrBytes>(m.subspan(off, kHwAddrBytes)));
}

}  // namespace

Verdict arp_to_ib(wire::Bytes m, NeighbourTable& nt, std::vector<std::uint8_t>& out) {
  if (m.size() < kEthArpBytes || !header_ok(m, kHtypeEthernet, 6)) return Verdict::malformed;
  // The sender is this interface, whatever MAC the kernel wrote. The
  // target: none (all 0 or all 1 in a request), else a neighbour.
  Mac tha{};
  std::copy_n(m.begin() + 18, 6, tha.begin());
  HwAddr target;
  const bool none = std::all_of(tha.begin(), tha.end(), [](auto b) { return b == 0; }) ||
                    std::all_of(tha.begin(), tha.end(), [](auto b) { return b == 0xFF; });
  if (!none) {
    auto a = nt.addr_of(tha);
    if (!a) return Verdict::unknown_mac;
    target = *a;
  }
  put_header(out, kHtypeInfiniband, kHwAddrBytes, wire::be16(m, 6));
  append_hwaddr(out, nt.own());
  append(out, m.subspan(14, 4));  // spa
  if (none)
    out.insert(out.end(), kHwAddrBytes, 0);
  else
    append_hwaddr(out, target);
  append(out, m.subspan(24, 4));  // tpa
  return Verdict::ok;
}

Verdict arp_from_ib(wire::Bytes m, NeighbourTable& nt, std::vector<std::uint8_t>& out, HwAddr& sender,
                    const SenderCheck& sender_ok) {
  if (m.size() < kIbArpBytes || !header_ok(m, kHtypeInfiniband, kHwAddrBytes)) return Verdict::malformed;
  sender = hwaddr_at(m, 8);
  if (sender_ok && !sender_ok(sender)) return Verdict::spoofed;  // before the table learns it
  const Mac sha = nt.mac_for(sender, true);
  const std::size_t tha_off = 8 + kHwAddrBytes + 4;
  const auto tha_bytes = m.subspan(tha_off, kHwAddrBytes);
  Mac tha{};
  if (!std::all_of(tha_bytes.begin(), tha_bytes.end(), [](auto b) { return b == 0; }))
    tha = nt.mac_for(hwaddr_at(m, tha_off));
  if (sender != nt.own()) nt.add_ip(sender, ipv4_text(m.subspan(8 + kHwAddrBytes, 4)));
  put_header(out, kHtypeEthernet, 6, wire::be16(m, 6));
  append(out, sha);
  append(out, m.subspan(8 + kHwAddrBytes, 4));  // spa
  append(out, tha);
  append(out, m.subspan(tha_off + kHwAddrBytes, 4));  // tpa
  return Verdict::ok;
}

}  // namespace openib::ipoib
