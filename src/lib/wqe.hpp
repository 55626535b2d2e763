// The simhca provider's WQEs and CQE (providers/simhca.cpp) in the public
// API's words (include/openib/verbs.hpp) over the driver's one reading of
// docs/simhca.md §12: src/prm/wqe.hpp encodes the WQEs, src/prm/cqe.hpp
// decodes the CQE. This file only maps SendWr/RecvWr/Wc onto them;
// everything is inlined into the provider's operations, so a post is still
// a few stores into the ring.
#pragma once

#include <cerrno>
#include <cstddef>
#include <cstdint>

#include "openib/verbs.hpp"
#include "prm/cqe.hpp"
#include "prm/wqe.hpp"

namespace openib::lib {

using dp::kCqeSize;
using dp::kSeg;
using dp::SqLimits;

// The public enums are the manual's values (docs/library.md promises
// ibv_* values; §12.1, §12.4 and §6.10 use the same), so they convert by cast.
static_assert(uint8_t(QpType::kRc) == uint8_t(dp::QpType::kRc) && uint8_t(QpType::kUc) == uint8_t(dp::QpType::kUc) &&
              uint8_t(QpType::kUd) == uint8_t(dp::QpType::kUd));
static_assert(uint8_t(WrOpcode::kSend) == uint8_t(dp::Opcode::kSend) &&
              uint8_t(WrOpcode::kSendImm) == uint8_t(dp::Opcode::kSendImm) &&
              uint8_t(WrOpcode::kWrite) == uint8_t(dp::Opcode::kWrite) &&
              uint8_t(WrOpcode::kWriteImm) == uint8_t(dp::Opcode::kWriteImm) &&
              uint8_t(WrOpcode::kRead) == uint8_t(dp::Opcode::kRead) &&
              uint8_t(WrOpcode::kCmpSwap) == uint8_t(dp::Opcode::kCmpSwap) &&
              uint8_t(WrOpcode::kFetchAdd) == uint8_t(dp::Opcode::kFetchAdd));
static_assert(kSendSignaled == dp::kFlagSignaled && kSendSolicited == dp::kFlagSolicited &&
              kSendInline == dp::kFlagInline && kSendFence == dp::kFlagFence);
static_assert(int(kWcSuccess) == dp::kWcSuccess && int(kWcLocLenErr) == dp::kWcLocLenErr &&
              int(kWcLocQpOpErr) == dp::kWcLocQpOpErr && int(kWcLocProtErr) == dp::kWcLocProtErr &&
              int(kWcWrFlushErr) == dp::kWcWrFlushErr && int(kWcBadRespErr) == dp::kWcBadRespErr &&
              int(kWcLocAccessErr) == dp::kWcLocAccessErr && int(kWcRemInvReqErr) == dp::kWcRemInvReqErr &&
              int(kWcRemAccessErr) == dp::kWcRemAccessErr && int(kWcRemOpErr) == dp::kWcRemOpErr &&
              int(kWcRetryExcErr) == dp::kWcRetryExcErr && int(kWcRnrRetryExcErr) == dp::kWcRnrRetryExcErr &&
              int(kWcFatalErr) == dp::kWcFatalErr && int(kWcGeneralErr) == dp::kWcGeneralErr);
static_assert(int(kWcSend) == dp::kWcSend && int(kWcRdmaWrite) == dp::kWcRdmaWrite &&
              int(kWcRdmaRead) == dp::kWcRdmaRead && int(kWcCompSwap) == dp::kWcCompSwap &&
              int(kWcFetchAdd) == dp::kWcFetchAdd && int(kWcRecv) == dp::kWcRecv &&
              int(kWcRecvRdmaWithImm) == dp::kWcRecvRdmaWithImm);

inline dp::QpType to_dp(QpType t) { return static_cast<dp::QpType>(t); }

// §12.1 into `slot` (one SQ stride). `ahn` is the AH's number for UD.
// Returns 0, or EINVAL for a request the QP cannot carry (dp::WqeError).
inline int encode_send_wqe(std::byte* slot, size_t stride, QpType type, const SendWr& wr, uint32_t ahn,
                           const SqLimits& lim) {
  dp::SendWqe w;
  w.opcode = static_cast<dp::Opcode>(wr.opcode);
  w.flags = wr.flags;
  w.imm = wr.imm;
  w.wr_id = wr.wr_id;
  w.ahn = ahn;
  w.dest_qpn = wr.remote_qpn;
  w.qkey = wr.remote_qkey;
  w.remote_va = wr.remote_addr;
  w.rkey = wr.rkey;
  // IBA 9.4.5 / §12.1 atomic segment: CmpSwap swaps in `swap` if the
  // target equals `compare_add`; FetchAdd adds `compare_add`.
  const bool cas = wr.opcode == WrOpcode::kCmpSwap;
  w.swap_add = cas ? wr.swap : wr.compare_add;
  w.compare = cas ? wr.compare_add : 0;
  return dp::encode_send_wqe(slot, stride, to_dp(type), w, wr.sg, lim) == dp::WqeError::kNone ? 0 : EINVAL;
}

// §12.2 into `slot` (one RQ/SRQ stride).
inline int encode_recv_wqe(std::byte* slot, size_t stride, const RecvWr& wr, uint32_t max_sge) {
  return dp::encode_recv_wqe(slot, stride, wr.wr_id, wr.sg, max_sge) == dp::WqeError::kNone ? 0 : EINVAL;
}

// §12.4 CQE into a Wc (struct ibv_wc's fields). Returns the wqe_index.
inline uint16_t decode_cqe(const std::byte* c, Wc& wc) {
  const dp::Cqe e = dp::decode_cqe(c);
  wc.wr_id = e.wr_id;
  wc.byte_len = e.byte_len;
  wc.imm = e.imm;
  wc.qp_num = e.qpn;
  wc.src_qp = e.src_qp;
  wc.slid = e.slid;
  wc.sl = e.sl;
  wc.dlid_path_bits = e.dlid_path_bits;
  wc.opcode = e.opcode;
  wc.status = e.status;
  wc.grh = e.grh;
  wc.has_imm = e.has_imm;
  wc.solicited = e.solicited;
  wc.vendor_err = e.vendor_err;
  wc.pkey_index = e.pkey_index;
  return e.wqe_index;
}

}  // namespace openib::lib
