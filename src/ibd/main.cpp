// ibd: the root daemon (docs/operations.md). Start-up ladder: options, log
// level, device lock, device (a named one, or an embedded simhca child),
// HCA bring-up, static port setup, client socket, readiness. Shutdown on
// SIGTERM/SIGINT, or with an error status when the device goes away.
#include <signal.h>
#include <sys/resource.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <cstdio>
#include <filesystem>

#include "common/log.hpp"
#include "hca/hca.hpp"
#include "ibd/device_lock.hpp"
#include "ibd/options.hpp"
#include "ibd/server.hpp"
#include "ibd/simhca_child.hpp"
#include "vfio/device.hpp"

namespace asio = boost::asio;
using namespace openib;
using namespace openib::ibd;

namespace {

// Where the device's lock lives: one place per host for a real device or an
// external vfio-user socket, so daemons with different run dirs still
// exclude each other; the run dir for the embedded device (its socket is
// there).
std::string lock_dir(const Options& o) {
  if (!o.device.empty()) {
    std::error_code ec;
    std::filesystem::create_directories("/run/ibd/locks", ec);
    if (!ec && ::access("/run/ibd/locks", W_OK) == 0) return "/run/ibd/locks";
  }
  return o.run_dir + "/locks";
}

std::string lock_device_name(const Options& o) {
  if (o.device.empty()) return "embedded:" + std::filesystem::absolute(o.run_dir).lexically_normal().string();
  if (o.device.starts_with("vfio-user:")) {
    std::error_code ec;
    auto p = std::filesystem::weakly_canonical(o.device.substr(10), ec);
    return "vfio-user:" + (ec ? o.device.substr(10) : p.string());
  }
  return o.device;
}

int run(const Options& o) {
  auto logger = log::get("ibd");
  if (!o.config.empty()) logger->info("config {}", o.config);
  std::error_code ec;
  std::filesystem::create_directories(o.run_dir, ec);
  if (ec) {
    logger->error("cannot create run directory {}: {}", o.run_dir, ec.message());
    return 1;
  }
  auto lock = DeviceLock::acquire(lock_dir(o), lock_device_name(o));
  if (!lock) {
    logger->error("{}", lock.error().message);
    return 1;
  }

  // The device: named, or an embedded simhca child (docs/simhca.md §13).
  std::unique_ptr<SimhcaChild> child;
  std::unique_ptr<vfio::Device> dev;
  std::string device_name = o.device;
  if (o.device.empty()) {
    SimhcaChild::Params p;
    p.binary = o.simhca;
    p.socket = o.run_dir + "/simhca.sock";
    p.log_level = (o.log == "debug" || o.log == "trace") ? o.log : "warn";
    p.cable = o.cable;
    p.pcap = o.pcap;
    p.faults = o.faults;
    p.extra = o.simhca_args;
    auto c = SimhcaChild::spawn(p);
    if (!c) {
      logger->error("starting simhca: {}", c.error().str());
      return 1;
    }
    child = std::move(*c);
    auto d = child->connect(10000);
    if (!d) {
      logger->error("embedded simhca: {}", d.error().str());
      return 1;
    }
    dev = std::move(*d);
    device_name = "vfio-user:" + p.socket + " (embedded)";
  } else {
    if (!o.cable.empty() || !o.pcap.empty() || !o.faults.empty() || !o.simhca_args.empty())
      logger->warn("--cable, --pcap, --faults and --simhca-arg apply to the embedded simhca only; ignored");
    auto d = vfio::open_device(o.device);
    if (!d) {
      logger->error("opening {}: {}", o.device, d.error().str());
      return 1;
    }
    dev = std::move(*d);
  }

  asio::io_context io;
  hca::HcaOptions hopts;
  auto h = hca::Hca::open(*dev, io, hopts);
  if (!h) {
    logger->error("HCA bring-up on {}: {}", device_name, h.error().str());
    return 1;
  }
  std::unique_ptr<hca::Hca> hca = std::move(*h);

  // Static port setup until a subnet manager exists (docs/simhca.md §6.3).
  if (o.lid != 0) {
    hca::PortSetup ps;
    ps.lid = o.lid;
    ps.state = hca::kPortActive;
    if (auto r = hca->set_port(1, ps); !r) {
      logger->error("SET_PORT 1 (LID {}, Active): {}", o.lid, r.error().str());
      return 1;
    }
    logger->info("port 1: LID {}, Active (static setup)", o.lid);
  }

  int exit_code = 0;
  // The user-MAD service (libibumad.so.3 clients: OpenSM, infiniband-diags).
  auto umad = std::make_unique<UmadService>(io, *hca, o.socket, hca->caps().num_ports);
  auto server_ptr =
      std::make_unique<Server>(io, *hca, ServerOptions{o.socket, o.socket_mode, o.socket_group, device_name, o.limits});
  Server& server = *server_ptr;
  umad->set_max_outstanding(o.limits.umad_max_outstanding);
  server.set_umad(umad.get());
  if (auto r = server.start(); !r) {
    logger->error("client socket: {}", r.error().str());
    return 1;
  }

  bool stopping = false;
  auto shutdown = [&](int code, const std::string& why) {
    if (stopping) return;
    stopping = true;
    exit_code = code;
    (void)sd_notify(0, "STOPPING=1");
    logger->info("shutting down: {}", why);
    if (code != 0) server.notify_device_fatal();
    server.stop();
    io.stop();
  };
  server.set_on_device_gone([&] { shutdown(1, "the device is gone"); });

  asio::signal_set signals(io, SIGTERM, SIGINT);
  std::function<void(const boost::system::error_code&, int)> on_signal =
      [&](const boost::system::error_code& e, int sig) {
        if (e) return;
        shutdown(0, sig == SIGTERM ? "SIGTERM" : "SIGINT");
      };
  signals.async_wait(on_signal);
  // The embedded device dies with its process: SIGCHLD means the device is gone.
  asio::signal_set chld(io, SIGCHLD);
  std::function<void(const boost::system::error_code&, int)> on_chld;
  on_chld = [&](const boost::system::error_code& e, int) {
    if (e) return;
    int st = 0;
    if (child && child->exited(&st)) {
      logger->error("embedded simhca {}; the device is gone", describe_wait_status(st));
      shutdown(1, "the device is gone");
      return;
    }
    chld.async_wait(on_chld);
  };
  if (child) chld.async_wait(on_chld);

  (void)sd_notify(0, "READY=1");
  logger->info("ready on {} (device {})", o.socket, device_name);
  std::fprintf(stderr, "ibd: ready on %s\n", o.socket.c_str());
  std::fflush(stderr);

  io.run();

  // Teardown ladder: clients are gone (server.stop); the HCA, then the child.
  server.stop();
  server_ptr.reset();  // before the HCA it uses
  umad.reset();        // QP0/QP1 and the issm files, before the HCA
  signals.cancel();
  chld.cancel();
  if (auto r = hca->close(); !r) {
    if (exit_code == 0) logger->warn("HCA close: {}", r.error().str());
  }
  hca.reset();
  dev.reset();
  if (child) {
    const int st = child->stop();
    logger->info("embedded simhca {}", describe_wait_status(st));
  }
  logger->info("exit {}", exit_code);
  return exit_code;
}

}  // namespace

int main(int argc, char** argv) {
  auto parsed = parse_options(argc, argv);
  if (!parsed.options) return parsed.exit_code;
  const Options& o = *parsed.options;
  log::set_level(o.log);
  ::signal(SIGPIPE, SIG_IGN);
  // Every client holds fds in ibd (its socket, memfds, eventfds): raise
  // the soft fd limit to the hard one.
  rlimit nofile{};
  if (::getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
    nofile.rlim_cur = nofile.rlim_max;
    (void)::setrlimit(RLIMIT_NOFILE, &nofile);
  }
  // asio's signal_set catches these; block none (children start with an
  // empty mask anyway).
  return run(o);
}
