// The raw Ethernet QP behind ibd's RoCE netdev (docs/operations.md "RoCE
// ports"; docs/simhca.md §16.5): one RAW QP of ibd's own on an Ethernet
// port, its CQ, a PD and one MKEY over a DMA buffer that holds every
// receive slot and every send slot. A SEND is one whole frame (destination
// MAC first, no FCS); a receive is one whole frame from the buffer's first
// byte (no GRH area): every frame of the port the RoCE engine does not take.
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
#include <vector>

#include "common/result.hpp"
#include "hca/device.hpp"

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

struct RawPortCounters {
  uint64_t sent = 0, received = 0;
  uint64_t send_errors = 0, recv_errors = 0;
  uint64_t no_send_slot = 0;  // a send found every slot in flight
};

class RawPort {
 public:
  using Receiver = std::function<void(std::span<const uint8_t> frame)>;
  using OpenDone = hca::Completer<Result<std::unique_ptr<RawPort>>>;
  // PD, buffer and MKEY, CQ, RAW QP on cfg.port moved to RTS (STATE alone,
  // §16.5); receives posted, CQ armed. On failure what was made is undone.
  static void open_async(hca::Device& hca, const RawPortConfig& cfg, OpenDone done);
  ~RawPort();  // forgets the objects (a lost device took them)
  RawPort(const RawPort&) = delete;
  RawPort& operator=(const RawPort&) = delete;
  // Destroys the QP, the CQ, the MKEY and the PD, one command at a time.
  static void close_async(std::unique_ptr<RawPort> p, std::function<void()> done);

  uint32_t qpn() const { return qp_.qpn; }
  void set_receiver(Receiver r) { receiver_ = std::move(r); }
  // Posts one frame (kMinFrameBytes..kMaxFrameBytes: EMSGSIZE otherwise).
  // EAGAIN: every send slot is in flight.
  Result<void> send(std::span<const uint8_t> frame);
  size_t slots_free() const { return free_send_.size(); }
  // Between begin_batch() and end_batch() sends ring no doorbell; the end
  // rings once for all of them.
  void begin_batch() { batching_ = true; }
  void end_batch();
  // Called after completions freed send slots (the owner resumes reading).
  void set_slots_freed(std::function<void()> f) { on_freed_ = std::move(f); }
  // Called (once) when a completion says the QP left RTS (an error status
  // other than a flush: the QP is in ERR, §12.4): the owner opens another.
  void set_broken(std::function<void()> f) { on_broken_ = std::move(f); }
  // The CQ's completion event: polls, hands frames over, reposts, re-arms.
  bool on_cq_event(uint32_t cqn);
  const RawPortCounters& counters() const { return counters_; }
  static size_t buffer_bytes(const RawPortConfig& c);

 private:
  RawPort(hca::Device& hca, const RawPortConfig& cfg) : hca_(hca), cfg_(cfg) {}
  static void step(std::unique_ptr<RawPort> p, OpenDone done, int rung);
  static void fail(std::unique_ptr<RawPort> p, OpenDone done, Error e);
  uint8_t* at(size_t off) const { return static_cast<uint8_t*>(buf_.data()) + off; }
  uint64_t va(size_t off) const { return reinterpret_cast<uint64_t>(at(off)); }
  Result<void> post_recv(uint32_t slot);
  std::vector<std::pair<hca::ObjectKind, uint32_t>> teardown_steps();

  hca::Device& hca_;
  RawPortConfig cfg_;
  uint32_t pdn_ = 0;
  hca::Mkey mkey_{};
  hca::Cq cq_;
  hca::Qp qp_;
  bool have_pd_ = false, have_mkey_ = false, have_cq_ = false, have_qp_ = false;
  dma::DmaBuffer buf_;
  std::vector<uint32_t> free_send_;
  Receiver receiver_;
  std::function<void()> on_freed_, on_broken_;
  bool broken_ = false;
  RawPortCounters counters_;
  bool batching_ = false, unrung_ = false;
};

}  // namespace openib::eth
