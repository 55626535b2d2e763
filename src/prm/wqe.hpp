// docs/simhca.md §12.1 (send WQE) and §12.2 (receive WQE): the field
// tables, the stride rules of §6.10, and the driver's one encoder of each,
// shared by src/hca (its own QP0/QP1 and tests) and src/lib (the client's
// post calls). The encoders write in place into one ring slot with
// unchecked big-endian stores: no allocation, no state, a few stores per
// segment, because libopenib's post_send/post_recv are this and a doorbell.
// Every check the device makes on a WQE (§12.1 "Decoding") that the driver
// can know in advance is made here first, so a WQE refused by the device
// is a driver bug, not a client's mistake. Namespace openib::dp (the data
// path): `prm` already names hca's reading of the command path.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include "common/byte_order.hpp"
#include "prm/uar.hpp"

namespace openib::dp {

// §6.10 CREATE_QP `type` (kRaw: the raw Ethernet QP, §16.5).
enum class QpType : uint8_t { kRc = 0, kUc = 1, kUd = 2, kSmi = 3, kGsi = 4, kRaw = 5 };

// §12.1 control segment `opcode` (IBA 10.7.1 work request types).
enum class Opcode : uint8_t {
  kSend = 0, kSendImm = 1, kWrite = 2, kWriteImm = 3, kRead = 4, kCmpSwap = 5, kFetchAdd = 6,
};

// §12.1 control segment `flags`; bits 7:4 are reserved.
inline constexpr uint32_t kFlagSignaled = 1u << 0;   // a CQE on success
inline constexpr uint32_t kFlagSolicited = 1u << 1;  // BTH.SE
inline constexpr uint32_t kFlagInline = 1u << 2;     // data follows inline
inline constexpr uint32_t kFlagFence = 1u << 3;      // wait for prior READ/atomics
inline constexpr uint32_t kFlagsReserved = ~uint32_t{0xf};

// §12.1: a WQE is a sequence of 16-byte segments; num_ds is a u8.
inline constexpr size_t kSeg = 16;
inline constexpr size_t kMaxNumDs = 255;

// §12.1 field offsets, each inside its own segment.
inline constexpr size_t kCtrlOpcode = 0x00, kCtrlFlags = 0x01, kCtrlNumDs = 0x02;
inline constexpr size_t kCtrlImm = 0x04, kCtrlWrId = 0x08;
inline constexpr size_t kUdAhn = 0x00, kUdDestQpn = 0x04, kUdQkey = 0x08;
inline constexpr size_t kRaddrVa = 0x00, kRaddrRkey = 0x08;
inline constexpr size_t kAtomicSwapAdd = 0x00, kAtomicCompare = 0x08;
inline constexpr size_t kDataLength = 0x00, kDataLkey = 0x04, kDataAddr = 0x08;
// Inline data header: bit 31 marks it, 30:0 the byte count.
inline constexpr uint32_t kInlineMark = 0x80000000u;
// UD address `qkey` with bit 31 set: the QP's own Q_Key (IBA 10.2.5).
inline constexpr uint32_t kQkeyOfQp = 0x80000000u;
// IBA 9.4.5: an atomic moves one 8-byte word.
inline constexpr uint32_t kAtomicBytes = 8;

// §12.2 receive WQE: header segment, then num_sge data segments.
inline constexpr size_t kRecvWrId = 0x00, kRecvNumSge = 0x08;

// §6.10 stride ranges (log2 bytes): SQ 64..2048, RQ/SRQ 32..1024.
inline constexpr uint32_t kMinLogSqStride = 6, kMaxLogSqStride = 11;
inline constexpr uint32_t kMinLogRqStride = 5, kMaxLogRqStride = 10;

inline constexpr bool is_ud(QpType t) { return t == QpType::kUd || t == QpType::kSmi || t == QpType::kGsi; }
inline constexpr bool is_atomic(Opcode op) { return op == Opcode::kCmpSwap || op == Opcode::kFetchAdd; }
inline constexpr bool has_raddr(Opcode op) { return op >= Opcode::kWrite && op <= Opcode::kFetchAdd; }

// §12.1 decoding rule 1: UD/SMI/GSI carry SEND and SEND_WITH_IMM; UC no
// READ or atomics (IBA 9.8); RC everything; RAW SEND alone (§16.5).
inline constexpr bool opcode_allowed(QpType t, Opcode op) {
  switch (t) {
    case QpType::kRc: return op <= Opcode::kFetchAdd;
    case QpType::kUc: return op <= Opcode::kWriteImm;
    case QpType::kUd:
    case QpType::kSmi:
    case QpType::kGsi: return op <= Opcode::kSendImm;
    case QpType::kRaw: return op == Opcode::kSend;
  }
  return false;
}

// Bytes before the data of the largest WQE a QP type can post: control,
// then remote address + atomic (RC), remote address (UC), UD address (UD),
// nothing (RAW: the data is the frame).
inline constexpr size_t max_header_bytes(QpType t) {
  return (t == QpType::kRc ? 3 : t == QpType::kRaw ? 1 : 2) * kSeg;
}
// Segments that n inline bytes take: the 4-byte header, the bytes, padding.
inline constexpr size_t inline_segs(size_t n) { return (4 + n + kSeg - 1) / kSeg; }

// Smallest log2 SQ stride (from kMinLogSqStride) that holds a worst-case
// WQE of type t with max_sge data segments or max_inline inline bytes. May
// exceed kMaxLogSqStride: the caller refuses that.
inline constexpr uint32_t log_sq_stride(QpType t, uint32_t max_sge, uint32_t max_inline) {
  const size_t sges = size_t{max_sge} * kSeg, inl = max_inline ? inline_segs(max_inline) * kSeg : 0;
  const size_t need = max_header_bytes(t) + (sges > inl ? sges : inl);
  uint32_t lg = kMinLogSqStride;
  while ((size_t{1} << lg) < need) ++lg;
  return lg;
}
// §12.2: the same for a receive WQE of max_sge data segments.
inline constexpr uint32_t log_rq_stride(uint32_t max_sge) {
  const size_t need = kSeg * (1 + size_t{max_sge});
  uint32_t lg = kMinLogRqStride;
  while ((size_t{1} << lg) < need) ++lg;
  return lg;
}

// The fields of one send WQE (§12.1) apart from its data, in the manual's
// words. Segments the opcode and QP type do not carry are not written.
struct SendWqe {
  Opcode opcode = Opcode::kSend;
  uint32_t flags = kFlagSignaled;  // kFlag*; wider than the u8 so reserved bits are caught
  uint32_t imm = 0;
  uint64_t wr_id = 0;
  uint32_t ahn = 0, dest_qpn = 0, qkey = kQkeyOfQp;  // UD address
  uint64_t remote_va = 0;                             // remote address
  uint32_t rkey = 0;
  uint64_t swap_add = 0, compare = 0;                 // atomic
};

// What the QP was created to hold (its caps, within the device's).
struct SqLimits {
  uint32_t max_sge = 1;
  uint32_t max_inline = 0;
};

// Why an encoder refused a WQE (nothing useful was written then).
enum class WqeError : uint8_t {
  kNone = 0,
  kOpcode,      // opcode not valid for the QP type
  kFlags,       // reserved flag bits set
  kAtomicSge,   // an atomic without exactly one 8-byte data segment, or inline
  kInlineRead,  // inline data with RDMA READ
  kInlineLen,   // inline data over max_inline
  kSgeCount,    // more data segments than max_sge (or than a u8 counts)
  kStride,      // the WQE does not fit the ring's stride
};

inline constexpr const char* error_name(WqeError e) {
  switch (e) {
    case WqeError::kNone: return "none";
    case WqeError::kOpcode: return "opcode not valid for the QP type";
    case WqeError::kFlags: return "reserved flag bits set";
    case WqeError::kAtomicSge: return "an atomic needs exactly one 8-byte data segment and no inline data";
    case WqeError::kInlineRead: return "inline data with RDMA READ";
    case WqeError::kInlineLen: return "inline data over max_inline";
    case WqeError::kSgeCount: return "more data segments than max_sge";
    case WqeError::kStride: return "WQE larger than the stride";
  }
  return "?";
}

// §12.1 data segment (also §12.2's). S: any {addr, length, lkey} SGE.
template <class S>
inline void put_data_seg(std::byte* p, const S& s) {
  bytes::st_be32(p + kDataLength, s.length);
  bytes::st_be32(p + kDataLkey, s.lkey);
  bytes::st_be64(p + kDataAddr, s.addr);
}

// Writes one send WQE (§12.1) into `slot`, one SQ stride of `stride` bytes.
// With kFlagInline the SGEs' addresses are pointers of this process and
// their bytes are copied into the WQE. Returns kNone, or why the WQE was
// refused (the union of the device's checks the driver can make).
template <class S>
inline WqeError encode_send_wqe(std::byte* slot, size_t stride, QpType type, const SendWqe& w,
                                std::span<const S> sg, const SqLimits& lim) {
  if (!opcode_allowed(type, w.opcode)) return WqeError::kOpcode;
  if (w.flags & kFlagsReserved) return WqeError::kFlags;
  const bool inl = w.flags & kFlagInline;
  const bool atomic = is_atomic(w.opcode);
  if (atomic && (inl || sg.size() != 1 || sg[0].length != kAtomicBytes)) return WqeError::kAtomicSge;
  const size_t hdr = kSeg * (1 + is_ud(type) + has_raddr(w.opcode) + atomic);
  size_t data, total = 0;
  if (inl) {
    if (w.opcode == Opcode::kRead) return WqeError::kInlineRead;
    for (const S& s : sg) total += s.length;
    if (total > lim.max_inline) return WqeError::kInlineLen;
    data = inline_segs(total) * kSeg;
  } else {
    if (sg.size() > lim.max_sge) return WqeError::kSgeCount;
    data = sg.size() * kSeg;
  }
  if (hdr + data > stride || hdr + data > kMaxNumDs * kSeg) return WqeError::kStride;

  std::byte* p = slot + kSeg;
  if (is_ud(type)) {
    bytes::st_be32(p + kUdAhn, w.ahn);
    bytes::st_be32(p + kUdDestQpn, w.dest_qpn & kNumberMask);
    bytes::st_be32(p + kUdQkey, w.qkey);
    bytes::st_be32(p + 0x0c, 0);
    p += kSeg;
  }
  if (has_raddr(w.opcode)) {
    bytes::st_be64(p + kRaddrVa, w.remote_va);
    bytes::st_be32(p + kRaddrRkey, w.rkey);
    bytes::st_be32(p + 0x0c, 0);
    p += kSeg;
  }
  if (atomic) {
    bytes::st_be64(p + kAtomicSwapAdd, w.swap_add);
    bytes::st_be64(p + kAtomicCompare, w.compare);
    p += kSeg;
  }
  if (inl) {
    bytes::st_be32(p, kInlineMark | static_cast<uint32_t>(total));
    std::byte* d = p + 4;
    for (const S& s : sg) {
      if (s.length) std::memcpy(d, reinterpret_cast<const void*>(static_cast<uintptr_t>(s.addr)), s.length);
      d += s.length;
    }
    p += data;
    std::memset(d, 0, static_cast<size_t>(p - d));  // padding is reserved: zero
  } else {
    for (const S& s : sg) {
      put_data_seg(p, s);
      p += kSeg;
    }
  }
  slot[kCtrlOpcode] = static_cast<std::byte>(w.opcode);
  slot[kCtrlFlags] = static_cast<std::byte>(w.flags);
  slot[kCtrlNumDs] = static_cast<std::byte>((hdr + data) / kSeg);  // control included
  slot[0x03] = std::byte{0};
  bytes::st_be32(slot + kCtrlImm, w.imm);
  bytes::st_be64(slot + kCtrlWrId, w.wr_id);
  return WqeError::kNone;
}

// Writes one receive WQE (§12.2) into `slot`, one RQ/SRQ stride.
template <class S>
inline WqeError encode_recv_wqe(std::byte* slot, size_t stride, uint64_t wr_id, std::span<const S> sg,
                                uint32_t max_sge) {
  if (sg.size() > max_sge || sg.size() > 0xff) return WqeError::kSgeCount;  // num_sge is a u8
  if (kSeg * (1 + sg.size()) > stride) return WqeError::kStride;
  bytes::st_be64(slot + kRecvWrId, wr_id);
  slot[kRecvNumSge] = static_cast<std::byte>(sg.size());
  std::memset(slot + kRecvNumSge + 1, 0, 7);
  std::byte* p = slot + kSeg;
  for (const S& s : sg) {
    put_data_seg(p, s);
    p += kSeg;
  }
  return WqeError::kNone;
}

}  // namespace openib::dp
