// UdpLink: a cable end. One UDP socket bound to a local address:port,
// sending each IBA packet (LRH through VCRC) as one datagram to the peer
// address:port, and receiving on its own thread (docs/cables.md).
//
//   send()   fault injection (FaultSpec), then a non-blocking sendto(); a
//            full socket buffer (EAGAIN, ENOBUFS) drops the packet and
//            counts tx_errors, as a congested wire would. Inside a batch
//            (Link::begin_batch .. end_batch) packets are queued and leave
//            together at its end (or when kTxBatch wait) in one
//            sendmmsg(), runs of equal-size packets as one UDP GSO message
//            (UDP_SEGMENT: the kernel cuts it into the same datagrams, so
//            a receiver sees one packet per datagram either way).
//            Segments (Link::send_segment, with GSO) are cut into their
//            packets, CRCs computed for each, and queued the same way.
//   receive  recvmmsg() into a ring of kRxBatch buffers (with UDP_GRO,
//            kGroRxBatch of 64 KiB: a GSO message arrives whole and is
//            cut at its gso_size into the packets it carries); then
//            datagrams from anyone but the peer are dropped
//            (rx_dropped_foreign); the rest are captured (if a pcap tap is
//            set), validated (rx_check.hpp: bad CRC / malformed counted and
//            dropped) and handed to the receiver on the receive thread.
//            A link-state signal (link_signal.hpp) from the peer goes to
//            the state receiver instead, before capture and checks.
//
// Polled receive (docs/cables.md "Polled receive"; DatagramLink,
// datagram_link.hpp): with UdpLinkOptions::polled, the link's owner reads
// the socket itself with poll() (simhca's device loop in its pass,
// ibfabric's loop: no hand-off between threads, no copy). With
// on_readable, the link's thread only watches the socket while the owner
// sleeps: after arm_readable() it calls on_readable() once, when a
// datagram is waiting; without, there is no thread and the owner watches
// fd() itself. Same checks, counters, capture and drops either way.
//
// Lifecycle (DatagramLink's): create() binds and starts the receive
// thread; stop() ends it (within the poll timeout at worst; normally at
// once, through an eventfd); the destructor stops and joins. Neither may
// be called from the receiver.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "common/fd.hpp"
#include "common/result.hpp"
#include "sim/cable/datagram_link.hpp"
#include "sim/cable/endpoint.hpp"
#include "sim/cable/link.hpp"
#include "sim/wire/packet.hpp"

namespace openib::sim::wire {
class PcapErfWriter;
class PcapEthWriter;
}

namespace openib::sim {

// A receive ring that polled links read by one owner share
// (UdpLinkOptions::rx_ring): ibfabric's cables, one ring's memory for all
// of them, so that each can have UDP_GRO's 64 KiB slots.
struct UdpRxRing {
  std::mutex mu;  // one reader at a time, across the links sharing it
  std::unique_ptr<std::byte[]> bytes;  // allocated by the first link, for either ring layout
};

struct UdpLinkOptions {
  std::string local = "127.0.0.1:0";  // bind address; port 0: ephemeral (see local_port())
  std::string peer;                   // the other end; empty: set later with set_peer()
  FaultSpec faults;                   // injected on send
  // Capture tap, shared with other links (PcapErfWriter is thread-safe) and
  // outliving this one: every packet sent, and every datagram received from
  // the peer before validation, tagged with ERF interface `pcap_iface` (0-3).
  wire::PcapErfWriter* pcap = nullptr;
  std::uint8_t pcap_iface = 0;
  // The same for an Ethernet cable (Framing::kEthernet): frames into a
  // LINKTYPE_ETHERNET file, which tshark decodes as RoCEv2 and the rest.
  wire::PcapEthWriter* pcap_eth = nullptr;
  std::string name = "udp";           // in log lines
  // SO_RCVBUF / SO_SNDBUF, best effort. 16 MiB holds a 1 MiB UC message at
  // MTU 256 (4096 datagrams, ~5 MiB of kernel buffers) even while the
  // receiving process is descheduled: on loopback, a full buffer is loss.
  int socket_buffer_bytes = 16 << 20;
  std::chrono::milliseconds poll_timeout{100};  // bounds stop() if the wake-up is lost
  // How packets cross the socket (docs/cables.md "Batches"): kGso (the
  // default), kBatch (sendmmsg/recvmmsg, no GSO), kSingle (one sendto /
  // recvfrom per packet, as before batching; for comparisons). The
  // environment variable OPENIB_UDP_BATCH=0|1|2 overrides it (single,
  // batch, gso), so a benchmark can compare them with one build.
  enum class Io { kSingle, kBatch, kGso };
  Io io = Io::kGso;
  // With kGso, UDP_GRO on the socket (udp(7)): a GSO message from the
  // peer arrives whole and is cut here at its gso_size, one packet per
  // segment. Its receive ring holds 64 KiB datagrams (kGroRxBatch of them,
  // 512 KiB), so a process with many links (ibfabric) leaves it off.
  bool gro = true;
  // Polled receive (above): the owner reads with poll(). The environment
  // variable OPENIB_UDP_POLLED=0 turns it off (the receive thread reads
  // and calls the receiver, as before), for comparisons.
  bool polled = false;
  // Polled: called on the link's thread, once per arm_readable(), when
  // the socket has a datagram. Empty: no thread; the owner watches fd().
  std::function<void()> on_readable;
  // Polled: the receive ring to use, shared with other links (null: its
  // own). Given to a link that is not polled (OPENIB_UDP_POLLED=0), it
  // means memory matters: the link takes no GRO, and a ring of its own.
  std::shared_ptr<UdpRxRing> rx_ring;
  // What a datagram carries (docs/cables.md "Ethernet cables"): an IBA
  // packet, LRH through VCRC (kIba: CRCs computed on send, checked on
  // receive), or an Ethernet frame without its FCS (kEthernet: QEMU's
  // `-netdev dgram` framing, the cable of an Ethernet port carrying
  // RoCEv2 and whatever else a NIC sees). An Ethernet cable sends frames
  // as given, one per datagram, no segments, and hands on every frame of
  // kEthernetMinFrameBytes..wire::kMaxPacketBytes bytes (shorter or
  // longer ones are counted malformed): what a frame holds is its port's
  // to judge (simhca parses RoCEv2 and checks its ICRC).
  enum class Framing { kIba, kEthernet };
  Framing framing = Framing::kIba;
};


// docs/cables.md "Who may take a cable's port": a UDP port at or above
// net.ipv4.ip_unprivileged_port_start (read from /proc; 1024 when it
// cannot be) can be bound by any local user while its end is stopped, and
// what that user sends then comes from the peer's address:port. The
// ports of `local` and `peer` (port 0: an ephemeral one) that are so, as
// the warning create() logs when run as root (empty: none).
int unprivileged_port_start();
std::string takeable_ports_warning(const Endpoint& local, const Endpoint* peer, int unprivileged_start);

class UdpLink final : public DatagramLink {
 public:
  static Result<std::unique_ptr<UdpLink>> create(const UdpLinkOptions& opts);
  ~UdpLink() override;  // stop()s first: its thread calls into the link

  // ENOTCONN with no peer set; EMSGSIZE for a packet (or frame) over
  // wire::kMaxPacketBytes;
  // a socket error other than a full buffer is returned (and counted).
  Result<void> send(std::span<const std::byte> packet) override;
  // In a batch without fault injection, `fill` writes the packet straight
  // into the batch's queue (no buffer of its own, no copy); else as Link's.
  Result<void> send_with(std::size_t len, Filler fill, std::size_t payload_at = 0) override;
  // Segments (docs/cables.md "Segments over UDP"): with GSO and no fault
  // injection up to kTxBatch packets; OPENIB_UDP_SEGMENTS=0: none (1).
  std::size_t segment_room(std::size_t mtu) override;
  // The segment cut into its packets, each with its headers and both CRCs
  // computed (a receiver without GRO checks them), queued as a batch's
  // packets are (at once outside a batch): the middle ones leave as one
  // GSO message, the wire and the capture see one packet per datagram.
  Result<void> send_segment(const Segment& seg, Filler fill) override;
  // Link state (link_signal.hpp): one signal datagram to the peer, after
  // any packets a batch holds (so a "down" follows what was sent before
  // the pull); not captured, not faulted. A full buffer loses it
  // (tx_errors), as it would a packet: the sender repeats signals.
  Result<void> send_link_state(bool up) override;
  // A batch queues what send() is given and sends it at end_batch() (or
  // once kTxBatch packets wait), in one sendmmsg(). Nested batches end
  // with the outermost.
  void begin_batch() override;
  void end_batch() override;
  // The I/O in use (after OPENIB_UDP_BATCH; kGso falls back to kBatch for
  // good if the kernel or the path refuses a GSO message).
  UdpLinkOptions::Io io() const { return io_.load(std::memory_order_relaxed); }

  static constexpr std::size_t kTxBatch = 64;  // packets queued before a batch sends anyway
  static constexpr std::size_t kRxBatch = 32;     // datagrams one recvmmsg() takes
  static constexpr std::size_t kGroRxBatch = 8;   // the same, of 64 KiB each, with UDP_GRO
  // Whether UDP_GRO is on, and how many coalesced datagrams it brought.
  bool gro() const { return gro_; }
  std::uint64_t gro_datagrams() const { return gro_datagrams_.load(std::memory_order_relaxed); }

  // Cables this end to `peer` ("addr:port", same address family as the
  // local end). Datagrams from the previous peer are foreign from now on.
  Result<void> set_peer(std::string_view peer);
  // set_faults(), set_receiver(), set_state_receiver(), stats(), stop(),
  // polled(), fd(), poll(), arm_readable(), name(): DatagramLink's.

  std::uint16_t local_port() const { return local_.port(); }
  const Endpoint& local_endpoint() const { return local_; }
  Endpoint peer() const;

  UdpLinkOptions::Framing framing() const { return eth_ ? UdpLinkOptions::Framing::kEthernet : UdpLinkOptions::Framing::kIba; }
  bool carries_frames() const override { return eth_; }

 private:
  UdpLink(UniqueFd sock, Endpoint local, const UdpLinkOptions& opts);
  std::size_t receive(std::size_t max) override;
  std::mutex& read_mutex() override;  // the shared ring's, if any
  void receive_one(std::span<const std::byte> datagram, const sockaddr* from, socklen_t from_len);
  Result<void> send_datagram(std::span<const std::byte> packet, const Endpoint& to);
  // Under send_mu_: a packet into the batch's queue / the queue onto the wire.
  Result<void> queue_datagram(std::span<const std::byte> packet, const Endpoint& to);
  Result<void> flush_locked();
  Result<void> check_send(std::size_t len, Endpoint& to);  // EMSGSIZE, ENOTCONN (counted); the peer
  Result<void> count_tx_failure(int e, const Endpoint& to, std::size_t packets);
  std::size_t receive_single(std::size_t max);
  std::size_t receive_batch(std::size_t max);
  void capture(std::span<const std::byte> packet);

  bool eth_ = false;  // UdpLinkOptions::Framing::kEthernet
  Endpoint local_;
  wire::PcapErfWriter* pcap_;
  std::uint8_t pcap_iface_;

  mutable std::mutex peer_mu_;
  Endpoint peer_;  // len 0: none

  std::atomic<UdpLinkOptions::Io> io_;
  // The batch (under send_mu_): queued packets back to back in tx_bytes_,
  // each one's end offset in tx_ends_, all to tx_to_.
  unsigned batch_depth_ = 0;
  std::vector<std::byte> tx_bytes_;
  std::vector<std::size_t> tx_ends_;
  Endpoint tx_to_;
  std::vector<std::byte> seg_buf_;  // a segment as its sender fills it (under send_mu_)
  bool segments_ = true;            // OPENIB_UDP_SEGMENTS

  // The receive thread's buffers: kRxBatch of kRxBufBytes, allocated
  // uninitialised (a quiet link touches only the first pages).
  static constexpr std::size_t kRxBufBytes = (wire::kMaxPacketBytes + 1 + 63) & ~std::size_t{63};
  static constexpr std::size_t kGroRxBufBytes = 65536;  // the largest UDP datagram, GRO'd or not
  static constexpr std::size_t kRingBytes = std::max(kRxBatch * kRxBufBytes, kGroRxBatch * kGroRxBufBytes);
  bool gro_ = false;
  std::size_t rx_slots_ = 0, rx_slot_bytes_ = 0;
  std::unique_ptr<std::byte[]> rx_bufs_;  // its own ring, or none (shared, or kSingle)
  std::shared_ptr<UdpRxRing> rx_ring_;     // the shared one
  std::byte* rx_base_ = nullptr;           // the ring in use (null: kSingle)
  std::vector<std::byte> single_;  // kSingle's buffer: one byte over the largest packet
  std::atomic<std::uint64_t> gro_datagrams_{0};
  std::atomic<bool> warned_foreign_{false};
};

}  // namespace openib::sim
