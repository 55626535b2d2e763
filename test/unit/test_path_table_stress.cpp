// The shared path table's seqlock under fire (issue 15: "a client's
// shared-table lookup racing with ibd's updates never returns a torn
// record"): one writer overwrites, erases and clears a small, half-full
// table as fast as it can while readers look its keys up, first in
// threads of one process, then in child processes that map the table
// read-only from a memfd, as clients map ibd's. Every record the writer
// puts is derived from a counter and the key, so a reader can tell a
// whole record from a mix of two; and the readers must see hits, or the
// test proves nothing. Bounded by the readers' lookup counts.
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <atomic>
#include <random>
#include <thread>

#include "path_table_fixture.hpp"

using namespace openib::sa;
using namespace openib::sa::test;

namespace {

constexpr std::uint32_t kSlots = 256;
constexpr std::uint32_t kKeys = 128;       // half full: probes and tombstones
constexpr std::uint64_t kLookups = 1'000'000;  // per reader

// Odd keys on port 2 (which clear(2) empties now and then), even on port 1.
PathTableKey stress_key(std::uint32_t k) { return table_key(k, static_cast<std::uint8_t>(1 + (k & 1))); }

// The record of write number `c` of key `k`: bytes 0-7 the counter, 8-11
// the key, every later byte a function of both; stale when c is odd.
PathTableEntry make_entry(std::uint32_t k, std::uint64_t c) {
  PathTableEntry e;
  std::memcpy(e.record.data(), &c, 8);
  std::memcpy(e.record.data() + 8, &k, 4);
  for (std::size_t i = 12; i < e.record.size(); ++i) e.record[i] = static_cast<std::uint8_t>(c * 31 + k * 7 + i);
  e.stale = (c & 1) != 0;
  return e;
}

bool whole(std::uint32_t k, const PathTableEntry& e) {
  std::uint64_t c;
  std::memcpy(&c, e.record.data(), 8);
  const PathTableEntry want = make_entry(k, c);
  return want.record == e.record && want.stale == e.stale;
}

struct Tally {
  std::uint64_t hits = 0, misses = 0, busy = 0, torn = 0;
};

Tally read_keys(const PathTableReader& r, std::uint64_t lookups, std::uint64_t seed) {
  Tally t;
  std::minstd_rand rng(static_cast<std::uint32_t>(seed));
  PathTableEntry e;
  for (std::uint64_t i = 0; i < lookups; ++i) {
    const std::uint32_t k = rng() % kKeys;
    switch (r.find(stress_key(k), &e)) {
      case PathTableReader::Lookup::kHit:
        ++t.hits;
        if (!whole(k, e)) ++t.torn;
        break;
      case PathTableReader::Lookup::kMiss: ++t.misses; break;
      case PathTableReader::Lookup::kBusy: ++t.busy; break;
    }
  }
  return t;
}

// One step of the writer: mostly overwrites, some erases, a clear(2) now
// and then (each followed by the writes that bring keys back).
class Writer {
 public:
  explicit Writer(PathTableWriter& w) : w_(w) {
    for (std::uint32_t k = 0; k < kKeys; ++k) REQUIRE(w_.put(stress_key(k), make_entry(k, ++counter_)));
  }
  void step() {
    const std::uint32_t k = rng_() % kKeys;
    const std::uint32_t op = rng_() % 64;
    if (op == 0 && ++clears_ % 16 == 0) w_.clear(2);
    else if (op < 8) w_.erase(stress_key(k));
    else (void)w_.put(stress_key(k), make_entry(k, ++counter_));
  }
  std::uint64_t writes() const { return counter_; }

 private:
  PathTableWriter& w_;
  std::mt19937 rng_{42};
  std::uint64_t counter_ = 0, clears_ = 0;
};

}  // namespace

TEST_CASE("path table stress: reader threads never see a torn record") {
  TableMemory mem(kSlots);
  auto w = PathTableWriter::format(mem.bytes(), kSlots);
  REQUIRE(w.ok());
  Writer writer(*w);
  auto r = PathTableReader::attach(mem.cbytes());
  REQUIRE(r.ok());
  std::atomic<int> running{2};
  Tally tallies[2];
  std::thread readers[2];
  for (int i = 0; i < 2; ++i)
    readers[i] = std::thread([&, i] {
      tallies[i] = read_keys(*r, kLookups, 1 + i);
      running.fetch_sub(1);
    });
  while (running.load() > 0) writer.step();
  for (auto& t : readers) t.join();
  for (const Tally& t : tallies) {
    INFO("hits " << t.hits << " misses " << t.misses << " busy " << t.busy << ", writes " << writer.writes());
    CHECK(t.torn == 0);
    CHECK(t.hits > 0);
  }
}

TEST_CASE("path table stress: reader processes mapping it read-only never see a torn record") {
  const int fd = ::memfd_create("path-table-stress", MFD_CLOEXEC);
  REQUIRE(fd >= 0);
  const std::size_t bytes = path_table_bytes(kSlots);
  REQUIRE(::ftruncate(fd, static_cast<off_t>(bytes)) == 0);
  void* m = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  REQUIRE(m != MAP_FAILED);
  auto w = PathTableWriter::format(std::span(static_cast<std::byte*>(m), bytes), kSlots);
  REQUIRE(w.ok());
  Writer writer(*w);

  // Child exit codes: 0 whole records and hits, 1 a torn record, 2 no hit,
  // 3 could not map or attach.
  pid_t kids[2];
  for (int i = 0; i < 2; ++i) {
    kids[i] = ::fork();
    REQUIRE(kids[i] >= 0);
    if (kids[i] == 0) {
      void* ro = ::mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);
      if (ro == MAP_FAILED) ::_exit(3);
      auto r = PathTableReader::attach(std::span(static_cast<const std::byte*>(ro), bytes));
      if (!r.ok()) ::_exit(3);
      const Tally t = read_keys(*r, kLookups, 10 + i);
      ::_exit(t.torn ? 1 : t.hits == 0 ? 2 : 0);
    }
  }
  int status[2] = {0, 0};
  bool done[2] = {false, false};
  while (!done[0] || !done[1]) {
    for (int n = 0; n < 1024; ++n) writer.step();
    for (int i = 0; i < 2; ++i)
      if (!done[i]) done[i] = ::waitpid(kids[i], &status[i], WNOHANG) == kids[i];
  }
  ::munmap(m, bytes);
  ::close(fd);
  INFO("writes " << writer.writes());
  for (int s : status) {
    REQUIRE(WIFEXITED(s));
    CHECK(WEXITSTATUS(s) == 0);
  }
}
