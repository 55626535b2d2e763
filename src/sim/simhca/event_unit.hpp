// The event unit (docs/simhca.md §9 event queues and events, §10 MSI-X,
// and the EQ_DOORBELL / CQ_ARM doorbells of §4, §7.3): routes events to
// EQs, writes EQEs with the ownership phase, arms and signals vectors, and
// holds a command's events until its completion is written (§9.4).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "common/log.hpp"
#include "sim/simhca/host_port.hpp"
#include "sim/simhca/resource_tables.hpp"

namespace openib::simhca {

struct PendingEvent {
  uint8_t type = 0, subtype = 0;
  std::array<std::byte, 24> data{};  // §9.1 bytes 0x04 .. 0x1b
  std::optional<uint32_t> eqn;       // CQ events: the CQ's EQ (§9.4)
};

// The event unit's counters (reported in HcaStats by these names).
struct EventStats {
  uint64_t events_written = 0;
  uint64_t events_dropped = 0;  // no EQ takes it, EQ full, or EQ ring unwritable
  uint64_t irqs_signalled = 0;
};

class EventUnit {
 public:
  EventUnit(HostPort& host, ResourceTables& tables, std::shared_ptr<spdlog::logger> log)
      : host_(host), t_(tables), log_(std::move(log)) {}

  // §9.4 routing: to `eqn`, or to the lowest-numbered EQ whose mask takes
  // the type; written now.
  void raise(const PendingEvent& ev, std::optional<uint32_t> eqn = std::nullopt);
  // Written now, or, while a command runs, after its completion (§9.4).
  void post(const PendingEvent& ev);
  // A data-path event about object `number` (post()).
  void emit(uint8_t type, uint32_t number, std::optional<uint32_t> eqn = std::nullopt, uint8_t byte4 = 0);

  // §5.4, §9.4: a command runs between these; its events wait.
  void begin_command() { in_command_ = true; }
  void end_command() { in_command_ = false; }
  // §5.5: a failed command has no effect: its events go.
  void drop_command_events() { after_completion_.clear(); }
  // After the completion (and its CMD_COMPLETION event): the command's events.
  void flush_command_events();

  // §4 / §9.3 EQ_DOORBELL and §4 / §7.3 CQ_ARM. false: refused (the
  // caller counts a bad access, §11.3).
  bool eq_doorbell(uint32_t uar, uint64_t v);
  bool cq_arm(uint32_t uar, uint64_t v);
  // §12.5.1: CQ_ARM of `uar` changed in its page: the arms in the doorbell
  // records of the UAR's CQs (§12.3 offset 0x04) not yet taken.
  void cq_arm_rescan(uint32_t uar);

  void reset() {
    after_completion_.clear();
    in_command_ = false;
    stats_ = {};
  }
  const EventStats& stats() const { return stats_; }

 private:
  void write_eqe(uint32_t eqn, Eq& eq, const PendingEvent& ev);
  void signal(uint32_t vector);
  void arm_cq(uint32_t cqn, Cq& cq, uint8_t cmd, uint8_t sn, uint32_t consumer);

  HostPort& host_;
  ResourceTables& t_;
  std::shared_ptr<spdlog::logger> log_;
  bool in_command_ = false;
  std::vector<PendingEvent> after_completion_;  // §9.4: raised after the completion
  EventStats stats_;
};

}  // namespace openib::simhca
