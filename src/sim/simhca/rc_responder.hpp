// The RC and UC responder (docs/simhca.md §12.8; IBA 9.7.5, UC 9.8.3):
// sequence checking, duplicates (answered again, never re-executed), RNR,
// access checks through the keys (§12.6), SEND into receive WQEs, RDMA
// WRITE, READ responses paced by the cable, atomics, ACK coalescing.
#pragma once

#include <cstdint>
#include <memory>

#include "common/log.hpp"
#include "sim/simhca/transport_ops.hpp"

namespace openib::simhca {

// The responder's §12.8 counters (reported in DataStats by these names).
struct ResponderStats {
  uint64_t rx_dropped_seq = 0, rx_duplicates = 0, rx_no_wqe = 0;
  uint64_t acks_sent = 0, naks_sent = 0, rnr_naks_sent = 0;
};

class RcResponder {
 public:
  RcResponder(QueueOps& queues, WireOps& wire, std::shared_ptr<spdlog::logger> log)
      : q_(queues), wire_(wire), log_(std::move(log)) {}

  // An RC or UC request packet for QP `qpn` (IBA 9.7.5, 9.8.3).
  void request(uint32_t qpn, Qp& qp, const sim::wire::ParsedPacket& p);
  // Sends the queued responder packets the cable takes now (all of them
  // if `force`: the QP is about to stop responding); the rest on a later
  // turn (rt.kick).
  void out_progress(uint32_t qpn, Qp& qp, bool force);

  const ResponderStats& stats() const { return stats_; }
  void reset_stats() { stats_ = {}; }

 private:
  // A request packet's kind by its OpCode (IBA 9.2, Table 38).
  struct Kind {
    sim::wire::Op o;
    bool send, write, atomic, first, only, last, imm;
  };
  static Kind classify(sim::wire::Op o);

  bool check_psn(uint32_t qpn, Qp& qp, const sim::wire::ParsedPacket& p, const Kind& k);
  bool check_opcode_sequence(uint32_t qpn, Qp& qp, uint32_t psn, const Kind& k);
  void read_request(uint32_t qpn, Qp& qp, const sim::wire::ParsedPacket& p);
  void atomic(uint32_t qpn, Qp& qp, const sim::wire::ParsedPacket& p);
  bool take_rwqe(uint32_t qpn, Qp& qp, uint32_t psn);
  bool send_data(uint32_t qpn, Qp& qp, const sim::wire::ParsedPacket& p, const Kind& k);
  bool write_data(uint32_t qpn, Qp& qp, const sim::wire::ParsedPacket& p, const Kind& k);
  void duplicate(uint32_t qpn, Qp& qp, const sim::wire::ParsedPacket& p);
  bool read(uint32_t qpn, Qp& qp, uint32_t psn, uint64_t va, uint32_t rkey, uint32_t len);
  bool send_read_response(Qp& qp, QpRuntime::RespOut& o, uint32_t mtu);
  void nak(uint32_t qpn, Qp& qp, uint32_t psn, sim::wire::NakCode code, uint8_t local_status, uint8_t event);
  void send_ack(Qp& qp, uint32_t psn, uint8_t syndrome);
  void send_atomic_ack(Qp& qp, uint32_t psn, uint64_t orig);
  void send(Qp& qp, sim::wire::Headers& h);

  QueueOps& q_;
  WireOps& wire_;
  std::shared_ptr<spdlog::logger> log_;
  ResponderStats stats_;
};

}  // namespace openib::simhca
