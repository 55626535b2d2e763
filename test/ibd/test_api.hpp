// The public API of libopenib (include/openib/verbs.hpp) driven end to end
// against real ibd + simhca processes: test_api_*.cpp, one TEST_CASE per
// feature, each checking what a user would see (bytes, immediates, the
// fields of a completion, events). docs/library.md "Tested by" maps each
// call to its cases.
//
// Every case of the executable shares one pair of ibds cabled back to back
// (LIDs 1 and 2; harness.hpp), started on first use and stopped at exit:
// over UDP on 127.0.0.1, or with OPENIB_CABLE=shm in the environment over
// the shared-memory cable (docs/cables.md: its RC/UC segments take other
// code paths of simhca).
// A case opens its own Contexts, one per side, on the two daemons: a
// message goes over the cable from one emulated HCA to the other.
#pragma once

#include <poll.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "harness.hpp"
#include "openib/verbs.hpp"

namespace openib::testing::api {

// The shared pair (started once per process; both stop at exit).
inline bool shm_cable() {
  const char* c = std::getenv("OPENIB_CABLE");
  return c && std::string(c) == "shm";
}
inline IbdPair& ibds() {
  static TempDir dir;
  static IbdPair pair = [] {
    IbdPair p(dir.path(), "warn", /*distinct_guids=*/true, shm_cable());
    // Both ports' CMs running before any case: a REQ that came before
    // the peer's engine ran would wait for the CM's retry.
    if (!wait_cm_running(p.a->socket()) || !wait_cm_running(p.b->socket()))
      throw std::runtime_error("the ibds' CMs did not come up within 20 s");
    return p;
  }();
  return pair;
}
inline const std::string& sock_a() { return ibds().a->socket(); }
inline const std::string& sock_b() { return ibds().b->socket(); }

inline constexpr uint32_t kAllAccess =
    kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead | kAccessRemoteAtomic;
inline constexpr uint32_t kQkey = 0x22221111;
inline constexpr int kWaitMs = 5000;  // a completion or event that must come
inline constexpr int kQuietMs = 300;  // how long one that must not come is given to show up

template <class T>
T must(Result<T> r, const char* what) {
  INFO(what << ": " << (r.ok() ? std::string() : r.error().str()));
  REQUIRE(r.ok());
  return std::move(r).value();
}
inline void must(Result<void> r, const char* what) {
  INFO(what << ": " << (r.ok() ? std::string() : r.error().str()));
  REQUIRE(r.ok());
}

struct EpOptions {
  QpType type = QpType::kRc;
  size_t mr_len = 64 * 1024;
  uint32_t mr_access = kAllAccess;
  bool channel = false;    // the CQ gets a completion channel
  bool srq = false;        // the QP receives from an SRQ (srq_wr entries)
  uint32_t srq_wr = 16;
  QpCap cap{};
  uint32_t cqe = 64;
  bool sig_all = false;
  int poll_yield = -1;  // ContextOptions::poll_yield
};

// One side: a Context on one ibd, with a PD, an MR, a CQ (send and receive),
// optionally a channel and an SRQ, and a QP in RESET. Members in creation
// order: they are destroyed in reverse (a Context outlives its objects, a
// channel its CQs).
struct Ep {
  std::unique_ptr<Context> ctx;
  std::unique_ptr<Pd> pd;
  std::unique_ptr<Mr> mr;
  std::unique_ptr<CompChannel> ch;
  std::unique_ptr<Cq> cq;
  std::unique_ptr<Cq> send_cq;  // when the QP's send CQ is not `cq` (then made by the case)
  std::unique_ptr<Srq> srq;
  std::unique_ptr<Qp> qp;
  uint16_t lid = 0;
  Gid gid;

  uint8_t* buf() const { return static_cast<uint8_t*>(mr->addr()); }
  uint64_t va(size_t off) const { return reinterpret_cast<uint64_t>(buf() + off); }
  Sge sge(size_t off, uint32_t len) const { return Sge{va(off), len, mr->lkey()}; }
};

inline std::unique_ptr<Ep> open_ep(const std::string& socket, const EpOptions& o = {}) {
  auto e = std::make_unique<Ep>();
  ContextOptions co;
  co.socket = socket;
  co.poll_yield = o.poll_yield;
  e->ctx = must(Context::open(co), "Context::open");
  e->lid = must(e->ctx->query_port(1), "query_port").lid;
  e->gid = must(e->ctx->query_gid(1, 0), "query_gid");
  e->pd = must(e->ctx->alloc_pd(), "alloc_pd");
  e->mr = must(e->ctx->alloc_mr(*e->pd, o.mr_len, o.mr_access), "alloc_mr");
  if (o.channel) e->ch = must(e->ctx->create_comp_channel(), "create_comp_channel");
  e->cq = must(e->ctx->create_cq(o.cqe, e->ch.get()), "create_cq");
  if (o.srq) e->srq = must(e->ctx->create_srq(*e->pd, o.srq_wr, 1), "create_srq");
  QpInit init;
  init.type = o.type;
  init.send_cq = init.recv_cq = e->cq.get();
  init.srq = e->srq.get();
  init.cap = o.cap;
  init.sq_sig_all = o.sig_all;
  e->qp = must(e->ctx->create_qp(*e->pd, init), "create_qp");
  return e;
}

struct PathOptions {
  bool grh = false;  // an address vector with a GRH to the peer's GID 0
  uint32_t psn = 0;
  uint8_t rnr_retry = 7;  // 7: retry for ever (IBA 9.7.5.2.8)
};

// RESET -> INIT -> RTR -> RTS (IBA 11.2.4.2) towards the peer's QPN and LID;
// UD: with kQkey. Remote access rights: all four.
inline Result<void> to_rts(Qp& qp, uint32_t peer_qpn, uint16_t peer_lid, const Gid& peer_gid,
                           const PathOptions& p = {}) {
  QpAttr a;
  a.state = QpState::kInit;
  a.port = 1;
  uint32_t mask = qp_attr::kState | qp_attr::kPkeyIndex | qp_attr::kPort;
  if (qp.type() == QpType::kUd) {
    a.qkey = kQkey;
    mask |= qp_attr::kQkey;
  } else {
    a.access = kAllAccess;
    mask |= qp_attr::kAccessFlags;
  }
  OPENIB_TRY(qp.modify(a, mask));
  a = {};
  a.state = QpState::kRtr;
  mask = qp_attr::kState;
  if (qp.type() != QpType::kUd) {
    a.path_mtu = Mtu::k1024;
    a.dest_qpn = peer_qpn;
    a.rq_psn = p.psn;
    a.av.dlid = peer_lid;
    a.av.port = 1;
    if (p.grh) {
      a.av.grh = true;
      a.av.dgid = peer_gid;
      a.av.hop_limit = 1;
      a.av.sgid_index = 0;
    }
    mask |= qp_attr::kAv | qp_attr::kPathMtu | qp_attr::kDestQpn | qp_attr::kRqPsn;
    if (qp.type() == QpType::kRc) {
      a.max_dest_rd_atomic = 1;
      a.min_rnr_timer = 12;
      mask |= qp_attr::kMaxDestRdAtomic | qp_attr::kMinRnrTimer;
    }
  }
  OPENIB_TRY(qp.modify(a, mask));
  a = {};
  a.state = QpState::kRts;
  a.sq_psn = p.psn;
  mask = qp_attr::kState | qp_attr::kSqPsn;
  if (qp.type() == QpType::kRc) {
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = p.rnr_retry;
    a.max_rd_atomic = 1;
    mask |= qp_attr::kTimeout | qp_attr::kRetryCnt | qp_attr::kRnrRetry | qp_attr::kMaxQpRdAtomic;
  }
  return qp.modify(a, mask);
}

inline void connect(Ep& a, Ep& b, const PathOptions& p = {}) {
  must(to_rts(*a.qp, b.qp->qp_num(), b.lid, b.gid, p), "A to RTS");
  must(to_rts(*b.qp, a.qp->qp_num(), a.lid, a.gid, p), "B to RTS");
}

// Two connected sides, A on the first ibd, B on the second.
struct Link {
  std::unique_ptr<Ep> a, b;
};
inline Link link(const EpOptions& oa = {}, const EpOptions& ob = {}, const PathOptions& p = {}) {
  Link l{open_ep(sock_a(), oa), open_ep(sock_b(), ob)};
  connect(*l.a, *l.b, p);
  return l;
}

// One completion, polled until `timeout_ms` (a failed REQUIRE otherwise).
inline Wc wait_wc(Cq& cq, int timeout_ms = kWaitMs) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  Wc wc;
  int n;
  while ((n = cq.poll({&wc, 1})) == 0 && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
  INFO("no completion on CQ " << cq.cqn() << " within " << timeout_ms << " ms (poll: " << n << ")");
  REQUIRE(n == 1);
  return wc;
}
// No completion on `cq` (checked right away, after what must have come).
inline void expect_no_wc(Cq& cq) {
  Wc wc;
  const int n = cq.poll({&wc, 1});
  INFO("unexpected completion: wr_id " << wc.wr_id << " opcode " << int(wc.opcode) << " status "
                                       << int(wc.status));
  CHECK(n == 0);
}

inline int post_recv(Qp& qp, const Sge& s, uint64_t wr_id) {
  RecvWr wr;
  wr.wr_id = wr_id;
  wr.sg = {&s, 1};
  return qp.post_recv(wr);
}
inline int post_recv(Srq& srq, const Sge& s, uint64_t wr_id) {
  RecvWr wr;
  wr.wr_id = wr_id;
  wr.sg = {&s, 1};
  return srq.post_recv(wr);
}

// A send WR of one SGE (or none when len is 0).
struct Post {
  WrOpcode op = WrOpcode::kSend;
  uint32_t flags = kSendSignaled;
  uint32_t imm = 0;
  uint64_t remote_addr = 0;
  uint32_t rkey = 0;
  uint64_t compare_add = 0, swap = 0;
  const Ah* ah = nullptr;
  uint32_t remote_qpn = 0, remote_qkey = kQkey;
};
inline int post_send(Qp& qp, const Sge& s, uint64_t wr_id, const Post& p = {}) {
  SendWr wr;
  wr.wr_id = wr_id;
  wr.opcode = p.op;
  wr.flags = p.flags;
  wr.imm = p.imm;
  if (s.length) wr.sg = {&s, 1};
  wr.remote_addr = p.remote_addr;
  wr.rkey = p.rkey;
  wr.compare_add = p.compare_add;
  wr.swap = p.swap;
  wr.ah = p.ah;
  wr.remote_qpn = p.remote_qpn;
  wr.remote_qkey = p.remote_qkey;
  return qp.post_send(wr);
}

// Fills [p, p + n) with a pattern that differs per seed and per byte.
inline void fill(uint8_t* p, size_t n, uint8_t seed) {
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<uint8_t>(seed + i * 7 + (i >> 8));
}
// Index of the first byte of [p, p + n) not as fill(seed) wrote it; n if none.
inline size_t first_diff(const uint8_t* p, size_t n, uint8_t seed) {
  for (size_t i = 0; i < n; ++i)
    if (p[i] != static_cast<uint8_t>(seed + i * 7 + (i >> 8))) return i;
  return n;
}

// Whether every byte of [p, p + n) is v.
inline bool all_bytes(const uint8_t* p, size_t n, uint8_t v) {
  for (size_t i = 0; i < n; ++i)
    if (p[i] != v) return false;
  return true;
}

// Waits up to `timeout_ms` for `fd` to become readable (poll(2)).
inline bool readable(int fd, int timeout_ms) {
  pollfd pf{fd, POLLIN, 0};
  int r;
  do r = ::poll(&pf, 1, timeout_ms);
  while (r < 0 && errno == EINTR);
  return r == 1 && (pf.revents & POLLIN);
}

// Async events of `ctx` until one satisfies `want` or `timeout_ms` passes;
// all those fetched (the one wanted last, if it came).
inline std::vector<AsyncEvent> wait_async(Context& ctx, const std::function<bool(const AsyncEvent&)>& want,
                                          int timeout_ms) {
  std::vector<AsyncEvent> got;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() < 0 || !readable(ctx.async_fd(), static_cast<int>(left.count()))) return got;
    for (const AsyncEvent& e : must(ctx.get_async_events(), "get_async_events")) {
      got.push_back(e);
      if (want(e)) return got;
    }
  }
}
inline size_t count_events(const std::vector<AsyncEvent>& evs, AsyncEventType t) {
  size_t n = 0;
  for (auto& e : evs) n += e.type == t;
  return n;
}

}  // namespace openib::testing::api
