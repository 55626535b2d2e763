// In-process harness for simhca's data path (docs/simhca.md §12): two
// device cores (simhca::Hca) on fake host buses, their ports cabled by a
// LoopbackPair, driven by commands (§6) and ring entries written by hand
// from the manual's tables, with a virtual clock. Deterministic: the wire
// moves only in pump(), time only in step().
#pragma once

#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <functional>
#include <optional>
#include <vector>

#include "sim/cable/link.hpp"
#include "sim/simhca/hca.hpp"
#include "sim/simhca/wqe.hpp"

namespace openib::test {

using namespace openib::simhca;

// Host memory: one flat region of IOVAs [kBase, kBase + size); any access
// outside it fails (§11.2), as the vfio-user server's checked DMA does.
class FakeHost final : public HostPort {
 public:
  static constexpr uint64_t kBase = 0x100000;
  explicit FakeHost(size_t size) : mem_(size) {}
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
  bool signal_msix(uint32_t) override {
    ++irqs;
    return true;
  }
  std::span<std::byte> at(uint64_t iova, size_t n) {
    REQUIRE(inside(iova, n));
    return {mem_.data() + (iova - kBase), n};
  }
  uint64_t irqs = 0;

 private:
  bool inside(uint64_t iova, size_t n) const {
    return iova >= kBase && n <= mem_.size() && iova - kBase <= mem_.size() - n;
  }
  std::vector<std::byte> mem_;
};

struct TQp {
  uint32_t qpn = 0;
  uint8_t type = kQpRc;
  uint64_t sq = 0, rq = 0, dbr = 0;
  uint8_t log_sq = 6, sq_stride = 8, log_rq = 6, rq_stride = 7;
  uint32_t sq_pi = 0, rq_pi = 0;
  bool srq = false;
};

struct TCq {
  uint32_t cqn = 0;
  uint64_t ring = 0, dbr = 0;
  uint8_t log_size = 10;
  uint32_t ci = 0;
};

struct TSrq {
  uint32_t srqn = 0;
  uint64_t ring = 0, dbr = 0;
  uint8_t log_size = 6, stride = 7;
  uint32_t pi = 0;
};

// One device with its memory, PD, EQ and CQ. An InfiniBand node's port is
// made Active with `lid` and MTU 4096; an Ethernet one (opts.link_layer,
// §16) is left as it trains: Active once cabled, no LID, MTU 1024 (its
// SET_PORT may set the MTU only).
class Node {
 public:
  explicit Node(uint16_t lid, size_t mem = 24u << 20, HcaOptions opts = {})
      : host(mem), hca(host, opts), lid_(lid) {
    cmd(kOpInitHca, {});
    if (opts.link_layer != kLinkLayerEthernet) set_port(4, lid, 5);
    Bytes eq(32);
    put64(eq, 0, alloc(64 * 32, 64));
    put64(eq, 8, (1ull << kEvCqCompletion) | (1ull << kEvCqError));
    put8(eq, 0x10, 6);
    cmd(kOpCreateEq, eq);
    pd = num(cmd(kOpAllocPd, {}));
    cq = create_cq(10);
  }

  uint64_t alloc(size_t n, size_t align = 64) {
    bump_ = (bump_ + align - 1) & ~uint64_t(align - 1);
    const uint64_t a = bump_;
    bump_ += n;
    REQUIRE(bump_ <= FakeHost::kBase + 24u * 1024 * 1024);
    return a;
  }
  std::span<std::byte> mem(uint64_t iova, size_t n) { return host.at(iova, n); }

  Bytes cmd(uint16_t op, Bytes in, uint8_t want = kOk) {
    Bytes out;
    Outcome o = hca.execute(op, in, out);
    INFO("command " << opcode_name(op) << " status " << status_name(o.status) << " syndrome " << o.syndrome);
    REQUIRE(o.status == want);
    return out;
  }
  static uint32_t num(const Bytes& b) { return get32(b, 0); }

  void set_port(uint8_t state, uint16_t lid, uint8_t mtu, uint16_t pkey = 0) {
    Bytes in(24);
    put8(in, 0, 1);
    put8(in, 1, kSelState | kSelLid | kSelMtu | (pkey ? kSelPkey : 0));
    put8(in, 2, state);
    put16(in, 4, lid);
    put8(in, 8, mtu);
    put16(in, 0x0a, pkey);
    cmd(kOpSetPort, in);
  }

  TCq create_cq(uint8_t log_size) {
    TCq c;
    c.log_size = log_size;
    c.ring = alloc((size_t{1} << log_size) * 64, 64);
    c.dbr = alloc(8, 8);
    Bytes in(32);
    put64(in, 0, c.ring);
    put64(in, 8, c.dbr);
    put8(in, 0x10, log_size);
    c.cqn = num(cmd(kOpCreateCq, in));
    return c;
  }

  TSrq create_srq(uint8_t log_size = 6, uint32_t limit = 0) {
    TSrq s;
    s.log_size = log_size;
    s.ring = alloc((size_t{1} << log_size) << s.stride, 64);
    s.dbr = alloc(8, 8);
    Bytes in(32);
    put64(in, 0, s.ring);
    put64(in, 8, s.dbr);
    put8(in, 0x10, log_size);
    put8(in, 0x11, s.stride);
    put32(in, 0x14, pd);
    put32(in, 0x18, limit);
    s.srqn = num(cmd(kOpCreateSrq, in));
    return s;
  }

  // §6.7: a region whose virtual addresses differ from its IOVAs, so the
  // page-list translation is exercised. Returns the key; va() maps back.
  static constexpr uint64_t kVaOffset = 0x7f0000000000ull;
  uint32_t reg_mr(uint64_t iova, uint64_t len, uint32_t access, uint32_t pdn = UINT32_MAX) {
    const uint64_t page = 4096;
    const uint64_t va = iova + kVaOffset;
    const uint64_t first = iova & ~(page - 1);
    const uint64_t npages = ((iova - first) + len + page - 1) / page;
    Bytes in(32 + 8 * npages);
    put32(in, 0, pdn == UINT32_MAX ? pd : pdn);
    put32(in, 4, access);
    put64(in, 8, va);
    put64(in, 0x10, len);
    put8(in, 0x18, 12);
    put32(in, 0x1c, static_cast<uint32_t>(npages));
    for (uint64_t i = 0; i < npages; ++i) put64(in, 32 + 8 * i, first + i * page);
    return num(cmd(kOpCreateMkey, in));
  }
  static uint64_t va(uint64_t iova) { return iova + kVaOffset; }

  TQp create_qp(uint8_t type, const TSrq* srq = nullptr, bool sig_all = false, uint32_t pdn = UINT32_MAX) {
    TQp q;
    q.type = type;
    q.srq = srq != nullptr;
    q.sq = alloc((size_t{1} << q.log_sq) << q.sq_stride, 64);
    q.rq = alloc((size_t{1} << q.log_rq) << q.rq_stride, 64);
    q.dbr = alloc(8, 8);
    Bytes in(64);
    put8(in, 0, type);
    put8(in, 2, (srq ? kQpFlagUseSrq : 0) | (sig_all ? kQpFlagSigAll : 0));
    put32(in, 4, pdn == UINT32_MAX ? pd : pdn);
    put32(in, 8, cq.cqn);
    put32(in, 0x0c, cq.cqn);
    put32(in, 0x10, srq ? srq->srqn : 0);
    put64(in, 0x18, q.sq);
    put64(in, 0x20, q.rq);
    put64(in, 0x28, q.dbr);
    put8(in, 0x30, q.log_sq);
    put8(in, 0x31, q.sq_stride);
    put8(in, 0x32, q.log_rq);
    put8(in, 0x33, q.rq_stride);
    q.qpn = num(cmd(kOpCreateQp, in));
    return q;
  }

  // An address vector's GRH fields (§7.6), and an Ethernet port's dmac.
  struct Grh {
    uint8_t sgid_index = 0, hop_limit = 64, traffic_class = 0;
    uint32_t flow_label = 0;
    std::array<uint8_t, 16> dgid{};
    std::array<uint8_t, 6> dmac{};
  };
  // Writes g into the address vector `av` (48 bytes, §7.6), flags bit 0 set.
  static void put_grh(std::span<std::byte> av, const Grh& g) {
    put8(av, 0x06, 1);
    put8(av, 0x07, g.hop_limit);
    put32(av, 0x08, g.flow_label);
    put8(av, 0x0c, g.sgid_index);
    put8(av, 0x0d, g.traffic_class);
    for (size_t i = 0; i < 16; ++i) put8(av, 0x10 + i, g.dgid[i]);
    for (size_t i = 0; i < 6; ++i) put8(av, 0x20 + i, g.dmac[i]);
  }
  struct Path {
    std::optional<Grh> grh;  // the path's GRH (RoCE: required)
    uint16_t dlid = 0;
    uint32_t dest_qpn = 0;
    uint8_t mtu = 5, timeout = 10, retry_cnt = 7, rnr_retry = 7, min_rnr_timer = 1;
    uint8_t access = kMrRemoteWrite | kMrRemoteRead | kMrRemoteAtomic;
    uint32_t qkey = 0x11111111;
    uint32_t psn = 0;
  };
  void modify(uint32_t qpn, uint32_t mask, const std::function<void(std::span<std::byte>)>& fill,
              uint8_t want = kOk) {
    Bytes in(96);
    put32(in, 0, qpn);
    put32(in, 4, mask);
    fill(std::span<std::byte>(in).subspan(0x10));
    cmd(kOpModifyQp, in, want);
  }
  // RESET -> INIT -> RTR -> RTS with the attributes §8.2 requires.
  void connect(const TQp& q, const Path& p) {
    using namespace attr;
    const bool ud = q.type == kQpUd;
    modify(q.qpn, kState | kPkeyIndex | kPort | (ud ? kQkey : kAccessFlags), [&](auto a) {
      put8(a, 0, kInit);
      put8(a, 2, 1);
      put8(a, 6, p.access);
      put32(a, 8, p.qkey);
    });
    uint32_t m = kState;
    if (q.type == kQpRc) m |= kAv | kPathMtu | kDestQpn | kRqPsn | kMaxDestRdAtomic | kMinRnrTimer;
    if (q.type == kQpUc) m |= kAv | kPathMtu | kDestQpn | kRqPsn;
    modify(q.qpn, m, [&](auto a) {
      put8(a, 0, kRtr);
      put8(a, 3, p.mtu);
      put32(a, 0x0c, p.dest_qpn);
      put32(a, 0x10, p.psn);
      put8(a, 0x1b, p.min_rnr_timer);
      put8(a, 0x1d, 16);
      put16(a, 0x20, p.dlid);
      put8(a, 0x25, 1);
      if (p.grh) put_grh(a.subspan(0x20, 48), *p.grh);
    });
    m = kState | kSqPsn;
    if (q.type == kQpRc) m |= kTimeout | kRetryCnt | kRnrRetry | kMaxQpRdAtomic;
    modify(q.qpn, m, [&](auto a) {
      put8(a, 0, kRts);
      put32(a, 0x14, p.psn);
      put8(a, 0x18, p.timeout);
      put8(a, 0x19, p.retry_cnt);
      put8(a, 0x1a, p.rnr_retry);
      put8(a, 0x1c, 16);
    });
  }
  void to_state(uint32_t qpn, uint8_t s) {
    modify(qpn, attr::kState, [&](auto a) { put8(a, 0, s); });
  }

  uint32_t create_ah(uint16_t dlid, uint32_t pdn = UINT32_MAX) { return create_ah(dlid, std::nullopt, pdn); }
  uint32_t create_ah(uint16_t dlid, const std::optional<Grh>& grh, uint32_t pdn = UINT32_MAX,
                     uint8_t want = kOk) {
    Bytes in(56);
    put32(in, 0, pdn == UINT32_MAX ? pd : pdn);
    put16(in, 8, dlid);
    put8(in, 8 + 5, 1);
    if (grh) put_grh(std::span<std::byte>(in).subspan(8, 48), *grh);
    Bytes out = cmd(kOpCreateAh, in, want);
    return want == kOk ? num(out) : 0;
  }

  // ---- §12.1 send WQEs, written from the manual's table ----
  struct Wr {
    uint8_t opcode = kWrSend, flags = kWqeSignaled;
    uint32_t imm = 0;
    uint64_t wr_id = 0;
    uint32_t ahn = 0, dest_qpn = 0, qkey = 0;
    uint64_t remote_va = 0;
    uint32_t rkey = 0;
    uint64_t swap_add = 0, compare = 0;
    std::vector<Sge> sges;
    Bytes inline_data;
  };
  static Bytes encode_wqe(const Wr& wr, uint8_t qp_type) {
    Bytes w(16);
    auto seg = [&]() {
      w.resize(w.size() + 16);
      return std::span<std::byte>(w).last(16);
    };
    if (qp_type == kQpUd) {
      auto s = seg();
      put32(s, 0, wr.ahn);
      put32(s, 4, wr.dest_qpn);
      put32(s, 8, wr.qkey);
    }
    if (wr.opcode >= kWrWrite) {
      auto s = seg();
      put64(s, 0, wr.remote_va);
      put32(s, 8, wr.rkey);
    }
    if (wr.opcode >= kWrCmpSwap) {
      auto s = seg();
      put64(s, 0, wr.swap_add);
      put64(s, 8, wr.compare);
    }
    if (wr.flags & kWqeInline) {
      const size_t at = w.size();
      w.resize(at + ((4 + wr.inline_data.size() + 15) & ~size_t{15}));
      put32(w, at, kInlineMark | wr.inline_data.size());
      std::copy(wr.inline_data.begin(), wr.inline_data.end(), w.begin() + static_cast<ptrdiff_t>(at + 4));
    } else {
      for (const Sge& g : wr.sges) {
        auto s = seg();
        put32(s, 0, g.length);
        put32(s, 4, g.lkey);
        put64(s, 8, g.addr);
      }
    }
    put8(w, 0, wr.opcode);
    put8(w, 1, wr.flags);
    put8(w, 2, w.size() / 16);
    put32(w, 4, wr.imm);
    put64(w, 8, wr.wr_id);
    return w;
  }
  // Writes the WQE, the doorbell record, then rings SQ_DOORBELL (§12.3).
  void post_send(TQp& q, const Wr& wr) { post_raw(q, encode_wqe(wr, q.type)); }
  void post_raw(TQp& q, const Bytes& wqe) {
    const size_t stride = size_t{1} << q.sq_stride;
    REQUIRE(wqe.size() <= stride);
    auto slot = mem(q.sq + ((q.sq_pi & ((1u << q.log_sq) - 1)) << q.sq_stride), stride);
    std::fill(slot.begin(), slot.end(), std::byte{0});
    std::copy(wqe.begin(), wqe.end(), slot.begin());
    ++q.sq_pi;
    put32(mem(q.dbr, 8), 4, q.sq_pi);
    hca.uar_write64(0, kUarSqDoorbell, (uint64_t{q.sq_pi} << 32) | q.qpn);
  }
  // §12.2: receive WQE, then the producer counter in the doorbell record.
  void post_recv(TQp& q, uint64_t wr_id, const std::vector<Sge>& sges) {
    const size_t stride = size_t{1} << q.rq_stride;
    auto slot = mem(q.rq + ((q.rq_pi & ((1u << q.log_rq) - 1)) << q.rq_stride), stride);
    write_rwqe(slot, wr_id, sges);
    ++q.rq_pi;
    put32(mem(q.dbr, 8), 0, q.rq_pi);
  }
  void post_srq(TSrq& s, uint64_t wr_id, const std::vector<Sge>& sges) {
    auto slot = mem(s.ring + ((s.pi & ((1u << s.log_size) - 1)) << s.stride), size_t{1} << s.stride);
    write_rwqe(slot, wr_id, sges);
    ++s.pi;
    put32(mem(s.dbr, 8), 0, s.pi);
  }
  static void write_rwqe(std::span<std::byte> slot, uint64_t wr_id, const std::vector<Sge>& sges) {
    std::fill(slot.begin(), slot.end(), std::byte{0});
    put64(slot, 0, wr_id);
    put8(slot, 8, sges.size());
    for (size_t i = 0; i < sges.size(); ++i) {
      put32(slot, 16 * (i + 1), sges[i].length);
      put32(slot, 16 * (i + 1) + 4, sges[i].lkey);
      put64(slot, 16 * (i + 1) + 8, sges[i].addr);
    }
  }

  // §12.4 poll: the owner bit against the consumer's phase.
  std::vector<Cqe> poll(TCq& c) {
    std::vector<Cqe> out;
    for (;;) {
      auto e = mem(c.ring + uint64_t{c.ci & ((1u << c.log_size) - 1)} * 64, 64);
      if ((get8(e, 63) & 1) != (((c.ci >> c.log_size) & 1) ^ 1)) break;
      out.push_back(decode_cqe(e));
      ++c.ci;
      put32(mem(c.dbr, 8), 0, c.ci);
    }
    return out;
  }

  FakeHost host;
  Hca hca;
  uint32_t pd = 0;
  TCq cq;
  uint16_t lid() const { return lid_; }

 private:
  uint16_t lid_;
  uint64_t bump_ = FakeHost::kBase;
};

// Two nodes, LIDs 1 and 2, cabled back to back. Or two nodes with the
// options given (Ethernet ports: §16) on a pair of the framing given.
class Wire {
 public:
  using Clock = Hca::Clock;
  Wire() : pair(sim::make_loopback_pair()) { cable(); }
  Wire(const HcaOptions& oa, const HcaOptions& ob, sim::LoopbackFraming framing)
      : a(0, 24u << 20, oa), b(0, 24u << 20, ob), pair(sim::make_loopback_pair(framing)) {
    cable();
  }
  ~Wire() {
    a.hca.attach_link(1, nullptr);
    b.hca.attach_link(1, nullptr);
  }
  // Runs both devices and the wire until `done` or the virtual deadline;
  // when the wire is idle, time jumps to the next timer.
  bool run(const std::function<bool()>& done, std::chrono::milliseconds limit = std::chrono::seconds(60)) {
    const auto end = now + limit;
    while (now < end) {
      a.hca.run_due(now);
      b.hca.run_due(now);
      const size_t moved = pair->pump();
      if (done()) return true;
      if (moved) continue;
      auto da = a.hca.next_due(), db = b.hca.next_due();
      auto next = end;
      if (da && *da > now) next = std::min(next, *da);
      if (db && *db > now) next = std::min(next, *db);
      if ((da && *da <= now) || (db && *db <= now)) next = now;
      now = next == now ? now + std::chrono::microseconds(1) : next;
    }
    return done();
  }

  Node a{1}, b{2};
  std::unique_ptr<sim::LoopbackPair> pair;
  Clock::time_point now{};
  // Called with each packet (frame) the pair delivers, before the device
  // takes it: `to_b` tells the direction.
  std::function<void(bool to_b, std::span<const std::byte>)> tap;

 private:
  void cable() {
    pair->a().set_receiver([this](std::span<const std::byte> p) {
      if (tap) tap(false, p);
      a.hca.receive_packet(p, now);
    });
    pair->b().set_receiver([this](std::span<const std::byte> p) {
      if (tap) tap(true, p);
      b.hca.receive_packet(p, now);
    });
    a.hca.attach_link(1, &pair->a());
    b.hca.attach_link(1, &pair->b());
  }
};

}  // namespace openib::test
