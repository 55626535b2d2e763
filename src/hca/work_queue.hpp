// The driver's side of the data path (docs/simhca.md §12): work requests
// and completions in IBA chapter 11 vocabulary, written and read by the
// driver's one reading of the manual, src/prm (shared with libopenib; no
// code is shared with simhca, whose reading is the oracle in tests).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "hca/verbs.hpp"
#include "prm/cqe.hpp"
#include "prm/wqe.hpp"

namespace openib::hca {

// §12.1 opcode, IBA 10.7.1 work request types.
using WrOpcode = dp::Opcode;

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
  uint32_t ahn = 0, remote_qpn = 0, remote_qkey = dp::kQkeyOfQp;  // UD
};

struct RecvWr {
  uint64_t wr_id = 0;
  std::vector<Sge> sg;
};

// §12.4 status and opcode values, and the CQE's fields.
using dp::WcOpcode;
using dp::WcStatus;
using enum dp::WcStatus;
using enum dp::WcOpcode;
using WorkCompletion = dp::Cqe;

// §12.1 into `slot` (one SQ stride), checked against the QP's limits.
Result<void> write_send_wqe(std::span<std::byte> slot, const SendWr& wr, QpType type, const dp::SqLimits& lim);
// §12.2 into `slot` (one RQ/SRQ stride).
Result<void> write_recv_wqe(std::span<std::byte> slot, const RecvWr& wr, uint32_t max_sge);

// The same as bytes, for callers that copy them into the ring: a send WQE
// (a multiple of 16 bytes, at most the largest stride of §6.10) or EINVAL;
// a receive WQE (16 bytes per segment; one of over 255 segments comes back
// unwritten, at its size, for the caller's stride check to refuse).
Result<Bytes> encode_send_wqe(const SendWr& wr, QpType type);
Bytes encode_recv_wqe(const RecvWr& wr);
// §12.4: a CQE's fields; bytes missing from a short span read as zero.
WorkCompletion decode_cqe(std::span<const std::byte> cqe);

}  // namespace openib::hca
