// The common MAD header (IBA 1.2.1 Vol 1, 13.4.2-13.4.7) and the constants
// every management class shares: class numbers, methods, status codes,
// attribute IDs of the subnet-management (SMP) and performance-management
// (PMA) classes. Pure codecs over byte spans; no I/O. Numbers agree with
// rdma-core's <infiniband/umad_types.h>, <umad_sm.h> and libibmad's <mad.h>.
#pragma once

#include <cstdint>
#include <string_view>

#include "common/result.hpp"
#include "mad/bytes.hpp"

namespace openib::mad {

inline constexpr std::size_t kMadHeaderBytes = 24;  // IBA 13.4.2
inline constexpr std::uint8_t kBaseVersion = 1;     // IBA 13.4.2: BaseVersion

// ---- management classes, IBA 13.4.4 (Table 102) ------------------------
namespace mgmt_class {
inline constexpr std::uint8_t kSubnLid = 0x01;        // SMP, LID routed
inline constexpr std::uint8_t kSubnDirected = 0x81;   // SMP, directed route
inline constexpr std::uint8_t kSubnAdm = 0x03;        // SA
inline constexpr std::uint8_t kPerfMgmt = 0x04;       // PMA, IBA 16.1
inline constexpr std::uint8_t kBm = 0x05;             // baseboard management
inline constexpr std::uint8_t kDevMgt = 0x06;         // device management
inline constexpr std::uint8_t kComMgt = 0x07;         // CM, IBA 12
inline constexpr std::uint8_t kSnmp = 0x08;           // SNMP tunneling
inline constexpr std::uint8_t kVendorRange1Start = 0x09;
inline constexpr std::uint8_t kVendorRange1End = 0x0F;
inline constexpr std::uint8_t kApplicationStart = 0x10;
inline constexpr std::uint8_t kBootMgmt = 0x11;
inline constexpr std::uint8_t kBis = 0x12;
inline constexpr std::uint8_t kCongMgmt = 0x21;
inline constexpr std::uint8_t kApplicationEnd = 0x2F;
inline constexpr std::uint8_t kVendorRange2Start = 0x30;  // vendor classes with OUI + RMPP
inline constexpr std::uint8_t kVendorRange2End = 0x4F;
}  // namespace mgmt_class

// Class versions in use (IBA 13.4.2 and the class chapters).
inline constexpr std::uint8_t kSmpClassVersion = 1;
inline constexpr std::uint8_t kSaClassVersion = 2;
inline constexpr std::uint8_t kPmaClassVersion = 1;
inline constexpr std::uint8_t kCmClassVersion = 2;

// True for the two subnet-management classes (0x01, 0x81): they travel on QP0.
constexpr bool is_smp_class(std::uint8_t c) { return c == mgmt_class::kSubnLid || c == mgmt_class::kSubnDirected; }

// ---- methods, IBA 13.4.5 (Table 103) and SA 15.2.2 ---------------------
namespace method {
inline constexpr std::uint8_t kGet = 0x01;
inline constexpr std::uint8_t kSet = 0x02;
inline constexpr std::uint8_t kSend = 0x03;
inline constexpr std::uint8_t kTrap = 0x05;
inline constexpr std::uint8_t kReport = 0x06;
inline constexpr std::uint8_t kTrapRepress = 0x07;
inline constexpr std::uint8_t kGetTable = 0x12;      // SA
inline constexpr std::uint8_t kGetTraceTable = 0x13; // SA
inline constexpr std::uint8_t kGetMulti = 0x14;      // SA
inline constexpr std::uint8_t kDelete = 0x15;        // SA
inline constexpr std::uint8_t kResponseBit = 0x80;   // the R bit of the Method byte
inline constexpr std::uint8_t kGetResp = 0x81;
inline constexpr std::uint8_t kReportResp = 0x86;
inline constexpr std::uint8_t kGetTableResp = 0x92;
inline constexpr std::uint8_t kGetTraceTableResp = 0x93;
inline constexpr std::uint8_t kGetMultiResp = 0x94;
inline constexpr std::uint8_t kDeleteResp = 0x95;
}  // namespace method

constexpr bool is_response(std::uint8_t m) { return (m & method::kResponseBit) != 0; }
// The method of the response to request method m (IBA 13.4.5): Get and Set
// are answered by GetResp; the SA methods by their own response (m | R).
constexpr std::uint8_t response_method(std::uint8_t m) {
  return (m == method::kGet || m == method::kSet) ? method::kGetResp
                                                  : static_cast<std::uint8_t>(m | method::kResponseBit);
}

// ---- status, IBA 13.4.7 (Table 105/106) --------------------------------
// 16-bit field of a GMP; in a directed-route SMP bit 15 is the D bit and
// only bits 14:0 are the status (IBA 14.2.1.2).
namespace status {
inline constexpr std::uint16_t kOk = 0x0000;
inline constexpr std::uint16_t kBusy = 0x0001;        // bit 0
inline constexpr std::uint16_t kRedirect = 0x0002;    // bit 1
inline constexpr std::uint16_t kBadVersion = 0x0004;              // code 1 in bits 4:2
inline constexpr std::uint16_t kMethodUnsupported = 0x0008;       // code 2
inline constexpr std::uint16_t kMethodAttrUnsupported = 0x000C;   // code 3
inline constexpr std::uint16_t kInvalidAttrValue = 0x001C;        // code 7: attribute or modifier
inline constexpr std::uint16_t kInvalidFieldMask = 0x001C;
inline constexpr std::uint16_t kClassMask = 0xFF00;  // bits 15:8, class specific
}  // namespace status

// ---- attribute IDs common to classes, IBA 13.4.8 -----------------------
namespace attr {
inline constexpr std::uint16_t kClassPortInfo = 0x0001;
inline constexpr std::uint16_t kNotice = 0x0002;
inline constexpr std::uint16_t kInformInfo = 0x0003;
// SMP attributes, IBA 14.2.5 (Table 145)
inline constexpr std::uint16_t kNodeDescription = 0x0010;
inline constexpr std::uint16_t kNodeInfo = 0x0011;
inline constexpr std::uint16_t kSwitchInfo = 0x0012;
inline constexpr std::uint16_t kGuidInfo = 0x0014;
inline constexpr std::uint16_t kPortInfo = 0x0015;
inline constexpr std::uint16_t kPKeyTable = 0x0016;
inline constexpr std::uint16_t kSlToVlTable = 0x0017;
inline constexpr std::uint16_t kVlArbTable = 0x0018;
inline constexpr std::uint16_t kLinearFwdTable = 0x0019;
inline constexpr std::uint16_t kRandomFwdTable = 0x001A;
inline constexpr std::uint16_t kMulticastFwdTable = 0x001B;
inline constexpr std::uint16_t kSmInfo = 0x0020;
inline constexpr std::uint16_t kVendorDiag = 0x0030;
inline constexpr std::uint16_t kLedInfo = 0x0031;
// PMA attributes, IBA 16.1.3 (Table 208) and 16.1.4
inline constexpr std::uint16_t kPortSamplesControl = 0x0010;
inline constexpr std::uint16_t kPortSamplesResult = 0x0011;
inline constexpr std::uint16_t kPortCounters = 0x0012;
inline constexpr std::uint16_t kPortSamplesResultExt = 0x001E;
inline constexpr std::uint16_t kPortCountersExtended = 0x001D;
}  // namespace attr

// ---- the common header, IBA 13.4.2 -------------------------------------
//   byte 0 BaseVersion, 1 MgmtClass, 2 ClassVersion, 3 R|Method,
//   4-5 Status, 6-7 ClassSpecific, 8-15 TransactionID, 16-17 AttributeID,
//   18-19 reserved, 20-23 AttributeModifier.
struct MadHeader {
  std::uint8_t base_version = kBaseVersion;
  std::uint8_t mgmt_class = 0;
  std::uint8_t class_version = 0;
  std::uint8_t method = 0;          // including the R bit (0x80)
  std::uint16_t status = 0;         // for DR SMPs: D bit (15) + 15-bit status
  std::uint16_t class_specific = 0; // for DR SMPs: HopPointer (hi byte), HopCount (lo byte)
  std::uint64_t tid = 0;
  std::uint16_t attr_id = 0;
  std::uint16_t resv = 0;
  std::uint32_t attr_mod = 0;
  bool operator==(const MadHeader&) const = default;
};

// Decode the first 24 bytes; EPROTO if `in` is shorter.
Result<MadHeader> decode_header(ConstBytes in);
// Encode into out[0..24); bytes beyond out.size() are dropped.
void encode_header(MutBytes out, const MadHeader& h);

// In-place accessors of a whole MAD's header fields (offsets of IBA 13.4.2).
inline std::uint8_t mad_class(ConstBytes m) { return get8(m, 1); }
inline std::uint8_t mad_method(ConstBytes m) { return get8(m, 3); }
inline std::uint16_t mad_status(ConstBytes m) { return get16(m, 4); }
inline std::uint64_t mad_tid(ConstBytes m) { return get64(m, 8); }
inline std::uint16_t mad_attr_id(ConstBytes m) { return get16(m, 16); }
inline std::uint32_t mad_attr_mod(ConstBytes m) { return get32(m, 20); }

// A fresh MAD buffer (zeroed) with the given header.
Mad make_mad(const MadHeader& h);

// Turn a GMP request into its response in place (IBA 13.4.5, 13.4.7):
// Method = response_method(), Status = `status`; everything else (TID,
// attribute, data) is kept. For directed-route SMPs use smp_make_response().
void make_response(MutBytes mad, std::uint16_t status);

// Human-readable names, for logs: "SubnGet(NodeInfo)" style pieces.
std::string_view class_name(std::uint8_t mgmt_class);
std::string_view method_name(std::uint8_t method);
std::string_view smp_attr_name(std::uint16_t attr_id);

}  // namespace openib::mad
