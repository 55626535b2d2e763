// ibd's SA client and path cache (sa_service.hpp; docs/sa.md "In ibd").
#include "ibd/sa_service.hpp"

#include <boost/asio/post.hpp>
#include <cstring>

#include "common/log.hpp"
#include "sa/inform_info.hpp"

namespace openib::ibd {

namespace asio = boost::asio;

// Revalidations started at once after a light invalidation, and per sweep
// after it: the SA sees a bounded burst, stale entries are served meanwhile.
constexpr size_t kRevalidateBatch = 64;

SaService::SaService(asio::io_context& io, hca::Hca& hca, UmadService& umad, uint8_t num_ports,
                     sa::PathCacheConfig cfg)
    : io_(io), hca_(hca), umad_(umad), num_ports_(num_ports), cache_(querier_, clock_, cfg), sweep_timer_(io) {
  querier_.self = this;
  for (uint8_t p = 1; p <= num_ports_; ++p) {
    // Where the SA is, asked anew for each query: PortInfo's MasterSMLID
    // and MasterSMSL (IBA 14.2.5.6) as the device has them now.
    auto sm = [this, p, alive = std::weak_ptr<bool>(alive_)](std::function<void(Result<sa::SmAddress>)> k) {
      hca_.query_port_async(p, [k = std::move(k), alive](Result<hca::PortAttr> a) mutable {
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

void SaService::arm_sweep() {
  sweep_timer_.expires_after(std::chrono::seconds(5));
  sweep_timer_.async_wait([this, alive = std::weak_ptr<bool>(alive_)](const boost::system::error_code& e) {
    if (e || alive.expired()) return;
    cache_.sweep();
    cache_.revalidate_stale(kRevalidateBatch);
    arm_sweep();
  });
}

void SaService::start() {
  arm_sweep();
  for (auto& [p, c] : clients_) {
    umad_.watch_layer(p, [this, port = p](mad::MadLayer* l) {
      sa::SaClient& sc = *clients_.at(port);
      if (!l) {
        sc.detach();
        // The device went: the next one may give the port other LIDs.
        cache_.invalidate(sa::Invalidation::kNormal, port);
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
  if (!client(req.port)) {
    asio::post(io_, [d = std::move(done), port = req.port]() mutable { d(err(EINVAL, "no port {}", port)); });
    return;
  }
  if (req.flags & ~proto::kPathFresh) {
    asio::post(io_, [d = std::move(done), f = req.flags]() mutable { d(err(EINVAL, "unknown PATH_QUERY flags {:#x}", f)); });
    return;
  }
  // The SGID (and the default P_Key) are the port's: read them first.
  hca_.query_port_async(req.port, [this, req, done = std::move(done), alive = std::weak_ptr<bool>(alive_)](
                                      Result<hca::PortAttr> a) mutable {
    if (alive.expired()) return done(err(ECANCELED, "ibd is stopping"));
    if (!a) return done(a.take_error());
    // IBA 15.2.5.16: DGID, SGID, P_Key, one path, reversible (as Linux's
    // IPoIB asks: the same path serves both directions).
    sa::PathRecord q;
    std::memcpy(q.dgid.data(), req.dgid.data(), q.dgid.size());
    q.sgid = sa::make_gid(a->gid_prefix, a->port_guid);
    q.pkey = req.pkey ? req.pkey : a->pkey0;
    q.numb_path = 1;
    q.reversible = true;
    const uint64_t mask = sa::pr_mask::kDgid | sa::pr_mask::kSgid | sa::pr_mask::kPKey | sa::pr_mask::kNumbPath |
                          sa::pr_mask::kReversible;
    const sa::PathKey key(req.port, mask, q);
    auto shared = std::make_shared<hca::Completer<Result<proto::PathRep>>>(std::move(done));
    const bool cached = !(req.flags & proto::kPathFresh) && cache_.peek(key).has_value();
    auto answer = [shared, cached](sa::PathAnswer r) {
      if (!r) return (*shared)(r.take_error());
      if (!r->has_value()) return (*shared)(err(EHOSTUNREACH, "the SA has no path to that GID"));
      proto::PathRep rep;
      rep.source = cached ? proto::kPathFromCache : proto::kPathFromSa;
      sa::encode_path_record(std::as_writable_bytes(std::span(rep.record)), **r);
      (*shared)(std::move(rep));
    };
    if (req.flags & proto::kPathFresh) {
      // Around the cache: straight to the SA (a stale or negative entry is
      // replaced when the cache next asks).
      sa::SaClient* c = client(req.port);
      return c->query_path(key, std::move(answer));
    }
    cache_.lookup(key, std::move(answer));
  });
}

void SaService::port_event(uint8_t port, sa::Invalidation level) {
  cache_.invalidate(level, port);
  if (level != sa::Invalidation::kLight) return;
  if (sa::SaClient* c = client(port)) c->sm_changed();  // its ClassPortInfo again
  subscribe(port);  // IBA 14.4.11: subscriptions are redone after ClientReregister
  cache_.revalidate_stale(kRevalidateBatch);
}

// Traps 64 and 65 (GID in/out of service) for this port's SA client.
void SaService::subscribe(uint8_t port) {
  sa::SaClient* c = client(port);
  if (!c || !c->attached()) return;
  for (uint16_t trap : {sa::gid_trap::kGidInService, sa::gid_trap::kGidOutOfService}) {
    c->subscribe(trap, true, [this, port, trap, alive = std::weak_ptr<bool>(alive_)](Result<void> r) {
      if (alive.expired()) return;
      if (r) {
        ++subscribed_;
        log::get("ibd")->info("sa: port {}: subscribed to trap {}", port, trap);
      } else {
        ++subscribe_errors_;
        log::get("ibd")->info("sa: port {}: subscribing to trap {}: {}", port, trap, r.error().str());
      }
    });
  }
}

void SaService::on_report(const mad::Notice& n) {
  auto t = sa::parse_gid_trap(n);
  if (!t) return;
  ++gid_reports_;
  const bool acted = cache_.on_gid_trap(t->trap_number, t->gid);
  log::get("ibd")->info("sa: trap {} for GID {:016x}:{:016x}{}", t->trap_number, sa::gid_prefix(t->gid),
                        sa::gid_guid(t->gid), acted ? "" : " (ignored)");
}

std::vector<std::pair<std::string, uint64_t>> SaService::counter_list() const {
  std::vector<std::pair<std::string, uint64_t>> out;
  sa::SaClientCounters t;
  for (const auto& [p, c] : clients_) {
    const auto& k = c->counters();
    t.queries += k.queries;
    t.answers += k.answers;
    t.timeouts += k.timeouts;
    t.busy += k.busy;
    t.errors += k.errors;
    t.class_port_info += k.class_port_info;
    t.redirects += k.redirects;
    t.reports += k.reports;
  }
  out.emplace_back("sa_queries", t.queries);
  out.emplace_back("sa_answers", t.answers);
  out.emplace_back("sa_timeouts", t.timeouts);
  out.emplace_back("sa_busy", t.busy);
  out.emplace_back("sa_errors", t.errors);
  out.emplace_back("sa_class_port_info", t.class_port_info);
  out.emplace_back("sa_redirects", t.redirects);
  out.emplace_back("sa_reports", t.reports);
  out.emplace_back("sa_gid_reports", gid_reports_);
  out.emplace_back("sa_subscriptions", subscribed_);
  out.emplace_back("sa_subscribe_errors", subscribe_errors_);
  const auto& k = cache_.counters();
  out.emplace_back("path_cache_entries", cache_.size());
  out.emplace_back("path_cache_hits", k.hits);
  out.emplace_back("path_cache_stale_hits", k.stale_hits);
  out.emplace_back("path_cache_negative_hits", k.negative_hits);
  out.emplace_back("path_cache_misses", k.misses);
  out.emplace_back("path_cache_coalesced", k.coalesced);
  out.emplace_back("path_cache_queries", k.queries);
  out.emplace_back("path_cache_query_errors", k.query_errors);
  out.emplace_back("path_cache_revalidations", k.revalidations);
  out.emplace_back("path_cache_changes", k.changes);
  out.emplace_back("path_cache_invalidations_light", k.light);
  out.emplace_back("path_cache_invalidations_normal", k.normal);
  out.emplace_back("path_cache_invalidations_heavy", k.heavy);
  out.emplace_back("path_cache_gid_out", k.gid_out);
  out.emplace_back("path_cache_gid_in", k.gid_in);
  return out;
}

}  // namespace openib::ibd
