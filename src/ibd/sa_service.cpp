// ibd's SA client and path cache (sa_service.hpp; docs/sa.md "In ibd").
#include "ibd/sa_service.hpp"

#include <boost/asio/post.hpp>
#include <array>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "common/log.hpp"
#include "hca/port_caps.hpp"
#include "ipoib_tap/ats.hpp"
#include "mad/mad.hpp"
#include "sa/cache_file.hpp"
#include "sa/inform_info.hpp"
#include "sa/path_query.hpp"
#include "sa/sm_records.hpp"

namespace openib::ibd {

namespace asio = boost::asio;

// Revalidations started at once after a light invalidation, and per sweep
// after it: the SA sees a bounded burst, stale entries are served meanwhile.
constexpr size_t kRevalidateBatch = 64;

SaService::SaService(asio::io_context& io, hca::Device& hca, UmadService& umad, uint8_t num_ports,
                     std::string state_dir, sa::PathCacheConfig cfg)
    : io_(io),
      hca_(hca),
      port_attrs_(io, hca),
      umad_(umad),
      num_ports_(num_ports),
      cache_(querier_, clock_, cfg),
      joins_(requester_),
      services_(requester_, clock_),
      regs_timer_(io),
      sweep_timer_(io),
      save_timer_(io),
      stop_timer_(io),
      state_dir_(std::move(state_dir)) {
  querier_.self = this;
  cache_.set_change_callback([this](const sa::PathKey& k, const sa::PathRecord&, const std::optional<sa::PathRecord>&) {
    if (on_path_change_) on_path_change_(k.port(), k.query().pkey, k.dgid());
    for (auto& o : path_observers_) o(k.port(), k.query().pkey, k.dgid());
  });
  requester_.self = this;
  joins_.set_change_handler([this](uint8_t port, const sa::McMemberRecord& r) {
    log::get("ibd")->info("sa: port {}: group {:016x}:{:016x} now has MLID {:#x}", port, sa::gid_prefix(r.mgid),
                          sa::gid_guid(r.mgid), r.mlid);
    if (on_mcast_change_) on_mcast_change_(port, r);
  });
  joins_.set_lost_handler([this](uint8_t port, const sa::Gid& mgid, sa::Owner owner, const Error& e) {
    ++mcast_lost_;
    log::get("ibd")->warn("sa: port {}: owner {:#x} lost group {:016x}:{:016x} at a rejoin: {} (asked again every 5 s)",
                          port, owner, sa::gid_prefix(mgid), sa::gid_guid(mgid), e.str());
    if (on_mcast_lost_) on_mcast_lost_(port, mgid, owner);
  });
  for (uint8_t p = 1; p <= num_ports_; ++p) {
    // Where the SA is, asked anew for each query: PortInfo's MasterSMLID
    // and MasterSMSL (IBA 14.2.5.6) as the port attribute cache has them
    // (dropped at each SM_CHANGE, docs/simhca.md §9.4, §14.3).
    auto sm = [this, p, alive = std::weak_ptr<bool>(alive_)](std::function<void(Result<sa::SmAddress>)> k) {
      port_attrs_.query(p, [k = std::move(k), alive](Result<hca::PortAttr> a) mutable {
        if (alive.expired()) return;
        if (!a) return k(a.take_error());
        k(sa::SmAddress{a->sm_lid, a->sm_sl});
      });
    };
    auto c = std::make_unique<sa::SaClient>(io_, std::move(sm));
    c->set_report_handler([this](const mad::Notice& n) { on_report(n); });
    clients_.emplace(p, std::move(c));
  }
}

SaService::~SaService() = default;

Result<void> SaService::publish_table(uint32_t slots) {
  if (slots == 0) return ok();
  OPENIB_TRY_ASSIGN(table_, PathTableShm::create(slots));
  cache_.set_entry_observer([t = table_.get()](const sa::PathKey& k, const sa::PathRecord* r, bool stale) {
    t->on_entry(k, r, stale);
  });
  log::get("ibd")->info("sa: shared path table of {} slots ({} bytes)", slots, table_->bytes());
  return ok();
}

void SaService::note_port(uint8_t port, const hca::PortAttr& a) {
  link_[port] = a.link_layer;
  if (table_) table_->set_default_pkey(port, a.pkey0);
}

Result<void> SaService::sa_port(uint8_t port) {
  if (!client(port)) return err(EINVAL, "no port {}", port);
  if (auto l = link_.find(port); l != link_.end() && !hca::cap_ib_sa(l->second))
    return err(EOPNOTSUPP, "port {} is {}: it has no SA (its routes are built from addresses)", port,
               hca::link_layer_name(l->second));
  return ok();
}

void SaService::read_port(uint8_t port) {
  if (!table_) return;
  port_attrs_.query(port, [this, port, alive = std::weak_ptr<bool>(alive_)](Result<hca::PortAttr> a) {
    if (!alive.expired() && a) note_port(port, *a);
  });
}

void SaService::arm_sweep() {
  sweep_timer_.expires_after(std::chrono::seconds(5));
  sweep_timer_.async_wait([this, alive = std::weak_ptr<bool>(alive_)](const boost::system::error_code& e) {
    if (e || alive.expired()) return;
    cache_.sweep();
    cache_.revalidate_stale(kRevalidateBatch);
    joins_.retry();
    arm_sweep();
  });
}

void SaService::arm_regs_tick() {
  regs_timer_.expires_after(std::chrono::seconds(1));
  regs_timer_.async_wait([this, alive = std::weak_ptr<bool>(alive_)](const boost::system::error_code& e) {
    if (e || alive.expired()) return;
    services_.tick();
    arm_regs_tick();
  });
}

void SaService::start() {
  arm_sweep();
  arm_regs_tick();
  if (!state_dir_.empty()) {
    for (auto& [p, c] : clients_) load(p);
    arm_save();
  }
  // Each port is asked what it is first: SA clients only where it has an
  // SA (a port whose QUERY_PORT fails is taken for InfiniBand, as before).
  for (auto& [p, c] : clients_)
    port_attrs_.query(p, [this, port = p, alive = std::weak_ptr<bool>(alive_)](Result<hca::PortAttr> a) {
      if (alive.expired()) return;
      if (a) note_port(port, *a);
      if (a && !hca::cap_ib_sa(a->link_layer))
        return log::get("ibd")->info("sa: port {} is {}: no SA client", port, hca::link_layer_name(a->link_layer));
      attach_port(port);
    });
}

void SaService::attach_port(uint8_t p) {
  umad_.watch_layer(p, [this, port = p](mad::MadLayer* l) {
    sa::SaClient& sc = *clients_.at(port);
    if (!l) {
      sc.detach();
      // The device went: the next one may give the port other LIDs.
      cache_.invalidate(sa::Invalidation::kNormal, port);
      lid_[port] = 0;
      state_.erase(port);
      return;
    }
    if (auto r = sc.attach(*l); !r)
      log::get("ibd")->warn("sa: port {}: SA client not attached: {}", port, r.error().str());
    else {
      log::get("ibd")->info("sa: port {}: SA client attached", port);
      subscribe(port);
    }
  });
}

sa::SaClient* SaService::client(uint8_t port) {
  auto it = clients_.find(port);
  return it == clients_.end() ? nullptr : it->second.get();
}

void SaService::PortQuerier::query_path(const sa::PathKey& key, sa::PathAnswerFn done) {
  sa::SaClient* c = self->client(key.port());
  if (!c) return done(err(EINVAL, "no port {}", key.port()));
  c->query_path(key, std::move(done));
}

void SaService::path_query(const proto::PathQueryReq& req, hca::Completer<Result<proto::PathRep>> done) {
  path_query(0, req, std::move(done));  // uid 0: not bounded
}

// The uid's token bucket: `query_burst_` tokens at most, `queries_per_sec_`
// more each second; one spent per query that reaches the SA. Spent, the
// bucket goes into debt down to -burst: such a query waits until its token
// has been earned (an rdma_cm resolve_route, a PATH_QUERY, is paced rather
// than failed); past that debt, EAGAIN.
Result<std::chrono::milliseconds> SaService::query_slot(uid_t uid) {
  if (uid == 0 || queries_per_sec_ == 0) return std::chrono::milliseconds(0);
  const auto now = clock_.now();
  const double burst = std::max<uint32_t>(query_burst_, 1);
  auto [it, fresh] = query_buckets_.try_emplace(uid);
  Bucket& b = it->second;
  b.tokens = fresh ? burst
                   : std::min(burst, b.tokens + std::chrono::duration<double>(now - b.at).count() * queries_per_sec_);
  b.at = now;
  if (b.tokens < 1 - burst) {
    ++queries_throttled_;
    return err(EAGAIN, "uid {}: more than {} SA queries per second (bursts of {}; --uid-sa-queries-per-sec, "
                       "--uid-sa-query-burst) and as many waiting: try again later",
               uid, queries_per_sec_, query_burst_);
  }
  b.tokens -= 1;
  if (b.tokens >= 0) return std::chrono::milliseconds(0);
  ++queries_paced_;
  return std::chrono::milliseconds(static_cast<int64_t>(std::ceil(-b.tokens * 1000.0 / queries_per_sec_)));
}

void SaService::path_query(uid_t uid, const proto::PathQueryReq& req, hca::Completer<Result<proto::PathRep>> done) {
  if (!client(req.port)) {
    asio::post(io_, [d = std::move(done), port = req.port]() mutable { d(err(EINVAL, "no port {}", port)); });
    return;
  }
  if (req.flags & ~proto::kPathFresh) {
    asio::post(io_, [d = std::move(done), f = req.flags]() mutable { d(err(EINVAL, "unknown PATH_QUERY flags {:#x}", f)); });
    return;
  }
  // The SGID (and the default P_Key) are the port's: from the port
  // attribute cache (no QUERY_PORT per query while no port event came).
  port_attrs_.query(req.port, [this, uid, req, done = std::move(done), alive = std::weak_ptr<bool>(alive_)](
                                      Result<hca::PortAttr> a) mutable {
    if (alive.expired()) return done(err(ECANCELED, "ibd is stopping"));
    if (!a) return done(a.take_error());
    note_port(req.port, *a);
    if (auto s = sa_port(req.port); !s) return done(s.take_error());
    const sa::PathKey key = default_path_key(req.port, sa::make_gid(a->gid_prefix, a->port_guid),
                                             req.pkey ? req.pkey : a->pkey0, req.dgid);
    const bool fresh = req.flags & proto::kPathFresh;
    if (!fresh && cache_.peek(key).has_value()) return lookup(key, false, true, std::move(done));
    // To the SA: within the uid's bucket (docs/sa.md "Security").
    auto slot = query_slot(uid);
    if (!slot) return done(slot.take_error());
    if (slot->count() == 0) return lookup(key, fresh, false, std::move(done));
    auto t = std::make_shared<asio::steady_timer>(io_, *slot);
    t->async_wait([this, t, key, fresh, done = std::move(done), alive](const boost::system::error_code&) mutable {
      if (alive.expired()) return done(err(ECANCELED, "ibd is stopping"));
      lookup(key, fresh, false, std::move(done));
    });
  });
}

void SaService::lookup(const sa::PathKey& key, bool fresh, bool cached, hca::Completer<Result<proto::PathRep>> done) {
  auto shared = std::make_shared<hca::Completer<Result<proto::PathRep>>>(std::move(done));
  auto answer = [shared, cached](sa::PathAnswer r) {
    if (!r) return (*shared)(r.take_error());
    if (!r->has_value()) return (*shared)(err(EHOSTUNREACH, "the SA has no path to that GID"));
    proto::PathRep rep;
    rep.source = cached ? proto::kPathFromCache : proto::kPathFromSa;
    sa::encode_path_record(std::as_writable_bytes(std::span(rep.record)), **r);
    (*shared)(std::move(rep));
  };
  if (fresh) {
    // Around the cache: straight to the SA (a stale or negative entry is
    // replaced when the cache next asks).
    return client(key.port())->query_path(key, std::move(answer));
  }
  cache_.lookup(key, std::move(answer));
}

// The device's port events at the cache's levels (docs/sa.md "In ibd"): a
// port going down loses its paths, one coming up keeps them stale (a warm
// start's restored ones too) and revalidates; SM change and
// ClientReregister light, P_Key and GID changes heavy, as Linux's IPoIB
// flushes.
void SaService::port_event(const hca::Event& e) {
  // First the port's attributes (port_attr_cache.hpp): what follows reads
  // them anew, and so does every service after this one.
  port_attrs_.on_event(e);
  using K = hca::Event::Kind;
  switch (e.kind) {
    case K::kPortState: return port_state(e.port, e.new_state);
    case K::kLidChange: return lid_changed(e.port, e.lid);
    case K::kSmChange:
    case K::kClientReregister: return port_event(e.port, sa::Invalidation::kLight);
    case K::kPkeyChange:
    case K::kGidChange: return port_event(e.port, sa::Invalidation::kHeavy);
    default: return;
  }
}

void SaService::lid_changed(uint8_t port, uint16_t lid) {
  uint16_t& had = lid_[port];
  const bool first = had == 0;
  had = lid;
  port_event(port, first ? sa::Invalidation::kLight : sa::Invalidation::kNormal);
}

void SaService::port_state(uint8_t port, uint8_t state) {
  state_[port] = state;
  port_event(port, state == hca::kPortDown ? sa::Invalidation::kNormal : sa::Invalidation::kLight);
}

void SaService::port_event(uint8_t port, sa::Invalidation level) {
  cache_.invalidate(level, port);
  if (level == sa::Invalidation::kHeavy) read_port(port);  // the P_Key at index 0 may be another
  if (level != sa::Invalidation::kLight) return;
  // The SM's changes come in bursts (SM change, ClientReregister, LID,
  // Armed, Active within milliseconds): one refresh after the burst.
  auto& t = refresh_[port];
  if (!t) t = std::make_unique<asio::steady_timer>(io_);
  t->expires_after(std::chrono::milliseconds(100));
  t->async_wait([this, port, alive = std::weak_ptr<bool>(alive_)](const boost::system::error_code& e) {
    if (e || alive.expired()) return;
    refresh(port);
  });
}

// After a light event: ClassPortInfo, the trap subscriptions, the joins
// and service registrations (IBA 14.4.11: redone after ClientReregister)
// and the stale paths, asked again; not
// while the port is known to be short of Active (IBA 7.2: no GMPs before
// Armed; the Active event brings the refresh).
void SaService::refresh(uint8_t port) {
  if (auto st = state_.find(port); st != state_.end() && st->second != hca::kPortActive) return;
  if (sa::SaClient* c = client(port)) c->sm_changed();
  subscribe(port);
  learn_sm(port);
  cache_.revalidate_stale(kRevalidateBatch);
  joins_.rejoin(port);
  services_.reregister(port);
}

// ---- joins and services (sa/mcast_joins.hpp, sa/service_regs.hpp) ---------

void SaService::Requester::sa_request(uint8_t port, const sa::SaRequest& req, sa::ByteVec record,
                                      sa::SaAnswerFn done) {
  sa::SaClient* c = self->client(port);
  if (!c) return done(err(EINVAL, "no port {}", port));
  c->query(req, record, std::move(done));
}

void SaService::Requester::port_gid(uint8_t port, std::function<void(Result<sa::Gid>)> done) {
  self->port_attrs_.query(port, [done = std::move(done), alive = std::weak_ptr<bool>(self->alive_)](
                                        Result<hca::PortAttr> a) {
    if (alive.expired()) return;
    if (!a) return done(a.take_error());
    done(sa::make_gid(a->gid_prefix, a->port_guid));
  });
}

namespace {
template <class T> void fail_later(asio::io_context& io, hca::Completer<Result<T>> done, Error e) {
  asio::post(io, [d = std::move(done), e = std::move(e)]() mutable { d(std::move(e)); });
}
sa::Gid to_gid(const std::array<uint8_t, 16>& a) {
  sa::Gid g;
  std::copy(a.begin(), a.end(), g.begin());
  return g;
}
}  // namespace

void SaService::set_limits(BudgetLimit mcast_joins, BudgetLimit services, uint32_t queries_per_sec,
                           uint32_t query_burst) {
  join_budget_.set_limit(mcast_joins);
  service_budget_.set_limit(services);
  queries_per_sec_ = queries_per_sec;
  query_burst_ = query_burst;
}

namespace {
// The client a budget charges: the owner without bit 31 (the RDMA CM's
// joins are owned by client | kCmaJoinOwnerBit, cma_service.hpp).
uint32_t budget_client(uint32_t owner) { return owner & 0x7FFFFFFFu; }
// Gives back what `charges` holds for `c` (its owner first), if anything.
template <class Charge>
void give_back(Budget& b, std::map<Charge, uid_t>& charges, const Charge& c) {
  auto it = charges.find(c);
  if (it == charges.end()) return;
  b.give(budget_client(std::get<0>(c)), it->second);
  charges.erase(it);
}
}  // namespace

void SaService::give_join(const JoinCharge& c) { give_back(join_budget_, join_charges_, c); }

void SaService::join_settled(const JoinCharge& c) {
  if (!joins_.is_member(std::get<0>(c), std::get<1>(c), std::get<2>(c))) give_join(c);
}

void SaService::give_service(const ServiceCharge& c) { give_back(service_budget_, service_charges_, c); }

void SaService::service_settled(const ServiceCharge& c) {
  const auto& [owner, port, id, gid, pkey] = c;
  if (!services_.holds(owner, port, id, gid, pkey)) give_service(c);
}

void SaService::mcast_join(uint32_t owner, uid_t uid, const proto::McastJoinReq& req,
                           hca::Completer<Result<proto::McastJoinRep>> done) {
  const JoinCharge charge{owner, req.port, to_gid(req.mgid)};
  // A new membership (not more bits of one held) counts (issue 29 finding 6).
  if (!join_charges_.contains(charge)) {
    if (auto t = join_budget_.take(budget_client(owner), uid); !t)
      return fail_later(io_, std::move(done), t.take_error());
    join_charges_.emplace(charge, uid);
  }
  start_join(owner, sa::JoinRequest{}, req, std::move(done), [this, charge] { join_settled(charge); });
}

void SaService::mcast_join(uint32_t owner, const proto::McastJoinReq& req,
                           hca::Completer<Result<proto::McastJoinRep>> done) {
  sa::JoinRequest j;
  j.trusted = true;
  start_join(owner, j, req, std::move(done), [] {});
}

void SaService::start_join(uint32_t owner, sa::JoinRequest j, const proto::McastJoinReq& req,
                           hca::Completer<Result<proto::McastJoinRep>> done, std::function<void()> settled) {
  auto shared = std::make_shared<hca::Completer<Result<proto::McastJoinRep>>>(std::move(done));
  if (auto s = sa_port(req.port); !s) {
    settled();
    return fail_later(io_, std::move(*shared), s.take_error());
  }
  if (req.flags & ~proto::kMcastCreate) {
    settled();
    return fail_later(io_, std::move(*shared), err(EINVAL, "unknown MCAST_JOIN flags {:#x}", req.flags));
  }
  j.port = req.port;
  j.mgid = to_gid(req.mgid);
  j.join_state = req.join_state;
  j.create = req.flags & proto::kMcastCreate;
  j.qkey = req.qkey;
  j.sl = req.sl;
  j.tclass = req.tclass;
  j.flow_label = req.flow_label;
  j.mtu = req.mtu;
  j.rate = req.rate;
  j.hop_limit = req.hop_limit;
  auto answer = [shared, settled = std::move(settled)](Result<sa::McMemberRecord> r) {
    settled();
    if (!r) return (*shared)(r.take_error());
    proto::McastJoinRep rep;
    sa::encode_mcmember_record(std::as_writable_bytes(std::span(rep.record)), *r);
    (*shared)(std::move(rep));
  };
  if (req.pkey) {
    j.pkey = req.pkey;
    return joins_.join(owner, j, std::move(answer));
  }
  // P_Key 0: the port's P_Key at index 0.
  port_attrs_.query(req.port, [this, owner, j, answer = std::move(answer),
                                   alive = std::weak_ptr<bool>(alive_)](Result<hca::PortAttr> a) mutable {
    if (alive.expired()) return answer(err(ECANCELED, "ibd is stopping"));
    if (!a) return answer(a.take_error());
    j.pkey = a->pkey0;
    joins_.join(owner, j, std::move(answer));
  });
}

Result<void> SaService::mcast_leave(uint32_t owner, const proto::McastLeaveReq& req) {
  OPENIB_TRY(joins_.leave(owner, req.port, to_gid(req.mgid)));
  give_join(JoinCharge{owner, req.port, to_gid(req.mgid)});
  return ok();
}

namespace {
// ATS (ipoib_tap/ats.hpp): OpenIB's range 0x10000CE1_00_415453 ..
// 0x10000CE1_FF_415453 (the slot in bits 24..31), or the ATS name (DAPL
// looks records up by name and address, whatever the ServiceID).
bool is_ats(const sa::ServiceRecord& r) {
  return (r.service_id & ~(uint64_t{0xFF} << 24)) == ipoib::kAtsServiceId || r.service_name == ipoib::kAtsServiceName;
}
}  // namespace

void SaService::service_set(uint32_t owner, uid_t uid, const proto::ServiceReq& req,
                            hca::Completer<Result<proto::ServiceRep>> done) {
  auto rec = sa::decode_service_record(std::as_bytes(std::span(req.record)));
  if (!rec) return fail_later(io_, std::move(done), rec.take_error());
  // Issue 29 finding 2: ATS records say which host has an IP address;
  // only ibd publishes them, for its own addresses.
  if (is_ats(*rec)) {
    ++reserved_refused_;
    return fail_later(io_, std::move(done),
                      err(EACCES, "service {:#x} ({}): ATS records are ibd's own (its IPoIB addresses)",
                          rec->service_id, rec->service_name));
  }
  const ServiceCharge charge{owner, req.port, rec->service_id, rec->service_gid, rec->service_pkey};
  if (!service_charges_.contains(charge)) {
    if (auto t = service_budget_.take(budget_client(owner), uid); !t)
      return fail_later(io_, std::move(done), t.take_error());
    service_charges_.emplace(charge, uid);
  }
  start_service(owner, req, std::move(done), [this, charge] { service_settled(charge); });
}

void SaService::service_set(uint32_t owner, const proto::ServiceReq& req,
                            hca::Completer<Result<proto::ServiceRep>> done) {
  start_service(owner, req, std::move(done), nullptr);  // ibd's own: set again every minute
}

// `settled` (a client's: its budget) runs once the registration is
// answered; none for ibd's own, which ServiceRegs sets again every
// kOwnRefresh (a record someone else deleted comes back).
void SaService::start_service(uint32_t owner, const proto::ServiceReq& req,
                              hca::Completer<Result<proto::ServiceRep>> done, std::function<void()> settled) {
  const bool own = !settled;
  if (own) settled = [] {};
  auto rec = sa::decode_service_record(std::as_bytes(std::span(req.record)));
  auto port_ok = sa_port(req.port);
  if (!port_ok || !rec) {
    settled();
    return fail_later(io_, std::move(done), !port_ok ? port_ok.take_error() : rec.take_error());
  }
  auto shared = std::make_shared<hca::Completer<Result<proto::ServiceRep>>>(std::move(done));
  services_.register_service(owner, req.port, *rec, [shared, settled = std::move(settled)](Result<sa::ServiceRecord> r) {
    settled();
    if (!r) return (*shared)(r.take_error());
    proto::ServiceRep rep;
    sa::encode_service_record(std::as_writable_bytes(std::span(rep.record)), *r);
    (*shared)(std::move(rep));
  }, own);
}

Result<void> SaService::service_delete(uint32_t owner, const proto::ServiceReq& req) {
  OPENIB_TRY_ASSIGN(sa::ServiceRecord rec, sa::decode_service_record(std::as_bytes(std::span(req.record))));
  OPENIB_TRY(services_.unregister(owner, req.port, rec.service_id, rec.service_gid, rec.service_pkey));
  give_service(ServiceCharge{owner, req.port, rec.service_id, rec.service_gid, rec.service_pkey});
  return ok();
}

void SaService::client_gone(uint32_t owner) {
  joins_.owner_gone(owner);
  services_.owner_gone(owner);
  std::vector<JoinCharge> joins;
  for (const auto& [c, uid] : join_charges_)
    if (std::get<0>(c) == owner) joins.push_back(c);
  for (const auto& c : joins) give_join(c);
  std::vector<ServiceCharge> services;
  for (const auto& [c, uid] : service_charges_)
    if (std::get<0>(c) == owner) services.push_back(c);
  for (const auto& c : services) give_service(c);
}

// The SM's port GUID, for the cache file's tag: SubnAdmGet(NodeRecord)
// for PortInfo's MasterSMLID (IBA 15.2.5.2; NodeInfo's PortGUID is that
// of the port with the LID, IBA 14.2.5.3).
void SaService::learn_sm(uint8_t port) {
  port_attrs_.query(port, [this, port, alive = std::weak_ptr<bool>(alive_)](Result<hca::PortAttr> a) {
    if (alive.expired() || !a || a->sm_lid == 0) return;
    sa::SaClient* c = client(port);
    if (!c || !c->attached()) return;
    sa::NodeRecord q;
    q.lid = a->sm_lid;
    mad::ByteVec rec(sa::kNodeRecordBytes);
    sa::encode_node_record(rec, q);
    sa::SaRequest req;
    req.method = mad::method::kGet;
    req.attr_id = sa::attr::kNodeRecord;
    req.comp_mask = sa::nr_mask::kLid;
    c->query(req, rec, [this, port, alive](Result<mad::ByteVec> r) {
      if (alive.expired()) return;
      auto recs = r ? sa::sa_answer_records(*r, sa::attr::kNodeRecord) : r.take_error();
      auto node = recs && !recs->empty() ? sa::decode_node_record(recs->front())
                                         : Result<sa::NodeRecord>(err(ENOENT, "no NodeRecord for the SM's LID"));
      if (!recs || !node) {
        ++sm_lookups_failed_;
        return log::get("ibd")->info("sa: port {}: the SM's port GUID not learned: {}", port,
                                     (recs ? node.error() : recs.error()).str());
      }
      sm_known(port, node->node_info.port_guid);
    });
  });
}

void SaService::sm_known(uint8_t port, uint64_t guid) {
  sm_guid_[port] = guid;
  auto f = file_sm_guid_.find(port);
  if (f == file_sm_guid_.end()) return;
  const uint64_t from_file = f->second;
  file_sm_guid_.erase(f);  // compared once: later paths are this SM's
  if (from_file == 0 || from_file == guid) return;
  ++other_sm_;
  log::get("ibd")->info("sa: port {}: the cache file came from SM {:016x}, the SM is {:016x}: its paths dropped",
                        port, from_file, guid);
  cache_.invalidate(sa::Invalidation::kNormal, port);
}

// ---- the cache file (sa/cache_file.hpp) ------------------------------------

namespace {
uint64_t unix_ms() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}
}  // namespace

// The port's subnet prefix first (the file's tag), then the file.
void SaService::load(uint8_t port) {
  port_attrs_.query(port, [this, port, alive = std::weak_ptr<bool>(alive_)](Result<hca::PortAttr> a) mutable {
    if (alive.expired()) return;
    if (!a) {
      ++load_errors_;
      return log::get("ibd")->warn("sa: port {}: path cache not loaded: {}", port, a.error().str());
    }
    subnet_prefix_[port] = a->gid_prefix;
    note_port(port, *a);
    const std::string path = sa::cache_file_path(state_dir_, port);
    auto f = sa::load_cache_file(path, sa::CacheFileTag{a->gid_prefix, 0}, unix_ms());
    if (!f) {  // logged by load_cache_file; a missing file is no error
      if (f.error().code != ENOENT) ++load_errors_;
      return;
    }
    std::vector<sa::CachedPath> mine;
    for (auto& e : f->paths)
      if (e.key.port() == port) mine.push_back(std::move(e));
    const size_t n = cache_.restore(mine);
    loaded_ += n;
    // Until the SM is known, the file's paths are its SM's (the tag saved).
    if (!sm_guid_.contains(port)) {
      file_sm_guid_[port] = f->tag.sm_port_guid;
      sm_guid_[port] = f->tag.sm_port_guid;
    }
    log::get("ibd")->info("sa: port {}: {} of {} saved paths restored from {} (stale until revalidated)", port, n,
                          f->paths.size(), path);
  });
}

void SaService::save() {
  if (state_dir_.empty()) return;
  for (auto& [p, c] : clients_) save_port(p);
}

void SaService::save_port(uint8_t port) {
  auto prefix = subnet_prefix_.find(port);
  if (prefix == subnet_prefix_.end()) return;  // never loaded: the tag is not known
  sa::CacheFile f;
  f.tag = sa::CacheFileTag{prefix->second, sm_guid_.contains(port) ? sm_guid_.at(port) : 0};
  f.saved_unix_ms = unix_ms();
  for (auto& e : cache_.snapshot())
    if (e.key.port() == port) f.paths.push_back(std::move(e));
  // What would be written, but the ages: unchanged entries are not saved again.
  std::string sig;
  for (const auto& e : f.paths) {
    mad::ByteVec b(sa::kPathRecordBytes * 2);
    sa::encode_path_record(std::span(b).first(sa::kPathRecordBytes), e.key.query());
    sa::encode_path_record(std::span(b).subspan(sa::kPathRecordBytes), e.record);
    sig.append(reinterpret_cast<const char*>(b.data()), b.size());
    sig.push_back(e.stale ? 's' : 'f');
  }
  if (auto it = saved_sig_.find(port); it != saved_sig_.end() && it->second == sig) return;
  std::error_code ec;
  std::filesystem::create_directories(state_dir_, ec);
  if (auto r = sa::save_cache_file(sa::cache_file_path(state_dir_, port), f); !r) {
    ++save_errors_;
    log::get("ibd")->warn("sa: port {}: saving the path cache: {}", port, r.error().str());
    return;
  }
  ++saves_;
  saved_sig_[port] = std::move(sig);
  log::get("ibd")->debug("sa: port {}: {} paths saved", port, f.paths.size());
}

void SaService::arm_save() {
  save_timer_.expires_after(std::chrono::seconds(30));
  save_timer_.async_wait([this, alive = std::weak_ptr<bool>(alive_)](const boost::system::error_code& e) {
    if (e || alive.expired()) return;
    save();
    arm_save();
  });
}

// Traps 64 and 65 (GID in/out of service), 66 and 67 (multicast group
// created/deleted) for this port's SA client.
namespace {
constexpr std::array<uint16_t, 4> kTraps{sa::gid_trap::kGidInService, sa::gid_trap::kGidOutOfService,
                                         sa::gid_trap::kMcGroupCreated, sa::gid_trap::kMcGroupDeleted};
}  // namespace

void SaService::subscribe(uint8_t port) {
  sa::SaClient* c = client(port);
  if (!c || !c->attached() || stopping_) return;
  for (uint16_t trap : kTraps) {
    c->subscribe(trap, true, [this, port, trap, alive = std::weak_ptr<bool>(alive_)](Result<void> r) {
      if (!alive.expired()) subscribed(port, trap, true, r);
    });
  }
}

void SaService::subscribed(uint8_t port, uint16_t trap, bool on, const Result<void>& r) {
  const char* what = on ? "subscrib" : "unsubscrib";
  if (!r) {
    ++subscribe_errors_;
    return log::get("ibd")->info("sa: port {}: {}ing {} trap {}: {}", port, what, on ? "to" : "from", trap,
                                 r.error().str());
  }
  ++(on ? subscribed_ : unsubscribed_);
  log::get("ibd")->info("sa: port {}: {}ed {} trap {}", port, what, on ? "to" : "from", trap);
}

void SaService::shutdown(std::chrono::milliseconds bound, std::function<void()> done) {
  stopping_ = true;
  stopped_ = std::move(done);
  auto finish = [this] {
    if (!stopped_) return;
    stop_timer_.cancel();
    auto d = std::move(stopped_);
    stopped_ = nullptr;
    asio::post(io_, std::move(d));  // never inside the caller's call
  };
  unsubscribes_left_ = 1;  // this function's own: answers inside the loop below do not finish early
  for (auto& [p, c] : clients_) {
    if (!c->attached()) continue;
    const uint8_t port = p;  // a structured binding is not capturable (clang, C++20)
    for (uint16_t trap : kTraps) {
      ++unsubscribes_left_;
      c->subscribe(trap, false, [this, port, trap, finish, alive = std::weak_ptr<bool>(alive_)](Result<void> r) {
        if (alive.expired()) return;
        subscribed(port, trap, false, r);
        if (--unsubscribes_left_ == 0) finish();
      });
    }
  }
  if (--unsubscribes_left_ == 0) return finish();
  stop_timer_.expires_after(bound);
  stop_timer_.async_wait([this, finish, alive = std::weak_ptr<bool>(alive_)](const boost::system::error_code& e) {
    if (e || alive.expired()) return;
    log::get("ibd")->info("sa: {} trap unsubscriptions unanswered; stopping anyway", unsubscribes_left_);
    finish();
  });
}

void SaService::on_report(const mad::Notice& n) {
  auto t = sa::parse_gid_trap(n);
  if (!t) return;
  ++gid_reports_;
  if (t->trap_number == sa::gid_trap::kMcGroupCreated || t->trap_number == sa::gid_trap::kMcGroupDeleted) {
    ++(t->trap_number == sa::gid_trap::kMcGroupCreated ? mcast_created_reports_ : mcast_deleted_reports_);
    log::get("ibd")->info("sa: trap {}: multicast group {:016x}:{:016x} {}", t->trap_number, sa::gid_prefix(t->gid),
                          sa::gid_guid(t->gid), t->trap_number == sa::gid_trap::kMcGroupCreated ? "created" : "deleted");
    if (on_mcast_trap_) on_mcast_trap_(t->trap_number, t->gid);
    return;
  }
  const bool acted = cache_.on_gid_trap(t->trap_number, t->gid);
  log::get("ibd")->info("sa: trap {} for GID {:016x}:{:016x}{}", t->trap_number, sa::gid_prefix(t->gid),
                        sa::gid_guid(t->gid), acted ? "" : " (ignored)");
}

// INFO's counters, in this order: the SA clients', multicast and service
// registrations', the path cache's, the shared path table's, the port
// attribute cache's.
std::vector<std::pair<std::string, uint64_t>> SaService::counter_list() const {
  CounterList out;
  client_counters(out);
  mcast_service_counters(out);
  path_cache_counters(out);
  path_table_counters(out);
  for (auto& c : port_attrs_.counter_list()) out.push_back(std::move(c));
  return out;
}

void SaService::client_counters(CounterList& out) const {
  // The SA clients' counters, summed over the ports: one table of names.
  using C = sa::SaClientCounters;
  static constexpr std::pair<const char*, uint64_t C::*> kClient[] = {
      {"sa_queries", &C::queries}, {"sa_answers", &C::answers},
      {"sa_timeouts", &C::timeouts}, {"sa_busy", &C::busy},
      {"sa_errors", &C::errors}, {"sa_class_port_info", &C::class_port_info},
      {"sa_redirects", &C::redirects}, {"sa_redirect_fallbacks", &C::redirect_fallbacks},
      {"sa_reports", &C::reports}, {"sa_queued", &C::queued}};
  for (const auto& [name, field] : kClient) {
    uint64_t sum = 0;
    for (const auto& [p, c] : clients_) sum += c->counters().*field;
    out.emplace_back(name, sum);
  }
}

void SaService::mcast_service_counters(CounterList& out) const {
  const auto& j = joins_.counters();
  const auto& v = services_.counters();
  out.insert(out.end(), {{"sa_mcast_created_reports", mcast_created_reports_},
                         {"sa_mcast_deleted_reports", mcast_deleted_reports_},
                         {"mcast_groups", joins_.groups()},
                         {"mcast_joins", j.joins},
                         {"mcast_leaves", j.leaves},
                         {"mcast_sets", j.sets},
                         {"mcast_deletes", j.deletes},
                         {"mcast_cached", j.cached},
                         {"mcast_shared", j.shared},
                         {"mcast_errors", j.errors},
                         {"mcast_rejoins", j.rejoins},
                         {"mcast_mlid_changes", j.mlid_changes},
                         {"mcast_bad_create", j.bad_create},
                         {"mcast_lost", mcast_lost_},
                         {"mcast_quota_denied", join_budget_.denied()},
                         {"service_quota_denied", service_budget_.denied()},
                         {"service_reserved_refused", reserved_refused_},
                         {"sa_queries_throttled", queries_throttled_},
                         {"sa_queries_paced", queries_paced_},
                         {"service_registrations", services_.size()},
                         {"service_registered", v.registered},
                         {"service_removed", v.removed},
                         {"service_sets", v.sets},
                         {"service_renewals", v.renewals},
                         {"service_deletes", v.deletes},
                         {"service_errors", v.errors},
                         {"service_reregisters", v.reregisters}});
}

void SaService::path_cache_counters(CounterList& out) const {
  const auto& k = cache_.counters();
  out.insert(out.end(), {{"sa_gid_reports", gid_reports_},
                         {"sa_subscriptions", subscribed_},
                         {"sa_subscribe_errors", subscribe_errors_},
                         {"sa_unsubscriptions", unsubscribed_},
                         {"path_cache_entries", cache_.size()},
                         {"path_cache_hits", k.hits},
                         {"path_cache_stale_hits", k.stale_hits},
                         {"path_cache_negative_hits", k.negative_hits},
                         {"path_cache_misses", k.misses},
                         {"path_cache_coalesced", k.coalesced},
                         {"path_cache_queries", k.queries},
                         {"path_cache_query_errors", k.query_errors},
                         {"path_cache_pending", cache_.pending()},
                         {"path_cache_revalidations", k.revalidations},
                         {"path_cache_requeried", k.requeried},
                         {"path_cache_changes", k.changes},
                         {"path_cache_invalidations_light", k.light},
                         {"path_cache_invalidations_normal", k.normal},
                         {"path_cache_invalidations_heavy", k.heavy},
                         {"path_cache_gid_out", k.gid_out},
                         {"path_cache_gid_in", k.gid_in},
                         {"path_cache_flushed", k.flushed},
                         {"path_cache_other_sm", other_sm_},
                         {"sa_sm_lookup_errors", sm_lookups_failed_},
                         {"path_cache_evicted", k.evicted},
                         {"path_cache_restored", loaded_},
                         {"path_cache_load_errors", load_errors_},
                         {"path_cache_saves", saves_},
                         {"path_cache_save_errors", save_errors_}});
}

void SaService::path_table_counters(CounterList& out) const {
  if (!table_) return;
  const auto& t = table_->counters();
  out.insert(out.end(), {{"path_table_slots", table_->slots()},
                         {"path_table_entries", table_->size()},
                         {"path_table_published", t.published},
                         {"path_table_withdrawn", t.withdrawn},
                         {"path_table_full", t.full}});
}

}  // namespace openib::ibd
