// The HCA driver: bring-up and teardown ladders (docs/simhca.md §5.1),
// EQ 0 and its interrupt (§9, §10), verbs over the commands of §6.
#include "hca/hca.hpp"

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <boost/asio/post.hpp>
#include <chrono>
#include <limits>
#include <thread>

#include "common/byte_order.hpp"
#include "common/log.hpp"
#include "hca/prm.hpp"
#include "prm/cqe.hpp"
#include "prm/uar.hpp"

namespace openib::hca {

using namespace prm;
namespace {
constexpr uint32_t kBar0 = VFIO_PCI_BAR0_REGION_INDEX;

int status_errno(uint8_t s) {
  switch (s) {
    case kBadResource: return ENOENT;
    case kResourceBusy: return EBUSY;
    case kNoResources: return ENOSPC;
    case kBadAddress: return EFAULT;
    case kNotSupported:
    case kBadOpcode: return EOPNOTSUPP;
    case kInternalError: return EIO;
    default: return EINVAL;
  }
}

// §9.4: every event type but the CQ ones (those go to the CQ's own EQ).
constexpr uint64_t kEq0EventMask = (1ull << kEvCmdCompletion) | (1ull << kEvPortStateChange) |
                                   (1ull << kEvLidChange) | (1ull << kEvQpFatal) |
                                   (1ull << kEvQpReqErr) | (1ull << kEvQpAccessErr) |
                                   (1ull << kEvQpLastWqeReached) | (1ull << kEvQpCommEst) |
                                   (1ull << kEvSqDrained) | (1ull << kEvSrqLimit) |
                                   (1ull << kEvSrqCatas) | (1ull << kEvDeviceFatal) |
                                   (1ull << kEvPkeyChange) | (1ull << kEvSmChange) |
                                   (1ull << kEvClientReregister) | (1ull << kEvGidChange);
// §6.5 CREATE_CQ input.
Bytes encode_create_cq(uint8_t log_size, uint64_t ring_iova, uint64_t dbr_iova, uint32_t uar, uint32_t eqn) {
  Bytes in(32);
  put64(in, 0x00, ring_iova);
  put64(in, 0x08, dbr_iova);
  put8(in, 0x10, log_size);
  put32(in, 0x14, eqn);
  put32(in, 0x18, uar);
  return in;
}

// §6.9 CREATE_SRQ input.
Bytes encode_create_srq(uint32_t pdn, uint8_t log_size, uint8_t log_stride, uint64_t ring_iova,
                        uint64_t dbr_iova, uint32_t limit, uint32_t uar) {
  Bytes in(32);
  put64(in, 0x00, ring_iova);
  put64(in, 0x08, dbr_iova);
  put8(in, 0x10, log_size);
  put8(in, 0x11, log_stride);
  put32(in, 0x14, pdn);
  put32(in, 0x18, limit);
  put32(in, 0x1c, uar);
  return in;
}

// §6.8 CREATE_AH input: pdn, reserved, address vector (§7.6).
Bytes encode_create_ah(uint32_t pdn, const AddressVector& av) {
  Bytes in(56);
  put32(in, 0x00, pdn);
  encode_av(std::span<std::byte>(in).subspan(8), av);
  return in;
}
}  // namespace

Result<std::unique_ptr<Hca>> Hca::open(vfio::Device& dev, boost::asio::io_context& io,
                                       HcaOptions opts) {
  std::unique_ptr<Hca> h(new Hca(dev, io, opts));
  if (auto r = h->bring_up(); !r) {
    (void)h->close(true);  // undo the rungs climbed so far
    return r.take_error();
  }
  return h;
}

Hca::~Hca() {
  if (is_open()) {
    if (auto r = close(true); !r) log::get("hca")->warn("{}: close: {}", dev_.name(), r.error().str());
  }
}

void Hca::fence(const Error& why) {
  if (cmd_) cmd_->fence(why);
}

Result<void> Hca::close_dead() {
  fence(err(ENODEV, "{}: device is gone", dev_.name()));
  return close(true);
}

Result<void> Hca::reopen() {
  if (is_open()) (void)close(true);
  events_.clear();
  last_status_ = 0;
  last_syndrome_ = 0;
  if (auto r = bring_up(); !r) {
    (void)close(true);
    return r.take_error();
  }
  return ok();
}

Result<DeviceObjects> Hca::device_objects() {
  std::array<std::byte, kNumObjCounts * 4> raw{};
  OPENIB_TRY(dev_.region_read(kBar0, kObjBlock, raw));
  std::array<uint32_t, kNumObjCounts> v{};
  for (size_t i = 0; i < v.size(); ++i)  // little-endian registers (§1)
    v[i] = bytes::get_le32(raw, i * 4);
  return DeviceObjects{v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8]};
}

// §5.1 bring-up order, one rung per step.
Result<void> Hca::bring_up() {
  OPENIB_TRY(bring_up_queue());
  // 3. INIT_HCA and QUERY_DEVICE_CAP, polled (§5.4).
  OPENIB_TRY(command(kOpInitHca, {}, 0));
  initialized_ = true;
  OPENIB_TRY_ASSIGN(Bytes caps, command(kOpQueryDeviceCap, {}, 80));
  caps_ = decode_caps(caps);
  // 4. MSI-X vector 0 and EQ 0 (§5.1, §10), then completions by event.
  OPENIB_TRY_ASSIGN(auto eq, bring_up_eq0_memory());
  OPENIB_TRY_ASSIGN(uint32_t eqn, command_u32(kOpCreateEq, create_eq0_input(*eq)));
  return bring_up_events(std::move(eq), eqn);
}

// Rungs 1 and 2: register accesses and DMA_MAPs, no command.
Result<void> Hca::bring_up_queue() {
  // 1. Identity: the interface revision this driver speaks (§3).
  OPENIB_TRY_ASSIGN(uint16_t vendor, dev_.config_read16(0x00));
  OPENIB_TRY_ASSIGN(uint16_t device, dev_.config_read16(0x02));
  if (vendor != kVendorId || device != kDeviceId)
    return err(ENODEV, "{}: PCI {:04x}:{:04x} is not a simhca", dev_.name(), vendor, device);
  OPENIB_TRY_ASSIGN(uint32_t rev, dev_.read32(kBar0, kInterfaceRev));
  if (rev != kSupportedInterfaceRev)
    return err(ENOTSUP, "{}: interface revision {}, this driver speaks {}", dev_.name(), rev,
               kSupportedInterfaceRev);
  OPENIB_TRY_ASSIGN(uint32_t magic, dev_.read32(kBar0, kMagic));
  if (magic != kMagicValue) return err(ENODEV, "{}: bad MAGIC {:#x}", dev_.name(), magic);
  OPENIB_TRY_ASSIGN(info_.fw_rev, dev_.read32(kBar0, kFwRev));
  info_.driver = "simhca";
  info_.provider = "simhca";  // libopenib's simhca data path (§12)
  info_.vendor_id = vendor;
  info_.device_id = device;
  info_.uar_page_size = static_cast<uint32_t>(kUarPageSize);
  // 2. DMA memory and the command queue.
  OPENIB_TRY_ASSIGN(pool_, dma::DmaPool::create(dev_, opts_.pool));
  OPENIB_TRY_ASSIGN(cmd_, CommandInterface::create(dev_, *pool_, opts_.cmd));
  return ok();
}

// Rung 4's first half: MSI-X vector 0 and EQ 0's ring.
Result<std::unique_ptr<EventQueue>> Hca::bring_up_eq0_memory() {
  OPENIB_TRY_ASSIGN(irqs_, vfio::InterruptSet::create(dev_, io_, VFIO_PCI_MSIX_IRQ_INDEX, 1,
                                                      [this](uint32_t v, uint64_t) { on_interrupt(v); }));
  return EventQueue::create(*pool_, opts_.eq0_log_size);
}

// §6.2 CREATE_EQ of EQ 0: every event type, MSI-X vector 0, UAR 0 (the driver's).
Bytes Hca::create_eq0_input(const EventQueue& eq) {
  Bytes in(32);
  put64(in, 0x00, eq.ring_iova());
  put64(in, 0x08, kEq0EventMask);
  put8(in, 0x10, eq.log_size());
  put16(in, 0x12, 0);  // MSI-X vector 0
  put32(in, 0x14, 0);  // UAR 0, the driver's
  return in;
}

// Rung 4's end: EQ 0 bound; from here completions come by CMD_COMPLETION
// event (§5.4); the command interface drains EQ 0 itself on its fallback
// timer and sync path.
Result<void> Hca::bring_up_events(std::unique_ptr<EventQueue> eq, uint32_t eqn) {
  eq->bind(eqn, 0);
  eq0_ = std::move(eq);
  cmd_->set_poll_ms(opts_.cmd.poll_ms);
  cmd_->set_drain_hook([this] {
    if (drain_eq0() && dev_.alive()) (void)eq0_->arm(dev_);
  });
  cmd_->use_events(&io_);
  log::get("hca")->info("{}: simhca fw {}.{} up: {} QPs, {} CQs, {} MSI-X vectors, EQ {}", dev_.name(),
                        info_.fw_rev >> 16, info_.fw_rev & 0xffff, caps_.max_qp, caps_.max_cq, caps_.num_msix,
                        eqn);
  return ok();
}

void Hca::reopen_async(Done<void> done) {
  if (is_open()) (void)close(true);
  events_.clear();
  last_status_ = 0;
  last_syndrome_ = 0;
  if (auto r = bring_up_queue(); !r) {
    boost::asio::post(io_, [d = std::move(done), e = r.take_error()]() mutable { d(std::move(e)); });
    return;
  }
  // No EQ 0 yet: the command interface's fallback timer finds each
  // completion by its OWNER bit, on `io`; every millisecond until EQ 0
  // exists (simhca completes a command in microseconds).
  cmd_->set_poll_ms(1);
  cmd_->use_events(&io_);
  // 3. INIT_HCA, then QUERY_DEVICE_CAP, each continuing from the last.
  command_async(kOpInitHca, {}, 0, [this, done = std::move(done)](Result<Bytes> r) mutable {
    if (!r) return done(r.take_error());
    initialized_ = true;
    command_async(kOpQueryDeviceCap, {}, 80, [this, done = std::move(done)](Result<Bytes> c) mutable {
      if (!c) return done(c.take_error());
      caps_ = decode_caps(*c);
      // 4. MSI-X vector 0 and EQ 0.
      auto eq = bring_up_eq0_memory();
      if (!eq) return done(eq.take_error());
      const Bytes in = create_eq0_input(**eq);
      command_async(kOpCreateEq, in, 4,
                    [this, eq = std::move(*eq), done = std::move(done)](Result<Bytes> n) mutable {
                      if (!n) return done(n.take_error());
                      if (n->size() < 4) return done(err(EIO, "{}: short CREATE_EQ output", dev_.name()));
                      done(bring_up_events(std::move(eq), get32(*n, 0)));
                    });
    });
  });
}

// The teardown ladder, the reverse of bring_up().
Result<void> Hca::close(bool force) {
  Result<void> first;
  auto note = [&](Result<void> r) {
    if (!r && first) first = std::move(r);
  };
  if (cmd_) {
    const CommandStats& st = cmd_->stats();
    log::get("hca")->info("{}: commands: {} executed, {} doorbell writes, at most {} in flight, {} queued for a "
                          "slot, {} events ({} missed), {} timed out", dev_.name(), st.executed, st.doorbells,
                          st.max_in_flight, st.queued, st.events, st.missed_events, st.timeouts);
  }
  if (cmd_) {  // from here completions are polled (OWNER only)
    // Continuations of the loop's commands first; what the device does not
    // complete in a second is cancelled (its slots fenced) before the
    // ladder's own commands.
    if (!cmd_->drain(1000))
      cmd_->cancel_all(err(ECANCELED, "{}: HCA closing", dev_.name()));
    cmd_->use_events(nullptr);
    cmd_->set_drain_hook(nullptr);
  }
  // DESTROY_EQ is RESOURCE_BUSY while CQs still use EQ 0; TEARDOWN_HCA
  // below then decides (graceful: EBUSY; force: everything goes).
  if (eq0_ && cmd_ && dev_.alive()) {
    auto r = command(kOpDestroyEq, encode_u32(eq0_->eqn()), 0);
    if (!r && last_status_ != kResourceBusy) note(r.take_error());
  }
  irqs_.reset();  // disables MSI-X on a live device
  if (initialized_ && cmd_ && dev_.alive()) {
    auto r = command(kOpTeardownHca, encode_u32(force ? 1 : 0), 0);
    if (!r && last_status_ == kResourceBusy && r.error().code == EBUSY) {
      const uint32_t left = last_syndrome_;
      auto forced = command(kOpTeardownHca, encode_u32(1), 0);
      if (!forced) note(forced.take_error());
      else note(err(EBUSY, "{}: {} objects still alive at teardown; destroyed by force", dev_.name(), left));
    } else if (!r) {
      note(r.take_error());
    }
  }
  initialized_ = false;
  if (cmd_ && dev_.alive()) note(cmd_->disable());
  eq0_.reset();
  cmd_.reset();
  pool_.reset();
  if (!dev_.alive() && first) return err(ENODEV, "{}: device gone during teardown", dev_.name());
  return first;
}

// EQ 0's interrupt (§9.3): consume, dispatch, re-arm.
void Hca::on_interrupt(uint32_t) {
  if (!eq0_) return;
  drain_eq0();
  if (dev_.alive()) {
    if (auto r = eq0_->arm(dev_); !r) log::get("hca")->warn("{}: arming EQ 0: {}", dev_.name(), r.error().str());
  }
}

bool Hca::drain_eq0() {
  if (!eq0_) return false;
  const std::vector<EventEntry> entries = eq0_->poll();
  for (const EventEntry& e : entries) {
    if (e.type == kEvCmdCompletion) {
      if (cmd_) cmd_->on_completion_event(get32(e.data, 0));
      continue;
    }
    events_.push_back(e);
    while (events_.size() > opts_.max_recorded_events) events_.pop_front();
    if (!on_event_) continue;
    if (auto ev = decode_event(e))
      on_event_(*ev);
    else
      log::get("hca")->debug("{}: event type {:#x} not decoded", dev_.name(), e.type);
  }
  return !entries.empty();
}

bool Hca::wait_event(uint8_t type, int timeout_ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    if (drain_eq0() && dev_.alive()) (void)eq0_->arm(dev_);
    for (const EventEntry& e : events_)
      if (e.type == type) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

bool Hca::drain(int timeout_ms) { return !cmd_ || cmd_->drain(timeout_ms); }

namespace {
// §5.5: a status other than OK is an error; its errno as documented in hca.hpp.
Result<Bytes> to_output(const std::string& dev, uint16_t opcode, Result<CommandResult> r) {
  if (!r) return r.take_error();
  if (!r->ok())
    return err(status_errno(r->status), "{}: command {:#06x}: {} (syndrome {:#x})", dev, opcode,
               status_name(r->status), r->syndrome);
  return std::move(r->output);
}
}  // namespace

void Hca::command_async(uint16_t opcode, std::span<const std::byte> in, size_t out_len, Done<Bytes> done,
                        SlotClass cls) {
  if (!cmd_) {
    boost::asio::post(io_, [d = std::move(done), name = dev_.name()]() mutable {
      d(err(ENODEV, "{}: HCA is closed", name));
    });
    return;
  }
  cmd_->submit(opcode, in, out_len,
               [d = std::move(done), name = dev_.name(), opcode](Result<CommandResult> r) mutable {
                 d(to_output(name, opcode, std::move(r)));
               },
               cls);
}

template <class T, class F>
void Hca::then_async(uint16_t opcode, std::span<const std::byte> in, size_t out_len, Done<T> done, F decode) {
  command_async(opcode, in, out_len, [d = std::move(done), decode](Result<Bytes> r) mutable {
    if (!r) return d(r.take_error());
    if (r->size() < 4 && !std::is_void_v<T>) return d(err(EIO, "short command output"));
    d(decode(*r));
  });
}

void Hca::nop_async(Done<void> done) {
  command_async(kOpNop, {}, 0, [d = std::move(done)](Result<Bytes> r) mutable {
    d(r ? Result<void>(ok()) : Result<void>(r.take_error()));
  }, SlotClass::kHealth);
}

void Hca::query_port_async(uint8_t port, Done<PortAttr> done) {
  Bytes in(4);
  put8(in, 0, port);
  then_async<PortAttr>(kOpQueryPort, in, 48, std::move(done), [](const Bytes& o) { return Result<PortAttr>(decode_port(o)); });
}

void Hca::set_port_async(uint8_t port, const PortSetup& s, Done<void> done) {
  destroy_like(kOpSetPort, encode_set_port(port, s), std::move(done));
}

void Hca::query_gid_async(uint8_t port, uint16_t index, Done<GidEntry> done) {
  then_async<GidEntry>(kOpQueryGid, encode_query_gid(port, index), 20, std::move(done),
                       [port, index](const Bytes& o) -> Result<GidEntry> {
                         OPENIB_TRY_ASSIGN(auto e, decode_gid_entry(o));
                         if (!e) return err(ENODATA, "port {}: GID entry {} is empty", port, index);
                         return *e;
                       });
}

void Hca::modify_gid_async(uint8_t port, uint16_t index, const std::optional<GidEntry>& e, Done<void> done) {
  destroy_like(kOpSetGid, encode_set_gid(port, index, e), std::move(done));
}

void Hca::alloc_pd_async(Done<uint32_t> done) {
  then_async<uint32_t>(kOpAllocPd, {}, 4, std::move(done), [](const Bytes& o) { return Result<uint32_t>(get32(o, 0)); });
}

void Hca::alloc_uar_async(Done<uint32_t> done) {
  then_async<uint32_t>(kOpAllocUar, {}, 4, std::move(done), [](const Bytes& o) { return Result<uint32_t>(get32(o, 0)); });
}

void Hca::create_cq_at_async(uint8_t log_size, uint64_t ring_iova, uint64_t dbr_iova, uint32_t uar,
                             uint32_t eqn, Done<uint32_t> done) {
  then_async<uint32_t>(kOpCreateCq, encode_create_cq(log_size, ring_iova, dbr_iova, uar, eqn), 4, std::move(done),
                       [](const Bytes& o) { return Result<uint32_t>(get32(o, 0)); });
}

void Hca::create_srq_at_async(uint32_t pdn, uint8_t log_size, uint8_t log_stride, uint64_t ring_iova,
                              uint64_t dbr_iova, uint32_t limit, uint32_t uar, Done<uint32_t> done) {
  then_async<uint32_t>(kOpCreateSrq, encode_create_srq(pdn, log_size, log_stride, ring_iova, dbr_iova, limit, uar),
                       4, std::move(done), [](const Bytes& o) { return Result<uint32_t>(get32(o, 0)); });
}

void Hca::arm_srq_async(uint32_t srqn, uint32_t limit, Done<void> done) {
  destroy_like(kOpArmSrq, encode_u32x2(srqn, limit), std::move(done));
}

void Hca::create_qp_at_async(const QpCreateParams& p, Done<uint32_t> done) {
  then_async<uint32_t>(kOpCreateQp, encode_create_qp(p), 4, std::move(done),
                       [](const Bytes& o) { return Result<uint32_t>(get32(o, 0)); });
}

void Hca::modify_qp_async(uint32_t qpn, uint32_t mask, const QpAttr& a, Done<void> done) {
  destroy_like(kOpModifyQp, encode_modify_qp(qpn, mask, a), std::move(done));
}

void Hca::modify_qp_chain_async(uint32_t qpn, std::vector<QpChange> steps, Done<void> done) {
  if (steps.size() < 2 || !cmd_ || !cmd_->can_start_together(uint32_t(steps.size())))
    return Device::modify_qp_chain_async(qpn, std::move(steps), std::move(done));
  struct Chain {
    size_t left;
    std::optional<Error> first;  // completions come in slot order: the earliest step's
    Done<void> done;
  };
  auto c = std::make_shared<Chain>(Chain{steps.size(), std::nullopt, std::move(done)});
  for (const QpChange& s : steps)
    modify_qp_async(qpn, s.mask, s.attr, [c](Result<void> r) {
      if (!r && !c->first) c->first = r.take_error();
      if (--c->left) return;
      if (c->first) return c->done(std::move(*c->first));
      c->done(ok());
    });
}

void Hca::query_qp_async(uint32_t qpn, Done<QpInfo> done) {
  command_async(kOpQueryQp, encode_u32(qpn), 144, [d = std::move(done)](Result<Bytes> r) mutable {
    if (!r) return d(r.take_error());
    std::span<const std::byte> o(*r);
    d(QpInfo{decode_qp_attr(o.first(80)), decode_create_qp(o.subspan(80))});
  });
}

// §6.7: the page list inline while it fits the input mailbox, else in a
// translation table the device reads by DMA during the command (as mlx5
// gives its MTT by address); the table lives until the command completes.
Result<Hca::MkeyCommand> Hca::mkey_command(const MkeyParams& p) {
  const uint64_t max_in = kInlineSize + std::min<uint64_t>(caps_.max_mailbox, cmd_ ? cmd_->mailbox_size() : 0);
  MkeyCommand c;
  if (32 + 8 * uint64_t{p.pages.size()} <= max_in) {
    c.in = encode_create_mkey(p);
    return c;
  }
  OPENIB_TRY_ASSIGN(c.table, pool_->alloc(8 * p.pages.size(), 8));
  encode_page_list(p.pages, c.table.bytes());
  c.in = encode_create_mkey(p, c.table.iova());
  return c;
}

void Hca::create_mkey_async(const MkeyParams& p, Done<Mkey> done) {
  auto c = mkey_command(p);
  if (!c) {
    boost::asio::post(io_, [d = std::move(done), e = c.take_error()]() mutable { d(std::move(e)); });
    return;
  }
  auto table = std::make_shared<dma::DmaBuffer>(std::move(c->table));
  command_async(kOpCreateMkey, c->in, 8, [this, d = std::move(done), table](Result<Bytes> r) mutable {
    keep_if_fenced(r, std::move(*table));
    if (!r) return d(r.take_error());
    d(Mkey{get32(*r, 0), get32(*r, 4)});
  });
}

// A command that timed out may still be executed later (its slot is
// fenced, command_interface.hpp): its translation table must not be reused
// under the device, so it is kept until the driver closes.
void Hca::keep_if_fenced(const Result<Bytes>& r, dma::DmaBuffer table) {
  if (!r && r.error().code == ETIMEDOUT && table.valid()) fenced_tables_.push_back(std::move(table));
}

void Hca::create_ah_async(uint32_t pdn, const AddressVector& av, Done<uint32_t> done) {
  then_async<uint32_t>(kOpCreateAh, encode_create_ah(pdn, av), 4, std::move(done),
                       [](const Bytes& o) { return Result<uint32_t>(get32(o, 0)); });
}

void Hca::attach_mcast_async(uint32_t qpn, const std::array<uint8_t, 16>& mgid, uint16_t mlid, Done<void> done) {
  destroy_like(kOpAttachMcg, encode_mcg({qpn, mgid, mlid}), std::move(done));
}

void Hca::detach_mcast_async(uint32_t qpn, const std::array<uint8_t, 16>& mgid, uint16_t mlid, Done<void> done) {
  destroy_like(kOpDetachMcg, encode_mcg({qpn, mgid, mlid}), std::move(done));
}

void Hca::destroy_async(uint16_t opcode, uint32_t number, Done<void> done) {
  destroy_like(opcode, encode_u32(number), std::move(done));
}

// IBA 11.2's destroys and deallocations, by §6's opcodes.
void Hca::destroy_async(ObjectKind kind, uint32_t number, Done<void> done) {
  uint16_t opcode = 0;
  switch (kind) {
    case ObjectKind::kPd: opcode = kOpDeallocPd; break;
    case ObjectKind::kUar: opcode = kOpDeallocUar; break;
    case ObjectKind::kMkey: opcode = kOpDestroyMkey; break;
    case ObjectKind::kCq: opcode = kOpDestroyCq; break;
    case ObjectKind::kSrq: opcode = kOpDestroySrq; break;
    case ObjectKind::kQp: opcode = kOpDestroyQp; break;
    case ObjectKind::kAh: opcode = kOpDestroyAh; break;
  }
  destroy_async(opcode, number, std::move(done));
}

void Hca::destroy_like(uint16_t opcode, std::span<const std::byte> in, Done<void> done) {
  command_async(opcode, in, 0, [d = std::move(done)](Result<Bytes> r) mutable {
    d(r ? Result<void>(ok()) : Result<void>(r.take_error()));
  });
}

Result<Bytes> Hca::command(uint16_t opcode, std::span<const std::byte> in, size_t out_len) {
  if (!cmd_) return err(ENODEV, "{}: HCA is closed", dev_.name());
  OPENIB_TRY_ASSIGN(CommandResult r, cmd_->exec(opcode, in, out_len));
  last_status_ = r.status;
  last_syndrome_ = r.syndrome;
  if (!r.ok())
    return err(status_errno(r.status), "{}: command {:#06x}: {} (syndrome {:#x})", dev_.name(), opcode,
               status_name(r.status), r.syndrome);
  return std::move(r.output);
}

Result<uint32_t> Hca::command_u32(uint16_t opcode, std::span<const std::byte> in) {
  OPENIB_TRY_ASSIGN(Bytes out, command(opcode, in, 4));
  return get32(out, 0);
}

// ---- verbs --------------------------------------------------------------------

Result<void> Hca::nop() {
  OPENIB_TRY(command(kOpNop, {}, 0));
  return ok();
}

Result<DeviceCaps> Hca::query_device() {
  OPENIB_TRY_ASSIGN(Bytes out, command(kOpQueryDeviceCap, {}, 80));
  return decode_caps(out);
}

Result<PortAttr> Hca::query_port(uint8_t port) {
  Bytes in(4);
  put8(in, 0, port);
  OPENIB_TRY_ASSIGN(Bytes out, command(kOpQueryPort, in, 48));
  return decode_port(out);
}

Result<void> Hca::set_port(uint8_t port, const PortSetup& s) {
  OPENIB_TRY(command(kOpSetPort, encode_set_port(port, s), 0));
  return ok();
}

Result<uint32_t> Hca::alloc_pd() { return command_u32(kOpAllocPd, {}); }
Result<void> Hca::dealloc_pd(uint32_t pdn) {
  OPENIB_TRY(command(kOpDeallocPd, encode_u32(pdn), 0));
  return ok();
}
Result<uint32_t> Hca::alloc_uar() { return command_u32(kOpAllocUar, {}); }
Result<void> Hca::dealloc_uar(uint32_t uar) {
  OPENIB_TRY(command(kOpDeallocUar, encode_u32(uar), 0));
  return ok();
}

Result<UniqueFd> Hca::uar_page_fd(uint32_t uar) {
  const uint32_t index = kUarRegionBase + uar;
  OPENIB_TRY_ASSIGN(vfio::RegionInfo ri, dev_.region_info(index));
  if (ri.type != kUarRegionType || ri.subtype != kUarRegionSubtype || ri.size != kUarPageSize ||
      !ri.mmappable() || !ri.readable() || !ri.writable())
    return err(EOPNOTSUPP, "{}: region {} is not UAR {}'s page", dev_.name(), index, uar);
  OPENIB_TRY_ASSIGN(vfio::RegionFd rfd, dev_.region_mmap_fd(index));
  // memfd_create(2) "File sealing": without F_SEAL_SHRINK a holder could
  // truncate the page under the device's own mapping.
  constexpr int kSeals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;
  struct stat st{};
  const int seals = ::fcntl(rfd.fd.get(), F_GET_SEALS);
  if (rfd.offset != 0 || ::fstat(rfd.fd.get(), &st) < 0 || !S_ISREG(st.st_mode) ||
      static_cast<uint64_t>(st.st_size) != kUarPageSize || seals < 0 || (seals & kSeals) != kSeals)
    return err(EOPNOTSUPP, "{}: UAR {}'s fd is not one sealed page", dev_.name(), uar);
  return std::move(rfd.fd);
}

Result<EqContext> Hca::query_eq(uint32_t eqn) {
  OPENIB_TRY_ASSIGN(Bytes out, command(kOpQueryEq, encode_u32(eqn), 40));
  return decode_eq_context(out);
}

// §6.5 CREATE_CQ: ring of 64-byte CQEs and an 8-byte doorbell record.
Result<Cq> Hca::cq_memory(uint8_t log_size, uint32_t uar) {
  Cq cq;
  OPENIB_TRY_ASSIGN(cq.ring, pool_->alloc((size_t{1} << log_size) * kCqeSize, 64));
  OPENIB_TRY_ASSIGN(cq.dbr, pool_->alloc(8, 8));
  cq.log_size = log_size;
  cq.uar = uar;
  return cq;
}

Result<Cq> Hca::create_cq(uint8_t log_size, std::optional<uint32_t> eqn, uint32_t uar) {
  OPENIB_TRY_ASSIGN(Cq cq, cq_memory(log_size, uar));
  OPENIB_TRY_ASSIGN(cq.cqn, create_cq_at(log_size, cq.ring.iova(), cq.dbr.iova(), uar, eqn));
  return cq;
}

void Hca::create_cq_async(uint8_t log_size, Done<Cq> done) {
  auto cq = cq_memory(log_size, 0);
  if (!cq) {
    boost::asio::post(io_, [d = std::move(done), e = cq.take_error()]() mutable { d(std::move(e)); });
    return;
  }
  const uint64_t ring = cq->ring.iova(), dbr = cq->dbr.iova();
  create_cq_at_async(log_size, ring, dbr, 0, eq0(), [c = std::move(*cq), d = std::move(done)](Result<uint32_t> n) mutable {
    if (!n) return d(n.take_error());
    c.cqn = *n;
    d(std::move(c));
  });
}

Result<void> Hca::destroy_cq(Cq& cq) {
  OPENIB_TRY(command(kOpDestroyCq, encode_u32(cq.cqn), 0));
  cq = Cq{};
  return ok();
}

Result<CqContext> Hca::query_cq(uint32_t cqn) {
  OPENIB_TRY_ASSIGN(Bytes out, command(kOpQueryCq, encode_u32(cqn), 48));
  return decode_cq_context(out);
}

// §4/§7.3 CQ_ARM, the value by src/prm/uar.hpp.
Result<void> Hca::arm_cq(Cq& cq, bool solicited_only, uint32_t consumer) {
  cq.arm_sn = (cq.arm_sn + 1) & 3;  // §7.3: must change between arms
  const auto cmd = solicited_only ? dp::CqArm::kSolicited : dp::CqArm::kNext;
  return dev_.write64_posted(VFIO_PCI_BAR2_REGION_INDEX, cq.uar * kUarPageSize + kUarCqArm,
                      dp::cq_arm(cq.cqn, cmd, cq.arm_sn, consumer));
}

// §6.9 CREATE_SRQ
// §6.9 CREATE_SRQ over the driver's memory, without waiting.
void Hca::create_srq_async(uint32_t pdn, uint8_t log_size, uint8_t log_stride, Done<Srq> done) {
  auto fail = [&](Error e) { boost::asio::post(io_, [d = std::move(done), e = std::move(e)]() mutable { d(std::move(e)); }); };
  Srq s;
  auto ring = pool_->alloc((size_t{1} << log_size) << log_stride, 64);
  if (!ring) return fail(ring.take_error());
  auto dbr = pool_->alloc(8, 8);
  if (!dbr) return fail(dbr.take_error());
  s.ring = std::move(*ring);
  s.dbr = std::move(*dbr);
  s.log_size = log_size;
  s.log_stride = log_stride;
  const uint64_t r = s.ring.iova(), b = s.dbr.iova();
  create_srq_at_async(pdn, log_size, log_stride, r, b, 0, 0, [s = std::move(s), d = std::move(done)](Result<uint32_t> n) mutable {
    if (!n) return d(n.take_error());
    s.srqn = *n;
    d(std::move(s));
  });
}

Result<Srq> Hca::create_srq(uint32_t pdn, uint8_t log_size, uint8_t log_stride, uint32_t limit,
                            uint32_t uar) {
  Srq s;
  OPENIB_TRY_ASSIGN(s.ring, pool_->alloc((size_t{1} << log_size) << log_stride, 64));
  OPENIB_TRY_ASSIGN(s.dbr, pool_->alloc(8, 8));
  Bytes in(32);
  put64(in, 0x00, s.ring.iova());
  put64(in, 0x08, s.dbr.iova());
  put8(in, 0x10, log_size);
  put8(in, 0x11, log_stride);
  put32(in, 0x14, pdn);
  put32(in, 0x18, limit);
  put32(in, 0x1c, uar);
  OPENIB_TRY_ASSIGN(s.srqn, command_u32(kOpCreateSrq, in));
  s.log_size = log_size;
  s.log_stride = log_stride;
  return s;
}

Result<void> Hca::destroy_srq(Srq& s) {
  OPENIB_TRY(command(kOpDestroySrq, encode_u32(s.srqn), 0));
  s = Srq{};
  return ok();
}

Result<SrqContext> Hca::query_srq(uint32_t srqn) {
  OPENIB_TRY_ASSIGN(Bytes out, command(kOpQuerySrq, encode_u32(srqn), 40));
  return decode_srq_context(out);
}

Result<void> Hca::arm_srq(uint32_t srqn, uint32_t limit) {
  OPENIB_TRY(command(kOpArmSrq, encode_u32x2(srqn, limit), 0));
  return ok();
}

// §6.10 CREATE_QP: the driver allocates the rings and doorbell record.
Result<Qp> Hca::qp_memory(const QpInit& init, QpCreateParams& p) {
  Qp qp;
  qp.type = init.type;
  OPENIB_TRY_ASSIGN(qp.sq, pool_->alloc((size_t{1} << init.log_sq_size) << init.log_sq_stride, 64));
  if (!init.srqn) {
    OPENIB_TRY_ASSIGN(qp.rq, pool_->alloc((size_t{1} << init.log_rq_size) << init.log_rq_stride, 64));
  }
  OPENIB_TRY_ASSIGN(qp.dbr, pool_->alloc(8, 8));
  p.type = init.type;
  p.port = init.port;
  p.sig_all = init.sig_all;
  p.pdn = init.pdn;
  p.send_cqn = init.send_cqn;
  p.recv_cqn = init.recv_cqn;
  p.uar = init.uar;
  p.srqn = init.srqn;
  p.sq_iova = qp.sq.iova();
  p.rq_iova = qp.rq.valid() ? qp.rq.iova() : 0;
  p.dbr_iova = qp.dbr.iova();
  p.log_sq_size = init.log_sq_size;
  p.log_sq_stride = init.log_sq_stride;
  p.log_rq_size = init.log_rq_size;
  p.log_rq_stride = init.log_rq_stride;
  qp.uar = init.uar;
  qp.log_sq_size = init.log_sq_size;
  qp.log_sq_stride = init.log_sq_stride;
  qp.log_rq_size = init.log_rq_size;
  qp.log_rq_stride = init.log_rq_stride;
  return qp;
}

Result<Qp> Hca::create_qp(const QpInit& init) {
  QpCreateParams p;
  OPENIB_TRY_ASSIGN(Qp qp, qp_memory(init, p));
  OPENIB_TRY_ASSIGN(qp.qpn, command_u32(kOpCreateQp, encode_create_qp(p)));
  return qp;
}

void Hca::create_qp_async(const QpInit& init, Done<Qp> done) {
  QpCreateParams p;
  auto qp = qp_memory(init, p);
  if (!qp) {
    boost::asio::post(io_, [d = std::move(done), e = qp.take_error()]() mutable { d(std::move(e)); });
    return;
  }
  create_qp_at_async(p, [q = std::move(*qp), d = std::move(done)](Result<uint32_t> n) mutable {
    if (!n) return d(n.take_error());
    q.qpn = *n;
    d(std::move(q));
  });
}

Result<void> Hca::modify_qp(uint32_t qpn, uint32_t mask, const QpAttr& a) {
  OPENIB_TRY(command(kOpModifyQp, encode_modify_qp(qpn, mask, a), 0));
  return ok();
}

Result<QpInfo> Hca::query_qp(uint32_t qpn) {
  OPENIB_TRY_ASSIGN(Bytes out, command(kOpQueryQp, encode_u32(qpn), 144));
  std::span<const std::byte> o(out);
  return QpInfo{decode_qp_attr(o.first(80)), decode_create_qp(o.subspan(80))};
}

Result<void> Hca::destroy_qp(Qp& qp) {
  OPENIB_TRY(command(kOpDestroyQp, encode_u32(qp.qpn), 0));
  qp = Qp{};
  return ok();
}

// ---- caller-owned memory (ibd) ----------------------------------------------

// §6.5 CREATE_CQ input layout, memory supplied by the caller.
Result<uint32_t> Hca::create_cq_at(uint8_t log_size, uint64_t ring_iova, uint64_t dbr_iova,
                                   uint32_t uar, std::optional<uint32_t> eqn) {
  return command_u32(kOpCreateCq, encode_create_cq(log_size, ring_iova, dbr_iova, uar, eqn.value_or(eq0())));
}

// §6.9 CREATE_SRQ
Result<uint32_t> Hca::create_srq_at(uint32_t pdn, uint8_t log_size, uint8_t log_stride,
                                    uint64_t ring_iova, uint64_t dbr_iova, uint32_t limit,
                                    uint32_t uar) {
  return command_u32(kOpCreateSrq, encode_create_srq(pdn, log_size, log_stride, ring_iova, dbr_iova, limit, uar));
}

// §6.10 CREATE_QP
Result<uint32_t> Hca::create_qp_at(const QpCreateParams& p) {
  return command_u32(kOpCreateQp, encode_create_qp(p));
}

Result<void> Hca::destroy_cq(uint32_t cqn) {
  OPENIB_TRY(command(kOpDestroyCq, encode_u32(cqn), 0));
  return ok();
}
Result<void> Hca::destroy_srq(uint32_t srqn) {
  OPENIB_TRY(command(kOpDestroySrq, encode_u32(srqn), 0));
  return ok();
}
Result<void> Hca::destroy_qp(uint32_t qpn) {
  OPENIB_TRY(command(kOpDestroyQp, encode_u32(qpn), 0));
  return ok();
}

// ---- data path, §12 ------------------------------------------------------

namespace {
// ibd's own QPs are checked against the stride alone (§6.10), not caps.
constexpr uint32_t kUnbounded = std::numeric_limits<uint32_t>::max();
}  // namespace

// §12.1 written in place into the slot (src/prm/wqe.hpp), then §12.3/§12.5.
Result<void> Hca::post_send(Qp& qp, const SendWr& wr) { return post_send(qp, wr, true); }

Result<void> Hca::ring_sq(Qp& qp) {
  return dev_.write64_posted(VFIO_PCI_BAR2_REGION_INDEX, qp.uar * kUarPageSize + kUarSqDoorbell,
                             dp::sq_doorbell(qp.qpn, qp.sq_pi));
}

Result<void> Hca::post_send(Qp& qp, const SendWr& wr, bool ring) {
  const size_t stride = size_t{1} << qp.log_sq_stride;
  const size_t idx = qp.sq_pi & ((1u << qp.log_sq_size) - 1);
  OPENIB_TRY(write_send_wqe(qp.sq.bytes().subspan(idx * stride, stride), wr, qp.type, {kUnbounded, kUnbounded}));
  ++qp.sq_pi;
  // §12.3: WQE, store barrier, record, then the doorbell with the same counter.
  std::atomic_thread_fence(std::memory_order_release);
  put32(qp.dbr.bytes(), dp::kDbrQpSq, qp.sq_pi);
  return ring ? ring_sq(qp) : ok();
}

// §12.2 in place, then the record of §12.3.
Result<void> Hca::post_recv(Qp& qp, const RecvWr& wr) {
  if (!qp.rq.valid()) return err(EINVAL, "QP {:#x} receives from an SRQ", qp.qpn);
  const size_t stride = size_t{1} << qp.log_rq_stride;
  const size_t idx = qp.rq_pi & ((1u << qp.log_rq_size) - 1);
  OPENIB_TRY(write_recv_wqe(qp.rq.bytes().subspan(idx * stride, stride), wr, kUnbounded));
  ++qp.rq_pi;
  std::atomic_thread_fence(std::memory_order_release);
  put32(qp.dbr.bytes(), dp::kDbrQpRq, qp.rq_pi);  // §12.5: no doorbell for receives
  return ok();
}

Result<void> Hca::post_srq_recv(Srq& s, const RecvWr& wr) {
  const size_t stride = size_t{1} << s.log_stride;
  const size_t idx = s.pi & ((1u << s.log_size) - 1);
  OPENIB_TRY(write_recv_wqe(s.ring.bytes().subspan(idx * stride, stride), wr, kUnbounded));
  ++s.pi;
  std::atomic_thread_fence(std::memory_order_release);
  put32(s.dbr.bytes(), dp::kDbrSrq, s.pi);
  return ok();
}

// §12.4 with the ownership phase of §9.2 (src/prm/cqe.hpp).
std::vector<WorkCompletion> Hca::poll_cq(Cq& cq, size_t max) {
  std::vector<WorkCompletion> out;
  const uint32_t size = 1u << cq.log_size;
  while (out.size() < max) {
    const std::byte* e = cq.ring.bytes().data() + size_t{cq.ci & (size - 1)} * kCqeSize;
    if (!dp::cqe_owned(e, cq.ci, cq.log_size)) break;
    out.push_back(dp::decode_cqe(e));
    ++cq.ci;
  }
  if (!out.empty()) {
    std::atomic_thread_fence(std::memory_order_release);
    put32(cq.dbr.bytes(), dp::kDbrCqCons, cq.ci);
  }
  return out;
}

Result<Mkey> Hca::create_mkey(const MkeyParams& p) {
  OPENIB_TRY_ASSIGN(MkeyCommand c, mkey_command(p));
  auto out = command(kOpCreateMkey, c.in, 8);
  keep_if_fenced(out, std::move(c.table));
  if (!out) return out.take_error();
  return Mkey{get32(*out, 0), get32(*out, 4)};
}

Result<void> Hca::destroy_mkey(uint32_t lkey) {
  OPENIB_TRY(command(kOpDestroyMkey, encode_u32(lkey), 0));
  return ok();
}

Result<MkeyContext> Hca::query_mkey(uint32_t lkey) {
  OPENIB_TRY_ASSIGN(Bytes out, command(kOpQueryMkey, encode_u32(lkey), 40));
  return decode_mkey_context(out);
}

Result<uint32_t> Hca::create_ah(uint32_t pdn, const AddressVector& av) {
  return command_u32(kOpCreateAh, encode_create_ah(pdn, av));
}

Result<void> Hca::attach_mcast(uint32_t qpn, const std::array<uint8_t, 16>& mgid, uint16_t mlid) {
  OPENIB_TRY(command(kOpAttachMcg, encode_mcg({qpn, mgid, mlid}), 0));
  return ok();
}

Result<void> Hca::detach_mcast(uint32_t qpn, const std::array<uint8_t, 16>& mgid, uint16_t mlid) {
  OPENIB_TRY(command(kOpDetachMcg, encode_mcg({qpn, mgid, mlid}), 0));
  return ok();
}

Result<void> Hca::destroy_ah(uint32_t ahn) {
  OPENIB_TRY(command(kOpDestroyAh, encode_u32(ahn), 0));
  return ok();
}

Result<std::pair<uint32_t, AddressVector>> Hca::query_ah(uint32_t ahn) {
  OPENIB_TRY_ASSIGN(Bytes out, command(kOpQueryAh, encode_u32(ahn), 56));
  return std::pair<uint32_t, AddressVector>{get32(out, 0), decode_av(std::span<const std::byte>(out).subspan(8))};
}

}  // namespace openib::hca
