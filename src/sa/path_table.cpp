// The shared path table; layout and protocol in path_table.hpp and
// docs/sa.md "Shared table". Every access to the shared bytes, the
// writer's included, is an atomic access of an aligned 64-, 32- or 16-bit
// word (std::atomic_ref): a reader races with the writer by design, and
// the seqlock's fences (Boehm, "Can seqlocks get along with programming
// language memory models?", 2012) make a copy whose sequence word did not
// change a consistent one.
#include "sa/path_table.hpp"

#include <atomic>
#include <bit>
#include <cstring>
#include <optional>

namespace openib::sa {

static_assert(std::endian::native == std::endian::little, "the table's words are little-endian");

namespace {

// Header offsets (docs/sa.md "Shared table").
constexpr std::size_t kHdrMagic = 0;        // u32
constexpr std::size_t kHdrVersion = 4;      // u32
constexpr std::size_t kHdrSlots = 8;        // u32
constexpr std::size_t kHdrSlotBytes = 12;   // u32
constexpr std::size_t kHdrDefaultPkey = 16; // u16 x kPathTableMaxPorts, index = port
constexpr std::size_t kHdrGeneration = 32;  // u64
constexpr std::size_t kHdrLive = 40;        // u64, live slots (informational)
static_assert(kHdrDefaultPkey + 2 * kPathTableMaxPorts <= kHdrGeneration);

// Slot offsets.
constexpr std::size_t kSlotSeq = 0;      // u64: odd while the writer writes the slot
constexpr std::size_t kSlotMeta = 8;     // u64: state, port, P_Key, flags (below)
constexpr std::size_t kSlotDgid = 16;    // 16 bytes, as on the wire
constexpr std::size_t kSlotRecord = 32;  // 64 bytes, the PathRecord as on the wire
constexpr std::size_t kRecordWords = std::tuple_size_v<decltype(PathTableEntry::record)> / 8;
static_assert(kSlotRecord + 64 <= kPathTableSlotBytes);

// The meta word: byte 0 state, byte 1 port, bytes 2-3 P_Key, byte 4 flags.
enum State : std::uint8_t { kEmpty = 0, kLive = 1, kDeleted = 2 };
constexpr std::uint8_t kFlagStale = 0x01;

constexpr std::uint64_t meta_word(State s, std::uint8_t port, std::uint16_t pkey, std::uint8_t flags) {
  return std::uint64_t{s} | std::uint64_t{port} << 8 | std::uint64_t{pkey} << 16 | std::uint64_t{flags} << 32;
}
constexpr State meta_state(std::uint64_t m) { return static_cast<State>(m & 0xff); }
// The key part of a meta word (port and P_Key), for comparison.
constexpr std::uint64_t meta_key(std::uint64_t m) { return m & 0xffffff00ull; }
constexpr std::uint8_t meta_flags(std::uint64_t m) { return static_cast<std::uint8_t>(m >> 32); }

template <class T>
T load(const std::byte* base, std::size_t off, std::memory_order o = std::memory_order_relaxed) {
  // atomic_ref needs a non-const object; the load does not write (an
  // aligned load of at most 8 bytes is a plain load on every target we
  // build for), so read-only mappings are fine.
  auto* p = reinterpret_cast<T*>(const_cast<std::byte*>(base + off));
  return std::atomic_ref<T>(*p).load(o);
}
template <class T>
void store(std::byte* base, std::size_t off, T v, std::memory_order o = std::memory_order_relaxed) {
  std::atomic_ref<T>(*reinterpret_cast<T*>(base + off)).store(v, o);
}

std::uint64_t mix(std::uint64_t x) {  // splitmix64's finalizer
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// A spin-wait hint between retries of a slot being written: the writer
// (on another CPU) gets a little time to finish.
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

struct Dgid {
  std::uint64_t lo = 0, hi = 0;  // bytes 0-7 and 8-15, as loaded from memory
};
Dgid dgid_words(const std::array<std::uint8_t, 16>& g) {
  Dgid d;
  std::memcpy(&d.lo, g.data(), 8);
  std::memcpy(&d.hi, g.data() + 8, 8);
  return d;
}

// Hash of the 19 key bytes (port, P_Key, DGID).
std::uint64_t key_hash(std::uint8_t port, std::uint16_t pkey, const Dgid& d) {
  std::uint64_t h = mix((std::uint64_t{port} | std::uint64_t{pkey} << 8) + 0x9e3779b97f4a7c15ull);
  h = mix(h ^ d.lo);
  return mix(h ^ d.hi);
}

bool valid_slot_count(std::uint64_t slots) { return slots >= 64 && std::has_single_bit(slots); }

// The P_Key the table files `key` under: its own, or the port's default
// for 0. 0 when there is none (no default known for that port).
std::uint16_t effective_pkey(const std::byte* hdr, const PathTableKey& key) {
  if (key.pkey != 0) return key.pkey;
  if (key.port >= kPathTableMaxPorts) return 0;
  return load<std::uint16_t>(hdr, kHdrDefaultPkey + 2 * std::size_t{key.port});
}

// Where a key's probe starts and what its slots must hold: the key part
// of the meta word (port, P_Key after mapping 0) and the DGID's words.
// !ok for a key the table cannot hold (port 0, or pkey 0 on a port with
// no default P_Key).
struct Probe {
  bool ok = false;
  std::uint64_t key_meta = 0;
  Dgid dgid;
  std::uint64_t home = 0;
};
Probe probe_for(const std::byte* hdr, const PathTableKey& key) {
  Probe p;
  const std::uint16_t pkey = effective_pkey(hdr, key);
  if (key.port == 0 || pkey == 0) return p;
  p.ok = true;
  p.key_meta = meta_key(meta_word(kEmpty, key.port, pkey, 0));
  p.dgid = dgid_words(key.dgid);
  p.home = key_hash(key.port, pkey, p.dgid);
  return p;
}

}  // namespace

std::size_t path_table_bytes(std::uint32_t slots) {
  return kPathTableHeaderBytes + std::size_t{slots} * kPathTableSlotBytes;
}

// ---- writer -----------------------------------------------------------------

namespace {

// The writer's view of one slot (it is the only writer, so what it reads
// back is what it wrote).
class SlotWriter {
 public:
  SlotWriter(std::span<std::byte> mem, std::uint32_t i)
      : p_(mem.data() + kPathTableHeaderBytes + std::size_t{i} * kPathTableSlotBytes) {}
  std::uint64_t meta() const { return load<std::uint64_t>(p_, kSlotMeta); }
  bool holds(std::uint64_t key_meta, const Dgid& d) const {
    const std::uint64_t m = meta();
    return meta_state(m) == kLive && meta_key(m) == key_meta && load<std::uint64_t>(p_, kSlotDgid) == d.lo &&
           load<std::uint64_t>(p_, kSlotDgid + 8) == d.hi;
  }
  // The seqlock's write side: sequence odd, release fence, the fields,
  // sequence even with release.
  template <class Fn>
  void write(Fn fields) {
    const std::uint64_t s = load<std::uint64_t>(p_, kSlotSeq);
    store<std::uint64_t>(p_, kSlotSeq, s + 1);
    std::atomic_thread_fence(std::memory_order_release);
    fields(p_);
    store<std::uint64_t>(p_, kSlotSeq, s + 2, std::memory_order_release);
  }
  void set_state(State st) {
    write([&](std::byte* p) {
      const std::uint64_t m = meta();
      store<std::uint64_t>(p, kSlotMeta, (m & ~0xffull) | st);
    });
  }

 private:
  std::byte* p_;
};

}  // namespace

Result<PathTableWriter> PathTableWriter::format(std::span<std::byte> mem, std::uint32_t slots) {
  if (!valid_slot_count(slots)) return err(EINVAL, "path table: {} slots is not a power of two >= 64", slots);
  if (mem.size() < path_table_bytes(slots))
    return err(EINVAL, "path table: {} bytes hold no {} slots ({} bytes)", mem.size(), slots, path_table_bytes(slots));
  if (reinterpret_cast<std::uintptr_t>(mem.data()) % 8 != 0) return err(EINVAL, "path table: memory not 8-byte aligned");
  std::byte* b = mem.data();
  // The slots are zero already (the caller's memory is; ibd's is a fresh
  // memfd): writing them would make every page of the table resident in
  // every ibd, 8 MiB at the default 65,536 slots, used or not. Only the
  // header is written.
  for (std::size_t off = 0; off < kPathTableHeaderBytes; off += 8) store<std::uint64_t>(b, off, 0);
  store<std::uint32_t>(b, kHdrVersion, kPathTableVersion);
  store<std::uint32_t>(b, kHdrSlots, slots);
  store<std::uint32_t>(b, kHdrSlotBytes, static_cast<std::uint32_t>(kPathTableSlotBytes));
  store<std::uint32_t>(b, kHdrMagic, kPathTableMagic, std::memory_order_release);  // last: the table is ready
  return PathTableWriter(mem.first(path_table_bytes(slots)), slots);
}

namespace {
void bump_generation(std::byte* hdr, std::size_t live) {
  store<std::uint64_t>(hdr, kHdrLive, live);
  store<std::uint64_t>(hdr, kHdrGeneration, load<std::uint64_t>(hdr, kHdrGeneration) + 1,
                       std::memory_order_release);
}
}  // namespace

void PathTableWriter::set_default_pkey(std::uint8_t port, std::uint16_t pkey) {
  if (port == 0 || port >= kPathTableMaxPorts) return;
  store<std::uint16_t>(mem_.data(), kHdrDefaultPkey + 2 * std::size_t{port}, pkey);
  bump_generation(mem_.data(), live_);
}

bool PathTableWriter::put(const PathTableKey& key, const PathTableEntry& entry) {
  const Probe pr = probe_for(mem_.data(), key);
  if (!pr.ok) return false;
  const std::uint32_t mask = slots_ - 1;
  // The key's slot if it is there, else the first free one (deleted or
  // empty) of its probe window. A live key is never moved: a reader
  // probing for it finds it where it was, or misses.
  std::optional<std::uint32_t> at, free;
  for (std::uint32_t n = 0; n < kPathTableMaxProbe; ++n) {
    const auto i = static_cast<std::uint32_t>((pr.home + n) & mask);
    SlotWriter s(mem_, i);
    const State st = meta_state(s.meta());
    if (st == kLive && s.holds(pr.key_meta, pr.dgid)) {
      at = i;
      break;
    }
    if (st != kLive && !free) free = i;
    if (st == kEmpty) break;  // the key is not further on
  }
  const bool fresh = !at;
  if (fresh && !free) return false;
  std::uint64_t rec[kRecordWords];
  std::memcpy(rec, entry.record.data(), sizeof(rec));
  SlotWriter(mem_, at ? *at : *free).write([&](std::byte* p) {
    store<std::uint64_t>(p, kSlotMeta, pr.key_meta | kLive | std::uint64_t{entry.stale ? kFlagStale : 0u} << 32);
    store<std::uint64_t>(p, kSlotDgid, pr.dgid.lo);
    store<std::uint64_t>(p, kSlotDgid + 8, pr.dgid.hi);
    for (std::size_t w = 0; w < kRecordWords; ++w) store<std::uint64_t>(p, kSlotRecord + 8 * w, rec[w]);
  });
  if (fresh) ++live_;
  bump_generation(mem_.data(), live_);
  return true;
}

// A tombstone followed by an empty slot becomes empty, and so on backwards:
// no live key lies past an empty slot in its probe sequence (keys fill
// their window front to back and never move), so a probe that now stops
// earlier misses nothing it would have found.
namespace {
void reclaim_tombstones(std::span<std::byte> mem, std::uint32_t slots, std::uint32_t i) {
  const std::uint32_t mask = slots - 1;
  if (meta_state(SlotWriter(mem, (i + 1) & mask).meta()) != kEmpty) return;
  for (std::uint32_t n = 0; n < slots; ++n, i = (i - 1) & mask) {
    SlotWriter s(mem, i);
    if (meta_state(s.meta()) != kDeleted) return;
    s.set_state(kEmpty);
  }
}
}  // namespace

bool PathTableWriter::erase(const PathTableKey& key) {
  const Probe pr = probe_for(mem_.data(), key);
  if (!pr.ok) return false;
  const std::uint32_t mask = slots_ - 1;
  for (std::uint32_t n = 0; n < kPathTableMaxProbe; ++n) {
    const auto i = static_cast<std::uint32_t>((pr.home + n) & mask);
    SlotWriter s(mem_, i);
    if (meta_state(s.meta()) == kEmpty) return false;
    if (!s.holds(pr.key_meta, pr.dgid)) continue;
    s.set_state(kDeleted);
    --live_;
    reclaim_tombstones(mem_, slots_, i);
    bump_generation(mem_.data(), live_);
    return true;
  }
  return false;
}

void PathTableWriter::clear(std::uint8_t port) {
  std::optional<std::uint32_t> empty;
  bool changed = false;
  for (std::uint32_t i = 0; i < slots_; ++i) {
    SlotWriter s(mem_, i);
    const std::uint64_t m = s.meta();
    if (meta_state(m) == kEmpty && !empty) empty = i;
    if (meta_state(m) != kLive || (port != 0 && ((m >> 8) & 0xff) != port)) continue;
    s.set_state(kDeleted);
    --live_;
    changed = true;
  }
  if (!changed) return;
  // One pass backwards from an empty slot around the ring turns every
  // tombstone with an empty successor into an empty slot (a table with no
  // empty slot at all keeps its tombstones, which put() reuses).
  if (empty) {
    const std::uint32_t mask = slots_ - 1;
    bool next_empty = true;
    for (std::uint32_t n = 1; n <= slots_; ++n) {
      const std::uint32_t i = (*empty - n) & mask;
      SlotWriter s(mem_, i);
      const State st = meta_state(s.meta());
      if (st == kDeleted && next_empty) s.set_state(kEmpty);
      else next_empty = st == kEmpty;
    }
  }
  bump_generation(mem_.data(), live_);
}

// ---- reader -----------------------------------------------------------------

Result<PathTableReader> PathTableReader::attach(std::span<const std::byte> mem) {
  if (mem.size() < kPathTableHeaderBytes) return err(EPROTO, "path table: {} bytes, no header", mem.size());
  if (reinterpret_cast<std::uintptr_t>(mem.data()) % 8 != 0) return err(EPROTO, "path table: mapping not 8-byte aligned");
  const std::byte* b = mem.data();
  const auto magic = load<std::uint32_t>(b, kHdrMagic, std::memory_order_acquire);
  if (magic != kPathTableMagic) return err(EPROTO, "path table: bad magic {:#x}", magic);
  const auto version = load<std::uint32_t>(b, kHdrVersion);
  if (version != kPathTableVersion) return err(EPROTO, "path table: version {} (this client reads {})", version, kPathTableVersion);
  const auto slot_bytes = load<std::uint32_t>(b, kHdrSlotBytes);
  if (slot_bytes != kPathTableSlotBytes) return err(EPROTO, "path table: slots of {} bytes (expected {})", slot_bytes, kPathTableSlotBytes);
  const auto slots = load<std::uint32_t>(b, kHdrSlots);
  if (!valid_slot_count(slots)) return err(EPROTO, "path table: {} slots is not a power of two >= 64", slots);
  if (path_table_bytes(slots) > mem.size())
    return err(EPROTO, "path table: {} slots need {} bytes, the mapping has {}", slots, path_table_bytes(slots), mem.size());
  return PathTableReader(mem.first(path_table_bytes(slots)), slots);
}

PathTableReader::Lookup PathTableReader::find(const PathTableKey& key, PathTableEntry* out) const {
  const std::byte* hdr = mem_.data();
  const Probe pr = probe_for(hdr, key);
  if (!pr.ok) return Lookup::kMiss;
  const std::uint32_t mask = slots_ - 1;
  std::uint32_t torn = 0;
  for (std::uint32_t n = 0; n < kPathTableMaxProbe;) {
    const std::byte* p = hdr + kPathTableHeaderBytes + std::size_t{(pr.home + n) & mask} * kPathTableSlotBytes;
    // The seqlock's read side: sequence (acquire), the fields (relaxed),
    // acquire fence, sequence again; a copy is good if both are the same
    // even number.
    const auto s1 = load<std::uint64_t>(p, kSlotSeq, std::memory_order_acquire);
    const auto m = load<std::uint64_t>(p, kSlotMeta);
    const bool match = meta_state(m) == kLive && meta_key(m) == pr.key_meta &&
                       load<std::uint64_t>(p, kSlotDgid) == pr.dgid.lo && load<std::uint64_t>(p, kSlotDgid + 8) == pr.dgid.hi;
    std::uint64_t rec[kRecordWords];
    if (match)
      for (std::size_t w = 0; w < kRecordWords; ++w) rec[w] = load<std::uint64_t>(p, kSlotRecord + 8 * w);
    std::atomic_thread_fence(std::memory_order_acquire);
    const auto s2 = load<std::uint64_t>(p, kSlotSeq);
    if ((s1 & 1) != 0 || s1 != s2) {
      if (++torn >= kPathTableMaxRetries) return Lookup::kBusy;
      cpu_relax();
      continue;  // the same slot again
    }
    if (match) {
      if (out) {
        std::memcpy(out->record.data(), rec, sizeof(rec));
        out->stale = (meta_flags(m) & kFlagStale) != 0;
      }
      return Lookup::kHit;
    }
    if (meta_state(m) == kEmpty) return Lookup::kMiss;
    ++n;
  }
  return Lookup::kMiss;
}

}  // namespace openib::sa
