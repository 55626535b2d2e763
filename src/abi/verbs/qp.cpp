// Queue pairs (IBA 10.2, 11.2.4-11.2.5): create, modify, query, destroy.
#include <cstring>

#include "abi/verbs/objects.hpp"

using namespace openib::verbs;

namespace {

// The attribute-mask bits libopenib's modify takes: the QP state machine's
// attributes of IBA 11.2.4.2 (table 91) that RC, UC and UD use. Alternate
// paths, SQD draining notices and rate limits are not there.
constexpr int kMaskSupported = IBV_QP_STATE | IBV_QP_CUR_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX |
                               IBV_QP_PORT | IBV_QP_QKEY | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_TIMEOUT |
                               IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_RQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC |
                               IBV_QP_MIN_RNR_TIMER | IBV_QP_SQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
                               IBV_QP_DEST_QPN;

void fill_cap(const openib::QpCap& c, ibv_qp_cap& out) {
  out.max_send_wr = c.max_send_wr;
  out.max_recv_wr = c.max_recv_wr;
  out.max_send_sge = c.max_send_sge;
  out.max_recv_sge = c.max_recv_sge;
  out.max_inline_data = c.max_inline_data;
}

}  // namespace

extern "C" {

ibv_qp* ibv_create_qp(ibv_pd* pd, ibv_qp_init_attr* init) {
  if (!pd || !init || !init->send_cq || (!init->recv_cq && !init->srq))
    return fail_null<ibv_qp>("ibv_create_qp", openib::err(EINVAL, "no PD, attributes or CQs"));
  // Objects of another context: their handles would name other objects (or
  // nothing) on this context's connection to ibd.
  if (init->send_cq->context != pd->context || (init->recv_cq && init->recv_cq->context != pd->context) ||
      (init->srq && init->srq->context != pd->context))
    return fail_null<ibv_qp>("ibv_create_qp", openib::err(EINVAL, "a CQ or SRQ of another context"));
  openib::QpInit qi;
  if (int rc = to_qp_type(init->qp_type, qi.type))
    return fail_null<ibv_qp>("ibv_create_qp", openib::err(rc, "QP type {}", int(init->qp_type)));
  // rdma-core lets an SRQ QP name no receive CQ only for XRC; a receive CQ
  // is needed here (the send CQ stands in, as the kernel does not).
  ibv_cq* rcq = init->recv_cq ? init->recv_cq : init->send_cq;
  qi.send_cq = ours<Cq>(init->send_cq)->impl.get();
  qi.recv_cq = ours<Cq>(rcq)->impl.get();
  qi.srq = init->srq ? ours<Srq>(init->srq)->impl.get() : nullptr;
  qi.cap.max_send_wr = init->cap.max_send_wr;
  qi.cap.max_recv_wr = init->srq ? 0 : init->cap.max_recv_wr;
  qi.cap.max_send_sge = init->cap.max_send_sge;
  qi.cap.max_recv_sge = init->srq ? 0 : init->cap.max_recv_sge;
  qi.cap.max_inline_data = init->cap.max_inline_data;
  qi.sq_sig_all = init->sq_sig_all != 0;
  Context& ctx = *ctx_of(pd->context);
  auto r = ctx.impl->create_qp(*ours<Pd>(pd)->impl, qi);
  if (!r) return fail_null<ibv_qp>("ibv_create_qp", r.error());
  auto* q = new Qp;
  q->impl = std::move(*r);
  ibv_qp& qp = q->qp;
  qp.context = pd->context;
  qp.qp_context = init->qp_context;
  qp.pd = pd;
  qp.send_cq = init->send_cq;
  qp.recv_cq = rcq;
  qp.srq = init->srq;
  qp.qp_num = q->impl->qp_num();
  qp.handle = qp.qp_num;
  qp.state = IBV_QPS_RESET;
  qp.qp_type = init->qp_type;
  pthread_mutex_init(&qp.mutex, nullptr);
  pthread_cond_init(&qp.cond, nullptr);
  // libibverbs: the created sizes (at least those asked for) go back to the caller.
  fill_cap(q->impl->cap(), init->cap);
  if (init->srq) init->cap.max_recv_wr = init->cap.max_recv_sge = 0;
  note_object(ctx, q->impl.get(), &q->qp);
  ++ours<Pd>(pd)->users;
  ++ours<Cq>(qp.send_cq)->users;
  ++ours<Cq>(qp.recv_cq)->users;
  if (qp.srq) ++ours<Srq>(qp.srq)->users;
  hold(ctx);
  return &qp;
}
OPENIB_VERBS_1_1(ibv_create_qp);

int ibv_modify_qp(ibv_qp* qp, ibv_qp_attr* attr, int mask) {
  if (!qp || !attr) return EINVAL;
  if (mask & ~kMaskSupported) return EOPNOTSUPP;
  auto r = ours<Qp>(qp)->impl->modify(to_qp_attr(*attr), uint32_t(mask));
  if (!r) return fail_int("ibv_modify_qp", r.error());
  if (mask & IBV_QP_STATE) qp->state = attr->qp_state;
  return 0;
}
OPENIB_VERBS_1_1(ibv_modify_qp);

int ibv_query_qp(ibv_qp* qp, ibv_qp_attr* attr, int mask, ibv_qp_init_attr* init) {
  if (!qp || !attr || !init) return EINVAL;
  (void)mask;  // libibverbs: the mask is a hint; everything known is returned
  auto* q = ours<Qp>(qp);
  auto r = q->impl->query();
  if (!r) return fail_int("ibv_query_qp", r.error());
  *attr = {};
  from_qp_attr(*r, *attr);
  fill_cap(q->impl->cap(), attr->cap);
  if (qp->srq) attr->cap.max_recv_wr = attr->cap.max_recv_sge = 0;
  *init = {};
  init->qp_context = qp->qp_context;
  init->send_cq = qp->send_cq;
  init->recv_cq = qp->recv_cq;
  init->srq = qp->srq;
  init->cap = attr->cap;
  init->qp_type = qp->qp_type;
  qp->state = attr->qp_state;
  return 0;
}
OPENIB_VERBS_1_1(ibv_query_qp);

int ibv_query_qp_data_in_order(ibv_qp* qp, ibv_wr_opcode, uint32_t) {
  // rdma-core 44: 0 when the device does not say data lands in order.
  (void)qp;
  return 0;
}

int ibv_destroy_qp(ibv_qp* qp) {
  if (!qp) return EINVAL;
  auto* q = ours<Qp>(qp);
  Context& ctx = *ctx_of(qp->context);
  --ours<Pd>(qp->pd)->users;
  --ours<Cq>(qp->send_cq)->users;
  --ours<Cq>(qp->recv_cq)->users;
  if (qp->srq) --ours<Srq>(qp->srq)->users;
  forget_object(ctx, q->impl.get());
  pthread_cond_destroy(&qp->cond);
  pthread_mutex_destroy(&qp->mutex);
  delete q;
  release(ctx);
  return 0;
}
OPENIB_VERBS_1_1(ibv_destroy_qp);

}  // extern "C"
