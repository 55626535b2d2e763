// Driver side of docs/simhca.md §5 (command interface), asynchronous.
#include "hca/command_interface.hpp"

#include <boost/asio/post.hpp>
#include <atomic>
#include <cstring>
#include <thread>

#include "common/log.hpp"

namespace openib::hca {

using namespace prm;

CompleterStats& completer_stats() {
  static CompleterStats s;
  return s;
}

void log_completer_misuse(const char* what) { log::get("hca")->warn("{}", what); }

Result<std::unique_ptr<CommandInterface>> CommandInterface::create(vfio::Device& dev,
                                                                   dma::DmaPool& pool,
                                                                   CommandOptions opts) {
  if (opts.log_size > 5 || opts.log_size < 1)
    return err(EINVAL, "{}: command queue log size {} not in 1..5", dev.name(), opts.log_size);
  std::unique_ptr<CommandInterface> ci(new CommandInterface(dev, pool, opts));
  ci->slots_.resize(size_t{1} << opts.log_size);
  // §5.1: entries in one 4 KiB-aligned page; mailboxes 8-byte aligned.
  // Every slot's mailboxes exist from the start: the daemon's DMA memory
  // is fixed after bring-up (2 x 16 KiB x 32 = 1 MiB), not grown by load.
  OPENIB_TRY_ASSIGN(ci->ring_, pool.alloc(4096, 4096));
  for (Slot& s : ci->slots_) {
    OPENIB_TRY_ASSIGN(s.in_mbox, pool.alloc(opts.mailbox_size, 64));
    OPENIB_TRY_ASSIGN(s.out_mbox, pool.alloc(opts.mailbox_size, 64));
  }
  const uint64_t a = ci->ring_.iova();
  constexpr uint32_t bar0 = VFIO_PCI_BAR0_REGION_INDEX;
  // §3: address and size first, then ENABLE, then STATUS says whether it took.
  OPENIB_TRY(dev.write32(bar0, kCmdqCtrl, 0));
  OPENIB_TRY(dev.write32(bar0, kCmdqAddrLo, static_cast<uint32_t>(a)));
  OPENIB_TRY(dev.write32(bar0, kCmdqAddrHi, static_cast<uint32_t>(a >> 32)));
  OPENIB_TRY(dev.write32(bar0, kCmdqSize, opts.log_size));
  OPENIB_TRY(dev.write32(bar0, kCmdqCtrl, 1));
  OPENIB_TRY_ASSIGN(uint32_t status, dev.read32(bar0, kStatus));
  if (!(status & kStatusCmdqEnabled))
    return err(EIO, "{}: command queue at {:#x} not enabled (STATUS {:#x})", dev.name(), a, status);
  ci->enabled_ = true;
  ci->next_health_ = Clock::now();
  return ci;
}

CommandInterface::~CommandInterface() {
  alive_.reset();
  timer_.reset();
  io_ = nullptr;
  fail_all(Error{ECANCELED, dev_.name() + ": command interface closed"});
  if (enabled_ && dev_.alive()) (void)disable();
}

Result<void> CommandInterface::disable() {
  enabled_ = false;
  return dev_.write32(VFIO_PCI_BAR0_REGION_INDEX, kCmdqCtrl, 0);
}

void CommandInterface::use_events(boost::asio::io_context* io) {
  timer_.reset();  // a pending wait ends with operation_aborted and touches nothing
  timer_armed_ = false;
  io_ = io;
  if (io_) {
    timer_ = std::make_unique<boost::asio::steady_timer>(*io_);
    if (in_flight() || fenced()) arm_timer();
  }
}

std::byte* CommandInterface::entry(uint32_t slot) const {
  return static_cast<std::byte*>(ring_.data()) + slot * kEntrySize;
}

// The device writes the entry from its own mapping of the same memfd, so
// OWNER is read with acquire ordering (§5.4: status and output are written
// before OWNER is cleared).
uint8_t CommandInterface::entry_flags(uint32_t slot) const {
  auto* p = reinterpret_cast<uint8_t*>(entry(slot) + kEntFlags);
  return std::atomic_ref<uint8_t>(*p).load(std::memory_order_acquire);
}

uint32_t CommandInterface::in_flight() const {
  uint32_t n = 0;
  for (const Slot& s : slots_) n += s.state == State::kBusy;
  return n;
}

bool CommandInterface::can_start_together(uint32_t n) const {
  if (dead_ || !enabled_ || !queue_.empty() || withhold_) return false;
  uint32_t free = 0;
  for (uint32_t i = 0; i + 1 < num_slots(); ++i) free += slots_[i].state == State::kFree;  // the last is reserved
  return free >= n;
}

uint32_t CommandInterface::fenced() const {
  uint32_t n = 0;
  for (const Slot& s : slots_) n += s.state == State::kFenced;
  return n;
}

uint64_t CommandInterface::mailbox_iova(bool output) const {
  return (output ? slots_[0].out_mbox : slots_[0].in_mbox).iova();
}

Result<void> CommandInterface::check_sizes(uint16_t opcode, size_t in_len, size_t out_len) const {
  if (!enabled_) return err(EINVAL, "{}: command interface disabled", dev_.name());
  if (in_len > kInlineSize + opts_.mailbox_size || out_len > kInlineSize + opts_.mailbox_size)
    return err(EMSGSIZE, "{}: command {:#06x} with {} input / {} output bytes exceeds the mailbox",
               dev_.name(), opcode, in_len, out_len);
  return ok();
}

// The last slot is the reserved one (health checks); normal commands take
// the lowest free slot below it.
int CommandInterface::free_slot(SlotClass cls) const {
  const uint32_t reserved = num_slots() - 1;
  if (cls == SlotClass::kHealth) return slots_[reserved].state == State::kFree ? int(reserved) : -1;
  for (uint32_t i = 0; i < reserved; ++i)
    if (slots_[i].state == State::kFree) return int(i);
  return -1;
}

void CommandInterface::fail_later(CommandCompleter done, Error e) {
  if (!io_ || sync_) {  // no loop (bring-up, sync path): the caller is polling anyway
    done(std::move(e));
    return;
  }
  boost::asio::post(*io_, [d = std::move(done), e = std::move(e)]() mutable { d(std::move(e)); });
}

void CommandInterface::submit(uint16_t opcode, std::span<const std::byte> in, size_t out_len,
                              CommandCompleter done, SlotClass cls) {
  if (dead_) return fail_later(std::move(done), *dead_);
  if (auto r = check_sizes(opcode, in.size(), out_len); !r) return fail_later(std::move(done), r.take_error());
  Pending p{next_pending_id_++, opcode, std::vector<std::byte>(in.begin(), in.end()), out_len, cls,
            std::move(done)};
  auto& q = cls == SlotClass::kHealth ? health_queue_ : queue_;
  const int slot = q.empty() ? free_slot(cls) : -1;  // FIFO: never overtake a queued command
  if (slot < 0) {
    ++stats_.queued;
    q.push_back(std::move(p));
    return;
  }
  if (auto r = start(uint32_t(slot), p); !r) fail_later(std::move(p.done), r.take_error());
}

// §5.2 entry layout; OWNER last, with release ordering (§5.3: the device
// executes only entries handed over with OWNER set).
Result<void> CommandInterface::start(uint32_t slot, Pending& p) {
  Slot& s = slots_[slot];
  if (p.in.size() > kInlineSize && !s.in_mbox.valid()) {
    OPENIB_TRY_ASSIGN(s.in_mbox, pool_.alloc(opts_.mailbox_size, 64));
  }
  if (p.out_len > kInlineSize && !s.out_mbox.valid()) {
    OPENIB_TRY_ASSIGN(s.out_mbox, pool_.alloc(opts_.mailbox_size, 64));
  }
  const uint32_t token = next_token_++;
  if (next_token_ == 0) next_token_ = 1;  // token 0 never names a command
  std::span<std::byte> e(entry(slot), kEntrySize);
  std::memset(e.data(), 0, e.size());
  put16(e, kEntOpcode, p.opcode);
  put32(e, kEntToken, token);
  put32(e, kEntInLen, p.in.size());
  put32(e, kEntOutLen, p.out_len);
  if (!p.in.empty()) std::memcpy(e.data() + kEntInlineIn, p.in.data(), std::min(p.in.size(), kInlineSize));
  if (p.in.size() > kInlineSize) {
    std::memcpy(s.in_mbox.data(), p.in.data() + kInlineSize, p.in.size() - kInlineSize);
    put64(e, kEntInMbox, s.in_mbox.iova());
  }
  if (p.out_len > kInlineSize) put64(e, kEntOutMbox, s.out_mbox.iova());
  std::atomic_thread_fence(std::memory_order_release);
  std::atomic_ref<uint8_t>(*reinterpret_cast<uint8_t*>(e.data() + kEntFlags))
      .store(kOwnerBit, std::memory_order_release);
  s.state = State::kBusy;
  s.owner_seen_clear = false;
  s.opcode = p.opcode;
  s.token = token;
  s.out_len = p.out_len;
  s.deadline = Clock::now() + std::chrono::milliseconds(opts_.timeout_ms);
  s.done = std::move(p.done);
  stats_.max_in_flight = std::max<uint64_t>(stats_.max_in_flight, in_flight());
  if (withhold_) --withhold_;
  else ring_later(slot);
  arm_timer();
  return ok();
}

void CommandInterface::start_queued() {
  auto run = [&](std::deque<Pending>& q, SlotClass cls) {
    while (!q.empty() && !dead_) {
      const int slot = free_slot(cls);
      if (slot < 0) return;
      Pending p = std::move(q.front());
      q.pop_front();
      if (auto r = start(uint32_t(slot), p); !r) fail_later(std::move(p.done), r.take_error());
    }
  };
  run(health_queue_, SlotClass::kHealth);
  run(queue_, SlotClass::kNormal);
}

// §5.3: CMD_DOORBELL latches a bit per slot. Slots started in one turn of
// the loop share one write (a vfio-user round trip each on simhca).
void CommandInterface::ring_later(uint32_t slot) {
  bell_bits_ |= 1u << slot;
  if (!io_ || sync_) return flush_doorbell();
  if (bell_posted_) return;
  bell_posted_ = true;
  boost::asio::post(*io_, [this, alive = std::weak_ptr<bool>(alive_)] {
    if (alive.expired()) return;
    bell_posted_ = false;
    flush_doorbell();
  });
}

void CommandInterface::flush_doorbell() {
  uint32_t bits = 0;
  for (uint32_t i = 0; i < num_slots(); ++i)
    if ((bell_bits_ >> i & 1) && slots_[i].state == State::kBusy) bits |= 1u << i;
  bell_bits_ = 0;
  if (!bits) return;
  std::atomic_thread_fence(std::memory_order_release);  // entries before doorbell
  ++stats_.doorbells;
  // Posted (§5.3): ibd's loop does not wait for the device to take it.
  if (auto r = dev_.write32_posted(VFIO_PCI_BAR0_REGION_INDEX, kCmdDoorbell, bits); !r) {
    Error e = r.take_error();
    if (!dev_.alive()) e.code = ENODEV;
    fail_all(e);
  }
}

void CommandInterface::complete(uint32_t slot) {
  Slot& s = slots_[slot];
  std::span<const std::byte> e(entry(slot), kEntrySize);
  CommandResult r;
  r.status = get8(e, kEntStatus);
  r.syndrome = get32(e, kEntSyndrome);
  r.output.resize(s.out_len);
  if (s.out_len) std::memcpy(r.output.data(), e.data() + kEntInlineOut, std::min(s.out_len, kInlineSize));
  if (s.out_len > kInlineSize) std::memcpy(r.output.data() + kInlineSize, s.out_mbox.data(), s.out_len - kInlineSize);
  CommandCompleter done = std::move(s.done);
  s.state = State::kFree;
  ++stats_.executed;
  if (!r.ok()) ++stats_.failed;
  start_queued();  // before the continuation, which may submit more
  done(std::move(r));
}

void CommandInterface::fail_slot(uint32_t slot, Error e, bool fence) {
  Slot& s = slots_[slot];
  CommandCompleter done = std::move(s.done);
  s.state = fence ? State::kFenced : State::kFree;
  start_queued();
  done(std::move(e));
}

// Every command in flight and queued fails with `e`; with the device gone
// (or the queue disabled) so will every later one.
void CommandInterface::fail_all(const Error& e) {
  if (e.code == ENODEV || e.code == EIO) dead_ = e;
  std::vector<CommandCompleter> waiting;
  for (Slot& s : slots_) {
    if (s.state == State::kBusy) waiting.push_back(std::move(s.done));
    s.state = State::kFree;  // nothing will complete on this queue any more
  }
  for (std::deque<Pending>* q : {&health_queue_, &queue_}) {
    for (Pending& p : *q) waiting.push_back(std::move(p.done));
    q->clear();
  }
  if (!waiting.empty())
    log::get("hca")->warn("{}: failing {} commands: {}", dev_.name(), waiting.size(), e.str());
  for (auto& d : waiting) d(e);
}

void CommandInterface::cancel_all(const Error& e) {
  std::vector<CommandCompleter> waiting;
  const bool alive = dev_.alive();
  for (Slot& s : slots_) {
    if (s.state != State::kBusy) continue;
    waiting.push_back(std::move(s.done));
    s.state = alive ? State::kFenced : State::kFree;
  }
  for (std::deque<Pending>* q : {&health_queue_, &queue_}) {
    for (Pending& p : *q) waiting.push_back(std::move(p.done));
    q->clear();
  }
  for (auto& d : waiting) d(e);
}

void CommandInterface::on_completion_event(uint32_t token) {
  ++stats_.events;
  for (uint32_t i = 0; i < num_slots(); ++i) {
    Slot& s = slots_[i];
    if (s.token != token || s.state == State::kFree) continue;
    if (entry_flags(i) & kOwnerBit) break;  // not done by §5.4's order: leave it to the timer
    if (s.state == State::kFenced) {  // timed out earlier; now really done
      s.state = State::kFree;
      ++stats_.late_completions;
      start_queued();
      return;
    }
    return complete(i);
  }
  ++stats_.stray_events;  // e.g. CREATE_EQ of EQ 0, completed by polling; a raw entry
}

// §5.4: a device that vanished fails the read (ENODEV) or reads all ones; a
// queue that was disabled under us (a reset) will complete nothing more. A
// fatal device still completes commands, with INTERNAL_ERROR (§11.4).
Result<void> CommandInterface::check_health() {
  auto st = dev_.read32(VFIO_PCI_BAR0_REGION_INDEX, kStatus);
  if (!st) return err(ENODEV, "{}: reading STATUS: {}", dev_.name(), st.error().message);
  if (*st == 0xffffffffu) return err(ENODEV, "{}: STATUS reads all ones: device gone", dev_.name());
  if (!(*st & kStatusCmdqEnabled))
    return err(EIO, "{}: command queue no longer enabled (STATUS {:#x})", dev_.name(), *st);
  return ok();
}

void CommandInterface::poll_slots(bool from_timer) {
  const auto now = Clock::now();
  if ((in_flight() || fenced()) && now >= next_health_) {
    next_health_ = now + std::chrono::milliseconds(opts_.health_poll_ms);
    if (auto r = check_health(); !r) return fail_all(r.error());
  }
  for (uint32_t i = 0; i < num_slots(); ++i) {
    Slot& s = slots_[i];
    if (s.state == State::kFree) continue;
    const bool clear = !(entry_flags(i) & kOwnerBit);
    if (s.state == State::kFenced) {
      if (clear) {
        s.state = State::kFree;
        ++stats_.late_completions;
        start_queued();
      }
      continue;
    }
    if (clear) {
      // Without events OWNER is the completion. With events, OWNER clear
      // and no event after a whole tick is a missed event (EQ overrun, an
      // interrupt lost), counted, and the command completes anyway.
      if (!io_ || (s.owner_seen_clear && (from_timer || now - s.clear_since >= std::chrono::milliseconds(2)))) {
        if (io_) {
          ++stats_.missed_events;
          log::get("hca")->warn("{}: command token {} completed without its event", dev_.name(), s.token);
        }
        complete(i);
      } else if (!s.owner_seen_clear) {
        s.owner_seen_clear = true;
        s.clear_since = now;
      }
      continue;
    }
    if (now >= s.deadline) {
      if (auto r = check_health(); !r) return fail_all(r.error());
      ++stats_.timeouts;
      log::get("hca")->warn("{}: command {:#06x} token {} in slot {} timed out; slot fenced", dev_.name(),
                            s.opcode, s.token, i);
      fail_slot(i, err(ETIMEDOUT, "{}: command {:#06x} in slot {} not completed within {} ms", dev_.name(),
                       s.opcode, i, opts_.timeout_ms),
                /*fence*/ true);
    }
  }
}

void CommandInterface::arm_timer() {
  if (!io_ || !timer_ || timer_armed_) return;
  timer_armed_ = true;
  timer_->expires_after(std::chrono::milliseconds(opts_.poll_ms));
  timer_->async_wait([this, alive = std::weak_ptr<bool>(alive_)](const boost::system::error_code& ec) {
    if (ec || alive.expired()) return;
    timer_armed_ = false;
    on_timer();
  });
}

void CommandInterface::on_timer() {
  if (drain_hook_) drain_hook_();  // events whose interrupt is still pending
  poll_slots(/*from_timer*/ true);
  if (in_flight() || fenced()) arm_timer();
}

// One round of the synchronous path: EQ 0 drained, busy slots polled.
// Spins briefly, then sleeps in 20 us steps: a command takes tens of us.
Result<CommandResult> CommandInterface::exec(uint16_t opcode, std::span<const std::byte> in,
                                             size_t out_len, SlotClass cls) {
  if (dead_) return *dead_;
  OPENIB_TRY(check_sizes(opcode, in.size(), out_len));
  std::optional<Result<CommandResult>> out;
  const bool was_sync = std::exchange(sync_, true);
  const uint64_t id = next_pending_id_;
  submit(opcode, in, out_len, [&out](Result<CommandResult> r) { out = std::move(r); }, cls);
  // A command that started times out by itself; one still queued behind
  // fenced slots after a whole timeout gives up here.
  const auto deadline = Clock::now() + std::chrono::milliseconds(opts_.timeout_ms);
  for (unsigned rounds = 0; !out; ++rounds) {
    if (drain_hook_) drain_hook_();
    if (!out) poll_slots(false);
    if (out) break;
    if (Clock::now() >= deadline) {
      for (std::deque<Pending>* q : {&health_queue_, &queue_}) {
        for (auto it = q->begin(); it != q->end(); ++it) {
          if (it->id != id) continue;
          CommandCompleter d = std::move(it->done);
          q->erase(it);
          d(err(ETIMEDOUT, "{}: command {:#06x} found no free slot within {} ms", dev_.name(), opcode,
                opts_.timeout_ms));
          break;
        }
      }
      if (out) break;
    }
    if (rounds < 64) std::this_thread::yield();
    else std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
  sync_ = was_sync;
  return std::move(*out);
}

bool CommandInterface::drain(int timeout_ms) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  const bool was_sync = std::exchange(sync_, true);
  flush_doorbell();
  for (unsigned rounds = 0; in_flight() || !queue_.empty() || !health_queue_.empty(); ++rounds) {
    if (Clock::now() >= deadline) break;
    if (drain_hook_) drain_hook_();
    poll_slots(false);
    if (rounds < 64) std::this_thread::yield();
    else std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
  sync_ = was_sync;
  return !in_flight() && queue_.empty() && health_queue_.empty();
}

Result<std::array<std::byte, kEntrySize>> CommandInterface::exec_raw(std::span<const std::byte> raw,
                                                                     int timeout_ms) {
  if (raw.size() != kEntrySize) return err(EINVAL, "raw command entry of {} bytes", raw.size());
  const int slot = free_slot(SlotClass::kNormal);
  if (slot < 0) return err(EBUSY, "{}: no free command slot for a raw entry", dev_.name());
  Slot& s = slots_[uint32_t(slot)];
  std::memcpy(entry(uint32_t(slot)), raw.data(), kEntrySize);
  // Fenced while the device may own it: no other command takes the slot.
  s.state = State::kFenced;
  s.token = 0;
  std::atomic_thread_fence(std::memory_order_release);
  if (auto r = dev_.write32(VFIO_PCI_BAR0_REGION_INDEX, kCmdDoorbell, 1u << slot); !r) {
    s.state = State::kFree;
    return r.take_error();
  }
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  while (entry_flags(uint32_t(slot)) & kOwnerBit) {
    if (Clock::now() >= deadline) {
      OPENIB_TRY(check_health());
      ++stats_.timeouts;
      return err(ETIMEDOUT, "{}: raw entry in slot {} not completed within {} ms; slot fenced", dev_.name(),
                 slot, timeout_ms);
    }
    if (drain_hook_) drain_hook_();  // keep EQ 0 from overrunning
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  s.state = State::kFree;
  std::array<std::byte, kEntrySize> out;
  std::memcpy(out.data(), entry(uint32_t(slot)), kEntrySize);
  ++stats_.executed;
  return out;
}

}  // namespace openib::hca
