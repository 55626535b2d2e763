// The driver's side of the data path (docs/simhca.md §12): work requests
// and completions in IBA chapter 11 vocabulary, and the pure encoders of
// the send WQE (§12.1), receive WQE (§12.2) and decoder of the CQE (§12.4).
// The driver's own reading of the manual: no code is shared with simhca.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "hca/verbs.hpp"

namespace openib::hca {

// §12.1 opcode, IBA 10.7.1 work request types.
enum class WrOpcode : uint8_t {
  kSend = 0, kSendImm = 1, kWrite = 2, kWriteImm = 3, kRead = 4, kCmpSwap = 5, kFetchAdd = 6,
};

struct Sge {
  uint64_t addr = 0;  // a virtual address inside the lkey's region
  uint32_t length = 0;
  uint32_t lkey = 0;
};

struct SendWr {
  uint64_t wr_id = 0;
  WrOpcode opcode = WrOpcode::kSend;
  bool signaled = true, solicited = false, fence = false;
  bool inline_data = false;  // the SGEs' bytes are copied into the WQE (addr: a pointer)
  uint32_t imm = 0;
  std::vector<Sge> sg;
  uint64_t remote_addr = 0;  // RDMA and atomics
  uint32_t rkey = 0;
  uint64_t compare = 0, swap_add = 0;  // atomics
  uint32_t ahn = 0, remote_qpn = 0, remote_qkey = 0x80000000;  // UD (bit 31: the QP's Q_Key)
};

struct RecvWr {
  uint64_t wr_id = 0;
  std::vector<Sge> sg;
};

// §12.4 (enum ibv_wc_status / ibv_wc_opcode values).
enum WcStatus : uint8_t {
  kWcSuccess = 0, kWcLocLenErr = 1, kWcLocQpOpErr = 2, kWcLocProtErr = 4, kWcWrFlushErr = 5,
  kWcBadRespErr = 7, kWcLocAccessErr = 8, kWcRemInvReqErr = 9, kWcRemAccessErr = 10,
  kWcRemOpErr = 11, kWcRetryExcErr = 12, kWcRnrRetryExcErr = 13, kWcFatalErr = 19,
  kWcGeneralErr = 21,
};
enum WcOpcode : uint8_t {
  kWcSend = 0, kWcRdmaWrite = 1, kWcRdmaRead = 2, kWcCompSwap = 3, kWcFetchAdd = 4,
  kWcRecv = 128, kWcRecvRdmaWithImm = 129,
};

struct WorkCompletion {
  uint64_t wr_id = 0;
  uint32_t byte_len = 0, imm = 0, qpn = 0, src_qp = 0;
  uint16_t slid = 0, pkey_index = 0, wqe_index = 0;
  uint8_t sl = 0, dlid_path_bits = 0, opcode = 0, status = 0, vendor_err = 0;
  bool grh = false, has_imm = false, solicited = false;
};

// §12.1: the WQE bytes (a multiple of 16), or EINVAL (too many segments,
// inline data over 255 segments). Inline data is read from the SGEs'
// addresses, which must be valid pointers in this process.
Result<Bytes> encode_send_wqe(const SendWr& wr, QpType type);
Bytes encode_recv_wqe(const RecvWr& wr);
WorkCompletion decode_cqe(std::span<const std::byte> cqe);

}  // namespace openib::hca
