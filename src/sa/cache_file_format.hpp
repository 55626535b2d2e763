// The path cache's file format (docs/sa.md "Cache file"), version 1. Pure
// encode/decode over bytes; the atomic write and the logging loader are
// cache_file.hpp. Big-endian throughout, like the wire.
//
//   header, 48 bytes:
//     0  magic "OIBPATHC"          8
//     8  version (1)               u32
//    12  entry bytes (152)         u32
//    16  subnet prefix             u64   the port's GID prefix
//    24  SM port GUID              u64   the master SM when saved (0: unknown)
//    32  saved at, Unix ms         u64
//    40  entry count               u32
//    44  reserved (0)              u32
//   entries, 152 bytes each:
//     0  port                      u8    (1..254)
//     1  flags                     u8    bit 0: stale when saved
//     2  reserved                  6
//     8  ComponentMask             u64
//    16  age when saved, ms        u64
//    24  query PathRecord          64    (IBA 15.2.5.16 wire layout)
//    88  answer PathRecord         64
//   trailer: CRC-32 (zlib's crc32) of every byte before it, u32.
//
// Only positive entries are written (a "no path" is not worth keeping).
#pragma once

#include <cstdint>
#include <vector>

#include "common/result.hpp"
#include "sa/path_cache.hpp"

namespace openib::sa {

inline constexpr std::uint32_t kCacheFileVersion = 1;
inline constexpr std::size_t kCacheFileHeaderBytes = 48;
inline constexpr std::size_t kCacheFileEntryBytes = 152;
inline constexpr std::size_t kCacheFileTrailerBytes = 4;
inline constexpr std::size_t kCacheFileMaxEntries = 1u << 20;  // bounds what a loader allocates

struct CacheFileTag {
  std::uint64_t subnet_prefix = 0;
  std::uint64_t sm_port_guid = 0;
  bool operator==(const CacheFileTag&) const = default;
};

struct CacheFile {
  CacheFileTag tag;
  std::uint64_t saved_unix_ms = 0;
  std::vector<CachedPath> paths;  // age as when saved
};

ByteVec encode_cache_file(const CacheFile& f);

// Decodes and checks a whole file. Errors, each with a message saying why:
//   EPROTO  too short, truncated or too long for its count, not our magic,
//           a bad entry (port 0 or 255, entry size not ours)
//   ENOTSUP another version
//   EBADMSG checksum mismatch (corrupted)
//   EXDEV   another subnet prefix, or another SM port GUID when both the
//           file's and `expected`'s are known (non-zero)
Result<CacheFile> decode_cache_file(ConstBytes bytes, const CacheFileTag& expected);

}  // namespace openib::sa
