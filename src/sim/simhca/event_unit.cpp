// The event unit (docs/simhca.md §9, §10; EQ_DOORBELL and CQ_ARM of §4, §7.3).
#include "sim/simhca/event_unit.hpp"

#include <algorithm>

#include "sim/simhca/registers.hpp"

namespace openib::simhca {

void EventUnit::raise(const PendingEvent& ev, std::optional<uint32_t> eqn) {
  if (!eqn) {
    t_.eqs.for_each([&](uint32_t n, Eq& eq) {
      if (!eqn && ev.type < 64 && (eq.cfg.event_mask >> ev.type) & 1) eqn = n;
    });
  }
  Eq* eq = eqn ? t_.eqs.get(*eqn) : nullptr;
  if (!eq) {
    ++stats_.events_dropped;
    return;
  }
  write_eqe(*eqn, *eq, ev);
}

void EventUnit::post(const PendingEvent& ev) {
  if (in_command_) after_completion_.push_back(ev);
  else raise(ev, ev.eqn);
}

void EventUnit::emit(uint8_t type, uint32_t number, std::optional<uint32_t> eqn, uint8_t byte4) {
  PendingEvent ev;
  ev.type = type;
  ev.eqn = eqn;
  put32(ev.data, 0, number);
  put8(ev.data, 4, byte4);
  post(ev);
}

void EventUnit::flush_command_events() {
  auto later = std::move(after_completion_);
  after_completion_.clear();
  for (const PendingEvent& p : later) raise(p, p.eqn);
}

// §10: a vector with nothing routed to it drops the interrupt.
void EventUnit::signal(uint32_t vector) {
  if (host_.signal_msix(vector)) ++stats_.irqs_signalled;
}

// §9.1 entry, §9.2 ownership phase, §9.3 overrun and arming.
void EventUnit::write_eqe(uint32_t eqn, Eq& eq, const PendingEvent& ev) {
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
    signal(eq.cfg.vector);
  }
}

// §4 / §9.3 EQ_DOORBELL: bits 23:0 EQN, bit 31 ARM, 63:32 consumer counter.
bool EventUnit::eq_doorbell(uint32_t uar, uint64_t v) {
  const uint32_t eqn = v & 0xffffff;
  const bool arm = v & (1ull << 31);
  const auto ci = static_cast<uint32_t>(v >> 32);
  Eq* eq = t_.eqs.get(eqn);
  // A consumer counter ahead of the producer is refused (§9.3).
  if (!eq || eq->cfg.uar != uar || eq->producer - ci > (1u << eq->cfg.log_size)) return false;
  eq->consumer = ci;
  if (!arm) return true;
  if (eq->producer != eq->consumer) signal(eq->cfg.vector);  // events pending: signal at once, stay disarmed
  else eq->armed = true;
  return true;
}

// §4 / §7.3 CQ_ARM: 23:0 CQN, 25:24 command, 29:28 sequence, 63:32 consumer.
// A sequence number already taken from the CQ's doorbell record (a rescan
// that ran between the record's store and the word's, §12.5.1) is that
// same arm, not a new one.
bool EventUnit::cq_arm(uint32_t uar, uint64_t v) {
  const uint32_t cqn = v & 0xffffff;
  const auto cmd = static_cast<uint8_t>((v >> 24) & 3);
  const auto sn = static_cast<uint8_t>((v >> 28) & 3);
  Cq* cq = t_.cqs.get(cqn);
  if (!cq || cq->cfg.uar != uar || cmd == 0 || cmd == 3) return false;
  if (cq->arm_sn_from_record && cq->arm_sn == sn) return true;
  arm_cq(cqn, *cq, cmd, sn, static_cast<uint32_t>(v >> 32));
  cq->arm_sn_from_record = false;
  return true;
}

// §12.5.1: CQ_ARM is one word per page, so of two arms stored back to back
// the word shows only the second. Each CQ of the UAR (Uar::first_cq: not
// every CQ of the device) whose record holds an arm (§12.3 offset 0x04:
// 25:24 command, 29:28 sequence number) with a sequence number other than
// the one last taken is armed from it, with the record's consumer counter.
void EventUnit::cq_arm_rescan(uint32_t uar) {
  const Uar* u = t_.uars.get(uar);
  for (uint32_t n = u ? u->first_cq : kNoQp; n != kNoQp;) {
    Cq* cq = t_.cqs.get(n);
    if (!cq) break;
    std::array<std::byte, 8> rec{};
    if (host_.dma_read(cq->cfg.dbr_iova, rec)) {
      const uint32_t w = get32(rec, 4);
      const auto cmd = static_cast<uint8_t>((w >> 24) & 3), sn = static_cast<uint8_t>((w >> 28) & 3);
      if ((cmd == 1 || cmd == 2) && sn != cq->arm_sn) {
        arm_cq(n, *cq, cmd, sn, get32(rec, 0));
        cq->arm_sn_from_record = true;
      }
    }
    n = cq->uar_next;
  }
}

// §7.3: armed; unpolled CQEs notify at once.
void EventUnit::arm_cq(uint32_t cqn, Cq& cq, uint8_t cmd, uint8_t sn, uint32_t consumer) {
  cq.consumer = consumer;
  cq.arm_sn = sn;
  cq.arm = cmd;
  if (cq.producer != cq.consumer) {
    cq.arm = 0;
    PendingEvent ev;
    ev.type = kEvCqCompletion;
    put32(ev.data, 0, cqn);
    raise(ev, cq.cfg.eqn);
  }
}

}  // namespace openib::simhca
