// TEMPORARY stand-in for the shared path table (sa/path_table.hpp), written
// only so that ibd's publisher and libopenib's resolver build and test in
// the presolve worktree; the real implementation (its own helper's
// path_table.cpp) replaces this file at merge.
#include "sa/path_table.hpp"

#include <atomic>
#include <cstring>

namespace openib::sa {

namespace {
constexpr std::size_t kSeq = 0, kState = 4, kPort = 5, kFlags = 6, kPkey = 8, kDgid = 16, kRecord = 32;
constexpr std::uint8_t kEmpty = 0, kLive = 1, kDeleted = 2;
constexpr std::size_t kHdrSlots = 8, kHdrSlotBytes = 12, kHdrPkeys = 16, kHdrGen = 32;

std::uint64_t hash(const PathTableKey& k) {
  std::uint64_t h = 1469598103934665603ull;
  auto mix = [&h](std::uint8_t b) { h = (h ^ b) * 1099511628211ull; };
  mix(k.port);
  mix(static_cast<std::uint8_t>(k.pkey));
  mix(static_cast<std::uint8_t>(k.pkey >> 8));
  for (auto b : k.dgid) mix(b);
  return h;
}
template <class T>
std::atomic_ref<T> word(std::byte* p) { return std::atomic_ref<T>(*reinterpret_cast<T*>(p)); }
template <class T>
T load(const std::byte* p) { return std::atomic_ref<T>(*reinterpret_cast<T*>(const_cast<std::byte*>(p))).load(std::memory_order_relaxed); }
}  // namespace

std::size_t path_table_bytes(std::uint32_t slots) { return kPathTableHeaderBytes + std::size_t{slots} * kPathTableSlotBytes; }

Result<PathTableWriter> PathTableWriter::format(std::span<std::byte> mem, std::uint32_t slots) {
  if (slots < 64 || (slots & (slots - 1))) return err(EINVAL, "path table of {} slots: not a power of two >= 64", slots);
  if (mem.size() < path_table_bytes(slots)) return err(EINVAL, "path table memory too small");
  std::uint32_t h[4] = {kPathTableMagic, kPathTableVersion, slots, static_cast<std::uint32_t>(kPathTableSlotBytes)};
  std::memcpy(mem.data(), h, sizeof h);
  return PathTableWriter(mem, slots);
}

void PathTableWriter::set_default_pkey(std::uint8_t port, std::uint16_t pkey) {
  if (port == 0 || port >= kPathTableMaxPorts) return;
  word<std::uint16_t>(mem_.data() + kHdrPkeys + 2 * port).store(pkey, std::memory_order_release);
}

namespace {
struct SlotWrite {
  std::byte* s;
  explicit SlotWrite(std::byte* slot) : s(slot) {
    auto q = word<std::uint32_t>(s + kSeq);
    q.store(q.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_release);
  }
  ~SlotWrite() {
    auto q = word<std::uint32_t>(s + kSeq);
    q.store(q.load(std::memory_order_relaxed) + 1, std::memory_order_release);
  }
  void put(std::size_t off, const void* src, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i)
      word<std::uint8_t>(s + off + i).store(static_cast<const std::uint8_t*>(src)[i], std::memory_order_relaxed);
  }
};
bool key_at(const std::byte* s, const PathTableKey& k) {
  if (load<std::uint8_t>(s + kPort) != k.port || load<std::uint16_t>(s + kPkey) != k.pkey) return false;
  for (std::size_t i = 0; i < 16; ++i)
    if (load<std::uint8_t>(s + kDgid + i) != k.dgid[i]) return false;
  return true;
}
}  // namespace

bool PathTableWriter::put(const PathTableKey& key, const PathTableEntry& entry) {
  const std::uint64_t h = hash(key);
  std::byte* free_slot = nullptr;
  std::byte* slot = nullptr;
  for (std::uint32_t i = 0; i < kPathTableMaxProbe; ++i) {
    std::byte* s = mem_.data() + kPathTableHeaderBytes + ((h + i) & (slots_ - 1)) * kPathTableSlotBytes;
    const std::uint8_t st = load<std::uint8_t>(s + kState);
    if (st == kLive && key_at(s, key)) { slot = s; break; }
    if (st != kLive && !free_slot) free_slot = s;
    if (st == kEmpty) break;
  }
  if (!slot) {
    if (!free_slot) return false;
    slot = free_slot;
    ++live_;
  }
  SlotWrite w(slot);
  const std::uint8_t live = kLive, flags = entry.stale ? 1 : 0;
  w.put(kState, &live, 1);
  w.put(kPort, &key.port, 1);
  w.put(kFlags, &flags, 1);
  w.put(kPkey, &key.pkey, 2);
  w.put(kDgid, key.dgid.data(), 16);
  w.put(kRecord, entry.record.data(), 64);
  auto g = word<std::uint64_t>(mem_.data() + kHdrGen);
  g.store(g.load(std::memory_order_relaxed) + 1, std::memory_order_release);
  return true;
}

bool PathTableWriter::erase(const PathTableKey& key) {
  const std::uint64_t h = hash(key);
  for (std::uint32_t i = 0; i < kPathTableMaxProbe; ++i) {
    std::byte* s = mem_.data() + kPathTableHeaderBytes + ((h + i) & (slots_ - 1)) * kPathTableSlotBytes;
    const std::uint8_t st = load<std::uint8_t>(s + kState);
    if (st == kEmpty) return false;
    if (st == kLive && key_at(s, key)) {
      SlotWrite w(s);
      const std::uint8_t del = kDeleted;
      w.put(kState, &del, 1);
      --live_;
      return true;
    }
  }
  return false;
}

void PathTableWriter::clear(std::uint8_t port) {
  for (std::uint32_t i = 0; i < slots_; ++i) {
    std::byte* s = mem_.data() + kPathTableHeaderBytes + std::size_t{i} * kPathTableSlotBytes;
    if (load<std::uint8_t>(s + kState) != kLive || (port && load<std::uint8_t>(s + kPort) != port)) continue;
    SlotWrite w(s);
    const std::uint8_t del = kDeleted;
    w.put(kState, &del, 1);
    --live_;
  }
}

Result<PathTableReader> PathTableReader::attach(std::span<const std::byte> mem) {
  if (mem.size() < kPathTableHeaderBytes) return err(EPROTO, "path table smaller than its header");
  std::uint32_t h[4];
  std::memcpy(h, mem.data(), sizeof h);
  if (h[0] != kPathTableMagic || h[1] != kPathTableVersion || h[3] != kPathTableSlotBytes || h[2] < 64 ||
      (h[2] & (h[2] - 1)) || path_table_bytes(h[2]) > mem.size())
    return err(EPROTO, "not a path table of version {} that fits {} bytes", kPathTableVersion, mem.size());
  return PathTableReader(mem, h[2]);
}

PathTableReader::Lookup PathTableReader::find(const PathTableKey& key_in, PathTableEntry* out) const {
  PathTableKey key = key_in;
  if (key.pkey == 0) {
    if (key.port == 0 || key.port >= kPathTableMaxPorts) return Lookup::kMiss;
    key.pkey = load<std::uint16_t>(mem_.data() + kHdrPkeys + 2 * key.port);
    if (key.pkey == 0) return Lookup::kMiss;
  }
  const std::uint64_t h = hash(key);
  for (std::uint32_t i = 0; i < kPathTableMaxProbe; ++i) {
    const std::byte* s = mem_.data() + kPathTableHeaderBytes + ((h + i) & (slots_ - 1)) * kPathTableSlotBytes;
    std::uint32_t tries = 0;
    for (;;) {
      if (++tries > kPathTableMaxRetries) return Lookup::kBusy;
      const std::uint32_t s1 = std::atomic_ref<std::uint32_t>(*reinterpret_cast<std::uint32_t*>(const_cast<std::byte*>(s + kSeq))).load(std::memory_order_acquire);
      if (s1 & 1) continue;
      const std::uint8_t st = load<std::uint8_t>(s + kState);
      const bool match = st == kLive && key_at(s, key);
      PathTableEntry e;
      if (match) {
        for (std::size_t b = 0; b < 64; ++b) e.record[b] = load<std::uint8_t>(s + kRecord + b);
        e.stale = load<std::uint8_t>(s + kFlags) & 1;
      }
      std::atomic_thread_fence(std::memory_order_acquire);
      const std::uint32_t s2 = load<std::uint32_t>(s + kSeq);
      if (s1 != s2) continue;
      if (st == kEmpty) return Lookup::kMiss;
      if (match) {
        if (out) *out = e;
        return Lookup::kHit;
      }
      break;
    }
  }
  return Lookup::kMiss;
}

}  // namespace openib::sa
