// vfio-user client transport (docs/vfio-user.md): the Device interface
// over vfio-user 0.9.1 messages on a UNIX stream socket.
//
// Synchronous: one request in flight, its reply awaited with poll() for at
// most reply_timeout_ms. Faults end the connection, because a stream that
// lost a reply or carried a bad one cannot be resynchronised:
//   peer gone (EOF, ECONNRESET, EPIPE)  -> ENODEV, dead
//   no reply in time                    -> ETIMEDOUT, dead
//   malformed/mismatched/oversized      -> EPROTO, dead
// and every call on a dead device fails with ENODEV. An error *reply* (the
// server answered with the error bit) is just that call's error.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <map>

#include "common/log.hpp"
#include "vfio/device.hpp"
#include "vfio/vfio_user_proto.hpp"
#include "vfio/vfio_user_socket.hpp"

namespace openib::vfio {
namespace {

using namespace openib::vfio::user;
using Clock = std::chrono::steady_clock;

// A server may send commands of its own (DMA_READ/WRITE) while we wait;
// we answer each with an error, but only this many per request.
constexpr int kMaxInterleavedCommands = 64;

struct Reply {
  Header header;
  Bytes bytes;
  std::vector<UniqueFd> fds;
  ByteSpan payload() const { return ByteSpan(bytes).subspan(kHeaderSize); }
};

class VfioUserClient final : public Device {
 public:
  VfioUserClient(UniqueFd sock, std::string name, VfioUserOptions opts)
      : sock_(std::move(sock)), name_(std::move(name)), opts_(opts),
        log_(log::get("vfio-user")) {}

  Result<void> negotiate();

  const std::string& name() const override { return name_; }
  bool alive() const override { return !dead_; }

  Result<DeviceInfo> device_info() override;
  Result<RegionInfo> region_info(uint32_t index) override;
  Result<void> region_read(uint32_t index, uint64_t offset, std::span<std::byte> out) override;
  Result<void> region_write(uint32_t index, uint64_t offset,
                            std::span<const std::byte> in) override;
  Result<void> region_write_posted(uint32_t index, uint64_t offset,
                                   std::span<const std::byte> in) override;
  Result<RegionMapping> region_mmap(uint32_t index, uint64_t offset, uint64_t size) override;
  Result<RegionFd> region_mmap_fd(uint32_t index) override;
  Result<std::vector<IovaRange>> iova_ranges() override { return std::vector<IovaRange>{}; }
  Result<void> dma_map(const DmaMap& map) override;
  Result<void> dma_unmap(uint64_t iova, uint64_t size) override;
  Result<IrqInfo> irq_info(uint32_t index) override;
  Result<void> set_irq_eventfds(uint32_t index, uint32_t start, std::span<const int> fds) override;
  Result<void> disable_irqs(uint32_t index) override;
  Result<void> reset() override;

 private:
  // Sends one command and returns its reply; max_payload bounds the reply.
  Result<Reply> transact(Command c, ByteSpan payload, std::span<const int> fds,
                         size_t max_payload);
  Result<void> transact_empty(Command c, ByteSpan payload, std::span<const int> fds = {});
  Result<void> answer_server_command(const Header& h);
  // Marks the device dead (logging once) and passes the error on.
  Error broken(Error e);
  Error gone() const { return err(ENODEV, "{}: device is gone", name_); }

  UniqueFd sock_;
  std::string name_;
  VfioUserOptions opts_;
  std::shared_ptr<spdlog::logger> log_;
  bool dead_ = false;
  uint16_t next_id_ = 0;
  Capabilities peer_;
  uint64_t max_xfer_ = kMaxDataXfer;
  struct Region {
    RegionInfo info;
    UniqueFd fd;  // from the last GET_REGION_INFO reply, for mmap
  };
  std::map<uint32_t, Region> regions_;
};

Error VfioUserClient::broken(Error e) {
  if (!dead_) {
    dead_ = true;
    log_->error("{}: {}; device marked gone", name_, e.str());
  }
  return e;
}

Result<void> VfioUserClient::answer_server_command(const Header& h) {
  // We pass every DMA region by fd and never negotiate twin-socket mode,
  // so DMA_READ/WRITE from the server are not supported (docs/vfio-user.md).
  log_->warn("{}: server sent command {} ({}); answering ENOTSUP", name_,
             command_name(h.command), h.command);
  if (h.no_reply()) return ok();
  Bytes r = encode_error_reply(h.id, h.command, ENOTSUP);
  return send_message(sock_.get(), r, {}, opts_.reply_timeout_ms);
}

Result<Reply> VfioUserClient::transact(Command c, ByteSpan payload, std::span<const int> fds,
                                       size_t max_payload) {
  if (dead_) return gone();
  const uint16_t id = next_id_++;
  const char* cname = command_name(static_cast<uint16_t>(c));
  Bytes msg = encode_command(id, c, payload);
  if (msg.size() > kMaxMessageSize)
    return err(EINVAL, "{}: {} of {} bytes exceeds {}", name_, cname, msg.size(), kMaxMessageSize);
  auto sent = send_message(sock_.get(), msg, fds, opts_.reply_timeout_ms);
  if (!sent) {
    Error e = sent.take_error();
    if (e.code == EBADF || e.code == EINVAL) return e;  // caller's fd; nothing was sent
    if (e.code == ETIMEDOUT) return broken(err(ETIMEDOUT, "{}: server not reading", cname));
    return broken(err(ENODEV, "{}: server gone while sending {} ({})", name_, cname, e.message));
  }
  // The reply may be no larger than what this command can produce, nor
  // than our hard limit (spec "Read and Write Operations").
  const size_t max_size = std::min(kMaxMessageSize, kHeaderSize + max_payload);
  const auto deadline = Clock::now() + std::chrono::milliseconds(opts_.reply_timeout_ms);
  for (int i = 0; i <= kMaxInterleavedCommands; ++i) {
    auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
    auto r = recv_message(sock_.get(), std::max(max_size, size_t{kHeaderSize + 16}),
                          static_cast<int>(std::max<int64_t>(left, 0)));
    if (!r) {
      Error e = r.take_error();
      if (e.code == ETIMEDOUT)
        return broken(err(ETIMEDOUT, "no reply to {} within {} ms", cname, opts_.reply_timeout_ms));
      if (e.code == EPROTO) return broken(err(EPROTO, "bad reply to {}: {}", cname, e.message));
      return broken(err(ENODEV, "server gone during {} ({})", cname, e.message));
    }
    Reply rep{};
    rep.bytes = std::move(r->bytes);
    rep.fds = std::move(r->fds);
    auto h = decode_header(rep.bytes);
    if (!h) return broken(err(EPROTO, "bad reply to {}: {}", cname, h.error().message));
    rep.header = *h;
    if (!rep.header.is_reply()) {
      // Commands from the server are bounded by the small payload limit
      // above; anything bigger was already rejected as oversized.
      auto a = answer_server_command(rep.header);
      if (!a) return broken(err(ENODEV, "server gone during {} ({})", cname, a.error().message));
      continue;
    }
    if (rep.header.id != id || rep.header.command != static_cast<uint16_t>(c))
      return broken(err(EPROTO, "reply id {} command {} does not match {} id {}",
                        rep.header.id, rep.header.command, cname, id));
    if (rep.header.size > max_size)
      return broken(err(EPROTO, "reply to {} of {} bytes exceeds {}", cname, rep.header.size,
                        max_size));
    if (rep.header.is_error()) {
      if (rep.header.size != kHeaderSize)
        return broken(err(EPROTO, "error reply to {} carries a payload", cname));
      int code = rep.header.error != 0 && rep.header.error < 4096
                     ? static_cast<int>(rep.header.error) : EIO;
      return err(code, "{}: server failed {}", name_, cname);
    }
    return rep;
  }
  return broken(err(EPROTO, "more than {} server commands while waiting for {}",
                    kMaxInterleavedCommands, cname));
}

Result<void> VfioUserClient::transact_empty(Command c, ByteSpan payload,
                                            std::span<const int> fds) {
  OPENIB_TRY(transact(c, payload, fds, 0));
  return ok();
}

// Spec "VFIO_USER_VERSION": the reply's major must match ours, its minor
// be no higher; its capabilities bound what we send.
Result<void> VfioUserClient::negotiate() {
  Capabilities ours;
  ours.max_msg_fds = kMaxFds;
  ours.max_data_xfer_size = kMaxDataXfer;
  Version v{kVersionMajor, kVersionMinor, capabilities_json(ours)};
  OPENIB_TRY_ASSIGN(Reply rep, transact(Command::kVersion, encode_version(v), {},
                                        4 + kMaxVersionJson + 1));
  auto theirs = decode_version(rep.payload());
  if (!theirs) return broken(theirs.take_error());
  if (theirs->major != kVersionMajor || theirs->minor > kVersionMinor)
    return broken(err(EPROTO, "server speaks vfio-user {}.{}, we {}.{}", theirs->major,
                      theirs->minor, kVersionMajor, kVersionMinor));
  auto caps = parse_capabilities(theirs->json);
  if (!caps) return broken(caps.take_error());
  peer_ = *caps;
  max_xfer_ = std::min<uint64_t>(kMaxDataXfer, peer_.max_data_xfer_size);
  log_->debug("{}: vfio-user {}.{}, max_data_xfer_size {}, max_msg_fds {}", name_,
              theirs->major, theirs->minor, max_xfer_, peer_.max_msg_fds);
  return ok();
}

Result<DeviceInfo> VfioUserClient::device_info() {
  OPENIB_TRY_ASSIGN(Reply rep, transact(Command::kDeviceGetInfo, encode_device_info_request(),
                                        {}, kDeviceInfoSize));
  auto info = decode_device_info(rep.payload());
  if (!info) return broken(info.take_error());
  return *info;
}

Result<RegionInfo> VfioUserClient::region_info(uint32_t index) {
  // First ask with room for a modest capability chain; if the server needs
  // more it says so in argsz, and we ask once more with that much.
  uint32_t argsz = 256;
  for (int attempt = 0; attempt < 2; ++attempt) {
    OPENIB_TRY_ASSIGN(Reply rep, transact(Command::kDeviceGetRegionInfo,
                                          encode_region_info_request({argsz, index}), {}, argsz));
    auto r = decode_region_info(rep.payload());
    if (!r) return broken(r.take_error());
    if (r->info.index != index)
      return broken(err(EPROTO, "REGION_INFO reply for region {} to a request for {}",
                        r->info.index, index));
    if (r->truncated) {
      argsz = r->argsz;
      continue;
    }
    Region& reg = regions_[index];
    reg.info = r->info;
    reg.fd.reset();
    // Spec: with FLAG_MMAP the reply carries the region's fd. Any other fd
    // is unexpected and closed (by UniqueFd) here.
    if (reg.info.mmappable() && !rep.fds.empty()) reg.fd = std::move(rep.fds.front());
    if (rep.fds.size() > (reg.info.mmappable() ? 1u : 0u))
      log_->warn("{}: closing {} unexpected fds with REGION_INFO {}", name_,
                 rep.fds.size() - (reg.fd.valid() ? 1 : 0), index);
    return reg.info;
  }
  return broken(err(EPROTO, "REGION_INFO {}: server keeps asking for more room", index));
}

Result<void> VfioUserClient::region_read(uint32_t index, uint64_t offset,
                                         std::span<std::byte> out) {
  // Split at the negotiated max_data_xfer_size (spec "Read and Write Operations").
  for (size_t done = 0; done < out.size();) {
    const uint32_t n = static_cast<uint32_t>(std::min<uint64_t>(out.size() - done, max_xfer_));
    const uint64_t off = offset + done;
    OPENIB_TRY_ASSIGN(Reply rep, transact(Command::kRegionRead,
                                          encode_region_access(off, index, n), {},
                                          kRegionAccessSize + n));
    auto a = decode_region_access_data(rep.payload(), n);
    if (!a) return broken(a.take_error());
    if (a->offset != off || a->region != index || a->count != n)
      return broken(err(EPROTO, "REGION_READ reply ({}, {:#x}, {}) for request ({}, {:#x}, {})",
                        a->region, a->offset, a->count, index, off, n));
    std::copy(a->data.begin(), a->data.end(), out.begin() + static_cast<ptrdiff_t>(done));
    done += n;
  }
  return ok();
}

Result<void> VfioUserClient::region_write(uint32_t index, uint64_t offset,
                                          std::span<const std::byte> in) {
  for (size_t done = 0; done < in.size();) {
    const uint32_t n = static_cast<uint32_t>(std::min<uint64_t>(in.size() - done, max_xfer_));
    const uint64_t off = offset + done;
    OPENIB_TRY_ASSIGN(Reply rep, transact(Command::kRegionWrite,
                                          encode_region_access(off, index, n, in.subspan(done, n)),
                                          {}, kRegionAccessSize));
    auto a = decode_region_access_header(rep.payload(), n);
    if (!a) return broken(a.take_error());
    if (a->offset != off || a->region != index || a->count != n)
      return broken(err(EPROTO, "REGION_WRITE reply ({}, {:#x}, {}) for request ({}, {:#x}, {})",
                        a->region, a->offset, a->count, index, off, n));
    done += n;
  }
  return ok();
}

// REGION_WRITE with no_reply (spec "Header"): sent, not waited for. The
// server handles messages in order, so a later command's reply still
// follows this write's effect.
Result<void> VfioUserClient::region_write_posted(uint32_t index, uint64_t offset,
                                                 std::span<const std::byte> in) {
  if (dead_) return gone();
  if (in.size() > max_xfer_) return region_write(index, offset, in);
  Bytes msg = encode_posted_command(next_id_++, Command::kRegionWrite,
                                    encode_region_access(offset, index, static_cast<uint32_t>(in.size()), in));
  auto sent = send_message(sock_.get(), msg, {}, opts_.reply_timeout_ms);
  if (!sent) {
    Error e = sent.take_error();
    if (e.code == ETIMEDOUT) return broken(err(ETIMEDOUT, "REGION_WRITE: server not reading"));
    return broken(err(ENODEV, "{}: server gone while sending REGION_WRITE ({})", name_, e.message));
  }
  return ok();
}

// The server's fd for the region (spec "GET_REGION_INFO"), asked for
// afresh and handed over, not kept: a region's fd may change (simhca's UAR
// pages, docs/simhca.md §4), and ibd must not hold the pages of clients
// long gone.
Result<RegionFd> VfioUserClient::region_mmap_fd(uint32_t index) {
  if (dead_) return gone();
  OPENIB_TRY_ASSIGN(RegionInfo info, region_info(index));
  Region& reg = regions_[index];
  if (!info.mmappable() || !reg.fd.valid())
    return err(EOPNOTSUPP, "{}: region {} is not mmap-able", name_, index);
  return RegionFd{std::move(reg.fd), info.offset};
}

Result<RegionMapping> VfioUserClient::region_mmap(uint32_t index, uint64_t offset, uint64_t size) {
  if (dead_) return gone();
  auto it = regions_.find(index);
  if (it == regions_.end() || !it->second.fd.valid()) {
    OPENIB_TRY(region_info(index));
    it = regions_.find(index);
  }
  const Region& reg = it->second;
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  if (size == 0 || offset % page || size % page)
    return err(EINVAL, "{}: mmap of region {} [{:#x}, +{:#x}) not page-aligned", name_, index,
               offset, size);
  if (!reg.info.mmappable() || !reg.fd.valid())
    return err(EINVAL, "{}: region {} is not mmap-able", name_, index);
  auto inside = [&](uint64_t start, uint64_t len) {
    return offset >= start && offset - start <= len && size <= len - (offset - start);
  };
  bool ok_range = reg.info.sparse.empty()
                      ? inside(0, reg.info.size)
                      : std::any_of(reg.info.sparse.begin(), reg.info.sparse.end(),
                                    [&](const SparseArea& a) { return inside(a.offset, a.size); });
  if (!ok_range)
    return err(EINVAL, "{}: [{:#x}, +{:#x}) of region {} is outside every mmap-able area",
               name_, offset, size, index);
  int prot = (reg.info.readable() ? PROT_READ : 0) | (reg.info.writable() ? PROT_WRITE : 0);
  // Spec "GET_REGION_INFO": info.offset is the mmap offset of the region in its fd.
  void* p = ::mmap(nullptr, size, prot, MAP_SHARED, reg.fd.get(),
                   static_cast<off_t>(reg.info.offset + offset));
  if (p == MAP_FAILED) return sys_err("{}: mmap region {} [{:#x}, +{:#x})", name_, index, offset, size);
  return RegionMapping(p, size);
}

Result<void> VfioUserClient::dma_map(const DmaMap& map) {
  if (map.fd < 0)
    return err(EINVAL, "{}: vfio-user DMA needs an fd (DMA_READ/WRITE not supported)", name_);
  if (map.size == 0) return err(EINVAL, "{}: DMA map of size 0", name_);
  DmaMapRequest r;
  r.flags = (map.readable ? VFIO_DMA_MAP_FLAG_READ : 0) | (map.writable ? VFIO_DMA_MAP_FLAG_WRITE : 0);
  r.offset = map.fd_offset;
  r.address = map.iova;
  r.size = map.size;
  const int fd = map.fd;
  return transact_empty(Command::kDmaMap, encode_dma_map(r), std::span<const int>(&fd, 1));
}

Result<void> VfioUserClient::dma_unmap(uint64_t iova, uint64_t size) {
  DmaUnmap u{kDmaUnmapSize, 0, iova, size};
  OPENIB_TRY_ASSIGN(Reply rep, transact(Command::kDmaUnmap, encode_dma_unmap(u), {},
                                        kDmaUnmapSize));
  // Spec: "The server responds with the original DMA entry"; some servers
  // send no payload. Accept both, but an echo must match.
  if (rep.payload().empty()) return ok();
  auto e = decode_dma_unmap(rep.payload());
  if (!e) return broken(e.take_error());
  if (e->address != iova || e->size != size)
    return broken(err(EPROTO, "DMA_UNMAP reply [{:#x}, +{:#x}) for request [{:#x}, +{:#x})",
                      e->address, e->size, iova, size));
  return ok();
}

Result<IrqInfo> VfioUserClient::irq_info(uint32_t index) {
  OPENIB_TRY_ASSIGN(Reply rep, transact(Command::kDeviceGetIrqInfo, encode_irq_info_request(index),
                                        {}, kIrqInfoSize));
  auto i = decode_irq_info(rep.payload());
  if (!i) return broken(i.take_error());
  if (i->index != index)
    return broken(err(EPROTO, "IRQ_INFO reply for index {} to a request for {}", i->index, index));
  return *i;
}

// Runs of real fds go out as DATA_EVENTFD with the fds attached (at most
// the server's max_msg_fds per message); runs of -1 as DATA_EVENTFD with no
// fds, which de-assigns them (spec "VFIO_USER_DEVICE_SET_IRQS").
Result<void> VfioUserClient::set_irq_eventfds(uint32_t index, uint32_t start,
                                              std::span<const int> fds) {
  if (fds.empty()) return err(EINVAL, "{}: set_irq_eventfds with no vectors", name_);
  const size_t per_msg = std::min<size_t>(kMaxFds, peer_.max_msg_fds);
  for (size_t i = 0; i < fds.size();) {
    const bool assign = fds[i] >= 0;
    size_t n = 1;
    while (i + n < fds.size() && (fds[i + n] >= 0) == assign && (!assign || n < per_msg)) ++n;
    IrqSet s;
    s.flags = VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER;
    s.index = index;
    s.start = start + static_cast<uint32_t>(i);
    s.count = static_cast<uint32_t>(n);
    OPENIB_TRY(transact_empty(Command::kDeviceSetIrqs, encode_irq_set(s),
                              assign ? fds.subspan(i, n) : std::span<const int>{}));
    i += n;
  }
  return ok();
}

Result<void> VfioUserClient::disable_irqs(uint32_t index) {
  IrqSet s;
  s.flags = VFIO_IRQ_SET_DATA_NONE | VFIO_IRQ_SET_ACTION_TRIGGER;
  s.index = index;
  return transact_empty(Command::kDeviceSetIrqs, encode_irq_set(s));
}

Result<void> VfioUserClient::reset() { return transact_empty(Command::kDeviceReset, {}); }

}  // namespace

Result<std::unique_ptr<Device>> open_vfio_user(std::string_view path, VfioUserOptions opts) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(addr.sun_path))
    return err(EINVAL, "vfio-user socket path '{}' empty or too long", path);
  std::copy(path.begin(), path.end(), addr.sun_path);
  UniqueFd s(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!s) return sys_err("vfio-user: socket");
  if (::connect(s.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) < 0)
    return sys_err("vfio-user: connect {}", path);
  auto dev = std::make_unique<VfioUserClient>(std::move(s), fmt::format("vfio-user:{}", path), opts);
  OPENIB_TRY(dev->negotiate());
  return std::unique_ptr<Device>(std::move(dev));
}

}  // namespace openib::vfio
