// libopenib's implementations of the public objects (include/openib/verbs.hpp).
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "lib/arena.hpp"
#include "lib/conn.hpp"
#include "lib/provider.hpp"
#include "openib/verbs.hpp"

namespace openib::lib {

class ContextImpl;
class QpImpl;
class CqImpl;
class SrqImpl;
class CompChannelImpl;

class PdImpl final : public Pd {
 public:
  PdImpl(ContextImpl& ctx, uint32_t h) : ctx_(ctx), handle_(h) {}
  ~PdImpl() override;
  uint32_t handle() const override { return handle_; }

 private:
  ContextImpl& ctx_;
  uint32_t handle_;
};

class MrImpl final : public Mr {
 public:
  ~MrImpl() override;
  void* addr() const override { return addr_; }
  size_t length() const override { return length_; }
  uint32_t lkey() const override { return lkey_; }
  uint32_t rkey() const override { return rkey_; }

 private:
  friend class ContextImpl;
  explicit MrImpl(ContextImpl& ctx) : ctx_(ctx) {}
  ContextImpl& ctx_;
  void* addr_ = nullptr;
  size_t length_ = 0;
  uint32_t handle_ = 0, lkey_ = 0, rkey_ = 0;
  // alloc_mr: our own mapping; both: ibd's mapping of the memfd (MAP_MEM,
  // MAP_MEM_RANGE). reg_mr: the pages [reg_start_, reg_end_) it holds in
  // the process's registered-pages memfd (memory.cpp).
  std::byte* map_base_ = nullptr;
  size_t map_size_ = 0;
  uint32_t mem_ = 0;
  uintptr_t reg_start_ = 0, reg_end_ = 0;
};

class AhImpl final : public Ah {
 public:
  AhImpl(ContextImpl& ctx, uint32_t h, uint32_t n) : ctx_(ctx), handle_(h), ahn_(n) {}
  ~AhImpl() override;
  uint32_t ahn() const override { return ahn_; }

 private:
  ContextImpl& ctx_;
  uint32_t handle_, ahn_;
};

class CompChannelImpl final : public CompChannel {
 public:
  // `ep` also watches the connection to ibd (data.ptr nullptr): a closed
  // connection ends a wait with ECONNRESET instead of blocking forever.
  CompChannelImpl(UniqueFd ep) : ep_(std::move(ep)) {}
  int fd() const override { return ep_.get(); }
  Result<Cq*> get_event(int timeout_ms) override;

 private:
  UniqueFd ep_;
};

class CqImpl final : public Cq {
 public:
  ~CqImpl() override;
  uint32_t cqn() const override { return cqn_; }
  uint32_t size() const override { return 1u << log_size_; }
  int poll(std::span<Wc> out) override;
  Result<void> req_notify(bool solicited_only) override;
  uint32_t handle() const { return handle_; }
  int event_fd() const { return efd_.get(); }

 private:
  friend class ContextImpl;
  explicit CqImpl(ContextImpl& ctx);
  ContextImpl& ctx_;
  const Provider& prov_;  // the context's
  std::byte* uar_;        // the context's UAR page
  Block block_;  // ring, then the doorbell record
  std::byte* ring_ = nullptr;
  std::byte* dbr_ = nullptr;
  uint32_t handle_ = 0, cqn_ = 0, log_size_ = 0;
  uint32_t cons_ = 0;    // consumer counter (§12.3)
  uint32_t arm_sn_ = 0;  // §7.3
  uint32_t yield_every_ = 0;  // the context's poll_yield (0: never yield)
  uint32_t empty_polls_ = 0;  // consecutive polls that found nothing
  UniqueFd efd_;
  CompChannelImpl* channel_ = nullptr;
};

class SrqImpl final : public Srq {
 public:
  ~SrqImpl() override;
  uint32_t srqn() const override { return srqn_; }
  int post_recv(const RecvWr& wr) override;
  Result<void> arm_limit(uint32_t limit) override;
  uint32_t handle() const { return handle_; }
  void completed() { done_.fetch_add(1, std::memory_order_release); }

 private:
  friend class ContextImpl;
  explicit SrqImpl(ContextImpl& ctx);
  ContextImpl& ctx_;
  const Provider& prov_;  // the context's
  Block block_;
  std::byte* ring_ = nullptr;
  std::byte* dbr_ = nullptr;
  uint32_t handle_ = 0, srqn_ = 0, log_size_ = 0, log_stride_ = 0, max_sge_ = 0;
  uint32_t prod_ = 0;
  std::atomic<uint32_t> done_{0};  // receive completions polled (any QP)
};

class QpImpl final : public Qp {
 public:
  ~QpImpl() override;
  uint32_t qp_num() const override { return qpn_; }
  QpType type() const override { return type_; }
  const QpCap& cap() const override { return cap_; }
  Result<void> modify(const QpAttr& attr, uint32_t mask) override;
  Result<QpAttr> query() override;
  int post_send(const SendWr& wr) override;
  int post_recv(const RecvWr& wr) override;
  uint32_t handle() const { return handle_; }
  const ContextImpl& context() const { return ctx_; }

  // The CQ poller: a CQE of this QP (§12.4) frees its slots.
  void on_cqe(uint8_t opcode, uint16_t wqe_index) {
    if (opcode < kWcRecv) {
      // A send CQE completes its WQE and every older one (unsignaled WQEs
      // have none): the slot after wqe_index is the next one in use.
      const uint32_t mask = (1u << log_sq_) - 1;
      uint32_t c = sq_cons_.load(std::memory_order_relaxed);
      c += ((wqe_index - c) & mask) + 1;
      sq_cons_.store(c, std::memory_order_release);
    } else if (srq_) {
      srq_->completed();
    } else {
      rq_cons_.fetch_add(1, std::memory_order_release);
    }
  }

 private:
  friend class ContextImpl;
  explicit QpImpl(ContextImpl& ctx);
  ContextImpl& ctx_;
  const Provider& prov_;  // the context's
  std::byte* uar_;        // the context's UAR page
  Block block_;  // SQ ring, RQ ring, doorbell record
  std::byte* sq_ = nullptr;
  std::byte* rq_ = nullptr;
  std::byte* dbr_ = nullptr;
  SrqImpl* srq_ = nullptr;
  QpType type_ = QpType::kRc;
  QpCap cap_;
  SqCaps lim_;
  uint32_t handle_ = 0, qpn_ = 0;
  uint8_t log_sq_ = 0, log_sq_stride_ = 0, log_rq_ = 0, log_rq_stride_ = 0;
  uint32_t sq_prod_ = 0, rq_prod_ = 0;               // the poster's
  std::atomic<uint32_t> sq_cons_{0}, rq_cons_{0};   // the poller's
};

// The handle of `qp` on `ctx`'s connection, for requests that name a QP (the
// CM's, the RDMA CM's): EINVAL for a QP of another Context, whose handle
// would name another object (or nothing) on this connection.
inline Result<uint32_t> qp_handle_on(const ContextImpl& ctx, const Qp& qp) {
  const auto& q = static_cast<const QpImpl&>(qp);
  if (&q.context() != &ctx) return err(EINVAL, "the QP belongs to another Context");
  return q.handle();
}

// qpn -> QpImpl, read lock-free by CQ pollers (two levels of 4096: QPNs are
// 24-bit and allocated from low numbers, §6).
class QpTable {
 public:
  ~QpTable() {
    for (auto& p : top_) delete[] p.load();
  }
  QpImpl* find(uint32_t qpn) const {
    auto* leaf = top_[(qpn >> 12) & 0xfff].load(std::memory_order_acquire);
    return leaf ? leaf[qpn & 0xfff].load(std::memory_order_acquire) : nullptr;
  }
  void set(uint32_t qpn, QpImpl* qp) {  // control path, under the context's mutex
    auto& slot = top_[(qpn >> 12) & 0xfff];
    auto* leaf = slot.load();
    if (!leaf) {
      leaf = new std::atomic<QpImpl*>[4096]();
      slot.store(leaf, std::memory_order_release);
    }
    leaf[qpn & 0xfff].store(qp, std::memory_order_release);
  }

 private:
  std::array<std::atomic<std::atomic<QpImpl*>*>, 4096> top_{};
};

class ContextImpl final : public Context {
 public:
  ~ContextImpl() override;
  Result<DeviceAttr> query_device() override;
  Result<proto::DeviceRep5> device_rep();
  Result<PortAttr> query_port(uint8_t port) override;
  Result<Gid> query_gid(uint8_t port, int index) override;
  Result<GidEntry> query_gid_entry(uint8_t port, int index) override;  // gid.cpp
  Result<uint16_t> query_pkey(uint8_t port, int index) override;
  Result<std::unique_ptr<Pd>> alloc_pd() override;
  Result<std::unique_ptr<Mr>> alloc_mr(Pd& pd, size_t length, uint32_t access) override;
  Result<std::unique_ptr<Mr>> reg_mr(Pd& pd, void* addr, size_t length, uint32_t access) override;
  Result<std::unique_ptr<Ah>> create_ah(Pd& pd, const AddressVector& av) override;
  Result<std::unique_ptr<CompChannel>> create_comp_channel() override;
  Result<std::unique_ptr<Cq>> create_cq(uint32_t min_cqe, CompChannel* channel) override;
  Result<std::unique_ptr<Srq>> create_srq(Pd& pd, uint32_t max_wr, uint32_t max_sge) override;
  Result<std::unique_ptr<Qp>> create_qp(Pd& pd, const QpInit& init) override;
  Result<std::vector<AsyncEvent>> get_async_events() override;
  int async_fd() const override { return async_efd_.get(); }
  uint32_t client_id() const override { return client_id_; }

  static Result<std::unique_ptr<Context>> open(const ContextOptions& opts);

  Conn& conn() { return *conn_; }
  const std::string& socket_path() const { return socket_path_; }
  int timeout_ms() const { return timeout_ms_; }
  // The data path's provider (provider.hpp), chosen at open; the UAR page.
  const Provider& provider() const { return *provider_; }
  std::byte* uar_page() const { return uar_page_; }
  Arena& arena() { return *arena_; }
  const proto::DeviceRep& dev() const { return dev_; }
  // The data path's check (docs/client-protocol.md §6.2): one acquire load
  // of the device status page ibd shares read-only; no system call.
  bool device_gone() const {
    // (__atomic_load_n: std::atomic_ref of a const object is C++26; the page is mapped read-only.)
    return __atomic_load_n(status_word_, __ATOMIC_ACQUIRE) != proto::kDeviceRunning;
  }
  void track(CqImpl* cq);
  void track(QpImpl* qp);
  void track(SrqImpl* srq);
  QpTable& qps() { return qps_; }
  // A destroy request whose failure only the log can report (destructors).
  bool destroy(proto::Op op, uint32_t handle);
  void forget(CqImpl* cq);
  void forget(QpImpl* qp);
  void forget(SrqImpl* srq);

 private:
  ContextImpl() = default;
  std::unique_ptr<Conn> conn_;
  std::string socket_path_;
  int timeout_ms_ = 10000;
  std::unique_ptr<Arena> arena_;
  UniqueFd async_efd_;
  // The device this context opened is gone (a DEVICE_FATAL event, or ibd
  // answered ENODEV; docs/client-protocol.md §6.1): ibd has forgotten every
  // object, so destroys are not sent, and nothing will work again.
  std::atomic<bool> device_lost_{false};
  std::byte* uar_page_ = nullptr;
  size_t uar_size_ = 0;
  // The state word of the status page, or of kNoStatusPage (an ibd of
  // protocol version 1 shares none).
  static constexpr uint32_t kNoStatusPage = proto::kDeviceRunning;
  const uint32_t* status_word_ = &kNoStatusPage;
  std::byte* status_page_ = nullptr;
  const Provider* provider_ = nullptr;
  uint32_t client_id_ = 0, uar_index_ = 0;
  uint32_t version_ = 0;  // the protocol version HELLO negotiated
  uint32_t poll_yield_ = ContextOptions::kDefaultPollYield;
  proto::DeviceRep5 dev_;
  QpTable qps_;
  std::mutex mu_;  // the maps below
  std::unordered_map<uint32_t, CqImpl*> cqs_;
  std::unordered_map<uint32_t, QpImpl*> qp_handles_;
  std::unordered_map<uint32_t, SrqImpl*> srqs_;
};

// Between the public address vector and QP attributes and the wire's
// (context.cpp; docs/library.md "Types").
proto::Av to_proto(const AddressVector& av);
AddressVector from_proto(const proto::Av& a);
proto::QpAttr to_proto(const QpAttr& a, uint32_t mask);
QpAttr from_proto(const proto::QpAttr& p);

// The data-path objects keep the context's provider and UAR page (both
// fixed at open): a post or a poll loads nothing else of the context.
inline CqImpl::CqImpl(ContextImpl& ctx) : ctx_(ctx), prov_(ctx.provider()), uar_(ctx.uar_page()) {}
inline SrqImpl::SrqImpl(ContextImpl& ctx) : ctx_(ctx), prov_(ctx.provider()) {}
inline QpImpl::QpImpl(ContextImpl& ctx) : ctx_(ctx), prov_(ctx.provider()), uar_(ctx.uar_page()) {}

}  // namespace openib::lib
