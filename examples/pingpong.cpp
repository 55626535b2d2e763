// openib-rc-pingpong / openib-ud-pingpong: ibv_rc_pingpong and
// ibv_ud_pingpong on libopenib (built twice, OPENIB_PP_UD selects UD).
// Same flags where they fit, same TCP exchange format, same result lines;
// every received message is checked against the sender's fill pattern.
//   server: openib-rc-pingpong [flags]
//   client: openib-rc-pingpong [flags] SERVERHOST
#include <sys/time.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cinttypes>
#include <limits>
#include <random>

#include "common.hpp"

using namespace openib;
using namespace openib::examples;

#ifdef OPENIB_PP_UD
constexpr bool kUd = true;
constexpr const char* kName = "openib-ud-pingpong";
#else
constexpr bool kUd = false;
constexpr const char* kName = "openib-rc-pingpong";
#endif
constexpr uint64_t kRecvWrid = 1, kSendWrid = 2;
constexpr size_t kGrh = 40;  // UD receive buffers start with room for a GRH (IBA 11.4.1.1)
constexpr uint32_t kQkey = 0x11111111;

struct Opts {
  int port = 18515, ib_port = 1, size = kUd ? 2048 : 4096, mtu = 1024, rx_depth = 500, iters = 1000;
  int sl = 0, gid_idx = -1, poll_yield = -1;
  bool events = false;
  std::string ib_dev, socket, host;
};

int main(int argc, char** argv) {
  Opts o;
  CLI::App app{std::string(kName) + ": ping-pong over " + (kUd ? "UD" : "RC") + " through ibd (like ibv_" +
               (kUd ? "ud" : "rc") + "_pingpong)"};
  app.add_option("-p,--port", o.port, "listen on/connect to TCP port (default 18515)");
  app.add_option("-d,--ib-dev", o.ib_dev, "IB device, by name (default $OPENIB_DEVICE, else ibd's first)");
  app.add_option("-i,--ib-port", o.ib_port, "port of the IB device (default 1)");
  app.add_option("-s,--size", o.size, "size of message to exchange");
  if (!kUd) app.add_option("-m,--mtu", o.mtu, "path MTU (default 1024)");
  app.add_option("-r,--rx-depth", o.rx_depth, "number of receives to post at a time (default 500)");
  app.add_option("-n,--iters", o.iters, "number of exchanges (default 1000)");
  app.add_option("-l,--sl", o.sl, "service level value (default 0)");
  app.add_flag("-e,--events", o.events, "sleep on CQ events (default poll)");
  app.add_option("-g,--gid-idx", o.gid_idx, "local port gid index (default: no GRH)");
  bool chk = false;
  app.add_flag("-c,--chk", chk, "validate received buffer (always on)");
  app.add_option("--poll-yield", o.poll_yield,
                 "yield the CPU after N empty CQ polls, 0 never (default $OPENIB_POLL_YIELD, else 64)")
      ->check(CLI::Range(0, std::numeric_limits<int>::max()));
  app.add_option("--socket", o.socket, "ibd's socket (default $OPENIB_SOCKET, else /run/ibd/ibd.sock)");
  app.add_option("SERVERHOST", o.host, "the server to connect to (none: be the server)");
  CLI11_PARSE(app, argc, argv);
  if (o.size <= 0 || o.iters <= 0 || o.rx_depth <= 1) die("size, iters must be positive and rx-depth > 1");
  const int side = o.host.empty() ? 0 : 1;

  ContextOptions copts;
  copts.socket = o.socket;
  copts.device = o.ib_dev;
  copts.poll_yield = o.poll_yield;
  auto ctx = check(Context::open(copts), "Couldn't open ibd's device");
  const PortAttr pattr = check(ctx->query_port(uint8_t(o.ib_port)), "Couldn't get port info");
  if (kUd && o.size > mtu_bytes(pattr.active_mtu))
    die("Requested size larger than port MTU (" + std::to_string(mtu_bytes(pattr.active_mtu)) + ")");
  if (pattr.lid == 0 && o.gid_idx < 0) die("Couldn't get local LID (port not active? give -g)");

  auto pd = check(ctx->alloc_pd(), "Couldn't allocate PD");
  const size_t rbytes = size_t(o.size) + (kUd ? kGrh : 0);
  auto mr = check(ctx->alloc_mr(*pd, rbytes + size_t(o.size), kAccessLocalWrite), "Couldn't register MR");
  auto* rbuf = static_cast<uint8_t*>(mr->addr());
  uint8_t* sbuf = rbuf + rbytes;
  std::unique_ptr<CompChannel> channel;
  if (o.events) channel = check(ctx->create_comp_channel(), "Couldn't create completion channel");
  auto cq = check(ctx->create_cq(uint32_t(o.rx_depth + 1), channel.get()), "Couldn't create CQ");
  QpInit init;
  init.type = kUd ? QpType::kUd : QpType::kRc;
  init.send_cq = init.recv_cq = cq.get();
  init.cap.max_send_wr = 1;
  init.cap.max_recv_wr = uint32_t(o.rx_depth);
  auto qp = check(ctx->create_qp(*pd, init), "Couldn't create QP");

  QpAttr a;
  a.state = QpState::kInit;
  a.pkey_index = 0;
  a.port = uint8_t(o.ib_port);
  uint32_t mask = qp_attr::kState | qp_attr::kPkeyIndex | qp_attr::kPort;
  if (kUd) {
    a.qkey = kQkey;
    mask |= qp_attr::kQkey;
  } else {
    a.access = 0;
    mask |= qp_attr::kAccessFlags;
  }
  check(qp->modify(a, mask), "Failed to modify QP to INIT");

  // Receives first, so the peer may send as soon as it knows our QPN.
  int routs = 0;
  auto post_recvs = [&](int n) {
    Sge sg{reinterpret_cast<uint64_t>(rbuf), uint32_t(rbytes), mr->lkey()};
    RecvWr wr{kRecvWrid, std::span(&sg, 1)};
    int i = 0;
    for (; i < n; ++i)
      if (qp->post_recv(wr)) break;
    return i;
  };
  routs = post_recvs(o.rx_depth);
  if (routs < o.rx_depth) die("Couldn't post receive (" + std::to_string(routs) + ")");
  if (o.events) check(cq->req_notify(false), "Couldn't request CQ notification");

  PpDest my;
  my.lid = pattr.lid;
  my.qpn = qp->qp_num();
  my.psn = std::random_device{}() & 0xffffff;
  if (o.gid_idx >= 0) my.gid = check(ctx->query_gid(uint8_t(o.ib_port), o.gid_idx), "can't read sgid");
  std::printf("  local address:  LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %s\n", my.lid, my.qpn, my.psn,
              gid_str(my.gid).c_str());

  int sock = tcp_connect(o.host, o.port);
  if (sock < 0) die("Couldn't connect to the peer over TCP");
  PpDest rem;
  if (side == 1) {
    if (!send_dest(sock, my) || !recv_dest(sock, rem)) die("Couldn't exchange addresses with the server (connect)");
  } else {
    if (!recv_dest(sock, rem)) die("Couldn't read the client's address");
  }
  std::printf("  remote address: LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %s\n", rem.lid, rem.qpn, rem.psn,
              gid_str(rem.gid).c_str());

  AddressVector av;
  av.dlid = rem.lid;
  av.sl = uint8_t(o.sl);
  av.port = uint8_t(o.ib_port);
  if (o.gid_idx >= 0) {
    av.grh = true;
    av.dgid = rem.gid;
    av.hop_limit = 1;
    av.sgid_index = uint8_t(o.gid_idx);
  }
  std::unique_ptr<Ah> ah;
  if (kUd) {
    a = {};
    a.state = QpState::kRtr;
    check(qp->modify(a, qp_attr::kState), "Failed to modify QP to RTR");
    a.state = QpState::kRts;
    a.sq_psn = my.psn;
    check(qp->modify(a, qp_attr::kState | qp_attr::kSqPsn), "Failed to modify QP to RTS");
    ah = check(ctx->create_ah(*pd, av), "Failed to create AH");
  } else {
    a = {};
    a.state = QpState::kRtr;
    a.path_mtu = mtu_from_bytes(o.mtu);
    a.dest_qpn = rem.qpn;
    a.rq_psn = rem.psn;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 12;
    a.av = av;
    check(qp->modify(a, qp_attr::kState | qp_attr::kAv | qp_attr::kPathMtu | qp_attr::kDestQpn |
                            qp_attr::kRqPsn | qp_attr::kMaxDestRdAtomic | qp_attr::kMinRnrTimer),
          "Failed to modify QP to RTR");
    a.state = QpState::kRts;
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.sq_psn = my.psn;
    a.max_rd_atomic = 1;
    check(qp->modify(a, qp_attr::kState | qp_attr::kTimeout | qp_attr::kRetryCnt | qp_attr::kRnrRetry |
                            qp_attr::kSqPsn | qp_attr::kMaxQpRdAtomic),
          "Failed to modify QP to RTS");
  }
  // ibv_rc_pingpong's handshake: the server answers once its QP is ready,
  // the client says "done" once it read that.
  char done[sizeof "done"];
  if (side == 0) {
    if (!send_dest(sock, my) || !read_all(sock, done, sizeof done)) die("Couldn't finish the exchange with the client");
  } else {
    if (!write_all(sock, "done", sizeof "done")) die("Couldn't finish the exchange with the server");
  }

  auto post_send = [&](uint64_t n) {
    for (size_t i = 0; i < size_t(o.size); ++i) sbuf[i] = pattern(n, i, side);
    Sge sg{reinterpret_cast<uint64_t>(sbuf), uint32_t(o.size), mr->lkey()};
    SendWr wr;
    wr.wr_id = kSendWrid;
    wr.opcode = WrOpcode::kSend;
    wr.flags = kSendSignaled;
    wr.sg = std::span(&sg, 1);
    wr.ah = ah.get();
    wr.remote_qpn = rem.qpn;
    wr.remote_qkey = kQkey;
    if (int e = qp->post_send(wr)) die(std::string("Couldn't post send: ") + std::strerror(e));
  };

  const uint64_t iters = uint64_t(o.iters);
  uint64_t scnt = 0, rcnt = 0, pending = kRecvWrid;
  const auto start = std::chrono::steady_clock::now();
  if (side == 1) {
    post_send(0);
    pending |= kSendWrid;
  }
  auto last_progress = start;
  uint64_t idle = 0;
  while (rcnt < iters || scnt < iters) {
    if (o.events) {
      Cq* ev = check(channel->get_event(30000), "Failed to get cq_event");
      if (ev != cq.get()) die("CQ event for unknown CQ");
      check(cq->req_notify(false), "Couldn't request CQ notification");
    }
    Wc wc[2];
    int ne = cq->poll(wc);
    if (ne == 0) {
      cpu_relax();
      if (o.events || ++idle % 65536) continue;
      auto now = std::chrono::steady_clock::now();
      if (now - last_progress > std::chrono::seconds(30))
        die("no completion for 30 s (scnt " + std::to_string(scnt) + ", rcnt " + std::to_string(rcnt) + ")");
      continue;
    }
    last_progress = std::chrono::steady_clock::now();
    for (int i = 0; i < ne; ++i) {
      if (wc[i].status != kWcSuccess)
        die(std::string("Failed status ") + wc_status_str(wc[i].status) + " (" + std::to_string(wc[i].status) +
            ") for wr_id " + std::to_string(wc[i].wr_id));
      if (wc[i].wr_id == kSendWrid) {
        ++scnt;
      } else if (wc[i].wr_id == kRecvWrid) {
        const uint8_t* d = rbuf + (kUd ? kGrh : 0);
        if (wc[i].byte_len != uint32_t(o.size) + (kUd ? kGrh : 0))
          die("message " + std::to_string(rcnt) + ": " + std::to_string(wc[i].byte_len) + " bytes received");
        for (size_t k = 0; k < size_t(o.size); ++k)
          if (d[k] != pattern(rcnt, k, 1 - side))
            die("message " + std::to_string(rcnt) + ": data mismatch at byte " + std::to_string(k));
        if (--routs <= 1) {
          routs += post_recvs(o.rx_depth - routs);
          if (routs < o.rx_depth) die("Couldn't post receive (" + std::to_string(routs) + ")");
        }
        ++rcnt;
      } else {
        die("Completion for unknown wr_id " + std::to_string(wc[i].wr_id));
      }
      pending &= ~wc[i].wr_id;
      if (scnt < iters && !pending) {
        post_send(scnt);
        pending = kRecvWrid | kSendWrid;
      }
    }
  }
  const double usec =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
  const long long bytes = (long long)o.size * o.iters * 2;
  std::printf("%lld bytes in %.2f seconds = %.2f Mbit/sec\n", bytes, usec / 1e6, bytes * 8. / usec);
  std::printf("%d iters in %.2f seconds = %.2f usec/iter\n", o.iters, usec / 1e6, usec / o.iters);
  ::close(sock);
  return 0;
}
