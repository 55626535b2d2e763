// The data-path formats of docs/simhca.md §12, encoded in place into ring
// memory: the send WQE (§12.1), the receive WQE (§12.2), and the CQE
// decoder (§12.4). Pure functions over raw slots: no allocation, no state,
// so post and poll cost a few stores and loads. test/unit/test_lib_wqe.cpp
// checks them against simhca's own decoders (the device's reading of the
// same manual).
#pragma once

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "lib/be.hpp"
#include "openib/verbs.hpp"

namespace openib::lib {

inline constexpr size_t kSeg = 16;                 // §12.1: WQEs are 16-byte segments
inline constexpr uint32_t kInlineMark = 0x80000000u;  // §12.1 inline header
inline constexpr size_t kCqeSize = 64;             // §12.4
inline constexpr uint32_t kMinLogSqStride = 6, kMaxLogSqStride = 11;  // §6.10
inline constexpr uint32_t kMinLogRqStride = 5, kMaxLogRqStride = 10;  // §6.10, §6.9

struct SqLimits {
  uint32_t max_sge = 1;     // data segments per WQE (the QP's cap, ≤ device max_sge)
  uint32_t max_inline = 0;  // inline bytes per WQE (the QP's cap, ≤ device max_inline)
};

inline bool is_atomic(WrOpcode op) { return op == WrOpcode::kCmpSwap || op == WrOpcode::kFetchAdd; }
inline bool is_rdma(WrOpcode op) {
  return op == WrOpcode::kWrite || op == WrOpcode::kWriteImm || op == WrOpcode::kRead;
}

// §12.1 (decoding rules): which opcodes a QP type may post. UD: SEND and
// SEND_WITH_IMM; UC: no READ or atomics (IBA 9.8); RC: all.
inline bool opcode_allowed(QpType t, WrOpcode op) {
  switch (t) {
    case QpType::kRc: return op <= WrOpcode::kFetchAdd;
    case QpType::kUc: return op <= WrOpcode::kWriteImm;
    case QpType::kUd: return op <= WrOpcode::kSendImm;
  }
  return false;
}

// Bytes of the segments before the data of a WQE: control, then UD address
// (UD) or remote address + atomic (RC) or remote address (UC). §12.1.
inline size_t send_header_bytes(QpType t) {
  switch (t) {
    case QpType::kRc: return 3 * kSeg;
    case QpType::kUc: return 2 * kSeg;
    case QpType::kUd: return 2 * kSeg;
  }
  return 3 * kSeg;
}
// Segments that inline data of n bytes takes: a 4-byte header, the bytes,
// padded to 16 (§12.1).
inline size_t inline_segs(size_t n) { return (4 + n + kSeg - 1) / kSeg; }

// Smallest log2 SQ stride (§6.10: 6..11) holding a worst-case WQE of this
// QP type with max_sge data segments or max_inline inline bytes.
inline uint32_t log_sq_stride(QpType t, uint32_t max_sge, uint32_t max_inline) {
  size_t data = std::max<size_t>(size_t{max_sge} * kSeg, max_inline ? inline_segs(max_inline) * kSeg : 0);
  size_t need = send_header_bytes(t) + data;
  uint32_t lg = kMinLogSqStride;
  while ((size_t{1} << lg) < need) ++lg;
  return lg;  // may exceed kMaxLogSqStride: the caller refuses that
}
// §12.2: a 16-byte header and num_sge data segments; 5..10.
inline uint32_t log_rq_stride(uint32_t max_sge) {
  size_t need = kSeg * (1 + size_t{max_sge});
  uint32_t lg = kMinLogRqStride;
  while ((size_t{1} << lg) < need) ++lg;
  return lg;
}

inline void put_data_seg(std::byte* p, const Sge& s) {  // §12.1 data segment
  st_be32(p + 0x00, s.length);
  st_be32(p + 0x04, s.lkey);
  st_be64(p + 0x08, s.addr);
}

// Writes one send WQE (§12.1) into `slot` (one SQ stride). `ahn` is the
// AH's number for UD. Returns 0, or EINVAL for a request the QP cannot
// carry (opcode not valid for the type, too many SGEs, inline too long or
// on READ/atomic, an atomic without one 8-byte SGE, UD without an AH).
inline int encode_send_wqe(std::byte* slot, size_t stride, QpType type, const SendWr& wr,
                           uint32_t ahn, const SqLimits& lim) {
  if (!opcode_allowed(type, wr.opcode)) return EINVAL;
  if (wr.flags & ~uint32_t{0xf}) return EINVAL;
  const bool inl = wr.flags & kSendInline;
  std::byte* p = slot + kSeg;
  if (type == QpType::kUd) {  // UD address segment
    st_be32(p + 0x00, ahn);
    st_be32(p + 0x04, wr.remote_qpn & 0xffffff);
    st_be32(p + 0x08, wr.remote_qkey);  // bit 31 set: the QP's own Q_Key (IBA 10.2.5)
    st_be32(p + 0x0c, 0);
    p += kSeg;
  }
  if (is_rdma(wr.opcode) || is_atomic(wr.opcode)) {  // remote address segment
    st_be64(p + 0x00, wr.remote_addr);
    st_be32(p + 0x08, wr.rkey);
    st_be32(p + 0x0c, 0);
    p += kSeg;
  }
  if (is_atomic(wr.opcode)) {  // atomic segment (IBA 9.4.5)
    if (inl || wr.sg.size() != 1 || wr.sg[0].length != 8) return EINVAL;
    const bool cas = wr.opcode == WrOpcode::kCmpSwap;
    st_be64(p + 0x00, cas ? wr.swap : wr.compare_add);
    st_be64(p + 0x08, cas ? wr.compare_add : 0);
    p += kSeg;
  }
  std::byte* const end = slot + stride;
  if (inl) {
    if (wr.opcode == WrOpcode::kRead) return EINVAL;
    size_t total = 0;
    for (const Sge& s : wr.sg) total += s.length;
    if (total > lim.max_inline || p + inline_segs(total) * kSeg > end) return EINVAL;
    st_be32(p, kInlineMark | static_cast<uint32_t>(total));
    std::byte* d = p + 4;
    for (const Sge& s : wr.sg) {
      std::memcpy(d, reinterpret_cast<const void*>(s.addr), s.length);
      d += s.length;
    }
    p += inline_segs(total) * kSeg;
    std::memset(d, 0, static_cast<size_t>(p - d));  // padding: reserved, zero
  } else {
    if (wr.sg.size() > lim.max_sge || p + wr.sg.size() * kSeg > end) return EINVAL;
    for (const Sge& s : wr.sg) {
      put_data_seg(p, s);
      p += kSeg;
    }
  }
  // Control segment.
  slot[0x00] = static_cast<std::byte>(wr.opcode);
  slot[0x01] = static_cast<std::byte>(wr.flags);
  slot[0x02] = static_cast<std::byte>((p - slot) / kSeg);  // num_ds, control included
  slot[0x03] = std::byte{0};
  st_be32(slot + 0x04, wr.imm);
  st_be64(slot + 0x08, wr.wr_id);
  return 0;
}

// Writes one receive WQE (§12.2) into `slot` (one RQ/SRQ stride).
inline int encode_recv_wqe(std::byte* slot, size_t stride, const RecvWr& wr, uint32_t max_sge) {
  if (wr.sg.size() > max_sge || kSeg * (1 + wr.sg.size()) > stride) return EINVAL;
  st_be64(slot + 0x00, wr.wr_id);
  slot[0x08] = static_cast<std::byte>(wr.sg.size());
  std::memset(slot + 0x09, 0, 7);
  std::byte* p = slot + kSeg;
  for (const Sge& s : wr.sg) {
    put_data_seg(p, s);
    p += kSeg;
  }
  return 0;
}

// §12.4 / §9.2: the CQE at consumer counter c belongs to the consumer when
// its owner bit is ((c >> log_size) & 1) ^ 1.
inline bool cqe_ready(const std::byte* cqe, uint32_t c, uint32_t log_size) {
  const uint8_t owner = __atomic_load_n(reinterpret_cast<const uint8_t*>(cqe + 0x3f), __ATOMIC_ACQUIRE);
  return (owner & 1) == (((c >> log_size) & 1) ^ 1);
}

// §12.4 CQE fields into a Wc. Returns the CQE's wqe_index.
inline uint16_t decode_cqe(const std::byte* c, Wc& wc) {
  wc.wr_id = ld_be64(c + 0x00);
  wc.byte_len = ld_be32(c + 0x08);
  wc.imm = ld_be32(c + 0x0c);
  wc.qp_num = ld_be32(c + 0x10);
  wc.src_qp = ld_be32(c + 0x14);
  wc.slid = ld_be16(c + 0x18);
  wc.sl = std::to_integer<uint8_t>(c[0x1a]);
  wc.dlid_path_bits = std::to_integer<uint8_t>(c[0x1b]);
  wc.opcode = std::to_integer<uint8_t>(c[0x1c]);
  wc.status = std::to_integer<uint8_t>(c[0x1d]);
  const uint8_t flags = std::to_integer<uint8_t>(c[0x1e]);
  wc.grh = flags & 1;
  wc.has_imm = flags & 2;
  wc.solicited = flags & 4;
  wc.vendor_err = std::to_integer<uint8_t>(c[0x1f]);
  wc.pkey_index = ld_be16(c + 0x20);
  return ld_be16(c + 0x22);
}

}  // namespace openib::lib
