// A port's link: where an HCA or switch port sends raw IBA packets (from
// the LRH through the VCRC, one packet per send) and receives them.
//
// Implementations: UdpLink (udp_link.hpp: one UDP datagram per packet, the
// cable between two processes or machines, with fault injection and pcap
// capture), ShmLink (shm_link.hpp), PacketLink (packet_link.hpp: an
// Ethernet port's cable end on a host network interface) and LoopbackLink
// pairs for in-process tests.
//
// Threading: receive() callbacks run on the link's own receive thread (or
// inside poll() for links driven by their owner: ShmLink, a polled
// UdpLink); send() may be called from
// any thread. A Link never calls back into send() of its own.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <memory>
#include <span>

#include "common/function_ref.hpp"
#include "common/result.hpp"

namespace openib::sim::wire {
struct ParsedPacket;
}

namespace openib::sim {

// An Ethernet header's 14 bytes: the shortest frame an Ethernet cable
// hands on (docs/cables.md "Ethernet cables"; 802.3's 64-byte minimum is
// the wire's: senders pad, QEMU delivers runts as they come).
inline constexpr std::size_t kEthernetMinFrameBytes = 14;

struct LinkStats {
  uint64_t tx_packets = 0, tx_bytes = 0;
  uint64_t rx_packets = 0, rx_bytes = 0;
  uint64_t rx_dropped_bad_crc = 0;   // ICRC or VCRC wrong (IBA 7.8): dropped, counted
  uint64_t rx_dropped_malformed = 0; // not a parseable IBA packet
  uint64_t tx_errors = 0;            // the socket refused a datagram
  // Fault injection (FaultSpec), counted on the sending side.
  uint64_t injected_drops = 0, injected_dups = 0, injected_reorders = 0, injected_corruptions = 0;
  // Added with the implementations (docs/cables.md "Validation and counters"):
  uint64_t rx_dropped_foreign = 0;      // a datagram from anyone but the configured peer
  uint64_t rx_dropped_no_receiver = 0;  // well-formed, but no receiver installed yet
  // Link-state signals (docs/cables.md "Link state"; not packets: in no
  // other counter, never captured).
  uint64_t tx_link_signals = 0, rx_link_signals = 0;
};

// A run of packets of one RC or UC SEND or RDMA WRITE message handed to
// a link at once (Link::send_segment, docs/cables.md "Segments"). The
// first packet is as framed (its own OpCode, extension headers, PSN, a
// payload of `mtu` bytes); packet i (1 <= i < count) is the first's LRH,
// GRH and BTH with PSN + i, no extension headers, OpCode Middle of the
// same kind, except the last, whose OpCode, SE and AckReq are given here
// and whose payload is `last_len` bytes (and pad to a multiple of 4).
struct Segment {
  std::uint16_t count = 0;          // packets, >= 2
  std::uint16_t mtu = 0;            // payload of every packet but the last
  std::uint16_t last_len = 0;       // the last packet's payload, 1..mtu
  std::uint16_t hdr_len = 0;        // the first packet's headers, LRH through the last extension header
  std::uint16_t later_hdr_len = 0;  // the other packets' headers: LRH, GRH if any, BTH
  std::uint8_t last_opcode = 0;
  bool last_se = false, last_ack_req = false;
  static constexpr std::size_t kCrcBytes = 6;  // ICRC and VCRC (IBA 7.8)

  std::size_t payload_bytes() const { return std::size_t{count - 1u} * mtu + last_len; }
  std::size_t last_pad() const { return (4 - last_len % 4) % 4; }
  // What fill() writes plus the 6 bytes of the first packet's ICRC and
  // VCRC place (never computed: a segment's CRCs are offloaded).
  std::size_t bytes() const { return hdr_len + payload_bytes() + last_pad() + kCrcBytes; }
  // The bytes on the wire of packet i, as count_tx and the link count them.
  std::size_t packet_bytes(std::size_t i) const {
    if (i == 0) return hdr_len + std::size_t{mtu} + kCrcBytes;
    if (i + 1 < count) return later_hdr_len + std::size_t{mtu} + kCrcBytes;
    return later_hdr_len + std::size_t{last_len} + last_pad() + kCrcBytes;
  }
};

class Link {
 public:
  using Receiver = std::function<void(std::span<const std::byte> packet)>;
  virtual ~Link() = default;

  // Sends one packet. Never blocks for long; a full socket buffer drops the
  // packet (counted), as a congested wire would.
  virtual Result<void> send(std::span<const std::byte> packet) = 0;
  // Sends a packet of `len` bytes that `fill` writes in place: straight
  // into a cable slot where the link has one (ShmLink), saving a copy;
  // here, into a buffer handed to send(). `fill` writes all but the ICRC
  // and VCRC (the last 6 bytes): the link computes them (wire::seal_packet),
  // or leaves them to the hardware where the cable offloads them (ShmLink,
  // docs/cables.md). `fill` returns false to abandon the packet: nothing
  // is sent, the result is ECANCELED. `payload_at` is where the payload
  // starts in the packet (the headers' length; 0: no payload to speak
  // of): a link that places the packet in memory of its own (ShmLink)
  // puts that byte on a cache-line boundary, so that the payload's copies
  // into and out of the slot are aligned with host memory. (A 4 KiB copy
  // between addresses 4 bytes apart modulo 8, as a 20-byte LRH+BTH makes
  // them, runs at less than half the speed of an aligned one here.)
  using Filler = FunctionRef<bool(std::span<std::byte>)>;
  virtual Result<void> send_with(std::size_t len, Filler fill, std::size_t payload_at = 0);
  // Whether the cable carries Ethernet frames (docs/cables.md "Ethernet
  // cables"): send_with() then sends what `fill` wrote as it is, with no
  // IBA CRCs computed into its last 6 bytes.
  virtual bool carries_frames() const { return false; }
  // Segmentation offload (docs/cables.md "Segments"; as a NIC's TSO):
  // how many packets of `mtu` bytes of payload the link takes now as one
  // segment (Segment). 1: none, send packet by packet (the default;
  // ShmLink under a capture or fault injection, or towards a peer that
  // wants whole packets; UdpLink without GSO or under fault injection).
  virtual std::size_t segment_room(std::size_t /*mtu*/) { return 1; }
  // Sends `seg` (at most segment_room() packets): `fill` writes the first
  // packet's headers (framed for a payload of seg.mtu) and then all of the
  // segment's payload back to back and the last packet's pad, seg.bytes()
  // in all but the 6 bytes of CRCs at the end. ENOTSUP where segment_room()
  // is 1; ECANCELED if `fill` gives up.
  virtual Result<void> send_segment(const Segment& seg, Filler fill);
  // How many packets the link takes now without dropping one: its
  // link-level flow-control credits (IBA 7.9; docs/cables.md). A sender
  // with packets it may hold back (the RC/UC requester) sends no more
  // than this and tries again on its next turn; the UDP cable has no
  // credits to give (unbounded here: a full socket buffer drops).
  virtual std::size_t tx_room() { return kUnboundedRoom; }
  static constexpr std::size_t kUnboundedRoom = ~std::size_t{0};
  // A burst of sends (as a NIC driver's xmit_more): between begin_batch()
  // and end_batch() a link may defer telling the receiver about each
  // packet to end_batch() (ShmLink: its wake-up check and the fence it
  // costs). The packets still leave at once. Use LinkBatch.
  virtual void begin_batch() {}
  virtual void end_batch() {}
  // Installs the receiver of well-formed packets (bad-CRC and malformed
  // ones are counted and dropped before it).
  virtual void set_receiver(Receiver r) = 0;
  virtual LinkStats stats() const = 0;
  // Link state (docs/cables.md "Link state"): tells the far end that the
  // cable was pulled (false) or plugged back (true), as a physical link's
  // light would; ENOTSUP on a cable with no such notion (ShmLink,
  // loopback pairs: nothing pulls them). The state receiver is called
  // with each signal that arrives (repeats included), on the thread that
  // calls the packet receiver.
  using StateReceiver = std::function<void(bool up)>;
  virtual Result<void> send_link_state(bool up);
  virtual void set_state_receiver(StateReceiver) {}
};

// begin_batch() .. end_batch() over a scope; a null link is allowed.
class LinkBatch {
 public:
  explicit LinkBatch(Link* l) : l_(l) {
    if (l_) l_->begin_batch();
  }
  ~LinkBatch() {
    if (l_) l_->end_batch();
  }
  LinkBatch(const LinkBatch&) = delete;
  LinkBatch& operator=(const LinkBatch&) = delete;

 private:
  Link* l_;
};

// Per-direction fault injection for tests (issue 3: drop, duplicate,
// reorder, corrupt). Rates are probabilities per packet, drawn from a PRNG
// seeded with `seed`, so a run is repeatable.
struct FaultSpec {
  double drop = 0, duplicate = 0, reorder = 0, corrupt = 0;
  uint64_t seed = 1;
  bool any() const { return drop > 0 || duplicate > 0 || reorder > 0 || corrupt > 0; }
};

// Two in-process links cabled to each other, for deterministic tests of
// the transport engine. send() only queues (so a receiver that answers
// from inside its callback never re-enters the sender); pump() delivers
// what is queued, in both directions, through the same CRC checks and the
// same fault injection a UdpLink applies.
//
// What the pair carries, as UdpLinkOptions::Framing (udp_link.hpp): IBA
// packets (kIba, the default: send_with() computes the CRCs, delivery
// checks them), or Ethernet frames without their FCS (kEthernet: the cable
// of an Ethernet port, docs/cables.md "Ethernet cables"; frames are sent
// as given, no CRCs computed, and every frame of kEthernetMinFrameBytes..
// wire::kMaxPacketBytes bytes is handed on, shorter or longer ones counted
// rx_dropped_malformed).
enum class LoopbackFraming { kIba, kEthernet };
class LoopbackPair {
 public:
  virtual ~LoopbackPair() = default;
  virtual Link& a() = 0;
  virtual Link& b() = 0;
  virtual void set_faults(const FaultSpec& a_to_b, const FaultSpec& b_to_a) = 0;
  // Delivers up to `max` queued packets; returns how many were delivered.
  virtual size_t pump(size_t max = SIZE_MAX) = 0;
  virtual size_t queued() const = 0;
};
std::unique_ptr<LoopbackPair> make_loopback_pair(LoopbackFraming framing = LoopbackFraming::kIba);

}  // namespace openib::sim
