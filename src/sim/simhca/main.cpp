// simhca: the emulated HCA as a vfio-user server (docs/simhca.md §13).
//
//   simhca [--log LEVEL] [--spin-us N] [--spin-mode yield|pause] [--helper] DEVICE [--device DEVICE]...
//   DEVICE: --socket PATH [--guid HEX] [--cmd-delay-ms N]
//           [--port1 LOCAL=ADDR:PORT,PEER=ADDR:PORT | --port1 SHM=FILE,END=A|B[,CRC=always|offload]]
//           [--pcap FILE] [--faults drop=P,dup=P,reorder=P,corrupt=P,seed=N]
//           [--ports 1|2] [--port2 LOCAL=ADDR:PORT,PEER=ADDR:PORT] [--node-desc TEXT]
//
// One process serves one device, or several (`--device` starts the next
// one's options): each its own vfio-user socket, client and state, as
// separate HCAs in one host. One thread, the device loop (§13), runs
// everything every device does: commands (after the doorbell write is
// answered, §5.3), UAR doorbells (it scans the watched pages itself,
// §12.5), packets from a shared-memory cable (taken from the ring in
// place) or from a UDP cable (handed over by the link's receive thread
// through an inbox), and the data path's timers. Busy, it polls all of
// them, yielding the CPU between empty passes; idle for --spin-us, it
// sleeps in futex_waitv on the UAR pages' SCANNER_SLEEPING, the cables'
// RX_SLEEPING and a private word that the UDP receive threads and the
// socket watchers (a thread per device blocked in epoll on its vfio-user
// socket) bump. Two devices cabled to each other in one process pass a
// packet from one to the other within one turn of the loop, without a
// wake-up or a context switch (§13 "Several devices").
#include <poll.h>
#include <sys/epoll.h>
#include <linux/futex.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/fd.hpp"
#include "common/log.hpp"
#include "sim/cable/shm_link.hpp"
#include "sim/cable/udp_link.hpp"
#include "sim/simhca/vfio_model.hpp"
#include "sim/wire/pcap_erf.hpp"

namespace {

volatile std::sig_atomic_t g_stop = 0;
void on_signal(int) { g_stop = 1; }

int usage(const char* prog) {
  std::fprintf(stderr,
               "usage: %s [--log LEVEL] [--spin-us N] [--spin-mode yield|pause] [--helper] DEVICE [--device DEVICE]...\n"
               "  DEVICE: --socket PATH [--guid HEX] [--cmd-delay-ms N]\n"
               "          [--port1 LOCAL=ADDR:PORT,PEER=ADDR:PORT | --port1 SHM=FILE,END=A|B[,CRC=always|offload]]\n"
               "          [--pcap FILE] [--faults drop=P,dup=P,reorder=P,corrupt=P,seed=N]\n"
               "          [--ports 1|2] [--port2 LOCAL=ADDR:PORT,PEER=ADDR:PORT] [--node-desc TEXT]\n",
               prog);
  return 2;
}

// "k1=v1,k2=v2" -> calls f(k, v); false if a pair has no '=' or f refuses it.
template <typename F>
bool parse_pairs(std::string_view s, F&& f) {
  while (!s.empty()) {
    const size_t comma = s.find(',');
    std::string_view kv = s.substr(0, comma);
    const size_t eq = kv.find('=');
    if (eq == std::string_view::npos || !f(kv.substr(0, eq), std::string(kv.substr(eq + 1)))) return false;
    if (comma == std::string_view::npos) break;
    s.remove_prefix(comma + 1);
  }
  return true;
}

bool parse_rate(const std::string& v, double& out) {
  char* end = nullptr;
  out = std::strtod(v.c_str(), &end);
  return end != v.c_str() && *end == '\0' && out >= 0 && out <= 1;
}

// Packets from a UDP link's receive thread to the device loop (§12.7).
class PacketInbox {
 public:
  explicit PacketInbox(openib::simhca::DeviceWaiter& w) : waiter_(w) {}
  void push(std::span<const std::byte> p) {
    {
      std::lock_guard lk(mu_);
      if (q_.size() >= kMax) {  // the device is behind: dropped, like a full buffer
        ++dropped_;
        return;
      }
      q_.emplace_back(p.begin(), p.end());
      nonempty_.store(true, std::memory_order_release);
    }
    waiter_.notify();
  }
  bool nonempty() const { return nonempty_.load(std::memory_order_acquire); }
  std::deque<std::vector<std::byte>> take() {
    std::lock_guard lk(mu_);
    nonempty_.store(false, std::memory_order_relaxed);
    return std::exchange(q_, {});
  }
  uint64_t dropped() const {
    std::lock_guard lk(mu_);
    return dropped_;
  }

 private:
  static constexpr size_t kMax = 65536;
  openib::simhca::DeviceWaiter& waiter_;
  mutable std::mutex mu_;
  std::deque<std::vector<std::byte>> q_;
  std::atomic<bool> nonempty_{false};
  uint64_t dropped_ = 0;
};

// Tells the device loop that the vfio-user socket is readable: a thread
// blocked in epoll_wait on it (one-shot). If the loop is asleep (it holds
// the device lock whenever it is not), the watcher takes the lock and
// serves the message itself through `serve` (true: handled, watch on),
// which saves the loop's wake-up on the command path; otherwise it raises
// a flag and wakes the loop, which handles the message and re-arms (§13).
class SocketWatch {
 public:
  // Called with the device lock held: 0 not served (the loop will), 1
  // served, 2 served and the loop must re-arm its sleep.
  using Serve = std::function<int()>;
  SocketWatch(openib::simhca::DeviceWaiter& w, std::mutex& device, Serve serve)
      : waiter_(w),
        device_(device),
        serve_(std::move(serve)),
        ep_(::epoll_create1(EPOLL_CLOEXEC)),
        stop_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {}
  ~SocketWatch() {
    const uint64_t one = 1;
    (void)!::write(stop_.get(), &one, sizeof one);
    if (thread_.joinable()) thread_.join();
  }
  bool start() {
    if (!ep_ || !stop_) return false;
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = -1;
    if (::epoll_ctl(ep_.get(), EPOLL_CTL_ADD, stop_.get(), &ev) != 0) return false;
    thread_ = std::thread([this] { run(); });
    return true;
  }
  // Loop thread: watch `fd` (-1: none). Raises the flag at once if readable.
  void set_fd(int fd) {
    if (fd_ >= 0) (void)::epoll_ctl(ep_.get(), EPOLL_CTL_DEL, fd_, nullptr);
    fd_ = fd;
    ready_.store(false);
    if (fd_ < 0) return;
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLONESHOT;
    ev.data.fd = fd_;
    (void)::epoll_ctl(ep_.get(), EPOLL_CTL_ADD, fd_, &ev);
  }
  bool ready() const { return ready_.load(std::memory_order_acquire); }
  // Loop thread, after handling a message: watch for the next one.
  void rearm() {
    ready_.store(false, std::memory_order_relaxed);
    if (fd_ < 0) return;
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLONESHOT;
    ev.data.fd = fd_;
    (void)::epoll_ctl(ep_.get(), EPOLL_CTL_MOD, fd_, &ev);
  }

 private:
  void run() {
    for (;;) {
      epoll_event ev[2];
      const int n = ::epoll_wait(ep_.get(), ev, 2, -1);
      if (n < 0 && errno != EINTR) return;
      for (int i = 0; i < n; ++i) {
        if (ev[i].data.fd == -1) return;  // stop
        if (waiter_.asleep() && device_.try_lock()) {
          const int served = waiter_.asleep() ? serve_() : 0;
          if (served) rearm();
          device_.unlock();
          if (served == 2) waiter_.notify();
          if (served) continue;
        }
        ready_.store(true, std::memory_order_release);
        waiter_.notify();
      }
    }
  }

  openib::simhca::DeviceWaiter& waiter_;
  std::mutex& device_;
  Serve serve_;
  openib::UniqueFd ep_, stop_;
  int fd_ = -1;
  std::atomic<bool> ready_{false};
  std::thread thread_;
};

bool parse_u64(const char* s, int base, uint64_t& out) {
  char* end = nullptr;
  errno = 0;
  out = std::strtoull(s, &end, base);
  return errno == 0 && end != s && *end == '\0';
}

// What one device is given on the command line.
struct DeviceConfig {
  std::string path, pcap_path;
  openib::simhca::HcaOptions opts;
  std::optional<openib::sim::UdpLinkOptions> port1;
  std::optional<openib::sim::ShmLinkOptions> port1_shm;
  std::optional<openib::sim::UdpLinkOptions> port2;  // §13 --port2 (with --ports 2)
  openib::sim::FaultSpec faults;
};

// One device of this process: its model and vfio-user server, its cables,
// its socket watcher, and its part of the loop's pass (§13).
class Device {
 public:
  using Hca = openib::simhca::Hca;
  Device(DeviceConfig cfg, openib::simhca::DeviceWaiter& waiter, bool shared_loop)
      : cfg_(std::move(cfg)), waiter_(waiter), shared_(shared_loop), inbox_(waiter), inbox2_(waiter),
        lock_(mu_, std::defer_lock) {}

  // Everything up to the first client; false (logged) if something failed.
  bool start() {
    using namespace openib;
    auto model = simhca::VfioModel::create(cfg_.opts);
    if (!model) return fail(model.error().str());
    model_ = std::move(model).value();
    server_ = std::make_unique<vfio::user::VfioUserServer>(*model_);
    if (auto r = server_->listen(cfg_.path); !r) return fail(r.error().str());
    log_->info("simhca {:04x}:{:04x} listening on {}", simhca::kVendorId, simhca::kDeviceId, cfg_.path);
    Hca& hca = model_->hca();
    // §12.7 port 1: capture file, then the cable end.
    if (!cfg_.pcap_path.empty()) {
      auto w = sim::wire::PcapErfWriter::open(cfg_.pcap_path);
      if (!w) return fail(w.error().str());
      pcap_ = std::move(w).value();
    }
    if (cfg_.port1) {
      cfg_.port1->faults = cfg_.faults;
      cfg_.port1->pcap = pcap_.get();
      auto l = sim::UdpLink::create(*cfg_.port1);
      if (!l) return fail(l.error().str());
      link_ = std::move(l).value();
      link_->set_receiver([this](std::span<const std::byte> p) { inbox_.push(p); });
      hca.attach_link(1, link_.get());
      log_->info("simhca: port 1 on udp {} -> {}", cfg_.port1->local, cfg_.port1->peer);
    } else if (cfg_.port1_shm) {
      cfg_.port1_shm->faults = cfg_.faults;
      cfg_.port1_shm->pcap = pcap_.get();
      auto l = sim::ShmLink::create(*cfg_.port1_shm);
      if (!l) return fail(l.error().str());
      shm_ = std::move(l).value();
      // Polled by the loop: packets go to the device straight from their
      // slot, with the link's parse; the time is read once per batch.
      shm_->set_parsed_receiver([this](size_t wire_bytes, const sim::wire::ParsedPacket& parsed) {
        model_->hca().receive_packet(1, wire_bytes, parsed, rx_now_);
      });
      hca.attach_link(1, shm_.get());
      log_->info("simhca: port 1 on shared memory {} end {}", cfg_.port1_shm->path, cfg_.port1_shm->end);
    }
    // §13 port 2: a UDP cable end of its own (no capture, no faults).
    if (cfg_.port2) {
      auto l = sim::UdpLink::create(*cfg_.port2);
      if (!l) return fail(l.error().str());
      link2_ = std::move(l).value();
      link2_->set_receiver([this](std::span<const std::byte> p) { inbox2_.push(p); });
      hca.attach_link(2, link2_.get());
      log_->info("simhca: port 2 on udp {} -> {}", cfg_.port2->local, cfg_.port2->peer);
    }
    // The device is run by whoever holds mu_: the loop, except while it
    // sleeps, when the socket watcher may serve a message (§13).
    if (!shared_) lock_.lock();  // shared: taken for each pass (the loop's or the helper's)
    watch_ = std::make_unique<SocketWatch>(waiter_, mu_, [this] {
      auto r = server_->handle_message(0);
      if (!r) {  // as in the loop: the server failed, simhca ends
        serve_error_ = r.error().str();
        return 2;
      }
      if (!*r) {  // the client went: the loop resets the device
        client_gone_ = true;
        return 2;
      }
      // The command (§5.3) runs now; the loop is woken only if it must
      // watch other pages or wake earlier.
      const uint64_t gen = model_->scanner().generation();
      model_->hca().run_due(Hca::Clock::now());
      due_ = model_->hca().next_due();
      due_known_ = true;
      return model_->scanner().generation() != gen || (due_ && *due_ < sleep_until_) ? 2 : 1;
    });
    if (!watch_->start()) return fail(std::string("socket watcher: ") + std::strerror(errno));
    return true;
  }

  // One pass over this device's sources (§13 "The device loop"): -1 the
  // device failed (logged), 0 nothing done, 1 work done, 2 work done and
  // the loop must not sleep (reset, or a single device accepting).
  int pass() {
    Hca& hca = model_->hca();
    if (!server_->connected()) {
      watch_->set_fd(-1);
      deliver();  // the device is reset: counted and dropped (§12.8)
      rx_now_ = Hca::Clock::now();
      if (shm_) shm_->poll(SIZE_MAX);
      // Alone, the loop waits in accept; sharing it, it only looks.
      auto a = server_->accept_client(shared_ ? 0 : 50);
      if (!a && a.error().code != ETIMEDOUT) {
        fail(a.error().str());
        return -1;
      }
      due_known_ = false;
      if (server_->connected()) {
        watch_->set_fd(server_->client_fd());
        return 2;
      }
      sleep_until_ = Hca::Clock::now() + kAcceptPoll;
      return shared_ ? 0 : 2;
    }
    if (!serve_error_.empty()) {
      fail(serve_error_);
      return -1;
    }
    if (client_gone_) {  // seen by the socket watcher
      client_gone_ = false;
      reset_device();
      return 2;
    }
    bool work = model_->poll_doorbells() > 0;  // §12.5 scanner
    rx_now_ = Hca::Clock::now();
    if (shm_ && shm_->poll(kShmBatch) > 0) work = true;
    if (deliver()) work = true;
    if (watch_->ready()) {
      work = true;
      auto r = server_->handle_message(0);
      if (!r) {
        fail(r.error().str());
        return -1;
      }
      if (!*r) {
        reset_device();
        return 2;
      }
      watch_->rearm();
    }
    auto now = Hca::Clock::now();
    // Commands, doorbells taken, data-path timers (RNR, pacing,
    // retransmission), --cmd-delay-ms: whatever is due. next_due() is
    // asked again only after the device did something (nothing else
    // changes its answer).
    if (work || carried_ || !due_known_ || (due_ && *due_ <= now)) {
      work = true;
      carried_ = false;
      hca.run_due(now);
      due_ = hca.next_due();
      due_known_ = true;
    }
    sleep_until_ = now + openib::simhca::DeviceWaiter::kMaxSleep;
    if (due_ && *due_ < sleep_until_) sleep_until_ = *due_;
    return work ? 1 : 0;
  }

  // When the loop should come back for this device at the latest.
  Hca::Clock::time_point deadline() const { return sleep_until_; }
  void set_sleep_until(Hca::Clock::time_point t) { sleep_until_ = t; }

  // §12.5.2 step 3: anything that came in while the loop published its
  // flags is taken now, and the loop does not sleep.
  bool recheck() {
    if (model_->poll_doorbells() > 0) carried_ = true;  // taken; run_due() on the next pass
    return carried_ || (shm_ && shm_->pending()) || inbox_.nonempty() || inbox2_.nonempty() || watch_->ready();
  }

  openib::simhca::DoorbellScanner* scanner() { return model_ ? &model_->scanner() : nullptr; }
  openib::sim::ShmLink* shm() { return shm_.get(); }
  std::unique_lock<std::mutex>* lock() { return &lock_; }
  std::mutex& mutex() { return mu_; }
  // Packets waiting in this device's cable ring: the loop is behind.
  uint64_t backlog() const { return shm_ ? shm_->backlog() : 0; }

  // At the end: stops the cables and logs the counters.
  void finish() {
    if (!model_) return;
    Hca& hca = model_->hca();
    hca.attach_link(1, nullptr);
    hca.attach_link(2, nullptr);
    if (link_) link_->stop();
    if (link2_) link2_->stop();
    if (shm_)
      log_->info("simhca: port 1 shared-memory cable: tx {} packets ({} dropped), rx {} ({} bad CRC, {} malformed)",
                 shm_->stats().tx_packets, shm_->stats().tx_errors, shm_->stats().rx_packets,
                 shm_->stats().rx_dropped_bad_crc, shm_->stats().rx_dropped_malformed);
    log_data_stats();
    const openib::simhca::HcaStats& s = hca.stats();
    const auto& ss = server_->stats();
    log_->info(
        "simhca: exiting; commands {} (failed {}, dropped {}), bad accesses {}, events {} "
        "(dropped {}), irqs {}, vfio-user messages {} (malformed {}), dma faults {}",
        s.cmds_completed, s.cmds_failed, s.cmds_dropped, s.bad_access, s.events_written,
        s.events_dropped, s.irqs_signalled, ss.messages, ss.bad_messages, ss.dma_faults);
    const openib::simhca::ScannerCounts sc = model_->scanner_counts();
    log_->info(
        "simhca: doorbell scanner: mmap doorbells {} (ignored {}), bad SQ records {}, pages "
        "noticed {}, sleeps {}, wakeups {}, timeouts {}, polled naps {}; device loop sleeps {}",
        s.mmap_doorbells, s.mmap_doorbells_bad, s.sq_records_bad, sc.notices, sc.sleeps, sc.wakeups,
        sc.timeouts, sc.polled_sleeps, waiter_.sleeps());
  }

  ~Device() {
    watch_.reset();  // its thread uses the server and the model
  }

 private:
  static constexpr size_t kShmBatch = 64;  // packets per pass, so doorbells and messages interleave
  // A device without a client, in a shared loop, looks for one this often.
  static constexpr auto kAcceptPoll = std::chrono::milliseconds(20);

  bool fail(const std::string& what) {
    log_->error("{}", what);
    return false;
  }
  bool deliver() {
    if (!inbox_.nonempty() && !inbox2_.nonempty()) return false;
    Hca& hca = model_->hca();
    for (auto& p : inbox_.take()) hca.receive_packet(p, Hca::Clock::now());
    for (auto& p : inbox2_.take()) hca.receive_packet(2, p, Hca::Clock::now());
    return true;
  }
  void reset_device() {
    log_->info("simhca: client gone; device reset");
    log_data_stats();
    model_->reset();
    watch_->set_fd(-1);
    due_known_ = false;
  }
  void log_data_stats() {
    const openib::simhca::DataStats& d = model_->hca().data_stats();
    log_->info(
        "simhca: data path: tx {} (dropped {}), rx {} (malformed {}, bad dlid {}, bad pkey {}, "
        "bad qkey {}, no qp {}, out of sequence {}, duplicates {}), acks {}, naks {}, rnr naks {}, "
        "retransmits {}, timeouts {}, cqes {}, inbox drops {}",
        d.tx_packets, d.tx_dropped, d.rx_packets, d.rx_malformed, d.rx_bad_dlid, d.rx_bad_pkey,
        d.rx_bad_qkey, d.rx_no_qp, d.rx_dropped_seq, d.rx_duplicates, d.acks_sent, d.naks_sent,
        d.rnr_naks_sent, d.retransmits, d.timeouts, d.cqes_written, inbox_.dropped());
    log_->info(  // §14, §15
        "simhca: management: SMPs answered {}, to the driver {}, dropped {}, M_Key violations {}; "
        "PMA answers {}, GMPs to the driver {}, MADs dropped {}; loopback {}, not sent (port state) {}, "
        "bad VL {}",
        d.smps_answered, d.smps_to_driver, d.smps_dropped, d.mkey_violations, d.gmps_answered,
        d.gmps_to_driver, d.mads_dropped, d.loopback_packets, d.tx_port_down, d.rx_bad_vl);
  }

  DeviceConfig cfg_;
  openib::simhca::DeviceWaiter& waiter_;
  bool shared_;
  std::shared_ptr<spdlog::logger> log_ = openib::log::get("simhca");
  std::unique_ptr<openib::simhca::VfioModel> model_;
  std::unique_ptr<openib::vfio::user::VfioUserServer> server_;
  std::unique_ptr<openib::sim::wire::PcapErfWriter> pcap_;
  PacketInbox inbox_, inbox2_;
  std::unique_ptr<openib::sim::UdpLink> link_, link2_;
  std::unique_ptr<openib::sim::ShmLink> shm_;
  Hca::Clock::time_point rx_now_{};
  std::mutex mu_;
  std::unique_lock<std::mutex> lock_;
  bool client_gone_ = false;  // the watcher saw the client go: the loop resets
  std::string serve_error_;   // the watcher's handle_message() failed: the loop exits
  std::optional<Hca::Clock::time_point> due_;  // hca.next_due() as of the last time the device ran
  bool due_known_ = false, carried_ = false;
  Hca::Clock::time_point sleep_until_{};  // the loop's wake-up time for this device
  std::unique_ptr<SocketWatch> watch_;  // last: stopped first
};

// Shared loop (several devices): a second thread that runs devices too
// while a bulk flow keeps the loop behind, so that a flow between two
// devices of this process has a CPU for each end; idle, it sleeps, and a
// ping-pong between the devices stays on the loop alone, without
// hand-offs (§13 "Several devices"). Each pass holds the device's lock.
class Helper {
 public:
  static constexpr uint64_t kBacklog = 32;  // packets waiting in a ring: wake the helper
  static constexpr auto kLinger = std::chrono::microseconds(200);  // idle this long: sleep again

  Helper(std::vector<std::unique_ptr<Device>>& devs, openib::simhca::DeviceWaiter& loop)
      : devs_(devs), loop_(loop), split_(devs.size() / 2) {}
  // While the helper is awake it runs devices [split, n) and the loop the
  // others, so the two threads do not contend for the devices' locks
  // (each pass still takes its device's lock: the socket watchers and the
  // hand-overs at wake and sleep).
  bool owns(size_t device) const { return device >= split_ && active_.load(std::memory_order_acquire); }
  ~Helper() { stop(); }
  void start() {
    thread_ = std::thread([this] { run(); });
  }
  void wake() {
    if (!asleep_.load(std::memory_order_acquire)) return;
    word_.fetch_add(1, std::memory_order_seq_cst);
    ::syscall(SYS_futex, &word_, FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0);
  }
  void stop() {
    if (!thread_.joinable()) return;
    stop_.store(true);
    word_.fetch_add(1, std::memory_order_seq_cst);
    ::syscall(SYS_futex, &word_, FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0);
    thread_.join();
  }
  bool failed() const { return failed_.load(std::memory_order_relaxed); }

 private:
  void run() {
    while (!stop_.load()) {
      // Sleep until the loop sees a backlog (Dekker: asleep_ then word_).
      const uint32_t w = word_.load(std::memory_order_seq_cst);
      asleep_.store(true, std::memory_order_seq_cst);
      if (!stop_.load()) ::syscall(SYS_futex, &word_, FUTEX_WAIT_PRIVATE, w, nullptr, nullptr, 0);
      asleep_.store(false, std::memory_order_seq_cst);
      active_.store(true, std::memory_order_release);
      auto last = std::chrono::steady_clock::now();
      while (!stop_.load() && std::chrono::steady_clock::now() - last < kLinger) {
        bool work = false;
        for (size_t i = split_; i < devs_.size(); ++i) {
          std::lock_guard lk(devs_[i]->mutex());
          const int r = devs_[i]->pass();
          if (r < 0) {
            failed_.store(true);
            active_.store(false);
            return;
          }
          work = work || r > 0;
        }
        if (work) {
          last = std::chrono::steady_clock::now();
          continue;
        }
        // Other tasks want this CPU (the yield came back late): sleep.
        const auto t0 = std::chrono::steady_clock::now();
        ::sched_yield();
        if (std::chrono::steady_clock::now() - t0 > openib::simhca::DeviceWaiter::kContended) break;
      }
      active_.store(false, std::memory_order_release);
      loop_.notify();  // the loop takes the devices and their timers over again
    }
  }

  std::vector<std::unique_ptr<Device>>& devs_;
  openib::simhca::DeviceWaiter& loop_;
  size_t split_;
  std::atomic<bool> active_{false};
  std::thread thread_;
  std::atomic<uint32_t> word_{0};
  std::atomic<bool> asleep_{false}, stop_{false}, failed_{false};
};

}  // namespace

int main(int argc, char** argv) {
  using namespace openib;
  using namespace openib::simhca;
  std::vector<DeviceConfig> cfgs(1);
  std::chrono::microseconds spin = DeviceWaiter::kDefaultSpin;
  bool spin_yield = true;
  bool use_helper = false;
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    const bool has_value = i + 1 < argc;
    DeviceConfig& c = cfgs.back();
    if (a == "--device") {  // the next device's options follow
      cfgs.emplace_back();
    } else if (a == "--socket" && has_value) {
      c.path = argv[++i];
    } else if (a == "--log" && has_value) {
      log::set_level(argv[++i]);
    } else if (a == "--node-desc" && has_value) {  // §14.2 NodeDescription
      c.opts.node_desc = argv[++i];
    } else if (a == "--ports" && has_value) {  // §13: 1 or 2 ports
      uint64_t n = 0;
      if (!parse_u64(argv[++i], 10, n) || n < 1 || n > kMaxPorts) return usage(argv[0]);
      c.opts.caps.num_ports = static_cast<uint8_t>(n);
    } else if (a == "--port2" && has_value) {  // §13: port 2's UDP cable end
      sim::UdpLinkOptions lo;
      lo.name = "port2";
      if (!parse_pairs(argv[++i], [&](std::string_view k, std::string v) {
            if (k == "LOCAL") lo.local = v;
            else if (k == "PEER") lo.peer = v;
            else return false;
            return true;
          }))
        return usage(argv[0]);
      c.port2 = lo;
    } else if (a == "--guid" && has_value) {
      if (!parse_u64(argv[++i], 16, c.opts.caps.node_guid)) return usage(argv[0]);
    } else if (a == "--cmd-delay-ms" && has_value) {
      uint64_t ms = 0;
      if (!parse_u64(argv[++i], 10, ms) || ms > 60000) return usage(argv[0]);
      c.opts.cmd_delay = std::chrono::milliseconds(ms);
    } else if (a == "--port1" && has_value) {  // §13: the port's cable end, UDP or shared memory
      sim::UdpLinkOptions lo;
      sim::ShmLinkOptions so;
      lo.name = so.name = "port1";
      bool shm = false, end_given = false;
      if (!parse_pairs(argv[++i], [&](std::string_view k, std::string v) {
            if (k == "LOCAL") lo.local = v;
            else if (k == "PEER") lo.peer = v;
            else if (k == "SHM") shm = true, so.path = v;
            else if (k == "END" && v.size() == 1) end_given = true, so.end = v[0];
            else if (k == "CRC" && (v == "always" || v == "offload")) so.crc_offload = v == "offload";
            else return false;
            return true;
          }))
        return usage(argv[0]);
      if (shm != end_given) return usage(argv[0]);  // SHM= and END= go together
      if (shm) c.port1_shm = so;
      else c.port1 = lo;
    } else if (a == "--spin-us" && has_value) {
      uint64_t us = 0;
      if (!parse_u64(argv[++i], 10, us) || us > 1000000) return usage(argv[0]);
      spin = std::chrono::microseconds(us);
    } else if (a == "--helper") {  // §13: several devices, a second thread for bulk flows
      use_helper = true;
    } else if (a == "--spin-mode" && has_value) {
      std::string_view m = argv[++i];
      if (m != "yield" && m != "pause") return usage(argv[0]);
      spin_yield = m == "yield";
    } else if (a == "--pcap" && has_value) {
      c.pcap_path = argv[++i];
    } else if (a == "--faults" && has_value) {
      if (!parse_pairs(argv[++i], [&](std::string_view k, std::string v) {
            if (k == "drop") return parse_rate(v, c.faults.drop);
            if (k == "dup") return parse_rate(v, c.faults.duplicate);
            if (k == "reorder") return parse_rate(v, c.faults.reorder);
            if (k == "corrupt") return parse_rate(v, c.faults.corrupt);
            if (k == "seed") return parse_u64(v.c_str(), 10, c.faults.seed);
            return false;
          }))
        return usage(argv[0]);
    } else {
      return usage(argv[0]);
    }
  }
  for (const DeviceConfig& c : cfgs)
    if (c.path.empty() || (c.port2 && c.opts.caps.num_ports < 2)) return usage(argv[0]);

  struct sigaction sa{};
  sa.sa_handler = on_signal;
  ::sigaction(SIGTERM, &sa, nullptr);
  ::sigaction(SIGINT, &sa, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  DeviceWaiter waiter(spin, spin_yield);
  const bool shared = cfgs.size() > 1;
  std::vector<std::unique_ptr<Device>> devs;
  for (DeviceConfig& c : cfgs) {
    devs.push_back(std::make_unique<Device>(std::move(c), waiter, shared));
    if (!devs.back()->start()) return 1;
  }
  std::vector<DoorbellScanner*> scanners;
  std::vector<sim::ShmLink*> links;
  std::vector<std::unique_lock<std::mutex>*> locks;  // held by the loop (one device only)
  for (auto& d : devs) {
    scanners.push_back(d->scanner());
    links.push_back(d->shm());
    if (!shared) locks.push_back(d->lock());
  }
  int rc = 0;
  Helper helper(devs, waiter);
  const bool helping = shared && use_helper;
  if (helping) helper.start();
  // The loop's hold on device i for one step: nothing alone; shared, the
  // device's lock, unless the helper runs the device now (false).
  auto claim = [&](size_t i, std::unique_lock<std::mutex>& lk) {
    if (!shared) return true;
    if (helper.owns(i)) return false;
    lk = std::unique_lock(devs[i]->mutex());
    return true;
  };

  while (!g_stop && !helper.failed()) {
    // One pass over every device (§13 "The device loop"); shared, a device
    // the helper is running is left to it this time.
    bool work = false, again = false;
    auto deadline = Hca::Clock::now() + DeviceWaiter::kMaxSleep;
    for (size_t i = 0; i < devs.size(); ++i) {
      Device* d = devs[i].get();
      std::unique_lock<std::mutex> lk;
      if (!claim(i, lk)) {
        work = true;
        continue;
      }
      const int r = d->pass();
      if (r < 0) {
        rc = 1;
        break;
      }
      work = work || r > 0;
      again = again || r == 2;
      deadline = std::min(deadline, d->deadline());
      // A ring that fills faster than this loop empties it: a bulk flow.
      // Not when the CPUs are contended: a helper preempted in a pass holds
      // its devices up for a whole time slice of someone else.
      if (helping && d->backlog() >= Helper::kBacklog && !waiter.contended()) helper.wake();
    }
    if (rc) break;
    if (again) continue;
    for (size_t i = 0; i < devs.size(); ++i) {
      std::unique_lock<std::mutex> lk;
      if (claim(i, lk)) devs[i]->set_sleep_until(deadline);
    }
    waiter.after_pass(work, scanners, links, deadline, locks, [&] {
      bool any = false;
      for (size_t i = 0; i < devs.size(); ++i) {
        std::unique_lock<std::mutex> lk;
        if (!claim(i, lk)) return true;  // the helper runs it: not idle
        any = devs[i]->recheck() || any;
      }
      return any || g_stop;
    });
  }
  helper.stop();
  if (helper.failed()) rc = 1;
  for (auto& d : devs) d->finish();
  return rc;
}
