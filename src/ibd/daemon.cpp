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
#include "ibd/recovery.hpp"
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

// ibd's life: the device opened through the driver table, the services
// built and registered in order (each after those it uses), the loop, the
// recovery of a lost device (recovery.hpp), and the teardown in reverse.
class Daemon {
 public:
  explicit Daemon(const Options& o)
      : o_(o), log_(log::get("ibd")), device_name_(device_name(o)), slot_(device_name_),
        event_bytes_("queued event bytes", "event-bytes", o.limits.event_bytes), connect_timer_(io_),
        signals_(io_, SIGTERM, SIGINT), chld_(io_, SIGCHLD) {}
  int run();

 private:
  static std::string device_name(const Options& o) {
    return o.device.empty() ? "vfio-user:" + o.run_dir + "/simhca.sock (embedded)" : o.device;
  }
  Result<void> open_device();
  void build_services();
  Result<void> start_services();
  void watch_signals();
  void watch_child();
  void shutdown(int code, const std::string& why);
  void teardown();
  // Recovery's steps (docs/operations.md §5).
  Recovery::Steps recovery_steps();
  void fence(const std::string& why);
  void attempt(unsigned n, Recovery::AttemptDone done);
  void poll_connect(Recovery::AttemptDone done);
  void bring_up(std::unique_ptr<vfio::Device> d, Recovery::AttemptDone done);
  void attempt_failed(unsigned n, const Error& e);
  void device_back(unsigned attempts, std::chrono::milliseconds down);

  const Options& o_;
  std::shared_ptr<spdlog::logger> log_;
  std::string device_name_;
  asio::io_context io_;
  std::unique_ptr<SimhcaChild> child_;
  DeviceSlot slot_;  // outlives its transports (device recovery)
  std::unique_ptr<hca::Device> hca_;
  // Queued event bytes per client and per uid, shared by the CM and the
  // RDMA CM (docs/operations.md "Limits"); it outlives both services.
  Budget event_bytes_;
  std::unique_ptr<UmadService> umad_;
  std::unique_ptr<Server> server_;
  std::unique_ptr<SaService> sa_;
  std::unique_ptr<IpoibService> ipoib_;
  std::unique_ptr<CmService> cm_;
  std::unique_ptr<IpoibLinks> ipoib_links_;
  std::unique_ptr<arp::Resolver> resolver_;
  std::unique_ptr<CmaService> cma_;
  ServiceRegistry services_;
  std::unique_ptr<Recovery> recovery_;
  asio::steady_timer connect_timer_;  // an attempt's polls of the child's socket
  std::chrono::steady_clock::time_point connect_deadline_;
  asio::signal_set signals_, chld_;
  bool stopping_ = false;
  int exit_code_ = 0;
};

int Daemon::run() {
  if (!o_.config.empty()) log_->info("config {}", o_.config);
  std::error_code ec;
  std::filesystem::create_directories(o_.run_dir, ec);
  if (ec) {
    log_->error("cannot create run directory {}: {}", o_.run_dir, ec.message());
    return 1;
  }
  auto lock = DeviceLock::acquire(lock_dir(o_), lock_device_name(o_));
  if (!lock) {
    log_->error("{}", lock.error().message);
    return 1;
  }
  if (auto r = open_device(); !r) {
    log_->error("{}", r.error().str());
    return 1;
  }
  build_services();
  if (auto r = start_services(); !r) {
    log_->error("client socket: {}", r.error().str());
    teardown();
    return 1;
  }
  recovery_ = std::make_unique<Recovery>(io_, o_.restart_limit, recovery_steps());
  server_->set_on_device_gone([this] { recovery_->lost("commands fail, or DEVICE_FATAL"); });
  watch_signals();
  if (o_.device.empty()) watch_child();
  (void)sd_notify(0, "READY=1");
  log_->info("ready on {} (device {})", o_.socket, device_name_);
  std::fprintf(stderr, "ibd: ready on %s\n", o_.socket.c_str());
  std::fflush(stderr);
  io_.run();
  teardown();
  log_->info("exit {}", exit_code_);
  return exit_code_;
}

// The device: named, or an embedded simhca child (docs/simhca.md §13); its
// driver from the table by PCI ID (hca/driver_table.hpp); the static port
// setup.
Result<void> Daemon::open_device() {
  if (!o_.device.empty() && (!o_.cable.empty() || !o_.pcap.empty() || !o_.faults.empty() || !o_.simhca_args.empty()))
    log_->warn("--cable, --pcap, --faults and --simhca-arg apply to the embedded simhca only; ignored");
  auto d = open_transport(o_, child_);
  if (!d) return err(d.error().code, "opening {}: {}", device_name_, d.error().str());
  slot_.replace(std::move(*d));
  auto h = hca::open_device(slot_, io_);
  if (!h) return err(h.error().code, "HCA bring-up on {}: {}", device_name_, h.error().str());
  hca_ = std::move(*h);
  return setup_port(o_, *hca_);
}

// The services, each after those it uses, registered in that order
// (service.hpp): the user-MAD service, the SA client and path cache, IPoIB,
// the IB CM, the RDMA CM over it with the ARP module on IPoIB.
void Daemon::build_services() {
  const uint8_t ports = hca_->caps().num_ports;
  umad_ = std::make_unique<UmadService>(io_, *hca_, o_.socket, ports, o_.umad_user_gmp);
  umad_->set_max_outstanding(o_.limits.umad_max_outstanding);
  server_ = std::make_unique<Server>(io_, *hca_, ServerOptions{o_.socket, o_.socket_mode, o_.socket_group, device_name_, o_.limits});
  sa_ = std::make_unique<SaService>(io_, *hca_, *umad_, ports, o_.state_dir);
  if (auto r = sa_->publish_table(o_.path_table_slots); !r)  // docs/sa.md "Shared table"
    log_->warn("no shared path table (clients ask ibd for every path): {}", r.error().str());
  sa_->set_limits(o_.limits.mcast_joins, o_.limits.services, o_.limits.uid_sa_queries_per_sec,
                  o_.limits.uid_sa_query_burst);  // docs/sa.md "Security"
  sa_->set_path_change_handler(
      [this](uint8_t port, uint16_t pkey, const sa::Gid& dgid) { server_->on_path_change(port, pkey, dgid); });
  if (!o_.ipoib.empty())  // docs/ipoib.md
    ipoib_ = std::make_unique<IpoibService>(io_, *hca_, *sa_, IpoibConfig{o_.ipoib, o_.ipoib_pkey, o_.ipoib_port, o_.ipoib_qkey});
  cm_ = std::make_unique<CmService>(io_, *hca_, *umad_, ports);  // docs/cm.md
  cm_->set_max_queued_events(o_.cm_max_queued_events);
  cm_->set_event_budget(&event_bytes_);
  cm_->set_id_limits(o_.limits.cm_ids);
  cm_->set_qp_ops(server_->qp_ops());
  if (ipoib_) {  // docs/cma.md, docs/arp.md
    ipoib_links_ = std::make_unique<IpoibLinks>(*ipoib_);
    resolver_ = std::make_unique<arp::Resolver>(io_, *ipoib_links_);
  }
  cma_ = std::make_unique<CmaService>(io_, *hca_, *cm_, *sa_, ports);
  cma_->set_max_queued_events(o_.cm_max_queued_events);
  cma_->set_id_limit(o_.limits.cma_ids);  // budget.hpp
  cma_->set_event_budget(&event_bytes_);
  if (ipoib_) cma_->set_ipoib_qkey([p = ipoib_.get()] { return p->qkey(); });
  cma_->set_qp_ops(server_->qp_ops());
  services_.add(*umad_);
  services_.add(*sa_);
  if (ipoib_) services_.add(*ipoib_);
  services_.add(*cm_);
  services_.add(*cma_);
  server_->set_services(&services_);
}

Result<void> Daemon::start_services() {
  OPENIB_TRY(server_->start());
  sa_->start();
  cm_->start();
  if (resolver_) {
    if (auto r = resolver_->start(); !r)
      log_->warn("no address resolution for the RDMA CM: {}", r.error().str());
    else
      cma_->set_resolver(resolver_.get());
  }
  if (auto r = cma_->start(); !r) log_->warn("no RDMA CM: {}", r.error().str());
  if (ipoib_) ipoib_->start();
  return ok();
}

// SIGTERM/SIGINT stop ibd (a second one at once).
void Daemon::watch_signals() {
  signals_.async_wait([this](const boost::system::error_code& e, int sig) {
    if (e) return;
    const char* name = sig == SIGTERM ? "SIGTERM" : "SIGINT";
    if (stopping_) {
      log_->info("{} again: stopping now", name);
      return io_.stop();
    }
    shutdown(0, name);
    watch_signals();
  });
}

// The embedded device dies with its process: SIGCHLD means the device is gone.
void Daemon::watch_child() {
  chld_.async_wait([this](const boost::system::error_code& e, int) {
    if (e) return;
    int st = 0;
    if (child_ && child_->exited(&st)) {
      log_->error("embedded simhca {}; the device is gone", describe_wait_status(st));
      recovery_->lost("embedded simhca " + describe_wait_status(st));
    }
    if (!stopping_) watch_child();
  });
}

void Daemon::shutdown(int code, const std::string& why) {
  if (stopping_) return;
  stopping_ = true;
  exit_code_ = code;
  recovery_->stop();
  connect_timer_.cancel();
  (void)sd_notify(0, "STOPPING=1");
  log_->info("shutting down: {}", why);
  if (code != 0) server_->notify_device_fatal();
  sa_->save();  // the path cache, for the next start (docs/sa.md)
  server_->stop();
  if (ipoib_) ipoib_->stop();
  // The SA is told to forget the ports' trap subscriptions (docs/sa.md
  // "In ibd"): the loop runs on until it answered, at most 1 s; a second
  // SIGTERM/SIGINT stops at once. Not when the device is gone (code != 0):
  // nothing goes out through it, and the loop stops at once.
  if (code != 0) return io_.stop();
  sa_->shutdown(std::chrono::seconds(1), [this] { io_.stop(); });
}

// The ladder in reverse: clients (the Server), the services users first
// (the RDMA CM before the IB CM, the CM's agents before the MAD layers,
// QP0/QP1 and the issm files last), the device, its transport, the child.
void Daemon::teardown() {
  if (recovery_) recovery_->stop();
  connect_timer_.cancel();
  if (server_) server_->stop();
  server_.reset();
  cma_.reset();
  resolver_.reset();
  ipoib_links_.reset();
  cm_.reset();
  ipoib_.reset();
  sa_.reset();
  umad_.reset();
  boost::system::error_code ec;
  signals_.cancel(ec);
  chld_.cancel(ec);
  if (hca_) {
    if (auto r = hca_->close(); !r && exit_code_ == 0) log_->warn("HCA close: {}", r.error().str());
  }
  hca_.reset();
  slot_.clear();
  if (child_) log_->info("embedded simhca {}", describe_wait_status(child_->stop()));
}

// ---- device recovery (docs/operations.md §5) ---------------------------------

Recovery::Steps Daemon::recovery_steps() {
  Recovery::Steps s;
  s.fence = [this](const std::string& why) { fence(why); };
  s.attempt = [this](unsigned n, Recovery::AttemptDone done) { attempt(n, std::move(done)); };
  s.failed = [this](unsigned n, const Error& e) { attempt_failed(n, e); };
  s.back = [this](unsigned n, std::chrono::milliseconds down) { device_back(n, down); };
  s.give_up = [this](const std::string& why) { shutdown(1, o_.restart_limit == 0 ? "the device is gone" : why); };
  return s;
}

// Dead: the device fenced (an embedded simhca SIGKILLed, the transport
// closed), clients told and their objects forgotten, the MAD layers and
// the HCA closed, all without device commands.
void Daemon::fence(const std::string& why) {
  if (stopping_) return;
  log_->error("device {} is gone ({}); recovering", device_name_, why);
  if (child_) log_->info("embedded simhca {}", describe_wait_status(child_->kill_now()));
  slot_.clear();
  server_->device_lost();  // user-MAD sessions and agents stay (docs/umad.md "Device loss")
  (void)hca_->close_dead();
  child_.reset();
  server_->set_device_state(DeviceState::kRestarting);
}

// One attempt. Every step runs on the loop and returns to it: the child's
// socket is tried every 20 ms on a timer (simhca takes tens of milliseconds
// to listen, or much longer on a loaded host), the bring-up ladder's
// commands and the port setup continue from their completions, so clients,
// INFO and signals are served meanwhile. What stays a call on the loop:
// fork/exec, the vfio-user handshake once the socket accepts, the function
// reset, and the ladder's register accesses and DMA_MAPs (well under a
// millisecond on simhca).
void Daemon::attempt(unsigned n, Recovery::AttemptDone done) {
  log_->info("restarting device {} (attempt {} of {})", device_name_, n, o_.restart_limit);
  if (!o_.device.empty()) {
    auto d = vfio::open_device(o_.device);
    if (!d) return done(d.error());
    return bring_up(std::move(*d), std::move(done));
  }
  auto c = SimhcaChild::spawn(simhca_params(o_));
  if (!c) return done(c.error());
  child_ = std::move(*c);
  connect_deadline_ = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  poll_connect(std::move(done));
}

void Daemon::poll_connect(Recovery::AttemptDone done) {
  auto d = child_->try_connect();
  if (d) return bring_up(std::move(*d), std::move(done));
  if (d.error().code != EAGAIN) return done(err(d.error().code, "embedded simhca: {}", d.error().message));
  if (std::chrono::steady_clock::now() >= connect_deadline_)
    return done(err(ETIMEDOUT, "embedded simhca did not accept within 10 s: {}", d.error().message));
  connect_timer_.expires_after(std::chrono::milliseconds(20));
  connect_timer_.async_wait([this, done = std::move(done)](const boost::system::error_code& e) mutable {
    if (!e && !stopping_ && child_) poll_connect(std::move(done));
  });
}

void Daemon::bring_up(std::unique_ptr<vfio::Device> d, Recovery::AttemptDone done) {
  const auto t0 = std::chrono::steady_clock::now();
  slot_.replace(std::move(d));
  // A device that is not ours to restart may still be in its fatal state
  // (docs/simhca.md §11.4): a function reset first (§11.5, VFIO reset).
  if (!o_.device.empty()) {
    if (auto r = slot_.reset(); !r) return done(r.error());
  }
  hca_->reopen_async([this, t0, done = std::move(done)](Result<void> r) mutable {
    if (!r) return done(r.take_error());
    log_->info("device {}: bring-up took {} ms", device_name_,
               std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count());
    setup_port_async(o_, *hca_, std::move(done));
  });
}

// What a failed attempt left: the device closed, the child killed, the
// transport dropped.
void Daemon::attempt_failed(unsigned n, const Error& e) {
  log_->warn("device restart attempt {} of {}: {}", n, o_.restart_limit, e.str());
  (void)hca_->close_dead();
  if (child_) (void)child_->kill_now();
  child_.reset();
  slot_.clear();
}

void Daemon::device_back(unsigned attempts, std::chrono::milliseconds down) {
  server_->device_back();  // and the services (the user-MAD service's layers and agents)
  log_->info("device {} is back after {} attempt(s), {} ms after it was lost (generation {})", device_name_, attempts,
             down.count(), server_->device_generation());
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
  return Daemon(o).run();
}
