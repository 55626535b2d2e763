// simhca as a vfio-user device: binds the device core (hca.hpp) to the
// server framework (src/vfio/vfio_user_server.hpp). Regions: config space,
// BAR0 and BAR2 (REGION_READ/WRITE only), and one device-specific region
// per allocated UAR page (docs/simhca.md §2, §4): each page is its own
// sealed memfd, made afresh when its UAR is allocated, which that region
// offers for mmap; the doorbell scanner (§12.5) watches the device's own
// mapping of each page from the device loop's thread.
// IRQs: 32 MSI-X vectors (§10). DMA goes through the server's checked
// dma_read/dma_write (§11.2).
#pragma once

#include <array>
#include <memory>

#include "common/fd.hpp"
#include "sim/simhca/hca.hpp"
#include "sim/simhca/pci_config.hpp"
#include "vfio/vfio_user_server.hpp"

namespace openib::simhca {

class VfioModel final : public vfio::user::DeviceModel, public HostPort {
 public:
  static Result<std::unique_ptr<VfioModel>> create(HcaOptions opts);
  ~VfioModel() override;

  uint32_t num_regions() const override { return kUarRegionBase + kNumUars; }
  std::optional<vfio::user::ServerRegion> region(uint32_t index) const override;
  vfio::IrqInfo irq(uint32_t index) const override;
  Result<void> read(uint32_t region, uint64_t offset, std::span<std::byte> out) override;
  Result<void> write(uint32_t region, uint64_t offset, std::span<const std::byte> in) override;
  void reset() override;  // VFIO_USER_DEVICE_RESET: §11.5

  Hca& hca() { return *hca_; }

  // §12.5: the doorbell scanner, driven by the device loop (§13): one pass
  // over the watched pages, handing each changed page to the device core.
  // Returns the number of pages taken. Device (loop) thread only.
  size_t poll_doorbells();
  DoorbellScanner& scanner() { return *scanner_; }
  ScannerCounts scanner_counts() const override { return scanner_->counts(); }
  DmaCounts dma_counts() const override;

 private:
  explicit VfioModel(HcaOptions opts);
  // HostPort: the server's checked DMA and eventfd-backed MSI-X.
  Result<void> dma_read(uint64_t iova, std::span<std::byte> out) override;
  Result<void> dma_write(uint64_t iova, std::span<const std::byte> in) override;
  bool signal_msix(uint32_t vector) override;
  bool uar_alloc(uint32_t uar) override;
  void uar_free(uint32_t uar) override;
  void watch_uar(uint32_t uar, bool on) override;
  std::optional<UarWords> uar_words(uint32_t uar) override;
  // BAR2 accesses (ibd's register reads and writes), page by page.
  void bar2_read(uint64_t off, std::span<std::byte> out);
  void bar2_write(uint64_t off, std::span<const std::byte> in);

  // §4: a UAR page, while its UAR is allocated: a memfd of one page sealed
  // against shrinking and growing (a client's ftruncate fails with EPERM,
  // so no mapping of it can fault), and the device's mapping of it.
  struct UarPage {
    UniqueFd fd;
    std::byte* mem = nullptr;
  };
  // Before hca_: the Hca's constructor resets, which frees pages.
  std::array<UarPage, kNumUars> pages_;
  std::unique_ptr<DoorbellScanner> scanner_ = std::make_unique<DoorbellScanner>();
  std::unique_ptr<Hca> hca_;
  PciConfig config_;
};

}  // namespace openib::simhca
