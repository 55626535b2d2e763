// Helpers the RDMA CM examples share (openib-rping, openib-udaddy,
// openib-mckey, openib-cmtime; docs/cma.md "Examples"): the Context, PD and
// event channel, events awaited with a bound, address and route
// resolution, QPs and completions with deadlines. Every failure ends the
// program with exit status 1 and a line saying what failed (die()).
#pragma once

#include <endian.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <deque>
#include <memory>
#include <optional>
#include <string>

#include "common.hpp"
#include "openib/cma.hpp"

namespace openib::examples {

struct CmaEnv {
  int timeout_ms = 10000;  // the longest wait for one event or completion
  std::unique_ptr<Context> ctx;
  std::unique_ptr<Pd> pd;
  std::unique_ptr<RdmaEventChannel> ch;
  std::deque<RdmaCmEvent> held;  // events read while another was awaited
};

// "10 s", "2.5 s": the bound of a wait, for messages.
inline std::string secs(const CmaEnv& e) {
  char b[32];
  std::snprintf(b, sizeof b, "%g s", e.timeout_ms / 1000.);
  return b;
}

inline CmaEnv cma_open(const std::string& socket, double timeout_s) {
  if (!(timeout_s > 0)) die("--timeout must be positive");
  CmaEnv e;
  e.timeout_ms = int(timeout_s * 1000);
  ContextOptions o;
  o.socket = socket;
  e.ctx = check(Context::open(o), "Couldn't open ibd's device");
  e.pd = check(e.ctx->alloc_pd(), "Couldn't allocate PD");
  e.ch = check(RdmaEventChannel::open(*e.ctx), "Couldn't open the RDMA CM event channel");
  return e;
}

// "RDMA_CM_EVENT_REJECTED status 8" / "... status -110 (Connection timed out)".
inline std::string event_str(const RdmaCmEvent& ev) {
  std::string s = rdma_event_str(ev.type);
  if (ev.status) {
    s += " status " + std::to_string(ev.status);
    if (ev.status < 0) s += std::string(" (") + std::strerror(-ev.status) + ")";
  }
  return s;
}

// The next event (held ones first) within `timeout_ms` (-1: e.timeout_ms);
// nothing (ETIMEDOUT) when `may_time_out`, else the end with `what`.
inline std::optional<RdmaCmEvent> try_event(CmaEnv& e, int timeout_ms, const std::string& what,
                                            bool may_time_out) {
  if (!e.held.empty()) {
    RdmaCmEvent ev = std::move(e.held.front());
    e.held.pop_front();
    return ev;
  }
  auto ev = e.ch->get_event(timeout_ms < 0 ? e.timeout_ms : timeout_ms);
  if (ev) return std::move(*ev);
  if (ev.error().code == ETIMEDOUT && may_time_out) return std::nullopt;
  if (ev.error().code == ETIMEDOUT)
    die(what + ": no event within " + secs(e));
  die(what + ": " + ev.error().str());
}
inline RdmaCmEvent next_event(CmaEnv& e, const std::string& what) { return *try_event(e, -1, what, false); }

// The next event of `id`: events of other ids are held for later.
inline RdmaCmEvent event_for(CmaEnv& e, uint32_t id, const std::string& what) {
  std::deque<RdmaCmEvent> others;
  for (;;) {
    RdmaCmEvent ev = next_event(e, what);
    if (ev.id != id) {
      others.push_back(std::move(ev));
      continue;
    }
    for (auto& o : others) e.held.push_back(std::move(o));
    return ev;
  }
}
// The next event of `id`, which must be `want`: another ends the program.
inline RdmaCmEvent expect_event(CmaEnv& e, uint32_t id, RdmaCmEventType want, const std::string& what) {
  RdmaCmEvent ev = event_for(e, id, what);
  if (ev.type != want) die(what + ": " + event_str(ev) + " (expected " + rdma_event_str(want) + ")");
  return ev;
}

// HOST (an address or name; empty: the wildcard) and PORT.
inline IpEndpoint endpoint(const std::string& host, int port) {
  if (port < 0 || port > 65535) die("port " + std::to_string(port) + ": 0..65535");
  const std::string service = std::to_string(port);
  auto r = rdma_getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str());
  if (!r) die("address " + (host.empty() ? std::string("*") : host) + ": " + r.error().str());
  return *r;
}

// HOST's endpoint when one is given (-b), else none.
inline std::optional<IpEndpoint> optional_endpoint(const std::string& host, int port) {
  if (host.empty()) return std::nullopt;
  return endpoint(host, port);
}

// An id of `ps` bound to HOST:PORT and listening; "NAME: listening on ADDR" printed.
inline uint32_t listen_on(CmaEnv& e, RdmaPortSpace ps, const std::string& host, int port, const char* name,
                          int backlog = 0) {
  const uint32_t id = check(e.ch->create_id(ps), "Couldn't create an id");
  const IpEndpoint bound = check(e.ch->bind_addr(id, endpoint(host, port)), "Couldn't bind");
  check(e.ch->listen(id, backlog), "Couldn't listen");
  std::printf("%s: listening on %s\n", name, bound.str().c_str());
  std::fflush(stdout);
  return id;
}

// resolve_addr then resolve_route, each awaited (kAddrResolved, kRouteResolved).
inline void resolve(CmaEnv& e, uint32_t id, const IpEndpoint* src, const IpEndpoint& dst) {
  const int ms = std::min(e.timeout_ms, 2000);  // ibd's own retries end before our wait does
  check(e.ch->resolve_addr(id, src, dst, ms), ("resolve_addr " + dst.str()).c_str());
  expect_event(e, id, RdmaCmEventType::kAddrResolved, "resolving the address " + dst.str());
  check(e.ch->resolve_route(id, ms), ("resolve_route " + dst.str()).c_str());
  expect_event(e, id, RdmaCmEventType::kRouteResolved, "resolving the route to " + dst.str());
}

inline std::unique_ptr<Qp> make_qp(CmaEnv& e, QpType type, Cq& cq, uint32_t send_wr, uint32_t recv_wr) {
  QpInit init;
  init.type = type;
  init.send_cq = init.recv_cq = &cq;
  init.cap.max_send_wr = send_wr;
  init.cap.max_recv_wr = recv_wr;
  return check(e.ctx->create_qp(*e.pd, init), "Couldn't create QP");
}

inline void post_recv(Qp& qp, const Mr& mr, size_t offset, size_t len, uint64_t wr_id) {
  Sge sg{reinterpret_cast<uint64_t>(static_cast<uint8_t*>(mr.addr()) + offset), uint32_t(len), mr.lkey()};
  RecvWr wr{wr_id, std::span(&sg, 1)};
  if (int err = qp.post_recv(wr)) die(std::string("Couldn't post receive: ") + std::strerror(err));
}

// One completion within e.timeout_ms; nothing after that. Between polls:
// `idle()` (e.g. a look at the event channel); it returning false ends the
// wait early (nothing).
template <class Idle>
std::optional<Wc> poll_wc(CmaEnv& e, Cq& cq, Idle&& idle) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(e.timeout_ms);
  auto next_idle = std::chrono::steady_clock::now();
  for (;;) {
    Wc wc{};
    if (cq.poll(std::span(&wc, 1)) == 1) return wc;
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) return std::nullopt;
    if (now >= next_idle) {
      if (!idle()) return std::nullopt;
      next_idle = now + std::chrono::milliseconds(1);
    }
    cpu_relax();
  }
}
inline Wc wait_wc(CmaEnv& e, Cq& cq, const std::string& what) {
  auto wc = poll_wc(e, cq, [] { return true; });
  if (!wc) die(what + ": no completion within " + secs(e));
  if (wc->status != kWcSuccess) die(what + ": " + wc_status_str(wc->status));
  return *wc;
}

// ---- UD messages (openib-udaddy, openib-mckey) -------------------------------------
inline constexpr size_t kGrhBytes = 40;  // before every UD message received
inline constexpr size_t kMinMsg = 4;

// Message n of `size` bytes from `side`: be32 n, then common.hpp's pattern.
inline void fill_msg(uint8_t* p, size_t size, uint32_t n, int side) {
  const uint32_t be = htobe32(n);
  std::memcpy(p, &be, 4);
  for (size_t i = 4; i < size; ++i) p[i] = pattern(n, i, side);
}
// Its number, or an error saying where it differs.
inline Result<uint32_t> check_msg(const uint8_t* p, size_t size, int side) {
  if (size < kMinMsg) return err(EBADMSG, "a message of {} bytes", size);
  uint32_t be;
  std::memcpy(&be, p, 4);
  const uint32_t n = be32toh(be);
  for (size_t i = 4; i < size; ++i)
    if (p[i] != pattern(n, i, side)) return err(EBADMSG, "message {}: byte {} is {}, not {}", n, i, p[i], pattern(n, i, side));
  return n;
}

// The port's active MTU in bytes: the largest UD message.
inline size_t port_mtu(CmaEnv& e, uint8_t port) {
  auto pa = check(e.ctx->query_port(port ? port : 1), "Couldn't query the port");
  return size_t(mtu_bytes(pa.active_mtu));
}

// UD receive slots of kGrhBytes + `msg` bytes in one MR; wr_id = slot.
struct UdSlots {
  std::unique_ptr<Mr> mr;
  size_t slot = 0;
  uint32_t count = 0;
  UdSlots(CmaEnv& e, uint32_t n, size_t msg) : slot(kGrhBytes + msg), count(n) {
    mr = check(e.ctx->alloc_mr(*e.pd, slot * n, kAccessLocalWrite), "Couldn't register the receive buffers");
  }
  void post(Qp& qp, uint64_t i) const { post_recv(qp, *mr, size_t(i) * slot, slot, i); }
  void post_all(Qp& qp) const {
    for (uint32_t i = 0; i < count; ++i) post(qp, i);
  }
  const uint8_t* data(uint64_t i) const { return static_cast<const uint8_t*>(mr->addr()) + size_t(i) * slot + kGrhBytes; }
};

// Waits (at most 120 s) until FILE is gone: tests start the peers meanwhile.
inline void wait_file_gone(const std::string& file) {
  for (int i = 0; i < 1200 && ::access(file.c_str(), F_OK) == 0; ++i) ::usleep(100000);
  if (::access(file.c_str(), F_OK) == 0) die("--wait-file " + file + " still there after 120 s");
}

inline double since_us(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace openib::examples
