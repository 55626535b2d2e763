#include "dma/range_allocator.hpp"

#include <algorithm>
#include <cassert>

namespace openib::dma {

RangeAllocator::RangeAllocator(const std::vector<Range>& ranges) {
  for (const Range& r : ranges) add(r);
}

void RangeAllocator::add(Range r) {
  if (r.last < r.start) return;
  space_.push_back(r);
  insert_free(r);
}

void RangeAllocator::insert_free(Range r) {
  // Insert and merge with touching neighbours.
  auto next = free_.upper_bound(r.start);
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->second != UINT64_MAX && prev->second + 1 == r.start) {
      r.start = prev->first;
      free_.erase(prev);
    }
  }
  if (next != free_.end() && r.last != UINT64_MAX && r.last + 1 == next->first) {
    r.last = next->second;
    free_.erase(next);
  }
  free_[r.start] = r.last;
}

std::optional<uint64_t> RangeAllocator::allocate(uint64_t size, uint64_t align,
                                                 uint64_t limit) {
  if (size == 0 || align == 0 || (align & (align - 1)) != 0) return std::nullopt;
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    const uint64_t start = it->first, last = it->second;
    if (start > limit) break;  // ordered by start: nothing further fits
    // Round up to the alignment, watching for wrap-around.
    const uint64_t mask = align - 1;
    if (start > UINT64_MAX - mask) continue;
    const uint64_t a = (start + mask) & ~mask;
    if (a > last) continue;
    const uint64_t room = last - a;  // bytes after `a`, minus one
    if (room < size - 1) continue;
    const uint64_t end = a + (size - 1);  // inclusive
    if (end > limit) continue;
    // Carve [a, end] out of [start, last].
    free_.erase(it);
    if (a > start) free_[start] = a - 1;
    if (end < last) free_[end + 1] = last;
    return a;
  }
  return std::nullopt;
}

bool RangeAllocator::free(uint64_t addr, uint64_t size) {
  if (size == 0 || addr > UINT64_MAX - (size - 1)) return false;
  const uint64_t last = addr + (size - 1);
  // Must lie inside the space that was added ...
  const bool inside = std::any_of(space_.begin(), space_.end(), [&](const Range& r) {
    return addr >= r.start && last <= r.last;
  });
  if (!inside) return false;
  // ... and overlap nothing already free.
  auto next = free_.lower_bound(addr);
  if (next != free_.end() && next->first <= last) return false;
  if (next != free_.begin() && std::prev(next)->second >= addr) return false;
  insert_free({addr, last});
  return true;
}

uint64_t RangeAllocator::free_bytes() const {
  uint64_t total = 0;
  for (const auto& [start, last] : free_) {
    const uint64_t len_minus_1 = last - start;
    if (len_minus_1 == UINT64_MAX || total > UINT64_MAX - len_minus_1 - 1) return UINT64_MAX;
    total += len_minus_1 + 1;
  }
  return total;
}

uint64_t RangeAllocator::largest_free() const {
  uint64_t best = 0;
  for (const auto& [start, last] : free_) {
    const uint64_t len_minus_1 = last - start;
    if (len_minus_1 == UINT64_MAX) return UINT64_MAX;
    best = std::max(best, len_minus_1 + 1);
  }
  return best;
}

}  // namespace openib::dma
