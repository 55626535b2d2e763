// simhca as a vfio-user device: binds the device core (hca.hpp) to the
// server framework (src/vfio/vfio_user_server.hpp). Regions: config space,
// BAR0 (REGION_READ/WRITE only) and BAR2, whose UAR pages are memfd-backed
// and offered one sparse mmap area per page (docs/simhca.md §2, §4); the
// doorbell scanner (§12.5) watches the device's own mapping of that memfd
// from the device loop's thread.
// IRQs: 32 MSI-X vectors (§10). DMA goes through the server's checked
// dma_read/dma_write (§11.2).
#pragma once

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
  void watch_uar(uint32_t uar, bool on) override;
  std::optional<UarWords> uar_words(uint32_t uar) override;
  void zero_bar2();

  std::unique_ptr<Hca> hca_;
  PciConfig config_;
  UniqueFd bar2_fd_;
  std::byte* bar2_ = nullptr;
  std::unique_ptr<DoorbellScanner> scanner_;  // after bar2_: it watches that mapping
};

}  // namespace openib::simhca
