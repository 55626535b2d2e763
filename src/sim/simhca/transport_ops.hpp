// What the transport units (docs/simhca.md §12.8: rc_requester,
// rc_responder, ud_transport) need from the rest of the device, as two
// narrow interfaces: the queue engine's side (QueueOps, implemented by
// QueueEngine: §12.1 - §12.6 WQEs, CQEs, keys, the QP error state) and the
// port's side (WireOps, implemented by the composition root Hca in
// port_agent.cpp: §12.7 packets out, links, MTU). A unit holds references
// to these and to nothing else of the device, so what a transport step may
// touch is written down here. Also the PSN arithmetic they share (IBA 9.7.2).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "sim/cable/link.hpp"
#include "sim/simhca/resources.hpp"
#include "sim/wire/packet.hpp"

namespace openib::simhca {

// A packet's payload: bytes in hand, or `len` bytes at offset `off` of a
// local buffer (`ext`), read by DMA while the packet is written, so that a
// WQE's data goes from host memory straight into the cable's slot (§12.7).
struct Payload {
  std::span<const std::byte> bytes;
  const std::vector<Extent>* ext = nullptr;
  uint64_t off = 0;
  size_t len = 0;
  size_t size() const { return ext ? len : bytes.size(); }
};

// §12.1 - §12.6, §9.4: the queue engine and the event unit as the
// transport sees them.
class QueueOps {
 public:
  // The time of the current entry point (the transport's timers).
  virtual DpClock::time_point now() const = 0;
  // §12.5.3: takes the QP's next send WQE into rt.inflight; false if none.
  virtual bool fetch_send(uint32_t qpn, Qp& qp) = 0;
  // 1: a receive WQE is held in qp.rt.rwqe; 0: none posted; -1: a bad WQE
  // (completed with an error, QP in ERR).
  virtual int fetch_recv(uint32_t qpn, Qp& qp) = 0;
  virtual void complete_front(uint32_t qpn, Qp& qp, uint8_t status) = 0;
  virtual void complete_recv(uint32_t qpn, Qp& qp, Cqe c) = 0;
  // The requester's WQE failed: its completion, then the QP to ERR (IBA 10.8.3).
  virtual void req_fail(uint32_t qpn, Qp& qp, uint8_t status) = 0;
  virtual void qp_to_error(uint32_t qpn, Qp& qp, uint8_t state) = 0;
  // §9.4: an affiliated asynchronous event of QP `qpn`.
  virtual void qp_event(uint8_t type, uint32_t qpn) = 0;
  // §12.6: keys to extents, and DMA through them.
  virtual KeyFault resolve(uint32_t key, uint32_t pdn, uint64_t va, uint64_t len, uint32_t need,
                           std::vector<Extent>& out) const = 0;
  virtual bool gather(const std::vector<Extent>& ext, uint64_t off, std::span<std::byte> out) = 0;
  virtual bool scatter(const std::vector<Extent>& ext, uint64_t off, std::span<const std::byte> in) = 0;
  // §6.8: a UD WQE's address handle, null if there is none.
  virtual const Ah* ah(uint32_t ahn) const = 0;

 protected:
  ~QueueOps() = default;
};

// §12.7: the ports and the wire as the transport sees them.
class WireOps {
 public:
  // false only if the payload could not be read from host memory (the
  // caller fails its WQE); a packet the port drops is counted, true.
  // seg: the payload is a segment's (Link::send_segment), `h` its first
  // packet's headers.
  virtual bool send_packet(sim::wire::Headers& h, const Payload& payload, const Av& av, uint8_t port,
                           const sim::Segment* seg) = 0;
  // §16.5: a raw Ethernet QP's SEND: `payload` is the whole frame, which
  // leaves on the cable of Ethernet `port` as it is. false only if the
  // payload could not be read from host memory; a frame the port drops is
  // counted, true.
  virtual bool send_frame(uint8_t port, const Payload& payload) = 0;
  // The cable a QP's packets leave by: none for a port without one, or
  // for packets that loop back inside the device.
  virtual sim::Link* qp_link(const Qp& qp) = 0;
  virtual bool for_own_port(uint8_t port, uint16_t dlid) const = 0;
  virtual uint8_t qp_port(const Qp& qp) const = 0;
  // IBA 9.7.1: RC/UC segment by the path MTU; UD by the port's (§6.3).
  virtual uint32_t mtu_bytes(const Qp& qp) const = 0;
  virtual uint8_t port_lmc(uint8_t port) const = 0;
  // IBA 16.1 / §15: PortCounters' Q_Key violations of `port`.
  virtual void count_qkey_violation(uint8_t port) = 0;

 protected:
  ~WireOps() = default;
};

namespace psn {
constexpr uint32_t kMask = 0xffffff;
// IBA 9.7.2: PSNs compare modulo 2^24, within half the space.
inline int32_t diff(uint32_t a, uint32_t b) { return static_cast<int32_t>((a - b) << 8) >> 8; }
inline uint32_t add(uint32_t a, uint32_t n) { return (a + n) & kMask; }
}  // namespace psn

constexpr int32_t kRcWindow = 128;  // §12.8: unacknowledged request packets per QP

inline bool is_ud_type(uint8_t t) { return t == kQpUd || t == kQpSmi || t == kQpGsi; }

inline sim::wire::Transport transport_of(uint8_t qp_type) {
  return qp_type == kQpRc   ? sim::wire::Transport::kRc
         : qp_type == kQpUc ? sim::wire::Transport::kUc
                            : sim::wire::Transport::kUd;
}

// IBA 9.7.5.1.3: an ACK's AETH syndrome (credits not used, §12.8).
inline uint8_t ack_syndrome(uint32_t msn) {
  return sim::wire::Aeth::ack(msn, sim::wire::kAethInvalidCredits).syndrome;
}

// Packets a cable takes now (sim::Link::tx_room); unbounded without one
// (the port counts the discard, or the packet loops back).
inline size_t link_room(sim::Link* link) { return link ? link->tx_room() : sim::Link::kUnboundedRoom; }

}  // namespace openib::simhca
