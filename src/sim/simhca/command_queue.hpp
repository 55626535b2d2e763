// The command unit's queue (docs/simhca.md §5: the command interface): the
// queue registers of §3 (CMDQ_ADDR, CMDQ_SIZE, CMDQ_CTRL, CMD_DOORBELL and
// the queue's STATUS bits), latched doorbell bits, entries read and
// checked (§5.2), the completion written back with the ownership bit
// (§5.4) followed by the CMD_COMPLETION event and the events the command
// raised (§9.4). What a command does is the executor's (the §6 commands,
// commands.cpp).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>

#include "common/log.hpp"
#include "sim/simhca/codec.hpp"
#include "sim/simhca/event_unit.hpp"
#include "sim/simhca/host_port.hpp"

namespace openib::simhca {

// A §6 command's result: the §5.5 status and syndrome.
struct Outcome {
  uint8_t status = kOk;
  uint32_t syndrome = 0;
};

// Runs one §6 command: `in` is the gathered input; `out` receives the
// output layout on success.
class CommandExecutor {
 public:
  virtual Outcome execute(uint16_t opcode, ByteView in, Bytes& out) = 0;

 protected:
  ~CommandExecutor() = default;
};

// The queue's counters (reported in HcaStats and the §3 registers by these names).
struct CommandQueueStats {
  uint64_t cmds_completed = 0;
  uint64_t cmds_dropped = 0;  // §3 CMDS_DROPPED
  uint64_t cmds_failed = 0;   // completed with a status other than OK
};

class CommandQueue {
 public:
  using Clock = std::chrono::steady_clock;

  CommandQueue(HostPort& host, EventUnit& events, CommandExecutor& exec, uint32_t max_mailbox,
               std::chrono::milliseconds cmd_delay, std::shared_ptr<spdlog::logger> log)
      : host_(host), events_(events), exec_(exec), max_mailbox_(max_mailbox), cmd_delay_(cmd_delay),
        log_(std::move(log)) {}

  // §3 registers.
  uint64_t addr() const { return cmdq_addr_; }
  uint32_t log_size() const { return cmdq_log_size_; }
  bool enabled() const { return cmdq_status_ & kStatusCmdqEnabled; }
  // STATUS bits CMDQ_ENABLED, CMDQ_ERROR, CMDQ_FAULT.
  uint32_t status_bits() const { return cmdq_status_; }
  // CMDQ_ADDR_LO/HI, CMDQ_SIZE: false if refused (frozen while enabled).
  bool write_queue_reg(uint64_t off, uint32_t v);
  void enable(bool on);  // CMDQ_CTRL.ENABLE
  void doorbell(uint32_t v);  // CMD_DOORBELL (§5.3)

  // §5.3: commands run from here, one at a time, each --cmd-delay-ms
  // after it was taken. due(): when run_due() has work (nullopt: none).
  std::optional<Clock::time_point> due() const;
  void run_due(Clock::time_point now);

  void reset();
  const CommandQueueStats& stats() const { return stats_; }

 private:
  void process_slot(uint32_t slot);
  Outcome gather_input(const Entry& e, Bytes& in);
  Outcome check_output(const Entry& e);
  bool write_completion(uint64_t entry_iova, const Entry& e, Outcome o, const Bytes& out);

  HostPort& host_;
  EventUnit& events_;
  CommandExecutor& exec_;
  uint32_t max_mailbox_;
  std::chrono::milliseconds cmd_delay_;
  std::shared_ptr<spdlog::logger> log_;

  uint64_t cmdq_addr_ = 0;
  uint32_t cmdq_log_size_ = 0;
  uint32_t cmdq_status_ = 0;
  // §5.3 latched doorbell bits and the command in progress
  uint32_t pending_ = 0;
  std::optional<uint32_t> current_;
  Clock::time_point current_due_{};
  CommandQueueStats stats_;
};

}  // namespace openib::simhca
