// Subnet-management attributes (IBA 14.2.5), each a plain struct with an
// encoder into the 64-byte SMP data area and a decoder from it. Field
// offsets are the (bit offset, bit length) of the IBA tables, cited at each
// field in sma_attrs.cpp and checked byte-exact in test/unit/test_mad_attrs.cpp.
// Encoders write the whole attribute (reserved bits as 0) into out[0..N);
// decoders need at least N bytes (EPROTO otherwise), N = k*Bytes below.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/result.hpp"
#include "mad/bytes.hpp"

namespace openib::mad {

// ---- NodeInfo, IBA 14.2.5.3 (40 bytes) ---------------------------------
enum class NodeType : std::uint8_t { kCa = 1, kSwitch = 2, kRouter = 3 };

inline constexpr std::size_t kNodeInfoBytes = 40;
struct NodeInfo {
  std::uint8_t base_version = 1;
  std::uint8_t class_version = 1;
  std::uint8_t node_type = 1;             // NodeType
  std::uint8_t num_ports = 0;             // external ports (physical)
  std::uint64_t system_image_guid = 0;
  std::uint64_t node_guid = 0;
  std::uint64_t port_guid = 0;            // of the port the SMP arrived on (switch: port 0)
  std::uint16_t partition_cap = 0;        // P_Key table entries
  std::uint16_t device_id = 0;
  std::uint32_t revision = 0;
  std::uint8_t local_port_num = 0;        // port the SMP arrived on
  std::uint32_t vendor_id = 0;            // 24 bits (OUI)
  bool operator==(const NodeInfo&) const = default;
};
void encode_node_info(MutBytes out, const NodeInfo& v);
Result<NodeInfo> decode_node_info(ConstBytes in);

// ---- NodeDescription, IBA 14.2.5.2 (64 bytes of UTF-8, NUL padded) -----
inline constexpr std::size_t kNodeDescriptionBytes = 64;
void encode_node_description(MutBytes out, std::string_view text);  // truncated to 64
Result<std::string> decode_node_description(ConstBytes in);         // up to the first NUL

// ---- PortInfo, IBA 14.2.5.6 (64 bytes) ---------------------------------
enum class PortState : std::uint8_t { kNoChange = 0, kDown = 1, kInit = 2, kArmed = 3, kActive = 4 };
enum class PhysState : std::uint8_t {
  kNoChange = 0, kSleep = 1, kPolling = 2, kDisabled = 3, kTraining = 4,
  kLinkUp = 5, kLinkErrorRecovery = 6, kPhyTest = 7,
};
// CapabilityMask bits, IBA 14.2.5.6 Table 146.
namespace port_cap {
inline constexpr std::uint32_t kIsSm = 1u << 1;
inline constexpr std::uint32_t kIsNoticeSupported = 1u << 2;
inline constexpr std::uint32_t kIsTrapSupported = 1u << 3;
inline constexpr std::uint32_t kIsOptionalIpdSupported = 1u << 4;
inline constexpr std::uint32_t kIsAutomaticMigrationSupported = 1u << 5;
inline constexpr std::uint32_t kIsSlMappingSupported = 1u << 6;
inline constexpr std::uint32_t kIsMKeyNvram = 1u << 7;
inline constexpr std::uint32_t kIsPKeyNvram = 1u << 8;
inline constexpr std::uint32_t kIsLedInfoSupported = 1u << 9;
inline constexpr std::uint32_t kIsSmDisabled = 1u << 10;
inline constexpr std::uint32_t kIsSystemImageGuidSupported = 1u << 11;
inline constexpr std::uint32_t kIsPKeySwitchExternalPortTrapSupported = 1u << 12;
inline constexpr std::uint32_t kIsExtendedSpeedsSupported = 1u << 14;
inline constexpr std::uint32_t kIsCapabilityMask2Supported = 1u << 15;
inline constexpr std::uint32_t kIsCommunicationManagementSupported = 1u << 16;
inline constexpr std::uint32_t kIsSnmpTunnelingSupported = 1u << 17;
inline constexpr std::uint32_t kIsReinitSupported = 1u << 18;
inline constexpr std::uint32_t kIsDeviceManagementSupported = 1u << 19;
inline constexpr std::uint32_t kIsVendorClassSupported = 1u << 20;
inline constexpr std::uint32_t kIsDrNoticeSupported = 1u << 21;
inline constexpr std::uint32_t kIsCapabilityMaskNoticeSupported = 1u << 22;
inline constexpr std::uint32_t kIsBootManagementSupported = 1u << 23;
inline constexpr std::uint32_t kIsLinkRoundTripLatencySupported = 1u << 24;
inline constexpr std::uint32_t kIsClientReregistrationSupported = 1u << 25;
inline constexpr std::uint32_t kIsOtherLocalChangesNoticeSupported = 1u << 26;
inline constexpr std::uint32_t kIsLinkSpeedWidthPairsTableSupported = 1u << 27;
}  // namespace port_cap
// LinkWidth bits (IBA 14.2.5.6): 1 = 1x, 2 = 4x, 4 = 8x, 8 = 12x;
// LinkWidthEnabled 0 = no change, 0xFF = set to LinkWidthSupported.
// LinkSpeed (4 bits): 1 = 2.5, 2 = 5.0, 4 = 10.0 Gb/s; Enabled 0 = no
// change, 15 = set to Supported. MTU codes: 1 = 256 .. 5 = 4096.

inline constexpr std::size_t kPortInfoBytes = 64;
struct PortInfo {
  std::uint64_t mkey = 0;                      // bits 0..63
  std::uint64_t gid_prefix = 0;                // 64..127
  std::uint16_t lid = 0;                       // 128, 16
  std::uint16_t master_sm_lid = 0;             // 144, 16
  std::uint32_t capability_mask = 0;           // 160, 32
  std::uint16_t diag_code = 0;                 // 192, 16
  std::uint16_t mkey_lease_period = 0;         // 208, 16
  std::uint8_t local_port_num = 0;             // 224, 8
  std::uint8_t link_width_enabled = 0;         // 232, 8
  std::uint8_t link_width_supported = 0;       // 240, 8
  std::uint8_t link_width_active = 0;          // 248, 8
  std::uint8_t link_speed_supported = 0;       // 256, 4
  std::uint8_t port_state = 0;                 // 260, 4  (PortState)
  std::uint8_t port_phys_state = 0;            // 264, 4  (PhysState)
  std::uint8_t link_down_default_state = 0;    // 268, 4
  std::uint8_t mkey_protect_bits = 0;          // 272, 2
  std::uint8_t lmc = 0;                        // 277, 3
  std::uint8_t link_speed_active = 0;          // 280, 4
  std::uint8_t link_speed_enabled = 0;         // 284, 4
  std::uint8_t neighbor_mtu = 0;               // 288, 4
  std::uint8_t master_sm_sl = 0;               // 292, 4
  std::uint8_t vl_cap = 0;                     // 296, 4
  std::uint8_t init_type = 0;                  // 300, 4
  std::uint8_t vl_high_limit = 0;              // 304, 8
  std::uint8_t vl_arb_high_cap = 0;            // 312, 8
  std::uint8_t vl_arb_low_cap = 0;             // 320, 8
  std::uint8_t init_type_reply = 0;            // 328, 4
  std::uint8_t mtu_cap = 0;                    // 332, 4
  std::uint8_t vl_stall_count = 0;             // 336, 3
  std::uint8_t hoq_life = 0;                   // 339, 5
  std::uint8_t operational_vls = 0;            // 344, 4
  bool partition_enforcement_inbound = false;  // 348, 1
  bool partition_enforcement_outbound = false; // 349, 1
  bool filter_raw_inbound = false;             // 350, 1
  bool filter_raw_outbound = false;            // 351, 1
  std::uint16_t mkey_violations = 0;           // 352, 16
  std::uint16_t pkey_violations = 0;           // 368, 16
  std::uint16_t qkey_violations = 0;           // 384, 16
  std::uint8_t guid_cap = 0;                   // 400, 8
  bool client_reregister = false;              // 408, 1
  std::uint8_t mcast_pkey_trap_suppression = 0;// 409, 2
  std::uint8_t subnet_timeout = 0;             // 411, 5
  std::uint8_t resp_time_value = 0;            // 419, 5
  std::uint8_t local_phy_errors = 0;           // 424, 4
  std::uint8_t overrun_errors = 0;             // 428, 4
  std::uint16_t max_credit_hint = 0;           // 432, 16
  std::uint32_t link_round_trip_latency = 0;   // 456, 24
  std::uint16_t capability_mask2 = 0;          // 480, 16
  std::uint8_t link_speed_ext_active = 0;      // 496, 4
  std::uint8_t link_speed_ext_supported = 0;   // 500, 4
  std::uint8_t link_speed_ext_enabled = 0;     // 507, 5
  bool operator==(const PortInfo&) const = default;
};
void encode_port_info(MutBytes out, const PortInfo& v);
Result<PortInfo> decode_port_info(ConstBytes in);

// ---- SwitchInfo, IBA 14.2.5.4 (20 bytes used) --------------------------
inline constexpr std::size_t kSwitchInfoBytes = 20;
struct SwitchInfo {
  std::uint16_t linear_fdb_cap = 0;            // 0, 16
  std::uint16_t random_fdb_cap = 0;            // 16, 16
  std::uint16_t multicast_fdb_cap = 0;         // 32, 16
  std::uint16_t linear_fdb_top = 0;            // 48, 16
  std::uint8_t default_port = 0;               // 64, 8
  std::uint8_t default_mcast_primary_port = 0; // 72, 8
  std::uint8_t default_mcast_not_primary_port = 0; // 80, 8
  std::uint8_t life_time_value = 0;            // 88, 5
  bool port_state_change = false;              // 93, 1 (Set writes 1 to clear)
  std::uint8_t optimized_sl2vl_programming = 0;// 94, 2
  std::uint16_t lids_per_port = 0;             // 96, 16
  std::uint16_t partition_enforcement_cap = 0; // 112, 16
  bool inbound_enforcement_cap = false;        // 128, 1
  bool outbound_enforcement_cap = false;       // 129, 1
  bool filter_raw_inbound_cap = false;         // 130, 1
  bool filter_raw_outbound_cap = false;        // 131, 1
  bool enhanced_port0 = false;                 // 132, 1
  std::uint16_t multicast_fdb_top = 0;         // 144, 16
  bool operator==(const SwitchInfo&) const = default;
};
void encode_switch_info(MutBytes out, const SwitchInfo& v);
Result<SwitchInfo> decode_switch_info(ConstBytes in);

// ---- GUIDInfo, IBA 14.2.5.5: 8 GUIDs per block, modifier = block -------
inline constexpr std::size_t kGuidsPerBlock = 8;
using GuidBlock = std::array<std::uint64_t, kGuidsPerBlock>;
void encode_guid_block(MutBytes out, const GuidBlock& v);
Result<GuidBlock> decode_guid_block(ConstBytes in);

// ---- P_KeyTable, IBA 14.2.5.7: 32 x 16-bit per block -------------------
// Modifier: bits 15:0 block number; for a switch bits 31:16 the port.
inline constexpr std::size_t kPKeysPerBlock = 32;
using PKeyBlock = std::array<std::uint16_t, kPKeysPerBlock>;
void encode_pkey_block(MutBytes out, const PKeyBlock& v);
Result<PKeyBlock> decode_pkey_block(ConstBytes in);
inline constexpr std::uint16_t kDefaultPKey = 0xFFFF;  // full member, default partition

// ---- SLtoVLMappingTable, IBA 14.2.5.8: 16 x 4-bit VLs (8 bytes) --------
// Modifier for a switch: bits 15:8 input port, 7:0 output port.
using SlToVlTable = std::array<std::uint8_t, 16>;  // index SL -> VL
void encode_sl2vl(MutBytes out, const SlToVlTable& v);
Result<SlToVlTable> decode_sl2vl(ConstBytes in);

// ---- VLArbitrationTable, IBA 14.2.5.9: 32 entries of {VL(4), weight(8)} -
// Modifier bits 31:16 (IBA 14.2.5.9): 1 = low priority entries 0..31,
// 2 = low 32..63, 3 = high 0..31, 4 = high 32..63 (smpquery asks 1 and 3);
// bits 15:0: output port (switch).
struct VlArbEntry {
  std::uint8_t vl = 0;      // 4 bits (byte 0 bits 3:0)
  std::uint8_t weight = 0;  // byte 1
  bool operator==(const VlArbEntry&) const = default;
};
inline constexpr std::size_t kVlArbEntriesPerBlock = 32;
using VlArbBlock = std::array<VlArbEntry, kVlArbEntriesPerBlock>;
void encode_vlarb_block(MutBytes out, const VlArbBlock& v);
Result<VlArbBlock> decode_vlarb_block(ConstBytes in);

// ---- LinearForwardingTable, IBA 14.2.5.10: 64 ports per block ----------
// Entry i of block b is the out port for LID 64*b+i; 0xFF = drop.
inline constexpr std::size_t kLftEntriesPerBlock = 64;
using LftBlock = std::array<std::uint8_t, kLftEntriesPerBlock>;
void encode_lft_block(MutBytes out, const LftBlock& v);
Result<LftBlock> decode_lft_block(ConstBytes in);

// ---- MulticastForwardingTable, IBA 14.2.5.12 ---------------------------
// 32 entries x 16-bit port mask. Modifier bits 31:28 = position (which 16
// ports: mask bit j is port 16*position + j), bits 8:0 = block (entry i of
// block b is MLID 0xC000 + 32*b + i).
inline constexpr std::size_t kMftEntriesPerBlock = 32;
inline constexpr std::uint16_t kMulticastLidBase = 0xC000;
using MftBlock = std::array<std::uint16_t, kMftEntriesPerBlock>;
void encode_mft_block(MutBytes out, const MftBlock& v);
Result<MftBlock> decode_mft_block(ConstBytes in);
constexpr std::uint8_t mft_position(std::uint32_t attr_mod) { return static_cast<std::uint8_t>(attr_mod >> 28); }
constexpr std::uint16_t mft_block(std::uint32_t attr_mod) { return static_cast<std::uint16_t>(attr_mod & 0x1FF); }

// ---- SMInfo, IBA 14.2.5.13 (21 bytes) ----------------------------------
enum class SmState : std::uint8_t { kNotActive = 0, kDiscovering = 1, kStandby = 2, kMaster = 3 };
inline constexpr std::size_t kSmInfoBytes = 21;
struct SmInfo {
  std::uint64_t guid = 0;
  std::uint64_t sm_key = 0;
  std::uint32_t act_count = 0;
  std::uint8_t priority = 0;  // 4 bits (160, 4)
  std::uint8_t sm_state = 0;  // 4 bits (164, 4)
  bool operator==(const SmInfo&) const = default;
};
void encode_sm_info(MutBytes out, const SmInfo& v);
Result<SmInfo> decode_sm_info(ConstBytes in);

// ---- Notice (traps), IBA 13.4.8.2 / 14.2.5.1 (80 bytes) ----------------
inline constexpr std::size_t kNoticeBytes = 80;
// An SMP's 64-byte data area holds the Notice up to DataDetails; IssuerGID
// (bytes 64..79) only travels in GMPs (SA). encode_notice() writes what
// fits in `out`; decode_notice() needs 64 bytes and reads the GID if present.
inline constexpr std::size_t kNoticeSmpBytes = 64;
inline constexpr std::size_t kNoticeDataDetailsBytes = 54;
enum class NoticeType : std::uint8_t { kFatal = 0, kUrgent = 1, kSecurity = 2, kSubnMgmt = 3, kInfo = 4 };
namespace trap {
inline constexpr std::uint16_t kLinkStateChange = 128;    // switch port state change (SwitchInfo:PortStateChange)
inline constexpr std::uint16_t kLinkIntegrity = 129;
inline constexpr std::uint16_t kBufferOverrun = 130;
inline constexpr std::uint16_t kFlowControlWatchdog = 131;
inline constexpr std::uint16_t kLocalChanges = 144;       // CapabilityMask etc. changed
inline constexpr std::uint16_t kSysImageGuidChange = 145;
inline constexpr std::uint16_t kBadMKey = 256;
inline constexpr std::uint16_t kBadPKey = 257;
inline constexpr std::uint16_t kBadQKey = 258;
}  // namespace trap
struct Notice {
  bool is_generic = true;                  // 0, 1
  std::uint8_t type = 0;                   // 1, 7  (NoticeType)
  std::uint32_t producer_type = 0;         // 8, 24 (generic: NodeType 1 CA, 2 switch, 3 router, 4 class manager)
  std::uint16_t trap_number = 0;           // 32, 16 (generic) / DeviceID (vendor)
  std::uint16_t issuer_lid = 0;            // 48, 16
  bool notice_toggle = false;              // 64, 1
  std::uint16_t notice_count = 0;          // 65, 15
  std::array<std::uint8_t, kNoticeDataDetailsBytes> data_details{};  // bytes 10..63
  std::array<std::uint8_t, 16> issuer_gid{};                         // bytes 64..79
  bool operator==(const Notice&) const = default;
};
void encode_notice(MutBytes out, const Notice& v);
Result<Notice> decode_notice(ConstBytes in);
// Trap 128 (IBA 14.2.5.1 Table 131): DataDetails bytes 0-1 = LIDADDR, the
// LID of the switch whose port changed state.
Notice make_trap_128(std::uint16_t issuer_lid, std::uint16_t lid_addr);
// Trap 144 (local changes): LIDADDR (bytes 2-3), CapabilityMask (bytes 6-9),
// ChangeFlags (bytes 12-13), CapabilityMask2 (bytes 14-15).
Notice make_trap_144(std::uint16_t issuer_lid, std::uint16_t lid_addr, std::uint32_t capability_mask,
                     std::uint16_t change_flags = 0, std::uint16_t capability_mask2 = 0);
// Trap 256 (bad M_Key): LIDADDR (bytes 2-3), DrSLID (4-5), Method (6),
// AttributeID (8-9), AttributeModifier (10-13), M_Key (14-21).
Notice make_trap_256(std::uint16_t issuer_lid, std::uint16_t lid_addr, std::uint8_t method,
                     std::uint16_t attr_id, std::uint32_t attr_mod, std::uint64_t mkey);

// ---- LedInfo, IBA 14.2.5.15: bit 0 = LedMask ---------------------------
inline constexpr std::size_t kLedInfoBytes = 4;

}  // namespace openib::mad
