// The ports' attributes, kept between port events (port_attr_cache.hpp).
#include "ibd/port_attr_cache.hpp"

#include <boost/asio/post.hpp>

namespace openib::ibd {

namespace asio = boost::asio;

PortAttrCache::PortAttrCache(asio::io_context& io, hca::Device& hca) : io_(io), hca_(hca) {}

PortAttrCache::~PortAttrCache() = default;

void PortAttrCache::query(uint8_t port, Done done) {
  Port& p = ports_[port];
  if (p.attr) {
    ++counters_.hits;
    asio::post(io_, [d = std::move(done), a = *p.attr]() mutable { d(a); });
    return;
  }
  if (p.fetch) {
    ++counters_.shared;
    p.fetch->waiters.push_back(std::move(done));
    return;
  }
  auto f = std::make_shared<Fetch>();
  f->waiters.push_back(std::move(done));
  p.fetch = f;
  ++counters_.queries;
  hca_.query_port_async(port, [this, alive = std::weak_ptr<bool>(alive_), port, generation = p.generation,
                               f](Result<hca::PortAttr> a) {
    if (!alive.expired()) fetched(port, generation, f, a);
    // Every waiter is answered, the cache gone or not (each checks its own owner).
    auto waiters = std::move(f->waiters);
    f->waiters.clear();
    for (auto& w : waiters) w(a);
  });
}

void PortAttrCache::fetched(uint8_t port, uint64_t generation, const std::shared_ptr<Fetch>& f,
                            const Result<hca::PortAttr>& a) {
  Port& p = ports_[port];
  if (p.fetch == f) p.fetch.reset();
  if (p.generation != generation) {  // invalidated while in flight: it may predate the change
    ++counters_.discarded;
    return;
  }
  if (a) p.attr = a.value();
}

std::optional<hca::PortAttr> PortAttrCache::peek(uint8_t port) const {
  auto it = ports_.find(port);
  return it == ports_.end() ? std::nullopt : it->second.attr;
}

// IBA 11.6.3's unaffiliated port events (docs/simhca.md §9.4, §14.3, §14.4).
bool PortAttrCache::on_event(const hca::Event& e) {
  using K = hca::Event::Kind;
  switch (e.kind) {
    case K::kPortState:
    case K::kLidChange:
    case K::kSmChange:
    case K::kClientReregister:
    case K::kPkeyChange:
    case K::kGidChange: invalidate(e.port); return true;
    default: return false;
  }
}

void PortAttrCache::invalidate(uint8_t port) {
  Port& p = ports_[port];
  if (p.attr || p.fetch) ++counters_.invalidations;
  p.attr.reset();
  p.fetch.reset();  // its waiters still get its answer; later queries start a new one
  ++p.generation;
}

void PortAttrCache::invalidate_all() {
  for (auto& [port, p] : ports_) invalidate(port);
}

std::vector<std::pair<std::string, uint64_t>> PortAttrCache::counter_list() const {
  return {{"port_attr_cache_hits", counters_.hits},
          {"port_attr_cache_queries", counters_.queries},
          {"port_attr_cache_shared", counters_.shared},
          {"port_attr_cache_invalidations", counters_.invalidations},
          {"port_attr_cache_discarded", counters_.discarded}};
}

}  // namespace openib::ibd
