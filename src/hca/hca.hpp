// simhca's driver (docs/simhca.md), one implementation of the device seam
// (device.hpp): the bring-up ladder and its reverse teardown (§5.1), EQ 0
// on MSI-X vector 0 (§9, §10), §9.4's events decoded into device-neutral
// ones, and thin verbs-level calls over the command interface (§6). Works
// on any vfio::Device whose function is a simhca (1234:1b1e, interface
// revision 1); the driver table (driver_table.hpp) chooses it by PCI ID.
//
// Single-threaded, like the rest of ibd's control plane: every call runs on
// the thread that runs `io`.
//
// Two ways to issue a command (command_interface.hpp):
//  - the *_async calls submit it and return at once; the completer runs
//    later from a handler of `io` (EQ 0's interrupt, the fallback timer).
//    These are the only command calls a handler running on `io` may make.
//  - the synchronous calls (command(), nop(), create_qp(), ...) wait by
//    polling OWNER and draining EQ 0 themselves; they never run `io` (no
//    nested event loop). For code that runs before the loop starts or after
//    it stopped (bring-up, teardown, MadPort::open at start-up) and for
//    in-process tests; a handler must not call them (the loop would stall).
// The data-path calls (post_*, poll_cq, arm_cq) issue no command.
#pragma once

#include <boost/asio/io_context.hpp>
#include <deque>
#include <functional>
#include <memory>
#include <optional>

#include "common/result.hpp"
#include "dma/dma_pool.hpp"
#include "hca/command_interface.hpp"
#include "hca/device.hpp"
#include "hca/event_queue.hpp"
#include "hca/verbs.hpp"
#include "hca/work_queue.hpp"
#include "vfio/device.hpp"
#include "vfio/interrupts.hpp"

namespace openib::hca {

struct HcaOptions {
  CommandOptions cmd;
  uint8_t eq0_log_size = 7;  // 128 events
  dma::PoolOptions pool;
  // Events kept for events()/wait_event(); older ones are dropped.
  size_t max_recorded_events = 1024;
};

class Hca final : public Device {
 public:

  // The bring-up ladder (§5.1): identity and interface revision, DMA pool,
  // command queue, INIT_HCA, QUERY_DEVICE_CAP, MSI-X vector 0, EQ 0, event
  // mode. A failing step undoes the ones before it.
  static Result<std::unique_ptr<Hca>> open(vfio::Device& dev, boost::asio::io_context& io,
                                           HcaOptions opts = {});
  // Runs close(true) if close() was not called.
  ~Hca() override;
  Hca(const Hca&) = delete;
  Hca& operator=(const Hca&) = delete;

  // The teardown ladder, in reverse: DESTROY_EQ of EQ 0 (polled), MSI-X
  // off, TEARDOWN_HCA, command queue off, memory freed. With force false,
  // objects still alive make TEARDOWN_HCA refuse; the device is then torn
  // down by force anyway and EBUSY returned. Every step is attempted; on a
  // vanished device the local resources are still freed. Idempotent.
  Result<void> close(bool force = false) override;
  // Fences the command interface (every command in flight fails with
  // ENODEV at once), then close(true): for a device that is gone.
  Result<void> close_dead() override;
  void fence(const Error& why) override;
  // The ladder climbed again on the same vfio::Device object, after
  // close()/close_dead() and after the caller replaced its transport (ibd's
  // device recovery). The event handler stays set. On failure the HCA is
  // left closed and reopen() may be tried again.
  Result<void> reopen();
  // reopen() without waiting (ibd's device recovery, on the loop): rungs 1
  // and 2 as calls (register accesses, DMA_MAPs), then INIT_HCA,
  // QUERY_DEVICE_CAP and CREATE_EQ each submitted from the completion of
  // the one before (found by the command interface's fallback timer, as
  // EQ 0 does not exist yet). `done` runs from a handler of `io`. On
  // failure the HCA is left as far as it came: close it (close_dead())
  // from a later handler, not from inside `done`.
  void reopen_async(Done<void> done) override;
  bool is_open() const override { return cmd_ != nullptr; }

  const std::string& name() const override { return dev_.name(); }
  const DeviceInfo& info() const override { return info_; }
  bool alive() const override { return dev_.alive(); }
  const DeviceCaps& caps() const override { return caps_; }
  uint32_t fw_rev() const { return info_.fw_rev; }
  vfio::Device& device() { return dev_; }
  dma::DmaPool& pool() override { return *pool_; }
  CommandInterface& commands() { return *cmd_; }
  uint32_t eq0() const { return eq0_ ? eq0_->eqn() : 0; }
  uint64_t interrupts_seen() const override { return irqs_ ? irqs_->total(0) : 0; }
  // §3.1: the device's object counts, with one BAR0 read. Over vfio-user
  // that read is a round trip to the device: for INFO and tests, never a
  // data path.
  Result<DeviceObjects> device_objects() override;

  // Asynchronous events (§9.4) other than command completions: recorded as
  // the device wrote them, and passed to the handler, decoded, if one is set.
  void set_event_handler(EventHandler h) override { on_event_ = std::move(h); }
  const std::deque<EventEntry>& events() const { return events_; }
  // Polls EQ 0 (without running io) until an event of `type` has been
  // recorded, or timeout_ms. For tests and tools outside the loop.
  bool wait_event(uint8_t type, int timeout_ms);
  // Completes every command in flight or queued by polling (continuations
  // run here and may submit more), within timeout_ms. For shutdown after
  // the loop has stopped. False if some remain.
  bool drain(int timeout_ms) override;

  // The status and syndrome of the last command (§5.5), for callers that
  // need more than the errno of a failed call.
  uint8_t last_status() const { return last_status_; }
  uint32_t last_syndrome() const { return last_syndrome_; }

  // Any command; a status other than OK is an Error whose code maps the
  // status to an errno (BAD_RESOURCE -> ENOENT, RESOURCE_BUSY -> EBUSY,
  // NO_RESOURCES -> ENOSPC, BAD_ADDRESS -> EFAULT, NOT_SUPPORTED and
  // BAD_OPCODE -> EOPNOTSUPP, INTERNAL_ERROR -> EIO, the rest -> EINVAL).
  Result<Bytes> command(uint16_t opcode, std::span<const std::byte> in, size_t out_len);

  // ---- asynchronous commands (safe from handlers) ---------------------------
  // Any command; `done` gets the output, or the status mapped as command().
  void command_async(uint16_t opcode, std::span<const std::byte> in, size_t out_len, Done<Bytes> done,
                     SlotClass cls = SlotClass::kNormal);
  // NOP on the reserved slot: a health check that never waits behind work.
  void nop_async(Done<void> done) override;
  void query_port_async(uint8_t port, Done<PortAttr> done) override;
  void set_port_async(uint8_t port, const PortSetup& s, Done<void> done) override;
  // §6.12 QUERY_GID, SET_GID.
  void query_gid_async(uint8_t port, uint16_t index, Done<GidEntry> done) override;
  void modify_gid_async(uint8_t port, uint16_t index, const std::optional<GidEntry>& e, Done<void> done) override;
  void alloc_pd_async(Done<uint32_t> done) override;
  void alloc_uar_async(Done<uint32_t> done) override;
  // On EQ `eqn`; the seam's form puts the CQ on EQ 0.
  void create_cq_at_async(uint8_t log_size, uint64_t ring_iova, uint64_t dbr_iova, uint32_t uar,
                          uint32_t eqn, Done<uint32_t> done);
  void create_cq_at_async(uint8_t log_size, uint64_t ring_iova, uint64_t dbr_iova, uint32_t uar,
                          Done<uint32_t> done) override {
    create_cq_at_async(log_size, ring_iova, dbr_iova, uar, eq0(), std::move(done));
  }
  void create_srq_at_async(uint32_t pdn, uint8_t log_size, uint8_t log_stride, uint64_t ring_iova,
                           uint64_t dbr_iova, uint32_t limit, uint32_t uar, Done<uint32_t> done) override;
  void arm_srq_async(uint32_t srqn, uint32_t limit, Done<void> done) override;
  void create_qp_at_async(const QpCreateParams& p, Done<uint32_t> done) override;
  void modify_qp_async(uint32_t qpn, uint32_t attr_mask, const QpAttr& attr, Done<void> done) override;
  // Submitted together, in increasing slots with one doorbell, when that
  // many slots are free and nothing is queued (§5.1: slots rung run in
  // increasing order); else one after the other.
  void modify_qp_chain_async(uint32_t qpn, std::vector<QpChange> steps, Done<void> done) override;
  void query_qp_async(uint32_t qpn, Done<QpInfo> done) override;
  void create_mkey_async(const MkeyParams& p, Done<Mkey> done) override;
  void create_ah_async(uint32_t pdn, const AddressVector& av, Done<uint32_t> done) override;
  // §6.11 ATTACH_MCG / DETACH_MCG (IBA 11.3.1): UD QP `qpn` receives the
  // packets sent to the group (MGID, MLID) on its port, or stops receiving
  // them. Joining the group at the SA is the caller's business.
  void attach_mcast_async(uint32_t qpn, const std::array<uint8_t, 16>& mgid, uint16_t mlid,
                          Done<void> done) override;
  void detach_mcast_async(uint32_t qpn, const std::array<uint8_t, 16>& mgid, uint16_t mlid,
                          Done<void> done) override;
  // Any command with a u32 input and no output: DESTROY_*, DEALLOC_*.
  void destroy_async(uint16_t opcode, uint32_t number, Done<void> done);
  void destroy_async(ObjectKind kind, uint32_t number, Done<void> done) override;
  // create_cq()/create_qp() with the driver's own memory (ibd's QP0/QP1):
  // rings allocated here, then one command; freed again if it fails.
  void create_cq_async(uint8_t log_size, Done<Cq> done) override;
  void create_qp_async(const QpInit& init, Done<Qp> done) override;
  void create_srq_async(uint32_t pdn, uint8_t log_size, uint8_t log_stride, Done<Srq> done) override;

  // ---- verbs (IBA 11.2), one command each, synchronous -------------------
  Result<void> nop();
  Result<DeviceCaps> query_device();
  Result<PortAttr> query_port(uint8_t port);
  Result<void> set_port(uint8_t port, const PortSetup& s);

  Result<uint32_t> alloc_pd();
  Result<void> dealloc_pd(uint32_t pdn);
  Result<uint32_t> alloc_uar();
  Result<void> dealloc_uar(uint32_t uar);
  // §4: an fd of UAR `uar`'s page alone (mmap offset 0, one page), to hand
  // to the one client process that owns the UAR: asked of the device after
  // each ALLOC_UAR (the page is new each time). Only a device-specific
  // region of the UAR page's type whose fd is a memfd of exactly one page,
  // sealed against shrinking and growing, is handed out; anything else
  // (a kernel VFIO device, whose only fd is the whole device's) is
  // EOPNOTSUPP, and the client gets no mapping.
  Result<UniqueFd> uar_page_fd(uint32_t uar) override;

  Result<EqContext> query_eq(uint32_t eqn);

  // CQ on EQ 0 unless eqn is given.
  Result<Cq> create_cq(uint8_t log_size, std::optional<uint32_t> eqn = std::nullopt, uint32_t uar = 0);
  Result<void> destroy_cq(Cq& cq);
  Result<CqContext> query_cq(uint32_t cqn);
  // §7.3: CQ_ARM doorbell on the CQ's UAR.
  Result<void> arm_cq(Cq& cq, bool solicited_only, uint32_t consumer);
  Result<void> arm_cq(Cq& cq, bool solicited_only) override { return arm_cq(cq, solicited_only, cq.ci); }

  Result<Srq> create_srq(uint32_t pdn, uint8_t log_size, uint8_t log_stride, uint32_t limit = 0,
                         uint32_t uar = 0);
  Result<void> destroy_srq(Srq& srq);
  Result<SrqContext> query_srq(uint32_t srqn);
  Result<void> arm_srq(uint32_t srqn, uint32_t limit);

  Result<Qp> create_qp(const QpInit& init);
  // Lower-level variants over memory the caller owns (ibd: rings and
  // doorbell records in a client's memfd, already mapped for DMA). They
  // return the device's number; the caller keeps the memory mapped until
  // the matching destroy by number has succeeded.
  Result<uint32_t> create_cq_at(uint8_t log_size, uint64_t ring_iova, uint64_t dbr_iova,
                                uint32_t uar, std::optional<uint32_t> eqn = std::nullopt);
  Result<uint32_t> create_srq_at(uint32_t pdn, uint8_t log_size, uint8_t log_stride,
                                 uint64_t ring_iova, uint64_t dbr_iova, uint32_t limit,
                                 uint32_t uar);
  Result<uint32_t> create_qp_at(const QpCreateParams& p);
  Result<void> destroy_cq(uint32_t cqn);
  Result<void> destroy_srq(uint32_t srqn);
  Result<void> destroy_qp(uint32_t qpn);
  Result<void> modify_qp(uint32_t qpn, uint32_t attr_mask, const QpAttr& attr);
  Result<QpInfo> query_qp(uint32_t qpn);
  Result<void> destroy_qp(Qp& qp);

  // ---- data path (§12) -------------------------------------------------
  // The caller keeps at most 2^log_sq_size send WQEs outstanding (posted
  // and not yet completed; unsignaled ones complete with a later signaled
  // one) and likewise for receives.
  // §12.1, §12.3, §12.5: WQE into the ring, doorbell record, SQ_DOORBELL.
  Result<void> post_send(Qp& qp, const SendWr& wr);
  // The same without the doorbell (`ring` false): the WQE and the record
  // only; ring_sq() later rings once for every WQE posted so (§12.3: the
  // device takes WQEs up to the doorbell's counter). Over vfio-user a
  // doorbell is a message: a batch of sends pays it once.
  Result<void> post_send(Qp& qp, const SendWr& wr, bool ring) override;
  Result<void> ring_sq(Qp& qp) override;
  // §12.2, §12.3: WQE into the ring, then the producer counter in the record.
  Result<void> post_recv(Qp& qp, const RecvWr& wr) override;
  Result<void> post_srq_recv(Srq& srq, const RecvWr& wr) override;
  // §12.4: up to `max` CQEs, the consumer counter updated in the record.
  std::vector<WorkCompletion> poll_cq(Cq& cq, size_t max = SIZE_MAX) override;

  Result<Mkey> create_mkey(const MkeyParams& p);
  Result<void> destroy_mkey(uint32_t lkey);
  Result<MkeyContext> query_mkey(uint32_t lkey);

  // §6.11, as attach_mcast_async()/detach_mcast_async().
  Result<void> attach_mcast(uint32_t qpn, const std::array<uint8_t, 16>& mgid, uint16_t mlid);
  Result<void> detach_mcast(uint32_t qpn, const std::array<uint8_t, 16>& mgid, uint16_t mlid);

  Result<uint32_t> create_ah(uint32_t pdn, const AddressVector& av);
  Result<void> destroy_ah(uint32_t ahn);
  Result<std::pair<uint32_t, AddressVector>> query_ah(uint32_t ahn);

 private:
  // §6.7: inline, or by address through a translation table (then given
  // here until the command completes).
  struct MkeyCommand {
    Bytes in;
    dma::DmaBuffer table;
  };
  Result<MkeyCommand> mkey_command(const MkeyParams& p);
  void keep_if_fenced(const Result<Bytes>& r, dma::DmaBuffer table);
  Hca(vfio::Device& dev, boost::asio::io_context& io, HcaOptions opts)
      : dev_(dev), io_(io), opts_(opts) {}
  Result<void> bring_up();
  // bring_up()'s rungs, shared with reopen_async().
  Result<void> bring_up_queue();
  Result<std::unique_ptr<EventQueue>> bring_up_eq0_memory();
  static Bytes create_eq0_input(const EventQueue& eq);
  Result<void> bring_up_events(std::unique_ptr<EventQueue> eq, uint32_t eqn);
  void on_interrupt(uint32_t vector);
  // Consumes EQ 0's new entries; true if there were any.
  bool drain_eq0();
  Result<uint32_t> command_u32(uint16_t opcode, std::span<const std::byte> in);
  void destroy_like(uint16_t opcode, std::span<const std::byte> in, Done<void> done);
  // A command whose output is decoded by `decode` (Bytes -> Result<T>).
  template <class T, class F>
  void then_async(uint16_t opcode, std::span<const std::byte> in, size_t out_len, Done<T> done, F decode);

  // The rings and doorbell records of a CQ / QP (§6.5, §6.10), no command.
  Result<Cq> cq_memory(uint8_t log_size, uint32_t uar);
  Result<Qp> qp_memory(const QpInit& init, QpCreateParams& p);

  vfio::Device& dev_;
  boost::asio::io_context& io_;
  HcaOptions opts_;
  std::unique_ptr<dma::DmaPool> pool_;
  std::unique_ptr<CommandInterface> cmd_;
  std::vector<dma::DmaBuffer> fenced_tables_;  // §6.7 tables of timed-out CREATE_MKEYs
  std::unique_ptr<vfio::InterruptSet> irqs_;
  std::unique_ptr<EventQueue> eq0_;
  bool initialized_ = false;  // INIT_HCA done, TEARDOWN_HCA not yet
  DeviceCaps caps_;
  DeviceInfo info_;
  EventHandler on_event_;
  std::deque<EventEntry> events_;
  uint8_t last_status_ = 0;
  uint32_t last_syndrome_ = 0;
};

}  // namespace openib::hca
