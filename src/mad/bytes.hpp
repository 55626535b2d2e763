// Big-endian field access for MAD codecs. MAD attribute layouts in IBA
// chapters 13, 14 and 16 are given as (bit offset, bit length) with bit 0 the
// most significant bit of byte 0; get_bits()/put_bits() take exactly those
// numbers, so each field in sma_attrs.cpp / pma_attrs.cpp reads like the
// spec's table. Reads past the end of a span return 0 and writes past it are
// dropped, so a short buffer can never be overrun (decoders still check sizes).
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "common/result.hpp"

namespace openib::mad {

using ConstBytes = std::span<const std::byte>;
using MutBytes = std::span<std::byte>;
using ByteVec = std::vector<std::byte>;

inline constexpr std::size_t kMadBytes = 256;  // IBA 13.4.1: every MAD is 256 bytes
using Mad = std::array<std::byte, kMadBytes>;

inline std::uint64_t get_be(ConstBytes b, std::size_t off, std::size_t n) {
  std::uint64_t v = 0;
  for (std::size_t i = 0; i < n; ++i) {
    v <<= 8;
    if (off + i < b.size()) v |= std::to_integer<std::uint8_t>(b[off + i]);
  }
  return v;
}
inline void put_be(MutBytes b, std::size_t off, std::size_t n, std::uint64_t v) {
  for (std::size_t i = 0; i < n; ++i) {
    std::size_t at = off + n - 1 - i;
    if (at < b.size()) b[at] = std::byte(static_cast<std::uint8_t>(v));
    v >>= 8;
  }
}
inline std::uint8_t get8(ConstBytes b, std::size_t off) { return static_cast<std::uint8_t>(get_be(b, off, 1)); }
inline std::uint16_t get16(ConstBytes b, std::size_t off) { return static_cast<std::uint16_t>(get_be(b, off, 2)); }
inline std::uint32_t get32(ConstBytes b, std::size_t off) { return static_cast<std::uint32_t>(get_be(b, off, 4)); }
inline std::uint64_t get64(ConstBytes b, std::size_t off) { return get_be(b, off, 8); }
inline void put8(MutBytes b, std::size_t off, std::uint64_t v) { put_be(b, off, 1, v); }
inline void put16(MutBytes b, std::size_t off, std::uint64_t v) { put_be(b, off, 2, v); }
inline void put32(MutBytes b, std::size_t off, std::uint64_t v) { put_be(b, off, 4, v); }
inline void put64(MutBytes b, std::size_t off, std::uint64_t v) { put_be(b, off, 8, v); }

// Field of `len` bits (1..64) starting at big-endian bit `bitoff` (bit 0 = MSB
// of byte 0), the numbering of the IBA attribute tables.
inline std::uint64_t get_bits(ConstBytes b, std::size_t bitoff, unsigned len) {
  std::uint64_t v = 0;
  for (unsigned i = 0; i < len; ++i) {
    std::size_t bit = bitoff + i;
    std::size_t byte = bit / 8;
    unsigned shift = 7 - static_cast<unsigned>(bit % 8);
    std::uint64_t x = byte < b.size() ? (std::to_integer<unsigned>(b[byte]) >> shift) & 1u : 0u;
    v = (v << 1) | x;
  }
  return v;
}
inline void put_bits(MutBytes b, std::size_t bitoff, unsigned len, std::uint64_t v) {
  for (unsigned i = 0; i < len; ++i) {
    std::size_t bit = bitoff + len - 1 - i;
    std::size_t byte = bit / 8;
    unsigned shift = 7 - static_cast<unsigned>(bit % 8);
    if (byte >= b.size()) { v >>= 1; continue; }
    auto cur = std::to_integer<unsigned>(b[byte]);
    cur = (cur & ~(1u << shift)) | (static_cast<unsigned>(v & 1u) << shift);
    b[byte] = std::byte(static_cast<std::uint8_t>(cur));
    v >>= 1;
  }
}

// ---- helpers of the attribute decoders (sma_attrs.cpp, pma_attrs.cpp) ---
// EPROTO unless `in` holds at least n bytes.
inline Result<void> need(ConstBytes in, std::size_t n, const char* what) {
  if (in.size() < n) return err(EPROTO, "{}: {} bytes, need {}", what, in.size(), n);
  return {};
}
// A bit field as type T.
template <typename T>
T bits(ConstBytes in, std::size_t off, unsigned len) {
  return static_cast<T>(get_bits(in, off, len));
}
// Zeroes the first n bytes (at most the span).
inline void zero(MutBytes out, std::size_t n) {
  std::fill(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(std::min(n, out.size())), std::byte{0});
}

}  // namespace openib::mad
