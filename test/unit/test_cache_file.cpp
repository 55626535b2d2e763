// The path cache file (src/sa/cache_file*.hpp): the header at its
// documented offsets, an atomic save that loads back, and every kind of
// bad file refused with its own error instead of being used.
#include <catch2/catch.hpp>

#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <spdlog/sinks/ringbuffer_sink.h>

#include "common/log.hpp"
#include "sa/cache_file.hpp"

using namespace openib;
using namespace openib::sa;
using namespace std::chrono_literals;

namespace {

constexpr std::uint64_t kPrefix = 0xfe80000000000000ull;
constexpr std::uint64_t kSm = 0x0002c90300000001ull;

struct TempDir {
  TempDir() {
    char tmpl[] = "/tmp/openib-sa-test.XXXXXX";
    REQUIRE(::mkdtemp(tmpl) != nullptr);
    path = tmpl;
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::string path;
};

CachedPath entry(std::uint64_t guid, std::uint16_t dlid, std::uint8_t port) {
  PathRecord q;
  q.dgid = make_gid(kPrefix, guid);
  q.sgid = make_gid(kPrefix, 0x100);
  PathRecord r = q;
  r.dlid = dlid;
  r.slid = 1;
  r.pkey = 0xffff;
  r.mtu = 4;
  CachedPath p;
  p.key = PathKey(port, pr_mask::kDgid | pr_mask::kSgid, q);
  p.record = r;
  p.age = 1500ms;
  return p;
}

CacheFile sample() {
  CacheFile f;
  f.tag = {kPrefix, kSm};
  f.saved_unix_ms = 1'700'000'000'000ull;
  f.paths = {entry(2, 20, 1), entry(3, 30, 1), entry(4, 40, 2)};
  f.paths[1].stale = true;
  return f;
}

void write_bytes(const std::string& path, ConstBytes b) {
  std::ofstream o(path, std::ios::binary | std::ios::trunc);
  o.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

bool same(const CachedPath& a, const CachedPath& b) {
  return a.key == b.key && a.record == b.record && a.stale == b.stale;
}

}  // namespace

TEST_CASE("cache file header and entries sit at their documented offsets", "[sa][file]") {
  const ByteVec b = encode_cache_file(sample());
  REQUIRE(b.size() == kCacheFileHeaderBytes + 3 * kCacheFileEntryBytes + kCacheFileTrailerBytes);
  CHECK(std::string(reinterpret_cast<const char*>(b.data()), 8) == "OIBPATHC");
  CHECK(mad::get32(b, 8) == 1);
  CHECK(mad::get32(b, 12) == 152);
  CHECK(mad::get64(b, 16) == kPrefix);
  CHECK(mad::get64(b, 24) == kSm);
  CHECK(mad::get64(b, 32) == 1'700'000'000'000ull);
  CHECK(mad::get32(b, 40) == 3);
  const ConstBytes e1 = ConstBytes(b).subspan(kCacheFileHeaderBytes + kCacheFileEntryBytes);
  CHECK(mad::get8(e1, 0) == 1);   // port
  CHECK(mad::get8(e1, 1) == 1);   // stale
  CHECK(mad::get64(e1, 8) == (pr_mask::kDgid | pr_mask::kSgid));
  CHECK(mad::get64(e1, 16) == 1500);
  CHECK(mad::get16(e1, 88 + 40) == 30);  // the answer's DLID, PathRecord byte 40
}

TEST_CASE("a saved cache loads back whole, aged by the time since it was saved", "[sa][file]") {
  TempDir dir;
  const std::string path = cache_file_path(dir.path, 1);
  CHECK(path == dir.path + "/path-cache-port1.bin");
  REQUIRE(save_cache_file(path, sample()).ok());
  auto second = sample();
  second.paths.pop_back();
  REQUIRE(save_cache_file(path, second).ok());  // replaces the first
  // Nothing but the file is left in the directory (no temporary).
  std::size_t files = 0;
  for ([[maybe_unused]] const auto& f : std::filesystem::directory_iterator(dir.path)) ++files;
  CHECK(files == 1);
  auto f = load_cache_file(path, {kPrefix, kSm}, second.saved_unix_ms + 60'000);
  REQUIRE(f.ok());
  REQUIRE(f->paths.size() == 2);
  CHECK(same(f->paths[0], second.paths[0]));
  CHECK(same(f->paths[1], second.paths[1]));
  CHECK(f->paths[0].age == 61'500ms);
  CHECK(f->tag == CacheFileTag{kPrefix, kSm});
  // An SM GUID not yet known (0) does not reject the file.
  CHECK(load_cache_file(path, {kPrefix, 0}, 0).ok());
}

TEST_CASE("a file of another subnet, SM or version is refused", "[sa][file]") {
  const ByteVec b = encode_cache_file(sample());
  auto other_subnet = decode_cache_file(b, {0xfec0000000000000ull, kSm});
  REQUIRE_FALSE(other_subnet.ok());
  CHECK(other_subnet.error().code == EXDEV);
  auto other_sm = decode_cache_file(b, {kPrefix, kSm + 1});
  REQUIRE_FALSE(other_sm.ok());
  CHECK(other_sm.error().code == EXDEV);

  ByteVec v2 = b;
  mad::put32(v2, 8, 2);
  auto version = decode_cache_file(v2, {kPrefix, kSm});
  REQUIRE_FALSE(version.ok());
  CHECK(version.error().code == ENOTSUP);
}

TEST_CASE("a truncated, padded, corrupted or foreign file is refused", "[sa][file]") {
  const ByteVec b = encode_cache_file(sample());
  const CacheFileTag tag{kPrefix, kSm};
  for (std::size_t n : {std::size_t{0}, std::size_t{7}, std::size_t{51}, std::size_t{200}, b.size() - 1}) {
    auto r = decode_cache_file(ConstBytes(b).first(n), tag);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == EPROTO);
    CHECK_THAT(r.error().message, Catch::Contains("truncated"));
  }
  ByteVec longer = b;
  longer.push_back(std::byte{0});
  CHECK(decode_cache_file(longer, tag).error().code == EPROTO);

  // Any one flipped bit of the body is caught by the CRC (or an earlier check).
  for (std::size_t at : {std::size_t{20}, std::size_t{44}, kCacheFileHeaderBytes + 100, b.size() - 5}) {
    ByteVec bad = b;
    bad[at] ^= std::byte{0x10};
    auto r = decode_cache_file(bad, tag);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == EBADMSG);
  }
  ByteVec huge = b;
  mad::put32(huge, 40, 0xFFFFFFFF);  // claims 4 billion entries
  CHECK(decode_cache_file(huge, tag).error().code == EPROTO);
  ByteVec magic = b;
  magic[0] = std::byte{'X'};
  CHECK(decode_cache_file(magic, tag).error().code == EPROTO);
}

TEST_CASE("loading a missing, unreadable or bad file returns its error and nothing else", "[sa][file]") {
  TempDir dir;
  const CacheFileTag tag{kPrefix, kSm};
  CHECK(load_cache_file(dir.path + "/absent.bin", tag, 0).error().code == ENOENT);
  CHECK(load_cache_file(dir.path, tag, 0).error().code == EINVAL);  // a directory
  const std::string path = dir.path + "/bad.bin";
  ByteVec b = encode_cache_file(sample());
  write_bytes(path, ConstBytes(b).first(b.size() / 2));
  CHECK(load_cache_file(path, tag, 0).error().code == EPROTO);
  b[60] ^= std::byte{1};
  write_bytes(path, b);
  CHECK(load_cache_file(path, tag, 0).error().code == EBADMSG);
}

TEST_CASE("an ignored file leaves a warning naming the file and the reason", "[sa][file]") {
  TempDir dir;
  const std::string path = dir.path + "/foreign.bin";
  write_bytes(path, encode_cache_file(sample()));
  auto logger = log::get("sa");
  auto ring = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(8);
  logger->sinks().push_back(ring);
  auto r = load_cache_file(path, {0xfec0000000000000ull, kSm}, 0);
  logger->sinks().pop_back();
  REQUIRE_FALSE(r.ok());
  const auto lines = ring->last_formatted();
  REQUIRE(lines.size() == 1);
  CHECK_THAT(lines[0], Catch::Contains("warning") && Catch::Contains(path) && Catch::Contains("subnet"));
}

TEST_CASE("saving into a directory that does not exist fails cleanly", "[sa][file]") {
  TempDir dir;
  CHECK_FALSE(save_cache_file(dir.path + "/no/such/dir/f.bin", sample()).ok());
}
