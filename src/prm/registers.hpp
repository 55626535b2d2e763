// docs/simhca.md's register map and command vocabulary, named once: PCI
// identity (§2), the initialization segment (§3), the UAR regions (§4), the
// command entry (§5.2), status codes (§5.5), opcodes (§6), event types
// (§9.4). The driver (src/hca, hca::prm) and the device (src/sim/simhca)
// both read these names; what each side does with a register, and each
// side's reading of the command and data layouts (§6, §7, §12), stay its
// own (src/prm's data-path layouts are the driver's alone; simhca keeps
// its own reading of them as the oracle the driver is tested against).
#pragma once

#include <cstddef>
#include <cstdint>

namespace openib::regmap {

// §2 PCI identity. 0x1234 is QEMU's vendor ID; 0x1b1e is not an assigned ID.
inline constexpr uint16_t kVendorId = 0x1234;
inline constexpr uint16_t kDeviceId = 0x1b1e;

// §4: UAR n's page, alone, is device-specific region kUarRegionBase + n
// (n >= 1, allocated), tagged with VFIO_REGION_INFO_CAP_TYPE
// (VFIO_REGION_TYPE_PCI_VENDOR_TYPE | kVendorId, kUarRegionSubtype).
inline constexpr uint32_t kUarRegionBase = 9;  // VFIO_PCI_NUM_REGIONS
inline constexpr uint32_t kUarRegionType = (1u << 31) | kVendorId;
inline constexpr uint32_t kUarRegionSubtype = 1;

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
inline constexpr size_t kNumObjCounts = (kObjBlockEnd - kObjBlock) / 4;
inline constexpr uint64_t kSimFault = 0xf00;
}  // namespace reg

// §3 register values.
inline constexpr uint32_t kFwRevValue = 0x00010000;  // 1.0
inline constexpr uint32_t kInterfaceRevValue = 1;
inline constexpr uint32_t kMagicValue = 0x53494d48;  // "SIMH"
inline constexpr uint32_t kResetValue = 1;
inline constexpr uint32_t kSimFaultValue = 0x46415441;  // "FATA"

// §3 STATUS bits.
inline constexpr uint32_t kStatusCmdqEnabled = 1u << 0;
inline constexpr uint32_t kStatusHcaInitialized = 1u << 1;
inline constexpr uint32_t kStatusCmdqError = 1u << 2;
inline constexpr uint32_t kStatusCmdqFault = 1u << 3;
inline constexpr uint32_t kStatusFatal = 1u << 31;

// §5.2 command entry: 128 bytes, 32 bytes of inline input and output.
inline constexpr size_t kEntrySize = 128;
inline constexpr size_t kInlineSize = 32;
inline constexpr size_t kEntOpcode = 0x00, kEntToken = 0x04, kEntInLen = 0x08, kEntOutLen = 0x0c;
inline constexpr size_t kEntInMbox = 0x10, kEntOutMbox = 0x18, kEntInlineIn = 0x20;
inline constexpr size_t kEntInlineOut = 0x40, kEntSyndrome = 0x60, kEntStatus = 0x64;
inline constexpr size_t kEntFlags = 0x67;
inline constexpr uint8_t kOwnerBit = 0x01;  // in kEntFlags

// §5.5 status codes.
enum Status : uint8_t {
  kOk = 0x00, kInternalError = 0x01, kBadOpcode = 0x02, kBadParam = 0x03, kBadSysState = 0x04,
  kBadResource = 0x05, kResourceBusy = 0x06, kBadResState = 0x07, kNoResources = 0x08,
  kBadInputLen = 0x09, kBadOutputLen = 0x0a, kBadAddress = 0x0b, kNotSupported = 0x0c,
};

// §6 opcodes.
enum Opcode : uint16_t {
  kOpNop = 0x0001, kOpQueryDeviceCap = 0x0100, kOpInitHca = 0x0101, kOpTeardownHca = 0x0102,
  kOpQueryPort = 0x0103, kOpSetPort = 0x0104, kOpQueryGid = 0x0105, kOpSetGid = 0x0106, kOpCreateEq = 0x0200, kOpDestroyEq = 0x0201,
  kOpQueryEq = 0x0202, kOpCreateCq = 0x0300, kOpDestroyCq = 0x0301, kOpQueryCq = 0x0302,
  kOpCreateQp = 0x0400, kOpModifyQp = 0x0401, kOpQueryQp = 0x0402, kOpDestroyQp = 0x0403,
  kOpCreateSrq = 0x0500, kOpDestroySrq = 0x0501, kOpQuerySrq = 0x0502, kOpArmSrq = 0x0503,
  kOpAllocPd = 0x0600, kOpDeallocPd = 0x0601, kOpCreateMkey = 0x0700, kOpDestroyMkey = 0x0701,
  kOpQueryMkey = 0x0702, kOpCreateAh = 0x0800, kOpDestroyAh = 0x0801, kOpQueryAh = 0x0802,
  kOpAllocUar = 0x0900, kOpDeallocUar = 0x0901, kOpAttachMcg = 0x0a00, kOpDetachMcg = 0x0a01,
};

// §6.3 QUERY_PORT `link_layer` (enum ibv_port_attr.link_layer's values).
enum LinkLayerCode : uint8_t { kLinkLayerInfiniBand = 1, kLinkLayerEthernet = 2 };
// §6.12 GID table entry types (0: the entry is empty; SET_GID: remove it).
enum GidTypeCode : uint8_t { kGidTypeNone = 0, kGidTypeIb = 1, kGidTypeRoceV2 = 2 };

// §9.1 event queue entries, §9.4 event types.
inline constexpr size_t kEqeSize = 32;
enum EventType : uint8_t {
  kEvCmdCompletion = 0x00, kEvCqCompletion = 0x01, kEvPortStateChange = 0x02, kEvLidChange = 0x03,
  kEvQpFatal = 0x04, kEvQpReqErr = 0x05, kEvQpAccessErr = 0x06, kEvQpLastWqeReached = 0x07,
  kEvQpCommEst = 0x08, kEvSqDrained = 0x09, kEvCqError = 0x0a, kEvSrqLimit = 0x0b,
  kEvSrqCatas = 0x0c,
  kEvPkeyChange = 0x0d,        // §14.4: the SM changed the port's P_Key table
  kEvSmChange = 0x0e,          // §14.3: MasterSMLID or MasterSMSL changed
  kEvDeviceFatal = 0x0f,
  kEvClientReregister = 0x10,  // §14.3: the SM set PortInfo:ClientReregister
  kEvGidChange = 0x11,         // §14.3: the SM changed the GID prefix
};

}  // namespace openib::regmap
