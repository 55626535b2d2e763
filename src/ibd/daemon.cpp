// ibd: the root daemon (docs/operations.md). Options, log level, the run
// directory; then each device (served_device.hpp) started in order, all
// served on one loop; readiness. Shutdown on SIGTERM/SIGINT (bounded: each
// device's SA answers to unsubscribing, at most 1 s; a second signal stops
// at once). A device that goes away is brought up again while the others
// keep serving (docs/operations.md §5); ibd exits 1 only when no device
// serves any more.
#include <signal.h>
#include <sys/resource.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <cstdio>
#include <filesystem>

#include "common/log.hpp"
#include "ibd/daemon.hpp"
#include "ibd/options.hpp"
#include "ibd/served_device.hpp"

namespace asio = boost::asio;
using namespace openib;
using namespace openib::ibd;

namespace {

// ibd's life: the devices started in order (a failure stops those started
// and exits 1), the loop, the teardown in reverse order.
class Daemon {
 public:
  explicit Daemon(const Options& o) : o_(o), log_(log::get("ibd")), signals_(io_, SIGTERM, SIGINT) {}
  int run();

 private:
  void watch_signals();
  void shutdown(int code, const std::string& why);
  void device_stopped(size_t i, int code);
  void teardown();

  const Options& o_;
  std::shared_ptr<spdlog::logger> log_;
  asio::io_context io_;
  std::vector<std::unique_ptr<ServedDevice>> devices_;
  asio::signal_set signals_;
  size_t stopping_devices_ = 0;
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
  for (size_t i = 0; i < o_.devices.size(); ++i) {
    devices_.push_back(std::make_unique<ServedDevice>(io_, o_, i, [this, i](int code) { device_stopped(i, code); }));
    devices_.back()->set_host_links([this](int ifindex) -> std::optional<arp::Link> {
      for (const auto& d : devices_)
        if (auto l = d->ipoib_link(ifindex)) return l;
      return std::nullopt;
    });
    if (auto r = devices_.back()->start(); !r) {
      log_->error("device {}: {}", o_.devices[i].name, r.error().str());
      teardown();
      return 1;
    }
  }
  watch_signals();
  (void)sd_notify(0, "READY=1");
  log_->info("ready on {} ({} device{})", o_.socket, devices_.size(), devices_.size() == 1 ? "" : "s");
  std::fprintf(stderr, "ibd: ready on %s\n", o_.socket.c_str());
  std::fflush(stderr);
  io_.run();
  teardown();
  log_->info("exit {}", exit_code_);
  return exit_code_;
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

// Every serving device stops (bounded); the loop ends when the last one did.
void Daemon::shutdown(int code, const std::string& why) {
  if (stopping_) return;
  stopping_ = true;
  exit_code_ = code;
  (void)sd_notify(0, "STOPPING=1");
  log_->info("shutting down: {}", why);
  for (auto& d : devices_)
    if (d->serving()) ++stopping_devices_;
  if (stopping_devices_ == 0) return io_.stop();
  for (auto& d : devices_) d->shutdown();
}

// A device stopped serving: as part of the shutdown (code 0), or lost for
// good (code 1; its clients were told DEVICE_FATAL): then it is torn down
// and, when no device serves any more, ibd exits 1.
void Daemon::device_stopped(size_t i, int code) {
  if (code != 0) {
    log_->error("device {} is gone for good", devices_[i]->name());
    devices_[i]->teardown();
    if (stopping_) return;  // it stopped serving before the shutdown counted it
    for (auto& d : devices_)
      if (d->serving()) return;
    stopping_ = true;
    exit_code_ = 1;
    log_->error("no device serves any more: exiting");
    return io_.stop();
  }
  if (stopping_devices_ > 0 && --stopping_devices_ == 0) io_.stop();
}

// The devices in reverse order of their start.
void Daemon::teardown() {
  boost::system::error_code ec;
  signals_.cancel(ec);
  for (auto it = devices_.rbegin(); it != devices_.rend(); ++it) (*it)->teardown();
  devices_.clear();
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
