// simhca's device loop (docs/simhca.md §13): one device of the process,
// what the command line gives it, and its part of the loop's pass.
#pragma once

#include <array>
#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "common/log.hpp"
#include "sim/cable/packet_link.hpp"
#include "sim/cable/shm_link.hpp"
#include "sim/cable/udp_link.hpp"
#include "sim/simhca/packet_inbox.hpp"
#include "sim/simhca/socket_watch.hpp"
#include "sim/simhca/vfio_model.hpp"
#include "sim/wire/pcap_erf.hpp"

namespace openib::simhca::server {

// What one device is given on the command line.
struct DeviceConfig {
  std::string path, pcap_path;
  openib::simhca::HcaOptions opts;
  std::optional<openib::sim::UdpLinkOptions> port1;
  std::optional<openib::sim::ShmLinkOptions> port1_shm;
  std::optional<openib::sim::UdpLinkOptions> port2;  // §13 --port2 (with --ports 2)
  // §16.2 IFACE=: a host interface as the port's cable end (Ethernet only).
  std::optional<openib::sim::PacketLinkOptions> port1_iface, port2_iface;
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
    const bool eth = cfg_.opts.link_layer == simhca::kLinkLayerEthernet;  // §16: frames, not packets
    if (!cfg_.pcap_path.empty() && eth) {
      auto w = sim::wire::PcapEthWriter::open(cfg_.pcap_path);
      if (!w) return fail(w.error().str());
      pcap_eth_ = std::move(w).value();
    } else if (!cfg_.pcap_path.empty()) {
      auto w = sim::wire::PcapErfWriter::open(cfg_.pcap_path);
      if (!w) return fail(w.error().str());
      pcap_ = std::move(w).value();
    }
    if (cfg_.port1) {
      cfg_.port1->faults = cfg_.faults;
      cfg_.port1->pcap = pcap_.get();
      cfg_.port1->pcap_eth = pcap_eth_.get();
      if (eth) cfg_.port1->framing = sim::UdpLinkOptions::Framing::kEthernet;
      cfg_.port1->polled = true;
      cfg_.port1->on_readable = [this] { waiter_.notify(); };
      auto l = sim::UdpLink::create(*cfg_.port1);
      if (!l) return fail(l.error().str());
      link_ = std::move(l).value();
      set_udp_receiver(*link_, 1, inbox_);
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
    } else if (cfg_.port1_iface) {
      cfg_.port1_iface->faults = cfg_.faults;
      cfg_.port1_iface->pcap_eth = pcap_eth_.get();
      if (!start_iface(*cfg_.port1_iface, 1, iface_[0], inbox_)) return false;
    }
    // §13 port 2: a UDP cable end of its own (no capture, no faults).
    if (cfg_.port2) {
      if (eth) cfg_.port2->framing = sim::UdpLinkOptions::Framing::kEthernet;
      cfg_.port2->polled = true;
      cfg_.port2->on_readable = [this] { waiter_.notify(); };
      auto l = sim::UdpLink::create(*cfg_.port2);
      if (!l) return fail(l.error().str());
      link2_ = std::move(l).value();
      set_udp_receiver(*link2_, 2, inbox2_);
      hca.attach_link(2, link2_.get());
      log_->info("simhca: port 2 on udp {} -> {}", cfg_.port2->local, cfg_.port2->peer);
    } else if (cfg_.port2_iface) {
      if (!start_iface(*cfg_.port2_iface, 2, iface_[1], inbox2_)) return false;
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
    // A client gone as seen by the socket watcher: the reset comes before
    // the next client is accepted (after it, it would also stop watching
    // the new client's socket, whose VERSION then went unanswered).
    if (client_gone_) {
      client_gone_ = false;
      reset_device();
      return 2;
    }
    if (!server_->connected()) {
      watch_->set_fd(-1);
      deliver();  // the device is reset: counted and dropped (§12.8)
      rx_now_ = Hca::Clock::now();
      if (shm_) shm_->poll(SIZE_MAX);
      poll_udp();
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
    bool work = model_->poll_doorbells() > 0;  // §12.5 scanner
    rx_now_ = Hca::Clock::now();
    if (shm_ && shm_->poll(kShmBatch) > 0) work = true;
    if (poll_udp()) work = true;
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

  // §11.4 through the SIM_FAULT register, as the driver could: the fatal
  // state, its DEVICE_FATAL event to a client's EQ, and the syndrome 1.
  void inject_fatal() {
    if (model_) model_->hca().bar0_write32(openib::simhca::reg::kSimFault, openib::simhca::kSimFaultValue);
  }

  // When the loop should come back for this device at the latest.
  Hca::Clock::time_point deadline() const { return sleep_until_; }
  void set_sleep_until(Hca::Clock::time_point t) { sleep_until_ = t; }

  // §12.5.2 step 3: anything that came in while the loop published its
  // flags is taken now, and the loop does not sleep.
  bool recheck() {
    if (model_->poll_doorbells() > 0) carried_ = true;  // taken; run_due() on the next pass
    // Polled UDP ends: a datagram from now on wakes the loop (the waiter's
    // flag is up, so the link's notify() is not lost); one waiting wakes
    // it at once.
    if (link_) link_->arm_readable();
    if (link2_) link2_->arm_readable();
    for (auto& l : iface_)
      if (l) l->arm_readable();
    return carried_ || (shm_ && shm_->pending()) || inbox_.nonempty() || inbox2_.nonempty() || watch_->ready() ||
           light_[0].load(std::memory_order_acquire) >= 0 || light_[1].load(std::memory_order_acquire) >= 0;
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
    for (auto& l : iface_)
      if (l) {
        l->stop();
        const openib::sim::LinkStats st = l->stats();
        log_->info("simhca: {} on interface {}: tx {} frames ({} not sent), rx {} ({} malformed, {} before a receiver)",
                   l->name(), l->iface(), st.tx_packets, st.tx_errors, st.rx_packets, st.rx_dropped_malformed,
                   st.rx_dropped_no_receiver);
      }
    if (shm_)
      log_->info("simhca: port 1 shared-memory cable: tx {} packets ({} dropped), rx {} ({} bad CRC, {} malformed)",
                 shm_->stats().tx_packets, shm_->stats().tx_errors, shm_->stats().rx_packets,
                 shm_->stats().rx_dropped_bad_crc, shm_->stats().rx_dropped_malformed);
    log_data_stats();
    const openib::simhca::HcaStats& s = hca.stats();
    const auto& ss = server_->stats();
    log_->info(
        "simhca: exiting; commands {} (failed {}, dropped {}), bad accesses {}, events {} "
        "(dropped {}), irqs {}, vfio-user messages {} (malformed {}), dma faults {} (bus errors {})",
        s.cmds_completed, s.cmds_failed, s.cmds_dropped, s.bad_access, s.events_written,
        s.events_dropped, s.irqs_signalled, ss.messages, ss.bad_messages, ss.dma_faults, ss.dma_bus_errors);
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
  static constexpr size_t kUdpBatch = 64;  // the same for a UDP end
  // A device without a client, in a shared loop, looks for one this often.
  static constexpr auto kAcceptPoll = std::chrono::milliseconds(20);

  bool fail(const std::string& what) {
    log_->error("{}", what);
    return false;
  }
  // §12.7: a UDP end's packets to the port. Polled (docs/cables.md
  // "Polled receive"), the loop reads the socket in its pass and the
  // packets go to the device from the link's buffer; else the link's
  // thread puts them in the inbox (OPENIB_UDP_POLLED=0, for comparisons).
  // Link-state signals (docs/cables.md "Link state", §14.3) likewise: to
  // the port at once when polled, else through light_ (the loop's pass).
  void set_udp_receiver(openib::sim::UdpLink& l, uint8_t port, PacketInbox& inbox) {
    if (!l.polled()) {
      l.set_receiver([&inbox](std::span<const std::byte> p) { inbox.push(p); });
      l.set_state_receiver([this, port](bool up) {
        light_[port - 1].store(up ? 1 : 0, std::memory_order_release);
        waiter_.notify();
      });
      return;
    }
    l.set_receiver([this, port](std::span<const std::byte> p) { model_->hca().receive_packet(port, p, rx_now_); });
    l.set_state_receiver([this, port](bool up) { model_->hca().set_cable_light(port, up); });
  }
  // §16.2: a port's cable end on a host interface (AF_PACKET), polled
  // by the loop as a UDP end is; the interface's carrier is the cable's
  // light (docs/cables.md "Host interfaces (AF_PACKET)").
  bool start_iface(openib::sim::PacketLinkOptions& o, uint8_t port, std::unique_ptr<openib::sim::PacketLink>& out,
                   PacketInbox& inbox) {
    o.polled = true;
    o.on_readable = [this] { waiter_.notify(); };
    auto l = openib::sim::PacketLink::create(o);
    if (!l) return fail(l.error().str());
    out = std::move(l).value();
    if (out->polled()) {
      out->set_receiver([this, port](std::span<const std::byte> p) { model_->hca().receive_packet(port, p, rx_now_); });
      out->set_state_receiver([this, port](bool up) { model_->hca().set_cable_light(port, up); });
    } else {
      out->set_receiver([&inbox](std::span<const std::byte> p) { inbox.push(p); });
      out->set_state_receiver([this, port](bool up) {
        light_[port - 1].store(up ? 1 : 0, std::memory_order_release);
        waiter_.notify();
      });
    }
    model_->hca().attach_link(port, out.get());
    log_->info("simhca: port {} on interface {} (index {}, MTU {})", port, o.iface, out->ifindex(), out->mtu());
    return true;
  }
  // Polled UDP and interface ends: what their sockets hold now, up to kUdpBatch each.
  bool poll_udp() {
    bool any = false;
    if (link_ && link_->poll(kUdpBatch) > 0) any = true;
    if (link2_ && link2_->poll(kUdpBatch) > 0) any = true;
    for (auto& l : iface_)
      if (l && l->poll(kUdpBatch) > 0) any = true;
    return any;
  }
  bool deliver() {
    Hca& hca = model_->hca();
    bool any = false;
    for (uint8_t i = 0; i < light_.size(); ++i)
      if (const int up = light_[i].exchange(-1, std::memory_order_acquire); up >= 0) {
        hca.set_cable_light(static_cast<uint8_t>(i + 1), up == 1);
        any = true;
      }
    if (!inbox_.nonempty() && !inbox2_.nonempty()) return any;
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
    log_->info(  // §6.11, §12.8
        "simhca: multicast: copies delivered {}, looped back {}, dropped without GRH {}, for no group {}",
        d.mcast_delivered, d.mcast_loopback, d.rx_mcast_no_grh, d.rx_mcast_no_group);
    if (cfg_.opts.link_layer == openib::simhca::kLinkLayerEthernet)
      log_->info(  // §16
          "simhca: ethernet: frames not RoCEv2 {}, bad ICRC {}, not to our GIDs {}, wrong addresses {}, "
          "packets without GRH not sent {}; raw QPs: frames sent {}, received {}, dropped for no posted "
          "receive {}",
          d.rx_not_roce, d.rx_bad_icrc, d.rx_not_our_gid, d.rx_bad_addr, d.tx_not_framed, d.raw_tx_frames,
          d.raw_rx_frames, d.raw_rx_no_wqe);
  }

  DeviceConfig cfg_;
  openib::simhca::DeviceWaiter& waiter_;
  bool shared_;
  std::shared_ptr<spdlog::logger> log_ = openib::log::get("simhca");
  std::unique_ptr<openib::simhca::VfioModel> model_;
  std::unique_ptr<openib::vfio::user::VfioUserServer> server_;
  std::unique_ptr<openib::sim::wire::PcapErfWriter> pcap_;
  std::unique_ptr<openib::sim::wire::PcapEthWriter> pcap_eth_;  // §16: an Ethernet device's capture
  PacketInbox inbox_, inbox2_;
  std::array<std::atomic<int>, 2> light_{-1, -1};  // a port's last link-state signal, not yet applied (-1: none)
  std::unique_ptr<openib::sim::UdpLink> link_, link2_;
  std::unique_ptr<openib::sim::ShmLink> shm_;
  std::array<std::unique_ptr<openib::sim::PacketLink>, 2> iface_;  // §16.2 IFACE= ends of ports 1 and 2
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

}  // namespace openib::simhca::server
