// The path-record cache (issue 15 part 2; docs/sa.md "Path cache"): answers
// path lookups from memory, asks the SA (through a PathQuerier) only on a
// miss, and forgets or revalidates entries when the subnet tells it to.
//
//  - keyed by PathKey (port, ComponentMask, the selected PathRecord fields);
//  - lookups of one key while its query is out share that query (coalesced);
//  - "no path" answers are kept as negative entries for negative_ttl;
//  - no entry older than max_age is served (the age ceiling);
//  - invalidation levels, as Linux IPoIB's flush levels (ipoib_ib.c):
//      light  (ClientReregister, SM change): entries become stale; a stale
//             entry is still served, and serving it starts a revalidation;
//             revalidate_stale() revalidates the others in the background;
//      normal (port down/up, LID or LMC change): the port's entries dropped;
//      heavy  (P_Key table change): the port's entries dropped as normal
//             (IPoIB's extra work for heavy, re-reading its P_Key index,
//             is not the cache's); counted apart;
//    any answer still out for an affected key is not cached when it
//    arrives but asked again for its waiters (it may predate the event);
//  - trap 65 (GID out of service) drops every entry for that DGID, on all
//    ports; trap 64 (GID in service) drops its negative entries;
//  - a revalidation that yields a different record (or none) replaces the
//    entry and calls the change callback with the old and new record;
//  - the entry observer (set_entry_observer) hears of every positive entry
//    as it comes, changes, turns stale, or goes (dropped, aged out, or
//    replaced by "no path"): ibd mirrors them into the shared path table.
//  - flush() drops a port's (or every port's) entries, or one DGID's, at an
//    operator's request (`ibdctl paths flush`), counted as "flushed";
//  - at most max_entries entries: a new key at the cap evicts one entry
//    first (whichever the hash table lists first, not the oldest: O(1)),
//    counted as "evicted".
//
// No I/O and no timers: time comes from the Clock, and expiry is checked
// when an entry is used (sweep() frees expired entries in bulk).
// Single-threaded, like ibd's control plane; callbacks may call back in.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

#include "sa/path_key.hpp"
#include "sa/path_source.hpp"

namespace openib::sa {

enum class Invalidation : std::uint8_t { kLight, kNormal, kHeavy };

struct PathCacheConfig {
  std::chrono::milliseconds max_age = std::chrono::minutes(30);
  std::chrono::milliseconds negative_ttl = std::chrono::seconds(2);
  std::size_t max_entries = 262144;  // positive and negative; at least 1
};

struct PathCacheCounters {
  std::uint64_t hits = 0, stale_hits = 0, negative_hits = 0, misses = 0, coalesced = 0;
  std::uint64_t queries = 0, query_errors = 0, revalidations = 0, requeried = 0, changes = 0;
  std::uint64_t aged_out = 0, restored = 0, evicted = 0;
  // invalidations by cause
  std::uint64_t light = 0, normal = 0, heavy = 0, gid_out = 0, gid_in = 0, flushed = 0;
};

// An entry as snapshot() lists it and restore() takes it back (a negative
// one only for listing: `record` is then the key's query).
struct CachedPath {
  PathKey key;
  PathRecord record;
  std::chrono::milliseconds age{0};
  bool stale = false;
  bool negative = false;
};

class PathCache {
 public:
  using LookupFn = std::function<void(PathAnswer)>;
  // (key, record before, record now or nullopt for "no path now").
  using ChangeFn = std::function<void(const PathKey&, const PathRecord&, const std::optional<PathRecord>&)>;
  // (key, the positive entry's record now or nullptr: it went, stale).
  using EntryFn = std::function<void(const PathKey&, const PathRecord*, bool)>;

  PathCache(PathQuerier& querier, const Clock& clock, PathCacheConfig cfg = {});
  // Lookups still waiting are completed with ECANCELED; answers arriving
  // later are dropped.
  ~PathCache();
  PathCache(const PathCache&) = delete;
  PathCache& operator=(const PathCache&) = delete;

  // Answers at once from a usable entry (a record, or nullopt for a
  // negative entry), else when the SA answers.
  void lookup(const PathKey& key, LookupFn done);
  // The usable record for `key` if there is one; never asks the SA, never
  // starts a revalidation, counts nothing.
  std::optional<PathRecord> peek(const PathKey& key) const;

  void set_change_callback(ChangeFn fn) { on_change_ = std::move(fn); }
  // Must not call back into the cache.
  void set_entry_observer(EntryFn fn) { on_entry_ = std::move(fn); }

  // An invalidation of `port`'s entries (port 0: every port).
  void invalidate(Invalidation level, std::uint8_t port);
  // A GID trap (64 or 65; others are ignored and return false).
  bool on_gid_trap(std::uint16_t trap_number, const Gid& gid);
  // Drops `port`'s entries (port 0: every port's), only those for `dgid`
  // when given (as the key asks it or as the record answers it); returns
  // how many.
  std::size_t flush(std::uint8_t port, const std::optional<Gid>& dgid = std::nullopt);

  // Starts up to `max` revalidations of stale entries not already being
  // asked; returns how many it started.
  std::size_t revalidate_stale(std::size_t max);
  // Drops aged-out and expired negative entries; returns how many.
  std::size_t sweep();

  // The positive entries still within the age ceiling (for the file and
  // for listing; the unexpired negative ones too with `with_negative`),
  // and the way back in: restored entries are stale (served, and
  // revalidated) with the age they had; older than max_age are skipped;
  // a key already cached is kept as it is.
  std::vector<CachedPath> snapshot(bool with_negative = false) const;
  std::size_t restore(const std::vector<CachedPath>& paths);

  std::size_t size() const { return entries_.size(); }
  std::size_t pending() const { return pending_.size(); }
  const PathCacheCounters& counters() const { return counters_; }

 private:
  struct Entry {
    std::optional<PathRecord> record;  // nullopt: a negative entry
    Clock::time_point fetched;
    bool stale = false;
  };
  struct Pending {
    std::uint64_t id = 0;
    std::vector<LookupFn> waiters;
    bool obsolete = false;  // an event since it was asked
  };
  using Map = std::unordered_map<PathKey, Entry, PathKeyHash>;

  bool expired(const Entry& e, Clock::time_point now) const;
  void make_room(const PathKey& key);
  void start_query(const PathKey& key, std::vector<LookupFn> waiters);
  void on_answer(const PathKey& key, std::uint64_t id, PathAnswer answer);
  template <class Pred>
  void mark_pending_obsolete(Pred affected);
  // Tells the entry observer about `e` (nullptr: gone) if it is or was positive.
  void observe(const PathKey& key, const Entry* e, bool was_positive = true);
  Map::iterator erase(Map::iterator it);  // observed

  PathQuerier& querier_;
  const Clock& clock_;
  PathCacheConfig cfg_;
  Map entries_;
  std::unordered_map<PathKey, Pending, PathKeyHash> pending_;
  std::uint64_t next_id_ = 0;
  ChangeFn on_change_;
  EntryFn on_entry_;
  PathCacheCounters counters_;
  std::shared_ptr<char> alive_ = std::make_shared<char>();  // answers after ~PathCache are dropped
};

}  // namespace openib::sa
