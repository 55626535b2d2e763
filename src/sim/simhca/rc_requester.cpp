// The requester (docs/simhca.md §12.8; IBA 9.7.1 - 9.7.6, UC and UD 9.8).
#include "sim/simhca/rc_requester.hpp"

#include <algorithm>
#include <array>

#include "sim/simhca/ud_transport.hpp"

namespace openib::simhca {

namespace w = sim::wire;
using w::Op;

namespace {

constexpr uint32_t kAckEvery = 32;  // §12.8: AckReq on every 32nd packet and on the last
constexpr std::chrono::microseconds kPace{100};  // UC/UD: kRcWindow packets per 100 us at most

// IBA 9.2.1: the OpCode of a SEND's or RDMA WRITE's packet by its place in
// the message.
Op data_op(bool send, bool imm, bool first, bool last) {
  if (send)
    return first && last ? (imm ? Op::kSendOnlyImm : Op::kSendOnly)
           : first       ? Op::kSendFirst
           : last        ? (imm ? Op::kSendLastImm : Op::kSendLast)
                         : Op::kSendMiddle;
  return first && last ? (imm ? Op::kWriteOnlyImm : Op::kWriteOnly)
         : first       ? Op::kWriteFirst
         : last        ? (imm ? Op::kWriteLastImm : Op::kWriteLast)
                       : Op::kWriteMiddle;
}

// §12.8: AckReq on packet k of an npkts-packet RC message.
bool ack_req_at(uint32_t k, uint32_t npkts) { return k + 1 == npkts || k % kAckEvery == kAckEvery - 1; }

// The first of `rt.inflight` with packets still to send, or null.
SendOp* next_to_send(QpRuntime& rt) {
  for (SendOp& o : rt.inflight)
    if (o.sent < o.npkts) return &o;
  return nullptr;
}

}  // namespace

// §7.7 / IBA 9.7.6.1.3: the local ACK timeout is 4.096 us x 2^timeout.
DpClock::duration RcRequester::ack_timeout(const Qp& qp) const {
  return std::chrono::nanoseconds(int64_t{4096} << std::min<uint8_t>(qp.attrs.timeout, 31));
}

// IBA 9.7.6.1.3: the ACK timer runs from the first unacknowledged request.
void RcRequester::arm_ack_timer(Qp& qp) {
  if (qp.cfg.type == kQpRc && !qp.rt.ack_due && qp.attrs.timeout) qp.rt.ack_due = q_.now() + ack_timeout(qp);
}

// ---- sending -------------------------------------------------------------------

// §12.8 "Segments": how many of `op`'s next packets leave as one segment
// (sim::Segment, docs/cables.md), 0 for one packet alone. Only RC and UC
// SEND and WRITE packets of a full MTU and the message's last; a segment
// ends at the first packet with AckReq and before a last packet with
// ImmDt, keeps to the RC window, the `credits` left and what the link
// takes, and never goes to the port itself.
uint32_t RcRequester::segment_len(const Qp& qp, const SendOp& op, sim::Link* link, size_t credits) {
  if (!link || (qp.cfg.type != kQpRc && qp.cfg.type != kQpUc) || op.w.opcode > kWrWriteImm ||
      (op.w.flags & kWqeInline))
    return 0;
  const uint32_t k = op.sent;
  uint64_t n = op.npkts - k;
  if (op.w.opcode == kWrSendImm || op.w.opcode == kWrWriteImm) --n;  // the ImmDt packet goes alone
  if (qp.cfg.type == kQpRc) {
    n = std::min<uint64_t>(n, kAckEvery - k % kAckEvery);
    n = std::min<uint64_t>(n, static_cast<uint64_t>(
                                  std::max(0, kRcWindow - psn::diff(psn::add(op.first_psn, k), qp.rt.una))));
  }
  n = std::min<uint64_t>(n, credits);
  if (n < 2 || wire_.for_own_port(wire_.qp_port(qp), qp.attrs.av.dlid)) return 0;
  n = std::min<uint64_t>(n, link->segment_room(wire_.mtu_bytes(qp)));
  return n < 2 ? 0 : static_cast<uint32_t>(n);
}

// The segment of `op`'s next n packets (segment_len): no immediate data in
// it, so its first packet is no Last and its last no First.
bool RcRequester::send_segment(Qp& qp, SendOp& op, uint32_t n) {
  const bool rc = qp.cfg.type == kQpRc;
  const w::Transport tr = transport_of(qp.cfg.type);
  const uint32_t mtu = wire_.mtu_bytes(qp);
  const uint32_t k = op.sent;
  const bool send = op.w.opcode <= kWrSendImm;
  const bool ends = k + n == op.npkts;  // its last packet is the message's
  w::Headers h;
  h.bth.dest_qp = qp.attrs.dest_qpn;
  h.bth.psn = psn::add(op.first_psn, k);
  h.bth.opcode = w::opcode(tr, data_op(send, false, k == 0, false));
  if (!send && k == 0) h.reth = w::Reth{op.w.remote_va, op.w.rkey, static_cast<uint32_t>(op.len)};
  const uint64_t off = uint64_t{k} * mtu;
  const uint64_t len = std::min<uint64_t>(uint64_t{n} * mtu, op.len - off);
  sim::Segment seg;
  seg.count = static_cast<uint16_t>(n);
  seg.mtu = static_cast<uint16_t>(mtu);
  seg.last_len = static_cast<uint16_t>(len - uint64_t{n - 1} * mtu);
  seg.last_opcode = w::opcode(tr, data_op(send, false, false, ends));
  seg.last_se = ends && send && (op.w.flags & kWqeSolicited);  // IBA 9.2.3
  seg.last_ack_req = rc && ack_req_at(k + n - 1, op.npkts);
  op.sent += n;
  if (!wire_.send_packet(h, Payload{{}, &op.local, off, static_cast<size_t>(len)}, qp.attrs.av,
                         wire_.qp_port(qp), &seg))
    return false;
  arm_ack_timer(qp);
  return true;
}

// IBA 9.4.3: a request for the responses [k, end). A long READ is asked
// for a window at a time (as a re-request for the rest would, IBA
// 9.7.4.1.5), so a burst of responses never outruns the cable.
void RcRequester::build_read_request(const Qp& qp, SendOp& op, w::Headers& h) {
  const uint32_t mtu = wire_.mtu_bytes(qp);
  const uint32_t k = op.sent;
  const uint32_t end = std::min<uint32_t>(op.npkts, k + kRcWindow);
  const uint64_t off = std::min<uint64_t>(op.len, uint64_t{k} * mtu);
  const uint64_t stop = std::min<uint64_t>(op.len, uint64_t{end} * mtu);
  h.bth.opcode = w::opcode(transport_of(qp.cfg.type), Op::kReadRequest);
  h.reth = w::Reth{op.w.remote_va + off, op.w.rkey, static_cast<uint32_t>(stop - off)};
  h.bth.ack_req = true;
  op.sent = end;
}

// IBA 9.4.5: CmpSwap and FetchAdd, one packet each.
void RcRequester::build_atomic(const Qp& qp, SendOp& op, w::Headers& h) {
  h.bth.opcode = w::opcode(transport_of(qp.cfg.type), op.w.opcode == kWrCmpSwap ? Op::kCompareSwap : Op::kFetchAdd);
  h.atomic_eth = w::AtomicEth{op.w.remote_va, op.w.rkey, op.w.swap_add, op.w.compare};
  h.bth.ack_req = true;
  op.sent = 1;
}

// Packet op.sent of a SEND or RDMA WRITE (IBA 9.7.1: first/middle/last or
// only packets of the path MTU); its payload from the inline data or,
// read as the packet is written, from the WQE's buffer.
Payload RcRequester::build_data_packet(const Qp& qp, SendOp& op, w::Headers& h) {
  const uint32_t mtu = wire_.mtu_bytes(qp);
  const uint32_t k = op.sent;
  const bool send = op.w.opcode <= kWrSendImm;
  const bool imm = op.w.opcode == kWrSendImm || op.w.opcode == kWrWriteImm;
  const bool first = k == 0, last = k + 1 == op.npkts;
  h.bth.opcode = w::opcode(transport_of(qp.cfg.type), data_op(send, imm, first, last));
  if (!send && first) h.reth = w::Reth{op.w.remote_va, op.w.rkey, static_cast<uint32_t>(op.len)};
  if (imm && last) h.imm_dt = w::ImmDt{op.w.imm};
  if (last && (send || imm)) h.bth.se = op.w.flags & kWqeSolicited;  // IBA 9.2.3
  h.bth.ack_req = qp.cfg.type == kQpRc && ack_req_at(k, op.npkts);
  const uint64_t off = uint64_t{k} * mtu;
  const auto n = static_cast<size_t>(std::min<uint64_t>(mtu, op.len - off));
  ++op.sent;
  if (op.w.flags & kWqeInline) return Payload{std::span<const std::byte>(op.data).subspan(off, n)};
  return Payload{{}, &op.local, off, n};
}

// Sends the next packet of `op` (op.sent is its index).
bool RcRequester::send_packet(uint32_t qpn, Qp& qp, SendOp& op) {
  if (qp.cfg.type == kQpRaw) {  // §16.5: the WQE's data is the frame, one per WQE
    op.sent = op.npkts;
    const Payload frame = (op.w.flags & kWqeInline) ? Payload{std::span<const std::byte>(op.data)}
                                                    : Payload{{}, &op.local, 0, static_cast<size_t>(op.len)};
    return wire_.send_frame(wire_.qp_port(qp), frame);
  }
  w::Headers h;
  h.bth.dest_qp = is_ud_type(qp.cfg.type) ? op.w.dest_qpn : qp.attrs.dest_qpn;
  h.bth.psn = psn::add(op.first_psn, op.sent);
  Payload payload;
  Av av = qp.attrs.av;
  switch (op.w.opcode) {
    case kWrRead: build_read_request(qp, op, h); break;
    case kWrCmpSwap:
    case kWrFetchAdd: build_atomic(qp, op, h); break;
    default: payload = build_data_packet(qp, op, h);
  }
  if (is_ud_type(qp.cfg.type) && !ud_address(q_, qpn, qp, op, h, av)) {
    ++stats_.tx_dropped;
    return true;
  }
  if (!wire_.send_packet(h, payload, av, wire_.qp_port(qp), nullptr)) return false;
  arm_ack_timer(qp);
  return true;
}

void RcRequester::progress(uint32_t qpn, Qp& qp) {
  QpRuntime& rt = qp.rt;
  const uint8_t st = qp.attrs.state;
  if ((st != kRts && st != kSqd) || rt.rnr_until || rt.pace_until) return;
  const bool rc = qp.cfg.type == kQpRc;
  // §12.8: no more than the link's credits (IBA 7.9): a full cable holds
  // the packets back for the next turn instead of dropping them.
  sim::Link* link = wire_.qp_link(qp);
  const size_t room = link_room(link);
  sim::LinkBatch batch(link);  // the receiver hears of the burst once, at its end
  size_t sent = 0;
  for (int budget = kRcWindow;; --budget) {
    if (qp.attrs.state != st) return;  // an error moved the QP
    if (budget == 0) {  // a window's worth per turn (§12.8)
      // UC/UD have no ACK clock: pace them, so a burst does not overrun the
      // peer's receive buffer (IBA leaves UC/UD flow control to the sender).
      if (rc) rt.kick = true;
      else rt.pace_until = q_.now() + kPace;
      return;
    }
    SendOp* op = next_to_send(rt);
    if (!op) {
      if (st != kRts || !q_.fetch_send(qpn, qp)) return;
      continue;
    }
    if (rc && psn::diff(psn::add(op->first_psn, op->sent), rt.una) >= kRcWindow) return;
    if (sent == room) {  // the cable is full: on the next turn
      rt.kick = true;
      return;
    }
    const uint32_t n = segment_len(qp, *op, link, std::min<size_t>(room - sent, budget));
    if (n >= 2) {
      sent += n;
      budget -= static_cast<int>(n - 1);
    } else {
      ++sent;
    }
    if (!(n >= 2 ? send_segment(qp, *op, n) : send_packet(qpn, qp, *op))) {
      // The WQE's buffer can no longer be read (its memory went away since
      // the keys were checked): a local protection error (IBA 10.8.3).
      q_.req_fail(qpn, qp, kWcLocProtErr);
      return;
    }
    // UC and UD complete a WQE once its last packet is sent (IBA 9.8).
    if (!rc && op->sent == op->npkts) q_.complete_front(qpn, qp, kWcSuccess);
  }
}

// ---- acknowledgements ------------------------------------------------------------

// Go-back-N: resend from `psn` (IBA 9.7.6.2). A READ is re-requested from
// its first missing response.
void RcRequester::go_back(Qp& qp, uint32_t psn) {
  for (SendOp& o : qp.rt.inflight) {
    auto s = static_cast<uint32_t>(std::clamp<int32_t>(psn::diff(psn, o.first_psn), 0, static_cast<int32_t>(o.npkts)));
    if (o.reads()) s = std::max(s, o.rcvd);
    o.sent = std::min(o.sent, s);
  }
}

// Forward progress resets the retry counters (IBA 9.7.6.1.3: they count
// consecutive retries) and restarts the ACK timer.
void RcRequester::progress_made(Qp& qp) {
  QpRuntime& rt = qp.rt;
  rt.retry_left = qp.attrs.retry_cnt;
  rt.rnr_left = qp.attrs.rnr_retry;
  rt.read_gap_psn = 0xffffffff;
  if (rt.inflight.empty() || !qp.attrs.timeout) rt.ack_due.reset();
  else rt.ack_due = q_.now() + ack_timeout(qp);
}

// Completes the SEND/WRITE WQEs wholly at or before `psn` (IBA 9.7.5.1.3:
// an ACK acknowledges every request up to its PSN). True if a READ or
// atomic at or before `psn` still lacks its responses.
bool RcRequester::ack_through(uint32_t qpn, Qp& qp, uint32_t psn) {
  QpRuntime& rt = qp.rt;
  bool progress = false, missing = false;
  while (!rt.inflight.empty()) {
    SendOp& op = rt.inflight.front();
    if (psn::diff(psn, op.first_psn) < 0) break;
    if (op.reads()) {
      missing = true;
      break;
    }
    const uint32_t last = psn::add(op.first_psn, op.npkts - 1);
    if (psn::diff(last, psn) <= 0) {
      rt.una = psn::add(last, 1);
      q_.complete_front(qpn, qp, kWcSuccess);
      progress = true;
      continue;
    }
    if (psn::diff(psn::add(psn, 1), rt.una) > 0) {
      rt.una = psn::add(psn, 1);
      progress = true;
      op.sent = std::max<uint32_t>(op.sent, static_cast<uint32_t>(psn::diff(rt.una, op.first_psn)));
    }
    break;
  }
  if (progress) progress_made(qp);
  return missing;
}

void RcRequester::timeout(uint32_t qpn, Qp& qp) {
  QpRuntime& rt = qp.rt;
  rt.ack_due.reset();
  if (rt.inflight.empty()) return;
  ++stats_.timeouts;
  if (rt.retry_left == 0) {
    q_.req_fail(qpn, qp, kWcRetryExcErr);
    return;
  }
  --rt.retry_left;
  ++stats_.retransmits;
  rt.read_gap_psn = 0xffffffff;
  go_back(qp, rt.una);
  if (qp.attrs.timeout) rt.ack_due = q_.now() + ack_timeout(qp);
  progress(qpn, qp);
}

// A READ re-requested from its first missing response (once per gap,
// IBA 9.7.5.1.5).
void RcRequester::read_gap(Qp& qp, SendOp& op) {
  const uint32_t exp = psn::add(op.first_psn, op.rcvd);
  if (qp.rt.read_gap_psn == exp) return;
  qp.rt.read_gap_psn = exp;
  ++stats_.retransmits;
  go_back(qp, exp);
}

// IBA 9.7.5.2.8: an RNR NAK. True if nothing is left outstanding (the
// caller goes on sending); false once the requester waits or failed.
bool RcRequester::on_rnr_nak(uint32_t qpn, Qp& qp, uint32_t psn, const w::Aeth& a) {
  QpRuntime& rt = qp.rt;
  (void)ack_through(qpn, qp, psn::add(psn, psn::kMask));
  if (rt.inflight.empty()) return true;
  if (qp.attrs.rnr_retry != 7) {  // 7: retry forever
    if (rt.rnr_left == 0) {
      q_.req_fail(qpn, qp, kWcRnrRetryExcErr);
      return false;
    }
    --rt.rnr_left;
  }
  ++stats_.retransmits;
  go_back(qp, psn);
  rt.ack_due.reset();
  rt.rnr_until = q_.now() + std::chrono::microseconds(w::rnr_timer_us(a.value()));
  return false;
}

// IBA 9.7.5.2.1 - 9.7.5.2.6: a NAK. True if the caller goes on sending.
bool RcRequester::on_nak(uint32_t qpn, Qp& qp, uint32_t psn, const w::Aeth& a) {
  QpRuntime& rt = qp.rt;
  (void)ack_through(qpn, qp, psn::add(psn, psn::kMask));
  if (rt.inflight.empty()) return true;
  const auto code = static_cast<w::NakCode>(a.value());
  if (code != w::NakCode::kPsnSequenceError) {
    q_.req_fail(qpn, qp,
                code == w::NakCode::kInvalidRequest      ? kWcRemInvReqErr
                : code == w::NakCode::kRemoteAccessError ? kWcRemAccessErr
                                                         : kWcRemOpErr);
    return false;
  }
  // While an RNR NAK's timer runs the requester is already going back to
  // the RNR-NAKed PSN (IBA 9.7.5.2.8); a sequence NAK now answers requests
  // sent before that RNR NAK: no new retry (§12.8).
  if (rt.rnr_until) {
    ++stats_.rx_duplicates;
    return false;
  }
  if (rt.retry_left == 0) {
    q_.req_fail(qpn, qp, kWcRetryExcErr);
    return false;
  }
  --rt.retry_left;
  ++stats_.retransmits;
  go_back(qp, psn);
  if (qp.attrs.timeout) rt.ack_due = q_.now() + ack_timeout(qp);
  return true;
}

// An Acknowledge packet: ACK, RNR NAK or NAK by its AETH (IBA 9.7.5.1.3).
void RcRequester::on_acknowledge(uint32_t qpn, Qp& qp, const w::ParsedPacket& p) {
  const uint32_t psn = p.hdr.bth.psn;
  const w::Aeth a = *p.hdr.aeth;
  switch (a.kind()) {
    case w::AckKind::kAck:
      if (ack_through(qpn, qp, psn)) read_gap(qp, qp.rt.inflight.front());
      break;
    case w::AckKind::kRnrNak:
      if (!on_rnr_nak(qpn, qp, psn, a)) return;
      break;
    case w::AckKind::kNak:
      if (!on_nak(qpn, qp, psn, a)) return;
      break;
    default: ++stats_.rx_bad_response; return;
  }
  progress(qpn, qp);
}

// READ responses and atomic ACKs implicitly acknowledge the SEND/WRITE
// requests before theirs (IBA 9.7.5.1.3). False if the response is done
// with (it answers nothing outstanding, or an older READ/atomic still
// lacks responses and is re-requested).
bool RcRequester::ack_before(uint32_t qpn, Qp& qp, uint32_t psn) {
  QpRuntime& rt = qp.rt;
  while (!rt.inflight.empty()) {
    SendOp& f = rt.inflight.front();
    const int32_t off = psn::diff(psn, f.first_psn);
    if (off < 0) return false;
    if (off < static_cast<int32_t>(f.npkts)) break;
    if (f.reads()) {  // an older READ/atomic still lacks responses
      read_gap(qp, f);
      progress(qpn, qp);
      return false;
    }
    rt.una = psn::add(f.first_psn, f.npkts);
    q_.complete_front(qpn, qp, kWcSuccess);
    progress_made(qp);
  }
  return !rt.inflight.empty();
}

// IBA 9.4.5, 9.7.5.1.4: the atomic's original value.
void RcRequester::on_atomic_ack(uint32_t qpn, Qp& qp, SendOp& op, const w::ParsedPacket& p) {
  const uint32_t psn = p.hdr.bth.psn;
  if (!op.w.is_atomic() || psn != op.first_psn || !p.hdr.atomic_ack_eth) {
    q_.req_fail(qpn, qp, kWcBadRespErr);  // an unexpected response opcode (IBA 9.7.5.1)
    return;
  }
  // §12.6: the original value lands in the local buffer in host (little-endian) order.
  std::array<std::byte, 8> le{};
  for (int i = 0; i < 8; ++i) le[i] = std::byte(static_cast<uint8_t>(p.hdr.atomic_ack_eth->orig_remote_data >> (8 * i)));
  if (!q_.scatter(op.local, 0, le)) {
    q_.req_fail(qpn, qp, kWcLocProtErr);
    return;
  }
  qp.rt.una = psn::add(psn, 1);
  q_.complete_front(qpn, qp, kWcSuccess);
  progress_made(qp);
  progress(qpn, qp);
}

// IBA 9.7.5.1.4 - 9.7.5.1.5: READ responses in order into the local
// buffer; a gap re-requests from the first missing one.
void RcRequester::on_read_response(uint32_t qpn, Qp& qp, SendOp& op, const w::ParsedPacket& p) {
  QpRuntime& rt = qp.rt;
  const uint32_t exp = psn::add(op.first_psn, op.rcvd);
  const int32_t d = psn::diff(p.hdr.bth.psn, exp);
  if (d < 0) {
    ++stats_.rx_duplicates;
    return;
  }
  if (d > 0) {  // a lost response: re-request from it (IBA 9.7.5.1.5)
    read_gap(qp, op);
    progress(qpn, qp);
    return;
  }
  const uint32_t mtu = wire_.mtu_bytes(qp);
  const uint64_t off = uint64_t{op.rcvd} * mtu;
  if (p.payload.size() != std::min<uint64_t>(mtu, op.len - std::min(op.len, off))) {
    ++stats_.rx_bad_response;
    return;
  }
  if (!q_.scatter(op.local, off, p.payload)) {
    q_.req_fail(qpn, qp, kWcLocProtErr);
    return;
  }
  ++op.rcvd;
  rt.una = psn::add(exp, 1);
  if (op.rcvd == op.npkts) q_.complete_front(qpn, qp, kWcSuccess);
  progress_made(qp);
  progress(qpn, qp);
}

void RcRequester::on_response(uint32_t qpn, Qp& qp, const w::ParsedPacket& p) {
  QpRuntime& rt = qp.rt;
  const uint32_t psn = p.hdr.bth.psn;
  const Op o = w::opcode_op(p.hdr.bth.opcode);
  if (qp.attrs.state != kRts && qp.attrs.state != kSqd) {
    ++stats_.rx_bad_state;
    return;
  }
  // A response for no outstanding PSN is a ghost or a duplicate: dropped.
  if (rt.inflight.empty() || psn::diff(psn, rt.una) < 0 || psn::diff(psn, rt.next_psn) >= 0) {
    ++stats_.rx_duplicates;
    return;
  }
  if (o == Op::kAcknowledge) return on_acknowledge(qpn, qp, p);
  if (!ack_before(qpn, qp, psn)) return;
  SendOp& op = rt.inflight.front();
  if (o == Op::kAtomicAcknowledge) return on_atomic_ack(qpn, qp, op, p);
  if (op.w.opcode != kWrRead) {
    q_.req_fail(qpn, qp, kWcBadRespErr);
    return;
  }
  on_read_response(qpn, qp, op, p);
}

}  // namespace openib::simhca
