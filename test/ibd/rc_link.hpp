// One side of a libopenib connection for the ibd tests and bench/: a
// Context on one ibd with a PD, one MR, one CQ and one QP, brought to RTS
// against a peer's QPN and LID the way ibv_rc_pingpong does it (IBA
// 11.2.4.2 Modify QP: RESET -> INIT -> RTR -> RTS). Only public API
// (include/openib/verbs.hpp).
#pragma once

#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>

#include "openib/verbs.hpp"

namespace openib::testing {

struct Side {
  std::unique_ptr<Context> ctx;
  std::unique_ptr<Pd> pd;
  std::unique_ptr<Mr> mr;
  std::unique_ptr<Cq> cq;
  std::unique_ptr<Qp> qp;
  uint16_t lid = 0;

  uint8_t* buf() const { return static_cast<uint8_t*>(mr->addr()); }

  // Members are declared in creation order; destroy in reverse explicitly,
  // since a Context must outlive its objects.
  ~Side() {
    qp.reset();
    cq.reset();
    mr.reset();
    pd.reset();
    ctx.reset();
  }
  Side() = default;
  Side(Side&&) = default;
  Side& operator=(Side&&) = default;
};

inline Result<std::unique_ptr<Side>> open_side(const std::string& socket, size_t mr_len,
                                               QpCap cap = {}, QpType type = QpType::kRc,
                                               uint32_t cqe = 256) {
  auto s = std::make_unique<Side>();
  ContextOptions o;
  o.socket = socket;
  OPENIB_TRY_ASSIGN(s->ctx, Context::open(o));
  OPENIB_TRY_ASSIGN(auto port, s->ctx->query_port(1));
  s->lid = port.lid;
  OPENIB_TRY_ASSIGN(s->pd, s->ctx->alloc_pd());
  OPENIB_TRY_ASSIGN(s->mr, s->ctx->alloc_mr(*s->pd, mr_len,
                                            kAccessLocalWrite | kAccessRemoteWrite |
                                                kAccessRemoteRead));
  OPENIB_TRY_ASSIGN(s->cq, s->ctx->create_cq(cqe));
  QpInit init;
  init.type = type;
  init.send_cq = s->cq.get();
  init.recv_cq = s->cq.get();
  init.cap = cap;
  OPENIB_TRY_ASSIGN(s->qp, s->ctx->create_qp(*s->pd, init));
  return s;
}

inline constexpr uint32_t kTestQkey = 0x11111111;

// RC/UC: to RTS against (remote_qpn, remote_lid). UD: to RTS with kTestQkey.
inline Result<void> to_rts(Qp& qp, uint32_t remote_qpn, uint16_t remote_lid, uint32_t psn = 0) {
  QpAttr a;
  a.state = QpState::kInit;
  a.pkey_index = 0;
  a.port = 1;
  uint32_t mask = qp_attr::kState | qp_attr::kPkeyIndex | qp_attr::kPort;
  if (qp.type() == QpType::kUd) {
    a.qkey = kTestQkey;
    mask |= qp_attr::kQkey;
  } else {
    a.access = kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead;
    mask |= qp_attr::kAccessFlags;
  }
  OPENIB_TRY(qp.modify(a, mask));

  a = {};
  a.state = QpState::kRtr;
  mask = qp_attr::kState;
  if (qp.type() != QpType::kUd) {
    a.path_mtu = Mtu::k4096;
    a.dest_qpn = remote_qpn;
    a.rq_psn = psn;
    a.av.dlid = remote_lid;
    a.av.port = 1;
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
  a.sq_psn = psn;
  mask = qp_attr::kState | qp_attr::kSqPsn;
  if (qp.type() == QpType::kRc) {
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.max_rd_atomic = 1;
    mask |= qp_attr::kTimeout | qp_attr::kRetryCnt | qp_attr::kRnrRetry | qp_attr::kMaxQpRdAtomic;
  }
  return qp.modify(a, mask);
}

inline Result<void> connect(Side& a, Side& b) {
  OPENIB_TRY(to_rts(*a.qp, b.qp->qp_num(), b.lid));
  return to_rts(*b.qp, a.qp->qp_num(), a.lid);
}

// Polls `cq` for one completion until `timeout_ms` passes (ETIMEDOUT).
inline Result<Wc> wait_wc(Cq& cq, int timeout_ms) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  Wc wc;
  for (uint64_t spins = 0;; ++spins) {
    int n = cq.poll({&wc, 1});
    if (n < 0) return err(-n, "poll_cq failed");
    if (n == 1) return wc;
    if ((spins & 1023) == 1023) {
      if (std::chrono::steady_clock::now() > deadline)
        return err(ETIMEDOUT, "no completion on CQ {} within {} ms", cq.cqn(), timeout_ms);
      std::this_thread::yield();
    }
  }
}

inline int post_recv(Qp& qp, Mr& mr, size_t offset, uint32_t len, uint64_t wr_id) {
  Sge sge{reinterpret_cast<uint64_t>(static_cast<uint8_t*>(mr.addr()) + offset), len, mr.lkey()};
  RecvWr wr;
  wr.wr_id = wr_id;
  wr.sg = {&sge, 1};
  return qp.post_recv(wr);
}

inline int post_send(Qp& qp, Mr& mr, size_t offset, uint32_t len, uint64_t wr_id,
                     WrOpcode op = WrOpcode::kSend, uint64_t remote_addr = 0, uint32_t rkey = 0,
                     uint32_t flags = kSendSignaled) {
  Sge sge{reinterpret_cast<uint64_t>(static_cast<uint8_t*>(mr.addr()) + offset), len, mr.lkey()};
  SendWr wr;
  wr.wr_id = wr_id;
  wr.opcode = op;
  wr.flags = flags;
  wr.sg = {&sge, 1};
  wr.remote_addr = remote_addr;
  wr.rkey = rkey;
  return qp.post_send(wr);
}

// Two new clients on `socket`: connected RC QPs, 20 SENDs each way, the
// payload checked (Catch2 assertions; test_device_recovery.cpp).
void rc_pingpong(const std::string& socket);

}  // namespace openib::testing
