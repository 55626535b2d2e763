// A slotted QP: one QP of ibd's own that moves whole messages through
// fixed slots, as IPoIB's UD QP (src/ipoib_tap/ud_port.hpp) and the RoCE
// netdev's raw Ethernet QP (src/eth_tap/raw_port.hpp) do. It owns a PD, one
// MKEY over a DMA buffer holding every receive slot and every send slot,
// one CQ for both queues and the QP, moved to RTS (IBA 10.3.1) with the
// attributes its owner names. Every receive slot stays posted (reposted
// after its completion); a send copies the message into a free send slot,
// which its completion frees again; sends between begin_batch() and
// end_batch() ring one doorbell.
//
// Opened as a chain of asynchronous commands on ibd's loop (which never
// waits for a command); closed the same way, or forgotten when the device
// went away (its objects went with it).
//
// Single-threaded on ibd's io_context. Completions arrive through the
// CQ's completion event (on_cq_event()).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "common/result.hpp"
#include "hca/device.hpp"

namespace openib::hca {

struct SlotQpConfig {
  QpType type = QpType::kUd;
  uint8_t port = 1;              // the port, for the log
  uint8_t create_port = 0;       // QpInit::port (SMI/GSI/RAW: the port given at creation)
  QpAttr attr;                   // what INIT, RTR and RTS carry besides the state
  uint32_t init_mask = 0, rtr_mask = 0, rts_mask = 0;  // their fields beyond STATE
  uint32_t recv_bytes = 0;       // a receive slot's posted length (a send slot holds as much)
  uint32_t min_recv_bytes = 0;   // a shorter receive is a counted error
  uint8_t log_slots = 8;         // receive slots
  uint8_t log_send_slots = 8;    // send slots
  const char* log_name = "hca";  // the logger, and what the QP is called in its lines
  const char* what = "QP";
};

// One zeroed DMA buffer of `bytes` (whole 4 KiB pages) and one MKEY over
// it in `pdn`, local write (docs/simhca.md §6.7): the slots of a slotted QP
// and of IPoIB's connected-mode QPs (src/ipoib_tap/cm_port.hpp).
struct SlotBuffer {
  dma::DmaBuffer buf;
  Mkey mkey{};
};
void create_slot_buffer_async(Device& hca, uint32_t pdn, size_t bytes, Completer<Result<SlotBuffer>> done);

struct SlotQpCounters {
  uint64_t sent = 0, received = 0;
  uint64_t send_errors = 0, recv_errors = 0;
  uint64_t no_send_slot = 0;  // a send found every slot in flight
};

class SlotQp {
 public:
  // One good receive: its completion and the slot's first byte_len bytes.
  using Receiver = std::function<void(const WorkCompletion& wc, std::span<const uint8_t> bytes)>;
  using OpenDone = Completer<Result<std::unique_ptr<SlotQp>>>;
  // PD, buffer and MKEY, CQ, QP moved to RTS; receives posted, CQ armed.
  // On failure what was made is undone.
  static void open_async(Device& hca, const SlotQpConfig& cfg, OpenDone done);
  // Forgets the objects (a lost device took them); use close_async() otherwise.
  ~SlotQp();
  SlotQp(const SlotQp&) = delete;
  SlotQp& operator=(const SlotQp&) = delete;
  // Destroys the QP, the CQ, the MKEY and the PD, one command at a time
  // (IBA 11.2's order); `done` runs when all answered.
  static void close_async(std::unique_ptr<SlotQp> p, std::function<void()> done);

  uint32_t qpn() const { return qp_.qpn; }
  uint32_t cqn() const { return cq_.cqn; }
  uint32_t pdn() const { return pdn_; }
  void set_receiver(Receiver r) { receiver_ = std::move(r); }

  // Copies `bytes` (at most recv_bytes: EMSGSIZE) into a free send slot and
  // posts it with wr's address fields (UD: AH, remote QPN, Q_Key); wr_id,
  // opcode and gather list are the slot's. EAGAIN: every send slot is in
  // flight (the owner stops reading its source until slots_free()).
  Result<void> send(std::span<const uint8_t> bytes, SendWr wr = {});
  size_t slots_free() const { return free_send_.size(); }
  // Between begin_batch() and end_batch() sends ring no doorbell; the
  // end rings once for all of them (Device::ring_sq).
  void begin_batch() { batching_ = true; }
  void end_batch();
  // Called after completions freed send slots (the owner resumes reading).
  void set_slots_freed(std::function<void()> f) { on_freed_ = std::move(f); }
  // Called (once) when a completion says the QP left RTS (an error status
  // other than a flush: the QP is in ERR, docs/simhca.md §12.4).
  void set_broken(std::function<void()> f) { on_broken_ = std::move(f); }
  // The CQ's completion event: polls, hands receives over, reposts,
  // recycles send slots, re-arms. False: not this QP's CQ.
  bool on_cq_event(uint32_t cqn);

  const SlotQpCounters& counters() const { return counters_; }
  // The bytes of the one buffer (one MKEY) `c` needs: its slots, whole pages.
  static size_t buffer_bytes(const SlotQpConfig& c);

 private:
  SlotQp(Device& hca, const SlotQpConfig& cfg) : hca_(hca), cfg_(cfg) {}
  static void step(std::unique_ptr<SlotQp> p, OpenDone done, int rung);
  static void fail(std::unique_ptr<SlotQp> p, OpenDone done, Error e);
  size_t slot_stride() const;
  uint8_t* at(size_t off) const { return static_cast<uint8_t*>(buf_.data()) + off; }
  uint64_t va(size_t off) const { return reinterpret_cast<uint64_t>(at(off)); }
  Result<void> post_recv(uint32_t slot);
  std::vector<std::pair<ObjectKind, uint32_t>> teardown_steps();

  Device& hca_;
  SlotQpConfig cfg_;
  uint32_t pdn_ = 0;
  Mkey mkey_{};
  Cq cq_;
  Qp qp_;
  bool have_pd_ = false, have_mkey_ = false, have_cq_ = false, have_qp_ = false;
  dma::DmaBuffer buf_;
  std::vector<uint32_t> free_send_;
  Receiver receiver_;
  std::function<void()> on_freed_, on_broken_;
  bool broken_ = false;
  SlotQpCounters counters_;
  bool batching_ = false, unrung_ = false;
};

// A class built on a slotted QP (UdPort, RawPort) derives from
// SlotQpPort<itself, its config>, gives it `static SlotQpConfig
// slot_config(const Cfg&)` and a constructor (const Cfg&,
// std::unique_ptr<SlotQp>), and adds the sends and receives in its QP
// type's terms; the calls below pass on to the SlotQp unchanged.
template <class Port, class Cfg>
class SlotQpPort {
 public:
  using OpenDone = Completer<Result<std::unique_ptr<Port>>>;
  // SlotQp::open_async with Port::slot_config(cfg), then the Port made of it.
  static void open_async(Device& hca, const Cfg& cfg, OpenDone done) {
    SlotQp::open_async(hca, Port::slot_config(cfg), [cfg, d = std::move(done)](Result<std::unique_ptr<SlotQp>> q) mutable {
      if (!q) return d(q.take_error());
      d(std::unique_ptr<Port>(new Port(cfg, std::move(*q))));
    });
  }
  // SlotQp::close_async; `done` runs when all answered.
  static void close_async(std::unique_ptr<Port> p, std::function<void()> done) {
    SlotQp::close_async(std::move(static_cast<SlotQpPort&>(*p).qp_), std::move(done));
  }
  // The bytes of the one buffer (one MKEY) `c` needs: its slots, whole pages.
  static size_t buffer_bytes(const Cfg& c) { return SlotQp::buffer_bytes(Port::slot_config(c)); }

  uint32_t qpn() const { return qp_->qpn(); }
  size_t slots_free() const { return qp_->slots_free(); }
  void begin_batch() { qp_->begin_batch(); }
  void end_batch() { qp_->end_batch(); }
  void set_slots_freed(std::function<void()> f) { qp_->set_slots_freed(std::move(f)); }
  bool on_cq_event(uint32_t cqn) { return qp_->on_cq_event(cqn); }
  const SlotQpCounters& counters() const { return qp_->counters(); }

 protected:
  explicit SlotQpPort(std::unique_ptr<SlotQp> qp) : qp_(std::move(qp)) {}
  ~SlotQpPort() = default;  // objects not closed went with the device
  SlotQpPort(const SlotQpPort&) = delete;
  SlotQpPort& operator=(const SlotQpPort&) = delete;

  std::unique_ptr<SlotQp> qp_;
};

}  // namespace openib::hca
