// ServiceRecord, IBA 15.2.5.14 (176 bytes): a service registered with the
// SA (Set), looked up (Get/GetTable) and removed (Delete); a lease in
// seconds, 0xFFFFFFFF for none.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "common/result.hpp"
#include "sa/sa_mad.hpp"

namespace openib::sa {

inline constexpr std::size_t kServiceRecordBytes = 176;
inline constexpr std::uint32_t kInfiniteLease = 0xFFFFFFFF;

namespace sr_mask {  // ComponentMask bits, IBA 15.2.5.14
inline constexpr std::uint64_t kServiceId = 1ull << 0;
inline constexpr std::uint64_t kServiceGid = 1ull << 1;
inline constexpr std::uint64_t kServicePKey = 1ull << 2;
inline constexpr std::uint64_t kServiceLease = 1ull << 4;  // bit 3: the reserved field
inline constexpr std::uint64_t kServiceKey = 1ull << 5;
inline constexpr std::uint64_t kServiceName = 1ull << 6;
// ServiceData8.i is bit 7+i, ServiceData16.i 23+i, ServiceData32.i 31+i,
// ServiceData64.i 35+i.
constexpr std::uint64_t data8(unsigned i) { return 1ull << (7 + i); }
constexpr std::uint64_t data16(unsigned i) { return 1ull << (23 + i); }
constexpr std::uint64_t data32(unsigned i) { return 1ull << (31 + i); }
constexpr std::uint64_t data64(unsigned i) { return 1ull << (35 + i); }
}  // namespace sr_mask

struct ServiceRecord {
  std::uint64_t service_id = 0;               // bytes 0..7
  Gid service_gid{};                          // 8..23
  std::uint16_t service_pkey = 0;             // 24..25 (26..27 reserved)
  std::uint32_t service_lease = kInfiniteLease;  // 28..31, seconds
  std::array<std::uint8_t, 16> service_key{}; // 32..47
  std::string service_name;                   // 48..111, UTF-8, NUL padded
  std::array<std::uint8_t, 16> data8{};       // 112..127
  std::array<std::uint16_t, 8> data16{};      // 128..143
  std::array<std::uint32_t, 4> data32{};      // 144..159
  std::array<std::uint64_t, 2> data64{};      // 160..175
  bool operator==(const ServiceRecord&) const = default;
};
void encode_service_record(MutBytes out, const ServiceRecord& v);
Result<ServiceRecord> decode_service_record(ConstBytes in);

}  // namespace openib::sa
