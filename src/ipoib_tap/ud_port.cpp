#include "ipoib_tap/ud_port.hpp"

#include <algorithm>
#include <cstring>

#include "common/log.hpp"

namespace openib::ipoib {
namespace {

// Buffer layout: 2^log_slots receive slots of slot_stride() bytes (the
// 40-byte GRH area, then the packet), then 2^log_send_slots send slots of
// the same stride (the packet only).
constexpr size_t kGrhBytes = 40;
constexpr uint64_t kSendTag = 1ull << 63;  // wr_id: bit 63 send, low bits the slot

// The open ladder's rungs, in order (step()).
enum Rung : int { kPd, kMkey, kCq, kQp, kInit, kRtr, kRts, kDone };

uint32_t modify_mask(hca::QpState to) {
  namespace qa = hca::qp_attr;
  switch (to) {
    case hca::QpState::kInit: return qa::kState | qa::kPkeyIndex | qa::kPort | qa::kQkey;
    case hca::QpState::kRts: return qa::kState | qa::kSqPsn;
    default: return qa::kState;
  }
}

}  // namespace

size_t UdPort::slot_stride() const { return (kGrhBytes + cfg_.max_payload + 63) & ~size_t{63}; }
size_t UdPort::buffer_bytes(const UdPortConfig& c) {
  const size_t stride = (kGrhBytes + c.max_payload + 63) & ~size_t{63};
  return (((size_t{1} << c.log_slots) + (size_t{1} << c.log_send_slots)) * stride + 4095) & ~size_t{4095};
}
size_t UdPort::buf_bytes() const { return buffer_bytes(cfg_); }

void UdPort::open_async(hca::Device& hca, const UdPortConfig& cfg, OpenDone done) {
  step(std::unique_ptr<UdPort>(new UdPort(hca, cfg)), std::move(done), kPd);
}

// One rung per call; each command's completion climbs the next (IBA
// 10.3.1: RESET -> INIT (port, P_Key index, Q_Key) -> RTR -> RTS).
void UdPort::step(std::unique_ptr<UdPort> p, OpenDone done, int rung) {
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
      auto buf = h.pool().alloc(p->buf_bytes(), 4096);
      if (!buf) return fail(std::move(p), std::move(done), buf.take_error());
      p->buf_ = std::move(*buf);
      std::memset(p->buf_.data(), 0, p->buf_bytes());
      hca::MkeyParams mp;
      mp.pdn = p->pdn_;
      mp.access = hca::kAccessLocalWrite;
      mp.start_va = p->va(0);
      mp.length = p->buf_bytes();
      mp.log_page_size = 12;
      for (size_t off = 0; off < mp.length; off += 4096) mp.pages.push_back(p->buf_.iova() + off);
      return h.create_mkey_async(mp, [p = std::move(p), d = std::move(done)](Result<hca::Mkey> m) mutable {
        if (!m) return fail(std::move(p), std::move(d), m.take_error());
        p->mkey_ = *m;
        p->have_mkey_ = true;
        step(std::move(p), std::move(d), kCq);
      });
    }
    case kCq: {
      // Room for every receive and every send completion at once (read
      // before `p` moves into the continuation).
      const auto log_cq = uint8_t(std::max(p->cfg_.log_slots, p->cfg_.log_send_slots) + 1);
      return h.create_cq_async(log_cq, [p = std::move(p), d = std::move(done)](Result<hca::Cq> cq) mutable {
                                 if (!cq) return fail(std::move(p), std::move(d), cq.take_error());
                                 p->cq_ = std::move(*cq);
                                 p->have_cq_ = true;
                                 step(std::move(p), std::move(d), kQp);
                               });
    }
    case kQp: {
      hca::QpInit in;
      in.type = hca::QpType::kUd;
      in.pdn = p->pdn_;
      in.send_cqn = in.recv_cqn = p->cq_.cqn;
      in.sig_all = true;
      in.log_sq_size = p->cfg_.log_send_slots;
      in.log_rq_size = p->cfg_.log_slots;
      return h.create_qp_async(in, [p = std::move(p), d = std::move(done)](Result<hca::Qp> qp) mutable {
        if (!qp) return fail(std::move(p), std::move(d), qp.take_error());
        p->qp_ = std::move(*qp);
        p->have_qp_ = true;
        step(std::move(p), std::move(d), kInit);
      });
    }
    case kInit:
    case kRtr:
    case kRts: {
      const auto to = rung == kInit ? hca::QpState::kInit : rung == kRtr ? hca::QpState::kRtr : hca::QpState::kRts;
      hca::QpAttr a;
      a.state = to;
      a.port = p->cfg_.port;
      a.pkey_index = p->cfg_.pkey_index;
      a.qkey = p->cfg_.qkey;
      a.sq_psn = 0;
      const uint32_t qpn = p->qp_.qpn;
      return h.modify_qp_async(qpn, modify_mask(to), a,
                               [p = std::move(p), d = std::move(done), rung](Result<void> r) mutable {
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

std::vector<std::pair<hca::ObjectKind, uint32_t>> UdPort::teardown_steps() {
  using K = hca::ObjectKind;
  std::vector<std::pair<K, uint32_t>> steps;  // QP, CQ, MKEY, PD
  if (have_qp_) steps.emplace_back(K::kQp, qp_.qpn);
  if (have_cq_) steps.emplace_back(K::kCq, cq_.cqn);
  if (have_mkey_) steps.emplace_back(K::kMkey, mkey_.lkey);
  if (have_pd_) steps.emplace_back(K::kPd, pdn_);
  have_pd_ = have_mkey_ = have_cq_ = have_qp_ = false;
  return steps;
}

void UdPort::fail(std::unique_ptr<UdPort> p, OpenDone done, Error e) {
  log::get("ipoib")->warn("port {}: opening the IPoIB QP: {}", p->cfg_.port, e.str());
  auto steps = p->teardown_steps();
  hca::Device& h = p->hca_;
  hca::destroy_in_order(h, std::move(steps), std::shared_ptr<UdPort>(std::move(p)),
                        [d = std::make_shared<OpenDone>(std::move(done)), e = std::move(e)]() mutable { (*d)(std::move(e)); });
}

void UdPort::close_async(std::unique_ptr<UdPort> p, std::function<void()> done) {
  auto steps = p->teardown_steps();
  hca::Device& h = p->hca_;
  hca::destroy_in_order(h, std::move(steps), std::shared_ptr<UdPort>(std::move(p)), std::move(done));
}

UdPort::~UdPort() = default;  // objects not closed went with the device

Result<void> UdPort::post_recv(uint32_t slot) {
  hca::RecvWr wr;
  wr.wr_id = slot;
  wr.sg.push_back({va(size_t(slot) * slot_stride()), uint32_t(kGrhBytes + cfg_.max_payload), mkey_.lkey});
  return hca_.post_recv(qp_, wr);
}

Result<void> UdPort::send(uint32_t ahn, uint32_t qpn, uint32_t qkey, std::span<const uint8_t> packet) {
  if (packet.size() > cfg_.max_payload) return err(EMSGSIZE, "IPoIB packet of {} bytes > {}", packet.size(), cfg_.max_payload);
  if (free_send_.empty()) {
    ++counters_.no_send_slot;
    return err(EAGAIN, "every IPoIB send slot is in flight");
  }
  const uint32_t slot = free_send_.back();
  const size_t off = ((size_t{1} << cfg_.log_slots) + slot) * slot_stride();
  std::memcpy(at(off), packet.data(), packet.size());
  hca::SendWr wr;
  wr.wr_id = kSendTag | slot;
  wr.opcode = hca::WrOpcode::kSend;
  wr.sg.push_back({va(off), uint32_t(packet.size()), mkey_.lkey});
  wr.ahn = ahn;
  wr.remote_qpn = qpn;
  wr.remote_qkey = qkey;
  if (auto r = hca_.post_send(qp_, wr, !batching_); !r) {
    ++counters_.send_errors;
    return r.error();
  }
  unrung_ = batching_;
  free_send_.pop_back();
  ++counters_.sent;
  return ok();
}

void UdPort::end_batch() {
  batching_ = false;
  if (!unrung_) return;
  unrung_ = false;
  if (auto r = hca_.ring_sq(qp_); !r) ++counters_.send_errors;
}

bool UdPort::on_cq_event(uint32_t cqn) {
  if (cqn != cq_.cqn || !have_cq_) return false;
  const size_t before = free_send_.size();
  for (;;) {
    auto wcs = hca_.poll_cq(cq_, 64);
    if (wcs.empty()) break;
    for (const auto& wc : wcs) {
      if (wc.wr_id & kSendTag) {
        const uint32_t slot = uint32_t(wc.wr_id);
        if (slot < (1u << cfg_.log_send_slots)) free_send_.push_back(slot);
        if (wc.status != hca::kWcSuccess) ++counters_.send_errors;
        continue;
      }
      const uint32_t slot = uint32_t(wc.wr_id);
      if (slot >= (1u << cfg_.log_slots)) continue;
      if (wc.status == hca::kWcSuccess && wc.byte_len >= kGrhBytes && wc.byte_len <= kGrhBytes + cfg_.max_payload) {
        ++counters_.received;
        const uint8_t* b = at(size_t(slot) * slot_stride());
        UdReceived r;
        r.src_qpn = wc.src_qp & 0xFFFFFF;
        r.slid = wc.slid;
        r.grh = wc.grh;
        if (wc.grh) {  // IBA 8.3.1: SGID at bytes 8..23, DGID at 24..39
          std::memcpy(r.sgid.data(), b + 8, 16);
          std::memcpy(r.dgid.data(), b + 24, 16);
        }
        r.payload = std::span<const uint8_t>(b + kGrhBytes, wc.byte_len - kGrhBytes);
        if (receiver_) receiver_(r);
      } else if (wc.status != hca::kWcWrFlushErr) {
        ++counters_.recv_errors;
      }
      if (wc.status != hca::kWcWrFlushErr)
        if (auto r = post_recv(slot); !r) ++counters_.recv_errors;
    }
  }
  (void)hca_.arm_cq(cq_, false);
  if (free_send_.size() > before && on_freed_) on_freed_();
  return true;
}

}  // namespace openib::ipoib
