// The RC and UC responder (docs/simhca.md §12.8; IBA 9.7.5, 9.8.3).
#include "sim/simhca/rc_responder.hpp"

#include <algorithm>
#include <array>

namespace openib::simhca {

namespace w = sim::wire;
using w::Op;
using In = QpRuntime::In;

namespace {
constexpr size_t kSavedAtomics = 16;  // §12.8: atomic results kept for duplicates
}  // namespace

// ---- packets out -----------------------------------------------------------------

// A responder packet without payload: now if nothing is queued and the
// cable has a credit, else behind what is queued (responses leave in PSN
// order, IBA 9.7.5.1), sent on a later turn (out_progress). Other QPs'
// packets may have taken the cable's last credit.
void RcResponder::send(Qp& qp, w::Headers& h) {
  if (qp.rt.resp_out.empty() && link_room(wire_.qp_link(qp)) > 0) {
    (void)wire_.send_packet(h, Payload{}, qp.attrs.av, wire_.qp_port(qp), nullptr);
    return;
  }
  QpRuntime::RespOut& o = qp.rt.resp_out.emplace_back();
  o.h = h;
  qp.rt.kick = true;
}

// An Acknowledge packet (IBA 9.7.5.1.3): ACK, RNR NAK or NAK by syndrome.
void RcResponder::send_ack(Qp& qp, uint32_t psn, uint8_t syndrome) {
  w::Headers h;
  h.bth.opcode = w::opcode(w::Transport::kRc, Op::kAcknowledge);
  h.bth.dest_qp = qp.attrs.dest_qpn;
  h.bth.psn = psn & psn::kMask;
  h.aeth = w::Aeth{syndrome, qp.rt.msn};
  send(qp, h);
}

// IBA 9.4.5, 9.7.5.1.4: the Atomic Acknowledge with the original value.
void RcResponder::send_atomic_ack(Qp& qp, uint32_t psn, uint64_t orig) {
  w::Headers h;
  h.bth.opcode = w::opcode(w::Transport::kRc, Op::kAtomicAcknowledge);
  h.bth.dest_qp = qp.attrs.dest_qpn;
  h.bth.psn = psn;
  h.aeth = w::Aeth{ack_syndrome(qp.rt.msn), qp.rt.msn};
  h.atomic_ack_eth = w::AtomicAckEth{orig};
  send(qp, h);
}

// A responder error (IBA 9.7.5.2, 10.8.3): RC NAKs the request; a receive
// WQE in use completes with `local_status`; RC (and UC with a local error)
// goes to ERR with `event`. UC drops the message otherwise (IBA 9.8.3).
void RcResponder::nak(uint32_t qpn, Qp& qp, uint32_t psn, w::NakCode code, uint8_t local_status,
                      uint8_t event) {
  const bool rc = qp.cfg.type == kQpRc;
  log_->debug("simhca: QP {:#x} responder error: NAK code {}, local status {}", qpn, static_cast<int>(code),
              wc_status_name(local_status));
  if (rc) {
    // The NAK goes behind what the responder queued, and all of it goes
    // out now: the QP stops responding.
    send_ack(qp, psn, w::Aeth::nak(qp.rt.msn, code).syndrome);
    out_progress(qpn, qp, true);
    ++stats_.naks_sent;
  }
  if (local_status && qp.rt.rwqe.valid) {
    Cqe c;
    c.status = local_status;
    q_.complete_recv(qpn, qp, c);
  }
  if (rc || local_status) {
    if (event) q_.qp_event(event, qpn);
    q_.qp_to_error(qpn, qp, kErr);
  } else {
    qp.rt.in = In::kNone;
    ++stats_.rx_dropped_seq;
  }
}

// RDMA READ responses for [va, va+len) from PSN `psn` (IBA 9.4.3,
// 9.7.5.1.4): the keys are checked now; the responses are queued and sent
// as the cable takes them (out_progress).
bool RcResponder::read(uint32_t qpn, Qp& qp, uint32_t psn, uint64_t va, uint32_t rkey, uint32_t len) {
  std::vector<Extent> ext;
  if (len > 0 && (!(qp.attrs.access & kMrRemoteRead) ||
                  q_.resolve(rkey, qp.cfg.pdn, va, len, kMrRemoteRead, ext) != KeyFault::kNone)) {
    nak(qpn, qp, psn, w::NakCode::kRemoteAccessError, 0, kEvQpAccessErr);
    return false;
  }
  const uint32_t mtu = wire_.mtu_bytes(qp);
  QpRuntime::RespOut& o = qp.rt.resp_out.emplace_back();
  o.read = true;
  o.psn = psn;
  o.len = len;
  o.npkts = std::max<uint32_t>(1, (len + mtu - 1) / mtu);
  o.msn = qp.rt.msn;
  o.ext = std::move(ext);
  out_progress(qpn, qp, false);
  return true;
}

// Response packet o.sent of a queued READ (IBA 9.7.5.1.4: first/middle/
// last or only, AETH on all but the middle ones). False if its memory
// could not be read.
bool RcResponder::send_read_response(Qp& qp, QpRuntime::RespOut& o, uint32_t mtu) {
  const uint32_t k = o.sent;
  const uint64_t off = uint64_t{k} * mtu;
  const Payload payload{{}, &o.ext, off, static_cast<size_t>(std::min<uint64_t>(mtu, o.len - std::min<uint64_t>(o.len, off)))};
  w::Headers h;
  const Op op = o.npkts == 1 ? Op::kReadResponseOnly : k == 0 ? Op::kReadResponseFirst
                                               : k + 1 == o.npkts ? Op::kReadResponseLast
                                                                  : Op::kReadResponseMiddle;
  h.bth.opcode = w::opcode(w::Transport::kRc, op);
  h.bth.dest_qp = qp.attrs.dest_qpn;
  h.bth.psn = psn::add(o.psn, k);
  if (op != Op::kReadResponseMiddle) h.aeth = w::Aeth{ack_syndrome(o.msn), o.msn};
  return wire_.send_packet(h, payload, qp.attrs.av, wire_.qp_port(qp), nullptr);
}

// A READ response whose memory went away since its keys were checked ends
// the queue with a NAK (IBA 9.7.5.2.5).
void RcResponder::out_progress(uint32_t qpn, Qp& qp, bool force) {
  QpRuntime& rt = qp.rt;
  if (rt.resp_out.empty()) return;
  const uint8_t st = qp.attrs.state;
  if (st != kRtr && st != kRts && st != kSqd && st != kSqe) {
    rt.resp_out.clear();  // a QP in ERR or RESET sends nothing (§12.4)
    return;
  }
  sim::Link* link = wire_.qp_link(qp);
  const size_t room = force ? sim::Link::kUnboundedRoom : link_room(link);
  sim::LinkBatch batch(link);
  const uint32_t mtu = wire_.mtu_bytes(qp);
  for (size_t sent = 0; !rt.resp_out.empty(); ++sent) {
    if (sent == room) {  // the cable is full: on the next turn
      rt.kick = true;
      return;
    }
    QpRuntime::RespOut& o = rt.resp_out.front();
    if (!o.read) {
      (void)wire_.send_packet(o.h, Payload{}, qp.attrs.av, wire_.qp_port(qp), nullptr);
      rt.resp_out.pop_front();
      continue;
    }
    if (!send_read_response(qp, o, mtu)) {
      const uint32_t psn = o.psn;
      rt.resp_out.clear();
      nak(qpn, qp, psn, w::NakCode::kRemoteOperationalError, 0, kEvQpFatal);
      return;
    }
    if (++o.sent == o.npkts) rt.resp_out.pop_front();
  }
}

// ---- requests --------------------------------------------------------------------

// IBA 9.7.5.1.1: duplicate requests are answered again, never re-executed
// (atomics answer from the saved result; READs are re-read).
void RcResponder::duplicate(uint32_t qpn, Qp& qp, const w::ParsedPacket& p) {
  QpRuntime& rt = qp.rt;
  const Op o = w::opcode_op(p.hdr.bth.opcode);
  const uint32_t psn = p.hdr.bth.psn;
  ++stats_.rx_duplicates;
  if (o == Op::kReadRequest && p.hdr.reth) {
    (void)read(qpn, qp, psn, p.hdr.reth->va, p.hdr.reth->rkey, p.hdr.reth->dma_len);
    return;
  }
  if (o == Op::kCompareSwap || o == Op::kFetchAdd) {
    for (const auto& s : rt.atomics)
      if (s.psn == psn) send_atomic_ack(qp, psn, s.orig);
    return;
  }
  send_ack(qp, psn::add(rt.epsn, psn::kMask), ack_syndrome(rt.msn));
  ++stats_.acks_sent;
}

RcResponder::Kind RcResponder::classify(Op o) {
  Kind k{};
  k.o = o;
  k.send = o <= Op::kSendOnlyImm;
  k.write = o >= Op::kWriteFirst && o <= Op::kWriteOnlyImm;
  k.atomic = o == Op::kCompareSwap || o == Op::kFetchAdd;
  k.first = o == Op::kSendFirst || o == Op::kSendOnly || o == Op::kSendOnlyImm || o == Op::kWriteFirst ||
            o == Op::kWriteOnly || o == Op::kWriteOnlyImm || o == Op::kReadRequest || k.atomic;
  k.only = o == Op::kSendOnly || o == Op::kSendOnlyImm || o == Op::kWriteOnly || o == Op::kWriteOnlyImm;
  k.last = k.only || o == Op::kSendLast || o == Op::kSendLastImm || o == Op::kWriteLast ||
           o == Op::kWriteLastImm;
  k.imm = o == Op::kSendLastImm || o == Op::kSendOnlyImm || o == Op::kWriteLastImm || o == Op::kWriteOnlyImm;
  return k;
}

// The PSN against the expected one. RC: a duplicate is answered again
// (IBA 9.7.5.1.1), a gap NAKed once (IBA 9.7.5.1.2). UC: a gap ends the
// message in progress (IBA 9.8.3.1). False if the packet is done with.
bool RcResponder::check_psn(uint32_t qpn, Qp& qp, const w::ParsedPacket& p, const Kind& k) {
  QpRuntime& rt = qp.rt;
  const uint32_t psn = p.hdr.bth.psn;
  const int32_t d = psn::diff(psn, rt.epsn);
  if (qp.cfg.type == kQpRc) {
    if (d < 0) {
      duplicate(qpn, qp, p);
      return false;
    }
    if (d > 0) {  // one NAK per sequence gap
      ++stats_.rx_dropped_seq;
      if (!rt.nak_sent) {
        rt.nak_sent = true;
        send_ack(qp, rt.epsn, w::Aeth::nak(rt.msn, w::NakCode::kPsnSequenceError).syndrome);
        ++stats_.naks_sent;
      }
      return false;
    }
    rt.nak_sent = false;
  } else if (d != 0 || (k.first && rt.in != In::kNone)) {
    // The next first or only packet starts a new message (the receive WQE
    // is kept and reused).
    rt.in = In::kNone;
    if (!k.first) {
      ++stats_.rx_dropped_seq;
      return false;
    }
    rt.epsn = psn;
  }
  return true;
}

// Opcode sequence (IBA 9.7.5.2.4 / 9.8.3): middle and last continue a
// message, first and only start one.
bool RcResponder::check_opcode_sequence(uint32_t qpn, Qp& qp, uint32_t psn, const Kind& k) {
  const In want = k.send ? In::kSend : In::kWrite;
  if (k.first ? qp.rt.in == In::kNone : qp.rt.in == want) return true;
  if (qp.cfg.type != kQpRc && !k.first) {
    ++stats_.rx_dropped_seq;
    return false;
  }
  nak(qpn, qp, psn, w::NakCode::kInvalidRequest, 0, kEvQpReqErr);
  return false;
}

// IBA 9.4.3: an RDMA READ request takes as many PSNs as its responses.
void RcResponder::read_request(uint32_t qpn, Qp& qp, const w::ParsedPacket& p) {
  QpRuntime& rt = qp.rt;
  const uint32_t mtu = wire_.mtu_bytes(qp);
  rt.msn = psn::add(rt.msn, 1);
  const uint32_t len = p.hdr.reth->dma_len;
  if (!read(qpn, qp, p.hdr.bth.psn, p.hdr.reth->va, p.hdr.reth->rkey, len)) return;
  rt.epsn = psn::add(rt.epsn, std::max<uint32_t>(1, (len + mtu - 1) / mtu));
}

// IBA 9.4.5: CmpSwap and FetchAdd on 8 aligned bytes, in host
// (little-endian) order (§12.6); the result is kept for a duplicate.
void RcResponder::atomic(uint32_t qpn, Qp& qp, const w::ParsedPacket& p) {
  QpRuntime& rt = qp.rt;
  const uint32_t psn = p.hdr.bth.psn;
  const w::AtomicEth& a = *p.hdr.atomic_eth;
  if (a.va & 7) return nak(qpn, qp, psn, w::NakCode::kInvalidRequest, 0, kEvQpReqErr);
  std::vector<Extent> ext;
  if (!(qp.attrs.access & kMrRemoteAtomic) ||
      q_.resolve(a.rkey, qp.cfg.pdn, a.va, 8, kMrRemoteAtomic, ext) != KeyFault::kNone)
    return nak(qpn, qp, psn, w::NakCode::kRemoteAccessError, 0, kEvQpAccessErr);
  std::array<std::byte, 8> mem{};
  if (!q_.gather(ext, 0, mem)) return nak(qpn, qp, psn, w::NakCode::kRemoteOperationalError, 0, kEvQpFatal);
  uint64_t orig = 0;
  for (int i = 7; i >= 0; --i) orig = (orig << 8) | std::to_integer<uint8_t>(mem[i]);
  const bool cas = w::opcode_op(p.hdr.bth.opcode) == Op::kCompareSwap;
  const uint64_t v = cas ? (orig == a.compare ? a.swap_add : orig) : orig + a.swap_add;
  for (int i = 0; i < 8; ++i) mem[i] = std::byte(static_cast<uint8_t>(v >> (8 * i)));
  if (!q_.scatter(ext, 0, mem)) return nak(qpn, qp, psn, w::NakCode::kRemoteOperationalError, 0, kEvQpFatal);
  rt.atomics.push_back({psn, orig});
  if (rt.atomics.size() > kSavedAtomics) rt.atomics.erase(rt.atomics.begin());
  rt.msn = psn::add(rt.msn, 1);
  rt.epsn = psn::add(rt.epsn, 1);
  send_atomic_ack(qp, psn, orig);
}

// A receive WQE for a SEND (first packet) or a WRITE with immediate (last
// packet), its SGEs resolved. False if there is none to take: RC answers
// with an RNR NAK (IBA 9.7.5.2.8) or a NAK, UC drops the message.
bool RcResponder::take_rwqe(uint32_t qpn, Qp& qp, uint32_t psn) {
  QpRuntime& rt = qp.rt;
  const bool rc = qp.cfg.type == kQpRc;
  const int r = q_.fetch_recv(qpn, qp);
  if (r < 0) {
    if (rc) send_ack(qp, psn, w::Aeth::nak(rt.msn, w::NakCode::kRemoteOperationalError).syndrome);
    return false;
  }
  if (r == 0) {  // RNR NAK with the QP's min_rnr_timer
    if (rc) {
      send_ack(qp, psn, w::Aeth::rnr_nak(rt.msn, qp.attrs.min_rnr_timer).syndrome);
      ++stats_.rnr_naks_sent;
      // The RNR NAK already tells the requester to resume at this PSN, so
      // the requests it sent behind this one are dropped silently, as after
      // a sequence NAK (IBA 9.7.5.2.1), not NAKed again: each such NAK would
      // cost the requester a retry_cnt retry for a mere RNR wait (§12.8).
      rt.nak_sent = true;
    } else {
      ++stats_.rx_no_wqe;
      rt.in = In::kNone;
    }
    return false;
  }
  if (!rt.rwqe.resolved) {
    for (const Sge& s : rt.rwqe.w.sges)
      if (s.length && q_.resolve(s.lkey, qp.cfg.pdn, s.addr, s.length, kMrLocalWrite, rt.rwqe.ext) != KeyFault::kNone) {
        nak(qpn, qp, psn, w::NakCode::kRemoteOperationalError, kWcLocProtErr, 0);
        return false;
      }
    rt.rwqe.resolved = true;
  }
  return true;
}

// A SEND packet's payload into the receive WQE (IBA 9.7.5.1, 10.7.2);
// its last packet completes it. False if the packet ended in an error.
bool RcResponder::send_data(uint32_t qpn, Qp& qp, const w::ParsedPacket& p, const Kind& k) {
  QpRuntime& rt = qp.rt;
  const uint32_t psn = p.hdr.bth.psn;
  const size_t n = p.payload.size();
  if (k.first) {
    if (!take_rwqe(qpn, qp, psn)) return false;
    rt.in = In::kSend;
    rt.in_off = 0;
  }
  if (rt.in_off + n > rt.rwqe.w.capacity()) {
    nak(qpn, qp, psn, w::NakCode::kInvalidRequest, kWcLocLenErr, kEvQpReqErr);
    return false;
  }
  if (!q_.scatter(rt.rwqe.ext, rt.in_off, p.payload)) {
    nak(qpn, qp, psn, w::NakCode::kRemoteOperationalError, kWcLocProtErr, 0);
    return false;
  }
  rt.in_off += n;
  if (k.last) {
    Cqe c;
    c.opcode = kWcRecv;
    c.byte_len = static_cast<uint32_t>(rt.in_off);
    if (k.imm && p.hdr.imm_dt) {
      c.imm = p.hdr.imm_dt->imm;
      c.flags |= kCqeFlagImm;
    }
    if (p.hdr.bth.se) c.flags |= kCqeFlagSolicited;
    c.slid = p.hdr.lrh.slid;
    c.sl = p.hdr.lrh.sl;
    rt.in = In::kNone;
    rt.msn = psn::add(rt.msn, 1);
    q_.complete_recv(qpn, qp, c);
  }
  return true;
}

// An RDMA WRITE packet (IBA 9.4.2): the first checks the R_Key for the
// whole message (IBA 9.4.4 / 10.6.7.2: a zero-length WRITE checks none);
// a last with immediate data takes a receive WQE and completes it.
bool RcResponder::write_data(uint32_t qpn, Qp& qp, const w::ParsedPacket& p, const Kind& k) {
  QpRuntime& rt = qp.rt;
  const uint32_t psn = p.hdr.bth.psn;
  const size_t n = p.payload.size();
  if (k.first && p.hdr.reth) {
    const w::Reth& r = *p.hdr.reth;
    rt.wr_ext.clear();
    rt.wr_len = r.dma_len;
    if (r.dma_len > 0 && (!(qp.attrs.access & kMrRemoteWrite) ||
                          q_.resolve(r.rkey, qp.cfg.pdn, r.va, r.dma_len, kMrRemoteWrite, rt.wr_ext) != KeyFault::kNone)) {
      nak(qpn, qp, psn, w::NakCode::kRemoteAccessError, 0, kEvQpAccessErr);
      return false;
    }
    rt.in = In::kWrite;
    rt.in_off = 0;
  }
  if (rt.in_off + n > rt.wr_len || (k.last && rt.in_off + n != rt.wr_len)) {
    nak(qpn, qp, psn, w::NakCode::kInvalidRequest, 0, kEvQpReqErr);
    return false;
  }
  if (k.imm && !take_rwqe(qpn, qp, psn)) return false;
  if (!q_.scatter(rt.wr_ext, rt.in_off, p.payload)) {
    nak(qpn, qp, psn, w::NakCode::kRemoteAccessError, 0, kEvQpAccessErr);
    return false;
  }
  rt.in_off += n;
  if (!k.last) return true;
  rt.in = In::kNone;
  rt.msn = psn::add(rt.msn, 1);
  if (k.imm) {
    Cqe c;
    c.opcode = kWcRecvRdmaWithImm;
    c.byte_len = static_cast<uint32_t>(rt.wr_len);
    c.imm = p.hdr.imm_dt ? p.hdr.imm_dt->imm : 0;
    c.flags = kCqeFlagImm | (p.hdr.bth.se ? kCqeFlagSolicited : 0);
    c.slid = p.hdr.lrh.slid;
    c.sl = p.hdr.lrh.sl;
    q_.complete_recv(qpn, qp, c);
  }
  return true;
}

void RcResponder::request(uint32_t qpn, Qp& qp, const w::ParsedPacket& p) {
  const Kind k = classify(w::opcode_op(p.hdr.bth.opcode));
  const uint32_t psn = p.hdr.bth.psn;
  if (!check_psn(qpn, qp, p, k) || !check_opcode_sequence(qpn, qp, psn, k)) return;
  if (k.o == Op::kReadRequest && p.hdr.reth) return read_request(qpn, qp, p);
  if (k.atomic && p.hdr.atomic_eth) return atomic(qpn, qp, p);
  if (!k.send && !k.write) return nak(qpn, qp, psn, w::NakCode::kInvalidRequest, 0, kEvQpReqErr);
  // IBA 9.7.1 / C9-?: first and middle packets carry exactly the path MTU,
  // last packets 1..MTU bytes, only packets 0..MTU.
  const size_t n = p.payload.size();
  const uint32_t mtu = wire_.mtu_bytes(qp);
  const bool len_ok = k.only ? n <= mtu : k.last ? (n >= 1 && n <= mtu) : n == mtu;
  if (!len_ok) return nak(qpn, qp, psn, w::NakCode::kInvalidRequest, 0, kEvQpReqErr);
  if (!(k.send ? send_data(qpn, qp, p, k) : write_data(qpn, qp, p, k))) return;
  qp.rt.epsn = psn::add(qp.rt.epsn, 1);
  if (qp.cfg.type == kQpRc && p.hdr.bth.ack_req) {  // IBA 9.7.5.1.3: ACKs coalesced up to the AckReq packets
    send_ack(qp, psn, ack_syndrome(qp.rt.msn));
    ++stats_.acks_sent;
  }
}

}  // namespace openib::simhca
