#include "mad/mad_port.hpp"

#include <cstring>

#include "common/log.hpp"
#include "hca/gid_find.hpp"
#include "hca/port_caps.hpp"
#include "mad/layer.hpp"

namespace openib::mad {
namespace {

// Buffer layout (one DMA buffer, one MKEY over it): for each QP kRecvSlots
// receive slots of kRecvStride bytes (40-byte GRH, then the MAD: IBA
// 11.4.1.2, a UD receive buffer holds the GRH first), then kSendSlots send
// slots of kMadBytes. As Linux's ib_mad (recv_queue_size 512,
// send_queue_size 128): a burst (10,000 connections' DREQs) must not find
// the receive queue empty, and sends past the send slots wait in the
// overflow queue for a completion instead of failing.
constexpr uint32_t kRecvSlots = 512, kSendSlots = 128;
constexpr size_t kMaxOverflow = 16384;  // MADs waiting for a send slot (about 4.5 MB); past it EAGAIN
constexpr size_t kGrhBytes = 40;
constexpr size_t kRecvStride = 320;  // >= 40 + 256, 64-byte multiple
constexpr size_t kRecvArea = 2 * kRecvSlots * kRecvStride;
constexpr size_t kBufBytes = (kRecvArea + kSendSlots * kMadBytes + 4095) & ~size_t{4095};
constexpr uint8_t kLogCq = 11;        // 2048 >= 2 * 512 receives + 128 sends
constexpr uint8_t kLogRq = 9, kLogSq = 7;  // 512 receive WQEs, 128 send WQEs
constexpr uint64_t kSendTag = 1ull << 63;  // wr_id: bit 63 send, low bits the slot

uint32_t be32(const std::byte* p) {
  return uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | uint32_t(p[3]);
}

}  // namespace

std::byte* MadPort::slot_ptr(size_t offset) const { return static_cast<std::byte*>(buf_.data()) + offset; }
uint64_t MadPort::slot_va(size_t offset) const { return reinterpret_cast<uint64_t>(slot_ptr(offset)); }

hca::QpInit MadPort::qp_init(uint8_t q) const {
  hca::QpInit in;
  in.type = q == 0 ? hca::QpType::kSmi : hca::QpType::kGsi;
  in.port = port_;
  in.pdn = pdn_;
  in.send_cqn = in.recv_cqn = cq_.cqn;
  in.sig_all = true;
  in.log_sq_size = kLogSq;
  in.log_rq_size = kLogRq;
  return in;
}

// IBA 10.3.1 transitions: INIT (P_Key index 0; QP1's Q_Key kGsiQkey), RTR, RTS.
namespace {
uint32_t modify_mask(hca::QpState to) {
  namespace qa = hca::qp_attr;
  switch (to) {
    case hca::QpState::kInit: return qa::kState | qa::kPkeyIndex | qa::kQkey;
    case hca::QpState::kRts: return qa::kState | qa::kSqPsn;
    default: return qa::kState;
  }
}
hca::QpAttr modify_attr(uint8_t q, hca::QpState to) {
  hca::QpAttr a;
  a.state = to;
  a.pkey_index = 0;
  a.qkey = q == 0 ? 0 : kGsiQkey;
  a.sq_psn = 0;
  return a;
}
}  // namespace

Result<void> MadPort::post_receives(uint8_t q) {
  for (uint32_t s = 0; s < kRecvSlots; ++s) OPENIB_TRY(post_recv_slot(q, s));
  return ok();
}

// The ladder, one command in flight at a time, on the loop:
// QUERY_PORT (QP0 only where the port has an SMI, as Linux's
// ib_mad_port_open asks rdma_cap_ib_smi), ALLOC_PD, CREATE_MKEY,
// CREATE_CQ, then per QP CREATE_QP and three MODIFY_QPs; receives posted
// and the CQ armed without a command.
void MadPort::open_async(hca::Device& hca, uint8_t port, OpenDone done, DmacLookup dmac) {
  std::unique_ptr<MadPort> p(new MadPort(hca, port));
  p->dmac_ = std::move(dmac);
  hca.query_port_async(port, [p = std::move(p), d = std::move(done)](Result<hca::PortAttr> a) mutable {
    if (!a) return fail(std::move(p), std::move(d), a.take_error());
    p->smi_ = hca::cap_ib_smi(a->link_layer);
    p->ethernet_ = hca::protocol_roce(a->link_layer);
    hca::Device& h = p->hca_;
    h.alloc_pd_async([p = std::move(p), d = std::move(d)](Result<uint32_t> pd) mutable {
      if (!pd) return fail(std::move(p), std::move(d), pd.take_error());
      p->pdn_ = *pd;
      p->have_pd_ = true;
      rung_mkey(std::move(p), std::move(d));
    });
  });
}

void MadPort::rung_mkey(std::unique_ptr<MadPort> p, OpenDone done) {
  auto buf = p->hca_.pool().alloc(kBufBytes, 4096);
  if (!buf) return fail(std::move(p), std::move(done), buf.take_error());
  p->buf_ = std::move(*buf);
  std::memset(p->buf_.data(), 0, kBufBytes);
  hca::MkeyParams mp;
  mp.pdn = p->pdn_;
  mp.access = hca::kAccessLocalWrite;
  mp.start_va = p->slot_va(0);
  mp.length = kBufBytes;
  mp.log_page_size = 12;
  for (size_t off = 0; off < kBufBytes; off += 4096) mp.pages.push_back(p->buf_.iova() + off);
  hca::Device& h = p->hca_;
  h.create_mkey_async(mp, [p = std::move(p), d = std::move(done)](Result<hca::Mkey> m) mutable {
    if (!m) return fail(std::move(p), std::move(d), m.take_error());
    p->mkey_ = *m;
    p->have_mkey_ = true;
    hca::Device& hc = p->hca_;
    hc.create_cq_async(kLogCq, [p = std::move(p), d = std::move(d)](Result<hca::Cq> cq) mutable {
      if (!cq) return fail(std::move(p), std::move(d), cq.take_error());
      p->cq_ = std::move(*cq);
      p->have_cq_ = true;
      const uint8_t first = p->smi_ ? 0 : 1;
      rung_qp(std::move(p), std::move(d), first);
    });
  });
}

void MadPort::rung_qp(std::unique_ptr<MadPort> p, OpenDone done, uint8_t q) {
  if (q == 2) return finish(std::move(p), std::move(done));
  const hca::QpInit in = p->qp_init(q);
  hca::Device& h = p->hca_;
  h.create_qp_async(in, [p = std::move(p), d = std::move(done), q](Result<hca::Qp> qp) mutable {
    if (!qp) return fail(std::move(p), std::move(d), qp.take_error());
    p->qps_[q] = std::move(*qp);
    p->have_qp_[q] = true;
    rung_modify(std::move(p), std::move(d), q, hca::QpState::kInit);
  });
}

void MadPort::rung_modify(std::unique_ptr<MadPort> p, OpenDone done, uint8_t q, hca::QpState to) {
  hca::Device& h = p->hca_;
  const uint32_t qpn = p->qps_[q].qpn;
  h.modify_qp_async(qpn, modify_mask(to), modify_attr(q, to),
                    [p = std::move(p), d = std::move(done), q, to](Result<void> r) mutable {
                      if (!r) return fail(std::move(p), std::move(d), r.take_error());
                      if (to == hca::QpState::kInit) return rung_modify(std::move(p), std::move(d), q, hca::QpState::kRtr);
                      if (to == hca::QpState::kRtr) return rung_modify(std::move(p), std::move(d), q, hca::QpState::kRts);
                      if (auto r2 = p->post_receives(q); !r2) return fail(std::move(p), std::move(d), r2.take_error());
                      rung_qp(std::move(p), std::move(d), uint8_t(q + 1));
                    });
}

void MadPort::finish(std::unique_ptr<MadPort> p, OpenDone done) {
  for (uint32_t s = kSendSlots; s-- > 0;) p->free_send_.push_back(s);
  p->slot_ahn_.assign(kSendSlots, 0);
  if (auto r = p->hca_.arm_cq(p->cq_, false); !r) return fail(std::move(p), std::move(done), r.take_error());
  done(std::move(p));
}

// A failed rung: what was created is destroyed in reverse, one command at
// a time (a QP before its CQ), and the port's memory is kept until then,
// since the device may still reach it. Then `done` gets the error.
void MadPort::fail(std::unique_ptr<MadPort> p, OpenDone done, Error e) {
  auto steps = p->teardown_steps();
  log::get("mad")->warn("port {}: opening {}: {}; undoing {} step(s)", p->port_, p->smi_ ? "QP0/QP1" : "QP1",
                        e.str(), steps.size());
  hca::Device& h = p->hca_;
  hca::destroy_in_order(h, std::move(steps), std::shared_ptr<MadPort>(std::move(p)),
                        [d = std::make_shared<OpenDone>(std::move(done)), e = std::move(e)]() mutable { (*d)(std::move(e)); });
}

// IBA 11.2's order: the QPs before their CQ, AHs and the MKEY before the PD.
std::vector<std::pair<hca::ObjectKind, uint32_t>> MadPort::teardown_steps() {
  using K = hca::ObjectKind;
  std::vector<std::pair<K, uint32_t>> steps;
  for (int q = 1; q >= 0; --q)
    if (have_qp_[q]) steps.emplace_back(K::kQp, qps_[q].qpn);
  if (have_cq_) steps.emplace_back(K::kCq, cq_.cqn);
  for (const auto& [key, ah] : ahs_) steps.emplace_back(K::kAh, ah.ahn);
  for (uint32_t ahn : retiring_) steps.emplace_back(K::kAh, ahn);
  ahs_.clear();
  lru_.clear();
  retiring_.clear();
  ah_refs_.clear();
  if (have_mkey_) steps.emplace_back(K::kMkey, mkey_.lkey);
  if (have_pd_) steps.emplace_back(K::kPd, pdn_);
  have_pd_ = have_mkey_ = have_cq_ = have_qp_[0] = have_qp_[1] = false;
  return steps;
}

// The destroys are issued here and answered later (at once on a device
// that is gone; by the driver's drain at shutdown): the rings and the MAD
// buffers stay until the last has answered, since the device may reach them.
MadPort::~MadPort() {
  alive_.reset();  // CREATE_AH continuations completed by the teardown commands do nothing
  auto steps = teardown_steps();
  if (steps.empty()) return;
  struct Memory {
    dma::DmaBuffer buf;
    hca::Cq cq;
    hca::Qp qp0, qp1;
  };
  auto mem = std::make_shared<Memory>(Memory{std::move(buf_), std::move(cq_), std::move(qps_[0]), std::move(qps_[1])});
  hca::destroy_in_order(hca_, std::move(steps), std::move(mem));
}

Result<void> MadPort::post_recv_slot(uint8_t qp, uint32_t slot) {
  const size_t off = (size_t(qp) * kRecvSlots + slot) * kRecvStride;
  hca::RecvWr wr;
  wr.wr_id = uint64_t(qp) << 32 | slot;
  wr.sg.push_back({slot_va(off), uint32_t(kGrhBytes + kMadBytes), mkey_.lkey});
  return hca_.post_recv(qps_[qp], wr);
}

MadPort::AhKey MadPort::ah_key(const MadAddress& to) {
  return std::make_tuple(to.lid, to.sl, to.path_bits, to.grh, to.gid, to.gid_index, to.local_gid);
}

// An Ethernet port's MADs (IBA Annex A17.4; Linux's ib_create_ah_from_wc
// and cm.c on RoCE): a GRH always, from the GID table entry of local_gid
// (the GID the request came to, for a reply), to the next hop's MAC.
void MadPort::create_ah_async(const AhKey& key, const MadAddress& to) {
  if (!ethernet_) return create_ah_with(key, to, to.gid_index);
  if (to.gid == std::array<uint8_t, 16>{})
    return ah_failed(key, err(EINVAL, "a MAD on an Ethernet port needs a destination GID"));
  if (to.local_gid == std::array<uint8_t, 16>{}) return create_ah_with(key, to, to.gid_index);
  hca::find_gid_async(hca_, port_, to.local_gid,
                      [this, key, to, alive = std::weak_ptr<bool>(alive_)](Result<uint16_t> i) {
                        if (alive.expired()) return;
                        if (!i) return ah_failed(key, err(i.error().code, "the source GID: {}", i.error().message));
                        create_ah_with(key, to, static_cast<uint8_t>(*i));
                      });
}

void MadPort::ah_failed(const AhKey& key, const Error& e) {
  auto it = waiting_.find(key);
  std::vector<Waiting> mads;
  if (it != waiting_.end()) {
    mads = std::move(it->second);
    waiting_.erase(it);
  }
  counters_.send_errors += mads.size();
  log::get("mad")->debug("port {}: no address handle for LID {}: {}; {} MADs dropped", port_, std::get<0>(key),
                         e.str(), mads.size());
}

// IBA 11.2.2 address handle for a MAD destination; docs/simhca.md §6.8.
void MadPort::create_ah_with(const AhKey& key, const MadAddress& to, uint8_t sgid_index) {
  hca::AddressVector av;
  av.dlid = to.lid;
  av.sl = to.sl;
  av.src_path_bits = to.path_bits;
  av.port = port_;
  av.grh = to.grh;
  av.hop_limit = to.hop_limit;
  av.flow_label = to.flow_label;
  av.sgid_index = sgid_index;
  av.traffic_class = to.traffic_class;
  av.dgid = to.gid;
  if (ethernet_) {
    av.grh = true;
    av.dlid = 0;
    if (av.hop_limit == 0) av.hop_limit = 64;  // an IP packet's TTL (RFC 1700's default)
    if (dmac_) {  // (none: a test's device, which takes any MAC)
      auto mac = dmac_(port_, to.gid);
      if (!mac) return ah_failed(key, err(mac.error().code, "destination MAC: {}", mac.error().message));
      av.dmac = *mac;
    }
  }
  hca_.create_ah_async(pdn_, av, [this, key, alive = std::weak_ptr<bool>(alive_)](Result<uint32_t> ahn) {
    if (alive.expired()) return;  // the port closed meanwhile; TEARDOWN_HCA reclaims the AH
    auto it = waiting_.find(key);
    std::vector<Waiting> mads;
    if (it != waiting_.end()) {
      mads = std::move(it->second);
      waiting_.erase(it);
    }
    if (!ahn) {
      counters_.send_errors += mads.size();
      log::get("mad")->warn("port {}: CREATE_AH for LID {}: {}; {} MADs dropped", port_, std::get<0>(key),
                            ahn.error().str(), mads.size());
      return;
    }
    cache_ah(key, *ahn);
    for (const Waiting& w : mads) (void)post(w.qp, w.to, w.mad, *ahn);
  });
}

// The newest handle first; past the bound the least recently used one
// goes: destroyed now, or (MADs still use it) when its last one completes.
void MadPort::cache_ah(const AhKey& key, uint32_t ahn) {
  lru_.push_front(key);
  ahs_[key] = CachedAh{ahn, lru_.begin()};
  while (ahs_.size() > max_ahs_) {
    auto old = ahs_.find(lru_.back());
    const uint32_t gone = old->second.ahn;
    ahs_.erase(old);
    lru_.pop_back();
    ++counters_.ahs_evicted;
    if (ah_refs_.count(gone))
      retiring_.insert(gone);
    else
      destroy_ah(gone);
  }
}

void MadPort::unref_ah(uint32_t ahn) {
  auto it = ah_refs_.find(ahn);
  if (it == ah_refs_.end() || --it->second > 0) return;
  ah_refs_.erase(it);
  if (retiring_.erase(ahn)) destroy_ah(ahn);
}

void MadPort::destroy_ah(uint32_t ahn) {
  hca_.destroy_async(hca::ObjectKind::kAh, ahn, [port = port_, ahn](Result<void> r) {
    if (!r) log::get("mad")->debug("port {}: DESTROY_AH {}: {}", port, ahn, r.error().str());
  });
}

Result<void> MadPort::send(uint8_t qp, const MadAddress& to, std::span<const std::byte> mad) {
  if (qp > 1) return err(EINVAL, "MAD send on QP{}", qp);
  if (qp == 0 && !smi_) return err(EOPNOTSUPP, "port {} has no QP0 (no SMI: not an InfiniBand port)", port_);
  if (mad.size() != kMadBytes) return err(EINVAL, "a MAD is {} bytes, not {}", kMadBytes, mad.size());
  const AhKey key = ah_key(to);
  if (auto it = ahs_.find(key); it != ahs_.end()) {
    lru_.splice(lru_.begin(), lru_, it->second.lru);
    return post(qp, to, mad, it->second.ahn);
  }
  if (!waiting_.count(key) && waiting_.size() >= kMaxAhsPending) {
    ++counters_.no_send_buffer;
    return err(EAGAIN, "{} destinations already wait for their address handles", waiting_.size());
  }
  auto& w = waiting_[key];
  if (w.size() >= kSendSlots) {
    ++counters_.no_send_buffer;
    return err(EAGAIN, "{} MADs already wait for this destination's address handle", w.size());
  }
  Waiting one{qp, to, {}};
  std::memcpy(one.mad.data(), mad.data(), kMadBytes);
  w.push_back(one);
  if (w.size() == 1) create_ah_async(key, to);
  return ok();
}

// The MAD holds a reference on its handle (ref_ah) from here until its
// send completes or fails (unref_ah), so that an eviction waits for it.
Result<void> MadPort::post(uint8_t qp, const MadAddress& to, std::span<const std::byte> mad, uint32_t ahn) {
  // Every send slot in flight (or MADs already waiting: they go first):
  // the MAD waits for a send completion (drain_overflow), in order.
  if (free_send_.empty() || !overflow_.empty()) {
    if (overflow_.size() >= kMaxOverflow) {
      ++counters_.no_send_buffer;
      return err(EAGAIN, "all {} MAD send buffers in flight and {} MADs waiting", kSendSlots, overflow_.size());
    }
    ref_ah(ahn);
    Overflow o;
    o.ahn = ahn;
    o.w.qp = qp;
    o.w.to = to;
    std::memcpy(o.w.mad.data(), mad.data(), kMadBytes);
    overflow_.push_back(o);
    ++counters_.queued;
    return ok();
  }
  ref_ah(ahn);
  return post_now(qp, to, mad, ahn);
}

void MadPort::drain_overflow() {
  while (!free_send_.empty() && !overflow_.empty()) {
    Overflow o = overflow_.front();
    overflow_.pop_front();
    (void)post_now(o.w.qp, o.w.to, o.w.mad, o.ahn);  // a failure is counted in send_errors
  }
}

Result<void> MadPort::post_now(uint8_t qp, const MadAddress& to, std::span<const std::byte> mad, uint32_t ahn) {
  const uint32_t slot = free_send_.back();
  const size_t off = kRecvArea + size_t(slot) * kMadBytes;
  std::memcpy(slot_ptr(off), mad.data(), kMadBytes);
  hca::SendWr wr;
  wr.wr_id = kSendTag | uint64_t(qp) << 32 | slot;
  wr.opcode = hca::WrOpcode::kSend;
  wr.sg.push_back({slot_va(off), uint32_t(kMadBytes), mkey_.lkey});
  wr.ahn = ahn;
  wr.remote_qpn = to.qpn;
  wr.remote_qkey = qp == 0 ? 0 : (to.qkey ? to.qkey : kGsiQkey);
  if (auto r = hca_.post_send(qps_[qp], wr); !r) {
    ++counters_.send_errors;
    unref_ah(ahn);
    return r.error();
  }
  free_send_.pop_back();
  slot_ahn_[slot] = ahn;
  ++counters_.sent;
  return ok();
}

void MadPort::on_completion() {
  for (;;) {
    auto wcs = hca_.poll_cq(cq_, 32);
    if (wcs.empty()) break;
    for (const auto& wc : wcs) {
      if (wc.wr_id & kSendTag) {
        const uint32_t slot = uint32_t(wc.wr_id);
        if (slot < kSendSlots) {
          free_send_.push_back(slot);
          unref_ah(slot_ahn_[slot]);
        }
        if (wc.status != hca::kWcSuccess) ++counters_.send_errors;
        drain_overflow();
        continue;
      }
      const uint8_t qp = uint8_t(wc.wr_id >> 32);
      const uint32_t slot = uint32_t(wc.wr_id);
      if (qp > 1 || slot >= kRecvSlots) continue;
      if (wc.status == hca::kWcSuccess && wc.byte_len >= kGrhBytes + kMadBytes) {
        ++counters_.received;
        const std::byte* p = slot_ptr((size_t(qp) * kRecvSlots + slot) * kRecvStride);
        ReceivedMad r;
        r.qp = qp;
        r.from.qpn = wc.src_qp;
        r.from.lid = wc.slid;
        r.from.sl = wc.sl;
        r.from.path_bits = wc.dlid_path_bits;
        r.from.pkey_index = wc.pkey_index;
        r.from.qkey = qp == 1 ? kGsiQkey : 0;
        if (wc.grh) {  // IBA 8.3.1: the GRH's SGID is the sender's GID
          r.from.grh = true;
          const uint32_t w0 = be32(p);
          r.from.traffic_class = uint8_t(w0 >> 20);
          r.from.flow_label = w0 & 0xfffff;
          r.from.hop_limit = uint8_t(p[7]);
          for (int i = 0; i < 16; ++i) r.from.gid[i] = uint8_t(p[8 + i]);
          for (int i = 0; i < 16; ++i) r.from.local_gid[i] = uint8_t(p[24 + i]);  // the DGID: ours
        }
        std::memcpy(r.mad.data(), p + kGrhBytes, kMadBytes);
        if (receiver_) receiver_(r);
      } else if (wc.status != hca::kWcWrFlushErr) {
        ++counters_.recv_errors;
      }
      if (wc.status != hca::kWcWrFlushErr)
        if (auto r = post_recv_slot(qp, slot); !r) ++counters_.recv_errors;
    }
  }
  (void)hca_.arm_cq(cq_, false);
}

void MadLayer::open_async(boost::asio::io_context& io, hca::Device& hca, uint8_t port, OpenDone done,
                          DmacLookup dmac) {
  MadPort::open_async(
      hca, port,
      [&io, d = std::move(done)](Result<std::unique_ptr<MadPort>> p) mutable {
        if (!p) return d(p.take_error());
        d(std::make_unique<MadLayer>(io, std::move(*p)));
      },
      std::move(dmac));
}

}  // namespace openib::mad
