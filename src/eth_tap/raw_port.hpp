// The raw Ethernet QP behind ibd's RoCE netdev (docs/operations.md "RoCE
// ports"; docs/simhca.md §16.5): one RAW QP of ibd's own on an Ethernet
// port, a slotted QP (src/hca/slot_qp.hpp: its CQ, a PD and one MKEY over
// a DMA buffer that holds every receive slot and every send slot). A SEND
// is one whole frame (destination MAC first, no FCS); a receive is one
// whole frame from the buffer's first byte (no GRH area): every frame of
// the port the RoCE engine does not take.
//
// Each slot holds the longest frame a cable hands on (wire::kMaxPacketBytes,
// 8,190 bytes): a frame longer than the posted buffer would complete with
// LOC_LEN_ERR and put the QP in ERR (docs/simhca.md §16.5, §16.6), so a
// hostile host could stop the netdev with one long frame. What is longer
// than the netdev's MTU is the owner's to drop (NetdevService).
//
// Opened as a chain of asynchronous commands on ibd's loop; closed the same
// way, or forgotten when the device went away (its objects went with it).
// Single-threaded on ibd's io_context; completions arrive through the CQ's
// completion event (on_cq_event()).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>

#include "common/result.hpp"
#include "hca/slot_qp.hpp"

namespace openib::eth {

// The longest frame the cable carries (docs/simhca.md §16.5: 14..8,190
// bytes, wire::kMaxPacketBytes), and the shortest (an Ethernet header).
inline constexpr size_t kMaxFrameBytes = 8190;
inline constexpr size_t kMinFrameBytes = 14;

struct RawPortConfig {
  uint8_t port = 1;
  uint8_t log_slots = 8;       // receive slots (256)
  uint8_t log_send_slots = 7;  // send slots (128)
  // One MKEY of 4 KiB pages: at most max_mkey_pages (1024, docs/simhca.md
  // §6.1), so (receives + sends) x 8,256 bytes <= 4 MiB.
};

using RawPortCounters = hca::SlotQpCounters;

// open_async(hca, cfg, done): PD, buffer and MKEY, CQ, RAW QP on cfg.port
// moved to RTS (STATE alone, §16.5); receives posted, CQ armed. On failure
// what was made is undone. close_async(port, done): destroys the QP, the
// CQ, the MKEY and the PD, one command at a time. A port not closed
// forgets its objects (a lost device took them). buffer_bytes(cfg): the
// bytes of its one buffer. qpn(), slots_free(), begin_batch()/end_batch()
// (one doorbell for the sends between), set_slots_freed() (called after
// completions freed send slots), on_cq_event() (polls, hands frames over,
// reposts, re-arms), counters(): all hca::SlotQpPort's.
class RawPort : public hca::SlotQpPort<RawPort, RawPortConfig> {
 public:
  using Receiver = std::function<void(std::span<const uint8_t> frame)>;

  void set_receiver(Receiver r);
  // Posts one frame (kMinFrameBytes..kMaxFrameBytes: EMSGSIZE otherwise).
  // EAGAIN: every send slot is in flight.
  Result<void> send(std::span<const uint8_t> frame);
  // Called (once) when a completion says the QP left RTS (an error status
  // other than a flush: the QP is in ERR, §12.4): the owner opens another.
  void set_broken(std::function<void()> f) { qp_->set_broken(std::move(f)); }

 private:
  friend class hca::SlotQpPort<RawPort, RawPortConfig>;
  RawPort(const RawPortConfig&, std::unique_ptr<hca::SlotQp> qp) : SlotQpPort(std::move(qp)) {}
  static hca::SlotQpConfig slot_config(const RawPortConfig& c);
};

}  // namespace openib::eth
