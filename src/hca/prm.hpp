// The driver's reading of docs/simhca.md (the programmer's reference
// manual) for the command path: register offsets, opcodes, status codes,
// event types. The data-path layouts (UAR page, WQEs, CQE) are src/prm's,
// named here too so the command path reads them as before; the byte
// helpers are common/byte_order.hpp's. This is deliberately not shared
// with src/sim/simhca: the manual is the contract.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "common/byte_order.hpp"
#include "prm/cqe.hpp"
#include "prm/uar.hpp"

namespace openib::hca::prm {

// §2
inline constexpr uint16_t kVendorId = 0x1234;
inline constexpr uint16_t kDeviceId = 0x1b1e;
// §4: UAR n's page alone is the device-specific region kUarRegionBase + n,
// whose REGION_INFO carries VFIO_REGION_INFO_CAP_TYPE (vendor type, subtype 1).
inline constexpr uint32_t kUarRegionBase = 9;  // VFIO_PCI_NUM_REGIONS
inline constexpr uint32_t kUarRegionType = (1u << 31) | kVendorId;  // VFIO_REGION_TYPE_PCI_VENDOR_TYPE
inline constexpr uint32_t kUarRegionSubtype = 1;

// §3 BAR0 initialization segment.
inline constexpr uint64_t kFwRev = 0x000;
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
inline constexpr uint64_t kSimFault = 0xf00;
// §3.1 object counts: OBJ_PDS .. OBJ_DMA_MAPS, nine registers read as one block.
inline constexpr uint64_t kObjCounts = 0x080;
inline constexpr size_t kNumObjCounts = 9;

inline constexpr uint32_t kSupportedInterfaceRev = 1;
inline constexpr uint32_t kMagicValue = 0x53494d48;
inline constexpr uint32_t kStatusCmdqEnabled = 1u << 0;
inline constexpr uint32_t kStatusHcaInitialized = 1u << 1;
inline constexpr uint32_t kStatusCmdqError = 1u << 2;
inline constexpr uint32_t kStatusCmdqFault = 1u << 3;
inline constexpr uint32_t kStatusFatal = 1u << 31;

// §4 UAR pages (src/prm/uar.hpp).
using ::openib::dp::kUarCqArm;
using ::openib::dp::kUarEqDoorbell;
using ::openib::dp::kUarPageSize;
using ::openib::dp::kUarSqDoorbell;

// §5.2 command entry.
inline constexpr size_t kEntrySize = 128;
inline constexpr size_t kInline = 32;
inline constexpr size_t kEntOpcode = 0x00, kEntToken = 0x04, kEntInLen = 0x08, kEntOutLen = 0x0c;
inline constexpr size_t kEntInMbox = 0x10, kEntOutMbox = 0x18, kEntInlineIn = 0x20;
inline constexpr size_t kEntInlineOut = 0x40, kEntSyndrome = 0x60, kEntStatus = 0x64;
inline constexpr size_t kEntFlags = 0x67;
inline constexpr uint8_t kOwner = 0x01;

// §5.5
enum Status : uint8_t {
  kOk = 0x00, kInternalError = 0x01, kBadOpcode = 0x02, kBadParam = 0x03, kBadSysState = 0x04,
  kBadResource = 0x05, kResourceBusy = 0x06, kBadResState = 0x07, kNoResources = 0x08,
  kBadInputLen = 0x09, kBadOutputLen = 0x0a, kBadAddress = 0x0b, kNotSupported = 0x0c,
};

// §6
enum Opcode : uint16_t {
  kNop = 0x0001, kQueryDeviceCap = 0x0100, kInitHca = 0x0101, kTeardownHca = 0x0102,
  kQueryPort = 0x0103, kSetPort = 0x0104, kCreateEq = 0x0200, kDestroyEq = 0x0201,
  kQueryEq = 0x0202, kCreateCq = 0x0300, kDestroyCq = 0x0301, kQueryCq = 0x0302,
  kCreateQp = 0x0400, kModifyQp = 0x0401, kQueryQp = 0x0402, kDestroyQp = 0x0403,
  kCreateSrq = 0x0500, kDestroySrq = 0x0501, kQuerySrq = 0x0502, kArmSrq = 0x0503,
  kAllocPd = 0x0600, kDeallocPd = 0x0601, kCreateMkey = 0x0700, kDestroyMkey = 0x0701,
  kQueryMkey = 0x0702, kCreateAh = 0x0800, kDestroyAh = 0x0801, kQueryAh = 0x0802,
  kAllocUar = 0x0900, kDeallocUar = 0x0901, kAttachMcg = 0x0a00, kDetachMcg = 0x0a01,
};

// §9.1, §9.4
inline constexpr size_t kEqeSize = 32;
using ::openib::dp::kCqeSize;  // §12.4 (src/prm/cqe.hpp)
enum Event : uint8_t {
  kEvCmdCompletion = 0x00, kEvCqCompletion = 0x01, kEvPortStateChange = 0x02,
  kEvLidChange = 0x03, kEvQpFatal = 0x04, kEvQpReqErr = 0x05, kEvQpAccessErr = 0x06,
  kEvQpLastWqeReached = 0x07, kEvQpCommEst = 0x08, kEvSqDrained = 0x09, kEvCqError = 0x0a,
  kEvSrqLimit = 0x0b, kEvSrqCatas = 0x0c, kEvPkeyChange = 0x0d, kEvSmChange = 0x0e, kEvDeviceFatal = 0x0f,
  kEvClientReregister = 0x10, kEvGidChange = 0x11,
};

// Big-endian fields of host-memory structures (§1): the tree's helpers.
using ::openib::bytes::get16;
using ::openib::bytes::get32;
using ::openib::bytes::get64;
using ::openib::bytes::get8;
using ::openib::bytes::put16;
using ::openib::bytes::put32;
using ::openib::bytes::put64;
using ::openib::bytes::put8;

const char* status_name(uint8_t status);

}  // namespace openib::hca::prm
