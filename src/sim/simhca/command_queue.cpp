// The command unit's queue (docs/simhca.md §3 queue registers, §5).
#include "sim/simhca/command_queue.hpp"

#include <algorithm>

#include "sim/simhca/registers.hpp"

namespace openib::simhca {

void CommandQueue::reset() {
  cmdq_addr_ = 0;
  cmdq_log_size_ = 0;
  cmdq_status_ = 0;
  pending_ = 0;
  current_.reset();
  stats_ = {};
}

bool CommandQueue::write_queue_reg(uint64_t off, uint32_t v) {
  if (enabled()) return false;  // §3: queue registers are frozen while enabled
  if (off == reg::kCmdqAddrLo) cmdq_addr_ = (cmdq_addr_ & ~0xffffffffull) | v;
  else if (off == reg::kCmdqAddrHi) cmdq_addr_ = (cmdq_addr_ & 0xffffffffull) | (uint64_t{v} << 32);
  else cmdq_log_size_ = v;
  return true;
}

// §5.3: a bit for a slot beyond the queue, or any bit while the queue is
// disabled, is dropped and counted.
void CommandQueue::doorbell(uint32_t v) {
  const uint32_t n = 1u << std::min(cmdq_log_size_, kLogMaxCmdq);
  const uint32_t valid = n >= 32 ? ~0u : (1u << n) - 1;
  const uint32_t dropped = enabled() ? (v & ~valid) : v;
  stats_.cmds_dropped += static_cast<uint64_t>(__builtin_popcount(dropped));
  if (enabled()) pending_ |= v & valid;
}

std::optional<CommandQueue::Clock::time_point> CommandQueue::due() const {
  if (pending_) return Clock::time_point::min();
  if (current_) return current_due_;
  return std::nullopt;
}

void CommandQueue::run_due(Clock::time_point now) {
  for (;;) {
    if (!current_) {
      if (!pending_ || !(cmdq_status_ & kStatusCmdqEnabled)) return;
      const uint32_t slot = static_cast<uint32_t>(__builtin_ctz(pending_));  // lowest slot first
      pending_ &= ~(1u << slot);
      current_ = slot;
      current_due_ = now + cmd_delay_;
    }
    if (current_due_ > now) return;
    const uint32_t slot = *current_;
    current_.reset();
    process_slot(slot);
  }
}

// §3 CMDQ_CTRL.ENABLE
void CommandQueue::enable(bool on) {
  if (!on) {
    cmdq_status_ &= ~(kStatusCmdqEnabled | kStatusCmdqFault);
    stats_.cmds_dropped += static_cast<uint64_t>(__builtin_popcount(pending_));
    pending_ = 0;
    current_.reset();
    return;
  }
  if (cmdq_status_ & kStatusCmdqEnabled) return;
  if (cmdq_addr_ == 0 || (cmdq_addr_ & 0xfff) || cmdq_log_size_ > kLogMaxCmdq) {
    cmdq_status_ |= kStatusCmdqError;
    log_->warn("simhca: command queue enable refused (addr {:#x}, log size {})", cmdq_addr_,
               cmdq_log_size_);
    return;
  }
  cmdq_status_ = (cmdq_status_ & ~kStatusCmdqError) | kStatusCmdqEnabled;
}

void CommandQueue::process_slot(uint32_t slot) {
  const uint64_t iova = cmdq_addr_ + uint64_t{slot} * kEntrySize;
  std::array<std::byte, kEntrySize> raw{};
  if (!host_.dma_read(iova, raw)) {  // §5.3: queue outside mapped memory
    if (!(cmdq_status_ & kStatusCmdqFault))
      log_->warn("simhca: command slot {} at {:#x} unreadable; CMDQ_FAULT", slot, iova);
    cmdq_status_ |= kStatusCmdqFault;
    ++stats_.cmds_dropped;
    return;
  }
  auto e = decode_entry(raw);
  if (!e || !e->owner) {  // §5.3: never execute an entry the driver did not hand over
    ++stats_.cmds_dropped;
    log_->debug("simhca: slot {} rung without OWNER; dropped", slot);
    return;
  }
  Bytes in, out;
  Outcome o = gather_input(*e, in);
  if (o.status == kOk) o = check_output(*e);
  if (o.status == kOk) o = exec_.execute(e->opcode, in, out);
  if (o.status != kOk) {
    ++stats_.cmds_failed;
    log_->debug("simhca: {} ({:#06x}) slot {} -> {} syndrome {:#x}", opcode_name(e->opcode),
                e->opcode, slot, status_name(o.status), o.syndrome);
    out.clear();
    events_.drop_command_events();  // §5.5: a failed command has no effect
  }
  if (!write_completion(iova, *e, o, out)) return;
  ++stats_.cmds_completed;
  // §5.4: the CMD_COMPLETION event, then the events the command raised (§9.4).
  PendingEvent ev;
  ev.type = kEvCmdCompletion;
  put32(ev.data, 0x00, e->token);
  put8(ev.data, 0x04, slot);
  put8(ev.data, 0x05, o.status);
  put32(ev.data, 0x08, o.syndrome);
  events_.raise(ev);
  events_.flush_command_events();
}

// §5.2: inline bytes then the input mailbox.
Outcome CommandQueue::gather_input(const Entry& e, Bytes& in) {
  const uint64_t max = kInlineSize + uint64_t{max_mailbox_};
  if (e.input_length > max) return {kBadInputLen, 1};
  in.assign(e.inline_input.begin(), e.inline_input.begin() + std::min<size_t>(e.input_length, kInlineSize));
  if (e.input_length <= kInlineSize) return {};
  if (e.input_mailbox == 0 || (e.input_mailbox & 7)) return {kBadAddress, 1};
  in.resize(e.input_length);
  auto rest = std::span<std::byte>(in).subspan(kInlineSize);
  if (!host_.dma_read(e.input_mailbox, rest)) return {kBadAddress, 2};
  return {};
}

// §5.2 length rules, checked before the command runs, and the output
// mailbox probed by writing zeros over it.
Outcome CommandQueue::check_output(const Entry& e) {
  auto need = output_size(e.opcode);
  if (!need) return {kBadOpcode, 0};
  const uint64_t max = kInlineSize + uint64_t{max_mailbox_};
  if (e.output_length < *need || e.output_length > max) return {kBadOutputLen, static_cast<uint32_t>(*need)};
  if (e.output_length <= kInlineSize) return {};
  if (e.output_mailbox == 0 || (e.output_mailbox & 7)) return {kBadAddress, 3};
  Bytes zeros(e.output_length - kInlineSize);
  if (!host_.dma_write(e.output_mailbox, zeros)) return {kBadAddress, 4};
  return {};
}

// §5.4: output (inline, then mailbox), then syndrome/status/OWNER in one write.
bool CommandQueue::write_completion(uint64_t iova, const Entry& e, Outcome o, const Bytes& out) {
  Bytes full(std::min<uint64_t>(e.output_length, kInlineSize + uint64_t{max_mailbox_}));
  std::copy_n(out.begin(), std::min(out.size(), full.size()), full.begin());
  const size_t inl = std::min(full.size(), kInlineSize);
  std::array<std::byte, kInlineSize> inline_out{};
  std::copy_n(full.begin(), inl, inline_out.begin());
  if (full.size() > kInlineSize && o.status == kOk) {
    auto rest = std::span<const std::byte>(full).subspan(kInlineSize);
    if (!host_.dma_write(e.output_mailbox, rest)) o = {kBadAddress, 5};
  }
  auto tail = encode_entry_tail(o.status, o.syndrome);
  if (!host_.dma_write(iova + kEntInlineOut, inline_out) ||
      !host_.dma_write(iova + kEntSyndrome, tail)) {
    cmdq_status_ |= kStatusCmdqFault;
    ++stats_.cmds_dropped;
    log_->warn("simhca: command entry at {:#x} not writable; CMDQ_FAULT", iova);
    return false;
  }
  return true;
}

}  // namespace openib::simhca
