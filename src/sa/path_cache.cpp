// The path-record cache; behaviour in path_cache.hpp and docs/sa.md.
#include "sa/path_cache.hpp"

#include <utility>

namespace openib::sa {

namespace {
bool on_port(const PathKey& k, std::uint8_t port) { return port == 0 || k.port() == port; }
}  // namespace

PathCache::PathCache(PathQuerier& querier, const Clock& clock, PathCacheConfig cfg)
    : querier_(querier), clock_(clock), cfg_(cfg) {
  if (cfg_.max_entries == 0) cfg_.max_entries = 1;
}

PathCache::~PathCache() {
  alive_.reset();
  auto pending = std::exchange(pending_, {});
  for (auto& [key, p] : pending)
    for (auto& w : p.waiters) w(Error{ECANCELED, "path cache closed before the SA answered"});
}

void PathCache::observe(const PathKey& key, const Entry* e, bool was_positive) {
  if (!on_entry_) return;
  if (e && e->record) on_entry_(key, &*e->record, e->stale);
  else if (was_positive) on_entry_(key, nullptr, false);
}

PathCache::Map::iterator PathCache::erase(Map::iterator it) {
  const bool positive = it->second.record.has_value();
  const PathKey key = it->first;
  auto next = entries_.erase(it);
  if (positive) observe(key, nullptr);
  return next;
}

bool PathCache::expired(const Entry& e, Clock::time_point now) const {
  return now - e.fetched >= (e.record ? cfg_.max_age : cfg_.negative_ttl);
}

// Before `key` is added: at the cap, one entry goes.
void PathCache::make_room(const PathKey& key) {
  if (entries_.size() < cfg_.max_entries || entries_.contains(key)) return;
  erase(entries_.begin());  // through erase(): the observer hears of it
  ++counters_.evicted;
}

void PathCache::lookup(const PathKey& key, LookupFn done) {
  if (auto it = entries_.find(key); it != entries_.end()) {
    if (!expired(it->second, clock_.now())) {
      const std::optional<PathRecord> rec = it->second.record;
      const bool stale = rec && it->second.stale;
      ++(!rec ? counters_.negative_hits : stale ? counters_.stale_hits : counters_.hits);
      done(rec);  // may call back in: `it` is not used after this
      if (stale && !pending_.contains(key)) {
        auto again = entries_.find(key);
        if (again != entries_.end() && again->second.stale) {
          ++counters_.revalidations;
          start_query(key, {});
        }
      }
      return;
    }
    if (it->second.record) ++counters_.aged_out;
    erase(it);
  }
  ++counters_.misses;
  if (auto p = pending_.find(key); p != pending_.end()) {
    ++counters_.coalesced;
    p->second.waiters.push_back(std::move(done));
    return;
  }
  std::vector<LookupFn> waiters;
  waiters.push_back(std::move(done));
  start_query(key, std::move(waiters));
}

std::optional<PathRecord> PathCache::peek(const PathKey& key) const {
  auto it = entries_.find(key);
  if (it == entries_.end() || expired(it->second, clock_.now())) return std::nullopt;
  return it->second.record;
}

void PathCache::start_query(const PathKey& key, std::vector<LookupFn> waiters) {
  const std::uint64_t id = ++next_id_;
  Pending& p = pending_[key];
  p.id = id;
  p.waiters = std::move(waiters);
  p.obsolete = false;
  ++counters_.queries;
  // The querier may answer before query_path() returns: nothing of this
  // frame is touched after the call.
  querier_.query_path(key, [this, alive = std::weak_ptr<char>(alive_), key, id](PathAnswer a) {
    if (alive.expired()) return;
    on_answer(key, id, std::move(a));
  });
}

void PathCache::on_answer(const PathKey& key, std::uint64_t id, PathAnswer answer) {
  auto pit = pending_.find(key);
  if (pit == pending_.end() || pit->second.id != id) return;  // superseded
  Pending p = std::move(pit->second);
  pending_.erase(pit);
  auto eit = entries_.find(key);
  if (p.obsolete) {
    // The answer may predate an event that touched this key: not cached,
    // asked again if anyone still needs it.
    if (!p.waiters.empty() || eit != entries_.end()) {
      ++counters_.requeried;
      start_query(key, std::move(p.waiters));
    }
    return;
  }
  std::optional<std::pair<PathRecord, std::optional<PathRecord>>> change;
  if (!answer.ok()) {
    ++counters_.query_errors;  // a stale entry stays stale (and served) until the age ceiling
  } else {
    const std::optional<PathRecord>& now = answer.value();
    if (eit != entries_.end() && eit->second.record && eit->second.record != now)
      change.emplace(*eit->second.record, now);
    const bool was_positive = eit != entries_.end() && eit->second.record;
    make_room(key);
    const Entry& e = entries_[key] = Entry{now, clock_.now(), false};
    observe(key, &e, was_positive);
  }
  if (change) {
    ++counters_.changes;
    if (on_change_) on_change_(key, change->first, change->second);
  }
  for (auto& w : p.waiters) w(answer.ok() ? PathAnswer(answer.value()) : PathAnswer(answer.error()));
}

template <class Pred>
void PathCache::mark_pending_obsolete(Pred affected) {
  for (auto& [key, p] : pending_)
    if (affected(key)) p.obsolete = true;
}

void PathCache::invalidate(Invalidation level, std::uint8_t port) {
  switch (level) {
    case Invalidation::kLight: ++counters_.light; break;
    case Invalidation::kNormal: ++counters_.normal; break;
    case Invalidation::kHeavy: ++counters_.heavy; break;
  }
  for (auto it = entries_.begin(); it != entries_.end();) {
    if (!on_port(it->first, port)) {
      ++it;
    } else if (level == Invalidation::kLight && it->second.record) {
      it->second.stale = true;
      observe(it->first, &it->second);
      ++it;
    } else {
      it = erase(it);  // light: a "no path" may be wrong under the new SM
    }
  }
  mark_pending_obsolete([port](const PathKey& k) { return on_port(k, port); });
}

bool PathCache::on_gid_trap(std::uint16_t trap_number, const Gid& gid) {
  const bool out = trap_number == 65, in = trap_number == 64;  // IBA 14.2.5.1 Table 131
  if (!out && !in) return false;
  ++(out ? counters_.gid_out : counters_.gid_in);
  for (auto it = entries_.begin(); it != entries_.end();) {
    const Entry& e = it->second;
    const bool for_gid = it->first.dgid() == gid || (e.record && e.record->dgid == gid);
    const bool drop = for_gid && (out || !e.record);
    it = drop ? erase(it) : std::next(it);
  }
  mark_pending_obsolete([&gid](const PathKey& k) { return k.dgid() == gid; });
  return true;
}

std::size_t PathCache::flush(std::uint8_t port, const std::optional<Gid>& dgid) {
  ++counters_.flushed;
  auto for_gid = [&dgid](const PathKey& k, const Entry* e) {
    return !dgid || k.dgid() == *dgid || (e && e->record && e->record->dgid == *dgid);
  };
  std::size_t n = 0;
  for (auto it = entries_.begin(); it != entries_.end();) {
    const bool drop = on_port(it->first, port) && for_gid(it->first, &it->second);
    it = drop ? (++n, erase(it)) : std::next(it);
  }
  mark_pending_obsolete([&](const PathKey& k) { return on_port(k, port) && for_gid(k, nullptr); });
  return n;
}

std::size_t PathCache::revalidate_stale(std::size_t max) {
  std::vector<PathKey> keys;
  for (const auto& [key, e] : entries_) {
    if (keys.size() >= max) break;
    if (e.stale && e.record && !pending_.contains(key)) keys.push_back(key);
  }
  for (const auto& k : keys) {
    ++counters_.revalidations;
    start_query(k, {});
  }
  return keys.size();
}

std::size_t PathCache::sweep() {
  const auto now = clock_.now();
  std::size_t n = 0;
  for (auto it = entries_.begin(); it != entries_.end();) {
    if (expired(it->second, now)) {
      if (it->second.record) ++counters_.aged_out;
      it = erase(it);
      ++n;
    } else {
      ++it;
    }
  }
  return n;
}

std::vector<CachedPath> PathCache::snapshot(bool with_negative) const {
  const auto now = clock_.now();
  std::vector<CachedPath> out;
  for (const auto& [key, e] : entries_) {
    if ((!e.record && !with_negative) || expired(e, now)) continue;
    const auto age = std::chrono::duration_cast<std::chrono::milliseconds>(now - e.fetched);
    out.push_back({key, e.record.value_or(key.query()), age, e.stale, !e.record});
  }
  return out;
}

std::size_t PathCache::restore(const std::vector<CachedPath>& paths) {
  const auto now = clock_.now();
  std::size_t n = 0;
  for (const auto& p : paths) {
    if (p.negative || p.age >= cfg_.max_age || p.age.count() < 0 || entries_.contains(p.key)) continue;
    make_room(p.key);
    auto it = entries_.emplace(p.key, Entry{p.record, now - p.age, true}).first;
    observe(it->first, &it->second);
    ++n;
  }
  counters_.restored += n;
  return n;
}

}  // namespace openib::sa
