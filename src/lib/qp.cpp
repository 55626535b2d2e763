// Queue pairs and shared receive queues: creation in the ring arena
// (docs/simhca.md §6.9, §6.10), modify/query (§7.7), and the post calls.
// Strides, WQEs, doorbell records and doorbells are the context's
// provider's (provider.hpp; simhca's: docs/simhca.md §12.1-§12.5).
// Posting is stores into the ring, the doorbell record and the UAR page:
// no system call, no allocation.
#include "lib/objects.hpp"

namespace openib::lib {

using proto::Op;

uint32_t log2_ceil(uint32_t n);

Result<std::unique_ptr<Qp>> ContextImpl::create_qp(Pd& pd, const QpInit& init) {
  if (!init.send_cq || !init.recv_cq) return err(EINVAL, "create_qp: a send and a receive CQ are needed");
  if (init.type != QpType::kRc && init.type != QpType::kUc && init.type != QpType::kUd)
    return err(EINVAL, "create_qp: QP type {}", int(init.type));
  const QpCap& want = init.cap;
  const uint32_t max_sge = dev_.max_sge ? dev_.max_sge : 16;
  if (want.max_send_sge > max_sge || want.max_recv_sge > max_sge)
    return err(EINVAL, "create_qp: {} send / {} receive SGEs, the device allows {}", want.max_send_sge,
               want.max_recv_sge, max_sge);
  if (want.max_inline_data > dev_.max_inline)
    return err(EINVAL, "create_qp: {} inline bytes, the device allows {}", want.max_inline_data, dev_.max_inline);
  std::unique_ptr<QpImpl> qp(new QpImpl(*this));
  qp->type_ = init.type;
  const Provider& prov = *provider_;
  const uint32_t lsq = log2_ceil(std::max<uint32_t>(want.max_send_wr, 1));
  const uint32_t lsqs = prov.log_sq_stride(init.type, std::max<uint32_t>(want.max_send_sge, 1), want.max_inline_data);
  const uint32_t lrq = init.srq ? 0 : log2_ceil(std::max<uint32_t>(want.max_recv_wr, 1));
  const uint32_t lrqs = prov.log_rq_stride(std::max<uint32_t>(want.max_recv_sge, 1));
  if (lsq > dev_.log_max_qp_wr || lrq > dev_.log_max_qp_wr)
    return err(EINVAL, "create_qp: {}/{} WRs, the device allows {}", want.max_send_wr, want.max_recv_wr,
               1u << dev_.log_max_qp_wr);
  if (lsqs > prov.max_log_sq_stride || lrqs > prov.max_log_rq_stride)
    return err(EINVAL, "create_qp: WQEs over the largest stride (SGEs or inline data)");
  qp->log_sq_ = uint8_t(lsq);
  qp->log_sq_stride_ = uint8_t(lsqs);
  qp->log_rq_ = uint8_t(lrq);
  qp->log_rq_stride_ = uint8_t(lrqs);
  // The created capabilities: what the strides hold (libibverbs reports the same).
  const SqCaps sq = prov.sq_caps(init.type, lsqs);
  qp->cap_.max_send_wr = 1u << lsq;
  qp->cap_.max_recv_wr = init.srq ? 0 : 1u << lrq;
  qp->cap_.max_send_sge = std::min<uint32_t>(max_sge, sq.max_sge);
  qp->cap_.max_recv_sge = init.srq ? 0 : std::min<uint32_t>(max_sge, prov.rq_max_sge(lrqs));
  qp->cap_.max_inline_data = std::min<uint32_t>(dev_.max_inline, sq.max_inline);
  qp->lim_ = {qp->cap_.max_send_sge, qp->cap_.max_inline_data};
  qp->srq_ = static_cast<SrqImpl*>(init.srq);

  const size_t sq_bytes = size_t{1} << (lsq + lsqs);
  const size_t rq_bytes = init.srq ? 0 : size_t{1} << (lrq + lrqs);
  OPENIB_TRY_ASSIGN(qp->block_, arena_->alloc(sq_bytes + rq_bytes + Arena::kAlign));  // SQ, RQ, record
  qp->sq_ = qp->block_.ptr;
  qp->rq_ = qp->block_.ptr + sq_bytes;
  qp->dbr_ = qp->block_.ptr + sq_bytes + rq_bytes;
  proto::CreateQpReq req;
  req.pd = pd.handle();
  req.send_cq = static_cast<CqImpl*>(init.send_cq)->handle();
  req.recv_cq = static_cast<CqImpl*>(init.recv_cq)->handle();
  req.srq = init.srq ? qp->srq_->handle() : 0;
  req.type = uint8_t(init.type);
  req.sig_all = init.sq_sig_all ? 1 : 0;
  req.log_sq_size = uint8_t(lsq);
  req.log_sq_stride = uint8_t(lsqs);
  req.log_rq_size = uint8_t(lrq);
  req.log_rq_stride = uint8_t(lrqs);
  req.mem = qp->block_.mem;
  req.sq_offset = qp->block_.offset;
  req.rq_offset = qp->block_.offset + sq_bytes;
  req.dbr_offset = qp->block_.offset + sq_bytes + rq_bytes;
  auto r = conn_->call<proto::ObjRep>(Op::kCreateQp, req);
  if (!r) {
    arena_->free(qp->block_);
    return r.take_error();
  }
  qp->handle_ = r->handle;
  qp->qpn_ = r->number;
  track(qp.get());
  return std::unique_ptr<Qp>(std::move(qp));
}

QpImpl::~QpImpl() {
  if (!handle_) return;  // creation failed (its block is already freed)
  ctx_.forget(this);
  if (ctx_.destroy(Op::kDestroyQp, handle_)) ctx_.arena().free(block_);
}

Result<void> QpImpl::modify(const QpAttr& attr, uint32_t mask) {
  proto::ModifyQpReq req{handle_, to_proto(attr, mask)};
  OPENIB_TRY(ctx_.conn().call_void(Op::kModifyQp, req));
  if ((mask & qp_attr::kState) && attr.state == QpState::kReset) {
    // IBA 10.3.1: Reset empties the queues; the device's counters restart
    // at 0, so do ours and the record's.
    sq_prod_ = rq_prod_ = 0;
    sq_cons_.store(0);
    rq_cons_.store(0);
    prov_.reset_qp(dbr_);
  }
  return ok();
}

Result<QpAttr> QpImpl::query() {
  OPENIB_TRY_ASSIGN(auto r, ctx_.conn().call<proto::QueryQpRep>(Op::kQueryQp, proto::HandleReq{handle_}));
  return from_proto(r.attr);
}

// The WQE into the slot, then the record and the doorbell (the provider's).
// The device gone (§6.2 of docs/client-protocol.md): ENODEV, nothing written.
int QpImpl::post_send(const SendWr& wr) {
  if (ctx_.device_gone()) return ENODEV;
  const uint32_t size = 1u << log_sq_;
  if (sq_prod_ - sq_cons_.load(std::memory_order_acquire) >= size) return ENOMEM;
  std::byte* slot = sq_ + (size_t(sq_prod_ & (size - 1)) << log_sq_stride_);
  uint32_t ahn = 0;
  if (type_ == QpType::kUd) {
    if (!wr.ah) return EINVAL;
    ahn = wr.ah->ahn();
  }
  if (int e = prov_.encode_send(slot, size_t{1} << log_sq_stride_, type_, wr, ahn, lim_)) return e;
  ++sq_prod_;
  prov_.ring_sq(uar_, dbr_, qpn_, sq_prod_);  // release: the WQE before the counter
  return 0;
}

// The WQE into the slot, then the RQ producer counter into the record.
int QpImpl::post_recv(const RecvWr& wr) {
  if (ctx_.device_gone()) return ENODEV;
  if (srq_) return EINVAL;  // post to the SRQ
  const uint32_t size = 1u << log_rq_;
  if (rq_prod_ - rq_cons_.load(std::memory_order_acquire) >= size) return ENOMEM;
  std::byte* slot = rq_ + (size_t(rq_prod_ & (size - 1)) << log_rq_stride_);
  if (int e = prov_.encode_recv(slot, size_t{1} << log_rq_stride_, wr, cap_.max_recv_sge)) return e;
  ++rq_prod_;
  prov_.update_rq(dbr_, rq_prod_);
  return 0;
}

// ---- SRQ -----------------------------------------------------------------

Result<std::unique_ptr<Srq>> ContextImpl::create_srq(Pd& pd, uint32_t max_wr, uint32_t max_sge) {
  const uint32_t dev_sge = dev_.max_sge ? dev_.max_sge : 16;
  if (max_sge > dev_sge) return err(EINVAL, "create_srq: {} SGEs, the device allows {}", max_sge, dev_sge);
  const uint32_t lg = log2_ceil(std::max<uint32_t>(max_wr, 1));
  if (lg > dev_.log_max_srq_wr) return err(EINVAL, "create_srq: {} WRs, the device allows {}", max_wr, 1u << dev_.log_max_srq_wr);
  std::unique_ptr<SrqImpl> srq(new SrqImpl(*this));
  srq->log_size_ = lg;
  srq->log_stride_ = provider_->log_rq_stride(std::max<uint32_t>(max_sge, 1));
  if (srq->log_stride_ > provider_->max_log_rq_stride)
    return err(EINVAL, "create_srq: WQEs of {} SGEs over the largest stride", max_sge);
  srq->max_sge_ = std::min<uint32_t>(dev_sge, provider_->rq_max_sge(srq->log_stride_));
  const size_t ring = size_t{1} << (lg + srq->log_stride_);
  OPENIB_TRY_ASSIGN(srq->block_, arena_->alloc(ring + Arena::kAlign));  // §6.9: ring, record
  srq->ring_ = srq->block_.ptr;
  srq->dbr_ = srq->block_.ptr + ring;
  proto::CreateSrqReq req{pd.handle(), srq->block_.mem, srq->block_.offset, srq->block_.offset + ring,
                          uint8_t(lg), uint8_t(srq->log_stride_), 0};
  auto r = conn_->call<proto::ObjRep>(Op::kCreateSrq, req);
  if (!r) {
    arena_->free(srq->block_);
    return r.take_error();
  }
  srq->handle_ = r->handle;
  srq->srqn_ = r->number;
  track(srq.get());
  return std::unique_ptr<Srq>(std::move(srq));
}

SrqImpl::~SrqImpl() {
  if (!handle_) return;
  ctx_.forget(this);
  if (ctx_.destroy(Op::kDestroySrq, handle_)) ctx_.arena().free(block_);
}

int SrqImpl::post_recv(const RecvWr& wr) {
  if (ctx_.device_gone()) return ENODEV;
  const uint32_t size = 1u << log_size_;
  if (prod_ - done_.load(std::memory_order_acquire) >= size) return ENOMEM;
  std::byte* slot = ring_ + (size_t(prod_ & (size - 1)) << log_stride_);
  if (int e = prov_.encode_recv(slot, size_t{1} << log_stride_, wr, max_sge_)) return e;
  ++prod_;
  prov_.update_srq(dbr_, prod_);
  return 0;
}

Result<void> SrqImpl::arm_limit(uint32_t limit) {
  return ctx_.conn().call_void(Op::kModifySrq, proto::ModifySrqReq{handle_, limit});
}

}  // namespace openib::lib
