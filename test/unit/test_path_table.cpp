// The shared path table (src/sa/path_table.hpp, docs/sa.md "Shared table")
// in one thread: what a client reading it finds after each of ibd's
// changes, and that a table it cannot trust is refused (attach) or read
// without harm (find over garbage).
#include <catch2/catch.hpp>

#include <sys/mman.h>
#include <unistd.h>

#include <random>
#include <span>
#include <vector>

#include "path_table_fixture.hpp"

using namespace openib;
using namespace openib::sa;
using namespace openib::sa::test;

namespace {

PathTableEntry entry(std::uint8_t fill, bool stale = false) {
  PathTableEntry e;
  e.record.fill(fill);
  e.stale = stale;
  return e;
}

using L = PathTableReader::Lookup;

struct Table {
  explicit Table(std::uint32_t slots = 1024) : mem(slots) {
    auto w = PathTableWriter::format(mem.bytes(), slots);
    REQUIRE(w.ok());
    writer.emplace(std::move(*w));
    auto r = PathTableReader::attach(mem.cbytes());
    REQUIRE(r.ok());
    reader.emplace(*r);
  }
  L find(const PathTableKey& k, PathTableEntry* out = nullptr) const { return reader->find(k, out); }
  std::uint64_t word(std::size_t off) const {
    std::uint64_t v;
    std::memcpy(&v, mem.cbytes().data() + off, 8);
    return v;
  }
  TableMemory mem;
  std::optional<PathTableWriter> writer;
  std::optional<PathTableReader> reader;
};

}  // namespace

TEST_CASE("path table: put, find, overwrite, erase") {
  Table t;
  PathTableEntry got;
  CHECK(t.find(table_key(1)) == L::kMiss);
  REQUIRE(t.writer->put(table_key(1), entry(0x11)));
  REQUIRE(t.writer->put(table_key(2), entry(0x22, true)));
  CHECK(t.writer->size() == 2);
  REQUIRE(t.find(table_key(1), &got) == L::kHit);
  CHECK(got.record == entry(0x11).record);
  CHECK_FALSE(got.stale);
  REQUIRE(t.find(table_key(2), &got) == L::kHit);
  CHECK(got.record == entry(0x22).record);
  CHECK(got.stale);
  // The key is the port, the P_Key and the DGID: each differs apart.
  CHECK(t.find(table_key(1, 2)) == L::kMiss);
  CHECK(t.find(table_key(1, 1, 0x8001)) == L::kMiss);
  CHECK(t.find(table_key(3)) == L::kMiss);

  // Overwrite in place: one entry, the new record, no longer stale.
  REQUIRE(t.writer->put(table_key(2), entry(0x33)));
  CHECK(t.writer->size() == 2);
  REQUIRE(t.find(table_key(2), &got) == L::kHit);
  CHECK(got.record == entry(0x33).record);
  CHECK_FALSE(got.stale);

  CHECK(t.writer->erase(table_key(1)));
  CHECK_FALSE(t.writer->erase(table_key(1)));
  CHECK(t.find(table_key(1)) == L::kMiss);
  CHECK(t.find(table_key(2)) == L::kHit);
  CHECK(t.writer->size() == 1);
}

TEST_CASE("path table: every change bumps the header's generation; live count in the header") {
  Table t;
  const std::uint64_t g0 = t.word(32);
  REQUIRE(t.writer->put(table_key(1), entry(1)));
  const std::uint64_t g1 = t.word(32);
  CHECK(g1 > g0);
  CHECK(t.word(40) == 1);
  REQUIRE(t.writer->erase(table_key(1)));
  CHECK(t.word(32) > g1);
  CHECK(t.word(40) == 0);
}

TEST_CASE("path table: clear(port) drops that port's entries, clear() all") {
  Table t;
  for (std::uint32_t n = 0; n < 100; ++n) {
    REQUIRE(t.writer->put(table_key(n, 1), entry(1)));
    REQUIRE(t.writer->put(table_key(n, 2), entry(2)));
  }
  t.writer->clear(2);
  CHECK(t.writer->size() == 100);
  for (std::uint32_t n = 0; n < 100; ++n) {
    CHECK(t.find(table_key(n, 1)) == L::kHit);
    CHECK(t.find(table_key(n, 2)) == L::kMiss);
  }
  // What was cleared goes back in.
  REQUIRE(t.writer->put(table_key(7, 2), entry(2)));
  CHECK(t.find(table_key(7, 2)) == L::kHit);
  t.writer->clear();
  CHECK(t.writer->size() == 0);
  for (std::uint32_t n = 0; n < 100; ++n) CHECK(t.find(table_key(n, 1)) == L::kMiss);
  // Cleared slots are empty again (state byte at slot offset 8 is 0), not
  // tombstones that every miss would probe past.
  for (std::uint32_t i = 0; i < 1024; ++i)
    CHECK(t.mem.cbytes()[kPathTableHeaderBytes + i * kPathTableSlotBytes + 8] == std::byte{0});
}

TEST_CASE("path table: pkey 0 is the port's default P_Key from the header") {
  Table t;
  // No default known for port 1 yet: a pkey-0 key can be neither put nor found.
  CHECK_FALSE(t.writer->put(table_key(1, 1, 0), entry(1)));
  CHECK(t.find(table_key(1, 1, 0)) == L::kMiss);
  t.writer->set_default_pkey(1, 0xffff);
  t.writer->set_default_pkey(2, 0x8001);
  REQUIRE(t.writer->put(table_key(1, 1, 0), entry(1)));
  CHECK(t.find(table_key(1, 1, 0xffff)) == L::kHit);
  CHECK(t.find(table_key(1, 1, 0)) == L::kHit);
  REQUIRE(t.writer->put(table_key(2, 2, 0x8001), entry(2)));
  CHECK(t.find(table_key(2, 2, 0)) == L::kHit);
  CHECK(t.find(table_key(2, 1, 0)) == L::kMiss);
  CHECK(t.writer->erase(table_key(2, 2, 0)));
  CHECK(t.find(table_key(2, 2, 0x8001)) == L::kMiss);
  // Port 0 is no port.
  CHECK_FALSE(t.writer->put(table_key(1, 0), entry(1)));
  CHECK(t.find(table_key(1, 0)) == L::kMiss);
}

TEST_CASE("path table: a full probe window refuses a put; a tombstone is reused") {
  Table t(64);
  std::vector<std::uint32_t> in, out;
  for (std::uint32_t n = 0; n < 1000; ++n) (t.writer->put(table_key(n), entry(static_cast<std::uint8_t>(n))) ? in : out).push_back(n);
  REQUIRE(in.size() == 64);  // every slot live
  CHECK(t.writer->size() == 64);
  PathTableEntry got;
  for (auto n : in) {
    REQUIRE(t.find(table_key(n), &got) == L::kHit);
    CHECK(got.record[0] == static_cast<std::uint8_t>(n));
  }
  for (auto n : out) CHECK(t.find(table_key(n)) == L::kMiss);

  // One erased: its slot is a tombstone that a later put reuses (there is
  // no empty slot to turn it into one): the first refused key whose window
  // holds that slot fits, and then the table is full again.
  REQUIRE(t.writer->erase(table_key(in[10])));
  CHECK(t.find(table_key(in[10])) == L::kMiss);
  std::size_t fitted = 0;
  std::uint32_t which = 0;
  for (auto n : out)
    if (t.writer->put(table_key(n), entry(0xee))) ++fitted, which = n;
  CHECK(fitted == 1);
  CHECK(t.writer->size() == 64);
  REQUIRE(t.find(table_key(which), &got) == L::kHit);
  CHECK(got.record[0] == 0xee);
  CHECK(t.find(table_key(in[10])) == L::kMiss);
  for (std::size_t i = 0; i < in.size(); ++i)
    if (i != 10) CHECK(t.find(table_key(in[i])) == L::kHit);
}

TEST_CASE("path table: a key put after an erase in its window is found past the tombstones") {
  Table t(64);
  std::vector<std::uint32_t> in;
  for (std::uint32_t n = 0; in.size() < 40; ++n)
    if (t.writer->put(table_key(n), entry(1))) in.push_back(n);
  for (std::size_t i = 0; i < in.size(); i += 2) REQUIRE(t.writer->erase(table_key(in[i])));
  for (std::size_t i = 1; i < in.size(); i += 2) CHECK(t.find(table_key(in[i])) == L::kHit);
  for (std::size_t i = 0; i < in.size(); i += 2) CHECK(t.find(table_key(in[i])) == L::kMiss);
  // Overwriting a key that lies past a tombstone updates it, no duplicate.
  for (std::size_t i = 1; i < in.size(); i += 2) REQUIRE(t.writer->put(table_key(in[i]), entry(2)));
  CHECK(t.writer->size() == in.size() / 2);
  PathTableEntry got;
  for (std::size_t i = 1; i < in.size(); i += 2) {
    REQUIRE(t.find(table_key(in[i]), &got) == L::kHit);
    CHECK(got.record[5] == 2);
  }
}

TEST_CASE("path table: a slot being written is retried, then kBusy") {
  Table t(64);
  REQUIRE(t.writer->put(table_key(9), entry(9)));
  // Find the slot (the DGID's last byte at slot offset 31) and make its
  // sequence odd, as if ibd stopped in the middle of writing it.
  auto bytes = t.mem.bytes();
  std::size_t slot = 0;
  for (std::size_t i = 0; i < 64; ++i)
    if (bytes[kPathTableHeaderBytes + i * kPathTableSlotBytes + 31] == std::byte{9}) slot = i;
  std::byte* seq = bytes.data() + kPathTableHeaderBytes + slot * kPathTableSlotBytes;
  CHECK(t.find(table_key(9)) == L::kHit);
  seq[0] ^= std::byte{1};
  CHECK(t.find(table_key(9)) == L::kBusy);
  seq[0] ^= std::byte{1};
  CHECK(t.find(table_key(9)) == L::kHit);
}

TEST_CASE("path table: format refuses a bad slot count or too little memory") {
  TableMemory mem(128);
  CHECK(PathTableWriter::format(mem.bytes(), 100).error().code == EINVAL);
  CHECK(PathTableWriter::format(mem.bytes(), 32).error().code == EINVAL);
  CHECK(PathTableWriter::format(mem.bytes(), 256).error().code == EINVAL);
  CHECK(PathTableWriter::format(mem.bytes().first(path_table_bytes(128) - 1), 128).error().code == EINVAL);
  CHECK(PathTableWriter::format(mem.bytes(), 128).ok());
}

TEST_CASE("path table: attach refuses a header it cannot trust (EPROTO)") {
  TableMemory mem(64);
  REQUIRE(PathTableWriter::format(mem.bytes(), 64).ok());
  auto b = mem.bytes();
  auto attach_with = [&](std::size_t off, std::uint32_t v) {
    std::uint32_t old;
    std::memcpy(&old, b.data() + off, 4);
    std::memcpy(b.data() + off, &v, 4);
    auto r = PathTableReader::attach(mem.cbytes());
    std::memcpy(b.data() + off, &old, 4);
    return r.ok() ? 0 : r.error().code;
  };
  CHECK(attach_with(0, kPathTableMagic) == 0);
  CHECK(attach_with(0, 0x12345678) == EPROTO);              // magic
  CHECK(attach_with(4, kPathTableVersion + 1) == EPROTO);   // version
  CHECK(attach_with(8, 100) == EPROTO);                     // slot count not a power of two
  CHECK(attach_with(8, 0) == EPROTO);
  CHECK(attach_with(8, 128) == EPROTO);                     // more slots than the mapping holds
  CHECK(attach_with(8, 0x80000000u) == EPROTO);
  CHECK(attach_with(12, 64) == EPROTO);                     // slot size
  CHECK(PathTableReader::attach(mem.cbytes().first(path_table_bytes(64) - 1)).error().code == EPROTO);
  CHECK(PathTableReader::attach(mem.cbytes().first(64)).error().code == EPROTO);
  CHECK(PathTableReader::attach(mem.cbytes().subspan(1)).error().code == EPROTO);  // misaligned
  auto r = PathTableReader::attach(mem.cbytes());
  REQUIRE(r.ok());
  CHECK(r->slots() == 64);
}

TEST_CASE("path table: a reader over garbage slots returns, whatever they hold") {
  constexpr std::uint32_t kSlots = 256;
  TableMemory mem(kSlots);
  REQUIRE(PathTableWriter::format(mem.bytes(), kSlots).ok());
  std::mt19937_64 rng(15);
  auto b = mem.bytes();
  std::size_t hits = 0, busy = 0;
  for (int round = 0; round < 50; ++round) {
    // Random default P_Keys, generation and slots; the header's identity
    // fields stay (else attach refuses, tested above).
    for (std::size_t off = 16; off < path_table_bytes(kSlots); off += 8) {
      const std::uint64_t v = rng();
      std::memcpy(b.data() + off, &v, 8);
    }
    // A quarter of the slots look live with an even sequence.
    for (std::size_t i = 0; i < kSlots; i += 4) {
      std::byte* s = b.data() + kPathTableHeaderBytes + i * kPathTableSlotBytes;
      s[0] &= std::byte{0xfe};
      s[8] = std::byte{1};
    }
    auto r = PathTableReader::attach(mem.cbytes());
    REQUIRE(r.ok());
    PathTableEntry got;
    for (std::size_t i = 0; i < kSlots; ++i) {
      // A key as some slot holds it, and a random one.
      const std::byte* s = b.data() + kPathTableHeaderBytes + i * kPathTableSlotBytes;
      PathTableKey k;
      k.port = static_cast<std::uint8_t>(s[9]);
      k.pkey = static_cast<std::uint16_t>(static_cast<unsigned>(s[10]) | static_cast<unsigned>(s[11]) << 8);
      std::memcpy(k.dgid.data(), s + 16, 16);
      const auto a = r->find(k, &got);
      hits += a == L::kHit;
      busy += a == L::kBusy;
      k.port = static_cast<std::uint8_t>(rng());
      k.pkey = static_cast<std::uint16_t>(rng() & 1 ? 0 : rng());
      (void)r->find(k, &got);
    }
  }
  // Garbage slots are garbage: a hit needs its key at its hash's place.
  CHECK(busy + hits < 50 * kSlots);
}

// Formatting writes the header only (the memory is zero already): ibd's
// table of 65,536 slots (8 MiB) must not be resident in every ibd before
// a path is in it (1,008 sandbox hosts: 8 GiB; docs/performance.md).
TEST_CASE("path table: format touches only the header's page; a put touches its slot's", "[path-table]") {
  constexpr std::uint32_t kSlots = 65536;
  const std::size_t bytes = path_table_bytes(kSlots);
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  REQUIRE(p != MAP_FAILED);
  const long page = ::sysconf(_SC_PAGESIZE);
  auto resident = [&] {
    std::vector<unsigned char> v((bytes + page - 1) / page);
    REQUIRE(::mincore(p, bytes, v.data()) == 0);
    size_t n = 0;
    for (unsigned char c : v) n += c & 1;
    return n;
  };
  auto mem = std::span<std::byte>(static_cast<std::byte*>(p), bytes);
  auto w = PathTableWriter::format(mem, kSlots);
  REQUIRE(w.ok());
  CHECK(resident() == 1);
  PathTableKey k{1, 0xffff, {}};
  k.dgid[15] = 7;
  REQUIRE(w->put(k, entry(3)));
  CHECK(resident() <= 3);  // the header's page, the slot's (and a probe's neighbour)
  auto r = PathTableReader::attach(std::span<const std::byte>(mem));
  REQUIRE(r.ok());
  PathTableEntry got;
  CHECK(r->find(k, &got) == PathTableReader::Lookup::kHit);
  CHECK(got.record == entry(3).record);
  ::munmap(p, bytes);
}
