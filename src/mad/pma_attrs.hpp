// Performance-management attributes (IBA 16.1) and ClassPortInfo
// (IBA 13.4.8.1). A PMA MAD is the 24-byte common header, 40 reserved bytes
// and 192 bytes of attribute data from byte 64 (IBA 16.1.1); the encoders
// here write the attribute into that data area.
#pragma once

#include <array>
#include <cstdint>

#include "common/result.hpp"
#include "mad/bytes.hpp"

namespace openib::mad {

inline constexpr std::size_t kPmaDataOff = 64;     // IBA 16.1.1
inline constexpr std::size_t kPmaDataBytes = 192;
inline ConstBytes pma_data(ConstBytes m) { return m.subspan(kPmaDataOff, kPmaDataBytes); }
inline MutBytes pma_data(MutBytes m) { return m.subspan(kPmaDataOff, kPmaDataBytes); }

// ---- ClassPortInfo, IBA 13.4.8.1 (72 bytes) -----------------------------
inline constexpr std::size_t kClassPortInfoBytes = 72;
struct ClassPortInfo {
  std::uint8_t base_version = 1;        // 0, 8
  std::uint8_t class_version = 1;       // 8, 8
  std::uint16_t capability_mask = 0;    // 16, 16
  std::uint32_t capability_mask2 = 0;   // 32, 27
  std::uint8_t resp_time_value = 0;     // 59, 5
  std::array<std::uint8_t, 16> redirect_gid{};  // 64, 128
  std::uint8_t redirect_tc = 0;         // 192, 8
  std::uint8_t redirect_sl = 0;         // 200, 4
  std::uint32_t redirect_fl = 0;        // 204, 20
  std::uint16_t redirect_lid = 0;       // 224, 16
  std::uint16_t redirect_pkey = 0;      // 240, 16
  std::uint32_t redirect_qp = 0;        // 264, 24
  std::uint32_t redirect_qkey = 0;      // 288, 32
  std::array<std::uint8_t, 16> trap_gid{};      // 320, 128
  std::uint8_t trap_tc = 0;             // 448, 8
  std::uint8_t trap_sl = 0;             // 456, 4
  std::uint32_t trap_fl = 0;            // 460, 20
  std::uint16_t trap_lid = 0;           // 480, 16
  std::uint16_t trap_pkey = 0;          // 496, 16
  std::uint8_t trap_hl = 0;             // 512, 8
  std::uint32_t trap_qp = 0;            // 520, 24
  std::uint32_t trap_qkey = 0;          // 544, 32
  bool operator==(const ClassPortInfo&) const = default;
};
void encode_class_port_info(MutBytes out, const ClassPortInfo& v);
Result<ClassPortInfo> decode_class_port_info(ConstBytes in);

// ClassPortInfo:CapabilityMask bits. Bits 0-7 are common to all classes
// (IBA 13.4.8.1 Table 110); bits 8 and up are the PMA's (IBA 16.1.3.1,
// libibmad's IB_PM_* names).
namespace cpi_cap {
inline constexpr std::uint16_t kIsTrapSupported = 1u << 0;
inline constexpr std::uint16_t kIsNoticeSupported = 1u << 1;
}  // namespace cpi_cap
namespace pma_cap {
inline constexpr std::uint16_t kAllPortSelect = 1u << 8;            // PortSelect 0xFF
inline constexpr std::uint16_t kExtWidthSupported = 1u << 9;        // PortCountersExtended
inline constexpr std::uint16_t kExtWidthNoIetfSupported = 1u << 10; // ... without the IETF unicast/mcast counters
inline constexpr std::uint16_t kSamplesOnlySupported = 1u << 11;
inline constexpr std::uint16_t kPortCountersXmitWaitSupported = 1u << 12;
inline constexpr std::uint16_t kIsQp1DropSupported = 1u << 15;
// CapabilityMask2 bits (27 bits).
inline constexpr std::uint32_t kIsPmKeySupported = 1u << 0;
inline constexpr std::uint32_t kIsAdditionalPortCountersExtSupported = 1u << 1;
}  // namespace pma_cap

inline constexpr std::uint8_t kAllPorts = 0xFF;  // PortSelect value meaning "all ports"

// ---- PortCounters, IBA 16.1.3.5 (44 bytes used) ------------------------
// Error counters saturate at their width (all ones); PortXmitData and
// PortRcvData count 4-byte words (IBA 16.1.3.5: data octets / 4);
// PortXmitPkts/RcvPkts count packets; all 32-bit ones saturate at
// 0xFFFFFFFF. A Set with CounterSelect bit i set resets counter i to 0.
inline constexpr std::size_t kPortCountersBytes = 44;
namespace pc_select {  // CounterSelect bits, IBA 16.1.3.5 Table 211
inline constexpr std::uint16_t kSymbolError = 1u << 0;
inline constexpr std::uint16_t kLinkErrorRecovery = 1u << 1;
inline constexpr std::uint16_t kLinkDowned = 1u << 2;
inline constexpr std::uint16_t kRcvErrors = 1u << 3;
inline constexpr std::uint16_t kRcvRemotePhysErrors = 1u << 4;
inline constexpr std::uint16_t kRcvSwitchRelayErrors = 1u << 5;
inline constexpr std::uint16_t kXmitDiscards = 1u << 6;
inline constexpr std::uint16_t kXmitConstraintErrors = 1u << 7;
inline constexpr std::uint16_t kRcvConstraintErrors = 1u << 8;
inline constexpr std::uint16_t kLocalLinkIntegrityErrors = 1u << 9;
inline constexpr std::uint16_t kExcessiveBufferOverrunErrors = 1u << 10;
inline constexpr std::uint16_t kVl15Dropped = 1u << 11;
inline constexpr std::uint16_t kXmitData = 1u << 12;
inline constexpr std::uint16_t kRcvData = 1u << 13;
inline constexpr std::uint16_t kXmitPkts = 1u << 14;
inline constexpr std::uint16_t kRcvPkts = 1u << 15;
inline constexpr std::uint8_t kXmitWait = 1u << 0;  // CounterSelect2
}  // namespace pc_select
struct PortCounters {
  std::uint8_t port_select = 0;                  // 8, 8
  std::uint16_t counter_select = 0;              // 16, 16
  std::uint16_t symbol_error_counter = 0;        // 32, 16
  std::uint8_t link_error_recovery_counter = 0;  // 48, 8
  std::uint8_t link_downed_counter = 0;          // 56, 8
  std::uint16_t port_rcv_errors = 0;             // 64, 16
  std::uint16_t port_rcv_remote_physical_errors = 0;  // 80, 16
  std::uint16_t port_rcv_switch_relay_errors = 0;     // 96, 16
  std::uint16_t port_xmit_discards = 0;          // 112, 16
  std::uint8_t port_xmit_constraint_errors = 0;  // 128, 8
  std::uint8_t port_rcv_constraint_errors = 0;   // 136, 8
  std::uint8_t counter_select2 = 0;              // 144, 8
  std::uint8_t local_link_integrity_errors = 0;  // 152, 4
  std::uint8_t excessive_buffer_overrun_errors = 0;  // 156, 4
  std::uint16_t vl15_dropped = 0;                // 176, 16
  std::uint32_t port_xmit_data = 0;              // 192, 32 (words)
  std::uint32_t port_rcv_data = 0;               // 224, 32 (words)
  std::uint32_t port_xmit_pkts = 0;              // 256, 32
  std::uint32_t port_rcv_pkts = 0;               // 288, 32
  std::uint32_t port_xmit_wait = 0;              // 320, 32
  bool operator==(const PortCounters&) const = default;
};
void encode_port_counters(MutBytes out, const PortCounters& v);
Result<PortCounters> decode_port_counters(ConstBytes in);

// ---- PortCountersExtended, IBA 16.1.4.11 (72 bytes) --------------------
inline constexpr std::size_t kPortCountersExtBytes = 72;
namespace pce_select {  // CounterSelect bits
inline constexpr std::uint16_t kXmitData = 1u << 0;
inline constexpr std::uint16_t kRcvData = 1u << 1;
inline constexpr std::uint16_t kXmitPkts = 1u << 2;
inline constexpr std::uint16_t kRcvPkts = 1u << 3;
inline constexpr std::uint16_t kUnicastXmitPkts = 1u << 4;
inline constexpr std::uint16_t kUnicastRcvPkts = 1u << 5;
inline constexpr std::uint16_t kMulticastXmitPkts = 1u << 6;
inline constexpr std::uint16_t kMulticastRcvPkts = 1u << 7;
}  // namespace pce_select
struct PortCountersExtended {
  std::uint8_t port_select = 0;                 // 8, 8
  std::uint16_t counter_select = 0;             // 16, 16
  std::uint64_t port_xmit_data = 0;             // 64, 64 (words)
  std::uint64_t port_rcv_data = 0;              // 128, 64 (words)
  std::uint64_t port_xmit_pkts = 0;             // 192, 64
  std::uint64_t port_rcv_pkts = 0;              // 256, 64
  std::uint64_t port_unicast_xmit_pkts = 0;     // 320, 64
  std::uint64_t port_unicast_rcv_pkts = 0;      // 384, 64
  std::uint64_t port_multicast_xmit_pkts = 0;   // 448, 64
  std::uint64_t port_multicast_rcv_pkts = 0;    // 512, 64
  bool operator==(const PortCountersExtended&) const = default;
};
void encode_port_counters_ext(MutBytes out, const PortCountersExtended& v);
Result<PortCountersExtended> decode_port_counters_ext(ConstBytes in);

}  // namespace openib::mad
