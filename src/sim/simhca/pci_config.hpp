// simhca's PCI configuration space (docs/simhca.md §2): type 0 header,
// two 64-bit BARs, one MSI-X capability. Writes honour a per-byte mask of
// writable bits, as a real function's config space does.
#pragma once

#include <array>
#include <cstdint>
#include <span>

namespace openib::simhca {

class PciConfig {
 public:
  static constexpr size_t kSize = 256;
  PciConfig() { reset(); }
  void reset();
  void read(uint64_t offset, std::span<std::byte> out) const;
  void write(uint64_t offset, std::span<const std::byte> in);

 private:
  void put(size_t off, uint64_t value, int bytes, uint64_t writable = 0);
  std::array<uint8_t, kSize> cfg_{};
  std::array<uint8_t, kSize> mask_{};
};

}  // namespace openib::simhca
