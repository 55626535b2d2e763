#include "dma/dma_pool.hpp"

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "common/fd.hpp"
#include "common/log.hpp"

namespace openib::dma {

namespace {
const uint64_t kPage = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
uint64_t round_up(uint64_t v, uint64_t a) { return (v + a - 1) & ~(a - 1); }
bool pow2(uint64_t v) { return v && !(v & (v - 1)); }
}  // namespace

struct PoolState {
  PoolState(vfio::Device& d, PoolOptions o) : dev(d), opts(o) {}
  vfio::Device& dev;
  PoolOptions opts;
  RangeAllocator iova;
  std::vector<std::weak_ptr<Block>> blocks;  // blocks with sub-allocatable room
  PoolStats stats;
};

// One memfd, mmap-ed here and mapped for DMA at one IOVA. Its bytes are
// sub-allocated to buffers; the last buffer's release destroys it.
struct Block {
  std::shared_ptr<PoolState> pool;
  UniqueFd fd;
  void* base = MAP_FAILED;
  uint64_t size = 0;
  uint64_t iova = 0;
  bool iova_held = false;
  bool mapped = false;
  bool dedicated = false;  // one large buffer, not sub-allocated
  RangeAllocator bytes;

  ~Block() {
    if (mapped) {
      auto r = pool->dev.dma_unmap(iova, size);
      pool->stats.unmaps_total++;
      if (!r.ok() && pool->dev.alive())
        log::get("dma")->warn("unmap of block iova {:#x}+{:#x}: {}", iova, size, r.error().str());
      pool->stats.blocks--;
      pool->stats.mapped_bytes -= size;
    }
    if (iova_held) pool->iova.free(iova, size);
    if (base != MAP_FAILED) ::munmap(base, size);
  }
};

static Result<std::shared_ptr<Block>> make_block(const std::shared_ptr<PoolState>& st,
                                                 uint64_t size, uint64_t iova_align) {
  auto b = std::make_shared<Block>();
  b->pool = st;
  b->size = size;
  b->fd = UniqueFd(::memfd_create("openib-dma", MFD_CLOEXEC));
  if (!b->fd) return sys_err("memfd_create for a {} byte DMA block", size);
  if (::ftruncate(b->fd.get(), static_cast<off_t>(size)) < 0)
    return sys_err("ftruncate DMA block to {} bytes", size);
  b->base = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, b->fd.get(), 0);
  if (b->base == MAP_FAILED) return sys_err("mmap of a {} byte DMA block", size);

  auto iova = st->iova.allocate(size, iova_align, st->opts.iova_limit);
  if (!iova) return err(ENOSPC, "no IOVA space for {} bytes below {:#x}", size, st->opts.iova_limit);
  b->iova = *iova;
  b->iova_held = true;

  vfio::DmaMap m{.fd = b->fd.get(), .fd_offset = 0, .vaddr = b->base, .iova = b->iova,
                 .size = size, .readable = st->opts.device_readable,
                 .writable = st->opts.device_writable};
  OPENIB_TRY(st->dev.dma_map(m));
  b->mapped = true;
  st->stats.maps_total++;
  st->stats.blocks++;
  st->stats.mapped_bytes += size;
  b->bytes.add({0, size - 1});
  return b;
}

Result<std::unique_ptr<DmaPool>> DmaPool::create(vfio::Device& dev, PoolOptions opts) {
  if (!pow2(opts.block_size) || opts.block_size < kPage)
    return err(EINVAL, "DMA block size {:#x} is not a power of two of at least a page",
               opts.block_size);
  auto st = std::make_shared<PoolState>(dev, opts);
  OPENIB_TRY_ASSIGN(auto ranges, dev.iova_ranges());
  if (ranges.empty()) {
    st->iova.add(kDefaultIova);
  } else {
    for (const auto& r : ranges) {
      // IOVA 0 is kept out: a zero address in a descriptor is more often a
      // bug than a buffer.
      st->iova.add({r.start == 0 ? kPage : r.start, r.last});
    }
  }
  if (st->iova.largest_free() < opts.block_size)
    return err(ENOSPC, "IOMMU reports no IOVA range that holds a {:#x} byte block",
               opts.block_size);
  return std::unique_ptr<DmaPool>(new DmaPool(std::move(st)));
}

DmaPool::~DmaPool() = default;

Result<DmaBuffer> DmaPool::alloc(size_t size, size_t align) {
  if (size == 0) return err(EINVAL, "DMA allocation of 0 bytes");
  if (!pow2(align)) return err(EINVAL, "DMA alignment {} is not a power of two", align);
  auto& st = state_;
  const uint64_t bs = st->opts.block_size;
  if (align > bs) return err(EINVAL, "DMA alignment {:#x} exceeds the block size {:#x}", align, bs);

  DmaBuffer buf;
  if (size > bs / 2) {
    // Large: a dedicated block, so big buffers never fragment shared ones.
    OPENIB_TRY_ASSIGN(buf.block_, make_block(st, round_up(size, kPage), std::max<uint64_t>(align, kPage)));
    buf.block_->dedicated = true;
    buf.offset_ = 0;
  } else {
    std::erase_if(st->blocks, [](const std::weak_ptr<Block>& w) { return w.expired(); });
    for (auto& w : st->blocks) {
      auto b = w.lock();
      if (auto off = b->bytes.allocate(size, align)) {
        buf.block_ = std::move(b);
        buf.offset_ = *off;
        break;
      }
    }
    if (!buf.block_) {
      OPENIB_TRY_ASSIGN(auto b, make_block(st, bs, bs));
      auto off = b->bytes.allocate(size, align);  // fits: size <= bs/2, align <= bs
      buf.offset_ = *off;
      st->blocks.push_back(b);
      buf.block_ = std::move(b);
    }
  }
  buf.size_ = size;
  buf.data_ = static_cast<std::byte*>(buf.block_->base) + buf.offset_;
  buf.iova_ = buf.block_->iova + buf.offset_;
  std::memset(buf.data_, 0, size);
  st->stats.buffers++;
  return buf;
}

Result<DmaMapping> DmaPool::map_fd(int fd, uint64_t offset, uint64_t size, bool device_writable) {
  if (size == 0) return err(EINVAL, "DMA mapping of 0 bytes");
  if (offset % kPage) return err(EINVAL, "DMA mapping offset {:#x} is not page aligned", offset);
  struct stat sb {};
  if (::fstat(fd, &sb) < 0) return sys_err("fstat of fd {} to map for DMA", fd);
  const uint64_t len = round_up(size, kPage);
  if (offset > static_cast<uint64_t>(sb.st_size) || len > static_cast<uint64_t>(sb.st_size) - offset)
    return err(EINVAL, "DMA mapping [{:#x}, +{:#x}) is beyond the end of the file ({:#x} bytes)",
               offset, len, sb.st_size);

  auto& st = state_;
  void* va = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, static_cast<off_t>(offset));
  if (va == MAP_FAILED) return sys_err("mmap of fd {} for DMA", fd);
  auto iova = st->iova.allocate(len, kPage, st->opts.iova_limit);
  if (!iova) {
    ::munmap(va, len);
    return err(ENOSPC, "no IOVA space for {} bytes below {:#x}", len, st->opts.iova_limit);
  }
  vfio::DmaMap m{.fd = fd, .fd_offset = offset, .vaddr = va, .iova = *iova, .size = len,
                 .readable = true, .writable = device_writable};
  if (auto r = st->dev.dma_map(m); !r.ok()) {
    st->iova.free(*iova, len);
    ::munmap(va, len);
    return r.take_error();
  }
  st->stats.maps_total++;
  st->stats.mapped_bytes += len;
  DmaMapping out;
  out.state_ = st;
  out.iova_ = *iova;
  out.size_ = len;
  out.data_ = va;
  return out;
}

PoolStats DmaPool::stats() const { return state_->stats; }
const PoolOptions& DmaPool::options() const { return state_->opts; }

std::optional<uint64_t> DmaPool::reserve_iova(uint64_t size, uint64_t align) {
  return state_->iova.allocate(round_up(size, kPage), std::max<uint64_t>(align, kPage),
                               state_->opts.iova_limit);
}

void DmaPool::release_iova(uint64_t iova, uint64_t size) {
  state_->iova.free(iova, round_up(size, kPage));
}

// --- DmaBuffer ---

DmaBuffer::DmaBuffer(DmaBuffer&& o) noexcept { *this = std::move(o); }

DmaBuffer& DmaBuffer::operator=(DmaBuffer&& o) noexcept {
  if (this != &o) {
    release();
    block_ = std::move(o.block_);
    data_ = std::exchange(o.data_, nullptr);
    iova_ = std::exchange(o.iova_, 0);
    size_ = std::exchange(o.size_, 0);
    offset_ = std::exchange(o.offset_, 0);
  }
  return *this;
}

DmaBuffer::~DmaBuffer() { release(); }

void DmaBuffer::release() {
  if (!block_) return;
  if (!block_->dedicated) block_->bytes.free(offset_, size_);
  block_->pool->stats.buffers--;
  block_.reset();  // the last buffer unmaps the block
  data_ = nullptr;
}

int DmaBuffer::fd() const { return block_ ? block_->fd.get() : -1; }
uint64_t DmaBuffer::fd_offset() const { return offset_; }

// --- DmaMapping ---

DmaMapping::DmaMapping(DmaMapping&& o) noexcept { *this = std::move(o); }

DmaMapping& DmaMapping::operator=(DmaMapping&& o) noexcept {
  if (this != &o) {
    release();
    state_ = std::move(o.state_);
    iova_ = std::exchange(o.iova_, 0);
    size_ = std::exchange(o.size_, 0);
    data_ = std::exchange(o.data_, nullptr);
  }
  return *this;
}

DmaMapping::~DmaMapping() { release(); }

void DmaMapping::release() {
  if (!state_) return;
  auto r = state_->dev.dma_unmap(iova_, size_);
  state_->stats.unmaps_total++;
  if (!r.ok() && state_->dev.alive())
    log::get("dma")->warn("unmap of iova {:#x}+{:#x}: {}", iova_, size_, r.error().str());
  state_->stats.mapped_bytes -= size_;
  state_->iova.free(iova_, size_);
  ::munmap(data_, size_);
  state_.reset();
  data_ = nullptr;
}

}  // namespace openib::dma
