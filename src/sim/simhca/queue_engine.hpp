// The queue engine (docs/simhca.md §12.1 - §12.6): send WQEs taken on SQ
// doorbells (§12.1, §12.5), receive WQEs from the RQ or SRQ through their
// doorbell records (§12.2, §12.3), CQEs with the ownership phase, arming
// and overrun (§12.4, §7.3), memory keys and DMA through them (§12.6,
// IBA 10.6), the QP error state and flushing (§12.4, IBA 10.8.3), and the
// data path's timers (the transport units' ACK, RNR and pacing timers run
// from its tick). It is the QueueOps the transport units see.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "common/log.hpp"
#include "sim/simhca/codec.hpp"
#include "sim/simhca/event_unit.hpp"
#include "sim/simhca/host_port.hpp"
#include "sim/simhca/resource_tables.hpp"
#include "sim/simhca/transport_ops.hpp"

namespace openib::simhca {

class RcRequester;
class RcResponder;

// The queue engine's counters (reported in DataStats and, the last two,
// HcaStats by these names).
struct QueueStats {
  uint64_t sq_doorbells = 0, cqes_written = 0, cqes_dropped = 0, cq_overruns = 0, wqes_executed = 0;
  uint64_t messages_received = 0;
  uint64_t bad_access = 0;      // §12.5: SQ_DOORBELL values refused
  uint64_t sq_records_bad = 0;  // §12.5: SQ counters in doorbell records refused
};

class QueueEngine final : public QueueOps {
 public:
  // The requester and responder are the transport's units: their timers
  // and queued packets run from tick().
  QueueEngine(HostPort& host, ResourceTables& tables, EventUnit& events, const Caps& caps, WireOps& wire,
              RcRequester& requester, RcResponder& responder, std::shared_ptr<spdlog::logger> log)
      : host_(host),
        tables_(tables),
        events_(events),
        caps_(caps),
        wire_(wire),
        requester_(requester),
        responder_(responder),
        log_(std::move(log)) {}

  // The time of the current entry point (the data path's timers).
  void set_now(DpClock::time_point t) { now_ = t; }

  // QueueOps
  DpClock::time_point now() const override { return now_; }
  bool fetch_send(uint32_t qpn, Qp& qp) override;
  int fetch_recv(uint32_t qpn, Qp& qp) override;
  void complete_front(uint32_t qpn, Qp& qp, uint8_t status) override;
  void complete_recv(uint32_t qpn, Qp& qp, Cqe c) override;
  void req_fail(uint32_t qpn, Qp& qp, uint8_t status) override;
  void qp_to_error(uint32_t qpn, Qp& qp, uint8_t state) override;
  void qp_event(uint8_t type, uint32_t qpn) override { events_.emit(type, qpn); }
  KeyFault resolve(uint32_t key, uint32_t pdn, uint64_t va, uint64_t len, uint32_t need,
                   std::vector<Extent>& out) const override;
  bool gather(const std::vector<Extent>& ext, uint64_t off, std::span<std::byte> out) override;
  bool scatter(const std::vector<Extent>& ext, uint64_t off, std::span<const std::byte> in) override;
  const Ah* ah(uint32_t ahn) const override { return tables_.ahs.get(ahn); }

  // §8.3: a MODIFY_QP's effects on the data path (PSNs, flush on ERR,
  // clear on RESET); then track_live() with the QP (null: destroyed).
  void on_qp_transition(uint32_t qpn, Qp& qp, uint8_t from, const ModifyQp& m);
  void track_live(uint32_t qpn, const Qp* qp);

  // §4 / §12.5 SQ_DOORBELL as a register write; false if refused (counted
  // in bad_access). sq_doorbell_target() checks a value only.
  bool sq_doorbell(uint32_t uar, uint64_t v);
  Qp* sq_doorbell_target(uint32_t uar, uint64_t v);
  // §12.5: the SQ_DOORBELL word of `uar`'s page changed.
  void sq_rescan(uint32_t uar);

  // Doorbells rung and timers expired (run_due); when that next has work.
  void tick();
  std::optional<DpClock::time_point> due() const;

  const QueueStats& stats() const { return stats_; }
  void reset_stats() { stats_ = {}; }

 private:
  bool post_cqe(uint32_t cqn, const Cqe& c);
  void finish_send(uint32_t qpn, Qp& qp, const SendOp& op, uint8_t status);
  void flush_posted(uint32_t qpn, Qp& qp);
  void enter_error(uint32_t qpn, Qp& qp, uint8_t was, uint8_t state);
  void sq_from_record(uint32_t qpn, Qp& qp);

  HostPort& host_;
  ResourceTables& tables_;
  EventUnit& events_;
  const Caps& caps_;
  WireOps& wire_;
  RcRequester& requester_;
  RcResponder& responder_;
  std::shared_ptr<spdlog::logger> log_;
  DpClock::time_point now_{};
  QueueStats stats_;
};

}  // namespace openib::simhca
