// ibd's RDMA CM (docs/cma.md "In ibd"; issue 18): connections by IP address
// and port with rdma_cm's semantics, over ibd's IB CM (cm_service.hpp, as
// its in-ibd user), the ARP module (src/arp: IP -> GID through the kernel's
// neighbour table on the IPoIB interface), the SA service (routes from the
// path cache, multicast joins; a RoCE port has none: routes from the
// addresses, joins as Linux's cma_iboe_join_multicast, docs/cma.md "RoCE")
// and the wire conventions of src/cma (service
// IDs (ps << 16) + port, the 36-byte CMA header, the port table).
//
//  - Each client that said CMA_OPEN has a session: the event socket
//    (event_socket.hpp, one CmaEventMsg per datagram) and its ids, handles
//    of its own. Ids walk rdma_cm's states: IDLE -> ADDR_BOUND (bind) ->
//    ADDR_QUERY -> ADDR_RESOLVED (resolve_addr) -> ROUTE_QUERY ->
//    ROUTE_RESOLVED (resolve_route) -> CONNECT -> DISCONNECT; LISTEN.
//  - Binding: the port table, one per ibd (so two clients conflict as two
//    processes do on Linux); ports below 1024 for root / CAP_NET_ADMIN only.
//  - Listening: one IB CM listener per (HCA port, port space, port),
//    shared by the ids listening on that port (different addresses); a REQ
//    whose header passes Linux's checks (docs/cma.md "Security": unicast
//    endpoints, the destination an address of the receiving port's IPoIB
//    interface, no source of this host's from another GID) goes to the id
//    bound to that destination address, else to a wildcard one; none, a
//    full backlog or the listener's id budget spent: REJ (consumer reject,
//    as Linux's ib_cm after a refusing handler) or SIDR_REP status 2.
//  - Budgets (budget.hpp): every id (created, or a connect request's) is
//    charged to its session's client and uid; queued events' bytes to the
//    event budget. A connect request the client leaves unanswered expires
//    with the IB CM's (kTimeout).
//  - QPs: the client's QP handles travel to the IB CM as tokens (the CM
//    session is ibd's own); RC/UC QPs are moved by the IB CM, UD QPs to RTS
//    by CMA_INIT_QP with Q_Key 0x01234567 (IPoIB space: the broadcast
//    group's).
//  - A client that goes has its ids destroyed (connections disconnected,
//    ports unbound, groups left and detached).
// Single-threaded on ibd's io_context.
#pragma once

#include <boost/asio/io_context.hpp>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "arp/resolver.hpp"
#include "cma/header.hpp"
#include "cma/port_table.hpp"
#include "clientproto/messages.hpp"
#include "common/fd.hpp"
#include "hca/device.hpp"
#include "ibd/service.hpp"
#include "ibd/budget.hpp"
#include "ibd/cm_service.hpp"
#include "ibd/event_socket.hpp"
#include "ibd/sa_service.hpp"

namespace openib::ibd {

// The RDMA CM's session in the IB CM, and the owner of its multicast joins
// in the SA service (client ids count up from 1).
inline constexpr uint32_t kCmaCmOwner = 0xFFFFFFF1u;
inline constexpr uint32_t kCmaJoinOwnerBit = 0x80000000u;

struct CmaServiceCounters {
  uint64_t opens = 0, events = 0, sessions_overrun = 0;
  uint64_t connect_requests = 0, requests_refused = 0, addr_changes = 0, device_removals = 0;
  // Of requests_refused: a header naming endpoints no listener here may
  // take (docs/cma.md "Security"), a full backlog, the listener's RDMA CM
  // id budget spent. And connect requests expired unanswered.
  uint64_t requests_bad_address = 0, requests_over_backlog = 0, requests_over_budget = 0, requests_expired = 0;
  // Routes built from addresses on a port without an SA (an Ethernet port).
  uint64_t local_routes = 0;
  // Multicast joins on an Ethernet port (no SA: join_roce).
  uint64_t roce_joins = 0;
  uint64_t late_attaches_undone = 0;  // multicast attaches that completed after their join was left
};

class CmaService final : public Service {
 public:
  using Done = hca::Completer<Result<void>>;

  CmaService(boost::asio::io_context& io, hca::Device& hca, CmService& cm, SaService& sa, uint8_t num_ports);
  ~CmaService() override;
  CmaService(const CmaService&) = delete;
  CmaService& operator=(const CmaService&) = delete;

  std::string_view service_name() const override { return "cma"; }
  // CMA_OPEN ... CMA_INFO (cma_requests.cpp).
  std::vector<proto::Op> ops() const override;
  Result<void> handle(const Caller& c, proto::Message& m, Respond& done) override;

  // The clients' QPs (the server's lookup/modify, as the IB CM's).
  void set_qp_ops(CmService::QpOps ops) { qp_ = std::move(ops); }
  // The ARP module (nullptr: no IPoIB interface; address resolution fails ENODEV).
  void set_resolver(arp::Resolver* r);
  // The IPoIB port space's Q_Key (the broadcast group's; 0 while down).
  void set_ipoib_qkey(std::function<uint32_t()> f) { ipoib_qkey_ = std::move(f); }
  // The IPoIB link behind an interface on any device of this ibd (the
  // daemon's view; unset: this device's links only): a REQ whose source is
  // an address of this host must come from the GID of an interface holding
  // it (docs/cma.md "Security").
  void set_host_links(std::function<std::optional<arp::Link>(int ifindex)> f) { host_links_ = std::move(f); }
  void set_max_queued_events(size_t n) { max_queued_ = n ? n : 1; }
  // Per-client and per-uid bounds of RDMA CM ids (--client-max-cma-ids,
  // --uid-max-cma-ids), and the budget of queued event bytes the sessions'
  // event sockets are charged to (shared with the IB CM; nullptr: none).
  void set_id_limit(BudgetLimit l) { ids_budget_.set_limit(l); }
  void set_event_budget(Budget* b) { event_budget_ = b; }
  const Budget& id_budget() const { return ids_budget_; }
  // Opens the RDMA CM's session in the IB CM.
  Result<void> start();

  // Client requests (client = ibd's connection id; uid its peer's).
  Result<UniqueFd> open(uint32_t client, uid_t uid);
  Result<uint32_t> create_id(uint32_t client, const proto::CmaCreateIdReq& r);
  Result<proto::CmaAddrRep> bind(uint32_t client, const proto::CmaAddrReq& r, bool privileged);
  Result<void> resolve_addr(uint32_t client, const proto::CmaResolveAddrReq& r, bool privileged);
  Result<void> resolve_route(uint32_t client, const proto::CmaIdTimeoutReq& r);
  Result<void> listen(uint32_t client, const proto::CmaListenReq& r, bool privileged);
  void init_qp(uint32_t client, const proto::CmaQpReq& r, Done done);
  // own_qp: r.qp is the number of a QP the client moves itself
  // (CMA_CONNECT_OWN_QP, CMA_ACCEPT_OWN_QP; docs/cma.md "Own QPs").
  void connect(uint32_t client, const proto::CmaConnReq& r, Done done, bool own_qp = false);
  void accept(uint32_t client, const proto::CmaConnReq& r, Done done, bool own_qp = false);
  // The attributes of the QP's move to INIT, RTR or RTS (rdma_init_qp_attr).
  // (A connection's come from the IB CM, on an Ethernet port after its GID lookup.)
  void init_qp_attr(uint32_t client, const proto::CmaInitQpAttrReq& r, CmService::InitQpAttrDone done);
  // The RTU of an own-QP connect after kConnectResponse (rdma_establish).
  void establish(uint32_t client, uint32_t id, Done done);
  Result<void> reject(uint32_t client, const proto::CmaRejectReq& r);
  Result<void> disconnect(uint32_t client, uint32_t id);
  Result<void> destroy(uint32_t client, uint32_t id);
  void join(uint32_t client, const proto::CmaJoinReq& r, Done done);
  Result<void> leave(uint32_t client, const proto::CmaJoinReq& r);
  Result<proto::CmaIdRep> query(uint32_t client, uint32_t id);
  void client_gone(uint32_t client) override;
  // The device went: DEVICE_REMOVAL for every id on a port.
  void device_lost() override;
  size_t ids_of(uint32_t client) const;

  // CMA_INFO: the counters and gauges, and the ids of the sessions of
  // `uid` only, or of everyone when `privileged` (root, CAP_NET_ADMIN).
  std::string json(uid_t uid, bool privileged) const;
  std::vector<std::pair<std::string, uint64_t>> counter_list() const override;

 private:
  // The requests (cma_requests.cpp): one member an operation, in one table.
  using OpFn = Result<void> (CmaService::*)(const Caller& c, proto::Message& m, Respond& done);
  struct OpEntry {
    proto::Op op;
    OpFn fn;
  };
  static std::span<const OpEntry> op_table();
  Result<void> op_open(const Caller& c, proto::Message& m, Respond& done);
  Result<void> op_create_id(const Caller& c, proto::Message& m, Respond& done);
  Result<void> op_bind(const Caller& c, proto::Message& m, Respond& done);
  Result<void> op_resolve_addr(const Caller& c, proto::Message& m, Respond& done);
  Result<void> op_resolve_route(const Caller& c, proto::Message& m, Respond& done);
  Result<void> op_listen(const Caller& c, proto::Message& m, Respond& done);
  Result<void> op_init_qp(const Caller& c, proto::Message& m, Respond& done);
  Result<void> op_connect(const Caller& c, proto::Message& m, Respond& done);
  Result<void> op_accept(const Caller& c, proto::Message& m, Respond& done);
  Result<void> op_init_qp_attr(const Caller& c, proto::Message& m, Respond& done);
  Result<void> op_connect_own_qp(const Caller& c, proto::Message& m, Respond& done);
  Result<void> op_accept_own_qp(const Caller& c, proto::Message& m, Respond& done);
  Result<void> op_establish(const Caller& c, proto::Message& m, Respond& done);
  Result<void> op_reject(const Caller& c, proto::Message& m, Respond& done);
  Result<void> op_disconnect(const Caller& c, proto::Message& m, Respond& done);
  Result<void> op_destroy_id(const Caller& c, proto::Message& m, Respond& done);
  Result<void> op_join(const Caller& c, proto::Message& m, Respond& done);
  Result<void> op_leave(const Caller& c, proto::Message& m, Respond& done);
  Result<void> op_query(const Caller& c, proto::Message& m, Respond& done);
  Result<void> op_info(const Caller& c, proto::Message& m, Respond& done);

  struct Group {
    std::array<uint8_t, 16> mgid{};
    uint16_t mlid = 0;
    uint32_t qpn = 0;
    bool attached = false;
    // A RoCE group (join_roce): no SA; the charge to the multicast budget
    // is this uid's, and the kernel's membership on the netdev (IGMP/MLD)
    // lasts as long as this socket.
    bool roce = false;
    uid_t uid = 0;
    UniqueFd membership;
    uint64_t serial = 0;  // this join's (a late answer for an earlier join of the group is dropped)
  };
  struct Id {
    uint32_t client = 0, handle = 0;
    uint16_t ps = 0;
    proto::CmaState state = proto::CmaState::kIdle;
    cma::Addr src, dst;
    bool bound = false;
    uint8_t port = 0;
    std::array<uint8_t, 16> sgid{}, dgid{};
    std::array<uint8_t, 6> dmac{};  // RoCE: the next hop's MAC, as resolved (arp::Resolved::dmac)
    uint16_t pkey = 0;
    bool have_path = false;
    std::array<uint8_t, 64> path{};
    uint32_t qp = 0, qpn = 0;  // the client's QP handle and number
    bool own_qp = false;       // the client moves that QP (docs/cma.md "Own QPs")
    bool active = false;       // connect (not a connect request's)
    uint32_t cm = 0;           // the IB CM handle (connection or SIDR), 0: none
    std::vector<std::tuple<uint8_t, uint16_t, uint16_t>> listens;  // a listener's CM listeners
    uint32_t backlog = 0, pending = 0;
    uint32_t parent = 0;  // a passive id: its listener until accepted or rejected
    bool reported_disconnect = false;
    std::optional<proto::CmEventMsg> rep;  // the REP (active side), for kEstablished
    uint64_t op = 0;                        // an answer to an older request is dropped
    std::map<std::array<uint8_t, 16>, Group> groups;
  };
  struct Session {
    uid_t uid = 0;
    std::unique_ptr<EventSocket> events;
    uint32_t next_handle = 1;
    std::unordered_map<uint32_t, Id> ids;
  };
  struct CmListen {
    uint32_t cm = 0;
    uint32_t refs = 0;
  };

  Result<Id*> find(uint32_t client, uint32_t handle);
  // The client's QP named by handle, or by number (own_qp): its handle and what it is.
  Result<std::pair<uint32_t, CmService::QpInfo>> client_qp(uint32_t client, uint32_t qp, bool by_number);
  // The REP's parameters and private data into an event (rdma_cm's conn param).
  static void put_rep(proto::CmaEventMsg& m, const proto::CmEventMsg& rep);
  // resolve_route's two ways (docs/cma.md "Routes"), and its end: the path
  // (an event ROUTE_RESOLVED) or the error (ROUTE_ERROR).
  void route_from_sa(uint32_t client, Id& id);
  static Result<std::array<uint8_t, 64>> route_from_addresses(const Id& id, const hca::PortAttr& a);
  void route_done(Id& id, Result<std::array<uint8_t, 64>> path);
  Id* find_id(uint32_t client, uint32_t handle);
  // The id a late answer (address, route) is for, if it still waits for
  // that answer: the same request (`op`) and still in `state`; else nullptr.
  Id* waiting(uint32_t client, uint32_t handle, uint64_t op, proto::CmaState state);
  // emit_ok: false when the event could not be queued (the socket closed or overrun).
  bool emit_ok(const Id& id, proto::CmaEventMsg m);
  void emit(const Id& id, proto::CmaEventMsg m) { (void)emit_ok(id, std::move(m)); }
  bool emit_to(uint32_t client, proto::CmaEventMsg m);
  Result<uint32_t> new_id(Session& s, uint32_t client, uint16_t ps);
  void erase_id(uint32_t client, uint32_t handle);  // release() done; the record and its charge go
  // A passive id leaves its listener's backlog (accepted, rejected, gone).
  void unpend(Id& id);
  // The checks of a REQ's header before a listener is looked for.
  Result<void> check_request(const cma::Header& h, uint8_t hport, const proto::CmEventMsg& e) const;
  void request_expired(Id& id);
  Result<void> do_bind(Id& id, const cma::Addr& a, bool privileged);
  uint32_t qkey_of(const Id& id) const;
  // CMA_INIT_QP_ATTR without a connection (a UD id, or INIT before the REQ).
  Result<proto::CmInitQpAttrRep> own_qp_attr(const Id& id, uint8_t state) const;
  uint32_t token(uint32_t client, uint32_t qp);
  // The IB CM's events (cma_service.cpp "the IB CM's events").
  void on_cm_event(const proto::CmEventMsg& e);
  void report_disconnected(Id& id, proto::CmaEventMsg m);  // DISCONNECTED, once
  void on_established(Id& id);
  void on_cm_timeout(Id& id);
  void on_sidr_reply(Id& id, const proto::CmEventMsg& e);
  void on_cm_error(Id& id, const proto::CmEventMsg& e);
  void on_request(const proto::CmEventMsg& e);
  void refuse(const proto::CmEventMsg& e, bool sidr, uint64_t* why = nullptr);
  void release(Id& id);  // everything but the record itself
  void forget_cm(Id& id);
  void address_changed(int ifindex, const arp::Ip& a, bool added);
  // A join on a RoCE port (docs/cma.md "RoCE"), and a group's end (left,
  // or its id released).
  void join_roce(Id& id, const cma::Addr& g, uint32_t qpn, const arp::Link& link, Done done);
  void ib_joined(uint32_t client, uint32_t h, const std::array<uint8_t, 16>& mgid, const cma::Addr& g,
                 Result<proto::McastJoinRep> rep);
  void undo_attach(uint32_t client, uint32_t h, const std::array<uint8_t, 16>& mgid, uint32_t qpn, uint16_t mlid);
  void drop_group(const Id& id, const std::array<uint8_t, 16>& mgid, Group& g);
  void move_ud_qp(uint32_t client, uint32_t qp, uint8_t port, uint32_t qkey, std::vector<uint8_t> states,
                  Done done);

  boost::asio::io_context& io_;
  hca::Device& hca_;
  CmService& cm_;
  SaService& sa_;
  uint8_t num_ports_;
  CmService::QpOps qp_;
  arp::Resolver* arp_ = nullptr;
  std::function<std::optional<arp::Link>(int ifindex)> host_links_;
  bool from_holder_of(const cma::Header& h, const proto::CmEventMsg& e, const arp::Link& dst_link) const;
  std::function<uint32_t()> ipoib_qkey_;
  size_t max_queued_ = CmService::kMaxQueuedEvents;
  cma::PortTable ports_;
  std::map<uint32_t, Session> sessions_;
  std::unordered_map<uint32_t, std::pair<uint32_t, uint32_t>> by_cm_;  // IB CM handle -> (client, id)
  std::map<std::tuple<uint8_t, uint16_t, uint16_t>, CmListen> cm_listens_;  // (HCA port, ps, port)
  std::unordered_map<uint32_t, std::tuple<uint8_t, uint16_t, uint16_t>> listen_key_;  // CM listener -> key
  std::unordered_map<uint32_t, std::pair<uint32_t, uint32_t>> tokens_;  // QP token -> (client, QP handle)
  std::map<std::pair<uint32_t, uint32_t>, uint32_t> token_of_;          // (client, QP handle) -> token
  uint32_t next_token_ = 1;
  uint64_t next_join_ = 1;
  CmaServiceCounters counters_;
  Budget ids_budget_{"RDMA CM ids", "cma-ids", BudgetLimit{1024, 4096}};
  Budget* event_budget_ = nullptr;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace openib::ibd
