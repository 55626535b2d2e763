// ibd's SA client and path cache (docs/sa.md "In ibd"; issue 15): one
// SaClient (src/sa/sa_client.hpp) per port on the port's MAD layer, which
// the user-MAD service owns and hands over as it opens and goes
// (UmadService::watch_layer), and one PathCache (src/sa/path_cache.hpp)
// over them. Clients ask through PATH_QUERY (docs/client-protocol.md
// "Path records"); `ibdctl path` is one.
//
// Invalidation from the device's port events (docs/simhca.md §9.4): the
// port going down, a change from one LID to another and a device loss drop
// the port's entries ("normal"); the port coming up (Init, Armed, Active),
// its first LID, SM change and ClientReregister (IBA 14.4.11) make them
// stale and start revalidations ("light"); P_Key and GID changes drop them
// ("heavy").
// GID traps: each port's SA client subscribes to traps 64 and 65
// (InformInfo, IBA 13.4.8.3) when attached and again after a light event
// (a new SM, or ClientReregister: IBA 14.4.11 asks for it); the Reports
// feed the cache (trap 65 drops the GID's entries, 64 its negative ones).
// Traps 66 and 67 (multicast group created, deleted) are subscribed too,
// counted and handed to an observer (set_mcast_trap_handler: IPoIB later).
// shutdown() unsubscribes them all when ibd stops.
//
// Multicast joins and service registrations (docs/sa.md "Multicast joins",
// "Service registrations"): clients' MCAST_JOIN / SERVICE_SET through
// sa::McastJoins and sa::ServiceRegs over the ports' SA clients, owned by
// the client (left / deleted when it goes: client_gone()), redone at each
// refresh after a light event (IBA 14.4.11); failed ones are retried every
// 5 s, leases renewed by a 1 s tick.
//
// Expired entries (negative ones after their 2 s, positive ones past the
// age ceiling) are freed every 5 s. A client has one request in flight at
// a time (the server's rule), so lookups in flight are bounded by the
// clients; entries by what the SA answers within the TTLs.
//
// Saved to disk (issue 15 part 3): each port's positive entries go to
// `<state dir>/path-cache-port<N>.bin` (atomic: temporary file, fsync,
// rename), every 30 s when they changed and when ibd stops; at start the
// file is loaded, checked against the port's subnet prefix, and its
// entries restored stale, so they answer at once and are revalidated.
// The file is tagged with the SM's port GUID too (learned by a NodeRecord
// query for the SM's LID once the port is Active): a file from another SM
// is loaded (at start the SM is not known yet), and once the SM is known
// and is another one, the port's entries are dropped (normal), counted
// in path_cache_other_sm: another SM may have given other LIDs.
//
// The shared path table (path_table_shm.hpp; issue 15 part 4): with
// publish_table(), the cache's positive entries of PATH_QUERY's form are
// mirrored into a sealed memfd that clients map read-only (PATH_TABLE);
// each port's P_Key at index 0 is written in its header whenever ibd reads
// the port. A revalidation that changes a path calls the path-change
// handler (the server tells the clients that look paths up).
//
// Single-threaded on ibd's io_context.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "clientproto/messages.hpp"
#include "hca/completer.hpp"
#include "hca/device.hpp"
#include "ibd/service.hpp"
#include "ibd/budget.hpp"
#include "ibd/path_table_shm.hpp"
#include "ibd/port_attr_cache.hpp"
#include "ibd/quota.hpp"
#include "ibd/umad_service.hpp"
#include "sa/mcast_joins.hpp"
#include "sa/path_cache.hpp"
#include "sa/sa_client.hpp"
#include "sa/sa_requester.hpp"
#include "sa/service_regs.hpp"

namespace openib::ibd {

class SaService final : public Service {
 public:
  // `state_dir`: where each port's cache file lives (sa/cache_file.hpp);
  // empty: nothing is saved or loaded.
  SaService(boost::asio::io_context& io, hca::Device& hca, UmadService& umad, uint8_t num_ports,
            std::string state_dir, sa::PathCacheConfig cfg = {});
  ~SaService() override;
  SaService(const SaService&) = delete;
  SaService& operator=(const SaService&) = delete;

  std::string_view service_name() const override { return "sa"; }
  // PATH_QUERY, PATH_TABLE, PATH_LIST, PATH_FLUSH, MCAST_JOIN, MCAST_LEAVE,
  // SERVICE_SET, SERVICE_DELETE (sa_requests.cpp).
  std::vector<proto::Op> ops() const override;
  Result<void> handle(const Caller& c, proto::Message& m, Respond& done) override;
  // The port's state, LID and SM events, at the cache's levels below; the
  // port's attributes (port_attrs()) are dropped first.
  void port_event(const hca::Event& e) override;
  // The device went, or came back: every port's attributes dropped.
  void device_lost() override { port_attrs_.invalidate_all(); }
  void device_back() override { port_attrs_.invalidate_all(); }
  // The ports' attributes between port events (port_attr_cache.hpp): this
  // service's own reads and the RDMA CM's.
  PortAttrCache& port_attrs() { return port_attrs_; }

  // Loads each port's cache file (its entries stale: served at once and
  // revalidated), asks the user-MAD service for each port's MAD layer.
  void start();
  // Writes each port's cache file now if its entries changed since the
  // last save (also every 30 s; ibd calls it when it stops).
  void save();
  // ibd stops: each attached port's trap subscriptions are undone
  // (InformInfo Set with Subscribe 0, IBA 13.4.8.3) and none is made
  // after; `done` runs once, from the loop, when every port's SA has
  // answered (or the query failed), or after `bound`, whichever is first.
  void shutdown(std::chrono::milliseconds bound, std::function<void()> done);

  // PATH_QUERY: the path from the port's GID 0 to req.dgid within req.pkey
  // (0: the port's P_Key at index 0). EHOSTUNREACH when the SA has no path;
  // the SA client's errors otherwise (ENETUNREACH: no SM known, ETIMEDOUT,
  // EBUSY, ENODEV while the device is away).
  // ibd's own (IPoIB's neighbours, the RDMA CM's routes): not bounded.
  void path_query(const proto::PathQueryReq& req, hca::Completer<Result<proto::PathRep>> done);
  // A client's (uid `uid`: PATH_QUERY, the RDMA CM's resolve_route): a
  // query that would reach the SA (a cache miss, or kPathFresh) spends a
  // token of the uid's bucket (issue 29: uid_sa_queries_per_sec, bursts of
  // uid_sa_query_burst; uid 0 exempt; 0: no bound). With none left it
  // waits for its token, as long as no more than a burst's worth of the
  // uid's queries wait; past that, EAGAIN at once. Cached paths are
  // answered at once, whatever the bucket holds.
  void path_query(uid_t uid, const proto::PathQueryReq& req, hca::Completer<Result<proto::PathRep>> done);

  // A port event, at the cache's level for it: kNormal (state or LID
  // change: the port's paths go), kLight (SM change, ClientReregister:
  // they become stale, are still served, and are revalidated in the
  // background), kHeavy (P_Key or GID change: they go).
  void port_event(uint8_t port, sa::Invalidation level);
  // LID_CHANGE: the port's first LID in this ibd's life (from 0) keeps its
  // paths stale and revalidates them (a warm start's restored paths carry
  // the LID of the last run, which the SM usually gives again); a change
  // from one LID to another drops them (normal).
  void lid_changed(uint8_t port, uint16_t lid);
  // PORT_STATE_CHANGE: to Down normal, to Init/Armed/Active light.
  void port_state(uint8_t port, uint8_t state);

  // Creates the shared path table of `slots` slots (0: none) and mirrors
  // the cache into it from now on; call before start().
  Result<void> publish_table(uint32_t slots);
  // The table, or nullptr (none asked, or not made).
  const PathTableShm* table() const { return table_.get(); }
  // Called when a revalidation yields another record for a cached path, or
  // none: (port, the key's P_Key, the key's DGID).
  using PathChangeFn = std::function<void(uint8_t port, uint16_t pkey, const sa::Gid& dgid)>;
  void set_path_change_handler(PathChangeFn fn) { on_path_change_ = std::move(fn); }
  // MCAST_JOIN for client `owner`: the SA's MCMemberRecord. EINVAL: no
  // such port, bad flags or JoinState, not a multicast GID; EREMOTEIO:
  // the SA refused (its status named); the SA client's errors otherwise.
  // A client's join (MCAST_JOIN, and the RDMA CM's for its clients,
  // owner client | kCmaJoinOwnerBit) of user `uid`: each new membership
  // counts against the multicast budget (EDQUOT past it; see set_limits),
  // of the client (the owner without bit 31: MCAST_JOIN and the RDMA CM's
  // joins together) and of the uid (every connection of it; uid 0
  // exempt); given back when the membership ends. Its creation components
  // are its own (sa/mcast_joins.hpp): refused, they fail this owner only.
  void mcast_join(uint32_t owner, uid_t uid, const proto::McastJoinReq& req,
                  hca::Completer<Result<proto::McastJoinRep>> done);
  // ibd's own join (IPoIB): no budget; its creation components are the
  // group's (trusted: sa::JoinRequest::trusted).
  void mcast_join(uint32_t owner, const proto::McastJoinReq& req, hca::Completer<Result<proto::McastJoinRep>> done);
  // MCAST_LEAVE: ENOENT if the client is no member of the group.
  Result<void> mcast_leave(uint32_t owner, const proto::McastLeaveReq& req);
  // SERVICE_SET: the SA's echo of the record. SERVICE_DELETE: ENOENT if
  // the client did not register it. A client's (uid `uid`): within the
  // services budget (EDQUOT); EACCES for ATS records (the ServiceIDs
  // 0x10000CE1_xx_415453 or the name "DAPL Address Translation Service",
  // ipoib_tap/ats.hpp: ibd's own, mapping this host's IP addresses to its
  // GID), whoever asks. A ServiceGID of zero is the port's GID: the same
  // record as one naming it (EEXIST if another owner holds it).
  void service_set(uint32_t owner, uid_t uid, const proto::ServiceReq& req,
                   hca::Completer<Result<proto::ServiceRep>> done);
  // ibd's own registration (ATS): no budget, no reserved IDs.
  void service_set(uint32_t owner, const proto::ServiceReq& req, hca::Completer<Result<proto::ServiceRep>> done);
  Result<void> service_delete(uint32_t owner, const proto::ServiceReq& req);
  // The client went: its joins left, its registrations deleted.
  void client_gone(uint32_t owner) override;
  size_t joins_of(uint32_t owner) const { return joins_.memberships(owner); }
  size_t services_of(uint32_t owner) const { return services_.registrations(owner); }
  // The clients' bounds (quota.hpp Limits: mcast_joins, services,
  // uid_sa_queries_per_sec, uid_sa_query_burst); main sets them.
  void set_limits(BudgetLimit mcast_joins, BudgetLimit services, uint32_t queries_per_sec, uint32_t query_burst);
  // The multicast budget, for joins without an SA (the RDMA CM's on a RoCE
  // port, charged to the client without bit 31 as mcast_join's).
  Budget& join_budget() { return join_budget_; }
  // A rejoin (SM change, ClientReregister) or retry of a group `owner`
  // holds failed: the SA may have no such group for the port any more.
  // Logged and counted (mcast_lost) whoever the owner; IPoIB goes down.
  using McastLostFn = std::function<void(uint8_t port, const sa::Gid& mgid, uint32_t owner)>;
  void set_mcast_lost_handler(McastLostFn f) { on_mcast_lost_ = std::move(f); }
  // Each trap 66 / 67 Report (multicast group created / deleted) with its MGID.
  using McastTrapFn = std::function<void(uint16_t trap, const sa::Gid& mgid)>;
  void set_mcast_trap_handler(McastTrapFn f) { on_mcast_trap_ = std::move(f); }
  // A rejoin answered another MLID for a group (the SM restarted): who
  // sends to it or is attached to it must use the new one (IPoIB).
  void set_mcast_change_handler(sa::McastJoins::ChangeFn f) { on_mcast_change_ = std::move(f); }
  // More path-change observers besides the server's (IPoIB's neighbours).
  void add_path_change_observer(PathChangeFn fn) { path_observers_.push_back(std::move(fn)); }
  void clear_path_change_observers() { path_observers_.clear(); }
  // PATH_LIST (path_list.cpp): one page of the cache's entries as JSON
  // text of at most `max_bytes` (but one entry), from index `start` of
  // the sorted list; port 0: every port's.
  std::string list_json(uint8_t port, uint32_t start, size_t max_bytes) const;
  // PATH_FLUSH: drops the port's entries (0: every port's), or only
  // `dgid`'s; returns how many (PathCache::flush).
  size_t flush(uint8_t port, const std::optional<sa::Gid>& dgid);

  // Flat name -> value pairs for INFO's counters (sa.*, path_cache.*).
  std::vector<std::pair<std::string, uint64_t>> counter_list() const override;
  const sa::PathCache& cache() const { return cache_; }

 private:
  // The requests (sa_requests.cpp).
  Result<void> op_path_query(const Caller& c, proto::Message& m, Respond& done);
  Result<Reply> op_path_table(const Caller& c, proto::Message& m);
  Result<void> op_sa_member(const Caller& c, proto::Message& m, Respond& done);
  Result<Reply> op_path_list(const Caller& c, proto::Message& m);
  Result<Reply> op_path_flush(const Caller& c, proto::Message& m);
  // counter_list()'s parts, each appending its names in INFO's order.
  using CounterList = std::vector<std::pair<std::string, uint64_t>>;
  void client_counters(CounterList& out) const;         // sa_*: the SA clients', summed over the ports
  void mcast_service_counters(CounterList& out) const;  // multicast joins, service registrations, SA pacing
  void path_cache_counters(CounterList& out) const;     // GID reports and subscriptions, path_cache_*
  void path_table_counters(CounterList& out) const;     // path_table_*: the shared path table's, if any
  struct PortQuerier final : sa::PathQuerier {  // the cache's querier: the key's port's client
    SaService* self = nullptr;
    void query_path(const sa::PathKey& key, sa::PathAnswerFn done) override;
  };

  struct Requester final : sa::SaRequester {  // joins' and services' SA: the port's client
    SaService* self = nullptr;
    void sa_request(uint8_t port, const sa::SaRequest& req, sa::ByteVec record, sa::SaAnswerFn done) override;
    void port_gid(uint8_t port, std::function<void(Result<sa::Gid>)> done) override;
  };

  sa::SaClient* client(uint8_t port);
  void arm_regs_tick();
  void subscribe(uint8_t port);
  void subscribed(uint8_t port, uint16_t trap, bool on, const Result<void>& r);  // counted, logged
  void load(uint8_t port);
  void save_port(uint8_t port);
  void arm_save();
  void refresh(uint8_t port);
  void learn_sm(uint8_t port);
  void sm_known(uint8_t port, uint64_t guid);
  void on_report(const mad::Notice& n);
  void arm_sweep();
  void note_port(uint8_t port, const hca::PortAttr& a);  // the table's default P_Key, the link layer
  void read_port(uint8_t port);
  // The port's SA client on its MAD layer, once the port is known to have
  // an SA (hca::cap_ib_sa, as Linux's ib_sa_add_one asks rdma_cap_ib_sa).
  void attach_port(uint8_t port);
  // EOPNOTSUPP for a port known to have no SA (an Ethernet port: its
  // routes are built from addresses, sa/local_route.hpp), EINVAL for none.
  Result<void> sa_port(uint8_t port);

  // A client's join or registration counted in a budget: (owner, port,
  // MGID) and (owner, port, ServiceID, ServiceGID as given, P_Key) -> uid.
  using JoinCharge = std::tuple<uint32_t, uint8_t, sa::Gid>;
  using ServiceCharge = std::tuple<uint32_t, uint8_t, uint64_t, sa::Gid, uint16_t>;
  void join_settled(const JoinCharge& c);  // given back unless still a member
  void service_settled(const ServiceCharge& c);  // given back unless still registered
  void give_join(const JoinCharge& c);
  void give_service(const ServiceCharge& c);
  void start_join(uint32_t owner, sa::JoinRequest j, const proto::McastJoinReq& req,
                  hca::Completer<Result<proto::McastJoinRep>> done, std::function<void()> settled);
  void start_service(uint32_t owner, const proto::ServiceReq& req, hca::Completer<Result<proto::ServiceRep>> done,
                     std::function<void()> settled);
  // The uid's bucket (set_limits): how long the query waits for its
  // token (0: none), or EAGAIN.
  Result<std::chrono::milliseconds> query_slot(uid_t uid);
  // The path from the cache (or, `fresh`, from the SA around it).
  void lookup(const sa::PathKey& key, bool fresh, bool cached, hca::Completer<Result<proto::PathRep>> done);

  boost::asio::io_context& io_;
  hca::Device& hca_;
  PortAttrCache port_attrs_;
  UmadService& umad_;
  uint8_t num_ports_;
  std::map<uint8_t, std::unique_ptr<sa::SaClient>> clients_;
  std::map<uint8_t, hca::LinkLayer> link_;  // as the port last said (note_port)
  PortQuerier querier_;
  Requester requester_;
  sa::SteadyClock clock_;
  std::unique_ptr<PathTableShm> table_;  // before cache_: the cache's observer writes it to the end
  sa::PathCache cache_;
  PathChangeFn on_path_change_;
  sa::McastJoins joins_;
  sa::ServiceRegs services_;
  McastTrapFn on_mcast_trap_;
  sa::McastJoins::ChangeFn on_mcast_change_;
  McastLostFn on_mcast_lost_;
  Budget join_budget_{"multicast joins", "mcast-joins", Limits{}.mcast_joins};
  Budget service_budget_{"services", "services", Limits{}.services};
  std::map<JoinCharge, uid_t> join_charges_;
  std::map<ServiceCharge, uid_t> service_charges_;
  struct Bucket {
    double tokens = 0;
    sa::Clock::time_point at{};
  };
  std::map<uid_t, Bucket> query_buckets_;
  uint32_t queries_per_sec_ = Limits{}.uid_sa_queries_per_sec;
  uint32_t query_burst_ = Limits{}.uid_sa_query_burst;
  uint64_t queries_paced_ = 0, queries_throttled_ = 0, reserved_refused_ = 0, mcast_lost_ = 0;
  std::vector<PathChangeFn> path_observers_;
  boost::asio::steady_timer regs_timer_;  // lease renewals (ServiceRegs::tick)
  boost::asio::steady_timer sweep_timer_;  // frees expired entries (kSweepEvery)
  boost::asio::steady_timer save_timer_;
  boost::asio::steady_timer stop_timer_;  // shutdown()'s bound
  std::string state_dir_;
  std::map<uint8_t, uint16_t> lid_;               // per port, from LID_CHANGE
  std::map<uint8_t, uint8_t> state_;              // per port, from PORT_STATE_CHANGE
  std::map<uint8_t, std::unique_ptr<boost::asio::steady_timer>> refresh_;
  std::map<uint8_t, uint64_t> subnet_prefix_;  // per port, as last read (the file's tag)
  std::map<uint8_t, std::string> saved_sig_;   // per port: what the last save wrote
  std::map<uint8_t, uint64_t> sm_guid_;        // per port: the SM's port GUID (the file's tag)
  std::map<uint8_t, uint64_t> file_sm_guid_;   // per port: the loaded file's, until the SM is known
  uint64_t other_sm_ = 0, sm_lookups_failed_ = 0;
  uint64_t loaded_ = 0, load_errors_ = 0, saves_ = 0, save_errors_ = 0;
  uint64_t subscribed_ = 0, subscribe_errors_ = 0, unsubscribed_ = 0, gid_reports_ = 0;
  bool stopping_ = false;               // shutdown(): no more subscriptions
  size_t unsubscribes_left_ = 0;        // shutdown()'s answers still awaited
  std::function<void()> stopped_;       // shutdown()'s `done`, until called
  uint64_t mcast_created_reports_ = 0, mcast_deleted_reports_ = 0;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace openib::ibd
