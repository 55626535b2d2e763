// Byte-level helpers and constants the bridge's translators share: the
// Ethernet header (IEEE 802.3), the IPoIB header (RFC 4391 §6) and the
// offsets into IPv4/IPv6/ICMPv6 headers they read. Callers check lengths
// before reading (every translator validates its input first).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace openib::ipoib::wire {

using Bytes = std::span<const std::uint8_t>;
using MutBytes = std::span<std::uint8_t>;

inline constexpr std::size_t kEthHeader = 14;  // dst(6) src(6) EtherType(2)
inline constexpr std::uint16_t kEtherIpv4 = 0x0800;
inline constexpr std::uint16_t kEtherArp = 0x0806;
inline constexpr std::uint16_t kEtherIpv6 = 0x86DD;
inline constexpr std::size_t kIpv4MinHeader = 20;
inline constexpr std::size_t kIpv6Header = 40;
inline constexpr std::uint8_t kProtoIcmpv6 = 58;
inline constexpr std::uint8_t kProtoIgmp = 2;

inline std::uint16_t be16(Bytes b, std::size_t off) {
  return static_cast<std::uint16_t>(b[off] << 8 | b[off + 1]);
}
inline std::uint32_t be32(Bytes b, std::size_t off) {
  return std::uint32_t{b[off]} << 24 | std::uint32_t{b[off + 1]} << 16 |
         std::uint32_t{b[off + 2]} << 8 | b[off + 3];
}
inline void put16(MutBytes b, std::size_t off, std::uint16_t v) {
  b[off] = static_cast<std::uint8_t>(v >> 8);
  b[off + 1] = static_cast<std::uint8_t>(v);
}

}  // namespace openib::ipoib::wire
