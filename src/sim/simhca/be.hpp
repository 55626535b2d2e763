// Big-endian field access over byte spans (docs/simhca.md §1: structures in
// host memory are big-endian): the tree's helpers (common/byte_order.hpp),
// named in simhca's namespace. Reads past the end of a span return 0 and
// writes past it are dropped, so a decoder handed a short buffer cannot
// read or write out of bounds; decoders still check lengths first.
// Only the byte order is shared: the simhca's reading of the manual (its
// layouts and constants, registers.hpp, codec.hpp) stays its own, as the
// oracle the driver is tested against.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "common/byte_order.hpp"

namespace openib::simhca {

using Bytes = std::vector<std::byte>;
using ByteView = std::span<const std::byte>;

using openib::bytes::get16;
using openib::bytes::get32;
using openib::bytes::get64;
using openib::bytes::get8;
using openib::bytes::get_be;
using openib::bytes::put16;
using openib::bytes::put32;
using openib::bytes::put64;
using openib::bytes::put8;
using openib::bytes::put_be;

}  // namespace openib::simhca
