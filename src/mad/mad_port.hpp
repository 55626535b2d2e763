// One HCA port's management QPs, QP0 (SMI) and QP1 (GSI), owned by ibd's
// MAD layer (IBA 13.5): their rings, one CQ, a pool of 256-byte MAD send
// buffers and receive buffers (40-byte GRH + MAD), and an address-handle
// cache. MADs go out as UD SENDs (IBA 13.5.1); QP0 traffic is VL15 and
// takes no P_Key or Q_Key check (the device does that, docs/simhca.md §12.8).
//
// Single-threaded on ibd's io_context. Completions arrive through the CQ's
// completion event (the owner calls on_completion()).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <tuple>
#include <vector>

#include "common/result.hpp"
#include "hca/hca.hpp"
#include "mad/bytes.hpp"

namespace openib::mad {

inline constexpr uint32_t kGsiQkey = 0x80010000;  // IBA 13.5.3.1: the well-known Q_Key of QP1

// Where a MAD came from (receive) or goes to (send). The fields of
// rdma-core's struct ib_mad_addr, host byte order.
struct MadAddress {
  uint32_t qpn = 0;    // remote QP (0 or 1 for management, any for redirected GSI)
  uint32_t qkey = 0;
  uint16_t lid = 0;    // remote LID; 0xFFFF permissive (directed-route SMPs)
  uint8_t sl = 0;
  uint8_t path_bits = 0;
  bool grh = false;
  uint8_t gid_index = 0, hop_limit = 0, traffic_class = 0;
  std::array<uint8_t, 16> gid{};
  uint32_t flow_label = 0;
  uint16_t pkey_index = 0;
};

struct ReceivedMad {
  uint8_t qp = 0;  // 0 or 1: the QP it arrived on
  MadAddress from;
  std::array<std::byte, kMadBytes> mad{};
};

struct MadPortCounters {
  uint64_t sent = 0, send_errors = 0, received = 0, recv_errors = 0, no_send_buffer = 0;
};

// What the MAD layer needs from the port below it (DESIGN: a small
// interface, so that tests and the fuzz target put a fake under the layer).
class MadTransport {
 public:
  using Receiver = std::function<void(const ReceivedMad&)>;
  virtual ~MadTransport() = default;
  virtual uint8_t port() const = 0;
  virtual void set_receiver(Receiver r) = 0;
  // One MAD (exactly kMadBytes) on QP `qp` (0 or 1) to `to`.
  virtual Result<void> send(uint8_t qp, const MadAddress& to, std::span<const std::byte> mad) = 0;
  // A completion event on CQ `cqn`: true if it was this port's (and handled).
  virtual bool on_cq_event(uint32_t cqn) = 0;
  virtual const MadPortCounters& counters() const = 0;
};

class MadPort final : public MadTransport {
 public:

  // Creates the CQ, QP0 and QP1 on `port`, moves both to RTS (P_Key index
  // 0; QP1's Q_Key kGsiQkey), posts the receive buffers and arms the CQ.
  static Result<std::unique_ptr<MadPort>> open(hca::Hca& hca, uint8_t port);
  ~MadPort();
  MadPort(const MadPort&) = delete;
  MadPort& operator=(const MadPort&) = delete;

  uint8_t port() const override { return port_; }
  uint32_t cqn() const { return cq_.cqn; }
  void set_receiver(Receiver r) override { receiver_ = std::move(r); }

  // Posts one MAD (exactly kMadBytes) on QP `qp` (0 or 1) to `to`.
  // EAGAIN: every send buffer is in flight.
  Result<void> send(uint8_t qp, const MadAddress& to, std::span<const std::byte> mad) override;
  bool on_cq_event(uint32_t cqn) override {
    if (cqn != cq_.cqn) return false;
    on_completion();
    return true;
  }

  // Polls the CQ: receives go to the receiver (their buffers reposted),
  // sends free their buffers; then re-arms the CQ.
  void on_completion();

  const MadPortCounters& counters() const override { return counters_; }

 private:
  MadPort(hca::Hca& hca, uint8_t port) : hca_(hca), port_(port) {}
  Result<void> setup();
  Result<void> post_recv_slot(uint8_t qp, uint32_t slot);
  Result<uint32_t> ah_for(const MadAddress& to);
  std::byte* slot_ptr(size_t offset) const;
  uint64_t slot_va(size_t offset) const;

  hca::Hca& hca_;
  uint8_t port_;
  uint32_t pdn_ = 0;
  bool have_pd_ = false;
  hca::Cq cq_;
  hca::Qp qps_[2];
  bool have_cq_ = false, have_qp_[2] = {false, false};
  dma::DmaBuffer buf_;
  hca::Mkey mkey_{};
  bool have_mkey_ = false;
  std::vector<uint32_t> free_send_;  // send slot indices
  std::map<std::tuple<uint16_t, uint8_t, uint8_t, bool, std::array<uint8_t, 16>, uint8_t>, uint32_t> ahs_;
  Receiver receiver_;
  MadPortCounters counters_;
};

}  // namespace openib::mad
