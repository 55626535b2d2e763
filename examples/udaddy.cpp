// openib-udaddy: rdmacm-utils' udaddy over libopenib's RDMA CM (docs/cma.md
// "Examples"): UD peers in the UDP port space, found through SIDR. The
// client resolves the server's address and route, brings its UD QP up
// (init_qp: Q_Key 0x01234567) and connects; kEstablished carries the
// server's QPN, Q_Key and address vector. It then sends -C messages one at
// a time, each answered by the server (to the sender the completion names)
// and checked byte for byte on both sides.
//   server: openib-udaddy [-b ADDR] [-p PORT] [-C COUNT]
//   client: openib-udaddy -s SERVER [-b ADDR] [-p PORT] [-C COUNT] [-S SIZE]
// Every wait is bounded (--timeout seconds per event or message); any
// failure exits 1 with a message.
#include <CLI/CLI.hpp>
#include <map>

#include "cma_common.hpp"

using namespace openib;
using namespace openib::examples;

namespace {

constexpr uint64_t kSendWrid = 1u << 20;
constexpr int kClientSide = 1, kServerSide = 0;

struct Opts {
  std::string server, bind, socket;
  int port = 7174, count = 10, size = 100;
  double timeout_s = 10;
};

struct Ud {
  std::unique_ptr<Cq> cq;
  std::unique_ptr<Qp> qp;
  std::unique_ptr<Mr> send;
  std::optional<UdSlots> recv;
};

Ud make_ud(CmaEnv& e, uint32_t slots, size_t msg) {
  Ud u;
  u.cq = check(e.ctx->create_cq(2 * slots + 4), "Couldn't create CQ");
  u.qp = make_qp(e, QpType::kUd, *u.cq, 2, slots);
  u.send = check(e.ctx->alloc_mr(*e.pd, msg, kAccessLocalWrite), "Couldn't register the send buffer");
  u.recv.emplace(e, slots, msg);
  return u;
}

void send_msg(Ud& u, size_t size, uint32_t n, int side, const Ah& ah, uint32_t qpn, uint32_t qkey) {
  auto* p = static_cast<uint8_t*>(u.send->addr());
  fill_msg(p, size, n, side);
  Sge sg{reinterpret_cast<uint64_t>(p), uint32_t(size), u.send->lkey()};
  SendWr wr;
  wr.wr_id = kSendWrid;
  wr.sg = std::span(&sg, 1);
  wr.ah = &ah;
  wr.remote_qpn = qpn;
  wr.remote_qkey = qkey;
  if (int err = u.qp->post_send(wr)) die(std::string("Couldn't post send: ") + std::strerror(err));
}

// The next receive completion (send completions consumed on the way).
Wc next_recv(CmaEnv& e, Ud& u, const std::string& what) {
  for (;;) {
    Wc wc = wait_wc(e, *u.cq, what);
    if (wc.wr_id != kSendWrid) return wc;
  }
}

int server(CmaEnv& e, const Opts& o) {
  const uint32_t listener = listen_on(e, RdmaPortSpace::kUdp, o.bind, o.port, "udaddy");
  RdmaCmEvent req = next_event(e, "waiting for a connection request");
  if (req.type != RdmaCmEventType::kConnectRequest) die("udaddy: expected a connection request, got " + event_str(req));
  std::printf("udaddy: connection request from %s\n", req.dst.str().c_str());
  const size_t mtu = port_mtu(e, req.port);
  const uint32_t slots = uint32_t(std::min(o.count, 64));
  Ud u = make_ud(e, slots, mtu);
  check(e.ch->init_qp(req.id, *u.qp), "Couldn't bring the UD QP up");
  u.recv->post_all(*u.qp);
  check(e.ch->accept(req.id, nullptr, {}), "Couldn't accept");
  std::map<uint32_t, std::unique_ptr<Ah>> ahs;  // by the sender's LID
  uint16_t lid = 0;
  uint32_t qpn = 0;
  for (int k = 0; k < o.count; ++k) {
    Wc wc = next_recv(e, u, "waiting for message " + std::to_string(k));
    if (wc.byte_len < kGrhBytes) die("udaddy: a message of " + std::to_string(wc.byte_len) + " bytes");
    const size_t len = wc.byte_len - kGrhBytes;
    auto n = check_msg(u.recv->data(wc.wr_id), len, kClientSide);
    if (!n) die("udaddy: " + n.error().message);
    if (*n != uint32_t(k)) die("udaddy: message " + std::to_string(*n) + " where " + std::to_string(k) + " was due");
    auto& ah = ahs[wc.slid];
    if (!ah) {
      AddressVector av;
      av.dlid = wc.slid;
      av.sl = wc.sl;
      av.port = req.port ? req.port : 1;
      ah = check(e.ctx->create_ah(*e.pd, av), "Couldn't create an AH to the sender");
    }
    lid = wc.slid;
    qpn = wc.src_qp;
    u.recv->post(*u.qp, wc.wr_id);
    send_msg(u, len, *n, kServerSide, *ah, wc.src_qp, kRdmaUdpQkey);
  }
  // The last answer's completion before the QP goes.
  for (;;) {
    Wc wc = wait_wc(e, *u.cq, "sending the last answer");
    if (wc.wr_id == kSendWrid) break;
  }
  std::printf("udaddy: %d messages from LID %u QPN 0x%06x received and answered, verified\n", o.count, lid, qpn);
  (void)e.ch->destroy_id(req.id);
  (void)e.ch->destroy_id(listener);
  return 0;
}

int client(CmaEnv& e, const Opts& o) {
  const uint32_t id = check(e.ch->create_id(RdmaPortSpace::kUdp), "Couldn't create an id");
  const IpEndpoint dst = endpoint(o.server, o.port);
  const std::optional<IpEndpoint> src = optional_endpoint(o.bind, 0);
  resolve(e, id, src ? &*src : nullptr, dst);
  const RdmaIdInfo info = check(e.ch->query(id), "Couldn't query the id");
  const size_t mtu = port_mtu(e, info.port);
  if (size_t(o.size) > mtu) die("udaddy: -S " + std::to_string(o.size) + " is above the path MTU " + std::to_string(mtu));
  Ud u = make_ud(e, 1, size_t(o.size));
  check(e.ch->init_qp(id, *u.qp), "Couldn't bring the UD QP up");
  u.recv->post_all(*u.qp);
  check(e.ch->connect(id, *u.qp, {}), "Couldn't connect");
  RdmaCmEvent ev = expect_event(e, id, RdmaCmEventType::kEstablished, "connecting to " + dst.str());
  std::printf("udaddy: established: remote QPN 0x%06x, Q_Key 0x%08x, LID %u\n", ev.qp_num, ev.qkey, ev.ah.dlid);
  std::fflush(stdout);
  AddressVector av = ev.ah;
  if (av.port == 0) av.port = info.port;
  auto ah = check(e.ctx->create_ah(*e.pd, av), "Couldn't create the AH");
  for (int n = 0; n < o.count; ++n) {
    send_msg(u, size_t(o.size), uint32_t(n), kClientSide, *ah, ev.qp_num, ev.qkey);
    Wc wc = next_recv(e, u, "waiting for the answer to message " + std::to_string(n));
    if (wc.byte_len != kGrhBytes + size_t(o.size))
      die("udaddy: answer " + std::to_string(n) + " of " + std::to_string(wc.byte_len - kGrhBytes) + " bytes");
    auto m = check_msg(u.recv->data(wc.wr_id), size_t(o.size), kServerSide);
    if (!m) die("udaddy: " + m.error().message);
    if (*m != uint32_t(n)) die("udaddy: answer " + std::to_string(*m) + " where " + std::to_string(n) + " was due");
    u.recv->post(*u.qp, wc.wr_id);
  }
  std::printf("udaddy: %d messages of %d bytes sent and answered, verified\n", o.count, o.size);
  check(e.ch->destroy_id(id), "Couldn't destroy the id");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Opts o;
  CLI::App app{"openib-udaddy: UD messages to a peer found through the RDMA CM (SIDR)"};
  app.add_option("-s,--server", o.server, "the server's address (none: be the server)");
  app.add_option("-b,--bind", o.bind, "the local address to bind (server) or send from (client)");
  app.add_option("-p,--port", o.port, "port (default 7174)");
  app.add_option("-C,--count", o.count, "messages (default 10)");
  app.add_option("-S,--size", o.size, "client: message size (default 100)");
  app.add_option("--timeout", o.timeout_s, "seconds to wait for any one event or message (default 10)");
  app.add_option("--socket", o.socket, "ibd's socket (default $OPENIB_SOCKET, else /run/ibd/ibd.sock)");
  CLI11_PARSE(app, argc, argv);
  if (o.count <= 0) die("openib-udaddy: -C must be positive");
  if (o.size < int(kMinMsg)) die("openib-udaddy: -S must be at least " + std::to_string(kMinMsg));
  CmaEnv e = cma_open(o.socket, o.timeout_s);
  return o.server.empty() ? server(e, o) : client(e, o);
}
