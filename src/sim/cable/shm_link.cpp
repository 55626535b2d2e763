#include "sim/cable/shm_link.hpp"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <vector>

#include "common/log.hpp"
#include "sim/cable/rx_check.hpp"
#include "sim/wire/packet.hpp"
#include "sim/wire/pcap_erf.hpp"

namespace openib::sim {

namespace {

auto logger() { return log::get("cable"); }

template <typename... Args>
void log_once(std::atomic<bool>& warned, fmt::format_string<Args...> f, Args&&... args) {
  const bool first = !warned.exchange(true, std::memory_order_relaxed);
  logger()->log(first ? spdlog::level::warn : spdlog::level::debug, f, std::forward<Args>(args)...);
}

// File format (docs/cables.md "Shared-memory cable"); all
// fields in host byte order (the file never leaves the host).
constexpr std::uint64_t kMagic = 0x314d48534249504fULL;  // "OPIBSHM1" little-endian
constexpr std::uint32_t kVersion = 5;  // 2: slot header flags (kSlotCrcsAbsent); 3: 4224-byte slots; 4: 128 slots;
                                       // 5: 16-byte slot headers, a lead (payload 64-aligned), segments
constexpr std::size_t kRingsOffset = 4096;  // two ring control blocks of 256 bytes
constexpr std::size_t kSlotsOffset = 8192;  // then ring 0's slots, then ring 1's
constexpr std::size_t kRingSlotsBytes = std::size_t{ShmLink::kSlots} * ShmLink::kSlotBytes;
constexpr std::size_t kFileBytes = kSlotsOffset + 2 * kRingSlotsBytes;
static_assert(ShmLink::kSlotBytes >= ShmLink::kSlotHeaderBytes + ShmLink::kMaxSlotLead + ShmLink::kMaxSlotPacket &&
              ShmLink::kSlotBytes % 64 == 0 && kSlotsOffset % 64 == 0);
static_assert((ShmLink::kSlots & (ShmLink::kSlots - 1)) == 0);


constexpr std::uint8_t kSegLastSe = 1, kSegLastAckReq = 2;
// What a segment may need besides its payload in the slots it takes: the
// slot header, the lead, the longest headers a segment's first packet has
// (LRH, GRH, BTH, RETH), the last packet's pad and the CRCs' place.
constexpr std::size_t kSegmentOverhead = ShmLink::kSlotHeaderBytes + ShmLink::kMaxSlotLead + wire::kLrhBytes +
                                         wire::kGrhBytes + wire::kBthBytes + wire::kRethBytes + 3 + Segment::kCrcBytes;

struct FileHeader {
  std::uint64_t magic;
  std::uint32_t version, slots, slot_bytes, reserved;
};

template <typename T>
std::atomic_ref<T> at(T& v) {
  return std::atomic_ref<T>(v);
}

}  // namespace

// A slot's first bytes. The seg_ fields only with kSlotSegment.
struct ShmLink::SlotHeader {
  std::uint32_t len;    // the packet's bytes (a segment's: Segment::bytes())
  std::uint32_t flags;  // kSlotCrcsAbsent, kSlotSegment, the lead's length << kSlotLeadShift
  std::uint16_t seg_count, seg_mtu, seg_last_len;
  std::uint8_t seg_last_opcode, seg_last_flags;  // bit 0: SE, bit 1: AckReq
};

// One direction's control block: each word on its own cache line, so the
// producer's and the consumer's stores do not share a line.
struct ShmLink::Ring {
  alignas(64) std::uint64_t head;  // packets published; written by the producer only
  alignas(64) std::uint64_t tail;  // packets released; written by the consumer only
  // 1 while the consumer sleeps (or is about to) on this word; the
  // producer exchanges it with 0 before FUTEX_WAKE.
  alignas(64) std::uint32_t rx_sleeping;
  // 1 while the consumer takes whole packets only, no segments (written by
  // the consumer, read by the producer's segment_room()).
  alignas(64) std::uint32_t rx_whole;
};

Result<std::unique_ptr<ShmLink>> ShmLink::create(const ShmLinkOptions& opts) {
  static_assert(sizeof(Ring) <= 256 && sizeof(SlotHeader) == kSlotHeaderBytes);
  if (opts.end != 'A' && opts.end != 'B')
    return err(EINVAL, "{}: END must be A or B, not '{}'", opts.name, opts.end);
  if (opts.pcap_iface > 3) return err(EINVAL, "{}: pcap interface {} (ERF has 0-3)", opts.name, opts.pcap_iface);
  if (opts.path.empty()) return err(EINVAL, "{}: no file for the shared-memory cable", opts.name);
  UniqueFd fd(::open(opts.path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!fd) return sys_err("{}: open {}", opts.name, opts.path);
  // The two ends may start together: the first to hold the lock sizes the
  // file and writes its header, the second finds them.
  if (::flock(fd.get(), LOCK_EX) != 0) return sys_err("{}: flock {}", opts.name, opts.path);
  struct stat st{};
  if (::fstat(fd.get(), &st) != 0) return sys_err("{}: fstat {}", opts.name, opts.path);
  if (!S_ISREG(st.st_mode)) return err(EINVAL, "{}: {} is not a regular file", opts.name, opts.path);
  const bool fresh = st.st_size == 0;
  if (!fresh && static_cast<std::size_t>(st.st_size) != kFileBytes)
    return err(EINVAL, "{}: {} has {} bytes, not a version-{} cable file ({} bytes)", opts.name, opts.path,
               st.st_size, kVersion, kFileBytes);
  if (fresh && ::ftruncate(fd.get(), static_cast<off_t>(kFileBytes)) != 0)
    return sys_err("{}: ftruncate {}", opts.name, opts.path);
  void* p = ::mmap(nullptr, kFileBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (p == MAP_FAILED) return sys_err("{}: mmap {}", opts.name, opts.path);
  auto* base = static_cast<std::byte*>(p);
  auto* h = reinterpret_cast<FileHeader*>(base);
  if (fresh) {
    *h = FileHeader{kMagic, kVersion, kSlots, kSlotBytes, 0};
  } else if (h->magic != kMagic || h->version != kVersion || h->slots != kSlots || h->slot_bytes != kSlotBytes) {
    ::munmap(p, kFileBytes);
    return err(EINVAL, "{}: {} is not a version-{} cable file (magic {:#x}, version {}, {} slots of {})",
               opts.name, opts.path, kVersion, h->magic, h->version, h->slots, h->slot_bytes);
  }
  std::unique_ptr<ShmLink> link(new ShmLink(opts, base, kFileBytes));
  // Take over: skip what waits for us, continue the peer's count of ours.
  Ring& rx = link->rx_ring();
  link->rx_tail_ = at(rx.head).load(std::memory_order_acquire);
  at(rx.tail).store(link->rx_tail_, std::memory_order_release);
  at(rx.rx_sleeping).store(0, std::memory_order_release);
  at(rx.rx_whole).store(1, std::memory_order_release);  // until a parsed receiver comes
  link->tx_head_ = at(link->tx_ring().head).load(std::memory_order_acquire);
  (void)::flock(fd.get(), LOCK_UN);
  logger()->info("{}: shared-memory cable {} end {}{}", link->name_, opts.path, opts.end,
                 fresh ? " (file created)" : "");
  return link;
}

ShmLink::ShmLink(const ShmLinkOptions& opts, std::byte* base, std::size_t size)
    : name_(opts.name),
      end_(opts.end),
      pcap_(opts.pcap),
      pcap_iface_(opts.pcap_iface),
      crc_offload_(opts.crc_offload),
      base_(base),
      size_(size),
      faults_(opts.faults) {}

ShmLink::~ShmLink() {
  if (base_) ::munmap(base_, size_);
}

ShmLink::Ring& ShmLink::tx_ring() const {
  return *reinterpret_cast<Ring*>(base_ + kRingsOffset + (end_ == 'A' ? 0 : 256));
}
ShmLink::Ring& ShmLink::rx_ring() const {
  return *reinterpret_cast<Ring*>(base_ + kRingsOffset + (end_ == 'A' ? 256 : 0));
}
std::byte* ShmLink::slot(int ring, std::uint64_t index) const {
  return base_ + kSlotsOffset + static_cast<std::size_t>(ring) * kRingSlotsBytes +
         static_cast<std::size_t>(index & (kSlots - 1)) * kSlotBytes;
}

void ShmLink::set_faults(const FaultSpec& spec) {  // the producer's side
  faults_.reset(spec);
}

void ShmLink::set_receiver(Receiver r) {
  auto p = std::make_shared<const Receiver>(std::move(r));
  std::lock_guard lk(rx_mu_);
  receiver_ = std::move(p);
  update_wants_whole();
}

void ShmLink::set_parsed_receiver(ParsedReceiver r) {
  auto p = std::make_shared<const ParsedReceiver>(std::move(r));
  std::lock_guard lk(rx_mu_);
  parsed_receiver_ = std::move(p);
  update_wants_whole();
}

// Segments only to a parsed receiver, and none under a capture here (it
// shows whole packets). Called under rx_mu_.
void ShmLink::update_wants_whole() {
  const bool whole = !parsed_receiver_ || !*parsed_receiver_ || pcap_;
  at(rx_ring().rx_whole).store(whole ? 1 : 0, std::memory_order_seq_cst);
}

void ShmLink::capture(std::span<const std::byte> packet) {
  if (!pcap_) return;
  if (auto r = pcap_->write(packet, pcap_iface_); !r)
    log_once(warned_pcap_, "{}: capture: {}", name_, r.error().str());
}

// tx_errors is bumped atomically everywhere (the stats may be read anywhere).
Result<void> ShmLink::check_size(std::size_t len) {
  if (len <= kMaxSlotPacket) return ok();
  LinkCounters::bump(counters_.tx_errors);
  return err(EMSGSIZE, "{}: packet of {} bytes exceeds a slot's {}", name_, len, kMaxSlotPacket);
}

Result<void> ShmLink::send(std::span<const std::byte> packet) {
  OPENIB_TRY(check_size(packet.size()));
  LinkCounters::bump_owned(counters_.tx_packets);
  LinkCounters::bump_owned(counters_.tx_bytes, packet.size());
  if (!faults_.active()) {
    write_slot(packet);
  } else {
    std::vector<FaultInjector::Packet> out;
    faults_.apply(packet, out, counters_);
    for (const auto& p : out) write_slot(p);
  }
  sent();
  return ok();
}

Result<void> ShmLink::send_with(std::size_t len, Filler fill, std::size_t payload_at) {
  OPENIB_TRY(check_size(len));
  if (faults_.active()) return Link::send_with(len, fill);  // the injector works on whole packets
  std::byte* s = reserve_slot();
  if (s) {
    // The slot is 64-aligned: a lead puts the payload on a cache line.
    const std::uint32_t lead =
        payload_at ? static_cast<std::uint32_t>(-(kSlotHeaderBytes + payload_at) & kMaxSlotLead) : 0;
    const std::span<std::byte> pkt(s + kSlotHeaderBytes + lead, len);
    if (!fill(pkt)) return err(ECANCELED, "{}: packet abandoned by its sender", name_);
    // Offloaded unless a capture here must show them (faults went above).
    const bool offload = crc_offload_ && !pcap_;
    if (!offload) wire::seal_packet(pkt);
    SlotHeader h{};
    h.len = static_cast<std::uint32_t>(len);
    h.flags = (offload ? kSlotCrcsAbsent : 0) | lead << kSlotLeadShift;
    publish_slot(s, h, 1);
  }
  LinkCounters::bump_owned(counters_.tx_packets);
  LinkCounters::bump_owned(counters_.tx_bytes, len);
  sent();
  return ok();
}

void ShmLink::sent() {
  if (batch_depth_ > 0) wake_pending_ = true;
  else wake_receiver();
}

void ShmLink::end_batch() {
  if (batch_depth_ > 0 && --batch_depth_ == 0 && wake_pending_) {
    wake_pending_ = false;
    wake_receiver();
  }
}

// Notification suppression (docs/cables.md): the head store (publish_slot),
// a full fence, then the receiver's RX_SLEEPING; the receiver stores
// RX_SLEEPING, fences, then reads the head (arm_sleep). One of the two
// sees the other.
void ShmLink::wake_receiver() {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  std::uint32_t& word = tx_ring().rx_sleeping;
  if (at(word).load(std::memory_order_relaxed) != 0 && at(word).exchange(0, std::memory_order_seq_cst) != 0)
    ::syscall(SYS_futex, &word, FUTEX_WAKE, 1, nullptr, nullptr, 0);  // shared: the peer is another process
}

// The consumer's tail is read only when the last value read says the ring
// is full: its cache line then moves between the two CPUs once per ring's
// worth of packets, not once per packet.
std::size_t ShmLink::tx_room() {
  if (tx_head_ - tx_tail_seen_ >= kSlots) tx_tail_seen_ = at(tx_ring().tail).load(std::memory_order_acquire);
  const std::uint64_t used = tx_head_ - tx_tail_seen_;
  return used >= kSlots ? 0 : static_cast<std::size_t>(kSlots - used);
}

std::byte* ShmLink::reserve_slot() {
  if (tx_room() == 0) {  // the receiver is behind (or gone): the wire is congested
    LinkCounters::bump(counters_.tx_errors);
    log_once(warned_full_, "{}: ring full, packet dropped (the peer is behind or not running)", name_);
    return nullptr;
  }
  return slot(end_ == 'A' ? 0 : 1, tx_head_);
}

// The slot's header, then the head (a release store publishes the
// `slots` slots it takes).
void ShmLink::publish_slot(std::byte* s, const SlotHeader& h, std::uint32_t slots) {
  std::memcpy(s, &h, sizeof h);
  tx_head_ += slots;
  at(tx_ring().head).store(tx_head_, std::memory_order_release);
  if (!(h.flags & kSlotSegment))  // never captured: no segments under a capture
    capture(std::span<const std::byte>(s + kSlotHeaderBytes + (h.flags >> kSlotLeadShift), h.len));
}

void ShmLink::write_slot(std::span<const std::byte> packet) {
  std::byte* s = reserve_slot();
  if (!s) return;
  std::memcpy(s + kSlotHeaderBytes, packet.data(), packet.size());
  SlotHeader h{};
  h.len = static_cast<std::uint32_t>(packet.size());
  publish_slot(s, h, 1);
}

std::size_t ShmLink::segment_room(std::size_t mtu) {
  if (faults_.active() || pcap_ || !crc_offload_ || mtu == 0 ||
      at(tx_ring().rx_whole).load(std::memory_order_relaxed) != 0)
    return 1;
  // A segment's slots are consecutive in memory: up to the ring's end.
  const std::size_t to_end = kSlots - static_cast<std::size_t>(tx_head_ & (kSlots - 1));
  const std::size_t slots = std::min(tx_room(), to_end);
  if (slots * kSlotBytes <= kSegmentOverhead) return 1;
  return std::clamp<std::size_t>((slots * kSlotBytes - kSegmentOverhead) / mtu, 1, 0xffff);
}

Result<void> ShmLink::send_segment(const Segment& seg, Filler fill) {
  if (seg.count < 2 || seg.mtu == 0 || seg.last_len == 0 || seg.last_len > seg.mtu ||
      seg.count > segment_room(seg.mtu)) {
    LinkCounters::bump(counters_.tx_errors);
    return err(EINVAL, "{}: segment of {} packets of {} bytes does not fit now", name_, seg.count, seg.mtu);
  }
  const std::size_t len = seg.bytes();
  std::byte* s = slot(end_ == 'A' ? 0 : 1, tx_head_);
  // The lead puts the first payload on a cache line, and with it every
  // payload after it when the MTU is a multiple of 64.
  const auto lead = static_cast<std::uint32_t>(-(kSlotHeaderBytes + seg.hdr_len) & kMaxSlotLead);
  if (!fill(std::span<std::byte>(s + kSlotHeaderBytes + lead, len)))
    return err(ECANCELED, "{}: segment abandoned by its sender", name_);
  SlotHeader h{};
  h.len = static_cast<std::uint32_t>(len);
  h.flags = kSlotCrcsAbsent | kSlotSegment | lead << kSlotLeadShift;
  h.seg_count = seg.count;
  h.seg_mtu = seg.mtu;
  h.seg_last_len = seg.last_len;
  h.seg_last_opcode = seg.last_opcode;
  h.seg_last_flags = static_cast<std::uint8_t>((seg.last_se ? kSegLastSe : 0) | (seg.last_ack_req ? kSegLastAckReq : 0));
  const auto slots = static_cast<std::uint32_t>((kSlotHeaderBytes + lead + len + kSlotBytes - 1) / kSlotBytes);
  publish_slot(s, h, slots);
  for (std::size_t i = 0; i < seg.count; ++i) {
    LinkCounters::bump_owned(counters_.tx_packets);
    LinkCounters::bump_owned(counters_.tx_bytes, seg.packet_bytes(i));
  }
  sent();
  return ok();
}

std::uint64_t ShmLink::backlog() const {
  return at(rx_ring().head).load(std::memory_order_acquire) - rx_tail_;
}

bool ShmLink::pending() const {
  return at(rx_ring().head).load(std::memory_order_acquire) != rx_tail_;
}

std::size_t ShmLink::poll(std::size_t max) {
  Ring& r = rx_ring();
  const std::uint64_t head = at(r.head).load(std::memory_order_acquire);
  if (head == rx_tail_) return 0;
  if (head - rx_tail_ > kSlots) {
    // Not a state the peer can produce: a damaged or foreign file. Skip it all.
    LinkCounters::bump(counters_.rx_dropped_malformed);
    log_once(warned_garbage_, "{}: ring head {} is {} ahead of our tail; skipped", name_, head, head - rx_tail_);
    rx_tail_ = head;
    at(r.tail).store(rx_tail_, std::memory_order_release);
    return 0;
  }
  std::shared_ptr<const Receiver> rx;
  std::shared_ptr<const ParsedReceiver> prx;
  {
    std::lock_guard lk(rx_mu_);
    rx = receiver_;
    prx = parsed_receiver_;
  }
  wire::ParsedPacket parsed;
  std::size_t n = 0;
  // What the receiver sends back through this end (ACKs, the requests an
  // ACK lets go) is one batch: the peer is told once, after the loop.
  LinkBatch batch(this);
  while (n < max && rx_tail_ != head) {
    std::byte* s = slot(end_ == 'A' ? 1 : 0, rx_tail_);
    SlotHeader h;
    std::memcpy(&h, s, sizeof h);
    const std::uint32_t lead = h.flags >> kSlotLeadShift;
    std::uint64_t taken = 1;
    if (h.flags & kSlotSegment) {
      // Its slots: consecutive, all published, none past the ring's end.
      const std::uint64_t need = (std::uint64_t{kSlotHeaderBytes} + lead + h.len + kSlotBytes - 1) / kSlotBytes;
      const bool fits = lead <= kMaxSlotLead && need <= head - rx_tail_ && (rx_tail_ & (kSlots - 1)) + need <= kSlots;
      if (fits) taken = need;
      const bool parsed_rx = prx && *prx;
      if (!fits || !parsed_rx || !deliver_segment(s, h, lead, *prx)) {
        // A segment is whole packets' worth only to a parsed receiver; the
        // end asks for none without one (set_wants_whole), so one that
        // still comes was sent before it asked: RC sends it again.
        LinkCounters::bump_owned(counters_.rx_packets);
        LinkCounters::bump_owned(fits && !parsed_rx ? counters_.rx_dropped_no_receiver
                                                    : counters_.rx_dropped_malformed);
        if (fits && parsed_rx)
          log_once(warned_garbage_, "{}: malformed segment of {} bytes dropped", name_, h.len);
      }
    } else if (h.len > kMaxSlotPacket || lead > kMaxSlotLead) {
      LinkCounters::bump_owned(counters_.rx_packets);
      LinkCounters::bump_owned(counters_.rx_dropped_malformed);
    } else {
      // Handed over in place: the slot is ours until the tail moves past it.
      std::byte* p = s + kSlotHeaderBytes + lead;
      const std::span<const std::byte> d(p, h.len);
      const bool crcs = !(h.flags & kSlotCrcsAbsent);
      // A capture shows whole packets: offloaded CRCs are computed for it.
      if (!crcs && pcap_) wire::seal_packet(std::span<std::byte>(p, h.len));
      capture(d);  // before validation, as on the UDP cable
      if (count_received(d, counters_, name_, warned_, prx && *prx ? &parsed : nullptr, crcs)) {
        if (prx && *prx) (*prx)(d.size(), parsed);
        else if (rx && *rx) (*rx)(d);
        else LinkCounters::bump_owned(counters_.rx_dropped_no_receiver);
      }
    }
    const std::uint64_t before = rx_tail_;
    rx_tail_ += taken;
    n += taken;
    // The slots go back to the sender a quarter ring at a time (and at the
    // end of the batch), so the tail's cache line is not pulled back and
    // forth between the two processes on every packet.
    if ((before ^ rx_tail_) & ~std::uint64_t{kSlots / 4 - 1}) at(r.tail).store(rx_tail_, std::memory_order_release);
  }
  at(r.tail).store(rx_tail_, std::memory_order_release);
  return n;
}

// docs/cables.md "Segments": the first packet is parsed and checked as
// any other (its LRH's PktLen bounds it; the CRCs' place after its payload
// holds the next payload, CRCs being offloaded in a segment), then each
// later packet is the first's parse with the fields a segment changes.
// Everything is checked before the first packet is handed over.
bool ShmLink::deliver_segment(std::byte* s, const SlotHeader& h, std::uint32_t lead, const ParsedReceiver& rx) {
  using namespace wire;
  const std::size_t count = h.seg_count, mtu = h.seg_mtu, last_len = h.seg_last_len;
  if (!(h.flags & kSlotCrcsAbsent) || count < 2 || mtu < 256 || mtu > 4096 || (mtu & (mtu - 1)) != 0 ||
      last_len == 0 || last_len > mtu || h.len < kLrhBytes)
    return false;
  const std::byte* p = s + kSlotHeaderBytes + lead;
  const std::size_t first_bytes = std::size_t{read_lrh(p).pkt_len} * 4 + kVcrcBytes;
  if (first_bytes > h.len) return false;
  ParsedPacket q;
  if (check_received(std::span<const std::byte>(p, first_bytes), nullptr, &q, false) != RxVerdict::kGood)
    return false;
  const Transport tr = opcode_transport(q.hdr.bth.opcode);
  const Op op = opcode_op(q.hdr.bth.opcode);
  const bool send = op == Op::kSendFirst || op == Op::kSendMiddle;
  const bool write = op == Op::kWriteFirst || op == Op::kWriteMiddle;
  const Op middle = send ? Op::kSendMiddle : Op::kWriteMiddle;
  const Op last = opcode_op(h.seg_last_opcode);
  if ((tr != Transport::kRc && tr != Transport::kUc) || (!send && !write) || q.payload.size() != mtu ||
      q.hdr.bth.pad_cnt != 0 || h.seg_last_opcode >> 5 != static_cast<unsigned>(tr) ||
      (last != middle && last != (send ? Op::kSendLast : Op::kWriteLast)))
    return false;
  Segment seg;
  seg.count = h.seg_count;
  seg.mtu = h.seg_mtu;
  seg.last_len = h.seg_last_len;
  seg.hdr_len = static_cast<std::uint16_t>(q.payload.data() - p);
  seg.later_hdr_len = static_cast<std::uint16_t>(kLrhBytes + (q.hdr.grh ? kGrhBytes : 0) + kBthBytes);
  if (seg.bytes() != h.len) return false;
  const std::byte* payload = q.payload.data();
  const std::uint32_t psn = q.hdr.bth.psn;
  LinkCounters::bump_owned(counters_.rx_packets);
  LinkCounters::bump_owned(counters_.rx_bytes, seg.packet_bytes(0));
  rx(seg.packet_bytes(0), q);
  q.hdr.reth.reset();
  q.hdr.bth.opcode = opcode(tr, middle);
  for (std::size_t i = 1; i < count; ++i) {
    const bool is_last = i + 1 == count;
    const std::size_t len = is_last ? last_len : mtu;
    const std::size_t wire_bytes = seg.packet_bytes(i);
    q.hdr.bth.psn = (psn + static_cast<std::uint32_t>(i)) & 0xffffff;
    if (is_last) {
      q.hdr.bth.opcode = h.seg_last_opcode;
      q.hdr.bth.se = h.seg_last_flags & kSegLastSe;
      q.hdr.bth.ack_req = h.seg_last_flags & kSegLastAckReq;
      q.hdr.bth.pad_cnt = static_cast<std::uint8_t>(seg.last_pad());
    } else {
      q.hdr.bth.se = q.hdr.bth.ack_req = false;
    }
    q.hdr.lrh.pkt_len = static_cast<std::uint16_t>((wire_bytes - kVcrcBytes) / 4);
    if (q.hdr.grh) q.hdr.grh->pay_len = static_cast<std::uint16_t>(wire_bytes - kVcrcBytes - kLrhBytes - kGrhBytes);
    q.payload = std::span<const std::byte>(payload + i * mtu, len);
    LinkCounters::bump_owned(counters_.rx_packets);
    LinkCounters::bump_owned(counters_.rx_bytes, wire_bytes);
    rx(wire_bytes, q);
  }
  return true;
}

bool ShmLink::arm_sleep() {
  std::uint32_t& word = rx_ring().rx_sleeping;
  at(word).store(1, std::memory_order_seq_cst);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (!pending()) return true;
  at(word).store(0, std::memory_order_seq_cst);
  return false;
}

void ShmLink::disarm_sleep() { at(rx_ring().rx_sleeping).store(0, std::memory_order_seq_cst); }

std::uint32_t* ShmLink::wake_word() const { return &rx_ring().rx_sleeping; }

}  // namespace openib::sim
