// The device seam (docs/device-access.md "Device drivers"): what ibd and its
// services need of an HCA, whatever its model. Linux's ib_device_ops is the
// shape: the bring-up and teardown of the device, its ports, and one
// asynchronous form of each verb (IBA 11.2) whose completer runs from a
// handler of the io_context; device events decoded by the driver into the
// IBA 11.6.3 vocabulary; and the data path of the QPs the daemon owns
// itself (QP0/QP1, IPoIB's UD QP), as a kernel ULP posts through its
// device. A driver is chosen by PCI ID from the table in driver_table.hpp;
// simhca's (hca.hpp) is one.
//
// Single-threaded: every call runs on the thread that runs the io_context.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/fd.hpp"
#include "common/result.hpp"
#include "dma/dma_pool.hpp"
#include "hca/completer.hpp"
#include "hca/verbs.hpp"
#include "hca/work_queue.hpp"

namespace openib::hca {

// A device-neutral asynchronous event (IBA 11.6.3). Affiliated events name
// their CQ, QP or SRQ by the device's number; port events their port.
struct Event {
  enum class Kind : uint8_t {
    kCqCompletion,       // a CQ armed with arm_cq / a client's CQ_ARM has a completion
    kCqError,            // IBV_EVENT_CQ_ERR
    kQpFatal,            // IBV_EVENT_QP_FATAL
    kQpReqErr,           // IBV_EVENT_QP_REQ_ERR
    kQpAccessErr,        // IBV_EVENT_QP_ACCESS_ERR
    kQpLastWqeReached,   // IBV_EVENT_QP_LAST_WQE_REACHED
    kQpCommEst,          // IBV_EVENT_COMM_EST
    kSqDrained,          // IBV_EVENT_SQ_DRAINED
    kSrqLimit,           // IBV_EVENT_SRQ_LIMIT_REACHED
    kSrqError,           // IBV_EVENT_SRQ_ERR
    kPortState,          // PortState changed: old_state, new_state
    kLidChange,          // IBV_EVENT_LID_CHANGE: lid
    kSmChange,           // IBV_EVENT_SM_CHANGE
    kClientReregister,   // IBV_EVENT_CLIENT_REREGISTER
    kPkeyChange,         // IBV_EVENT_PKEY_CHANGE
    kGidChange,          // IBV_EVENT_GID_CHANGE
    kDeviceFatal,        // IBV_EVENT_DEVICE_FATAL: syndrome
  };
  Kind kind = Kind::kCqCompletion;
  uint32_t number = 0;  // CQ, QP or SRQ number (affiliated events)
  uint8_t port = 0;     // port events
  uint8_t old_state = 0, new_state = 0;  // kPortState (PortState values)
  uint16_t lid = 0;                      // kLidChange
  uint32_t syndrome = 0;                 // kDeviceFatal
};
const char* event_name(Event::Kind k);

// The device objects a destroy names (IBA 11.2: deallocate PD, destroy CQ, ...).
enum class ObjectKind : uint8_t { kPd, kUar, kMkey, kCq, kSrq, kQp, kAh };

// What the driver tells of the device beyond QUERY_DEVICE's caps.
struct DeviceInfo {
  std::string driver;         // the driver table's name ("simhca")
  std::string provider;       // the client library's data-path format (HELLO)
  uint16_t vendor_id = 0;     // PCI vendor ID
  uint16_t device_id = 0;     // PCI device ID
  uint32_t fw_rev = 0;
  uint32_t uar_page_size = 0;  // the doorbell page a client maps
};

// What the device holds now, for INFO and tests.
struct DeviceObjects {
  uint32_t pds = 0, mkeys = 0, cqs = 0, qps = 0, srqs = 0, ahs = 0, eqs = 0, uars = 0;
  uint32_t dma_maps = 0;  // DMA mappings the device has (not device objects)
};

// A CQ and the host memory it owns: ring and doorbell record.
struct Cq {
  uint32_t cqn = 0;
  uint8_t log_size = 0;
  uint32_t uar = 0;
  uint32_t arm_sn = 0;
  uint32_t ci = 0;  // consumer counter (CQEs polled)
  dma::DmaBuffer ring, dbr;
};

// An SRQ and its memory.
struct Srq {
  uint32_t srqn = 0;
  uint8_t log_size = 0, log_stride = 0;
  uint32_t pi = 0;  // producer counter
  dma::DmaBuffer ring, dbr;
};

struct QpInit {
  QpType type = QpType::kRc;
  uint8_t port = 0;  // SMI/GSI/RAW only
  uint32_t pdn = 0, send_cqn = 0, recv_cqn = 0, uar = 0;
  std::optional<uint32_t> srqn;
  bool sig_all = false;
  uint8_t log_sq_size = 4, log_sq_stride = 6, log_rq_size = 4, log_rq_stride = 5;
};

// A QP and its memory: send ring, receive ring, doorbell record.
struct Qp {
  uint32_t qpn = 0;
  QpType type = QpType::kRc;
  uint32_t uar = 0;
  uint8_t log_sq_size = 0, log_sq_stride = 0, log_rq_size = 0, log_rq_stride = 0;
  uint32_t sq_pi = 0, rq_pi = 0;  // producer counters
  dma::DmaBuffer sq, rq, dbr;
};

struct QpInfo {
  QpAttr attr;
  QpCreateParams init;
};

struct Mkey {
  uint32_t lkey = 0, rkey = 0;
};

// One step of modify_qp_chain_async.
struct QpChange {
  uint32_t mask = 0;
  QpAttr attr;
};

class Device {
 public:
  using EventHandler = std::function<void(const Event&)>;
  template <class T>
  using Done = Completer<Result<T>>;

  virtual ~Device() = default;

  // ---- identity and state ---------------------------------------------------
  virtual const std::string& name() const = 0;  // the transport's (PCI address, socket)
  virtual const DeviceInfo& info() const = 0;
  virtual const DeviceCaps& caps() const = 0;
  // The device answers (false once it is seen gone: unplugged, transport lost).
  virtual bool alive() const = 0;
  // Brought up and not closed.
  virtual bool is_open() const = 0;
  // The IOMMU-mapped memory of this device: the daemon's own rings and
  // buffers, and clients' memory mapped for DMA.
  virtual dma::DmaPool& pool() = 0;
  // Interrupts seen, and the objects the device holds now (one register
  // read or command: for INFO and tests, never a data path).
  virtual uint64_t interrupts_seen() const = 0;
  virtual Result<DeviceObjects> device_objects() = 0;
  // Asynchronous events other than command completions.
  virtual void set_event_handler(EventHandler h) = 0;

  // ---- life cycle -----------------------------------------------------------
  // Teardown in reverse bring-up order; with force false, objects still
  // alive make it EBUSY (torn down anyway). Idempotent.
  virtual Result<void> close(bool force = false) = 0;
  // Every command in flight fails with `why` at once (the device is gone).
  virtual void fence(const Error& why) = 0;
  // fence(), then close(true): for a device that is gone.
  virtual Result<void> close_dead() = 0;
  // Brought up again on the same transport (after the caller replaced it),
  // without blocking the loop; `done` runs from a handler. On failure the
  // device is left as far as it came: close_dead() it from a later handler.
  virtual void reopen_async(Done<void> done) = 0;
  // Completes every command in flight by polling (continuations run here),
  // within timeout_ms, without running the io_context: for start-up before
  // the loop runs and shutdown after it stopped. False if some remain.
  virtual bool drain(int timeout_ms) = 0;

  // ---- verbs, asynchronous (IBA 11.2) -----------------------------------------
  virtual void nop_async(Done<void> done) = 0;  // a health check that never waits behind work
  virtual void query_port_async(uint8_t port, Done<PortAttr> done) = 0;
  virtual void set_port_async(uint8_t port, const PortSetup& s, Done<void> done) = 0;
  // The port's GID table (docs/device-access.md "Ports"), as Linux's
  // query_gid / add_gid / del_gid: entry `index` (ENODATA when it is empty,
  // as ibv_query_gid_ex), and entry `index` written or, with nullopt,
  // removed. Entry 0 is the port's own. The port raises kGidChange after a
  // change.
  virtual void query_gid_async(uint8_t port, uint16_t index, Done<GidEntry> done) = 0;
  virtual void modify_gid_async(uint8_t port, uint16_t index, const std::optional<GidEntry>& e,
                                Done<void> done) = 0;
  virtual void alloc_pd_async(Done<uint32_t> done) = 0;
  virtual void alloc_uar_async(Done<uint32_t> done) = 0;
  // An fd of UAR `uar`'s doorbell page alone (mmap offset 0), for the one
  // client that owns the UAR; EOPNOTSUPP where the device cannot give one
  // page apart (the client then relays doorbells through ibd).
  virtual Result<UniqueFd> uar_page_fd(uint32_t uar) = 0;
  // A client's CQ, SRQ and QP over memory it owns (already mapped for DMA);
  // the CQ reports completions as Event::kCqCompletion.
  virtual void create_cq_at_async(uint8_t log_size, uint64_t ring_iova, uint64_t dbr_iova, uint32_t uar,
                                  Done<uint32_t> done) = 0;
  virtual void create_srq_at_async(uint32_t pdn, uint8_t log_size, uint8_t log_stride, uint64_t ring_iova,
                                   uint64_t dbr_iova, uint32_t limit, uint32_t uar, Done<uint32_t> done) = 0;
  virtual void arm_srq_async(uint32_t srqn, uint32_t limit, Done<void> done) = 0;
  virtual void create_qp_at_async(const QpCreateParams& p, Done<uint32_t> done) = 0;
  virtual void modify_qp_async(uint32_t qpn, uint32_t attr_mask, const QpAttr& attr, Done<void> done) = 0;
  // Several MODIFY_QPs of one QP, in order (INIT->RTR->RTS: IBA 10.3.1
  // allows one transition per Modify QP). By default each step waits for
  // the one before; a device whose commands execute in the order they were
  // handed over submits them together (Hca: one doorbell, docs/simhca.md
  // §5.1). `done` gets the first step's error; the steps after a failed one
  // do not apply (not sent, or refused by the device: wrong state).
  virtual void modify_qp_chain_async(uint32_t qpn, std::vector<QpChange> steps, Done<void> done);
  virtual void query_qp_async(uint32_t qpn, Done<QpInfo> done) = 0;
  virtual void create_mkey_async(const MkeyParams& p, Done<Mkey> done) = 0;
  virtual void create_ah_async(uint32_t pdn, const AddressVector& av, Done<uint32_t> done) = 0;
  // IBA 11.3.1: UD QP `qpn` receives the group's packets on its port, or
  // stops. Joining the group at the SA is the caller's business.
  virtual void attach_mcast_async(uint32_t qpn, const std::array<uint8_t, 16>& mgid, uint16_t mlid,
                                  Done<void> done) = 0;
  virtual void detach_mcast_async(uint32_t qpn, const std::array<uint8_t, 16>& mgid, uint16_t mlid,
                                  Done<void> done) = 0;
  virtual void destroy_async(ObjectKind kind, uint32_t number, Done<void> done) = 0;
  // The daemon's own CQ and QP, rings in the driver's memory (freed again
  // if the command fails); destroyed by number (destroy_in_order), the
  // memory kept by the caller until then.
  virtual void create_cq_async(uint8_t log_size, Done<Cq> done) = 0;
  virtual void create_qp_async(const QpInit& init, Done<Qp> done) = 0;
  // The daemon's own SRQ (IPoIB connected mode's receives, docs/ipoib.md):
  // its ring of 2^log_size WQEs of 2^log_stride bytes in the driver's memory.
  virtual void create_srq_async(uint32_t pdn, uint8_t log_size, uint8_t log_stride, Done<Srq> done) = 0;

  // ---- the daemon's own data path (no command) -----------------------------
  // At most 2^log_sq_size send WQEs outstanding, likewise for receives.
  // post_send with `ring` false writes the WQE without the doorbell;
  // ring_sq() then rings once for all of them.
  virtual Result<void> post_send(Qp& qp, const SendWr& wr, bool ring = true) = 0;
  virtual Result<void> ring_sq(Qp& qp) = 0;
  virtual Result<void> post_recv(Qp& qp, const RecvWr& wr) = 0;
  virtual Result<void> post_srq_recv(Srq& srq, const RecvWr& wr) = 0;
  // Up to `max` completions, the consumer counter updated.
  virtual std::vector<WorkCompletion> poll_cq(Cq& cq, size_t max = SIZE_MAX) = 0;
  // The next completion raises Event::kCqCompletion (solicited ones only if asked).
  virtual Result<void> arm_cq(Cq& cq, bool solicited_only) = 0;
};

// Destroys `steps` in order, one at a time (a QP before its CQ, an MKEY
// before its PD: IBA 11.2's order), each whatever the one before answered
// (a failure is logged); `keep` (memory the device may still reach) lives
// until the last has answered, then `done` runs. A device closed or gone
// (not alive, or ENODEV) ends the chain: the rest went with it, and a later
// generation of the device must not see destroys of numbers it may have
// given again. On a device already gone, `keep` goes and `done` runs before
// this returns: the memory is released while the transport is still the
// old one (the next generation's DMA mappings may reuse its IOVAs).
void destroy_in_order(Device& dev, std::vector<std::pair<ObjectKind, uint32_t>> steps, std::shared_ptr<void> keep,
                      std::function<void()> done = [] {});

// A verb called synchronously through the seam, for code that runs before
// the loop starts or after it stopped (start-up, teardown, tools, tests):
// `submit` issues the asynchronous call with the completer it is given,
// then the device is drained until it ran (never the io_context).
template <class T, class Submit>
Result<T> call_sync(Device& dev, Submit submit, int timeout_ms = 10000) {
  auto got = std::make_shared<std::optional<Result<T>>>();  // outlives a late answer
  submit([got](Result<T> r) { got->emplace(std::move(r)); });
  if (!*got) (void)dev.drain(timeout_ms);
  if (!*got) return err(ETIMEDOUT, "{}: no answer within {} ms", dev.name(), timeout_ms);
  return std::move(**got);
}

}  // namespace openib::hca
