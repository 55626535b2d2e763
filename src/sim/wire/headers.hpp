// IBA wire headers (IBA 1.2.1 Vol 1, chapters 7-9): one struct per header,
// an append_*() that encodes it big-endian onto a byte vector and a
// decode_*() that reads it from the front of a span, checking its length
// (read_*() is the same without the check, for a parser that has checked
// the length of all its headers at once). Packed fields are
// moved with explicit shifts and masks, never C bitfields; the layout of
// every header is tabled in docs/wire.md. Encoders mask each value to its
// field width (a 24-bit QPN given 0x1000000 is encoded as 0).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "common/byte_order.hpp"
#include "common/result.hpp"

namespace openib::sim::wire {

using ConstBytes = std::span<const std::byte>;
using ByteVec = std::vector<std::byte>;
using Gid = std::array<std::uint8_t, 16>;

inline constexpr std::size_t kLrhBytes = 8;           // IBA 7.7
inline constexpr std::size_t kGrhBytes = 40;          // IBA 8.3
inline constexpr std::size_t kBthBytes = 12;          // IBA 9.2
inline constexpr std::size_t kRdethBytes = 4;         // IBA 9.3.1
inline constexpr std::size_t kDethBytes = 8;          // IBA 9.3.2
inline constexpr std::size_t kRethBytes = 16;         // IBA 9.3.3
inline constexpr std::size_t kAtomicEthBytes = 28;    // IBA 9.3.4
inline constexpr std::size_t kAethBytes = 4;          // IBA 9.3.5
inline constexpr std::size_t kAtomicAckEthBytes = 8;  // IBA 9.3.6
inline constexpr std::size_t kImmDtBytes = 4;         // IBA 9.3.7
inline constexpr std::size_t kIethBytes = 4;          // IBA 9.3.8
inline constexpr std::size_t kIcrcBytes = 4;          // IBA 7.8.1
inline constexpr std::size_t kVcrcBytes = 2;          // IBA 7.8.2

// ---- LRH, IBA 7.7 -------------------------------------------------------

// Link Next Header, IBA 7.7.5.
enum class Lnh : std::uint8_t {
  kRaw = 0,        // raw packet, no IBA transport
  kIpNonIba = 1,   // raw IPv6 packet
  kIbaLocal = 2,   // BTH follows the LRH
  kIbaGlobal = 3,  // GRH, then BTH
};

struct Lrh {
  std::uint8_t vl = 0;     // 4 bits, IBA 7.7.1
  std::uint8_t lver = 0;   // 4 bits, IBA 7.7.2 (0 is the only version)
  std::uint8_t sl = 0;     // 4 bits, IBA 7.7.3
  std::uint8_t resv2 = 0;  // 2 bits, reserved, transmitted as 0
  Lnh lnh = Lnh::kIbaLocal;
  std::uint16_t dlid = 0;
  std::uint8_t resv5 = 0;      // 5 bits, reserved
  std::uint16_t pkt_len = 0;   // 11 bits, 4-byte words LRH..ICRC, IBA 7.7.8
  std::uint16_t slid = 0;
  bool operator==(const Lrh&) const = default;
};
void append_lrh(ByteVec& out, const Lrh& h);
std::byte* write_lrh(std::byte* p, const Lrh& h);  // kLrhBytes at p; returns p + kLrhBytes
Result<Lrh> decode_lrh(ConstBytes in);
inline Lrh read_lrh(const std::byte* p);  // unchecked: kLrhBytes at p

// ---- GRH, IBA 8.3 -------------------------------------------------------

inline constexpr std::uint8_t kGrhIpVer = 6;         // IBA 8.3.1
inline constexpr std::uint8_t kGrhNxtHdrIba = 0x1B;  // IBA 8.3.4: IBA transport

struct Grh {
  std::uint8_t ip_ver = kGrhIpVer;  // 4 bits
  std::uint8_t tclass = 0;          // 8 bits
  std::uint32_t flow_label = 0;     // 20 bits
  std::uint16_t pay_len = 0;        // bytes after the GRH through the ICRC
  std::uint8_t nxt_hdr = kGrhNxtHdrIba;
  std::uint8_t hop_lmt = 0;
  Gid sgid{};
  Gid dgid{};
  bool operator==(const Grh&) const = default;
};
void append_grh(ByteVec& out, const Grh& h);
std::byte* write_grh(std::byte* p, const Grh& h);  // kGrhBytes at p; returns p + kGrhBytes
Result<Grh> decode_grh(ConstBytes in);
inline Grh read_grh(const std::byte* p);  // unchecked: kGrhBytes at p

// ---- BTH, IBA 9.2 -------------------------------------------------------

struct Bth {
  std::uint8_t opcode = 0;
  bool se = false;              // solicited event
  bool mig_req = false;         // M: migration state
  std::uint8_t pad_cnt = 0;     // 2 bits
  std::uint8_t tver = 0;        // 4 bits, IBA 9.2: 0
  std::uint16_t pkey = 0xFFFF;
  std::uint8_t resv8a = 0;      // reserved (FECN/BECN in annex A10); ICRC-variant
  std::uint32_t dest_qp = 0;    // 24 bits
  bool ack_req = false;
  std::uint8_t resv7 = 0;       // 7 bits
  std::uint32_t psn = 0;        // 24 bits
  bool operator==(const Bth&) const = default;
};
void append_bth(ByteVec& out, const Bth& h);
std::byte* write_bth(std::byte* p, const Bth& h);  // kBthBytes at p; returns p + kBthBytes
Result<Bth> decode_bth(ConstBytes in);
inline Bth read_bth(const std::byte* p);  // unchecked: kBthBytes at p

// ---- Extended transport headers, IBA 9.3 --------------------------------

struct Rdeth {  // IBA 9.3.1
  std::uint32_t ee_context = 0;  // 24 bits, after 8 reserved bits
  bool operator==(const Rdeth&) const = default;
};
void append_rdeth(ByteVec& out, const Rdeth& h);
std::byte* write_rdeth(std::byte* p, const Rdeth& h);  // kRdethBytes at p; returns p + kRdethBytes
Result<Rdeth> decode_rdeth(ConstBytes in);
inline Rdeth read_rdeth(const std::byte* p);  // unchecked: kRdethBytes at p

struct Deth {  // IBA 9.3.2
  std::uint32_t qkey = 0;
  std::uint32_t src_qp = 0;  // 24 bits, after 8 reserved bits
  bool operator==(const Deth&) const = default;
};
void append_deth(ByteVec& out, const Deth& h);
std::byte* write_deth(std::byte* p, const Deth& h);  // kDethBytes at p; returns p + kDethBytes
Result<Deth> decode_deth(ConstBytes in);
inline Deth read_deth(const std::byte* p);  // unchecked: kDethBytes at p

struct Reth {  // IBA 9.3.3
  std::uint64_t va = 0;
  std::uint32_t rkey = 0;
  std::uint32_t dma_len = 0;
  bool operator==(const Reth&) const = default;
};
void append_reth(ByteVec& out, const Reth& h);
std::byte* write_reth(std::byte* p, const Reth& h);  // kRethBytes at p; returns p + kRethBytes
Result<Reth> decode_reth(ConstBytes in);
inline Reth read_reth(const std::byte* p);  // unchecked: kRethBytes at p

struct AtomicEth {  // IBA 9.3.4
  std::uint64_t va = 0;
  std::uint32_t rkey = 0;
  std::uint64_t swap_add = 0;  // SwapData (CmpSwap) or AddData (FetchAdd)
  std::uint64_t compare = 0;   // CmpData
  bool operator==(const AtomicEth&) const = default;
};
void append_atomic_eth(ByteVec& out, const AtomicEth& h);
std::byte* write_atomic_eth(std::byte* p, const AtomicEth& h);  // kAtomicEthBytes at p; returns p + kAtomicEthBytes
Result<AtomicEth> decode_atomic_eth(ConstBytes in);
inline AtomicEth read_atomic_eth(const std::byte* p);  // unchecked: kAtomicEthBytes at p

// AETH, IBA 9.3.5. Syndrome bit 7 reserved; bits 6-5 the kind;
// bits 4-0 credit count (ACK), RNR timer code (RNR NAK) or NAK code.
enum class AckKind : std::uint8_t { kAck = 0, kRnrNak = 1, kReserved = 2, kNak = 3 };

enum class NakCode : std::uint8_t {  // IBA 9.3.5, 9.7.5.2
  kPsnSequenceError = 0,
  kInvalidRequest = 1,
  kRemoteAccessError = 2,
  kRemoteOperationalError = 3,
  kInvalidRdRequest = 4,
};

inline constexpr std::uint8_t kAethInvalidCredits = 0x1F;  // IBA 9.7.7.2: "invalid" credit count

struct Aeth {
  std::uint8_t syndrome = 0;
  std::uint32_t msn = 0;  // 24 bits
  bool operator==(const Aeth&) const = default;

  AckKind kind() const { return static_cast<AckKind>((syndrome >> 5) & 0x3); }
  std::uint8_t value() const { return syndrome & 0x1F; }  // credits / timer / code

  static Aeth ack(std::uint32_t msn, std::uint8_t credits);
  static Aeth rnr_nak(std::uint32_t msn, std::uint8_t timer_code);
  static Aeth nak(std::uint32_t msn, NakCode code);
};
void append_aeth(ByteVec& out, const Aeth& h);
std::byte* write_aeth(std::byte* p, const Aeth& h);  // kAethBytes at p; returns p + kAethBytes
Result<Aeth> decode_aeth(ConstBytes in);
inline Aeth read_aeth(const std::byte* p);  // unchecked: kAethBytes at p

// IBA 9.7.5.2.8: RNR NAK timer code -> minimum delay in microseconds
// (code 0 means 655.36 ms). Codes are 5 bits; larger inputs are masked.
std::uint32_t rnr_timer_us(std::uint8_t timer_code);

struct AtomicAckEth {  // IBA 9.3.6
  std::uint64_t orig_remote_data = 0;
  bool operator==(const AtomicAckEth&) const = default;
};
void append_atomic_ack_eth(ByteVec& out, const AtomicAckEth& h);
std::byte* write_atomic_ack_eth(std::byte* p, const AtomicAckEth& h);  // kAtomicAckEthBytes at p; returns p + kAtomicAckEthBytes
Result<AtomicAckEth> decode_atomic_ack_eth(ConstBytes in);
inline AtomicAckEth read_atomic_ack_eth(const std::byte* p);  // unchecked: kAtomicAckEthBytes at p

struct ImmDt {  // IBA 9.3.7: opaque 32 bits, carried big-endian
  std::uint32_t imm = 0;
  bool operator==(const ImmDt&) const = default;
};
void append_imm_dt(ByteVec& out, const ImmDt& h);
std::byte* write_imm_dt(std::byte* p, const ImmDt& h);  // kImmDtBytes at p; returns p + kImmDtBytes
Result<ImmDt> decode_imm_dt(ConstBytes in);
inline ImmDt read_imm_dt(const std::byte* p);  // unchecked: kImmDtBytes at p

struct Ieth {  // IBA 9.3.8: the R_Key to invalidate
  std::uint32_t rkey = 0;
  bool operator==(const Ieth&) const = default;
};
void append_ieth(ByteVec& out, const Ieth& h);
std::byte* write_ieth(std::byte* p, const Ieth& h);  // kIethBytes at p; returns p + kIethBytes
Result<Ieth> decode_ieth(ConstBytes in);
inline Ieth read_ieth(const std::byte* p);  // unchecked: kIethBytes at p

// ---- OpCodes, IBA 9.2.1 table 35 ----------------------------------------

// Bits 7-5 of the OpCode.
enum class Transport : std::uint8_t { kRc = 0, kUc = 1, kRd = 2, kUd = 3 };

// Bits 4-0 of the OpCode.
enum class Op : std::uint8_t {
  kSendFirst = 0x00,
  kSendMiddle = 0x01,
  kSendLast = 0x02,
  kSendLastImm = 0x03,
  kSendOnly = 0x04,
  kSendOnlyImm = 0x05,
  kWriteFirst = 0x06,
  kWriteMiddle = 0x07,
  kWriteLast = 0x08,
  kWriteLastImm = 0x09,
  kWriteOnly = 0x0A,
  kWriteOnlyImm = 0x0B,
  kReadRequest = 0x0C,
  kReadResponseFirst = 0x0D,
  kReadResponseMiddle = 0x0E,
  kReadResponseLast = 0x0F,
  kReadResponseOnly = 0x10,
  kAcknowledge = 0x11,
  kAtomicAcknowledge = 0x12,
  kCompareSwap = 0x13,
  kFetchAdd = 0x14,
  kResync = 0x15,  // RD only
  kSendLastInv = 0x16,
  kSendOnlyInv = 0x17,
};

constexpr std::uint8_t opcode(Transport t, Op op) {
  return static_cast<std::uint8_t>((static_cast<unsigned>(t) << 5) | static_cast<unsigned>(op));
}
constexpr Transport opcode_transport(std::uint8_t opc) {
  return static_cast<Transport>(opc >> 5);  // only meaningful for known opcodes
}
constexpr Op opcode_op(std::uint8_t opc) { return static_cast<Op>(opc & 0x1F); }

// Extension headers that follow the BTH, in wire order (IBA 9.2.1 table 35,
// 9.3), as a set of flag bits.
using ExtHeaders = std::uint16_t;
inline constexpr ExtHeaders kExtNone = 0;
inline constexpr ExtHeaders kExtRdeth = 1u << 0;
inline constexpr ExtHeaders kExtDeth = 1u << 1;
inline constexpr ExtHeaders kExtReth = 1u << 2;
inline constexpr ExtHeaders kExtAtomicEth = 1u << 3;
inline constexpr ExtHeaders kExtAeth = 1u << 4;
inline constexpr ExtHeaders kExtAtomicAckEth = 1u << 5;
inline constexpr ExtHeaders kExtImmDt = 1u << 6;
inline constexpr ExtHeaders kExtIeth = 1u << 7;

struct OpcodeInfo {
  std::string_view name;  // e.g. "RC SEND Only"
  ExtHeaders ext;         // headers between BTH and payload
  bool payload;           // whether the packet may carry payload
};

// The table entry, or nullopt for a reserved / unsupported opcode
// (CNP, XRC and manufacturer-specific opcodes are not decoded).
std::optional<OpcodeInfo> opcode_info(std::uint8_t opcode);

// ext_headers(opcode): the extension header set (kExtNone also for unknown
// opcodes; check opcode_info() for validity).
ExtHeaders ext_headers(std::uint8_t opcode);
bool has_payload(std::uint8_t opcode);

// Total size in bytes of the extension headers in `ext`.
std::size_t ext_headers_size(ExtHeaders ext);

// ---- Unchecked readers ------------------------------------------------------
// Big-endian (IBA 1.2.1 Vol 1 1.6: most significant byte first), by the
// tree's helpers (common/byte_order.hpp); the caller guarantees the bytes
// are there. decode_*() checks and calls these.
namespace detail {
inline std::uint32_t u8(const std::byte* p, std::size_t off) { return std::to_integer<std::uint32_t>(p[off]); }
// A 24-bit field (QPN, PSN, EECnxt, MSN): the byte before it is its
// header's own, so one 32-bit load covers it.
inline std::uint32_t u24(const std::byte* p, std::size_t off) { return bytes::ld_be32(p + off - 1) & 0xFFFFFF; }
}  // namespace detail

// IBA 7.7: byte 0: VL[7:4] LVer[3:0]; byte 1: SL[7:4] resv2[3:2] LNH[1:0];
// bytes 2-3 DLID; bytes 4-5: resv5[15:11] PktLen[10:0]; bytes 6-7 SLID.
inline Lrh read_lrh(const std::byte* p) {
  Lrh h;
  const std::uint32_t b0 = detail::u8(p, 0), b1 = detail::u8(p, 1), w2 = bytes::ld_be16(p + 4);
  h.vl = static_cast<std::uint8_t>(b0 >> 4);
  h.lver = static_cast<std::uint8_t>(b0 & 0xF);
  h.sl = static_cast<std::uint8_t>(b1 >> 4);
  h.resv2 = static_cast<std::uint8_t>((b1 >> 2) & 0x3);
  h.lnh = static_cast<Lnh>(b1 & 0x3);
  h.dlid = static_cast<std::uint16_t>(bytes::ld_be16(p + 2));
  h.resv5 = static_cast<std::uint8_t>(w2 >> 11);
  h.pkt_len = static_cast<std::uint16_t>(w2 & 0x7FF);
  h.slid = static_cast<std::uint16_t>(bytes::ld_be16(p + 6));
  return h;
}

// IBA 8.3: word 0: IPVer[31:28] TClass[27:20] FlowLabel[19:0]; bytes 4-5
// PayLen; byte 6 NxtHdr; byte 7 HopLmt; bytes 8-23 SGID; bytes 24-39 DGID.
inline Grh read_grh(const std::byte* p) {
  Grh h;
  const std::uint32_t w0 = bytes::ld_be32(p);
  h.ip_ver = static_cast<std::uint8_t>(w0 >> 28);
  h.tclass = static_cast<std::uint8_t>((w0 >> 20) & 0xFF);
  h.flow_label = w0 & 0xFFFFF;
  h.pay_len = static_cast<std::uint16_t>(bytes::ld_be16(p + 4));
  h.nxt_hdr = static_cast<std::uint8_t>(detail::u8(p, 6));
  h.hop_lmt = static_cast<std::uint8_t>(detail::u8(p, 7));
  for (std::size_t i = 0; i < 16; ++i) {
    h.sgid[i] = static_cast<std::uint8_t>(detail::u8(p, 8 + i));
    h.dgid[i] = static_cast<std::uint8_t>(detail::u8(p, 24 + i));
  }
  return h;
}

// IBA 9.2: byte 0 OpCode; byte 1: SE[7] M[6] PadCnt[5:4] TVer[3:0]; bytes
// 2-3 P_Key; byte 4 resv8a; bytes 5-7 DestQP; byte 8: A[7] resv7[6:0];
// bytes 9-11 PSN.
inline Bth read_bth(const std::byte* p) {
  Bth h;
  h.opcode = static_cast<std::uint8_t>(detail::u8(p, 0));
  const std::uint32_t b1 = detail::u8(p, 1), b8 = detail::u8(p, 8);
  h.se = (b1 & 0x80) != 0;
  h.mig_req = (b1 & 0x40) != 0;
  h.pad_cnt = static_cast<std::uint8_t>((b1 >> 4) & 0x3);
  h.tver = static_cast<std::uint8_t>(b1 & 0xF);
  h.pkey = static_cast<std::uint16_t>(bytes::ld_be16(p + 2));
  h.resv8a = static_cast<std::uint8_t>(detail::u8(p, 4));
  h.dest_qp = detail::u24(p, 5);
  h.ack_req = (b8 & 0x80) != 0;
  h.resv7 = static_cast<std::uint8_t>(b8 & 0x7F);
  h.psn = detail::u24(p, 9);
  return h;
}

inline Rdeth read_rdeth(const std::byte* p) { return Rdeth{detail::u24(p, 1)}; }  // IBA 9.3.1: resv8, EECnxt
inline Deth read_deth(const std::byte* p) { return Deth{bytes::ld_be32(p), detail::u24(p, 5)}; }  // IBA 9.3.2
inline Reth read_reth(const std::byte* p) {  // IBA 9.3.3: VA, R_Key, DMALen
  return Reth{bytes::ld_be64(p), bytes::ld_be32(p + 8), bytes::ld_be32(p + 12)};
}
inline AtomicEth read_atomic_eth(const std::byte* p) {  // IBA 9.3.4
  return AtomicEth{bytes::ld_be64(p), bytes::ld_be32(p + 8), bytes::ld_be64(p + 12), bytes::ld_be64(p + 20)};
}
inline Aeth read_aeth(const std::byte* p) {  // IBA 9.3.5: Syndrome, MSN
  return Aeth{static_cast<std::uint8_t>(detail::u8(p, 0)), detail::u24(p, 1)};
}
inline AtomicAckEth read_atomic_ack_eth(const std::byte* p) { return AtomicAckEth{bytes::ld_be64(p)}; }  // IBA 9.3.6
inline ImmDt read_imm_dt(const std::byte* p) { return ImmDt{bytes::ld_be32(p)}; }  // IBA 9.3.7
inline Ieth read_ieth(const std::byte* p) { return Ieth{bytes::ld_be32(p)}; }      // IBA 9.3.8

}  // namespace openib::sim::wire
