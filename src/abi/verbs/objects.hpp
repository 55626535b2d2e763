// libibverbs.so.1 over libopenib (docs/library.md "Verbs ABI"): the verbs
// objects an application holds are rdma-core's structs (the installed
// <infiniband/verbs.h>), each the first member of one of ours that owns
// the libopenib object behind it. A pointer the application passes back is
// cast to ours; the struct it points at is the one we handed out (as a
// provider's to_mctx()/to_mqp() do): a foreign or freed pointer is the
// application's undefined behaviour in rdma-core as here. What is checked
// (NULL, a destroyed context, bad masks) fails as libibverbs fails: NULL
// with errno, or an errno value returned.
#pragma once

#include <infiniband/verbs.h>
#include <sched.h>

#include <atomic>
#include <cerrno>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "openib/verbs.hpp"

// NAME@@IBVERBS_1.1 for the 33 verbs that also have a NAME@IBVERBS_1.0 twin
// (unsupported.cpp): libibverbs.map lists those names in both nodes, and
// this says which definition is the default (after the definition, in its
// file).
#define OPENIB_VERBS_1_1(name) __asm__(".symver " #name ", " #name "@@IBVERBS_1.1, remove")

namespace openib::verbs {

// A device ibd serves (an entry of ibv_get_device_list).
struct Device {
  ibv_device dev{};  // first: ibv_device* is Device*
  std::string socket;  // the ibd's socket; the device is opened on it by name
};

struct Context;
struct Cq;

// The verbs are thread-safe (libibverbs' man pages; rdma-core's providers
// lock each queue): one spin lock per queue, uncontended a single atomic
// exchange and no system call; a waiter that spins long yields its CPU.
class SpinLock {
 public:
  void lock() {
    for (unsigned spins = 0; flag_.test_and_set(std::memory_order_acquire); ++spins)
      if (spins >= 64) {
        sched_yield();
        spins = 0;
      }
  }
  void unlock() { flag_.clear(std::memory_order_release); }

 private:
  std::atomic_flag flag_ = ATOMIC_FLAG_INIT;
};

// A completion channel: its fd is libopenib's (an epoll set of the CQs'
// eventfds), the CQ behind each event found through the map.
struct Channel {
  ibv_comp_channel ch{};
  std::unique_ptr<openib::CompChannel> impl;
  std::mutex mu;
  std::unordered_map<const openib::Cq*, Cq*> cqs;
};

struct Context {
  verbs_context vctx{};  // ends with the ibv_context the application holds
  std::unique_ptr<openib::Context> impl;
  openib::DeviceAttr attr;
  std::mutex mu;                        // async_events
  std::deque<ibv_async_event> async_events;
  std::unordered_map<const void*, void*> objects;  // libopenib object -> ours, for async events
  // One for being open, one per object made on it (PD, MR, AH, completion
  // channel, CQ, SRQ, QP): a context librdmacm let go (release_context)
  // closes with the last of them.
  std::atomic<int> refs{1};
};

// PDs, CQs and SRQs count the objects made on them (users): destroying
// one still used is EBUSY, as the kernel's uverbs answers, and nothing is
// asked of ibd (which would refuse the same).
struct Pd {
  ibv_pd pd{};
  std::unique_ptr<openib::Pd> impl;
  std::atomic<int> users{0};  // MRs, AHs, SRQs, QPs
};

struct Mr {
  ibv_mr mr{};
  std::unique_ptr<openib::Mr> impl;
};

struct Ah {
  ibv_ah ah{};
  std::unique_ptr<openib::Ah> impl;
};

struct Cq {
  ibv_cq cq{};
  std::unique_ptr<openib::Cq> impl;
  SpinLock lock;              // pollers and arming
  std::atomic<int> users{0};  // QPs' send and receive sides
};

struct Srq {
  ibv_srq srq{};
  std::unique_ptr<openib::Srq> impl;
  SpinLock lock;                                // posters
  uint32_t max_wr = 0, max_sge = 0, limit = 0;  // ibv_query_srq
  std::atomic<int> users{0};                    // QPs
};

struct Qp {
  ibv_qp qp{};
  std::unique_ptr<openib::Qp> impl;
  SpinLock sq_lock, rq_lock;  // posters of each queue
};

inline Context* ctx_of(ibv_context* c) {
  // vctx is Context's first member (as each wrapper's rdma-core struct is:
  // ours<>() relies on the same), so the verbs_context's address is ours.
  return reinterpret_cast<Context*>(reinterpret_cast<char*>(c) - offsetof(verbs_context, context));
}
template <class Ours, class Theirs> Ours* ours(Theirs* p) { return reinterpret_cast<Ours*>(p); }

// Failure as libibverbs reports it: a pointer-returning verb NULL with
// errno, an int-returning one the errno value. The message goes to
// libopenib's log (OPENIB_LOG=debug shows it).
void log_failure(const char* verb, const openib::Error& e);
template <class T = void> T* fail_null(const char* verb, const openib::Error& e) {
  log_failure(verb, e);
  errno = e.code;
  return nullptr;
}
inline int fail_int(const char* verb, const openib::Error& e) {
  log_failure(verb, e);
  return e.code;
}

// Conversions between rdma-core's attribute structs and libopenib's
// (attributes.cpp).
openib::AddressVector to_av(const ibv_ah_attr& a);
ibv_ah_attr from_av(const openib::AddressVector& av);
openib::QpAttr to_qp_attr(const ibv_qp_attr& a);
void from_qp_attr(const openib::QpAttr& q, ibv_qp_attr& a);
int to_qp_type(ibv_qp_type t, openib::QpType& out);  // 0 or EOPNOTSUPP
ibv_qp_type from_qp_type(openib::QpType t);

// The data path's functions of ibv_context.ops (datapath.cpp).
int poll_cq(ibv_cq* cq, int n, ibv_wc* wc);
int req_notify_cq(ibv_cq* cq, int solicited_only);
int post_send(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad);
int post_recv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad);
int post_srq_recv(ibv_srq* srq, ibv_recv_wr* wr, ibv_recv_wr** bad);

// The devices of the ibd at $OPENIB_SOCKET (ibv_get_device_list's), and
// the one listed with this ibdev_path, or nullptr (device.cpp).
std::vector<Device*> list_devices();
Device* find_device(const char* ibdev_path);

// verbs_context's extended query_port and query_device_ex (device.cpp).
int query_port_ex(ibv_context* c, uint8_t port, ibv_port_attr* attr, size_t len);
int query_device_ex(ibv_context* c, const ibv_query_device_ex_input* in, ibv_device_attr_ex* attr,
                    size_t len);

// The references objects hold on their context (Context::refs): taken
// when one is made, dropped when it is destroyed; the last one closes it.
// Inline: librdmacm drops its own (release_context) and the version script
// exports nothing of ours.
inline void hold(Context& ctx) { ctx.refs.fetch_add(1, std::memory_order_relaxed); }
inline void release(Context& ctx) {
  if (ctx.refs.fetch_sub(1, std::memory_order_acq_rel) == 1) ibv_close_device(&ctx.vctx.context);
}

// librdmacm's close of the context it opened for an event channel
// (src/abi/rdmacm): rdma-core keeps its contexts open for as long as the
// process runs, so an application may destroy its channel and ids first and
// its CQs, PDs and MRs on id->verbs after (qperf -cm1 does). The context
// closes when the last of its objects is destroyed; at once if none is left.
inline void release_context(ibv_context* c) {
  if (c) release(*ctx_of(c));
}

// Async events of a context: libopenib's queued ones moved into ctx's
// deque, translated (events.cpp).
void note_object(Context& ctx, const void* impl, void* ours);
void forget_object(Context& ctx, const void* impl);

}  // namespace openib::verbs
