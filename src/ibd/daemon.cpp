// ibd: the root daemon (docs/operations.md). Start-up ladder: options, log
// level, device lock, device (a named one, or an embedded simhca child),
// HCA bring-up, static port setup, client socket, readiness. Shutdown on
// SIGTERM/SIGINT (bounded: the SA's answers to unsubscribing, at most 1 s;
// a second signal stops at once). A device that goes away is fenced and brought up again
// (docs/operations.md §5); ibd exits 1 only when it does not come back.
#include <signal.h>
#include <sys/resource.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cstdio>
#include <filesystem>

#include "common/log.hpp"
#include "hca/driver_table.hpp"
#include "ibd/daemon.hpp"
#include "ibd/device_lock.hpp"
#include "ibd/device_slot.hpp"
#include "ibd/ipoib_links.hpp"
#include "ibd/options.hpp"
#include "ibd/server.hpp"
#include "ibd/simhca_child.hpp"
#include "ibd/cm_service.hpp"
#include "ibd/cma_service.hpp"
#include "ibd/ipoib_service.hpp"
#include "ibd/sa_service.hpp"
#include "ibd/umad_service.hpp"
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

// The embedded simhca child's parameters (docs/simhca.md §13).
SimhcaChild::Params simhca_params(const Options& o) {
  SimhcaChild::Params p;
  p.binary = o.simhca;
  p.socket = o.run_dir + "/simhca.sock";
  p.log_level = (o.log == "debug" || o.log == "trace") ? o.log : "warn";
  p.cable = o.cable;
  p.pcap = o.pcap;
  p.faults = o.faults;
  p.extra = o.simhca_args;
  return p;
}

// The transport to the device at start-up, before the loop runs: a new
// embedded simhca child (whose socket then accepts) or the named device
// opened.
Result<std::unique_ptr<vfio::Device>> open_transport(const Options& o, std::unique_ptr<SimhcaChild>& child) {
  if (!o.device.empty()) return vfio::open_device(o.device);
  OPENIB_TRY_ASSIGN(child, SimhcaChild::spawn(simhca_params(o)));
  auto d = child->connect(10000);
  if (!d) return err(d.error().code, "embedded simhca: {}", d.error().message);
  return d;
}

// Static port setup until a subnet manager exists (docs/simhca.md §6.3).
hca::PortSetup static_port(const Options& o) {
  hca::PortSetup ps;
  ps.lid = o.lid;
  ps.state = hca::kPortActive;
  return ps;
}

Result<void> setup_port(const Options& o, hca::Device& hca) {
  if (o.lid == 0) return ok();
  auto r = hca::call_sync<void>(hca, [&](hca::Device::Done<void> d) { hca.set_port_async(1, static_port(o), std::move(d)); });
  if (!r)
    return err(r.error().code, "SET_PORT 1 (LID {}, Active): {}", o.lid, r.error().str());
  log::get("ibd")->info("port 1: LID {}, Active (static setup)", o.lid);
  return ok();
}

// The same on the loop (device recovery): a continuation, not a wait.
void setup_port_async(const Options& o, hca::Device& hca, hca::Device::Done<void> done) {
  if (o.lid == 0) return done(ok());
  hca.set_port_async(1, static_port(o), [&o, done = std::move(done)](Result<void> r) mutable {
    if (!r) return done(err(r.error().code, "SET_PORT 1 (LID {}, Active): {}", o.lid, r.error().str()));
    log::get("ibd")->info("port 1: LID {}, Active (static setup)", o.lid);
    done(ok());
  });
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

  // The device: named, or an embedded simhca child (docs/simhca.md §13),
  // inside a slot that outlives its transports (device recovery).
  std::unique_ptr<SimhcaChild> child;
  std::string device_name = o.device;
  if (o.device.empty()) {
    device_name = "vfio-user:" + o.run_dir + "/simhca.sock (embedded)";
  } else if (!o.cable.empty() || !o.pcap.empty() || !o.faults.empty() || !o.simhca_args.empty()) {
    logger->warn("--cable, --pcap, --faults and --simhca-arg apply to the embedded simhca only; ignored");
  }
  DeviceSlot slot(device_name);
  {
    auto d = open_transport(o, child);
    if (!d) {
      logger->error("opening {}: {}", device_name, d.error().str());
      return 1;
    }
    slot.replace(std::move(*d));
  }

  asio::io_context io;
  auto h = hca::open_device(slot, io);  // the driver table's driver for its PCI ID
  if (!h) {
    logger->error("HCA bring-up on {}: {}", device_name, h.error().str());
    return 1;
  }
  std::unique_ptr<hca::Device> hca = std::move(*h);
  if (auto r = setup_port(o, *hca); !r) {
    logger->error("{}", r.error().str());
    return 1;
  }

  int exit_code = 0;
  // The user-MAD service (libibumad.so.3 clients: OpenSM, infiniband-diags).
  auto umad = std::make_unique<UmadService>(io, *hca, o.socket, hca->caps().num_ports, o.umad_user_gmp);
  auto server_ptr =
      std::make_unique<Server>(io, *hca, ServerOptions{o.socket, o.socket_mode, o.socket_group, device_name, o.limits});
  Server& server = *server_ptr;
  umad->set_max_outstanding(o.limits.umad_max_outstanding);
  // The SA client and path cache on each port's MAD layer (docs/sa.md "In ibd").
  auto sa_service = std::make_unique<SaService>(io, *hca, *umad, hca->caps().num_ports, o.state_dir);
  if (auto r = sa_service->publish_table(o.path_table_slots); !r)  // docs/sa.md "Shared table"
    logger->warn("no shared path table (clients ask ibd for every path): {}", r.error().str());
  sa_service->set_limits(o.limits.mcast_joins, o.limits.services, o.limits.uid_sa_queries_per_sec,
                         o.limits.uid_sa_query_burst);  // clients' joins, services, SA queries (docs/sa.md "Security")
  sa_service->set_path_change_handler(
      [&server](uint8_t port, uint16_t pkey, const sa::Gid& dgid) { server.on_path_change(port, pkey, dgid); });
  // IPoIB on a TAP interface (docs/ipoib.md).
  std::unique_ptr<IpoibService> ipoib;
  if (!o.ipoib.empty()) {
    ipoib = std::make_unique<IpoibService>(io, *hca, *sa_service, IpoibConfig{o.ipoib, o.ipoib_pkey, o.ipoib_port, o.ipoib_qkey});
  }
  // The connection manager on each port's MAD layer (docs/cm.md).
  // Queued event bytes per client and per uid, shared by the CM and the
  // RDMA CM (docs/operations.md "Limits"); it outlives both services.
  Budget event_bytes("queued event bytes", "event-bytes", o.limits.event_bytes);
  auto cm = std::make_unique<CmService>(io, *hca, *umad, hca->caps().num_ports);
  cm->set_max_queued_events(o.cm_max_queued_events);
  cm->set_event_budget(&event_bytes);
  cm->set_id_limits(o.limits.cm_ids);
  cm->set_qp_ops(server.qp_ops());
  // The RDMA CM over it, with the ARP module on the IPoIB interface
  // (docs/cma.md, docs/arp.md).
  std::unique_ptr<IpoibLinks> ipoib_links;
  std::unique_ptr<arp::Resolver> resolver;
  if (ipoib) {
    ipoib_links = std::make_unique<IpoibLinks>(*ipoib);
    resolver = std::make_unique<arp::Resolver>(io, *ipoib_links);
  }
  auto cma = std::make_unique<CmaService>(io, *hca, *cm, *sa_service, hca->caps().num_ports);
  cma->set_max_queued_events(o.cm_max_queued_events);
  // RDMA CM ids per client and per uid; queued event bytes in the IB CM's budget (budget.hpp).
  cma->set_id_limit(o.limits.cma_ids);
  cma->set_event_budget(&event_bytes);
  if (ipoib) cma->set_ipoib_qkey([p = ipoib.get()] { return p->qkey(); });
  cma->set_qp_ops(server.qp_ops());
  // The services, each after those it uses (service.hpp).
  ServiceRegistry services;
  services.add(*umad);
  services.add(*sa_service);
  if (ipoib) services.add(*ipoib);
  services.add(*cm);
  services.add(*cma);
  server.set_services(&services);
  if (auto r = server.start(); !r) {
    logger->error("client socket: {}", r.error().str());
    return 1;
  }
  sa_service->start();
  cm->start();
  if (resolver) {
    if (auto r = resolver->start(); !r) {
      logger->warn("no address resolution for the RDMA CM: {}", r.error().str());
    } else {
      cma->set_resolver(resolver.get());
    }
  }
  if (auto r = cma->start(); !r) logger->warn("no RDMA CM: {}", r.error().str());
  if (ipoib) ipoib->start();

  bool stopping = false;
  asio::steady_timer restart_timer(io);
  auto shutdown = [&](int code, const std::string& why) {
    if (stopping) return;
    stopping = true;
    exit_code = code;
    restart_timer.cancel();
    (void)sd_notify(0, "STOPPING=1");
    logger->info("shutting down: {}", why);
    if (code != 0) server.notify_device_fatal();
    sa_service->save();  // the path cache, for the next start (docs/sa.md)
    server.stop();
    if (ipoib) ipoib->stop();
    // The SA is told to forget the ports' trap subscriptions (docs/sa.md
    // "In ibd"): the loop runs on until it answered, at most 1 s; a second
    // SIGTERM/SIGINT stops at once. Not when the device is gone (code != 0):
    // nothing goes out through it, and the loop stops at once as before.
    if (code != 0) return io.stop();
    sa_service->shutdown(std::chrono::seconds(1), [&] { io.stop(); });
  };

  // Device recovery (docs/operations.md §5): Running -> Dead -> Restarting
  // -> Running. Dead: the device is fenced (an embedded simhca SIGKILLed,
  // the transport closed), clients are told and their objects forgotten,
  // the MAD layer and the HCA closed, all without device commands.
  // Restarting: bring-up attempts with backoff, at most --restart-limit.
  unsigned attempt = 0;
  auto lost_at = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point connect_deadline;
  std::function<void()> try_restart, poll_connect;
  std::function<void(std::unique_ptr<vfio::Device>)> bring_up;
  auto retry_or_give_up = [&](const Error& e) {
    if (stopping) return;
    logger->warn("device restart attempt {} of {}: {}", attempt, o.restart_limit, e.str());
    if (child) (void)child->kill_now();
    child.reset();
    slot.clear();
    if (attempt >= o.restart_limit) return shutdown(1, fmt::format("the device did not come back after {} attempts", attempt));
    const auto delay = std::chrono::milliseconds(std::min(5000, 100 << std::min(attempt - 1, 6u)));
    restart_timer.expires_after(delay);
    restart_timer.async_wait([&](const boost::system::error_code& e2) {
      if (!e2 && !stopping) try_restart();
    });
  };
  // Every step of an attempt runs on the loop and returns to it: the
  // child's socket is tried every 20 ms on a timer (simhca takes tens of
  // milliseconds to listen, or much longer on a loaded host), the bring-up
  // ladder's commands and the port setup continue from their completions,
  // so clients, INFO and signals are served meanwhile. What stays a call
  // on the loop: fork/exec, the vfio-user handshake once the socket
  // accepts, the function reset, and the ladder's register accesses and
  // DMA_MAPs (well under a millisecond on simhca).
  try_restart = [&] {
    ++attempt;
    logger->info("restarting device {} (attempt {} of {})", device_name, attempt, o.restart_limit);
    if (!o.device.empty()) {
      auto d = vfio::open_device(o.device);
      if (!d) return retry_or_give_up(d.error());
      return bring_up(std::move(*d));
    }
    auto c = SimhcaChild::spawn(simhca_params(o));
    if (!c) return retry_or_give_up(c.error());
    child = std::move(*c);
    connect_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    poll_connect();
  };
  poll_connect = [&] {
    auto d = child->try_connect();
    if (d) return bring_up(std::move(*d));
    if (d.error().code != EAGAIN) return retry_or_give_up(err(d.error().code, "embedded simhca: {}", d.error().message));
    if (std::chrono::steady_clock::now() >= connect_deadline)
      return retry_or_give_up(err(ETIMEDOUT, "embedded simhca did not accept within 10 s: {}", d.error().message));
    restart_timer.expires_after(std::chrono::milliseconds(20));
    restart_timer.async_wait([&](const boost::system::error_code& e2) {
      if (!e2 && !stopping && child) poll_connect();
    });
  };
  // An attempt's next step, run from the loop once `r` is known (not inside
  // the completion that produced it: a failed attempt's close_dead() would
  // destroy the command interface under itself), unless the attempt is
  // over (shutdown, or a later attempt).
  auto then_on_loop = [&](unsigned this_attempt, std::function<void()> next) {
    return [&, this_attempt, next = std::move(next)](Result<void> r) mutable {
      asio::post(io, [&, this_attempt, next = std::move(next), r = std::move(r)] {
        if (stopping || this_attempt != attempt) return;
        if (!r) {
          (void)hca->close_dead();
          return retry_or_give_up(r.error());
        }
        next();
      });
    };
  };
  bring_up = [&](std::unique_ptr<vfio::Device> d) {
    const auto t0 = std::chrono::steady_clock::now();
    slot.replace(std::move(d));
    // A device that is not ours to restart may still be in its fatal state
    // (docs/simhca.md §11.4): a function reset first (§11.5, VFIO reset).
    if (!o.device.empty()) {
      if (auto r = slot.reset(); !r) return retry_or_give_up(r.error());
    }
    const unsigned this_attempt = attempt;
    hca->reopen_async(then_on_loop(this_attempt, [&, this_attempt, t0] {
      logger->info("device {}: bring-up took {} ms", device_name,
                   std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count());
      setup_port_async(o, *hca, then_on_loop(this_attempt, [&] {
        server.device_back();  // and the user-MAD service's layers and agents
        logger->info("device {} is back after {} attempt(s), {} ms after it was lost (generation {})", device_name,
                     attempt, std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - lost_at).count(),
                     server.device_generation());
      }));
    }));
  };
  auto lose_device = [&](const std::string& why) {
    if (stopping || server.device_state() != DeviceState::kRunning) return;
    if (o.restart_limit == 0) return shutdown(1, "the device is gone");
    lost_at = std::chrono::steady_clock::now();
    logger->error("device {} is gone ({}); recovering", device_name, why);
    // Fence: the device must not touch memory any more.
    if (child) {
      const int st = child->kill_now();
      logger->info("embedded simhca {}", describe_wait_status(st));
    }
    slot.clear();
    server.device_lost();  // user-MAD sessions and agents stay (docs/umad.md "Device loss")
    (void)hca->close_dead();
    child.reset();
    server.set_device_state(DeviceState::kRestarting);
    attempt = 0;
    try_restart();
  };
  server.set_on_device_gone([&] { lose_device("commands fail, or DEVICE_FATAL"); });

  asio::signal_set signals(io, SIGTERM, SIGINT);
  std::function<void(const boost::system::error_code&, int)> on_signal =
      [&](const boost::system::error_code& e, int sig) {
        if (e) return;
        if (stopping) {
          logger->info("{} again: stopping now", sig == SIGTERM ? "SIGTERM" : "SIGINT");
          return io.stop();
        }
        shutdown(0, sig == SIGTERM ? "SIGTERM" : "SIGINT");
        signals.async_wait(on_signal);
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
      lose_device("embedded simhca " + describe_wait_status(st));
    }
    if (!stopping) chld.async_wait(on_chld);
  };
  if (o.device.empty()) chld.async_wait(on_chld);

  (void)sd_notify(0, "READY=1");
  logger->info("ready on {} (device {})", o.socket, device_name);
  std::fprintf(stderr, "ibd: ready on %s\n", o.socket.c_str());
  std::fflush(stderr);

  io.run();

  // Teardown ladder: clients are gone (server.stop); the HCA, then the child.
  restart_timer.cancel();
  server.stop();
  server_ptr.reset();  // before the HCA it uses
  cm.reset();          // its CM agents, before the MAD layers
  umad.reset();        // QP0/QP1 and the issm files, before the HCA
  signals.cancel();
  chld.cancel();
  if (auto r = hca->close(); !r) {
    if (exit_code == 0) logger->warn("HCA close: {}", r.error().str());
  }
  hca.reset();
  slot.clear();
  if (child) {
    const int st = child->stop();
    logger->info("embedded simhca {}", describe_wait_status(st));
  }
  logger->info("exit {}", exit_code);
  return exit_code;
}

}  // namespace

int openib::ibd::daemon_main(int argc, char** argv) {
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
