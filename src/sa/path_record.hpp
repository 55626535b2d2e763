// PathRecord, IBA 15.2.5.16 (64 bytes): the attribute a PathRecord query
// sends (the fields named in the ComponentMask are selectors) and the SA
// answers with. Field offsets are the (bit offset, bit length) of the IBA
// table, cited at each field below and written once in path_record.cpp.
#pragma once

#include <cstdint>

#include "common/result.hpp"
#include "sa/sa_mad.hpp"

namespace openib::sa {

inline constexpr std::size_t kPathRecordBytes = 64;

// ComponentMask bits of PathRecord (IBA 15.2.5.16; kernel ib_sa.h and
// OpenSM's IB_PR_COMPMASK_* use the same numbers).
namespace pr_mask {
inline constexpr std::uint64_t kServiceId = (1ull << 0) | (1ull << 1);  // ServiceID: two components (8 + 56 bits)
inline constexpr std::uint64_t kDgid = 1ull << 2;
inline constexpr std::uint64_t kSgid = 1ull << 3;
inline constexpr std::uint64_t kDlid = 1ull << 4;
inline constexpr std::uint64_t kSlid = 1ull << 5;
inline constexpr std::uint64_t kRawTraffic = 1ull << 6;
inline constexpr std::uint64_t kFlowLabel = 1ull << 8;   // bit 7 is the reserved field
inline constexpr std::uint64_t kHopLimit = 1ull << 9;
inline constexpr std::uint64_t kTClass = 1ull << 10;
inline constexpr std::uint64_t kReversible = 1ull << 11;
inline constexpr std::uint64_t kNumbPath = 1ull << 12;
inline constexpr std::uint64_t kPKey = 1ull << 13;
inline constexpr std::uint64_t kQosClass = 1ull << 14;
inline constexpr std::uint64_t kSl = 1ull << 15;
inline constexpr std::uint64_t kMtuSelector = 1ull << 16;
inline constexpr std::uint64_t kMtu = 1ull << 17;
inline constexpr std::uint64_t kRateSelector = 1ull << 18;
inline constexpr std::uint64_t kRate = 1ull << 19;
inline constexpr std::uint64_t kPacketLifeTimeSelector = 1ull << 20;
inline constexpr std::uint64_t kPacketLifeTime = 1ull << 21;
inline constexpr std::uint64_t kPreference = 1ull << 22;
inline constexpr std::uint64_t kAll = (1ull << 23) - 1 - (1ull << 7);
}  // namespace pr_mask

// The 2-bit selectors of MTU, Rate and PacketLifeTime (IBA 15.2.5.16).
enum class Selector : std::uint8_t { kGreaterThan = 0, kLessThan = 1, kExactly = 2, kBest = 3 };

struct PathRecord {
  std::uint64_t service_id = 0;      // 0, 64
  Gid dgid{};                        // 64, 128
  Gid sgid{};                        // 192, 128
  std::uint16_t dlid = 0;            // 320, 16
  std::uint16_t slid = 0;            // 336, 16
  bool raw_traffic = false;          // 352, 1   (then 3 reserved bits)
  std::uint32_t flow_label = 0;      // 356, 20
  std::uint8_t hop_limit = 0;        // 376, 8
  std::uint8_t tclass = 0;           // 384, 8
  bool reversible = false;           // 392, 1
  std::uint8_t numb_path = 0;        // 393, 7
  std::uint16_t pkey = 0;            // 400, 16
  std::uint16_t qos_class = 0;       // 416, 12
  std::uint8_t sl = 0;               // 428, 4
  std::uint8_t mtu_selector = 0;     // 432, 2
  std::uint8_t mtu = 0;              // 434, 6   (1 = 256 .. 5 = 4096)
  std::uint8_t rate_selector = 0;    // 440, 2
  std::uint8_t rate = 0;             // 442, 6   (IBA 15.2.5.16 rate codes: 2 = 2.5 Gb/s, 3 = 10, ...)
  std::uint8_t packet_life_time_selector = 0;  // 448, 2
  std::uint8_t packet_life_time = 0;           // 450, 6
  std::uint8_t preference = 0;       // 456, 8   (then 48 reserved bits to 512)
  bool operator==(const PathRecord&) const = default;
};
void encode_path_record(MutBytes out, const PathRecord& v);  // writes out[0..64)
Result<PathRecord> decode_path_record(ConstBytes in);         // EPROTO if < 64 bytes

// `v` with every field whose component bit is clear in `comp_mask` set to
// its zero value: what a query with that mask actually asks, so two
// queries that ask the same thing compare equal (the path cache's key).
PathRecord mask_path_record(const PathRecord& v, std::uint64_t comp_mask);

}  // namespace openib::sa
