// The command interface of docs/simhca.md §5, driver side: a queue of
// 128-byte entries in a DmaBuffer, input/output mailboxes, the doorbell
// register, and the wait for completion — by polling OWNER before EQ 0
// exists, by the CMD_COMPLETION event after (§5.4). A wait never hangs: it
// reads STATUS at least every health_poll_ms, so a vanished device gives
// ENODEV and a fatal one EIO, and it gives up after timeout_ms (ETIMEDOUT).
//
// One command at a time (the control plane is single-threaded). exec()
// runs the io_context while it waits in event mode, so it must not be
// called from inside a handler running on that io_context.
#pragma once

#include <array>
#include <boost/asio/io_context.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <span>

#include "common/result.hpp"
#include "dma/dma_pool.hpp"
#include "hca/prm.hpp"
#include "vfio/device.hpp"

namespace openib::hca {

struct CommandOptions {
  uint32_t log_size = 5;         // §3 CMDQ_SIZE: 32 entries, one page
  int timeout_ms = 5000;         // per command
  int health_poll_ms = 100;      // §5.4: STATUS read interval while waiting
  size_t mailbox_size = 16384;   // §6.1 max_mailbox of simhca
};

struct CommandResult {
  uint8_t status = 0;
  uint32_t syndrome = 0;
  std::vector<std::byte> output;
  bool ok() const { return status == prm::kOk; }
};

struct CommandStats {
  uint64_t executed = 0;
  uint64_t failed = 0;          // completed with a status other than OK
  uint64_t events = 0;          // CMD_COMPLETION events seen
  uint64_t stray_events = 0;    // events for no command in flight
  uint64_t missed_events = 0;   // completions found by OWNER only, in event mode
};

class CommandInterface {
 public:
  // §5.1 bring-up steps 2: allocates the queue page and mailboxes, programs
  // CMDQ_ADDR/SIZE, enables the queue and checks STATUS.
  static Result<std::unique_ptr<CommandInterface>> create(vfio::Device& dev, dma::DmaPool& pool,
                                                          CommandOptions opts = {});
  ~CommandInterface();

  // Event mode (after EQ 0 exists) with the io_context the EQ's interrupt
  // is read on; nullptr returns to polling.
  void use_events(boost::asio::io_context* io) { io_ = io; }
  // Polling without running any io_context (for a caller inside an io
  // handler, like ibd): the wait spins briefly, then sleeps in 20 us steps,
  // and calls `hook` on each round (the driver drains EQ 0 there, so the EQ
  // never overruns during a burst of commands).
  void set_poll_hook(std::function<void()> hook) { poll_hook_ = std::move(hook); }
  // Called by the EQ handler for each CMD_COMPLETION event (§9.4).
  void on_completion_event(uint32_t token);

  // Executes a command: input of any length up to 32 + mailbox_size,
  // output buffer of out_len bytes. Transport failures are errors;
  // the device's status is in the result.
  Result<CommandResult> exec(uint16_t opcode, std::span<const std::byte> in, size_t out_len);

  // Writes a raw 128-byte entry (OWNER as given) into the next slot, rings
  // it and waits for OWNER to clear (ETIMEDOUT if it stays set). Returns the
  // entry as the device left it. An entry written without OWNER returns at
  // once, unchanged: the device drops it and counts CMDS_DROPPED (§5.3).
  // For tests of garbage commands.
  Result<std::array<std::byte, prm::kEntrySize>> exec_raw(std::span<const std::byte> entry,
                                                          int timeout_ms);

  // §5.1 teardown: CMDQ_CTRL = 0.
  Result<void> disable();

  const CommandStats& stats() const { return stats_; }
  uint64_t mailbox_iova(bool output) const { return (output ? out_mbox_ : in_mbox_).iova(); }

 private:
  CommandInterface(vfio::Device& dev, CommandOptions opts) : dev_(dev), opts_(opts) {}
  std::byte* entry(uint32_t slot) const;
  uint8_t entry_flags(uint32_t slot) const;
  Result<void> ring(uint32_t slot);
  // Waits until the slot's OWNER is clear and (in event mode) its event
  // was seen; `need_event` false accepts OWNER alone.
  Result<void> wait(uint32_t slot, uint32_t token, int timeout_ms, bool need_event);
  Result<void> check_health();

  vfio::Device& dev_;
  CommandOptions opts_;
  dma::DmaBuffer queue_, in_mbox_, out_mbox_;
  boost::asio::io_context* io_ = nullptr;
  std::function<void()> poll_hook_;
  uint32_t next_slot_ = 0;
  uint32_t next_token_ = 1;
  std::set<uint32_t> completed_tokens_;
  uint32_t waiting_token_ = 0;
  bool enabled_ = false;
  CommandStats stats_;
};

}  // namespace openib::hca
