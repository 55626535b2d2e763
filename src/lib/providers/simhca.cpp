// The simhca provider (provider.hpp): simhca's ring formats as
// docs/simhca.md writes them down, through the driver's one reading of
// them (src/prm: wqe.hpp, cqe.hpp, uar.hpp) and the library's mapping of
// its public types onto it (lib/wqe.hpp, lib/doorbell.hpp). Each operation
// is one of those inlined into a function of its own: the indirect call is
// the seam's only cost.
#include "lib/doorbell.hpp"
#include "lib/provider.hpp"
#include "lib/wqe.hpp"
#include "prm/uar.hpp"

namespace openib::lib {

namespace {

// §6.10: the stride ranges and what a stride holds.
uint32_t log_sq_stride(QpType type, uint32_t max_sge, uint32_t max_inline) {
  return dp::log_sq_stride(to_dp(type), max_sge, max_inline);
}
uint32_t log_rq_stride(uint32_t max_sge) { return dp::log_rq_stride(max_sge); }
// §12.1: the largest header before the data; inline data has a 4-byte header.
SqCaps sq_caps(QpType type, uint32_t log_stride) {
  const size_t stride = size_t{1} << log_stride, hdr = dp::max_header_bytes(to_dp(type));
  return {uint32_t((stride - hdr) / kSeg), uint32_t(stride - hdr - 4)};
}
// §12.2: one header segment, then the data segments.
uint32_t rq_max_sge(uint32_t log_stride) { return uint32_t((size_t{1} << log_stride) / kSeg - 1); }

// §12.1, §12.2.
int encode_send(std::byte* slot, size_t stride, QpType type, const SendWr& wr, uint32_t ahn, const SqCaps& caps) {
  return encode_send_wqe(slot, stride, type, wr, ahn, SqLimits{caps.max_sge, caps.max_inline});
}
int encode_recv(std::byte* slot, size_t stride, const RecvWr& wr, uint32_t max_sge) {
  return encode_recv_wqe(slot, stride, wr, max_sge);
}

// §12.3 the record (release: the WQEs before the counter), §12.5 the
// doorbell and the scanner's wake-up.
void ring_sq(std::byte* uar, std::byte* qp_dbr, uint32_t qpn, uint32_t producer) {
  dbr_store(qp_dbr, dp::kDbrQpSq, producer);
  Uar(uar).ring_sq(qpn, producer);
}
// §12.3: the RQ's counter needs no doorbell (the device reads the record
// when a message arrives).
void update_rq(std::byte* qp_dbr, uint32_t producer) { dbr_store(qp_dbr, dp::kDbrQpRq, producer); }
void update_srq(std::byte* srq_dbr, uint32_t producer) { dbr_store(srq_dbr, dp::kDbrSrq, producer); }
void reset_qp(std::byte* qp_dbr) {
  dbr_store(qp_dbr, dp::kDbrQpRq, 0);
  dbr_store(qp_dbr, dp::kDbrQpSq, 0);
}

// §12.4 with §9.2's ownership phase.
int poll_cqe(const std::byte* ring, uint32_t cons, uint32_t log_size, Wc& wc) {
  const std::byte* cqe = ring + size_t(cons & ((1u << log_size) - 1)) * kCqeSize;
  if (!dp::cqe_owned(cqe, cons, log_size)) return -1;  // acquire: the CQE's bytes are visible
  return decode_cqe(cqe, wc);
}
// §12.3 the CQ record's consumer counter.
void update_cq(std::byte* cq_dbr, uint32_t cons) { dbr_store(cq_dbr, dp::kDbrCqCons, cons); }
// §7.3, §12.5.1: the arm into the CQ's record first (another CQ's arm may
// overwrite the page's one CQ_ARM word before the device reads it), then
// the doorbell.
void arm_cq(std::byte* uar, std::byte* cq_dbr, uint32_t cqn, bool solicited_only, uint32_t sn, uint32_t cons) {
  const dp::CqArm cmd = solicited_only ? dp::CqArm::kSolicited : dp::CqArm::kNext;
  dbr_store(cq_dbr, dp::kDbrCqArm, dp::cq_arm_record(cqn, cmd, sn));
  Uar(uar).arm_cq(cqn, cmd, sn, cons);
}

}  // namespace

const Provider kSimhcaProvider = {
    .name = "simhca",
    .cqe_size = uint32_t(kCqeSize),        // §12.4
    .dbr_size = uint32_t(dp::kDbrSize),    // §12.3
    .uar_page_size = uint32_t(dp::kUarPageSize),  // §4
    .max_log_sq_stride = dp::kMaxLogSqStride,     // §6.10
    .max_log_rq_stride = dp::kMaxLogRqStride,
    .log_sq_stride = log_sq_stride,
    .log_rq_stride = log_rq_stride,
    .sq_caps = sq_caps,
    .rq_max_sge = rq_max_sge,
    .encode_send = encode_send,
    .encode_recv = encode_recv,
    .ring_sq = ring_sq,
    .update_rq = update_rq,
    .update_srq = update_srq,
    .reset_qp = reset_qp,
    .poll_cqe = poll_cqe,
    .update_cq = update_cq,
    .arm_cq = arm_cq,
};

}  // namespace openib::lib
