// simhca over vfio-user: region and IRQ layout (docs/simhca.md §2, §4, §10).
#include "sim/simhca/vfio_model.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>

#include "common/log.hpp"

namespace openib::simhca {

using vfio::user::ServerRegion;

namespace {
// §1: a BAR0 read is one aligned 4-byte access, or a read of whole
// registers wholly inside the object-count block (§3.1).
bool bar0_read_ok(uint64_t off, size_t len) {
  if (off % 4 != 0 || len % 4 != 0 || len == 0) return false;
  return len == 4 || (off >= reg::kObjBlock && off + len <= reg::kObjBlockEnd);
}
}  // namespace

VfioModel::VfioModel(HcaOptions opts) : hca_(std::make_unique<Hca>(*this, opts)) {}

Result<std::unique_ptr<VfioModel>> VfioModel::create(HcaOptions opts) {
  return std::unique_ptr<VfioModel>(new VfioModel(opts));
}

VfioModel::~VfioModel() {
  hca_.reset();
  scanner_.reset();  // before its pages go
  for (uint32_t i = 0; i < kNumUars; ++i) uar_free(i);
}

// §4: every allocation gets a new page, so a client that kept a mapping of
// a freed UAR's page reaches only that orphan, which the device no longer
// reads. Sealed (memfd_create(2), fcntl(2) F_ADD_SEALS): a holder of the fd
// cannot shrink it under the device's mapping (the device would fault), nor
// grow it, nor remove or add seals.
bool VfioModel::uar_alloc(uint32_t uar) {
  if (uar >= kNumUars) return false;
  uar_free(uar);
  UniqueFd fd(::memfd_create("simhca-uar", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!fd || ::ftruncate(fd.get(), kUarPageSize) < 0 ||
      ::fcntl(fd.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0) {
    log::get("simhca")->warn("simhca: no page for UAR {}: {}", uar, std::strerror(errno));
    return false;
  }
  void* p = ::mmap(nullptr, kUarPageSize, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (p == MAP_FAILED) {
    log::get("simhca")->warn("simhca: mmap of UAR {}'s page: {}", uar, std::strerror(errno));
    return false;
  }
  pages_[uar] = UarPage{std::move(fd), static_cast<std::byte*>(p)};
  return true;
}

void VfioModel::uar_free(uint32_t uar) {
  if (uar >= kNumUars) return;
  UarPage& pg = pages_[uar];
  if (scanner_) scanner_->watch(uar, nullptr);
  if (pg.mem) ::munmap(pg.mem, kUarPageSize);
  pg = UarPage{};
}

std::optional<ServerRegion> VfioModel::region(uint32_t index) const {
  constexpr uint32_t rw = VFIO_REGION_INFO_FLAG_READ | VFIO_REGION_INFO_FLAG_WRITE;
  switch (index) {
    case VFIO_PCI_CONFIG_REGION_INDEX: return ServerRegion{PciConfig::kSize, rw};
    case VFIO_PCI_BAR0_REGION_INDEX: return ServerRegion{kBar0Size, rw};
    // §4: the architectural window, for the driver's register accesses; not
    // mmap-able (there is no one fd for it: each page is its own).
    case VFIO_PCI_BAR2_REGION_INDEX: return ServerRegion{kBar2Size, rw};
    default: break;
  }
  // §4: an allocated UAR's page alone (UAR 0, the driver's, is not offered).
  if (index <= kUarRegionBase || index - kUarRegionBase >= kNumUars) return std::nullopt;
  const UarPage& pg = pages_[index - kUarRegionBase];
  if (!pg.mem) return std::nullopt;
  return ServerRegion{kUarPageSize, rw | VFIO_REGION_INFO_FLAG_MMAP, pg.fd.get(), 0, {}, kUarRegionType,
                      kUarRegionSubtype};
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
    case VFIO_PCI_BAR2_REGION_INDEX: bar2_read(off, out); return ok();
    case VFIO_PCI_BAR0_REGION_INDEX:
      // §1: aligned 4-byte accesses only, or one read of registers of the
      // object-count block (§3.1); anything else reads as all ones.
      if (bar0_read_ok(off, out.size())) {
        for (size_t at = 0; at < out.size(); at += 4) {
          uint32_t v = hca_->bar0_read32(off + at);
          std::memcpy(out.data() + at, &v, 4);  // little-endian host, little-endian register
        }
      } else {
        std::memset(out.data(), 0xff, out.size());
        hca_->count_bad_access();
      }
      return ok();
    default:
      // §4: a UAR page's region is that page of BAR2 (the server checked the bounds).
      if (region > kUarRegionBase && region - kUarRegionBase < kNumUars) {
        bar2_read((region - kUarRegionBase) * kUarPageSize + off, out);
        return ok();
      }
      return err(EINVAL, "simhca: no region {}", region);
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
    case VFIO_PCI_BAR2_REGION_INDEX: bar2_write(off, in); return ok();
    default:
      if (region > kUarRegionBase && region - kUarRegionBase < kNumUars) {
        bar2_write((region - kUarRegionBase) * kUarPageSize + off, in);
        return ok();
      }
      return err(EINVAL, "simhca: no region {}", region);
  }
}

// §4: reads of a page return what was last stored; a page with no UAR
// allocated reads as zeros.
void VfioModel::bar2_read(uint64_t off, std::span<std::byte> out) {
  for (size_t done = 0; done < out.size();) {
    const uint64_t at = off + done, in_page = at % kUarPageSize;
    const size_t n = std::min<size_t>(out.size() - done, kUarPageSize - in_page);
    const std::byte* mem = pages_[at / kUarPageSize].mem;
    if (mem) std::memcpy(out.data() + done, mem + in_page, n);
    else std::memset(out.data() + done, 0, n);
    done += n;
  }
}

// §4: an aligned 8-byte write is a doorbell (the page keeps the value;
// clients map the page too: one atomic store). Anything else is stored and
// counted; a write to a page with no UAR allocated is only counted.
void VfioModel::bar2_write(uint64_t off, std::span<const std::byte> in) {
  if (in.size() == 8 && off % 8 == 0) {
    uint64_t v;
    std::memcpy(&v, in.data(), 8);
    const auto uar = static_cast<uint32_t>(off / kUarPageSize);
    if (std::byte* mem = pages_[uar].mem) uar_word64(mem, off % kUarPageSize).store(v);
    hca_->uar_write64(uar, off % kUarPageSize, v);
    return;
  }
  for (size_t done = 0; done < in.size();) {
    const uint64_t at = off + done, in_page = at % kUarPageSize;
    const size_t n = std::min<size_t>(in.size() - done, kUarPageSize - in_page);
    if (std::byte* mem = pages_[at / kUarPageSize].mem) std::memcpy(mem + in_page, in.data() + done, n);
    done += n;
  }
  hca_->count_bad_access();
}

// §11.5: every UAR is freed with the tables (Hca::reset), and its page with it.
void VfioModel::reset() {
  hca_->reset();
  scanner_->unwatch_all();
  config_.reset();
}

size_t VfioModel::poll_doorbells() {
  return scanner_->scan([this](uint32_t page) { hca_->uar_scan(page); });
}

void VfioModel::watch_uar(uint32_t uar, bool on) {
  if (uar < kNumUars) scanner_->watch(uar, on ? pages_[uar].mem : nullptr);
}

std::optional<UarWords> VfioModel::uar_words(uint32_t uar) {
  if (uar >= kNumUars || !pages_[uar].mem) return std::nullopt;
  UarWords w;
  for (size_t i = 0; i < w.size(); ++i)
    w[i] = uar_word64(pages_[uar].mem, kUarDoorbellOffsets[i]).load(std::memory_order_acquire);
  return w;
}

Result<void> VfioModel::dma_read(uint64_t iova, std::span<std::byte> out) {
  return server().dma_read(iova, out);
}
Result<void> VfioModel::dma_write(uint64_t iova, std::span<const std::byte> in) {
  return server().dma_write(iova, in);
}
DmaCounts VfioModel::dma_counts() const {
  return {server().stats().dma_faults, server().stats().dma_bus_errors, server().dma_mappings()};
}
bool VfioModel::signal_msix(uint32_t vector) {
  return server().trigger_irq(VFIO_PCI_MSIX_IRQ_INDEX, vector);
}

}  // namespace openib::simhca
