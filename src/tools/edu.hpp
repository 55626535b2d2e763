// QEMU's "edu" educational PCI device (hw/misc/edu.c), register map from
// QEMU's docs/specs/edu.rst. All registers live in BAR0 (1 MiB MMIO).
// Accesses below 0x80 must be 4 bytes wide; the DMA registers at 0x80..0x98
// take 4 or 8 bytes (a 4-byte write sets the whole 64-bit register).
#pragma once

#include <cstdint>

namespace openib::edu {

inline constexpr uint16_t kVendorId = 0x1234;
inline constexpr uint16_t kDeviceId = 0x11e8;

// edu.rst "MMIO area spec".
inline constexpr uint64_t kRegId = 0x00;         // RO: 0xRRrr00edu, major.minor
inline constexpr uint32_t kIdValue = 0x010000ed;  // version 1.0
inline constexpr uint64_t kRegLiveness = 0x04;   // RW: reads back the inverse
inline constexpr uint64_t kRegFactorial = 0x08;  // RW: write n, read n! when done
inline constexpr uint64_t kRegStatus = 0x20;     // RW, see kStatus*
inline constexpr uint32_t kStatusComputing = 0x01;  // RO: factorial in progress
inline constexpr uint32_t kStatusIrqFact = 0x80;    // raise irq 0x1 when n! is done
inline constexpr uint64_t kRegIrqStatus = 0x24;  // RO: raised interrupt bits
inline constexpr uint64_t kRegIrqRaise = 0x60;   // WO: OR into irq status, fire
inline constexpr uint64_t kRegIrqAck = 0x64;     // WO: clear bits of irq status
inline constexpr uint64_t kRegDmaSrc = 0x80;     // RW: DMA source address
inline constexpr uint64_t kRegDmaDst = 0x88;     // RW: DMA destination address
inline constexpr uint64_t kRegDmaCount = 0x90;   // RW: DMA transfer bytes
inline constexpr uint64_t kRegDmaCmd = 0x98;     // RW, see kDma*
inline constexpr uint32_t kDmaStart = 0x1;       // start; clears when done
inline constexpr uint32_t kDmaToRam = 0x2;       // direction: edu buffer -> RAM
inline constexpr uint32_t kDmaIrq = 0x4;         // raise kIrqDma when done

inline constexpr uint32_t kIrqFactorial = 0x00000001;
inline constexpr uint32_t kIrqDma = 0x00000100;

// edu.rst "DMA controller": the device's own 4 KiB buffer sits at device
// address 0x40000. A transfer reaching outside it makes QEMU hw_error()
// (the whole VM stops), so every transfer is bound-checked before start.
inline constexpr uint64_t kBufferAddr = 0x40000;
inline constexpr uint64_t kBufferSize = 4096;
// QEMU 7.2's edu_check_range() (Debian 12) also rejects a transfer that
// ends exactly at the window's end (an off-by-one fixed in
// QEMU 8.2.1, "edu: fix DMA range upper bound check"),
// so no single transfer may cover all 4096 bytes: we move at most half the
// window at a time, always at its start.
inline constexpr uint64_t kMaxTransfer = kBufferSize / 2;
// edu's default dma_mask property: 28 bits, so RAM-side IOVAs < 256 MiB.
inline constexpr uint64_t kDmaLimit = (1ull << 28) - 1;

}  // namespace openib::edu
