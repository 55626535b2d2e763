#include "sa/local_route.hpp"

namespace openib::sa {

namespace {
constexpr std::uint8_t kSelectorExactly = static_cast<std::uint8_t>(Selector::kExactly);
constexpr std::uint8_t kIboePacketLifetime = 16;  // Linux's CMA_IBOE_PACKET_LIFETIME
}  // namespace

PathRecord route_from_addresses(const RouteAddresses& a) {
  PathRecord p;
  p.service_id = a.service_id;
  p.sgid = a.sgid;
  p.dgid = a.dgid;
  p.dlid = p.slid = 0;  // no LIDs on Ethernet
  p.hop_limit = a.hop_limit;
  p.tclass = a.tos;
  p.reversible = true;
  p.numb_path = 1;
  p.pkey = 0xffff;
  p.sl = a.tos >> 5;  // iboe_tos_to_sl: the IP precedence, without a VLAN priority map
  p.mtu_selector = kSelectorExactly;
  p.mtu = a.mtu;
  p.rate_selector = kSelectorExactly;
  p.rate = a.rate;
  p.packet_life_time_selector = kSelectorExactly;
  p.packet_life_time = kIboePacketLifetime;
  return p;
}

std::uint8_t ib_rate_code(std::uint8_t active_width, std::uint8_t active_speed) {
  unsigned lanes = 0, lane_gbps_x2 = 0;  // a lane's Gb/s times 2 (SDR's 2.5 is 5)
  switch (active_width) {
    case 1: lanes = 1; break;
    case 2: lanes = 4; break;
    case 4: lanes = 8; break;
    case 8: lanes = 12; break;
    default: return 0;
  }
  switch (active_speed) {
    case 1: lane_gbps_x2 = 5; break;   // SDR 2.5 Gb/s
    case 2: lane_gbps_x2 = 10; break;  // DDR 5
    case 4: lane_gbps_x2 = 20; break;  // QDR 10
    default: return 0;
  }
  // IBA 15.2.5.16 Table 205 (ib_rate): Gb/s x 2 -> code.
  switch (lanes * lane_gbps_x2) {
    case 5: return 2;     // 2.5
    case 10: return 5;    // 5
    case 20: return 3;    // 10
    case 40: return 6;    // 20
    case 60: return 4;    // 30
    case 80: return 7;    // 40
    case 120: return 8;   // 60
    case 160: return 9;   // 80
    case 240: return 10;  // 120
    default: return 0;
  }
}

}  // namespace openib::sa
