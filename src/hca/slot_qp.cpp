#include "hca/slot_qp.hpp"

#include <algorithm>
#include <cstring>

#include "common/log.hpp"

namespace openib::hca {
namespace {

// Buffer layout: 2^log_slots receive slots, then 2^log_send_slots send
// slots, each slot_stride() bytes (recv_bytes rounded up to 64).
constexpr uint64_t kSendTag = 1ull << 63;  // wr_id: bit 63 send, low bits the slot

// The open ladder's rungs, in order (step()).
enum Rung : int { kPd, kMkey, kCq, kQp, kInit, kRtr, kRts, kDone };

size_t stride_of(const SlotQpConfig& c) { return (size_t{c.recv_bytes} + 63) & ~size_t{63}; }

}  // namespace

size_t SlotQp::slot_stride() const { return stride_of(cfg_); }
size_t SlotQp::buffer_bytes(const SlotQpConfig& c) {
  return (((size_t{1} << c.log_slots) + (size_t{1} << c.log_send_slots)) * stride_of(c) + 4095) & ~size_t{4095};
}

void create_slot_buffer_async(Device& h, uint32_t pdn, size_t bytes, Completer<Result<SlotBuffer>> done) {
  auto buf = h.pool().alloc(bytes, 4096);
  if (!buf) return done(buf.take_error());
  std::memset(buf->data(), 0, bytes);
  MkeyParams mp;
  mp.pdn = pdn;
  mp.access = kAccessLocalWrite;
  mp.start_va = reinterpret_cast<uint64_t>(buf->data());
  mp.length = bytes;
  mp.log_page_size = 12;
  for (size_t off = 0; off < mp.length; off += 4096) mp.pages.push_back(buf->iova() + off);
  h.create_mkey_async(mp, [b = std::move(*buf), d = std::move(done)](Result<Mkey> m) mutable {
    if (!m) return d(m.take_error());
    d(SlotBuffer{std::move(b), *m});
  });
}

void SlotQp::open_async(Device& hca, const SlotQpConfig& cfg, OpenDone done) {
  step(std::unique_ptr<SlotQp>(new SlotQp(hca, cfg)), std::move(done), kPd);
}

// One rung per call; each command's completion climbs the next (IBA
// 10.3.1: RESET -> INIT -> RTR -> RTS, each with the owner's attributes).
void SlotQp::step(std::unique_ptr<SlotQp> p, OpenDone done, int rung) {
  Device& h = p->hca_;
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
      return create_slot_buffer_async(h, pdn, bytes, [p = std::move(p), d = std::move(done)](Result<SlotBuffer> b) mutable {
        if (!b) return fail(std::move(p), std::move(d), b.take_error());
        p->buf_ = std::move(b->buf);
        p->mkey_ = b->mkey;
        p->have_mkey_ = true;
        step(std::move(p), std::move(d), kCq);
      });
    }
    case kCq: {
      // Room for every receive and every send completion at once (read
      // before `p` moves into the continuation).
      const auto log_cq = uint8_t(std::max(p->cfg_.log_slots, p->cfg_.log_send_slots) + 1);
      return h.create_cq_async(log_cq, [p = std::move(p), d = std::move(done)](Result<Cq> cq) mutable {
        if (!cq) return fail(std::move(p), std::move(d), cq.take_error());
        p->cq_ = std::move(*cq);
        p->have_cq_ = true;
        step(std::move(p), std::move(d), kQp);
      });
    }
    case kQp: {
      QpInit in;
      in.type = p->cfg_.type;
      in.port = p->cfg_.create_port;
      in.pdn = p->pdn_;
      in.send_cqn = in.recv_cqn = p->cq_.cqn;
      in.sig_all = true;
      in.log_sq_size = p->cfg_.log_send_slots;
      in.log_rq_size = p->cfg_.log_slots;
      return h.create_qp_async(in, [p = std::move(p), d = std::move(done)](Result<Qp> qp) mutable {
        if (!qp) return fail(std::move(p), std::move(d), qp.take_error());
        p->qp_ = std::move(*qp);
        p->have_qp_ = true;
        step(std::move(p), std::move(d), kInit);
      });
    }
    case kInit:
    case kRtr:
    case kRts: {
      QpAttr a = p->cfg_.attr;
      a.state = rung == kInit ? QpState::kInit : rung == kRtr ? QpState::kRtr : QpState::kRts;
      const uint32_t mask =
          qp_attr::kState | (rung == kInit ? p->cfg_.init_mask : rung == kRtr ? p->cfg_.rtr_mask : p->cfg_.rts_mask);
      const uint32_t qpn = p->qp_.qpn;
      return h.modify_qp_async(qpn, mask, a, [p = std::move(p), d = std::move(done), rung](Result<void> r) mutable {
        if (!r) return fail(std::move(p), std::move(d), r.take_error());
        step(std::move(p), std::move(d), rung + 1);
      });
    }
    default: {
      for (uint32_t s = 0; s < (1u << p->cfg_.log_slots); ++s)
        if (auto r = p->post_recv(s); !r) return fail(std::move(p), std::move(done), r.take_error());
      for (uint32_t s = 1u << p->cfg_.log_send_slots; s-- > 0;) p->free_send_.push_back(s);
      if (auto r = h.arm_cq(p->cq_, false); !r) return fail(std::move(p), std::move(done), r.take_error());
      return done(std::move(p));
    }
  }
}

std::vector<std::pair<ObjectKind, uint32_t>> SlotQp::teardown_steps() {
  using K = ObjectKind;
  std::vector<std::pair<K, uint32_t>> steps;  // QP, CQ, MKEY, PD (IBA 11.2's order)
  if (have_qp_) steps.emplace_back(K::kQp, qp_.qpn);
  if (have_cq_) steps.emplace_back(K::kCq, cq_.cqn);
  if (have_mkey_) steps.emplace_back(K::kMkey, mkey_.lkey);
  if (have_pd_) steps.emplace_back(K::kPd, pdn_);
  have_pd_ = have_mkey_ = have_cq_ = have_qp_ = false;
  return steps;
}

void SlotQp::fail(std::unique_ptr<SlotQp> p, OpenDone done, Error e) {
  log::get(p->cfg_.log_name)->warn("port {}: opening the {}: {}", p->cfg_.port, p->cfg_.what, e.str());
  auto steps = p->teardown_steps();
  Device& h = p->hca_;
  destroy_in_order(h, std::move(steps), std::shared_ptr<SlotQp>(std::move(p)),
                   [d = std::make_shared<OpenDone>(std::move(done)), e = std::move(e)]() mutable { (*d)(std::move(e)); });
}

void SlotQp::close_async(std::unique_ptr<SlotQp> p, std::function<void()> done) {
  auto steps = p->teardown_steps();
  Device& h = p->hca_;
  destroy_in_order(h, std::move(steps), std::shared_ptr<SlotQp>(std::move(p)), std::move(done));
}

SlotQp::~SlotQp() = default;  // objects not closed went with the device

Result<void> SlotQp::post_recv(uint32_t slot) {
  RecvWr wr;
  wr.wr_id = slot;
  wr.sg.push_back({va(size_t(slot) * slot_stride()), cfg_.recv_bytes, mkey_.lkey});
  return hca_.post_recv(qp_, wr);
}

Result<void> SlotQp::send(std::span<const uint8_t> bytes, SendWr wr) {
  if (bytes.size() > cfg_.recv_bytes) return err(EMSGSIZE, "{} bytes for the {} > {}", bytes.size(), cfg_.what, cfg_.recv_bytes);
  if (free_send_.empty()) {
    ++counters_.no_send_slot;
    return err(EAGAIN, "every send slot of the {} is in flight", cfg_.what);
  }
  const uint32_t slot = free_send_.back();
  const size_t off = ((size_t{1} << cfg_.log_slots) + slot) * slot_stride();
  std::memcpy(at(off), bytes.data(), bytes.size());
  wr.wr_id = kSendTag | slot;
  wr.opcode = WrOpcode::kSend;
  wr.sg.assign(1, {va(off), uint32_t(bytes.size()), mkey_.lkey});
  if (auto r = hca_.post_send(qp_, wr, !batching_); !r) {
    ++counters_.send_errors;
    return r.error();
  }
  unrung_ = unrung_ || batching_;
  free_send_.pop_back();
  ++counters_.sent;
  return ok();
}

void SlotQp::end_batch() {
  batching_ = false;
  if (!unrung_) return;
  unrung_ = false;
  if (auto r = hca_.ring_sq(qp_); !r) ++counters_.send_errors;
}

bool SlotQp::on_cq_event(uint32_t cqn) {
  if (cqn != cq_.cqn || !have_cq_) return false;
  const size_t before = free_send_.size();
  for (;;) {
    auto wcs = hca_.poll_cq(cq_, 64);
    if (wcs.empty()) break;
    for (const auto& wc : wcs) {
      if (wc.wr_id & kSendTag) {
        const uint32_t slot = uint32_t(wc.wr_id);
        if (slot < (1u << cfg_.log_send_slots)) free_send_.push_back(slot);
        if (wc.status != kWcSuccess) {
          ++counters_.send_errors;
          broken_ = broken_ || wc.status != kWcWrFlushErr;
        }
        continue;
      }
      const uint32_t slot = uint32_t(wc.wr_id);
      if (slot >= (1u << cfg_.log_slots)) continue;
      if (wc.status == kWcSuccess && wc.byte_len >= cfg_.min_recv_bytes && wc.byte_len <= cfg_.recv_bytes) {
        ++counters_.received;
        if (receiver_) receiver_(wc, std::span<const uint8_t>(at(size_t(slot) * slot_stride()), wc.byte_len));
      } else if (wc.status != kWcWrFlushErr) {
        ++counters_.recv_errors;
        broken_ = broken_ || wc.status != kWcSuccess;
      }
      if (wc.status != kWcWrFlushErr)
        if (auto r = post_recv(slot); !r) ++counters_.recv_errors;
    }
  }
  (void)hca_.arm_cq(cq_, false);
  if (broken_ && on_broken_) {
    auto f = std::move(on_broken_);
    on_broken_ = nullptr;
    f();  // may close this QP: nothing of it is touched after
    return true;
  }
  if (free_send_.size() > before && on_freed_) on_freed_();
  return true;
}

}  // namespace openib::hca
