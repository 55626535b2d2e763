// ibd's side of the shared path table (issue 15 part 4; docs/sa.md "Shared
// table"; docs/client-protocol.md "PATH_TABLE"): the table (sa/path_table.hpp)
// in a sealed memfd (sealed_memfd.hpp) that ibd writes and clients map
// read-only, kept equal to the path cache's positive entries of the
// default lookup's form through the cache's entry observer. Entries of any
// other form (other selectors) stay in ibd only; so does an entry that
// finds no free slot within the table's probe limit (counted: `full`).
//
// Single-threaded on ibd's io_context, like the cache.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "common/fd.hpp"
#include "common/result.hpp"
#include "ibd/sealed_memfd.hpp"
#include "sa/path_key.hpp"
#include "sa/path_table.hpp"

namespace openib::ibd {

inline constexpr uint32_t kDefaultPathTableSlots = 65536;  // 8 MiB

// PATH_QUERY's lookup (docs/client-protocol.md "Path records"; IBA
// 15.2.5.16): DGID, SGID (the port's GID 0), P_Key, one path, reversible,
// as Linux's IPoIB asks (the same path serves both directions).
inline constexpr uint64_t kDefaultPathMask = sa::pr_mask::kDgid | sa::pr_mask::kSgid | sa::pr_mask::kPKey |
                                             sa::pr_mask::kNumbPath | sa::pr_mask::kReversible;
sa::PathKey default_path_key(uint8_t port, const sa::Gid& sgid, uint16_t pkey, const sa::Gid& dgid);
// The table's key for a cache key of that form; nullopt for any other.
std::optional<sa::PathTableKey> table_key(const sa::PathKey& key);

struct PathTableCounters {
  uint64_t published = 0;  // puts (new entries, replacements, stale marks)
  uint64_t withdrawn = 0;  // entries erased
  uint64_t full = 0;       // puts refused: no free slot within the probe limit
};

class PathTableShm {
 public:
  // `slots`: a power of two >= 64 (EINVAL otherwise).
  static Result<std::unique_ptr<PathTableShm>> create(uint32_t slots);

  // The cache's entry observer (sa::PathCache::set_entry_observer).
  void on_entry(const sa::PathKey& key, const sa::PathRecord* record, bool stale);
  // The P_Key a client's pkey 0 stands for on `port` (its P_Key at index 0).
  void set_default_pkey(uint8_t port, uint16_t pkey) { writer_.set_default_pkey(port, pkey); }

  // A read-only fd of the table for one client (PATH_TABLE).
  Result<UniqueFd> client_fd() const { return mem_.client_fd(); }
  size_t bytes() const { return mem_.size(); }
  uint32_t slots() const { return writer_.slots(); }
  size_t size() const { return writer_.size(); }
  const PathTableCounters& counters() const { return counters_; }

 private:
  PathTableShm(SealedMemfd mem, sa::PathTableWriter w) : mem_(std::move(mem)), writer_(w) {}
  SealedMemfd mem_;
  sa::PathTableWriter writer_;
  PathTableCounters counters_;
};

}  // namespace openib::ibd
