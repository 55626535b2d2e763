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
bool EventUnit::cq_arm(uint32_t uar, uint64_t v) {
  const uint32_t cqn = v & 0xffffff;
  const auto cmd = static_cast<uint8_t>((v >> 24) & 3);
  Cq* cq = t_.cqs.get(cqn);
  if (!cq || cq->cfg.uar != uar || cmd == 0 || cmd == 3) return false;
  cq->consumer = static_cast<uint32_t>(v >> 32);
  cq->arm_sn = static_cast<uint8_t>((v >> 28) & 3);
  cq->arm = cmd;
  if (cq->producer != cq->consumer) {  // unpolled CQEs: notify now (§7.3)
    cq->arm = 0;
    PendingEvent ev;
    ev.type = kEvCqCompletion;
    put32(ev.data, 0, cqn);
    raise(ev, cq->cfg.eqn);
  }
  return true;
}

}  // namespace openib::simhca
