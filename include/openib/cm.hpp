// libopenib: the IB connection manager (docs/cm.md "Library").
//
// Connections between clients by service ID, made by ibd's CM (IBA chapter
// 12) on the client's behalf: a listener on a service ID (with a mask), a
// connect with a path, a QP and private data, accept or reject, disconnect;
// SIDR (service ID resolution) for UD QPs. The vocabulary is that of
// Linux's ib_cm and librdmacm's event channel:
//
//  - A CmChannel belongs to one Context (one per Context: CM_OPEN). Its
//    fd() becomes readable when an event is queued; get_event() returns
//    one. Ids are plain handles (uint32_t) owned by the Context's
//    connection: closing the Context (or the process dying) tears every
//    connection down (DREQ, or REJ for one not yet established).
//  - By default ibd moves the QP given to connect/accept through INIT, RTR
//    and RTS with the connection's parameters (PSNs, path MTU, responder
//    resources and initiator depth, retry and RNR counts, local ACK
//    timeout), and to ERROR on disconnect. With CmConnParams::manual_qp the
//    QP is left alone and init_qp_attr() gives the attributes for each
//    transition (as ib_cm_init_qp_attr).
//  - Events: kRequest (a new id, answer with accept or reject), kReply then
//    kEstablished on the active side, kEstablished on the passive side (the
//    RTU), kRejected (reason of IBA 12.6.7.2, ARI, private data), kMraReceived,
//    kDisconnectRequest (the peer's DREQ; ibd answered), kDisconnected (our
//    DREQ answered), kTimewaitExit (the QP may be reused), kTimeout (the
//    peer never answered), kSidrRequest / kSidrReply, kError.
//
// Threading: one thread at a time per channel (it uses the Context's
// connection, which is itself thread-safe).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "openib/path.hpp"
#include "openib/result.hpp"
#include "openib/verbs.hpp"

namespace openib {

enum class CmEventType : uint8_t {
  kRequest = 1, kReply = 2, kEstablished = 3, kRejected = 4, kMraReceived = 5,
  kDisconnectRequest = 6, kDisconnected = 7, kTimewaitExit = 8, kTimeout = 9,
  kSidrRequest = 10, kSidrReply = 11, kError = 12,
};
const char* cm_event_str(CmEventType t);

// REJ reasons (IBA 12.6.7.2) a consumer is most likely to meet.
namespace cm_rej {
inline constexpr uint16_t kTimeout = 4, kInvalidServiceId = 8, kStaleConnection = 10, kConsumerReject = 28;
}

// Private data sizes (IBA 12.6): what each message carries at most.
namespace cm_private {
inline constexpr size_t kReq = 92, kRep = 196, kRej = 148, kDreq = 220, kSidrReq = 216, kSidrRep = 136;
}

struct CmConnParams {
  std::vector<uint8_t> private_data;
  uint8_t responder_resources = 1, initiator_depth = 1;
  uint8_t retry_count = 7, rnr_retry_count = 7;
  uint8_t max_cm_retries = 15;
  uint8_t cm_response_timeout = 20;  // 4.096 us * 2^t (20: about 4.3 s, as Linux's rdma_cm)
  bool manual_qp = false;
};

struct CmEvent {
  CmEventType type{};
  uint32_t id = 0;         // the id the event is about
  uint32_t listen_id = 0;  // kRequest / kSidrRequest: the listener it came to
  int status = 0;          // 0, or an errno (kTimeout, kError, kDisconnected after a lost DREQ)
  uint16_t reason = 0;     // kRejected
  uint8_t port = 0;
  uint64_t service_id = 0;
  uint32_t remote_qpn = 0, starting_psn = 0, qkey = 0;  // kRequest, kReply, kSidrRequest/kSidrReply
  uint8_t responder_resources = 0, initiator_depth = 0, rnr_retry_count = 0;
  bool srq = false;
  uint8_t sidr_status = 0;  // kSidrReply (IBA 12.11.2: 0 valid)
  uint16_t remote_lid = 0;
  Gid remote_gid;
  std::vector<uint8_t> ari;  // kRejected: additional rejection information
  std::vector<uint8_t> private_data;
};

class CmChannel {
 public:
  // CM_OPEN on the Context's connection (EBUSY: the Context has one).
  static Result<std::unique_ptr<CmChannel>> open(Context& ctx);
  virtual ~CmChannel() = default;

  virtual int fd() const = 0;
  // Waits up to timeout_ms (-1: forever, 0: no wait) for the next event.
  // ETIMEDOUT; ECONNRESET when ibd went away.
  virtual Result<CmEvent> get_event(int timeout_ms) = 0;

  // A listener on service_id (under mask) of `port`: REQs (or, with sidr,
  // SIDR_REQs) matching it become kRequest (kSidrRequest) events.
  // EADDRINUSE: another listener covers an overlapping range.
  virtual Result<uint32_t> listen(uint8_t port, uint64_t service_id, uint64_t mask = ~uint64_t{0},
                                  bool sidr = false) = 0;
  // Sends a REQ for `qp` (RC or UC, in RESET or INIT) along `path`.
  virtual Result<uint32_t> connect(Qp& qp, const PathRecord& path, uint64_t service_id, const CmConnParams& p,
                                   uint8_t port = 1) = 0;
  // Answers kRequest with a REP for `qp` (in RESET or INIT).
  virtual Result<void> accept(uint32_t id, Qp& qp, const CmConnParams& p) = 0;
  // Answers kRequest (or a kReply of a manual_qp connect) with a REJ.
  virtual Result<void> reject(uint32_t id, uint16_t reason = cm_rej::kConsumerReject,
                              std::span<const uint8_t> private_data = {}, std::span<const uint8_t> ari = {}) = 0;
  // Sends a DREQ; kDisconnected follows (and kTimewaitExit).
  virtual Result<void> disconnect(uint32_t id, std::span<const uint8_t> private_data = {}) = 0;
  // Forgets the id (a connected one is disconnected first, by ibd).
  virtual Result<void> destroy(uint32_t id) = 0;
  // SIDR (IBA 12.11): asks the peer along `path` for the UD QP serving
  // `service_id`; kSidrReply (or kTimeout) follows.
  virtual Result<uint32_t> sidr_query(const PathRecord& path, uint64_t service_id,
                                      std::span<const uint8_t> private_data = {}, uint8_t port = 1) = 0;
  // Answers kSidrRequest: status 0 with the UD QP and its Q_Key, or another
  // status (IBA 12.11.2) with qp nullptr.
  virtual Result<void> sidr_reply(uint32_t id, uint8_t status, Qp* qp, uint32_t qkey,
                                  std::span<const uint8_t> private_data = {}) = 0;
  // The attributes (and their mask) that move the id's QP to `state`
  // (kInit, kRtr, kRts), for manual_qp users (ib_cm_init_qp_attr).
  virtual Result<std::pair<QpAttr, uint32_t>> init_qp_attr(uint32_t id, QpState state) = 0;
};

}  // namespace openib
