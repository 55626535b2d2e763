// ShmLink: a same-host cable end over shared memory (docs/cables.md
// "Shared-memory cable"). Two processes map one file (normally under
// /dev/shm); it holds two single-producer single-consumer rings, one per
// direction, of fixed slots that each carry one whole IBA packet, LRH
// through VCRC, exactly the bytes a UdpLink would put in a datagram. End A
// sends on ring 0 and receives on ring 1; end B the other way round.
//
//   send()   fault injection (FaultSpec), then the packet is copied into
//            the next free slot and published (release store of the ring's
//            head). A full ring drops the packet and counts tx_errors, as
//            a congested wire would (RC retransmits it). If the receiver
//            published that it sleeps, the sender clears the flag and
//            FUTEX_WAKEs it (the only system call, and only then). In a
//            batch (Link::begin_batch) that check is made once, at its end.
//            The ring has one producer: send(), send_with(), tx_room(),
//            set_faults() and the batch calls are made by one thread at a
//            time (simhca makes them under its device lock), so that a
//            packet costs no locked instruction.
//   poll()   driven by the owner's thread (no receive thread): takes up to
//            `max` packets, captures each (pcap), checks it (rx_check.hpp)
//            and hands it to the receiver straight from its slot; the slot
//            is released after the receiver returns.
//   sleep    the owner, idle, calls arm_sleep() (publish RX_SLEEPING, full
//            fence, re-check the ring: Dekker with the sender's store of
//            the head, fence, load of RX_SLEEPING), then waits on
//            wake_word() (a shared futex, expected value 1), then
//            disarm_sleep().
//
// A new end takes over the file as it finds it: its receive side skips
// whatever was left in its ring, its send side continues from the ring's
// head, so a restarted process rejoins a peer that kept running.
#pragma once

#include <atomic>
#include <functional>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "common/fd.hpp"
#include "common/result.hpp"
#include "sim/cable/fault_injector.hpp"
#include "sim/cable/link.hpp"
#include "sim/cable/link_counters.hpp"

namespace openib::sim::wire {
class PcapErfWriter;
}

namespace openib::sim {

struct ShmLinkOptions {
  std::string path;        // the shared file; created (mode 0600) if missing
  char end = 'A';          // 'A' or 'B'; the two ends of a cable must differ
  FaultSpec faults;        // injected on send
  wire::PcapErfWriter* pcap = nullptr;  // as UdpLinkOptions::pcap
  // CRC offload (docs/cables.md "Shared-memory cable"): a packet that
  // neither a capture nor fault injection can see crosses the ring without
  // its ICRC and VCRC computed or checked, as a NIC's checksum offload and
  // the kernel's loopback device treat checksums; false computes and
  // checks them on every packet (simhca's CRC=always).
  bool crc_offload = true;
  std::uint8_t pcap_iface = 0;
  std::string name = "shm";  // in log lines
};

class ShmLink final : public Link {
 public:
  // Ring geometry, fixed by the file format (version 5). 128 slots (536 KiB)
  // hold simhca's RC window (§12.8) and stay in a core's L2 cache; 512
  // (version 3) swept 2 MiB per direction and ran 1.3 times slower.
  static constexpr std::uint32_t kSlots = 128;
  // The largest packet a slot takes: the largest IBA MTU, 4096 bytes
  // (IBA 7.7.8 allows PktLen up to 8 KiB, but no MTU gives one), with
  // every header (LRH, GRH, BTH, the longest extension headers) and both
  // CRCs. Slots this size keep a ring's working set in the caches.
  static constexpr std::size_t kMaxSlotPacket = 4096 + 8 + 40 + 12 + 28 + 4 + 4 + 2;
  // A slot: a 16-byte header, up to 63 bytes of lead (the payload then
  // starts on a 64-byte boundary, Link::send_with), the packet; 64-aligned.
  // A segment (Link::send_segment) takes as many consecutive slots as its
  // bytes need, its header in the first.
  static constexpr std::uint32_t kSlotBytes = 4288;
  static constexpr std::uint32_t kSlotHeaderBytes = 16;
  static constexpr std::uint32_t kSlotCrcsAbsent = 1;  // slot header flags: ICRC and VCRC not computed
  static constexpr std::uint32_t kSlotSegment = 2;     // slot header flags: a segment
  static constexpr std::uint32_t kSlotLeadShift = 8;   // slot header flags bits 8-15: the lead's length
  static constexpr std::uint32_t kMaxSlotLead = 63;

  static Result<std::unique_ptr<ShmLink>> create(const ShmLinkOptions& opts);
  ~ShmLink() override;
  ShmLink(const ShmLink&) = delete;
  ShmLink& operator=(const ShmLink&) = delete;

  // EMSGSIZE for a packet over wire::kMaxPacketBytes; a full ring is a
  // counted drop (ok()).
  Result<void> send(std::span<const std::byte> packet) override;
  // Without fault injection, `fill` writes the packet straight into the
  // next free slot (no copy); a full ring is a counted drop without
  // calling it. The packet starts so far into the slot that its byte
  // `payload_at` is 64-byte aligned.
  Result<void> send_with(std::size_t len, Filler fill, std::size_t payload_at = 0) override;
  // Free slots in the send ring (reads the receiver's tail only when the
  // last value read leaves none free).
  std::size_t tx_room() override;
  // Segments (docs/cables.md "Segments"): as many packets as the free
  // slots up to the ring's end hold; 1 under a capture, fault injection,
  // CRC=always, or when the peer's end wants whole packets (it has no
  // parsed receiver, or a capture of its own).
  std::size_t segment_room(std::size_t mtu) override;
  Result<void> send_segment(const Segment& seg, Filler fill) override;
  void begin_batch() override { ++batch_depth_; }
  void end_batch() override;
  void set_receiver(Receiver r) override;
  // Instead of the plain receiver: one that gets the packet as the link's
  // check parsed it (so that it need not parse it again) and its size on
  // the wire. It also takes segments (docs/cables.md "Segments"): each of
  // their packets is handed over as its parse alone, with a payload in
  // place, as the link rebuilt it from the segment's first packet.
  using ParsedReceiver = std::function<void(std::size_t wire_bytes, const wire::ParsedPacket&)>;
  void set_parsed_receiver(ParsedReceiver r);
  LinkStats stats() const override { return counters_.snapshot(); }
  void set_faults(const FaultSpec& spec);

  // Owner's thread: takes up to about `max` slots (a segment's are taken
  // together) and delivers their packets; returns how many slots were
  // taken (delivered or dropped).
  std::size_t poll(std::size_t max);
  // True if a packet waits in the receive ring.
  bool pending() const;
  // How many packets wait in the receive ring.
  std::uint64_t backlog() const;

  // Idle protocol (see above). arm_sleep() returns false, with the flag
  // cleared again, if a packet arrived meanwhile: do not sleep then.
  bool arm_sleep();
  void disarm_sleep();
  std::uint32_t* wake_word() const;

  const std::string& name() const { return name_; }
  char end() const { return end_; }

 private:
  struct Ring;
  struct SlotHeader;
  ShmLink(const ShmLinkOptions& opts, std::byte* base, std::size_t size);
  Ring& tx_ring() const;
  Ring& rx_ring() const;
  std::byte* slot(int ring, std::uint64_t index) const;
  void write_slot(std::span<const std::byte> packet);
  Result<void> check_size(std::size_t len);  // EMSGSIZE (counted) for a packet no slot holds
  std::byte* reserve_slot();  // the next free slot, null if full (counted)
  void publish_slot(std::byte* s, const SlotHeader& h, std::uint32_t slots);
  void update_wants_whole();  // rx_whole of our receive ring, for the peer's segment_room()
  // Delivers the segment in the slots from `s` (a parsed receiver is set);
  // false if it is malformed (counted by the caller).
  bool deliver_segment(std::byte* s, const SlotHeader& h, std::uint32_t lead, const ParsedReceiver& rx);
  void wake_receiver();
  void sent();  // wake_receiver() now, or at the batch's end
  void capture(std::span<const std::byte> packet);

  std::string name_;
  char end_;
  wire::PcapErfWriter* pcap_;
  std::uint8_t pcap_iface_;
  bool crc_offload_;
  std::byte* base_;
  std::size_t size_;

  // The producer's side (one sender at a time, see above).
  FaultInjector faults_;
  std::uint64_t tx_head_ = 0;
  std::uint64_t tx_tail_seen_ = 0;  // the consumer's tail as last read
  unsigned batch_depth_ = 0;
  bool wake_pending_ = false;  // a packet sent in the batch: check the receiver at its end

  std::uint64_t rx_tail_ = 0;  // owner's thread

  std::mutex rx_mu_;
  std::shared_ptr<const Receiver> receiver_;
  std::shared_ptr<const ParsedReceiver> parsed_receiver_;

  LinkCounters counters_;
  std::atomic<unsigned> warned_{0};
  std::atomic<bool> warned_full_{false}, warned_pcap_{false}, warned_garbage_{false};
};

}  // namespace openib::sim
