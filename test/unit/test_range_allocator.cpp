#include <catch2/catch.hpp>

#include <random>
#include <set>

#include "dma/range_allocator.hpp"

using openib::dma::Range;
using openib::dma::RangeAllocator;

TEST_CASE("range allocator: alignment", "[dma][alloc]") {
  RangeAllocator a({{0x1001, 0xFFFFF}});
  auto p = a.allocate(100, 0x1000);
  REQUIRE(p);
  CHECK(*p == 0x2000);  // first aligned address in the range
  auto q = a.allocate(1, 1);
  REQUIRE(q);
  CHECK(*q == 0x1001);  // the unaligned head is still usable
  auto r = a.allocate(0x10, 0x10000);
  REQUIRE(r);
  CHECK(*r % 0x10000 == 0);
  CHECK_FALSE(a.allocate(8, 3));  // not a power of two
  CHECK_FALSE(a.allocate(0, 8));  // nothing to allocate
}

TEST_CASE("range allocator: honours the upper limit (DMA mask)", "[dma][alloc]") {
  RangeAllocator a({{0x1000, (1ull << 40) - 1}});
  const uint64_t mask28 = (1ull << 28) - 1;
  auto p = a.allocate(1ull << 27, 1ull << 27, mask28);
  REQUIRE(p);
  CHECK(*p + (1ull << 27) - 1 <= mask28);
  // The only other 128 MiB-aligned slot below 256 MiB starts at 0, which
  // is outside the range: nothing else of that size fits under the mask.
  CHECK_FALSE(a.allocate(1ull << 27, 1ull << 27, mask28));
  CHECK(a.allocate(1ull << 27, 1ull << 27));  // without the mask it does
}

TEST_CASE("range allocator: exhaustion and reuse", "[dma][alloc]") {
  RangeAllocator a({{0, 0x3FFF}});  // four pages
  std::vector<uint64_t> got;
  for (int i = 0; i < 4; ++i) {
    auto p = a.allocate(0x1000, 0x1000);
    REQUIRE(p);
    got.push_back(*p);
  }
  CHECK(std::set<uint64_t>(got.begin(), got.end()).size() == 4);
  CHECK_FALSE(a.allocate(1));
  CHECK(a.free_bytes() == 0);
  REQUIRE(a.free(got[2], 0x1000));
  auto again = a.allocate(0x1000, 0x1000);
  REQUIRE(again);
  CHECK(*again == got[2]);
}

TEST_CASE("range allocator: fragmentation and coalescing", "[dma][alloc]") {
  RangeAllocator a({{0, 0xFFFF}});
  std::vector<uint64_t> p;
  for (int i = 0; i < 16; ++i) p.push_back(*a.allocate(0x1000, 0x1000));
  // Free every other page: 8 holes of one page, none of two.
  for (int i = 0; i < 16; i += 2) REQUIRE(a.free(p[i], 0x1000));
  CHECK(a.fragments() == 8);
  CHECK(a.free_bytes() == 0x8000);
  CHECK(a.largest_free() == 0x1000);
  CHECK_FALSE(a.allocate(0x2000, 0x1000));
  // Freeing the rest merges everything back into one range.
  for (int i = 1; i < 16; i += 2) REQUIRE(a.free(p[i], 0x1000));
  CHECK(a.fragments() == 1);
  CHECK(a.largest_free() == 0x10000);
  CHECK(a.allocate(0x10000, 0x1000));
}

TEST_CASE("range allocator: rejects double and foreign frees", "[dma][alloc]") {
  RangeAllocator a({{0x10000, 0x1FFFF}});
  auto p = a.allocate(0x100);
  REQUIRE(p);
  REQUIRE(a.free(*p, 0x100));
  CHECK_FALSE(a.free(*p, 0x100));         // double free
  CHECK_FALSE(a.free(0x100, 0x10));       // never part of the space
  CHECK_FALSE(a.free(0x1FFF0, 0x20));     // runs past the end
  CHECK_FALSE(a.free(UINT64_MAX, 2));     // wraps
  CHECK(a.free_bytes() == 0x10000);
}

TEST_CASE("range allocator: ranges reaching the top of the address space", "[dma][alloc]") {
  RangeAllocator a({{UINT64_MAX - 0xFFF, UINT64_MAX}});
  auto p = a.allocate(0x1000, 0x1000);
  REQUIRE(p);
  CHECK(*p == UINT64_MAX - 0xFFF);
  CHECK_FALSE(a.allocate(1));
  REQUIRE(a.free(*p, 0x1000));
  CHECK(a.free_bytes() == 0x1000);
  RangeAllocator all({{0, UINT64_MAX}});
  CHECK(all.free_bytes() == UINT64_MAX);  // saturates
  CHECK(all.allocate(1ull << 63, 1ull << 63));
}

TEST_CASE("range allocator: several seed ranges (IOMMU holes)", "[dma][alloc]") {
  // Like an x86 IOMMU reporting a hole for the MSI window.
  RangeAllocator a({{0, 0xFEDFFFFF}, {0xFEF00000, 0xFFFFFFFF}});
  auto p = a.allocate(0x100000, 0x100000, 0xFFFFFFFF);
  REQUIRE(p);
  // Fill the low range; the next allocation must skip the hole.
  auto big = a.allocate(0xFEE00000 - 0x100000, 1);
  REQUIRE(big);
  auto q = a.allocate(0x1000, 0x1000);
  REQUIRE(q);
  CHECK(*q >= 0xFEF00000);
}

TEST_CASE("range allocator: random alloc/free keeps the books straight", "[dma][alloc]") {
  const uint64_t total = 1 << 20;
  RangeAllocator a({{0, total - 1}});
  std::mt19937_64 rng(42);
  std::vector<std::pair<uint64_t, uint64_t>> live;
  uint64_t used = 0;
  for (int i = 0; i < 5000; ++i) {
    if (live.empty() || rng() % 3) {
      uint64_t size = 1 + rng() % 4096, align = 1ull << (rng() % 8);
      if (auto p = a.allocate(size, align)) {
        CHECK(*p % align == 0);
        for (auto& [s, n] : live) CHECK((*p + size <= s || s + n <= *p));  // no overlap
        live.push_back({*p, size});
        used += size;
      }
    } else {
      size_t k = rng() % live.size();
      REQUIRE(a.free(live[k].first, live[k].second));
      used -= live[k].second;
      live.erase(live.begin() + static_cast<long>(k));
    }
    REQUIRE(a.free_bytes() == total - used);
  }
  for (auto& [s, n] : live) REQUIRE(a.free(s, n));
  CHECK(a.fragments() == 1);
}
