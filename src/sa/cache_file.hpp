// The path cache on disk: written atomically (a temporary file in the same
// directory, fsync, rename over the old file, fsync of the directory), so a
// crash leaves the old file or the new one, never a torn one; loaded with
// every check of decode_cache_file(), and a file that fails one is logged
// (component "sa") and ignored by the caller, never fatal.
#pragma once

#include <cstdint>
#include <string>

#include "common/result.hpp"
#include "sa/cache_file_format.hpp"

namespace openib::sa {

// `dir`/path-cache-port<N>.bin: one file per local port (each port has its
// own subnet prefix and SM).
std::string cache_file_path(const std::string& dir, std::uint8_t port);

Result<void> save_cache_file(const std::string& path, const CacheFile& f);

// Reads and decodes `path`. Files over 256 MiB are refused (EFBIG) without
// being read. On success every entry's age includes the time since the
// file was saved (now_unix_ms - saved_unix_ms, if positive). On failure
// the reason is logged (a missing file at debug level, anything else as a
// warning) and returned.
Result<CacheFile> load_cache_file(const std::string& path, const CacheFileTag& expected, std::uint64_t now_unix_ms);

}  // namespace openib::sa
