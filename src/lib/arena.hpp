// The ring arena (docs/library.md "Memory"): one context's CQ, QP and SRQ
// rings and doorbell records, sub-allocated from memfd chunks that are
// mapped for DMA once each (MAP_MEM), so creating a QP is one CREATE_QP
// message and no MAP_MEM. Blocks are 64-byte aligned and sized (docs/
// simhca.md §6.5, §6.9, §6.10 want 64-byte aligned rings, 8-byte aligned
// records), zeroed when handed out.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "common/fd.hpp"
#include "common/result.hpp"

namespace openib::lib {

class Conn;

struct Block {
  uint32_t chunk = 0;   // index in the arena
  uint32_t mem = 0;     // ibd's handle of the chunk's mapping
  uint64_t offset = 0;  // in the chunk's memfd
  size_t size = 0;
  std::byte* ptr = nullptr;
};

class Arena {
 public:
  static constexpr size_t kChunk = 2u << 20;
  static constexpr size_t kAlign = 64;

  explicit Arena(Conn& conn) : conn_(conn) {}
  ~Arena();  // unmaps the chunks locally; release() tells ibd first
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  Result<Block> alloc(size_t size);
  void free(const Block& b);
  // UNMAP_MEM of every chunk (the context is closing).
  void release();

 private:
  struct Chunk {
    UniqueFd fd;
    std::byte* base = nullptr;
    size_t size = 0;
    uint32_t mem = 0;
    std::map<uint64_t, size_t> free;  // offset -> size, coalesced
  };
  Result<uint32_t> grow(size_t min_size);
  static bool take(Chunk& c, size_t size, uint64_t& off);

  Conn& conn_;
  std::mutex mu_;
  std::vector<std::unique_ptr<Chunk>> chunks_;
};

// A memfd of `size` bytes sealed against shrinking and growing (and
// against further sealing): ibd maps only memfds that cannot shrink under
// the device (docs/client-protocol.md §3.1, MAP_MEM).
Result<UniqueFd> sealed_memfd(const char* name, size_t size);

// sealed_memfd + mmap(MAP_SHARED): memory ibd can map for DMA.
struct MemfdMap {
  UniqueFd fd;
  std::byte* base = nullptr;
};
Result<MemfdMap> memfd_map(const char* name, size_t size, void* fixed_addr = nullptr);

}  // namespace openib::lib
