// The device's side of the TAP's offloads: partial checksums completed,
// TCP super-frames segmented (gso.hpp).
#include "ipoib_tap/gso.hpp"

#include <algorithm>
#include <bit>
#include <cstring>

namespace openib::ipoib {
namespace {

constexpr std::uint8_t kProtoTcp = 6;
constexpr std::uint8_t kHopByHop = 0, kDestOpts = 60;  // RFC 8200 §4.3, §4.6
constexpr std::size_t kTcpMinHeader = 20;
constexpr std::uint8_t kTcpFin = 0x01, kTcpPsh = 0x08, kTcpCwr = 0x80;  // RFC 793 §3.1, RFC 3168 §6.1

std::uint16_t le16(wire::Bytes b, std::size_t off) {
  return static_cast<std::uint16_t>(b[off] | b[off + 1] << 8);
}

std::uint16_t fold(std::uint64_t s) {
  while (s >> 16) s = (s & 0xFFFF) + (s >> 16);
  return static_cast<std::uint16_t>(s);
}

// Where the headers of a TCP super-frame end (offsets into the frame).
struct TcpFrame {
  bool v4 = false;
  std::size_t ip = wire::kEthHeader;  // the IP header
  std::size_t tcp = 0;                // the TCP header
  std::size_t payload = 0;            // the TCP payload
  std::size_t end = 0;                // the IP packet's end (padding after it)
};

std::optional<TcpFrame> parse_tcp(wire::Bytes f, bool v4) {
  TcpFrame t;
  t.v4 = v4;
  if (f.size() < wire::kEthHeader) return std::nullopt;
  const auto ip = f.subspan(wire::kEthHeader);
  if (v4) {
    if (wire::be16(f, 12) != wire::kEtherIpv4 || ip.size() < wire::kIpv4MinHeader || ip[0] >> 4 != 4)
      return std::nullopt;
    const std::size_t ihl = std::size_t{ip[0] & 0x0Fu} * 4, total = wire::be16(ip, 2);
    if (ihl < wire::kIpv4MinHeader || total < ihl || total > ip.size() || ip[9] != kProtoTcp) return std::nullopt;
    if ((wire::be16(ip, 6) & 0x3FFF) != 0) return std::nullopt;  // MF or an offset: a fragment (RFC 791)
    t.tcp = t.ip + ihl;
    t.end = t.ip + total;
  } else {
    if (wire::be16(f, 12) != wire::kEtherIpv6 || ip.size() < wire::kIpv6Header || ip[0] >> 4 != 6)
      return std::nullopt;
    const std::size_t total = wire::kIpv6Header + wire::be16(ip, 4);
    if (total > ip.size()) return std::nullopt;
    // Options headers are copied to every segment; a routing header would
    // change the pseudo-header's destination, a fragment header is no TCP
    // super-frame: neither is taken.
    std::uint8_t next = ip[6];
    std::size_t off = wire::kIpv6Header;
    while (next == kHopByHop || next == kDestOpts) {  // each at least 8 bytes: the walk ends
      if (off + 8 > total) return std::nullopt;
      next = ip[off];
      off += (std::size_t{ip[off + 1]} + 1) * 8;
    }
    if (next != kProtoTcp) return std::nullopt;
    t.tcp = t.ip + off;
    t.end = t.ip + total;
  }
  if (t.tcp + kTcpMinHeader > t.end) return std::nullopt;
  const std::size_t doff = std::size_t{f[t.tcp + 12]} >> 4 << 2;
  if (doff < kTcpMinHeader || t.tcp + doff > t.end) return std::nullopt;
  t.payload = t.tcp + doff;
  return t;
}

// The TCP checksum of segment `s` (RFC 793 §3.1; IPv6: RFC 8200 §8.1).
void tcp_checksum(wire::MutBytes s, const TcpFrame& t) {
  const std::size_t len = s.size() - t.tcp;
  std::uint32_t pseudo = kProtoTcp + static_cast<std::uint32_t>(len >> 16) + static_cast<std::uint32_t>(len & 0xFFFF);
  if (t.v4) pseudo += ones_sum(s.subspan(t.ip + 12, 8));  // source, destination
  else pseudo += ones_sum(s.subspan(t.ip + 8, 32));
  wire::put16(s, t.tcp + 16, 0);
  wire::put16(s, t.tcp + 16, static_cast<std::uint16_t>(~ones_sum(s.subspan(t.tcp), pseudo)));
}

GsoVerdict segment_tcp(const VnetHdr& h, wire::Bytes f, bool v4, std::uint32_t mtu, std::vector<std::uint8_t>& seg,
                       const std::function<void(wire::Bytes)>& emit) {
  const auto t = parse_tcp(f, v4);
  if (!t || h.gso_size == 0) return GsoVerdict::malformed;
  const std::size_t headers = t->payload - t->ip;  // IP and TCP, all options
  if (mtu <= headers) return GsoVerdict::malformed;
  const std::size_t mss = std::min<std::size_t>(h.gso_size, mtu - headers);
  const std::size_t payload = t->end - t->payload;
  const std::uint32_t seq = wire::be32(f, t->tcp + 4);
  const std::uint16_t id = v4 ? wire::be16(f, t->ip + 4) : 0;
  const std::uint8_t flags = f[t->tcp + 13];
  std::size_t off = 0, index = 0;
  do {
    const std::size_t n = std::min(mss, payload - off);
    const bool first = off == 0, last = off + n == payload;
    seg.assign(f.begin(), f.begin() + static_cast<std::ptrdiff_t>(t->payload));
    seg.insert(seg.end(), f.begin() + static_cast<std::ptrdiff_t>(t->payload + off),
               f.begin() + static_cast<std::ptrdiff_t>(t->payload + off + n));
    const wire::MutBytes s(seg);
    const std::size_t ip_len = headers + n;
    if (v4) {
      wire::put16(s, t->ip + 2, static_cast<std::uint16_t>(ip_len));
      wire::put16(s, t->ip + 4, static_cast<std::uint16_t>(id + index));
      wire::put16(s, t->ip + 10, 0);
      wire::put16(s, t->ip + 10, static_cast<std::uint16_t>(~ones_sum(s.subspan(t->ip, t->tcp - t->ip))));
    } else {
      wire::put16(s, t->ip + 4, static_cast<std::uint16_t>(ip_len - wire::kIpv6Header));
    }
    const std::uint32_t sq = seq + static_cast<std::uint32_t>(off);  // mod 2^32 (RFC 793 §3.3)
    for (int i = 0; i < 4; ++i) s[t->tcp + 4 + static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(sq >> (24 - 8 * i));
    std::uint8_t fl = flags;
    if (!last) fl &= static_cast<std::uint8_t>(~(kTcpFin | kTcpPsh));
    if (!first) fl &= static_cast<std::uint8_t>(~kTcpCwr);
    s[t->tcp + 13] = fl;
    tcp_checksum(s, *t);
    emit(s);
    off += n;
    ++index;
  } while (off < payload);
  return GsoVerdict::ok;
}

}  // namespace

std::uint16_t ones_sum(wire::Bytes b, std::uint32_t initial) {
  // Native-order words, swapped at the end (RFC 1071 §2(B): the sum is
  // byte-order independent), 4 bytes at a time into 64 bits.
  std::uint64_t s = 0;
  std::size_t i = 0;
  for (; i + 4 <= b.size(); i += 4) {
    std::uint32_t w;
    std::memcpy(&w, b.data() + i, 4);
    s += w;
  }
  if (i + 2 <= b.size()) {
    std::uint16_t w;
    std::memcpy(&w, b.data() + i, 2);
    s += w;
    i += 2;
  }
  if (i < b.size()) s += std::endian::native == std::endian::little ? b[i] : std::uint32_t{b[i]} << 8;
  std::uint16_t v = fold(s);
  if constexpr (std::endian::native == std::endian::little) v = static_cast<std::uint16_t>(v << 8 | v >> 8);
  return fold(std::uint64_t{v} + initial);
}

std::optional<VnetHdr> parse_vnet_hdr(wire::Bytes b) {
  if (b.size() < kVnetHdrLen) return std::nullopt;
  VnetHdr h;
  h.flags = b[0];
  h.gso_type = b[1];
  h.hdr_len = le16(b, 2);
  h.gso_size = le16(b, 4);
  h.csum_start = le16(b, 6);
  h.csum_offset = le16(b, 8);
  return h;
}

GsoVerdict gso_segment(const VnetHdr& h, wire::MutBytes frame, std::uint32_t mtu, std::vector<std::uint8_t>& scratch,
                       const std::function<void(wire::Bytes)>& emit) {
  switch (h.gso_type & ~kGsoEcn) {
    case kGsoNone:
      break;
    case kGsoTcpv4:
      return segment_tcp(h, frame, true, mtu, scratch, emit);
    case kGsoTcpv6:
      return segment_tcp(h, frame, false, mtu, scratch, emit);
    default:
      return GsoVerdict::unsupported;  // UDP (UFO), UDP_L4 (USO): not offered (tap_device.cpp)
  }
  if (h.flags & kVnetNeedsCsum) {
    const std::size_t at = std::size_t{h.csum_start} + h.csum_offset;
    if (h.csum_start >= frame.size() || at + 2 > frame.size()) return GsoVerdict::malformed;
    // The field holds the pseudo-header's sum: it is part of what is summed.
    const std::uint16_t c = static_cast<std::uint16_t>(~ones_sum(frame.subspan(h.csum_start)));
    wire::put16(frame, at, c == 0 ? 0xFFFF : c);
  }
  emit(frame);
  return GsoVerdict::ok;
}

}  // namespace openib::ipoib
