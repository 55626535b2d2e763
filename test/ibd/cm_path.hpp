// A PathRecord for the CM tests as the SA would encode it (IBA 15.2.5.16):
// no SM runs in these tests, so the record is made from the ports' LIDs
// (and GIDs), subnet-local (hop limit 0), P_Key 0xffff, MTU 1024.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

#include "sa/path_record.hpp"

namespace openib::testing {

inline std::array<uint8_t, 64> wire_path(uint16_t slid, uint16_t dlid, const std::array<uint8_t, 16>& sgid = {},
                                         const std::array<uint8_t, 16>& dgid = {}) {
  sa::PathRecord p;
  p.sgid = sgid;
  p.dgid = dgid;
  p.slid = slid;
  p.dlid = dlid;
  p.reversible = true;
  p.numb_path = 1;
  p.pkey = 0xffff;
  p.mtu = 3;  // 1024
  p.rate = 3;
  p.packet_life_time = 12;
  std::array<uint8_t, 64> raw{};
  sa::encode_path_record(std::span(reinterpret_cast<std::byte*>(raw.data()), raw.size()), p);
  return raw;
}

}  // namespace openib::testing
