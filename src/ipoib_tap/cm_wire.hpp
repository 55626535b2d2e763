// IPoIB connected mode on the wire (RFC 4755; issue 33): what the IB CM
// carries for an IPoIB-CM connection, as pure codecs. The connection
// itself (REQ/REP/RTU through src/cm, the RC QPs) is ibd's glue.
//
//  - Service ID (RFC 4755 §3.5): a REQ for IPoIB-CM names the service
//    0x10000000_00 followed by the 24-bit QPN of the destination's UD QP
//    (Linux: IPOIB_CM_IETF_ID | qpn), so each interface listens on the
//    ID of its own UD QP.
//  - Private data (RFC 4755 §6), the first 8 bytes of the REQ's and of the
//    REP's private data (the CM pads the rest with zeros), big-endian:
//      bytes 0-3: reserved (0) in the top byte, then the sender's UD QPN;
//      bytes 4-7: the receive MTU, the largest IPoIB-CM message the
//                 sender takes, the 4-byte IPoIB header included
//                 (Linux sends kCmBufBytes).
//  - Link-layer address flags (RFC 4755 §3.1, the first byte of RFC 4391
//    §9.1.1's 20-byte address): RC / UC supported.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "common/result.hpp"
#include "ipoib_tap/bridge.hpp"

namespace openib::ipoib {

// RFC 4755 §3.5: the service ID of a UD QP's connected-mode listener.
inline constexpr std::uint64_t kCmServiceIdBase = 0x1000000000000000ULL;  // Linux IPOIB_CM_IETF_ID
inline constexpr std::uint64_t kCmServiceIdMask = 0xFFFFFFFFFF000000ULL;  // the part above the 24-bit QPN
// RFC 4755 §3.1: the flags byte of the 20-byte address.
inline constexpr std::uint8_t kHwFlagRc = 0x80;  // connected mode over RC supported
inline constexpr std::uint8_t kHwFlagUc = 0x40;  // over UC supported (not offered by ibd)
// The interface MTU in connected mode (Linux IPOIB_CM_MTU: 64 KiB - 16)
// and what a receive buffer holds (that and the IPoIB header).
inline constexpr std::uint32_t kCmMtu = 65520;
inline constexpr std::uint32_t kCmBufBytes = kCmMtu + static_cast<std::uint32_t>(kEncapBytes);

// base | (qpn & 0xFFFFFF).
std::uint64_t cm_service_id(std::uint32_t ud_qpn);
// The UD QPN an IPoIB-CM service ID names; nullopt when the ID is not
// one ((sid & kCmServiceIdMask) != kCmServiceIdBase).
std::optional<std::uint32_t> cm_service_qpn(std::uint64_t service_id);

// RFC 4755 §6.
struct CmPrivateData {
  std::uint32_t qpn = 0;  // the sender's UD QPN
  std::uint32_t mtu = 0;  // its receive MTU, in bytes, the 4-byte IPoIB header included
  bool operator==(const CmPrivateData&) const = default;
};
inline constexpr std::size_t kCmPrivateDataBytes = 8;
// The smallest receive MTU decode accepts: the 576-byte datagram every
// IPv4 host takes (RFC 1122 3.3.2) and the IPoIB header. Linux refuses
// only an MTU <= 4 (nothing fits); a peer offering less than this would
// make connected mode worse than datagram mode's 2044.
inline constexpr std::uint32_t kCmMinMtu = 576 + static_cast<std::uint32_t>(kEncapBytes);

std::array<std::uint8_t, kCmPrivateDataBytes> encode_cm_private_data(const CmPrivateData& d);
// EBADMSG, naming the field: shorter than 8 bytes, the reserved byte not
// 0, a QPN that is no UD QP's (0, 1: the special QPs; 0xFFFFFF: the
// multicast QPN), an MTU below kCmMinMtu. Bytes past the 8th are ignored.
Result<CmPrivateData> decode_cm_private_data(std::span<const std::uint8_t> in);

}  // namespace openib::ipoib
