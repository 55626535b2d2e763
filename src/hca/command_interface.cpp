// Driver side of docs/simhca.md §5 (command interface).
#include "hca/command_interface.hpp"

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

#include "common/log.hpp"

namespace openib::hca {

using namespace prm;
using Clock = std::chrono::steady_clock;

Result<std::unique_ptr<CommandInterface>> CommandInterface::create(vfio::Device& dev,
                                                                   dma::DmaPool& pool,
                                                                   CommandOptions opts) {
  if (opts.log_size > 5) return err(EINVAL, "{}: command queue log size {} > 5", dev.name(), opts.log_size);
  std::unique_ptr<CommandInterface> ci(new CommandInterface(dev, opts));
  // §5.1: entries in one 4 KiB-aligned page; mailboxes 8-byte aligned.
  OPENIB_TRY_ASSIGN(ci->queue_, pool.alloc(4096, 4096));
  OPENIB_TRY_ASSIGN(ci->in_mbox_, pool.alloc(opts.mailbox_size, 64));
  OPENIB_TRY_ASSIGN(ci->out_mbox_, pool.alloc(opts.mailbox_size, 64));
  const uint64_t a = ci->queue_.iova();
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
  return ci;
}

CommandInterface::~CommandInterface() {
  if (enabled_ && dev_.alive()) (void)disable();
}

Result<void> CommandInterface::disable() {
  enabled_ = false;
  return dev_.write32(VFIO_PCI_BAR0_REGION_INDEX, kCmdqCtrl, 0);
}

std::byte* CommandInterface::entry(uint32_t slot) const {
  return static_cast<std::byte*>(queue_.data()) + slot * kEntrySize;
}

// The device writes the entry from its own mapping of the same memfd, so
// OWNER is read with acquire ordering (§5.4: status and output are written
// before OWNER is cleared).
uint8_t CommandInterface::entry_flags(uint32_t slot) const {
  auto* p = reinterpret_cast<uint8_t*>(entry(slot) + kEntFlags);
  return std::atomic_ref<uint8_t>(*p).load(std::memory_order_acquire);
}

Result<void> CommandInterface::ring(uint32_t slot) {
  std::atomic_thread_fence(std::memory_order_release);  // entry before doorbell
  return dev_.write32(VFIO_PCI_BAR0_REGION_INDEX, kCmdDoorbell, 1u << slot);
}

void CommandInterface::on_completion_event(uint32_t token) {
  ++stats_.events;
  if (token != waiting_token_) {  // e.g. CREATE_EQ of EQ 0, completed while polling
    ++stats_.stray_events;
    return;
  }
  completed_tokens_.insert(token);
}

// §5.4: a device that vanished fails the read (ENODEV); a queue that was
// disabled under us (a reset) will complete nothing more. A fatal device
// still completes commands, with INTERNAL_ERROR (§11.4).
Result<void> CommandInterface::check_health() {
  OPENIB_TRY_ASSIGN(uint32_t status, dev_.read32(VFIO_PCI_BAR0_REGION_INDEX, kStatus));
  if (status == 0xffffffffu) return err(ENODEV, "{}: STATUS reads all ones: device gone", dev_.name());
  if (!(status & kStatusCmdqEnabled))  // reset or disabled under us: nothing will complete
    return err(EIO, "{}: command queue no longer enabled (STATUS {:#x})", dev_.name(), status);
  return ok();
}

Result<void> CommandInterface::wait(uint32_t slot, uint32_t token, int timeout_ms, bool need_event) {
  const auto start = Clock::now();
  const auto deadline = start + std::chrono::milliseconds(timeout_ms);
  auto next_health = start + std::chrono::milliseconds(opts_.health_poll_ms);
  unsigned rounds = 0;
  for (;;) {
    const bool owner_clear = !(entry_flags(slot) & kOwner);
    if (owner_clear && (!need_event || completed_tokens_.count(token))) break;
    auto now = Clock::now();
    if (now >= deadline) {
      if (owner_clear) {  // completed, but its event never came (EQ overrun?)
        ++stats_.missed_events;
        log::get("hca")->warn("{}: command token {} completed without its event", dev_.name(), token);
        break;
      }
      OPENIB_TRY(check_health());
      return err(ETIMEDOUT, "{}: command in slot {} not completed within {} ms", dev_.name(), slot,
                 timeout_ms);
    }
    if (now >= next_health) {
      OPENIB_TRY(check_health());
      next_health = now + std::chrono::milliseconds(opts_.health_poll_ms);
    }
    const auto slice = std::min<Clock::duration>(std::chrono::milliseconds(10), deadline - now);
    if (io_) {  // run the EQ handler even for polled waits, so the EQ never overruns
      if (io_->stopped()) io_->restart();
      if (io_->run_one_for(slice) == 0 && io_->stopped()) std::this_thread::sleep_for(slice);
    } else if (poll_hook_) {
      poll_hook_();
      if (++rounds < 64) std::this_thread::yield();
      else std::this_thread::sleep_for(std::min<Clock::duration>(std::chrono::microseconds(20), slice));
    } else {
      std::this_thread::sleep_for(std::min<Clock::duration>(std::chrono::microseconds(200), slice));
    }
  }
  completed_tokens_.erase(token);
  return ok();
}

Result<CommandResult> CommandInterface::exec(uint16_t opcode, std::span<const std::byte> in,
                                             size_t out_len) {
  if (!enabled_) return err(EINVAL, "{}: command interface disabled", dev_.name());
  if (in.size() > kInline + in_mbox_.size() || out_len > kInline + out_mbox_.size())
    return err(EMSGSIZE, "{}: command {:#06x} with {} input / {} output bytes exceeds the mailbox",
               dev_.name(), opcode, in.size(), out_len);
  const uint32_t slot = next_slot_;
  next_slot_ = (next_slot_ + 1) % (1u << opts_.log_size);
  const uint32_t token = next_token_++;
  // §5.2 entry layout.
  std::span<std::byte> e(entry(slot), kEntrySize);
  std::memset(e.data(), 0, e.size());
  put16(e, kEntOpcode, opcode);
  put32(e, kEntToken, token);
  put32(e, kEntInLen, in.size());
  put32(e, kEntOutLen, out_len);
  if (!in.empty()) std::memcpy(e.data() + kEntInlineIn, in.data(), std::min(in.size(), kInline));
  if (in.size() > kInline) {
    std::memcpy(in_mbox_.data(), in.data() + kInline, in.size() - kInline);
    put64(e, kEntInMbox, in_mbox_.iova());
  }
  if (out_len > kInline) put64(e, kEntOutMbox, out_mbox_.iova());
  std::atomic_thread_fence(std::memory_order_release);
  std::atomic_ref<uint8_t>(*reinterpret_cast<uint8_t*>(e.data() + kEntFlags))
      .store(kOwner, std::memory_order_release);
  waiting_token_ = token;
  OPENIB_TRY(ring(slot));
  auto w = wait(slot, token, opts_.timeout_ms, io_ != nullptr);
  waiting_token_ = 0;
  OPENIB_TRY(w);
  CommandResult r;
  r.status = get8(e, kEntStatus);
  r.syndrome = get32(e, kEntSyndrome);
  r.output.resize(out_len);
  if (out_len) std::memcpy(r.output.data(), e.data() + kEntInlineOut, std::min(out_len, kInline));
  if (out_len > kInline)
    std::memcpy(r.output.data() + kInline, out_mbox_.data(), out_len - kInline);
  ++stats_.executed;
  if (!r.ok()) ++stats_.failed;
  return r;
}

Result<std::array<std::byte, kEntrySize>> CommandInterface::exec_raw(std::span<const std::byte> raw,
                                                                     int timeout_ms) {
  if (raw.size() != kEntrySize) return err(EINVAL, "raw command entry of {} bytes", raw.size());
  const uint32_t slot = next_slot_;
  next_slot_ = (next_slot_ + 1) % (1u << opts_.log_size);
  std::memcpy(entry(slot), raw.data(), kEntrySize);
  OPENIB_TRY(ring(slot));
  OPENIB_TRY(wait(slot, 0, timeout_ms, false));
  std::array<std::byte, kEntrySize> out;
  std::memcpy(out.data(), entry(slot), kEntrySize);
  ++stats_.executed;
  return out;
}

}  // namespace openib::hca
