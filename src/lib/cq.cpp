// Completion queues: creation in the ring arena, poll and arming, the
// CQE formats and doorbells through the context's provider (provider.hpp).
#include <sched.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>

#include "lib/objects.hpp"

namespace openib::lib {

using proto::Op;

uint32_t log2_ceil(uint32_t n) {
  uint32_t lg = 0;
  while ((uint64_t{1} << lg) < n) ++lg;
  return lg;
}

Result<std::unique_ptr<Cq>> ContextImpl::create_cq(uint32_t min_cqe, CompChannel* channel) {
  const uint32_t lg = log2_ceil(std::max<uint32_t>(min_cqe, 1));
  if (lg > dev_.log_max_cqe) return err(EINVAL, "create_cq: {} CQEs, the device allows {}", min_cqe, 1u << dev_.log_max_cqe);
  std::unique_ptr<CqImpl> cq(new CqImpl(*this));
  cq->log_size_ = lg;
  cq->yield_every_ = poll_yield_;
  const size_t ring = size_t{provider_->cqe_size} << lg;
  OPENIB_TRY_ASSIGN(cq->block_, arena_->alloc(ring + Arena::kAlign));  // ring, record
  cq->ring_ = cq->block_.ptr;
  cq->dbr_ = cq->block_.ptr + ring;
  proto::CreateCqReq req{cq->block_.mem, cq->block_.offset, cq->block_.offset + ring, uint8_t(lg), 0};
  int efd = -1;
  if (channel) {
    cq->efd_ = UniqueFd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (!cq->efd_) return sys_err("eventfd");  // ~CqImpl frees the block
    efd = cq->efd_.get();
    req.flags = proto::kCqEventFd;
  }
  auto r = conn_->call<proto::ObjRep>(Op::kCreateCq, req, efd >= 0 ? std::span(&efd, 1) : std::span<const int>{});
  if (!r) return r.take_error();
  cq->handle_ = r->handle;
  cq->cqn_ = r->number;
  if (channel) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.ptr = cq.get();
    if (::epoll_ctl(channel->fd(), EPOLL_CTL_ADD, efd, &ev) < 0) return sys_err("epoll_ctl");  // ~CqImpl destroys
    cq->channel_ = static_cast<CompChannelImpl*>(channel);
  }
  track(cq.get());
  return std::unique_ptr<Cq>(std::move(cq));
}

CqImpl::~CqImpl() {
  if (!handle_) {  // creation failed before ibd made it
    ctx_.arena().free(block_);
    return;
  }
  if (channel_) ::epoll_ctl(channel_->fd(), EPOLL_CTL_DEL, efd_.get(), nullptr);
  ctx_.forget(this);
  // A CQ ibd could not destroy may still be written by the device: leak its ring.
  if (ctx_.destroy(Op::kDestroyCq, handle_)) ctx_.arena().free(block_);
}

// CQEs in order while the provider says the consumer owns the next; then
// the consumer counter into the CQ's record. No system call, but
// one: after yield_every_ empty polls in a row, sched_yield(), so that a
// busy-polling client hands its CPU to whoever it waits for (the device
// loop of simhca, the peer process) when there are more spinners than
// CPUs (docs/library.md "Polling", docs/performance.md "Separate processes").
int CqImpl::poll(std::span<Wc> out) {
  int n = 0;
  for (Wc& wc : out) {
    const int idx = prov_.poll_cqe(ring_, cons_, log_size_, wc);
    if (idx < 0) break;
    if (QpImpl* qp = ctx_.qps().find(wc.qp_num)) qp->on_cqe(wc.opcode, uint16_t(idx));
    ++cons_;
    ++n;
  }
  if (n) {
    prov_.update_cq(dbr_, cons_);
    empty_polls_ = 0;
  } else if (yield_every_ && ++empty_polls_ >= yield_every_) {
    empty_polls_ = 0;
    ::sched_yield();
  }
  return n;
}

Result<void> CqImpl::req_notify(bool solicited_only) {
  if (!channel_) return err(EINVAL, "req_notify on CQ {} without a completion channel", cqn_);
  if (ctx_.device_gone()) return err(ENODEV, "req_notify on CQ {}: the device is gone; reconnect", cqn_);
  // A new sequence number per arm (docs/simhca.md §7.3 needs one).
  prov_.arm_cq(uar_, dbr_, cqn_, solicited_only, ++arm_sn_, cons_);
  return ok();
}

}  // namespace openib::lib
