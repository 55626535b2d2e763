// simhca: the emulated HCA as a vfio-user server (docs/simhca.md §13).
//
//   simhca --socket PATH [--log LEVEL] [--guid HEX] [--cmd-delay-ms N]
//          [--port1 LOCAL=ADDR:PORT,PEER=ADDR:PORT] [--pcap FILE]
//          [--faults drop=P,dup=P,reorder=P,corrupt=P,seed=N]
//
// One client at a time; the device is reset between clients. Commands run
// after the doorbell write is answered (§5.3), from this loop; so do the
// packets port 1's UdpLink receives (handed over from its thread through a
// queue and an eventfd, §12.7), the UAR pages the doorbell scanner noticed
// (its thread, an eventfd, §12.5) and the data path's timers.
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <deque>
#include <mutex>
#include <string>
#include <vector>

#include "common/fd.hpp"
#include "common/log.hpp"
#include "sim/cable/udp_link.hpp"
#include "sim/simhca/vfio_model.hpp"
#include "sim/wire/pcap_erf.hpp"

namespace {

volatile std::sig_atomic_t g_stop = 0;
void on_signal(int) { g_stop = 1; }

int usage(const char* prog) {
  std::fprintf(stderr,
               "usage: %s --socket PATH [--log LEVEL] [--guid HEX] [--cmd-delay-ms N]\n"
               "          [--port1 LOCAL=ADDR:PORT,PEER=ADDR:PORT] [--pcap FILE]\n"
               "          [--faults drop=P,dup=P,reorder=P,corrupt=P,seed=N]\n",
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

// Packets from the link's receive thread to the device's thread (§12.7).
class PacketInbox {
 public:
  PacketInbox() : efd_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {}
  int fd() const { return efd_.get(); }
  void push(std::span<const std::byte> p) {
    {
      std::lock_guard lk(mu_);
      if (q_.size() >= kMax) {  // the device is behind: dropped, like a full buffer
        ++dropped_;
        return;
      }
      q_.emplace_back(p.begin(), p.end());
    }
    const uint64_t one = 1;
    (void)!::write(efd_.get(), &one, sizeof one);
  }
  std::deque<std::vector<std::byte>> take() {
    uint64_t n = 0;
    (void)!::read(efd_.get(), &n, sizeof n);
    std::lock_guard lk(mu_);
    return std::exchange(q_, {});
  }
  uint64_t dropped() const {
    std::lock_guard lk(mu_);
    return dropped_;
  }

 private:
  static constexpr size_t kMax = 65536;
  openib::UniqueFd efd_;
  mutable std::mutex mu_;
  std::deque<std::vector<std::byte>> q_;
  uint64_t dropped_ = 0;
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
  sim::FaultSpec faults;
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--socket" && has_value) {
      path = argv[++i];
    } else if (a == "--log" && has_value) {
      log::set_level(argv[++i]);
    } else if (a == "--guid" && has_value) {
      if (!parse_u64(argv[++i], 16, opts.caps.node_guid)) return usage(argv[0]);
    } else if (a == "--cmd-delay-ms" && has_value) {
      uint64_t ms = 0;
      if (!parse_u64(argv[++i], 10, ms) || ms > 60000) return usage(argv[0]);
      opts.cmd_delay = std::chrono::milliseconds(ms);
    } else if (a == "--port1" && has_value) {  // §13: the port's UDP cable end
      sim::UdpLinkOptions lo;
      lo.name = "port1";
      if (!parse_pairs(argv[++i], [&](std::string_view k, std::string v) {
            if (k == "LOCAL") lo.local = v;
            else if (k == "PEER") lo.peer = v;
            else return false;
            return true;
          }))
        return usage(argv[0]);
      port1 = lo;
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
  if (path.empty()) return usage(argv[0]);
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
  PacketInbox inbox;
  std::unique_ptr<sim::UdpLink> link;
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
  };
  auto deliver = [&] {
    for (auto& p : inbox.take()) hca.receive_packet(p, Hca::Clock::now());
  };

  while (!g_stop) {
    if (!server.connected()) {
      deliver();  // the device is reset: counted and dropped (§12.8)
      auto a = server.accept_client(50);
      if (!a && a.error().code != ETIMEDOUT) {
        log->error("{}", a.error().str());
        return 1;
      }
      continue;
    }
    // Wait for a message or a packet no longer than the next command or
    // data-path timer is due (§13 --cmd-delay-ms, §12.8 timers).
    // Microsecond precision (ppoll): data-path timers (RNR, pacing) are
    // tens of microseconds, and rounding them up to a millisecond would
    // stall the transport.
    int64_t timeout_ns = 200'000'000;
    if (auto due = hca.next_due()) {
      // time_point::min() means "now": compare before subtracting (no overflow).
      const auto now = Hca::Clock::now();
      const int64_t left =
          *due <= now ? 0 : std::chrono::duration_cast<std::chrono::nanoseconds>(*due - now).count();
      timeout_ns = std::clamp<int64_t>(left, 0, timeout_ns);
    }
    const timespec ts{static_cast<time_t>(timeout_ns / 1'000'000'000), static_cast<long>(timeout_ns % 1'000'000'000)};
    pollfd fds[3] = {{server.client_fd(), POLLIN, 0}, {inbox.fd(), POLLIN, 0},
                     {(*model)->doorbell_fd(), POLLIN, 0}};
    if (::ppoll(fds, 3, &ts, nullptr) < 0 && errno != EINTR) {
      log->error("simhca: poll: {}", std::strerror(errno));
      return 1;
    }
    if (fds[1].revents & POLLIN) deliver();
    if (fds[2].revents & POLLIN) (*model)->take_doorbells();  // §12.5 scanner
    if (fds[0].revents) {
      auto r = server.handle_message(0);
      if (!r) {
        log->error("{}", r.error().str());
        return 1;
      }
      if (!*r) {
        log->info("simhca: client gone; device reset");
        log_data_stats();
        (*model)->reset();
        continue;
      }
    }
    hca.run_due(Hca::Clock::now());
  }
  hca.attach_link(1, nullptr);
  if (link) link->stop();
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
      "noticed {}, sleeps {}, wakeups {}, timeouts {}, polled naps {}",
      s.mmap_doorbells, s.mmap_doorbells_bad, s.sq_records_bad, sc.notices, sc.sleeps, sc.wakeups,
      sc.timeouts, sc.polled_sleeps);
  return 0;
}
