// A first-fit allocator of address ranges, with alignment and an upper
// limit, that coalesces on free. It hands out IOVA space (seeded from the
// ranges the IOMMU reports) and sub-allocates the bytes of a mapped block:
// one algorithm, one test suite.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <vector>

namespace openib::dma {

struct Range {
  uint64_t start = 0;
  uint64_t last = 0;  // inclusive, so a range may end at 2^64-1
};

class RangeAllocator {
 public:
  RangeAllocator() = default;
  explicit RangeAllocator(const std::vector<Range>& ranges);

  // Adds a free range (must not overlap one already known).
  void add(Range r);
  // Lowest `align`-aligned address where `size` bytes fit, with the last
  // byte at or below `limit`. align must be a power of two; size > 0.
  std::optional<uint64_t> allocate(uint64_t size, uint64_t align = 1,
                                   uint64_t limit = UINT64_MAX);
  // Returns [addr, addr+size) to the free set. False (and nothing changes)
  // if any of it is already free or was never part of the space.
  bool free(uint64_t addr, uint64_t size);

  uint64_t free_bytes() const;      // saturates at UINT64_MAX
  size_t fragments() const { return free_.size(); }
  uint64_t largest_free() const;    // saturates at UINT64_MAX

 private:
  void insert_free(Range r);  // merges with touching neighbours
  std::map<uint64_t, uint64_t> free_;   // start -> last (inclusive)
  std::vector<Range> space_;            // everything ever added
};

}  // namespace openib::dma
