// libFuzzer target: arbitrary bytes as a path cache file (src/sa). Half the
// inputs get a correct CRC and the tag the loader expects written in, so
// the fuzzer reaches the entries instead of stopping at the checksum. A
// file that decodes must encode to one that decodes the same, and its paths must go
// into a cache and come out of it. Nothing may crash, hang or allocate
// without bound.
#include <zlib.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "sa/cache_file_format.hpp"
#include "sa/path_cache.hpp"

using namespace openib;
using namespace openib::sa;

namespace {

struct NoSa final : PathQuerier {
  void query_path(const PathKey&, PathAnswerFn done) override { done(Error{ETIMEDOUT, "fuzz"}); }
};
struct Frozen final : Clock {
  time_point now() const override { return time_point(std::chrono::hours(1000)); }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const bool fix = (data[0] & 1) != 0;
  ByteVec b(reinterpret_cast<const std::byte*>(data + 1), reinterpret_cast<const std::byte*>(data + size));
  const CacheFileTag tag{0xfe80000000000000ull, 0};
  if (fix && b.size() >= kCacheFileHeaderBytes + kCacheFileTrailerBytes) {
    mad::put64(b, 16, tag.subnet_prefix);
    const std::size_t body = b.size() - kCacheFileTrailerBytes;
    mad::put32(b, body, static_cast<std::uint32_t>(::crc32(0, reinterpret_cast<const Bytef*>(b.data()),
                                                            static_cast<uInt>(body))));
  }
  auto f = decode_cache_file(b, tag);
  if (!f.ok()) return 0;
  // What decodes encodes to a file that decodes the same (reserved bytes
  // are not kept, so the bytes themselves may differ).
  auto again = decode_cache_file(encode_cache_file(*f), tag);
  if (!again.ok() || again->paths.size() != f->paths.size()) std::abort();
  for (std::size_t i = 0; i < f->paths.size(); ++i) {
    const CachedPath &x = f->paths[i], &y = again->paths[i];
    if (!(x.key == y.key) || !(x.record == y.record) || x.age != y.age || x.stale != y.stale) std::abort();
  }
  NoSa sa;
  Frozen clock;
  PathCache cache(sa, clock);
  cache.restore(f->paths);
  cache.revalidate_stale(4);
  if (cache.snapshot().size() > f->paths.size()) std::abort();
  return 0;
}
