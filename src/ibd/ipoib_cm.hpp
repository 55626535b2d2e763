// IPoIB connected mode in ibd (RFC 4755; docs/ipoib.md "Connected mode"):
// the RC connections of one IPoIB interface, through the IB CM service's
// in-ibd session (cm_service.hpp) and the connected-mode QPs
// (src/ipoib_tap/cm_port.hpp).
//
//  - Passive: a listener on the IPoIB-CM service ID of the interface's UD
//    QP (0x10000000_00 | QPN, cm_wire.hpp). A REQ is accepted with a new
//    RC QP on the SRQ when its private data is well formed and its sender
//    (the REQ's GID and the private data's UD QPN: a 20-byte address) is a
//    neighbour the bridge knows from ARP/ND and, when its path is known,
//    the REQ came from that path's LID (the MAD's source, which the sender
//    does not choose); else REJ, counted. At most
//    kMaxRx such connections. A REP never answered by an RTU times out in
//    the CM (its passive timeout) and the QP goes.
//  - Active: the first packet for a neighbour that offers connected mode
//    makes an RC QP and a REQ to that neighbour's service ID; the packets
//    wait (at most kMaxQueued) until it is established. A REJ, a timeout
//    or an error falls back to datagram mode for that neighbour for
//    kFallbackFor (its waiting packets go by UD when they fit); then it
//    is tried again.
//  - A connection ends on a DREQ, a QP in error (retries exhausted, the
//    peer gone) or stop(); the next packet connects again.
//  - Each connection carries one direction, as Linux's: the active side
//    sends, the passive side receives.
//
// Single-threaded on ibd's io_context.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "hca/device.hpp"
#include "ibd/cm_service.hpp"
#include "ipoib_tap/bridge.hpp"
#include "ipoib_tap/cm_port.hpp"

namespace openib::ibd {

// The IB CM session of IPoIB's connected mode (not a client's id).
inline constexpr uint32_t kIpoibCmOwner = 0xFFFFFFF2u;

struct IpoibCmCounters {
  uint64_t connects = 0, established_tx = 0, established_rx = 0;
  uint64_t fallbacks = 0;           // a neighbour fell back to datagram mode (REJ, timeout, error)
  uint64_t rej_not_neighbour = 0;   // a REQ from a 20-byte address the bridge does not know
  uint64_t rej_spoofed = 0;         // a REQ claiming a neighbour whose path has another LID than the REQ's source
  uint64_t rej_bad_private = 0;     // a REQ's (or REP's) private data malformed
  uint64_t rej_full = 0;            // kMaxRx connections already
  uint64_t rtu_timeouts = 0;        // accepted, never established
  uint64_t disconnects = 0, broken = 0;
  uint64_t drop_queue_full = 0;     // packets pushed out while connecting
  uint64_t drop_no_slot = 0;        // no send slot
  uint64_t drop_unknown_qp = 0;     // a receive on a QP of no connection
};

class IpoibCm {
 public:
  static constexpr size_t kMaxRx = 256;
  static constexpr size_t kMaxQueued = 32;
  static constexpr auto kFallbackFor = std::chrono::seconds(30);

  struct Hooks {
    // Is `a` a neighbour the bridge knows (ARP/ND)?
    std::function<bool(const ipoib::HwAddr& a)> is_neighbour;
    // The PathRecord (wire form) to a neighbour's GID; nullptr: none.
    std::function<const std::array<uint8_t, 64>*(const ipoib::Gid& gid)> path_of;
    // The LID of the path to a neighbour's GID, when one is resolved.
    std::function<std::optional<uint16_t>(const ipoib::Gid& gid)> lid_of;
    // A packet received on a connection from `a`.
    std::function<void(const ipoib::HwAddr& a, std::span<const uint8_t> packet)> receive;
    // A packet that waited for a connection which failed: by UD if it can.
    std::function<void(const ipoib::HwAddr& a, std::span<const uint8_t> packet)> send_ud;
    // Send slots freed (the TAP's reader resumes).
    std::function<void()> slots_freed;
  };

  IpoibCm(hca::Device& hca, CmService& cm, uint8_t port, Hooks hooks);
  ~IpoibCm();
  IpoibCm(const IpoibCm&) = delete;
  IpoibCm& operator=(const IpoibCm&) = delete;

  // Opens the QPs' resources and the CM session, and listens on the
  // service ID of `ud_qpn`; done(true) when all is ready.
  void start(uint32_t ud_qpn, std::function<void(bool)> done);
  // Every connection ended (the CM sends DREQ or REJ), the listener and
  // the QPs gone; device_gone: the device took the objects.
  void stop(bool device_gone);
  bool running() const { return port_ != nullptr; }

  bool usable(const ipoib::HwAddr& a) const;
  // Sends (or holds while connecting) one IPoIB packet to `a`. False: no
  // connection (fallen back, the peer's MTU too small): the caller uses UD.
  bool send(const ipoib::HwAddr& a, std::span<const uint8_t> packet);
  size_t slots_free() const;
  void begin_batch();
  void end_batch();
  bool on_cq_event(uint32_t cqn);

  const IpoibCmCounters& counters() const { return counters_; }
  std::vector<std::pair<std::string, uint64_t>> counter_list() const;
  // The connections for `ibdctl ipoib` (JSON array text).
  std::string json() const;

 private:
  enum class TxState { kNone, kConnecting, kUp, kFallback };
  struct Tx {
    TxState state = TxState::kNone;
    uint32_t qpn = 0, id = 0;
    uint32_t peer_mtu = 0;
    std::deque<std::vector<uint8_t>> queue;
    std::chrono::steady_clock::time_point retry_at{};
  };
  struct Rx {
    ipoib::HwAddr peer;
    uint32_t id = 0;
    bool established = false;
  };

  void open_session();
  void on_event(const proto::CmEventMsg& e);
  void on_request(const proto::CmEventMsg& e);
  void accept(uint32_t id, const ipoib::HwAddr& peer);
  void connect(const ipoib::HwAddr& a);
  void connect_qp(const ipoib::HwAddr& a, uint32_t qpn);
  void tx_event(const ipoib::HwAddr& a, Tx& t, const proto::CmEventMsg& e);
  void rx_event(uint32_t qpn, Rx& r, const proto::CmEventMsg& e);
  void tx_up(const ipoib::HwAddr& a, Tx& t);
  // Ends a connection of ours: its id destroyed (DREQ/REJ by the CM), its QP.
  void end_tx(const ipoib::HwAddr& a, bool fallback);
  void end_rx(uint32_t qpn);
  void qp_broken(uint32_t qpn);
  CmService::QpOps qp_ops();

  hca::Device& hca_;
  CmService& cm_;
  uint8_t port_num_;
  Hooks hooks_;
  uint32_t ud_qpn_ = 0;
  uint32_t listen_id_ = 0;
  bool session_ = false;
  std::unique_ptr<ipoib::CmPort> port_;
  std::map<ipoib::HwAddr, Tx> tx_;
  std::map<uint32_t, Rx> rx_;                       // by QPN
  std::map<uint32_t, uint8_t> qp_state_;            // our QPs' states, for the CM's lookups
  std::map<uint32_t, ipoib::HwAddr> tx_by_qpn_;
  std::map<uint32_t, std::pair<bool, uint32_t>> by_id_;  // CM handle -> (tx, QPN)
  uint64_t epoch_ = 0;
  IpoibCmCounters counters_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace openib::ibd
