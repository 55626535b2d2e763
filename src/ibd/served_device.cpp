// One device ibd serves (served_device.hpp, docs/operations.md). Start-up
// ladder: device lock, device (a named one, or an embedded simhca child),
// HCA bring-up, static port setup, services, client socket. A device that
// goes away is fenced and brought up again (docs/operations.md §5); when it
// does not come back it stops serving, and the daemon exits 1 once no
// device serves.
#include "ibd/served_device.hpp"

#include <unistd.h>

#include <boost/asio/post.hpp>
#include <algorithm>
#include <filesystem>

#include "clientproto/devices.hpp"
#include "common/log.hpp"
#include "hca/driver_table.hpp"
#include "hca/port_caps.hpp"
#include "ibd/cm_service.hpp"
#include "ibd/cma_service.hpp"
#include "ibd/ipoib_links.hpp"
#include "ibd/ipoib_service.hpp"
#include "ibd/netdev_service.hpp"
#include "ibd/sa_service.hpp"
#include "ibd/server.hpp"
#include "ibd/simhca_child.hpp"
#include "ibd/umad_service.hpp"
#include "vfio/device.hpp"

namespace asio = boost::asio;

namespace openib::ibd {

namespace {

// Where a device's lock lives: one place per host for a real device or an
// external vfio-user socket, so daemons with different run dirs still
// exclude each other; the run dir for an embedded device (its socket is
// there).
std::string lock_dir(const Options& o, const DeviceOptions& d) {
  if (!d.embedded()) {
    std::error_code ec;
    std::filesystem::create_directories("/run/ibd/locks", ec);
    if (!ec && ::access("/run/ibd/locks", W_OK) == 0) return "/run/ibd/locks";
  }
  return o.run_dir + "/locks";
}

std::string lock_device_name(const Options& o, const DeviceOptions& d) {
  if (d.embedded())
    return "embedded:" + std::filesystem::absolute(o.run_dir).lexically_normal().string() +
           (&d == &o.devices.front() ? "" : "/" + d.name);
  if (d.spec.starts_with("vfio-user:")) {
    std::error_code ec;
    auto p = std::filesystem::weakly_canonical(d.spec.substr(10), ec);
    return "vfio-user:" + (ec ? d.spec.substr(10) : p.string());
  }
  return d.spec;
}

// simhca's default node GUID; the embedded device number i > 0 gets it +
// 16 i unless its simhca-arg names one (docs/operations.md "Several devices").
constexpr uint64_t kSimhcaGuid = 0x123400fffe000001ull;

// The embedded simhca child's parameters (docs/simhca.md §13).
SimhcaChild::Params simhca_params(const Options& o, const DeviceOptions& d) {
  SimhcaChild::Params p;
  p.binary = o.simhca;
  p.socket = d.simhca_socket;
  p.log_level = (o.log == "debug" || o.log == "trace") ? o.log : "warn";
  p.cable = d.cable;
  p.pcap = d.pcap;
  p.faults = d.faults;
  p.extra = d.simhca_args;
  const size_t i = size_t(&d - o.devices.data());
  if (i > 0 && std::find(p.extra.begin(), p.extra.end(), "--guid") == p.extra.end())
    p.extra.insert(p.extra.begin(), {"--guid", fmt::format("{:x}", kSimhcaGuid + 16 * i)});
  return p;
}

// Static port setup until a subnet manager exists (docs/simhca.md §6.3).
hca::PortSetup static_port(const DeviceOptions& d) {
  hca::PortSetup ps;
  ps.lid = d.lid;
  ps.state = hca::kPortActive;
  return ps;
}

}  // namespace

ServedDevice::ServedDevice(asio::io_context& io, const Options& o, size_t index, std::function<void(int)> stopped)
    : io_(io), o_(o), d_(o.devices.at(index)), stopped_(std::move(stopped)), log_(log::get("ibd")),
      spec_(d_.embedded() ? "vfio-user:" + d_.simhca_socket + " (embedded)" : d_.spec), slot_(spec_),
      event_bytes_("queued event bytes", "event-bytes", o.limits.event_bytes), connect_timer_(io), chld_(io, SIGCHLD) {}

ServedDevice::~ServedDevice() { teardown(); }

Result<void> ServedDevice::start() {
  auto lock = DeviceLock::acquire(lock_dir(o_, d_), lock_device_name(o_, d_));
  if (!lock) return lock.take_error();
  lock_.emplace(std::move(*lock));
  if (auto r = open_device(); !r) {
    teardown();
    return r;
  }
  build_services();
  if (netdev_) {  // an InfiniBand port has no netdev (IPoIB is --ipoib)
    if (auto r = netdev_->check_port(); !r) {
      teardown();
      return r;
    }
  }
  if (auto r = start_services(); !r) {
    teardown();
    return err(r.error().code, "client socket {}: {}", d_.socket, r.error().str());
  }
  if (&d_ == &o_.devices.front()) {
    if (auto r = link_name(); !r) {
      teardown();
      return r;
    }
  }
  recovery_ = std::make_unique<Recovery>(io_, o_.restart_limit, recovery_steps());
  server_->set_on_device_gone([this] { recovery_->lost("commands fail, or DEVICE_FATAL"); });
  if (d_.embedded()) watch_child();
  serving_ = true;
  log_->info("device {} ready on {} ({})", d_.name, d_.socket, spec_);
  return ok();
}

// The first device's name beside the daemon's socket (proto::device_socket),
// a symlink to it, so that every device is opened and listed by name. What
// is at that path goes first (a link a killed ibd left); a path ibd cannot
// take (another user's file in a sticky directory) stops the start, so that
// nobody else answers clients asking for the device by name.
Result<void> ServedDevice::link_name() {
  const std::string path = proto::device_socket(o_.socket, d_.name);
  std::error_code ec;
  std::filesystem::remove(path, ec);
  if (!ec) std::filesystem::create_symlink(std::filesystem::path(o_.socket).filename(), path, ec);
  if (ec) return err(ec.value(), "the device's name {}: {}", path, ec.message());
  linked_ = path;
  return ok();
}

std::optional<arp::Link> ServedDevice::ipoib_link(int ifindex) const {
  return ipoib_links_ ? ipoib_links_->link(ifindex) : std::nullopt;
}

int ServedDevice::netdev_ifindex(uint8_t port) const {
  return netdev_ && netdev_->port() == port ? netdev_->ifindex() : 0;
}

// A RoCE port's destination MAC (arp/neigh_lookup.hpp); ENODEV on a port
// without a netdev (InfiniBand: the AV's MAC is not used).
Result<std::array<uint8_t, 6>> ServedDevice::dmac(uint8_t port, const std::array<uint8_t, 16>& dgid) {
  if (auto m = arp::dmac_from_gid(dgid)) return *m;
  const int ifindex = netdev_ifindex(port);
  if (ifindex <= 0) return err(ENODEV, "port {} has no netdev", port);
  return neigh_.dmac(ifindex, dgid);
}

// The device: named, or an embedded simhca child (docs/simhca.md §13); its
// driver from the table by PCI ID (hca/driver_table.hpp); the static port
// setup.
Result<void> ServedDevice::open_device() {
  Result<std::unique_ptr<vfio::Device>> d = err(ENODEV, "not opened");
  if (!d_.embedded()) {
    d = vfio::open_device(d_.spec);
  } else {
    auto c = SimhcaChild::spawn(simhca_params(o_, d_));
    if (!c) return err(c.error().code, "embedded simhca for {}: {}", d_.name, c.error().str());
    child_ = std::move(*c);
    d = child_->connect(10000);
    if (!d) d = err(d.error().code, "embedded simhca: {}", d.error().message);
  }
  if (!d) return err(d.error().code, "opening {}: {}", spec_, d.error().str());
  slot_.replace(std::move(*d));
  auto h = hca::open_device(slot_, io_);
  if (!h) return err(h.error().code, "HCA bring-up on {}: {}", spec_, h.error().str());
  hca_ = std::move(*h);
  return setup_port();
}

// An Ethernet port (RoCEv2, docs/simhca.md §16) has no LID to set: it is
// Active while its link is up, and the static setup (--lid) leaves it alone.
Result<void> ServedDevice::setup_port() {
  if (d_.lid == 0) return ok();
  auto pa = hca::call_sync<hca::PortAttr>(*hca_, [&](hca::Device::Done<hca::PortAttr> d) { hca_->query_port_async(1, std::move(d)); });
  if (!pa) return err(pa.error().code, "QUERY_PORT 1: {}", pa.error().str());
  if (hca::protocol_roce(pa->link_layer)) {
    log_->info("{} port 1: Ethernet (RoCEv2), no LID to set", d_.name);
    return ok();
  }
  auto r = hca::call_sync<void>(*hca_, [&](hca::Device::Done<void> d) { hca_->set_port_async(1, static_port(d_), std::move(d)); });
  if (!r) return err(r.error().code, "SET_PORT 1 (LID {}, Active): {}", d_.lid, r.error().str());
  log_->info("{} port 1: LID {}, Active (static setup)", d_.name, d_.lid);
  return ok();
}

// The same on the loop (device recovery): a continuation, not a wait.
void ServedDevice::setup_port_async(hca::Device::Done<void> done) {
  if (d_.lid == 0) return done(ok());
  hca_->query_port_async(1, [this, done = std::move(done)](Result<hca::PortAttr> pa) mutable {
    if (!pa) return done(err(pa.error().code, "QUERY_PORT 1: {}", pa.error().str()));
    if (hca::protocol_roce(pa->link_layer)) return done(ok());  // no LID (setup_port)
    hca_->set_port_async(1, static_port(d_), [this, done = std::move(done)](Result<void> r) mutable {
      if (!r) return done(err(r.error().code, "SET_PORT 1 (LID {}, Active): {}", d_.lid, r.error().str()));
      log_->info("{} port 1: LID {}, Active (static setup)", d_.name, d_.lid);
      done(ok());
    });
  });
}

// The services, each after those it uses, registered in that order
// (service.hpp): the user-MAD service, the SA client and path cache, IPoIB,
// the IB CM, the RDMA CM over it with the ARP module on IPoIB.
void ServedDevice::build_services() {
  const uint8_t ports = hca_->caps().num_ports;
  umad_ = std::make_unique<UmadService>(io_, *hca_, d_.socket, ports, o_.umad_user_gmp);
  umad_->set_max_outstanding(o_.limits.umad_max_outstanding);
  umad_->set_dmac_lookup([this](uint8_t port, const std::array<uint8_t, 16>& g) { return dmac(port, g); });
  ServerOptions so{d_.socket, o_.socket_mode, o_.socket_group, spec_, o_.limits};
  so.name = d_.name;
  for (const auto& e : o_.devices) so.all_devices.emplace_back(e.name, e.socket);
  server_ = std::make_unique<Server>(io_, *hca_, std::move(so));
  server_->set_dmac_lookup([this](uint8_t port, const std::array<uint8_t, 16>& g) { return dmac(port, g); });
  sa_ = std::make_unique<SaService>(io_, *hca_, *umad_, ports, d_.state_dir);
  if (auto r = sa_->publish_table(o_.path_table_slots); !r)  // docs/sa.md "Shared table"
    log_->warn("{}: no shared path table (clients ask ibd for every path): {}", d_.name, r.error().str());
  sa_->set_limits(o_.limits.mcast_joins, o_.limits.services, o_.limits.uid_sa_queries_per_sec,
                  o_.limits.uid_sa_query_burst);  // docs/sa.md "Security"
  sa_->set_path_change_handler(
      [this](uint8_t port, uint16_t pkey, const sa::Gid& dgid) { server_->on_path_change(port, pkey, dgid); });
  if (!d_.ipoib.empty())  // docs/ipoib.md
    ipoib_ = std::make_unique<IpoibService>(
        io_, *hca_, *sa_, IpoibConfig{d_.ipoib, d_.ipoib_pkey, d_.ipoib_port, d_.ipoib_qkey, d_.ipoib_mode == "connected"});
  if (!d_.netdev.empty())  // docs/operations.md "RoCE ports"
    netdev_ = std::make_unique<NetdevService>(io_, *hca_, NetdevConfig{d_.netdev, d_.netdev_port});
  cm_ = std::make_unique<CmService>(io_, *hca_, *umad_, ports);  // docs/cm.md
  cm_->set_max_queued_events(o_.cm_max_queued_events);
  cm_->set_event_budget(&event_bytes_);
  cm_->set_id_limits(o_.limits.cm_ids);
  cm_->set_qp_ops(server_->qp_ops());
  if (ipoib_) ipoib_->set_cm(cm_.get());  // connected mode (docs/ipoib.md)
  if (ipoib_ || netdev_) {  // docs/cma.md, docs/arp.md
    ipoib_links_ = std::make_unique<IpoibLinks>(ipoib_.get(), netdev_.get());
    resolver_ = std::make_unique<arp::Resolver>(io_, *ipoib_links_);
  }
  cma_ = std::make_unique<CmaService>(io_, *hca_, *cm_, *sa_, ports);
  cma_->set_max_queued_events(o_.cm_max_queued_events);
  cma_->set_id_limit(o_.limits.cma_ids);  // budget.hpp
  cma_->set_event_budget(&event_bytes_);
  if (ipoib_) cma_->set_ipoib_qkey([p = ipoib_.get()] { return p->qkey(); });
  if (host_links_) cma_->set_host_links(host_links_);
  cma_->set_qp_ops(server_->qp_ops());
  services_.add(*umad_);
  services_.add(*sa_);
  if (ipoib_) services_.add(*ipoib_);
  if (netdev_) services_.add(*netdev_);
  services_.add(*cm_);
  services_.add(*cma_);
  server_->set_services(&services_);
}

Result<void> ServedDevice::start_services() {
  OPENIB_TRY(server_->start());
  sa_->start();
  cm_->start();
  if (resolver_) {
    if (auto r = resolver_->start(); !r)
      log_->warn("{}: no address resolution for the RDMA CM: {}", d_.name, r.error().str());
    else
      cma_->set_resolver(resolver_.get());
  }
  if (auto r = cma_->start(); !r) log_->warn("{}: no RDMA CM: {}", d_.name, r.error().str());
  if (ipoib_) ipoib_->start();
  if (netdev_) netdev_->start();
  return ok();
}

// The embedded device dies with its process: SIGCHLD means the device is
// gone (each device's signal_set hears every SIGCHLD; it asks its own child).
void ServedDevice::watch_child() {
  chld_.async_wait([this](const boost::system::error_code& e, int) {
    if (e) return;
    int st = 0;
    if (child_ && child_->exited(&st)) {
      log_->error("{}: embedded simhca {}; the device is gone", d_.name, describe_wait_status(st));
      recovery_->lost("embedded simhca " + describe_wait_status(st));
    }
    if (!stopping_) watch_child();
  });
}

void ServedDevice::shutdown() { stop(0, "ibd stops"); }

// Stops serving: clients told when the device is gone for good (code 1),
// the path cache saved, the client socket closed, the SA told to forget the
// ports' trap subscriptions (docs/sa.md "In ibd": at most 1 s; not when the
// device is gone, nothing goes out through it); then stopped_(code).
void ServedDevice::stop(int code, const std::string& why) {
  if (stopping_ || !serving_) return;
  stopping_ = true;
  recovery_->stop();
  connect_timer_.cancel();
  log_->info("{}: stopping: {}", d_.name, why);
  if (code != 0) server_->notify_device_fatal();
  sa_->save();  // the path cache, for the next start (docs/sa.md)
  server_->stop();
  if (ipoib_) ipoib_->stop();
  if (netdev_) netdev_->stop();
  if (code != 0) {
    serving_ = false;
    return asio::post(io_, [this, code] { stopped_(code); });
  }
  sa_->shutdown(std::chrono::seconds(1), [this] {
    serving_ = false;
    stopped_(0);
  });
}

// The ladder in reverse: clients (the Server), the services users first
// (the RDMA CM before the IB CM, the CM's agents before the MAD layers,
// QP0/QP1 and the issm files last), the device, its transport, the child,
// the lock.
void ServedDevice::teardown() {
  if (recovery_) recovery_->stop();
  connect_timer_.cancel();
  if (server_) server_->stop();
  server_.reset();
  if (!linked_.empty()) {
    std::error_code ec;
    std::filesystem::remove(linked_, ec);
    linked_.clear();
  }
  cma_.reset();
  resolver_.reset();
  ipoib_links_.reset();
  cm_.reset();
  netdev_.reset();
  ipoib_.reset();
  sa_.reset();
  umad_.reset();
  boost::system::error_code ec;
  chld_.cancel(ec);
  if (hca_) {
    if (auto r = hca_->close(); !r && hca_->alive()) log_->warn("{}: HCA close: {}", d_.name, r.error().str());
  }
  hca_.reset();
  slot_.clear();
  if (child_) log_->info("{}: embedded simhca {}", d_.name, describe_wait_status(child_->stop()));
  child_.reset();
  lock_.reset();
  serving_ = false;
}

// ---- device recovery (docs/operations.md §5) ---------------------------------

Recovery::Steps ServedDevice::recovery_steps() {
  Recovery::Steps s;
  s.fence = [this](const std::string& why) { fence(why); };
  s.attempt = [this](unsigned n, Recovery::AttemptDone done) { attempt(n, std::move(done)); };
  s.failed = [this](unsigned n, const Error& e) { attempt_failed(n, e); };
  s.back = [this](unsigned n, std::chrono::milliseconds down) { device_back(n, down); };
  s.give_up = [this](const std::string& why) { stop(1, o_.restart_limit == 0 ? "the device is gone" : why); };
  return s;
}

// Dead: the device fenced (an embedded simhca SIGKILLed, the transport
// closed), clients told and their objects forgotten, the MAD layers and
// the HCA closed, all without device commands.
void ServedDevice::fence(const std::string& why) {
  if (stopping_) return;
  log_->error("device {} ({}) is gone ({}); recovering", d_.name, spec_, why);
  if (child_) log_->info("{}: embedded simhca {}", d_.name, describe_wait_status(child_->kill_now()));
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
// INFO, signals and the other devices are served meanwhile. What stays a
// call on the loop: fork/exec, the vfio-user handshake once the socket
// accepts, the function reset, and the ladder's register accesses and
// DMA_MAPs (well under a millisecond on simhca).
void ServedDevice::attempt(unsigned n, Recovery::AttemptDone done) {
  log_->info("restarting device {} (attempt {} of {})", d_.name, n, o_.restart_limit);
  if (!d_.embedded()) {
    auto d = vfio::open_device(d_.spec);
    if (!d) return done(d.error());
    return bring_up(std::move(*d), std::move(done));
  }
  auto c = SimhcaChild::spawn(simhca_params(o_, d_));
  if (!c) return done(c.error());
  child_ = std::move(*c);
  connect_deadline_ = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  poll_connect(std::move(done));
}

void ServedDevice::poll_connect(Recovery::AttemptDone done) {
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

void ServedDevice::bring_up(std::unique_ptr<vfio::Device> d, Recovery::AttemptDone done) {
  const auto t0 = std::chrono::steady_clock::now();
  slot_.replace(std::move(d));
  // A device that is not ours to restart may still be in its fatal state
  // (docs/simhca.md §11.4): a function reset first (§11.5, VFIO reset).
  if (!d_.embedded()) {
    if (auto r = slot_.reset(); !r) return done(r.error());
  }
  hca_->reopen_async([this, t0, done = std::move(done)](Result<void> r) mutable {
    if (!r) return done(r.take_error());
    log_->info("device {}: bring-up took {} ms", d_.name,
               std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count());
    setup_port_async(std::move(done));
  });
}

// What a failed attempt left: the device closed, the child killed, the
// transport dropped.
void ServedDevice::attempt_failed(unsigned n, const Error& e) {
  log_->warn("device restart attempt {} of {} ({}): {}", n, o_.restart_limit, d_.name, e.str());
  (void)hca_->close_dead();
  if (child_) (void)child_->kill_now();
  child_.reset();
  slot_.clear();
}

void ServedDevice::device_back(unsigned attempts, std::chrono::milliseconds down) {
  server_->device_back();  // and the services (the user-MAD service's layers and agents)
  log_->info("device {} is back after {} attempt(s), {} ms after it was lost (generation {})", d_.name, attempts,
             down.count(), server_->device_generation());
}

}  // namespace openib::ibd
