// The simhca device core: initialization segment (docs/simhca.md §3), UAR
// doorbells (§4), the command queue (§5), the commands (§6) over the
// resource tables (§7), the QP state machine (§8), event queues and MSI-X
// (§9, §10), errors, health and reset (§11).
//
// It knows nothing of vfio-user: host memory and interrupts are reached
// through a HostPort, so tests and the fuzz target can run it against a
// fake bus. Single-threaded; every entry point runs on the caller's thread.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "common/log.hpp"
#include "common/result.hpp"
#include "sim/simhca/codec.hpp"
#include "sim/simhca/resources.hpp"

namespace openib::simhca {

// The device's side of the bus: DMA that refuses any byte outside the
// driver's mappings (§11.2), and MSI-X vectors (§10).
class HostPort {
 public:
  virtual ~HostPort() = default;
  virtual Result<void> dma_read(uint64_t iova, std::span<std::byte> out) = 0;
  virtual Result<void> dma_write(uint64_t iova, std::span<const std::byte> in) = 0;
  // False if nothing is routed to the vector (the interrupt is dropped).
  virtual bool signal_msix(uint32_t vector) = 0;
};

struct HcaOptions {
  Caps caps;
  std::chrono::milliseconds cmd_delay{0};  // §13 --cmd-delay-ms
};

struct HcaStats {
  uint64_t cmds_completed = 0;
  uint64_t cmds_dropped = 0;    // §3 CMDS_DROPPED
  uint64_t bad_access = 0;      // §3 BAD_ACCESS
  uint64_t cmds_failed = 0;     // completed with a status other than OK
  uint64_t events_written = 0;
  uint64_t events_dropped = 0;  // no EQ takes it, EQ full, or EQ ring unwritable
  uint64_t irqs_signalled = 0;
};

// A §6 command's result: the §5.5 status and syndrome.
struct Outcome {
  uint8_t status = kOk;
  uint32_t syndrome = 0;
};

class Hca {
 public:
  using Clock = std::chrono::steady_clock;

  Hca(HostPort& host, HcaOptions opts);

  // §3: BAR0, 4-byte aligned accesses (the caller handles other sizes by
  // calling count_bad_access()).
  uint32_t bar0_read32(uint64_t offset) const;
  void bar0_write32(uint64_t offset, uint32_t value);
  // §4: an 8-byte write to UAR page `uar` at `offset` in the page.
  void uar_write64(uint32_t uar, uint64_t offset, uint64_t value);
  void count_bad_access() { ++stats_.bad_access; }

  // §5.3: doorbell bits are latched; commands run from here. next_due()
  // says when run_due() has work (nullopt: none).
  std::optional<Clock::time_point> next_due() const;
  void run_due(Clock::time_point now);

  // §11.5 function reset.
  void reset();

  const HcaStats& stats() const { return stats_; }
  bool initialized() const { return initialized_; }

  // Executes one command directly (the fuzz target and the command queue
  // both come through here). `in` is the gathered input; `out` receives
  // the output layout on success.
  Outcome execute(uint16_t opcode, ByteView in, Bytes& out);

 private:
  struct PendingEvent {
    uint8_t type = 0, subtype = 0;
    std::array<std::byte, 24> data{};
  };

  // command_queue (hca.cpp)
  void process_slot(uint32_t slot);
  Outcome gather_input(const Entry& e, Bytes& in);
  Outcome check_output(const Entry& e);
  bool write_completion(uint64_t entry_iova, const Entry& e, Outcome o, const Bytes& out);
  void enable_cmdq(bool on);

  // events (events.cpp), §9
  void raise_event(const PendingEvent& ev, std::optional<uint32_t> eqn = std::nullopt);
  void write_eqe(uint32_t eqn, Eq& eq, const PendingEvent& ev);
  void eq_doorbell(uint32_t uar, uint64_t v);
  void cq_arm(uint32_t uar, uint64_t v);
  void enter_fatal(uint32_t syndrome);

  // commands (commands.cpp), §6
  Outcome cmd_query_device_cap(Bytes& out);
  Outcome cmd_init_hca();
  Outcome cmd_teardown_hca(ByteView in);
  Outcome cmd_query_port(ByteView in, Bytes& out);
  Outcome cmd_set_port(ByteView in);
  Outcome cmd_create_eq(ByteView in, Bytes& out);
  Outcome cmd_destroy_eq(ByteView in);
  Outcome cmd_query_eq(ByteView in, Bytes& out);
  Outcome cmd_create_cq(ByteView in, Bytes& out);
  Outcome cmd_destroy_cq(ByteView in);
  Outcome cmd_query_cq(ByteView in, Bytes& out);
  Outcome cmd_create_qp(ByteView in, Bytes& out);
  Outcome cmd_modify_qp(ByteView in);
  Outcome cmd_query_qp(ByteView in, Bytes& out);
  Outcome cmd_destroy_qp(ByteView in);
  Outcome cmd_create_srq(ByteView in, Bytes& out);
  Outcome cmd_destroy_srq(ByteView in);
  Outcome cmd_query_srq(ByteView in, Bytes& out);
  Outcome cmd_arm_srq(ByteView in);
  Outcome cmd_alloc_pd(Bytes& out);
  Outcome cmd_dealloc_pd(ByteView in);
  Outcome cmd_create_mkey(ByteView in, Bytes& out);
  Outcome cmd_destroy_mkey(ByteView in);
  Outcome cmd_query_mkey(ByteView in, Bytes& out);
  Outcome cmd_create_ah(ByteView in, Bytes& out);
  Outcome cmd_destroy_ah(ByteView in);
  Outcome cmd_query_ah(ByteView in, Bytes& out);
  Outcome cmd_alloc_uar(Bytes& out);
  Outcome cmd_dealloc_uar(ByteView in);
  Outcome zero_ring(uint64_t iova, uint64_t bytes, uint64_t align);
  Outcome check_av(const Av& av, bool connected) const;
  void reset_tables();
  uint32_t live_objects() const;

  HostPort& host_;
  HcaOptions opts_;
  std::shared_ptr<spdlog::logger> log_;

  // §3 registers
  uint64_t cmdq_addr_ = 0;
  uint32_t cmdq_log_size_ = 0;
  uint32_t status_ = 0;
  uint32_t health_syndrome_ = 0;
  std::array<uint32_t, kMsixTableSize / 4> msix_table_{};

  // §5.3 latched doorbell bits and the command in progress
  uint32_t pending_ = 0;
  std::optional<uint32_t> current_;
  Clock::time_point current_due_{};

  bool initialized_ = false;
  bool fatal_ = false;
  PortInfo port_;
  std::vector<PendingEvent> after_completion_;  // §9.4: raised after the completion

  Table<Pd> pds_;
  Table<Uar> uars_;
  Table<Eq> eqs_;
  Table<Cq> cqs_;
  Table<Srq> srqs_;
  Table<Mkey> mkeys_;
  std::vector<uint8_t> mkey_tags_;  // §6.7 per-index key tag
  Table<Ah> ahs_;
  Table<Qp> qps_;

  HcaStats stats_;
};

}  // namespace openib::simhca
