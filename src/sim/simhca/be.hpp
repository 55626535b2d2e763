// Big-endian field access over byte spans (docs/simhca.md §1: structures in
// host memory are big-endian). Reads past the end of the span return 0 and
// writes past it are dropped, so a decoder handed a short buffer cannot
// read or write out of bounds; decoders still check lengths first.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace openib::simhca {

using Bytes = std::vector<std::byte>;
using ByteView = std::span<const std::byte>;

inline uint64_t get_be(ByteView b, size_t off, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; ++i) {
    v <<= 8;
    if (off + i < b.size()) v |= std::to_integer<uint8_t>(b[off + i]);
  }
  return v;
}
inline uint8_t get8(ByteView b, size_t off) { return static_cast<uint8_t>(get_be(b, off, 1)); }
inline uint16_t get16(ByteView b, size_t off) { return static_cast<uint16_t>(get_be(b, off, 2)); }
inline uint32_t get32(ByteView b, size_t off) { return static_cast<uint32_t>(get_be(b, off, 4)); }
inline uint64_t get64(ByteView b, size_t off) { return get_be(b, off, 8); }

inline void put_be(std::span<std::byte> b, size_t off, size_t n, uint64_t v) {
  for (size_t i = 0; i < n; ++i) {
    if (off + n - 1 - i < b.size()) b[off + n - 1 - i] = std::byte(static_cast<uint8_t>(v));
    v >>= 8;
  }
}
inline void put8(std::span<std::byte> b, size_t off, uint64_t v) { put_be(b, off, 1, v); }
inline void put16(std::span<std::byte> b, size_t off, uint64_t v) { put_be(b, off, 2, v); }
inline void put32(std::span<std::byte> b, size_t off, uint64_t v) { put_be(b, off, 4, v); }
inline void put64(std::span<std::byte> b, size_t off, uint64_t v) { put_be(b, off, 8, v); }

}  // namespace openib::simhca
