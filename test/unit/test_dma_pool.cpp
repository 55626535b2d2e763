#include <catch2/catch.hpp>

#include <sys/mman.h>
#include <unistd.h>

#include <cstring>

#include "dma/dma_pool.hpp"
#include "fake_device.hpp"

using namespace openib;
using openib::test::FakeDevice;

TEST_CASE("dma pool: small buffers share one mapped block", "[dma][pool]") {
  FakeDevice dev;
  auto pool = dma::DmaPool::create(dev);
  REQUIRE(pool.ok());
  std::vector<dma::DmaBuffer> bufs;
  for (int i = 0; i < 100; ++i) {
    auto b = (*pool)->alloc(1000, 64);
    REQUIRE(b.ok());
    CHECK(b->iova() % 64 == 0);
    CHECK(reinterpret_cast<uintptr_t>(b->data()) % 64 == 0);
    bufs.push_back(std::move(*b));
  }
  CHECK(dev.map_calls == 1);
  CHECK((*pool)->stats().blocks == 1);
  CHECK((*pool)->stats().buffers == 100);
  // IOVA and virtual address move together inside a block.
  CHECK(bufs[1].iova() - bufs[0].iova() ==
        static_cast<uint64_t>(static_cast<std::byte*>(bufs[1].data()) -
                              static_cast<std::byte*>(bufs[0].data())));
  // Every buffer is inside the block mapping the device was told about.
  const auto& m = dev.maps.begin()->second;
  for (auto& b : bufs) CHECK((b.iova() >= m.iova && b.iova() + b.size() <= m.iova + m.size));
}

TEST_CASE("dma pool: the last buffer of a block unmaps it (refcount)", "[dma][pool]") {
  FakeDevice dev;
  auto pool = std::move(dma::DmaPool::create(dev).value());
  auto a = std::move(pool->alloc(4096).value());
  auto b = std::move(pool->alloc(4096).value());
  REQUIRE(dev.maps.size() == 1);
  { dma::DmaBuffer moved = std::move(a); }  // moved-to handle frees it
  CHECK_FALSE(a.valid());
  CHECK(dev.maps.size() == 1);  // b still holds the block
  CHECK(pool->stats().buffers == 1);
  b = dma::DmaBuffer();
  CHECK(dev.maps.empty());
  CHECK(dev.unmap_calls == 1);
  CHECK(pool->stats().blocks == 0);
  CHECK(pool->stats().mapped_bytes == 0);
}

TEST_CASE("dma pool: memory is memfd-backed and shared with its fd", "[dma][pool]") {
  FakeDevice dev;
  auto pool = std::move(dma::DmaPool::create(dev).value());
  auto b = std::move(pool->alloc(256).value());
  std::memset(b.data(), 0xA5, 256);
  // Another mapping of the same fd sees the bytes, as a vfio-user server will.
  void* p = mmap(nullptr, 4096, PROT_READ, MAP_SHARED, b.fd(), 0);
  REQUIRE(p != MAP_FAILED);
  CHECK(static_cast<unsigned char*>(p)[b.fd_offset()] == 0xA5);
  CHECK(static_cast<unsigned char*>(p)[b.fd_offset() + 255] == 0xA5);
  munmap(p, 4096);
  // The device was given the same fd.
  CHECK(dev.maps.begin()->second.fd == b.fd());
}

TEST_CASE("dma pool: buffers are zeroed on reuse", "[dma][pool]") {
  FakeDevice dev;
  auto pool = std::move(dma::DmaPool::create(dev).value());
  auto keep = std::move(pool->alloc(64).value());  // keeps the block alive
  void* where;
  {
    auto b = std::move(pool->alloc(512).value());
    std::memset(b.data(), 0xFF, 512);
    where = b.data();
  }
  auto c = std::move(pool->alloc(512).value());
  CHECK(c.data() == where);
  for (auto x : c.bytes()) REQUIRE(x == std::byte{0});
}

TEST_CASE("dma pool: large buffers get a dedicated block", "[dma][pool]") {
  FakeDevice dev;
  auto pool = std::move(dma::DmaPool::create(dev).value());
  auto big = std::move(pool->alloc(5 << 20).value());
  CHECK(dev.maps.size() == 1);
  CHECK(dev.maps.begin()->second.size == (5u << 20));
  auto small = std::move(pool->alloc(64).value());
  CHECK(dev.maps.size() == 2);  // small ones never share a dedicated block
  big = dma::DmaBuffer();
  CHECK(dev.maps.size() == 1);
}

TEST_CASE("dma pool: IOVAs come from the ranges the IOMMU reports", "[dma][pool]") {
  FakeDevice dev;
  dev.ranges = {{0x0, 0xFFFFF}, {0x40000000, 0x7FFFFFFF}};
  auto pool = std::move(dma::DmaPool::create(dev).value());
  auto b = std::move(pool->alloc(100).value());
  // The first range is too small for a 2 MiB block; the second is used.
  CHECK(b.iova() >= 0x40000000);
  CHECK(b.iova() + b.size() - 1 <= 0x7FFFFFFF);
}

TEST_CASE("dma pool: default IOVA range when the IOMMU reports none", "[dma][pool]") {
  FakeDevice dev;
  auto pool = std::move(dma::DmaPool::create(dev).value());
  auto b = std::move(pool->alloc(100).value());
  CHECK(b.iova() >= dma::kDefaultIova.start);
  CHECK(b.iova() <= dma::kDefaultIova.last);
}

TEST_CASE("dma pool: a DMA mask limits the IOVAs and exhaustion is an error", "[dma][pool]") {
  FakeDevice dev;
  dma::PoolOptions o;
  o.iova_limit = (1ull << 23) - 1;  // 8 MiB: room for three 2 MiB blocks above 1 MiB
  auto pool = std::move(dma::DmaPool::create(dev, o).value());
  std::vector<dma::DmaBuffer> bufs;
  for (int i = 0; i < 3; ++i) {
    auto b = pool->alloc(2 << 20);
    REQUIRE(b.ok());
    CHECK(b->iova() + b->size() - 1 <= o.iova_limit);
    bufs.push_back(std::move(*b));
  }
  auto no = pool->alloc(2 << 20);
  REQUIRE_FALSE(no.ok());
  CHECK(no.error().code == ENOSPC);
  bufs.pop_back();
  CHECK(pool->alloc(2 << 20).ok());  // freed IOVA space is reused
}

TEST_CASE("dma pool: bad requests are errors", "[dma][pool]") {
  FakeDevice dev;
  auto pool = std::move(dma::DmaPool::create(dev).value());
  CHECK(pool->alloc(0).error().code == EINVAL);
  CHECK(pool->alloc(64, 3).error().code == EINVAL);
  dma::PoolOptions o;
  o.block_size = 3000;
  CHECK(dma::DmaPool::create(dev, o).error().code == EINVAL);
}

TEST_CASE("dma pool: map_fd maps client memory and undoes it", "[dma][pool]") {
  FakeDevice dev;
  auto pool = std::move(dma::DmaPool::create(dev).value());
  int fd = memfd_create("client", MFD_CLOEXEC);
  REQUIRE(fd >= 0);
  REQUIRE(ftruncate(fd, 3 * 4096) == 0);
  {
    auto m = pool->map_fd(fd, 4096, 5000);
    REQUIRE(m.ok());
    CHECK(m->size() == 8192);  // rounded to pages
    CHECK(dev.maps.at(m->iova()).fd == fd);
    CHECK(dev.maps.at(m->iova()).fd_offset == 4096);
    CHECK(pool->stats().mapped_bytes == 8192);
  }
  CHECK(dev.maps.empty());
  CHECK(pool->stats().mapped_bytes == 0);
  CHECK(pool->map_fd(fd, 4096, 3 * 4096).error().code == EINVAL);  // past the end
  CHECK(pool->map_fd(fd, 100, 10).error().code == EINVAL);         // unaligned
  CHECK(pool->map_fd(-1, 0, 10).error().code == EBADF);
  close(fd);
}

TEST_CASE("dma pool: a vanished device still frees everything locally", "[dma][pool]") {
  FakeDevice dev;
  auto pool = std::move(dma::DmaPool::create(dev).value());
  auto b = std::move(pool->alloc(64).value());
  dev.gone = true;
  b = dma::DmaBuffer();  // unmap fails with ENODEV: no crash, books balanced
  CHECK(pool->stats().blocks == 0);
  CHECK(pool->stats().buffers == 0);
  auto c = pool->alloc(64);
  REQUIRE_FALSE(c.ok());
  CHECK(c.error().code == ENODEV);
}
