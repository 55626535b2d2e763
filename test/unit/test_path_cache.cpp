// The path-record cache (src/sa/path_cache.hpp) over a fake SA and a fake
// clock: what a lookup returns and how many SA queries it costs, through
// every event the cache honours.
#include <catch2/catch.hpp>

#include <algorithm>
#include <deque>
#include <memory>

#include "sa/path_cache.hpp"

using namespace openib;
using namespace openib::sa;
using namespace std::chrono_literals;

namespace {

// An SA that answers when the test says so.
class FakeSa final : public PathQuerier {
 public:
  struct Query {
    PathKey key;
    PathAnswerFn done;
  };
  void query_path(const PathKey& key, PathAnswerFn done) override { asked.push_back({key, std::move(done)}); }
  // Answers the oldest open query.
  void answer(PathAnswer a) {
    REQUIRE(!asked.empty());
    Query q = std::move(asked.front());
    asked.pop_front();
    q.done(std::move(a));
  }
  std::deque<Query> asked;
};

class FakeClock final : public Clock {
 public:
  time_point now() const override { return t; }
  time_point t{std::chrono::hours(1)};
};

Gid guid_gid(std::uint64_t guid) { return make_gid(0xfe80000000000000ull, guid); }

PathKey key_to(std::uint64_t guid, std::uint8_t port = 1) {
  PathRecord q;
  q.sgid = guid_gid(0x100);
  q.dgid = guid_gid(guid);
  q.pkey = 0xffff;
  q.numb_path = 1;
  return PathKey(port, pr_mask::kSgid | pr_mask::kDgid | pr_mask::kPKey | pr_mask::kNumbPath, q);
}

PathRecord path_to(std::uint64_t guid, std::uint16_t dlid) {
  PathRecord p;
  p.sgid = guid_gid(0x100);
  p.dgid = guid_gid(guid);
  p.dlid = dlid;
  p.slid = 1;
  p.pkey = 0xffff;
  p.mtu = 4;
  p.rate = 3;
  return p;
}

// What a lookup got, if it got anything yet.
struct Got {
  bool called = false;
  PathAnswer answer{std::optional<PathRecord>{}};
};
PathCache::LookupFn into(Got& g) {
  return [&g](PathAnswer a) {
    g.called = true;
    g.answer = std::move(a);
  };
}
std::uint16_t dlid_of(const Got& g) {
  REQUIRE(g.called);
  REQUIRE(g.answer.ok());
  REQUIRE(g.answer.value().has_value());
  return g.answer.value()->dlid;
}

struct Fixture {
  FakeSa sa;
  FakeClock clock;
  PathCache cache{sa, clock, PathCacheConfig{10min, 2s}};
};

}  // namespace

TEST_CASE_METHOD(Fixture, "a miss asks the SA once; the answer serves later lookups from memory", "[sa][cache]") {
  Got g1;
  cache.lookup(key_to(2), into(g1));
  CHECK_FALSE(g1.called);
  REQUIRE(sa.asked.size() == 1);
  CHECK(sa.asked.front().key == key_to(2));
  sa.answer(std::optional(path_to(2, 20)));
  CHECK(dlid_of(g1) == 20);
  Got g2;
  cache.lookup(key_to(2), into(g2));
  CHECK(dlid_of(g2) == 20);
  CHECK(sa.asked.empty());
  CHECK(cache.peek(key_to(2))->dlid == 20);
  CHECK(cache.counters().queries == 1);
  CHECK(cache.counters().hits == 1);
  CHECK(cache.counters().misses == 1);
}

TEST_CASE_METHOD(Fixture, "the selectors asked for are part of the key", "[sa][cache]") {
  PathRecord q = key_to(2).query();
  q.sl = 3;
  const PathKey with_sl(1, key_to(2).comp_mask() | pr_mask::kSl, q);
  Got a, b, c;
  cache.lookup(key_to(2), into(a));
  cache.lookup(with_sl, into(b));
  cache.lookup(key_to(2, 2), into(c));  // same question on port 2
  CHECK(sa.asked.size() == 3);
  // An unselected field (SL without its mask bit) does not make a new key.
  const PathKey sl_unselected(1, key_to(2).comp_mask(), q);
  CHECK(sl_unselected == key_to(2));
  while (!sa.asked.empty()) sa.answer(std::optional(path_to(2, 20)));
  CHECK((a.called && b.called && c.called));
}

TEST_CASE_METHOD(Fixture, "concurrent lookups of one key share one SA query", "[sa][cache]") {
  Got g[3];
  for (auto& x : g) cache.lookup(key_to(2), into(x));
  CHECK(sa.asked.size() == 1);
  sa.answer(std::optional(path_to(2, 20)));
  for (auto& x : g) CHECK(dlid_of(x) == 20);
  CHECK(cache.counters().coalesced == 2);
}

TEST_CASE_METHOD(Fixture, "a 'no path' answer is kept briefly as a negative entry", "[sa][cache]") {
  Got g1;
  cache.lookup(key_to(3), into(g1));
  sa.answer(std::optional<PathRecord>{});
  REQUIRE(g1.called);
  CHECK(g1.answer.ok());
  CHECK_FALSE(g1.answer.value().has_value());
  Got g2;
  cache.lookup(key_to(3), into(g2));  // within the negative TTL: no query
  CHECK(g2.called);
  CHECK_FALSE(g2.answer.value().has_value());
  CHECK(sa.asked.empty());
  CHECK(cache.counters().negative_hits == 1);
  clock.t += 2s;  // the TTL is over: asked again
  Got g3;
  cache.lookup(key_to(3), into(g3));
  CHECK_FALSE(g3.called);
  CHECK(sa.asked.size() == 1);
  sa.answer(std::optional(path_to(3, 30)));
  CHECK(dlid_of(g3) == 30);
}

TEST_CASE_METHOD(Fixture, "no entry older than the age ceiling is served", "[sa][cache]") {
  Got g1;
  cache.lookup(key_to(2), into(g1));
  sa.answer(std::optional(path_to(2, 20)));
  clock.t += 9min;
  Got g2;
  cache.lookup(key_to(2), into(g2));
  CHECK(dlid_of(g2) == 20);
  clock.t += 1min;
  Got g3;
  cache.lookup(key_to(2), into(g3));
  CHECK_FALSE(g3.called);
  CHECK_FALSE(cache.peek(key_to(2)));
  REQUIRE(sa.asked.size() == 1);
  sa.answer(std::optional(path_to(2, 21)));
  CHECK(dlid_of(g3) == 21);
  CHECK(cache.counters().aged_out == 1);
}

TEST_CASE_METHOD(Fixture, "an SA error reaches every waiter and is not cached", "[sa][cache]") {
  Got g1, g2;
  cache.lookup(key_to(2), into(g1));
  cache.lookup(key_to(2), into(g2));
  sa.answer(Error{ETIMEDOUT, "SA did not answer"});
  REQUIRE(g1.called);
  CHECK(g1.answer.error().code == ETIMEDOUT);
  CHECK(g2.answer.error().code == ETIMEDOUT);
  Got g3;
  cache.lookup(key_to(2), into(g3));
  CHECK_FALSE(g3.called);
  CHECK(sa.asked.size() == 1);
  sa.answer(std::optional(path_to(2, 20)));
  CHECK(dlid_of(g3) == 20);
  CHECK(cache.counters().query_errors == 1);
}

TEST_CASE_METHOD(Fixture, "light invalidation: stale entries are served while revalidated; a changed path is reported",
                 "[sa][cache]") {
  for (std::uint64_t g : {2, 3}) {
    Got x;
    cache.lookup(key_to(g), into(x));
    sa.answer(std::optional(path_to(g, static_cast<std::uint16_t>(10 * g))));
  }
  std::vector<std::pair<PathRecord, std::optional<PathRecord>>> changes;
  cache.set_change_callback([&](const PathKey&, const PathRecord& old, const std::optional<PathRecord>& now) {
    changes.emplace_back(old, now);
  });
  cache.invalidate(Invalidation::kLight, 0);
  CHECK(sa.asked.empty());  // nothing is asked until used or pumped
  Got g1;
  cache.lookup(key_to(2), into(g1));
  CHECK(dlid_of(g1) == 20);          // served at once, stale
  REQUIRE(sa.asked.size() == 1);     // and revalidated
  Got g2;
  cache.lookup(key_to(2), into(g2));  // still stale: served, not asked twice
  CHECK(dlid_of(g2) == 20);
  CHECK(sa.asked.size() == 1);
  sa.answer(std::optional(path_to(2, 22)));  // the SM moved it
  REQUIRE(changes.size() == 1);
  CHECK(changes[0].first.dlid == 20);
  CHECK(changes[0].second->dlid == 22);
  Got g3;
  cache.lookup(key_to(2), into(g3));
  CHECK(dlid_of(g3) == 22);
  CHECK(sa.asked.empty());
  // The background pump revalidates the rest; an unchanged answer is not reported.
  CHECK(cache.revalidate_stale(10) == 1);
  CHECK(cache.revalidate_stale(10) == 0);  // already being asked
  sa.answer(std::optional(path_to(3, 30)));
  CHECK(changes.size() == 1);
  CHECK(cache.counters().stale_hits == 2);
  CHECK(cache.counters().revalidations == 2);
  CHECK(cache.counters().changes == 1);
  CHECK(cache.counters().light == 1);
}

TEST_CASE_METHOD(Fixture, "a revalidation answering 'no path' replaces the entry and is reported", "[sa][cache]") {
  Got x;
  cache.lookup(key_to(2), into(x));
  sa.answer(std::optional(path_to(2, 20)));
  int reported = 0;
  cache.set_change_callback([&](const PathKey&, const PathRecord&, const std::optional<PathRecord>& now) {
    ++reported;
    CHECK_FALSE(now);
  });
  cache.invalidate(Invalidation::kLight, 1);
  CHECK(cache.revalidate_stale(10) == 1);
  sa.answer(std::optional<PathRecord>{});
  CHECK(reported == 1);
  Got g;
  cache.lookup(key_to(2), into(g));
  CHECK(g.called);
  CHECK_FALSE(g.answer.value().has_value());
}

TEST_CASE_METHOD(Fixture, "normal and heavy invalidation drop the port's entries only", "[sa][cache]") {
  auto fill = [&] {
    for (std::uint8_t port : {1, 2}) {
      Got x;
      cache.lookup(key_to(2, port), into(x));
      if (!sa.asked.empty()) sa.answer(std::optional(path_to(2, 20)));
    }
  };
  fill();
  REQUIRE(cache.size() == 2);
  cache.invalidate(Invalidation::kNormal, 1);
  CHECK_FALSE(cache.peek(key_to(2, 1)));
  CHECK(cache.peek(key_to(2, 2)));
  fill();
  cache.invalidate(Invalidation::kHeavy, 2);
  CHECK(cache.peek(key_to(2, 1)));
  CHECK_FALSE(cache.peek(key_to(2, 2)));
  Got g;
  cache.lookup(key_to(2, 2), into(g));
  CHECK_FALSE(g.called);  // asked again, not served stale
  CHECK(sa.asked.size() == 1);
  sa.answer(std::optional(path_to(2, 21)));
  CHECK(dlid_of(g) == 21);
  CHECK(cache.counters().normal == 1);
  CHECK(cache.counters().heavy == 1);
}

TEST_CASE_METHOD(Fixture, "trap 65 drops a GID's entries on every port; trap 64 drops its negative entries",
                 "[sa][cache]") {
  Got a, b, c, d;
  cache.lookup(key_to(2, 1), into(a));
  sa.answer(std::optional(path_to(2, 20)));
  cache.lookup(key_to(2, 2), into(b));
  sa.answer(std::optional(path_to(2, 20)));
  cache.lookup(key_to(3), into(c));
  sa.answer(std::optional(path_to(3, 30)));
  cache.lookup(key_to(4), into(d));
  sa.answer(std::optional<PathRecord>{});  // GID 4 is not there (yet)
  CHECK(cache.size() == 4);

  CHECK(cache.on_gid_trap(65, guid_gid(2)));
  CHECK_FALSE(cache.peek(key_to(2, 1)));
  CHECK_FALSE(cache.peek(key_to(2, 2)));
  CHECK(cache.peek(key_to(3)));

  CHECK(cache.on_gid_trap(64, guid_gid(3)));  // GID 3's positive entry stays
  CHECK(cache.peek(key_to(3)));
  CHECK(cache.on_gid_trap(64, guid_gid(4)));  // GID 4 came: its "no path" goes
  Got e;
  cache.lookup(key_to(4), into(e));
  CHECK_FALSE(e.called);
  CHECK(sa.asked.size() == 1);
  sa.answer(std::optional(path_to(4, 40)));
  CHECK(dlid_of(e) == 40);
  CHECK_FALSE(cache.on_gid_trap(66, guid_gid(4)));
  CHECK(cache.counters().gid_out == 1);
  CHECK(cache.counters().gid_in == 2);
}

TEST_CASE_METHOD(Fixture, "an answer that was out across an event is asked again, not cached", "[sa][cache]") {
  Got g;
  cache.lookup(key_to(2), into(g));
  cache.on_gid_trap(65, guid_gid(2));  // the answer on its way may predate this
  sa.answer(std::optional(path_to(2, 20)));
  CHECK_FALSE(g.called);
  REQUIRE(sa.asked.size() == 1);
  sa.answer(std::optional<PathRecord>{});
  REQUIRE(g.called);
  CHECK_FALSE(g.answer.value().has_value());
  CHECK(cache.counters().requeried == 1);
}

TEST_CASE_METHOD(Fixture, "snapshot and restore: a warm start serves saved paths at once and revalidates them",
                 "[sa][cache]") {
  Got x;
  cache.lookup(key_to(2), into(x));
  sa.answer(std::optional(path_to(2, 20)));
  clock.t += 1min;
  auto saved = cache.snapshot();
  REQUIRE(saved.size() == 1);
  CHECK(saved[0].age == 1min);
  CHECK(saved[0].record.dlid == 20);

  FakeSa sa2;
  PathCache warm(sa2, clock, PathCacheConfig{10min, 2s});
  auto too_old = saved[0];
  too_old.key = key_to(9);
  too_old.age = 10min;
  saved.push_back(too_old);
  CHECK(warm.restore(saved) == 1);  // the one past the ceiling is skipped
  Got g;
  warm.lookup(key_to(2), into(g));
  CHECK(dlid_of(g) == 20);       // before any SA answer
  CHECK(sa2.asked.size() == 1);  // revalidation started
  CHECK(warm.counters().stale_hits == 1);
  clock.t += 9min;  // its age counts from before the restart
  CHECK(warm.sweep() == 1);
}

TEST_CASE("a cache destroyed with lookups waiting completes them with ECANCELED", "[sa][cache]") {
  FakeSa sa;
  FakeClock clock;
  Got g;
  {
    PathCache cache(sa, clock);
    cache.lookup(key_to(2), into(g));
  }
  REQUIRE(g.called);
  CHECK(g.answer.error().code == ECANCELED);
  sa.answer(std::optional(path_to(2, 20)));  // a late answer touches nothing
}

TEST_CASE_METHOD(Fixture, "an SA answering inside query_path() works like a later answer", "[sa][cache]") {
  struct SyncSa final : PathQuerier {
    void query_path(const PathKey& k, PathAnswerFn done) override {
      ++n;
      done(std::optional(path_to(gid_guid(k.dgid()), 7)));
    }
    int n = 0;
  } sync;
  PathCache c(sync, clock);
  Got g1, g2;
  c.lookup(key_to(5), into(g1));
  c.lookup(key_to(5), into(g2));
  CHECK(dlid_of(g1) == 7);
  CHECK(dlid_of(g2) == 7);
  CHECK(sync.n == 1);
  CHECK(c.pending() == 0);
}

TEST_CASE_METHOD(Fixture, "flush drops one DGID's entries on a port, or all; the next lookup asks the SA",
                 "[sa][cache]") {
  auto fill = [&](std::uint64_t guid, std::uint8_t port) {
    Got x;
    cache.lookup(key_to(guid, port), into(x));
    if (!sa.asked.empty()) sa.answer(std::optional(path_to(guid, static_cast<std::uint16_t>(guid * 10))));
  };
  fill(2, 1);
  fill(2, 2);
  fill(3, 1);
  Got neg;
  cache.lookup(key_to(4), into(neg));
  sa.answer(std::optional<PathRecord>{});
  REQUIRE(cache.size() == 4);
  CHECK(cache.snapshot().size() == 3);
  const auto listed = cache.snapshot(/*with_negative*/ true);
  CHECK(listed.size() == 4);
  CHECK(std::count_if(listed.begin(), listed.end(), [](const CachedPath& p) { return p.negative; }) == 1);

  CHECK(cache.flush(1, guid_gid(2)) == 1);  // port 1's entry for GID 2 only
  CHECK_FALSE(cache.peek(key_to(2, 1)));
  CHECK(cache.peek(key_to(2, 2)));
  CHECK(cache.peek(key_to(3, 1)));
  Got g;
  cache.lookup(key_to(2, 1), into(g));
  CHECK_FALSE(g.called);
  REQUIRE(sa.asked.size() == 1);
  sa.answer(std::optional(path_to(2, 22)));
  CHECK(dlid_of(g) == 22);

  CHECK(cache.flush(0, guid_gid(2)) == 2);  // every port
  CHECK(cache.flush(0, guid_gid(9)) == 0);
  CHECK(cache.flush(0) == 2);  // GID 3 and the negative entry for GID 4
  CHECK(cache.size() == 0);
  CHECK(cache.counters().flushed == 4);
}

TEST_CASE_METHOD(Fixture, "an answer out across a flush of its DGID is asked again", "[sa][cache]") {
  Got g;
  cache.lookup(key_to(2), into(g));
  cache.flush(0, guid_gid(2));
  sa.answer(std::optional(path_to(2, 20)));
  CHECK_FALSE(g.called);
  REQUIRE(sa.asked.size() == 1);
  sa.answer(std::optional(path_to(2, 21)));
  CHECK(dlid_of(g) == 21);
}

TEST_CASE("at max_entries a new answer evicts one entry: the cache never grows past the cap", "[sa][cache]") {
  FakeSa sa;
  FakeClock clock;
  PathCacheConfig cfg;
  cfg.max_entries = 3;
  PathCache cache(sa, clock, cfg);
  for (std::uint64_t guid = 2; guid < 12; ++guid) {
    Got g;
    cache.lookup(key_to(guid), into(g));
    sa.answer(std::optional(path_to(guid, static_cast<std::uint16_t>(guid))));
    CHECK(dlid_of(g) == guid);  // the caller gets its answer at the cap too
    CHECK(cache.size() <= 3);
    CHECK(cache.peek(key_to(guid)));  // the newest is kept
  }
  CHECK(cache.size() == 3);
  CHECK(cache.counters().evicted == 7);
  // A key already cached is replaced in place, not counted.
  cache.invalidate(Invalidation::kLight, 1);
  CHECK(cache.revalidate_stale(10) == 3);
  while (!sa.asked.empty()) sa.answer(std::optional(path_to(11, 99)));
  CHECK(cache.counters().evicted == 7);
  // restore() at the cap keeps the cap.
  std::vector<CachedPath> saved;
  for (std::uint64_t guid = 20; guid < 25; ++guid) saved.push_back({key_to(guid), path_to(guid, 5), 1min, false});
  cache.restore(saved);
  CHECK(cache.size() == 3);
  CHECK(cache.counters().evicted == 12);
}
