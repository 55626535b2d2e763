// The data path of ibv_context.ops (what ibv_post_send, ibv_post_recv,
// ibv_post_srq_recv, ibv_poll_cq and ibv_req_notify_cq call inline): each
// work request is rewritten field by field into libopenib's and posted
// there; the scatter/gather lists are used in place (ibv_sge and
// openib::Sge have one layout). No copy of data, no system call; one spin
// lock per queue, as rdma-core's providers take, so that the verbs are
// thread-safe (docs/library.md "Verbs ABI").
#include <endian.h>
#include <cstddef>
#include <mutex>

#include "abi/verbs/objects.hpp"

namespace openib::verbs {

static_assert(sizeof(ibv_sge) == sizeof(openib::Sge) && offsetof(ibv_sge, addr) == offsetof(openib::Sge, addr) &&
                  offsetof(ibv_sge, length) == offsetof(openib::Sge, length) &&
                  offsetof(ibv_sge, lkey) == offsetof(openib::Sge, lkey),
              "an ibv_sge list is used as libopenib's Sge list in place");

namespace {

constexpr unsigned kFlagsSupported = IBV_SEND_FENCE | IBV_SEND_SIGNALED | IBV_SEND_SOLICITED | IBV_SEND_INLINE;

uint32_t send_flags(unsigned f) {
  return (f & IBV_SEND_SIGNALED ? openib::kSendSignaled : 0) | (f & IBV_SEND_SOLICITED ? openib::kSendSolicited : 0) |
         (f & IBV_SEND_INLINE ? openib::kSendInline : 0) | (f & IBV_SEND_FENCE ? openib::kSendFence : 0);
}

// 0, or EINVAL for an opcode this device does not carry (memory windows,
// local invalidate, send with invalidate, TSO, driver opcodes).
int opcode_of(ibv_wr_opcode op, openib::WrOpcode& out) {
  switch (op) {
    case IBV_WR_SEND: out = openib::WrOpcode::kSend; return 0;
    case IBV_WR_SEND_WITH_IMM: out = openib::WrOpcode::kSendImm; return 0;
    case IBV_WR_RDMA_WRITE: out = openib::WrOpcode::kWrite; return 0;
    case IBV_WR_RDMA_WRITE_WITH_IMM: out = openib::WrOpcode::kWriteImm; return 0;
    case IBV_WR_RDMA_READ: out = openib::WrOpcode::kRead; return 0;
    case IBV_WR_ATOMIC_CMP_AND_SWP: out = openib::WrOpcode::kCmpSwap; return 0;
    case IBV_WR_ATOMIC_FETCH_AND_ADD: out = openib::WrOpcode::kFetchAdd; return 0;
    default: return EINVAL;
  }
}

int to_send_wr(const ibv_qp& qp, const ibv_send_wr& in, openib::SendWr& out) {
  if (in.num_sge < 0 || (in.num_sge && !in.sg_list) || (in.send_flags & ~kFlagsSupported)) return EINVAL;
  if (int rc = opcode_of(in.opcode, out.opcode)) return rc;
  out.wr_id = in.wr_id;
  out.flags = send_flags(in.send_flags);
  // ibv_send_wr's imm_data is __be32 (the bytes the wire carries, IBA
  // 9.3.5 ImmDt); openib's imm is the value (the driver writes it big
  // endian). rxe showed it: carried unchanged, the bytes went out swapped
  // (udaddy's reply QPN, which it sends as immediate data, came out 0).
  out.imm = be32toh(in.imm_data);
  out.sg = {reinterpret_cast<const openib::Sge*>(in.sg_list), size_t(in.num_sge)};
  switch (in.opcode) {
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM:
    case IBV_WR_RDMA_READ:
      out.remote_addr = in.wr.rdma.remote_addr;
      out.rkey = in.wr.rdma.rkey;
      break;
    case IBV_WR_ATOMIC_CMP_AND_SWP:
    case IBV_WR_ATOMIC_FETCH_AND_ADD:
      out.remote_addr = in.wr.atomic.remote_addr;
      out.rkey = in.wr.atomic.rkey;
      out.compare_add = in.wr.atomic.compare_add;
      out.swap = in.wr.atomic.swap;
      break;
    default: break;
  }
  if (qp.qp_type == IBV_QPT_UD) {
    if (!in.wr.ud.ah) return EINVAL;
    out.ah = ours<Ah>(in.wr.ud.ah)->impl.get();
    out.remote_qpn = in.wr.ud.remote_qpn;
    out.remote_qkey = in.wr.ud.remote_qkey;
  }
  return 0;
}

int to_recv_wr(const ibv_recv_wr& in, openib::RecvWr& out) {
  if (in.num_sge < 0 || (in.num_sge && !in.sg_list)) return EINVAL;
  out.wr_id = in.wr_id;
  out.sg = {reinterpret_cast<const openib::Sge*>(in.sg_list), size_t(in.num_sge)};
  return 0;
}

void to_ibv_wc(const openib::Wc& in, ibv_wc& out) {
  out.wr_id = in.wr_id;
  out.status = ibv_wc_status(in.status);
  out.opcode = ibv_wc_opcode(in.opcode);
  out.vendor_err = in.vendor_err;
  out.byte_len = in.byte_len;
  out.imm_data = htobe32(in.imm);  // (the wire's bytes again, as to_send_wr)
  out.qp_num = in.qp_num;
  out.src_qp = in.src_qp;
  out.wc_flags = (in.grh ? IBV_WC_GRH : 0) | (in.has_imm ? IBV_WC_WITH_IMM : 0);
  out.pkey_index = in.pkey_index;
  out.slid = in.slid;
  out.sl = in.sl;
  out.dlid_path_bits = in.dlid_path_bits;
}

// Each request of the list in turn under the queue's lock: `post(wr)` is 0
// or an errno; at the first failure *bad names that request (the ones
// before it are posted), as ibv_post_send and ibv_post_recv say.
template <class Wr, class Post> int post_list(SpinLock& lock, Wr* wr, Wr** bad, Post post) {
  std::lock_guard lk(lock);
  for (; wr; wr = wr->next)
    if (const int rc = post(*wr)) {
      *bad = wr;
      return rc;
    }
  return 0;
}

}  // namespace

int post_send(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad) {
  Qp& q = *ours<Qp>(qp);
  return post_list(q.sq_lock, wr, bad, [&](const ibv_send_wr& in) {
    openib::SendWr w;
    const int rc = to_send_wr(*qp, in, w);
    return rc ? rc : q.impl->post_send(w);
  });
}

int post_recv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad) {
  Qp& q = *ours<Qp>(qp);
  return post_list(q.rq_lock, wr, bad, [&](const ibv_recv_wr& in) {
    openib::RecvWr w;
    const int rc = to_recv_wr(in, w);
    return rc ? rc : q.impl->post_recv(w);
  });
}

int post_srq_recv(ibv_srq* srq, ibv_recv_wr* wr, ibv_recv_wr** bad) {
  Srq& s = *ours<Srq>(srq);
  return post_list(s.lock, wr, bad, [&](const ibv_recv_wr& in) {
    openib::RecvWr w;
    const int rc = to_recv_wr(in, w);
    return rc ? rc : s.impl->post_recv(w);
  });
}

namespace {
// poll_cq's batch, one per thread, initialized once. A batch on the stack
// was default-initialized (openib::Wc's member initializers) on every
// call, empty polls included: about 140 instructions of ours at -O1 on
// top of libopenib's 65 for an empty poll; now about 70 (the lock, the
// call, the loop). Callgrind of ib_send_lat, docs/performance.md "Verbs
// ABI: perftest against openib-perf".
constinit thread_local openib::Wc poll_batch[16];
}  // namespace

// Completions in batches of up to 16 through libopenib's poll, each turned
// into an ibv_wc (rdma-core's providers decode CQEs straight into the
// caller's array; ours decode into the thread's batch, then a few stores).
int poll_cq(ibv_cq* cq, int n, ibv_wc* wc) {
  if (n < 0) return -1;
  Cq& ours_cq = *ours<Cq>(cq);
  std::lock_guard lk(ours_cq.lock);
  openib::Cq& q = *ours_cq.impl;
  openib::Wc* const batch = poll_batch;
  int done = 0;
  while (done < n) {
    const int want = n - done < 16 ? n - done : 16;
    const int got = q.poll({batch, size_t(want)});
    for (int i = 0; i < got; ++i) to_ibv_wc(batch[i], wc[done + i]);
    done += got;
    if (got < want) break;
  }
  return done;
}

int req_notify_cq(ibv_cq* cq, int solicited_only) {
  Cq& ours_cq = *ours<Cq>(cq);
  std::lock_guard lk(ours_cq.lock);
  auto r = ours_cq.impl->req_notify(solicited_only != 0);
  return r ? 0 : fail_int("ibv_req_notify_cq", r.error());
}

}  // namespace openib::verbs
