// Pure codecs for simhca's command interface: the command entry (§5.2),
// each command's input (§6) and output, and the context formats (§7) of
// docs/simhca.md. Spans in, values out; no device state. Decoders return a
// Result whose Error::code is the §5.5 status to complete the command with
// (kBadInputLen, kBadParam), not an errno. The fuzz target
// test/fuzz/fuzz_simhca_command.cpp drives these directly.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <vector>

#include "common/result.hpp"
#include "sim/simhca/be.hpp"
#include "sim/simhca/registers.hpp"

namespace openib::simhca {

// §5.2 command entry.
struct Entry {
  uint16_t opcode = 0;
  uint16_t op_mod = 0;
  uint32_t token = 0;
  uint32_t input_length = 0;
  uint32_t output_length = 0;
  uint64_t input_mailbox = 0;
  uint64_t output_mailbox = 0;
  std::array<std::byte, kInlineSize> inline_input{};
  bool owner = false;
};
// Any 128 bytes decode (fields are just read); fewer is kBadInputLen.
Result<Entry> decode_entry(ByteView entry);
// The 8 bytes the device writes at entry offset 0x60: syndrome, status, flags.
std::array<std::byte, 8> encode_entry_tail(uint8_t status, uint32_t syndrome);

// §6: input and output layout sizes per opcode; nullopt for an unknown
// opcode. CREATE_MKEY's input is 32 + 8n (its minimum is 32).
std::optional<size_t> input_size(uint16_t opcode);
std::optional<size_t> output_size(uint16_t opcode);

// §16.4: a multicast GID on an Ethernet port: ff00::/8, or an
// IPv4-mapped 224.0.0.0/4 group (ethernet_port.cpp).
bool is_roce_multicast_gid(const std::array<uint8_t, 16>& g);

// §7.6 address vector.
struct Av {
  uint16_t dlid = 0;
  uint8_t sl = 0, src_path_bits = 0, static_rate = 0, port = 0, flags = 0, hop_limit = 0;
  uint32_t flow_label = 0;
  uint8_t sgid_index = 0, traffic_class = 0;
  std::array<uint8_t, 16> dgid{};
  std::array<uint8_t, 6> dmac{};  // an Ethernet port's destination MAC (§7.6)
  bool grh() const { return flags & 1; }
};
inline constexpr size_t kAvSize = 48;
Av decode_av(ByteView b);  // b: at least 48 bytes (short reads as 0)
void encode_av(std::span<std::byte> out, const Av& av);

// §7.7 QP attributes.
struct QpAttrs {
  uint8_t state = 0, cur_state = 0, port = 0, path_mtu = 0;
  uint16_t pkey_index = 0;
  uint8_t access = 0, sqd_notify = 0;  // sqd_notify: en_sqd_async_notify / sq_draining
  uint32_t qkey = 0, dest_qpn = 0, rq_psn = 0, sq_psn = 0;
  uint8_t timeout = 0, retry_cnt = 0, rnr_retry = 0, min_rnr_timer = 0;
  uint8_t max_rd_atomic = 0, max_dest_rd_atomic = 0;
  Av av;
};
inline constexpr size_t kQpAttrsSize = 80;
QpAttrs decode_qp_attrs(ByteView b);
void encode_qp_attrs(std::span<std::byte> out, const QpAttrs& a);

// §6.10 CREATE_QP input (also the second half of QUERY_QP's output).
struct QpCreate {
  uint8_t type = 0, port = 0, flags = 0;
  uint32_t pdn = 0, send_cqn = 0, recv_cqn = 0, srqn = 0, uar = 0;
  uint64_t sq_iova = 0, rq_iova = 0, dbr_iova = 0;
  uint8_t log_sq_size = 0, log_sq_stride = 0, log_rq_size = 0, log_rq_stride = 0;
  bool use_srq() const { return flags & 1; }
};
inline constexpr uint8_t kQpFlagUseSrq = 0x1, kQpFlagSigAll = 0x2;
Result<QpCreate> decode_create_qp(ByteView in);
void encode_create_qp(std::span<std::byte> out, const QpCreate& c);

struct ModifyQp {
  uint32_t qpn = 0;
  uint32_t mask = 0;
  QpAttrs attrs;
};
Result<ModifyQp> decode_modify_qp(ByteView in);

// §6.4
struct CreateEq {
  uint64_t ring_iova = 0, event_mask = 0;
  uint8_t log_size = 0;
  uint16_t vector = 0;
  uint32_t uar = 0;
};
Result<CreateEq> decode_create_eq(ByteView in);

// §6.5
struct CreateCq {
  uint64_t ring_iova = 0, dbr_iova = 0;
  uint8_t log_size = 0;
  uint32_t eqn = 0, uar = 0;
};
Result<CreateCq> decode_create_cq(ByteView in);

// §6.9
struct CreateSrq {
  uint64_t ring_iova = 0, dbr_iova = 0;
  uint8_t log_size = 0, log_stride = 0;
  uint32_t pdn = 0, limit = 0, uar = 0;
};
Result<CreateSrq> decode_create_srq(ByteView in);

// §6.7
inline constexpr uint8_t kMkeyPageListByAddress = 1;  // `flags` bit 0
struct CreateMkey {
  uint32_t pdn = 0, access = 0;
  uint64_t start_va = 0, length = 0;
  uint8_t log_page_size = 0;
  uint8_t flags = 0;
  uint32_t num_pages = 0;
  uint64_t page_list_iova = 0;  // flags & kMkeyPageListByAddress: the translation table
  std::vector<uint64_t> pages;  // inline: read here; by address: read by the command (§6.7)
};
// Reads an inline page list only up to max_pages (more is kBadParam); a
// page list by address is left to the caller (decode_page_list).
Result<CreateMkey> decode_create_mkey(ByteView in, uint32_t max_pages);
// §6.7 translation table: `n` big-endian 8-byte page IOVAs.
std::vector<uint64_t> decode_page_list(ByteView table, uint32_t n);

// §6.8
struct CreateAh {
  uint32_t pdn = 0;
  Av av;
};
Result<CreateAh> decode_create_ah(ByteView in);

// §6.11 ATTACH_MCG / DETACH_MCG input (24 bytes).
struct McgMember {
  uint32_t qpn = 0;
  uint16_t reserved = 0;  // 0x04 (must be 0: the command checks)
  uint16_t mlid = 0;
  std::array<uint8_t, 16> mgid{};
};
Result<McgMember> decode_mcg(ByteView in);

// §6.3
struct SetPort {
  uint8_t port = 0, select = 0, state = 0, lmc = 0;
  uint16_t lid = 0, sm_lid = 0;
  uint8_t active_mtu = 0, sm_sl = 0;
  uint16_t pkey0 = 0;
  uint64_t gid_prefix = 0;
  uint8_t select2 = 0;                 // 0x0c: bit 0 capability mask (needs 32 bytes of input)
  uint32_t cap_set = 0, cap_clear = 0;  // 0x18, 0x1c
};
inline constexpr uint8_t kSel2CapMask = 1;
inline constexpr uint8_t kSelState = 1, kSelLid = 2, kSelSmLid = 4, kSelLmc = 8, kSelMtu = 16,
                         kSelGidPrefix = 32, kSelSmSl = 64, kSelPkey = 128;
Result<SetPort> decode_set_port(ByteView in);

// §6.12: the entries of a port's GID table (index 0 included).
inline constexpr uint16_t kGidTableLen = 16;

struct PortInfo {
  uint8_t state = 1, phys_state = 5;
  uint16_t lid = 0, sm_lid = 0;
  uint8_t lmc = 0, sm_sl = 0, max_mtu = 5, active_mtu = 5, active_width = 2, active_speed = 4;
  uint16_t pkey_table_len = 1, gid_table_len = kGidTableLen;
  uint8_t link_layer = kLinkLayerInfiniBand;  // §6.3 0x26
  uint64_t gid_prefix = 0xfe80000000000000ull, port_guid = 0;
  uint32_t cap_flags = 0;
  uint16_t pkey0 = 0xffff;
  uint32_t qkey_violations = 0, pkey_violations = 0;
};
Bytes encode_port_info(const PortInfo& p);   // 48 bytes

// §6.12 QUERY_GID input and output, SET_GID input.
struct GidRef {
  uint8_t port = 0;
  uint16_t index = 0;
};
Result<GidRef> decode_query_gid(ByteView in);
struct GidEntry {
  uint8_t type = kGidTypeNone;
  std::array<uint8_t, 16> gid{};
  bool operator==(const GidEntry&) const = default;
};
Bytes encode_gid_entry(const GidEntry& e);  // 20 bytes
struct SetGid {
  GidRef ref;
  GidEntry entry;  // type kGidTypeNone: remove
};
Result<SetGid> decode_set_gid(ByteView in);
Bytes encode_caps(const Caps& c);            // 80 bytes

// A 4-byte input holding one number (qpn, cqn, ...), and two for ARM_SRQ.
Result<uint32_t> decode_number(ByteView in);
Result<std::array<uint32_t, 2>> decode_two_numbers(ByteView in);

}  // namespace openib::simhca
