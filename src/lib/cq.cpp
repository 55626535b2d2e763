// Completion queues: creation in the ring arena, poll (docs/simhca.md §12.4,
// §9.2) and arming (§7.3).
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
  const size_t ring = kCqeSize << lg;
  OPENIB_TRY_ASSIGN(cq->block_, arena_->alloc(ring + Arena::kAlign));  // §6.5: ring, record
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

// §12.4: CQEs in order while the owner bit has the consumer's phase; then
// the consumer counter into the CQ's record (§12.3). No system call, but
// one: after yield_every_ empty polls in a row, sched_yield(), so that a
// busy-polling client hands its CPU to whoever it waits for (the device
// loop of simhca, the peer process) when there are more spinners than
// CPUs (docs/library.md "Polling", docs/performance.md "Separate processes").
int CqImpl::poll(std::span<Wc> out) {
  const uint32_t mask = (1u << log_size_) - 1;
  int n = 0;
  for (Wc& wc : out) {
    const std::byte* cqe = ring_ + size_t(cons_ & mask) * kCqeSize;
    if (!dp::cqe_owned(cqe, cons_, log_size_)) break;  // acquire: the CQE's bytes are visible
    const uint16_t idx = decode_cqe(cqe, wc);
    if (QpImpl* qp = ctx_.qps().find(wc.qp_num)) qp->on_cqe(wc.opcode, idx);
    ++cons_;
    ++n;
  }
  if (n) {
    dbr_store(dbr_, dp::kDbrCqCons, cons_);
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
  // §7.3: a new sequence number per arm.
  const dp::CqArm cmd = solicited_only ? dp::CqArm::kSolicited : dp::CqArm::kNext;
  const uint32_t sn = ++arm_sn_;
  // §12.5.1: the arm into the CQ's record first (another CQ's arm may
  // overwrite the page's one CQ_ARM word before the device reads it), then
  // the doorbell.
  dbr_store(dbr_, dp::kDbrCqArm, dp::cq_arm_record(cqn_, cmd, sn));
  ctx_.uar().arm_cq(cqn_, cmd, sn, cons_);
  return ok();
}

}  // namespace openib::lib
