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
  cmdq_.reset();
  status_ = 0;
  health_syndrome_ = 0;
  msix_table_.fill(0);
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
  s.cmds_completed += cmdq_.stats().cmds_completed;
  s.cmds_dropped += cmdq_.stats().cmds_dropped;
  s.cmds_failed += cmdq_.stats().cmds_failed;
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
    host_.uar_free(n);  // §4, §11.5
  });
  tables_.reset(c);
  for (Port& pt : ports_) pt.raw_qps.clear();  // §16.5: no QP is left
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
    case reg::kCmdqAddrLo: return static_cast<uint32_t>(cmdq_.addr());
    case reg::kCmdqAddrHi: return static_cast<uint32_t>(cmdq_.addr() >> 32);
    case reg::kCmdqSize: return cmdq_.log_size();
    case reg::kCmdqCtrl: return cmdq_.enabled() ? 1 : 0;
    case reg::kStatus: return status_ | cmdq_.status_bits();
    case reg::kHealthSyndrome: return health_syndrome_;
    case reg::kCmdsCompleted: return static_cast<uint32_t>(cmdq_.stats().cmds_completed);
    case reg::kCmdsDropped: return static_cast<uint32_t>(cmdq_.stats().cmds_dropped);
    case reg::kBadAccess: return static_cast<uint32_t>(stats().bad_access);
    case reg::kCapSummary:  // bits 15:8: log2 of the number of UAR pages
      return uint32_t{opts_.caps.num_ports} | (kLogNumUars << 8) | (kNumMsix << 16) |
             (kLogMaxCmdq << 24);
    case reg::kScannerSleeps: return static_cast<uint32_t>(host_.scanner_counts().sleeps);
    case reg::kScannerWakeups: return static_cast<uint32_t>(host_.scanner_counts().wakeups);
    case reg::kMmapDoorbells: return static_cast<uint32_t>(stats_.mmap_doorbells);
    case reg::kMmapDoorbellsBad: return static_cast<uint32_t>(stats_.mmap_doorbells_bad);
    case reg::kDmaFaults: return static_cast<uint32_t>(host_.dma_counts().faults);
    case reg::kDmaBusErrors: return static_cast<uint32_t>(host_.dma_counts().bus_errors);
    // §3.1: the tables count at alloc and free and are emptied by reset().
    case reg::kObjPds: return tables_.pds.count();
    case reg::kObjMkeys: return tables_.mkeys.count();
    case reg::kObjCqs: return tables_.cqs.count();
    case reg::kObjQps: return tables_.qps.count();
    case reg::kObjSrqs: return tables_.srqs.count();
    case reg::kObjAhs: return tables_.ahs.count();
    case reg::kObjEqs: return tables_.eqs.count();
    case reg::kObjUars: return tables_.uars.count();
    case reg::kObjDmaMaps: return static_cast<uint32_t>(host_.dma_counts().maps);
    default: return 0;  // write-only and reserved registers read 0
  }
}

void Hca::bar0_write32(uint64_t off, uint32_t v) {
  if (off >= kMsixTable && off < kMsixTable + kMsixTableSize) {
    msix_table_[(off - kMsixTable) / 4] = v;  // §2: storage only
    return;
  }
  switch (off) {
    case reg::kCmdqAddrLo:
    case reg::kCmdqAddrHi:
    case reg::kCmdqSize:
      if (!cmdq_.write_queue_reg(off, v)) ++stats_.bad_access;  // frozen while enabled (§3)
      return;
    case reg::kCmdqCtrl: cmdq_.enable(v & 1); return;
    case reg::kCmdDoorbell: cmdq_.doorbell(v); return;
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

// ---- §5 command queue -----------------------------------------------------

std::optional<Hca::Clock::time_point> Hca::next_due() const {
  std::optional<Clock::time_point> due = queues_.due();
  if (!loopback_.empty()) return Clock::time_point::min();
  if (const auto c = cmdq_.due(); c && (!due || *c < *due)) due = c;  // §5.3
  for (const Port& pt : ports_)  // §14.5 M_Key leases
    if (pt.sma.lease_end && (!due || *pt.sma.lease_end < *due)) due = pt.sma.lease_end;
  return due;
}

void Hca::run_due(Clock::time_point now) {
  now_ = now;
  queues_.set_now(now);
  if (!loopback_.empty()) deliver_loopback();  // §12.7 packets to the device's own port
  trap_tick();                                 // §14.6 traps not yet repressed
  if (initialized_) queues_.tick();  // §12: doorbells rung, timers expired
  cmdq_.run_due(now);
}

}  // namespace openib::simhca
