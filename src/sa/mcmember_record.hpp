// MCMemberRecord, IBA 15.2.5.17 (52 bytes; AttributeOffset 7 words): a
// multicast group join (SubnAdmSet), leave (SubnAdmDelete) or lookup
// (Get/GetTable). JoinState bits per IBA 1.2.1 (SendOnlyFullMember from
// 1.3 / rdma-core's umad_sa_mcm.h).
#pragma once

#include <cstdint>

#include "common/result.hpp"
#include "sa/sa_mad.hpp"

namespace openib::sa {

inline constexpr std::size_t kMcMemberRecordBytes = 52;

namespace mcm_mask {  // ComponentMask bits, IBA 15.2.5.17
inline constexpr std::uint64_t kMgid = 1ull << 0;
inline constexpr std::uint64_t kPortGid = 1ull << 1;
inline constexpr std::uint64_t kQKey = 1ull << 2;
inline constexpr std::uint64_t kMlid = 1ull << 3;
inline constexpr std::uint64_t kMtuSelector = 1ull << 4;
inline constexpr std::uint64_t kMtu = 1ull << 5;
inline constexpr std::uint64_t kTClass = 1ull << 6;
inline constexpr std::uint64_t kPKey = 1ull << 7;
inline constexpr std::uint64_t kRateSelector = 1ull << 8;
inline constexpr std::uint64_t kRate = 1ull << 9;
inline constexpr std::uint64_t kPacketLifeTimeSelector = 1ull << 10;
inline constexpr std::uint64_t kPacketLifeTime = 1ull << 11;
inline constexpr std::uint64_t kSl = 1ull << 12;
inline constexpr std::uint64_t kFlowLabel = 1ull << 13;
inline constexpr std::uint64_t kHopLimit = 1ull << 14;
inline constexpr std::uint64_t kScope = 1ull << 15;
inline constexpr std::uint64_t kJoinState = 1ull << 16;
inline constexpr std::uint64_t kProxyJoin = 1ull << 17;
}  // namespace mcm_mask

namespace join_state {
inline constexpr std::uint8_t kFullMember = 1u << 0;
inline constexpr std::uint8_t kNonMember = 1u << 1;
inline constexpr std::uint8_t kSendOnlyNonMember = 1u << 2;
inline constexpr std::uint8_t kSendOnlyFullMember = 1u << 3;
}  // namespace join_state

struct McMemberRecord {
  Gid mgid{};                     // 0, 128
  Gid port_gid{};                 // 128, 128
  std::uint32_t qkey = 0;         // 256, 32
  std::uint16_t mlid = 0;         // 288, 16
  std::uint8_t mtu_selector = 0;  // 304, 2
  std::uint8_t mtu = 0;           // 306, 6
  std::uint8_t tclass = 0;        // 312, 8
  std::uint16_t pkey = 0;         // 320, 16
  std::uint8_t rate_selector = 0; // 336, 2
  std::uint8_t rate = 0;          // 338, 6
  std::uint8_t packet_life_time_selector = 0;  // 344, 2
  std::uint8_t packet_life_time = 0;           // 346, 6
  std::uint8_t sl = 0;            // 352, 4
  std::uint32_t flow_label = 0;   // 356, 20
  std::uint8_t hop_limit = 0;     // 376, 8
  std::uint8_t scope = 0;         // 384, 4
  std::uint8_t join_state = 0;    // 388, 4 (join_state bits)
  bool proxy_join = false;        // 392, 1 (then 23 reserved bits to 416)
  bool operator==(const McMemberRecord&) const = default;
};
void encode_mcmember_record(MutBytes out, const McMemberRecord& v);
Result<McMemberRecord> decode_mcmember_record(ConstBytes in);

// IPoIB's signature MGIDs (RFC 4391 section 4): FF1<scope>:401B:<P_Key>::
// for IPv4 (the broadcast group FF12:401B:<P_Key>::FFFF:FFFF among them)
// and FF1<scope>:601B:<P_Key>:: for IPv6: flags 1 (transient), the
// signature in bytes 2..3.
constexpr bool is_ipoib_mgid(const Gid& g) {
  return g[0] == 0xFF && (g[1] & 0xF0) == 0x10 && (g[2] == 0x40 || g[2] == 0x60) && g[3] == 0x1B;
}

}  // namespace openib::sa
