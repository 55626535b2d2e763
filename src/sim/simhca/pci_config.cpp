// docs/simhca.md §2; PCI Local Bus 3.0 6.1 (header), 6.2.5.1 (BARs),
// 6.8.2 (MSI-X capability).
#include "sim/simhca/pci_config.hpp"

#include <cstring>

#include "sim/simhca/registers.hpp"

namespace openib::simhca {

void PciConfig::put(size_t off, uint64_t v, int n, uint64_t writable) {
  for (int i = 0; i < n; ++i) {
    cfg_[off + i] = static_cast<uint8_t>(v >> (8 * i));
    mask_[off + i] = static_cast<uint8_t>(writable >> (8 * i));
  }
}

void PciConfig::reset() {
  cfg_.fill(0);
  mask_.fill(0);
  put(0x00, kVendorId, 2);
  put(0x02, kDeviceId, 2);
  put(0x04, 0, 2, 0x0006);               // command: memory space, bus master
  put(0x06, 0x0010, 2);                  // status: capability list
  put(0x08, kRevisionId, 1);
  put(0x09, kClassCode, 3);              // prog-if, subclass, class
  // BAR0: 64-bit non-prefetchable memory (type bits 2:1 = 10b).
  put(0x10, 0x4, 4, ~(kBar0Size - 1) & 0xfffffff0u);
  put(0x14, 0, 4, 0xffffffffu);
  // BAR2: 64-bit prefetchable memory.
  put(0x18, 0xc, 4, ~(kBar2Size - 1) & 0xfffffff0u);
  put(0x1c, 0, 4, 0xffffffffu);
  put(0x2c, kSubsysVendor, 2);
  put(0x2e, kSubsysId, 2);
  put(0x34, kMsixCapOffset, 1);          // capabilities pointer
  put(0x3d, 0, 1);                       // interrupt pin: none
  // MSI-X: ID 0x11, last capability; table size N-1; enable and mask writable.
  put(kMsixCapOffset + 0, 0x11, 1);
  put(kMsixCapOffset + 1, 0x00, 1);
  put(kMsixCapOffset + 2, kNumMsix - 1, 2, 0xc000);
  put(kMsixCapOffset + 4, kMsixTable | 0, 4);  // BIR 0
  put(kMsixCapOffset + 8, kMsixPba | 0, 4);    // BIR 0
}

void PciConfig::read(uint64_t off, std::span<std::byte> out) const {
  for (size_t i = 0; i < out.size(); ++i)
    out[i] = off + i < kSize ? std::byte(cfg_[off + i]) : std::byte(0xff);
}

void PciConfig::write(uint64_t off, std::span<const std::byte> in) {
  for (size_t i = 0; i < in.size() && off + i < kSize; ++i) {
    const uint8_t m = mask_[off + i];
    cfg_[off + i] = static_cast<uint8_t>((cfg_[off + i] & ~m) | (std::to_integer<uint8_t>(in[i]) & m));
  }
}

}  // namespace openib::simhca
