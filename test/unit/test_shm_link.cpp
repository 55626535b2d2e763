// The shared-memory cable (src/sim/cable/shm_link.*, docs/cables.md
// "Shared-memory cable"): two ends on one file exchange packets intact both
// ways; a full ring drops and counts; corrupted packets are counted and never
// reach the receiver; the sleeping receiver is woken by a send (and only a
// sleeping one); a restarted end skips stale packets; bad files and options
// are refused; the pcap tap shows valid IBA packets to tshark.
#include <catch2/catch.hpp>

#include "blocked_in.hpp"
#include "tshark.hpp"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "sim/cable/shm_link.hpp"
#include "sim/wire/packet.hpp"
#include "sim/wire/pcap_erf.hpp"

using namespace openib::sim;
using namespace openib::sim::wire;
using namespace std::chrono_literals;
namespace fs = std::filesystem;
using Bytes = std::vector<std::byte>;

namespace {

// An RC packet's headers from LID 1 to LID 2, QP 0x12.
Headers rc_headers(Op op, std::uint32_t psn) {
  Headers h;
  h.lrh.dlid = 2;
  h.lrh.slid = 1;
  h.bth.opcode = opcode(Transport::kRc, op);
  h.bth.pkey = 0xFFFF;
  h.bth.dest_qp = 0x12;
  h.bth.psn = psn & 0xFFFFFF;
  return h;
}

Bytes packet(std::uint32_t psn, std::size_t len) {
  const Headers h = rc_headers(Op::kSendOnly, psn);
  Bytes pl(len);
  for (std::size_t i = 0; i < len; ++i) pl[i] = static_cast<std::byte>((psn * 31 + i) & 0xFF);
  auto r = build_packet(h, pl);
  REQUIRE(r.ok());
  return std::move(r).value();
}

// A fresh cable file path, removed at the end of the test.
struct TempFile {
  fs::path path;
  explicit TempFile(const char* tag)
      : path(fs::temp_directory_path() / ("openib_shm_" + std::string(tag) + "." + std::to_string(::getpid()))) {
    fs::remove(path);
  }
  ~TempFile() { fs::remove(path); }
};

std::unique_ptr<ShmLink> end_of(const fs::path& p, char end, FaultSpec f = {}, PcapErfWriter* pcap = nullptr,
                                std::uint8_t iface = 0) {
  ShmLinkOptions o;
  o.path = p.string();
  o.end = end;
  o.faults = f;
  o.pcap = pcap;
  o.pcap_iface = iface;
  o.name = std::string("shm-") + end;
  auto r = ShmLink::create(o);
  INFO((r.ok() ? std::string() : r.error().str()));
  REQUIRE(r.ok());
  return std::move(r).value();
}

struct Sink {
  std::vector<Bytes> got;
  Link::Receiver receiver() {
    return [this](std::span<const std::byte> p) { got.emplace_back(p.begin(), p.end()); };
  }
};

}  // namespace

TEST_CASE("ShmLink: two ends exchange packets intact, both ways", "[cable][shm]") {
  TempFile f("pair");
  auto a = end_of(f.path, 'A');
  auto b = end_of(f.path, 'B');
  Sink at_a, at_b;
  a->set_receiver(at_a.receiver());
  b->set_receiver(at_b.receiver());
  std::vector<Bytes> sent_a, sent_b;
  for (std::uint32_t i = 0; i < 300; ++i) {
    sent_a.push_back(packet(i, (i * 37) % 4097));
    sent_b.push_back(packet(1000 + i, i % 7));
    REQUIRE(a->send(sent_a.back()).ok());
    REQUIRE(b->send(sent_b.back()).ok());
    if (i % 50 == 49) {  // drained in batches, across the ring's wrap-around
      CHECK(b->poll(SIZE_MAX) == 50);
      CHECK(a->poll(SIZE_MAX) == 50);
    }
  }
  CHECK(!a->pending());
  CHECK(at_b.got == sent_a);
  CHECK(at_a.got == sent_b);
  CHECK(a->stats().tx_packets == 300);
  CHECK(b->stats().rx_packets == 300);
  CHECK(b->stats().rx_dropped_bad_crc == 0);
  // poll(max) takes no more than asked.
  for (std::uint32_t i = 0; i < 5; ++i) REQUIRE(a->send(packet(i, 8)).ok());
  CHECK(b->poll(2) == 2);
  CHECK(b->pending());
  CHECK(b->poll(10) == 3);
  CHECK(b->poll(10) == 0);
}

TEST_CASE("ShmLink: a full ring drops and counts, as a congested wire", "[cable][shm]") {
  TempFile f("full");
  auto a = end_of(f.path, 'A');
  auto b = end_of(f.path, 'B');
  Sink at_b;
  b->set_receiver(at_b.receiver());
  for (std::uint32_t i = 0; i < ShmLink::kSlots + 10; ++i) REQUIRE(a->send(packet(i, 64)).ok());
  CHECK(a->stats().tx_errors == 10);
  CHECK(b->poll(SIZE_MAX) == ShmLink::kSlots);
  REQUIRE(at_b.got.size() == ShmLink::kSlots);
  CHECK(at_b.got.back() == packet(ShmLink::kSlots - 1, 64));
  // Room again once the receiver caught up.
  REQUIRE(a->send(packet(7, 64)).ok());
  CHECK(a->stats().tx_errors == 10);
  CHECK(b->poll(SIZE_MAX) == 1);
}

TEST_CASE("ShmLink: tx_room gives the free slots, the link-level credits", "[cable][shm]") {
  TempFile f("room");
  auto a = end_of(f.path, 'A');
  auto b = end_of(f.path, 'B');
  Sink at_b;
  b->set_receiver(at_b.receiver());
  CHECK(a->tx_room() == ShmLink::kSlots);
  for (std::uint32_t i = 0; i < 5; ++i) REQUIRE(a->send(packet(i, 64)).ok());
  CHECK(a->tx_room() == ShmLink::kSlots - 5);
  // A sender that sends no more than tx_room() loses nothing.
  std::uint32_t n = 5;
  for (std::size_t room = a->tx_room(); room > 0; --room) REQUIRE(a->send(packet(n++, 64)).ok());
  CHECK(a->tx_room() == 0);
  CHECK(a->stats().tx_errors == 0);
  // The receiver's progress comes back as room (its tail is published at
  // the end of a poll).
  CHECK(b->poll(SIZE_MAX) == ShmLink::kSlots);
  CHECK(a->tx_room() == ShmLink::kSlots);
  REQUIRE(at_b.got.size() == ShmLink::kSlots);
  CHECK(at_b.got.back() == packet(ShmLink::kSlots - 1, 64));
  // The UDP cable has no credits to give: unbounded.
  CHECK(Link::kUnboundedRoom == ~std::size_t{0});
}

TEST_CASE("ShmLink: a batch wakes a sleeping receiver once, at its end", "[cable][shm]") {
  TempFile f("batch");
  auto a = end_of(f.path, 'A');
  auto b = end_of(f.path, 'B');
  Sink at_b;
  b->set_receiver(at_b.receiver());
  REQUIRE(b->arm_sleep());
  CHECK(*b->wake_word() == 1);
  {
    LinkBatch batch(a.get());
    for (std::uint32_t i = 0; i < 3; ++i) REQUIRE(a->send(packet(i, 32)).ok());
    CHECK(b->pending());            // the packets are out at once ...
    CHECK(*b->wake_word() == 1);    // ... but the receiver is told only at the end
    {
      LinkBatch inner(a.get());     // batches nest: the outermost end counts
      REQUIRE(a->send(packet(3, 32)).ok());
    }
    CHECK(*b->wake_word() == 1);
  }
  CHECK(*b->wake_word() == 0);  // woken
  b->disarm_sleep();
  CHECK(b->poll(SIZE_MAX) == 4);
  // An empty batch wakes nobody.
  REQUIRE(b->arm_sleep());
  { LinkBatch batch(a.get()); }
  CHECK(*b->wake_word() == 1);
  b->disarm_sleep();
}

TEST_CASE("ShmLink: corrupted packets are counted and never reach the receiver", "[cable][shm][faults]") {
  TempFile f("corrupt");
  FaultSpec all_bad;
  all_bad.corrupt = 1.0;
  auto a = end_of(f.path, 'A', all_bad);
  auto b = end_of(f.path, 'B');
  Sink at_b;
  b->set_receiver(at_b.receiver());
  for (std::uint32_t i = 0; i < 100; ++i) REQUIRE(a->send(packet(i, 100)).ok());
  CHECK(b->poll(SIZE_MAX) == 100);
  CHECK(at_b.got.empty());
  CHECK(a->stats().injected_corruptions == 100);
  CHECK(b->stats().rx_dropped_bad_crc + b->stats().rx_dropped_malformed == 100);
  // Oversized packets are refused at send.
  CHECK(a->send(Bytes(kMaxPacketBytes + 1)).error().code == EMSGSIZE);
}

TEST_CASE("ShmLink: a sleeping receiver is woken by a send, and only then", "[cable][shm][sleep]") {
  TempFile f("sleep");
  auto a = end_of(f.path, 'A');
  auto b = end_of(f.path, 'B');
  Sink at_b;
  b->set_receiver(at_b.receiver());

  // Not sleeping: the sender leaves the flag alone (no wake-up needed).
  REQUIRE(a->send(packet(1, 8)).ok());
  CHECK(*b->wake_word() == 0);
  // A packet waits: arming refuses (the receiver must not sleep).
  CHECK_FALSE(b->arm_sleep());
  CHECK(*b->wake_word() == 0);
  CHECK(b->poll(SIZE_MAX) == 1);

  // Armed and asleep in FUTEX_WAIT: a send clears the flag and wakes it.
  REQUIRE(b->arm_sleep());
  CHECK(*b->wake_word() == 1);
  std::atomic<bool> woke{false};
  std::atomic<pid_t> sleeper_tid{0};
  std::thread sleeper([&] {
    sleeper_tid = ::gettid();
    const timespec limit{5, 0};
    while (std::atomic_ref<std::uint32_t>(*b->wake_word()).load() == 1)
      ::syscall(SYS_futex, b->wake_word(), FUTEX_WAIT, 1, &limit, nullptr, 0);
    woke = true;
  });
  // The sleeper is in FUTEX_WAIT (not merely started) before the send.
  const bool asleep = openib::test::eventually(
      [&] { return sleeper_tid != 0 && openib::test::blocked_syscall(sleeper_tid) == SYS_futex; });
  CHECK(asleep);
  CHECK_FALSE(woke.load());
  const auto t0 = std::chrono::steady_clock::now();
  REQUIRE(a->send(packet(2, 8)).ok());
  sleeper.join();
  CHECK(woke.load());
  CHECK(std::chrono::steady_clock::now() - t0 < 2s);  // woken, not timed out
  CHECK(*b->wake_word() == 0);
  b->disarm_sleep();
  CHECK(b->poll(SIZE_MAX) == 1);
  CHECK(at_b.got.size() == 2);
}

TEST_CASE("ShmLink: a restarted end skips stale packets and rejoins", "[cable][shm]") {
  TempFile f("restart");
  auto a = end_of(f.path, 'A');
  {
    auto b = end_of(f.path, 'B');
    for (std::uint32_t i = 0; i < 10; ++i) REQUIRE(a->send(packet(i, 16)).ok());
  }  // B goes away with 10 packets unread
  for (std::uint32_t i = 0; i < 3; ++i) REQUIRE(a->send(packet(i, 16)).ok());  // sent to nobody
  auto b = end_of(f.path, 'B');
  Sink at_b;
  b->set_receiver(at_b.receiver());
  CHECK(b->poll(SIZE_MAX) == 0);  // the stale ones are skipped
  REQUIRE(a->send(packet(42, 16)).ok());
  CHECK(b->poll(SIZE_MAX) == 1);
  REQUIRE(at_b.got.size() == 1);
  CHECK(at_b.got[0] == packet(42, 16));
  // And the other way: B's sends reach A, which kept running.
  Sink at_a;
  a->set_receiver(at_a.receiver());
  REQUIRE(b->send(packet(43, 16)).ok());
  CHECK(a->poll(SIZE_MAX) == 1);
  CHECK(at_a.got.size() == 1);
}

TEST_CASE("ShmLink: bad files and options are refused", "[cable][shm]") {
  TempFile f("bad");
  ShmLinkOptions o;
  o.path = f.path.string();
  o.end = 'C';
  CHECK(ShmLink::create(o).error().code == EINVAL);
  o.end = 'A';
  {
    std::ofstream(f.path) << "not a cable";
  }
  auto r = ShmLink::create(o);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == EINVAL);
  fs::remove(f.path);
  o.path = fs::temp_directory_path().string();  // a directory
  CHECK_FALSE(ShmLink::create(o).ok());
  o.path = "/nonexistent-dir/x";
  CHECK_FALSE(ShmLink::create(o).ok());
}

TEST_CASE("ShmLink pcap tap: sent and received packets, decoded by tshark", "[cable][shm][pcap][tshark]") {
  int status = 0;
  openib::test::run_command("command -v tshark >/dev/null", status);
  if (status != 0) FAIL("tshark not found: it is a test prerequisite, installed by scripts/setup.sh");
  TempFile f("pcap");
  const auto path = fs::temp_directory_path() / ("openib_shm." + std::to_string(::getpid()) + ".pcap");
  {
    auto w = PcapErfWriter::open(path.string());
    REQUIRE(w.ok());
    auto a = end_of(f.path, 'A', {}, w->get(), 0);
    auto b = end_of(f.path, 'B', {}, w->get(), 1);
    Sink at_b;
    b->set_receiver(at_b.receiver());
    for (std::uint32_t i = 0; i < 10; ++i) REQUIRE(a->send(packet(i, 4096 - i)).ok());
    CHECK(b->poll(SIZE_MAX) == 10);
    CHECK((*w)->records() == 20);
    REQUIRE((*w)->close().ok());
  }
  auto out = openib::test::run_command(
      openib::test::tshark_read(path.string()) + " -T fields -E separator=, -e frame.protocols -e infiniband.bth.psn -e _ws.malformed",
      status);
  INFO(out.substr(0, 4000));
  REQUIRE(status == 0);
  std::size_t frames = 0;
  for (std::size_t pos = 0, nl; (nl = out.find('\n', pos)) != std::string::npos; pos = nl + 1) {
    const std::string line = out.substr(pos, nl - pos);
    ++frames;
    CHECK(line.rfind("erf:infiniband", 0) == 0);
    CHECK(line.back() == ',');  // _ws.malformed empty
  }
  CHECK(frames == 20);
  fs::remove(path);
}

namespace {

// A segment (Link::send_segment) of `count` RC packets of `mtu` bytes of
// payload (the last `last_len`): an RDMA WRITE from its First packet on.
struct SegmentOut {
  Segment seg;
  Bytes headers;
  Bytes payload;
  SegmentOut(std::uint16_t count, std::uint16_t mtu, std::uint16_t last_len, std::uint32_t psn,
             Op first = Op::kWriteFirst, Op last = Op::kWriteLast) {
    Headers h = rc_headers(first, psn);
    if (first == Op::kWriteFirst || first == Op::kReadRequest)
      h.reth = Reth{0x10000, 0x55, std::uint32_t{count - 1u} * mtu + last_len};
    auto fr = frame_packet(h, first == Op::kReadRequest ? 0 : mtu);
    REQUIRE(fr.ok());
    headers.assign(fr->headers().begin(), fr->headers().end());
    seg.count = count;
    seg.mtu = mtu;
    seg.last_len = last_len;
    seg.hdr_len = static_cast<std::uint16_t>(headers.size());
    seg.later_hdr_len = static_cast<std::uint16_t>(kLrhBytes + kBthBytes);
    seg.last_opcode = opcode(Transport::kRc, last);
    seg.last_ack_req = true;
    payload.resize(seg.payload_bytes());
    for (std::size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<std::byte>((i * 7 + psn) & 0xFF);
  }
  // Writes it into `link`'s next slots.
  openib::Result<void> send(ShmLink& link) const {
    return link.send_segment(seg, [&](std::span<std::byte> out) {
      REQUIRE(out.size() == seg.bytes());
      std::copy(headers.begin(), headers.end(), out.begin());
      std::copy(payload.begin(), payload.end(), out.begin() + seg.hdr_len);
      std::fill_n(out.begin() + seg.hdr_len + static_cast<std::ptrdiff_t>(payload.size()), seg.last_pad(), std::byte{0});
      return true;
    });
  }
};

struct ParsedSink {
  struct Got {
    std::size_t wire_bytes;
    ParsedPacket p;
    Bytes payload;
    bool aligned;  // the payload starts on a cache line
  };
  std::vector<Got> got;
  ShmLink::ParsedReceiver receiver() {
    return [this](std::size_t n, const ParsedPacket& p) {
      got.push_back({n, p, Bytes(p.payload.begin(), p.payload.end()),
                     reinterpret_cast<std::uintptr_t>(p.payload.data()) % 64 == 0});
    };
  }
};

}  // namespace

TEST_CASE("ShmLink: a segment arrives as its packets, in order, each rebuilt from the first", "[cable][shm][segment]") {
  TempFile f("seg");
  auto a = end_of(f.path, 'A');
  auto b = end_of(f.path, 'B');
  // No parsed receiver at B yet: it takes whole packets only.
  CHECK(a->segment_room(1024) == 1);
  ParsedSink at_b;
  b->set_parsed_receiver(at_b.receiver());
  // A whole ring of slots, less a segment's overhead, in MTUs.
  CHECK(a->segment_room(1024) >= std::size_t{ShmLink::kSlots} * 4096 / 1024);
  // Five 1 KiB packets from PSN 0xfffffe: the PSN wraps inside the segment.
  const SegmentOut s(5, 1024, 1001, 0xfffffe);
  REQUIRE(s.send(*a).ok());
  CHECK(a->stats().tx_packets == 5);
  const std::size_t slots = b->poll(SIZE_MAX);
  CHECK(slots == 2);  // 5.1 KiB of packets in 4,288-byte slots
  REQUIRE(at_b.got.size() == 5);
  const std::uint32_t psns[] = {0xfffffe, 0xffffff, 0, 1, 2};
  Bytes joined;
  std::uint64_t bytes = 0;
  for (std::size_t i = 0; i < 5; ++i) {
    const auto& g = at_b.got[i];
    INFO("packet " << i);
    CHECK(g.p.hdr.bth.psn == psns[i]);
    CHECK(g.p.hdr.bth.dest_qp == 0x12);
    CHECK(g.p.hdr.lrh.dlid == 2);
    const Op want = i == 0 ? Op::kWriteFirst : i == 4 ? Op::kWriteLast : Op::kWriteMiddle;
    CHECK(g.p.hdr.bth.opcode == opcode(Transport::kRc, want));
    CHECK(g.p.hdr.reth.has_value() == (i == 0));
    CHECK(g.p.hdr.bth.ack_req == (i == 4));
    CHECK(g.payload.size() == (i == 4 ? 1001u : 1024u));
    CHECK(g.p.hdr.bth.pad_cnt == (i == 4 ? 3 : 0));
    CHECK(g.aligned);  // the lead put the payloads on cache lines
    // Each packet's size as it would cross the wire alone: LRH..VCRC.
    const std::size_t want_bytes = (i == 0 ? 36 : 20) + g.payload.size() + g.p.hdr.bth.pad_cnt + 6;
    CHECK(g.wire_bytes == want_bytes);
    CHECK(std::size_t{g.p.hdr.lrh.pkt_len} * 4 + 2 == want_bytes);
    bytes += want_bytes;
    joined.insert(joined.end(), g.payload.begin(), g.payload.end());
  }
  CHECK(joined == s.payload);
  CHECK(at_b.got[0].p.hdr.reth->dma_len == 4 * 1024 + 1001);
  CHECK(b->stats().rx_packets == 5);
  CHECK(b->stats().rx_bytes == bytes);
  CHECK(a->stats().tx_bytes == bytes);
  // More than the link takes now is refused, not sent in part.
  const SegmentOut big(static_cast<std::uint16_t>(a->segment_room(4096) + 1), 4096, 4096, 7, Op::kWriteMiddle);
  CHECK_FALSE(big.send(*a).ok());
  CHECK(a->stats().tx_errors == 1);
  CHECK(b->poll(SIZE_MAX) == 0);
}

TEST_CASE("ShmLink: no segments where they cannot be taken apart; a malformed one is dropped whole",
          "[cable][shm][segment]") {
  TempFile f("segno");
  {
    auto a = end_of(f.path, 'A');
    auto b = end_of(f.path, 'B');
    Sink plain;
    b->set_receiver(plain.receiver());
    CHECK(a->segment_room(4096) == 1);  // a plain receiver wants whole packets
    CHECK_FALSE(SegmentOut(2, 4096, 10, 1).send(*a).ok());
    ParsedSink parsed;
    b->set_parsed_receiver(parsed.receiver());
    CHECK(a->segment_room(4096) > 1);
    FaultSpec drop;
    drop.drop = 0.5;
    a->set_faults(drop);  // the injector works on whole packets
    CHECK(a->segment_room(4096) == 1);
  }
  {
    const auto cap = fs::temp_directory_path() / ("openib_shm_seg." + std::to_string(::getpid()) + ".pcap");
    auto w = PcapErfWriter::open(cap.string());
    REQUIRE(w.ok());
    auto a = end_of(f.path, 'A');
    auto b = end_of(f.path, 'B', {}, w->get(), 1);  // a capture shows whole packets
    ParsedSink parsed;
    b->set_parsed_receiver(parsed.receiver());
    CHECK(a->segment_room(4096) == 1);
    auto a2 = end_of(f.path, 'A', {}, w->get(), 0);
    auto b2 = end_of(f.path, 'B');
    b2->set_parsed_receiver(parsed.receiver());
    CHECK(a2->segment_room(4096) == 1);  // nor from an end that captures
    fs::remove(cap);
  }
  {
    auto a = end_of(f.path, 'A');
    auto b = end_of(f.path, 'B');
    ParsedSink parsed;
    b->set_parsed_receiver(parsed.receiver());
    // A READ request carries no payload: no segment can start with one.
    REQUIRE(SegmentOut(3, 256, 256, 9, Op::kReadRequest, Op::kWriteLast).send(*a).ok());
    // A WRITE that ends as a SEND.
    REQUIRE(SegmentOut(3, 256, 256, 9, Op::kWriteFirst, Op::kSendLast).send(*a).ok());
    // Then a good one: the ring is still in step.
    REQUIRE(SegmentOut(3, 256, 256, 12, Op::kSendFirst, Op::kSendLast).send(*a).ok());
    b->poll(SIZE_MAX);
    CHECK(b->stats().rx_dropped_malformed == 2);
    REQUIRE(parsed.got.size() == 3);
    CHECK(parsed.got[0].p.hdr.bth.psn == 12);
    CHECK(parsed.got[2].p.hdr.bth.opcode == opcode(Transport::kRc, Op::kSendLast));
  }
}
