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
constexpr std::uint32_t kVersion = 4;  // 2: slot header flags (kSlotCrcsAbsent); 3: 4224-byte slots; 4: 128 slots
constexpr std::size_t kRingsOffset = 4096;  // two ring control blocks of 256 bytes
constexpr std::size_t kSlotsOffset = 8192;  // then ring 0's slots, then ring 1's
constexpr std::size_t kRingSlotsBytes = std::size_t{ShmLink::kSlots} * ShmLink::kSlotBytes;
constexpr std::size_t kFileBytes = kSlotsOffset + 2 * kRingSlotsBytes;
static_assert(ShmLink::kSlotBytes >= 8 + ShmLink::kMaxSlotPacket && ShmLink::kSlotBytes % 64 == 0);
static_assert((ShmLink::kSlots & (ShmLink::kSlots - 1)) == 0);

struct FileHeader {
  std::uint64_t magic;
  std::uint32_t version, slots, slot_bytes, reserved;
};

template <typename T>
std::atomic_ref<T> at(T& v) {
  return std::atomic_ref<T>(v);
}

}  // namespace

// One direction's control block: each word on its own cache line, so the
// producer's and the consumer's stores do not share a line.
struct ShmLink::Ring {
  alignas(64) std::uint64_t head;  // packets published; written by the producer only
  alignas(64) std::uint64_t tail;  // packets released; written by the consumer only
  // 1 while the consumer sleeps (or is about to) on this word; the
  // producer exchanges it with 0 before FUTEX_WAKE.
  alignas(64) std::uint32_t rx_sleeping;
};

Result<std::unique_ptr<ShmLink>> ShmLink::create(const ShmLinkOptions& opts) {
  static_assert(sizeof(Ring) <= 256);
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
}

void ShmLink::set_parsed_receiver(ParsedReceiver r) {
  auto p = std::make_shared<const ParsedReceiver>(std::move(r));
  std::lock_guard lk(rx_mu_);
  parsed_receiver_ = std::move(p);
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

Result<void> ShmLink::send_with(std::size_t len, Filler fill) {
  OPENIB_TRY(check_size(len));
  if (faults_.active()) return Link::send_with(len, fill);  // the injector works on whole packets
  std::byte* s = reserve_slot();
  if (s) {
    const std::span<std::byte> pkt(s + 8, len);
    if (!fill(pkt)) return err(ECANCELED, "{}: packet abandoned by its sender", name_);
    // Offloaded unless a capture here must show them (faults went above).
    const bool offload = crc_offload_ && !pcap_;
    if (!offload) wire::seal_packet(pkt);
    publish_slot(s, static_cast<std::uint32_t>(len), offload ? kSlotCrcsAbsent : 0);
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

// The slot's length, then the head (a release store publishes it).
void ShmLink::publish_slot(std::byte* s, std::uint32_t len, std::uint32_t flags) {
  std::memcpy(s, &len, sizeof len);
  std::memcpy(s + 4, &flags, sizeof flags);
  ++tx_head_;
  at(tx_ring().head).store(tx_head_, std::memory_order_release);
  capture(std::span<const std::byte>(s + 8, len));
}

void ShmLink::write_slot(std::span<const std::byte> packet) {
  std::byte* s = reserve_slot();
  if (!s) return;
  std::memcpy(s + 8, packet.data(), packet.size());
  publish_slot(s, static_cast<std::uint32_t>(packet.size()), 0);
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
  for (; n < max && rx_tail_ != head; ++n) {
    std::byte* s = slot(end_ == 'A' ? 1 : 0, rx_tail_);
    std::uint32_t len, flags;
    std::memcpy(&len, s, sizeof len);
    std::memcpy(&flags, s + 4, sizeof flags);
    if (len > kMaxSlotPacket) {
      LinkCounters::bump_owned(counters_.rx_packets);
      LinkCounters::bump_owned(counters_.rx_dropped_malformed);
    } else {
      // Handed over in place: the slot is ours until the tail moves past it.
      const std::span<const std::byte> d(s + 8, len);
      const bool crcs = !(flags & kSlotCrcsAbsent);
      // A capture shows whole packets: offloaded CRCs are computed for it.
      if (!crcs && pcap_) wire::seal_packet(std::span<std::byte>(s + 8, len));
      capture(d);  // before validation, as on the UDP cable
      if (count_received(d, counters_, name_, warned_, prx && *prx ? &parsed : nullptr, crcs)) {
        if (prx && *prx) (*prx)(d, parsed);
        else if (rx && *rx) (*rx)(d);
        else LinkCounters::bump_owned(counters_.rx_dropped_no_receiver);
      }
    }
    ++rx_tail_;
    // The slots go back to the sender a quarter ring at a time (and at the
    // end of the batch), so the tail's cache line is not pulled back and
    // forth between the two processes on every packet.
    if ((rx_tail_ & (kSlots / 4 - 1)) == 0) at(r.tail).store(rx_tail_, std::memory_order_release);
  }
  at(r.tail).store(rx_tail_, std::memory_order_release);
  return n;
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
