// openib-cm-pingpong: an RC ping-pong whose connection the IB CM makes
// (docs/cm.md "Examples"), and with --ud a UD ping-pong whose peer QP is
// found by SIDR. No TCP side channel: the client names the server by its
// GID and a service ID; the path comes from ibd's path cache.
//   server: openib-cm-pingpong [flags]
//   client: openib-cm-pingpong [flags] --dgid GID
// Every message is checked against the sender's fill pattern. Other modes,
// for tests and bench/cm.sh:
//   --conns N [--inflight K] [--hold]   N connections (K in flight), each
//       established once and torn down; --hold opens all N before any
//       disconnect. Each id (and its QP) is destroyed once its DREQ is
//       answered (not with --hold), as rdma-core's cmtime destroys after
//       rdma_disconnect():
//       the CM keeps the timewait (IBA 12.9.8.2, about 2 s with OpenSM's
//       packet lifetime) for it, as TCP's close leaves TIME_WAIT to the
//       kernel; --timewait waits for each id's timewait exit instead.
//       Prints "connections: N established ...".
//   --reject TEXT (server)   every REQ rejected (reason 28) with TEXT.
//   --private TEXT (client)  REQ private data; the server echoes it in its REP.
#include <arpa/inet.h>
#include <poll.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cinttypes>
#include <map>
#include <random>

#include "common.hpp"
#include "openib/cm.hpp"

using namespace openib;
using namespace openib::examples;

namespace {

constexpr uint64_t kRecvWrid = 1, kSendWrid = 2;
constexpr size_t kGrh = 40;
constexpr uint32_t kUdQkey = 0x0C0FFEE;

struct Opts {
  uint64_t service_id = 0x0000000100000001ull;  // outside the ranges ibd reserves (docs/cm.md "Security")
  int ib_port = 1, size = 4096, iters = 1000, conns = 0, inflight = 100, serve = 0;
  int timeout_ms = 60000, cm_timeout = 16, cm_retries = 15;
  bool ud = false, hold = false, quiet = false, idle = false, timewait = false;
  std::string dgid, reject, priv, socket, wait_file;
};

std::vector<uint8_t> bytes_of(const std::string& s) { return {s.begin(), s.end()}; }
std::string text_of(const std::vector<uint8_t>& v) {
  std::string s(v.begin(), v.end());
  if (auto z = s.find('\0'); z != std::string::npos) s.resize(z);
  return s;
}

// One connection's QP and buffers.
struct Conn {
  std::unique_ptr<Cq> cq;
  std::unique_ptr<Qp> qp;
  std::unique_ptr<Mr> mr;
  bool established = false, disconnected = false;
};

struct Env {
  Opts o;
  std::unique_ptr<Context> ctx;
  std::unique_ptr<Pd> pd;
  std::unique_ptr<CmChannel> cm;
};

// `shared`: the CQ of every connection without data (--conns, --serve N),
// so that 10,000 of them fit the per-client CQ quota.
Conn make_conn(Env& e, QpType type, int depth, size_t bytes, Cq* shared = nullptr) {
  Conn c;
  if (!shared) c.cq = check(e.ctx->create_cq(uint32_t(2 * depth + 2)), "Couldn't create CQ");
  QpInit init;
  init.type = type;
  init.send_cq = init.recv_cq = shared ? shared : c.cq.get();
  init.cap.max_send_wr = uint32_t(depth);
  init.cap.max_recv_wr = uint32_t(depth);
  c.qp = check(e.ctx->create_qp(*e.pd, init), "Couldn't create QP");
  if (bytes) c.mr = check(e.ctx->alloc_mr(*e.pd, bytes, kAccessLocalWrite), "Couldn't register MR");
  return c;
}

CmEvent next_event(Env& e) {
  auto ev = e.cm->get_event(e.o.timeout_ms);
  if (!ev) die("CM event: " + ev.error().str());
  return std::move(*ev);
}

CmConnParams params(const Opts& o, std::vector<uint8_t> priv = {}) {
  CmConnParams p;
  p.private_data = std::move(priv);
  p.cm_response_timeout = uint8_t(o.cm_timeout);
  p.max_cm_retries = uint8_t(o.cm_retries);
  return p;
}

// The data exchange of one connection, as openib-rc-pingpong's (side 1 starts).
void pingpong(const Opts& o, Conn& c, int side, const AddressVector* av = nullptr, Ah* ah = nullptr,
              uint32_t rqpn = 0, uint32_t rqkey = 0) {
  const bool ud = av != nullptr;
  const size_t rbytes = size_t(o.size) + (ud ? kGrh : 0);
  auto* rbuf = static_cast<uint8_t*>(c.mr->addr());
  uint8_t* sbuf = rbuf + rbytes;
  Sge rsg{reinterpret_cast<uint64_t>(rbuf), uint32_t(rbytes), c.mr->lkey()};
  auto post_recv = [&] {
    RecvWr wr{kRecvWrid, std::span(&rsg, 1)};
    if (int err = c.qp->post_recv(wr)) die(std::string("Couldn't post receive: ") + std::strerror(err));
  };
  auto post_send = [&](uint64_t n) {
    for (size_t i = 0; i < size_t(o.size); ++i) sbuf[i] = pattern(n, i, side);
    Sge sg{reinterpret_cast<uint64_t>(sbuf), uint32_t(o.size), c.mr->lkey()};
    SendWr wr;
    wr.wr_id = kSendWrid;
    wr.sg = std::span(&sg, 1);
    wr.ah = ah;
    wr.remote_qpn = rqpn;
    wr.remote_qkey = rqkey;
    if (int err = c.qp->post_send(wr)) die(std::string("Couldn't post send: ") + std::strerror(err));
  };
  const uint64_t iters = uint64_t(o.iters);
  uint64_t scnt = 0, rcnt = 0;
  const auto start = std::chrono::steady_clock::now();
  auto last = start;
  // Side 1 sends message n after it received n-1 (and its send completed); side 0 answers each.
  bool send_done = true;
  if (side == 1) {
    post_send(0);
    send_done = false;
  }
  while (rcnt < iters || scnt < iters) {
    Wc wc[4];
    int ne = c.cq->poll(wc);
    if (ne == 0) {
      cpu_relax();
      if (std::chrono::steady_clock::now() - last > std::chrono::seconds(30))
        die("no completion for 30 s (sent " + std::to_string(scnt) + ", received " + std::to_string(rcnt) + ")");
      continue;
    }
    last = std::chrono::steady_clock::now();
    for (int i = 0; i < ne; ++i) {
      // Everything received: the peer may disconnect (its QP and so ours to
      // ERROR) before our last send's ACK is polled; a flush then ends it.
      if (wc[i].status == kWcWrFlushErr && rcnt == iters) {
        if (wc[i].wr_id == kSendWrid) ++scnt;
        continue;
      }
      if (wc[i].status != kWcSuccess)
        die(std::string("Failed status ") + wc_status_str(wc[i].status) + " for wr_id " + std::to_string(wc[i].wr_id));
      if (wc[i].wr_id == kSendWrid) {
        ++scnt;
        send_done = true;
      } else {
        const uint8_t* d = rbuf + (ud ? kGrh : 0);
        if (wc[i].byte_len != rbytes) die("message " + std::to_string(rcnt) + ": " + std::to_string(wc[i].byte_len) + " bytes");
        for (size_t k = 0; k < size_t(o.size); ++k)
          if (d[k] != pattern(rcnt, k, 1 - side)) die("message " + std::to_string(rcnt) + ": data mismatch at byte " + std::to_string(k));
        ++rcnt;
        if (rcnt < iters) post_recv();  // none left over to be flushed at the disconnect
        if (side == 0) {
          post_send(scnt);
          send_done = false;
        }
      }
      if (side == 1 && send_done && rcnt == scnt && scnt < iters) {
        post_send(scnt);
        send_done = false;
      }
    }
  }
  const double usec = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
  const long long bytes = (long long)o.size * o.iters * 2;
  std::printf("%lld bytes in %.2f seconds = %.2f Mbit/sec\n", bytes, usec / 1e6, bytes * 8. / usec);
  std::printf("%d iters in %.2f seconds = %.2f usec/iter\n", o.iters, usec / 1e6, usec / o.iters);
}

void post_recvs(const Opts& o, Conn& c, int n, bool ud) {
  const size_t rbytes = size_t(o.size) + (ud ? kGrh : 0);
  Sge sg{reinterpret_cast<uint64_t>(c.mr->addr()), uint32_t(rbytes), c.mr->lkey()};
  RecvWr wr{kRecvWrid, std::span(&sg, 1)};
  for (int i = 0; i < n; ++i)
    if (int err = c.qp->post_recv(wr)) die(std::string("Couldn't post receive: ") + std::strerror(err));
}

// ---- server ----------------------------------------------------------------------

int serve(Env& e) {
  const Opts& o = e.o;
  const uint32_t listener = check(e.cm->listen(uint8_t(o.ib_port), o.service_id, ~uint64_t{0}, o.ud), "Couldn't listen");
  std::printf("listening on service ID 0x%016" PRIx64 "%s\n", o.service_id, o.ud ? " (SIDR)" : "");
  std::fflush(stdout);
  if (o.ud) {
    // One UD QP answers every SIDR request, then ping-pongs with the first asker.
    Conn c = make_conn(e, QpType::kUd, 2, 2 * (size_t(o.size) + kGrh));
    QpAttr a;
    a.state = QpState::kInit;
    a.port = uint8_t(o.ib_port);
    a.qkey = kUdQkey;
    check(c.qp->modify(a, qp_attr::kState | qp_attr::kPkeyIndex | qp_attr::kPort | qp_attr::kQkey), "UD QP to INIT");
    a.state = QpState::kRtr;
    check(c.qp->modify(a, qp_attr::kState), "UD QP to RTR");
    a.state = QpState::kRts;
    a.sq_psn = 0;
    check(c.qp->modify(a, qp_attr::kState | qp_attr::kSqPsn), "UD QP to RTS");
    post_recvs(o, c, 1, true);
    CmEvent ev = next_event(e);
    if (ev.type != CmEventType::kSidrRequest) die(std::string("expected a SIDR request, got ") + cm_event_str(ev.type));
    std::printf("SIDR request from LID %u, private '%s'\n", ev.remote_lid, text_of(ev.private_data).c_str());
    check(e.cm->sidr_reply(ev.id, 0, c.qp.get(), kUdQkey, bytes_of(o.priv.empty() ? "sidr-ok" : o.priv)), "SIDR reply");
    // The client's QPN and LID come with its first message (its source).
    Wc wc{};
    auto start = std::chrono::steady_clock::now();
    while (c.cq->poll(std::span(&wc, 1)) == 0) {
      if (std::chrono::steady_clock::now() - start > std::chrono::seconds(30)) die("no UD message from the client");
      cpu_relax();
    }
    if (wc.status != kWcSuccess) die("UD receive failed");
    AddressVector av;
    av.dlid = wc.slid;
    av.sl = wc.sl;
    av.port = uint8_t(o.ib_port);
    auto ah = check(e.ctx->create_ah(*e.pd, av), "Couldn't create AH");
    // The first message was message 0: answer it and go on.
    const uint8_t* d = static_cast<uint8_t*>(c.mr->addr()) + kGrh;
    for (size_t k = 0; k < size_t(o.size); ++k)
      if (d[k] != pattern(0, k, 1)) die("UD message 0: data mismatch");
    // Re-run the exchange from message 0 with the client's QPN (it resends nothing: we answer first).
    post_recvs(o, c, 1, true);
    {
      auto* sbuf = static_cast<uint8_t*>(c.mr->addr()) + size_t(o.size) + kGrh;
      for (size_t i = 0; i < size_t(o.size); ++i) sbuf[i] = pattern(0, i, 0);
      Sge sg{reinterpret_cast<uint64_t>(sbuf), uint32_t(o.size), c.mr->lkey()};
      SendWr wr;
      wr.wr_id = kSendWrid;
      wr.sg = std::span(&sg, 1);
      wr.ah = ah.get();
      wr.remote_qpn = wc.src_qp;
      wr.remote_qkey = kUdQkey;
      if (int err = c.qp->post_send(wr)) die(std::string("Couldn't post send: ") + std::strerror(err));
    }
    // Message 0 is done both ways; the rest as the usual exchange shifted by one.
    uint64_t n = 1;
    auto last = std::chrono::steady_clock::now();
    while (n < uint64_t(o.iters)) {
      Wc w{};
      if (c.cq->poll(std::span(&w, 1)) == 0) {
        if (std::chrono::steady_clock::now() - last > std::chrono::seconds(30)) die("UD: no message for 30 s");
        cpu_relax();
        continue;
      }
      last = std::chrono::steady_clock::now();
      if (w.status != kWcSuccess) die("UD completion failed");
      if (w.wr_id == kSendWrid) continue;
      for (size_t k = 0; k < size_t(o.size); ++k)
        if (d[k] != pattern(n, k, 1)) die("UD message " + std::to_string(n) + ": data mismatch");
      post_recvs(o, c, 1, true);
      auto* sbuf = static_cast<uint8_t*>(c.mr->addr()) + size_t(o.size) + kGrh;
      for (size_t i = 0; i < size_t(o.size); ++i) sbuf[i] = pattern(n, i, 0);
      Sge sg{reinterpret_cast<uint64_t>(sbuf), uint32_t(o.size), c.mr->lkey()};
      SendWr wr;
      wr.wr_id = kSendWrid;
      wr.sg = std::span(&sg, 1);
      wr.ah = ah.get();
      wr.remote_qpn = w.src_qp;
      wr.remote_qkey = kUdQkey;
      if (int err = c.qp->post_send(wr)) die(std::string("Couldn't post send: ") + std::strerror(err));
      ++n;
    }
    std::printf("UD: %d messages answered\n", o.iters);
    return 0;
  }

  // RC: every REQ accepted (or rejected with --reject), each connection
  // ping-pongs (single mode) or only connects (--serve N / --conns).
  const bool data = o.serve == 0;
  std::unique_ptr<Cq> shared;  // before the connections: destroyed after them
  if (!data) shared = check(e.ctx->create_cq(16), "Couldn't create CQ");
  std::map<uint32_t, Conn> conns;
  int served = 0, established = 0, timewait = 0;
  const int want = data ? 1 : o.serve;
  while (timewait < want) {
    auto got = e.cm->get_event(o.timeout_ms);
    if (!got) {
      int est = 0, disc = 0;
      for (auto& [id, c] : conns) est += c.established, disc += c.disconnected;
      die("CM event: " + got.error().str() + "; server: " + std::to_string(established) + " established, " +
          std::to_string(timewait) + " done of " + std::to_string(want) + "; open: " + std::to_string(conns.size()) +
          " (" + std::to_string(est) + " established, " + std::to_string(disc) + " disconnect requests)");
    }
    CmEvent ev = std::move(*got);
    switch (ev.type) {
      case CmEventType::kRequest: {
        if (!o.quiet)
          std::printf("request: service 0x%016" PRIx64 " from QPN 0x%06x LID %u, private '%s'\n", ev.service_id,
                      ev.remote_qpn, ev.remote_lid, text_of(ev.private_data).c_str());
        if (!o.reject.empty()) {
          check(e.cm->reject(ev.id, cm_rej::kConsumerReject, bytes_of(o.reject)), "Couldn't reject");
          check(e.cm->destroy(ev.id), "Couldn't destroy the id");
          if (++served >= want) return 0;
          break;
        }
        Conn c = make_conn(e, QpType::kRc, data ? 2 : 1, data ? 2 * size_t(o.size) : 0, shared.get());
        if (data) post_recvs(o, c, 1, false);
        check(e.cm->accept(ev.id, *c.qp, params(o, ev.private_data)), "Couldn't accept");
        conns.emplace(ev.id, std::move(c));
        break;
      }
      case CmEventType::kEstablished: {
        auto it = conns.find(ev.id);
        if (it == conns.end()) die("established: unknown id");
        if (it->second.established) die("connection established twice");
        it->second.established = true;
        ++established;
        if (!o.quiet) std::printf("established\n");
        std::fflush(stdout);
        if (data) pingpong(o, it->second, 0);
        break;
      }
      case CmEventType::kDisconnectRequest:
        if (auto it = conns.find(ev.id); it != conns.end()) it->second.disconnected = true;
        if (!o.quiet) std::printf("disconnect request%s\n", ev.status ? " (stale)" : "");
        std::fflush(stdout);
        break;
      case CmEventType::kTimewaitExit:
        conns.erase(ev.id);
        check(e.cm->destroy(ev.id), "Couldn't destroy the id");
        ++timewait;
        break;
      case CmEventType::kRejected:
      case CmEventType::kTimeout:
      case CmEventType::kError:
        std::printf("%s on id %u (status %d, reason %u)\n", cm_event_str(ev.type), ev.id, ev.status, ev.reason);
        conns.erase(ev.id);
        (void)e.cm->destroy(ev.id);
        ++timewait;
        break;
      default:
        break;
    }
  }
  (void)listener;
  std::printf("server: %d established, %d done\n", established, timewait);
  return 0;
}

// ---- client ------------------------------------------------------------------------

PathRecord resolve(Env& e) {
  PathQuery q;
  if (::inet_pton(AF_INET6, e.o.dgid.c_str(), q.dgid.raw.data()) != 1) die("not a GID: " + e.o.dgid);
  q.port = uint8_t(e.o.ib_port);
  auto r = check(PathResolver::open(*e.ctx), "Couldn't open the path resolver");
  return check(r->resolve(q), "No path to the server");
}

int client_ud(Env& e, const PathRecord& path) {
  const Opts& o = e.o;
  const uint32_t id = check(e.cm->sidr_query(path, o.service_id, bytes_of(o.priv.empty() ? "hello" : o.priv),
                                             uint8_t(o.ib_port)),
                            "SIDR query");
  CmEvent ev = next_event(e);
  if (ev.type == CmEventType::kTimeout) {
    std::printf("timeout: no SIDR reply\n");
    return 3;
  }
  if (ev.type != CmEventType::kSidrReply || ev.id != id) die(std::string("expected a SIDR reply, got ") + cm_event_str(ev.type));
  std::printf("SIDR reply: status %u, QPN 0x%06x, Q_Key 0x%08x, private '%s'\n", ev.sidr_status, ev.remote_qpn, ev.qkey,
              text_of(ev.private_data).c_str());
  (void)e.cm->destroy(id);
  if (ev.sidr_status != 0) return 2;
  Conn c = make_conn(e, QpType::kUd, 2, 2 * (size_t(o.size) + kGrh));
  QpAttr a;
  a.state = QpState::kInit;
  a.port = uint8_t(o.ib_port);
  a.qkey = ev.qkey;
  check(c.qp->modify(a, qp_attr::kState | qp_attr::kPkeyIndex | qp_attr::kPort | qp_attr::kQkey), "UD QP to INIT");
  a.state = QpState::kRtr;
  check(c.qp->modify(a, qp_attr::kState), "UD QP to RTR");
  a.state = QpState::kRts;
  check(c.qp->modify(a, qp_attr::kState | qp_attr::kSqPsn), "UD QP to RTS");
  post_recvs(o, c, 1, true);
  AddressVector av;
  av.dlid = path.dlid;
  av.sl = path.sl;
  av.port = uint8_t(o.ib_port);
  auto ah = check(e.ctx->create_ah(*e.pd, av), "Couldn't create AH");
  pingpong(o, c, 1, &av, ah.get(), ev.remote_qpn, ev.qkey);
  return 0;
}

int client_one(Env& e, const PathRecord& path) {
  const Opts& o = e.o;
  Conn c = make_conn(e, QpType::kRc, 2, 2 * size_t(o.size));
  post_recvs(o, c, 1, false);
  const uint32_t id = check(e.cm->connect(*c.qp, path, o.service_id, params(o, bytes_of(o.priv)), uint8_t(o.ib_port)),
                            "Couldn't connect");
  for (;;) {
    CmEvent ev = next_event(e);
    if (ev.id != id) die("event for another id");
    switch (ev.type) {
      case CmEventType::kReply:
        std::printf("reply: QPN 0x%06x, private '%s'\n", ev.remote_qpn, text_of(ev.private_data).c_str());
        break;
      case CmEventType::kMraReceived:
        std::printf("MRA received\n");
        break;
      case CmEventType::kEstablished:
        std::printf("established\n");
        std::fflush(stdout);
        if (o.idle) break;  // the peer ends it
        pingpong(o, c, 1);
        check(e.cm->disconnect(id), "Couldn't disconnect");
        break;
      case CmEventType::kDisconnected:
        std::printf("disconnected%s\n", ev.status ? " (DREQ unanswered)" : "");
        break;
      case CmEventType::kDisconnectRequest:
        std::printf("disconnect request%s\n", ev.status == ESTALE ? " (stale)" : "");
        std::fflush(stdout);
        break;
      case CmEventType::kTimewaitExit:
        std::printf("timewait exit\n");
        (void)e.cm->destroy(id);
        return 0;
      case CmEventType::kRejected:
        std::printf("rejected: reason %u, private '%s'\n", ev.reason, text_of(ev.private_data).c_str());
        return 2;
      case CmEventType::kTimeout:
        std::printf("timeout: status %d\n", ev.status);
        return 3;
      default:
        die(std::string("unexpected CM event ") + cm_event_str(ev.type) + " status " + std::to_string(ev.status));
    }
  }
}

// N connections, K in flight: each established exactly once, then torn down.
int client_many(Env& e, const PathRecord& path) {
  const Opts& o = e.o;
  auto shared = check(e.ctx->create_cq(16), "Couldn't create CQ");  // outlives the connections
  std::map<uint32_t, Conn> conns;
  int started = 0, established = 0, disconnected = 0, finished = 0, rejected = 0, timeouts = 0, connecting = 0;
  std::vector<uint32_t> held;
  const auto t0 = std::chrono::steady_clock::now();
  auto start_some = [&] {
    while (started < o.conns && connecting < o.inflight) {
      Conn c = make_conn(e, QpType::kRc, 1, 0, shared.get());
      auto id = e.cm->connect(*c.qp, path, o.service_id, params(o), uint8_t(o.ib_port));
      if (!id) die("connect " + std::to_string(started) + ": " + id.error().str());
      conns.emplace(*id, std::move(c));
      ++started;
      ++connecting;
    }
  };
  start_some();
  double established_at = 0;
  while (finished < o.conns) {
    CmEvent ev = next_event(e);
    auto it = conns.find(ev.id);
    if (it == conns.end()) die(std::string("event ") + cm_event_str(ev.type) + " for an unknown id");
    Conn& c = it->second;
    switch (ev.type) {
      case CmEventType::kReply:
      case CmEventType::kMraReceived:
        break;
      case CmEventType::kEstablished:
        if (c.established) die("a connection was established twice");
        c.established = true;
        ++established;
        --connecting;
        if (o.hold) {
          held.push_back(ev.id);
          if (established == o.conns) {
            established_at = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            std::printf("holding %d connections\n", established);
            std::fflush(stdout);
            if (const char* f = std::getenv("OPENIB_CM_HOLD_FILE")) {  // the test samples ibd meanwhile
              if (FILE* fp = std::fopen(f, "w")) std::fclose(fp);
              for (int i = 0; i < 600 && ::access(f, F_OK) == 0; ++i) ::usleep(100000);
            }
            for (uint32_t h : held) check(e.cm->disconnect(h), "Couldn't disconnect");
          }
        } else {
          check(e.cm->disconnect(ev.id), "Couldn't disconnect");
        }
        break;
      case CmEventType::kDisconnected:
      case CmEventType::kDisconnectRequest:
        if (c.disconnected) break;
        c.disconnected = true;
        ++disconnected;
        // --hold disconnects all N at once: their ids go at timewait exit, so
        // that this loop keeps up with the N disconnect events ibd queues
        // (a destroy per event would let the queue outgrow the client's
        // event budget: --client-max-event-bytes, docs/cm.md).
        if (o.timewait || o.hold) break;
        // The id goes now; the CM answers a DREQ and keeps the timewait.
        check(e.cm->destroy(ev.id), "Couldn't destroy the id");
        conns.erase(it);
        ++finished;
        break;
      case CmEventType::kTimewaitExit:
        (void)e.cm->destroy(ev.id);
        conns.erase(it);
        ++finished;
        break;
      case CmEventType::kRejected:
      case CmEventType::kTimeout:
      case CmEventType::kError:
        if (ev.type == CmEventType::kRejected) ++rejected;
        else ++timeouts;
        std::printf("%s: status %d reason %u\n", cm_event_str(ev.type), ev.status, ev.reason);
        (void)e.cm->destroy(ev.id);
        if (!c.established) --connecting;
        conns.erase(it);
        ++finished;
        break;
      default:
        die(std::string("unexpected CM event ") + cm_event_str(ev.type));
    }
    start_some();
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("connections: %d established, %d disconnected, %d rejected, %d failed in %.2f s = %.1f conn/s\n",
              established, disconnected, rejected, timeouts, secs, established / secs);
  if (o.hold) std::printf("all %d open after %.2f s\n", established, established_at);
  return established == o.conns ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  Env e;
  Opts& o = e.o;
  CLI::App app{"openib-cm-pingpong: an RC ping-pong connected by the IB CM (or UD through SIDR)"};
  app.add_option("--dgid", o.dgid, "the server's GID (IPv6 notation); none: be the server");
  app.add_option("-S,--service-id", o.service_id, "service ID (default 0x0000000100000001)");
  app.add_option("-i,--ib-port", o.ib_port, "port (default 1)");
  app.add_option("-s,--size", o.size, "message size (default 4096)");
  app.add_option("-n,--iters", o.iters, "number of exchanges (default 1000)");
  app.add_flag("--ud", o.ud, "UD: find the server's QP by SIDR, then ping-pong");
  app.add_option("--conns", o.conns, "client: N connections without data (0: one with ping-pong)");
  app.add_option("--inflight", o.inflight, "client: connections being made at once (default 100)");
  app.add_flag("--hold", o.hold, "client: all N open before any is disconnected");
  app.add_flag("--timewait", o.timewait, "client --conns: destroy each id at its timewait exit, not at its DREP");
  app.add_flag("--idle", o.idle, "client: no data; wait until the peer disconnects");
  app.add_option("--serve", o.serve, "server: serve N connections without data, then exit (0: one with ping-pong)");
  app.add_option("--reject", o.reject, "server: reject every REQ with this private data");
  app.add_option("--private", o.priv, "client: REQ (SIDR_REQ) private data; server (SIDR): SIDR_REP's");
  app.add_option("--cm-timeout", o.cm_timeout, "CM response timeout exponent (4.096 us * 2^t, default 16)");
  app.add_option("--cm-retries", o.cm_retries, "max CM retries (default 15)");
  app.add_option("--timeout-ms", o.timeout_ms, "longest wait for a CM event (default 60000)");
  app.add_flag("-q,--quiet", o.quiet, "no line per connection");
  app.add_option("--wait-file", o.wait_file, "client: resolve the path, then wait until FILE is gone (at most 120 s)");
  app.add_option("--socket", o.socket, "ibd's socket (default $OPENIB_SOCKET, else /run/ibd/ibd.sock)");
  CLI11_PARSE(app, argc, argv);
  if (o.size <= 0 || o.iters <= 0 || o.inflight <= 0) die("size, iters and inflight must be positive");
  if (o.ud && o.size > 2048) o.size = 2048;
  ContextOptions copts;
  copts.socket = o.socket;
  e.ctx = check(Context::open(copts), "Couldn't open ibd's device");
  e.pd = check(e.ctx->alloc_pd(), "Couldn't allocate PD");
  e.cm = check(CmChannel::open(*e.ctx), "Couldn't open the CM channel");
  if (o.dgid.empty()) return serve(e);
  const PathRecord path = resolve(e);
  if (!o.wait_file.empty()) {  // the path is known: connect once the file is gone (tests stop the peer meanwhile)
    std::printf("path resolved\n");
    std::fflush(stdout);
    for (int i = 0; i < 1200 && ::access(o.wait_file.c_str(), F_OK) == 0; ++i) ::usleep(100000);
  }
  if (o.ud) return client_ud(e, path);
  if (o.conns > 0) return client_many(e, path);
  return client_one(e, path);
}
