// openib-cmtime: rdmacm-utils' cmtime over libopenib's RDMA CM (docs/cma.md
// "Examples"): the time spent in each step of making and tearing down -c
// RC connections by IP address, all of them in flight at once in each
// step: create id, resolve address, resolve route, create QP, connect,
// disconnect, destroy. Each step's total and per-connection time (and the
// fastest and slowest connection), then the whole run's connections per
// second; --json prints the same as one JSON object (bench/ reads it).
//   server: openib-cmtime [-b ADDR] [-p PORT] [-c CONNECTIONS] [--serve-forever]
//   client: openib-cmtime -s SERVER [-b ADDR] [-p PORT] [-c CONNECTIONS] [--json]
// The server accepts every request (each with its own QP) and exits when
// -c connections have come and gone. Every wait is bounded (--timeout
// seconds per event); any failure exits 1 with a message.
#include <CLI/CLI.hpp>
#include <cmath>
#include <unordered_map>

#include "cma_common.hpp"

using namespace openib;
using namespace openib::examples;

namespace {

using Clock = std::chrono::steady_clock;

struct Opts {
  std::string server, bind, socket;
  int port = 7471, conns = 100;
  bool json = false, serve_forever = false;
  double timeout_s = 10;
};

struct Step {
  const char* name;  // JSON key
  const char* label;
  double total_us = 0, min_us = INFINITY, max_us = 0;
  void add(double us) {
    min_us = std::min(min_us, us);
    max_us = std::max(max_us, us);
  }
};

struct Node {
  uint32_t id = 0;
  std::unique_ptr<Qp> qp;
  Clock::time_point start;
  int step = -1;  // the last step done
};

class Client {
 public:
  Client(CmaEnv& e, const Opts& o) : e_(e), o_(o), nodes_(size_t(o.conns)) {}

  int run() {
    const IpEndpoint dst = endpoint(o_.server, o_.port);
    const std::optional<IpEndpoint> src = optional_endpoint(o_.bind, 0);
    cq_ = check(e_.ctx->create_cq(16), "Couldn't create CQ");  // every QP's: no data flows
    const int ms = std::min(e_.timeout_ms, 2000);
    const auto t0 = Clock::now();
    sync_step(kCreateId, [&](Node& n) { n.id = check(e_.ch->create_id(RdmaPortSpace::kTcp), "create_id"); });
    for (size_t i = 0; i < nodes_.size(); ++i) index_[nodes_[i].id] = i;
    async_step(kResolveAddr, RdmaCmEventType::kAddrResolved,
               [&](Node& n) { return e_.ch->resolve_addr(n.id, src ? &*src : nullptr, dst, ms); });
    async_step(kResolveRoute, RdmaCmEventType::kRouteResolved, [&](Node& n) { return e_.ch->resolve_route(n.id, ms); });
    sync_step(kCreateQp, [&](Node& n) { n.qp = make_qp(e_, QpType::kRc, *cq_, 1, 1); });
    async_step(kConnect, RdmaCmEventType::kEstablished, [&](Node& n) { return e_.ch->connect(n.id, *n.qp, {}); });
    async_step(kDisconnect, RdmaCmEventType::kDisconnected, [&](Node& n) { return e_.ch->disconnect(n.id); });
    sync_step(kDestroy, [&](Node& n) {
      check(e_.ch->destroy_id(n.id), "destroy_id");
      n.qp.reset();
    });
    const double total_ms = since_us(t0) / 1000;
    report(total_ms);
    return 0;
  }

 private:
  enum StepId { kCreateId, kResolveAddr, kResolveRoute, kCreateQp, kConnect, kDisconnect, kDestroy, kSteps };

  // A synchronous call per connection, one after another.
  template <class F>
  void sync_step(StepId s, F&& f) {
    const auto t0 = Clock::now();
    for (Node& n : nodes_) {
      const auto t = Clock::now();
      f(n);
      steps_[s].add(since_us(t));
      n.step = s;
    }
    steps_[s].total_us = since_us(t0);
  }

  // A request per connection, all issued, then every connection's event
  // awaited; per connection the time from its request to its event.
  template <class F>
  void async_step(StepId s, RdmaCmEventType want, F&& start) {
    Step& st = steps_[s];
    const auto t0 = Clock::now();
    for (size_t i = 0; i < nodes_.size(); ++i) {
      Node& n = nodes_[i];
      n.start = Clock::now();
      if (auto r = start(n); !r) die(std::string("cmtime: ") + st.label + ": connection " + std::to_string(i) + ": " + r.error().str());
    }
    size_t done = 0;
    while (done < nodes_.size()) {
      auto ev = try_event(e_, -1, st.label, true);
      if (!ev)
        die(std::string("cmtime: ") + st.label + ": " + std::to_string(done) + " of " + std::to_string(nodes_.size()) +
            " done, then no event for " + secs(e_));
      if (ev->type == RdmaCmEventType::kTimewaitExit) continue;
      auto it = index_.find(ev->id);
      if (it == index_.end()) die(std::string("cmtime: ") + st.label + ": " + event_str(*ev) + " for an unknown id");
      Node& n = nodes_[it->second];
      if (ev->type != want)
        die(std::string("cmtime: ") + st.label + ": connection " + std::to_string(it->second) + ": " + event_str(*ev) +
            " (" + std::to_string(done) + " of " + std::to_string(nodes_.size()) + " done)");
      if (n.step == s) die(std::string("cmtime: ") + st.label + ": connection " + std::to_string(it->second) + ": twice");
      n.step = s;
      st.add(since_us(n.start));
      ++done;
    }
    st.total_us = since_us(t0);
  }

  void report(double total_ms) const {
    const double n = double(nodes_.size());
    const double rate = n / (total_ms / 1000);
    if (o_.json) {
      std::string j = "{\"connections\": " + std::to_string(nodes_.size()) + ", \"steps\": {";
      for (int s = 0; s < kSteps; ++s) {
        const Step& st = steps_[s];
        char buf[256];
        std::snprintf(buf, sizeof buf,
                      "%s\"%s\": {\"total_us\": %.1f, \"per_conn_us\": %.2f, \"min_us\": %.1f, \"max_us\": %.1f}",
                      s ? ", " : "", st.name, st.total_us, st.total_us / n, st.min_us, st.max_us);
        j += buf;
      }
      char tail[128];
      std::snprintf(tail, sizeof tail, "}, \"total_ms\": %.3f, \"conn_per_s\": %.1f}", total_ms, rate);
      std::printf("%s%s\n", j.c_str(), tail);
      return;
    }
    std::printf("%-15s %12s %12s %12s %12s\n", "step", "total us", "us/conn", "min us", "max us");
    for (const Step& st : steps_)
      std::printf("%-15s %12.1f %12.2f %12.1f %12.1f\n", st.label, st.total_us, st.total_us / n, st.min_us, st.max_us);
    std::printf("cmtime: %zu connections in %.1f ms: %.1f conn/s\n", nodes_.size(), total_ms, rate);
  }

  CmaEnv& e_;
  const Opts& o_;
  std::unique_ptr<Cq> cq_;  // before the nodes: destroyed after their QPs
  std::vector<Node> nodes_;
  std::unordered_map<uint32_t, size_t> index_;
  Step steps_[kSteps] = {{"create_id", "create id"},         {"resolve_addr", "resolve addr"},
                         {"resolve_route", "resolve route"}, {"create_qp", "create qp"},
                         {"connect", "connect"},             {"disconnect", "disconnect"},
                         {"destroy", "destroy"}};
};

// Accepts every request with its own QP; a connection is done when it is
// disconnected (or failed). Exits after -c of them (never with --serve-forever).
int server(CmaEnv& e, const Opts& o) {
  const uint32_t listener = listen_on(e, RdmaPortSpace::kTcp, o.bind, o.port, "cmtime", o.conns > 1024 ? o.conns : 0);
  auto cq = check(e.ctx->create_cq(16), "Couldn't create CQ");
  std::unordered_map<uint32_t, std::unique_ptr<Qp>> qps;
  int requests = 0, established = 0, done = 0, failed = 0;
  while (o.serve_forever || done < o.conns) {
    auto ev = try_event(e, -1, "serving", true);
    if (!ev) {
      if (o.serve_forever && qps.empty()) continue;
      die("cmtime: server: no event for " + secs(e) + ": " + std::to_string(requests) +
          " requests, " + std::to_string(established) + " established, " + std::to_string(done) + " of " +
          std::to_string(o.conns) + " done, " + std::to_string(qps.size()) + " open");
    }
    switch (ev->type) {
      case RdmaCmEventType::kConnectRequest: {
        ++requests;
        auto qp = make_qp(e, QpType::kRc, *cq, 1, 1);
        if (auto r = e.ch->accept(ev->id, qp.get(), {}); !r) {
          std::printf("cmtime: accept: %s\n", r.error().str().c_str());
          (void)e.ch->destroy_id(ev->id);
          ++failed;
          ++done;
          break;
        }
        qps.emplace(ev->id, std::move(qp));
        break;
      }
      case RdmaCmEventType::kEstablished:
        ++established;
        break;
      case RdmaCmEventType::kDisconnected:
      case RdmaCmEventType::kConnectError:
      case RdmaCmEventType::kUnreachable:
      case RdmaCmEventType::kRejected: {
        auto it = qps.find(ev->id);
        if (it == qps.end()) break;
        if (ev->type != RdmaCmEventType::kDisconnected) {
          std::printf("cmtime: %s\n", event_str(*ev).c_str());
          ++failed;
        }
        check(e.ch->destroy_id(ev->id), "Couldn't destroy an id");
        qps.erase(it);
        ++done;
        break;
      }
      default:
        break;
    }
  }
  std::printf("cmtime: server: %d connections, %d established, %d failed\n", done, established, failed);
  (void)e.ch->destroy_id(listener);
  return failed ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  Opts o;
  CLI::App app{"openib-cmtime: time spent in each step of making RDMA CM connections"};
  app.add_option("-s,--server", o.server, "the server's address (none: be the server)");
  app.add_option("-b,--bind", o.bind, "server: the address to bind; client: the source address");
  app.add_option("-p,--port", o.port, "port (default 7471)");
  app.add_option("-c,--connections", o.conns, "connections (default 100)");
  app.add_flag("--json", o.json, "client: print the figures as one JSON object");
  app.add_flag("--serve-forever", o.serve_forever, "server: do not exit after -c connections");
  app.add_option("--timeout", o.timeout_s, "seconds to wait for any one event (default 10)");
  app.add_option("--socket", o.socket, "ibd's socket (default $OPENIB_SOCKET, else /run/ibd/ibd.sock)");
  CLI11_PARSE(app, argc, argv);
  if (o.conns <= 0) die("openib-cmtime: -c must be positive");
  CmaEnv e = cma_open(o.socket, o.timeout_s);
  if (o.server.empty()) return server(e, o);
  Client c(e, o);
  return c.run();
}
