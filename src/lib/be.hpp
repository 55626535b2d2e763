// Big-endian loads and stores on raw ring memory (docs/simhca.md §1: every
// structure in host memory — WQE, CQE, doorbell record — is big-endian).
// The library's own helpers: the driver follows the manual, not simhca's code.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace openib::lib {

inline void st_be16(std::byte* p, uint16_t v) {
  v = __builtin_bswap16(v);
  std::memcpy(p, &v, 2);
}
inline void st_be32(std::byte* p, uint32_t v) {
  v = __builtin_bswap32(v);
  std::memcpy(p, &v, 4);
}
inline void st_be64(std::byte* p, uint64_t v) {
  v = __builtin_bswap64(v);
  std::memcpy(p, &v, 8);
}
inline uint16_t ld_be16(const std::byte* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return __builtin_bswap16(v);
}
inline uint32_t ld_be32(const std::byte* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return __builtin_bswap32(v);
}
inline uint64_t ld_be64(const std::byte* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return __builtin_bswap64(v);
}

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "the doorbell stores of doorbell.hpp assume a little-endian host");

}  // namespace openib::lib
