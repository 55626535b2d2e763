// simhca's raw Ethernet QP (docs/simhca.md §16.5): one device core with an
// Ethernet port whose cable is a recording link of this file's own, driven
// by commands (§6) and ring entries written from the manual's tables
// (§12.1, §12.2, §12.4). Frames reach the port through
// Hca::receive_packet(1, frame, now), as a cable hands them on.
//
// The node here is a small local one (written after transport_harness.hpp's
// Node, not sharing it), in a namespace of its own.
#include <catch2/catch.hpp>
#include <cstring>
#include <vector>

#include "hca/verbs.hpp"
#include "hca/work_queue.hpp"
#include "sim/cable/link.hpp"
#include "sim/simhca/hca.hpp"
#include "sim/simhca/qp_state.hpp"
#include "sim/simhca/wqe.hpp"
#include "sim/wire/packet.hpp"
#include "sim/wire/roce.hpp"

namespace openib::test::raw_qp {

using namespace openib::simhca;
namespace w = openib::sim::wire;

// Host memory: IOVAs [kBase, kBase + size); anything else fails (§11.2).
class Memory final : public HostPort {
 public:
  static constexpr uint64_t kBase = 0x100000;
  explicit Memory(size_t size) : mem_(size) {}
  Result<void> dma_read(uint64_t iova, std::span<std::byte> out) override {
    if (!inside(iova, out.size())) return err(EFAULT, "outside");
    std::memcpy(out.data(), mem_.data() + (iova - kBase), out.size());
    return ok();
  }
  Result<void> dma_write(uint64_t iova, std::span<const std::byte> in) override {
    if (!inside(iova, in.size())) return err(EFAULT, "outside");
    std::memcpy(mem_.data() + (iova - kBase), in.data(), in.size());
    return ok();
  }
  bool signal_msix(uint32_t) override { return true; }
  std::span<std::byte> at(uint64_t iova, size_t n) {
    REQUIRE(inside(iova, n));
    return {mem_.data() + (iova - kBase), n};
  }

 private:
  bool inside(uint64_t iova, size_t n) const {
    return iova >= kBase && n <= mem_.size() && iova - kBase <= mem_.size() - n;
  }
  std::vector<std::byte> mem_;
};

// The cable: keeps every frame sent on it.
class RecordingLink final : public sim::Link {
 public:
  Result<void> send(std::span<const std::byte> frame) override {
    sent.emplace_back(frame.begin(), frame.end());
    return ok();
  }
  void set_receiver(Receiver) override {}
  sim::LinkStats stats() const override { return {}; }
  std::vector<std::vector<std::byte>> sent;
};

struct Queue {
  uint32_t qpn = 0;
  uint64_t sq = 0, rq = 0, dbr = 0;
  uint8_t log_sq = 4, sq_stride = 8, log_rq = 4, rq_stride = 7;
  uint32_t sq_pi = 0, rq_pi = 0;
};

HcaOptions options(uint8_t link_layer) {
  HcaOptions o;
  o.link_layer = link_layer;
  return o;
}

// One device, its port 1 cabled to a RecordingLink: Active at once on
// Ethernet (§16.1). PD, EQ 0 and one CQ for everything.
class EthNode {
 public:
  explicit EthNode(uint8_t link_layer = kLinkLayerEthernet) : mem(8u << 20), hca(mem, options(link_layer)) {
    cmd(kOpInitHca, {});
    Bytes eq(32);
    put64(eq, 0, alloc(64 * 32));
    put64(eq, 8, 1ull << kEvCqCompletion);
    put8(eq, 0x10, 5);
    cmd(kOpCreateEq, eq);
    pd = get32(cmd(kOpAllocPd, {}), 0);
    cq_ring = alloc(64 * 256);
    cq_dbr = alloc(8, 8);
    Bytes c(32);
    put64(c, 0, cq_ring);
    put64(c, 8, cq_dbr);
    put8(c, 0x10, 8);
    cqn = get32(cmd(kOpCreateCq, c), 0);
    hca.attach_link(1, &link);
    buf = alloc(16384, 4096);
    Bytes mk(32 + 8 * 4);  // §6.7: 16 KiB at VA == IOVA, local write
    put32(mk, 0, pd);
    put32(mk, 4, kMrLocalWrite);
    put64(mk, 8, buf);
    put64(mk, 0x10, 16384);
    put8(mk, 0x18, 12);
    put32(mk, 0x1c, 4);
    for (uint64_t i = 0; i < 4; ++i) put64(mk, 32 + 8 * i, buf + i * 4096);
    lkey = get32(cmd(kOpCreateMkey, mk), 0);
  }
  ~EthNode() { hca.attach_link(1, nullptr); }

  uint64_t alloc(size_t n, size_t align = 64) {
    bump_ = (bump_ + align - 1) & ~uint64_t(align - 1);
    const uint64_t a = bump_;
    bump_ += n;
    REQUIRE(bump_ <= Memory::kBase + (8u << 20));
    return a;
  }

  Bytes cmd(uint16_t op, Bytes in, uint8_t want = kOk, uint32_t* syndrome = nullptr) {
    Bytes out;
    Outcome o = hca.execute(op, in, out);
    INFO("command " << opcode_name(op) << " status " << status_name(o.status) << " syndrome " << o.syndrome);
    REQUIRE(o.status == want);
    if (syndrome) *syndrome = o.syndrome;
    return out;
  }

  // §6.10 CREATE_QP; `port` is the raw QP's (and SMI/GSI's).
  Queue create_qp(uint8_t type, uint8_t port, uint8_t want = kOk) {
    Queue q;
    q.sq = alloc((size_t{1} << q.log_sq) << q.sq_stride);
    q.rq = alloc((size_t{1} << q.log_rq) << q.rq_stride);
    q.dbr = alloc(8, 8);
    Bytes in(64);
    put8(in, 0, type);
    put8(in, 1, port);
    put32(in, 4, pd);
    put32(in, 8, cqn);
    put32(in, 0x0c, cqn);
    put64(in, 0x18, q.sq);
    put64(in, 0x20, q.rq);
    put64(in, 0x28, q.dbr);
    put8(in, 0x30, q.log_sq);
    put8(in, 0x31, q.sq_stride);
    put8(in, 0x32, q.log_rq);
    put8(in, 0x33, q.rq_stride);
    Bytes out = cmd(kOpCreateQp, in, want);
    if (want == kOk) q.qpn = get32(out, 0);
    return q;
  }

  // §6.10 MODIFY_QP: `fill` writes the §7.7 attributes.
  template <class F>
  void modify(uint32_t qpn, uint32_t mask, F fill, uint8_t want = kOk, uint32_t* syndrome = nullptr) {
    Bytes in(96);
    put32(in, 0, qpn);
    put32(in, 4, mask);
    fill(std::span<std::byte>(in).subspan(0x10));
    cmd(kOpModifyQp, in, want, syndrome);
  }
  void to_state(uint32_t qpn, uint8_t s, uint32_t extra_mask = 0) {
    modify(qpn, attr::kState | extra_mask, [&](std::span<std::byte> a) {
      put8(a, 0, s);
      put8(a, 2, 1);  // port (§7.7), read only if extra_mask has kPort
    });
  }
  // §16.5: RESET -> INIT (port, as Linux's raw packet QPs give it) -> RTR -> RTS.
  void raw_to_rts(const Queue& q) {
    to_state(q.qpn, kInit, attr::kPort);
    to_state(q.qpn, kRtr);
    to_state(q.qpn, kRts);
  }

  // §12.1 for a raw QP: the control segment, then data segments or inline
  // data (no address segment); then the record and SQ_DOORBELL (§12.3).
  void post_send(Queue& q, uint64_t wr_id, std::span<const std::byte> frame, bool inl, uint8_t opcode = kWrSend) {
    Bytes wqe(16);
    if (inl) {
      wqe.resize(16 + ((4 + frame.size() + 15) & ~size_t{15}));
      put32(wqe, 16, kInlineMark | static_cast<uint32_t>(frame.size()));
      std::copy(frame.begin(), frame.end(), wqe.begin() + 20);
    } else {
      std::copy(frame.begin(), frame.end(), mem.at(buf, frame.size()).begin());
      wqe.resize(32);
      put32(wqe, 16, static_cast<uint32_t>(frame.size()));
      put32(wqe, 20, lkey);
      put64(wqe, 24, buf);
    }
    put8(wqe, 0, opcode);
    put8(wqe, 1, kWqeSignaled | (inl ? kWqeInline : 0));
    put8(wqe, 2, static_cast<uint8_t>(wqe.size() / 16));
    put64(wqe, 8, wr_id);
    post_wqe(q, wqe);
  }
  // Any WQE into the next SQ slot, the record, SQ_DOORBELL; then a turn.
  void post_wqe(Queue& q, const Bytes& wqe) {
    const size_t stride = size_t{1} << q.sq_stride;
    REQUIRE(wqe.size() <= stride);
    auto slot = mem.at(q.sq + ((q.sq_pi & ((1u << q.log_sq) - 1)) << q.sq_stride), stride);
    std::fill(slot.begin(), slot.end(), std::byte{0});
    std::copy(wqe.begin(), wqe.end(), slot.begin());
    ++q.sq_pi;
    put32(mem.at(q.dbr, 8), 4, q.sq_pi);
    hca.uar_write64(0, kUarSqDoorbell, (uint64_t{q.sq_pi} << 32) | q.qpn);
    run();
  }
  // §12.2: one data segment of `len` bytes at buf + off.
  void post_recv(Queue& q, uint64_t wr_id, uint64_t off, uint32_t len) {
    auto slot = mem.at(q.rq + ((q.rq_pi & ((1u << q.log_rq) - 1)) << q.rq_stride), size_t{1} << q.rq_stride);
    std::fill(slot.begin(), slot.end(), std::byte{0});
    put64(slot, 0, wr_id);
    put8(slot, 8, 1);
    put32(slot, 16, len);
    put32(slot, 20, lkey);
    put64(slot, 24, buf + off);
    ++q.rq_pi;
    put32(mem.at(q.dbr, 8), 0, q.rq_pi);
  }
  void run() {
    for (int i = 0; i < 4; ++i) {
      now += std::chrono::microseconds(1);
      hca.run_due(now);
    }
  }
  void inject(std::span<const std::byte> frame) { hca.receive_packet(1, frame, now); }

  // §12.4: the CQEs written since the last poll.
  std::vector<Cqe> poll() {
    std::vector<Cqe> out;
    for (;;) {
      auto e = mem.at(cq_ring + uint64_t{ci & 255} * 64, 64);
      if ((get8(e, 63) & 1) != (((ci >> 8) & 1) ^ 1)) break;
      out.push_back(decode_cqe(e));
      ++ci;
      put32(mem.at(cq_dbr, 8), 0, ci);
    }
    return out;
  }

  Memory mem;
  Hca hca;
  RecordingLink link;
  uint32_t pd = 0, cqn = 0, lkey = 0, ci = 0;
  uint64_t cq_ring = 0, cq_dbr = 0, buf = 0;
  Hca::Clock::time_point now{};

 private:
  uint64_t bump_ = Memory::kBase;
};

// §16.1: the port's MAC for the default node GUID.
w::Mac port_mac() {
  const uint64_t b = Caps{}.node_guid + 1;
  return {0x02, uint8_t(b >> 32), uint8_t(b >> 24), uint8_t(b >> 16), uint8_t(b >> 8), uint8_t(b)};
}

std::array<uint8_t, 16> ip_gid(uint8_t host) {
  std::array<uint8_t, 16> g{};
  g[10] = g[11] = 0xff;
  g[12] = 198;
  g[13] = 18;
  g[14] = 90;
  g[15] = host;
  return g;
}

// §6.12 SET_GID of port 1: `gid` as entry `index`, type RoCEv2.
void set_gid(EthNode& n, uint16_t index, const std::array<uint8_t, 16>& gid) {
  Bytes in(24);
  put8(in, 0, 1);
  put8(in, 1, kGidTypeRoceV2);
  put16(in, 2, index);
  for (size_t i = 0; i < 16; ++i) put8(in, 8 + i, gid[i]);
  n.cmd(kOpSetGid, in);
}

// An ARP request (RFC 826), who-has 198.18.90.<target> from .<sender>,
// broadcast: 42 bytes, padded to 60 as a NIC sends it.
std::vector<std::byte> arp_request(uint8_t sender, uint8_t target) {
  std::vector<std::byte> f(60);
  const w::Mac src{0x02, 0xaa, 0xbb, 0xcc, 0xdd, sender};
  const uint8_t head[] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, src[0], src[1], src[2], src[3], src[4], src[5],
                          0x08, 0x06, 0, 1, 0x08, 0, 6, 4, 0, 1, src[0], src[1], src[2], src[3], src[4], src[5],
                          198, 18, 90, sender, 0, 0, 0, 0, 0, 0, 198, 18, 90, target};
  for (size_t i = 0; i < sizeof head; ++i) f[i] = std::byte{head[i]};
  return f;
}

// A RoCEv2 UD SEND_ONLY from 198.18.90.9 to `dgid`, MAC `dmac`, for QPN
// `dest_qp` with Q_Key `qkey`, carrying `payload`.
std::vector<std::byte> roce_ud_send(const std::array<uint8_t, 16>& dgid, const w::Mac& dmac, uint32_t dest_qp,
                                    uint32_t qkey, std::span<const std::byte> payload) {
  w::Headers h;
  h.lrh.lnh = w::Lnh::kIbaLocal;
  h.bth.opcode = w::opcode(w::Transport::kUd, w::Op::kSendOnly);
  h.bth.pkey = 0xffff;
  h.bth.dest_qp = dest_qp;
  h.deth = w::Deth{qkey, 0x99};
  auto pkt = w::build_packet(h, payload);
  REQUIRE(pkt.ok());
  // BTH .. pad: after the LRH, before the ICRC and VCRC.
  std::span<const std::byte> transport(pkt->data() + w::kLrhBytes, pkt->size() - w::kLrhBytes - 6);
  w::RoceAddress a;
  a.dmac = dmac;
  a.smac = {0x02, 0xaa, 0xbb, 0xcc, 0xdd, 0x09};
  a.ipv4 = true;
  std::copy(dgid.begin(), dgid.end(), a.dgid.begin());
  const auto src = ip_gid(9);
  std::copy(src.begin(), src.end(), a.sgid.begin());
  a.udp_sport = 0xc000;
  std::vector<std::byte> f(w::roce_frame_bytes(a, transport.size()));
  auto n = w::build_roce_frame(a, transport, f);
  REQUIRE(n.ok());
  f.resize(*n);
  REQUIRE(w::parse_roce_frame(f).ok());
  return f;
}

std::vector<std::byte> pattern(size_t n, uint8_t seed) {
  std::vector<std::byte> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = std::byte(static_cast<uint8_t>(seed + i * 7));
  return v;
}

bool same(std::span<const std::byte> a, std::span<const std::byte> b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin());
}

}  // namespace openib::test::raw_qp

using namespace openib::test::raw_qp;
using openib::simhca::kQpRaw;

TEST_CASE("raw QP: CREATE_QP only on an Ethernet port, the port given; RESET..RTS", "[raw-qp]") {
  SECTION("refused on an InfiniBand port") {
    EthNode ib(kLinkLayerInfiniBand);
    ib.create_qp(kQpRaw, 1, kBadParam);
  }
  EthNode n;
  n.create_qp(kQpRaw, 0, kBadParam);  // no port
  n.create_qp(kQpRaw, 2, kBadParam);  // no such port
  Queue q = n.create_qp(kQpRaw, 1);
  // §7.7: QUERY_QP shows the port from creation on.
  Bytes in(4);
  put32(in, 0, q.qpn);
  Bytes out = n.cmd(kOpQueryQp, in);
  CHECK(get8(out, 2) == 1);
  CHECK(get8(out, 0x50) == kQpRaw);
  // No Q_Key or P_Key index: not allowed at INIT (§8.2).
  uint32_t syn = 0;
  n.modify(q.qpn, attr::kState | attr::kQkey, [](std::span<std::byte> a) { put8(a, 0, kInit); }, kBadParam, &syn);
  CHECK(syn == (kSynNotAllowed | attr::kQkey));
  // Another port than its own: refused.
  n.modify(q.qpn, attr::kState | attr::kPort, [](std::span<std::byte> a) {
    put8(a, 0, kInit);
    put8(a, 2, 2);
  }, kBadParam, &syn);
  CHECK((syn & attr::kPort) != 0);
  n.raw_to_rts(q);
  out = n.cmd(kOpQueryQp, in);
  CHECK(get8(out, 0) == kRts);
  // Without the port attribute too (it is the created one).
  Queue q2 = n.create_qp(kQpRaw, 1);
  n.to_state(q2.qpn, kInit);
  n.to_state(q2.qpn, kRtr);
  n.to_state(q2.qpn, kRts);
  // And it is destroyed like any QP.
  put32(in, 0, q2.qpn);
  n.cmd(kOpDestroyQp, in);
}

TEST_CASE("raw QP: a SEND's data leaves on the cable as the frame", "[raw-qp]") {
  EthNode n;
  Queue q = n.create_qp(kQpRaw, 1);
  n.raw_to_rts(q);
  const auto pma_before = n.hca.pma_counters(1);
  const auto arp = arp_request(1, 2);
  SECTION("from a data segment") { n.post_send(q, 7, arp, false); }
  SECTION("inline") { n.post_send(q, 7, std::span(arp).first(42), true); }
  REQUIRE(n.link.sent.size() == 1);
  auto cqes = n.poll();
  REQUIRE(cqes.size() == 1);
  CHECK(cqes[0].status == kWcSuccess);
  CHECK(cqes[0].opcode == kWcSend);
  CHECK(cqes[0].wr_id == 7);
  CHECK(cqes[0].qpn == q.qpn);
  const auto& f = n.link.sent[0];
  CHECK(cqes[0].byte_len == f.size());
  CHECK(same(f, std::span(arp).first(f.size())));
  CHECK((f.size() == 60 || f.size() == 42));
  CHECK(n.hca.pma_counters(1).xmit_pkts == pma_before.xmit_pkts + 1);
  CHECK(n.hca.pma_counters(1).multicast_xmit_pkts == pma_before.multicast_xmit_pkts + 1);  // broadcast
  CHECK(n.hca.data_stats().raw_tx_frames == 1);
}

TEST_CASE("raw QP: a frame shorter than its header or longer than the cable's completes in error",
          "[raw-qp]") {
  EthNode n;
  Queue q = n.create_qp(kQpRaw, 1);
  n.raw_to_rts(q);
  const bool too_long = GENERATE(false, true);
  const auto frame = pattern(too_long ? w::kMaxPacketBytes + 1 : 13, 3);
  n.post_send(q, 9, frame, false);
  CHECK(n.link.sent.empty());
  auto cqes = n.poll();
  REQUIRE(cqes.size() == 1);
  CHECK(cqes[0].status == kWcLocLenErr);
  CHECK(cqes[0].wr_id == 9);
  // As a UD QP (IBA 10.8.3): the send queue in error, SQE; RTS again resumes it.
  Bytes in(4);
  put32(in, 0, q.qpn);
  CHECK(get8(n.cmd(kOpQueryQp, in), 0) == kSqe);
  n.to_state(q.qpn, kRts);
  // The limits themselves are good frames.
  n.post_send(q, 10, pattern(w::kMaxPacketBytes, 4), false);
  n.post_send(q, 11, pattern(14, 5), false);
  REQUIRE(n.link.sent.size() == 2);
  CHECK(n.link.sent[0].size() == w::kMaxPacketBytes);
  CHECK(n.link.sent[1].size() == 14);
  cqes = n.poll();
  REQUIRE(cqes.size() == 2);
  CHECK(cqes[0].status == kWcSuccess);
  CHECK(cqes[1].status == kWcSuccess);
}

TEST_CASE("raw QP: SEND_WITH_IMM is not a raw QP's opcode", "[raw-qp]") {
  EthNode n;
  Queue q = n.create_qp(kQpRaw, 1);
  n.raw_to_rts(q);
  n.post_send(q, 1, arp_request(1, 2), false, kWrSendImm);
  CHECK(n.link.sent.empty());
  auto cqes = n.poll();
  REQUIRE(cqes.size() == 1);
  CHECK(cqes[0].status == kWcLocQpOpErr);
}

TEST_CASE("raw QP: received frames are steered by what the RoCE transport takes", "[raw-qp]") {
  EthNode n;
  set_gid(n, 1, ip_gid(2));  // 198.18.90.2 is the port's
  Queue raw = n.create_qp(kQpRaw, 1);
  n.raw_to_rts(raw);
  const DataStats before = n.hca.data_stats();

  SECTION("an ARP request goes to the raw QP whole") {
    n.post_recv(raw, 21, 0, 2048);
    const auto arp = arp_request(1, 2);
    const auto pma = n.hca.pma_counters(1);
    n.inject(arp);
    auto cqes = n.poll();
    REQUIRE(cqes.size() == 1);
    CHECK(cqes[0].status == kWcSuccess);
    CHECK(cqes[0].opcode == kWcRecv);
    CHECK(cqes[0].wr_id == 21);
    CHECK(cqes[0].qpn == raw.qpn);
    CHECK(cqes[0].byte_len == arp.size());
    CHECK((cqes[0].flags & kCqeFlagGrh) == 0);
    CHECK(same(n.mem.at(n.buf, arp.size()), arp));  // from the first byte: no GRH area
    CHECK(n.hca.data_stats().raw_rx_frames == before.raw_rx_frames + 1);
    CHECK(n.hca.data_stats().rx_not_roce == before.rx_not_roce);
    CHECK(n.hca.pma_counters(1).rcv_pkts == pma.rcv_pkts + 1);
    CHECK(n.hca.pma_counters(1).multicast_rcv_pkts == pma.multicast_rcv_pkts + 1);  // broadcast
  }
  SECTION("no receive WQE: counted and dropped") {
    n.inject(arp_request(1, 2));
    CHECK(n.poll().empty());
    CHECK(n.hca.data_stats().rx_no_wqe == before.rx_no_wqe + 1);
    CHECK(n.hca.data_stats().raw_rx_no_wqe == before.raw_rx_no_wqe + 1);
    // The next frame, with a WQE posted, is received.
    n.post_recv(raw, 22, 0, 2048);
    n.inject(arp_request(1, 3));
    auto cqes = n.poll();
    REQUIRE(cqes.size() == 1);
    CHECK(cqes[0].wr_id == 22);
  }
  SECTION("a buffer shorter than the frame: a local length error") {
    n.post_recv(raw, 23, 0, 32);
    n.inject(arp_request(1, 2));
    auto cqes = n.poll();
    REQUIRE(cqes.size() == 1);
    CHECK(cqes[0].status == kWcLocLenErr);
  }
  SECTION("RoCEv2 to the port's own address goes to the RoCE transport, not the raw QP") {
    // A UD QP to take it (INIT: P_Key index, port, Q_Key).
    Queue ud = n.create_qp(kQpUd, 0);
    n.modify(ud.qpn, attr::kState | attr::kPkeyIndex | attr::kPort | attr::kQkey, [](std::span<std::byte> a) {
      put8(a, 0, kInit);
      put8(a, 2, 1);
      put32(a, 8, 0x1234);
    });
    n.to_state(ud.qpn, kRtr);
    n.modify(ud.qpn, attr::kState | attr::kSqPsn, [](std::span<std::byte> a) { put8(a, 0, kRts); });
    n.post_recv(raw, 24, 0, 2048);
    n.post_recv(ud, 25, 4096, 2048);
    const auto payload = pattern(64, 9);
    n.inject(roce_ud_send(ip_gid(2), port_mac(), ud.qpn, 0x1234, payload));
    auto cqes = n.poll();
    REQUIRE(cqes.size() == 1);
    CHECK(cqes[0].status == kWcSuccess);
    CHECK(cqes[0].qpn == ud.qpn);
    CHECK(cqes[0].wr_id == 25);
    CHECK(cqes[0].byte_len == w::kGrhBytes + payload.size());
    CHECK(same(n.mem.at(n.buf + 4096 + w::kGrhBytes, payload.size()), payload));
    CHECK(n.hca.data_stats().raw_rx_frames == before.raw_rx_frames);
    // To a QPN the port does not have: still the RoCE transport's drop.
    n.inject(roce_ud_send(ip_gid(2), port_mac(), 0xabcd, 0x1234, payload));
    CHECK(n.poll().empty());
    CHECK(n.hca.data_stats().rx_no_qp == before.rx_no_qp + 1);
    // Nor is a UD packet for the raw QP's number taken by it.
    n.inject(roce_ud_send(ip_gid(2), port_mac(), raw.qpn, 0x1234, payload));
    CHECK(n.poll().empty());
    CHECK(n.hca.data_stats().rx_no_qp == before.rx_no_qp + 2);
  }
  SECTION("RoCEv2 to another IP, or another MAC, goes to the raw QP") {
    n.post_recv(raw, 26, 0, 2048);
    n.post_recv(raw, 27, 2048, 2048);
    const auto other_ip = roce_ud_send(ip_gid(77), port_mac(), 0x100, 0x1234, pattern(32, 1));
    const auto other_mac = roce_ud_send(ip_gid(2), {0x02, 1, 2, 3, 4, 5}, 0x100, 0x1234, pattern(32, 2));
    n.inject(other_ip);
    n.inject(other_mac);
    auto cqes = n.poll();
    REQUIRE(cqes.size() == 2);
    CHECK(cqes[0].wr_id == 26);
    CHECK(cqes[0].byte_len == other_ip.size());
    CHECK(same(n.mem.at(n.buf, other_ip.size()), other_ip));
    CHECK(cqes[1].wr_id == 27);
    CHECK(same(n.mem.at(n.buf + 2048, other_mac.size()), other_mac));
    CHECK(n.hca.data_stats().rx_not_our_gid == before.rx_not_our_gid);
  }
  SECTION("a RoCEv2 frame with a bad ICRC goes nowhere") {
    n.post_recv(raw, 28, 0, 2048);
    auto f = roce_ud_send(ip_gid(77), port_mac(), 0x100, 0x1234, pattern(32, 1));
    f[14 + 20 + 8 + 12 + 8 + 3] ^= std::byte{0x10};  // Ethernet, IPv4, UDP, BTH, DETH, into the payload
    n.inject(f);
    CHECK(n.poll().empty());
    CHECK(n.hca.data_stats().rx_bad_icrc == before.rx_bad_icrc + 1);
    CHECK(n.hca.data_stats().raw_rx_frames == before.raw_rx_frames);
  }
  SECTION("a malformed RoCEv2 frame goes nowhere") {
    n.post_recv(raw, 29, 0, 2048);
    auto f = roce_ud_send(ip_gid(77), port_mac(), 0x100, 0x1234, pattern(32, 1));
    f[14 + 10] ^= std::byte{0x01};  // the IPv4 header checksum
    n.inject(f);
    CHECK(n.poll().empty());
    CHECK(n.hca.data_stats().rx_malformed == before.rx_malformed + 1);
  }
  SECTION("every raw QP of the port gets its copy; one not yet in RTR none") {
    Queue second = n.create_qp(kQpRaw, 1);
    Queue idle = n.create_qp(kQpRaw, 1);
    n.to_state(second.qpn, kInit);
    n.to_state(second.qpn, kRtr);  // RTR receives
    n.to_state(idle.qpn, kInit);   // INIT does not
    n.post_recv(raw, 30, 0, 2048);
    n.post_recv(second, 31, 2048, 2048);
    n.post_recv(idle, 32, 4096, 2048);
    const auto arp = arp_request(1, 2);
    n.inject(arp);
    auto cqes = n.poll();
    REQUIRE(cqes.size() == 2);
    CHECK(cqes[0].qpn == raw.qpn);
    CHECK(cqes[1].qpn == second.qpn);
    CHECK(same(n.mem.at(n.buf + 2048, arp.size()), arp));
    CHECK(n.hca.data_stats().raw_rx_frames == before.raw_rx_frames + 2);
  }
}

TEST_CASE("raw QP: without one, frames are counted as before", "[raw-qp]") {
  EthNode n;
  Queue q = n.create_qp(kQpRaw, 1);  // in RESET: takes nothing
  const DataStats before = n.hca.data_stats();
  n.inject(arp_request(1, 2));
  n.inject(roce_ud_send(ip_gid(77), port_mac(), 0x100, 0x1234, pattern(32, 1)));
  CHECK(n.hca.data_stats().rx_not_roce == before.rx_not_roce + 1);
  CHECK(n.hca.data_stats().rx_not_our_gid == before.rx_not_our_gid + 1);
  CHECK(n.hca.data_stats().rx_no_wqe == before.rx_no_wqe);
  // Destroyed: the port forgets it.
  Bytes in(4);
  put32(in, 0, q.qpn);
  n.cmd(kOpDestroyQp, in);
  n.inject(arp_request(1, 2));
  CHECK(n.hca.data_stats().rx_not_roce == before.rx_not_roce + 2);
}

TEST_CASE("raw QP: the driver's encoders make what the device takes", "[raw-qp]") {
  namespace hca = openib::hca;
  EthNode n;
  // §6.10 as src/hca encodes it: type RAW with its port.
  hca::QpCreateParams p;
  p.type = hca::QpType::kRaw;
  p.port = 1;
  p.pdn = n.pd;
  p.send_cqn = p.recv_cqn = n.cqn;
  p.sq_iova = n.alloc(16 << 8);
  p.rq_iova = n.alloc(16 << 7);
  p.dbr_iova = n.alloc(8, 8);
  p.log_sq_size = 4;
  p.log_sq_stride = 8;
  p.log_rq_size = 4;
  p.log_rq_stride = 7;
  Queue q;
  q.sq = p.sq_iova;
  q.rq = p.rq_iova;
  q.dbr = p.dbr_iova;
  q.qpn = get32(n.cmd(kOpCreateQp, hca::encode_create_qp(p)), 0);
  n.raw_to_rts(q);
  // §12.1: control and one data segment, no address segment.
  const auto arp = arp_request(4, 5);
  std::copy(arp.begin(), arp.end(), n.mem.at(n.buf, arp.size()).begin());
  hca::SendWr wr;
  wr.wr_id = 0x55;
  wr.sg.push_back({n.buf, static_cast<uint32_t>(arp.size()), n.lkey});
  auto wqe = hca::encode_send_wqe(wr, hca::QpType::kRaw);
  REQUIRE(wqe.ok());
  CHECK(wqe->size() == 32);
  n.post_wqe(q, *wqe);
  REQUIRE(n.link.sent.size() == 1);
  CHECK(same(n.link.sent[0], arp));
  auto cqes = n.poll();
  REQUIRE(cqes.size() == 1);
  CHECK(cqes[0].status == kWcSuccess);
  CHECK(cqes[0].wr_id == 0x55);
  // The driver refuses what the device would: SEND_WITH_IMM on a raw QP.
  wr.opcode = hca::WrOpcode::kSendImm;
  CHECK(!hca::encode_send_wqe(wr, hca::QpType::kRaw).ok());
}
