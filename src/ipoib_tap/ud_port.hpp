// The IPoIB UD QP (docs/ipoib.md "The UD QP"; RFC 4391 §5, IBA 9.8): one
// UD QP of ibd's own on a port, its CQ, a PD and one MKEY over a DMA
// buffer that holds every receive slot (40-byte GRH area, then the IPoIB
// packet: IBA 11.4.1.2) and every send slot, and the address handles the
// owner creates for unicast paths and multicast groups. Attached to
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
#include <vector>

#include "common/result.hpp"
#include "hca/device.hpp"

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
};

struct UdPortCounters {
  uint64_t sent = 0, received = 0;
  uint64_t send_errors = 0, recv_errors = 0;
  uint64_t no_send_slot = 0;  // a send found every slot in flight
};

// One received packet: the CQE's sender and the bytes after the GRH area.
struct UdReceived {
  uint32_t src_qpn = 0;
  uint16_t slid = 0;
  bool grh = false;
  std::array<uint8_t, 16> sgid{}, dgid{};  // from the GRH when grh
  std::span<const uint8_t> payload;
};

class UdPort {
 public:
  using Receiver = std::function<void(const UdReceived&)>;
  using OpenDone = hca::Completer<Result<std::unique_ptr<UdPort>>>;
  // PD, buffer and MKEY, CQ, UD QP moved to RTS with cfg's P_Key index and
  // Q_Key; receives posted, CQ armed. On failure what was made is undone.
  static void open_async(hca::Device& hca, const UdPortConfig& cfg, OpenDone done);
  // Forgets the objects (a lost device took them); use close_async() otherwise.
  ~UdPort();
  UdPort(const UdPort&) = delete;
  UdPort& operator=(const UdPort&) = delete;
  // Destroys the QP, the AHs, the CQ, the MKEY and the PD, one command at
  // a time; `done` runs when all answered. The port is unusable after.
  static void close_async(std::unique_ptr<UdPort> p, std::function<void()> done);

  uint32_t qpn() const { return qp_.qpn; }
  uint32_t cqn() const { return cq_.cqn; }
  uint32_t pdn() const { return pdn_; }
  uint32_t qkey() const { return cfg_.qkey; }
  void set_receiver(Receiver r) { receiver_ = std::move(r); }

  // Posts one packet to (ahn, qpn, qkey). EAGAIN: every send slot is in
  // flight (the owner stops reading its source until slots_free()).
  Result<void> send(uint32_t ahn, uint32_t qpn, uint32_t qkey, std::span<const uint8_t> packet);
  size_t slots_free() const { return free_send_.size(); }
  // Between begin_batch() and end_batch() sends ring no doorbell; the
  // end rings once for all of them (Device::ring_sq).
  void begin_batch() { batching_ = true; }
  void end_batch();
  // Called after completions freed send slots (the owner resumes reading).
  void set_slots_freed(std::function<void()> f) { on_freed_ = std::move(f); }
  // The CQ's completion event: polls, hands receives over, reposts, re-arms.
  bool on_cq_event(uint32_t cqn);

  const UdPortCounters& counters() const { return counters_; }
  // The bytes of the one buffer (one MKEY) `c` needs: its slots, whole pages.
  static size_t buffer_bytes(const UdPortConfig& c);

 private:
  UdPort(hca::Device& hca, const UdPortConfig& cfg) : hca_(hca), cfg_(cfg) {}
  static void step(std::unique_ptr<UdPort> p, OpenDone done, int rung);
  static void fail(std::unique_ptr<UdPort> p, OpenDone done, Error e);
  size_t slot_stride() const;
  size_t buf_bytes() const;
  uint8_t* at(size_t off) const { return static_cast<uint8_t*>(buf_.data()) + off; }
  uint64_t va(size_t off) const { return reinterpret_cast<uint64_t>(at(off)); }
  Result<void> post_recv(uint32_t slot);
  std::vector<std::pair<hca::ObjectKind, uint32_t>> teardown_steps();

  hca::Device& hca_;
  UdPortConfig cfg_;
  uint32_t pdn_ = 0;
  hca::Mkey mkey_{};
  hca::Cq cq_;
  hca::Qp qp_;
  bool have_pd_ = false, have_mkey_ = false, have_cq_ = false, have_qp_ = false;
  dma::DmaBuffer buf_;
  std::vector<uint32_t> free_send_;
  Receiver receiver_;
  std::function<void()> on_freed_;
  UdPortCounters counters_;
  bool batching_ = false, unrung_ = false;
};

}  // namespace openib::ipoib
