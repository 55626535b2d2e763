// simhca over vfio-user: region and IRQ layout (docs/simhca.md §2, §4, §10).
#include "sim/simhca/vfio_model.hpp"

#include <fcntl.h>
#include <linux/falloc.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstring>

namespace openib::simhca {

using vfio::user::ServerRegion;

VfioModel::VfioModel(HcaOptions opts) : hca_(std::make_unique<Hca>(*this, opts)) {}

Result<std::unique_ptr<VfioModel>> VfioModel::create(HcaOptions opts) {
  std::unique_ptr<VfioModel> m(new VfioModel(opts));
  m->bar2_fd_ = UniqueFd(::memfd_create("simhca-uar", MFD_CLOEXEC));
  if (!m->bar2_fd_) return sys_err("simhca: memfd_create for BAR2");
  if (::ftruncate(m->bar2_fd_.get(), kBar2Size) < 0) return sys_err("simhca: ftruncate BAR2");
  void* p = ::mmap(nullptr, kBar2Size, PROT_READ | PROT_WRITE, MAP_SHARED, m->bar2_fd_.get(), 0);
  if (p == MAP_FAILED) return sys_err("simhca: mmap BAR2");
  m->bar2_ = static_cast<std::byte*>(p);
  m->scanner_ = std::make_unique<DoorbellScanner>(m->bar2_);
  return m;
}

VfioModel::~VfioModel() {
  scanner_.reset();  // before its pages go
  if (bar2_) ::munmap(bar2_, kBar2Size);
}

std::optional<ServerRegion> VfioModel::region(uint32_t index) const {
  constexpr uint32_t rw = VFIO_REGION_INFO_FLAG_READ | VFIO_REGION_INFO_FLAG_WRITE;
  switch (index) {
    case VFIO_PCI_CONFIG_REGION_INDEX: return ServerRegion{PciConfig::kSize, rw};
    case VFIO_PCI_BAR0_REGION_INDEX: return ServerRegion{kBar0Size, rw};
    case VFIO_PCI_BAR2_REGION_INDEX: {
      // §4: one sparse area per UAR page, so a page can be handed out alone.
      ServerRegion r{kBar2Size, rw | VFIO_REGION_INFO_FLAG_MMAP, bar2_fd_.get(), 0, {}};
      for (uint32_t i = 0; i < kNumUars; ++i) r.sparse.push_back({i * kUarPageSize, kUarPageSize});
      return r;
    }
    default: return std::nullopt;
  }
}

// §10: 32 MSI-X vectors, no INTx, no MSI.
vfio::IrqInfo VfioModel::irq(uint32_t index) const {
  if (index == VFIO_PCI_MSIX_IRQ_INDEX)
    return {index, VFIO_IRQ_INFO_EVENTFD | VFIO_IRQ_INFO_NORESIZE, kNumMsix};
  return {index, 0, 0};
}

Result<void> VfioModel::read(uint32_t region, uint64_t off, std::span<std::byte> out) {
  switch (region) {
    case VFIO_PCI_CONFIG_REGION_INDEX: config_.read(off, out); return ok();
    case VFIO_PCI_BAR2_REGION_INDEX: std::memcpy(out.data(), bar2_ + off, out.size()); return ok();
    case VFIO_PCI_BAR0_REGION_INDEX:
      // §1: aligned 4-byte accesses only; anything else reads as all ones.
      if (out.size() == 4 && off % 4 == 0) {
        uint32_t v = hca_->bar0_read32(off);
        std::memcpy(out.data(), &v, 4);  // little-endian host, little-endian register
      } else {
        std::memset(out.data(), 0xff, out.size());
        hca_->count_bad_access();
      }
      return ok();
    default: return err(EINVAL, "simhca: no region {}", region);
  }
}

Result<void> VfioModel::write(uint32_t region, uint64_t off, std::span<const std::byte> in) {
  switch (region) {
    case VFIO_PCI_CONFIG_REGION_INDEX: config_.write(off, in); return ok();
    case VFIO_PCI_BAR0_REGION_INDEX:
      if (in.size() == 4 && off % 4 == 0) {
        uint32_t v;
        std::memcpy(&v, in.data(), 4);
        hca_->bar0_write32(off, v);
      } else {
        hca_->count_bad_access();
      }
      return ok();
    case VFIO_PCI_BAR2_REGION_INDEX:
      // §4: the page keeps the value; an aligned 8-byte write is a doorbell.
      // Clients map the page too: one atomic store.
      if (in.size() == 8 && off % 8 == 0) {
        uint64_t v;
        std::memcpy(&v, in.data(), 8);
        uar_word64(bar2_, 0, off).store(v);
        hca_->uar_write64(static_cast<uint32_t>(off / kUarPageSize), off % kUarPageSize, v);
      } else {
        std::memcpy(bar2_ + off, in.data(), in.size());
        hca_->count_bad_access();
      }
      return ok();
    default: return err(EINVAL, "simhca: no region {}", region);
  }
}

void VfioModel::reset() {
  hca_->reset();
  scanner_->unwatch_all();
  config_.reset();
  zero_bar2();
}

// Punching the memfd's pages out zeroes them for every mapping (ours and
// the clients') without touching 4 MiB; memset if the file system refuses.
void VfioModel::zero_bar2() {
  if (::fallocate(bar2_fd_.get(), FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, kBar2Size) == 0)
    return;
  std::memset(bar2_, 0, kBar2Size);
}

size_t VfioModel::poll_doorbells() {
  return scanner_->scan([this](uint32_t page) { hca_->uar_scan(page); });
}

void VfioModel::watch_uar(uint32_t uar, bool on) {
  if (scanner_) scanner_->watch(uar, on);  // none yet while the Hca is constructed
}

std::optional<UarWords> VfioModel::uar_words(uint32_t uar) {
  if (uar >= kNumUars) return std::nullopt;
  UarWords w;
  for (size_t i = 0; i < w.size(); ++i)
    w[i] = uar_word64(bar2_, uar, kUarDoorbellOffsets[i]).load(std::memory_order_acquire);
  return w;
}

Result<void> VfioModel::dma_read(uint64_t iova, std::span<std::byte> out) {
  return server().dma_read(iova, out);
}
Result<void> VfioModel::dma_write(uint64_t iova, std::span<const std::byte> in) {
  return server().dma_write(iova, in);
}
DmaCounts VfioModel::dma_counts() const {
  return {server().stats().dma_faults, server().stats().dma_bus_errors};
}
bool VfioModel::signal_msix(uint32_t vector) {
  return server().trigger_irq(VFIO_PCI_MSIX_IRQ_INDEX, vector);
}

}  // namespace openib::simhca
