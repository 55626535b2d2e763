#include "sim/wire/crc.hpp"

#include <algorithm>
#include <array>
#include <cstddef>

#include "sim/wire/headers.hpp"

namespace openib::sim::wire {

namespace {

// Slicing-by-8 tables for the reflected (LSB-first) forms of the two
// polynomials: 0x04C11DB7 reflected is 0xEDB88320, 0x100B reflected is
// 0xD008. Table 0 is the classic byte-at-a-time table; table k advances a
// byte's contribution by k more zero bytes, so eight bytes are folded with
// eight lookups instead of eight dependent steps.
using Tables = std::array<std::array<std::uint32_t, 256>, 8>;
constexpr Tables make_tables(std::uint32_t reflected_poly) {
  Tables t{};
  for (unsigned n = 0; n < 256; ++n) {
    std::uint32_t c = n;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ reflected_poly : c >> 1;
    t[0][n] = c;
  }
  for (unsigned k = 1; k < 8; ++k)
    for (unsigned n = 0; n < 256; ++n) t[k][n] = (t[k - 1][n] >> 8) ^ t[0][t[k - 1][n] & 0xFF];
  return t;
}

constexpr Tables kCrc32Tables = make_tables(0xEDB88320u);
constexpr Tables kCrc16Tables = make_tables(0xD008u);

std::uint32_t load32le(const std::byte* p) {
  return std::to_integer<std::uint32_t>(p[0]) | std::to_integer<std::uint32_t>(p[1]) << 8 |
         std::to_integer<std::uint32_t>(p[2]) << 16 | std::to_integer<std::uint32_t>(p[3]) << 24;
}

// Raw register update (no pre/post complement) of a reflected CRC of up to
// 32 bits whose register is `c`.
std::uint32_t crc_raw(const Tables& t, std::uint32_t c, std::span<const std::byte> data) {
  const std::byte* p = data.data();
  std::size_t n = data.size();
  for (; n >= 8; n -= 8, p += 8) {
    const std::uint32_t one = c ^ load32le(p), two = load32le(p + 4);
    c = t[7][one & 0xFF] ^ t[6][(one >> 8) & 0xFF] ^ t[5][(one >> 16) & 0xFF] ^ t[4][one >> 24] ^
        t[3][two & 0xFF] ^ t[2][(two >> 8) & 0xFF] ^ t[1][(two >> 16) & 0xFF] ^ t[0][two >> 24];
  }
  for (; n > 0; --n, ++p) c = t[0][(c ^ std::to_integer<std::uint32_t>(*p)) & 0xFF] ^ (c >> 8);
  return c;
}

std::uint32_t crc32_raw(std::uint32_t c, std::span<const std::byte> data) {
  return crc_raw(kCrc32Tables, c, data);
}

}  // namespace

std::uint32_t crc32(std::uint32_t crc, std::span<const std::byte> data) {
  return ~crc32_raw(~crc, data);
}

std::uint16_t crc16_vcrc(std::uint16_t crc, std::span<const std::byte> data) {
  // IBA 7.8.2: initial value 0xFFFF, complemented result.
  const std::uint32_t c = crc_raw(kCrc16Tables, static_cast<std::uint16_t>(~crc), data);
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
