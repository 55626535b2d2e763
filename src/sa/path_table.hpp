// The shared path table (issue 15 part 4; docs/sa.md "Shared table"): the
// path cache's usable positive entries for the default lookup, in memory
// that ibd writes and clients map read-only, so that a hit costs a client
// no system call and no message.
//
// The default lookup is what PATH_QUERY asks (docs/client-protocol.md
// "Path records"): SubnAdmGet(PathRecord) with DGID, SGID (the port's GID
// 0), P_Key, NumbPath 1 and Reversible 1. Only entries of that form are
// published; a client asking anything else goes to ibd.
//
// Layout (little-endian; docs/sa.md "Shared table" is the reference):
//   header, kHeaderBytes: magic, version, slot count (a power of two),
//     slot size, the P_Key each port uses for pkey 0 (index = port), the
//     writer's generation (bumped on every change);
//   slots, slot_count x kSlotBytes, open addressing with linear probing
//     (at most kMaxProbe slots from the key's hash): each slot a sequence
//     word (odd while ibd writes the slot: a seqlock), a state (empty,
//     live, deleted), the key (port, P_Key, DGID), flags (stale) and the
//     64-byte PathRecord as on the wire (IBA 15.2.5.16).
// A reader copies a slot between two reads of its sequence word and
// retries while they differ or are odd: it never returns a torn record.
// After kMaxRetries torn reads it gives up with kBusy (the caller asks ibd).
// A key that is not found within kMaxProbe slots (or an empty slot first)
// is a miss; the writer never moves a live key, so a miss while ibd
// writes is at worst a miss that ibd then answers, never a wrong record.
//
// The writer is single-threaded (ibd's io_context). The reader is
// lock-free and may run in any number of threads and processes. The
// reader trusts nothing in the memory: every index is bounded by the
// header it checked at attach() and by the mapping's size.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

#include "common/result.hpp"

namespace openib::sa {

inline constexpr std::uint32_t kPathTableMagic = 0x5450494f;  // "OIPT"
inline constexpr std::uint32_t kPathTableVersion = 1;
inline constexpr std::size_t kPathTableHeaderBytes = 128;
inline constexpr std::size_t kPathTableSlotBytes = 128;
inline constexpr std::uint32_t kPathTableMaxProbe = 32;
inline constexpr std::uint32_t kPathTableMaxRetries = 64;
inline constexpr std::uint8_t kPathTableMaxPorts = 8;  // ports 1..7 have a default P_Key

struct PathTableKey {
  std::uint8_t port = 1;
  std::uint16_t pkey = 0;  // 0: the port's default P_Key from the header
  std::array<std::uint8_t, 16> dgid{};
  bool operator==(const PathTableKey&) const = default;
};

struct PathTableEntry {
  std::array<std::uint8_t, 64> record{};  // PathRecord as on the wire
  bool stale = false;                      // served while ibd revalidates it
};

// Bytes of a table of `slots` slots (a power of two, >= 64).
std::size_t path_table_bytes(std::uint32_t slots);

class PathTableWriter {
 public:
  // Formats `mem` (at least path_table_bytes(slots), zeroed: only the
  // header is written, so that the slots' pages stay untouched until used)
  // as an empty table. EINVAL for a slot count that is not a power of two
  // >= 64 or memory too small.
  static Result<PathTableWriter> format(std::span<std::byte> mem, std::uint32_t slots);

  // The P_Key that pkey 0 means on `port` (1..kPathTableMaxPorts-1).
  void set_default_pkey(std::uint8_t port, std::uint16_t pkey);
  // Inserts or overwrites. False (nothing written) when no slot is free
  // within kMaxProbe of the key's hash: the entry is then only in ibd.
  bool put(const PathTableKey& key, const PathTableEntry& entry);
  // True if it was there.
  bool erase(const PathTableKey& key);
  // Every entry of `port` (0: all ports) goes.
  void clear(std::uint8_t port = 0);

  std::size_t size() const { return live_; }
  std::uint32_t slots() const { return slots_; }

 private:
  PathTableWriter(std::span<std::byte> mem, std::uint32_t slots) : mem_(mem), slots_(slots) {}
  std::span<std::byte> mem_;
  std::uint32_t slots_ = 0;
  std::size_t live_ = 0;
};

class PathTableReader {
 public:
  // Checks the header (magic, version, slot size, slot count a power of
  // two whose table fits in `mem`); EPROTO otherwise.
  static Result<PathTableReader> attach(std::span<const std::byte> mem);

  enum class Lookup : std::uint8_t { kHit, kMiss, kBusy };
  Lookup find(const PathTableKey& key, PathTableEntry* out) const;
  std::uint32_t slots() const { return slots_; }

 private:
  PathTableReader(std::span<const std::byte> mem, std::uint32_t slots) : mem_(mem), slots_(slots) {}
  std::span<const std::byte> mem_;
  std::uint32_t slots_ = 0;
};

}  // namespace openib::sa
