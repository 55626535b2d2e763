// vfio-user 0.9.1 codecs; section names below are those of QEMU's
// docs/interop/vfio-user.rst.
#include "vfio/vfio_user_proto.hpp"

#include <algorithm>
#include <bit>
#include <cstring>

#include <nlohmann/json.hpp>

#include "common/byte_order.hpp"

namespace openib::vfio::user {
namespace {

// Little-endian field writer appending to a byte vector (vfio-user's order).
class Writer {
 public:
  explicit Writer(size_t reserve = 0) { b_.reserve(reserve); }
  Writer& u8(uint8_t v) { return put(v, 1); }
  Writer& u16(uint16_t v) { return put(v, 2); }
  Writer& u32(uint32_t v) { return put(v, 4); }
  Writer& u64(uint64_t v) { return put(v, 8); }
  Writer& bytes(ByteSpan s) {
    b_.insert(b_.end(), s.begin(), s.end());
    return *this;
  }
  Bytes take() { return std::move(b_); }

 private:
  Writer& put(uint64_t v, size_t n) {
    const size_t at = b_.size();
    b_.resize(at + n);
    ::openib::bytes::put_le(b_, at, n, v);  // qualified: Writer has a member bytes()
    return *this;
  }
  Bytes b_;
};

// vfio-user fields are little-endian ("Message format"); common/byte_order.hpp
// reads them, bounded (a field past the payload reads as 0: lengths are
// checked first anyway, by need()).
using bytes::get_le16;
using bytes::get_le32;
using bytes::get_le64;

Error proto_err(std::string msg) { return Error{EPROTO, "vfio-user: " + std::move(msg)}; }

// Payload at least `need` bytes long.
Result<void> need(ByteSpan p, size_t n, const char* what) {
  if (p.size() < n)
    return proto_err(fmt::format("{}: payload {} bytes, need {}", what, p.size(), n));
  return ok();
}
// Payload exactly `n` bytes long.
Result<void> exact(ByteSpan p, size_t n, const char* what) {
  if (p.size() != n)
    return proto_err(fmt::format("{}: payload {} bytes, expected {}", what, p.size(), n));
  return ok();
}

}  // namespace

const char* command_name(uint16_t c) {
  switch (static_cast<Command>(c)) {
    case Command::kVersion: return "VERSION";
    case Command::kDmaMap: return "DMA_MAP";
    case Command::kDmaUnmap: return "DMA_UNMAP";
    case Command::kDeviceGetInfo: return "DEVICE_GET_INFO";
    case Command::kDeviceGetRegionInfo: return "DEVICE_GET_REGION_INFO";
    case Command::kDeviceGetRegionIoFds: return "DEVICE_GET_REGION_IO_FDS";
    case Command::kDeviceGetIrqInfo: return "DEVICE_GET_IRQ_INFO";
    case Command::kDeviceSetIrqs: return "DEVICE_SET_IRQS";
    case Command::kRegionRead: return "REGION_READ";
    case Command::kRegionWrite: return "REGION_WRITE";
    case Command::kDmaRead: return "DMA_READ";
    case Command::kDmaWrite: return "DMA_WRITE";
    case Command::kDeviceReset: return "DEVICE_RESET";
  }
  return "UNKNOWN";
}

// ---- Header ------------------------------------------------------------------

void encode_header(const Header& h, std::span<std::byte, kHeaderSize> out) {
  Writer w(kHeaderSize);
  w.u16(h.id).u16(h.command).u32(h.size).u32(h.flags).u32(h.error);
  Bytes b = w.take();
  std::copy(b.begin(), b.end(), out.begin());
}

Result<Header> decode_header(ByteSpan b, size_t max_size) {
  OPENIB_TRY(need(b, kHeaderSize, "header"));
  Header h;
  h.id = get_le16(b, 0);
  h.command = get_le16(b, 2);
  h.size = get_le32(b, 4);
  h.flags = get_le32(b, 8);
  h.error = get_le32(b, 12);
  if (h.size < kHeaderSize)
    return proto_err(fmt::format("message size {} below the 16-byte header", h.size));
  if (h.size > max_size)
    return proto_err(fmt::format("{} message of {} bytes exceeds the limit of {}",
                                 command_name(h.command), h.size, max_size));
  if (h.type() != kTypeCommand && h.type() != kTypeReply)
    return proto_err(fmt::format("message type {} is neither command nor reply", h.type()));
  if (h.flags & ~kFlagsKnown)
    return proto_err(fmt::format("unknown header flags {:#x}", h.flags));
  return h;
}

Bytes encode_message(Header h, ByteSpan payload) {
  h.size = static_cast<uint32_t>(kHeaderSize + payload.size());
  Bytes out(kHeaderSize);
  encode_header(h, std::span<std::byte, kHeaderSize>(out.data(), kHeaderSize));
  out.insert(out.end(), payload.begin(), payload.end());
  return out;
}

Bytes encode_command(uint16_t id, Command c, ByteSpan payload) {
  return encode_message(Header{id, static_cast<uint16_t>(c), 0, kTypeCommand, 0}, payload);
}

Bytes encode_posted_command(uint16_t id, Command c, ByteSpan payload) {
  return encode_message(Header{id, static_cast<uint16_t>(c), 0, kTypeCommand | kFlagNoReply, 0}, payload);
}

Bytes encode_reply(uint16_t id, uint16_t command, ByteSpan payload) {
  return encode_message(Header{id, command, 0, kTypeReply, 0}, payload);
}

// Spec "Header": "If an error occurs, the reply message must only include
// the reply header."
Bytes encode_error_reply(uint16_t id, uint16_t command, uint32_t error) {
  return encode_message(Header{id, command, 0, kTypeReply | kFlagError, error}, {});
}

Result<Message> decode_message(ByteSpan b, size_t max_size) {
  OPENIB_TRY_ASSIGN(Header h, decode_header(b, max_size));
  if (h.size != b.size())
    return proto_err(fmt::format("header says {} bytes, message has {}", h.size, b.size()));
  return Message{h, b.subspan(kHeaderSize)};
}

// ---- VFIO_USER_VERSION ---------------------------------------------------------
// major u16, minor u16, then optional NUL-terminated JSON.

Bytes encode_version(const Version& v) {
  Writer w(4 + v.json.size() + 1);
  w.u16(v.major).u16(v.minor);
  if (!v.json.empty()) {
    w.bytes(std::as_bytes(std::span(v.json.data(), v.json.size())));
    w.u8(0);
  }
  return w.take();
}

Result<Version> decode_version(ByteSpan p) {
  OPENIB_TRY(need(p, 4, "VERSION"));
  Version v;
  v.major = get_le16(p, 0);
  v.minor = get_le16(p, 2);
  ByteSpan data = p.subspan(4);
  if (data.empty()) return v;
  if (data.size() > kMaxVersionJson + 1)
    return proto_err(fmt::format("VERSION: JSON of {} bytes exceeds {}", data.size(),
                                 kMaxVersionJson));
  if (data.back() != std::byte{0}) return proto_err("VERSION: JSON not NUL-terminated");
  auto text = data.first(data.size() - 1);
  if (std::find(text.begin(), text.end(), std::byte{0}) != text.end())
    return proto_err("VERSION: NUL inside the JSON");
  v.json.assign(reinterpret_cast<const char*>(text.data()), text.size());
  return v;
}

std::string capabilities_json(const Capabilities& c) {
  nlohmann::json j;
  j["capabilities"] = {{"max_msg_fds", c.max_msg_fds},
                       {"max_data_xfer_size", c.max_data_xfer_size},
                       {"pgsizes", c.pgsizes},
                       {"max_dma_maps", c.max_dma_maps}};
  return j.dump();
}

Result<Capabilities> parse_capabilities(std::string_view text) {
  Capabilities caps;
  if (text.empty()) return caps;
  // No exceptions: parse() returns a discarded value on bad input.
  nlohmann::json j = nlohmann::json::parse(text.begin(), text.end(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) return proto_err("VERSION: capabilities are not a JSON object");
  auto it = j.find("capabilities");
  if (it == j.end()) return caps;
  if (!it->is_object()) return proto_err("VERSION: \"capabilities\" is not an object");
  const nlohmann::json& c = *it;
  auto field = [&](const char* name, uint64_t lo, uint64_t hi, auto& out) -> Result<void> {
    auto f = c.find(name);
    if (f == c.end()) return ok();
    if (!f->is_number_unsigned())
      return proto_err(fmt::format("VERSION: {} is not an unsigned number", name));
    uint64_t v = f->template get<uint64_t>();
    if (v < lo || v > hi)
      return proto_err(fmt::format("VERSION: {} = {} outside [{}, {}]", name, v, lo, hi));
    out = static_cast<std::remove_reference_t<decltype(out)>>(v);
    return ok();
  };
  OPENIB_TRY(field("max_msg_fds", 1, UINT32_MAX, caps.max_msg_fds));
  OPENIB_TRY(field("max_data_xfer_size", 1, UINT32_MAX, caps.max_data_xfer_size));
  OPENIB_TRY(field("pgsizes", 1, UINT64_MAX, caps.pgsizes));
  OPENIB_TRY(field("max_dma_maps", 1, UINT32_MAX, caps.max_dma_maps));
  return caps;
}

// ---- VFIO_USER_DMA_MAP ---------------------------------------------------------
// argsz u32, flags u32, offset u64, address u64, size u64 (32 bytes; argsz
// is the size of this structure).

Bytes encode_dma_map(const DmaMapRequest& r) {
  Writer w(kDmaMapSize);
  w.u32(kDmaMapSize).u32(r.flags).u64(r.offset).u64(r.address).u64(r.size);
  return w.take();
}

Result<DmaMapRequest> decode_dma_map(ByteSpan p) {
  OPENIB_TRY(exact(p, kDmaMapSize, "DMA_MAP"));
  uint32_t argsz = get_le32(p, 0);
  if (argsz != kDmaMapSize)
    return proto_err(fmt::format("DMA_MAP: argsz {} != {}", argsz, kDmaMapSize));
  DmaMapRequest r{get_le32(p, 4), get_le64(p, 8), get_le64(p, 16), get_le64(p, 24)};
  if (r.flags & ~uint32_t{VFIO_DMA_MAP_FLAG_READ | VFIO_DMA_MAP_FLAG_WRITE})
    return proto_err(fmt::format("DMA_MAP: unknown flags {:#x}", r.flags));
  if (r.size == 0) return proto_err("DMA_MAP: size 0");
  if (r.address + r.size < r.address) return proto_err("DMA_MAP: address + size overflows");
  if (r.offset + r.size < r.offset) return proto_err("DMA_MAP: offset + size overflows");
  return r;
}

// ---- VFIO_USER_DMA_UNMAP -------------------------------------------------------
// argsz u32, flags u32, address u64, size u64 (24 bytes).

Bytes encode_dma_unmap(const DmaUnmap& r) {
  Writer w(kDmaUnmapSize);
  w.u32(r.argsz).u32(r.flags).u64(r.address).u64(r.size);
  return w.take();
}

Result<DmaUnmap> decode_dma_unmap(ByteSpan p) {
  OPENIB_TRY(exact(p, kDmaUnmapSize, "DMA_UNMAP"));
  DmaUnmap r{get_le32(p, 0), get_le32(p, 4), get_le64(p, 8), get_le64(p, 16)};
  if (r.argsz < kDmaUnmapSize)
    return proto_err(fmt::format("DMA_UNMAP: argsz {} < {}", r.argsz, kDmaUnmapSize));
  if (r.flags != 0)  // dirty-page bitmaps (VFIO_DMA_UNMAP_FLAG_GET_DIRTY_BITMAP) unsupported
    return proto_err(fmt::format("DMA_UNMAP: unsupported flags {:#x}", r.flags));
  if (r.address + r.size < r.address) return proto_err("DMA_UNMAP: address + size overflows");
  return r;
}

// ---- VFIO_USER_DEVICE_GET_INFO -------------------------------------------------
// argsz u32, flags u32, num_regions u32, num_irqs u32.

Bytes encode_device_info_request(uint32_t argsz) {
  return Writer(kDeviceInfoSize).u32(argsz).u32(0).u32(0).u32(0).take();
}

Result<uint32_t> decode_device_info_request(ByteSpan p) {
  OPENIB_TRY(exact(p, kDeviceInfoSize, "DEVICE_GET_INFO"));
  uint32_t argsz = get_le32(p, 0);
  if (argsz < kDeviceInfoSize)
    return proto_err(fmt::format("DEVICE_GET_INFO: argsz {} < {}", argsz, kDeviceInfoSize));
  return argsz;
}

Bytes encode_device_info(const DeviceInfo& i) {
  return Writer(kDeviceInfoSize).u32(kDeviceInfoSize).u32(i.flags).u32(i.num_regions)
      .u32(i.num_irqs).take();
}

Result<DeviceInfo> decode_device_info(ByteSpan p) {
  OPENIB_TRY(exact(p, kDeviceInfoSize, "DEVICE_GET_INFO reply"));
  uint32_t argsz = get_le32(p, 0);
  if (argsz != kDeviceInfoSize)
    return proto_err(fmt::format("DEVICE_GET_INFO reply: argsz {} != {}", argsz,
                                 kDeviceInfoSize));
  DeviceInfo i{get_le32(p, 4), get_le32(p, 8), get_le32(p, 12)};
  // More regions than kMaxRegions (simhca: 9 + one per UAR page,
  // docs/simhca.md §4) or 64 IRQ types is not a device we can drive.
  if (i.num_regions > kMaxRegions || i.num_irqs > 64)
    return proto_err(fmt::format("DEVICE_GET_INFO reply: {} regions, {} irqs",
                                 i.num_regions, i.num_irqs));
  return i;
}

// ---- VFIO_USER_DEVICE_GET_REGION_INFO ------------------------------------------
// argsz u32, flags u32, index u32, cap_offset u32, size u64, offset u64,
// then the capability chain (offsets from the start of this structure).
// Cap header: id u16, version u16, next u32. Sparse mmap (id 1, version 1):
// nr_areas u32, reserved u32, then nr_areas x {offset u64, size u64}.

Bytes encode_region_info_request(const RegionInfoRequest& r) {
  return Writer(kRegionInfoSize).u32(r.argsz).u32(0).u32(r.index).u32(0).u64(0).u64(0).take();
}

Result<RegionInfoRequest> decode_region_info_request(ByteSpan p) {
  OPENIB_TRY(exact(p, kRegionInfoSize, "DEVICE_GET_REGION_INFO"));
  RegionInfoRequest r{get_le32(p, 0), get_le32(p, 8)};
  if (r.argsz < kRegionInfoSize)
    return proto_err(fmt::format("DEVICE_GET_REGION_INFO: argsz {} < {}", r.argsz,
                                 kRegionInfoSize));
  return r;
}

Bytes encode_region_info(const RegionInfo& info, uint32_t request_argsz) {
  // Capabilities, in chain order: the type (8-byte header, type, subtype),
  // then the sparse areas (8-byte header, count, pad, the areas).
  const uint32_t type_size = info.type ? 16 : 0;
  const uint32_t sparse_size = info.sparse.empty() ? 0 : static_cast<uint32_t>(8 + 8 + 16 * info.sparse.size());
  const bool caps = type_size + sparse_size != 0;
  const uint32_t full = kRegionInfoSize + type_size + sparse_size;
  const bool fits = request_argsz >= full;
  uint32_t flags = info.flags & ~uint32_t{VFIO_REGION_INFO_FLAG_CAPS};
  if (caps && fits) flags |= VFIO_REGION_INFO_FLAG_CAPS;
  Writer w(full);
  w.u32(full).u32(flags).u32(info.index).u32(caps && fits ? kRegionInfoSize : 0)
      .u64(info.size).u64(info.offset);
  if (caps && fits) {
    if (type_size) {
      const uint32_t next = sparse_size ? kRegionInfoSize + type_size : 0;
      w.u16(VFIO_REGION_INFO_CAP_TYPE).u16(1).u32(next).u32(info.type).u32(info.subtype);
    }
    if (sparse_size) {
      w.u16(VFIO_REGION_INFO_CAP_SPARSE_MMAP).u16(1).u32(0);
      w.u32(static_cast<uint32_t>(info.sparse.size())).u32(0);
      for (const SparseArea& a : info.sparse) w.u64(a.offset).u64(a.size);
    }
  }
  return w.take();
}

namespace {

Result<void> decode_sparse_cap(ByteSpan caps, uint32_t off, RegionInfo& info) {
  // caps is the payload cut at argsz; off points at the cap header.
  if (!info.sparse.empty()) return proto_err("REGION_INFO: two sparse-mmap capabilities");
  if (get_le16(caps, off + 2) != 1)
    return proto_err(fmt::format("REGION_INFO: sparse-mmap version {}", get_le16(caps, off + 2)));
  if (caps.size() - off < 16) return proto_err("REGION_INFO: sparse-mmap cap truncated");
  uint32_t nr = get_le32(caps, off + 8);
  if (nr == 0 || nr > kMaxSparseAreas)
    return proto_err(fmt::format("REGION_INFO: {} sparse areas", nr));
  if ((caps.size() - off - 16) / 16 < nr)
    return proto_err(fmt::format("REGION_INFO: {} sparse areas overrun argsz", nr));
  for (uint32_t i = 0; i < nr; ++i) {
    SparseArea a{get_le64(caps, off + 16 + 16 * i), get_le64(caps, off + 24 + 16 * i)};
    if (a.size == 0 || a.offset > info.size || a.size > info.size - a.offset)
      return proto_err(fmt::format("REGION_INFO: sparse area [{:#x}, +{:#x}) outside region "
                                   "of {:#x} bytes", a.offset, a.size, info.size));
    info.sparse.push_back(a);
  }
  return ok();
}

Result<void> decode_type_cap(ByteSpan caps, uint32_t off, RegionInfo& info) {
  if (info.type) return proto_err("REGION_INFO: two type capabilities");
  if (get_le16(caps, off + 2) != 1)
    return proto_err(fmt::format("REGION_INFO: type capability version {}", get_le16(caps, off + 2)));
  if (caps.size() - off < 16) return proto_err("REGION_INFO: type capability truncated");
  info.type = get_le32(caps, off + 8);
  info.subtype = get_le32(caps, off + 12);
  if (!info.type) return proto_err("REGION_INFO: type capability of type 0");
  return ok();
}

}  // namespace

Result<RegionInfoReply> decode_region_info(ByteSpan p) {
  OPENIB_TRY(need(p, kRegionInfoSize, "DEVICE_GET_REGION_INFO reply"));
  RegionInfoReply r;
  r.argsz = get_le32(p, 0);
  r.info.flags = get_le32(p, 4);
  r.info.index = get_le32(p, 8);
  uint32_t cap_offset = get_le32(p, 12);
  r.info.size = get_le64(p, 16);
  r.info.offset = get_le64(p, 24);
  if (r.argsz < kRegionInfoSize)
    return proto_err(fmt::format("REGION_INFO reply: argsz {} < {}", r.argsz, kRegionInfoSize));
  if (r.argsz > kMaxRegionInfoSize)
    return proto_err(fmt::format("REGION_INFO reply: argsz {} > {}", r.argsz,
                                 kMaxRegionInfoSize));
  if (r.argsz > p.size()) {  // the server needs more room than we offered
    if (p.size() != kRegionInfoSize)
      return proto_err("REGION_INFO reply: partial capability data");
    r.truncated = true;
    return r;
  }
  if (p.size() != r.argsz)
    return proto_err(fmt::format("REGION_INFO reply: {} bytes, argsz {}", p.size(), r.argsz));
  if (r.info.offset + r.info.size < r.info.offset)
    return proto_err("REGION_INFO reply: offset + size overflows");
  if (!(r.info.flags & VFIO_REGION_INFO_FLAG_CAPS)) {
    r.info.flags &= ~uint32_t{VFIO_REGION_INFO_FLAG_CAPS};
    return r;
  }
  // Walk the chain: every link inside argsz, 4-byte aligned, after the fixed
  // part, never visited before, at most kMaxCaps links (spec "VFIO region
  // capabilities").
  std::vector<uint32_t> seen;
  uint32_t off = cap_offset;
  while (off != 0) {
    if (seen.size() >= kMaxCaps)
      return proto_err(fmt::format("REGION_INFO reply: more than {} capabilities", kMaxCaps));
    if (off < kRegionInfoSize || off % 4 != 0 || off > r.argsz || r.argsz - off < 8)
      return proto_err(fmt::format("REGION_INFO reply: capability at {} outside [32, {})",
                                   off, r.argsz));
    if (std::find(seen.begin(), seen.end(), off) != seen.end())
      return proto_err(fmt::format("REGION_INFO reply: capability chain loops at {}", off));
    seen.push_back(off);
    uint16_t id = get_le16(p, off);
    if (id == VFIO_REGION_INFO_CAP_SPARSE_MMAP) OPENIB_TRY(decode_sparse_cap(p, off, r.info));
    if (id == VFIO_REGION_INFO_CAP_TYPE) OPENIB_TRY(decode_type_cap(p, off, r.info));
    off = get_le32(p, off + 4);
  }
  return r;
}

// ---- VFIO_USER_DEVICE_GET_IRQ_INFO ---------------------------------------------
// argsz u32, flags u32, index u32, count u32.

Bytes encode_irq_info_request(uint32_t index) {
  return Writer(kIrqInfoSize).u32(kIrqInfoSize).u32(0).u32(index).u32(0).take();
}

Result<uint32_t> decode_irq_info_request(ByteSpan p) {
  OPENIB_TRY(exact(p, kIrqInfoSize, "DEVICE_GET_IRQ_INFO"));
  uint32_t argsz = get_le32(p, 0);
  if (argsz < kIrqInfoSize)
    return proto_err(fmt::format("DEVICE_GET_IRQ_INFO: argsz {} < {}", argsz, kIrqInfoSize));
  return get_le32(p, 8);
}

Bytes encode_irq_info(const IrqInfo& i) {
  return Writer(kIrqInfoSize).u32(kIrqInfoSize).u32(i.flags).u32(i.index).u32(i.count).take();
}

Result<IrqInfo> decode_irq_info(ByteSpan p) {
  OPENIB_TRY(exact(p, kIrqInfoSize, "DEVICE_GET_IRQ_INFO reply"));
  uint32_t argsz = get_le32(p, 0);
  if (argsz != kIrqInfoSize)
    return proto_err(fmt::format("DEVICE_GET_IRQ_INFO reply: argsz {} != {}", argsz,
                                 kIrqInfoSize));
  IrqInfo i;
  i.flags = get_le32(p, 4);
  i.index = get_le32(p, 8);
  i.count = get_le32(p, 12);
  return i;
}

// ---- VFIO_USER_DEVICE_SET_IRQS -------------------------------------------------
// argsz u32, flags u32, index u32, start u32, count u32, data (DATA_BOOL:
// count bytes). argsz covers the data.

Bytes encode_irq_set(const IrqSet& s) {
  Writer w(kIrqSetSize + s.bools.size());
  w.u32(static_cast<uint32_t>(kIrqSetSize + s.bools.size())).u32(s.flags).u32(s.index)
      .u32(s.start).u32(s.count);
  for (uint8_t b : s.bools) w.u8(b);
  return w.take();
}

Result<IrqSet> decode_irq_set(ByteSpan p) {
  OPENIB_TRY(need(p, kIrqSetSize, "DEVICE_SET_IRQS"));
  uint32_t argsz = get_le32(p, 0);
  if (argsz != p.size())
    return proto_err(fmt::format("DEVICE_SET_IRQS: argsz {} != payload {}", argsz, p.size()));
  IrqSet s;
  s.flags = get_le32(p, 4);
  s.index = get_le32(p, 8);
  s.start = get_le32(p, 12);
  s.count = get_le32(p, 16);
  const uint32_t known = VFIO_IRQ_SET_DATA_TYPE_MASK | VFIO_IRQ_SET_ACTION_TYPE_MASK;
  if (s.flags & ~known) return proto_err(fmt::format("DEVICE_SET_IRQS: flags {:#x}", s.flags));
  // Exactly one data type and one action (spec: "mutually exclusive").
  if (std::popcount(s.data_type()) != 1 || std::popcount(s.action()) != 1)
    return proto_err(fmt::format("DEVICE_SET_IRQS: flags {:#x} need one DATA and one ACTION",
                                 s.flags));
  if (s.start + s.count < s.start) return proto_err("DEVICE_SET_IRQS: start + count overflows");
  const size_t data = p.size() - kIrqSetSize;
  if (s.data_type() == VFIO_IRQ_SET_DATA_BOOL) {
    if (data != s.count)
      return proto_err(fmt::format("DEVICE_SET_IRQS: {} bool bytes for count {}", data, s.count));
    for (size_t i = 0; i < data; ++i) s.bools.push_back(std::to_integer<uint8_t>(p[kIrqSetSize + i]));
  } else if (data != 0) {
    return proto_err(fmt::format("DEVICE_SET_IRQS: {} data bytes without DATA_BOOL", data));
  }
  if (s.data_type() == VFIO_IRQ_SET_DATA_NONE && s.count == 0 && s.start != 0)
    return proto_err("DEVICE_SET_IRQS: count 0 with start != 0");
  return s;
}

// ---- VFIO_USER_REGION_READ / REGION_WRITE --------------------------------------
// offset u64, region u32, count u32, data.

Bytes encode_region_access(uint64_t offset, uint32_t region, uint32_t count, ByteSpan data) {
  Writer w(kRegionAccessSize + data.size());
  w.u64(offset).u32(region).u32(count).bytes(data);
  return w.take();
}

namespace {
Result<RegionAccess> decode_region_access(ByteSpan p, uint64_t max_count, bool with_data) {
  OPENIB_TRY(need(p, kRegionAccessSize, "REGION_READ/WRITE"));
  RegionAccess a{get_le64(p, 0), get_le32(p, 8), get_le32(p, 12), {}};
  if (a.count == 0) return proto_err("REGION_READ/WRITE: count 0");
  if (a.count > max_count)
    return proto_err(fmt::format("REGION_READ/WRITE: count {} exceeds max_data_xfer_size {}",
                                 a.count, max_count));
  if (a.offset + a.count < a.offset) return proto_err("REGION_READ/WRITE: offset + count overflows");
  const size_t want = kRegionAccessSize + (with_data ? a.count : 0);
  if (p.size() != want)
    return proto_err(fmt::format("REGION_READ/WRITE: payload {} bytes, count {} needs {}",
                                 p.size(), a.count, want));
  if (with_data) a.data = p.subspan(kRegionAccessSize);
  return a;
}
}  // namespace

Result<RegionAccess> decode_region_access_header(ByteSpan p, uint64_t max_count) {
  return decode_region_access(p, max_count, false);
}
Result<RegionAccess> decode_region_access_data(ByteSpan p, uint64_t max_count) {
  return decode_region_access(p, max_count, true);
}

// ---- VFIO_USER_DMA_READ / DMA_WRITE --------------------------------------------
// address u64, count u64, data.

Bytes encode_dma_access(uint64_t address, uint64_t count, ByteSpan data) {
  Writer w(kDmaAccessSize + data.size());
  w.u64(address).u64(count).bytes(data);
  return w.take();
}

namespace {
Result<DmaAccess> decode_dma_access(ByteSpan p, uint64_t max_count, bool with_data) {
  // A data-less DMA_WRITE reply may carry a 4-byte count (spec table).
  const bool short_count = !with_data && p.size() == 12;
  if (!short_count) OPENIB_TRY(need(p, kDmaAccessSize, "DMA_READ/WRITE"));
  DmaAccess a{get_le64(p, 0), short_count ? get_le32(p, 8) : get_le64(p, 8), {}};
  if (a.count == 0) return proto_err("DMA_READ/WRITE: count 0");
  if (a.count > max_count)
    return proto_err(fmt::format("DMA_READ/WRITE: count {} exceeds max_data_xfer_size {}",
                                 a.count, max_count));
  if (a.address + a.count < a.address) return proto_err("DMA_READ/WRITE: address + count overflows");
  const size_t want = (short_count ? 12 : kDmaAccessSize) + (with_data ? a.count : 0);
  if (p.size() != want)
    return proto_err(fmt::format("DMA_READ/WRITE: payload {} bytes, count {} needs {}",
                                 p.size(), a.count, want));
  if (with_data) a.data = p.subspan(kDmaAccessSize);
  return a;
}
}  // namespace

Result<DmaAccess> decode_dma_access_header(ByteSpan p, uint64_t max_count) {
  return decode_dma_access(p, max_count, false);
}
Result<DmaAccess> decode_dma_access_data(ByteSpan p, uint64_t max_count) {
  return decode_dma_access(p, max_count, true);
}

}  // namespace openib::vfio::user
