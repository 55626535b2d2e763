// libopenib: kernel-bypass RDMA through ibd (docs/library.md).
//
// The vocabulary is that of IBA chapter 11 and libibverbs: a Context is an
// open device (a connection to ibd), and PDs, MRs, CQs, SRQs, QPs and AHs
// hang off it. Control calls (create, modify, destroy, query) are requests
// to ibd over its UNIX socket. The data path (post_send, post_recv,
// poll_cq) is loads and stores in shared memory plus a doorbell store into
// the client's own mmap-ed UAR page: no system call and no message to ibd
// (docs/simhca.md §12.5 describes the one exception: a futex wake when the
// device has gone to sleep because it was idle).
//
// Errors: control calls return openib::Result<T> (common/result.hpp's
// errno-coded Error with a message). Post calls return an errno value (0 on
// success, ENOMEM for a full queue, EINVAL for a malformed request), like
// ibv_post_send. Objects are owned by std::unique_ptr; destroying one sends
// the destroy request to ibd. A Context must outlive its objects.
//
// Threading: a Context and its objects may be used from one thread at a
// time each (a QP by one poster, a CQ by one poller), as with libibverbs
// without locking.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "openib/result.hpp"

namespace openib {

// Values of the libibverbs enums of the same names.
enum class QpType : uint8_t { kRc = 0, kUc = 1, kUd = 2 };
enum class QpState : uint8_t { kReset = 0, kInit = 1, kRtr = 2, kRts = 3, kSqd = 4, kSqe = 5, kErr = 6 };
enum class Mtu : uint8_t { k256 = 1, k512 = 2, k1024 = 3, k2048 = 4, k4096 = 5 };

inline constexpr uint32_t kAccessLocalWrite = 1, kAccessRemoteWrite = 2, kAccessRemoteRead = 4,
                          kAccessRemoteAtomic = 8;

namespace qp_attr {  // enum ibv_qp_attr_mask
inline constexpr uint32_t kState = 1u << 0, kCurState = 1u << 1, kAccessFlags = 1u << 3,
                          kPkeyIndex = 1u << 4, kPort = 1u << 5, kQkey = 1u << 6, kAv = 1u << 7,
                          kPathMtu = 1u << 8, kTimeout = 1u << 9, kRetryCnt = 1u << 10,
                          kRnrRetry = 1u << 11, kRqPsn = 1u << 12, kMaxQpRdAtomic = 1u << 13,
                          kMinRnrTimer = 1u << 15, kSqPsn = 1u << 16, kMaxDestRdAtomic = 1u << 17,
                          kDestQpn = 1u << 20;
}

// DeviceAttr::device_cap_flags: the bits of libibverbs' enum
// ibv_device_cap_flags (<infiniband/verbs.h>) libopenib reports, with their
// values there.
namespace device_cap {
inline constexpr uint32_t kPortActiveEvent = 1u << 10;  // IBV_DEVICE_PORT_ACTIVE_EVENT
inline constexpr uint32_t kSysImageGuid = 1u << 11;     // IBV_DEVICE_SYS_IMAGE_GUID
inline constexpr uint32_t kRcRnrNakGen = 1u << 12;      // IBV_DEVICE_RC_RNR_NAK_GEN
}  // namespace device_cap
// DeviceAttr::atomic_cap: values of libibverbs' enum ibv_atomic_cap
// (IBV_ATOMIC_NONE, IBV_ATOMIC_HCA).
inline constexpr uint8_t kAtomicNone = 0, kAtomicHca = 1;

struct DeviceAttr {
  std::string name;  // e.g. "simhca0"
  uint64_t node_guid = 0, sys_image_guid = 0;
  uint32_t fw_rev = 0, vendor_id = 0, vendor_part_id = 0, hw_ver = 0;
  uint32_t max_qp = 0, max_cq = 0, max_srq = 0, max_pd = 0, max_mr = 0, max_ah = 0;
  uint32_t max_qp_wr = 0, max_cqe = 0, max_srq_wr = 0, max_sge = 0, max_inline = 0;
  uint32_t max_msg_size = 0;
  uint8_t num_ports = 0, max_rd_atomic = 0, max_dest_rd_atomic = 0;
  uint8_t local_ca_ack_delay = 0;  // 4.096 us * 2^n (IBA 9.7.6.1.3)
  uint32_t device_cap_flags = 0;   // device_cap:: bits
  uint8_t atomic_cap = kAtomicNone;
  // ibv_device_attr.max_mr_size: the bytes one MR may cover, from a
  // page-aligned start (0: an ibd before protocol 5 does not say).
  uint64_t max_mr_size = 0;
};

// What a port speaks (enum ibv_port_attr.link_layer's values): InfiniBand
// (LIDs, SMA, SA paths) or Ethernet (RoCEv2: no SA, routes from addresses).
enum class LinkLayer : uint8_t { kUnspecified = 0, kInfiniBand = 1, kEthernet = 2 };

struct PortAttr {
  uint8_t state = 0;  // 1 DOWN, 2 INIT, 3 ARMED, 4 ACTIVE (enum ibv_port_state)
  uint8_t phys_state = 0;
  uint16_t lid = 0, sm_lid = 0;
  uint8_t lmc = 0, sm_sl = 0;
  Mtu max_mtu = Mtu::k4096, active_mtu = Mtu::k4096;
  uint8_t active_width = 0, active_speed = 0;
  uint16_t pkey_table_len = 0, gid_table_len = 0;
  uint64_t gid_prefix = 0, port_guid = 0;  // GID 0 = prefix:guid
  uint32_t cap_flags = 0;
  // As ibd reports it (QUERY_GID); every port ibd serves today is InfiniBand.
  LinkLayer link_layer = LinkLayer::kInfiniBand;
};

struct Gid {
  std::array<uint8_t, 16> raw{};
};

// A GID table entry's type (enum ibv_gid_type's values).
enum class GidType : uint8_t { kIb = 0, kRoceV1 = 1, kRoceV2 = 2 };
// One entry of a port's GID table (struct ibv_gid_entry), with the port's
// link layer.
struct GidEntry {
  Gid gid;
  uint32_t gid_index = 0;
  uint8_t port_num = 0;
  GidType gid_type = GidType::kIb;
  LinkLayer link_layer = LinkLayer::kInfiniBand;
};

struct AddressVector {  // struct ibv_ah_attr
  uint16_t dlid = 0;
  uint8_t sl = 0, src_path_bits = 0, static_rate = 0, port = 1;
  bool grh = false;
  Gid dgid;
  uint32_t flow_label = 0;
  uint8_t sgid_index = 0, hop_limit = 0, traffic_class = 0;
};

struct QpCap {  // struct ibv_qp_cap; created sizes are rounded up to powers of two
  uint32_t max_send_wr = 16, max_recv_wr = 16, max_send_sge = 1, max_recv_sge = 1;
  uint32_t max_inline_data = 0;
};

struct QpAttr {  // struct ibv_qp_attr, the fields simhca supports
  QpState state = QpState::kReset, cur_state = QpState::kReset;
  Mtu path_mtu = Mtu::k1024;
  uint32_t qkey = 0, rq_psn = 0, sq_psn = 0, dest_qpn = 0;
  uint32_t access = 0;  // qp_access_flags
  AddressVector av;     // ah_attr
  uint16_t pkey_index = 0;
  uint8_t port = 1, timeout = 14, retry_cnt = 7, rnr_retry = 7, min_rnr_timer = 12;
  uint8_t max_rd_atomic = 1, max_dest_rd_atomic = 1;
  bool en_sqd_async_notify = false;  // query: sq_draining
};

// ---- work requests and completions (struct ibv_send_wr / ibv_wc) ----------
enum class WrOpcode : uint8_t {
  kSend = 0, kSendImm = 1, kWrite = 2, kWriteImm = 3, kRead = 4, kCmpSwap = 5, kFetchAdd = 6,
};
inline constexpr uint32_t kSendSignaled = 1, kSendSolicited = 2, kSendInline = 4, kSendFence = 8;

struct Sge {
  uint64_t addr = 0;  // a virtual address of this process inside the lkey's MR
  uint32_t length = 0;
  uint32_t lkey = 0;
};

class Ah;
struct SendWr {
  uint64_t wr_id = 0;
  WrOpcode opcode = WrOpcode::kSend;
  uint32_t flags = kSendSignaled;
  uint32_t imm = 0;  // network byte order is not used: the value as sent
  std::span<const Sge> sg;
  uint64_t remote_addr = 0;  // RDMA and atomics
  uint32_t rkey = 0;
  uint64_t compare_add = 0, swap = 0;  // atomics (fetch-add: compare_add is the addend)
  const Ah* ah = nullptr;              // UD
  uint32_t remote_qpn = 0, remote_qkey = 0;
};

struct RecvWr {
  uint64_t wr_id = 0;
  std::span<const Sge> sg;
};

enum WcStatus : uint8_t {  // enum ibv_wc_status
  kWcSuccess = 0, kWcLocLenErr = 1, kWcLocQpOpErr = 2, kWcLocProtErr = 4, kWcWrFlushErr = 5,
  kWcBadRespErr = 7, kWcLocAccessErr = 8, kWcRemInvReqErr = 9, kWcRemAccessErr = 10,
  kWcRemOpErr = 11, kWcRetryExcErr = 12, kWcRnrRetryExcErr = 13, kWcFatalErr = 19,
  kWcGeneralErr = 21,
};
enum WcOpcode : uint8_t {  // enum ibv_wc_opcode
  kWcSend = 0, kWcRdmaWrite = 1, kWcRdmaRead = 2, kWcCompSwap = 3, kWcFetchAdd = 4,
  kWcRecv = 128, kWcRecvRdmaWithImm = 129,
};
const char* wc_status_str(uint8_t status);  // like ibv_wc_status_str

struct Wc {  // struct ibv_wc
  uint64_t wr_id = 0;
  uint8_t status = 0, opcode = 0, vendor_err = 0, sl = 0, dlid_path_bits = 0;
  uint32_t byte_len = 0, imm = 0, qp_num = 0, src_qp = 0;
  uint16_t slid = 0, pkey_index = 0;
  bool grh = false, has_imm = false, solicited = false;
};

// ---- objects ----------------------------------------------------------------
class Context;

class Pd {
 public:
  virtual ~Pd() = default;
  virtual uint32_t handle() const = 0;
};

// Memory for RDMA. Either the library allocated it (Context::alloc_mr,
// memfd-backed, page aligned), or it was the caller's anonymous private
// memory remapped in place onto a memfd (Context::reg_mr): the contents
// and the address stay the same, and the pages become shared with ibd and
// the device. Registering non-anonymous memory (a file mapping, stack of
// another thread while in use, ...) fails with EINVAL.
class Mr {
 public:
  virtual ~Mr() = default;
  virtual void* addr() const = 0;
  virtual size_t length() const = 0;
  virtual uint32_t lkey() const = 0;
  virtual uint32_t rkey() const = 0;
};

class Ah {
 public:
  virtual ~Ah() = default;
  virtual uint32_t ahn() const = 0;
};

class Cq {
 public:
  virtual ~Cq() = default;
  virtual uint32_t cqn() const = 0;
  virtual uint32_t size() const = 0;  // CQEs the ring holds
  // Up to out.size() completions; returns how many (ibv_poll_cq). No system call.
  virtual int poll(std::span<Wc> out) = 0;
  // ibv_req_notify_cq: the next completion (or next solicited one) signals
  // the CQ's completion channel once. A CQ made without a channel: EINVAL.
  virtual Result<void> req_notify(bool solicited_only = false) = 0;
};

// A completion channel (ibv_comp_channel): an fd that becomes readable when
// a CQ attached to it has an event. fd() may be put in poll/epoll.
class CompChannel {
 public:
  virtual ~CompChannel() = default;
  virtual int fd() const = 0;
  // Waits up to timeout_ms (-1: forever) for an event, returns its CQ
  // (ibv_get_cq_event + ibv_ack_cq_events in one); ETIMEDOUT.
  virtual Result<Cq*> get_event(int timeout_ms) = 0;
};

class Srq {
 public:
  virtual ~Srq() = default;
  virtual uint32_t srqn() const = 0;
  virtual int post_recv(const RecvWr& wr) = 0;
  // Arms the SRQ limit event (IBA 11.2.3.3): an async event when fewer than
  // `limit` WQEs remain.
  virtual Result<void> arm_limit(uint32_t limit) = 0;
};

struct QpInit {  // struct ibv_qp_init_attr
  QpType type = QpType::kRc;
  Cq* send_cq = nullptr;
  Cq* recv_cq = nullptr;
  Srq* srq = nullptr;
  QpCap cap;
  bool sq_sig_all = false;
};

class Qp {
 public:
  virtual ~Qp() = default;
  virtual uint32_t qp_num() const = 0;
  virtual QpType type() const = 0;
  virtual const QpCap& cap() const = 0;  // as created (rounded up)
  virtual Result<void> modify(const QpAttr& attr, uint32_t mask) = 0;
  virtual Result<QpAttr> query() = 0;
  // ibv_post_send / ibv_post_recv for one request (0 or an errno).
  virtual int post_send(const SendWr& wr) = 0;
  virtual int post_recv(const RecvWr& wr) = 0;
};

enum class AsyncEventType : uint8_t {  // enum ibv_event_type values
  kCqErr = 0, kQpFatal = 1, kQpReqErr = 2, kQpAccessErr = 3, kCommEst = 4, kSqDrained = 5,
  kPathMig = 6, kPathMigErr = 7, kDeviceFatal = 8, kPortActive = 9, kPortErr = 10,
  kLidChange = 11, kPkeyChange = 12, kSmChange = 13, kSrqErr = 14, kSrqLimitReached = 15,
  kQpLastWqeReached = 16, kClientReregister = 17, kGidChange = 18,
  // openib's own: a path ibd had cached changed (openib/path.hpp); port,
  // pkey and dgid name it.
  kPathChanged = 64,
};
struct AsyncEvent {
  AsyncEventType type{};
  uint8_t port = 0;
  uint16_t pkey = 0;  // kPathChanged
  Gid dgid;           // kPathChanged
  Cq* cq = nullptr;    // the object, when the event names one of this context's
  Qp* qp = nullptr;
  Srq* srq = nullptr;
};

struct ContextOptions {
  // ibd's socket; empty: $OPENIB_SOCKET, else /run/ibd/ibd.sock.
  std::string socket;
  // The device of that ibd to open, by name (docs/library.md "Devices");
  // empty: $OPENIB_DEVICE, else ibd's first device.
  std::string device;
  int timeout_ms = 10000;  // per control request; ETIMEDOUT after it
  // Cq::poll calls sched_yield() after this many consecutive empty polls
  // of a CQ (docs/library.md "Polling"); 0: never. Negative:
  // $OPENIB_POLL_YIELD, else kDefaultPollYield.
  static constexpr int kDefaultPollYield = 64;
  int poll_yield = -1;
};

// One device an ibd serves (ibv_get_device_list's entry).
struct DeviceEntry {
  std::string name;    // as QUERY_DEVICE names it, and ContextOptions::device takes it
  std::string socket;  // the device's own socket
};
// The devices the ibd at `socket` serves (empty: $OPENIB_SOCKET, else the
// default), by name; ENODEV when none answers there.
Result<std::vector<DeviceEntry>> list_devices(const std::string& socket = {});

class Context {
 public:
  // ibv_open_device: connects to ibd and says HELLO (version negotiation).
  static Result<std::unique_ptr<Context>> open(const ContextOptions& opts = {});
  virtual ~Context() = default;

  virtual Result<DeviceAttr> query_device() = 0;
  virtual Result<PortAttr> query_port(uint8_t port) = 0;
  virtual Result<Gid> query_gid(uint8_t port, int index) = 0;

  virtual Result<std::unique_ptr<Pd>> alloc_pd() = 0;
  // Library-allocated, memfd-backed, page-aligned, zeroed memory, registered.
  virtual Result<std::unique_ptr<Mr>> alloc_mr(Pd& pd, size_t length, uint32_t access) = 0;
  // Existing memory of this process ([addr, addr+length) rounded out to
  // pages), anonymous private memory remapped in place onto a memfd.
  virtual Result<std::unique_ptr<Mr>> reg_mr(Pd& pd, void* addr, size_t length, uint32_t access) = 0;
  virtual Result<std::unique_ptr<Ah>> create_ah(Pd& pd, const AddressVector& av) = 0;

  virtual Result<std::unique_ptr<CompChannel>> create_comp_channel() = 0;
  virtual Result<std::unique_ptr<Cq>> create_cq(uint32_t min_cqe, CompChannel* channel = nullptr) = 0;
  virtual Result<std::unique_ptr<Srq>> create_srq(Pd& pd, uint32_t max_wr, uint32_t max_sge) = 0;
  virtual Result<std::unique_ptr<Qp>> create_qp(Pd& pd, const QpInit& init) = 0;

  // ibv_get_async_event without blocking: the events queued so far
  // (async_fd() becomes readable when there are some).
  virtual Result<std::vector<AsyncEvent>> get_async_events() = 0;
  virtual int async_fd() const = 0;

  virtual uint32_t client_id() const = 0;

  // ibv_query_gid_ex: entry `index` of the port's GID table with its type
  // (ENODATA: the entry is empty; EINVAL: no such port or index).
  virtual Result<GidEntry> query_gid_entry(uint8_t port, int index) = 0;
  // ibv_query_pkey: entry `index` of the port's P_Key table, in host byte
  // order (ibv_query_pkey's is big-endian) (EINVAL: no such port or index).
  virtual Result<uint16_t> query_pkey(uint8_t port, int index) = 0;
};

}  // namespace openib
