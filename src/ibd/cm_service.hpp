// ibd's connection manager service (docs/cm.md "In ibd"): the glue between
// the CM protocol engine (src/cm/engine.hpp, one per port, on the port's
// MAD layer as the class-0x07 agent), the clients' CM requests
// (docs/client-protocol.md "Connection manager") and their QPs.
//
//  - Each client that said CM_OPEN has a session: the CM socket (ibd's end
//    of a SOCK_SEQPACKET pair, written only by ibd, one CmEventMsg per
//    datagram) and its ids. An id is a handle of the client's own, mapped
//    to (port, engine id); a handle names nothing of another client.
//  - QPs: unless a request says kCmManualQp, ibd moves the client's QP
//    itself with the engine's attributes (ib_cm_init_qp_attr's rules):
//    active side RESET -> INIT before the REQ, INIT -> RTR -> RTS when the
//    REP came, then the RTU; passive side RESET -> INIT -> RTR -> RTS
//    before the REP (as Linux's rdma_accept); to ERROR when the connection
//    is rejected, disconnected or found stale.
//  - Events a client does not read wait in ibd (at most kMaxQueuedEvents
//    per session, or --cm-max-queued-events); past that the session's socket is closed (the client
//    sees ECONNRESET on it) and counted: an event is never silently lost.
//  - A client that goes has its ids destroyed: the engine sends DREQ for
//    an established connection, REJ for one not yet established.
//  - The device goes: the engines go with their MAD layers; every id of
//    theirs gets kError (ENODEV). New engines start when the layers return.
//
// Single-threaded on ibd's io_context.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "clientproto/messages.hpp"
#include "cm/engine.hpp"
#include "common/fd.hpp"
#include "hca/device.hpp"
#include "ibd/service.hpp"
#include "ibd/budget.hpp"
#include "ibd/event_socket.hpp"
#include "ibd/umad_service.hpp"
#include "mad/layer.hpp"

namespace openib::ibd {

struct CmServiceCounters {
  uint64_t opens = 0, events = 0, sessions_overrun = 0;
  uint64_t qp_transitions = 0, qp_transition_errors = 0;
  uint64_t qp_chains = 0;  // transitions handed to the device together (move_qp_chained)
  uint64_t requests_without_engine = 0;  // the port's MAD layer is not open (ENETDOWN)
};

class CmService final : public Service {
 public:
  // The client's QPs, through the server (service.hpp).
  using QpInfo = ClientQpInfo;
  using QpOps = ClientQps;
  using Done = hca::Completer<Result<void>>;
  using IdDone = hca::Completer<Result<uint32_t>>;

  static constexpr size_t kMaxQueuedEvents = 1u << 16;
  // The ids an in-ibd user's session (the RDMA CM) may hold: exempt from
  // the per-client budget (the RDMA CM bounds its own clients), not from
  // this hard cap, which also bounds the passive ids REQs make there.
  static constexpr size_t kMaxInternalIds = 1u << 18;

  CmService(boost::asio::io_context& io, hca::Device& hca, UmadService& umad, uint8_t num_ports);
  ~CmService() override;
  CmService(const CmService&) = delete;
  CmService& operator=(const CmService&) = delete;

  std::string_view service_name() const override { return "cm"; }
  // CM_OPEN ... CM_INFO (cm_requests.cpp).
  std::vector<proto::Op> ops() const override;
  Result<void> handle(const Caller& c, proto::Message& m, Respond& done) override;
  // Any port event: the engine's PortInfo is read again.
  void port_event(const hca::Event& e) override { port_changed(e.port); }

  void set_qp_ops(QpOps ops) { qp_ = std::move(ops); }
  // Events kept for a client that does not read them (ibd --cm-max-queued-events).
  void set_max_queued_events(size_t n) { max_queued_ = n ? n : 1; }
  // CM ids per client and per uid (--client-max-cm-ids, --uid-max-cm-ids):
  // every id a client's session holds counts, the passive ones REQs and
  // SIDR_REQs make at its listeners too (past it: REJ "No resources").
  void set_id_limits(BudgetLimit l) { ids_budget_.set_limit(l); }
  // The bytes of events waiting in clients' CM sockets (shared with the RDMA
  // CM; outlives this service). Sessions opened afterwards are charged.
  void set_event_budget(Budget* b) { event_budget_ = b; }
  // Bounds against hostile peers and crowds of listeners, for every engine.
  void set_engine_limits(const cm::EngineLimits& l);
  // Asks the user-MAD service for each port's MAD layer (the CM agent is
  // registered whenever one is open).
  void start();
  // A port's LID or GID may have changed: the engine's PortInfo is re-read.
  void port_changed(uint8_t port);

  // Client requests (client = ibd's connection id).
  Result<UniqueFd> open(uint32_t client, uid_t uid);
  // An in-ibd user (the RDMA CM, docs/cma.md): a session named `owner` (not
  // a client's id) whose events go to `sink`, posted to the loop (never
  // called inside a request), and whose QP handles `qp` resolves. Requests
  // then name `owner` as their client; client_gone(owner) closes it.
  using Sink = std::function<void(const proto::CmEventMsg&)>;
  Result<void> open_internal(uint32_t owner, QpOps qp, Sink sink);
  // Service-ID ownership (docs/cm.md "Security"): the RDMA CM's ranges
  // ((port space << 16) + port) only for the RDMA CM's own session, EACCES
  // for every client; a masked listen and the IPoIB-CM range (top byte
  // 0x10) only for `privileged` clients (uid 0 or CAP_NET_ADMIN).
  Result<uint32_t> listen(uint32_t client, const proto::CmListenReq& r, bool privileged = false);
  void connect(uint32_t client, const proto::CmConnectReq& r, IdDone done);
  void accept(uint32_t client, const proto::CmAcceptReq& r, Done done);
  Result<void> reject(uint32_t client, const proto::CmRejectReq& r);
  Result<void> disconnect(uint32_t client, const proto::CmDisconnectReq& r);
  Result<void> destroy(uint32_t client, uint32_t id);
  Result<uint32_t> sidr_query(uint32_t client, const proto::CmSidrQueryReq& r);
  Result<void> sidr_reply(uint32_t client, const proto::CmSidrReplyReq& r);
  // ib_cm_init_qp_attr; on an Ethernet port an RTR's sgid_index is the
  // GID table entry of the path's local GID, looked up as move_qp does
  // (hca::find_gid_async), so the answer may come later.
  using InitQpAttrDone = hca::Completer<Result<proto::CmInitQpAttrRep>>;
  void init_qp_attr(uint32_t client, const proto::CmInitQpAttrReq& r, InitQpAttrDone done);
  void client_gone(uint32_t client) override;
  // How many ids the client holds (quota).
  size_t ids_of(uint32_t client) const;

  // `viewer`: only that client's own session is listed (an unprivileged
  // caller); nullopt: every session. Counters are global either way.
  std::string json(std::optional<uint32_t> viewer = std::nullopt) const;
  std::vector<std::pair<std::string, uint64_t>> counter_list() const override;
  // ibd's memory for the CM: the engines' and the sessions' (bench).
  size_t memory_bytes() const;

 private:
  // The requests (cm_requests.cpp): one member an operation, in one table.
  using OpFn = Result<void> (CmService::*)(const Caller& c, proto::Message& m, Respond& done);
  struct OpEntry {
    proto::Op op;
    OpFn fn;
  };
  static std::span<const OpEntry> op_table();
  Result<void> op_open(const Caller& c, proto::Message& m, Respond& done);
  Result<void> op_listen(const Caller& c, proto::Message& m, Respond& done);
  Result<void> op_connect(const Caller& c, proto::Message& m, Respond& done);
  Result<void> op_accept(const Caller& c, proto::Message& m, Respond& done);
  Result<void> op_reject(const Caller& c, proto::Message& m, Respond& done);
  Result<void> op_disconnect(const Caller& c, proto::Message& m, Respond& done);
  Result<void> op_destroy(const Caller& c, proto::Message& m, Respond& done);
  Result<void> op_sidr_query(const Caller& c, proto::Message& m, Respond& done);
  Result<void> op_sidr_reply(const Caller& c, proto::Message& m, Respond& done);
  Result<void> op_init_qp_attr(const Caller& c, proto::Message& m, Respond& done);
  Result<void> op_info(const Caller& c, proto::Message& m, Respond& done);

  struct IdRec {
    uint8_t port = 0;
    uint8_t kind = 0;  // kListen, kConn, kSidr
    bool manual = false;
    bool active = false;
    bool accepted = false;     // passive: the REP went out
    bool established = false;  // kEstablished was reported
    uint32_t engine_id = 0;  // 0: done (destroyed in the engine), or the device went
    // A listen made before the port's engine ran (ibd just started): the
    // engine takes it when it comes up (start_pending_listens).
    bool pending = false;
    bool sidr = false;
    uint64_t service_id = 0, service_mask = 0;
    uint32_t qp = 0;         // the client's QP handle (connections)
    uint8_t responder_resources = 0, initiator_depth = 0;
  };
  struct Session {
    uint32_t client = 0;
    uid_t uid = 0;
    std::unique_ptr<EventSocket> events;  // a client's
    Sink sink;                            // an in-ibd user's
    std::unique_ptr<QpOps> qp;            // an in-ibd user's QPs
    uint32_t next_handle = 1;
    std::unordered_map<uint32_t, IdRec> ids;
  };
  struct Port {
    mad::MadLayer* layer = nullptr;
    uint32_t agent = 0;
    std::unique_ptr<cm::Engine> engine;
    // engine id -> (client, handle)
    std::unordered_map<uint32_t, std::pair<uint32_t, uint32_t>> owners;
    uint64_t generation = 0;  // + 1 per layer (an answer for an older one is dropped)
    bool ethernet = false;    // RoCEv2 (hca::protocol_roce): an RTR's sgid_index from the GID table
  };

  void on_layer(uint8_t port, mad::MadLayer* layer);
  void make_engine(uint8_t port, uint64_t gen, const hca::PortAttr& a);
  // The port's engine has not run yet, and will (its MAD layer is coming or
  // there): a listen waits for it rather than failing.
  bool coming_up(uint8_t port) const;
  Result<void> check_pending_overlap(uint8_t port, uint64_t sid, uint64_t mask, bool sidr) const;
  void start_pending_listens(uint8_t port);
  void fail_pending_listens(uint8_t port, int code);
  // A kError event for the client's id `handle` (status: the errno).
  void emit_error(uint32_t client, uint32_t handle, uint8_t port, int code);
  // The engine's events (cm_service.cpp "engine events"): a listener's new
  // id, or an event of an id a client holds (its handle in m.id).
  void on_engine_event(uint8_t port, const cm::Event& e);
  void on_passive_id(uint8_t port, const cm::Event& e, proto::CmEventMsg& m);
  void on_id_event(uint8_t port, const cm::Event& e, uint32_t client, IdRec& rec, proto::CmEventMsg& m);
  void on_rep(uint8_t port, uint32_t eid, uint32_t client, const IdRec& rec, proto::CmEventMsg& m);
  void rep_qp_moved(uint8_t port, uint32_t client, uint32_t handle, uint32_t eid, Result<void> r);
  void on_timeout(uint8_t port, const cm::Event& e, uint32_t client, IdRec& rec, proto::CmEventMsg& m);
  // The engine's id of `rec` destroyed after this event, the client's handle kept.
  void forget_engine_id(uint8_t port, uint32_t eid, IdRec& rec);
  // IBA 12.9.5: kEstablished before a DREQ's event when the RTU was lost.
  void implied_established(uint8_t port, uint32_t client, uint32_t handle, IdRec& rec);
  Result<std::pair<Session*, IdRec*>> find(uint32_t client, uint32_t handle);
  Result<cm::Engine*> engine(uint8_t port);
  uint32_t add_id(Session& s, IdRec rec);
  void emit(uint32_t client, proto::CmEventMsg m);
  Result<QpInfo> qp_lookup(uint32_t client, uint32_t handle);
  void qp_modify(uint32_t client, uint32_t handle, uint32_t mask, const hca::QpAttr& a, Done done);
  void close_session(uint32_t client);
  // The CM-ids budget: one id more for the session (EDQUOT past it; the
  // internal session: its hard cap), and back.
  Result<void> charge(const Session& s);
  void uncharge(uint32_t client, uint64_t n = 1);
  bool admit(uint8_t port, uint32_t listen_id);
  // QP transitions, one after another; `done` after the last (or the first failure).
  void move_qp(uint32_t client, uint32_t qp_handle, uint8_t port, uint32_t engine_id,
               std::vector<uint8_t> states, uint32_t rq_psn, Done done);
  bool ethernet(uint8_t port) const {
    auto it = ports_.find(port);
    return it != ports_.end() && it->second.ethernet;
  }
  const QpOps& qp_ops_of(uint32_t client) const;
  void move_qp_chained(uint32_t client, uint32_t qp_handle, uint8_t port, uint32_t engine_id,
                       const std::vector<uint8_t>& states, uint32_t rq_psn, Done done);
  void modify_then(uint32_t client, uint32_t qp_handle, uint8_t port, uint32_t engine_id,
                   std::vector<uint8_t> states, uint32_t rq_psn, std::pair<uint32_t, hca::QpAttr> attr, Done done);
  void qp_to_error(uint32_t client, const IdRec& rec);
  // rq_psn (UINT32_MAX: the engine's) for an RTR; local_gid (non-null)
  // gets an Ethernet port's RTR's source GID, for its sgid_index.
  Result<std::pair<uint32_t, hca::QpAttr>> hca_attr(uint8_t port, uint32_t engine_id, uint8_t state,
                                                     uint32_t rq_psn, std::array<uint8_t, 16>* local_gid);

  boost::asio::io_context& io_;
  hca::Device& hca_;
  UmadService& umad_;
  uint8_t num_ports_;
  QpOps qp_;
  size_t max_queued_ = kMaxQueuedEvents;
  Budget ids_budget_{"CM ids", "cm-ids", BudgetLimit{1024, 4096}};
  Budget* event_budget_ = nullptr;
  cm::EngineLimits engine_limits_;
  uint64_t refused_passive_ = 0;
  std::map<uint8_t, Port> ports_;
  std::map<uint32_t, Session> sessions_;
  CmServiceCounters counters_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace openib::ibd
