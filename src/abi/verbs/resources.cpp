// Protection domains, memory regions, address handles, completion
// channels, CQs and SRQs (IBA 11.2.1-11.2.3, 11.2.8): rdma-core's structs
// over libopenib's objects.
#include <fcntl.h>

#include <cstring>

#include "abi/verbs/objects.hpp"

using namespace openib::verbs;

namespace {

// The access flags libopenib takes (IBA 10.6.3.1's local write, remote
// write, read, atomic). IBV_ACCESS_OPTIONAL_RANGE are hints a device may
// ignore (rdma-core's ibv_reg_mr_iova2 drops the ones it does not know);
// anything else a device without it refuses.
constexpr unsigned kAccessSupported = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                                      IBV_ACCESS_REMOTE_ATOMIC;

openib::Result<uint32_t> access_of(unsigned access) {
  access &= ~unsigned(IBV_ACCESS_OPTIONAL_RANGE);
  if (access & ~kAccessSupported)
    return openib::err(EOPNOTSUPP, "access flags {:#x}: only local write, remote write/read/atomic", access);
  // IBA 10.6.3.1 (and libibverbs' man page): remote write or atomic needs local write.
  if ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) && !(access & IBV_ACCESS_LOCAL_WRITE))
    return openib::err(EINVAL, "remote write or atomic access without local write");
  return access;
}

ibv_mr* reg_mr(const char* verb, ibv_pd* pd, void* addr, size_t length, uint64_t iova, unsigned access) {
  if (!pd) return fail_null<ibv_mr>(verb, openib::err(EINVAL, "no PD"));
  if (iova != reinterpret_cast<uintptr_t>(addr))
    return fail_null<ibv_mr>(verb, openib::err(EOPNOTSUPP, "an IOVA other than the address ({:#x} for {})", iova, addr));
  auto acc = access_of(access);
  if (!acc) return fail_null<ibv_mr>(verb, acc.error());
  Context& ctx = *ctx_of(pd->context);
  auto r = ctx.impl->reg_mr(*ours<Pd>(pd)->impl, addr, length, *acc);
  if (!r) return fail_null<ibv_mr>(verb, r.error());
  auto* m = new Mr;
  m->impl = std::move(*r);
  m->mr.context = pd->context;
  m->mr.pd = pd;
  m->mr.addr = addr;
  m->mr.length = length;
  m->mr.lkey = m->impl->lkey();
  m->mr.rkey = m->impl->rkey();
  m->mr.handle = m->mr.lkey;
  ++ours<Pd>(pd)->users;
  hold(ctx);
  return &m->mr;
}

}  // namespace

extern "C" {

ibv_pd* ibv_alloc_pd(ibv_context* c) {
  if (!c) return fail_null<ibv_pd>("ibv_alloc_pd", openib::err(EINVAL, "no context"));
  auto r = ctx_of(c)->impl->alloc_pd();
  if (!r) return fail_null<ibv_pd>("ibv_alloc_pd", r.error());
  auto* p = new Pd;
  p->impl = std::move(*r);
  p->pd.context = c;
  p->pd.handle = p->impl->handle();
  hold(*ctx_of(c));
  return &p->pd;
}
OPENIB_VERBS_1_1(ibv_alloc_pd);

int ibv_dealloc_pd(ibv_pd* pd) {
  if (!pd) return EINVAL;
  if (ours<Pd>(pd)->users > 0) return EBUSY;  // qperf deallocates before its MR
  Context& ctx = *ctx_of(pd->context);
  delete ours<Pd>(pd);
  release(ctx);
  return 0;
}
OPENIB_VERBS_1_1(ibv_dealloc_pd);

#undef ibv_reg_mr
ibv_mr* ibv_reg_mr(ibv_pd* pd, void* addr, size_t length, int access) {
  return reg_mr("ibv_reg_mr", pd, addr, length, reinterpret_cast<uintptr_t>(addr), unsigned(access));
}
OPENIB_VERBS_1_1(ibv_reg_mr);

#undef ibv_reg_mr_iova
ibv_mr* ibv_reg_mr_iova(ibv_pd* pd, void* addr, size_t length, uint64_t iova, int access) {
  return reg_mr("ibv_reg_mr_iova", pd, addr, length, iova, unsigned(access));
}

ibv_mr* ibv_reg_mr_iova2(ibv_pd* pd, void* addr, size_t length, uint64_t iova, unsigned int access) {
  return reg_mr("ibv_reg_mr_iova2", pd, addr, length, iova, access);
}

int ibv_dereg_mr(ibv_mr* mr) {
  if (!mr) return EINVAL;
  Context& ctx = *ctx_of(mr->context);
  --ours<Pd>(mr->pd)->users;
  delete ours<Mr>(mr);
  release(ctx);
  return 0;
}
OPENIB_VERBS_1_1(ibv_dereg_mr);

// ---- address handles (IBA 11.2.2) -------------------------------------------

ibv_ah* ibv_create_ah(ibv_pd* pd, ibv_ah_attr* attr) {
  if (!pd || !attr) return fail_null<ibv_ah>("ibv_create_ah", openib::err(EINVAL, "no PD or attributes"));
  auto r = ctx_of(pd->context)->impl->create_ah(*ours<Pd>(pd)->impl, to_av(*attr));
  if (!r) return fail_null<ibv_ah>("ibv_create_ah", r.error());
  auto* a = new Ah;
  a->impl = std::move(*r);
  a->ah.context = pd->context;
  a->ah.pd = pd;
  a->ah.handle = a->impl->ahn();
  ++ours<Pd>(pd)->users;
  hold(*ctx_of(pd->context));
  return &a->ah;
}
OPENIB_VERBS_1_1(ibv_create_ah);

int ibv_destroy_ah(ibv_ah* ah) {
  if (!ah) return EINVAL;
  Context& ctx = *ctx_of(ah->context);
  --ours<Pd>(ah->pd)->users;
  delete ours<Ah>(ah);
  release(ctx);
  return 0;
}
OPENIB_VERBS_1_1(ibv_destroy_ah);

// IBA 11.2.2.2 (ibv_init_ah_from_wc): the address that answers a received
// packet: its source LID and SL; with a GRH, the GRH's source GID as the
// destination, and the local GID it was sent to as the source (its index
// looked up in the port's table).
int ibv_init_ah_from_wc(ibv_context* c, uint8_t port, ibv_wc* wc, ibv_grh* grh, ibv_ah_attr* attr) {
  if (!c || !wc || !attr) return EINVAL;
  *attr = {};
  attr->dlid = wc->slid;
  attr->sl = wc->sl;
  attr->src_path_bits = wc->dlid_path_bits;
  attr->port_num = port;
  if (!(wc->wc_flags & IBV_WC_GRH)) return 0;
  if (!grh) return EINVAL;
  attr->is_global = 1;
  std::memcpy(attr->grh.dgid.raw, grh->sgid.raw, 16);
  const uint32_t vtf = __builtin_bswap32(grh->version_tclass_flow);
  attr->grh.flow_label = vtf & 0xfffff;
  attr->grh.traffic_class = uint8_t(vtf >> 20);
  attr->grh.hop_limit = 0xff;
  auto p = ctx_of(c)->impl->query_port(port);
  if (!p) return fail_int("ibv_init_ah_from_wc", p.error());
  for (int i = 0; i < p->gid_table_len; ++i) {
    auto g = ctx_of(c)->impl->query_gid(port, i);
    if (g && std::memcmp(g->raw.data(), grh->dgid.raw, 16) == 0) {
      attr->grh.sgid_index = uint8_t(i);
      return 0;
    }
  }
  return ENOENT;  // the GRH names no GID of this port
}

ibv_ah* ibv_create_ah_from_wc(ibv_pd* pd, ibv_wc* wc, ibv_grh* grh, uint8_t port) {
  ibv_ah_attr attr;
  if (!pd) return fail_null<ibv_ah>("ibv_create_ah_from_wc", openib::err(EINVAL, "no PD"));
  const int rc = ibv_init_ah_from_wc(pd->context, port, wc, grh, &attr);
  if (rc) return fail_null<ibv_ah>("ibv_create_ah_from_wc", openib::err(rc, "no address from the completion"));
  return ibv_create_ah(pd, &attr);
}

// ---- completion channels and CQs (IBA 11.2.8, 11.4.2) -----------------------

ibv_comp_channel* ibv_create_comp_channel(ibv_context* c) {
  if (!c) return fail_null<ibv_comp_channel>("ibv_create_comp_channel", openib::err(EINVAL, "no context"));
  auto r = ctx_of(c)->impl->create_comp_channel();
  if (!r) return fail_null<ibv_comp_channel>("ibv_create_comp_channel", r.error());
  auto* ch = new Channel;
  ch->impl = std::move(*r);
  ch->ch.context = c;
  ch->ch.fd = ch->impl->fd();
  hold(*ctx_of(c));
  return &ch->ch;
}

int ibv_destroy_comp_channel(ibv_comp_channel* ch) {
  if (!ch) return EINVAL;
  auto* c = ours<Channel>(ch);
  {
    std::lock_guard lk(c->mu);
    if (!c->cqs.empty()) return EBUSY;  // libibverbs: CQs still use it
  }
  Context& ctx = *ctx_of(ch->context);
  delete c;
  release(ctx);
  return 0;
}

ibv_cq* ibv_create_cq(ibv_context* c, int cqe, void* cq_context, ibv_comp_channel* channel, int comp_vector) {
  if (!c || cqe < 1 || comp_vector < 0 || comp_vector >= c->num_comp_vectors)
    return fail_null<ibv_cq>("ibv_create_cq", openib::err(EINVAL, "{} CQEs, completion vector {}", cqe, comp_vector));
  Channel* ch = channel ? ours<Channel>(channel) : nullptr;
  Context& ctx = *ctx_of(c);
  auto r = ctx.impl->create_cq(uint32_t(cqe), ch ? ch->impl.get() : nullptr);
  if (!r) return fail_null<ibv_cq>("ibv_create_cq", r.error());
  auto* q = new Cq;
  q->impl = std::move(*r);
  q->cq.context = c;
  q->cq.channel = channel;
  q->cq.cq_context = cq_context;
  q->cq.handle = q->impl->cqn();
  q->cq.cqe = int(q->impl->size());
  pthread_mutex_init(&q->cq.mutex, nullptr);
  pthread_cond_init(&q->cq.cond, nullptr);
  if (ch) {
    std::lock_guard lk(ch->mu);
    ch->cqs[q->impl.get()] = q;
  }
  note_object(ctx, q->impl.get(), &q->cq);
  hold(ctx);
  return &q->cq;
}
OPENIB_VERBS_1_1(ibv_create_cq);

int ibv_resize_cq(ibv_cq* cq, int) {
  return cq ? EOPNOTSUPP : EINVAL;  // simhca's CQs keep their size (docs/library.md "Verbs ABI")
}
OPENIB_VERBS_1_1(ibv_resize_cq);

int ibv_destroy_cq(ibv_cq* cq) {
  if (!cq) return EINVAL;
  auto* q = ours<Cq>(cq);
  if (q->users > 0) return EBUSY;  // a QP is on it (qperf 0.4.11's -cm1 server leaves one)
  if (cq->channel) {
    auto* ch = ours<Channel>(cq->channel);
    std::lock_guard lk(ch->mu);
    ch->cqs.erase(q->impl.get());
  }
  Context& ctx = *ctx_of(cq->context);
  forget_object(ctx, q->impl.get());
  pthread_cond_destroy(&cq->cond);
  pthread_mutex_destroy(&cq->mutex);
  delete q;
  release(ctx);
  return 0;
}
OPENIB_VERBS_1_1(ibv_destroy_cq);

// ---- shared receive queues (IBA 10.2.9, 11.2.3) ------------------------------

ibv_srq* ibv_create_srq(ibv_pd* pd, ibv_srq_init_attr* init) {
  if (!pd || !init) return fail_null<ibv_srq>("ibv_create_srq", openib::err(EINVAL, "no PD or attributes"));
  Context& ctx = *ctx_of(pd->context);
  auto r = ctx.impl->create_srq(*ours<Pd>(pd)->impl, init->attr.max_wr, init->attr.max_sge);
  if (!r) return fail_null<ibv_srq>("ibv_create_srq", r.error());
  auto* s = new Srq;
  s->impl = std::move(*r);
  s->max_wr = init->attr.max_wr;
  s->max_sge = init->attr.max_sge;
  if (init->attr.srq_limit) {
    if (auto a = s->impl->arm_limit(init->attr.srq_limit); !a) {
      delete s;
      return fail_null<ibv_srq>("ibv_create_srq", a.error());
    }
    s->limit = init->attr.srq_limit;
  }
  s->srq.context = pd->context;
  s->srq.srq_context = init->srq_context;
  s->srq.pd = pd;
  s->srq.handle = s->impl->srqn();
  pthread_mutex_init(&s->srq.mutex, nullptr);
  pthread_cond_init(&s->srq.cond, nullptr);
  note_object(ctx, s->impl.get(), &s->srq);
  ++ours<Pd>(pd)->users;
  hold(ctx);
  return &s->srq;
}
OPENIB_VERBS_1_1(ibv_create_srq);

int ibv_modify_srq(ibv_srq* srq, ibv_srq_attr* attr, int mask) {
  if (!srq || !attr) return EINVAL;
  if (mask & ~int(IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT)) return EINVAL;
  if (mask & IBV_SRQ_MAX_WR) return EOPNOTSUPP;  // no SRQ resize (IBV_DEVICE_SRQ_RESIZE is not set)
  auto* s = ours<Srq>(srq);
  if (mask & IBV_SRQ_LIMIT) {
    if (auto r = s->impl->arm_limit(attr->srq_limit); !r) return fail_int("ibv_modify_srq", r.error());
    s->limit = attr->srq_limit;
  }
  return 0;
}
OPENIB_VERBS_1_1(ibv_modify_srq);

int ibv_query_srq(ibv_srq* srq, ibv_srq_attr* attr) {
  if (!srq || !attr) return EINVAL;
  auto* s = ours<Srq>(srq);
  attr->max_wr = s->max_wr;
  attr->max_sge = s->max_sge;
  attr->srq_limit = s->limit;
  return 0;
}
OPENIB_VERBS_1_1(ibv_query_srq);

int ibv_destroy_srq(ibv_srq* srq) {
  if (!srq) return EINVAL;
  auto* s = ours<Srq>(srq);
  if (s->users > 0) return EBUSY;
  --ours<Pd>(srq->pd)->users;
  Context& ctx = *ctx_of(srq->context);
  forget_object(ctx, s->impl.get());
  pthread_cond_destroy(&srq->cond);
  pthread_mutex_destroy(&srq->mutex);
  delete s;
  release(ctx);
  return 0;
}
OPENIB_VERBS_1_1(ibv_destroy_srq);

}  // extern "C"
