// The wire PathRecord decoded for libopenib's users (IBA 15.2.5.16). Its
// own small decoder: libopenib does not link src/sa (its MAD codecs and
// zlib).
#include <cstddef>

#include "openib/path.hpp"

namespace openib {

namespace {
// `len` bits (<= 32) at bit offset `off` of the big-endian record, the
// (bit offset, bit length) of IBA 15.2.5.16's table.
uint32_t bits(const std::array<uint8_t, 64>& r, size_t off, size_t len) {
  uint64_t v = 0;
  const size_t first = off / 8, last = (off + len - 1) / 8;
  for (size_t i = first; i <= last; ++i) v = (v << 8) | r[i];
  const size_t tail = (last + 1) * 8 - (off + len);
  return static_cast<uint32_t>((v >> tail) & ((1ull << len) - 1));
}
}  // namespace

PathRecord decode_path_record(const std::array<uint8_t, 64>& raw) {
  PathRecord p;
  p.raw = raw;
  for (size_t i = 0; i < 16; ++i) {
    p.dgid.raw[i] = raw[8 + i];    // 64, 128
    p.sgid.raw[i] = raw[24 + i];   // 192, 128
  }
  p.dlid = static_cast<uint16_t>(bits(raw, 320, 16));
  p.slid = static_cast<uint16_t>(bits(raw, 336, 16));
  p.flow_label = bits(raw, 356, 20);
  p.hop_limit = static_cast<uint8_t>(bits(raw, 376, 8));
  p.tclass = static_cast<uint8_t>(bits(raw, 384, 8));
  p.reversible = bits(raw, 392, 1) != 0;
  p.numb_path = static_cast<uint8_t>(bits(raw, 393, 7));
  p.pkey = static_cast<uint16_t>(bits(raw, 400, 16));
  p.qos_class = static_cast<uint16_t>(bits(raw, 416, 12));
  p.sl = static_cast<uint8_t>(bits(raw, 428, 4));
  p.mtu = static_cast<uint8_t>(bits(raw, 434, 6));
  p.rate = static_cast<uint8_t>(bits(raw, 442, 6));
  p.packet_life_time = static_cast<uint8_t>(bits(raw, 450, 6));
  p.preference = static_cast<uint8_t>(bits(raw, 456, 8));
  return p;
}

}  // namespace openib
