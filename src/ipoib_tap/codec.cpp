// The IPoIB address codecs declared in bridge.hpp: the 20-byte link-layer
// address (RFC 4391 §9.1.1), the multicast GIDs (RFC 4391 §4) and the MAC
// the TAP side shows for a 20-byte address (docs/ipoib.md "MAC addresses").
#include <algorithm>

#include "ipoib_tap/bridge.hpp"

namespace openib::ipoib {

// Byte 0: flags (RFC 4755 §4: 0x80 when the owner does connected mode);
// not part of the address (HwAddr's comparisons leave it out).
void encode_hwaddr(std::span<std::uint8_t, kHwAddrBytes> out, const HwAddr& a) {
  out[0] = a.flags;
  out[1] = static_cast<std::uint8_t>(a.qpn >> 16);
  out[2] = static_cast<std::uint8_t>(a.qpn >> 8);
  out[3] = static_cast<std::uint8_t>(a.qpn);
  std::copy(a.gid.begin(), a.gid.end(), out.begin() + 4);
}

HwAddr decode_hwaddr(std::span<const std::uint8_t, kHwAddrBytes> in) {
  HwAddr a;
  a.flags = in[0];
  a.qpn = std::uint32_t{in[1]} << 16 | std::uint32_t{in[2]} << 8 | in[3];
  std::copy(in.begin() + 4, in.end(), a.gid.begin());
  return a;
}

namespace {
// RFC 4391 §4: ff1<scope>:<signature>:<P_Key>: then the group's bits.
Gid mgid_prefix(std::uint8_t scope, std::uint16_t signature, std::uint16_t pkey) {
  Gid g{};
  g[0] = 0xFF;
  g[1] = static_cast<std::uint8_t>(0x10 | (scope & 0x0F));
  g[2] = static_cast<std::uint8_t>(signature >> 8);
  g[3] = static_cast<std::uint8_t>(signature);
  g[4] = static_cast<std::uint8_t>(pkey >> 8);
  g[5] = static_cast<std::uint8_t>(pkey);
  return g;
}
constexpr std::uint16_t kIpv4Signature = 0x401B;
constexpr std::uint16_t kIpv6Signature = 0x601B;
}  // namespace

// §4.1: the IPv4 signature and all 32 low bits set (not the 28-bit
// mapping of 255.255.255.255, which would give 0fff:ffff).
Gid broadcast_mgid(std::uint16_t pkey, std::uint8_t scope) {
  Gid g = mgid_prefix(scope, kIpv4Signature, pkey);
  std::fill(g.begin() + 12, g.end(), 0xFF);
  return g;
}

// §4: the low 28 bits of the IPv4 group in the last 4 bytes.
Gid ipv4_mgid(std::uint32_t group_host_order, std::uint16_t pkey, std::uint8_t scope) {
  Gid g = mgid_prefix(scope, kIpv4Signature, pkey);
  const std::uint32_t low = group_host_order & 0x0FFFFFFF;
  g[12] = static_cast<std::uint8_t>(low >> 24);
  g[13] = static_cast<std::uint8_t>(low >> 16);
  g[14] = static_cast<std::uint8_t>(low >> 8);
  g[15] = static_cast<std::uint8_t>(low);
  return g;
}

// §4: the low 80 bits of the IPv6 group; the scope is the group's own
// scope nibble (Linux instead copies the broadcast group's scope: the two
// agree for link-local groups, ff02::/16, the only ones Linux hosts on
// one subnet usually use; docs/ipoib.md "Translation rules").
Gid ipv6_mgid(const std::array<std::uint8_t, 16>& group, std::uint16_t pkey, std::uint8_t scope) {
  Gid g = mgid_prefix(scope, kIpv6Signature, pkey);
  std::copy(group.begin() + 6, group.end(), g.begin() + 6);
  return g;
}

// FNV-1a (64-bit) over the GID and the QPN, folded to 46 bits, with the
// locally administered bit set and the group bit clear (IEEE 802 §8.2):
// the same address gives the same MAC in every run, whatever its LID.
Mac derive_mac(const HwAddr& a) {
  std::uint64_t h = 0xCBF29CE484222325ull;
  auto mix = [&h](std::uint8_t b) {
    h ^= b;
    h *= 0x100000001B3ull;
  };
  for (auto b : a.gid) mix(b);
  mix(static_cast<std::uint8_t>(a.qpn >> 16));
  mix(static_cast<std::uint8_t>(a.qpn >> 8));
  mix(static_cast<std::uint8_t>(a.qpn));
  h ^= h >> 48;
  Mac m{};
  for (std::size_t i = 0; i < m.size(); ++i) m[i] = static_cast<std::uint8_t>(h >> (40 - 8 * i));
  m[0] = static_cast<std::uint8_t>((m[0] & 0xFC) | 0x02);
  return m;
}

}  // namespace openib::ipoib
