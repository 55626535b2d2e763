// The IB connection manager's protocol engine for one port (IBA chapter 12;
// docs/cm.md "State machine (src/cm/engine)"). Pure protocol and timers:
// single-threaded on ibd's io_context, it sends MADs through Env::send,
// reports events through Env::event and never touches a QP. The glue (ibd)
// moves QPs on the events, using qp_params(), and calls back (accept,
// send_rtu, send_drep, ...).
//
// Ids: one 32-bit id per connection, listener or SIDR request. A connection's
// id is also its local communication ID on the wire (IBA 12.6.3): random,
// never 0, unique among everything the engine still remembers, including
// connections lingering in timewait after their consumer destroyed them.
#pragma once

#include <array>
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "cm/wire.hpp"
#include "common/qp_attr.hpp"
#include "common/result.hpp"
#include "mad/bytes.hpp"
#include "mad/transport.hpp"

namespace openib::cm {

using Bytes = std::span<const std::byte>;

// The local port; set_port() again when it changes (LID assignment, GID).
struct PortInfo {
  uint64_t ca_guid = 0;             // REQ/REP Local CA GUID (IBA 12.6.5, 12.6.8)
  std::array<uint8_t, 16> gid{};    // port GID 0
  uint16_t lid = 0;
  uint8_t ca_ack_delay = 15;        // the CA's local ACK delay (IBA 9.7.6.1.3), for REQ's Local ACK Timeout
  bool ethernet = false;            // RoCE (IBA Annex A17): every MAD has a GRH, its SGID the sender's address
};

enum class EventType : uint8_t {
  kReqReceived,      // passive: a REQ matched a listener; a new id (Event::id) is in REQ received
  kRepReceived,      // active: REP arrived; move the QP to RTR/RTS, then send_rtu() or reject()
  kRtuReceived,      // passive: RTU arrived: established
  kEstablished,      // passive: established by notify_established() (reported from the loop, not from inside the call)
  kRejReceived,      // the peer rejected (REQ or REP); the id is idle (or in timewait) and the QP should go to error
  kMraReceived,      // the peer asked for more time (service_timeout)
  kDreqReceived,     // the peer disconnects: QP to error, then send_drep()
  kDrepReceived,     // our DREQ was answered: disconnected, now in timewait
  kTimewaitExit,     // timewait is over: the QP may be reused (reset it)
  kTimeout,          // REQ/REP/DREQ/SIDR_REQ retries exhausted (attr_id says which); for DREQ: timewait follows
  kSidrReqReceived,  // passive SIDR: answer with sidr_reply()
  kSidrRepReceived,  // active SIDR: sidr_status, remote_qpn, qkey
  kLapReceived,      // informational: a LAP came and was answered with APR "not supported"
  kStale,            // a new REQ named this connection's remote QPN and CA GUID (IBA 12.9.8.3.1):
                     // the engine sent DREQ itself; QP to error; kDrepReceived or kTimeout, then kTimewaitExit
};
const char* to_string(EventType t);

// One event, to the owner of `id`. Spans and `msg` are valid only during the callback.
struct Event {
  EventType type{};
  uint32_t id = 0;          // the engine's id (= local comm ID, or SIDR request ID)
  uint32_t listen_id = 0;   // kReqReceived / kSidrReqReceived: the listener that matched
  uint64_t owner = 0;
  uint16_t attr_id = 0;     // the CM attribute that caused it (kTimeout: the one that timed out)
  mad::MadAddress peer;     // the peer's QP1 (where the MAD came from; for replies)
  uint64_t service_id = 0;
  uint32_t remote_comm_id = 0;
  uint64_t remote_ca_guid = 0;
  // REQ / REP contents (kReqReceived, kRepReceived)
  uint32_t remote_qpn = 0;
  uint32_t starting_psn = 0;  // the peer's receive PSN (our send PSN; docs/cm.md "PSNs")
  uint8_t responder_resources = 0, initiator_depth = 0;  // as sent by the peer
  uint8_t retry_count = 0, rnr_retry_count = 0;
  uint8_t qp_type = 0;        // wire transport service type (0 RC, 1 UC)
  uint8_t path_mtu = 0;
  uint8_t target_ack_delay = 0;
  uint16_t pkey = 0;
  bool srq = false;
  std::optional<CmPath> path;  // kReqReceived: the primary path as the REQ gave it
  // kRejReceived
  uint16_t reason = 0;
  Bytes ari;
  // kMraReceived
  uint8_t service_timeout = 0;
  // SIDR
  uint8_t sidr_status = 0;
  uint32_t qkey = 0;
  Bytes private_data;
  const Message* msg = nullptr;  // the decoded message (nullptr for timer events)
};

struct Env {
  // To the peer's QP1 (Q_Key 0x80010000, IBA 13.5.3.1); exactly 256 bytes.
  std::function<Result<void>(const mad::MadAddress& to, mad::ByteVec mad)> send;
  std::function<void(const Event&)> event;
  std::function<void(uint32_t n, uint8_t* out)> random;  // optional; default getrandom()
  // Optional: may the listener `listen_id` of `owner` take one more passive
  // id (a REQ or SIDR_REQ that matched it)? False: REJ "No resources" (IBA
  // 12.6.7.2 reason 3) or SIDR_REP "rejected" (IBA 12.11.2), counted in
  // Counters::rej_no_resources; no id is made. Unset: always.
  std::function<bool(uint64_t owner, uint32_t listen_id)> admit;
};

// Bounds against a hostile peer or a crowd of listeners (docs/cm.md "Security").
struct EngineLimits {
  // A passive id (REQ received, MRA sent, SIDR_REQ received) its consumer
  // never answers expires after the time the peer itself would wait (its
  // CM response timeout for us, doubled by our MRA, times its retries + 1;
  // IBA 12.6.5, 12.6.6), at most this: REJ(Timeout) to the peer, kTimeout
  // to the owner, the id idle.
  std::chrono::nanoseconds passive_timeout_cap = std::chrono::seconds(60);
  // Listeners with a mask other than all ones (matched by a scan, not a hash).
  std::size_t max_masked_listeners = 64;
};

// IBA 12.6.5 REQ fields the active side chooses.
struct ConnectParams {
  uint64_t service_id = 0;
  mad::MadAddress peer;          // the peer's QP1: DLID, SL, pkey index, GRH
  CmPath primary;          // the primary path (from a PathRecord); local_ack_timeout 0: computed;
                           // local_lid 0 / local_gid 0: the port's
  uint8_t packet_life_time = 0;  // the PathRecord's PacketLifeTime (0: primary.local_ack_timeout - 1)
  uint16_t pkey = 0xffff;
  uint8_t path_mtu = 0;          // IBA enum (1 = 256 ... 5 = 4096)
  uint32_t qpn = 0;
  uint8_t qp_type = 0;           // 0 RC, 1 UC (IBA 12.6.5 Transport Service Type)
  uint32_t starting_psn = 0;     // our receive PSN, sent in the REQ; 0: the engine picks a random 24-bit one
  uint8_t responder_resources = 0, initiator_depth = 0;
  uint8_t retry_count = 7, rnr_retry_count = 7;
  uint8_t max_cm_retries = 15;
  uint8_t cm_response_timeout = 20;  // both local and remote CM response timeout (4.096 us * 2^t)
  bool srq = false;
  Bytes private_data;            // <= 92 bytes
};

// IBA 12.6.8 REP fields the passive side chooses.
struct AcceptParams {
  uint32_t qpn = 0;
  uint32_t starting_psn = 0;     // our receive PSN, sent in the REP; 0: the one the engine picked at the REQ (qp_params(RTR) gave it already)
  uint8_t responder_resources = 0, initiator_depth = 0;
  uint8_t rnr_retry_count = 7;
  uint8_t target_ack_delay = 15;
  bool srq = false;
  Bytes private_data;            // <= 196 bytes
};

// IBA 12.11.1 SIDR_REQ.
struct SidrParams {
  uint64_t service_id = 0;
  mad::MadAddress peer;
  uint16_t pkey = 0xffff;
  uint8_t max_cm_retries = 15;
  uint8_t cm_response_timeout = 20;  // how long each try waits (4.096 us * 2^t)
  Bytes private_data;                // <= 216 bytes
};

// What a QP needs for a transition (Linux's ib_cm_init_qp_attr), in the
// daemon's one QP-attribute type (common/qp_attr.hpp): `mask` (enum
// ibv_qp_attr_mask bits, verbs::qp_attr) says which fields apply. The AV's
// port is left to the glue, which knows the HCA's port number.
struct QpParams {
  uint32_t mask = 0;
  verbs::QpAttr attr;
  // RTR: the path's local GID, whose GID table index is the AV's
  // sgid_index where that is not 0 (an Ethernet port: the IP's entry).
  std::array<uint8_t, 16> local_gid{};
};

enum class State : uint8_t {
  kIdle, kListen, kReqSent, kReqRcvd, kMraReqSent, kMraReqRcvd, kRepSent, kRepRcvd, kMraRepSent,
  kMraRepRcvd, kEstablished, kDreqSent, kDreqRcvd, kTimewait, kSidrReqSent, kSidrReqRcvd,
  kCount_
};
const char* to_string(State s);

struct Counters {
  static constexpr std::size_t kAttrs = 0x20;  // CM attributes 0x0010..0x001a by (attr_id & 0x1f)
  std::array<uint64_t, kAttrs> sent{}, received{};
  uint64_t send_errors = 0;
  uint64_t retries = 0, timeouts = 0, duplicates = 0, stale = 0;
  uint64_t mra_sent_auto = 0;
  uint64_t dropped_malformed = 0, dropped_unknown_id = 0, dropped_bad_state = 0;
  uint64_t rej_no_listener = 0, sidr_no_listener = 0;
  uint64_t rej_no_resources = 0;   // passive ids refused by Env::admit (REJ 3 / SIDR_REP rejected)
  uint64_t stale_foreign = 0;      // "stale" REQs not from the old connection's peer: REJ'd, old one kept
  uint64_t passive_expired = 0;    // passive ids never answered (EngineLimits::passive_timeout_cap)
  uint64_t rej_foreign_gid = 0;    // RoCE REQs whose Primary Local Port GID is not the GRH's source: REJ 12
};

class Engine {
 public:
  Engine(boost::asio::io_context& io, Env env, PortInfo port);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  void set_port(const PortInfo& port);
  void set_limits(const EngineLimits& l);

  // REQ listeners (sidr false) and SIDR_REQ listeners (sidr true) are two
  // spaces: a REQ reaches only a REQ listener, a SIDR_REQ only a SIDR one,
  // and both may hold the same service ID. EADDRINUSE if (service_id, mask)
  // overlaps another listener of the same space; ENOSPC past
  // EngineLimits::max_masked_listeners. Exact listeners (mask all ones) are
  // found by a hash, masked ones by a scan of a short list. Who may listen
  // where is the caller's policy (ibd: docs/cm.md "Security").
  Result<uint32_t> listen(uint64_t service_id, uint64_t mask, uint64_t owner, bool sidr = false);
  // Sends REQ. EBUSY if `qpn` is connected or still in timewait; EINVAL on bad parameters.
  Result<uint32_t> connect(const ConnectParams& p, uint64_t owner);
  // REQ received (or MRA sent): sends REP. EBUSY: qpn in use or in timewait.
  Result<void> accept(uint32_t id, const AcceptParams& p);
  // REQ received -> REJ (then idle); REP received (active) -> REJ (then timewait).
  Result<void> reject(uint32_t id, uint16_t reason, Bytes ari, Bytes private_data);
  // Active, REP received: sends RTU -> established (kEstablished is not reported: the caller knows).
  Result<void> send_rtu(uint32_t id, Bytes private_data);
  // Passive, REP sent: first data arrived before the RTU (IBA 12.9.5 "COMM_EST") -> established.
  Result<void> notify_established(uint32_t id);
  // Established -> DREQ sent.
  Result<void> disconnect(uint32_t id, Bytes private_data);
  // DREQ received -> DREP, timewait.
  Result<void> send_drep(uint32_t id, Bytes private_data);
  // SIDR_REQ with retries; kSidrRepReceived or kTimeout follows.
  Result<uint32_t> sidr_request(const SidrParams& p, uint64_t owner);
  // SIDR_REQ received -> SIDR_REP; the id is gone afterwards.
  Result<void> sidr_reply(uint32_t id, uint8_t status, uint32_t qpn, uint32_t qkey, Bytes private_data);

  // The consumer is gone: established -> DREQ; REQ/REP received -> REJ
  // (consumer reject, IBA 12.6.7.2 reason 28); REQ/REP sent -> REJ timeout;
  // DREQ received -> DREP; listener -> removed. No event for `id` after
  // this; a connection lingers internally through timewait.
  void destroy(uint32_t id);
  void destroy_owner(uint64_t owner);

  // Every class-7 (CM) MAD that reached the port's QP1.
  void on_mad(const mad::MadAddress& from, Bytes mad);

  // Like ib_cm_init_qp_attr: target_state 1 INIT, 2 RTR, 3 RTS.
  Result<QpParams> qp_params(uint32_t id, uint8_t target_state) const;

  // The state of an id (nullopt: unknown, or destroyed and gone).
  std::optional<State> state(uint32_t id) const;
  const Counters& counters() const { return counters_; }
  std::array<uint32_t, static_cast<std::size_t>(State::kCount_)> states() const;  // ids by state
  std::string json() const;
  std::size_t memory_bytes() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
  Counters counters_;
};

}  // namespace openib::cm
