#include "sim/wire/crc.hpp"

#include <algorithm>
#include <array>
#include <cstddef>

#include "sim/wire/headers.hpp"

namespace openib::sim::wire {

namespace {

// Byte-at-a-time tables for the reflected (LSB-first) forms of the two
// polynomials: 0x04C11DB7 reflected is 0xEDB88320, 0x100B reflected is 0xD008.
template <typename T>
constexpr std::array<T, 256> make_table(T reflected_poly) {
  std::array<T, 256> t{};
  for (unsigned n = 0; n < 256; ++n) {
    T c = static_cast<T>(n);
    for (int k = 0; k < 8; ++k) c = static_cast<T>((c & 1) ? (c >> 1) ^ reflected_poly : c >> 1);
    t[n] = c;
  }
  return t;
}

constexpr auto kCrc32Table = make_table<std::uint32_t>(0xEDB88320u);
constexpr auto kCrc16Table = make_table<std::uint16_t>(0xD008u);

// Raw register updates: no pre/post complement.
std::uint32_t crc32_raw(std::uint32_t c, std::span<const std::byte> data) {
  for (std::byte b : data) c = kCrc32Table[(c ^ std::to_integer<std::uint32_t>(b)) & 0xFF] ^ (c >> 8);
  return c;
}

}  // namespace

std::uint32_t crc32(std::uint32_t crc, std::span<const std::byte> data) {
  return ~crc32_raw(~crc, data);
}

std::uint16_t crc16_vcrc(std::uint16_t crc, std::span<const std::byte> data) {
  // IBA 7.8.2: initial value 0xFFFF, complemented result.
  std::uint16_t c = static_cast<std::uint16_t>(~crc);
  for (std::byte b : data)
    c = static_cast<std::uint16_t>(kCrc16Table[(c ^ std::to_integer<unsigned>(b)) & 0xFF] ^ (c >> 8));
  return static_cast<std::uint16_t>(~c);
}

std::uint32_t compute_icrc(std::span<const std::byte> packet) {
  // IBA 7.8.1: the ICRC covers the invariant fields only; variant fields
  // count as all ones. The LRH is variant as a whole (routers rebuild it),
  // so it enters as 8 bytes of 0xFF -- rdma-core's rxe_icrc.c starts RoCE
  // ICRCs from the same state (0xDEBB20E3 = CRC state after 8 x 0xFF).
  // Works on a copy of the first 60 bytes (LRH + GRH + BTH at most); a
  // packet shorter than its headers is hashed as far as it goes.
  std::array<std::byte, kLrhBytes + kGrhBytes + kBthBytes> head{};
  std::size_t n = std::min(packet.size(), head.size());
  std::copy_n(packet.begin(), n, head.begin());
  auto mask = [&](std::size_t off, std::byte m) {
    if (off < n) head[off] |= m;
  };
  for (std::size_t i = 0; i < kLrhBytes; ++i) mask(i, std::byte{0xFF});
  std::size_t bth = kLrhBytes;
  if (n > 1 && (std::to_integer<unsigned>(packet[1]) & 0x3) == static_cast<unsigned>(Lnh::kIbaGlobal)) {
    // IBA 7.8.1 / 8.3: GRH TClass, FlowLabel and HopLmt are variant;
    // IPVer, PayLen, NxtHdr and both GIDs are covered.
    mask(bth + 0, std::byte{0x0F});  // TClass[7:4]
    for (std::size_t i = 1; i < 4; ++i) mask(bth + i, std::byte{0xFF});  // TClass[3:0], FlowLabel
    mask(bth + 7, std::byte{0xFF});  // HopLmt
    bth += kGrhBytes;
  }
  // IBA 7.8.1 / 9.2: BTH resv8a (byte 4; FECN/BECN live there) is variant.
  mask(bth + 4, std::byte{0xFF});
  std::size_t covered = std::min(n, bth + kBthBytes);
  std::uint32_t c = crc32_raw(0xFFFFFFFFu, std::span<const std::byte>(head).first(covered));
  c = crc32_raw(c, packet.subspan(covered));
  return ~c;
}

std::uint16_t compute_vcrc(std::span<const std::byte> packet) {
  return crc16_vcrc(0, packet);  // IBA 7.8.2: LRH through ICRC, nothing masked
}

}  // namespace openib::sim::wire
