// IPv6 neighbour discovery translation (RFC 4861 §4, RFC 4391 §9.1.1).
// The source/target link-layer address options (types 1, 2) are the only
// parts of ND that carry link-layer addresses:
//   Ethernet (RFC 2464 §8): type, length 1, the 6-byte MAC;
//   IPoIB (RFC 4391 §9.1.1): type, length 3, 2 reserved bytes, the
//   20-byte address (24 bytes).
// Each translated message gets its IPv6 payload length and ICMPv6
// checksum (RFC 4443 §2.3) redone; a message whose checksum was wrong
// is dropped as malformed, not repaired.
#include <algorithm>
#include <arpa/inet.h>

#include "ipoib_tap/translate.hpp"

namespace openib::ipoib {
namespace {

constexpr std::uint8_t kOptSlla = 1, kOptTlla = 2;
constexpr std::uint8_t kNsType = 135, kNaType = 136, kRedirectType = 137;

// Where the options of an ND message start (RFC 4861 §4.1 - §4.5), 0 for
// ICMPv6 types that are not ND.
std::size_t options_offset(std::uint8_t type) {
  switch (type) {
    case 133: return 8;    // RS
    case 134: return 16;   // RA
    case kNsType: return 24;
    case kNaType: return 24;
    case kRedirectType: return 40;
    default: return 0;
  }
}

std::uint32_t sum16(wire::Bytes b, std::uint32_t s) {
  for (std::size_t i = 0; i + 1 < b.size(); i += 2) s += wire::be16(b, i);
  if (b.size() % 2) s += std::uint32_t{b.back()} << 8;
  return s;
}

// The one's complement sum of the pseudo-header (RFC 8200 §8.1) and the
// ICMPv6 message, folded.
std::uint16_t folded_sum(wire::Bytes ipv6, bool skip_checksum) {
  const auto icmp = ipv6.subspan(wire::kIpv6Header);
  std::uint32_t s = sum16(ipv6.subspan(8, 32), 0);
  s += static_cast<std::uint32_t>(icmp.size() >> 16) + static_cast<std::uint32_t>(icmp.size() & 0xFFFF);
  s += wire::kProtoIcmpv6;
  s = sum16(icmp.first(2), s);
  if (!skip_checksum) s = sum16(icmp.subspan(2, 2), s);
  s = sum16(icmp.subspan(4), s);
  while (s >> 16) s = (s & 0xFFFF) + (s >> 16);
  return static_cast<std::uint16_t>(s);
}

std::string ipv6_text(wire::Bytes a) {
  char buf[INET6_ADDRSTRLEN] = {};
  inet_ntop(AF_INET6, a.data(), buf, sizeof buf);
  return buf;
}

// One option to the other side's form, appended to out.
using OptionFn = Verdict (*)(wire::Bytes opt, NeighbourTable& nt, std::vector<std::uint8_t>& out,
                             std::optional<HwAddr>& learnt);

Verdict option_to_ib(wire::Bytes opt, NeighbourTable& nt, std::vector<std::uint8_t>& out,
                     std::optional<HwAddr>&) {
  if (opt[1] != 1) return Verdict::malformed;
  Mac m{};
  std::copy_n(opt.begin() + 2, 6, m.begin());
  auto a = nt.addr_of(m);
  if (!a) return Verdict::unknown_mac;
  out.push_back(opt[0]);
  out.push_back(3);
  out.push_back(0);
  out.push_back(0);
  std::array<std::uint8_t, kHwAddrBytes> b{};
  encode_hwaddr(b, *a);
  out.insert(out.end(), b.begin(), b.end());
  return Verdict::ok;
}

Verdict option_from_ib(wire::Bytes opt, NeighbourTable& nt, std::vector<std::uint8_t>& out,
                       std::optional<HwAddr>& learnt) {
  if (opt[1] != 3) return Verdict::malformed;
  const HwAddr a = decode_hwaddr(std::span<const std::uint8_t, kHwAddrBytes>(opt.subspan(4, kHwAddrBytes)));
  const Mac m = nt.mac_for(a, true);
  if (a != nt.own()) learnt = a;
  out.push_back(opt[0]);
  out.push_back(1);
  out.insert(out.end(), m.begin(), m.end());
  return Verdict::ok;
}

// lla_units: the length (in 8-byte units) of the link-layer address
// options on the side `p` comes from: 1 on Ethernet, 3 on IPoIB.
// sender_ok: from IB only (translate's callers, nd_from_ib).
Verdict translate(wire::Bytes p, NeighbourTable& nt, std::vector<std::uint8_t>& out, bool* is_nd,
                  OptionFn fn, std::uint8_t lla_units, const SenderCheck& sender_ok = {}) {
  *is_nd = false;
  if (p.size() < wire::kIpv6Header || (p[0] >> 4) != 6) return Verdict::malformed;
  const std::size_t total = wire::kIpv6Header + wire::be16(p, 4);
  if (total > p.size()) return Verdict::malformed;
  p = p.first(total);  // Ethernet padding goes
  const std::size_t opts = p[6] == wire::kProtoIcmpv6 && total > wire::kIpv6Header
                               ? options_offset(p[wire::kIpv6Header])
                               : 0;
  if (opts == 0) {
    out.assign(p.begin(), p.end());
    return Verdict::ok;
  }
  *is_nd = true;
  const std::size_t first_opt = wire::kIpv6Header + opts;
  if (total < first_opt || folded_sum(p, false) != 0xFFFF) return Verdict::malformed;
  const std::uint8_t type = p[wire::kIpv6Header];
  // Every option's framing and every link-layer option's length first,
  // then the sender's claims: a message dropped as malformed or spoofed
  // teaches the neighbour table nothing.
  bool spoofed = false;
  for (std::size_t off = first_opt; off < total;) {
    if (total - off < 2 || p[off + 1] == 0 || total - off < std::size_t{p[off + 1]} * 8)
      return Verdict::malformed;
    const bool lla = p[off] == kOptSlla || p[off] == kOptTlla;
    if (lla && p[off + 1] != lla_units) return Verdict::malformed;
    if (sender_ok && (p[off] == kOptSlla || (p[off] == kOptTlla && type == kNaType)) &&
        !sender_ok(decode_hwaddr(std::span<const std::uint8_t, kHwAddrBytes>(p.subspan(off + 4, kHwAddrBytes)))))
      spoofed = true;
    off += std::size_t{p[off + 1]} * 8;
  }
  if (spoofed) return Verdict::spoofed;
  out.assign(p.begin(), p.begin() + static_cast<std::ptrdiff_t>(first_opt));
  for (std::size_t off = first_opt; off < total;) {
    if (total - off < 2 || p[off + 1] == 0 || total - off < std::size_t{p[off + 1]} * 8)
      return Verdict::malformed;
    const auto opt = p.subspan(off, std::size_t{p[off + 1]} * 8);
    off += opt.size();
    if (opt[0] != kOptSlla && opt[0] != kOptTlla) {
      out.insert(out.end(), opt.begin(), opt.end());
      continue;
    }
    std::optional<HwAddr> learnt;
    if (auto v = fn(opt, nt, out, learnt); v != Verdict::ok) return v;
    // The IPv6 address the option belongs to: the source's for SLLA, the
    // target's for TLLA (NA and Redirect carry it at offset 8).
    if (learnt && opt[0] == kOptSlla && !std::all_of(p.begin() + 8, p.begin() + 24, [](auto b) { return b == 0; }))
      nt.add_ip(*learnt, ipv6_text(p.subspan(8, 16)));
    if (learnt && opt[0] == kOptTlla && (type == kNaType || type == kRedirectType))
      nt.add_ip(*learnt, ipv6_text(p.subspan(wire::kIpv6Header + 8, 16)));
  }
  if (out.size() - wire::kIpv6Header > 0xFFFF) return Verdict::malformed;
  wire::put16(out, 4, static_cast<std::uint16_t>(out.size() - wire::kIpv6Header));
  wire::put16(out, wire::kIpv6Header + 2, icmpv6_checksum(out));
  return Verdict::ok;
}

}  // namespace

std::uint16_t icmpv6_checksum(wire::Bytes ipv6) {
  return static_cast<std::uint16_t>(~folded_sum(ipv6, true));
}

Verdict nd_to_ib(wire::Bytes ipv6, NeighbourTable& nt, std::vector<std::uint8_t>& out, bool* is_nd) {
  return translate(ipv6, nt, out, is_nd, option_to_ib, 1);
}

Verdict nd_from_ib(wire::Bytes ipv6, NeighbourTable& nt, std::vector<std::uint8_t>& out, bool* is_nd,
                   const SenderCheck& sender_ok) {
  return translate(ipv6, nt, out, is_nd, option_from_ib, 3, sender_ok);
}

}  // namespace openib::ipoib
