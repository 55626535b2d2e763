// InformInfo, IBA 13.4.8.3 (36 bytes): a subscription to traps sent to the
// SA with SubnAdmSet (Subscribe 1 to subscribe, 0 to unsubscribe), and the
// GID traps the SA reports to subscribers (IBA 14.2.5.1 Table 131 / 13.4.8.2):
// 64 GID now in service, 65 GID out of service, 66 multicast group
// created, 67 multicast group deleted. Their DataDetails: 6 reserved bytes
// then the GID (bytes 6..21). The Notice itself is src/mad's codec.
#pragma once

#include <cstdint>
#include <optional>

#include "common/result.hpp"
#include "mad/sma_attrs.hpp"
#include "sa/sa_mad.hpp"

namespace openib::sa {

inline constexpr std::size_t kInformInfoBytes = 36;

namespace gid_trap {
inline constexpr std::uint16_t kGidInService = 64;
inline constexpr std::uint16_t kGidOutOfService = 65;
inline constexpr std::uint16_t kMcGroupCreated = 66;
inline constexpr std::uint16_t kMcGroupDeleted = 67;
}  // namespace gid_trap

struct InformInfo {
  Gid gid{};                            // 0, 128 (0: any GID)
  std::uint16_t lid_range_begin = 0xFFFF;  // 128, 16 (0xFFFF: all LIDs)
  std::uint16_t lid_range_end = 0;      // 144, 16
  bool is_generic = true;               // 176, 8 (160..175 reserved)
  bool subscribe = true;                // 184, 8
  std::uint16_t type = 0xFFFF;          // 192, 16 (0xFFFF: all types)
  std::uint16_t trap_number = 0;        // 208, 16 (generic) / DeviceID (vendor)
  std::uint32_t qpn = 0;                // 224, 24
  std::uint8_t resp_time_value = 0;     // 251, 5 (248..250 reserved)
  std::uint32_t producer_type = 0xFFFFFF;  // 264, 24 (vendor: VendorID; 256..263 reserved)
  bool operator==(const InformInfo&) const = default;
};
void encode_inform_info(MutBytes out, const InformInfo& v);
Result<InformInfo> decode_inform_info(ConstBytes in);

// The subscription (or, subscribe = false, its cancellation) to one
// generic trap from any issuer, any LID, any type.
InformInfo gid_trap_subscription(std::uint16_t trap_number, bool subscribe, std::uint32_t qpn);

// A GID trap (64..67) as the SA issues it: generic, subnet-management
// type, producer a class manager (4); `gid` in DataDetails bytes 6..21.
mad::Notice make_gid_trap(std::uint16_t trap_number, std::uint16_t issuer_lid, const Gid& gid);
// What a GID trap says: its number and GID; nullopt for any other notice.
struct GidTrap {
  std::uint16_t trap_number = 0;
  Gid gid{};
  bool operator==(const GidTrap&) const = default;
};
std::optional<GidTrap> parse_gid_trap(const mad::Notice& n);

}  // namespace openib::sa
