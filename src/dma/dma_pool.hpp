// DMA memory (docs/device-access.md, "DMA memory").
//
// All DMA memory is memfd-backed, so the same pages can be handed to a
// vfio-user server (by fd) and to client processes. The pool maps memory
// into the device's IOVA space in large blocks and sub-allocates them;
// buffers hold a reference on their block, and the last buffer to go
// unmaps the block and returns its IOVA. IOVA space is seeded from the
// ranges the IOMMU reports, or kDefaultIova if it reports none.
//
// Lifetime: the pool and every buffer and mapping must go before the
// Device they were made for.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "common/result.hpp"
#include "dma/range_allocator.hpp"
#include "vfio/device.hpp"

namespace openib::dma {

// Used when the IOMMU reports no usable range (vfio-user servers, older
// kernels): 1 MiB up to 2^48 - 1, the x86-64 4-level page-table reach.
inline constexpr Range kDefaultIova{1ull << 20, (1ull << 48) - 1};

struct PoolOptions {
  uint64_t block_size = 2ull << 20;   // mapped in blocks of this size (power of two)
  uint64_t iova_limit = UINT64_MAX;   // highest IOVA the device can address (its DMA mask)
  bool device_writable = true;
  bool device_readable = true;
};

struct PoolStats {
  uint64_t blocks = 0;         // blocks currently mapped
  uint64_t mapped_bytes = 0;   // bytes currently mapped for DMA
  uint64_t buffers = 0;        // live buffers
  uint64_t maps_total = 0;     // dma_map calls made since creation
  uint64_t unmaps_total = 0;   // dma_unmap calls made since creation
};

class DmaPool;
struct PoolState;
struct Block;

// A sub-allocation of a mapped block. Move-only; freeing it drops its
// block's reference.
class DmaBuffer {
 public:
  DmaBuffer() = default;
  DmaBuffer(DmaBuffer&&) noexcept;
  DmaBuffer& operator=(DmaBuffer&&) noexcept;
  DmaBuffer(const DmaBuffer&) = delete;
  DmaBuffer& operator=(const DmaBuffer&) = delete;
  ~DmaBuffer();

  void* data() const { return data_; }
  std::span<std::byte> bytes() const { return {static_cast<std::byte*>(data_), size_}; }
  uint64_t iova() const { return iova_; }
  size_t size() const { return size_; }
  int fd() const;              // the block's memfd
  uint64_t fd_offset() const;  // offset of this buffer in that memfd
  bool valid() const { return data_ != nullptr; }

 private:
  friend class DmaPool;
  void release();
  std::shared_ptr<Block> block_;
  void* data_ = nullptr;
  uint64_t iova_ = 0;
  size_t size_ = 0;
  uint64_t offset_ = 0;  // within the block
};

// Memory owned elsewhere (a client's memfd) mapped for DMA. Move-only;
// destruction unmaps it from the device and returns the IOVA range.
class DmaMapping {
 public:
  DmaMapping() = default;
  DmaMapping(DmaMapping&&) noexcept;
  DmaMapping& operator=(DmaMapping&&) noexcept;
  DmaMapping(const DmaMapping&) = delete;
  DmaMapping& operator=(const DmaMapping&) = delete;
  ~DmaMapping();

  uint64_t iova() const { return iova_; }
  uint64_t size() const { return size_; }
  void* data() const { return data_; }
  bool valid() const { return state_ != nullptr; }

 private:
  friend class DmaPool;
  void release();
  std::shared_ptr<PoolState> state_;
  uint64_t iova_ = 0;
  uint64_t size_ = 0;       // page-rounded length mapped
  void* data_ = nullptr;    // our own mmap of the fd range
};

class DmaPool {
 public:
  static Result<std::unique_ptr<DmaPool>> create(vfio::Device& dev, PoolOptions opts = {});
  ~DmaPool();

  // `size` bytes aligned to `align` (power of two, at most the page size
  // unless size >= block size, where blocks are page aligned). size 0 is
  // EINVAL. Zero-filled.
  Result<DmaBuffer> alloc(size_t size, size_t align = 64);

  // Maps [offset, offset+size) of a memfd for DMA (page-aligned offset,
  // size rounded up to pages). The fd is duplicated, not taken.
  Result<DmaMapping> map_fd(int fd, uint64_t offset, uint64_t size,
                            bool device_writable = true);

  PoolStats stats() const;
  const PoolOptions& options() const;
  // Reserves an IOVA range from the pool's space without mapping it
  // (for tests and guard regions); free with release_iova.
  std::optional<uint64_t> reserve_iova(uint64_t size, uint64_t align);
  void release_iova(uint64_t iova, uint64_t size);

 private:
  explicit DmaPool(std::shared_ptr<PoolState> s) : state_(std::move(s)) {}
  std::shared_ptr<PoolState> state_;
};

}  // namespace openib::dma
