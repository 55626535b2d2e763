// Byte access for the MAD codecs. The helpers themselves are the tree's
// (common/byte_order.hpp, namespace openib::bytes); they are named here in
// openib::mad so the codecs and their callers read mad::get16(...) as
// before. MAD attribute layouts in IBA chapters 13, 14 and 16 are given as
// (bit offset, bit length) with bit 0 the most significant bit of byte 0;
// get_bits()/put_bits() take exactly those numbers, so each field in
// sma_attrs.cpp / pma_attrs.cpp reads like the spec's table. Reads past the
// end of a span return 0 and writes past it are dropped, so a short buffer
// can never be overrun (decoders still check sizes).
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "common/byte_order.hpp"
#include "common/result.hpp"

namespace openib::mad {

using ConstBytes = bytes::ConstSpan;
using MutBytes = bytes::MutSpan;
using ByteVec = std::vector<std::byte>;

inline constexpr std::size_t kMadBytes = 256;  // IBA 13.4.1: every MAD is 256 bytes
using Mad = std::array<std::byte, kMadBytes>;

// Big-endian, bounded (common/byte_order.hpp).
using bytes::get_be;
using bytes::put_be;
using bytes::get8;
using bytes::get16;
using bytes::get32;
using bytes::get64;
using bytes::put8;
using bytes::put16;
using bytes::put32;
using bytes::put64;
using bytes::get_bits;
using bytes::put_bits;

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
