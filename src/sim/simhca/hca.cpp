// simhca: the initialization segment (docs/simhca.md §3), the command
// queue (§5) and reset (§11.5). Commands are in commands.cpp, UAR
// doorbells in uar_doorbells.cpp, events in event_unit.cpp.
#include "sim/simhca/hca.hpp"

#include <algorithm>

namespace openib::simhca {

Hca::Hca(HostPort& host, HcaOptions opts)
    : host_(host), opts_(opts), log_(log::get("simhca")) {
  init_agents();
  reset();
}

// §11.5: power-on state. DMA mappings and eventfd routes live in the
// vfio-user server and are not touched.
void Hca::reset() {
  cmdq_addr_ = 0;
  cmdq_log_size_ = 0;
  status_ = 0;
  health_syndrome_ = 0;
  msix_table_.fill(0);
  pending_ = 0;
  current_.reset();
  initialized_ = false;
  fatal_ = false;
  reset_ports();
  loopback_.clear();
  events_.reset();
  reset_tables();
  stats_ = HcaStats{};
  dstats_ = DataStats{};
  requester_.reset_stats();
  responder_.reset_stats();
  ud_.reset_stats();
  queues_.reset_stats();
}

HcaStats Hca::stats() const {
  HcaStats s = stats_;
  const EventStats& e = events_.stats();
  s.events_written += e.events_written;
  s.events_dropped += e.events_dropped;
  s.irqs_signalled += e.irqs_signalled;
  s.bad_access += queues_.stats().bad_access;
  s.sq_records_bad += queues_.stats().sq_records_bad;
  return s;
}

DataStats Hca::data_stats() const {
  DataStats d = dstats_;
  const RequesterStats& rq = requester_.stats();
  const ResponderStats& rs = responder_.stats();
  const UdStats& ud = ud_.stats();
  const QueueStats& q = queues_.stats();
  d.sq_doorbells += q.sq_doorbells;
  d.cqes_written += q.cqes_written;
  d.cqes_dropped += q.cqes_dropped;
  d.cq_overruns += q.cq_overruns;
  d.wqes_executed += q.wqes_executed;
  d.messages_received += q.messages_received;
  d.tx_dropped += rq.tx_dropped;
  d.retransmits += rq.retransmits;
  d.timeouts += rq.timeouts;
  d.rx_bad_state += rq.rx_bad_state;
  d.rx_duplicates += rq.rx_duplicates + rs.rx_duplicates;
  d.rx_bad_response += rq.rx_bad_response;
  d.rx_dropped_seq += rs.rx_dropped_seq;
  d.rx_no_wqe += rs.rx_no_wqe + ud.rx_no_wqe;
  d.acks_sent += rs.acks_sent;
  d.naks_sent += rs.naks_sent;
  d.rnr_naks_sent += rs.rnr_naks_sent;
  d.rx_malformed += ud.rx_malformed;
  d.rx_bad_qkey += ud.rx_bad_qkey;
  return d;
}

void Hca::reset_tables() {
  const Caps& c = opts_.caps;
  tables_.uars.for_each([&](uint32_t n, const Uar& u) {  // §12.5: no page stays watched
    if (u.doorbell_users) host_.watch_uar(n, false);
  });
  tables_.reset(c);
}

// ---- §3 initialization segment ------------------------------------------

uint32_t Hca::bar0_read32(uint64_t off) const {
  if (off >= kMsixTable && off < kMsixTable + kMsixTableSize)
    return msix_table_[(off - kMsixTable) / 4];
  switch (off) {
    case reg::kFwRev: return kFwRevValue;
    case reg::kFwRevSub: return 0;
    case reg::kInterfaceRev: return kInterfaceRevValue;
    case reg::kMagic: return kMagicValue;
    case reg::kCmdqAddrLo: return static_cast<uint32_t>(cmdq_addr_);
    case reg::kCmdqAddrHi: return static_cast<uint32_t>(cmdq_addr_ >> 32);
    case reg::kCmdqSize: return cmdq_log_size_;
    case reg::kCmdqCtrl: return (status_ & kStatusCmdqEnabled) ? 1 : 0;
    case reg::kStatus: return status_;
    case reg::kHealthSyndrome: return health_syndrome_;
    case reg::kCmdsCompleted: return static_cast<uint32_t>(stats_.cmds_completed);
    case reg::kCmdsDropped: return static_cast<uint32_t>(stats_.cmds_dropped);
    case reg::kBadAccess: return static_cast<uint32_t>(stats().bad_access);
    case reg::kCapSummary:  // bits 15:8: log2 of the number of UAR pages
      return uint32_t{opts_.caps.num_ports} | (kLogNumUars << 8) | (kNumMsix << 16) |
             (kLogMaxCmdq << 24);
    case reg::kScannerSleeps: return static_cast<uint32_t>(host_.scanner_counts().sleeps);
    case reg::kScannerWakeups: return static_cast<uint32_t>(host_.scanner_counts().wakeups);
    case reg::kMmapDoorbells: return static_cast<uint32_t>(stats_.mmap_doorbells);
    case reg::kMmapDoorbellsBad: return static_cast<uint32_t>(stats_.mmap_doorbells_bad);
    default: return 0;  // write-only and reserved registers read 0
  }
}

void Hca::bar0_write32(uint64_t off, uint32_t v) {
  if (off >= kMsixTable && off < kMsixTable + kMsixTableSize) {
    msix_table_[(off - kMsixTable) / 4] = v;  // §2: storage only
    return;
  }
  const bool enabled = status_ & kStatusCmdqEnabled;
  switch (off) {
    case reg::kCmdqAddrLo:
    case reg::kCmdqAddrHi:
    case reg::kCmdqSize:
      if (enabled) {  // §3: queue registers are frozen while enabled
        ++stats_.bad_access;
        return;
      }
      if (off == reg::kCmdqAddrLo) cmdq_addr_ = (cmdq_addr_ & ~0xffffffffull) | v;
      else if (off == reg::kCmdqAddrHi) cmdq_addr_ = (cmdq_addr_ & 0xffffffffull) | (uint64_t{v} << 32);
      else cmdq_log_size_ = v;
      return;
    case reg::kCmdqCtrl: enable_cmdq(v & 1); return;
    case reg::kCmdDoorbell: {
      const uint32_t n = 1u << std::min(cmdq_log_size_, kLogMaxCmdq);
      const uint32_t valid = n >= 32 ? ~0u : (1u << n) - 1;
      uint32_t dropped = enabled ? (v & ~valid) : v;
      stats_.cmds_dropped += static_cast<uint64_t>(__builtin_popcount(dropped));
      if (enabled) pending_ |= v & valid;
      return;
    }
    case reg::kReset:
      if (v == kResetValue) {
        log_->info("simhca: function reset by register");
        reset();
      } else {
        ++stats_.bad_access;
      }
      return;
    case reg::kSimFault:
      if (v == kSimFaultValue) enter_fatal(1);
      else ++stats_.bad_access;
      return;
    default: ++stats_.bad_access; return;  // read-only or reserved
  }
}

// §3 CMDQ_CTRL.ENABLE
void Hca::enable_cmdq(bool on) {
  if (!on) {
    status_ &= ~(kStatusCmdqEnabled | kStatusCmdqFault);
    stats_.cmds_dropped += static_cast<uint64_t>(__builtin_popcount(pending_));
    pending_ = 0;
    current_.reset();
    return;
  }
  if (status_ & kStatusCmdqEnabled) return;
  if (cmdq_addr_ == 0 || (cmdq_addr_ & 0xfff) || cmdq_log_size_ > kLogMaxCmdq) {
    status_ |= kStatusCmdqError;
    log_->warn("simhca: command queue enable refused (addr {:#x}, log size {})", cmdq_addr_,
               cmdq_log_size_);
    return;
  }
  status_ = (status_ & ~kStatusCmdqError) | kStatusCmdqEnabled;
}

// ---- §5 command queue -----------------------------------------------------

std::optional<Hca::Clock::time_point> Hca::next_due() const {
  std::optional<Clock::time_point> due = queues_.due();
  if (pending_ || !loopback_.empty()) return Clock::time_point::min();
  for (const Port& pt : ports_)  // §14.5 M_Key leases
    if (pt.sma.lease_end && (!due || *pt.sma.lease_end < *due)) due = pt.sma.lease_end;
  if (current_ && (!due || current_due_ < *due)) due = current_due_;
  return due;
}

void Hca::run_due(Clock::time_point now) {
  now_ = now;
  queues_.set_now(now);
  if (!loopback_.empty()) deliver_loopback();  // §12.7 packets to the device's own port
  trap_tick();                                 // §14.6 traps not yet repressed
  if (initialized_) queues_.tick();  // §12: doorbells rung, timers expired
  for (;;) {
    if (!current_) {
      if (!pending_ || !(status_ & kStatusCmdqEnabled)) return;
      const uint32_t slot = static_cast<uint32_t>(__builtin_ctz(pending_));  // lowest slot first
      pending_ &= ~(1u << slot);
      current_ = slot;
      current_due_ = now + opts_.cmd_delay;
    }
    if (current_due_ > now) return;
    const uint32_t slot = *current_;
    current_.reset();
    process_slot(slot);
  }
}

void Hca::process_slot(uint32_t slot) {
  const uint64_t iova = cmdq_addr_ + uint64_t{slot} * kEntrySize;
  std::array<std::byte, kEntrySize> raw{};
  if (!host_.dma_read(iova, raw)) {  // §5.3: queue outside mapped memory
    if (!(status_ & kStatusCmdqFault))
      log_->warn("simhca: command slot {} at {:#x} unreadable; CMDQ_FAULT", slot, iova);
    status_ |= kStatusCmdqFault;
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
  if (o.status == kOk) o = execute(e->opcode, in, out);
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
Outcome Hca::gather_input(const Entry& e, Bytes& in) {
  const uint64_t max = kInlineSize + uint64_t{opts_.caps.max_mailbox};
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
Outcome Hca::check_output(const Entry& e) {
  auto need = output_size(e.opcode);
  if (!need) return {kBadOpcode, 0};
  const uint64_t max = kInlineSize + uint64_t{opts_.caps.max_mailbox};
  if (e.output_length < *need || e.output_length > max) return {kBadOutputLen, static_cast<uint32_t>(*need)};
  if (e.output_length <= kInlineSize) return {};
  if (e.output_mailbox == 0 || (e.output_mailbox & 7)) return {kBadAddress, 3};
  Bytes zeros(e.output_length - kInlineSize);
  if (!host_.dma_write(e.output_mailbox, zeros)) return {kBadAddress, 4};
  return {};
}

// §5.4: output (inline, then mailbox), then syndrome/status/OWNER in one write.
bool Hca::write_completion(uint64_t iova, const Entry& e, Outcome o, const Bytes& out) {
  Bytes full(std::min<uint64_t>(e.output_length, kInlineSize + uint64_t{opts_.caps.max_mailbox}));
  std::copy_n(out.begin(), std::min(out.size(), full.size()), full.begin());
  const size_t inl = std::min(full.size(), kInlineSize);
  std::array<std::byte, kInlineSize> inline_out{};
  std::copy_n(full.begin(), inl, inline_out.begin());
  if (full.size() > kInlineSize && o.status == kOk) {
    auto rest = std::span<const std::byte>(full).subspan(kInlineSize);
    if (!host_.dma_write(e.output_mailbox, rest)) o = {kBadAddress, 5};
  }
  auto tail = encode_entry_tail(o.status, o.syndrome);
  if (!host_.dma_write(iova + kEntryInlineOut, inline_out) ||
      !host_.dma_write(iova + kEntryTail, tail)) {
    status_ |= kStatusCmdqFault;
    ++stats_.cmds_dropped;
    log_->warn("simhca: command entry at {:#x} not writable; CMDQ_FAULT", iova);
    return false;
  }
  return true;
}

}  // namespace openib::simhca
