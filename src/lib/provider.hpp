// The data path's seam (docs/library.md "Providers"): everything libopenib
// needs to know of a device kind's ring formats, as one table of
// operations, as rdma-core's providers (verbs_context_ops). The library
// keeps the rings, counters and checks; a provider only encodes WQEs,
// decodes CQEs and stores doorbells, and never names a Context, QP or CQ.
// The Context chooses one at open from the name ibd reports at HELLO
// (docs/client-protocol.md §4.1); every QP, SRQ and CQ keeps a pointer to
// it, so a post or a poll is one indirect call per step, no lookup.
//
// The layouts are data (sizes), the steps plain function pointers: no
// state of their own, all state in the caller's rings and records.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "common/result.hpp"
#include "openib/verbs.hpp"

namespace openib::lib {

// What one SQ stride holds for a QP type: its created capabilities, before
// the device's limits (docs/library.md "Queue pairs").
struct SqCaps {
  uint32_t max_sge = 1;
  uint32_t max_inline = 0;
};

struct Provider {
  const char* name = nullptr;  // at most proto::kProviderNameSize bytes

  // ---- layouts (creation) ----
  uint32_t cqe_size = 0;       // bytes per CQE: a CQ ring is cqe_size << log_size
  uint32_t dbr_size = 0;       // bytes of a QP's, CQ's or SRQ's doorbell record (<= Arena::kAlign)
  uint32_t uar_page_size = 0;  // HELLO's uar_size is a non-zero multiple of it
  uint32_t max_log_sq_stride = 0, max_log_rq_stride = 0;
  // The smallest log2 stride that holds a worst-case WQE: a send WQE of
  // `type` with max_sge SGEs or max_inline inline bytes, a receive WQE of
  // max_sge SGEs. Above the max_log_*: the QP is refused.
  uint32_t (*log_sq_stride)(QpType type, uint32_t max_sge, uint32_t max_inline) = nullptr;
  uint32_t (*log_rq_stride)(uint32_t max_sge) = nullptr;
  // What a stride of 2^log_stride bytes holds.
  SqCaps (*sq_caps)(QpType type, uint32_t log_stride) = nullptr;
  uint32_t (*rq_max_sge)(uint32_t log_stride) = nullptr;

  // ---- the data path ----
  // One WQE into `slot` (one stride of `stride` bytes). 0, or EINVAL for
  // a request the QP cannot carry (nothing useful written then).
  int (*encode_send)(std::byte* slot, size_t stride, QpType type, const SendWr& wr, uint32_t ahn,
                     const SqCaps& caps) = nullptr;
  int (*encode_recv)(std::byte* slot, size_t stride, const RecvWr& wr, uint32_t max_sge) = nullptr;
  // After the WQEs up to `producer` are written: the SQ producer counter
  // into the QP's record, then the doorbell on the UAR page.
  void (*ring_sq)(std::byte* uar, std::byte* qp_dbr, uint32_t qpn, uint32_t producer) = nullptr;
  // The RQ's (the SRQ's) producer counter into its record.
  void (*update_rq)(std::byte* qp_dbr, uint32_t producer) = nullptr;
  void (*update_srq)(std::byte* srq_dbr, uint32_t producer) = nullptr;
  // A QP back in Reset: both producer counters of its record to 0.
  void (*reset_qp)(std::byte* qp_dbr) = nullptr;
  // The CQE at consumer counter `cons` of a ring of 2^log_size, if the
  // consumer owns it: decoded into `wc` (acquire: after the ownership
  // check), returning its WQE index (0 to 0xffff); -1 if not owned yet.
  int (*poll_cqe)(const std::byte* ring, uint32_t cons, uint32_t log_size, Wc& wc) = nullptr;
  // The CQ's consumer counter into its record (after a poll that took some).
  void (*update_cq)(std::byte* cq_dbr, uint32_t cons) = nullptr;
  // Arms the CQ for its next (solicited) completion; `sn` changes per arm.
  void (*arm_cq)(std::byte* uar, std::byte* cq_dbr, uint32_t cqn, bool solicited_only, uint32_t sn,
                 uint32_t cons) = nullptr;
};

// The providers built in: simhca's (providers/simhca.cpp).
extern const Provider kSimhcaProvider;

// The provider registered as `name`, or nullptr.
const Provider* find_provider(std::string_view name);

// Adds `p` to the table, or replaces the entry of that name: a test's fake
// provider (one wrapping simhca's, say) or a debugging one. `p` must
// outlive every Context opened with it. EINVAL for a name that is empty or
// longer than proto::kProviderNameSize, an operation missing, or a record
// larger than the ring arena's alignment.
Result<void> register_provider(const Provider& p);

// What Context::open uses: $OPENIB_PROVIDER if set (a test and debugging
// knob, logged), else `reported`, the name ibd gave at HELLO; looked up in
// the table. An unknown name: EPROTONOSUPPORT, naming it.
Result<const Provider*> choose_provider(std::string_view reported);

}  // namespace openib::lib
