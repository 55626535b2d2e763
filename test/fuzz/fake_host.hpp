// The fuzz targets' fake bus for the simhca device core: 256 KiB of
// "mapped" host memory at IOVA 1 MiB (everything else faults, as unmapped
// DMA does, docs/simhca.md §11.2) and MSI-X vectors that always fire.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "sim/simhca/hca.hpp"

namespace openib::simhca::fuzz {

class FakeHost final : public HostPort {
 public:
  static constexpr uint64_t kBase = 1ull << 20, kSize = 256 * 1024;
  std::vector<std::byte> mem = std::vector<std::byte>(kSize);
  Result<void> dma_read(uint64_t iova, std::span<std::byte> out) override {
    if (iova < kBase || iova - kBase > kSize || out.size() > kSize - (iova - kBase))
      return err(EFAULT, "unmapped");
    if (!out.empty()) std::memcpy(out.data(), mem.data() + (iova - kBase), out.size());
    return ok();
  }
  Result<void> dma_write(uint64_t iova, std::span<const std::byte> in) override {
    if (iova < kBase || iova - kBase > kSize || in.size() > kSize - (iova - kBase))
      return err(EFAULT, "unmapped");
    if (!in.empty()) std::memcpy(mem.data() + (iova - kBase), in.data(), in.size());
    return ok();
  }
  bool signal_msix(uint32_t) override { return true; }
};

}  // namespace openib::simhca::fuzz
