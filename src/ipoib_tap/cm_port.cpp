#include "ipoib_tap/cm_port.hpp"

#include <algorithm>
#include <cstring>

#include "common/log.hpp"
#include "hca/slot_qp.hpp"

namespace openib::ipoib {
namespace {

// Buffer layout: 2^log_recv_slots receive slots, then 2^log_send_slots
// send slots, each slot_bytes.
constexpr uint64_t kSendTag = 1ull << 63;  // wr_id: bit 63 send, low bits the slot
constexpr uint8_t kLogRecvWqeStride = 5;   // §12.2: one 16-byte SGE after the 16-byte control

enum Rung : int { kPd, kMkey, kCq, kSrq, kDone };

auto logger() { return log::get("ipoib"); }

}  // namespace

size_t CmPort::buffer_bytes(const CmPortConfig& c) {
  return (((size_t{1} << c.log_recv_slots) + (size_t{1} << c.log_send_slots)) * c.slot_bytes + 4095) & ~size_t{4095};
}

void CmPort::open_async(hca::Device& hca, const CmPortConfig& cfg, OpenDone done) {
  step(std::unique_ptr<CmPort>(new CmPort(hca, cfg)), std::move(done), kPd);
}

void CmPort::step(std::unique_ptr<CmPort> p, OpenDone done, int rung) {
  hca::Device& h = p->hca_;
  switch (rung) {
    case kPd:
      return h.alloc_pd_async([p = std::move(p), d = std::move(done)](Result<uint32_t> pd) mutable {
        if (!pd) return fail(std::move(p), std::move(d), pd.take_error());
        p->pdn_ = *pd;
        p->have_pd_ = true;
        step(std::move(p), std::move(d), kMkey);
      });
    case kMkey: {
      const size_t bytes = buffer_bytes(p->cfg_);
      const uint32_t pdn = p->pdn_;
      return hca::create_slot_buffer_async(h, pdn, bytes, [p = std::move(p), d = std::move(done)](
                                                              Result<hca::SlotBuffer> b) mutable {
        if (!b) return fail(std::move(p), std::move(d), b.take_error());
        p->buf_ = std::move(b->buf);
        p->mkey_ = b->mkey;
        p->have_mkey_ = true;
        step(std::move(p), std::move(d), kCq);
      });
    }
    case kCq: {
      // Every receive and every send completion at once, and a QP's flush.
      const auto log_cq = uint8_t(std::max(p->cfg_.log_recv_slots, p->cfg_.log_send_slots) + 2);
      return h.create_cq_async(log_cq, [p = std::move(p), d = std::move(done)](Result<hca::Cq> cq) mutable {
        if (!cq) return fail(std::move(p), std::move(d), cq.take_error());
        p->cq_ = std::move(*cq);
        p->have_cq_ = true;
        step(std::move(p), std::move(d), kSrq);
      });
    }
    case kSrq: {
      const uint32_t pdn = p->pdn_;
      const uint8_t log = p->cfg_.log_recv_slots;
      return h.create_srq_async(pdn, log, kLogRecvWqeStride, [p = std::move(p), d = std::move(done)](Result<hca::Srq> s) mutable {
        if (!s) return fail(std::move(p), std::move(d), s.take_error());
        p->srq_ = std::move(*s);
        p->have_srq_ = true;
        step(std::move(p), std::move(d), kDone);
      });
    }
    default: {
      for (uint32_t s = 0; s < (1u << p->cfg_.log_recv_slots); ++s)
        if (auto r = p->post_recv(s); !r) return fail(std::move(p), std::move(done), r.take_error());
      for (uint32_t s = 1u << p->cfg_.log_send_slots; s-- > 0;) p->free_send_.push_back(s);
      if (auto r = h.arm_cq(p->cq_, false); !r) return fail(std::move(p), std::move(done), r.take_error());
      return done(std::move(p));
    }
  }
}

std::vector<std::pair<hca::ObjectKind, uint32_t>> CmPort::teardown_steps() {
  using K = hca::ObjectKind;
  std::vector<std::pair<K, uint32_t>> steps;  // QPs, SRQ, CQ, MKEY, PD (IBA 11.2's order)
  for (const auto& [qpn, q] : qps_) steps.emplace_back(K::kQp, qpn);
  if (have_srq_) steps.emplace_back(K::kSrq, srq_.srqn);
  if (have_cq_) steps.emplace_back(K::kCq, cq_.cqn);
  if (have_mkey_) steps.emplace_back(K::kMkey, mkey_.lkey);
  if (have_pd_) steps.emplace_back(K::kPd, pdn_);
  have_pd_ = have_mkey_ = have_cq_ = have_srq_ = false;
  return steps;
}

void CmPort::fail(std::unique_ptr<CmPort> p, OpenDone done, Error e) {
  logger()->warn("port {}: opening connected mode's QPs: {}", p->cfg_.port, e.str());
  auto steps = p->teardown_steps();
  hca::Device& h = p->hca_;
  hca::destroy_in_order(h, std::move(steps), std::shared_ptr<CmPort>(std::move(p)),
                        [d = std::make_shared<OpenDone>(std::move(done)), e = std::move(e)]() mutable { (*d)(std::move(e)); });
}

void CmPort::close_async(std::unique_ptr<CmPort> p, std::function<void()> done) {
  *p->alive_ = false;
  auto steps = p->teardown_steps();
  hca::Device& h = p->hca_;
  hca::destroy_in_order(h, std::move(steps), std::shared_ptr<CmPort>(std::move(p)), std::move(done));
}

CmPort::~CmPort() { *alive_ = false; }

void CmPort::create_qp_async(QpDone done) {
  hca::QpInit in;
  in.type = hca::QpType::kRc;
  in.pdn = pdn_;
  in.send_cqn = in.recv_cqn = cq_.cqn;
  in.srqn = srq_.srqn;
  in.sig_all = true;
  in.log_sq_size = cfg_.log_qp_sends;
  in.log_rq_size = 0;
  hca_.create_qp_async(in, [this, &h = hca_, alive = std::weak_ptr<bool>(alive_), d = std::move(done)](
                               Result<hca::Qp> qp) mutable {
    if (!qp) return d(qp.take_error());
    if (alive.expired()) {  // the port closed meanwhile: this QP goes alone
      auto keep = std::make_shared<hca::Qp>(std::move(*qp));
      h.destroy_async(hca::ObjectKind::kQp, keep->qpn, [keep](Result<void>) {});
      return d(err(ECANCELED, "connected mode was closed"));
    }
    const uint32_t qpn = qp->qpn;
    qps_[qpn].qp = std::move(*qp);
    ++counters_.qps_created;
    d(qpn);
  });
}

void CmPort::destroy_qp(uint32_t qpn) {
  auto it = qps_.find(qpn);
  if (it == qps_.end()) return;
  // Its slots come back now: a later completion of theirs is ignored
  // (completion() frees only slots its QP still holds).
  for (uint32_t s : it->second.in_flight) free_send_.push_back(s);
  auto keep = std::make_shared<hca::Qp>(std::move(it->second.qp));
  qps_.erase(it);
  ++counters_.qps_destroyed;
  hca_.destroy_async(hca::ObjectKind::kQp, qpn, [keep](Result<void>) {});
  if (on_freed_) on_freed_();
}

Result<void> CmPort::post_recv(uint32_t slot) {
  hca::RecvWr wr;
  wr.wr_id = slot;
  // The posted length is recv_bytes: a longer message is the device's
  // Local Length Error (IBA 9.9.3), the QP in error, never a frame the
  // TAP cannot carry.
  wr.sg.push_back({va(size_t(slot) * cfg_.slot_bytes), cfg_.recv_bytes, mkey_.lkey});
  return hca_.post_srq_recv(srq_, wr);
}

Result<void> CmPort::send(uint32_t qpn, std::span<const uint8_t> packet) {
  auto it = qps_.find(qpn);
  if (it == qps_.end() || it->second.broken) return err(ENOENT, "no connected-mode QP {:#x}", qpn);
  if (packet.size() > cfg_.slot_bytes) return err(EMSGSIZE, "{} bytes above a slot's {}", packet.size(), cfg_.slot_bytes);
  QpSlots& q = it->second;
  if (free_send_.empty() || q.in_flight.size() >= (size_t{1} << cfg_.log_qp_sends)) {
    ++counters_.no_send_slot;
    return err(EAGAIN, "every send slot is in flight");
  }
  const uint32_t slot = free_send_.back();
  const size_t off = ((size_t{1} << cfg_.log_recv_slots) + slot) * cfg_.slot_bytes;
  std::memcpy(at(off), packet.data(), packet.size());
  hca::SendWr wr;
  wr.wr_id = kSendTag | slot;
  wr.opcode = hca::WrOpcode::kSend;
  wr.sg.assign(1, {va(off), uint32_t(packet.size()), mkey_.lkey});
  if (auto r = hca_.post_send(q.qp, wr, !batching_); !r) {
    ++counters_.send_errors;
    return r.error();
  }
  q.unrung = q.unrung || batching_;
  free_send_.pop_back();
  q.in_flight.push_back(slot);
  ++counters_.sent;
  return ok();
}

void CmPort::end_batch() {
  batching_ = false;
  for (auto& [qpn, q] : qps_) {
    if (!q.unrung) continue;
    q.unrung = false;
    if (auto r = hca_.ring_sq(q.qp); !r) ++counters_.send_errors;
  }
}

void CmPort::completion(const hca::WorkCompletion& wc, std::vector<uint32_t>& broken) {
  auto it = qps_.find(wc.qpn);
  const bool bad = wc.status != hca::kWcSuccess && wc.status != hca::kWcWrFlushErr;
  if (bad && it != qps_.end() && !it->second.broken) {
    it->second.broken = true;
    broken.push_back(wc.qpn);
  }
  if (wc.wr_id & kSendTag) {
    const auto slot = uint32_t(wc.wr_id);
    if (it != qps_.end()) {
      auto& f = it->second.in_flight;
      if (auto s = std::find(f.begin(), f.end(), slot); s != f.end()) {
        f.erase(s);
        free_send_.push_back(slot);
      }
    }
    if (wc.status != hca::kWcSuccess) ++counters_.send_errors;
    return;
  }
  // A receive: its SRQ slot is posted again whatever the status (an SRQ
  // WQE is consumed by a QP's error too).
  const auto slot = uint32_t(wc.wr_id);
  if (slot >= (1u << cfg_.log_recv_slots)) return;
  if (wc.status == hca::kWcSuccess && wc.byte_len <= cfg_.recv_bytes && it != qps_.end()) {
    ++counters_.received;
    if (receiver_) receiver_(wc.qpn, std::span<const uint8_t>(at(size_t(slot) * cfg_.slot_bytes), wc.byte_len));
  } else if (wc.status != hca::kWcWrFlushErr) {
    ++counters_.recv_errors;
  }
  if (auto r = post_recv(slot); !r) ++counters_.recv_errors;
}

bool CmPort::on_cq_event(uint32_t cqn) {
  if (!have_cq_ || cqn != cq_.cqn) return false;
  const size_t before = free_send_.size();
  std::vector<uint32_t> broken;
  for (;;) {
    auto wcs = hca_.poll_cq(cq_, 64);
    if (wcs.empty()) break;
    for (const auto& wc : wcs) completion(wc, broken);
  }
  (void)hca_.arm_cq(cq_, false);
  std::weak_ptr<bool> alive = alive_;
  for (uint32_t qpn : broken) {
    ++counters_.qps_broken;
    if (broken_) broken_(qpn);  // may destroy the QP, or close this port
    if (alive.expired()) return true;
  }
  if (free_send_.size() > before && on_freed_) on_freed_();
  return true;
}

}  // namespace openib::ipoib
