// The Subnet Administration class (IBA 15.2): its MAD layout after the
// common and RMPP headers (SA header: SM_Key, AttributeOffset,
// ComponentMask, IBA 15.2.1.1), its attribute IDs (IBA 15.2.5), its
// class-specific status codes (IBA 15.2.1.1 Table 187: MAD status bits
// 15:8), and helpers to build a request MAD and to walk the records of an
// answer (one record in a GetResp, AttributeOffset-spaced records in a
// reassembled GetTableResp). Pure: no I/O. The common header, RMPP and
// ClassPortInfo codecs are src/mad's.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "common/result.hpp"
#include "mad/bytes.hpp"

namespace openib::sa {

using mad::ByteVec;
using mad::ConstBytes;
using mad::Mad;
using mad::MutBytes;

// A GID in wire order (IBA 4.1.1): 64-bit subnet prefix then 64-bit GUID.
using Gid = std::array<std::uint8_t, 16>;
Gid make_gid(std::uint64_t prefix, std::uint64_t guid);
std::uint64_t gid_prefix(const Gid& g);
std::uint64_t gid_guid(const Gid& g);
// A GID field at byte offset `off` of a record (bounded like mad::put8/get8).
void put_gid(MutBytes out, std::size_t off, const Gid& g);
Gid get_gid(ConstBytes in, std::size_t off);

// ---- SA MAD layout, IBA 15.2.1.1 ----------------------------------------
//   0..23 common header, 24..35 RMPP header, 36..43 SM_Key,
//   44..45 AttributeOffset (in 8-byte words), 46..47 reserved,
//   48..55 ComponentMask, 56..255 SA data (200 bytes).
inline constexpr std::size_t kSaHeaderOff = 36;
inline constexpr std::size_t kSaHeaderBytes = 20;
inline constexpr std::size_t kSaDataOff = 56;
inline constexpr std::size_t kSaDataBytes = 200;

struct SaHeader {
  std::uint64_t sm_key = 0;
  std::uint16_t attr_offset = 0;  // record stride in 8-byte words (GetTable answers)
  std::uint64_t comp_mask = 0;    // bit i: component i of the record is a selector
  bool operator==(const SaHeader&) const = default;
};
// Decodes bytes 36..55 of `mad`; EPROTO if it holds fewer than 56 bytes.
Result<SaHeader> decode_sa_header(ConstBytes mad);
// Writes bytes 36..55 of `mad` (reserved bytes 46..47 as 0).
void encode_sa_header(MutBytes mad, const SaHeader& h);

// AttributeOffset for a record of `record_bytes` (IBA 15.2.1.1: the record
// size rounded up to 8 bytes, in 8-byte words).
constexpr std::uint16_t attr_offset_for(std::size_t record_bytes) {
  return static_cast<std::uint16_t>((record_bytes + 7) / 8);
}

// ---- SA attribute IDs, IBA 15.2.5 (Table 193) ----------------------------
// (ClassPortInfo, Notice and InformInfo, common to classes, are mad::attr's.)
namespace attr {
inline constexpr std::uint16_t kNodeRecord = 0x0011;
inline constexpr std::uint16_t kPortInfoRecord = 0x0012;
inline constexpr std::uint16_t kSmInfoRecord = 0x0018;
inline constexpr std::uint16_t kInformInfoRecord = 0x00F3;
inline constexpr std::uint16_t kLinkRecord = 0x0020;
inline constexpr std::uint16_t kGuidInfoRecord = 0x0030;
inline constexpr std::uint16_t kServiceRecord = 0x0031;
inline constexpr std::uint16_t kPKeyTableRecord = 0x0033;
inline constexpr std::uint16_t kPathRecord = 0x0035;
inline constexpr std::uint16_t kMcMemberRecord = 0x0038;
inline constexpr std::uint16_t kMultiPathRecord = 0x003A;
}  // namespace attr

// ---- SA status, IBA 15.2.1.1 Table 187: the code in MAD status bits 15:8 -
namespace status {
inline constexpr std::uint8_t kNoResources = 1;
inline constexpr std::uint8_t kReqInvalid = 2;
inline constexpr std::uint8_t kNoRecords = 3;
inline constexpr std::uint8_t kTooManyRecords = 4;
inline constexpr std::uint8_t kReqInvalidGid = 5;
inline constexpr std::uint8_t kReqInsufficientComponents = 6;
inline constexpr std::uint8_t kReqDenied = 7;
}  // namespace status
constexpr std::uint8_t sa_status_code(std::uint16_t mad_status) { return static_cast<std::uint8_t>(mad_status >> 8); }
// "ERR_NO_RECORDS" and the others, as IBA 15.2.1.1 Table 187 names them.
const char* sa_status_name(std::uint8_t code);

// ---- requests and answers -----------------------------------------------
struct SaRequest {
  std::uint8_t method = 0;        // mad::method::kGet, kSet, kGetTable, kDelete
  std::uint16_t attr_id = 0;
  std::uint32_t attr_mod = 0;
  std::uint64_t tid = 0;
  std::uint64_t sm_key = 0;       // 0 unless the SA asked for one (IBA 15.2.1.1)
  std::uint64_t comp_mask = 0;
};
// A whole SA request MAD: common header (class 0x03, version 2), a zero
// RMPP header (requests fit one MAD), the SA header and `record` (at most
// 200 bytes; longer is EINVAL) in the data area.
Result<Mad> make_sa_request(const SaRequest& req, ConstBytes record);

// The records of an SA answer: a MAD or a message reassembled by RMPP
// (same layout, data longer than 200 bytes). A GetResp holds one record
// at byte 56; a GetTableResp holds AttributeOffset*8-byte records, as
// many as fit whole (a trailing partial one is ignored; AttributeOffset 0
// means none, IBA 15.2.1.1). Each span is the stride long (record + pad).
// EPROTO if the answer is shorter than its headers.
Result<std::vector<ConstBytes>> sa_records(ConstBytes answer);

// The one record of an answer to a Set or Delete of attribute `attr_id`
// (IBA 15.2.1.1: the SA echoes the record as it now stands): EPROTO if
// the answer is not an SA response to that attribute or holds no record,
// EBUSY / EREMCHG for MAD status BUSY / redirect, EREMOTEIO naming the SA
// status for any other error status (ERR_NO_RECORDS included).
Result<ConstBytes> sa_answer_record(ConstBytes answer, std::uint16_t attr_id);

}  // namespace openib::sa
