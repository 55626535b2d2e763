// ICMP "fragmentation needed" / ICMPv6 "packet too big" for a frame the
// path cannot carry (too_big.hpp).
#include "ipoib_tap/too_big.hpp"

#include <algorithm>

#include "common/byte_order.hpp"
#include "ipoib_tap/translate.hpp"
#include "ipoib_tap/wire.hpp"

namespace openib::ipoib {
namespace {

using Frame = std::vector<std::uint8_t>;

constexpr std::size_t kIcmpHeader = 8;        // type, code, checksum, 4 bytes (RFC 792, RFC 4443 §2.1)
constexpr std::size_t kIpv4ErrorMax = 576;    // RFC 1812 4.3.2.3
constexpr std::size_t kIpv6ErrorMax = 1280;   // RFC 4443 §2.4(c)
constexpr std::uint32_t kIpv4MinMtu = 68;     // RFC 791
constexpr std::uint32_t kIpv6MinMtu = 1280;   // RFC 8200 §5
constexpr std::uint8_t kProtoIcmp = 1;
constexpr std::uint8_t kHopLimit = 64;        // TTL / hop limit of the answer
constexpr std::uint8_t kIcmpUnreach = 3, kIcmpFragNeeded = 4;  // RFC 792, RFC 1191 §4
constexpr std::uint8_t kIcmpv6TooBig = 2;                      // RFC 4443 §3.2

// RFC 1071: the one's complement of the one's complement sum of the
// 16-bit words.
std::uint16_t inet_checksum(wire::Bytes b) {
  std::uint32_t s = 0;
  for (std::size_t i = 0; i + 1 < b.size(); i += 2) s += wire::be16(b, i);
  if (b.size() % 2) s += std::uint32_t{b.back()} << 8;
  while (s >> 16) s = (s & 0xFFFF) + (s >> 16);
  return static_cast<std::uint16_t>(~s);
}

bool group_mac(wire::Bytes mac) { return (mac[0] & 1) != 0; }  // IEEE 802: the I/G bit

// RFC 1122 3.2.2: a source that does not define a single host: 0/8,
// loopback, multicast, class E (with the limited broadcast).
bool single_host_v4(std::uint32_t a) {
  const auto top = a >> 24;
  return top != 0 && top != 127 && top < 224;
}
// RFC 1122 3.2.2: no error about a datagram to a multicast group or the
// limited broadcast (a directed broadcast is not known here).
bool group_v4(std::uint32_t a) { return (a >> 28) == 0xE || a == 0xFFFFFFFF; }

// ICMP types that are queries or replies, not errors (RFC 792, RFC 1256,
// RFC 950); whatever else may be an error, and gets no error back.
bool icmp_informational(std::uint8_t type) {
  switch (type) {
    case 0: case 8:            // echo reply, echo
    case 9: case 10:           // router advertisement, solicitation
    case 13: case 14:          // timestamp, reply
    case 15: case 16:          // information request, reply
    case 17: case 18:          // address mask request, reply
      return true;
    default:
      return false;
  }
}

// The answer's Ethernet header: back to where the frame came from.
Frame ethernet_back(wire::Bytes frame, std::uint16_t ethertype, std::size_t payload) {
  Frame out;
  out.reserve(wire::kEthHeader + payload);
  out.insert(out.end(), frame.begin() + 6, frame.begin() + 12);
  out.insert(out.end(), frame.begin(), frame.begin() + 6);
  out.push_back(static_cast<std::uint8_t>(ethertype >> 8));
  out.push_back(static_cast<std::uint8_t>(ethertype));
  return out;
}

std::optional<Frame> ipv4_too_big(wire::Bytes frame, std::uint32_t mtu) {
  auto ip = frame.subspan(wire::kEthHeader);
  if (ip.size() < wire::kIpv4MinHeader || ip[0] >> 4 != 4) return std::nullopt;
  const std::size_t ihl = std::size_t{ip[0] & 0x0Fu} * 4, total = wire::be16(ip, 2);
  if (ihl < wire::kIpv4MinHeader || total < ihl || total > ip.size()) return std::nullopt;
  ip = ip.first(total);  // Ethernet padding off
  if (total <= mtu || mtu < kIpv4MinMtu) return std::nullopt;
  if ((wire::be16(ip, 6) & 0x1FFF) != 0) return std::nullopt;  // a later fragment
  const std::uint32_t src = wire::be32(ip, 12), dst = wire::be32(ip, 16);
  if (!single_host_v4(src) || group_v4(dst) || group_mac(frame.first(6))) return std::nullopt;
  if (ip[9] == kProtoIcmp && (ihl >= total || !icmp_informational(ip[ihl]))) return std::nullopt;

  const std::size_t quote = std::min(total, kIpv4ErrorMax - wire::kIpv4MinHeader - kIcmpHeader);
  const std::size_t len = wire::kIpv4MinHeader + kIcmpHeader + quote;
  Frame out = ethernet_back(frame, wire::kEtherIpv4, len);
  out.resize(wire::kEthHeader + len);
  const auto h = std::span(out).subspan(wire::kEthHeader);
  const auto b = std::as_writable_bytes(h);
  h[0] = 0x45;       // version 4, 5 words
  h[1] = 0xC0;       // RFC 1812 4.3.2.5: precedence 6 (internetwork control)
  wire::put16(h, 2, static_cast<std::uint16_t>(len));
  wire::put16(h, 6, 0x4000);  // DF; the ID may be 0 then (RFC 6864 §4.1)
  h[8] = kHopLimit;
  h[9] = kProtoIcmp;
  bytes::put32(b, 12, dst);
  bytes::put32(b, 16, src);
  const auto icmp = h.subspan(wire::kIpv4MinHeader);
  icmp[0] = kIcmpUnreach;
  icmp[1] = kIcmpFragNeeded;
  wire::put16(icmp, 6, static_cast<std::uint16_t>(mtu));  // RFC 1191 §4: next-hop MTU
  std::copy_n(ip.begin(), quote, icmp.begin() + kIcmpHeader);
  wire::put16(icmp, 2, inet_checksum(icmp));
  wire::put16(h, 10, inet_checksum(h.first(wire::kIpv4MinHeader)));
  return out;
}

bool unspecified_or_loopback(wire::Bytes a) {
  return std::all_of(a.begin(), a.end() - 1, [](auto x) { return x == 0; }) && a.back() <= 1;
}

// RFC 8200 §4: past the extension headers to the upper-layer header.
// Returns its offset and sets `next` to its protocol; nullopt when a
// header runs past the packet or the packet is a later fragment.
// Every header is at least 8 bytes, so the walk ends.
std::optional<std::size_t> upper_layer(wire::Bytes ip, std::uint8_t& next) {
  constexpr std::uint8_t kHopByHop = 0, kRouting = 43, kFragment = 44, kAh = 51, kDestOpts = 60;
  std::size_t off = wire::kIpv6Header;
  next = ip[6];
  while (next == kHopByHop || next == kRouting || next == kFragment || next == kAh || next == kDestOpts) {
    if (off + 8 > ip.size()) return std::nullopt;
    std::size_t len = (std::size_t{ip[off + 1]} + 1) * 8;      // RFC 8200 §4.3 - §4.6
    if (next == kFragment) {
      if ((wire::be16(ip, off + 2) & 0xFFF8) != 0) return std::nullopt;  // offset != 0: a later fragment
      len = 8;                                                  // RFC 8200 §4.5
    } else if (next == kAh) {
      len = (std::size_t{ip[off + 1]} + 2) * 4;                 // RFC 4302 §2.2
    }
    next = ip[off];
    off += len;
  }
  if (off > ip.size()) return std::nullopt;
  return off;
}

std::optional<Frame> ipv6_too_big(wire::Bytes frame, std::uint32_t mtu) {
  auto ip = frame.subspan(wire::kEthHeader);
  if (ip.size() < wire::kIpv6Header || ip[0] >> 4 != 6) return std::nullopt;
  const std::size_t total = wire::kIpv6Header + wire::be16(ip, 4);
  if (total > ip.size()) return std::nullopt;
  ip = ip.first(total);
  if (total <= mtu || mtu < kIpv6MinMtu) return std::nullopt;
  const auto src = ip.subspan(8, 16), dst = ip.subspan(24, 16);
  // RFC 4443 §2.4(e.6): a source that names no single node; a group
  // destination: see too_big.hpp.
  if (unspecified_or_loopback(src) || src[0] == 0xFF || dst[0] == 0xFF) return std::nullopt;
  std::uint8_t next = 0;
  const auto upper = upper_layer(ip, next);
  if (!upper) return std::nullopt;
  // RFC 4443 §2.4(e.1): no error about an error (types 0 - 127, §2.1).
  if (next == wire::kProtoIcmpv6 && (*upper >= total || ip[*upper] < 128)) return std::nullopt;

  const std::size_t quote = std::min(total, kIpv6ErrorMax - wire::kIpv6Header - kIcmpHeader);
  const std::size_t len = wire::kIpv6Header + kIcmpHeader + quote;
  Frame out = ethernet_back(frame, wire::kEtherIpv6, len);
  out.resize(wire::kEthHeader + len);
  const auto h = std::span(out).subspan(wire::kEthHeader);
  h[0] = 0x60;  // version 6, traffic class 0, flow label 0
  wire::put16(h, 4, static_cast<std::uint16_t>(len - wire::kIpv6Header));
  h[6] = wire::kProtoIcmpv6;
  h[7] = kHopLimit;
  std::copy(dst.begin(), dst.end(), h.begin() + 8);
  std::copy(src.begin(), src.end(), h.begin() + 24);
  const auto icmp = h.subspan(wire::kIpv6Header);
  icmp[0] = kIcmpv6TooBig;
  icmp[1] = 0;
  bytes::put32(std::as_writable_bytes(icmp), 4, mtu);
  std::copy_n(ip.begin(), quote, icmp.begin() + kIcmpHeader);
  wire::put16(icmp, 2, icmpv6_checksum(h));
  return out;
}

}  // namespace

std::optional<std::vector<std::uint8_t>> icmp_too_big(std::span<const std::uint8_t> frame, std::uint32_t mtu) {
  if (frame.size() < wire::kEthHeader || group_mac(frame.subspan(6, 6))) return std::nullopt;
  switch (wire::be16(frame, 12)) {
    case wire::kEtherIpv4: return ipv4_too_big(frame, mtu);
    case wire::kEtherIpv6: return ipv6_too_big(frame, mtu);
    default: return std::nullopt;
  }
}

}  // namespace openib::ipoib
