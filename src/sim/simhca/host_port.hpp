// The device's side of the bus (docs/simhca.md §11.2 DMA, §10 MSI-X,
// §12.5 the doorbell scanner's pages): what the units reach host memory
// and interrupts through, so tests and the fuzz target can run the device
// against a fake bus.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "common/result.hpp"
#include "sim/simhca/doorbell_scanner.hpp"

namespace openib::simhca {

// DMA accesses refused (§11.2), and of those the ones that took a bus
// error (the memory behind a mapping failed); the DMA mappings the driver
// holds now (§3.1 OBJ_DMA_MAPS).
struct DmaCounts {
  uint64_t faults = 0, bus_errors = 0;
  uint64_t maps = 0;
};

// The device's side of the bus: DMA that refuses any byte outside the
// driver's mappings (§11.2), and MSI-X vectors (§10).
class HostPort {
 public:
  virtual ~HostPort() = default;
  virtual Result<void> dma_read(uint64_t iova, std::span<std::byte> out) = 0;
  virtual Result<void> dma_write(uint64_t iova, std::span<const std::byte> in) = 0;
  // False if nothing is routed to the vector (the interrupt is dropped).
  virtual bool signal_msix(uint32_t vector) = 0;
  virtual DmaCounts dma_counts() const { return {}; }

  // §4 UAR pages: UAR `uar` was allocated (ALLOC_UAR, or UAR 0 by
  // INIT_HCA) and gets a page of its own, fresh and zeroed; false if the
  // bus has no room for it (the command then fails NO_RESOURCES). Freed
  // (DEALLOC_UAR, reset): the device no longer reads or writes that page.
  virtual bool uar_alloc(uint32_t /*uar*/) { return true; }
  virtual void uar_free(uint32_t /*uar*/) {}

  // §12.5 doorbell scanner. A bus without mmap-able UAR pages (tests, the
  // fuzz target) keeps these defaults: nothing is watched or stored.
  // The page of UAR `uar` joins (on) or leaves the scanner's watched set.
  virtual void watch_uar(uint32_t /*uar*/, bool /*on*/) {}
  // The doorbell words of the page as last stored (through the mmap or a
  // register write), indexed like kUarDoorbellOffsets.
  virtual std::optional<UarWords> uar_words(uint32_t /*uar*/) { return std::nullopt; }
  virtual ScannerCounts scanner_counts() const { return {}; }
};

}  // namespace openib::simhca
