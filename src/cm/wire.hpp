// The connection manager's wire format (IBA chapter 12; the CM class's MAD
// format, methods and attributes: IBA 16.7): the CM MADs (management class
// 0x07, class version 2), their fields as host-order structs, and a pure
// codec between the two. No I/O, no state: the CM state machine (src/cm's
// engine) sits on top of this, ibd's MAD layer below.
//
// Every CM message is a ComMgtSend whose 232-byte data area follows the
// 24-byte common MAD header (IBA 13.4.2); only ClassPortInfo is read with
// Get. Each message's layout is its IBA 12.6 / 12.8 / 12.11 table, written
// once in wire.cpp at the tables' Byte[Bit] positions. Field names follow
// the spec's, in snake_case. Values wider than their field are truncated
// by encode() (only in-range values survive a round trip).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <variant>

#include "common/result.hpp"
#include "mad/bytes.hpp"
#include "mad/pma_attrs.hpp"  // mad::ClassPortInfo

namespace openib::cm {

using mad::ByteVec;
using mad::ConstBytes;
using mad::MutBytes;

// A GID in wire order (IBA 4.1.1): 64-bit subnet prefix, then the GUID.
using Gid = std::array<std::uint8_t, 16>;

// ---- the class, IBA 13.4.4 Table 102 and IBA 12.6 ------------------------
inline constexpr std::uint8_t kMgmtClass = 0x07;    // CommunicationManagement
inline constexpr std::uint8_t kClassVersion = 2;    // IBA 12.6 (1.2 and later)
inline constexpr std::uint8_t kMethodSend = 0x03;   // every CM message
inline constexpr std::uint8_t kMethodGet = 0x01;    // ClassPortInfo only
inline constexpr std::uint8_t kMethodGetResp = 0x81;
inline constexpr std::size_t kDataOff = 24;         // IBA 13.4.2: after the common header
inline constexpr std::size_t kDataBytes = 232;

// ---- attribute IDs, IBA 12.6 (and 12.8, 12.11) ---------------------------
namespace attr {
inline constexpr std::uint16_t kClassPortInfo = 0x0001;
inline constexpr std::uint16_t kReq = 0x0010;
inline constexpr std::uint16_t kMra = 0x0011;
inline constexpr std::uint16_t kRej = 0x0012;
inline constexpr std::uint16_t kRep = 0x0013;
inline constexpr std::uint16_t kRtu = 0x0014;
inline constexpr std::uint16_t kDreq = 0x0015;
inline constexpr std::uint16_t kDrep = 0x0016;
inline constexpr std::uint16_t kSidrReq = 0x0017;
inline constexpr std::uint16_t kSidrRep = 0x0018;
inline constexpr std::uint16_t kLap = 0x0019;
inline constexpr std::uint16_t kApr = 0x001A;
}  // namespace attr
// "REQ", "ClassPortInfo", ...; "unknown" for any other ID.
const char* attr_name(std::uint16_t attr_id);

// ---- private-data sizes (the tail of each message's data area) ----------
namespace pdata {
inline constexpr std::size_t kReq = 92;
inline constexpr std::size_t kMra = 222;
inline constexpr std::size_t kRej = 148;
inline constexpr std::size_t kRep = 196;
inline constexpr std::size_t kRtu = 224;
inline constexpr std::size_t kDreq = 220;
inline constexpr std::size_t kDrep = 224;
inline constexpr std::size_t kSidrReq = 216;
inline constexpr std::size_t kSidrRep = 136;
inline constexpr std::size_t kLap = 168;
inline constexpr std::size_t kApr = 148;
}  // namespace pdata

inline constexpr std::size_t kAriBytes = 72;          // REJ ARI, APR / SIDR_REP additional info

// ---- REJ reasons, IBA 12.6.7.2 ---------------------------------------------
// (the values of Linux's enum ib_cm_rej_reason agree).
enum class RejReason : std::uint16_t {
  kNoQp = 1,
  kNoEec = 2,
  kNoResources = 3,
  kTimeout = 4,
  kUnsupportedReq = 5,
  kInvalidCommId = 6,
  kInvalidCommInstance = 7,
  kInvalidServiceId = 8,
  kInvalidTransportType = 9,
  kStaleConn = 10,
  kRdcNotExist = 11,
  kInvalidGid = 12,
  kInvalidLid = 13,
  kInvalidSl = 14,
  kInvalidTrafficClass = 15,
  kInvalidHopLimit = 16,
  kInvalidPacketRate = 17,
  kInvalidAltGid = 18,
  kInvalidAltLid = 19,
  kInvalidAltSl = 20,
  kInvalidAltTrafficClass = 21,
  kInvalidAltHopLimit = 22,
  kInvalidAltPacketRate = 23,
  kPortCmRedirect = 24,
  kPortRedirect = 25,
  kInvalidMtu = 26,
  kInsufficientRespResources = 27,
  kConsumerReject = 28,
  kInvalidRnrRetry = 29,
  kDuplicateLocalCommId = 30,
  kInvalidClassVersion = 31,
  kInvalidFlowLabel = 32,
  kInvalidAltFlowLabel = 33,
  kVendorOptionNotSupported = 35,  // IBA 1.4 (Linux's ECE)
};
// The spec's wording, short: "no QP", "timeout", ...; "unknown" otherwise.
const char* rej_reason_name(std::uint16_t reason);

// REJ MessageRejected and MRA MessageMRAed, IBA 12.6.6 / 12.6.7 (2 bits;
// 3 is reserved and refused by decode()).
enum class MsgRejected : std::uint8_t { kReq = 0, kRep = 1, kOther = 2 };
enum class MsgMraed : std::uint8_t { kReq = 0, kRep = 1, kLap = 2 };

// SIDR_REP status, IBA 12.11.2.
enum class SidrStatus : std::uint8_t {
  kValid = 0,
  kServiceIdNotSupported = 1,
  kRejected = 2,
  kNoQp = 3,
  kRedirect = 4,
  kUnsupportedClassVersion = 5,
};

// APR status, IBA 12.8.2 (the values of Linux's enum ib_cm_apr_status agree).
enum class AprStatus : std::uint8_t {
  kSuccess = 0,
  kInvalidCommId = 1,
  kUnsupported = 2,        // unsupported request: this CM's answer to every LAP (no APM)
  kRejected = 3,
  kRedirect = 4,
  kIsCurrent = 5,
  kInvalidQpnEecn = 6,
  kInvalidLid = 7,
  kInvalidGid = 8,
  kInvalidFlowLabel = 9,
  kInvalidTrafficClass = 10,
  kInvalidHopLimit = 11,
  kInvalidPacketRate = 12,
  kInvalidSl = 13,
};

// REQ TransportServiceType (2 bits), IBA 12.6.5; 3 means "see
// ExtendedTransportType", of which only 1 (XRC, IBA Annex A14) is defined.
namespace transport {
inline constexpr std::uint8_t kRc = 0;
inline constexpr std::uint8_t kUc = 1;
inline constexpr std::uint8_t kRd = 2;
inline constexpr std::uint8_t kExtended = 3;
inline constexpr std::uint8_t kExtXrc = 1;  // ExtendedTransportType
}  // namespace transport

// ---- the messages --------------------------------------------------------
// One path of a REQ (primary, alternate) or LAP (alternate), IBA 12.6.5.
struct CmPath {
  std::uint16_t local_lid = 0;
  std::uint16_t remote_lid = 0;
  Gid local_gid{};
  Gid remote_gid{};
  std::uint32_t flow_label = 0;       // 20 bits
  std::uint8_t packet_rate = 0;       // 6 bits (IBA 9.11.2 rate encoding)
  std::uint8_t traffic_class = 0;
  std::uint8_t hop_limit = 0;
  std::uint8_t sl = 0;                // 4 bits
  bool subnet_local = false;
  std::uint8_t local_ack_timeout = 0; // 5 bits, 4.096 us * 2^t
  bool operator==(const CmPath&) const = default;
};

// REQ, IBA 12.6.5.
struct Req {
  std::uint32_t local_comm_id = 0;
  std::uint64_t service_id = 0;
  std::uint64_t local_ca_guid = 0;
  std::uint32_t local_qkey = 0;
  std::uint32_t local_qpn = 0;               // 24 bits
  std::uint8_t responder_resources = 0;
  std::uint32_t local_eecn = 0;              // 24 bits
  std::uint8_t initiator_depth = 0;
  std::uint32_t remote_eecn = 0;             // 24 bits
  std::uint8_t remote_cm_response_timeout = 0;  // 5 bits
  std::uint8_t transport_service_type = transport::kRc;  // 2 bits
  bool end_to_end_flow_control = false;
  std::uint32_t starting_psn = 0;            // 24 bits
  std::uint8_t local_cm_response_timeout = 0;   // 5 bits
  std::uint8_t retry_count = 0;              // 3 bits
  std::uint16_t pkey = 0;
  std::uint8_t path_mtu = 0;                 // 4 bits, IBA 9.7.1 encoding (1: 256 .. 5: 4096)
  bool rdc_exists = false;
  std::uint8_t rnr_retry_count = 0;          // 3 bits
  std::uint8_t max_cm_retries = 0;           // 4 bits
  bool srq = false;
  std::uint8_t extended_transport_type = 0;  // 3 bits
  CmPath primary;
  bool sap_supported = false;                // Byte[139] bit 5 (IBA 1.3)
  bool has_alternate = false;                // on the wire: alternate local LID != 0
  CmPath alternate;                          // all zero unless has_alternate
  std::array<std::uint8_t, pdata::kReq> private_data{};
  bool operator==(const Req&) const = default;
};

// MRA, IBA 12.6.6.
struct Mra {
  std::uint32_t local_comm_id = 0;
  std::uint32_t remote_comm_id = 0;
  MsgMraed message_mraed = MsgMraed::kReq;
  std::uint8_t service_timeout = 0;          // 5 bits
  std::array<std::uint8_t, pdata::kMra> private_data{};
  bool operator==(const Mra&) const = default;
};

// REJ, IBA 12.6.7.
struct Rej {
  std::uint32_t local_comm_id = 0;
  std::uint32_t remote_comm_id = 0;
  MsgRejected message_rejected = MsgRejected::kReq;
  std::uint8_t ari_length = 0;               // 7 bits, at most 72
  RejReason reason = RejReason::kConsumerReject;
  std::array<std::uint8_t, kAriBytes> ari{};
  std::array<std::uint8_t, pdata::kRej> private_data{};
  bool operator==(const Rej&) const = default;
};

// REP, IBA 12.6.8.
struct Rep {
  std::uint32_t local_comm_id = 0;
  std::uint32_t remote_comm_id = 0;
  std::uint32_t local_qkey = 0;
  std::uint32_t local_qpn = 0;               // 24 bits
  std::uint32_t local_eecn = 0;              // 24 bits
  std::uint32_t starting_psn = 0;            // 24 bits
  std::uint8_t responder_resources = 0;
  std::uint8_t initiator_depth = 0;
  std::uint8_t target_ack_delay = 0;         // 5 bits
  std::uint8_t failover_accepted = 0;        // 2 bits: 0 accepted, 1 not supported, 2 rejected
  bool end_to_end_flow_control = false;
  std::uint8_t rnr_retry_count = 0;          // 3 bits
  bool srq = false;
  std::uint64_t local_ca_guid = 0;
  std::array<std::uint8_t, pdata::kRep> private_data{};
  bool operator==(const Rep&) const = default;
};

// RTU, IBA 12.6.9.
struct Rtu {
  std::uint32_t local_comm_id = 0;
  std::uint32_t remote_comm_id = 0;
  std::array<std::uint8_t, pdata::kRtu> private_data{};
  bool operator==(const Rtu&) const = default;
};

// DREQ, IBA 12.6.10.
struct Dreq {
  std::uint32_t local_comm_id = 0;
  std::uint32_t remote_comm_id = 0;
  std::uint32_t remote_qpn_eecn = 0;         // 24 bits
  std::array<std::uint8_t, pdata::kDreq> private_data{};
  bool operator==(const Dreq&) const = default;
};

// DREP, IBA 12.6.11.
struct Drep {
  std::uint32_t local_comm_id = 0;
  std::uint32_t remote_comm_id = 0;
  std::array<std::uint8_t, pdata::kDrep> private_data{};
  bool operator==(const Drep&) const = default;
};

// SIDR_REQ, IBA 12.11.1.
struct SidrReq {
  std::uint32_t request_id = 0;
  std::uint16_t pkey = 0;
  std::uint64_t service_id = 0;
  std::array<std::uint8_t, pdata::kSidrReq> private_data{};
  bool operator==(const SidrReq&) const = default;
};

// SIDR_REP, IBA 12.11.2.
struct SidrRep {
  std::uint32_t request_id = 0;
  SidrStatus status = SidrStatus::kValid;
  std::uint8_t add_info_length = 0;          // at most 72
  std::uint32_t qpn = 0;                     // 24 bits
  std::uint64_t service_id = 0;
  std::uint32_t qkey = 0;
  std::array<std::uint8_t, kAriBytes> class_port_info{};  // ClassPortInfo (redirect) or additional info
  std::array<std::uint8_t, pdata::kSidrRep> private_data{};
  bool operator==(const SidrRep&) const = default;
};

// LAP, IBA 12.8.1.
struct Lap {
  std::uint32_t local_comm_id = 0;
  std::uint32_t remote_comm_id = 0;
  std::uint32_t remote_qpn_eecn = 0;         // 24 bits
  std::uint8_t remote_cm_response_timeout = 0;  // 5 bits
  CmPath alternate;
  std::array<std::uint8_t, pdata::kLap> private_data{};
  bool operator==(const Lap&) const = default;
};

// APR, IBA 12.8.2.
struct Apr {
  std::uint32_t local_comm_id = 0;
  std::uint32_t remote_comm_id = 0;
  std::uint8_t add_info_length = 0;          // at most 72
  AprStatus status = AprStatus::kSuccess;
  std::array<std::uint8_t, kAriBytes> add_info{};
  std::array<std::uint8_t, pdata::kApr> private_data{};
  bool operator==(const Apr&) const = default;
};

using Message = std::variant<Req, Mra, Rej, Rep, Rtu, Dreq, Drep, SidrReq, SidrRep, Lap, Apr>;

// The attribute ID of a message (attr::kReq for a Req, ...).
std::uint16_t attr_id_of(const Message& m);

// ---- the codec -----------------------------------------------------------
// A whole 256-byte MAD: common header (base version 1, class 0x07, class
// version 2, method Send, status 0, the message's attribute ID, `tid`,
// attribute modifier 0), the message in the data area, reserved bits 0.
ByteVec encode(const Message& m, std::uint64_t tid);

struct Decoded {
  std::uint64_t tid = 0;
  std::uint16_t attr_id = 0;
  Message msg;
  bool operator==(const Decoded&) const = default;
};
// Reads a CM Send MAD: EBADMSG when it is shorter than 256 bytes, not base
// version 1 / class 0x07 / class version 2 / method Send, or a field holds
// a value the spec reserves or forbids (docs/cm.md "Wire format" lists
// them); EPROTONOSUPPORT for an attribute ID that is no CM message.
// decode(encode(m, t)) gives back m and t exactly.
Result<Decoded> decode(ConstBytes mad);

// ---- ClassPortInfo, IBA 13.4.8.1 ------------------------------------------
// The CM's own ClassPortInfo:CapabilityMask bits (IBA 16.7, the CM class's
// attributes; bits 0-7 are common to all classes, IBA 13.4.8.1). Bits 8-11
// are the IBA 1.1 set; 12 (UC) and 13 (SIDR) as public CM implementations
// announce them (not checked against the spec's own text).
// There is no bit for alternate paths: a CM without APM says so per
// connection (REP FailoverAccepted 1, APR status kUnsupported to a LAP).
namespace cm_cap {
inline constexpr std::uint16_t kMulticast = 1u << 8;
inline constexpr std::uint16_t kRc = 1u << 9;
inline constexpr std::uint16_t kRd = 1u << 10;
inline constexpr std::uint16_t kRawDatagram = 1u << 11;
inline constexpr std::uint16_t kUc = 1u << 12;
inline constexpr std::uint16_t kSidr = 1u << 13;
}  // namespace cm_cap
// What this CM serves: RC and UC connections and SIDR; no traps, notices,
// RD, raw datagrams or multicast.
inline constexpr std::uint16_t kCmCapabilityMask = cm_cap::kRc | cm_cap::kUc | cm_cap::kSidr;
// The GetResp to a Get(ClassPortInfo) MAD `get_request` (same TID,
// attribute modifier; ClassPortInfo with base version 1, class version 2,
// `capability_mask`, `resp_time_value` (5 bits, IBA 13.4.6.2), no
// redirect, no traps). EBADMSG if `get_request` is not a 256-byte CM
// Get(ClassPortInfo) of class version 2.
Result<ByteVec> class_port_info_response(ConstBytes get_request, std::uint8_t resp_time_value,
                                         std::uint16_t capability_mask = kCmCapabilityMask);

// ---- timeouts ---------------------------------------------------------------
// A CM timeout field (5 bits: CM response timeouts, local ACK timeout,
// service timeout) in nanoseconds: 4.096 us * 2^t (IBA 12.7.34, 13.4.6.2).
// t above 31 is taken as 31.
constexpr std::uint64_t cm_timeout_ns(std::uint8_t t) {
  return std::uint64_t{4096} << (t > 31 ? 31 : t);
}

}  // namespace openib::cm
