// ibfabric: emulated InfiniBand switches and cables from a topology file
// (docs/ibfabric.md).
//
//   ibfabric [options] TOPOLOGY          run the switches
//   ibfabric --print-bindings TOPOLOGY   the simhca arguments of every host port
//   ibfabric ctl SOCKET COMMAND...       one control command (link down S P, ...)
//
// One asio io_context: UDP cables' packets (handed over by their receive
// threads through an eventfd), in-process cables, the trap timer, the
// control socket and SIGTERM/SIGINT.
#include <sched.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/streambuf.hpp>
#include <boost/asio/write.hpp>
#include <CLI/CLI.hpp>

#include <charconv>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "common/log.hpp"
#include "sim/fabric/fabric.hpp"

namespace asio = boost::asio;
using namespace openib;
using namespace openib::sim::fabric;

namespace {

Result<std::string> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return err(ENOENT, "cannot open {}", path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

Result<Topology> load_topology(const std::string& path) {
  OPENIB_TRY_ASSIGN(auto text, read_file(path));
  ParseOptions po;
  po.source = path;
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  po.include = [dir](const std::string& name) {
    std::filesystem::path p(name);
    return read_file((p.is_absolute() ? p : dir / p).string());
  };
  return parse_topology(text, po);
}

// "k1=v1,k2=v2" pairs.
bool parse_pairs(std::string_view s, const std::function<bool(std::string_view, std::string_view)>& f) {
  while (!s.empty()) {
    const size_t comma = s.find(',');
    const std::string_view kv = s.substr(0, comma);
    const size_t eq = kv.find('=');
    if (eq == std::string_view::npos || !f(kv.substr(0, eq), kv.substr(eq + 1))) return false;
    if (comma == std::string_view::npos) break;
    s.remove_prefix(comma + 1);
  }
  return true;
}

bool parse_rate(std::string_view v, double& out) {
  const std::string s(v);
  char* end = nullptr;
  out = std::strtod(s.c_str(), &end);
  return end != s.c_str() && *end == '\0' && out >= 0 && out <= 1;
}

// The `ctl` client: sends one line, prints the reply up to "ok" / "error: ...".
int run_ctl(const std::string& path, const std::vector<std::string>& words) {
  std::string line;
  for (const auto& w : words) line += (line.empty() ? "" : " ") + w;
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  if (fd < 0 || path.size() >= sizeof sa.sun_path) {
    std::fprintf(stderr, "ibfabric ctl: bad socket path %s\n", path.c_str());
    return 2;
  }
  UniqueFd sock(fd);
  std::memcpy(sa.sun_path, path.c_str(), path.size());
  if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) < 0) {
    std::fprintf(stderr, "ibfabric ctl: connect %s: %s\n", path.c_str(), std::strerror(errno));
    return 2;
  }
  line += '\n';
  if (::write(fd, line.data(), line.size()) != static_cast<ssize_t>(line.size())) return 2;
  std::string buf;
  char chunk[4096];
  while (true) {
    const ssize_t n = ::read(fd, chunk, sizeof chunk);
    if (n <= 0) break;
    buf.append(chunk, static_cast<size_t>(n));
    // Done at the last line: "ok" or "error: ...".
    const size_t end = buf.size() >= 1 && buf.back() == '\n' ? buf.rfind('\n', buf.size() - 2) : std::string::npos;
    const std::string last = buf.substr(end == std::string::npos ? 0 : end + 1);
    if (last == "ok\n" || last.rfind("error:", 0) == 0) break;
  }
  std::fputs(buf.c_str(), stdout);
  return buf.size() >= 3 && buf.compare(buf.size() - 3, 3, "ok\n") == 0 ? 0 : 1;
}

class ControlSession : public std::enable_shared_from_this<ControlSession> {
 public:
  ControlSession(asio::local::stream_protocol::socket s, Fabric& f, std::function<void()> kick)
      : sock_(std::move(s)), fabric_(f), kick_(std::move(kick)) {}
  void start() { read(); }

 private:
  void read() {
    auto self = shared_from_this();
    asio::async_read_until(sock_, buf_, '\n', [this, self](boost::system::error_code ec, std::size_t n) {
      if (ec) return;
      std::string line(asio::buffers_begin(buf_.data()), asio::buffers_begin(buf_.data()) + static_cast<long>(n));
      buf_.consume(n);
      reply_ = fabric_.control(line);
      kick_();
      asio::async_write(sock_, asio::buffer(reply_), [this, self](boost::system::error_code wec, std::size_t) {
        if (!wec) read();
      });
    });
  }
  asio::local::stream_protocol::socket sock_;
  Fabric& fabric_;
  std::function<void()> kick_;
  asio::streambuf buf_{64 * 1024};  // a longer line is an error: the session ends
  std::string reply_;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ibfabric: emulated InfiniBand switches and cables built from an ibnetdiscover/ibsim topology file"};
  std::string topo_path, control_path, log_level = "info", pcap_dir, faults_text;
  // --spin-us; OPENIB_FABRIC_SPIN_US sets the default (a benchmark's A/B).
  unsigned spin_us = 200;
  if (const char* e = std::getenv("OPENIB_FABRIC_SPIN_US")) spin_us = static_cast<unsigned>(std::strtoul(e, nullptr, 10));
  FabricOptions fo;
  std::vector<std::string> node_addrs, remotes, binds;
  bool print_bindings = false;
  app.add_option("topology", topo_path, "topology file (ibnetdiscover / ibsim net format)");
  app.add_option("--control", control_path, "control UNIX socket (link down/up SWITCH PORT, show, counters)");
  app.add_option("--addr", fo.addr, "default address of every node's cable ends")->capture_default_str();
  app.add_option("--base-port", fo.base_port, "cable i uses UDP ports BASE+2i and BASE+2i+1")->capture_default_str();
  app.add_option("--node-addr", node_addrs, "NAME=ADDR: the address of a node's cable ends (host or switch)")
      ->allow_extra_args(false);
  app.add_option("--remote", remotes, "NAME[=ADDR]: a switch run by another ibfabric (at ADDR)")
      ->allow_extra_args(false);
  app.add_option("--bind", binds, "NODE:PORT=FABRIC=ADDR:PORT,HOST=ADDR:PORT: explicit endpoints of a host port")
      ->allow_extra_args(false);
  app.add_flag("--print-bindings", print_bindings,
               "print 'NODE PORT --guid G --portN LOCAL=..,PEER=..' for every host port and exit");
  app.add_option("--pcap-dir", pcap_dir, "write one capture file (pcap, ERF) per cable into DIR");
  app.add_option("--faults", faults_text, "drop=P,dup=P,reorder=P,corrupt=P,seed=N on every UDP cable end");
  app.add_option("--spin-us", spin_us,
                 "after forwarding from a UDP cable, keep reading the cables this long (sched_yield between "
                 "empty reads) before sleeping in epoll; 0: never (docs/cables.md \"Polled receive\")")
      ->capture_default_str();
  app.add_option("--log", log_level, "log level (trace, debug, info, warn, error)")->capture_default_str();
  auto* ctl = app.add_subcommand("ctl", "send one control command to a running ibfabric");
  std::string ctl_path;
  std::vector<std::string> ctl_words;
  ctl->add_option("socket", ctl_path, "the --control socket")->required();
  ctl->add_option("command", ctl_words, "link down SWITCH PORT | link up SWITCH PORT | show | counters [SWITCH]")
      ->required();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (*ctl) return run_ctl(ctl_path, ctl_words);
  log::set_level(log_level);
  auto log = log::get("fabric");
  if (topo_path.empty()) {
    std::fprintf(stderr, "ibfabric: a topology file is required (--help)\n");
    return 2;
  }
  for (const auto& na : node_addrs) {
    const size_t eq = na.find('=');
    if (eq == std::string::npos || eq == 0) {
      std::fprintf(stderr, "ibfabric: --node-addr %s: expected NAME=ADDR\n", na.c_str());
      return 2;
    }
    fo.node_addr[na.substr(0, eq)] = na.substr(eq + 1);
  }
  for (const auto& r : remotes) {
    const size_t eq = r.find('=');
    fo.remote.insert(r.substr(0, eq));
    if (eq != std::string::npos) fo.node_addr[r.substr(0, eq)] = r.substr(eq + 1);
  }
  for (const auto& b : binds) {
    const size_t colon = b.find(':'), eq = b.find('=');
    unsigned port = 0;
    std::string fab, host;
    bool good = colon != std::string::npos && eq != std::string::npos && colon < eq;
    if (good) {
      const std::string ps = b.substr(colon + 1, eq - colon - 1);
      good = !ps.empty() && ps.find_first_not_of("0123456789") == std::string::npos && ps.size() < 4;
      if (good) port = static_cast<unsigned>(std::stoul(ps));
      good = good && parse_pairs(std::string_view(b).substr(eq + 1), [&](std::string_view k, std::string_view v) {
               if (k == "FABRIC") fab = v;
               else if (k == "HOST") host = v;
               else return false;
               return true;
             });
    }
    if (!good || fab.empty() || host.empty()) {
      std::fprintf(stderr, "ibfabric: --bind %s: expected NODE:PORT=FABRIC=ADDR:PORT,HOST=ADDR:PORT\n", b.c_str());
      return 2;
    }
    fo.binds[{b.substr(0, colon), port}] = {fab, host};
  }
  if (!faults_text.empty() && !parse_pairs(faults_text, [&](std::string_view k, std::string_view v) {
        if (k == "drop") return parse_rate(v, fo.faults.drop);
        if (k == "dup") return parse_rate(v, fo.faults.duplicate);
        if (k == "reorder") return parse_rate(v, fo.faults.reorder);
        if (k == "corrupt") return parse_rate(v, fo.faults.corrupt);
        if (k == "seed") {
          auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), fo.faults.seed);
          return ec == std::errc() && p == v.data() + v.size();
        }
        return false;
      })) {
    std::fprintf(stderr, "ibfabric: --faults %s: expected drop=P,dup=P,reorder=P,corrupt=P,seed=N\n",
                 faults_text.c_str());
    return 2;
  }
  fo.pcap_dir = pcap_dir;

  auto topo = load_topology(topo_path);
  if (!topo) {
    std::fprintf(stderr, "ibfabric: %s\n", topo.error().str().c_str());
    return 1;
  }
  for (const auto& n : topo->notes) log->debug("{}", n);
  if (print_bindings) {
    auto bs = host_bindings(*topo, fo);
    if (!bs) {
      std::fprintf(stderr, "ibfabric: %s\n", bs.error().str().c_str());
      return 1;
    }
    for (const Binding& b : *bs) std::printf("%s\n", format_binding(*topo, b).c_str());
    return 0;
  }

  asio::io_context io;
  asio::signal_set signals(io, SIGTERM, SIGINT);
  signals.async_wait([&](boost::system::error_code, int sig) {
    log->info("signal {}: exiting", sig);
    io.stop();
  });
  std::signal(SIGPIPE, SIG_IGN);
  // Two descriptors per host cable (a UDP socket and its wake-up): a
  // 324-host fat tree needs about 660, more than some systems' soft limit
  // of 1024 leaves for larger trees; take what the hard limit allows.
  if (rlimit rl{}; ::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    (void)::setrlimit(RLIMIT_NOFILE, &rl);
  }

  auto fr = Fabric::create(std::move(topo).value(), fo);
  if (!fr) {
    log->error("{}", fr.error().str());
    return 1;
  }
  Fabric& fabric = **fr;
  log->info("ibfabric: {} switches here, {} UDP cables, {} nodes in {}", fabric.num_local_switches(),
            fabric.num_udp_cables(), fabric.topology().nodes.size(), topo_path);

  // In-process cables: pumped in bounded batches, so the loop stays fair.
  bool pump_posted = false;
  std::function<void()> kick = [&] {
    if (pump_posted || !fabric.internal_pending()) return;
    pump_posted = true;
    asio::post(io, [&] {
      pump_posted = false;
      fabric.pump_internal(1024);
      kick();
    });
  };

  asio::posix::stream_descriptor inbox(io, ::dup(fabric.inbox_fd()));
  std::function<void()> wait_inbox = [&] {
    inbox.async_wait(asio::posix::stream_descriptor::wait_read, [&](boost::system::error_code ec) {
      if (ec) return;
      fabric.deliver_inbox();
      kick();
      wait_inbox();
    });
  };
  wait_inbox();

  // Polled UDP cables (Fabric::receive_udp): read on this loop; while
  // some may hold more, or within --spin-us of the last packet, the next
  // read is posted instead of waited for (the wake-up from epoll is most
  // of a hop's time when the CPUs are busy: docs/performance.md).
  std::optional<asio::posix::stream_descriptor> udp;
  std::function<void()> wait_udp, step_udp;
  const auto spin = std::chrono::microseconds(spin_us);
  auto last_rx = std::chrono::steady_clock::now();
  step_udp = [&] {
    const std::uint64_t before = fabric.stats().inbox_packets;
    const bool more = fabric.receive_udp();
    const auto now = std::chrono::steady_clock::now();
    if (fabric.stats().inbox_packets != before) last_rx = now;
    kick();
    if (more) {
      asio::post(io, step_udp);
    } else if (now - last_rx < spin) {
      ::sched_yield();
      asio::post(io, step_udp);
    } else {
      wait_udp();
    }
  };
  wait_udp = [&] {
    udp->async_wait(asio::posix::stream_descriptor::wait_read, [&](boost::system::error_code ec) {
      if (!ec) step_udp();
    });
  };
  if (fabric.udp_fd() >= 0) {
    udp.emplace(io, ::dup(fabric.udp_fd()));
    wait_udp();
  }

  asio::steady_timer timer(io);
  std::function<void()> arm = [&] {
    timer.expires_after(std::chrono::milliseconds(100));
    timer.async_wait([&](boost::system::error_code ec) {
      if (ec) return;
      fabric.tick(Switch::Clock::now());
      kick();
      arm();
    });
  };
  arm();

  std::optional<asio::local::stream_protocol::acceptor> acceptor;
  std::function<void()> accept = [&] {
    acceptor->async_accept([&](boost::system::error_code ec, asio::local::stream_protocol::socket s) {
      if (ec) return;
      std::make_shared<ControlSession>(std::move(s), fabric, kick)->start();
      accept();
    });
  };
  if (!control_path.empty()) {
    ::unlink(control_path.c_str());
    try {
      acceptor.emplace(io, asio::local::stream_protocol::endpoint(control_path));
    } catch (const boost::system::system_error& e) {
      log->error("control socket {}: {}", control_path, e.what());
      return 1;
    }
    accept();
    log->info("control socket {}", control_path);
  }
  kick();
  io.run();
  if (!control_path.empty()) ::unlink(control_path.c_str());
  log->info("{}", fabric.control("counters").substr(0, 4096));
  return 0;
}
