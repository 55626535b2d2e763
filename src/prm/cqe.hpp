// docs/simhca.md §12.4 (the 64-byte CQE) with the ownership phase of §9.2:
// the field table, the status and opcode values, and the driver's one CQE
// decoder, shared by src/hca and src/lib. Unchecked big-endian loads from
// ring memory: the caller holds a whole kCqeSize slot.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/byte_order.hpp"

namespace openib::dp {

inline constexpr size_t kCqeSize = 64;

// §12.4 field offsets.
inline constexpr size_t kCqeWrId = 0x00, kCqeByteLen = 0x08, kCqeImm = 0x0c, kCqeQpn = 0x10;
inline constexpr size_t kCqeSrcQp = 0x14, kCqeSlid = 0x18, kCqeSl = 0x1a, kCqeDlidPathBits = 0x1b;
inline constexpr size_t kCqeOpcode = 0x1c, kCqeStatus = 0x1d, kCqeFlags = 0x1e, kCqeVendorErr = 0x1f;
inline constexpr size_t kCqePkeyIndex = 0x20, kCqeWqeIndex = 0x22, kCqeOwner = 0x3f;
// §12.4 `flags`.
inline constexpr uint8_t kCqeFlagGrh = 1u << 0, kCqeFlagImm = 1u << 1, kCqeFlagSolicited = 1u << 2;

// §12.4 completion status: the values of enum ibv_wc_status (IBA 11.6.2).
enum WcStatus : uint8_t {
  kWcSuccess = 0, kWcLocLenErr = 1, kWcLocQpOpErr = 2, kWcLocProtErr = 4, kWcWrFlushErr = 5,
  kWcBadRespErr = 7, kWcLocAccessErr = 8, kWcRemInvReqErr = 9, kWcRemAccessErr = 10,
  kWcRemOpErr = 11, kWcRetryExcErr = 12, kWcRnrRetryExcErr = 13, kWcFatalErr = 19,
  kWcGeneralErr = 21,
};
// §12.4 `opcode`: the values of enum ibv_wc_opcode.
enum WcOpcode : uint8_t {
  kWcSend = 0, kWcRdmaWrite = 1, kWcRdmaRead = 2, kWcCompSwap = 3, kWcFetchAdd = 4,
  kWcRecv = 128, kWcRecvRdmaWithImm = 129,
};

// One CQE's fields (§12.4), reserved bytes and owner left out.
struct Cqe {
  uint64_t wr_id = 0;
  uint32_t byte_len = 0, imm = 0, qpn = 0, src_qp = 0;
  uint16_t slid = 0, pkey_index = 0, wqe_index = 0;
  uint8_t sl = 0, dlid_path_bits = 0, opcode = 0, status = 0, vendor_err = 0;
  bool grh = false, has_imm = false, solicited = false;
};

// §9.2 applied to §12.4: the CQE at consumer counter c of a ring of
// 2^log_size belongs to the consumer when its owner bit is the pass's
// phase, ((c >> log_size) & 1) ^ 1. The load acquires: the device writes
// the owner byte last, so the CQE's other bytes are visible after it.
inline bool cqe_owned(const std::byte* cqe, uint32_t c, uint32_t log_size) {
  const uint8_t owner = __atomic_load_n(reinterpret_cast<const uint8_t*>(cqe + kCqeOwner), __ATOMIC_ACQUIRE);
  return (owner & 1u) == (((c >> log_size) & 1u) ^ 1u);
}

// §12.4: the fields of the kCqeSize bytes at c.
inline Cqe decode_cqe(const std::byte* c) {
  Cqe e;
  e.wr_id = bytes::ld_be64(c + kCqeWrId);
  e.byte_len = bytes::ld_be32(c + kCqeByteLen);
  e.imm = bytes::ld_be32(c + kCqeImm);
  e.qpn = bytes::ld_be32(c + kCqeQpn);
  e.src_qp = bytes::ld_be32(c + kCqeSrcQp);
  e.slid = bytes::ld_be16(c + kCqeSlid);
  e.sl = std::to_integer<uint8_t>(c[kCqeSl]);
  e.dlid_path_bits = std::to_integer<uint8_t>(c[kCqeDlidPathBits]);
  e.opcode = std::to_integer<uint8_t>(c[kCqeOpcode]);
  e.status = std::to_integer<uint8_t>(c[kCqeStatus]);
  const uint8_t flags = std::to_integer<uint8_t>(c[kCqeFlags]);
  e.grh = flags & kCqeFlagGrh;
  e.has_imm = flags & kCqeFlagImm;
  e.solicited = flags & kCqeFlagSolicited;
  e.vendor_err = std::to_integer<uint8_t>(c[kCqeVendorErr]);
  e.pkey_index = bytes::ld_be16(c + kCqePkeyIndex);
  e.wqe_index = bytes::ld_be16(c + kCqeWqeIndex);
  return e;
}

}  // namespace openib::dp
