// IPoIB connected mode's queue pairs (RFC 4755; docs/ipoib.md "Connected
// mode"): the RC QPs of one interface, every one on one CQ and one SRQ,
// with one PD and one MKEY over one DMA buffer that holds every receive
// slot and every send slot (each slot a whole IPoIB-CM packet: the 4-byte
// header and up to 65520 bytes, rfc 4755 §4's largest MTU).
//
//  - Receives: every slot stays posted on the SRQ (reposted after its
//    completion), whichever connection filled it; the CQE's QPN names the
//    connection (IBA 10.2.9.1: an SRQ's WQE serves any QP attached).
//  - Sends: a packet is copied into a free send slot and posted on its
//    connection's QP; the completion frees the slot. The slots are shared
//    by every connection (the TAP's reader stops when none is free).
//  - A completion in error on a QP (retries exhausted, a peer's QP gone, a
//    too long message into a receive slot) reports that QP broken, once;
//    its owner tears the connection down.
//
// Opened and closed as chains of asynchronous commands on ibd's loop;
// forgotten when the device went (its objects went with it).
// Single-threaded on ibd's io_context.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <vector>

#include "common/result.hpp"
#include "hca/device.hpp"

namespace openib::ipoib {

struct CmPortConfig {
  uint8_t port = 1;
  uint32_t slot_bytes = 65536;  // a slot's stride
  uint32_t recv_bytes = 65524;  // a receive's posted length (kCmBufBytes, cm_wire.hpp): <= slot_bytes
  uint8_t log_recv_slots = 5;   // SRQ WQEs (32)
  uint8_t log_send_slots = 5;   // send slots shared by the connections (32)
  uint8_t log_qp_sends = 5;     // each QP's send queue
  // The buffer is one MKEY of 4 KiB pages: at most max_mkey_pages (1024
  // on simhca, docs/simhca.md §6.1): (receives + sends) x slot <= 4 MiB.
};

struct CmPortCounters {
  uint64_t sent = 0, received = 0;
  uint64_t send_errors = 0, recv_errors = 0;
  uint64_t no_send_slot = 0;  // a send found every slot in flight
  uint64_t qps_created = 0, qps_destroyed = 0, qps_broken = 0;
};

class CmPort {
 public:
  using OpenDone = hca::Completer<Result<std::unique_ptr<CmPort>>>;
  using QpDone = hca::Completer<Result<uint32_t>>;
  // One good receive: the QP it came on and its bytes.
  using Receiver = std::function<void(uint32_t qpn, std::span<const uint8_t> packet)>;
  // A QP left RTS (a completion in error other than a flush).
  using Broken = std::function<void(uint32_t qpn)>;

  static void open_async(hca::Device& hca, const CmPortConfig& cfg, OpenDone done);
  // Destroys the QPs, the SRQ, the CQ, the MKEY and the PD, one command
  // at a time; `done` when all answered.
  static void close_async(std::unique_ptr<CmPort> p, std::function<void()> done);
  ~CmPort();  // objects not closed went with the device
  CmPort(const CmPort&) = delete;
  CmPort& operator=(const CmPort&) = delete;
  static size_t buffer_bytes(const CmPortConfig& c);

  // A new RC QP on the SRQ and the CQ, in RESET (the CM moves it).
  void create_qp_async(QpDone done);
  // DESTROY_QP (its sends in flight complete flushed or never: their
  // slots are reclaimed at once).
  void destroy_qp(uint32_t qpn);
  bool has_qp(uint32_t qpn) const { return qps_.count(qpn) != 0; }

  // One packet on `qpn` (which must be at RTS). EAGAIN: no free slot;
  // EMSGSIZE: above a slot; ENOENT: no such QP.
  Result<void> send(uint32_t qpn, std::span<const uint8_t> packet);
  size_t slots_free() const { return free_send_.size(); }
  void begin_batch() { batching_ = true; }
  void end_batch();

  void set_receiver(Receiver r) { receiver_ = std::move(r); }
  void set_broken(Broken b) { broken_ = std::move(b); }
  void set_slots_freed(std::function<void()> f) { on_freed_ = std::move(f); }
  // The CQ's completion event. False: not this port's CQ.
  bool on_cq_event(uint32_t cqn);

  uint32_t cqn() const { return cq_.cqn; }
  uint32_t pdn() const { return pdn_; }
  const CmPortCounters& counters() const { return counters_; }

 private:
  CmPort(hca::Device& hca, const CmPortConfig& cfg) : hca_(hca), cfg_(cfg) {}
  static void step(std::unique_ptr<CmPort> p, OpenDone done, int rung);
  static void fail(std::unique_ptr<CmPort> p, OpenDone done, Error e);
  std::vector<std::pair<hca::ObjectKind, uint32_t>> teardown_steps();
  uint8_t* at(size_t off) const { return static_cast<uint8_t*>(buf_.data()) + off; }
  uint64_t va(size_t off) const { return reinterpret_cast<uint64_t>(at(off)); }
  Result<void> post_recv(uint32_t slot);
  void completion(const hca::WorkCompletion& wc, std::vector<uint32_t>& broken);

  struct QpSlots {
    hca::Qp qp;
    std::vector<uint32_t> in_flight;  // send slots posted on it
    bool unrung = false;
    bool broken = false;
  };

  hca::Device& hca_;
  CmPortConfig cfg_;
  uint32_t pdn_ = 0;
  hca::Mkey mkey_{};
  hca::Cq cq_;
  hca::Srq srq_;
  bool have_pd_ = false, have_mkey_ = false, have_cq_ = false, have_srq_ = false;
  dma::DmaBuffer buf_;
  std::vector<uint32_t> free_send_;
  std::map<uint32_t, QpSlots> qps_;
  Receiver receiver_;
  Broken broken_;
  std::function<void()> on_freed_;
  bool batching_ = false;
  CmPortCounters counters_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace openib::ipoib
