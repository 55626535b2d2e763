// simhca's data path, the host side (docs/simhca.md §12): SQ doorbells and
// send WQEs (§12.1, §12.5), receive WQEs from the RQ or SRQ through their
// doorbell records (§12.2, §12.3), CQEs with the ownership phase, arming
// and overrun (§12.4, §7.3), memory keys (§12.6, IBA 10.6), the QP error
// state and flushing (§12.4, IBA 10.8.3). The wire side is rc_requester.cpp, rc_responder.cpp, ud_transport.cpp.
#include <algorithm>

#include "sim/simhca/queue_engine.hpp"

#include "sim/simhca/rc_requester.hpp"
#include "sim/simhca/rc_responder.hpp"
#include "sim/wire/roce.hpp"

namespace openib::simhca {

namespace {
constexpr size_t kMaxInflightOps = 64;  // §12.8: send WQEs taken ahead of their ACKs

uint8_t wc_opcode(uint8_t wr) {
  switch (wr) {
    case kWrSend:
    case kWrSendImm: return kWcSend;
    case kWrWrite:
    case kWrWriteImm: return kWcRdmaWrite;
    case kWrRead: return kWcRdmaRead;
    case kWrCmpSwap: return kWcCompSwap;
    default: return kWcFetchAdd;
  }
}
}  // namespace

// ---- §12.6 memory keys ----------------------------------------------------

KeyFault QueueEngine::resolve(uint32_t key, uint32_t pdn, uint64_t va, uint64_t len, uint32_t need,
                      std::vector<Extent>& out) const {
  const Mkey* m = tables_.mkeys.get(key >> 8);
  if (!m) return KeyFault::kInvalidKey;
  KeyRegion r{m->key, m->cfg.pdn, m->cfg.access, m->cfg.start_va, m->cfg.length,
              m->cfg.log_page_size, &m->cfg.pages};
  return translate(&r, key, pdn, va, len, need, out);
}

// §11.2: every byte goes through the checked DMA of the HostPort.
bool QueueEngine::gather(const std::vector<Extent>& ext, uint64_t off, std::span<std::byte> out) {
  size_t done = 0;
  for (const Extent& e : ext) {
    if (done == out.size()) break;
    if (off >= e.len) {
      off -= e.len;
      continue;
    }
    const size_t n = static_cast<size_t>(std::min<uint64_t>(e.len - off, out.size() - done));
    if (!host_.dma_read(e.iova + off, out.subspan(done, n))) return false;
    done += n;
    off = 0;
  }
  return done == out.size();
}

bool QueueEngine::scatter(const std::vector<Extent>& ext, uint64_t off, std::span<const std::byte> in) {
  size_t done = 0;
  for (const Extent& e : ext) {
    if (done == in.size()) break;
    if (off >= e.len) {
      off -= e.len;
      continue;
    }
    const size_t n = static_cast<size_t>(std::min<uint64_t>(e.len - off, in.size() - done));
    if (!host_.dma_write(e.iova + off, in.subspan(done, n))) return false;
    done += n;
    off = 0;
  }
  return done == in.size();
}

// ---- §12.4 CQEs -------------------------------------------------------------

bool QueueEngine::post_cqe(uint32_t cqn, const Cqe& c) {
  Cq* cq = tables_.cqs.get(cqn);
  if (!cq || cq->state != 0) {  // a CQ in error takes no more CQEs (§12.4)
    ++stats_.cqes_dropped;
    return false;
  }
  const uint32_t size = 1u << cq->cfg.log_size;
  if (cq->producer - cq->consumer >= size) {
    // §12.3: the consumer counter in the CQ's doorbell record.
    std::array<std::byte, 8> dbr{};
    if (host_.dma_read(cq->cfg.dbr_iova, dbr)) {
      const uint32_t ci = get32(dbr, 0);
      if (cq->producer - ci <= size) cq->consumer = ci;
    }
  }
  if (cq->producer - cq->consumer >= size) {  // §12.4: overrun puts the CQ in error
    cq->state = 1;
    ++stats_.cq_overruns;
    ++stats_.cqes_dropped;
    log_->warn("simhca: CQ {} overrun", cqn);
    events_.emit(kEvCqError, cqn, cq->cfg.eqn, 1);
    return false;
  }
  auto e = encode_cqe(c, ((cq->producer >> cq->cfg.log_size) & 1) ^ 1);  // §9.2 phase
  const uint64_t at = cq->cfg.ring_iova + uint64_t{cq->producer & (size - 1)} * kCqeSize;
  // The owner byte goes last, so a consumer never sees a half-written CQE.
  auto body = std::span<const std::byte>(e).first(kCqeSize - 1);
  if (!host_.dma_write(at, body) || !host_.dma_write(at + kCqeSize - 1, std::span(e).last(1))) {
    cq->state = 1;
    ++stats_.cqes_dropped;
    log_->warn("simhca: CQ {} ring at {:#x} not writable", cqn, at);
    events_.emit(kEvCqError, cqn, cq->cfg.eqn, 2);
    return false;
  }
  ++cq->producer;
  ++stats_.cqes_written;
  // §7.3: one CQ_COMPLETION per arm; "solicited" arms take solicited or error CQEs.
  if (cq->arm == 1 || (cq->arm == 2 && ((c.flags & kCqeFlagSolicited) || c.status != kWcSuccess))) {
    cq->arm = 0;
    events_.emit(kEvCqCompletion, cqn, cq->cfg.eqn);
  }
  return true;
}

// §12.5: unsignaled successes make no CQE, unless the QP is SIG_ALL.
void QueueEngine::finish_send(uint32_t qpn, Qp& qp, const SendOp& op, uint8_t status) {
  if (status == kWcSuccess && !op.signaled && !(qp.cfg.flags & kQpFlagSigAll)) return;
  Cqe c;
  c.wr_id = op.w.wr_id;
  c.status = status;
  c.opcode = wc_opcode(op.w.opcode);
  c.byte_len = op.w.is_atomic() ? 8 : static_cast<uint32_t>(op.len);
  c.qpn = qpn;
  c.wqe_index = op.wqe_index;
  post_cqe(qp.cfg.send_cqn, c);
}

void QueueEngine::complete_front(uint32_t qpn, Qp& qp, uint8_t status) {
  if (qp.rt.inflight.empty()) return;
  SendOp op = std::move(qp.rt.inflight.front());
  qp.rt.inflight.pop_front();
  finish_send(qpn, qp, op, status);
}

// §12.4 / IBA 10.8.3: a send error completes the WQE with its status, then
// RC goes to ERR and UC/UD to SQE; the rest is flushed.
void QueueEngine::req_fail(uint32_t qpn, Qp& qp, uint8_t status) {
  log_->debug("simhca: QP {:#x} send error {}", qpn, wc_status_name(status));
  complete_front(qpn, qp, status);
  qp_to_error(qpn, qp, qp.cfg.type == kQpRc ? kErr : kSqe);
}

void QueueEngine::qp_to_error(uint32_t qpn, Qp& qp, uint8_t state) {
  enter_error(qpn, qp, qp.attrs.state, state);
}

// `was`: the state before (MODIFY_QP has already set attrs.state to ERR
// when on_qp_transition runs; the data path has not).
void QueueEngine::enter_error(uint32_t qpn, Qp& qp, uint8_t was, uint8_t state) {
  qp.attrs.state = state;
  track_live(qpn, &qp);
  qp.rt.ack_due.reset();
  qp.rt.rnr_until.reset();
  qp.rt.pace_until.reset();
  flush_posted(qpn, qp);
  // IBA 11.6.3.1: a QP on an SRQ reports its last WQE once it is in ERR.
  if (state == kErr && was != kErr && qp.cfg.use_srq()) events_.emit(kEvQpLastWqeReached, qpn);
}

// §8.3 / IBA 10.3.1: in SQE the send queue is flushed; in ERR both queues
// (an SRQ's WQEs stay in the SRQ, but one a QP holds is flushed).
void QueueEngine::flush_posted(uint32_t qpn, Qp& qp) {
  QpRuntime& rt = qp.rt;
  while (!rt.inflight.empty()) complete_front(qpn, qp, kWcWrFlushErr);
  const uint32_t sq_size = 1u << qp.cfg.log_sq_size;
  while (rt.sq_pi - rt.sq_ci > 0 && rt.sq_pi - rt.sq_ci <= sq_size) {
    const uint32_t idx = rt.sq_ci & (sq_size - 1);
    std::array<std::byte, 16> ctrl{};
    (void)host_.dma_read(qp.cfg.sq_iova + (uint64_t{idx} << qp.cfg.log_sq_stride), ctrl);
    Cqe c;
    c.wr_id = get64(ctrl, 0x08);
    c.status = kWcWrFlushErr;
    c.opcode = wc_opcode(std::min<uint8_t>(get8(ctrl, 0), kWrFetchAdd));
    c.qpn = qpn;
    c.wqe_index = static_cast<uint16_t>(idx);
    post_cqe(qp.cfg.send_cqn, c);
    ++rt.sq_ci;
  }
  rt.sq_ci = rt.sq_pi;
  if (qp.attrs.state != kErr) return;
  if (rt.rwqe.valid) {
    Cqe c;
    c.wr_id = rt.rwqe.wr_id;
    c.status = kWcWrFlushErr;
    c.opcode = kWcRecv;
    c.qpn = qpn;
    c.wqe_index = rt.rwqe.index;
    post_cqe(qp.cfg.recv_cqn, c);
    rt.rwqe = RecvCtx{};
  }
  rt.in = QpRuntime::In::kNone;
  if (qp.cfg.use_srq()) return;
  std::array<std::byte, 8> dbr{};
  if (!host_.dma_read(qp.cfg.dbr_iova, dbr)) return;
  const uint32_t pi = get32(dbr, 0);
  const uint32_t rq_size = 1u << qp.cfg.log_rq_size;
  if (pi - rt.rq_ci > rq_size) return;  // a producer counter that cannot be
  while (rt.rq_ci != pi) {
    const uint32_t idx = rt.rq_ci & (rq_size - 1);
    std::array<std::byte, 8> id{};
    (void)host_.dma_read(qp.cfg.rq_iova + (uint64_t{idx} << qp.cfg.log_rq_stride), id);
    Cqe c;
    c.wr_id = get64(id, 0);
    c.status = kWcWrFlushErr;
    c.opcode = kWcRecv;
    c.qpn = qpn;
    c.wqe_index = static_cast<uint16_t>(idx);
    post_cqe(qp.cfg.recv_cqn, c);
    ++rt.rq_ci;
  }
}

// §8.3 effects on the data path.
void QueueEngine::on_qp_transition(uint32_t qpn, Qp& qp, uint8_t from, const ModifyQp& m) {
  QpRuntime& rt = qp.rt;
  const uint8_t to = qp.attrs.state;
  if (to == kReset) {  // IBA 10.3.1: Reset clears the queues' state
    rt = QpRuntime{};
    return;
  }
  if (m.mask & attr::kRqPsn) rt.epsn = qp.attrs.rq_psn & 0xffffff;
  if (m.mask & attr::kSqPsn) rt.next_psn = rt.una = qp.attrs.sq_psn & 0xffffff;
  if (from == kRtr && to == kRts) {
    rt.retry_left = qp.attrs.retry_cnt;
    rt.rnr_left = qp.attrs.rnr_retry;
  }
  if (to == kErr && from != kErr) enter_error(qpn, qp, from, kErr);  // IBA 11.6.3.1 via MODIFY_QP too
  if (to == kRts) rt.kick = true;  // SQD/SQE -> RTS: resume the SQ
}

// ---- §12.5 SQ doorbell -------------------------------------------------------

// §4 SQ_DOORBELL: bits 23:0 QPN, 63:32 the SQ producer counter.
// The QP an SQ_DOORBELL value names, if the value is acceptable: a QP of
// this UAR and a counter neither behind the device's nor more than the
// ring ahead (§12.5). Otherwise counted in bad_access.
Qp* QueueEngine::sq_doorbell_target(uint32_t uar, uint64_t v) {
  const uint32_t qpn = v & 0xffffff;
  const auto pi = static_cast<uint32_t>(v >> 32);
  Qp* qp = tables_.qps.get(qpn);
  if (!qp || qp->cfg.uar != uar || pi - qp->rt.sq_ci > (1u << qp->cfg.log_sq_size)) {
    ++stats_.bad_access;
    return nullptr;
  }
  return qp;
}

// A register write of SQ_DOORBELL: the counter is the doorbell's.
bool QueueEngine::sq_doorbell(uint32_t uar, uint64_t v) {
  Qp* qp = sq_doorbell_target(uar, v);
  if (!qp) return false;
  ++stats_.sq_doorbells;
  qp->rt.sq_pi = static_cast<uint32_t>(v >> 32);
  qp->rt.kick = true;  // taken up by datapath_tick() (QueueEngine::tick, from Hca::run_due)
  return true;
}

// §12.5: SQ_DOORBELL changed in the page of `uar` (one word for all its
// QPs): every QP of the UAR in RTS, SQD, SQE or ERR re-reads its SQ
// producer counter from its doorbell record (§12.3, offset 0x04).
void QueueEngine::sq_rescan(uint32_t uar) {
  const Uar* u = tables_.uars.get(uar);
  for (uint32_t n = u ? u->first_qp : kNoQp; n != kNoQp;) {
    Qp* qp = tables_.qps.get(n);
    if (!qp) break;
    const uint8_t st = qp->attrs.state;
    if (st == kRts || st == kSqd || st == kSqe || st == kErr) sq_from_record(n, *qp);
    n = qp->uar_next;
  }
}

// The record's counter is taken if it is ahead of the device's producer
// counter and at most the ring size ahead of its consumer counter; equal:
// nothing new; anything else is counted and ignored.
void QueueEngine::sq_from_record(uint32_t qpn, Qp& qp) {
  std::array<std::byte, 8> rec{};
  QpRuntime& rt = qp.rt;
  if (!host_.dma_read(qp.cfg.dbr_iova, rec)) {
    ++stats_.sq_records_bad;
    return;
  }
  const uint32_t pi = get32(rec, 4);
  if (pi == rt.sq_pi) return;
  if (pi - rt.sq_ci > (1u << qp.cfg.log_sq_size) || pi - rt.sq_ci < rt.sq_pi - rt.sq_ci) {
    ++stats_.sq_records_bad;
    log_->debug("simhca: QP {:#x} record SQ counter {} refused (device at {}..{})", qpn, pi,
                rt.sq_ci, rt.sq_pi);
    return;
  }
  ++stats_.sq_doorbells;
  rt.sq_pi = pi;
  rt.kick = true;
}

// Takes the next send WQE (§12.1) if the SQ has one and limits allow:
// decodes it, checks its keys and gathers its data (IBA 10.7.2.2:
// local protection is checked when the WQE is processed).
bool QueueEngine::fetch_send(uint32_t qpn, Qp& qp) {
  QpRuntime& rt = qp.rt;
  if (rt.sq_ci == rt.sq_pi || rt.inflight.size() >= kMaxInflightOps) return false;
  const uint32_t size = 1u << qp.cfg.log_sq_size;
  const uint32_t idx = rt.sq_ci & (size - 1);
  Bytes raw(size_t{1} << qp.cfg.log_sq_stride);
  SendOp op;
  op.wqe_index = static_cast<uint16_t>(idx);
  // Errors complete in order (IBA 10.8.3): a bad WQE waits until the older
  // ones are done, then completes with its status.
  auto fail = [&](uint8_t status) {
    if (!rt.inflight.empty()) return false;
    ++rt.sq_ci;
    rt.inflight.push_back(std::move(op));
    req_fail(qpn, qp, status);
    return false;
  };
  if (!host_.dma_read(qp.cfg.sq_iova + (uint64_t{idx} << qp.cfg.log_sq_stride), raw))
    return fail(kWcLocQpOpErr);
  op.w.wr_id = get64(raw, 0x08);
  op.w.opcode = get8(raw, 0x00);
  op.signaled = get8(raw, 0x01) & kWqeSignaled;
  auto w = decode_send_wqe(raw, qp.cfg.type, WqeLimits{caps_.max_sge, caps_.max_inline});
  if (!w) {
    log_->debug("simhca: QP {:#x} WQE {}: {}", qpn, idx, w.error().message);
    return fail(static_cast<uint8_t>(w.error().code));
  }
  op.w = std::move(*w);
  // §12.1 FENCE, and the initiator depth (max_rd_atomic, IBA 9.7.4.1.6)
  if (op.w.flags & kWqeFence || op.reads()) {
    size_t reads = 0;
    for (const SendOp& o : rt.inflight) reads += o.reads();
    if ((op.w.flags & kWqeFence) && reads) return false;
    if (op.reads() && reads >= std::max<uint8_t>(qp.attrs.max_rd_atomic, 1)) return false;
  }
  op.len = op.w.length();
  const uint32_t mtu = wire_.mtu_bytes(qp);
  if (qp.cfg.type == kQpUd || qp.cfg.type == kQpSmi || qp.cfg.type == kQpGsi) {
    const Ah* ah = tables_.ahs.get(op.w.ahn);
    if (!ah || ah->pdn != qp.cfg.pdn) return fail(kWcLocQpOpErr);  // §12.1: the AH's PD is the QP's
    if (op.len > mtu) return fail(kWcLocLenErr);  // IBA 9.8.4: UD messages fit one packet
  }
  // §16.5: a raw SEND's data is one whole Ethernet frame, header to payload
  // (no FCS): at least the 14-byte header, at most what the cable carries.
  const bool raw_qp = qp.cfg.type == kQpRaw;
  if (raw_qp && (op.len < sim::wire::kEthHeaderBytes || op.len > sim::wire::kMaxPacketBytes))
    return fail(kWcLocLenErr);
  if (op.w.flags & kWqeInline) {
    op.data = op.w.inline_data;
  } else if (op.reads()) {
    for (const Sge& s : op.w.sges)
      if (s.length && resolve(s.lkey, qp.cfg.pdn, s.addr, s.length, kMrLocalWrite, op.local) != KeyFault::kNone)
        return fail(kWcLocProtErr);
  } else {
    // The keys are checked now; the data is read as each packet goes out
    // (RcRequester::send_packet), straight into the packet.
    for (const Sge& s : op.w.sges)
      if (s.length && resolve(s.lkey, qp.cfg.pdn, s.addr, s.length, 0, op.local) != KeyFault::kNone)
        return fail(kWcLocProtErr);
  }
  op.npkts = op.w.is_atomic() || raw_qp ? 1 : static_cast<uint32_t>(std::max<uint64_t>(1, (op.len + mtu - 1) / mtu));
  op.first_psn = rt.next_psn;
  rt.next_psn = (rt.next_psn + op.npkts) & 0xffffff;
  ++rt.sq_ci;
  ++stats_.wqes_executed;
  rt.inflight.push_back(std::move(op));
  return true;
}

// ---- §12.2, §12.3 receive WQEs -----------------------------------------------

int QueueEngine::fetch_recv(uint32_t qpn, Qp& qp) {
  QpRuntime& rt = qp.rt;
  if (rt.rwqe.valid) return 1;
  std::array<std::byte, 8> dbr{};
  uint64_t at = 0;
  uint32_t stride_log = 0;
  RecvCtx ctx;
  if (qp.cfg.use_srq()) {
    Srq* srq = tables_.srqs.get(qp.cfg.srqn);
    if (!srq || !host_.dma_read(srq->cfg.dbr_iova, dbr)) return 0;
    const uint32_t pi = get32(dbr, 0), size = 1u << srq->cfg.log_size;
    if (pi == srq->ci || pi - srq->ci > size) return 0;
    ctx.index = static_cast<uint16_t>(srq->ci & (size - 1));
    at = srq->cfg.ring_iova + (uint64_t{ctx.index} << srq->cfg.log_stride);
    stride_log = srq->cfg.log_stride;
    ++srq->ci;
    // IBA 10.2.9.3 / §6.9: SRQ_LIMIT once when the posted count drops below the limit.
    if (srq->cfg.limit && pi - srq->ci < srq->cfg.limit) {
      srq->cfg.limit = 0;
      events_.emit(kEvSrqLimit, qp.cfg.srqn);
    }
  } else {
    if (!host_.dma_read(qp.cfg.dbr_iova, dbr)) return 0;
    const uint32_t pi = get32(dbr, 0), size = 1u << qp.cfg.log_rq_size;
    if (pi == rt.rq_ci || pi - rt.rq_ci > size) return 0;
    ctx.index = static_cast<uint16_t>(rt.rq_ci & (size - 1));
    at = qp.cfg.rq_iova + (uint64_t{ctx.index} << qp.cfg.log_rq_stride);
    stride_log = qp.cfg.log_rq_stride;
    ++rt.rq_ci;
  }
  Bytes raw(size_t{1} << stride_log);
  const bool read_ok = host_.dma_read(at, raw).ok();
  ctx.wr_id = get64(raw, 0);
  auto w = read_ok ? decode_recv_wqe(raw, caps_.max_sge)
                   : Result<RecvWqe>(Error{kWcLocQpOpErr, "receive WQE unreadable"});
  ctx.valid = true;
  if (!w) {
    rt.rwqe = ctx;
    Cqe c;
    c.status = static_cast<uint8_t>(w.error().code);
    complete_recv(qpn, qp, c);
    qp_to_error(qpn, qp, kErr);
    return -1;
  }
  ctx.w = std::move(*w);
  rt.rwqe = std::move(ctx);
  return 1;
}

// Completes the held receive WQE (§12.4); c carries status and details.
void QueueEngine::complete_recv(uint32_t qpn, Qp& qp, Cqe c) {
  QpRuntime& rt = qp.rt;
  c.wr_id = rt.rwqe.wr_id;
  c.wqe_index = rt.rwqe.index;
  c.qpn = qpn;
  if (c.opcode == 0) c.opcode = kWcRecv;
  rt.rwqe = RecvCtx{};
  if (c.status == kWcSuccess) ++stats_.messages_received;
  post_cqe(qp.cfg.recv_cqn, c);
}

// ---- timers and doorbells, from run_due() ------------------------------------

// In QPs of other states (RESET, INIT, RTR) the requester does nothing:
// a doorbell's `kick` waits for RTS (on_qp_transition kicks then), and no
// timer runs.
void QueueEngine::track_live(uint32_t qpn, const Qp* qp) {
  const uint8_t st = qp ? qp->attrs.state : static_cast<uint8_t>(kReset);
  tables_.live_qps.set(qpn, st == kRtr || st == kRts || st == kSqd || st == kSqe || st == kErr);
}

void QueueEngine::tick() {
  tables_.live_qps.for_each([&](uint32_t qpn) {
    Qp* q = tables_.qps.get(qpn);
    if (!q) return;
    Qp& qp = *q;
    QpRuntime& rt = qp.rt;
    if (qp.attrs.state == kErr || qp.attrs.state == kSqe) {
      if (rt.kick) {
        rt.kick = false;
        responder_.out_progress(qpn, qp, false);  // SQE still responds; ERR drops the queue
        flush_posted(qpn, qp);  // WQEs posted to a QP in error: flushed (§12.4)
      }
      return;
    }
    if (rt.ack_due && *rt.ack_due <= now_) requester_.timeout(qpn, qp);
    for (auto* t : {&rt.rnr_until, &rt.pace_until})
      if (*t && **t <= now_) {
        t->reset();
        rt.kick = true;
      }
    if (rt.kick) {
      rt.kick = false;
      responder_.out_progress(qpn, qp, false);
      requester_.progress(qpn, qp);
    }
  });
}

std::optional<DpClock::time_point> QueueEngine::due() const {
  std::optional<DpClock::time_point> due;
  auto take = [&](const std::optional<DpClock::time_point>& t) {
    if (t && (!due || *t < *due)) due = t;
  };
  tables_.live_qps.for_each([&](uint32_t qpn) {
    const Qp* qp = tables_.qps.get(qpn);
    if (!qp) return;
    if (qp->rt.kick) take(DpClock::time_point::min());
    take(qp->rt.ack_due);
    take(qp->rt.rnr_until);
    take(qp->rt.pace_until);
  });
  return due;
}

}  // namespace openib::simhca
