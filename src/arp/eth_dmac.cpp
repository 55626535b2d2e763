#include "arp/eth_dmac.hpp"

namespace openib::arp {

std::optional<Mac> dmac_from_gid(const std::array<std::uint8_t, 16>& g) {
  if (g[0] == 0xff) return Mac{0x33, 0x33, g[12], g[13], g[14], g[15]};  // RFC 2464 7
  bool mapped = g[10] == 0xff && g[11] == 0xff;  // ::ffff:a.b.c.d (RFC 4291 2.5.5.2)
  for (int i = 0; i < 10; ++i) mapped = mapped && g[i] == 0;
  if (mapped && (g[12] & 0xf0) == 0xe0)  // RFC 1112 6.4
    return Mac{0x01, 0x00, 0x5e, static_cast<std::uint8_t>(g[13] & 0x7f), g[14], g[15]};
  // fe80::/64 (RFC 4291 2.5.6) whose interface ID is a MAC's modified
  // EUI-64 (ff:fe in the middle, the U/L bit inverted, 2.5.1).
  const bool link_local = g[0] == 0xfe && g[1] == 0x80 && g[2] == 0 && g[3] == 0 && g[4] == 0 && g[5] == 0 &&
                          g[6] == 0 && g[7] == 0;
  if (link_local && g[11] == 0xff && g[12] == 0xfe)
    return Mac{static_cast<std::uint8_t>(g[8] ^ 0x02), g[9], g[10], g[13], g[14], g[15]};
  return std::nullopt;
}

}  // namespace openib::arp
