// The tree's one set of byte-order helpers.
//
// Two kinds, on purpose:
//  - bounded field access over spans (get16(b, off), put32(b, off, v)):
//    reads past the end of the span return 0 and writes past it are
//    dropped, so a decoder handed a short buffer cannot overrun it (decoders
//    still check lengths first). For codecs: MADs, commands, WQEs in
//    tests.
//  - unchecked loads and stores at a pointer (ld_be32(p), st_be64(p, v)):
//    one instruction each, for the data path where the caller has already
//    checked the length (rings, packet headers).
// Big-endian is the wire and PRM order (IBA 7.7 ff., docs/simhca.md §1);
// little-endian is vfio-user's (its spec, "Message format") and the CRCs'
// transmission order (IBA 7.8.1, 7.8.2). Bit fields are read by
// get_bits()/put_bits() with the IBA tables' numbering, never C bitfields.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

namespace openib::bytes {

static_assert(std::endian::native == std::endian::little,
              "the unchecked helpers and the doorbell stores assume a little-endian host");

using ConstSpan = std::span<const std::byte>;
using MutSpan = std::span<std::byte>;

// ---- bounded, big-endian -------------------------------------------------
inline uint64_t get_be(ConstSpan b, size_t off, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; ++i) {
    v <<= 8;
    if (off + i < b.size()) v |= std::to_integer<uint8_t>(b[off + i]);
  }
  return v;
}
inline void put_be(MutSpan b, size_t off, size_t n, uint64_t v) {
  for (size_t i = 0; i < n; ++i) {
    const size_t at = off + n - 1 - i;
    if (at < b.size()) b[at] = std::byte(static_cast<uint8_t>(v));
    v >>= 8;
  }
}
inline uint8_t get8(ConstSpan b, size_t off) { return static_cast<uint8_t>(get_be(b, off, 1)); }
inline uint16_t get16(ConstSpan b, size_t off) { return static_cast<uint16_t>(get_be(b, off, 2)); }
inline uint32_t get32(ConstSpan b, size_t off) { return static_cast<uint32_t>(get_be(b, off, 4)); }
inline uint64_t get64(ConstSpan b, size_t off) { return get_be(b, off, 8); }
inline void put8(MutSpan b, size_t off, uint64_t v) { put_be(b, off, 1, v); }
inline void put16(MutSpan b, size_t off, uint64_t v) { put_be(b, off, 2, v); }
inline void put32(MutSpan b, size_t off, uint64_t v) { put_be(b, off, 4, v); }
inline void put64(MutSpan b, size_t off, uint64_t v) { put_be(b, off, 8, v); }

// A field of `len` bits (1..64) starting at big-endian bit `bitoff` (bit 0
// = the most significant bit of byte 0), the numbering of the IBA tables.
inline uint64_t get_bits(ConstSpan b, size_t bitoff, unsigned len) {
  uint64_t v = 0;
  for (unsigned i = 0; i < len; ++i) {
    const size_t bit = bitoff + i, byte = bit / 8;
    const unsigned shift = 7 - static_cast<unsigned>(bit % 8);
    const uint64_t x = byte < b.size() ? (std::to_integer<unsigned>(b[byte]) >> shift) & 1u : 0u;
    v = (v << 1) | x;
  }
  return v;
}
inline void put_bits(MutSpan b, size_t bitoff, unsigned len, uint64_t v) {
  for (unsigned i = 0; i < len; ++i) {
    const size_t bit = bitoff + len - 1 - i, byte = bit / 8;
    const unsigned shift = 7 - static_cast<unsigned>(bit % 8);
    if (byte < b.size()) {
      auto cur = std::to_integer<unsigned>(b[byte]);
      cur = (cur & ~(1u << shift)) | (static_cast<unsigned>(v & 1u) << shift);
      b[byte] = std::byte(static_cast<uint8_t>(cur));
    }
    v >>= 1;
  }
}

// ---- bounded, little-endian ------------------------------------------------
inline uint64_t get_le(ConstSpan b, size_t off, size_t n) {
  uint64_t v = 0;
  for (size_t i = n; i-- > 0;) {
    v <<= 8;
    if (off + i < b.size()) v |= std::to_integer<uint8_t>(b[off + i]);
  }
  return v;
}
inline void put_le(MutSpan b, size_t off, size_t n, uint64_t v) {
  for (size_t i = 0; i < n; ++i, v >>= 8)
    if (off + i < b.size()) b[off + i] = std::byte(static_cast<uint8_t>(v));
}
inline uint16_t get_le16(ConstSpan b, size_t off) { return static_cast<uint16_t>(get_le(b, off, 2)); }
inline uint32_t get_le32(ConstSpan b, size_t off) { return static_cast<uint32_t>(get_le(b, off, 4)); }
inline uint64_t get_le64(ConstSpan b, size_t off) { return get_le(b, off, 8); }

// ---- unchecked, at a pointer -------------------------------------------------
template <typename T>
inline T ld_raw(const void* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <typename T>
inline void st_raw(void* p, T v) {
  std::memcpy(p, &v, sizeof v);
}
inline uint16_t ld_be16(const void* p) { return __builtin_bswap16(ld_raw<uint16_t>(p)); }
inline uint32_t ld_be32(const void* p) { return __builtin_bswap32(ld_raw<uint32_t>(p)); }
inline uint64_t ld_be64(const void* p) { return __builtin_bswap64(ld_raw<uint64_t>(p)); }
inline void st_be16(void* p, uint16_t v) { st_raw(p, __builtin_bswap16(v)); }
inline void st_be32(void* p, uint32_t v) { st_raw(p, __builtin_bswap32(v)); }
inline void st_be64(void* p, uint64_t v) { st_raw(p, __builtin_bswap64(v)); }
inline uint16_t ld_le16(const void* p) { return ld_raw<uint16_t>(p); }
inline uint32_t ld_le32(const void* p) { return ld_raw<uint32_t>(p); }
inline uint64_t ld_le64(const void* p) { return ld_raw<uint64_t>(p); }
inline void st_le16(void* p, uint16_t v) { st_raw(p, v); }
inline void st_le32(void* p, uint32_t v) { st_raw(p, v); }
inline void st_le64(void* p, uint64_t v) { st_raw(p, v); }

}  // namespace openib::bytes
