// openib-rping: rdmacm-utils' rping over libopenib's RDMA CM (docs/cma.md
// "Examples"): an RC connection named by IP address and port, and rping's
// protocol on it. Per iteration the client fills its start buffer with
// rping's text ("rdma-ping-N: " then letters from 'A' + N cycling through
// 'A'..'z') and SENDs {be64 address, be32 rkey, be32 size} for it; the
// server RDMA READs it and SENDs a go-ahead; the client SENDs its sink
// buffer's info; the server RDMA WRITEs what it read into the sink and
// SENDs a go-ahead; the client compares sink and start. Then the client
// disconnects.
//   server: openib-rping -s [-a ADDR] [-p PORT] [--serve N]
//   client: openib-rping -c -a SERVER [-p PORT] [-C COUNT] [-S SIZE] [-v] [-V]
// Every wait is bounded (--timeout seconds per event or completion); any
// failure exits 1 with a message. The server serves one connection (N with
// --serve, one after another); a client that vanishes midway is reported
// ("client disconnected") and another awaited.
#include <endian.h>

#include <CLI/CLI.hpp>
#include <map>

#include "cma_common.hpp"

using namespace openib;
using namespace openib::examples;

namespace {

enum : uint64_t { kRecvWrid = 1, kSendWrid = 2, kReadWrid = 3, kWriteWrid = 4 };
constexpr size_t kInfoBytes = 16;  // struct rping_rdma_info
constexpr int kMinSize = 32, kMaxSize = 1 << 24;

struct Opts {
  bool server = false, client = false, verbose = false, verify = false;
  std::string addr, bind, socket;
  int port = 7174, count = -1, size = 64, serve = 1;  // count -1: the client's default (10), any for the server
  double timeout_s = 10;
};

struct Info {
  uint64_t buf = 0;
  uint32_t rkey = 0, size = 0;
};
void put_info(uint8_t* p, const Info& i) {
  const uint64_t b = htobe64(i.buf);
  const uint32_t k = htobe32(i.rkey), s = htobe32(i.size);
  std::memcpy(p, &b, 8);
  std::memcpy(p + 8, &k, 4);
  std::memcpy(p + 12, &s, 4);
}
Info get_info(const uint8_t* p) {
  uint64_t b;
  uint32_t k, s;
  std::memcpy(&b, p, 8);
  std::memcpy(&k, p + 8, 4);
  std::memcpy(&s, p + 12, 4);
  return {be64toh(b), be32toh(k), be32toh(s)};
}

// rping's text for iteration `n`, NUL-terminated at the buffer's end.
void fill_ping(uint8_t* buf, size_t size, int n) {
  int cc = std::snprintf(reinterpret_cast<char*>(buf), size, "rdma-ping-%d: ", n);
  size_t i = size_t(std::max(cc, 0));
  for (char c = char('A' + n % 58); i < size; ++i) {
    buf[i] = uint8_t(c);
    c = c == 'z' ? 'A' : char(c + 1);
  }
  buf[size - 1] = 0;
}
// The first byte where `buf` differs from iteration n's text, or -1.
long ping_mismatch(const uint8_t* buf, size_t size, int n) {
  std::vector<uint8_t> want(size);
  fill_ping(want.data(), size, n);
  for (size_t i = 0; i < size; ++i)
    if (buf[i] != want[i]) return long(i);
  return -1;
}

// One connection's QP, CQ and control buffers (16 bytes received at 0,
// 16 sent at 16), and the completions seen but not yet waited for.
struct Conn {
  uint32_t id = 0;
  std::unique_ptr<Cq> cq;
  std::unique_ptr<Qp> qp;
  std::unique_ptr<Mr> ctl;
  std::map<uint64_t, int> done;
  bool gone = false;          // the connection ended: the peer disconnected, a request failed, the timeout
  bool peer_ended = false;    // by the peer's disconnect (the event, or our requests flushed)
  std::string why;            // what ended it
};

Conn make_conn(CmaEnv& e) {
  Conn c;
  c.cq = check(e.ctx->create_cq(16), "Couldn't create CQ");
  c.qp = make_qp(e, QpType::kRc, *c.cq, 4, 2);
  c.ctl = check(e.ctx->alloc_mr(*e.pd, 2 * kInfoBytes, kAccessLocalWrite), "Couldn't register MR");
  return c;
}

uint8_t* ctl_buf(Conn& c, size_t off) { return static_cast<uint8_t*>(c.ctl->addr()) + off; }

// Waits for wr_id's completion. False when the connection ended meanwhile
// (the peer's disconnect, a flushed or failed request, the timeout): why says.
bool wait_for(CmaEnv& e, Conn& c, uint64_t wr_id) {
  while (c.done[wr_id] == 0) {
    if (c.gone) return false;
    auto idle = [&] {  // the peer's disconnect ends the wait; other events wait their turn
      auto ev = e.ch->get_event(0);
      if (!ev) {
        if (ev.error().code != ETIMEDOUT) die("RDMA CM event: " + ev.error().str());
        return true;
      }
      if (ev->id == c.id && ev->type == RdmaCmEventType::kDisconnected) {
        c.gone = c.peer_ended = true;
        c.why = "disconnect event";
        return false;
      }
      e.held.push_back(std::move(*ev));
      return true;
    };
    auto wc = poll_wc(e, *c.cq, idle);
    if (!wc) {
      if (!c.gone) c.why = "no completion within " + secs(e);
      c.gone = true;
      return false;
    }
    if (wc->status != kWcSuccess) {
      c.gone = true;
      c.peer_ended = wc->status == kWcWrFlushErr;
      c.why = c.peer_ended ? "work requests flushed"
                           : std::string(wc_status_str(wc->status)) + " (wr_id " + std::to_string(wc->wr_id) + ")";
      // Flushed: ibd moved the QP to ERROR because the connection ended;
      // the id's event (DISCONNECTED) says so, at most a timeout later.
      while (c.peer_ended) {
        auto ev = e.ch->get_event(e.timeout_ms);
        if (!ev) break;
        if (ev->id != c.id) {
          e.held.push_back(std::move(*ev));
          continue;
        }
        if (ev->type == RdmaCmEventType::kDisconnected) c.why = "disconnect event";
        break;
      }
      return false;
    }
    if (wc->wr_id == kRecvWrid && wc->byte_len != kInfoBytes) {
      c.gone = true;
      c.why = "a message of " + std::to_string(wc->byte_len) + " bytes, not " + std::to_string(kInfoBytes);
      return false;
    }
    ++c.done[wc->wr_id];
  }
  --c.done[wr_id];
  return true;
}

void post_send(Conn& c, const Info& i) {
  put_info(ctl_buf(c, kInfoBytes), i);
  Sge sg{reinterpret_cast<uint64_t>(ctl_buf(c, kInfoBytes)), uint32_t(kInfoBytes), c.ctl->lkey()};
  SendWr wr;
  wr.wr_id = kSendWrid;
  wr.sg = std::span(&sg, 1);
  if (int err = c.qp->post_send(wr)) die(std::string("Couldn't post send: ") + std::strerror(err));
}
void post_rdma(Conn& c, WrOpcode op, const Mr& mr, const Info& remote) {
  Sge sg{reinterpret_cast<uint64_t>(mr.addr()), remote.size, mr.lkey()};
  SendWr wr;
  wr.wr_id = op == WrOpcode::kRead ? kReadWrid : kWriteWrid;
  wr.opcode = op;
  wr.sg = std::span(&sg, 1);
  wr.remote_addr = remote.buf;
  wr.rkey = remote.rkey;
  if (int err = c.qp->post_send(wr)) die(std::string("Couldn't post RDMA request: ") + std::strerror(err));
}

// Frees the id (which disconnects it if the peer did not); its late events are ignored.
void close_conn(CmaEnv& e, Conn& c) { check(e.ch->destroy_id(c.id), "Couldn't destroy the id"); }

// ---- server ----------------------------------------------------------------------

// rping's server loop on an established connection: iterations until the
// client disconnects. The iterations done; `clean`: the client ended it
// between two iterations (else c.why says what ended it).
int serve_conn(CmaEnv& e, const Opts& o, Conn& c, bool& clean) {
  std::unique_ptr<Mr> buf;
  int n = 0;
  for (;; ++n) {
    if (!wait_for(e, c, kRecvWrid)) {  // the start buffer's info, or the end
      clean = c.peer_ended;
      return n;
    }
    const Info start = get_info(ctl_buf(c, 0));
    if (start.size == 0 || start.size > uint32_t(kMaxSize)) {
      c.why = "client advertised a buffer of " + std::to_string(start.size) + " bytes";
      clean = false;
      return n;
    }
    if (!buf || buf->length() < start.size)
      buf = check(e.ctx->alloc_mr(*e.pd, start.size, kAccessLocalWrite), "Couldn't register the RDMA buffer");
    post_recv(*c.qp, *c.ctl, 0, kInfoBytes, kRecvWrid);
    post_rdma(c, WrOpcode::kRead, *buf, start);
    clean = false;
    if (!wait_for(e, c, kReadWrid)) return n;
    auto* data = static_cast<uint8_t*>(buf->addr());
    data[start.size - 1] = 0;
    if (o.verbose) std::printf("server ping data: %s\n", reinterpret_cast<const char*>(data));
    if (o.verify) {
      if (long at = ping_mismatch(data, start.size, n); at >= 0)
        die("iteration " + std::to_string(n) + ": the data read differs from rping's text at byte " +
            std::to_string(at));
    }
    post_send(c, {reinterpret_cast<uint64_t>(buf->addr()), buf->rkey(), start.size});  // go ahead
    if (!wait_for(e, c, kSendWrid) || !wait_for(e, c, kRecvWrid)) return n;  // the sink's info
    const Info sink = get_info(ctl_buf(c, 0));
    if (sink.size < start.size) {
      c.why = "client's sink of " + std::to_string(sink.size) + " bytes is smaller than its start buffer";
      return n;
    }
    post_recv(*c.qp, *c.ctl, 0, kInfoBytes, kRecvWrid);  // the next iteration's, or flushed at the end
    Info w = sink;
    w.size = start.size;
    post_rdma(c, WrOpcode::kWrite, *buf, w);
    if (!wait_for(e, c, kWriteWrid)) return n;
    post_send(c, {reinterpret_cast<uint64_t>(buf->addr()), buf->rkey(), start.size});  // go ahead
    if (!wait_for(e, c, kSendWrid)) {
      // The WRITE was acknowledged: the iteration is done. The client may
      // have had the go-ahead and disconnected before its ACK reached us
      // (the disconnect flushes the send): a clean end all the same.
      clean = c.peer_ended;
      return n + 1;
    }
    std::fflush(stdout);
  }
}

int server(CmaEnv& e, const Opts& o) {
  const uint32_t listener = listen_on(e, RdmaPortSpace::kTcp, o.addr, o.port, "rping");
  int served = 0;
  while (served < o.serve) {
    auto got = try_event(e, -1, "waiting for a connection", true);
    if (!got)
      die("rping: no connection request within " + secs(e) + " (" + std::to_string(served) +
          " of " + std::to_string(o.serve) + " served)");
    RdmaCmEvent ev = std::move(*got);
    if (ev.type != RdmaCmEventType::kConnectRequest) {  // an old connection's late events, ADDR_CHANGE ...
      if (ev.id == listener) {
        std::printf("rping: unhandled event on the listener: %s, ignoring\n", event_str(ev).c_str());
        std::fflush(stdout);
      }
      continue;
    }
    std::printf("rping: connection request from %s\n", ev.dst.str().c_str());
    Conn c = make_conn(e);
    c.id = ev.id;
    post_recv(*c.qp, *c.ctl, 0, kInfoBytes, kRecvWrid);
    RdmaConnParam p;
    p.initiator_depth = p.responder_resources = 1;
    if (auto r = e.ch->accept(c.id, c.qp.get(), p); !r) {
      std::printf("rping: accept failed: %s\n", r.error().str().c_str());
      (void)e.ch->destroy_id(c.id);
      continue;
    }
    RdmaCmEvent est = event_for(e, c.id, "waiting for the connection to be established");
    if (est.type != RdmaCmEventType::kEstablished) {
      std::printf("rping: client disconnected before the connection was established: %s\n", event_str(est).c_str());
      (void)e.ch->destroy_id(c.id);
      continue;
    }
    bool clean = false;
    const int n = serve_conn(e, o, c, clean);
    // The client ended it between iterations: done (unless it did not do -C's iterations).
    if (clean && n > 0 && (o.count == 0 || n == o.count)) {
      std::printf("rping: %d iterations%s\n", n, o.verify ? ", verified" : "");
      ++served;
    } else {
      std::printf("rping: client disconnected after %d iterations (%s)\n", n, c.why.c_str());
    }
    std::fflush(stdout);
    close_conn(e, c);
  }
  (void)e.ch->destroy_id(listener);
  return 0;
}

// ---- client ------------------------------------------------------------------------

int client(CmaEnv& e, const Opts& o) {
  const uint32_t id = check(e.ch->create_id(RdmaPortSpace::kTcp), "Couldn't create an id");
  const IpEndpoint dst = endpoint(o.addr, o.port);
  const std::optional<IpEndpoint> src = optional_endpoint(o.bind, 0);
  resolve(e, id, src ? &*src : nullptr, dst);
  Conn c = make_conn(e);
  c.id = id;
  const size_t size = size_t(o.size);
  auto bufs = check(e.ctx->alloc_mr(*e.pd, 2 * size, kAccessLocalWrite | kAccessRemoteRead | kAccessRemoteWrite),
                    "Couldn't register the buffers");
  auto* start = static_cast<uint8_t*>(bufs->addr());
  uint8_t* sink = start + size;
  RdmaConnParam p;
  p.initiator_depth = p.responder_resources = 1;
  check(e.ch->connect(id, *c.qp, p), "Couldn't connect");
  RdmaCmEvent ev = expect_event(e, id, RdmaCmEventType::kEstablished, "connecting to " + dst.str());
  (void)ev;
  int mismatched = 0;
  for (int n = 0; n < o.count; ++n) {
    fill_ping(start, size, n);
    std::memset(sink, 0, size);
    post_recv(*c.qp, *c.ctl, 0, kInfoBytes, kRecvWrid);
    post_send(c, {reinterpret_cast<uint64_t>(start), bufs->rkey(), uint32_t(size)});
    if (!wait_for(e, c, kSendWrid) || !wait_for(e, c, kRecvWrid))
      die("rping: iteration " + std::to_string(n) + ": " + (c.peer_ended ? "server disconnected (" + c.why + ")" : c.why));
    post_recv(*c.qp, *c.ctl, 0, kInfoBytes, kRecvWrid);
    post_send(c, {reinterpret_cast<uint64_t>(sink), bufs->rkey(), uint32_t(size)});
    if (!wait_for(e, c, kSendWrid) || !wait_for(e, c, kRecvWrid))
      die("rping: iteration " + std::to_string(n) + ": " + (c.peer_ended ? "server disconnected (" + c.why + ")" : c.why));
    if (o.verbose) std::printf("ping data: %s\n", reinterpret_cast<const char*>(sink));
    if (std::memcmp(start, sink, size) != 0) {
      size_t at = 0;
      while (start[at] == sink[at]) ++at;
      if (o.verify) die("rping: iteration " + std::to_string(n) + ": data mismatch at byte " + std::to_string(at));
      std::printf("rping: iteration %d: data mismatch at byte %zu\n", n, at);
      ++mismatched;
    }
  }
  std::fflush(stdout);
  check(e.ch->disconnect(id), "Couldn't disconnect");
  expect_event(e, id, RdmaCmEventType::kDisconnected, "disconnecting");
  check(e.ch->destroy_id(id), "Couldn't destroy the id");
  if (mismatched) std::printf("rping: %d iterations, %d mismatched\n", o.count, mismatched);
  else std::printf("rping: %d iterations, verified\n", o.count);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Opts o;
  CLI::App app{"openib-rping: rping over the RDMA CM (connections by IP address)"};
  app.add_flag("-s,--server", o.server, "be the server");
  app.add_flag("-c,--client", o.client, "be the client");
  app.add_option("-a,--addr", o.addr, "server: the address to bind (default: any); client: the server's");
  app.add_option("-I,--bind", o.bind, "client: the source address");
  app.add_option("-p,--port", o.port, "port (default 7174)");
  app.add_option("-C,--count", o.count, "client: iterations (default 10); server: the iterations a client must do (default: any)");
  app.add_option("-S,--size", o.size, "client: ping buffer size (default 64, at least 32)");
  app.add_flag("-v,--verbose", o.verbose, "print each ping's data");
  app.add_flag("-V,--verify", o.verify, "verify the data (exit 1 on a mismatch)");
  app.add_option("--serve", o.serve, "server: connections to serve, one after another (default 1)");
  app.add_option("--timeout", o.timeout_s, "seconds to wait for any one event or completion (default 10)");
  app.add_option("--socket", o.socket, "ibd's socket (default $OPENIB_SOCKET, else /run/ibd/ibd.sock)");
  CLI11_PARSE(app, argc, argv);
  if (o.server == o.client) die("openib-rping: -s (server) or -c (client)");
  if (o.client && o.addr.empty()) die("openib-rping: the client needs -a SERVER");
  if (o.size < kMinSize || o.size > kMaxSize)
    die("openib-rping: -S " + std::to_string(o.size) + ": " + std::to_string(kMinSize) + ".." + std::to_string(kMaxSize));
  if (o.count == -1) o.count = o.client ? 10 : 0;
  if (o.count < 0 || (o.client && o.count == 0)) die("openib-rping: -C must be positive");
  if (o.serve < 1) die("openib-rping: --serve must be positive");
  CmaEnv e = cma_open(o.socket, o.timeout_s);
  return o.server ? server(e, o) : client(e, o);
}
