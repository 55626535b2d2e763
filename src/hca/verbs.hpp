// Verbs-level types of the HCA driver (IBA chapter 11 vocabulary) and the
// pure codecs that turn them into docs/simhca.md command inputs and back.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "common/qp_attr.hpp"
#include "common/result.hpp"

namespace openib::hca {

using Bytes = std::vector<std::byte>;

// What a device can do, in device-neutral words: the driver decodes them
// from the device's own flags (decode_caps); ibd and its clients read
// these, never those.
struct DeviceFeatures {
  bool rc = false, uc = false, ud = false, srq = false;
  bool atomics = false;       // RC atomics, atomic among this device's own accesses (IBV_ATOMIC_HCA)
  bool data_path = false;     // work requests are executed
  bool port_events = false;   // port changes raise Event::kPortState and the like (IBA 11.6.3)
  bool ud_multicast = false;  // attach_mcast_async (IBA 11.3.1)
};

// §6.1 QUERY_DEVICE_CAP
struct DeviceCaps {
  uint32_t max_qp = 0, max_cq = 0, max_eq = 0, max_srq = 0, max_pd = 0;
  uint32_t max_mkey = 0, max_ah = 0, max_uar = 0;
  uint8_t log_max_qp_wr = 0, log_max_cqe = 0, log_max_eqe = 0, log_max_srq_wr = 0;
  uint16_t max_sge = 0, max_inline = 0;
  uint8_t num_ports = 0, max_rd_atomic = 0, max_dest_rd_atomic = 0, num_msix = 0;
  // cap_flags: §6.1 `device_cap_flags` as the device has them, for the
  // driver and its tests; `features` says the same in neutral words.
  uint32_t max_mkey_pages = 0, max_mailbox = 0, cap_flags = 0;
  DeviceFeatures features;
  uint64_t node_guid = 0, sys_image_guid = 0;
  uint32_t max_msg_size = 0;
  uint16_t vendor_part_id = 0;
  uint8_t local_ca_ack_delay = 0;
};
DeviceCaps decode_caps(std::span<const std::byte> out);

// §6.3 QUERY_PORT / SET_PORT
// The port's link layer (§6.3 `link_layer`; enum ibv_port_attr.link_layer's
// values): what the port speaks, and so what it can do (port_caps.hpp).
// 0 (a device that does not say) is InfiniBand, as in libibverbs.
enum class LinkLayer : uint8_t { kUnspecified = 0, kInfiniBand = 1, kEthernet = 2 };
struct PortAttr {
  uint8_t state = 0, phys_state = 0;
  uint16_t lid = 0, sm_lid = 0;
  uint8_t lmc = 0, sm_sl = 0, max_mtu = 0, active_mtu = 0, active_width = 0, active_speed = 0;
  uint16_t pkey_table_len = 0, gid_table_len = 0;
  uint64_t gid_prefix = 0, port_guid = 0;
  uint32_t cap_flags = 0;
  uint16_t pkey0 = 0;
  uint32_t qkey_violations = 0, pkey_violations = 0;
  LinkLayer link_layer = LinkLayer::kInfiniBand;
};
PortAttr decode_port(std::span<const std::byte> out);
enum PortState : uint8_t { kPortDown = 1, kPortInit = 2, kPortArmed = 3, kPortActive = 4 };

struct PortSetup {  // only the fields set are changed
  std::optional<uint8_t> state, lmc, active_mtu, sm_sl;
  std::optional<uint16_t> lid, sm_lid;
  std::optional<uint64_t> gid_prefix;
  // PortInfo:CapabilityMask bits the host's software announces (IsSM, ...).
  std::optional<uint32_t> cap_set, cap_clear;
};
Bytes encode_set_port(uint8_t port, const PortSetup& s);

// §6.12 GID table: an entry is a GID and its type (IB on an InfiniBand
// port; RoCEv2, a GID from an IP address, on an Ethernet one).
enum class GidType : uint8_t { kIb = 1, kRoceV2 = 2 };
struct GidEntry {
  std::array<uint8_t, 16> gid{};
  GidType type = GidType::kIb;
  bool operator==(const GidEntry&) const = default;
};
const char* gid_type_name(GidType t);
Bytes encode_query_gid(uint8_t port, uint16_t index);
// QUERY_GID's output: the entry, or nullopt for an empty one; EPROTO for a
// type this driver does not know.
Result<std::optional<GidEntry>> decode_gid_entry(std::span<const std::byte> out);
// SET_GID's input: the entry written, or removed (nullopt).
Bytes encode_set_gid(uint8_t port, uint16_t index, const std::optional<GidEntry>& e);

// §7.6 address vector: the daemon's one (common/qp_attr.hpp).
using AddressVector = verbs::AddressVector;
void encode_av(std::span<std::byte> out, const AddressVector& av);
AddressVector decode_av(std::span<const std::byte> in);

// §7.7, §8: QP types; states, attribute mask (enum ibv_qp_attr_mask
// values), access flags (§6.7, §7.7) and the attributes are the daemon's
// one set (common/qp_attr.hpp).
// kRaw: the raw Ethernet QP of an Ethernet port (§16.5), given its port at creation.
enum class QpType : uint8_t { kRc = 0, kUc = 1, kUd = 2, kSmi = 3, kGsi = 4, kRaw = 5 };
using verbs::QpState;
namespace qp_attr = verbs::qp_attr;
using verbs::kAccessLocalWrite;
using verbs::kAccessRemoteAtomic;
using verbs::kAccessRemoteRead;
using verbs::kAccessRemoteWrite;
using QpAttr = verbs::QpAttr;
Bytes encode_modify_qp(uint32_t qpn, uint32_t mask, const QpAttr& a);
QpAttr decode_qp_attr(std::span<const std::byte> in);

// §6.10 CREATE_QP input
struct QpCreateParams {
  QpType type = QpType::kRc;
  uint8_t port = 0;  // SMI/GSI/RAW only
  bool sig_all = false;
  uint32_t pdn = 0, send_cqn = 0, recv_cqn = 0, uar = 0;
  std::optional<uint32_t> srqn;
  uint64_t sq_iova = 0, rq_iova = 0, dbr_iova = 0;
  uint8_t log_sq_size = 0, log_sq_stride = 6, log_rq_size = 0, log_rq_stride = 5;
};
Bytes encode_create_qp(const QpCreateParams& p);
QpCreateParams decode_create_qp(std::span<const std::byte> in);

// §7.1 - §7.5 contexts
struct EqContext {
  uint64_t ring_iova = 0, event_mask = 0;
  uint8_t log_size = 0;
  bool armed = false;
  uint16_t vector = 0;
  uint32_t uar = 0, producer = 0, consumer = 0, overruns = 0;
};
EqContext decode_eq_context(std::span<const std::byte> out);

struct CqContext {
  uint64_t ring_iova = 0, dbr_iova = 0;
  uint8_t log_size = 0, arm = 0, state = 0;
  uint32_t eqn = 0, uar = 0, producer = 0, consumer = 0, arm_sn = 0, users = 0;
};
CqContext decode_cq_context(std::span<const std::byte> out);

struct SrqContext {
  uint64_t ring_iova = 0, dbr_iova = 0;
  uint8_t log_size = 0, log_stride = 0, state = 0;
  bool armed = false;
  uint32_t pdn = 0, limit = 0, uar = 0, users = 0;
};
SrqContext decode_srq_context(std::span<const std::byte> out);

// §6.7 CREATE_MKEY `flags` bit 0: the page list is in a translation table
// the device reads by DMA, not inline.
inline constexpr uint8_t kMkeyPageListByAddress = 1;
struct MkeyParams {
  uint32_t pdn = 0, access = 0;
  uint64_t start_va = 0, length = 0;
  uint8_t log_page_size = 12;
  std::vector<uint64_t> pages;  // page IOVAs
};
// §6.7 CREATE_MKEY with the page list inline (32 + 8n bytes), or, given
// the IOVA of a translation table holding it (encode_page_list), by
// address (40 bytes).
Bytes encode_create_mkey(const MkeyParams& p, std::optional<uint64_t> page_list_iova = std::nullopt);
// §6.7 translation table: the page IOVAs, 8 big-endian bytes each, into
// `out` (at least 8 × pages.size() bytes).
void encode_page_list(const std::vector<uint64_t>& pages, std::span<std::byte> out);
struct MkeyContext {
  uint32_t pdn = 0, access = 0;
  uint64_t start_va = 0, length = 0;
  uint8_t log_page_size = 0;
  uint32_t num_pages = 0, key = 0;
};
MkeyContext decode_mkey_context(std::span<const std::byte> out);

// §6.11 ATTACH_MCG / DETACH_MCG input (24 bytes): the QP and the group
// (IBA 11.3.1.1, 11.3.1.2: Attach/Detach QP to/from multicast group).
struct McgMember {
  uint32_t qpn = 0;
  std::array<uint8_t, 16> mgid{};
  uint16_t mlid = 0;
};
Bytes encode_mcg(const McgMember& m);
McgMember decode_mcg(std::span<const std::byte> in);

// One big-endian 32-bit number (the input of most destroy/query commands).
Bytes encode_u32(uint32_t v);
Bytes encode_u32x2(uint32_t a, uint32_t b);

}  // namespace openib::hca
