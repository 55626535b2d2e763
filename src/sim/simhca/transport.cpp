// simhca's transport engine, the wire side of the data path
// (docs/simhca.md §12.7, §12.8; IBA chapter 9): packets out through the
// port's Link and in through receive_packet(); the RC requester (PSNs,
// segmentation by path MTU, ACK/NAK handling, go-back-N retransmission
// bounded by retry_cnt and rnr_retry, IBA 9.7.4 - 9.7.6), the RC/UC
// responder (sequence checking, duplicates, RNR, access checks, IBA 9.7.5,
// 9.8) and UD (IBA 9.8.4, Q_Key 10.2.5).
#include <algorithm>

#include "sim/simhca/hca.hpp"
#include "sim/wire/packet.hpp"

namespace openib::simhca {

namespace w = sim::wire;
using w::Op;

namespace {

constexpr uint32_t kPsnMask = 0xffffff;
constexpr int32_t kWindow = 128;    // §12.8: unacknowledged request packets per QP
constexpr uint32_t kAckEvery = 32;  // §12.8: AckReq on every 32nd packet and on the last
constexpr size_t kSavedAtomics = 16;
constexpr std::chrono::microseconds kPace{100};  // UC/UD: kWindow packets per 100 us at most

// IBA 9.7.2: PSNs compare modulo 2^24, within half the space.
int32_t psn_diff(uint32_t a, uint32_t b) { return static_cast<int32_t>((a - b) << 8) >> 8; }
uint32_t psn_add(uint32_t a, uint32_t n) { return (a + n) & kPsnMask; }

bool is_ud_type(uint8_t t) { return t == kQpUd || t == kQpSmi || t == kQpGsi; }

w::Transport transport_of(uint8_t qp_type) {
  return qp_type == kQpRc ? w::Transport::kRc : qp_type == kQpUc ? w::Transport::kUc : w::Transport::kUd;
}

uint8_t ack_syndrome(uint32_t msn) { return w::Aeth::ack(msn, w::kAethInvalidCredits).syndrome; }

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

}  // namespace

// §12.7: the packet from the LRH on; GRH when the path says so (IBA 8.3).
// QP0 sends on VL15 with the default P_Key (IBA 7.6.5, 14.2.1: SMPs are
// not partitioned); everything else on VL0 with P_Key entry 0.
bool Hca::send_packet(w::Headers& h, const Payload& payload, const Av& av, uint8_t port, const sim::Segment* seg) {
  const Port& pt = port_at(port);
  const bool smi = h.deth && h.deth->src_qp == 0;
  const bool gsi = h.deth && h.deth->src_qp == 1;
  h.lrh.vl = smi ? 15 : pt.sma.sl2vl[av.sl & 0xf];
  h.lrh.sl = av.sl & 0xf;
  h.lrh.dlid = av.dlid;
  h.lrh.slid = static_cast<uint16_t>(pt.info.lid | (av.src_path_bits & ((1u << pt.info.lmc) - 1)));
  if (smi && pt.info.lid == 0) h.lrh.slid = 0xffff;  // IBA 14.2.2: no LID yet: permissive
  h.bth.pkey = smi ? 0xffff : pt.info.pkey0;  // P_Key index 0, the table's only entry (§6.3)
  if (av.grh()) {
    w::Grh g;
    g.tclass = av.traffic_class;
    g.flow_label = av.flow_label;
    g.hop_lmt = av.hop_limit;
    for (int i = 0; i < 8; ++i) {
      g.sgid[i] = static_cast<uint8_t>(pt.info.gid_prefix >> (56 - 8 * i));
      g.sgid[8 + i] = static_cast<uint8_t>(pt.info.port_guid >> (56 - 8 * i));
    }
    g.dgid = av.dgid;
    h.grh = g;
    h.lrh.lnh = w::Lnh::kIbaGlobal;
  } else {
    h.lrh.lnh = w::Lnh::kIbaLocal;
  }
  // An SMP is looked at before it leaves (loopback, §14.1): read it first.
  Bytes smp;
  const Payload* pl = &payload;
  Payload staged;
  if (smi && payload.ext) {
    smp.resize(payload.len);
    if (!gather(*payload.ext, payload.off, smp)) return false;
    staged.bytes = smp;
    pl = &staged;
  }
  // A segment's first packet is framed as if alone, with an MTU of payload.
  auto frame = w::frame_packet(h, seg ? seg->mtu : pl->size());
  if (!frame) {
    ++dstats_.tx_dropped;
    return true;
  }
  sim::Segment sg;
  if (seg) {
    sg = *seg;
    sg.hdr_len = static_cast<uint16_t>(frame->payload_offset());
    sg.later_hdr_len = static_cast<uint16_t>(w::kLrhBytes + (h.grh ? w::kGrhBytes : 0) + w::kBthBytes);
  }
  // §12.7 loopback: to this port's own LID, or (QP0) an SMP for this very
  // port (a directed route of hop count 0, §14.1).
  const bool local = for_own_port(port, av.dlid) ||
                     (smi && smi_is_local(port, pl->bytes, av.dlid));
  // Headers, then the payload straight from host memory (or the bytes
  // given), then pad and CRCs, all into the packet's final place.
  bool readable = true;
  auto fill = [&](std::span<std::byte> out) {
    std::copy(frame->headers().begin(), frame->headers().end(), out.begin());
    auto dst = out.subspan(frame->payload_offset(), pl->size());
    if (pl->ext) {
      if (!gather(*pl->ext, pl->off, dst)) return readable = false;
    } else {
      std::copy(pl->bytes.begin(), pl->bytes.end(), dst.begin());
    }
    if (seg)  // the last packet's pad; no CRCs in a segment (Link::send_segment)
      std::fill_n(dst.end(), sg.last_pad(), std::byte{0});
    else
      w::pad_packet(*frame, out);  // the CRCs are the link's (Link::send_with)
    return true;
  };
  if (!transmit(port, seg ? sg.bytes() : frame->size, fill, smi || gsi, local,
                pl->size() ? frame->payload_offset() : 0, seg ? &sg : nullptr)) {
    if (readable) ++dstats_.tx_dropped;
    return readable;
  }
  dstats_.tx_packets += seg ? sg.count : 1;
  return true;
}

// An Acknowledge packet (IBA 9.7.5.1.3): ACK, RNR NAK or NAK by syndrome.
void Hca::send_ack(Qp& qp, uint32_t psn, uint8_t syndrome) {
  w::Headers h;
  h.bth.opcode = w::opcode(w::Transport::kRc, Op::kAcknowledge);
  h.bth.dest_qp = qp.attrs.dest_qpn;
  h.bth.psn = psn & kPsnMask;
  h.aeth = w::Aeth{syndrome, qp.rt.msn};
  resp_send(qp, h);
}

// A responder packet without payload: now if nothing is queued and the
// cable has a credit, else behind what is queued (responses leave in PSN
// order, IBA 9.7.5.1), sent on a later turn (resp_out_progress). Other
// QPs' packets may have taken the cable's last credit.
void Hca::resp_send(Qp& qp, w::Headers& h) {
  if (qp.rt.resp_out.empty() && link_room(qp_link(qp)) > 0) {
    send_packet(h, Payload{}, qp.attrs.av, qp_port(qp));
    return;
  }
  QpRuntime::RespOut& o = qp.rt.resp_out.emplace_back();
  o.h = h;
  qp.rt.kick = true;
}

// ---- requester ----------------------------------------------------------------

// §12.8 "Segments": how many of `op`'s next packets leave as one segment
// (sim::Segment, docs/cables.md), 0 for one packet alone. Only RC and UC
// SEND and WRITE packets of a full MTU and the message's last; a segment
// ends at the first packet with AckReq and before a last packet with
// ImmDt, keeps to the RC window, the `credits` left and what the link
// takes, and never goes to the port itself.
uint32_t Hca::req_segment_len(const Qp& qp, const SendOp& op, sim::Link* link, size_t credits) {
  if (!link || (qp.cfg.type != kQpRc && qp.cfg.type != kQpUc) || op.w.opcode > kWrWriteImm ||
      (op.w.flags & kWqeInline))
    return 0;
  const uint32_t k = op.sent;
  uint64_t n = op.npkts - k;
  if (op.w.opcode == kWrSendImm || op.w.opcode == kWrWriteImm) --n;  // the ImmDt packet goes alone
  if (qp.cfg.type == kQpRc) {
    n = std::min<uint64_t>(n, kAckEvery - k % kAckEvery);
    n = std::min<uint64_t>(n, static_cast<uint64_t>(
                                  std::max(0, kWindow - psn_diff(psn_add(op.first_psn, k), qp.rt.una))));
  }
  n = std::min<uint64_t>(n, credits);
  if (n < 2 || for_own_port(qp_port(qp), qp.attrs.av.dlid)) return 0;
  n = std::min<uint64_t>(n, link->segment_room(mtu_bytes(qp)));
  return n < 2 ? 0 : static_cast<uint32_t>(n);
}

// The segment of `op`'s next n packets (req_segment_len): no immediate
// data in it, so its first packet is no Last and its last no First.
bool Hca::req_send_segment(Qp& qp, SendOp& op, uint32_t n) {
  const bool rc = qp.cfg.type == kQpRc;
  const w::Transport tr = transport_of(qp.cfg.type);
  const uint32_t mtu = mtu_bytes(qp);
  const uint32_t k = op.sent;
  const bool send = op.w.opcode <= kWrSendImm;
  const bool ends = k + n == op.npkts;  // its last packet is the message's
  w::Headers h;
  h.bth.dest_qp = qp.attrs.dest_qpn;
  h.bth.psn = psn_add(op.first_psn, k);
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
  if (!send_packet(h, Payload{{}, &op.local, off, static_cast<size_t>(len)}, qp.attrs.av, qp_port(qp), &seg))
    return false;
  if (rc && !qp.rt.ack_due && qp.attrs.timeout) qp.rt.ack_due = now_ + ack_timeout(qp);
  return true;
}

// Sends the next packet of `op` (op.sent is its index; IBA 9.7.1 segments
// a message into first/middle/last or only packets of the path MTU).
bool Hca::req_send_packet(uint32_t qpn, Qp& qp, SendOp& op) {
  const bool rc = qp.cfg.type == kQpRc;
  const w::Transport tr = transport_of(qp.cfg.type);
  const uint32_t mtu = mtu_bytes(qp);
  const uint32_t k = op.sent;
  w::Headers h;
  h.bth.dest_qp = is_ud_type(qp.cfg.type) ? op.w.dest_qpn : qp.attrs.dest_qpn;
  h.bth.psn = psn_add(op.first_psn, k);
  Payload payload;
  Av av = qp.attrs.av;
  switch (op.w.opcode) {
    case kWrRead: {
      // IBA 9.4.3: a request for the responses [k, end). A long READ is
      // asked for a window at a time (as a re-request for the rest would,
      // IBA 9.7.4.1.5), so a burst of responses never outruns the cable.
      const uint32_t end = std::min<uint32_t>(op.npkts, k + kWindow);
      const uint64_t off = std::min<uint64_t>(op.len, uint64_t{k} * mtu);
      const uint64_t stop = std::min<uint64_t>(op.len, uint64_t{end} * mtu);
      h.bth.opcode = w::opcode(tr, Op::kReadRequest);
      h.reth = w::Reth{op.w.remote_va + off, op.w.rkey, static_cast<uint32_t>(stop - off)};
      h.bth.ack_req = true;
      op.sent = end;
      break;
    }
    case kWrCmpSwap:
    case kWrFetchAdd:  // IBA 9.4.5
      h.bth.opcode = w::opcode(tr, op.w.opcode == kWrCmpSwap ? Op::kCompareSwap : Op::kFetchAdd);
      h.atomic_eth = w::AtomicEth{op.w.remote_va, op.w.rkey, op.w.swap_add, op.w.compare};
      h.bth.ack_req = true;
      op.sent = 1;
      break;
    default: {
      const bool send = op.w.opcode <= kWrSendImm;
      const bool imm = op.w.opcode == kWrSendImm || op.w.opcode == kWrWriteImm;
      const bool first = k == 0, last = k + 1 == op.npkts;
      h.bth.opcode = w::opcode(tr, data_op(send, imm, first, last));
      if (!send && first) h.reth = w::Reth{op.w.remote_va, op.w.rkey, static_cast<uint32_t>(op.len)};
      if (imm && last) h.imm_dt = w::ImmDt{op.w.imm};
      if (last && (send || imm)) h.bth.se = op.w.flags & kWqeSolicited;  // IBA 9.2.3
      h.bth.ack_req = rc && ack_req_at(k, op.npkts);
      const uint64_t off = uint64_t{k} * mtu;
      const auto n = static_cast<size_t>(std::min<uint64_t>(mtu, op.len - off));
      if (op.w.flags & kWqeInline) payload.bytes = std::span<const std::byte>(op.data).subspan(off, n);
      else payload = Payload{{}, &op.local, off, n};
      ++op.sent;
    }
  }
  if (is_ud_type(qp.cfg.type)) {
    const Ah* ah = ahs_.get(op.w.ahn);
    if (!ah) {
      ++dstats_.tx_dropped;
      return true;
    }
    av = ah->av;
    // IBA 10.2.5: a WQE Q_Key with bit 31 set means the QP's own Q_Key.
    // §6.10: QP0 and QP1 are QPN 0 and 1 on the wire, whatever their number inside.
    const uint32_t src = qp.cfg.type == kQpSmi ? 0 : qp.cfg.type == kQpGsi ? 1 : qpn;
    h.deth = w::Deth{(op.w.qkey & 0x80000000u) ? qp.attrs.qkey : op.w.qkey, src};
  }
  if (!send_packet(h, payload, av, qp_port(qp))) return false;
  if (rc && !qp.rt.ack_due && qp.attrs.timeout) qp.rt.ack_due = now_ + ack_timeout(qp);
  return true;
}

// Packets a cable takes now (sim::Link::tx_room); unbounded without one
// (transmit counts the discard, or the packet loops back).
size_t Hca::link_room(sim::Link* link) { return link ? link->tx_room() : sim::Link::kUnboundedRoom; }

// The cable a QP's packets leave by: none for a port without one, or for
// packets that loop back inside the device (§12.7).
sim::Link* Hca::qp_link(const Qp& qp) {
  const uint8_t port = qp_port(qp);
  if (port > opts_.caps.num_ports || for_own_port(port, qp.attrs.av.dlid)) return nullptr;
  return port_at(port).link;
}

// Sends what the window allows and takes new WQEs while in RTS (§12.5;
// in SQD the WQEs already started finish, IBA 10.3.1).
void Hca::req_progress(uint32_t qpn, Qp& qp) {
  QpRuntime& rt = qp.rt;
  const uint8_t st = qp.attrs.state;
  if ((st != kRts && st != kSqd) || rt.rnr_until || rt.pace_until) return;
  const bool rc = qp.cfg.type == kQpRc;
  // §12.8: no more than the link's credits (IBA 7.9): a full cable holds
  // the packets back for the next turn instead of dropping them.
  sim::Link* link = qp_link(qp);
  const size_t room = link_room(link);
  sim::LinkBatch batch(link);  // the receiver hears of the burst once, at its end
  size_t sent = 0;
  for (int budget = kWindow;; --budget) {
    if (qp.attrs.state != st) return;  // an error moved the QP
    if (budget == 0) {  // a window's worth per turn (§12.8)
      // UC/UD have no ACK clock: pace them, so a burst does not overrun the
      // peer's receive buffer (IBA leaves UC/UD flow control to the sender).
      if (rc) rt.kick = true;
      else rt.pace_until = now_ + kPace;
      return;
    }
    SendOp* op = nullptr;
    for (SendOp& o : rt.inflight)
      if (o.sent < o.npkts) {
        op = &o;
        break;
      }
    if (!op) {
      if (st != kRts || !fetch_send(qpn, qp)) return;
      continue;
    }
    if (rc && psn_diff(psn_add(op->first_psn, op->sent), rt.una) >= kWindow) return;
    if (sent == room) {  // the cable is full: on the next turn
      rt.kick = true;
      return;
    }
    if (const uint32_t n = req_segment_len(qp, *op, link, std::min<size_t>(room - sent, budget)); n >= 2) {
      sent += n;
      budget -= static_cast<int>(n - 1);
      if (!req_send_segment(qp, *op, n)) {
        req_fail(qpn, qp, kWcLocProtErr);  // as below
        return;
      }
      if (!rc && op->sent == op->npkts) complete_front(qpn, qp, kWcSuccess);
      continue;
    }
    ++sent;
    if (!req_send_packet(qpn, qp, *op)) {
      // The WQE's buffer can no longer be read (its memory went away since
      // the keys were checked): a local protection error (IBA 10.8.3).
      req_fail(qpn, qp, kWcLocProtErr);
      return;
    }
    // UC and UD complete a WQE once its last packet is sent (IBA 9.8).
    if (!rc && op->sent == op->npkts) complete_front(qpn, qp, kWcSuccess);
  }
}

// Go-back-N: resend from `psn` (IBA 9.7.6.2). A READ is re-requested from
// its first missing response.
void Hca::req_go_back(Qp& qp, uint32_t psn) {
  for (SendOp& o : qp.rt.inflight) {
    auto s = static_cast<uint32_t>(std::clamp<int32_t>(psn_diff(psn, o.first_psn), 0, static_cast<int32_t>(o.npkts)));
    if (o.reads()) s = std::max(s, o.rcvd);
    o.sent = std::min(o.sent, s);
  }
}

// Forward progress resets the retry counters (IBA 9.7.6.1.3: they count
// consecutive retries) and restarts the ACK timer.
void Hca::req_progress_made(Qp& qp) {
  QpRuntime& rt = qp.rt;
  rt.retry_left = qp.attrs.retry_cnt;
  rt.rnr_left = qp.attrs.rnr_retry;
  rt.read_gap_psn = 0xffffffff;
  if (rt.inflight.empty() || !qp.attrs.timeout) rt.ack_due.reset();
  else rt.ack_due = now_ + ack_timeout(qp);
}

// Completes the SEND/WRITE WQEs wholly at or before `psn` (IBA 9.7.5.1.3:
// an ACK acknowledges every request up to its PSN). True if a READ or
// atomic at or before `psn` still lacks its responses.
bool Hca::req_ack_through(uint32_t qpn, Qp& qp, uint32_t psn) {
  QpRuntime& rt = qp.rt;
  bool progress = false, missing = false;
  while (!rt.inflight.empty()) {
    SendOp& op = rt.inflight.front();
    if (psn_diff(psn, op.first_psn) < 0) break;
    if (op.reads()) {
      missing = true;
      break;
    }
    const uint32_t last = psn_add(op.first_psn, op.npkts - 1);
    if (psn_diff(last, psn) <= 0) {
      rt.una = psn_add(last, 1);
      complete_front(qpn, qp, kWcSuccess);
      progress = true;
      continue;
    }
    if (psn_diff(psn_add(psn, 1), rt.una) > 0) {
      rt.una = psn_add(psn, 1);
      progress = true;
      op.sent = std::max<uint32_t>(op.sent, static_cast<uint32_t>(psn_diff(rt.una, op.first_psn)));
    }
    break;
  }
  if (progress) req_progress_made(qp);
  return missing;
}

// IBA 9.7.6.1.3: local ACK timeout.
void Hca::req_timeout(uint32_t qpn, Qp& qp) {
  QpRuntime& rt = qp.rt;
  rt.ack_due.reset();
  if (rt.inflight.empty()) return;
  ++dstats_.timeouts;
  if (rt.retry_left == 0) {
    req_fail(qpn, qp, kWcRetryExcErr);
    return;
  }
  --rt.retry_left;
  ++dstats_.retransmits;
  rt.read_gap_psn = 0xffffffff;
  req_go_back(qp, rt.una);
  if (qp.attrs.timeout) rt.ack_due = now_ + ack_timeout(qp);
  req_progress(qpn, qp);
}

// ACK, NAK, RNR NAK, READ responses and atomic ACKs (IBA 9.7.5.1, 9.7.5.2).
void Hca::req_on_response(uint32_t qpn, Qp& qp, const w::ParsedPacket& p) {
  QpRuntime& rt = qp.rt;
  const uint32_t psn = p.hdr.bth.psn;
  const Op o = w::opcode_op(p.hdr.bth.opcode);
  if (qp.attrs.state != kRts && qp.attrs.state != kSqd) {
    ++dstats_.rx_bad_state;
    return;
  }
  // A response for no outstanding PSN is a ghost or a duplicate: dropped.
  if (rt.inflight.empty() || psn_diff(psn, rt.una) < 0 || psn_diff(psn, rt.next_psn) >= 0) {
    ++dstats_.rx_duplicates;
    return;
  }
  // A READ re-requested from its first missing response (once per gap).
  auto read_gap = [&](SendOp& op) {
    const uint32_t exp = psn_add(op.first_psn, op.rcvd);
    if (rt.read_gap_psn == exp) return;
    rt.read_gap_psn = exp;
    ++dstats_.retransmits;
    req_go_back(qp, exp);
  };
  if (o == Op::kAcknowledge) {
    const w::Aeth a = *p.hdr.aeth;
    switch (a.kind()) {
      case w::AckKind::kAck:
        if (req_ack_through(qpn, qp, psn)) read_gap(rt.inflight.front());
        break;
      case w::AckKind::kRnrNak:  // IBA 9.7.5.2.8
        (void)req_ack_through(qpn, qp, psn_add(psn, kPsnMask));
        if (rt.inflight.empty()) break;
        if (qp.attrs.rnr_retry != 7) {  // 7: retry forever
          if (rt.rnr_left == 0) {
            req_fail(qpn, qp, kWcRnrRetryExcErr);
            return;
          }
          --rt.rnr_left;
        }
        ++dstats_.retransmits;
        req_go_back(qp, psn);
        rt.ack_due.reset();
        rt.rnr_until = now_ + std::chrono::microseconds(w::rnr_timer_us(a.value()));
        return;
      case w::AckKind::kNak: {  // IBA 9.7.5.2.1 - 9.7.5.2.6
        (void)req_ack_through(qpn, qp, psn_add(psn, kPsnMask));
        if (rt.inflight.empty()) break;
        const auto code = static_cast<w::NakCode>(a.value());
        if (code == w::NakCode::kPsnSequenceError) {
          // While an RNR NAK's timer runs the requester is already going back
          // to the RNR-NAKed PSN (IBA 9.7.5.2.8); a sequence NAK now answers
          // requests sent before that RNR NAK: no new retry (§12.8).
          if (rt.rnr_until) {
            ++dstats_.rx_duplicates;
            return;
          }
          if (rt.retry_left == 0) {
            req_fail(qpn, qp, kWcRetryExcErr);
            return;
          }
          --rt.retry_left;
          ++dstats_.retransmits;
          req_go_back(qp, psn);
          if (qp.attrs.timeout) rt.ack_due = now_ + ack_timeout(qp);
          break;
        }
        req_fail(qpn, qp,
                 code == w::NakCode::kInvalidRequest      ? kWcRemInvReqErr
                 : code == w::NakCode::kRemoteAccessError ? kWcRemAccessErr
                                                          : kWcRemOpErr);
        return;
      }
      default: ++dstats_.rx_bad_response; return;
    }
    req_progress(qpn, qp);
    return;
  }
  // READ responses and atomic ACKs implicitly acknowledge the SEND/WRITE
  // requests before theirs (IBA 9.7.5.1.3).
  while (!rt.inflight.empty()) {
    SendOp& f = rt.inflight.front();
    const int32_t off = psn_diff(psn, f.first_psn);
    if (off < 0) return;
    if (off < static_cast<int32_t>(f.npkts)) break;
    if (f.reads()) {  // an older READ/atomic still lacks responses
      read_gap(f);
      req_progress(qpn, qp);
      return;
    }
    rt.una = psn_add(f.first_psn, f.npkts);
    complete_front(qpn, qp, kWcSuccess);
    req_progress_made(qp);
  }
  if (rt.inflight.empty()) return;
  SendOp& op = rt.inflight.front();
  if (o == Op::kAtomicAcknowledge) {
    if (!op.w.is_atomic() || psn != op.first_psn || !p.hdr.atomic_ack_eth) {
      req_fail(qpn, qp, kWcBadRespErr);  // IBA 9.7.5.1.? unexpected response opcode
      return;
    }
    // §12.6: the original value lands in the local buffer in host (little-endian) order.
    std::array<std::byte, 8> le{};
    for (int i = 0; i < 8; ++i) le[i] = std::byte(static_cast<uint8_t>(p.hdr.atomic_ack_eth->orig_remote_data >> (8 * i)));
    if (!scatter(op.local, 0, le)) {
      req_fail(qpn, qp, kWcLocProtErr);
      return;
    }
    rt.una = psn_add(psn, 1);
    complete_front(qpn, qp, kWcSuccess);
    req_progress_made(qp);
    req_progress(qpn, qp);
    return;
  }
  if (op.w.opcode != kWrRead) {
    req_fail(qpn, qp, kWcBadRespErr);
    return;
  }
  const uint32_t exp = psn_add(op.first_psn, op.rcvd);
  const int32_t d = psn_diff(psn, exp);
  if (d < 0) {
    ++dstats_.rx_duplicates;
    return;
  }
  if (d > 0) {  // a lost response: re-request from it (IBA 9.7.5.1.5)
    read_gap(op);
    req_progress(qpn, qp);
    return;
  }
  const uint32_t mtu = mtu_bytes(qp);
  const uint64_t off = uint64_t{op.rcvd} * mtu;
  if (p.payload.size() != std::min<uint64_t>(mtu, op.len - std::min(op.len, off))) {
    ++dstats_.rx_bad_response;
    return;
  }
  if (!scatter(op.local, off, p.payload)) {
    req_fail(qpn, qp, kWcLocProtErr);
    return;
  }
  ++op.rcvd;
  rt.una = psn_add(exp, 1);
  if (op.rcvd == op.npkts) complete_front(qpn, qp, kWcSuccess);
  req_progress_made(qp);
  req_progress(qpn, qp);
}

// ---- responder -----------------------------------------------------------------

// A responder error (IBA 9.7.5.2, 10.8.3): RC NAKs the request; a receive
// WQE in use completes with `local_status`; RC (and UC with a local error)
// goes to ERR with `event`. UC drops the message otherwise (IBA 9.8.3).
void Hca::resp_nak(uint32_t qpn, Qp& qp, uint32_t psn, uint8_t code, uint8_t local_status,
                   uint8_t event) {
  const bool rc = qp.cfg.type == kQpRc;
  log_->debug("simhca: QP {:#x} responder error: NAK code {}, local status {}", qpn, code,
              wc_status_name(local_status));
  if (rc) {
    // The NAK goes behind what the responder queued, and all of it goes
    // out now: the QP stops responding.
    send_ack(qp, psn, w::Aeth::nak(qp.rt.msn, static_cast<w::NakCode>(code)).syndrome);
    resp_out_progress(qpn, qp, true);
    ++dstats_.naks_sent;
  }
  if (local_status && qp.rt.rwqe.valid) {
    Cqe c;
    c.status = local_status;
    complete_recv(qpn, qp, c);
  }
  if (rc || local_status) {
    if (event) emit_event(event, qpn);
    qp_to_error(qpn, qp, kErr);
  } else {
    qp.rt.in = QpRuntime::In::kNone;
    ++dstats_.rx_dropped_seq;
  }
}

// RDMA READ responses for [va, va+len) from PSN `psn` (IBA 9.4.3,
// 9.7.5.1.4): the keys are checked now; the responses are queued and sent
// as the cable takes them (resp_out_progress).
bool Hca::resp_read(uint32_t qpn, Qp& qp, uint32_t psn, uint64_t va, uint32_t rkey, uint32_t len) {
  std::vector<Extent> ext;
  if (len > 0 && (!(qp.attrs.access & kMrRemoteRead) ||
                  resolve(rkey, qp.cfg.pdn, va, len, kMrRemoteRead, ext) != KeyFault::kNone)) {
    resp_nak(qpn, qp, psn, static_cast<uint8_t>(w::NakCode::kRemoteAccessError), 0, kEvQpAccessErr);
    return false;
  }
  const uint32_t mtu = mtu_bytes(qp);
  QpRuntime::RespOut& o = qp.rt.resp_out.emplace_back();
  o.read = true;
  o.psn = psn;
  o.len = len;
  o.npkts = std::max<uint32_t>(1, (len + mtu - 1) / mtu);
  o.msn = qp.rt.msn;
  o.ext = std::move(ext);
  resp_out_progress(qpn, qp, false);
  return true;
}

// Sends the queued responder packets the cable takes now (all of them if
// `force`: the QP is about to stop responding); the rest on a later turn
// (rt.kick). A READ response whose memory went away since its keys were
// checked ends the queue with a NAK (IBA 9.7.5.2.5).
void Hca::resp_out_progress(uint32_t qpn, Qp& qp, bool force) {
  QpRuntime& rt = qp.rt;
  if (rt.resp_out.empty()) return;
  const uint8_t st = qp.attrs.state;
  if (st != kRtr && st != kRts && st != kSqd && st != kSqe) {
    rt.resp_out.clear();  // a QP in ERR or RESET sends nothing (§12.4)
    return;
  }
  sim::Link* link = qp_link(qp);
  const size_t room = force ? sim::Link::kUnboundedRoom : link_room(link);
  sim::LinkBatch batch(link);
  const uint32_t mtu = mtu_bytes(qp);
  for (size_t sent = 0; !rt.resp_out.empty(); ++sent) {
    if (sent == room) {  // the cable is full: on the next turn
      rt.kick = true;
      return;
    }
    QpRuntime::RespOut& o = rt.resp_out.front();
    if (!o.read) {
      send_packet(o.h, Payload{}, qp.attrs.av, qp_port(qp));
      rt.resp_out.pop_front();
      continue;
    }
    const uint32_t k = o.sent;
    const uint64_t off = uint64_t{k} * mtu;
    const Payload payload{{}, &o.ext, off, static_cast<size_t>(std::min<uint64_t>(mtu, o.len - std::min<uint64_t>(o.len, off)))};
    w::Headers h;
    const Op op = o.npkts == 1 ? Op::kReadResponseOnly : k == 0 ? Op::kReadResponseFirst
                                                 : k + 1 == o.npkts ? Op::kReadResponseLast
                                                                    : Op::kReadResponseMiddle;
    h.bth.opcode = w::opcode(w::Transport::kRc, op);
    h.bth.dest_qp = qp.attrs.dest_qpn;
    h.bth.psn = psn_add(o.psn, k);
    if (op != Op::kReadResponseMiddle) h.aeth = w::Aeth{ack_syndrome(o.msn), o.msn};
    if (!send_packet(h, payload, qp.attrs.av, qp_port(qp))) {
      const uint32_t psn = o.psn;
      rt.resp_out.clear();
      resp_nak(qpn, qp, psn, static_cast<uint8_t>(w::NakCode::kRemoteOperationalError), 0, kEvQpFatal);
      return;
    }
    if (++o.sent == o.npkts) rt.resp_out.pop_front();
  }
}

// IBA 9.7.5.1.1: duplicate requests are answered again, never re-executed
// (atomics answer from the saved result; READs are re-read).
void Hca::resp_duplicate(uint32_t qpn, Qp& qp, const w::ParsedPacket& p) {
  QpRuntime& rt = qp.rt;
  const Op o = w::opcode_op(p.hdr.bth.opcode);
  const uint32_t psn = p.hdr.bth.psn;
  ++dstats_.rx_duplicates;
  if (o == Op::kReadRequest && p.hdr.reth) {
    (void)resp_read(qpn, qp, psn, p.hdr.reth->va, p.hdr.reth->rkey, p.hdr.reth->dma_len);
    return;
  }
  if (o == Op::kCompareSwap || o == Op::kFetchAdd) {
    for (const auto& s : rt.atomics)
      if (s.psn == psn) {
        w::Headers h;
        h.bth.opcode = w::opcode(w::Transport::kRc, Op::kAtomicAcknowledge);
        h.bth.dest_qp = qp.attrs.dest_qpn;
        h.bth.psn = psn;
        h.aeth = w::Aeth{ack_syndrome(rt.msn), rt.msn};
        h.atomic_ack_eth = w::AtomicAckEth{s.orig};
        resp_send(qp, h);
      }
    return;
  }
  send_ack(qp, psn_add(rt.epsn, kPsnMask), ack_syndrome(rt.msn));
  ++dstats_.acks_sent;
}

// RC and UC requests (IBA 9.7.5, 9.8.3).
void Hca::resp_request(uint32_t qpn, Qp& qp, const w::ParsedPacket& p) {
  using In = QpRuntime::In;
  QpRuntime& rt = qp.rt;
  const bool rc = qp.cfg.type == kQpRc;
  const w::Bth& b = p.hdr.bth;
  const Op o = w::opcode_op(b.opcode);
  const uint32_t mtu = mtu_bytes(qp);
  const size_t n = p.payload.size();
  const bool is_send = o <= Op::kSendOnlyImm;
  const bool is_write = o >= Op::kWriteFirst && o <= Op::kWriteOnlyImm;
  const bool is_atomic = o == Op::kCompareSwap || o == Op::kFetchAdd;
  const bool first = o == Op::kSendFirst || o == Op::kSendOnly || o == Op::kSendOnlyImm ||
                     o == Op::kWriteFirst || o == Op::kWriteOnly || o == Op::kWriteOnlyImm ||
                     o == Op::kReadRequest || is_atomic;
  const bool only = o == Op::kSendOnly || o == Op::kSendOnlyImm || o == Op::kWriteOnly ||
                    o == Op::kWriteOnlyImm;
  const bool last = only || o == Op::kSendLast || o == Op::kSendLastImm || o == Op::kWriteLast ||
                    o == Op::kWriteLastImm;
  const bool imm = o == Op::kSendLastImm || o == Op::kSendOnlyImm || o == Op::kWriteLastImm ||
                   o == Op::kWriteOnlyImm;
  const auto nak = [&](w::NakCode c, uint8_t local, uint8_t ev) {
    resp_nak(qpn, qp, b.psn, static_cast<uint8_t>(c), local, ev);
  };

  const int32_t d = psn_diff(b.psn, rt.epsn);
  if (rc) {
    if (d < 0) return resp_duplicate(qpn, qp, p);
    if (d > 0) {  // IBA 9.7.5.1.2: one NAK per sequence gap
      ++dstats_.rx_dropped_seq;
      if (!rt.nak_sent) {
        rt.nak_sent = true;
        send_ack(qp, rt.epsn, w::Aeth::nak(rt.msn, w::NakCode::kPsnSequenceError).syndrome);
        ++dstats_.naks_sent;
      }
      return;
    }
    rt.nak_sent = false;
  } else if (d != 0 || (first && rt.in != In::kNone)) {
    // IBA 9.8.3.1: a UC gap ends the message in progress; the next first or
    // only packet starts a new one (the receive WQE is kept and reused).
    rt.in = In::kNone;
    if (!first) {
      ++dstats_.rx_dropped_seq;
      return;
    }
    rt.epsn = b.psn;
  }
  // Opcode sequence (IBA 9.7.5.2.4 / 9.8.3): middle and last continue a message.
  const In want = is_send ? In::kSend : In::kWrite;
  if (first ? rt.in != In::kNone : rt.in != want) {
    if (!rc && !first) {
      ++dstats_.rx_dropped_seq;
      return;
    }
    return nak(w::NakCode::kInvalidRequest, 0, kEvQpReqErr);
  }
  if (o == Op::kReadRequest && p.hdr.reth) {
    rt.msn = psn_add(rt.msn, 1);
    const uint32_t len = p.hdr.reth->dma_len;
    if (!resp_read(qpn, qp, b.psn, p.hdr.reth->va, p.hdr.reth->rkey, len)) return;
    rt.epsn = psn_add(rt.epsn, std::max<uint32_t>(1, (len + mtu - 1) / mtu));
    return;
  }
  if (is_atomic && p.hdr.atomic_eth) {  // IBA 9.4.5
    const w::AtomicEth& a = *p.hdr.atomic_eth;
    if (a.va & 7) return nak(w::NakCode::kInvalidRequest, 0, kEvQpReqErr);
    std::vector<Extent> ext;
    if (!(qp.attrs.access & kMrRemoteAtomic) ||
        resolve(a.rkey, qp.cfg.pdn, a.va, 8, kMrRemoteAtomic, ext) != KeyFault::kNone)
      return nak(w::NakCode::kRemoteAccessError, 0, kEvQpAccessErr);
    std::array<std::byte, 8> mem{};
    if (!gather(ext, 0, mem)) return nak(w::NakCode::kRemoteOperationalError, 0, kEvQpFatal);
    uint64_t orig = 0;
    for (int i = 7; i >= 0; --i) orig = (orig << 8) | std::to_integer<uint8_t>(mem[i]);
    const uint64_t v = o == Op::kCompareSwap ? (orig == a.compare ? a.swap_add : orig) : orig + a.swap_add;
    for (int i = 0; i < 8; ++i) mem[i] = std::byte(static_cast<uint8_t>(v >> (8 * i)));
    if (!scatter(ext, 0, mem)) return nak(w::NakCode::kRemoteOperationalError, 0, kEvQpFatal);
    rt.atomics.push_back({b.psn, orig});
    if (rt.atomics.size() > kSavedAtomics) rt.atomics.erase(rt.atomics.begin());
    rt.msn = psn_add(rt.msn, 1);
    rt.epsn = psn_add(rt.epsn, 1);
    w::Headers h;
    h.bth.opcode = w::opcode(w::Transport::kRc, Op::kAtomicAcknowledge);
    h.bth.dest_qp = qp.attrs.dest_qpn;
    h.bth.psn = b.psn;
    h.aeth = w::Aeth{ack_syndrome(rt.msn), rt.msn};
    h.atomic_ack_eth = w::AtomicAckEth{orig};
    resp_send(qp, h);
    return;
  }
  if (!is_send && !is_write) return nak(w::NakCode::kInvalidRequest, 0, kEvQpReqErr);
  // IBA 9.7.1 / C9-?: first and middle packets carry exactly the path MTU,
  // last packets 1..MTU bytes, only packets 0..MTU.
  const bool len_ok = only ? n <= mtu : last ? (n >= 1 && n <= mtu) : n == mtu;
  if (!len_ok) return nak(w::NakCode::kInvalidRequest, 0, kEvQpReqErr);

  // A receive WQE for SEND (first packet) and WRITE with immediate (last).
  const auto need_rwqe = [&]() -> bool {
    const int r = fetch_recv(qpn, qp);
    if (r < 0) {
      if (rc) send_ack(qp, b.psn, w::Aeth::nak(rt.msn, w::NakCode::kRemoteOperationalError).syndrome);
      return false;
    }
    if (r == 0) {  // IBA 9.7.5.2.8: RNR NAK with the QP's min_rnr_timer
      if (rc) {
        send_ack(qp, b.psn, w::Aeth::rnr_nak(rt.msn, qp.attrs.min_rnr_timer).syndrome);
        ++dstats_.rnr_naks_sent;
        // The RNR NAK already tells the requester to resume at this PSN, so
        // the requests it sent behind this one are dropped silently, as after
        // a sequence NAK (IBA 9.7.5.2.1), not NAKed again: each such NAK would
        // cost the requester a retry_cnt retry for a mere RNR wait (§12.8).
        rt.nak_sent = true;
      } else {
        ++dstats_.rx_no_wqe;
        rt.in = In::kNone;
      }
      return false;
    }
    if (!rt.rwqe.resolved) {
      for (const Sge& s : rt.rwqe.w.sges)
        if (s.length && resolve(s.lkey, qp.cfg.pdn, s.addr, s.length, kMrLocalWrite, rt.rwqe.ext) != KeyFault::kNone) {
          nak(w::NakCode::kRemoteOperationalError, kWcLocProtErr, 0);
          return false;
        }
      rt.rwqe.resolved = true;
    }
    return true;
  };

  if (is_send) {
    if (first) {
      if (!need_rwqe()) return;
      rt.in = In::kSend;
      rt.in_off = 0;
    }
    if (rt.in_off + n > rt.rwqe.w.capacity())
      return nak(w::NakCode::kInvalidRequest, kWcLocLenErr, kEvQpReqErr);
    if (!scatter(rt.rwqe.ext, rt.in_off, p.payload))
      return nak(w::NakCode::kRemoteOperationalError, kWcLocProtErr, 0);
    rt.in_off += n;
    if (last) {
      Cqe c;
      c.opcode = kWcRecv;
      c.byte_len = static_cast<uint32_t>(rt.in_off);
      if (imm && p.hdr.imm_dt) {
        c.imm = p.hdr.imm_dt->imm;
        c.flags |= kCqeFlagImm;
      }
      if (b.se) c.flags |= kCqeFlagSolicited;
      c.slid = p.hdr.lrh.slid;
      c.sl = p.hdr.lrh.sl;
      rt.in = In::kNone;
      rt.msn = psn_add(rt.msn, 1);
      complete_recv(qpn, qp, c);
    }
  } else {  // RDMA WRITE, IBA 9.4.2
    if (first && p.hdr.reth) {
      const w::Reth& r = *p.hdr.reth;
      rt.wr_ext.clear();
      rt.wr_len = r.dma_len;
      // IBA 9.4.4 / 10.6.7.2: a zero-length WRITE checks no key.
      if (r.dma_len > 0 && (!(qp.attrs.access & kMrRemoteWrite) ||
                            resolve(r.rkey, qp.cfg.pdn, r.va, r.dma_len, kMrRemoteWrite, rt.wr_ext) != KeyFault::kNone))
        return nak(w::NakCode::kRemoteAccessError, 0, kEvQpAccessErr);
      rt.in = In::kWrite;
      rt.in_off = 0;
    }
    if (rt.in_off + n > rt.wr_len || (last && rt.in_off + n != rt.wr_len))
      return nak(w::NakCode::kInvalidRequest, 0, kEvQpReqErr);
    if (imm && !need_rwqe()) return;
    if (!scatter(rt.wr_ext, rt.in_off, p.payload))
      return nak(w::NakCode::kRemoteAccessError, 0, kEvQpAccessErr);
    rt.in_off += n;
    if (last) {
      rt.in = In::kNone;
      rt.msn = psn_add(rt.msn, 1);
      if (imm) {
        Cqe c;
        c.opcode = kWcRecvRdmaWithImm;
        c.byte_len = static_cast<uint32_t>(rt.wr_len);
        c.imm = p.hdr.imm_dt ? p.hdr.imm_dt->imm : 0;
        c.flags = kCqeFlagImm | (b.se ? kCqeFlagSolicited : 0);
        c.slid = p.hdr.lrh.slid;
        c.sl = p.hdr.lrh.sl;
        complete_recv(qpn, qp, c);
      }
    }
  }
  rt.epsn = psn_add(rt.epsn, 1);
  if (rc && b.ack_req) {  // IBA 9.7.5.1.3: ACKs coalesced up to the AckReq packets
    send_ack(qp, b.psn, ack_syndrome(rt.msn));
    ++dstats_.acks_sent;
  }
}

// UD receive (IBA 9.8.4, 10.2.5; §12.2: the first 40 bytes of the buffer
// take the GRH, present or not).
void Hca::resp_ud(uint32_t qpn, Qp& qp, const w::ParsedPacket& p, uint8_t port) {
  const Op o = w::opcode_op(p.hdr.bth.opcode);
  if ((o != Op::kSendOnly && o != Op::kSendOnlyImm) || !p.hdr.deth) {
    ++dstats_.rx_malformed;
    return;
  }
  // IBA 10.2.5: a Q_Key mismatch is dropped. QP1 takes only the well-known
  // GSI Q_Key (IBA 13.5.3.1); QP0 checks none (IBA 14.2.1).
  const uint32_t want = qp.cfg.type == kQpGsi ? kGsiQkey : qp.attrs.qkey;
  if (qp.cfg.type != kQpSmi && p.hdr.deth->qkey != want) {
    ++dstats_.rx_bad_qkey;
    ++port_at(port).info.qkey_violations;
    return;
  }
  const int r = fetch_recv(qpn, qp);
  if (r <= 0) {
    if (r == 0) ++dstats_.rx_no_wqe;  // IBA 9.8.4: no receive WQE, silently dropped
    return;
  }
  RecvCtx& rw = qp.rt.rwqe;
  Cqe c;
  if (!rw.resolved) {
    for (const Sge& s : rw.w.sges)
      if (s.length && resolve(s.lkey, qp.cfg.pdn, s.addr, s.length, kMrLocalWrite, rw.ext) != KeyFault::kNone)
        c.status = kWcLocProtErr;
    rw.resolved = true;
  }
  constexpr size_t kGrhArea = w::kGrhBytes;
  if (c.status == kWcSuccess && kGrhArea + p.payload.size() > rw.w.capacity()) c.status = kWcLocLenErr;
  if (c.status == kWcSuccess && p.hdr.grh) {
    w::ByteVec g;
    w::append_grh(g, *p.hdr.grh);
    if (!scatter(rw.ext, 0, g)) c.status = kWcLocProtErr;
    c.flags |= kCqeFlagGrh;
  }
  if (c.status == kWcSuccess && !scatter(rw.ext, kGrhArea, p.payload)) c.status = kWcLocProtErr;
  if (c.status != kWcSuccess) {
    c.flags = 0;
    complete_recv(qpn, qp, c);
    qp_to_error(qpn, qp, kErr);
    return;
  }
  c.opcode = kWcRecv;
  c.byte_len = static_cast<uint32_t>(kGrhArea + p.payload.size());
  c.src_qp = p.hdr.deth->src_qp;
  c.slid = p.hdr.lrh.slid;
  c.sl = p.hdr.lrh.sl;
  c.dlid_path_bits = static_cast<uint8_t>(p.hdr.lrh.dlid & ((1u << port_at(port).info.lmc) - 1));
  if (o == Op::kSendOnlyImm && p.hdr.imm_dt) {
    c.imm = p.hdr.imm_dt->imm;
    c.flags |= kCqeFlagImm;
  }
  if (p.hdr.bth.se) c.flags |= kCqeFlagSolicited;
  complete_recv(qpn, qp, c);
}

}  // namespace openib::simhca
