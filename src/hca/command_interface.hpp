// The command interface of docs/simhca.md §5, driver side: a queue of
// 128-byte entries in a DmaBuffer, per-slot input/output mailboxes, the
// doorbell register, and asynchronous completion.
//
// A command is submitted and completes later, through a Completer called
// exactly once (completer.hpp):
//  - Up to 2^log_size slots (32) in flight at once, each with its own
//    mailboxes (allocated at creation). The last slot is reserved for health checks (NOP), so a
//    health probe never waits behind work, as mlx5 keeps a slot for page
//    requests. Commands beyond the free slots wait in FIFO order.
//  - Completion comes from the CMD_COMPLETION event on EQ 0, matched by its
//    token (§5.4, §9.4). A fallback timer (poll_ms) also reads OWNER of the
//    busy slots (a completion found that way without its event is counted
//    in missed_events), reads STATUS every health_poll_ms and enforces
//    timeouts.
//  - A command that is not completed within timeout_ms fails with ETIMEDOUT.
//    Its slot stays FENCED: the device owns the entry and may still write
//    it and its mailboxes, so neither is reused until OWNER is seen clear
//    (then the slot is reclaimed and the late completion counted).
//  - A device that is gone (STATUS reads all ones, or a register access
//    fails with ENODEV) fails every command in flight and every queued one
//    with ENODEV, and every later submission at once. A command queue that
//    was disabled under us (reset) fails them with EIO.
//
// Threading: everything runs on the control-plane thread. submit() may be
// called from any handler running on the io_context; completers run from
// handlers of that io_context (the EQ interrupt, the fallback timer, a
// posted error), never from inside submit().
//
// exec() is the synchronous path, for code that runs before the event loop
// or without one (the bring-up ladder, the teardown ladder after the loop
// stopped, in-process tests). It never runs the io_context: it polls OWNER
// and calls the EQ drain hook itself. It must not be called from a handler
// running on the io_context: it would stall the loop for a whole command.
#pragma once

#include <array>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "common/result.hpp"
#include "dma/dma_pool.hpp"
#include "hca/completer.hpp"
#include "hca/prm.hpp"
#include "vfio/device.hpp"

namespace openib::hca {

struct CommandOptions {
  uint32_t log_size = 5;         // §3 CMDQ_SIZE: 32 entries, one page
  int timeout_ms = 5000;         // per command, from the moment it is rung
  int health_poll_ms = 100;      // §5.4: STATUS read interval while commands are in flight
  int poll_ms = 20;              // fallback timer: OWNER of busy slots, timeouts
  size_t mailbox_size = 16384;   // §6.1 max_mailbox of simhca
};

struct CommandResult {
  uint8_t status = 0;
  uint32_t syndrome = 0;
  std::vector<std::byte> output;
  bool ok() const { return status == prm::kOk; }
};

using CommandCompleter = Completer<Result<CommandResult>>;

struct CommandStats {
  uint64_t executed = 0;
  uint64_t failed = 0;          // completed with a status other than OK
  uint64_t events = 0;          // CMD_COMPLETION events seen
  uint64_t stray_events = 0;    // events for no command in flight
  uint64_t missed_events = 0;   // completions found by OWNER only, in event mode
  uint64_t timeouts = 0;        // commands failed with ETIMEDOUT (slot fenced)
  uint64_t late_completions = 0;  // fenced slots later seen complete, reclaimed
  uint64_t queued = 0;          // submissions that waited for a free slot
  uint64_t max_in_flight = 0;   // high-water mark of busy slots
  uint64_t doorbells = 0;       // CMD_DOORBELL writes (several slots may share one)
};

enum class SlotClass : uint8_t {
  kNormal,  // any slot but the reserved one
  kHealth,  // the reserved slot only (NOP health checks)
};

class CommandInterface {
 public:
  // §5.1 bring-up step 2: allocates the queue page, programs
  // CMDQ_ADDR/SIZE, enables the queue and checks STATUS.
  static Result<std::unique_ptr<CommandInterface>> create(vfio::Device& dev, dma::DmaPool& pool,
                                                          CommandOptions opts = {});
  // Commands still in flight or queued complete with ECANCELED.
  ~CommandInterface();

  // Event mode (after EQ 0 exists): completions by CMD_COMPLETION event,
  // the fallback timer and posted completions on `io`. nullptr returns to
  // polling (teardown).
  void use_events(boost::asio::io_context* io);
  // The fallback timer's period from its next arming (Hca::reopen_async:
  // short while no EQ exists, so completions are found by OWNER soon).
  void set_poll_ms(int ms) { opts_.poll_ms = ms; }
  // Drains EQ 0 (the driver's EQ handler without the interrupt): called by
  // the synchronous path and the fallback timer, so an event whose
  // interrupt is still pending is not counted as missed.
  void set_drain_hook(std::function<void()> hook) { drain_hook_ = std::move(hook); }
  // Called by the EQ handler for each CMD_COMPLETION event (§9.4).
  void on_completion_event(uint32_t token);

  // Submits a command: input of any length up to 32 + mailbox_size, output
  // of out_len bytes. `done` is called once, later: with the entry's status,
  // syndrome and output, or with a transport error (ENODEV, EIO,
  // ETIMEDOUT, EMSGSIZE, ECANCELED). Never calls `done` before returning.
  void submit(uint16_t opcode, std::span<const std::byte> in, size_t out_len, CommandCompleter done,
              SlotClass cls = SlotClass::kNormal);

  // Synchronous path (see the file comment: never from a handler).
  Result<CommandResult> exec(uint16_t opcode, std::span<const std::byte> in, size_t out_len,
                             SlotClass cls = SlotClass::kNormal);
  // Completes everything in flight and queued, by polling, within
  // timeout_ms (for a shutdown after the loop stopped: continuations run
  // here and may submit more). False if commands remain.
  bool drain(int timeout_ms);

  // Fails every command in flight and queued with `e` (teardown). Slots the
  // device may still be executing stay fenced.
  void cancel_all(const Error& e);
  // The device is gone (ibd's recovery, docs/operations.md §5): every
  // command in flight and queued fails with `e` now, and every later
  // submission at once; no slot is fenced (nothing will complete).
  void fence(const Error& e) { fail_all(e); }

  // Writes a raw 128-byte entry (OWNER as given) into a free slot, rings it
  // and waits for OWNER to clear (ETIMEDOUT if it stays set; the slot is
  // then fenced). Returns the entry as the device left it. An entry written
  // without OWNER returns at once, unchanged: the device drops it and
  // counts CMDS_DROPPED (§5.3). Synchronous; for tests of garbage commands.
  Result<std::array<std::byte, prm::kEntrySize>> exec_raw(std::span<const std::byte> entry,
                                                          int timeout_ms);

  // §5.1 teardown: CMDQ_CTRL = 0.
  Result<void> disable();

  // Test seam: the next n commands started are written and handed over
  // (OWNER set) but their doorbell is never rung, so the device never
  // executes them: a command lost by the device, for tests of timeouts,
  // fencing and the reserved slot.
  void test_withhold_doorbell(uint32_t n) { withhold_ = n; }

  const CommandStats& stats() const { return stats_; }
  size_t mailbox_size() const { return opts_.mailbox_size; }  // input beyond 32 inline bytes
  uint32_t num_slots() const { return 1u << opts_.log_size; }
  uint32_t in_flight() const;
  size_t queued() const { return queue_.size() + health_queue_.size(); }
  // n normal commands submitted now would all start at once, in increasing
  // slots (nothing queued, n slots free): the device runs them in order.
  bool can_start_together(uint32_t n) const;
  // Slots fenced by a timeout and not yet seen complete.
  uint32_t fenced() const;
  // Slot 0's mailboxes (allocated at creation), for tests of raw entries.
  uint64_t mailbox_iova(bool output) const;

 private:
  using Clock = std::chrono::steady_clock;
  enum class State : uint8_t { kFree, kBusy, kFenced };
  struct Slot {
    State state = State::kFree;
    bool owner_seen_clear = false;  // OWNER clear, event not yet seen, since clear_since
    std::chrono::steady_clock::time_point clear_since;
    uint16_t opcode = 0;
    uint32_t token = 0;
    size_t out_len = 0;
    Clock::time_point deadline;
    CommandCompleter done;
    dma::DmaBuffer in_mbox, out_mbox;  // allocated at creation
  };
  struct Pending {
    uint64_t id = 0;  // for exec() to find its own entry in the queue
    uint16_t opcode = 0;
    std::vector<std::byte> in;
    size_t out_len = 0;
    SlotClass cls = SlotClass::kNormal;
    CommandCompleter done;
  };

  CommandInterface(vfio::Device& dev, dma::DmaPool& pool, CommandOptions opts)
      : dev_(dev), pool_(pool), opts_(opts) {}
  std::byte* entry(uint32_t slot) const;
  uint8_t entry_flags(uint32_t slot) const;
  Result<void> check_sizes(uint16_t opcode, size_t in_len, size_t out_len) const;
  int free_slot(SlotClass cls) const;
  // Writes the entry and marks the slot busy; the doorbell is rung by
  // flush_doorbell (several slots in one write when submitted together).
  Result<void> start(uint32_t slot, Pending& p);
  void start_queued();
  void ring_later(uint32_t slot);
  void flush_doorbell();
  // The slot's entry is complete (OWNER clear): result out, slot freed,
  // queued work started, then the completer called.
  void complete(uint32_t slot);
  void fail_slot(uint32_t slot, Error e, bool fence);
  void fail_all(const Error& e);
  // OWNER of every busy slot, timeouts, STATUS; `from_timer` counts an
  // OWNER-only completion as a missed event once it stayed so for a tick.
  void poll_slots(bool from_timer);
  Result<void> check_health();
  void arm_timer();
  void on_timer();
  // Posts `done(e)` to the loop (or calls it when there is none).
  void fail_later(CommandCompleter done, Error e);

  vfio::Device& dev_;
  dma::DmaPool& pool_;
  CommandOptions opts_;
  dma::DmaBuffer ring_;  // the 2^log_size entries (§5.2)
  std::vector<Slot> slots_;
  std::deque<Pending> queue_;         // normal commands waiting for a slot, FIFO
  std::deque<Pending> health_queue_;  // health checks waiting for the reserved slot
  bool sync_ = false;                 // inside exec()/drain(): ring and fail at once
  boost::asio::io_context* io_ = nullptr;
  std::unique_ptr<boost::asio::steady_timer> timer_;
  bool timer_armed_ = false;
  Clock::time_point next_health_;
  std::function<void()> drain_hook_;
  uint32_t bell_bits_ = 0;
  uint32_t withhold_ = 0;
  bool bell_posted_ = false;
  uint32_t next_token_ = 1;
  uint64_t next_pending_id_ = 1;
  bool enabled_ = false;
  std::optional<Error> dead_;  // set once the device is gone: every submit fails with it
  CommandStats stats_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);  // for posted handlers
};

}  // namespace openib::hca
