// vfio-user protocol 0.9.1 message codecs (QEMU docs/interop/vfio-user.rst).
//
// Pure functions over byte spans: encoders return the bytes, decoders
// validate every length, argsz, count and capability-chain link and return
// EPROTO with a message that says what was wrong. Fields are little-endian
// (the spec says "host endianness"; every host we build for is
// little-endian, and writing it down explicitly keeps captures portable).
//
// A message is a 16-byte header (spec "Header") followed by a payload; the
// payload codecs below take and return the bytes after the header. File
// descriptors travel beside the bytes (SCM_RIGHTS) and are not part of
// these codecs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <linux/vfio.h>

#include "common/result.hpp"
#include "vfio/device.hpp"

namespace openib::vfio::user {

using Bytes = std::vector<std::byte>;
using ByteSpan = std::span<const std::byte>;

// Spec "Commands".
enum class Command : uint16_t {
  kVersion = 1,
  kDmaMap = 2,
  kDmaUnmap = 3,
  kDeviceGetInfo = 4,
  kDeviceGetRegionInfo = 5,
  kDeviceGetRegionIoFds = 6,
  kDeviceGetIrqInfo = 7,
  kDeviceSetIrqs = 8,
  kRegionRead = 9,
  kRegionWrite = 10,
  kDmaRead = 11,
  kDmaWrite = 12,
  kDeviceReset = 13,
};
const char* command_name(uint16_t command);

// Protocol version we speak (libvfio-user and QEMU: major 0, minor 1).
inline constexpr uint16_t kVersionMajor = 0;
inline constexpr uint16_t kVersionMinor = 1;

// Spec "Header": flags bits 0-3 type, bit 4 no_reply, bit 5 error.
inline constexpr size_t kHeaderSize = 16;
inline constexpr uint32_t kFlagsTypeMask = 0xf;
inline constexpr uint32_t kTypeCommand = 0;
inline constexpr uint32_t kTypeReply = 1;
inline constexpr uint32_t kFlagNoReply = 1u << 4;
inline constexpr uint32_t kFlagError = 1u << 5;
inline constexpr uint32_t kFlagsKnown = kFlagsTypeMask | kFlagNoReply | kFlagError;

// Spec "Version": defaults when a capability is absent.
inline constexpr uint64_t kDefaultMaxDataXfer = 1u << 20;
inline constexpr uint32_t kDefaultMaxMsgFds = 1;
inline constexpr uint64_t kDefaultPgsizes = 4096;
inline constexpr uint32_t kDefaultMaxDmaMaps = 65535;

// Our hard limits, whatever the peer announces: no message (header
// included) larger than kMaxMessageSize, no more than kMaxFds fds with one
// message, no VERSION JSON longer than kMaxVersionJson.
inline constexpr uint64_t kMaxDataXfer = kDefaultMaxDataXfer;
inline constexpr size_t kMaxMessageSize = kMaxDataXfer + 4096;
inline constexpr uint32_t kMaxFds = 16;
inline constexpr size_t kMaxVersionJson = 4096;
// Region-info capability chains: at most this many links, and a reply
// (fixed part + caps) no larger than kMaxRegionInfoSize.
inline constexpr uint32_t kMaxCaps = 16;
inline constexpr uint32_t kMaxSparseAreas = 1024;
// Regions a device may report: the 9 of VFIO PCI and device-specific ones
// (simhca: one per UAR page, docs/simhca.md §4).
inline constexpr uint32_t kMaxRegions = 9 + 4096;
inline constexpr uint32_t kMaxRegionInfoSize = 32 + kMaxCaps * 8 + 8 + kMaxSparseAreas * 16;

// Fixed payload sizes from the spec tables.
inline constexpr uint32_t kDmaMapSize = 32;
inline constexpr uint32_t kDmaUnmapSize = 24;
inline constexpr uint32_t kDeviceInfoSize = 16;
inline constexpr uint32_t kRegionInfoSize = 32;
inline constexpr uint32_t kIrqInfoSize = 16;
inline constexpr uint32_t kIrqSetSize = 20;
inline constexpr uint32_t kRegionAccessSize = 16;
inline constexpr uint32_t kDmaAccessSize = 16;

// ---- header ----------------------------------------------------------------

struct Header {
  uint16_t id = 0;
  uint16_t command = 0;
  uint32_t size = 0;   // whole message, header included
  uint32_t flags = 0;
  uint32_t error = 0;  // errno, valid in a reply with kFlagError

  uint32_t type() const { return flags & kFlagsTypeMask; }
  bool is_reply() const { return type() == kTypeReply; }
  bool is_error() const { return (flags & kFlagError) != 0; }
  bool no_reply() const { return (flags & kFlagNoReply) != 0; }
};

void encode_header(const Header& h, std::span<std::byte, kHeaderSize> out);
// Validates the header alone: size in [16, max_size], a known type, no
// unknown flag bits. `bytes` must hold at least kHeaderSize bytes.
Result<Header> decode_header(ByteSpan bytes, size_t max_size = kMaxMessageSize);

// A whole message: the header (with size filled in) followed by payload.
Bytes encode_message(Header h, ByteSpan payload);
Bytes encode_command(uint16_t id, Command c, ByteSpan payload);
// The same with the no_reply flag (spec "Header": the server sends no reply).
Bytes encode_posted_command(uint16_t id, Command c, ByteSpan payload);
Bytes encode_reply(uint16_t id, uint16_t command, ByteSpan payload);
Bytes encode_error_reply(uint16_t id, uint16_t command, uint32_t error);

struct Message {
  Header header;
  ByteSpan payload;  // view into the decoded bytes
};
// Decodes a complete message; header.size must equal bytes.size().
Result<Message> decode_message(ByteSpan bytes, size_t max_size = kMaxMessageSize);

// ---- VFIO_USER_VERSION -----------------------------------------------------

struct Capabilities {
  uint32_t max_msg_fds = kDefaultMaxMsgFds;
  uint64_t max_data_xfer_size = kDefaultMaxDataXfer;
  uint64_t pgsizes = kDefaultPgsizes;
  uint32_t max_dma_maps = kDefaultMaxDmaMaps;
};

struct Version {
  uint16_t major = kVersionMajor;
  uint16_t minor = kVersionMinor;
  std::string json;  // capabilities JSON without the NUL; may be empty
};

Bytes encode_version(const Version& v);
Result<Version> decode_version(ByteSpan payload);
// {"capabilities":{"max_msg_fds":N,"max_data_xfer_size":N,"pgsizes":N,"max_dma_maps":N}}
std::string capabilities_json(const Capabilities& caps);
// Absent fields take the spec defaults; unknown fields (migration,
// twin_socket, write_multiple) are ignored; wrong types or zero/absurd
// values are EPROTO.
Result<Capabilities> parse_capabilities(std::string_view json);

// ---- VFIO_USER_DMA_MAP / DMA_UNMAP -----------------------------------------

struct DmaMapRequest {
  uint32_t flags = 0;  // VFIO_DMA_MAP_FLAG_READ | VFIO_DMA_MAP_FLAG_WRITE
  uint64_t offset = 0; // into the fd passed with the message
  uint64_t address = 0;
  uint64_t size = 0;
};
Bytes encode_dma_map(const DmaMapRequest& r);
Result<DmaMapRequest> decode_dma_map(ByteSpan payload);

// Request and reply have the same layout (the reply echoes the entry).
struct DmaUnmap {
  uint32_t argsz = kDmaUnmapSize;
  uint32_t flags = 0;
  uint64_t address = 0;
  uint64_t size = 0;
};
Bytes encode_dma_unmap(const DmaUnmap& r);
Result<DmaUnmap> decode_dma_unmap(ByteSpan payload);

// ---- VFIO_USER_DEVICE_GET_INFO ---------------------------------------------

// Request: argsz (max reply payload), other fields zero.
Bytes encode_device_info_request(uint32_t argsz = kDeviceInfoSize);
Result<uint32_t> decode_device_info_request(ByteSpan payload);  // returns argsz
Bytes encode_device_info(const DeviceInfo& info);
Result<DeviceInfo> decode_device_info(ByteSpan payload);

// ---- VFIO_USER_DEVICE_GET_REGION_INFO --------------------------------------

struct RegionInfoRequest {
  uint32_t argsz = kRegionInfoSize;
  uint32_t index = 0;
};
Bytes encode_region_info_request(const RegionInfoRequest& r);
Result<RegionInfoRequest> decode_region_info_request(ByteSpan payload);

struct RegionInfoReply {
  uint32_t argsz = 0;     // size the full reply needs
  RegionInfo info;        // info.offset is the mmap offset into the region fd
  bool truncated = false; // argsz > payload: caps left out, ask again
};
// Encodes the reply to a request with `request_argsz`: the fixed part, and
// the type capability (info.type non-zero) and the sparse-mmap capability
// (info.sparse non-empty) when they fit (otherwise argsz says how much
// room they need, as the kernel does).
Bytes encode_region_info(const RegionInfo& info, uint32_t request_argsz);
// Walks the capability chain (bounds, alignment, no revisits, at most
// kMaxCaps links); checks sparse areas lie within the region; takes the
// type capability (VFIO_REGION_INFO_CAP_TYPE) into info.type/subtype.
Result<RegionInfoReply> decode_region_info(ByteSpan payload);

// ---- VFIO_USER_DEVICE_GET_IRQ_INFO -----------------------------------------

Bytes encode_irq_info_request(uint32_t index);
Result<uint32_t> decode_irq_info_request(ByteSpan payload);  // returns index
Bytes encode_irq_info(const IrqInfo& info);
Result<IrqInfo> decode_irq_info(ByteSpan payload);

// ---- VFIO_USER_DEVICE_SET_IRQS ---------------------------------------------

struct IrqSet {
  uint32_t flags = 0;  // one VFIO_IRQ_SET_DATA_* | one VFIO_IRQ_SET_ACTION_*
  uint32_t index = 0;
  uint32_t start = 0;
  uint32_t count = 0;
  std::vector<uint8_t> bools;  // DATA_BOOL only: count entries

  uint32_t data_type() const { return flags & VFIO_IRQ_SET_DATA_TYPE_MASK; }
  uint32_t action() const { return flags & VFIO_IRQ_SET_ACTION_TYPE_MASK; }
};
Bytes encode_irq_set(const IrqSet& s);
Result<IrqSet> decode_irq_set(ByteSpan payload);

// ---- VFIO_USER_REGION_READ / REGION_WRITE ----------------------------------

struct RegionAccess {
  uint64_t offset = 0;
  uint32_t region = 0;
  uint32_t count = 0;
  ByteSpan data;  // write request / read reply; a view into the payload
};
Bytes encode_region_access(uint64_t offset, uint32_t region, uint32_t count,
                           ByteSpan data = {});
// REGION_READ request and REGION_WRITE reply: no data.
Result<RegionAccess> decode_region_access_header(ByteSpan payload, uint64_t max_count);
// REGION_WRITE request and REGION_READ reply: count bytes of data follow.
Result<RegionAccess> decode_region_access_data(ByteSpan payload, uint64_t max_count);

// ---- VFIO_USER_DMA_READ / DMA_WRITE (server -> client) ---------------------

struct DmaAccess {
  uint64_t address = 0;
  uint64_t count = 0;
  ByteSpan data;
};
Bytes encode_dma_access(uint64_t address, uint64_t count, ByteSpan data = {});
// DMA_READ request, DMA_WRITE reply: no data. (The spec table gives the
// DMA_WRITE reply's count 4 bytes; libvfio-user sends the 16-byte request
// struct. We accept 12 or 16 bytes there.)
Result<DmaAccess> decode_dma_access_header(ByteSpan payload, uint64_t max_count);
// DMA_WRITE request, DMA_READ reply.
Result<DmaAccess> decode_dma_access_data(ByteSpan payload, uint64_t max_count);

}  // namespace openib::vfio::user
