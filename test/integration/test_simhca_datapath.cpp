// Data moved between two simhca processes cabled back to back over UDP on
// 127.0.0.1 (docs/simhca.md §12, §13 --port1), driven by the driver
// (src/hca): every operation on RC, UC and UD, data checked byte for byte,
// at every MTU; RC under injected faults.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <cstdio>
#include <cstring>
#include <thread>

#include "test_simhca_fixture.hpp"

using namespace openib;
using namespace openib::test;
using hca::QpType;
using hca::SendWr;
using hca::WrOpcode;

namespace {

// A free UDP port on 127.0.0.1 (bound, read, released).
uint16_t free_udp_port() {
  int s = ::socket(AF_INET, SOCK_DGRAM, 0);
  REQUIRE(s >= 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  socklen_t l = sizeof a;
  REQUIRE(::getsockname(s, reinterpret_cast<sockaddr*>(&a), &l) == 0);
  ::close(s);
  return ntohs(a.sin_port);
}

std::vector<std::string> port_args(uint16_t local, uint16_t peer, std::string faults) {
  std::vector<std::string> v{"--port1", fmt::format("LOCAL=127.0.0.1:{},PEER=127.0.0.1:{}", local, peer)};
  if (!faults.empty()) {
    v.push_back("--faults");
    v.push_back(faults);
  }
  return v;
}

constexpr size_t kBuf = 4u << 20;

// One device: port Active with its LID, a PD, a CQ and a registered 4 MiB
// buffer whose virtual addresses are this process's pointers.
struct Side {
  Side(uint16_t lid, std::vector<std::string> args) : f(std::move(args)), lid(lid) {
    hca::PortSetup ps;
    ps.state = hca::kPortActive;
    ps.lid = lid;
    REQUIRE(f.hca->set_port(1, ps).ok());
    pd = must(f.hca->alloc_pd());
    cq = must(f.hca->create_cq(12));
    buf = must(f.hca->pool().alloc(kBuf, 4096));
    hca::MkeyParams mp;
    mp.pdn = pd;
    mp.access = hca::kAccessLocalWrite | hca::kAccessRemoteWrite | hca::kAccessRemoteRead |
                hca::kAccessRemoteAtomic;
    mp.start_va = reinterpret_cast<uint64_t>(buf.data());
    mp.length = kBuf;
    // Two mkeys of 1024 pages each (max_mkey_pages, §6.1): lower and upper half.
    mp.length = kBuf / 2;
    for (uint64_t i = 0; i < kBuf / 2 / 4096; ++i) mp.pages.push_back(buf.iova() + i * 4096);
    lo = must(f.hca->create_mkey(mp));
    mp.start_va += kBuf / 2;
    for (auto& p : mp.pages) p += kBuf / 2;
    hi = must(f.hca->create_mkey(mp));
  }
  template <typename T>
  static T must(Result<T> r) {
    if (!r) FAIL(r.error().str());
    return std::move(r).value();
  }
  std::byte* p(size_t off) { return static_cast<std::byte*>(buf.data()) + off; }
  uint64_t va(size_t off) { return reinterpret_cast<uint64_t>(p(off)); }
  uint32_t key(size_t off) { return off < kBuf / 2 ? lo.lkey : hi.lkey; }

  hca::Qp qp(QpType t) {
    hca::QpInit in;
    in.type = t;
    in.pdn = pd;
    in.send_cqn = in.recv_cqn = cq.cqn;
    in.log_sq_size = 6;
    in.log_sq_stride = 10;  // room for 512 bytes of inline data (§12.1)
    in.log_rq_size = 6;
    in.log_rq_stride = 7;
    return must(f.hca->create_qp(in));
  }
  // RESET -> INIT -> RTR -> RTS (§8.2).
  // psn: the first PSN each way (sq_psn and rq_psn; the peer's the same).
  void connect(const hca::Qp& q, uint16_t dlid, uint32_t dest_qpn, uint8_t mtu, uint8_t retry_cnt = 7,
               uint8_t timeout = 12, uint32_t psn = 0) {
    using namespace hca::qp_attr;
    hca::QpAttr a;
    a.sq_psn = a.rq_psn = psn;
    a.port = 1;
    a.qkey = 0x11111111;
    a.access = hca::kAccessRemoteWrite | hca::kAccessRemoteRead | hca::kAccessRemoteAtomic;
    a.path_mtu = mtu;
    a.dest_qpn = dest_qpn;
    a.av.dlid = dlid;
    a.av.port = 1;
    a.timeout = timeout;  // 12: 16.8 ms
    a.retry_cnt = retry_cnt;
    a.rnr_retry = 7;
    a.min_rnr_timer = 1;
    a.max_rd_atomic = a.max_dest_rd_atomic = 16;
    const bool ud = q.type == QpType::kUd, rc = q.type == QpType::kRc;
    a.state = hca::QpState::kInit;
    REQUIRE(f.hca->modify_qp(q.qpn, kState | kPkeyIndex | kPort | (ud ? kQkey : kAccessFlags), a).ok());
    a.state = hca::QpState::kRtr;
    uint32_t m = kState;
    if (!ud) m |= kAv | kPathMtu | kDestQpn | kRqPsn;
    if (rc) m |= kMaxDestRdAtomic | kMinRnrTimer;
    REQUIRE(f.hca->modify_qp(q.qpn, m, a).ok());
    a.state = hca::QpState::kRts;
    m = kState | kSqPsn;
    if (rc) m |= kTimeout | kRetryCnt | kRnrRetry | kMaxQpRdAtomic;
    REQUIRE(f.hca->modify_qp(q.qpn, m, a).ok());
  }
  // Polls (busy, bounded) until n completions arrived.
  std::vector<hca::WorkCompletion> wait(size_t n, int timeout_ms = 20000) {
    std::vector<hca::WorkCompletion> got;
    const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (got.size() < n && std::chrono::steady_clock::now() < end) {
      for (auto& c : f.hca->poll_cq(cq)) got.push_back(c);
      if (got.size() < n) std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    return got;
  }

  HcaFixture f;
  uint16_t lid;
  uint32_t pd = 0;
  hca::Cq cq;
  dma::DmaBuffer buf;
  hca::Mkey lo, hi;
};

struct Cable {
  explicit Cable(std::string faults = "") : pa(free_udp_port()), pb(free_udp_port()),
    a(1, port_args(pa, pb, faults)), b(2, port_args(pb, pa, faults)) {}
  uint16_t pa, pb;
  Side a, b;
};

// Two simhca processes on a shared-memory cable (docs/cables.md).
struct ShmCable {
  static std::string file() { return "/dev/shm/openib-test-cable-" + std::to_string(::getpid()); }
  ShmCable() : path(file()), a(1, {"--port1", "SHM=" + path + ",END=A"}), b(2, {"--port1", "SHM=" + path + ",END=B"}) {}
  ~ShmCable() { ::unlink(path.c_str()); }
  std::string path;
  Side a, b;
};

void fill(std::byte* p, size_t n, uint32_t seed) {
  uint32_t x = seed * 2654435761u + 7;
  for (size_t i = 0; i < n; ++i) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    p[i] = std::byte(static_cast<uint8_t>(x));
  }
}

void check_one(const std::vector<hca::WorkCompletion>& c, uint8_t opcode, uint32_t len = UINT32_MAX) {
  REQUIRE(c.size() == 1);
  CHECK(int(c[0].status) == hca::kWcSuccess);
  CHECK(int(c[0].opcode) == opcode);
  if (len != UINT32_MAX) CHECK(c[0].byte_len == len);
}

}  // namespace

TEST_CASE("simhca data path over UDP: RC, UC, UD, every operation, every MTU", "[simhca][datapath]") {
  Cable c;
  auto& A = c.a;
  auto& B = c.b;
  const size_t off_dst = kBuf / 2;  // b receives into its upper half
  uint64_t id = 0;
  constexpr int kUcAttempts = 5;
  int uc_lost = 0;  // UC messages lost on the loopback cable and sent again
  for (uint8_t code = 1; code <= 5; ++code) {
    const uint32_t mtu = 128u << code;
    for (Side* s : {&A, &B}) {  // UD messages use the port MTU (§12.7)
      hca::PortSetup ps;
      ps.active_mtu = code;
      REQUIRE(s->f.hca->set_port(1, ps).ok());
    }
    hca::Qp rca = A.qp(QpType::kRc), rcb = B.qp(QpType::kRc);
    hca::Qp uca = A.qp(QpType::kUc), ucb = B.qp(QpType::kUc);
    hca::Qp uda = A.qp(QpType::kUd), udb = B.qp(QpType::kUd);
    A.connect(rca, 2, rcb.qpn, code);
    B.connect(rcb, 1, rca.qpn, code);
    A.connect(uca, 2, ucb.qpn, code);
    B.connect(ucb, 1, uca.qpn, code);
    A.connect(uda, 0, 0, code);
    B.connect(udb, 0, 0, code);
    hca::AddressVector av;
    av.dlid = 2;
    const uint32_t ah = Side::must(A.f.hca->create_ah(A.pd, av));

    for (size_t len : {size_t{0}, size_t{1}, size_t{mtu - 1}, size_t{mtu}, size_t{mtu + 1}, size_t{1} << 20}) {
      INFO("MTU " << mtu << " length " << len);
      const auto n = static_cast<uint32_t>(len);
      auto sge_a = [&]() { return hca::Sge{A.va(0), n, A.key(0)}; };
      auto sge_b = [&]() { return hca::Sge{B.va(off_dst), n + 64, B.key(off_dst)}; };
      auto same = [&](size_t off_b, size_t off_a = 0) {
        return std::memcmp(B.p(off_b), A.p(off_a), len) == 0;
      };
      for (hca::Qp* q : {&rca, &uca}) {
        const bool rc = q == &rca;
        hca::Qp& peer = rc ? rcb : ucb;
        INFO((rc ? "RC" : "UC"));
        // UC promises no delivery (IBA 9.8.3: a message with a lost packet
        // is dropped whole, and the receive WQE reused). Over a loopback UDP
        // cable the kernel drops datagrams when a receiver is descheduled
        // (the netdev backlog overflows), so UC operations are retried,
        // bounded and counted; RC must deliver at the first attempt.
        // Returns the receive completions of the attempt that arrived.
        auto deliver = [&](auto&& post, uint8_t sender_opcode, bool expect_recv,
                           auto&& arrived) {
          std::vector<hca::WorkCompletion> rx;
          for (int attempt = 0; attempt < (rc ? 1 : kUcAttempts); ++attempt) {
            REQUIRE(post());
            check_one(A.wait(1), sender_opcode);
            if (expect_recv) {
              rx = B.wait(1, rc ? 20000 : 3000);
              if (!rx.empty()) break;
            } else if (arrived()) {
              break;
            }
            uc_lost++;
          }
          return rx;
        };
        auto arrived_at = [&](size_t off_b) {
          return [&, off_b] {
            auto end = std::chrono::steady_clock::now() + std::chrono::seconds(rc ? 0 : 3);
            while (!same(off_b) && std::chrono::steady_clock::now() < end)
              std::this_thread::sleep_for(std::chrono::milliseconds(1));
            return same(off_b);
          };
        };
        auto never = [] { return false; };
        // SEND with immediate
        fill(A.p(0), len, static_cast<uint32_t>(++id));
        REQUIRE(B.f.hca->post_recv(peer, {++id, {sge_b()}}).ok());
        SendWr s;
        s.wr_id = id;
        s.opcode = WrOpcode::kSendImm;
        s.imm = static_cast<uint32_t>(id);
        s.sg = {sge_a()};
        auto rx = deliver([&] { return A.f.hca->post_send(*q, s).ok(); }, hca::kWcSend, true, never);
        check_one(rx, hca::kWcRecv, n);
        CHECK(rx[0].imm == id);
        CHECK(same(off_dst));
        // SEND inline (up to max_inline)
        if (len <= 512) {
          fill(A.p(0), len, static_cast<uint32_t>(++id));
          REQUIRE(B.f.hca->post_recv(peer, {++id, {sge_b()}}).ok());
          s.opcode = WrOpcode::kSend;
          s.inline_data = true;
          check_one(deliver([&] { return A.f.hca->post_send(*q, s).ok(); }, hca::kWcSend, true, never),
                    hca::kWcRecv, n);
          CHECK(same(off_dst));
          s.inline_data = false;
        }
        // RDMA WRITE, then WRITE with immediate
        fill(A.p(0), len, static_cast<uint32_t>(++id));
        SendWr w;
        w.wr_id = ++id;
        w.opcode = WrOpcode::kWrite;
        w.sg = {sge_a()};
        w.remote_addr = B.va(off_dst + 16);
        w.rkey = B.key(off_dst);
        // UC: no ACK; the data is there once the peer took it.
        deliver([&] { return A.f.hca->post_send(*q, w).ok(); }, hca::kWcRdmaWrite, false,
                arrived_at(off_dst + 16));
        CHECK(same(off_dst + 16));
        fill(A.p(0), len, static_cast<uint32_t>(++id));
        REQUIRE(B.f.hca->post_recv(peer, {++id, {}}).ok());
        w.opcode = WrOpcode::kWriteImm;
        w.imm = 0xabcd;
        rx = deliver([&] { return A.f.hca->post_send(*q, w).ok(); }, hca::kWcRdmaWrite, true, never);
        check_one(rx, hca::kWcRecvRdmaWithImm, n);
        CHECK(rx[0].imm == 0xabcd);
        CHECK(same(off_dst + 16));
        if (!rc) continue;
        // RDMA READ back into a's second MiB
        SendWr r;
        r.wr_id = ++id;
        r.opcode = WrOpcode::kRead;
        r.sg = {hca::Sge{A.va(1u << 20), n, A.key(1u << 20)}};
        r.remote_addr = B.va(off_dst + 16);
        r.rkey = B.key(off_dst);
        REQUIRE(A.f.hca->post_send(*q, r).ok());
        check_one(A.wait(1), hca::kWcRdmaRead, n);
        CHECK(std::memcmp(A.p(1u << 20), A.p(0), len) == 0);
      }
      // UD: one packet at most (IBA 9.8.4); 40 bytes of GRH area first.
      if (len <= mtu) {
        fill(A.p(0), len, static_cast<uint32_t>(++id));
        REQUIRE(B.f.hca->post_recv(udb, {++id, {hca::Sge{B.va(off_dst), n + 40, B.key(off_dst)}}}).ok());
        SendWr s;
        s.wr_id = id;
        s.opcode = WrOpcode::kSend;
        s.sg = {sge_a()};
        s.ahn = ah;
        s.remote_qpn = udb.qpn;
        REQUIRE(A.f.hca->post_send(uda, s).ok());
        auto rx = B.wait(1);
        check_one(rx, hca::kWcRecv, n + 40);
        CHECK(rx[0].src_qp == uda.qpn);
        CHECK(rx[0].slid == 1);
        check_one(A.wait(1), hca::kWcSend);
        CHECK(same(off_dst + 40));
      }
    }
    // Atomics on RC (8-byte aligned, host byte order, §12.6).
    uint64_t v = 100;
    std::memcpy(B.p(off_dst), &v, 8);
    SendWr at;
    at.wr_id = ++id;
    at.opcode = WrOpcode::kFetchAdd;
    at.sg = {hca::Sge{A.va(64), 8, A.key(64)}};
    at.remote_addr = B.va(off_dst);
    at.rkey = B.key(off_dst);
    at.swap_add = 11;
    REQUIRE(A.f.hca->post_send(rca, at).ok());
    check_one(A.wait(1), hca::kWcFetchAdd, 8);
    at.opcode = WrOpcode::kCmpSwap;
    at.compare = 111;
    at.swap_add = 5;
    REQUIRE(A.f.hca->post_send(rca, at).ok());
    check_one(A.wait(1), hca::kWcCompSwap, 8);
    std::memcpy(&v, A.p(64), 8);
    CHECK(v == 111);
    std::memcpy(&v, B.p(off_dst), 8);
    CHECK(v == 5);
    for (hca::Qp* q : {&rca, &uca, &uda}) REQUIRE(A.f.hca->destroy_qp(*q).ok());
    for (hca::Qp* q : {&rcb, &ucb, &udb}) REQUIRE(B.f.hca->destroy_qp(*q).ok());
    if (uc_lost) std::printf("MTU %u: %d UC messages lost on the cable and sent again\n", mtu, uc_lost);
    REQUIRE(A.f.hca->destroy_ah(ah).ok());
  }
}

TEST_CASE("simhca data path over UDP: RC under 5% loss, duplication, reordering, 1% corruption",
          "[simhca][datapath][faults]") {
  Cable c("drop=0.05,dup=0.05,reorder=0.05,corrupt=0.01,seed=7");
  auto& A = c.a;
  auto& B = c.b;
  hca::Qp qa = A.qp(QpType::kRc), qb = B.qp(QpType::kRc);
  A.connect(qa, 2, qb.qpn, 3);
  B.connect(qb, 1, qa.qpn, 3);
  constexpr int kMsgs = 48;
  fill(A.p(0), kBuf / 2, 99);
  size_t off = 0;
  std::vector<size_t> lens;
  for (int i = 0; i < kMsgs; ++i) {
    const size_t len = (i * 7919u) % 20000 + 1;
    lens.push_back(len);
    REQUIRE(B.f.hca->post_recv(qb, {uint64_t(i), {hca::Sge{B.va(off), uint32_t(len), B.key(off)}}}).ok());
    off += len;
  }
  off = 0;
  int posted = 0, done = 0;
  std::vector<hca::WorkCompletion> rx;
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while ((done < kMsgs || rx.size() < kMsgs) && std::chrono::steady_clock::now() < end) {
    while (posted < kMsgs && posted - done < 32) {  // within the 64-entry SQ
      SendWr s;
      s.wr_id = posted;
      s.sg = {hca::Sge{A.va(off), uint32_t(lens[posted]), A.key(off)}};
      REQUIRE(A.f.hca->post_send(qa, s).ok());
      off += lens[posted++];
    }
    for (auto& e : A.f.hca->poll_cq(A.cq)) {
      CHECK(int(e.status) == hca::kWcSuccess);
      CHECK(e.wr_id == uint64_t(done));
      ++done;
    }
    for (auto& e : B.f.hca->poll_cq(B.cq)) rx.push_back(e);
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  REQUIRE(done == kMsgs);
  REQUIRE(rx.size() == kMsgs);
  for (int i = 0; i < kMsgs; ++i) {
    CHECK(int(rx[i].status) == hca::kWcSuccess);
    CHECK(rx[i].wr_id == uint64_t(i));
    CHECK(rx[i].byte_len == lens[i]);
  }
  CHECK(std::memcmp(B.p(0), A.p(0), off) == 0);
}

// §12.8 and docs/cables.md: the shared-memory cable's ring holds 128
// packets, one QP's window. READ responses for four QPs at once, four
// times that, then the ACK of a SEND queued behind them, must be paced by
// the cable's credits, not dropped: with retry_cnt 0 a single lost packet
// would end in a retry-exceeded error (IBA 9.7.6.1.3) instead of these
// completions.
TEST_CASE("simhca over a shared-memory cable: READ and WRITE bursts beyond the ring are paced, not dropped",
          "[simhca][datapath][shm]") {
  ShmCable c;
  auto& A = c.a;
  auto& B = c.b;
  constexpr int kQps = 4;
  constexpr uint8_t kNoRetry = 0, kTimeout1s = 18;  // 4.096 us * 2^18
  std::vector<hca::Qp> qa, qb;
  for (int q = 0; q < kQps; ++q) {
    qa.push_back(A.qp(QpType::kRc));
    qb.push_back(B.qp(QpType::kRc));
  }
  for (int q = 0; q < kQps; ++q) {
    A.connect(qa[q], 2, qb[q].qpn, 5, kNoRetry, kTimeout1s);
    B.connect(qb[q], 1, qa[q].qpn, 5, kNoRetry, kTimeout1s);
  }
  constexpr int kReads = 16;           // four per QP: each QP's 128-packet window
  constexpr size_t kLen = 128u << 10;  // 32 packets of 4096 bytes each: 512 in all
  fill(B.p(0), kReads * kLen, 5);
  fill(A.p(0), 64, 6);
  REQUIRE(B.f.hca->post_recv(qb[0], {1000, {hca::Sge{B.va(kBuf / 2), 64, B.key(kBuf / 2)}}}).ok());
  for (int i = 0; i < kReads; ++i) {
    SendWr r;
    r.wr_id = uint64_t(i);
    r.opcode = WrOpcode::kRead;
    r.sg = {hca::Sge{A.va(kBuf / 2 + i * kLen), uint32_t(kLen), A.key(kBuf / 2)}};
    r.remote_addr = B.va(i * kLen);
    r.rkey = B.key(0);
    REQUIRE(A.f.hca->post_send(qa[i % kQps], r).ok());
  }
  SendWr s;  // behind QP 0's READs
  s.wr_id = 999;
  s.sg = {hca::Sge{A.va(0), 64, A.key(0)}};
  REQUIRE(A.f.hca->post_send(qa[0], s).ok());

  auto got = A.wait(kReads + 1);
  REQUIRE(got.size() == kReads + 1);
  std::vector<uint64_t> qp0;
  for (const auto& e : got) {
    INFO("wr_id " << e.wr_id);
    CHECK(int(e.status) == hca::kWcSuccess);
    if (e.wr_id == 999 || e.wr_id % kQps == 0) qp0.push_back(e.wr_id);
  }
  CHECK(qp0 == std::vector<uint64_t>{0, 4, 8, 12, 999});  // in order, the SEND last
  CHECK(std::memcmp(A.p(kBuf / 2), B.p(0), kReads * kLen) == 0);
  auto rx = B.wait(1);
  check_one(rx, hca::kWcRecv, 64);
  CHECK(std::memcmp(B.p(kBuf / 2), A.p(0), 64) == 0);

  // The requester's side: WRITEs from the four QPs at once, 512 packets,
  // sent no faster than the cable takes them.
  fill(A.p(0), kReads * kLen, 7);
  for (int i = 0; i < kReads; ++i) {
    SendWr w;
    w.wr_id = uint64_t(100 + i);
    w.opcode = WrOpcode::kWrite;
    w.sg = {hca::Sge{A.va(i * kLen), uint32_t(kLen), A.key(0)}};
    w.remote_addr = B.va(kBuf / 2 + i * kLen);
    w.rkey = B.key(kBuf / 2);
    REQUIRE(A.f.hca->post_send(qa[i % kQps], w).ok());
  }
  got = A.wait(kReads);
  REQUIRE(got.size() == kReads);
  for (const auto& e : got) {
    INFO("wr_id " << e.wr_id);
    CHECK(int(e.status) == hca::kWcSuccess);
  }
  CHECK(std::memcmp(B.p(kBuf / 2), A.p(0), kReads * kLen) == 0);
}

namespace {

// The slots one end of a shared-memory cable has sent: its ring's head in
// the cable file (src/sim/cable/shm_link.cpp, file format version 5: the
// two ring control blocks of 256 bytes at 4096, end A's ring first, its
// head the first word; the head counts slots, not packets). A packet alone
// takes one slot, a segment (docs/cables.md "Segments") the slots its
// bytes fill: fewer slots than packets shows that segments were sent.
class ShmSlotsSent {
 public:
  ShmSlotsSent(const std::string& path, char end) : ring_(end == 'A' ? 4096 : 4096 + 256) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    REQUIRE(fd >= 0);
    void* p = ::mmap(nullptr, kMapped, PROT_READ, MAP_SHARED, fd, 0);
    ::close(fd);
    REQUIRE(p != MAP_FAILED);
    base_ = static_cast<std::byte*>(p);
    uint64_t magic = 0;
    uint32_t version = 0;
    std::memcpy(&magic, base_, 8);
    std::memcpy(&version, base_ + 8, 4);
    REQUIRE(magic == 0x314d48534249504fULL);  // "OPIBSHM1"
    REQUIRE(version == 5);                    // the layout read here
  }
  ~ShmSlotsSent() { ::munmap(base_, kMapped); }
  ShmSlotsSent(const ShmSlotsSent&) = delete;
  ShmSlotsSent& operator=(const ShmSlotsSent&) = delete;
  uint64_t operator()() const {
    return std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(base_ + ring_)).load(std::memory_order_acquire);
  }

 private:
  static constexpr size_t kMapped = 8192;
  size_t ring_;
  std::byte* base_ = nullptr;
};

constexpr std::byte kPoison{0xa5};
constexpr size_t kGap = 128;  // poisoned bytes after each message at least

// A batch's messages: message i at offset off[i] of a's lower half (its
// source) and of b's upper half (its destination), 64-aligned plus 0, 4, 8
// or 12 bytes, kGap bytes or more apart.
struct Layout {
  std::vector<size_t> len, off;
  size_t end = 0;
};

Layout layout(const std::vector<size_t>& lens) {
  Layout l;
  size_t at = 0;
  for (size_t i = 0; i < lens.size(); ++i) {
    at = (at + 63) / 64 * 64 + (i % 4) * 4;
    l.off.push_back(at);
    l.len.push_back(lens[i]);
    at += lens[i] + kGap;
  }
  l.end = at;
  REQUIRE(l.end <= kBuf / 2);  // each message in one mkey
  return l;
}

size_t packets(size_t len, size_t mtu) { return len == 0 ? 1 : (len + mtu - 1) / mtu; }
// §12.8: an RC message's packets with AckReq, every 32nd and the last; the
// responder answers each with one ACK.
size_t ack_reqs(size_t len, size_t mtu) { return (packets(len, mtu) + 31) / 32; }

// b's upper half against what it must hold: each message's source bytes
// at its offset, the poison everywhere else. The first wrong byte,
// described (with its packet), or "" if all are right.
std::string first_wrong(Side& A, Side& B, const Layout& l, size_t mtu) {
  static const std::vector<std::byte> poison(kBuf / 2, kPoison);
  const std::byte* dst = B.p(kBuf / 2);
  size_t pos = 0;
  for (size_t i = 0; i <= l.len.size(); ++i) {
    const size_t start = i < l.len.size() ? l.off[i] : kBuf / 2;
    if (std::memcmp(dst + pos, poison.data(), start - pos) != 0) {
      while (dst[pos] == kPoison) ++pos;
      return fmt::format("byte {} of b's upper half, outside every message, was written ({:#04x})", pos,
                         std::to_integer<int>(dst[pos]));
    }
    if (i == l.len.size()) break;
    pos = start;
    const std::byte* src = A.p(start);
    if (std::memcmp(dst + pos, src, l.len[i]) != 0) {
      size_t j = 0;
      while (dst[pos + j] == src[j]) ++j;
      return fmt::format("message {} ({} bytes, {} packets): byte {} (packet {}, its byte {}) is {:#04x}, not {:#04x}",
                         i, l.len[i], packets(l.len[i], mtu), j, j / mtu, j % mtu, std::to_integer<int>(dst[pos + j]),
                         std::to_integer<int>(src[j]));
    }
    pos += l.len[i];
  }
  return "";
}

// Polls (bounded) until b's upper half is right: UC WRITEs complete at the
// sender once sent, not once placed.
std::string wait_right(Side& A, Side& B, const Layout& l, size_t mtu, int timeout_ms = 5000) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  std::string wrong = first_wrong(A, B, l, mtu);
  while (!wrong.empty() && std::chrono::steady_clock::now() < end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    wrong = first_wrong(A, B, l, mtu);
  }
  return wrong;
}

}  // namespace

// §12.8, docs/cables.md "Segments": on the shared-memory cable the RC and
// UC requester hands a run of full-MTU packets of one SEND or WRITE to the
// link as one segment; the receiving end rebuilds each packet (PSN + i,
// OpCode Middle, the last one's OpCode, SE and AckReq). A segment ends at
// the first packet with AckReq (every 32nd of a message and its last), and
// a last packet with ImmDt goes alone: the lengths below put message ends,
// partial last packets (pad 1 to 3) and ImmDt packets on and around those
// edges, at every MTU. RC runs with retry_cnt 0: a packet lost, repeated
// or out of sequence ends in an error completion, not a retry. Every
// destination byte is checked, and that nothing around the messages was
// written; the PSNs wrap inside a segment. Then four QPs (two RC, two UC) stream WRITEs at once, their
// posts interleaved: their segments share the ring and must not mix.
TEST_CASE("simhca over a shared-memory cable: multi-packet SEND and WRITE, RC and UC, every MTU, arrive whole (segments)",
          "[simhca][datapath][shm]") {
  ShmCable c;
  auto& A = c.a;
  auto& B = c.b;
  const ShmSlotsSent slots_sent(c.path, 'A'), acks_sent(c.path, 'B');  // b sends nothing but ACKs
  constexpr uint8_t kNoRetry = 0, kTimeout1s = 18;  // 4.096 us * 2^18
  const size_t half = kBuf / 2;
  uint32_t seed = 1000;
  for (uint8_t code = 1; code <= 5; ++code) {
    const size_t mtu = 128u << code;
    INFO("MTU " << mtu);
    hca::Qp rc[2] = {A.qp(QpType::kRc), A.qp(QpType::kRc)}, rcb[2] = {B.qp(QpType::kRc), B.qp(QpType::kRc)};
    hca::Qp uc[2] = {A.qp(QpType::kUc), A.qp(QpType::kUc)}, ucb[2] = {B.qp(QpType::kUc), B.qp(QpType::kUc)};
    // PSNs wrap to 0 inside the first batch's 131-packet message, within
    // its first segment (after 277 packets of the messages before it).
    constexpr uint32_t kPsn = 0x1000000 - 300;
    for (int q = 0; q < 2; ++q) {
      A.connect(rc[q], 2, rcb[q].qpn, code, kNoRetry, kTimeout1s, kPsn);
      B.connect(rcb[q], 1, rc[q].qpn, code, kNoRetry, kTimeout1s, kPsn);
      A.connect(uc[q], 2, ucb[q].qpn, code, 7, 12, kPsn);
      B.connect(ucb[q], 1, uc[q].qpn, code, 7, 12, kPsn);
    }
    const uint64_t slots_before = slots_sent();
    size_t packets_sent = 0;

    // Packets: 1 (short, full), 2 (full + 1 byte, two full), 3, 31, 32,
    // 33 (the first AckReq at index 31), 65 and 71 (across the second and
    // third AckReq), and 131: more than the RC window of 128 packets, sent
    // whole only if the AckReq packets inside it draw their ACKs.
    const Layout l = layout({1, mtu, mtu + 1, 2 * mtu, 2 * mtu + 1, 3 * mtu - 2, 31 * mtu, 32 * mtu,
                             32 * mtu + 3, 33 * mtu, 64 * mtu + 1, 70 * mtu + 5, 130 * mtu + 7});
    const size_t n = l.len.size();
    for (int t = 0; t < 2; ++t) {
      const bool is_rc = t == 0;
      hca::Qp& qa = is_rc ? rc[0] : uc[0];
      hca::Qp& qb = is_rc ? rcb[0] : ucb[0];
      INFO((is_rc ? "RC" : "UC"));
      for (WrOpcode opc : {WrOpcode::kSend, WrOpcode::kSendImm, WrOpcode::kWrite, WrOpcode::kWriteImm}) {
        const bool send = opc == WrOpcode::kSend || opc == WrOpcode::kSendImm;
        const bool imm = opc == WrOpcode::kSendImm || opc == WrOpcode::kWriteImm;
        const bool recv = send || imm;  // a receive WQE taken per message
        INFO("opcode " << int(opc));
        const uint64_t acks_before = acks_sent();
        std::memset(B.p(half), std::to_integer<int>(kPoison), half);
        for (size_t i = 0; i < n; ++i) {
          fill(A.p(l.off[i]), l.len[i], ++seed);
          packets_sent += packets(l.len[i], mtu);
        }
        if (recv)
          for (size_t i = 0; i < n; ++i) {
            hca::RecvWr r{1000 + i, {}};
            // room for 64 bytes more than sent: a SEND must stop at its length
            if (send) r.sg = {hca::Sge{B.va(half + l.off[i]), uint32_t(l.len[i] + 64), B.key(half)}};
            REQUIRE(B.f.hca->post_recv(qb, r).ok());
          }
        for (size_t i = 0; i < n; ++i) {
          SendWr s;
          s.wr_id = i;
          s.opcode = opc;
          s.sg = {hca::Sge{A.va(l.off[i]), uint32_t(l.len[i]), A.key(0)}};
          s.imm = 0x5e600000u + seed + uint32_t(i);
          s.solicited = i % 2 == 1;
          if (!send) {
            s.remote_addr = B.va(half + l.off[i]);
            s.rkey = B.key(half);
          }
          REQUIRE(A.f.hca->post_send(qa, s).ok());
        }
        auto tx = A.wait(n, 10000);
        REQUIRE(tx.size() == n);
        for (size_t i = 0; i < n; ++i) {
          INFO("send completion " << i);
          CHECK(int(tx[i].status) == int(hca::kWcSuccess));
          CHECK(int(tx[i].opcode) == (send ? hca::kWcSend : hca::kWcRdmaWrite));
          CHECK(tx[i].wr_id == i);
          CHECK(tx[i].qpn == qa.qpn);
        }
        if (recv) {
          auto rx = B.wait(n, is_rc ? 10000 : 5000);
          REQUIRE(rx.size() == n);
          for (size_t i = 0; i < n; ++i) {
            INFO("receive completion " << i << ", " << l.len[i] << " bytes");
            CHECK(int(rx[i].status) == int(hca::kWcSuccess));
            CHECK(int(rx[i].opcode) == (send ? hca::kWcRecv : hca::kWcRecvRdmaWithImm));
            CHECK(rx[i].wr_id == 1000 + i);
            CHECK(rx[i].qpn == qb.qpn);
            CHECK(rx[i].byte_len == l.len[i]);
            CHECK(rx[i].has_imm == imm);
            if (imm) CHECK(rx[i].imm == 0x5e600000u + seed + uint32_t(i));
            // SE rides on the last packet of a SEND or an immediate (IBA 9.2.3)
            CHECK(rx[i].solicited == (i % 2 == 1));
          }
        }
        // Placed once acknowledged (RC) or once a receive completed (the
        // last packet of each message, in order); a UC WRITE is polled for.
        if (is_rc || recv) CHECK(first_wrong(A, B, l, mtu) == "");
        else CHECK(wait_right(A, B, l, mtu) == "");
        CHECK(A.f.hca->poll_cq(A.cq).empty());
        CHECK(B.f.hca->poll_cq(B.cq).empty());
        // A segment ends at the first packet with AckReq: the responder
        // sees each of them and ACKs it, as without segments (§12.8).
        size_t want_acks = 0;
        if (is_rc)
          for (size_t len : l.len) want_acks += ack_reqs(len, mtu);
        CHECK(acks_sent() - acks_before == want_acks);
      }
    }

    // Four QPs at once: WRITEs posted round robin, the last of each QP with
    // immediate data; message m = 4j + q of QP q lies between QP q-1's and
    // QP q+1's in memory.
    {
      INFO("four QPs at once");
      hca::Qp* qa[4] = {&rc[0], &rc[1], &uc[0], &uc[1]};
      hca::Qp* qb[4] = {&rcb[0], &rcb[1], &ucb[0], &ucb[1]};
      constexpr int kQps = 4, kPerQp = 4;
      std::vector<size_t> lens;
      for (int j = 0; j < kPerQp; ++j)
        for (int q = 0; q < kQps; ++q) lens.push_back((8 + 11 * j + 2 * q) * mtu + (j % 2 ? 0 : 1 + q));
      const Layout m = layout(lens);
      const uint64_t acks_before = acks_sent();
      std::memset(B.p(half), std::to_integer<int>(kPoison), half);
      for (size_t i = 0; i < lens.size(); ++i) {
        fill(A.p(m.off[i]), m.len[i], ++seed);
        packets_sent += packets(m.len[i], mtu);
      }
      for (int q = 0; q < kQps; ++q) REQUIRE(B.f.hca->post_recv(*qb[q], {uint64_t(2000 + q), {}}).ok());
      for (int j = 0; j < kPerQp; ++j)
        for (int q = 0; q < kQps; ++q) {
          const size_t i = size_t(j * kQps + q);
          SendWr w;
          w.wr_id = i;
          w.opcode = j + 1 == kPerQp ? WrOpcode::kWriteImm : WrOpcode::kWrite;
          w.imm = 0x0c0c0000u + uint32_t(q);
          w.sg = {hca::Sge{A.va(m.off[i]), uint32_t(m.len[i]), A.key(0)}};
          w.remote_addr = B.va(half + m.off[i]);
          w.rkey = B.key(half);
          REQUIRE(A.f.hca->post_send(*qa[q], w).ok());
        }
      auto tx = A.wait(lens.size(), 10000);
      REQUIRE(tx.size() == lens.size());
      std::vector<uint64_t> order[kQps];  // each QP's completions, in order
      for (const auto& e : tx) {
        INFO("wr_id " << e.wr_id);
        CHECK(int(e.status) == int(hca::kWcSuccess));
        CHECK(int(e.opcode) == hca::kWcRdmaWrite);
        const int q = int(e.wr_id % kQps);
        CHECK(e.qpn == qa[q]->qpn);
        order[q].push_back(e.wr_id);
      }
      for (int q = 0; q < kQps; ++q) {
        std::vector<uint64_t> want;
        for (int j = 0; j < kPerQp; ++j) want.push_back(uint64_t(j * kQps + q));
        CHECK(order[q] == want);
      }
      auto rx = B.wait(kQps, 10000);
      REQUIRE(rx.size() == size_t(kQps));
      for (const auto& e : rx) {
        INFO("receive wr_id " << e.wr_id);
        CHECK(int(e.status) == int(hca::kWcSuccess));
        CHECK(int(e.opcode) == hca::kWcRecvRdmaWithImm);
        const int q = int(e.wr_id - 2000);
        REQUIRE((q >= 0 && q < kQps));
        CHECK(e.qpn == qb[q]->qpn);
        CHECK(e.has_imm);
        CHECK(e.imm == 0x0c0c0000u + uint32_t(q));
        CHECK(e.byte_len == m.len[size_t((kPerQp - 1) * kQps + q)]);
      }
      // Each QP's WRITE with immediate came last on its QP, after its WRITEs.
      CHECK(first_wrong(A, B, m, mtu) == "");
      CHECK(A.f.hca->poll_cq(A.cq).empty());
      CHECK(B.f.hca->poll_cq(B.cq).empty());
      size_t want_acks = 0;  // QPs 0 and 1 are RC
      for (size_t i = 0; i < lens.size(); ++i)
        if (i % kQps < 2) want_acks += ack_reqs(m.len[i], mtu);
      CHECK(acks_sent() - acks_before == want_acks);
    }

    // The packets went as segments: fewer slots than packets. A lone
    // packet takes a slot; a slot holds 4096 bytes of payload with the
    // headers, so two packets of 2048 bytes, four of 1024. (At 4096 only a
    // segment of some 23 packets or more saves a slot: not checked.)
    const uint64_t slots = slots_sent() - slots_before;
    INFO(packets_sent << " packets from a in " << slots << " slots");
    CHECK(slots <= packets_sent);
    if (mtu <= 2048) CHECK(slots < packets_sent);
    if (mtu <= 1024) CHECK(slots * 2 < packets_sent);
    for (int q = 0; q < 2; ++q) {
      REQUIRE(A.f.hca->destroy_qp(rc[q]).ok());
      REQUIRE(A.f.hca->destroy_qp(uc[q]).ok());
      REQUIRE(B.f.hca->destroy_qp(rcb[q]).ok());
      REQUIRE(B.f.hca->destroy_qp(ucb[q]).ok());
    }
  }
}
