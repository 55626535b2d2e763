// simhca's ports (docs/simhca.md §12.7, §14): what the device keeps per
// physical port — the QUERY_PORT view (§6.3), the fields a subnet manager
// sets through PortInfo and the other SMA attributes (§14, IBA 14.2.5), the
// PMA's counters (§15, IBA 16.1.3.5) and the port's cable end.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <optional>
#include <vector>

#include "mad/sma_attrs.hpp"
#include "sim/cable/link.hpp"
#include "sim/simhca/codec.hpp"
#include "sim/sma/node_model.hpp"

namespace openib::simhca {

inline constexpr uint8_t kMaxPorts = 2;  // §13 --ports
inline constexpr uint32_t kGsiQkey = 0x80010000;  // IBA 13.5.3.1: QP1's well-known Q_Key
inline constexpr uint16_t kPermissiveLid = 0xffff;  // IBA 4.1.5
static_assert(kGidTableLen <= 16, "Port::gids_used has a bit per entry");

// §14.2 PortInfo:CapabilityMask of a simhca port (IBA 14.2.5.6 Table 146):
// IsSLMappingSupported (6), IsSystemImageGUIDSupported (11),
// IsCommunicationManagementSupported (16), IsClientReregistrationSupported
// (25). The driver adds IsSM (1) and others with SET_PORT (§6.3).
inline constexpr uint32_t kPortCapFlags = (1u << 6) | (1u << 11) | (1u << 16) | (1u << 25);
// §6.3 SET_PORT: the CapabilityMask bits the driver sets and clears for the
// software it runs: IsSM (1), IsSMDisabled (10), IsCommunicationManagement
// (16), IsSNMPTunneling (17), IsDeviceManagement (19), IsVendorClass (20),
// IsBootManagement (23).
inline constexpr uint32_t kDriverCapFlags =
    (1u << 1) | (1u << 10) | (1u << 16) | (1u << 17) | (1u << 19) | (1u << 20) | (1u << 23);

// IBA 9.6.1.1 / 10.9.3: two P_Keys match when their low 15 bits are equal
// and not 0, and at least one of them is a full member (bit 15).
constexpr bool pkey_matches(uint16_t a, uint16_t b) {
  return (a & 0x7fff) != 0 && ((a ^ b) & 0x7fff) == 0 && ((a | b) & 0x8000) != 0;
}

// §6.10: the QPNs of a port's QP0 (SMI) and QP1 (GSI) inside the device;
// on the wire they are always 0 and 1. Port 1: 0 and 1; port 2: 2 and 3.
constexpr uint32_t special_qpn(uint8_t port, bool gsi) { return 2u * (port - 1u) + (gsi ? 1u : 0u); }

// IBA 14.2.5.6 PortInfo:PortState and PortPhysicalState values.
enum PortState : uint8_t { kPsNoChange = 0, kPsDown = 1, kPsInit = 2, kPsArmed = 3, kPsActive = 4 };
enum PhysState : uint8_t { kPhysSleep = 1, kPhysPolling = 2, kPhysDisabled = 3, kPhysLinkUp = 5 };

// §14.2 PortInfo:LinkSpeedSupported (SDR, DDR, QDR) and
// LinkWidthSupported (1x, 4x) of a simhca port.
inline constexpr uint8_t kLinkSpeedSupported = 7, kLinkWidthSupported = 3;
// §14.2: VLCap (VL0 only) and the VLArbitration table capacities.
inline constexpr uint8_t kVlCap = 1, kVlArbCap = 8;

// §14: what the SMA keeps of a port beyond QUERY_PORT's view: the
// PortInfo fields a subnet manager writes that the data path does not use
// (M_Key and its protection, lease, timeouts, enables, the violation
// counters' 16-bit views...), and the SLtoVL and VLArbitration tables.
struct SmaPortState {
  mad::PortInfo pi;
  mad::SlToVlTable sl2vl{};                 // IBA 14.2.5.8: every SL to VL0
  std::array<mad::VlArbBlock, 4> vlarb{};   // IBA 14.2.5.9, parts 1..4 of the modifier
  // IBA 14.2.4.2: the M_Key lease timer, running from a violation until an
  // SMP with the right M_Key arrives; at expiry the protection lapses.
  std::optional<std::chrono::steady_clock::time_point> lease_end;
};

struct Port {
  PortInfo info;       // §6.3 QUERY_PORT
  // §6.12 the GID table's entries 1 and up as SET_GID wrote them (entry 0
  // is the port's own, gid_prefix : port_guid, and is not stored).
  std::array<GidEntry, kGidTableLen> gids{};
  // Bit i: gids[i] holds an entry (SET_GID keeps it; a table emptied
  // clears it): what own_gid() scans on every RoCEv2 frame.
  uint16_t gids_used = 0;
  // Entry 0 as Hca::gid_entry() makes it, kept with the fields it is made
  // of and made again when one of them differs (SET_PORT, the SMA and
  // reset write PortInfo whole): per packet, a compare instead of 16
  // bytes rebuilt (docs/performance.md "Host ibds").
  struct Gid0 {
    uint64_t prefix = 0, guid = 0;
    uint8_t link_layer = 0;
    bool made = false;
    GidEntry entry;
  };
  mutable Gid0 gid0;
  SmaPortState sma;    // §14
  sim::sma::PortCounterValues pma;  // §15 (data counters in octets)
  sim::Link* link = nullptr;  // §12.7: the cable end (nullptr: no cable)
  std::array<uint8_t, 6> mac{};  // §16.1: an Ethernet port's MAC
  bool pulled = false;        // §14.3: the far end said the cable is pulled (Hca::set_cable_light)
  std::vector<uint32_t> raw_qps;  // §16.5: the port's raw Ethernet QPs, oldest first
  // A cable that carries light: the link can train.
  bool can_train() const { return link && !pulled; }
  // §6.12: GID entry 0, gid_prefix : port_guid (IBA 4.1.1; §16.1 on
  // Ethernet: the link-local GID), of type RoCEv2 on an Ethernet port.
  const GidEntry& own_gid0() const {
    if (!gid0.made || gid0.prefix != info.gid_prefix || gid0.guid != info.port_guid ||
        gid0.link_layer != info.link_layer) {
      gid0 = {info.gid_prefix, info.port_guid, info.link_layer, true, {}};
      gid0.entry.type = info.link_layer == kLinkLayerEthernet ? kGidTypeRoceV2 : kGidTypeIb;
      for (size_t i = 0; i < 8; ++i) {
        gid0.entry.gid[i] = static_cast<uint8_t>(info.gid_prefix >> (56 - 8 * i));
        gid0.entry.gid[8 + i] = static_cast<uint8_t>(info.port_guid >> (56 - 8 * i));
      }
    }
    return gid0.entry;
  }
  // §6.12: the entry a path's sgid_index names, or entry 0 when that one
  // is empty (removed since the AH or the QP's path was made).
  const GidEntry& source_gid(uint16_t index) const {
    const bool stored = index > 0 && index < info.gid_table_len && index < kGidTableLen &&
                        gids[index].type != kGidTypeNone;
    return stored ? gids[index] : own_gid0();
  }
  // Empties entries 1 and up.
  void clear_gids() {
    gids = {};
    gids_used = 0;
  }
};

}  // namespace openib::simhca
