// simhca: event queues (docs/simhca.md §9), MSI-X signalling (§10), the
// UAR doorbells (§4: EQ_DOORBELL, CQ_ARM; SQ_DOORBELL is in datapath.cpp),
// the device's half of the doorbell scanner (§12.5: UAR pages watched, the
// words a page holds taken as doorbells) and the device fatal state (§11.4).
#include "sim/simhca/hca.hpp"

namespace openib::simhca {

// §9.4 routing: CQ events go to the CQ's EQ; every other type to the
// lowest-numbered EQ whose mask takes it.
void Hca::raise_event(const PendingEvent& ev, std::optional<uint32_t> eqn) {
  if (!eqn) {
    tables_.eqs.for_each([&](uint32_t n, Eq& eq) {
      if (!eqn && ev.type < 64 && (eq.cfg.event_mask >> ev.type) & 1) eqn = n;
    });
  }
  Eq* eq = eqn ? tables_.eqs.get(*eqn) : nullptr;
  if (!eq) {
    ++stats_.events_dropped;
    return;
  }
  write_eqe(*eqn, *eq, ev);
}

// §9.1 entry, §9.2 ownership phase, §9.3 overrun and arming.
void Hca::write_eqe(uint32_t eqn, Eq& eq, const PendingEvent& ev) {
  const uint32_t size = 1u << eq.cfg.log_size;
  if (eq.producer - eq.consumer >= size) {
    ++eq.overruns;
    ++stats_.events_dropped;
    return;
  }
  std::array<std::byte, kEqeSize> e{};
  put8(e, 0x00, ev.type);
  put8(e, 0x01, ev.subtype);
  std::copy(ev.data.begin(), ev.data.end(), e.begin() + 0x04);
  put8(e, 0x1f, ((eq.producer >> eq.cfg.log_size) & 1) ^ 1);
  const uint64_t at = eq.cfg.ring_iova + uint64_t{eq.producer & (size - 1)} * kEqeSize;
  if (!host_.dma_write(at, e)) {  // §11.2: the ring was unmapped under us
    ++eq.write_faults;
    ++stats_.events_dropped;
    log_->warn("simhca: EQ {} ring at {:#x} not writable; event {:#x} dropped", eqn, at, ev.type);
    return;
  }
  ++eq.producer;
  ++stats_.events_written;
  if (eq.armed) {
    eq.armed = false;
    if (host_.signal_msix(eq.cfg.vector)) ++stats_.irqs_signalled;
  }
}

// §4 / §9.3 EQ_DOORBELL: bits 23:0 EQN, bit 31 ARM, 63:32 consumer counter.
bool Hca::eq_doorbell(uint32_t uar, uint64_t v) {
  const uint32_t eqn = v & 0xffffff;
  const bool arm = v & (1ull << 31);
  const auto ci = static_cast<uint32_t>(v >> 32);
  Eq* eq = tables_.eqs.get(eqn);
  // A consumer counter ahead of the producer is refused (§9.3).
  if (!eq || eq->cfg.uar != uar || eq->producer - ci > (1u << eq->cfg.log_size)) {
    ++stats_.bad_access;
    return false;
  }
  eq->consumer = ci;
  if (!arm) return true;
  if (eq->producer != eq->consumer) {  // events pending: signal at once, stay disarmed
    if (host_.signal_msix(eq->cfg.vector)) ++stats_.irqs_signalled;
  } else {
    eq->armed = true;
  }
  return true;
}

// §4 / §7.3 CQ_ARM: 23:0 CQN, 25:24 command, 29:28 sequence, 63:32 consumer.
bool Hca::cq_arm(uint32_t uar, uint64_t v) {
  const uint32_t cqn = v & 0xffffff;
  const auto cmd = static_cast<uint8_t>((v >> 24) & 3);
  Cq* cq = tables_.cqs.get(cqn);
  if (!cq || cq->cfg.uar != uar || cmd == 0 || cmd == 3) {
    ++stats_.bad_access;
    return false;
  }
  cq->consumer = static_cast<uint32_t>(v >> 32);
  cq->arm_sn = static_cast<uint8_t>((v >> 28) & 3);
  cq->arm = cmd;
  if (cq->producer != cq->consumer) {  // unpolled CQEs: notify now (§7.3)
    cq->arm = 0;
    PendingEvent ev;
    ev.type = kEvCqCompletion;
    put32(ev.data, 0, cqn);
    raise_event(ev, cq->cfg.eqn);
  }
  return true;
}

bool Hca::uar_doorbell(uint32_t uar, size_t word, uint64_t v) {
  switch (word) {
    case kWordCqArm: return cq_arm(uar, v);
    case kWordEqDoorbell: return eq_doorbell(uar, v);
    default: return sq_doorbell(uar, v);
  }
}

// §4: a register write (VFIO_USER_REGION_WRITE) takes effect at once; the
// value is also what the scanner will find in the page, so it is taken.
void Hca::uar_write64(uint32_t uar, uint64_t off, uint64_t v) {
  Uar* u = initialized_ ? tables_.uars.get(uar) : nullptr;
  if (!u) {  // §4: only allocated UAR pages
    ++stats_.bad_access;
    return;
  }
  for (size_t i = 0; i < kUarDoorbellOffsets.size(); ++i) {
    if (kUarDoorbellOffsets[i] != off) continue;
    u->taken[i] = v;
    uar_doorbell(uar, i, v);
    return;
  }
  ++stats_.bad_access;
}

// §12.5: the doorbell words of a page the scanner noticed. A word that
// differs from the one last taken is a doorbell: CQ_ARM and EQ_DOORBELL
// act as a register write would; SQ_DOORBELL is checked and then every QP
// of the UAR re-reads its SQ counter from its doorbell record.
void Hca::uar_scan(uint32_t uar) {
  Uar* u = initialized_ ? tables_.uars.get(uar) : nullptr;
  const std::optional<UarWords> words = host_.uar_words(uar);
  if (!u || !u->doorbell_users || !words) return;  // freed since it was noticed
  bool sq = false;
  for (size_t i = 0; i < words->size(); ++i) {
    const uint64_t v = (*words)[i];
    if (v == u->taken[i]) continue;
    u->taken[i] = v;
    ++stats_.mmap_doorbells;
    sq |= i == kWordSqDoorbell;
    const bool ok = i == kWordSqDoorbell ? sq_doorbell_target(uar, v) != nullptr : uar_doorbell(uar, i, v);
    if (!ok) {
      ++stats_.mmap_doorbells_bad;
      log_->debug("simhca: UAR {} doorbell word {:#x} = {:#x} ignored", uar, kUarDoorbellOffsets[i], v);
    }
  }
  if (sq) sq_rescan(uar);
}

// §12.5: the page is watched while an EQ, CQ or QP uses the UAR. When it
// joins, what the page holds names no object yet and is taken as is.
void Hca::uar_ref(uint32_t uar, int delta) {
  Uar* u = tables_.uars.get(uar);
  if (!u) return;
  u->users += static_cast<uint32_t>(delta);
  const uint32_t before = u->doorbell_users;
  u->doorbell_users += static_cast<uint32_t>(delta);
  if ((before == 0) == (u->doorbell_users == 0)) return;
  // UAR 0 is the driver's and never handed to a client (§4): its doorbells
  // are register writes only, so a stray store into its page through a
  // mapping of BAR2 cannot move EQ 0 or the driver's queues.
  if (uar == 0) return;
  if (before == 0)
    if (auto w = host_.uar_words(uar)) u->taken = *w;
  host_.watch_uar(uar, u->doorbell_users != 0);
}

void Hca::uar_link_qp(uint32_t qpn, Qp& qp) {
  Uar* u = tables_.uars.get(qp.cfg.uar);
  qp.uar_prev = kNoQp;
  qp.uar_next = u->first_qp;
  if (Qp* next = tables_.qps.get(u->first_qp)) next->uar_prev = qpn;
  u->first_qp = qpn;
}

void Hca::uar_unlink_qp(uint32_t qpn, Qp& qp) {
  Uar* u = tables_.uars.get(qp.cfg.uar);
  if (Qp* prev = tables_.qps.get(qp.uar_prev)) prev->uar_next = qp.uar_next;
  else if (u->first_qp == qpn) u->first_qp = qp.uar_next;
  if (Qp* next = tables_.qps.get(qp.uar_next)) next->uar_prev = qp.uar_prev;
  qp.uar_prev = qp.uar_next = kNoQp;
}

// Data-path events: written now, or after the completion of the command
// that raised them (§9.4).
void Hca::emit_event(uint8_t type, uint32_t number, std::optional<uint32_t> eqn, uint8_t byte4) {
  PendingEvent ev;
  ev.type = type;
  ev.eqn = eqn;
  put32(ev.data, 0, number);
  put8(ev.data, 4, byte4);
  if (in_command_) after_completion_.push_back(ev);
  else raise_event(ev, eqn);
}

// §11.4
void Hca::enter_fatal(uint32_t syndrome) {
  if (fatal_) return;
  log_->error("simhca: device fatal, syndrome {:#x}", syndrome);
  fatal_ = true;
  health_syndrome_ = syndrome;
  status_ |= kStatusFatal;
  PendingEvent ev;
  ev.type = kEvDeviceFatal;
  put32(ev.data, 0, syndrome);
  raise_event(ev);
}

}  // namespace openib::simhca
