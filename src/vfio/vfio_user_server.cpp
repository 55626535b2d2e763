// vfio-user server framework; sections cited are those of QEMU's
// docs/interop/vfio-user.rst (protocol 0.9.1).
#include "vfio/vfio_user_server.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "common/bus_fault.hpp"
#include "vfio/vfio_user_socket.hpp"

namespace openib::vfio::user {

VfioUserServer::VfioUserServer(DeviceModel& model, ServerOptions opts)
    : model_(model), opts_(opts), log_(log::get("vfio-user")) {
  model_.server_ = this;
  install_bus_fault_handler();  // dma_read/dma_write's guarded copies
  opts_.max_data_xfer_size = std::clamp<uint64_t>(opts_.max_data_xfer_size, 4096, kMaxDataXfer);
}

VfioUserServer::~VfioUserServer() {
  drop_client();
  if (listen_.valid() && !path_.empty()) ::unlink(path_.c_str());
}

Result<void> VfioUserServer::listen(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(addr.sun_path))
    return err(EINVAL, "vfio-user server: socket path '{}' empty or too long", path);
  std::copy(path.begin(), path.end(), addr.sun_path);
  struct stat st{};
  if (::lstat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode)) ::unlink(path.c_str());
  UniqueFd s(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!s) return sys_err("vfio-user server: socket");
  if (::bind(s.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) < 0)
    return sys_err("vfio-user server: bind {}", path);
  if (::listen(s.get(), 1) < 0) return sys_err("vfio-user server: listen {}", path);
  listen_ = std::move(s);
  path_ = path;
  return ok();
}

Result<void> VfioUserServer::accept_client(int timeout_ms) {
  if (!listen_) return err(EINVAL, "vfio-user server: not listening");
  pollfd p{listen_.get(), POLLIN, 0};
  int n;
  do n = ::poll(&p, 1, timeout_ms); while (n < 0 && errno == EINTR);
  if (n < 0) return sys_err("vfio-user server: poll");
  if (n == 0) return err(ETIMEDOUT, "vfio-user server: no client within {} ms", timeout_ms);
  UniqueFd c(::accept4(listen_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
  if (!c) return sys_err("vfio-user server: accept");
  adopt_client(std::move(c));
  return ok();
}

void VfioUserServer::adopt_client(UniqueFd sock) {
  drop_client();
  int fl = ::fcntl(sock.get(), F_GETFL);
  if (fl >= 0) ::fcntl(sock.get(), F_SETFL, fl | O_NONBLOCK);
  client_ = std::move(sock);
}

void VfioUserServer::drop_client() {
  for (auto& [iova, r] : dma_) ::munmap(r.addr, r.size);
  dma_.clear();
  dma_last_ = nullptr;
  irq_fds_.clear();
  client_.reset();
  versioned_ = false;
  client_caps_ = {};
}

Result<bool> VfioUserServer::handle_message(int timeout_ms) {
  if (!client_) return false;
  pollfd p{client_.get(), POLLIN, 0};
  int n;
  do n = ::poll(&p, 1, timeout_ms); while (n < 0 && errno == EINTR);
  if (n < 0) return sys_err("vfio-user server: poll");
  if (n == 0) return true;  // nothing yet

  const size_t max_size = std::max<size_t>(kHeaderSize + kRegionAccessSize + opts_.max_data_xfer_size,
                                           kHeaderSize + 4 + kMaxVersionJson + 1);
  auto r = recv_message(client_.get(), std::min(max_size, kMaxMessageSize), opts_.message_timeout_ms);
  if (!r) {
    if (r.error().code != ENODEV) {
      // A header we cannot frame, or a message cut off: the stream is lost.
      ++stats_.bad_messages;
      log_->warn("vfio-user server: dropping client: {}", r.error().str());
    } else {
      log_->info("vfio-user server: client disconnected");
    }
    drop_client();
    return false;
  }
  auto h = decode_header(r->bytes);  // already validated by recv_message
  if (!h) {
    drop_client();
    return false;
  }
  if (h->is_reply()) {  // we never send commands, so no reply is expected
    ++stats_.bad_messages;
    log_->warn("vfio-user server: unexpected reply message id {} ({})", h->id,
               command_name(h->command));
    return true;
  }
  ++stats_.messages;
  auto payload = ByteSpan(r->bytes).subspan(kHeaderSize);
  reply_fd_ = -1;
  auto res = dispatch(*h, payload, r->fds);
  if (h->no_reply()) return true;
  Result<void> sent;
  if (res) {
    Bytes msg = encode_reply(h->id, h->command, *res);
    std::span<const int> fds;
    if (reply_fd_ >= 0) fds = std::span<const int>(&reply_fd_, 1);
    sent = send_message(client_.get(), msg, fds, opts_.message_timeout_ms);
  } else {
    const Error& e = res.error();
    ++stats_.error_replies;
    if (e.code == EPROTO) ++stats_.bad_messages;
    log_->debug("vfio-user server: {} id {} failed: {}", command_name(h->command), h->id, e.str());
    sent = send_message(client_.get(), encode_error_reply(h->id, h->command, static_cast<uint32_t>(e.code)),
                        {}, opts_.message_timeout_ms);
  }
  if (!sent) {
    log_->info("vfio-user server: client gone: {}", sent.error().str());
    drop_client();
    return false;
  }
  return true;
}

Result<void> VfioUserServer::serve() {
  for (;;) {
    OPENIB_TRY_ASSIGN(bool connected, handle_message(-1));
    if (!connected) return ok();
  }
}

Result<Bytes> VfioUserServer::dispatch(const Header& h, ByteSpan p, std::vector<UniqueFd>& fds) {
  const auto c = static_cast<Command>(h.command);
  if (c == Command::kVersion) return on_version(p);
  if (!versioned_)  // spec "VFIO_USER_VERSION": the first message
    return err(EPROTO, "{} before VERSION", command_name(h.command));
  switch (c) {
    case Command::kDmaMap: return on_dma_map(p, fds);
    case Command::kDmaUnmap: return on_dma_unmap(p);
    case Command::kDeviceGetInfo: return on_device_info(p);
    case Command::kDeviceGetRegionInfo: return on_region_info(p);
    case Command::kDeviceGetIrqInfo: return on_irq_info(p);
    case Command::kDeviceSetIrqs: return on_set_irqs(p, fds);
    case Command::kRegionRead: return on_region_read(p);
    case Command::kRegionWrite: return on_region_write(p);
    case Command::kDeviceReset: return on_reset(p);
    default: break;
  }
  // GET_REGION_IO_FDS, DMA_READ/WRITE (server -> client only), migration, ...
  return err(ENOTSUP, "command {} ({}) not supported", h.command, command_name(h.command));
}

// Spec "VFIO_USER_VERSION": same major, minor no higher than proposed.
Result<Bytes> VfioUserServer::on_version(ByteSpan p) {
  if (versioned_) return err(EPROTO, "second VERSION");
  OPENIB_TRY_ASSIGN(Version v, decode_version(p));
  if (v.major != kVersionMajor)
    return err(ENOTSUP, "client proposes major {}, we speak {}", v.major, kVersionMajor);
  OPENIB_TRY_ASSIGN(client_caps_, parse_capabilities(v.json));
  Capabilities ours;
  ours.max_msg_fds = kMaxFds;
  ours.max_data_xfer_size = opts_.max_data_xfer_size;
  ours.max_dma_maps = opts_.max_dma_maps;
  versioned_ = true;
  return encode_version({kVersionMajor, std::min(v.minor, kVersionMinor), capabilities_json(ours)});
}

// Spec "VFIO_USER_DMA_MAP": the fd is mmap-ed here; DMA through
// DMA_READ/WRITE messages (no fd) is not supported.
Result<Bytes> VfioUserServer::on_dma_map(ByteSpan p, std::vector<UniqueFd>& fds) {
  OPENIB_TRY_ASSIGN(DmaMapRequest m, decode_dma_map(p));
  if (fds.size() != 1)
    return err(fds.empty() ? ENOTSUP : EINVAL, "DMA_MAP with {} fds (need 1)", fds.size());
  if (m.flags == 0) return err(EINVAL, "DMA_MAP with neither read nor write");
  if (dma_.size() >= opts_.max_dma_maps) return err(ENOSPC, "more than {} DMA maps", opts_.max_dma_maps);
  // Overlap with the mapping at or before m.address, or the one after it.
  auto next = dma_.lower_bound(m.address);
  if (next != dma_.end() && next->first < m.address + m.size)
    return err(EEXIST, "DMA_MAP [{:#x}, +{:#x}) overlaps {:#x}", m.address, m.size, next->first);
  if (next != dma_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second.size > m.address)
      return err(EEXIST, "DMA_MAP [{:#x}, +{:#x}) overlaps {:#x}", m.address, m.size, prev->first);
  }
  // Touching pages past the end of the file would raise SIGBUS here.
  struct stat st{};
  if (::fstat(fds[0].get(), &st) < 0) return sys_err("DMA_MAP fstat");
  if (S_ISREG(st.st_mode) && (m.offset > static_cast<uint64_t>(st.st_size) ||
                              m.size > static_cast<uint64_t>(st.st_size) - m.offset))
    return err(EINVAL, "DMA_MAP [{:#x}, +{:#x}) of the fd past its {} bytes", m.offset, m.size,
               st.st_size);
  int prot = (m.flags & VFIO_DMA_MAP_FLAG_READ ? PROT_READ : 0) |
             (m.flags & VFIO_DMA_MAP_FLAG_WRITE ? PROT_WRITE : 0);
  void* a = ::mmap(nullptr, m.size, prot, MAP_SHARED, fds[0].get(), static_cast<off_t>(m.offset));
  if (a == MAP_FAILED) return sys_err("DMA_MAP mmap [{:#x}, +{:#x})", m.offset, m.size);
  dma_[m.address] = DmaRegion{m.size, m.flags, a};
  log_->debug("vfio-user server: DMA map iova [{:#x}, +{:#x}) flags {}", m.address, m.size, m.flags);
  return Bytes{};
}

// Spec "VFIO_USER_DMA_UNMAP": must match a mapping exactly; the reply
// echoes the entry.
Result<Bytes> VfioUserServer::on_dma_unmap(ByteSpan p) {
  OPENIB_TRY_ASSIGN(DmaUnmap u, decode_dma_unmap(p));
  auto it = dma_.find(u.address);
  if (it == dma_.end() || it->second.size != u.size)
    return err(ENOENT, "DMA_UNMAP [{:#x}, +{:#x}) matches no mapping", u.address, u.size);
  ::munmap(it->second.addr, it->second.size);
  dma_.erase(it);
  dma_last_ = nullptr;
  return encode_dma_unmap(u);
}

Result<Bytes> VfioUserServer::on_device_info(ByteSpan p) {
  OPENIB_TRY(decode_device_info_request(p));
  return encode_device_info({model_.device_flags(), model_.num_regions(), model_.num_irqs()});
}

Result<Bytes> VfioUserServer::on_region_info(ByteSpan p) {
  OPENIB_TRY_ASSIGN(RegionInfoRequest rq, decode_region_info_request(p));
  if (rq.index >= model_.num_regions()) return err(EINVAL, "no region {}", rq.index);
  RegionInfo info;
  info.index = rq.index;
  if (auto r = model_.region(rq.index)) {
    info.size = r->size;
    info.flags = r->flags & (VFIO_REGION_INFO_FLAG_READ | VFIO_REGION_INFO_FLAG_WRITE |
                             VFIO_REGION_INFO_FLAG_MMAP);
    info.type = r->type;
    info.subtype = r->subtype;
    if ((info.flags & VFIO_REGION_INFO_FLAG_MMAP) && r->mmap_fd >= 0) {
      info.offset = r->mmap_offset;
      info.sparse = r->sparse;
      reply_fd_ = r->mmap_fd;  // spec: the fd rides with the reply
    } else {
      info.flags &= ~uint32_t{VFIO_REGION_INFO_FLAG_MMAP};
    }
  }
  return encode_region_info(info, rq.argsz);
}

Result<Bytes> VfioUserServer::on_irq_info(ByteSpan p) {
  OPENIB_TRY_ASSIGN(uint32_t index, decode_irq_info_request(p));
  if (index >= model_.num_irqs()) return err(EINVAL, "no IRQ index {}", index);
  IrqInfo i = model_.irq(index);
  i.index = index;
  return encode_irq_info(i);
}

// Spec "VFIO_USER_DEVICE_SET_IRQS": ACTION_TRIGGER with DATA_EVENTFD
// (assign, or de-assign with no fds), DATA_NONE (count 0: disable all;
// otherwise trigger) or DATA_BOOL (trigger where true). MASK/UNMASK are
// not offered (no VFIO_IRQ_INFO_MASKABLE).
Result<Bytes> VfioUserServer::on_set_irqs(ByteSpan p, std::vector<UniqueFd>& fds) {
  OPENIB_TRY_ASSIGN(IrqSet s, decode_irq_set(p));
  if (s.index >= model_.num_irqs()) return err(EINVAL, "no IRQ index {}", s.index);
  const IrqInfo info = model_.irq(s.index);
  if (s.action() != VFIO_IRQ_SET_ACTION_TRIGGER)
    return err(ENOTSUP, "SET_IRQS action {:#x} not supported", s.action());
  std::vector<UniqueFd>& v = irq_fds_[s.index];
  v.resize(info.count);
  if (s.data_type() == VFIO_IRQ_SET_DATA_NONE && s.count == 0) {
    if (!fds.empty()) return err(EINVAL, "SET_IRQS disable with fds");
    for (UniqueFd& f : v) f.reset();
    return Bytes{};
  }
  if (s.start > info.count || s.count > info.count - s.start)
    return err(EINVAL, "SET_IRQS vectors [{}, +{}) of index {} with {}", s.start, s.count,
               s.index, info.count);
  switch (s.data_type()) {
    case VFIO_IRQ_SET_DATA_EVENTFD:
      if (!fds.empty() && fds.size() != s.count)
        return err(EINVAL, "SET_IRQS {} fds for {} vectors", fds.size(), s.count);
      for (uint32_t i = 0; i < s.count; ++i) {
        if (fds.empty()) {
          v[s.start + i].reset();
          continue;
        }
        // A non-eventfd (a full pipe) must not block the server.
        int fl = ::fcntl(fds[i].get(), F_GETFL);
        if (fl >= 0) ::fcntl(fds[i].get(), F_SETFL, fl | O_NONBLOCK);
        v[s.start + i] = std::move(fds[i]);
      }
      return Bytes{};
    case VFIO_IRQ_SET_DATA_NONE:
    case VFIO_IRQ_SET_DATA_BOOL:
      if (!fds.empty()) return err(EINVAL, "SET_IRQS trigger with fds");
      for (uint32_t i = 0; i < s.count; ++i)
        if (s.bools.empty() || s.bools[i]) trigger_irq(s.index, s.start + i);
      return Bytes{};
    default:
      return err(EPROTO, "SET_IRQS data type {:#x}", s.data_type());
  }
}

Result<void> VfioUserServer::check_access(uint32_t region, uint64_t offset, uint64_t count,
                                          bool write) {
  auto r = region < model_.num_regions() ? model_.region(region) : std::nullopt;
  if (!r) return err(EINVAL, "no region {}", region);
  const uint32_t need = write ? VFIO_REGION_INFO_FLAG_WRITE : VFIO_REGION_INFO_FLAG_READ;
  if (!(r->flags & need)) return err(EPERM, "region {} not {}", region, write ? "writable" : "readable");
  if (offset > r->size || count > r->size - offset)
    return err(EINVAL, "[{:#x}, +{}) outside region {} of {:#x} bytes", offset, count, region, r->size);
  return ok();
}

Result<Bytes> VfioUserServer::on_region_read(ByteSpan p) {
  OPENIB_TRY_ASSIGN(RegionAccess a, decode_region_access_header(p, opts_.max_data_xfer_size));
  OPENIB_TRY(check_access(a.region, a.offset, a.count, false));
  Bytes data(a.count);
  OPENIB_TRY(model_.read(a.region, a.offset, data));
  return encode_region_access(a.offset, a.region, a.count, data);
}

Result<Bytes> VfioUserServer::on_region_write(ByteSpan p) {
  OPENIB_TRY_ASSIGN(RegionAccess a, decode_region_access_data(p, opts_.max_data_xfer_size));
  OPENIB_TRY(check_access(a.region, a.offset, a.count, true));
  OPENIB_TRY(model_.write(a.region, a.offset, a.data));
  return encode_region_access(a.offset, a.region, a.count);
}

Result<Bytes> VfioUserServer::on_reset(ByteSpan p) {
  if (!p.empty()) return err(EPROTO, "DEVICE_RESET with {} payload bytes", p.size());
  model_.reset();
  return Bytes{};
}

// ---- device side -------------------------------------------------------------

// The last region found is tried first: a device's accesses mostly fall
// in the region of the one before (one buffer, packet after packet).
const VfioUserServer::DmaEntry* VfioUserServer::find_dma(uint64_t iova) {
  if (dma_last_ && iova >= dma_last_->first && iova - dma_last_->first < dma_last_->second.size) return dma_last_;
  auto it = dma_.upper_bound(iova);
  if (it == dma_.begin()) return nullptr;
  --it;
  dma_last_ = &*it;
  return dma_last_;
}

template <typename F>
VfioUserServer::DmaOutcome VfioUserServer::dma_walk(uint64_t iova, uint64_t len, uint32_t need, F&& f) {
  if (len == 0) return DmaOutcome::kOk;
  if (iova + len < iova) return DmaOutcome::kUnmapped;
  // First check every byte is mapped with `need`, then copy: an access
  // outside the mappings touches nothing.
  for (int pass = 0; pass < 2; ++pass) {
    uint64_t cur = iova, done = 0;
    for (size_t steps = 0; done < len; ++steps) {
      if (steps > dma_.size()) return DmaOutcome::kUnmapped;
      const DmaEntry* e = find_dma(cur);
      if (!e) return DmaOutcome::kUnmapped;
      const DmaRegion& r = e->second;
      const uint64_t off = cur - e->first;
      if (off >= r.size || (r.flags & need) != need) return DmaOutcome::kUnmapped;
      const uint64_t n = std::min(len - done, r.size - off);
      if (pass == 1 && !f(static_cast<std::byte*>(r.addr) + off, done, n)) return DmaOutcome::kBusError;
      cur += n;
      done += n;
    }
  }
  return DmaOutcome::kOk;
}

// A copy that takes SIGBUS (the client's file no longer backs the page,
// docs/simhca.md §11.2) stops part way and fails like an unmapped access.
Result<void> VfioUserServer::dma_result(DmaOutcome o, const char* dir, uint64_t iova, uint64_t len) {
  if (o == DmaOutcome::kOk) return ok();
  ++stats_.dma_faults;
  if (o == DmaOutcome::kBusError) {
    ++stats_.dma_bus_errors;
    log_->warn("vfio-user server: DMA {} [{:#x}, +{:#x}) took a bus error (client memory gone)", dir, iova, len);
    return err(EFAULT, "DMA {} [{:#x}, +{:#x}): bus error", dir, iova, len);
  }
  log_->warn("vfio-user server: DMA {} [{:#x}, +{:#x}) outside client memory mapped for it", dir, iova, len);
  return err(EFAULT, "DMA {} [{:#x}, +{:#x}) not mapped for it", dir, iova, len);
}

Result<void> VfioUserServer::dma_read(uint64_t iova, std::span<std::byte> out) {
  auto o = dma_walk(iova, out.size(), VFIO_DMA_MAP_FLAG_READ, [&](const std::byte* src, uint64_t done, uint64_t n) {
    return guarded_copy(out.data() + done, src, n);
  });
  return dma_result(o, "read", iova, out.size());
}

Result<void> VfioUserServer::dma_write(uint64_t iova, std::span<const std::byte> in) {
  auto o = dma_walk(iova, in.size(), VFIO_DMA_MAP_FLAG_WRITE, [&](std::byte* dst, uint64_t done, uint64_t n) {
    return guarded_copy(dst, in.data() + done, n);
  });
  return dma_result(o, "write", iova, in.size());
}

bool VfioUserServer::irq_routed(uint32_t index, uint32_t vector) const {
  auto it = irq_fds_.find(index);
  return it != irq_fds_.end() && vector < it->second.size() && it->second[vector].valid();
}

bool VfioUserServer::trigger_irq(uint32_t index, uint32_t vector) {
  if (!irq_routed(index, vector)) {
    ++stats_.irqs_dropped;
    return false;
  }
  const uint64_t one = 1;
  // EAGAIN means the counter is saturated: the interrupt is pending anyway.
  [[maybe_unused]] ssize_t n = ::write(irq_fds_[index][vector].get(), &one, sizeof one);
  ++stats_.irqs_triggered;
  return true;
}

}  // namespace openib::vfio::user
