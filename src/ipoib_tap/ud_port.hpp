// The IPoIB UD QP (docs/ipoib.md "The UD QP"; RFC 4391 §5, IBA 9.8): one
// UD QP of ibd's own on a port, a slotted QP (src/hca/slot_qp.hpp: its CQ,
// a PD and one MKEY over a DMA buffer that holds every receive slot and
// every send slot) whose receive slots hold the 40-byte GRH area, then the
// IPoIB packet (IBA 11.4.1.2). The owner creates address handles for
// unicast paths and multicast groups on its PD, and attaches it to
// multicast groups through ATTACH_MCG (docs/simhca.md §6.11).
//
// Opened as a chain of asynchronous commands on ibd's loop (which never
// waits for a command); closed the same way, or forgotten when the device
// went away (its objects went with it).
//
// Single-threaded on ibd's io_context. Completions arrive through the
// CQ's completion event (on_cq_event()).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>

#include "common/result.hpp"
#include "hca/slot_qp.hpp"

namespace openib::ipoib {

struct UdPortConfig {
  uint8_t port = 1;
  uint16_t pkey_index = 0;
  uint32_t qkey = 0;
  uint32_t max_payload = 4096;  // the largest IPoIB packet (header + data) a slot holds
  uint8_t log_slots = 8;        // receive slots (256)
  uint8_t log_send_slots = 8;   // send slots (256)
  // The buffer is one MKEY of 4 KiB pages: at most max_mkey_pages (1024,
  // docs/simhca.md §6.1), so (receives + sends) x stride <= 4 MiB.
  bool operator==(const UdPortConfig&) const = default;
};

using UdPortCounters = hca::SlotQpCounters;

// One received packet: the CQE's sender and the bytes after the GRH area.
struct UdReceived {
  uint32_t src_qpn = 0;
  uint16_t slid = 0;
  bool grh = false;
  std::array<uint8_t, 16> sgid{}, dgid{};  // from the GRH when grh
  std::span<const uint8_t> payload;
};

// open_async(hca, cfg, done): PD, buffer and MKEY, CQ, UD QP moved to RTS
// with cfg's P_Key index and Q_Key; receives posted, CQ armed. On failure
// what was made is undone. close_async(port, done): destroys the QP, the
// CQ, the MKEY and the PD, one command at a time (the owner's AHs are its
// own); `done` runs when all answered. A port not closed forgets its
// objects (a lost device took them). buffer_bytes(cfg): the bytes of its
// one buffer (one MKEY). qpn(), slots_free(), begin_batch()/end_batch()
// (one doorbell for the sends between), set_slots_freed() (called after
// completions freed send slots: the owner resumes reading), on_cq_event()
// (polls, hands receives over, reposts, re-arms), counters(): all
// hca::SlotQpPort's.
class UdPort : public hca::SlotQpPort<UdPort, UdPortConfig> {
 public:
  using Receiver = std::function<void(const UdReceived&)>;

  uint32_t cqn() const { return qp_->cqn(); }
  uint32_t pdn() const { return qp_->pdn(); }
  uint32_t qkey() const { return cfg_.qkey; }
  void set_receiver(Receiver r);

  // Posts one packet to (ahn, qpn, qkey). EAGAIN: every send slot is in
  // flight (the owner stops reading its source until slots_free()).
  Result<void> send(uint32_t ahn, uint32_t qpn, uint32_t qkey, std::span<const uint8_t> packet);

 private:
  friend class hca::SlotQpPort<UdPort, UdPortConfig>;
  UdPort(const UdPortConfig& cfg, std::unique_ptr<hca::SlotQp> qp) : SlotQpPort(std::move(qp)), cfg_(cfg) {}
  static hca::SlotQpConfig slot_config(const UdPortConfig& c);

  UdPortConfig cfg_;
};

}  // namespace openib::ipoib
