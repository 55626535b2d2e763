// The IPoIB-CM service ID and private data (cm_wire.hpp; RFC 4755 §3.5, §6).
#include "ipoib_tap/cm_wire.hpp"

#include <cerrno>

#include "common/byte_order.hpp"

namespace openib::ipoib {
namespace {
constexpr std::uint32_t kQpnMask = 0xFFFFFF;
}  // namespace

std::uint64_t cm_service_id(std::uint32_t ud_qpn) { return kCmServiceIdBase | (ud_qpn & kQpnMask); }

std::optional<std::uint32_t> cm_service_qpn(std::uint64_t service_id) {
  if ((service_id & kCmServiceIdMask) != kCmServiceIdBase) return std::nullopt;
  return static_cast<std::uint32_t>(service_id & kQpnMask);
}

std::array<std::uint8_t, kCmPrivateDataBytes> encode_cm_private_data(const CmPrivateData& d) {
  std::array<std::uint8_t, kCmPrivateDataBytes> out{};
  const auto b = std::as_writable_bytes(std::span(out));
  bytes::put32(b, 0, d.qpn & kQpnMask);  // the top byte is reserved: 0
  bytes::put32(b, 4, d.mtu);
  return out;
}

Result<CmPrivateData> decode_cm_private_data(std::span<const std::uint8_t> in) {
  if (in.size() < kCmPrivateDataBytes)
    return err(EBADMSG, "IPoIB-CM private data: {} bytes, need {}", in.size(), kCmPrivateDataBytes);
  if (in[0] != 0) return err(EBADMSG, "IPoIB-CM private data: reserved byte {:#04x}, need 0", in[0]);
  CmPrivateData d;
  const auto b = std::as_bytes(in);
  d.qpn = bytes::get32(b, 0);
  d.mtu = bytes::get32(b, 4);
  // QP0 and QP1 are the SMI and GSI QPs (IBA 10.2.4.1); 0xFFFFFF is the
  // multicast QPN (IBA 10.8.2): neither is a peer's IPoIB UD QP.
  if (d.qpn <= 1 || d.qpn == kMulticastQpn)
    return err(EBADMSG, "IPoIB-CM private data: UD QPN {:#x} is no UD QP's", d.qpn);
  if (d.mtu < kCmMinMtu)
    return err(EBADMSG, "IPoIB-CM private data: receive MTU {} below {}", d.mtu, kCmMinMtu);
  return d;
}

}  // namespace openib::ipoib
