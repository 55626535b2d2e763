// The requester (docs/simhca.md §12.8; IBA 9.7.1 - 9.7.6): request packets
// out of the send WQEs the queue engine takes, PSNs, segmentation by the
// path MTU, ACK/NAK and READ/atomic response handling, go-back-N
// retransmission bounded by retry_cnt and rnr_retry, the local ACK timer.
// UC and UD sends take the same send loop without the ACK clock (IBA 9.8):
// it is RC's requester with the acknowledgement steps left out.
#pragma once

#include <cstdint>

#include "sim/simhca/transport_ops.hpp"

namespace openib::simhca {

// The requester's §12.8 counters (reported in DataStats by these names).
struct RequesterStats {
  uint64_t tx_dropped = 0;  // a UD WQE without an address handle
  uint64_t retransmits = 0, timeouts = 0;
  uint64_t rx_bad_state = 0, rx_duplicates = 0, rx_bad_response = 0;
};

class RcRequester {
 public:
  RcRequester(QueueOps& queues, WireOps& wire) : q_(queues), wire_(wire) {}

  // Sends what the window allows and takes new WQEs while in RTS (§12.5;
  // in SQD the WQEs already started finish, IBA 10.3.1).
  void progress(uint32_t qpn, Qp& qp);
  // IBA 9.7.6.1.3: the local ACK timer of `qp` ran out.
  void timeout(uint32_t qpn, Qp& qp);
  // ACK, NAK, RNR NAK, READ responses and atomic ACKs (IBA 9.7.5.1, 9.7.5.2).
  void on_response(uint32_t qpn, Qp& qp, const sim::wire::ParsedPacket& p);

  const RequesterStats& stats() const { return stats_; }
  void reset_stats() { stats_ = {}; }

 private:
  // sending
  bool send_packet(uint32_t qpn, Qp& qp, SendOp& op);
  void build_read_request(const Qp& qp, SendOp& op, sim::wire::Headers& h);
  void build_atomic(const Qp& qp, SendOp& op, sim::wire::Headers& h);
  Payload build_data_packet(const Qp& qp, SendOp& op, sim::wire::Headers& h);
  uint32_t segment_len(const Qp& qp, const SendOp& op, sim::Link* link, size_t credits);
  bool send_segment(Qp& qp, SendOp& op, uint32_t n);
  void arm_ack_timer(Qp& qp);
  // acknowledgements
  void go_back(Qp& qp, uint32_t psn);
  void progress_made(Qp& qp);
  bool ack_through(uint32_t qpn, Qp& qp, uint32_t psn);
  void read_gap(Qp& qp, SendOp& op);
  void on_acknowledge(uint32_t qpn, Qp& qp, const sim::wire::ParsedPacket& p);
  bool on_rnr_nak(uint32_t qpn, Qp& qp, uint32_t psn, const sim::wire::Aeth& a);
  bool on_nak(uint32_t qpn, Qp& qp, uint32_t psn, const sim::wire::Aeth& a);
  bool ack_before(uint32_t qpn, Qp& qp, uint32_t psn);
  void on_atomic_ack(uint32_t qpn, Qp& qp, SendOp& op, const sim::wire::ParsedPacket& p);
  void on_read_response(uint32_t qpn, Qp& qp, SendOp& op, const sim::wire::ParsedPacket& p);
  DpClock::duration ack_timeout(const Qp& qp) const;

  QueueOps& q_;
  WireOps& wire_;
  RequesterStats stats_;
};

}  // namespace openib::simhca
