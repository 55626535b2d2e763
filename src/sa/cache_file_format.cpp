// The path cache file, version 1 (layout in cache_file_format.hpp).
#include "sa/cache_file_format.hpp"

#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <string_view>

namespace openib::sa {

namespace {

constexpr std::string_view kMagic = "OIBPATHC";
constexpr std::uint8_t kFlagStale = 1;

std::uint32_t crc_of(ConstBytes b) {
  std::uint32_t crc = static_cast<std::uint32_t>(::crc32(0, nullptr, 0));
  while (!b.empty()) {  // zlib takes uInt lengths
    const auto n = static_cast<uInt>(std::min<std::size_t>(b.size(), 1u << 30));
    crc = static_cast<std::uint32_t>(::crc32(crc, reinterpret_cast<const Bytef*>(b.data()), n));
    b = b.subspan(n);
  }
  return crc;
}

void encode_entry(MutBytes e, const CachedPath& p) {
  mad::put8(e, 0, p.key.port());
  mad::put8(e, 1, p.stale ? kFlagStale : 0);
  mad::put64(e, 8, p.key.comp_mask());
  mad::put64(e, 16, static_cast<std::uint64_t>(std::max<std::int64_t>(p.age.count(), 0)));
  encode_path_record(e.subspan(24), p.key.query());
  encode_path_record(e.subspan(88), p.record);
}

Result<CachedPath> decode_entry(ConstBytes e, std::size_t index) {
  const std::uint8_t port = mad::get8(e, 0);
  if (port == 0 || port == 255) return err(EPROTO, "path cache entry {}: port {} is not a port", index, port);
  OPENIB_TRY_ASSIGN(PathRecord query, decode_path_record(e.subspan(24)));
  OPENIB_TRY_ASSIGN(PathRecord record, decode_path_record(e.subspan(88)));
  CachedPath p;
  p.key = PathKey(port, mad::get64(e, 8), query);
  p.record = record;
  p.stale = (mad::get8(e, 1) & kFlagStale) != 0;
  const std::uint64_t age = mad::get64(e, 16);
  p.age = std::chrono::milliseconds(static_cast<std::int64_t>(std::min<std::uint64_t>(age, INT64_MAX / 2)));
  return p;
}

}  // namespace

ByteVec encode_cache_file(const CacheFile& f) {
  ByteVec out(kCacheFileHeaderBytes + f.paths.size() * kCacheFileEntryBytes + kCacheFileTrailerBytes);
  MutBytes b(out);
  std::memcpy(out.data(), kMagic.data(), kMagic.size());
  mad::put32(b, 8, kCacheFileVersion);
  mad::put32(b, 12, kCacheFileEntryBytes);
  mad::put64(b, 16, f.tag.subnet_prefix);
  mad::put64(b, 24, f.tag.sm_port_guid);
  mad::put64(b, 32, f.saved_unix_ms);
  mad::put32(b, 40, f.paths.size());
  for (std::size_t i = 0; i < f.paths.size(); ++i)
    encode_entry(b.subspan(kCacheFileHeaderBytes + i * kCacheFileEntryBytes, kCacheFileEntryBytes), f.paths[i]);
  const std::size_t body = out.size() - kCacheFileTrailerBytes;
  mad::put32(b, body, crc_of(b.first(body)));
  return out;
}

Result<CacheFile> decode_cache_file(ConstBytes b, const CacheFileTag& expected) {
  if (b.size() < kCacheFileHeaderBytes + kCacheFileTrailerBytes)
    return err(EPROTO, "path cache file truncated: {} bytes, a header needs {}", b.size(),
               kCacheFileHeaderBytes + kCacheFileTrailerBytes);
  if (std::memcmp(b.data(), kMagic.data(), kMagic.size()) != 0) return err(EPROTO, "not a path cache file (magic)");
  const std::uint32_t version = mad::get32(b, 8);
  if (version != kCacheFileVersion)
    return err(ENOTSUP, "path cache file version {}, this ibd reads version {}", version, kCacheFileVersion);
  const std::uint32_t entry_bytes = mad::get32(b, 12);
  if (entry_bytes != kCacheFileEntryBytes)
    return err(EPROTO, "path cache file entries of {} bytes, version {} has {}", entry_bytes, version,
               kCacheFileEntryBytes);
  const std::uint32_t count = mad::get32(b, 40);
  if (count > kCacheFileMaxEntries) return err(EPROTO, "path cache file claims {} entries", count);
  const std::size_t want = kCacheFileHeaderBytes + std::size_t{count} * kCacheFileEntryBytes + kCacheFileTrailerBytes;
  if (b.size() < want) return err(EPROTO, "path cache file truncated: {} bytes, {} entries need {}", b.size(), count, want);
  if (b.size() > want) return err(EPROTO, "path cache file has {} bytes after its {} entries", b.size() - want, count);
  const std::size_t body = want - kCacheFileTrailerBytes;
  const std::uint32_t stored = mad::get32(b, body), computed = crc_of(b.first(body));
  if (stored != computed)
    return err(EBADMSG, "path cache file corrupted: CRC-32 {:08x}, contents give {:08x}", stored, computed);
  CacheFile f;
  f.tag.subnet_prefix = mad::get64(b, 16);
  f.tag.sm_port_guid = mad::get64(b, 24);
  if (f.tag.subnet_prefix != expected.subnet_prefix)
    return err(EXDEV, "path cache file of subnet {:016x}, this port is on {:016x}", f.tag.subnet_prefix,
               expected.subnet_prefix);
  if (f.tag.sm_port_guid != 0 && expected.sm_port_guid != 0 && f.tag.sm_port_guid != expected.sm_port_guid)
    return err(EXDEV, "path cache file from SM port {:016x}, the SM is now {:016x}", f.tag.sm_port_guid,
               expected.sm_port_guid);
  f.saved_unix_ms = mad::get64(b, 32);
  f.paths.reserve(count);
  for (std::size_t i = 0; i < count; ++i) {
    OPENIB_TRY_ASSIGN(CachedPath p, decode_entry(b.subspan(kCacheFileHeaderBytes + i * kCacheFileEntryBytes,
                                                           kCacheFileEntryBytes), i));
    f.paths.push_back(std::move(p));
  }
  return f;
}

}  // namespace openib::sa
