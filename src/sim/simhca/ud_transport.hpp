// UD (docs/simhca.md §12.8; IBA 9.8.4, Q_Keys 10.2.5): the datagram's
// addressing on the send side (the requester's loop sends it) and the
// receive side, for UD QPs and the special QPs 0 and 1 (§14.1).
#pragma once

#include <cstdint>

#include "sim/simhca/transport_ops.hpp"

namespace openib::simhca {

// The UD receive side's §12.8 counters (reported in DataStats by these names).
struct UdStats {
  uint64_t rx_malformed = 0, rx_bad_qkey = 0, rx_no_wqe = 0;
};

// A UD send WQE's destination: the address vector of its AH and the DETH
// (IBA 9.8.4). False if the WQE names no AH (the packet is dropped).
bool ud_address(const QueueOps& q, uint32_t qpn, const Qp& qp, const SendOp& op, sim::wire::Headers& h, Av& av);

class UdTransport {
 public:
  UdTransport(QueueOps& queues, WireOps& wire) : q_(queues), wire_(wire) {}

  // A datagram for QP `qpn` that came in on `port` (§12.2: the first 40
  // bytes of the buffer take the GRH, present or not).
  void receive(uint32_t qpn, Qp& qp, const sim::wire::ParsedPacket& p, uint8_t port);

  const UdStats& stats() const { return stats_; }
  void reset_stats() { stats_ = {}; }

 private:
  bool qkey_ok(const Qp& qp, const sim::wire::ParsedPacket& p, uint8_t port);
  uint8_t place(Qp& qp, const sim::wire::ParsedPacket& p);

  QueueOps& q_;
  WireOps& wire_;
  UdStats stats_;
};

}  // namespace openib::simhca
