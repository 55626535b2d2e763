// UdpLink: a cable end. One UDP socket bound to a local address:port,
// sending each IBA packet (LRH through VCRC) as one datagram to the peer
// address:port, and receiving on its own thread (docs/cables.md).
//
//   send()   fault injection (FaultSpec), then a non-blocking sendto(); a
//            full socket buffer (EAGAIN, ENOBUFS) drops the packet and
//            counts tx_errors, as a congested wire would.
//   receive  datagrams from anyone but the peer are dropped
//            (rx_dropped_foreign); the rest are captured (if a pcap tap is
//            set), validated (rx_check.hpp: bad CRC / malformed counted and
//            dropped) and handed to the receiver on the receive thread.
//
// Lifecycle: create() binds and starts the receive thread; stop() ends it
// (within the poll timeout at worst; normally at once, through an eventfd);
// the destructor stops and joins. Neither may be called from the receiver.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

#include "common/fd.hpp"
#include "common/result.hpp"
#include "sim/cable/endpoint.hpp"
#include "sim/cable/fault_injector.hpp"
#include "sim/cable/link.hpp"
#include "sim/cable/link_counters.hpp"

namespace openib::sim::wire {
class PcapErfWriter;
}

namespace openib::sim {

struct UdpLinkOptions {
  std::string local = "127.0.0.1:0";  // bind address; port 0: ephemeral (see local_port())
  std::string peer;                   // the other end; empty: set later with set_peer()
  FaultSpec faults;                   // injected on send
  // Capture tap, shared with other links (PcapErfWriter is thread-safe) and
  // outliving this one: every packet sent, and every datagram received from
  // the peer before validation, tagged with ERF interface `pcap_iface` (0-3).
  wire::PcapErfWriter* pcap = nullptr;
  std::uint8_t pcap_iface = 0;
  std::string name = "udp";           // in log lines
  // SO_RCVBUF / SO_SNDBUF, best effort. 16 MiB holds a 1 MiB UC message at
  // MTU 256 (4096 datagrams, ~5 MiB of kernel buffers) even while the
  // receiving process is descheduled: on loopback, a full buffer is loss.
  int socket_buffer_bytes = 16 << 20;
  std::chrono::milliseconds poll_timeout{100};  // bounds stop() if the wake-up is lost
};

class UdpLink final : public Link {
 public:
  static Result<std::unique_ptr<UdpLink>> create(const UdpLinkOptions& opts);
  ~UdpLink() override;
  UdpLink(const UdpLink&) = delete;
  UdpLink& operator=(const UdpLink&) = delete;

  // ENOTCONN with no peer set; EMSGSIZE for a packet over wire::kMaxPacketBytes;
  // a socket error other than a full buffer is returned (and counted).
  Result<void> send(std::span<const std::byte> packet) override;
  void set_receiver(Receiver r) override;
  LinkStats stats() const override { return counters_.snapshot(); }

  // Cables this end to `peer` ("addr:port", same address family as the
  // local end). Datagrams from the previous peer are foreign from now on.
  Result<void> set_peer(std::string_view peer);
  // Replaces the send-side faults (restarting their PRNG from spec.seed).
  void set_faults(const FaultSpec& spec);

  std::uint16_t local_port() const { return local_.port(); }
  const Endpoint& local_endpoint() const { return local_; }
  Endpoint peer() const;
  const std::string& name() const { return name_; }

  // Ends the receive thread and waits for it; idempotent. send() still works.
  void stop();

 private:
  UdpLink(UniqueFd sock, UniqueFd wake, Endpoint local, const UdpLinkOptions& opts);
  void receive_loop();
  void receive_one(std::span<const std::byte> datagram, const sockaddr* from, socklen_t from_len);
  Result<void> send_datagram(std::span<const std::byte> packet, const Endpoint& to);
  void capture(std::span<const std::byte> packet);

  UniqueFd sock_;
  UniqueFd wake_;  // eventfd: stop() wakes the receive thread's poll()
  Endpoint local_;
  std::string name_;
  wire::PcapErfWriter* pcap_;
  std::uint8_t pcap_iface_;
  int poll_timeout_ms_;

  mutable std::mutex peer_mu_;
  Endpoint peer_;  // len 0: none

  std::mutex send_mu_;  // serialises fault injection and the datagrams it yields
  FaultInjector faults_;

  std::mutex rx_mu_;
  std::shared_ptr<const Receiver> receiver_;

  LinkCounters counters_;
  std::atomic<unsigned> warned_{0};  // rx_check.hpp's once-per-kind logging
  std::atomic<bool> warned_foreign_{false}, warned_tx_{false}, warned_rx_{false}, warned_pcap_{false};

  std::mutex stop_mu_;  // one joiner at a time
  std::atomic<bool> stopping_{false};
  std::atomic<std::thread::id> rx_tid_{};
  std::thread thread_;
};

}  // namespace openib::sim
