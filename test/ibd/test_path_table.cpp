// ibd's shared path table (src/ibd/path_table_shm.hpp) kept in step with
// the path cache (src/sa/path_cache.hpp, over a fake SA and clock) through
// the cache's entry observer, read as a client reads it: the fd a client
// gets, mapped read-only, through sa::PathTableReader. And what a client
// can do to that fd: nothing that changes ibd's table. Also libopenib's
// own PathRecord decoder against src/sa's encoder.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <deque>
#include <random>

#include "clientproto/messages.hpp"
#include "ibd/path_table_shm.hpp"
#include "openib/path.hpp"
#include "sa/path_cache.hpp"

using namespace openib;
using namespace std::chrono_literals;

namespace {

class FakeSa final : public sa::PathQuerier {
 public:
  void query_path(const sa::PathKey& key, sa::PathAnswerFn done) override { asked.push_back({key, std::move(done)}); }
  void answer(sa::PathAnswer a) {
    REQUIRE(!asked.empty());
    auto q = std::move(asked.front());
    asked.pop_front();
    q.second(std::move(a));
  }
  std::deque<std::pair<sa::PathKey, sa::PathAnswerFn>> asked;
};

class FakeClock final : public sa::Clock {
 public:
  time_point now() const override { return t; }
  time_point t{std::chrono::hours(1)};
};

constexpr uint64_t kPrefix = 0xfe80000000000000ull;
const sa::Gid kSgid = sa::make_gid(kPrefix, 0x100);
sa::Gid gid(uint64_t guid) { return sa::make_gid(kPrefix, guid); }

sa::PathRecord path_to(uint64_t guid, uint16_t dlid) {
  sa::PathRecord p;
  p.sgid = kSgid;
  p.dgid = gid(guid);
  p.dlid = dlid;
  p.slid = 1;
  p.pkey = 0xffff;
  p.numb_path = 1;
  p.reversible = true;
  p.mtu = 4;
  p.rate = 3;
  p.sl = 2;
  return p;
}

// A client's view: the fd ibd hands out, mapped read-only.
struct ClientView {
  explicit ClientView(const ibd::PathTableShm& t) : bytes(t.bytes()) {
    auto fd = t.client_fd();
    REQUIRE(fd.ok());
    void* p = ::mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd->get(), 0);
    REQUIRE(p != MAP_FAILED);
    map = static_cast<const std::byte*>(p);
    auto r = sa::PathTableReader::attach(std::span(map, bytes));
    REQUIRE(r.ok());
    reader.emplace(*r);
  }
  ~ClientView() { ::munmap(const_cast<std::byte*>(map), bytes); }
  // The record for (port 1, pkey, guid), or nullopt; `stale` set.
  std::optional<sa::PathRecord> find(uint64_t guid, uint16_t pkey = 0xffff, bool* stale = nullptr) const {
    sa::PathTableEntry e;
    if (reader->find(sa::PathTableKey{1, pkey, gid(guid)}, &e) != sa::PathTableReader::Lookup::kHit) return std::nullopt;
    if (stale) *stale = e.stale;
    auto r = sa::decode_path_record(std::as_bytes(std::span(e.record)));
    REQUIRE(r.ok());
    return *r;
  }
  size_t bytes;
  const std::byte* map = nullptr;
  std::optional<sa::PathTableReader> reader;
};

struct Rig {
  FakeSa sa;
  FakeClock clock;
  sa::PathCache cache{sa, clock};
  std::unique_ptr<ibd::PathTableShm> table;
  Rig() {
    auto t = ibd::PathTableShm::create(64);
    REQUIRE(t.ok());
    table = std::move(*t);
    cache.set_entry_observer([this](const sa::PathKey& k, const sa::PathRecord* r, bool s) { table->on_entry(k, r, s); });
    table->set_default_pkey(1, 0xffff);
  }
  sa::PathKey key(uint64_t guid) { return ibd::default_path_key(1, kSgid, 0xffff, gid(guid)); }
  void fill(uint64_t guid, uint16_t dlid) {
    cache.lookup(key(guid), [](sa::PathAnswer) {});
    sa.answer(std::optional<sa::PathRecord>(path_to(guid, dlid)));
  }
};

}  // namespace

TEST_CASE("the shared path table follows the path cache", "[path-table]") {
  Rig rig;
  ClientView view(*rig.table);
  CHECK(!view.find(2));
  rig.fill(2, 20);
  auto got = view.find(2);
  REQUIRE(got);
  CHECK(*got == path_to(2, 20));
  CHECK(view.find(2, 0) == got);  // pkey 0: the port's default from the header
  CHECK(rig.table->size() == 1);

  SECTION("a lookup of another form stays in ibd") {
    sa::PathRecord q = path_to(3, 0);
    q.sl = 2;
    const sa::PathKey k(1, ibd::kDefaultPathMask | sa::pr_mask::kSl, q);
    rig.cache.lookup(k, [](sa::PathAnswer) {});
    rig.sa.answer(std::optional<sa::PathRecord>(path_to(3, 30)));
    CHECK(rig.cache.size() == 2);
    CHECK(!view.find(3));
    CHECK(rig.table->size() == 1);
  }
  SECTION("light invalidation: stale; revalidated to another record: replaced") {
    rig.cache.invalidate(sa::Invalidation::kLight, 1);
    bool stale = false;
    REQUIRE(view.find(2, 0xffff, &stale));
    CHECK(stale);
    REQUIRE(rig.cache.revalidate_stale(10) == 1);
    rig.sa.answer(std::optional<sa::PathRecord>(path_to(2, 21)));
    stale = true;
    REQUIRE(view.find(2, 0xffff, &stale));
    CHECK(view.find(2)->dlid == 21);
    CHECK(!stale);
  }
  SECTION("revalidated to no path: gone") {
    rig.cache.invalidate(sa::Invalidation::kLight, 1);
    REQUIRE(rig.cache.revalidate_stale(10) == 1);
    rig.sa.answer(std::optional<sa::PathRecord>());
    CHECK(!view.find(2));
    CHECK(rig.table->size() == 0);
  }
  SECTION("normal and heavy invalidation, trap 65: gone") {
    rig.fill(4, 40);
    rig.cache.invalidate(sa::Invalidation::kNormal, 1);
    CHECK(!view.find(2));
    CHECK(!view.find(4));
    rig.fill(2, 20);
    rig.cache.invalidate(sa::Invalidation::kHeavy, 1);
    CHECK(!view.find(2));
    rig.fill(2, 20);
    rig.cache.on_gid_trap(65, gid(2));
    CHECK(!view.find(2));
    CHECK(rig.table->size() == 0);
  }
  SECTION("aged out: gone at the sweep; restored from the file: there, stale") {
    auto saved = rig.cache.snapshot();
    rig.clock.t += 31min;
    rig.cache.sweep();
    CHECK(!view.find(2));
    for (auto& p : saved) p.age = 1min;
    CHECK(rig.cache.restore(saved) == 1);
    bool stale = false;
    REQUIRE(view.find(2, 0xffff, &stale));
    CHECK(stale);
  }
  SECTION("a full probe window: counted, the entry stays in ibd only") {
    // 64 slots and a probe limit of 32: a few hundred keys overflow some windows.
    for (uint64_t g = 100; g < 400; ++g) rig.fill(g, static_cast<uint16_t>(g));
    CHECK(rig.table->counters().full > 0);
    size_t seen = 0;
    for (uint64_t g = 100; g < 400; ++g)
      if (auto p = view.find(g)) {
        CHECK(p->dlid == g);  // never another key's record
        ++seen;
      }
    CHECK(seen == rig.table->size() - 1);  // and guid 2's
  }
}

// docs/client-protocol.md "PATH_TABLE": the client's fd is read-only and
// sealed; re-opened read-write through /proc it is still sealed.
TEST_CASE("a client cannot change or resize the shared path table", "[path-table]") {
  Rig rig;
  rig.fill(2, 20);
  ClientView view(*rig.table);
  auto fd = rig.table->client_fd();
  REQUIRE(fd.ok());
  const size_t n = rig.table->bytes();
  const std::string proc = "/proc/self/fd/" + std::to_string(fd->get());
  UniqueFd rw(::open(proc.c_str(), O_RDWR | O_CLOEXEC));  // memfds are mode 0777: this works
  for (int f : {fd->get(), rw.get()}) {
    if (f < 0) continue;
    INFO("fd " << (f == fd->get() ? "as given (O_RDONLY)" : "re-opened O_RDWR"));
    CHECK(::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_SHARED, f, 0) == MAP_FAILED);
    void* ro = ::mmap(nullptr, n, PROT_READ, MAP_SHARED, f, 0);
    REQUIRE(ro != MAP_FAILED);
    CHECK(::mprotect(ro, n, PROT_READ | PROT_WRITE) != 0);
    ::munmap(ro, n);
    CHECK(::ftruncate(f, 0) != 0);
    CHECK(::ftruncate(f, static_cast<off_t>(n * 2)) != 0);
    const char junk[8] = "garbage";
    CHECK(::pwrite(f, junk, sizeof junk, 128) < 0);
    CHECK(::fallocate(f, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, static_cast<off_t>(n)) != 0);
    CHECK(::fallocate(f, 0, static_cast<off_t>(n), 4096) != 0);
    CHECK(::fcntl(f, F_ADD_SEALS, F_SEAL_WRITE) != 0);
    CHECK(::fcntl(f, F_GET_SEALS) == (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_FUTURE_WRITE | F_SEAL_SEAL));
    // A private copy may be written; ibd's table is not.
    void* priv = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE, f, 0);
    REQUIRE(priv != MAP_FAILED);
    std::memset(priv, 0xab, n);
    ::munmap(priv, n);
  }
  CHECK(rw.valid());
  auto got = view.find(2);
  REQUIRE(got);
  CHECK(*got == path_to(2, 20));
  rig.fill(5, 50);  // ibd still writes it
  CHECK(view.find(5));
}

// libopenib decodes the wire record itself (src/lib/path_record.cpp).
TEST_CASE("libopenib's PathRecord decoder agrees with src/sa's encoder", "[path-table]") {
  std::mt19937_64 rng(15);
  for (int i = 0; i < 1000; ++i) {
    sa::PathRecord p;
    p.dgid = gid(rng());
    p.sgid = gid(rng());
    p.dlid = static_cast<uint16_t>(rng());
    p.slid = static_cast<uint16_t>(rng());
    p.raw_traffic = rng() & 1;
    p.flow_label = static_cast<uint32_t>(rng() & 0xfffff);
    p.hop_limit = static_cast<uint8_t>(rng());
    p.tclass = static_cast<uint8_t>(rng());
    p.reversible = rng() & 1;
    p.numb_path = static_cast<uint8_t>(rng() & 0x7f);
    p.pkey = static_cast<uint16_t>(rng());
    p.qos_class = static_cast<uint16_t>(rng() & 0xfff);
    p.sl = static_cast<uint8_t>(rng() & 0xf);
    p.mtu_selector = static_cast<uint8_t>(rng() & 3);
    p.mtu = static_cast<uint8_t>(rng() & 0x3f);
    p.rate_selector = static_cast<uint8_t>(rng() & 3);
    p.rate = static_cast<uint8_t>(rng() & 0x3f);
    p.packet_life_time_selector = static_cast<uint8_t>(rng() & 3);
    p.packet_life_time = static_cast<uint8_t>(rng() & 0x3f);
    p.preference = static_cast<uint8_t>(rng());
    std::array<uint8_t, 64> raw{};
    sa::encode_path_record(std::as_writable_bytes(std::span(raw)), p);
    const PathRecord d = decode_path_record(raw);
    INFO("record " << i);
    CHECK(d.dgid.raw == p.dgid);
    CHECK(d.sgid.raw == p.sgid);
    CHECK(d.dlid == p.dlid);
    CHECK(d.slid == p.slid);
    CHECK(d.flow_label == p.flow_label);
    CHECK(d.hop_limit == p.hop_limit);
    CHECK(d.tclass == p.tclass);
    CHECK(d.reversible == p.reversible);
    CHECK(d.numb_path == p.numb_path);
    CHECK(d.pkey == p.pkey);
    CHECK(d.qos_class == p.qos_class);
    CHECK(d.sl == p.sl);
    CHECK(d.mtu == p.mtu);
    CHECK(d.rate == p.rate);
    CHECK(d.packet_life_time == p.packet_life_time);
    CHECK(d.preference == p.preference);
    CHECK(d.raw == raw);
    CHECK(!d.stale);
  }
}

// docs/client-protocol.md §2: GET_ASYNC_EVENTS' events are 25 bytes from
// protocol 3 (pkey, dgid), and the 7 bytes they were before for older clients.
TEST_CASE("async events: 25 bytes from protocol 3, 7 before", "[path-table]") {
  proto::AsyncEventsRep3 r;
  r.count = 1;
  r.events[0] = proto::AsyncEvent{proto::kEventPathChanged, 1, 1, 0, 0x8001, gid(0x42)};
  const auto v3 = proto::encode(r);
  const auto v1 = proto::encode(static_cast<const proto::AsyncEventsRep&>(r));
  CHECK(v3.size() == 8 + 32 * 25);
  CHECK(v1.size() == 8 + 32 * 7);
  CHECK(std::memcmp(v3.data(), v1.data(), 8 + 7) == 0);  // the old fields, as they were
  auto back = proto::decode<proto::AsyncEventsRep3>(v3);
  REQUIRE(back.ok());
  CHECK(back->events[0].pkey == 0x8001);
  CHECK(back->events[0].dgid == gid(0x42));
  CHECK(!proto::decode<proto::AsyncEventsRep>(v3).ok());
}
