// simhca's register map, opcodes, status codes and event types, as
// docs/simhca.md specifies them (section numbers below are that manual's).
// This header is the device's reading of the manual; the driver (src/hca)
// has its own, on purpose.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace openib::simhca {

// §2 PCI identity. 0x1234 is QEMU's vendor ID; 0x1b1e is not an assigned ID.
inline constexpr uint16_t kVendorId = 0x1234;
inline constexpr uint16_t kDeviceId = 0x1b1e;
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
// §4: UAR n's page, alone, is device-specific region kUarRegionBase + n
// (n >= 1, allocated), tagged with VFIO_REGION_INFO_CAP_TYPE
// (VFIO_REGION_TYPE_PCI_VENDOR_TYPE | kVendorId, kUarRegionSubtype).
inline constexpr uint32_t kUarRegionBase = 9;  // VFIO_PCI_NUM_REGIONS
inline constexpr uint32_t kUarRegionType = (1u << 31) | kVendorId;
inline constexpr uint32_t kUarRegionSubtype = 1;
inline constexpr uint32_t kNumMsix = 32;
inline constexpr uint64_t kMsixTable = 0x2000, kMsixTableSize = kNumMsix * 16;
inline constexpr uint64_t kMsixPba = 0x3000;

// §3 initialization segment (BAR0, 32-bit little-endian registers).
namespace reg {
inline constexpr uint64_t kFwRev = 0x000;
inline constexpr uint64_t kFwRevSub = 0x004;
inline constexpr uint64_t kInterfaceRev = 0x008;
inline constexpr uint64_t kMagic = 0x00c;
inline constexpr uint64_t kCmdqAddrLo = 0x010;
inline constexpr uint64_t kCmdqAddrHi = 0x014;
inline constexpr uint64_t kCmdqSize = 0x018;
inline constexpr uint64_t kCmdqCtrl = 0x01c;
inline constexpr uint64_t kCmdDoorbell = 0x020;
inline constexpr uint64_t kStatus = 0x024;
inline constexpr uint64_t kHealthSyndrome = 0x028;
inline constexpr uint64_t kCmdsCompleted = 0x02c;
inline constexpr uint64_t kCmdsDropped = 0x030;
inline constexpr uint64_t kBadAccess = 0x034;
inline constexpr uint64_t kReset = 0x038;
inline constexpr uint64_t kCapSummary = 0x03c;
inline constexpr uint64_t kScannerSleeps = 0x040;    // §3, §12.5
inline constexpr uint64_t kScannerWakeups = 0x044;
inline constexpr uint64_t kMmapDoorbells = 0x048;
inline constexpr uint64_t kMmapDoorbellsBad = 0x04c;
inline constexpr uint64_t kDmaFaults = 0x050;  // §3, §11.2
inline constexpr uint64_t kDmaBusErrors = 0x054;
// §3.1 object counts: the live objects of each kind, one register each,
// in this order; the block may be read with one access (§1).
inline constexpr uint64_t kObjPds = 0x080;
inline constexpr uint64_t kObjMkeys = 0x084;
inline constexpr uint64_t kObjCqs = 0x088;
inline constexpr uint64_t kObjQps = 0x08c;
inline constexpr uint64_t kObjSrqs = 0x090;
inline constexpr uint64_t kObjAhs = 0x094;
inline constexpr uint64_t kObjEqs = 0x098;
inline constexpr uint64_t kObjUars = 0x09c;
inline constexpr uint64_t kObjDmaMaps = 0x0a0;
inline constexpr uint64_t kObjBlock = kObjPds, kObjBlockEnd = kObjDmaMaps + 4;
inline constexpr uint64_t kSimFault = 0xf00;
}  // namespace reg

inline constexpr uint32_t kFwRevValue = 0x00010000;  // 1.0
inline constexpr uint32_t kInterfaceRevValue = 1;
inline constexpr uint32_t kMagicValue = 0x53494d48;  // "SIMH"
inline constexpr uint32_t kResetValue = 1;
inline constexpr uint32_t kSimFaultValue = 0x46415441;  // "FATA"
inline constexpr uint32_t kLogMaxCmdq = 5;

// §3 STATUS bits.
inline constexpr uint32_t kStatusCmdqEnabled = 1u << 0;
inline constexpr uint32_t kStatusHcaInitialized = 1u << 1;
inline constexpr uint32_t kStatusCmdqError = 1u << 2;
inline constexpr uint32_t kStatusCmdqFault = 1u << 3;
inline constexpr uint32_t kStatusFatal = 1u << 31;

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

// §5.2 command entry.
inline constexpr size_t kEntrySize = 128;
inline constexpr size_t kInlineSize = 32;
inline constexpr size_t kEntryInlineIn = 0x20;
inline constexpr size_t kEntryInlineOut = 0x40;
inline constexpr size_t kEntryTail = 0x60;  // syndrome, status, flags
inline constexpr uint8_t kOwnerBit = 0x01;

// §5.5 status codes.
enum Status : uint8_t {
  kOk = 0x00,
  kInternalError = 0x01,
  kBadOpcode = 0x02,
  kBadParam = 0x03,
  kBadSysState = 0x04,
  kBadResource = 0x05,
  kResourceBusy = 0x06,
  kBadResState = 0x07,
  kNoResources = 0x08,
  kBadInputLen = 0x09,
  kBadOutputLen = 0x0a,
  kBadAddress = 0x0b,
  kNotSupported = 0x0c,
};
const char* status_name(uint8_t s);

// §6 opcodes.
enum Opcode : uint16_t {
  kOpNop = 0x0001,
  kOpQueryDeviceCap = 0x0100,
  kOpInitHca = 0x0101,
  kOpTeardownHca = 0x0102,
  kOpQueryPort = 0x0103,
  kOpSetPort = 0x0104,
  kOpCreateEq = 0x0200,
  kOpDestroyEq = 0x0201,
  kOpQueryEq = 0x0202,
  kOpCreateCq = 0x0300,
  kOpDestroyCq = 0x0301,
  kOpQueryCq = 0x0302,
  kOpCreateQp = 0x0400,
  kOpModifyQp = 0x0401,
  kOpQueryQp = 0x0402,
  kOpDestroyQp = 0x0403,
  kOpCreateSrq = 0x0500,
  kOpDestroySrq = 0x0501,
  kOpQuerySrq = 0x0502,
  kOpArmSrq = 0x0503,
  kOpAllocPd = 0x0600,
  kOpDeallocPd = 0x0601,
  kOpCreateMkey = 0x0700,
  kOpDestroyMkey = 0x0701,
  kOpQueryMkey = 0x0702,
  kOpCreateAh = 0x0800,
  kOpDestroyAh = 0x0801,
  kOpQueryAh = 0x0802,
  kOpAllocUar = 0x0900,
  kOpDeallocUar = 0x0901,
  kOpAttachMcg = 0x0a00,
  kOpDetachMcg = 0x0a01,
};
const char* opcode_name(uint16_t op);

// §9.4 event types.
enum EventType : uint8_t {
  kEvCmdCompletion = 0x00,
  kEvCqCompletion = 0x01,
  kEvPortStateChange = 0x02,
  kEvLidChange = 0x03,
  kEvQpFatal = 0x04,
  kEvQpReqErr = 0x05,
  kEvQpAccessErr = 0x06,
  kEvQpLastWqeReached = 0x07,
  kEvQpCommEst = 0x08,
  kEvSqDrained = 0x09,
  kEvCqError = 0x0a,
  kEvSrqLimit = 0x0b,
  kEvSrqCatas = 0x0c,
  kEvPkeyChange = 0x0d,        // §14.4: the SM changed the port's P_Key table
  kEvSmChange = 0x0e,          // §14.3: MasterSMLID or MasterSMSL changed
  kEvDeviceFatal = 0x0f,
  kEvClientReregister = 0x10,  // §14.3: the SM set PortInfo:ClientReregister
  kEvGidChange = 0x11,         // §14.3: the SM changed the GID prefix
};
inline constexpr size_t kEqeSize = 32;
inline constexpr size_t kCqeSize = 64;

// §6.1 capabilities simhca reports.
struct Caps {
  uint32_t max_qp = 16384, max_cq = 16384, max_eq = 32, max_srq = 256, max_pd = 256;
  uint32_t max_mkey = 4096, max_ah = 4096, max_uar = kNumUars;
  uint8_t log_max_qp_wr = 14, log_max_cqe = 16, log_max_eqe = 14, log_max_srq_wr = 14;
  uint16_t max_sge = 16, max_inline = 512;
  uint8_t num_ports = 1, max_rd_atomic = 16, max_dest_rd_atomic = 16, num_msix = kNumMsix;
  uint32_t max_mkey_pages = 1024, max_mailbox = 16384;
  uint32_t cap_flags = 0xff;  // RC UC UD SRQ atomics DATA_PATH port events, UD multicast (§6.1)
  uint64_t node_guid = 0x123400fffe000001ull;
  uint32_t max_msg_size = 1u << 31;
  uint8_t local_ca_ack_delay = 15;
};

// §7.7 QP types, §8.1 QP states.
enum QpType : uint8_t { kQpRc = 0, kQpUc = 1, kQpUd = 2, kQpSmi = 3, kQpGsi = 4 };
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
