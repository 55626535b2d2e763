// simhca's own facts of docs/simhca.md (section numbers below are that
// manual's): PCI config space and BARs, limits, capabilities, the UAR
// words the doorbell scanner reads, QP types, states and the attribute
// mask. The register map, opcodes, status codes and event types the driver
// names too are src/prm/registers.hpp's, named once for both; the device's
// reading of the command, WQE and CQE layouts stays its own (codec.hpp,
// wqe.hpp), the oracle the driver is tested against.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "prm/registers.hpp"

namespace openib::simhca {

// §2 PCI identity, §3 registers and values, §4 UAR regions, §5.2 command
// entry, §5.5 status codes, §6 opcodes, §9.4 event types.
using namespace ::openib::regmap;
namespace reg = ::openib::regmap::reg;

inline constexpr uint8_t kRevisionId = 0x01;
inline constexpr uint32_t kClassCode = 0x0c0600;  // serial bus / InfiniBand
inline constexpr uint16_t kSubsysVendor = 0x1234, kSubsysId = 0x0001;
inline constexpr uint8_t kMsixCapOffset = 0x40;

// §2 BARs, §10 MSI-X.
inline constexpr uint64_t kBar0Size = 16 * 1024;
inline constexpr uint32_t kLogNumUars = 10;
inline constexpr uint32_t kNumUars = 1u << kLogNumUars;  // §4: 1024 pages, 4 MiB
inline constexpr uint64_t kUarPageSize = 4096;
inline constexpr uint64_t kBar2Size = kNumUars * kUarPageSize;
inline constexpr uint32_t kNumMsix = 32;
inline constexpr uint64_t kMsixTable = 0x2000, kMsixTableSize = kNumMsix * 16;
inline constexpr uint64_t kMsixPba = 0x3000;

// §3 CMDQ_SIZE: the largest log2 of the command queue's entries.
inline constexpr uint32_t kLogMaxCmdq = 5;

// §4 UAR page doorbells (64-bit little-endian) and the scanner's word (§12.5).
inline constexpr uint64_t kUarScannerSleeping = 0x000;  // 32 bits, device-owned
inline constexpr uint64_t kUarCqArm = 0x020;
inline constexpr uint64_t kUarEqDoorbell = 0x040;
inline constexpr uint64_t kUarSqDoorbell = 0x800;
// The doorbell words of a page, in this order (indices of UarWords).
inline constexpr std::array<uint64_t, 3> kUarDoorbellOffsets = {kUarCqArm, kUarEqDoorbell,
                                                                 kUarSqDoorbell};
enum UarWord : size_t { kWordCqArm = 0, kWordEqDoorbell = 1, kWordSqDoorbell = 2 };
using UarWords = std::array<uint64_t, 3>;

// §5.5, §6: the names the manual gives status codes and opcodes.
const char* status_name(uint8_t s);
const char* opcode_name(uint16_t op);

// §12.4
inline constexpr size_t kCqeSize = 64;

// §6.1 capabilities simhca reports.
struct Caps {
  uint32_t max_qp = 16384, max_cq = 16384, max_eq = 32, max_srq = 256, max_pd = 256;
  uint32_t max_mkey = 4096, max_ah = 4096, max_uar = kNumUars;
  uint8_t log_max_qp_wr = 14, log_max_cqe = 16, log_max_eqe = 14, log_max_srq_wr = 14;
  uint16_t max_sge = 16, max_inline = 512;
  uint8_t num_ports = 1, max_rd_atomic = 16, max_dest_rd_atomic = 16, num_msix = kNumMsix;
  uint32_t max_mkey_pages = 262144, max_mailbox = 16384;  // §6.7: 1 GiB of 4 KiB pages per MKEY
  // §6.7: the translation memory, every MKEY's pages together (64 MiB of
  // device memory); not a QUERY_DEVICE_CAP field.
  uint64_t max_translation_entries = uint64_t{1} << 23;
  uint32_t cap_flags = 0xff;  // RC UC UD SRQ atomics DATA_PATH port events, UD multicast (§6.1)
  uint64_t node_guid = 0x123400fffe000001ull;
  uint32_t max_msg_size = 1u << 31;
  uint8_t local_ca_ack_delay = 15;
};

// §7.7 QP types, §8.1 QP states.
// kQpRaw: the raw Ethernet QP of an Ethernet port (§16.5).
enum QpType : uint8_t { kQpRc = 0, kQpUc = 1, kQpUd = 2, kQpSmi = 3, kQpGsi = 4, kQpRaw = 5 };
enum QpState : uint8_t {
  kReset = 0, kInit = 1, kRtr = 2, kRts = 3, kSqd = 4, kSqe = 5, kErr = 6,
};

// §8.2 attribute mask (enum ibv_qp_attr_mask values).
namespace attr {
inline constexpr uint32_t kState = 1u << 0;
inline constexpr uint32_t kCurState = 1u << 1;
inline constexpr uint32_t kEnSqdAsyncNotify = 1u << 2;
inline constexpr uint32_t kAccessFlags = 1u << 3;
inline constexpr uint32_t kPkeyIndex = 1u << 4;
inline constexpr uint32_t kPort = 1u << 5;
inline constexpr uint32_t kQkey = 1u << 6;
inline constexpr uint32_t kAv = 1u << 7;
inline constexpr uint32_t kPathMtu = 1u << 8;
inline constexpr uint32_t kTimeout = 1u << 9;
inline constexpr uint32_t kRetryCnt = 1u << 10;
inline constexpr uint32_t kRnrRetry = 1u << 11;
inline constexpr uint32_t kRqPsn = 1u << 12;
inline constexpr uint32_t kMaxQpRdAtomic = 1u << 13;
inline constexpr uint32_t kAltPath = 1u << 14;
inline constexpr uint32_t kMinRnrTimer = 1u << 15;
inline constexpr uint32_t kSqPsn = 1u << 16;
inline constexpr uint32_t kMaxDestRdAtomic = 1u << 17;
inline constexpr uint32_t kPathMigState = 1u << 18;
inline constexpr uint32_t kCap = 1u << 19;
inline constexpr uint32_t kDestQpn = 1u << 20;
inline constexpr uint32_t kAll = (1u << 21) - 1;
}  // namespace attr

}  // namespace openib::simhca
