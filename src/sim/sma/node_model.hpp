// The node model the SMA/PMA engine serves (docs/mad.md "Engine"): what an
// emulated switch (ibfabric) or CA (simhca) implements so that SMPs and
// PerfMgmt GMPs can be answered. Small and explicit: the engine does the
// wire formats, the directed-route algorithm, M_Key checks, validation of
// Set values and status codes; the model stores state and reacts (link
// state machine, forwarding tables, events).
//
// Port numbering: a switch has its management port 0 and external ports
// 1..num_ports; a CA has ports 1..num_ports. Every call gets a port the
// engine has range-checked.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "mad/mad.hpp"
#include "mad/pma_attrs.hpp"
#include "mad/sma_attrs.hpp"

namespace openib::sim::sma {

using Status = std::uint16_t;  // a MAD status (mad::status::k*), kOk on success

struct NodeIdentity {
  mad::NodeType type = mad::NodeType::kCa;
  std::uint8_t num_ports = 1;
  std::uint64_t node_guid = 0;
  std::uint64_t system_image_guid = 0;
  std::uint16_t partition_cap = 1;   // P_Key table entries per port
  std::uint16_t device_id = 0;
  std::uint32_t revision = 0;
  std::uint32_t vendor_id = 0;       // 24-bit OUI
  std::string description;           // NodeDescription, up to 64 bytes
};

// Per-port traffic and error counters the node keeps for the PMA. 64-bit,
// never reset by the node itself; the PMA's Set resets through
// NodeModel::reset_counters. Data counters are in BYTES (the PMA divides by
// 4 to report words, IBA 16.1.3.5: bytes from the LRH through the VCRC/
// ICRC; count what goes on the cable). Packet counters count packets.
struct PortCounterValues {
  std::uint64_t symbol_errors = 0;
  std::uint64_t link_error_recovery = 0;
  std::uint64_t link_downed = 0;
  std::uint64_t rcv_errors = 0;
  std::uint64_t rcv_remote_physical_errors = 0;
  std::uint64_t rcv_switch_relay_errors = 0;
  std::uint64_t xmit_discards = 0;
  std::uint64_t xmit_constraint_errors = 0;
  std::uint64_t rcv_constraint_errors = 0;
  std::uint64_t local_link_integrity_errors = 0;
  std::uint64_t excessive_buffer_overrun_errors = 0;
  std::uint64_t vl15_dropped = 0;
  std::uint64_t xmit_wait = 0;
  std::uint64_t xmit_bytes = 0;
  std::uint64_t rcv_bytes = 0;
  std::uint64_t xmit_pkts = 0;
  std::uint64_t rcv_pkts = 0;
  std::uint64_t unicast_xmit_pkts = 0;
  std::uint64_t unicast_rcv_pkts = 0;
  std::uint64_t multicast_xmit_pkts = 0;
  std::uint64_t multicast_rcv_pkts = 0;
};

// Which counters a PMA Set resets: one bit per PortCounterValues field.
namespace counter_bit {
inline constexpr std::uint32_t kSymbolErrors = 1u << 0;
inline constexpr std::uint32_t kLinkErrorRecovery = 1u << 1;
inline constexpr std::uint32_t kLinkDowned = 1u << 2;
inline constexpr std::uint32_t kRcvErrors = 1u << 3;
inline constexpr std::uint32_t kRcvRemotePhysicalErrors = 1u << 4;
inline constexpr std::uint32_t kRcvSwitchRelayErrors = 1u << 5;
inline constexpr std::uint32_t kXmitDiscards = 1u << 6;
inline constexpr std::uint32_t kXmitConstraintErrors = 1u << 7;
inline constexpr std::uint32_t kRcvConstraintErrors = 1u << 8;
inline constexpr std::uint32_t kLocalLinkIntegrityErrors = 1u << 9;
inline constexpr std::uint32_t kExcessiveBufferOverrunErrors = 1u << 10;
inline constexpr std::uint32_t kVl15Dropped = 1u << 11;
inline constexpr std::uint32_t kXmitBytes = 1u << 12;
inline constexpr std::uint32_t kRcvBytes = 1u << 13;
inline constexpr std::uint32_t kXmitPkts = 1u << 14;
inline constexpr std::uint32_t kRcvPkts = 1u << 15;
inline constexpr std::uint32_t kXmitWait = 1u << 16;
inline constexpr std::uint32_t kUnicastXmitPkts = 1u << 17;
inline constexpr std::uint32_t kUnicastRcvPkts = 1u << 18;
inline constexpr std::uint32_t kMulticastXmitPkts = 1u << 19;
inline constexpr std::uint32_t kMulticastRcvPkts = 1u << 20;
}  // namespace counter_bit
// Apply a reset mask to a value struct (helper for models).
void reset_counter_values(PortCounterValues& v, std::uint32_t mask);

class NodeModel {
 public:
  virtual ~NodeModel() = default;

  virtual const NodeIdentity& identity() const = 0;

  // GUID of `port` for NodeInfo:PortGUID and GUIDInfo index 0. Default: a
  // switch has one GUID for port 0 (= node GUID, IBA 14.2.5.3); a CA port
  // is node GUID + port number (the project's convention, issue 5).
  virtual std::uint64_t port_guid(std::uint8_t port) const {
    const auto& id = identity();
    return id.type == mad::NodeType::kSwitch ? id.node_guid : id.node_guid + port;
  }

  // ---- PortInfo (IBA 14.2.5.6): every port, switch port 0 included -----
  // The current PortInfo of `port` (LocalPortNum is filled in by the engine).
  virtual mad::PortInfo port_info(std::uint8_t port) const = 0;
  // Apply a Set. The engine has merged the writable fields into the current
  // value and validated them (PortState transition Down/Armed/Active as IBA
  // 14.2.5.6 Table 147 allows, PhysState, LMC, NeighborMTU <= MTUCap,
  // OperationalVLs <= VLCap, enabled widths/speeds), and resolved
  // "no change" codes, so `next` is the complete new value: the model
  // stores it and runs its link state machine (e.g. port_state kDown:
  // retrain, come back in Init; kArmed/kActive: start forwarding). Return
  // status::kOk, or status::kInvalidAttrValue to refuse (nothing changes).
  virtual Status set_port_info(std::uint8_t port, const mad::PortInfo& next) = 0;

  // ---- tables; std::nullopt = not supported -> the engine answers
  // status::kMethodAttrUnsupported (or kInvalidAttrValue for a block beyond
  // the table). ----
  // P_KeyTable (IBA 14.2.5.7) of `port`, `block` of 32.
  virtual std::optional<mad::PKeyBlock> pkey_block(std::uint8_t port, std::uint16_t block) const = 0;
  virtual Status set_pkey_block(std::uint8_t port, std::uint16_t block, const mad::PKeyBlock& v) = 0;
  // SLtoVLMappingTable (IBA 14.2.5.8). CA: in_port 0, out_port = the port.
  // Switch: from the modifier (in 15:8, out 7:0).
  virtual std::optional<mad::SlToVlTable> sl2vl(std::uint8_t in_port, std::uint8_t out_port) const {
    (void)in_port; (void)out_port; return std::nullopt;
  }
  virtual Status set_sl2vl(std::uint8_t in_port, std::uint8_t out_port, const mad::SlToVlTable& v) {
    (void)in_port; (void)out_port; (void)v; return mad::status::kMethodAttrUnsupported;
  }
  // VLArbitrationTable (IBA 14.2.5.9): `part` 1..4 from modifier bits 31:16.
  virtual std::optional<mad::VlArbBlock> vlarb(std::uint8_t port, std::uint8_t part) const {
    (void)port; (void)part; return std::nullopt;
  }
  virtual Status set_vlarb(std::uint8_t port, std::uint8_t part, const mad::VlArbBlock& v) {
    (void)port; (void)part; (void)v; return mad::status::kMethodAttrUnsupported;
  }
  // GUIDInfo (IBA 14.2.5.5), CA ports (and switch port 0 if offered).
  virtual std::optional<mad::GuidBlock> guid_block(std::uint8_t port, std::uint16_t block) const {
    (void)port; (void)block; return std::nullopt;
  }
  virtual Status set_guid_block(std::uint8_t port, std::uint16_t block, const mad::GuidBlock& v) {
    (void)port; (void)block; (void)v; return mad::status::kMethodAttrUnsupported;
  }

  // ---- switches only (IBA 14.2.5.4, .10, .12) ----
  virtual std::optional<mad::SwitchInfo> switch_info() const { return std::nullopt; }
  // The engine passes only the SM-writable fields changed (LinearFDBTop,
  // DefaultPort, DefaultMulticast*, LifeTimeValue, PortStateChange is
  // cleared when the Set writes 1, MulticastFDBTop...): `next` is the new value.
  virtual Status set_switch_info(const mad::SwitchInfo& next) { (void)next; return mad::status::kMethodAttrUnsupported; }
  virtual std::optional<mad::LftBlock> lft_block(std::uint16_t block) const { (void)block; return std::nullopt; }
  virtual Status set_lft_block(std::uint16_t block, const mad::LftBlock& v) {
    (void)block; (void)v; return mad::status::kMethodAttrUnsupported;
  }
  // MFT: `position` is which 16 ports the masks cover (modifier 31:28).
  virtual std::optional<mad::MftBlock> mft_block(std::uint16_t block, std::uint8_t position) const {
    (void)block; (void)position; return std::nullopt;
  }
  virtual Status set_mft_block(std::uint16_t block, std::uint8_t position, const mad::MftBlock& v) {
    (void)block; (void)position; (void)v; return mad::status::kMethodAttrUnsupported;
  }

  // ---- SM presence: SMInfo requests go to the node's QP0 consumer (an SM
  // running on this node) when this returns true; else they are answered
  // kMethodAttrUnsupported.
  virtual bool has_sm() const { return false; }

  // ---- PMA (IBA 16.1) ----
  virtual std::optional<PortCounterValues> counters(std::uint8_t port) const { (void)port; return std::nullopt; }
  virtual void reset_counters(std::uint8_t port, std::uint32_t counter_bits) { (void)port; (void)counter_bits; }
};

}  // namespace openib::sim::sma
