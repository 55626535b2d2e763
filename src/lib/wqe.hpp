// The client's data path in the public API's words (include/openib/
// verbs.hpp) over the driver's one reading of docs/simhca.md §12:
// src/prm/wqe.hpp encodes the WQEs, src/prm/cqe.hpp decodes the CQE. This
// file only maps SendWr/RecvWr/Wc onto them; everything is inlined into
// post_send/post_recv/poll, so a post is still a few stores into the ring.
#pragma once

#include <cerrno>
#include <cstddef>
#include <cstdint>

#include "openib/verbs.hpp"
#include "prm/cqe.hpp"
#include "prm/wqe.hpp"

namespace openib::lib {

using prm::kCqeSize;
using prm::kSeg;
using prm::SqLimits;

// The public enums are the manual's values (docs/library.md promises
// ibv_* values; §12.1, §12.4 and §6.10 use the same), so they convert by cast.
static_assert(uint8_t(QpType::kRc) == uint8_t(prm::QpType::kRc) && uint8_t(QpType::kUc) == uint8_t(prm::QpType::kUc) &&
              uint8_t(QpType::kUd) == uint8_t(prm::QpType::kUd));
static_assert(uint8_t(WrOpcode::kSend) == uint8_t(prm::Opcode::kSend) &&
              uint8_t(WrOpcode::kSendImm) == uint8_t(prm::Opcode::kSendImm) &&
              uint8_t(WrOpcode::kWrite) == uint8_t(prm::Opcode::kWrite) &&
              uint8_t(WrOpcode::kWriteImm) == uint8_t(prm::Opcode::kWriteImm) &&
              uint8_t(WrOpcode::kRead) == uint8_t(prm::Opcode::kRead) &&
              uint8_t(WrOpcode::kCmpSwap) == uint8_t(prm::Opcode::kCmpSwap) &&
              uint8_t(WrOpcode::kFetchAdd) == uint8_t(prm::Opcode::kFetchAdd));
static_assert(kSendSignaled == prm::kFlagSignaled && kSendSolicited == prm::kFlagSolicited &&
              kSendInline == prm::kFlagInline && kSendFence == prm::kFlagFence);
static_assert(int(kWcSuccess) == prm::kWcSuccess && int(kWcLocLenErr) == prm::kWcLocLenErr &&
              int(kWcLocQpOpErr) == prm::kWcLocQpOpErr && int(kWcLocProtErr) == prm::kWcLocProtErr &&
              int(kWcWrFlushErr) == prm::kWcWrFlushErr && int(kWcBadRespErr) == prm::kWcBadRespErr &&
              int(kWcLocAccessErr) == prm::kWcLocAccessErr && int(kWcRemInvReqErr) == prm::kWcRemInvReqErr &&
              int(kWcRemAccessErr) == prm::kWcRemAccessErr && int(kWcRemOpErr) == prm::kWcRemOpErr &&
              int(kWcRetryExcErr) == prm::kWcRetryExcErr && int(kWcRnrRetryExcErr) == prm::kWcRnrRetryExcErr &&
              int(kWcFatalErr) == prm::kWcFatalErr && int(kWcGeneralErr) == prm::kWcGeneralErr);
static_assert(int(kWcSend) == prm::kWcSend && int(kWcRdmaWrite) == prm::kWcRdmaWrite &&
              int(kWcRdmaRead) == prm::kWcRdmaRead && int(kWcCompSwap) == prm::kWcCompSwap &&
              int(kWcFetchAdd) == prm::kWcFetchAdd && int(kWcRecv) == prm::kWcRecv &&
              int(kWcRecvRdmaWithImm) == prm::kWcRecvRdmaWithImm);

inline prm::QpType to_prm(QpType t) { return static_cast<prm::QpType>(t); }

// §12.1 into `slot` (one SQ stride). `ahn` is the AH's number for UD.
// Returns 0, or EINVAL for a request the QP cannot carry (prm::WqeError).
inline int encode_send_wqe(std::byte* slot, size_t stride, QpType type, const SendWr& wr, uint32_t ahn,
                           const SqLimits& lim) {
  prm::SendWqe w;
  w.opcode = static_cast<prm::Opcode>(wr.opcode);
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
  return prm::encode_send_wqe(slot, stride, to_prm(type), w, wr.sg, lim) == prm::WqeError::kNone ? 0 : EINVAL;
}

// §12.2 into `slot` (one RQ/SRQ stride).
inline int encode_recv_wqe(std::byte* slot, size_t stride, const RecvWr& wr, uint32_t max_sge) {
  return prm::encode_recv_wqe(slot, stride, wr.wr_id, wr.sg, max_sge) == prm::WqeError::kNone ? 0 : EINVAL;
}

// §12.4 CQE into a Wc (struct ibv_wc's fields). Returns the wqe_index.
inline uint16_t decode_cqe(const std::byte* c, Wc& wc) {
  const prm::Cqe e = prm::decode_cqe(c);
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
