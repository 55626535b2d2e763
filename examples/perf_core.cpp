// openib-perf's measurement core (perf_core.hpp): perftest's loops on
// libopenib. The data path only: post, poll, and for WRITE latency a spin
// on the last byte of the target area (ib_write_lat).
#include "perf_core.hpp"

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>

namespace openib::perf {

namespace {

using clock = std::chrono::steady_clock;
double now_us() { return std::chrono::duration<double, std::micro>(clock::now().time_since_epoch()).count(); }

// Spinning waits give up after 30 s without progress: a vanished peer is an
// error, not a hang.
struct Watchdog {
  uint64_t spins = 0;
  clock::time_point last = clock::now();
  void progress() { last = clock::now(), spins = 0; }
  bool expired() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();  // the device and ibd may share the CPUs with us
#endif
    if (++spins % 4096) return false;
    return clock::now() - last > std::chrono::seconds(30);
  }
};

Error wc_error(const Wc& wc) {
  return err(EIO, "completion of wr_id {} failed: {} ({})", wc.wr_id, wc_status_str(wc.status), wc.status);
}

constexpr uint64_t kSendId = 1, kRecvId = 2;

Result<void> post_recv(Side& s, size_t size) {
  Sge sg{reinterpret_cast<uint64_t>(s.target()), uint32_t(size), s.mr->lkey()};
  if (int e = s.qp->post_recv(RecvWr{kRecvId, std::span(&sg, 1)})) return err(e, "post_recv");
  ++s.posted_recvs;
  return ok();
}

Result<void> post(Side& s, Test t, size_t size, bool signaled = true) {
  Sge sg{reinterpret_cast<uint64_t>(s.source()), uint32_t(size), s.mr->lkey()};
  SendWr wr;
  wr.wr_id = kSendId;
  wr.opcode = t == Test::kSend ? WrOpcode::kSend : t == Test::kWrite ? WrOpcode::kWrite : WrOpcode::kRead;
  wr.flags = signaled ? kSendSignaled : 0;
  if (t != Test::kRead && size <= s.qp->cap().max_inline_data) wr.flags |= kSendInline;
  wr.sg = std::span(&sg, 1);
  wr.remote_addr = s.remote_addr;
  wr.rkey = s.remote_rkey;
  if (int e = s.qp->post_send(wr)) return err(e, "post_send");
  return ok();
}

// Polls until `want` receive completions (or send completions if want_send);
// counts the other kind along the way.
struct Counts {
  uint64_t sends = 0, recvs = 0;
};
Result<void> poll_until(Side& s, Counts& c, uint64_t sends, uint64_t recvs, size_t repost_size = 0) {
  Watchdog w;
  Wc wc[16];
  while (c.sends < sends || c.recvs < recvs) {
    int n = s.cq->poll(wc);
    if (n == 0) {
      if (w.expired()) return err(ETIMEDOUT, "no completion for 30 s ({} sends, {} receives)", c.sends, c.recvs);
      continue;
    }
    w.progress();
    for (int i = 0; i < n; ++i) {
      if (wc[i].status != kWcSuccess) return wc_error(wc[i]);
      if (wc[i].opcode & kWcRecv) {
        ++c.recvs;
        --s.posted_recvs;
        if (repost_size) OPENIB_TRY(post_recv(s, repost_size));
      } else {
        ++c.sends;
      }
    }
  }
  return ok();
}

LatResult summarize(std::vector<double>& v, size_t bytes, uint64_t iters) {
  LatResult r;
  r.bytes = bytes;
  r.iters = iters;
  if (v.empty()) return r;
  std::sort(v.begin(), v.end());
  double sum = 0, sq = 0;
  for (double x : v) sum += x;
  r.t_avg = sum / double(v.size());
  for (double x : v) sq += (x - r.t_avg) * (x - r.t_avg);
  r.t_stdev = std::sqrt(sq / double(v.size()));
  r.t_min = v.front();
  r.t_max = v.back();
  r.t_typical = v[v.size() / 2];
  auto pct = [&](double q) { return v[std::min(v.size() - 1, size_t(std::ceil(q * double(v.size()))) - 1)]; };
  r.p99 = pct(0.99);
  r.p999 = pct(0.999);
  return r;
}

}  // namespace

const char* test_name(Test t) { return t == Test::kSend ? "Send" : t == Test::kWrite ? "RDMA_Write" : "RDMA_Read"; }

Side::Dest Side::dest() const {
  return {lid, qp->qp_num(), psn, mr->rkey(), reinterpret_cast<uint64_t>(target())};
}

Result<std::unique_ptr<Side>> make_side(Context& ctx, size_t max_size, uint32_t depth, uint8_t port,
                                        uint32_t max_inline) {
  auto s = std::make_unique<Side>();
  s->max_size = std::max<size_t>(max_size, 8);
  s->depth = depth;
  OPENIB_TRY_ASSIGN(PortAttr pa, ctx.query_port(port));
  OPENIB_TRY_ASSIGN(DeviceAttr da, ctx.query_device());
  s->lid = pa.lid;
  s->max_rd_atomic = std::max<uint8_t>(da.max_rd_atomic, 1);
  s->max_dest_rd_atomic = std::max<uint8_t>(da.max_dest_rd_atomic, 1);
  s->psn = std::random_device{}() & 0xffffff;
  OPENIB_TRY_ASSIGN(s->pd, ctx.alloc_pd());
  OPENIB_TRY_ASSIGN(s->cq, ctx.create_cq(2 * depth + 2));
  QpInit init;
  init.type = QpType::kRc;
  init.send_cq = init.recv_cq = s->cq.get();
  init.cap.max_send_wr = depth;
  init.cap.max_recv_wr = depth;
  init.cap.max_inline_data = std::min<uint32_t>(max_inline, da.max_inline);
  OPENIB_TRY_ASSIGN(s->qp, ctx.create_qp(*s->pd, init));
  OPENIB_TRY_ASSIGN(s->mr, ctx.alloc_mr(*s->pd, 2 * s->max_size,
                                        kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead));
  return s;
}

Result<void> connect(Side& s, const Side::Dest& peer, uint8_t port, Mtu mtu) {
  s.remote_addr = peer.addr;
  s.remote_rkey = peer.rkey;
  QpAttr a;
  a.state = QpState::kInit;
  a.port = port;
  a.access = kAccessRemoteWrite | kAccessRemoteRead;
  OPENIB_TRY(s.qp->modify(a, qp_attr::kState | qp_attr::kPkeyIndex | qp_attr::kPort | qp_attr::kAccessFlags));
  a = {};
  a.state = QpState::kRtr;
  a.path_mtu = mtu;
  a.dest_qpn = peer.qpn;
  a.rq_psn = peer.psn;
  a.max_dest_rd_atomic = s.max_dest_rd_atomic;
  a.min_rnr_timer = 1;
  a.av.dlid = peer.lid;
  a.av.port = port;
  OPENIB_TRY(s.qp->modify(a, qp_attr::kState | qp_attr::kAv | qp_attr::kPathMtu | qp_attr::kDestQpn |
                                 qp_attr::kRqPsn | qp_attr::kMaxDestRdAtomic | qp_attr::kMinRnrTimer));
  a.state = QpState::kRts;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.sq_psn = s.psn;
  a.max_rd_atomic = s.max_rd_atomic;
  return s.qp->modify(a, qp_attr::kState | qp_attr::kTimeout | qp_attr::kRetryCnt | qp_attr::kRnrRetry |
                             qp_attr::kSqPsn | qp_attr::kMaxQpRdAtomic);
}

Result<void> prepare(const Params& p, Side& s) {
  if (p.size > s.max_size || p.size == 0) return err(EINVAL, "message size {} outside 1..{}", p.size, s.max_size);
  if (p.test == Test::kWrite) s.target()[p.size - 1] = 0;  // ib_write_lat's polled byte
  if (p.test == Test::kSend)
    while (s.posted_recvs < s.depth) OPENIB_TRY(post_recv(s, s.max_size));
  return ok();
}

Result<LatResult> run_lat(const Params& p, Side& s, bool initiator) {
  if (p.iters == 0) return err(EINVAL, "0 iterations");
  std::vector<double> stamps;
  stamps.reserve(p.iters + 1);
  Counts c;
  if (p.test == Test::kRead) {
    if (!initiator) return LatResult{p.size, p.iters};
    std::vector<double> v;
    v.reserve(p.iters);
    for (uint64_t i = 0; i < p.iters; ++i) {
      const double t0 = now_us();
      OPENIB_TRY(post(s, Test::kRead, p.size));
      OPENIB_TRY(poll_until(s, c, i + 1, 0));
      v.push_back(now_us() - t0);  // ib_read_lat: the whole round trip
    }
    return summarize(v, p.size, p.iters);
  }
  if (p.test == Test::kSend) {
    // ib_send_lat: ping-pong; each side sends after it received.
    for (uint64_t i = 0; i < p.iters; ++i) {
      if (!initiator) OPENIB_TRY(poll_until(s, c, c.sends, i + 1, s.max_size));
      stamps.push_back(now_us());
      OPENIB_TRY(post(s, Test::kSend, p.size));
      if (initiator) OPENIB_TRY(poll_until(s, c, c.sends, i + 1, s.max_size));
    }
    stamps.push_back(now_us());
    OPENIB_TRY(poll_until(s, c, p.iters, p.iters));
  } else {
    // ib_write_lat: write the peer's last byte, spin on ours.
    volatile uint8_t* mine = s.target() + p.size - 1;
    uint8_t* out = s.source() + p.size - 1;
    uint64_t scnt = 0, rcnt = 0;
    while (scnt < p.iters || rcnt < p.iters) {
      if (rcnt < p.iters && !(scnt < 1 && initiator)) {
        ++rcnt;
        Watchdog w;
        while (*mine != uint8_t(rcnt))
          if (w.expired()) return err(ETIMEDOUT, "WRITE {} from the peer did not arrive in 30 s", rcnt);
      }
      if (scnt < p.iters) {
        ++scnt;
        *out = uint8_t(scnt);
        stamps.push_back(now_us());
        OPENIB_TRY(post(s, Test::kWrite, p.size));
        OPENIB_TRY(poll_until(s, c, scnt, 0));
      }
    }
    stamps.push_back(now_us());
  }
  std::vector<double> v;
  v.reserve(stamps.size());
  for (size_t i = 1; i < stamps.size(); ++i) v.push_back((stamps[i] - stamps[i - 1]) / 2);  // half round trip
  return summarize(v, p.size, p.iters);
}

Result<BwResult> run_bw(const Params& p, Side& s, bool initiator) {
  BwResult r{p.size, p.iters};
  if (p.iters == 0) return err(EINVAL, "0 iterations");
  Counts c;
  if (!initiator) {
    if (p.test == Test::kSend) OPENIB_TRY(poll_until(s, c, 0, p.iters, s.max_size));
    return r;
  }
  const uint32_t window = std::max<uint32_t>(1, std::min<uint32_t>(p.window, s.qp->cap().max_send_wr));
  std::vector<double> done(p.iters);
  uint64_t posted = 0;
  Watchdog w;
  Wc wc[16];
  const double t0 = now_us();
  while (c.sends < p.iters) {
    while (posted < p.iters && posted - c.sends < window) {
      OPENIB_TRY(post(s, p.test, p.size));
      ++posted;
    }
    int n = s.cq->poll(wc);
    if (n == 0) {
      if (w.expired()) return err(ETIMEDOUT, "no completion for 30 s ({} of {})", c.sends, p.iters);
      continue;
    }
    w.progress();
    const double t = now_us();
    for (int i = 0; i < n; ++i) {
      if (wc[i].status != kWcSuccess) return wc_error(wc[i]);
      done[c.sends++] = t;
    }
  }
  const double total = done.back() - t0;
  constexpr double kMB = 1 << 20;
  r.bw_avg = double(p.size) * double(p.iters) / total * 1e6 / kMB;
  r.msg_rate = double(p.iters) / total;
  // Peak: the best window of consecutive completions.
  double best = total / double(p.iters);
  const uint64_t span = std::min<uint64_t>(window, p.iters);
  for (uint64_t i = span; i < p.iters; ++i) best = std::min(best, (done[i] - done[i - span]) / double(span));
  if (p.iters <= span) best = total / double(p.iters);
  r.bw_peak = std::max(r.bw_avg, double(p.size) / best * 1e6 / kMB);
  return r;
}

void print_lat_header() {
  std::printf("---------------------------------------------------------------------------------------\n");
  std::printf(" #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    "
              "t_stdev[usec]   99%% percentile[usec]   99.9%% percentile[usec] \n");
}
void print_lat(const LatResult& r) {
  std::printf(" %-7zu %-10" PRIu64 "  %-7.2f        %-7.2f      %-7.2f  \t%-7.2f     \t%-7.2f\t\t%-7.2f\t\t%-7.2f\n",
              r.bytes, r.iters, r.t_min, r.t_max, r.t_typical, r.t_avg, r.t_stdev, r.p99, r.p999);
}
void print_bw_header() {
  std::printf("---------------------------------------------------------------------------------------\n");
  std::printf(" #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n");
}
void print_bw(const BwResult& r) {
  std::printf(" %-7zu    %-10" PRIu64 "       %-7.2f            %-7.2f\t\t   %-7.6f\n", r.bytes, r.iters, r.bw_peak,
              r.bw_avg, r.msg_rate);
}

}  // namespace openib::perf
