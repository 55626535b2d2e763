// docs/simhca.md §4 (the UAR page), §7.3 (CQ_ARM), §9.3 (EQ_DOORBELL),
// §12.3 (doorbell records) and §12.5 (SQ_DOORBELL): offsets and the 64-bit
// doorbell values, as pure functions. Who stores them, and with which
// barrier, is the caller's business (lib/doorbell.hpp, hca).
#pragma once

#include <cstddef>
#include <cstdint>

namespace openib::dp {

// §4: BAR2 is kNumUars pages of 4 KiB; UAR n is BAR2 offset n * kUarPageSize.
inline constexpr uint64_t kUarPageSize = 4096;
inline constexpr uint32_t kNumUars = 1024;

// §4 offsets in a UAR page.
inline constexpr size_t kUarScannerSleeping = 0x000;  // u32, device-owned (§12.5.2)
inline constexpr size_t kUarCqArm = 0x020;
inline constexpr size_t kUarEqDoorbell = 0x040;
inline constexpr size_t kUarSqDoorbell = 0x800;

// §1: resource numbers (QPN, CQN, EQN, AHN, ...) are 24-bit values in
// 32-bit fields.
inline constexpr uint32_t kNumberMask = 0xffffff;

// §12.5 SQ_DOORBELL: bits 23:0 QPN, 63:32 the SQ producer counter.
inline constexpr uint64_t sq_doorbell(uint32_t qpn, uint32_t producer) {
  return (uint64_t{producer} << 32) | (qpn & kNumberMask);
}

// §7.3 CQ_ARM commands (bits 25:24).
enum class CqArm : uint8_t { kNext = 1, kSolicited = 2 };

// §4/§7.3 CQ_ARM: 23:0 CQN, 25:24 command, 29:28 arm sequence number (must
// change between consecutive arms, for the doorbell scanner), 63:32 the
// consumer counter.
inline constexpr uint64_t cq_arm(uint32_t cqn, CqArm cmd, uint32_t arm_sn, uint32_t consumer) {
  return (uint64_t{consumer} << 32) | (uint64_t{arm_sn & 3u} << 28) |
         (uint64_t{static_cast<uint8_t>(cmd)} << 24) | (cqn & kNumberMask);
}

// §12.3 the CQ record's arm word: the low 32 bits of the CQ_ARM value
// (29:28 sequence number, 25:24 command, 23:0 CQN), stored before CQ_ARM.
inline constexpr uint32_t cq_arm_record(uint32_t cqn, CqArm cmd, uint32_t arm_sn) {
  return static_cast<uint32_t>(cq_arm(cqn, cmd, arm_sn, 0));
}

// §4/§9.3 EQ_DOORBELL: 23:0 EQN, bit 31 ARM, 63:32 the consumer counter.
inline constexpr uint64_t eq_doorbell(uint32_t eqn, bool arm, uint32_t consumer) {
  return (uint64_t{consumer} << 32) | (arm ? uint64_t{1} << 31 : 0) | (eqn & kNumberMask);
}

// §12.3 doorbell records: 8 bytes, big-endian u32 counters.
inline constexpr size_t kDbrSize = 8;
inline constexpr size_t kDbrQpRq = 0x00;    // QP: RQ producer counter
inline constexpr size_t kDbrQpSq = 0x04;    // QP: SQ producer counter
inline constexpr size_t kDbrCqCons = 0x00;  // CQ: consumer counter
inline constexpr size_t kDbrCqArm = 0x04;   // CQ: the last arm, bits 31:0 of cq_arm() (§12.3)
inline constexpr size_t kDbrSrq = 0x00;     // SRQ: producer counter

}  // namespace openib::dp
