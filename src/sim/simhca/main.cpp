// simhca: the emulated HCA as a vfio-user server (docs/simhca.md §13).
//
//   simhca --socket PATH [--log LEVEL] [--guid HEX] [--cmd-delay-ms N]
//          [--port1 LOCAL=ADDR:PORT,PEER=ADDR:PORT | --port1 SHM=FILE,END=A|B[,CRC=always|offload]]
//          [--pcap FILE] [--faults drop=P,dup=P,reorder=P,corrupt=P,seed=N]
//          [--spin-us N] [--ports 1|2] [--port2 LOCAL=ADDR:PORT,PEER=ADDR:PORT]
//          [--node-desc TEXT]
//
// One client at a time; the device is reset between clients. One thread,
// the device loop (§13), runs everything the device does: commands (after
// the doorbell write is answered, §5.3), UAR doorbells (it scans the
// watched pages itself, §12.5), packets from a shared-memory cable (taken
// from the ring in place) or from a UDP cable (handed over by the link's
// receive thread through an inbox), and the data path's timers. Busy, it
// polls all of them, yielding the CPU between empty passes; idle for
// --spin-us, it sleeps in futex_waitv on the UAR pages' SCANNER_SLEEPING,
// the cable's RX_SLEEPING and a private word that the UDP receive thread
// and the socket watcher (a thread blocked in epoll on the vfio-user
// socket) bump.
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
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
               "usage: %s --socket PATH [--log LEVEL] [--guid HEX] [--cmd-delay-ms N]\n"
               "          [--port1 LOCAL=ADDR:PORT,PEER=ADDR:PORT | --port1 SHM=FILE,END=A|B[,CRC=always|offload]]\n"
               "          [--pcap FILE] [--faults drop=P,dup=P,reorder=P,corrupt=P,seed=N]\n"
               "          [--spin-us N] [--ports 1|2] [--port2 LOCAL=ADDR:PORT,PEER=ADDR:PORT]\n"
               "          [--node-desc TEXT]\n",
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

}  // namespace

int main(int argc, char** argv) {
  using namespace openib;
  using namespace openib::simhca;
  std::string path, pcap_path;
  HcaOptions opts;
  std::optional<sim::UdpLinkOptions> port1;
  std::optional<sim::ShmLinkOptions> port1_shm;
  std::optional<sim::UdpLinkOptions> port2;  // §13 --port2 (with --ports 2)
  std::chrono::microseconds spin = DeviceWaiter::kDefaultSpin;
  bool spin_yield = true;
  sim::FaultSpec faults;
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--socket" && has_value) {
      path = argv[++i];
    } else if (a == "--log" && has_value) {
      log::set_level(argv[++i]);
    } else if (a == "--node-desc" && has_value) {  // §14.2 NodeDescription
      opts.node_desc = argv[++i];
    } else if (a == "--ports" && has_value) {  // §13: 1 or 2 ports
      uint64_t n = 0;
      if (!parse_u64(argv[++i], 10, n) || n < 1 || n > kMaxPorts) return usage(argv[0]);
      opts.caps.num_ports = static_cast<uint8_t>(n);
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
      port2 = lo;
    } else if (a == "--guid" && has_value) {
      if (!parse_u64(argv[++i], 16, opts.caps.node_guid)) return usage(argv[0]);
    } else if (a == "--cmd-delay-ms" && has_value) {
      uint64_t ms = 0;
      if (!parse_u64(argv[++i], 10, ms) || ms > 60000) return usage(argv[0]);
      opts.cmd_delay = std::chrono::milliseconds(ms);
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
      if (shm) port1_shm = so;
      else port1 = lo;
    } else if (a == "--spin-us" && has_value) {
      uint64_t us = 0;
      if (!parse_u64(argv[++i], 10, us) || us > 1000000) return usage(argv[0]);
      spin = std::chrono::microseconds(us);
    } else if (a == "--spin-mode" && has_value) {
      std::string_view m = argv[++i];
      if (m != "yield" && m != "pause") return usage(argv[0]);
      spin_yield = m == "yield";
    } else if (a == "--pcap" && has_value) {
      pcap_path = argv[++i];
    } else if (a == "--faults" && has_value) {
      if (!parse_pairs(argv[++i], [&](std::string_view k, std::string v) {
            if (k == "drop") return parse_rate(v, faults.drop);
            if (k == "dup") return parse_rate(v, faults.duplicate);
            if (k == "reorder") return parse_rate(v, faults.reorder);
            if (k == "corrupt") return parse_rate(v, faults.corrupt);
            if (k == "seed") return parse_u64(v.c_str(), 10, faults.seed);
            return false;
          }))
        return usage(argv[0]);
    } else {
      return usage(argv[0]);
    }
  }
  if (path.empty() || (port2 && opts.caps.num_ports < 2)) return usage(argv[0]);
  auto log = log::get("simhca");

  struct sigaction sa{};
  sa.sa_handler = on_signal;
  ::sigaction(SIGTERM, &sa, nullptr);
  ::sigaction(SIGINT, &sa, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  auto model = VfioModel::create(opts);
  if (!model) {
    log->error("{}", model.error().str());
    return 1;
  }
  vfio::user::VfioUserServer server(**model);
  if (auto r = server.listen(path); !r) {
    log->error("{}", r.error().str());
    return 1;
  }
  log->info("simhca {:04x}:{:04x} listening on {}", kVendorId, kDeviceId, path);
  Hca& hca = (*model)->hca();

  // §12.7 port 1: capture file, then the cable end.
  std::unique_ptr<sim::wire::PcapErfWriter> pcap;
  if (!pcap_path.empty()) {
    auto w = sim::wire::PcapErfWriter::open(pcap_path);
    if (!w) {
      log->error("{}", w.error().str());
      return 1;
    }
    pcap = std::move(w).value();
  }
  DeviceWaiter waiter(spin, spin_yield);
  PacketInbox inbox(waiter);
  std::unique_ptr<sim::UdpLink> link;
  std::unique_ptr<sim::ShmLink> shm;
  Hca::Clock::time_point rx_now{};
  if (port1) {
    port1->faults = faults;
    port1->pcap = pcap.get();
    auto l = sim::UdpLink::create(*port1);
    if (!l) {
      log->error("{}", l.error().str());
      return 1;
    }
    link = std::move(l).value();
    link->set_receiver([&inbox](std::span<const std::byte> p) { inbox.push(p); });
    hca.attach_link(1, link.get());
    log->info("simhca: port 1 on udp {} -> {}", port1->local, port1->peer);
  } else if (port1_shm) {
    port1_shm->faults = faults;
    port1_shm->pcap = pcap.get();
    auto l = sim::ShmLink::create(*port1_shm);
    if (!l) {
      log->error("{}", l.error().str());
      return 1;
    }
    shm = std::move(l).value();
    // Polled by this loop: packets go to the device straight from their slot.
    // The time is read once per batch (rx_now), not once per packet.
    shm->set_parsed_receiver([&hca, &rx_now](std::span<const std::byte> p, const sim::wire::ParsedPacket& parsed) {
      hca.receive_packet(1, p, parsed, rx_now);
    });
    hca.attach_link(1, shm.get());
    log->info("simhca: port 1 on shared memory {} end {}", port1_shm->path, port1_shm->end);
  }
  // §13 port 2: a UDP cable end of its own (no capture, no faults).
  PacketInbox inbox2(waiter);
  std::unique_ptr<sim::UdpLink> link2;
  if (port2) {
    auto l = sim::UdpLink::create(*port2);
    if (!l) {
      log->error("{}", l.error().str());
      return 1;
    }
    link2 = std::move(l).value();
    link2->set_receiver([&inbox2](std::span<const std::byte> p) { inbox2.push(p); });
    hca.attach_link(2, link2.get());
    log->info("simhca: port 2 on udp {} -> {}", port2->local, port2->peer);
  }
  sim::ShmLink* const shm_links[1] = {shm.get()};
  // The device is run by whoever holds this: the loop, except while it
  // sleeps, when the socket watcher may serve a message (§13).
  std::mutex device_mu;
  std::unique_lock device_lock(device_mu);
  bool client_gone = false;  // the watcher saw the client go: the loop resets
  std::string serve_error;   // the watcher's handle_message() failed: the loop exits
  std::optional<Hca::Clock::time_point> due;  // hca.next_due() as of the last time the device ran
  bool due_known = false, carried = false;
  Hca::Clock::time_point sleep_until{};  // the loop's wake-up time while it sleeps
  SocketWatch sock(waiter, device_mu, [&] {
    auto r = server.handle_message(0);
    if (!r) {  // as in the loop: the server failed, simhca ends
      serve_error = r.error().str();
      return 2;
    }
    if (!*r) {  // the client went: the loop resets the device
      client_gone = true;
      return 2;
    }
    // The command (§5.3) runs now; the loop is woken only if it must
    // watch other pages or wake earlier. next_due() and run_due() walk
    // every QP, so each runs once here.
    const uint64_t gen = (*model)->scanner().generation();
    hca.run_due(Hca::Clock::now());
    due = hca.next_due();
    due_known = true;
    return (*model)->scanner().generation() != gen || (due && *due < sleep_until) ? 2 : 1;
  });
  if (!sock.start()) {
    log->error("simhca: socket watcher: {}", std::strerror(errno));
    return 1;
  }
  auto log_data_stats = [&] {
    const DataStats& d = hca.data_stats();
    log->info(
        "simhca: data path: tx {} (dropped {}), rx {} (malformed {}, bad dlid {}, bad pkey {}, "
        "bad qkey {}, no qp {}, out of sequence {}, duplicates {}), acks {}, naks {}, rnr naks {}, "
        "retransmits {}, timeouts {}, cqes {}, inbox drops {}",
        d.tx_packets, d.tx_dropped, d.rx_packets, d.rx_malformed, d.rx_bad_dlid, d.rx_bad_pkey,
        d.rx_bad_qkey, d.rx_no_qp, d.rx_dropped_seq, d.rx_duplicates, d.acks_sent, d.naks_sent,
        d.rnr_naks_sent, d.retransmits, d.timeouts, d.cqes_written, inbox.dropped());
    log->info(  // §14, §15
        "simhca: management: SMPs answered {}, to the driver {}, dropped {}, M_Key violations {}; "
        "PMA answers {}, GMPs to the driver {}, MADs dropped {}; loopback {}, not sent (port state) {}, "
        "bad VL {}",
        d.smps_answered, d.smps_to_driver, d.smps_dropped, d.mkey_violations, d.gmps_answered,
        d.gmps_to_driver, d.mads_dropped, d.loopback_packets, d.tx_port_down, d.rx_bad_vl);
  };
  auto deliver = [&] {
    if (!inbox.nonempty() && !inbox2.nonempty()) return false;
    for (auto& p : inbox.take()) hca.receive_packet(p, Hca::Clock::now());
    for (auto& p : inbox2.take()) hca.receive_packet(2, p, Hca::Clock::now());
    return true;
  };
  constexpr size_t kShmBatch = 64;  // packets per pass, so doorbells and messages interleave

  while (!g_stop) {
    if (!server.connected()) {
      sock.set_fd(-1);
      deliver();  // the device is reset: counted and dropped (§12.8)
      rx_now = Hca::Clock::now();
      if (shm) shm->poll(SIZE_MAX);
      auto a = server.accept_client(50);
      if (!a && a.error().code != ETIMEDOUT) {
        log->error("{}", a.error().str());
        return 1;
      }
      if (server.connected()) sock.set_fd(server.client_fd());
      due_known = false;
      continue;
    }
    if (!serve_error.empty()) {
      log->error("{}", serve_error);
      return 1;
    }
    if (client_gone) {  // seen by the socket watcher
      client_gone = false;
      log->info("simhca: client gone; device reset");
      log_data_stats();
      (*model)->reset();
      sock.set_fd(-1);
      due_known = false;
      continue;
    }
    // One pass over every source (§13 "The device loop").
    bool work = (*model)->poll_doorbells() > 0;  // §12.5 scanner
    rx_now = Hca::Clock::now();
    if (shm && shm->poll(kShmBatch) > 0) work = true;
    if (deliver()) work = true;
    if (sock.ready()) {
      work = true;
      auto r = server.handle_message(0);
      if (!r) {
        log->error("{}", r.error().str());
        return 1;
      }
      if (!*r) {
        log->info("simhca: client gone; device reset");
        log_data_stats();
        (*model)->reset();
        sock.set_fd(-1);
        due_known = false;
        continue;
      }
      sock.rearm();
    }
    auto now = Hca::Clock::now();
    // Commands, doorbells taken, data-path timers (RNR, pacing,
    // retransmission), --cmd-delay-ms: whatever is due. next_due() walks
    // every QP, so it is asked again only after the device did something
    // (nothing else changes its answer).
    if (work || carried || !due_known || (due && *due <= now)) {
      work = true;
      carried = false;
      hca.run_due(now);
      due = hca.next_due();
      due_known = true;
    }
    auto deadline = now + DeviceWaiter::kMaxSleep;
    if (due && *due < deadline) deadline = *due;
    sleep_until = deadline;
    waiter.after_pass(work, (*model)->scanner(), shm_links, deadline, device_lock, [&] {
      // §12.5.2 step 3 for every source: anything that came in while we
      // published the flags is taken now, and the loop does not sleep.
      if ((*model)->poll_doorbells() > 0) carried = true;  // taken; run_due() on the next pass
      return carried || (shm && shm->pending()) || inbox.nonempty() || inbox2.nonempty() || sock.ready() ||
             g_stop;
    });
  }
  hca.attach_link(1, nullptr);
  hca.attach_link(2, nullptr);
  if (link) link->stop();
  if (link2) link2->stop();
  if (shm) log->info("simhca: port 1 shared-memory cable: tx {} packets ({} dropped), rx {} ({} bad CRC, {} malformed)",
                     shm->stats().tx_packets, shm->stats().tx_errors, shm->stats().rx_packets,
                     shm->stats().rx_dropped_bad_crc, shm->stats().rx_dropped_malformed);
  log_data_stats();
  const HcaStats& s = hca.stats();
  const auto& ss = server.stats();
  log->info(
      "simhca: exiting; commands {} (failed {}, dropped {}), bad accesses {}, events {} "
      "(dropped {}), irqs {}, vfio-user messages {} (malformed {}), dma faults {}",
      s.cmds_completed, s.cmds_failed, s.cmds_dropped, s.bad_access, s.events_written,
      s.events_dropped, s.irqs_signalled, ss.messages, ss.bad_messages, ss.dma_faults);
  const ScannerCounts sc = (*model)->scanner_counts();
  log->info(
      "simhca: doorbell scanner: mmap doorbells {} (ignored {}), bad SQ records {}, pages "
      "noticed {}, sleeps {}, wakeups {}, timeouts {}, polled naps {}; device loop sleeps {}",
      s.mmap_doorbells, s.mmap_doorbells_bad, s.sq_records_bad, sc.notices, sc.sleeps, sc.wakeups,
      sc.timeouts, sc.polled_sleeps, waiter.sleeps());
  return 0;
}
