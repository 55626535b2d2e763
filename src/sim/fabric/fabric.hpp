// The fabric: the switches of a topology that this process runs, the
// cables between their ports and to the hosts (docs/ibfabric.md "Cables
// and bindings"), and the control commands (docs/ibfabric.md "Control").
//
// Cable endpoints are deterministic: cable i of the topology (Topology::
// links order) has UDP port base+2i at its first end and base+2i+1 at its
// second; a node's address is --node-addr NAME=ADDR or the default address.
// So ibfabric, the host scripts (ibfabric --print-bindings) and a second
// ibfabric running the other switches (--remote) compute the same pairs.
//
// Threading: everything runs on the caller's loop. The UDP cables are
// polled (docs/cables.md "Polled receive"): the loop reads their sockets
// when udp_fd() is readable and forwards each packet from the link's
// buffer. With OPENIB_UDP_POLLED=0, as before: the UdpLinks' receive
// threads push copies into the inbox (mutex + eventfd).
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "common/fd.hpp"
#include "common/result.hpp"
#include "sim/cable/link.hpp"
#include "sim/cable/udp_link.hpp"
#include "sim/fabric/switch.hpp"
#include "sim/fabric/topology.hpp"
#include "sim/wire/pcap_erf.hpp"

namespace openib::sim::fabric {

struct FabricOptions {
  std::string addr = "127.0.0.1";                   // every node's address unless named below
  std::uint16_t base_port = 18000;                  // cable i: base+2i, base+2i+1
  std::map<std::string, std::string> node_addr;     // NAME -> ADDR
  std::set<std::string> remote;                     // switches another ibfabric runs
  // Explicit endpoints of a host port, overriding the scheme: (node, port)
  // -> {fabric end, host end}.
  std::map<std::pair<std::string, unsigned>, std::pair<std::string, std::string>> binds;
  std::string pcap_dir;  // one capture file per cable, named after its ends
  FaultSpec faults;      // on every UDP cable end of this process (tests)
};

// One end of a cable and its peer, as a simhca port or a remote ibfabric sees it.
struct Binding {
  int link = -1;            // index into Topology::links
  int node = -1;
  unsigned port = 0;
  std::string local, peer;  // "ADDR:PORT"
};

// The endpoints of cable `link` (pure). EINVAL if the ports overflow 65535
// or an address does not parse.
Result<std::pair<Binding, Binding>> cable_ends(const Topology& t, const FabricOptions& o, int link);

// Every host (CA / router) port's binding, in node then port order, and the
// simhca arguments for it: "NODE PORT --guid 0x... --port1 LOCAL=..,PEER=..".
Result<std::vector<Binding>> host_bindings(const Topology& t, const FabricOptions& o);
std::string format_binding(const Topology& t, const Binding& b);

struct FabricStats {
  std::uint64_t inbox_packets = 0, inbox_dropped = 0;  // from UDP cables
  std::uint64_t internal_packets = 0;                  // over in-process cables
  std::uint64_t dropped_cable_down = 0;                // sent into a pulled cable
};

class Fabric {
 public:
  static Result<std::unique_ptr<Fabric>> create(Topology topo, const FabricOptions& opts);
  ~Fabric();
  Fabric(const Fabric&) = delete;
  Fabric& operator=(const Fabric&) = delete;

  // The loop's work: packets from UDP cables (inbox_fd() readable),
  // in-process cables (internal_pending()), trap resends (every ~100 ms).
  int inbox_fd() const { return inbox_efd_.get(); }
  void deliver_inbox();
  // Polled UDP cables: an epoll descriptor, readable when one of their
  // sockets is (-1: none polled). receive_udp() reads what they hold
  // and forwards it; true if more may wait (call it again, not wait).
  int udp_fd() const { return udp_ep_.get(); }
  bool receive_udp();
  bool internal_pending() const { return !internal_.empty(); }
  std::size_t pump_internal(std::size_t max = 4096);
  void tick(Switch::Clock::time_point now);

  // One control line (docs/ibfabric.md "Control"): the reply text, whose
  // last line is "ok" or "error: ...".
  std::string control(std::string_view line);

  // Cable state: a pulled cable carries nothing and its switch ends are
  // down; a UDP cable's far end is told (docs/cables.md "Link state").
  Result<void> set_cable(std::string_view sw, unsigned port, bool up);

  const Topology& topology() const { return topo_; }
  Switch* find_switch(std::string_view name);
  std::size_t num_local_switches() const { return switches_.size(); }
  std::size_t num_udp_cables() const { return udp_.size(); }
  FabricStats stats() const {
    std::lock_guard lk(inbox_mu_);
    return stats_;
  }

 private:
  struct End {  // a switch port of this process
    int sw = -1;  // index into switches_
    unsigned port = 0;
  };
  struct Cable {
    int link = -1;
    End a, b;          // b.sw < 0: the far end is outside (UDP)
    UdpLink* udp = nullptr;
    bool up = true;         // not pulled here (set_cable)
    // UDP: the far end's last link-state signal (docs/cables.md "Link
    // state": another ibfabric pulled it); the switch port is up only
    // with both.
    bool far_up = true;
    // UDP, link-state signals to the far end (docs/ibfabric.md "Control"):
    // while pulled, "down" every kDownEvery; after a plug, "up" kUpRepeats
    // more times, one a tick.
    unsigned up_repeats = 0;
    Switch::Clock::time_point next_signal{};
    bool in_batch = false;  // udp's batch is open (Fabric::Batches)
    std::unique_ptr<wire::PcapErfWriter> pcap;
  };
  // What the switches send to UDP cables while the loop forwards a drain
  // of the inbox or of the internal queue leaves in one sendmmsg() per
  // cable (UdpLink batches, docs/cables.md "Batches"): a cable's batch is
  // opened at its first packet and closed at the end of the drain.
  class Batches {
   public:
    explicit Batches(Fabric& f) : f_(f) { f_.batching_ = true; }
    ~Batches();
    Batches(const Batches&) = delete;
    Batches& operator=(const Batches&) = delete;

   private:
    Fabric& f_;
  };
  bool batching_ = false;
  std::vector<Cable*> batched_;
  struct Queued {
    End to;
    std::vector<std::byte> bytes;
    unsigned hops;
    int light = -1;  // >= 0: not a packet but a link-state signal (0 down, 1 up)
  };
  static constexpr unsigned kUpRepeats = 4;
  static constexpr auto kDownEvery = std::chrono::seconds(1);
  void far_light(End to, bool up);
  void signal(Cable& c, Switch::Clock::time_point now);

  Fabric(Topology topo) : topo_(std::move(topo)) {}
  Result<void> build(const FabricOptions& opts);
  void emit(int sw, unsigned port, std::span<const std::byte> pkt, unsigned hops);
  Cable* cable_at(int sw, unsigned port);
  std::string show() const;
  std::string counters(std::string_view only) const;

  Topology topo_;
  std::vector<std::unique_ptr<Switch>> switches_;
  std::vector<int> node_of_switch_;  // switches_ index -> topology node
  std::map<std::pair<int, unsigned>, int> cable_of_;  // (sw, port) -> cables_ index
  std::vector<Cable> cables_;
  std::vector<std::unique_ptr<UdpLink>> udp_;
  std::deque<Queued> internal_;
  FabricStats stats_;

  // Polled UDP cables: their sockets, epoll data = index into udp_.
  UniqueFd udp_ep_;
  std::shared_ptr<UdpRxRing> rx_ring_;  // their receive ring, one for all
  Switch::Clock::time_point rx_now_{};  // receive_udp()'s time, read once per call
  static constexpr std::size_t kUdpBatch = 256;  // packets read from one cable per call

  // UDP receive threads -> loop.
  UniqueFd inbox_efd_;
  mutable std::mutex inbox_mu_;  // also guards stats_.inbox_dropped (bumped by the receive threads)
  std::deque<Queued> inbox_;
};

}  // namespace openib::sim::fabric
