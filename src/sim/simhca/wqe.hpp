// Pure codecs of the data path's host-memory formats, docs/simhca.md §12:
// the send WQE (§12.1), the receive WQE (§12.2) and the CQE (§12.4), and
// the memory-key translation and protection checks of IBA 10.6 (§12.6).
// Spans in, values out; no device state. A decoder's Error::code is the
// §12.4 completion status the WQE completes with. The fuzz target
// test/fuzz/fuzz_simhca_wqe.cpp drives these directly.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "common/result.hpp"
#include "sim/simhca/be.hpp"

namespace openib::simhca {

// §12.4 completion status (enum ibv_wc_status values; IBA 11.6.2).
enum WcStatus : uint8_t {
  kWcSuccess = 0,
  kWcLocLenErr = 1,
  kWcLocQpOpErr = 2,
  kWcLocProtErr = 4,
  kWcWrFlushErr = 5,
  kWcBadRespErr = 7,
  kWcLocAccessErr = 8,
  kWcRemInvReqErr = 9,
  kWcRemAccessErr = 10,
  kWcRemOpErr = 11,
  kWcRetryExcErr = 12,
  kWcRnrRetryExcErr = 13,
  kWcFatalErr = 19,
  kWcGeneralErr = 21,
};
const char* wc_status_name(uint8_t s);

// §12.4 CQE opcode (enum ibv_wc_opcode values).
enum WcOpcode : uint8_t {
  kWcSend = 0, kWcRdmaWrite = 1, kWcRdmaRead = 2, kWcCompSwap = 3, kWcFetchAdd = 4,
  kWcRecv = 128, kWcRecvRdmaWithImm = 129,
};

// §12.1 control segment opcode and flags.
enum WrOpcode : uint8_t {
  kWrSend = 0, kWrSendImm = 1, kWrWrite = 2, kWrWriteImm = 3, kWrRead = 4,
  kWrCmpSwap = 5, kWrFetchAdd = 6,
};
inline constexpr uint8_t kWqeSignaled = 1, kWqeSolicited = 2, kWqeInline = 4, kWqeFence = 8;
inline constexpr size_t kSegSize = 16;
inline constexpr uint32_t kInlineMark = 0x80000000u;
inline constexpr uint32_t kMaxMsgSize = 1u << 31;  // §6.1 max_msg_size

// §12.1 data segment.
struct Sge {
  uint32_t length = 0, lkey = 0;
  uint64_t addr = 0;
};

struct SendWqe {
  uint8_t opcode = 0, flags = 0, num_ds = 0;
  uint32_t imm = 0;
  uint64_t wr_id = 0;
  uint32_t ahn = 0, dest_qpn = 0, qkey = 0;  // UD address segment
  uint64_t remote_va = 0;                    // remote address segment
  uint32_t rkey = 0;
  uint64_t swap_add = 0, compare = 0;        // atomic segment
  std::vector<Sge> sges;                     // data segments, or
  Bytes inline_data;                         // inline data (flags & kWqeInline)
  uint64_t length() const;                   // message length in bytes
  bool is_atomic() const { return opcode == kWrCmpSwap || opcode == kWrFetchAdd; }
};

struct WqeLimits {
  uint16_t max_sge = 16;
  uint16_t max_inline = 512;
};

// §12.1: `wqe` is one SQ stride. qp_type is §6.10's (0 RC, 1 UC, 2 UD,
// 3 SMI, 4 GSI, 5 RAW: control and data segments only, §16.5). Malformed (bad opcode for the type, num_ds out of the
// stride, reserved flag bits, missing segments, inline over max_inline,
// atomic without exactly one 8-byte data segment): kWcLocQpOpErr. A
// message over max_msg_size: kWcLocLenErr.
Result<SendWqe> decode_send_wqe(ByteView wqe, uint8_t qp_type, const WqeLimits& lim);

// §12.2: one RQ/SRQ stride. num_sge over max_sge or beyond the stride:
// kWcLocQpOpErr.
struct RecvWqe {
  uint64_t wr_id = 0;
  std::vector<Sge> sges;
  uint64_t capacity() const;
};
Result<RecvWqe> decode_recv_wqe(ByteView wqe, uint16_t max_sge);

// §12.4
struct Cqe {
  uint64_t wr_id = 0;
  uint32_t byte_len = 0, imm = 0, qpn = 0, src_qp = 0;
  uint16_t slid = 0;
  uint8_t sl = 0, dlid_path_bits = 0, opcode = 0, status = 0, flags = 0, vendor_err = 0;
  uint16_t pkey_index = 0, wqe_index = 0;
};
inline constexpr uint8_t kCqeFlagGrh = 1, kCqeFlagImm = 2, kCqeFlagSolicited = 4;
std::array<std::byte, 64> encode_cqe(const Cqe& c, uint8_t owner);
Cqe decode_cqe(ByteView b);  // for tests; owner not returned

// §12.6 memory keys (IBA 10.6): translation of a virtual range through a
// key's page list into IOVA extents, with the protection checks in order:
// key valid (exists, full key matches), PD, bounds, access rights.
struct KeyRegion {
  uint32_t key = 0, pdn = 0, access = 0;
  uint64_t start_va = 0, length = 0;
  uint8_t log_page_size = 12;
  const std::vector<uint64_t>* pages = nullptr;
};
inline constexpr uint32_t kMrLocalWrite = 1, kMrRemoteWrite = 2, kMrRemoteRead = 4,
                          kMrRemoteAtomic = 8;
enum class KeyFault : uint8_t { kNone, kInvalidKey, kWrongPd, kBounds, kAccess };
struct Extent {
  uint64_t iova = 0;
  uint64_t len = 0;
};
// `region` null: the key names no region (kInvalidKey). On kNone, `out`
// has the extents in order (appended; adjacent pages merged).
KeyFault translate(const KeyRegion* region, uint32_t key, uint32_t pdn, uint64_t va, uint64_t len,
                   uint32_t need, std::vector<Extent>& out);

}  // namespace openib::simhca
