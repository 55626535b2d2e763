// simhca: the UAR doorbells routed to their units (§4: EQ_DOORBELL and
// CQ_ARM to the event unit, event_unit.cpp; SQ_DOORBELL to the queue
// engine, datapath.cpp), the device's half of the doorbell scanner (§12.5: UAR pages watched, the
// words a page holds taken as doorbells) and the device fatal state (§11.4).
#include "sim/simhca/hca.hpp"

namespace openib::simhca {

bool Hca::uar_doorbell(uint32_t uar, size_t word, uint64_t v) {
  switch (word) {
    case kWordCqArm:
    case kWordEqDoorbell:
      if (word == kWordCqArm ? events_.cq_arm(uar, v) : events_.eq_doorbell(uar, v)) return true;
      ++stats_.bad_access;
      return false;
    default: return queues_.sq_doorbell(uar, v);
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
  bool sq = false, arm = false;
  for (size_t i = 0; i < words->size(); ++i) {
    const uint64_t v = (*words)[i];
    if (v == u->taken[i]) continue;
    u->taken[i] = v;
    ++stats_.mmap_doorbells;
    sq |= i == kWordSqDoorbell;
    arm |= i == kWordCqArm;
    const bool ok = i == kWordSqDoorbell ? queues_.sq_doorbell_target(uar, v) != nullptr : uar_doorbell(uar, i, v);
    if (!ok) {
      ++stats_.mmap_doorbells_bad;
      log_->debug("simhca: UAR {} doorbell word {:#x} = {:#x} ignored", uar, kUarDoorbellOffsets[i], v);
    }
  }
  if (sq) queues_.sq_rescan(uar);
  if (arm) events_.cq_arm_rescan(uar);  // §12.5.1: the arms the word no longer shows
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

// §12.5.1: the CQs of a UAR, so that a CQ_ARM rescan reads their records
// only, not every CQ of the device.
void Hca::uar_link_cq(uint32_t cqn, Cq& cq) {
  Uar* u = tables_.uars.get(cq.cfg.uar);
  cq.uar_prev = kNoQp;
  cq.uar_next = u->first_cq;
  if (Cq* next = tables_.cqs.get(u->first_cq)) next->uar_prev = cqn;
  u->first_cq = cqn;
}

void Hca::uar_unlink_cq(uint32_t cqn, Cq& cq) {
  Uar* u = tables_.uars.get(cq.cfg.uar);
  if (Cq* prev = tables_.cqs.get(cq.uar_prev)) prev->uar_next = cq.uar_next;
  else if (u->first_cq == cqn) u->first_cq = cq.uar_next;
  if (Cq* next = tables_.cqs.get(cq.uar_next)) next->uar_prev = cq.uar_prev;
  cq.uar_prev = cq.uar_next = kNoQp;
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
  events_.raise(ev);
}

}  // namespace openib::simhca
