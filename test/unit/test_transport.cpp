// simhca's data path in process (docs/simhca.md §12): two device cores
// cabled by a LoopbackPair, with fault injection and a virtual clock.
#include <catch2/catch.hpp>
#include <numeric>

#include "transport_harness.hpp"

using namespace openib;
using namespace openib::test;
using Wr = Node::Wr;

namespace {

void fill(std::span<std::byte> s, uint32_t seed) {
  uint32_t x = seed * 2654435761u + 1;
  for (auto& b : s) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    b = std::byte(static_cast<uint8_t>(x));
  }
}

bool same(std::span<const std::byte> a, std::span<const std::byte> b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin());
}

// An RC (or UC) pair connected a <-> b, with a 2 MiB region on each side.
struct Connected {
  explicit Connected(uint8_t type = kQpRc, uint8_t mtu = 5, Node::Path tweak = {}) {
    qa = w.a.create_qp(type);
    qb = w.b.create_qp(type);
    Node::Path pa = tweak, pb = tweak;
    pa.mtu = pb.mtu = mtu;
    pa.dlid = 2;
    pa.dest_qpn = qb.qpn;
    pb.dlid = 1;
    pb.dest_qpn = qa.qpn;
    w.a.connect(qa, pa);
    w.b.connect(qb, pb);
    const uint32_t all = kMrLocalWrite | kMrRemoteWrite | kMrRemoteRead | kMrRemoteAtomic;
    buf_a = w.a.alloc(kBuf, 4096);
    buf_b = w.b.alloc(kBuf, 4096);
    key_a = w.a.reg_mr(buf_a, kBuf, all);
    key_b = w.b.reg_mr(buf_b, kBuf, all);
  }
  static constexpr size_t kBuf = 2u << 20;
  // Polls until n CQEs arrived on `node`'s CQ.
  std::vector<Cqe> wait(Node& node, size_t n, std::chrono::milliseconds limit = std::chrono::seconds(60)) {
    std::vector<Cqe> got;
    w.run([&] {
      for (auto& c : node.poll(node.cq)) got.push_back(c);
      return got.size() >= n;
    }, limit);
    return got;
  }
  Wire w;
  TQp qa, qb;
  uint64_t buf_a = 0, buf_b = 0;
  uint32_t key_a = 0, key_b = 0;
};

}  // namespace

TEST_CASE("WQE decoder: §12.1 layouts and malformed WQEs", "[transport][wqe]") {
  Wr wr;
  wr.opcode = kWrWrite;
  wr.wr_id = 0x1122334455667788ull;
  wr.remote_va = 0xabcdef;
  wr.rkey = 0x1234;
  wr.sges = {{100, 7, 0x1000}, {28, 8, 0x2000}};
  Bytes raw = Node::encode_wqe(wr, kQpRc);
  raw.resize(256);
  auto w = decode_send_wqe(raw, kQpRc, {});
  REQUIRE(w.ok());
  CHECK(w->wr_id == wr.wr_id);
  CHECK(w->remote_va == 0xabcdef);
  CHECK(w->rkey == 0x1234);
  REQUIRE(w->sges.size() == 2);
  CHECK(w->length() == 128);
  // RDMA READ on UD, atomics on UC: not for that QP type.
  CHECK(decode_send_wqe(raw, kQpUd, {}).error().code == kWcLocQpOpErr);
  wr.opcode = kWrFetchAdd;
  CHECK(decode_send_wqe(Node::encode_wqe(wr, kQpUc), kQpUc, {}).error().code == kWcLocQpOpErr);
  // Atomic with a 128-byte SGE list
  CHECK(decode_send_wqe(Node::encode_wqe(wr, kQpRc), kQpRc, {}).error().code == kWcLocQpOpErr);
  // num_ds beyond the stride, zero, reserved flags, inline over the limit
  Bytes bad = raw;
  put8(bad, 2, 17);
  CHECK(decode_send_wqe(bad, kQpRc, {}).error().code == kWcLocQpOpErr);
  put8(bad, 2, 0);
  CHECK(decode_send_wqe(bad, kQpRc, {}).error().code == kWcLocQpOpErr);
  bad = raw;
  put8(bad, 1, 0x80);
  CHECK(decode_send_wqe(bad, kQpRc, {}).error().code == kWcLocQpOpErr);
  Wr in;
  in.flags = kWqeInline;
  in.inline_data.assign(100, std::byte{1});
  auto iw = decode_send_wqe(Node::encode_wqe(in, kQpRc), kQpRc, {16, 64});
  CHECK(iw.error().code == kWcLocQpOpErr);
  iw = decode_send_wqe(Node::encode_wqe(in, kQpRc), kQpRc, {16, 512});
  REQUIRE(iw.ok());
  CHECK(iw->length() == 100);
  // Receive WQE: num_sge beyond the stride.
  Bytes r(64);
  put8(r, 8, 4);
  CHECK(decode_recv_wqe(r, 16).error().code == kWcLocQpOpErr);
  put8(r, 8, 3);
  CHECK(decode_recv_wqe(r, 16).ok());
  CHECK(decode_recv_wqe(r, 2).error().code == kWcLocQpOpErr);
}

TEST_CASE("Key translation: IBA 10.6 checks in order", "[transport][mkey]") {
  std::vector<uint64_t> pages{0x10000, 0x30000};
  KeyRegion r{0x105, 3, kMrLocalWrite | kMrRemoteRead, 0x7000'0800, 0x1000, 12, &pages};
  std::vector<Extent> ext;
  CHECK(translate(nullptr, 0x105, 3, 0x70000800, 1, 0, ext) == KeyFault::kInvalidKey);
  CHECK(translate(&r, 0x106, 3, 0x70000800, 1, 0, ext) == KeyFault::kInvalidKey);
  CHECK(translate(&r, 0x105, 4, 0x70000800, 1, 0, ext) == KeyFault::kWrongPd);
  CHECK(translate(&r, 0x105, 3, 0x700007ff, 1, 0, ext) == KeyFault::kBounds);
  CHECK(translate(&r, 0x105, 3, 0x70000800, 0x1001, 0, ext) == KeyFault::kBounds);
  CHECK(translate(&r, 0x105, 3, 0x70000800, 8, kMrRemoteWrite, ext) == KeyFault::kAccess);
  REQUIRE(translate(&r, 0x105, 3, 0x70000f00, 0x200, kMrRemoteRead, ext) == KeyFault::kNone);
  REQUIRE(ext.size() == 2);  // crosses from page 0 into page 1
  CHECK(ext[0].iova == 0x10f00);
  CHECK(ext[0].len == 0x100);
  CHECK(ext[1].iova == 0x30000);
  CHECK(ext[1].len == 0x100);
}

TEST_CASE("RC: every operation, sizes 0, 1, MTU-1, MTU, MTU+1 and 1 MiB at MTUs 256..4096", "[transport][rc]") {
  for (uint8_t mtu_code = 1; mtu_code <= 5; ++mtu_code) {
    const size_t mtu = size_t{128} << mtu_code;
    Connected c(kQpRc, mtu_code);
    uint64_t id = 0;
    for (size_t len : {size_t{0}, size_t{1}, mtu - 1, mtu, mtu + 1, size_t{1} << 20}) {
      INFO("MTU " << mtu << " length " << len);
      auto src = c.w.a.mem(c.buf_a, len);
      fill(src, static_cast<uint32_t>(len + mtu));
      const Sge local{static_cast<uint32_t>(len), c.key_a, Node::va(c.buf_a)};
      // SEND with immediate into a posted receive.
      std::fill_n(c.w.b.mem(c.buf_b, len + 1).begin(), len + 1, std::byte{0xee});
      c.w.b.post_recv(c.qb, ++id, {{static_cast<uint32_t>(len + 16), c.key_b, Node::va(c.buf_b)}});
      Wr s;
      s.opcode = kWrSendImm;
      s.imm = 0xfeedbeef;
      s.wr_id = id;
      s.sges = {local};
      c.w.a.post_send(c.qa, s);
      auto rx = c.wait(c.w.b, 1);
      auto tx = c.wait(c.w.a, 1);
      REQUIRE(rx.size() == 1);
      REQUIRE(tx.size() == 1);
      CHECK(tx[0].status == kWcSuccess);
      CHECK(tx[0].opcode == kWcSend);
      CHECK(rx[0].status == kWcSuccess);
      CHECK(rx[0].opcode == kWcRecv);
      CHECK(rx[0].byte_len == len);
      CHECK(rx[0].imm == 0xfeedbeef);
      CHECK((rx[0].flags & kCqeFlagImm) != 0);
      CHECK(same(c.w.b.mem(c.buf_b, len), src));
      CHECK(c.w.b.mem(c.buf_b + len, 1)[0] == std::byte{0xee});  // nothing past the message

      // RDMA WRITE into b at an offset, then READ it back into a's upper half.
      fill(src, static_cast<uint32_t>(len * 3 + 1));
      Wr wr;
      wr.opcode = kWrWrite;
      wr.wr_id = ++id;
      wr.sges = {local};
      wr.remote_va = Node::va(c.buf_b) + 8;
      wr.rkey = c.key_b;
      c.w.a.post_send(c.qa, wr);
      tx = c.wait(c.w.a, 1);
      REQUIRE(tx.size() == 1);
      CHECK(tx[0].status == kWcSuccess);
      CHECK(tx[0].opcode == kWcRdmaWrite);
      CHECK(same(c.w.b.mem(c.buf_b + 8, len), src));
      Wr rd;
      rd.opcode = kWrRead;
      rd.wr_id = ++id;
      rd.sges = {{static_cast<uint32_t>(len), c.key_a, Node::va(c.buf_a + (1u << 20))}};
      rd.remote_va = Node::va(c.buf_b) + 8;
      rd.rkey = c.key_b;
      c.w.a.post_send(c.qa, rd);
      tx = c.wait(c.w.a, 1);
      REQUIRE(tx.size() == 1);
      CHECK(tx[0].status == kWcSuccess);
      CHECK(tx[0].opcode == kWcRdmaRead);
      CHECK(tx[0].byte_len == len);
      CHECK(same(c.w.a.mem(c.buf_a + (1u << 20), len), src));

      // RDMA WRITE with immediate consumes a receive WQE (IBA 9.4.2).
      c.w.b.post_recv(c.qb, ++id, {});
      wr.opcode = kWrWriteImm;
      wr.imm = 77;
      wr.remote_va = Node::va(c.buf_b);
      c.w.a.post_send(c.qa, wr);
      rx = c.wait(c.w.b, 1);
      REQUIRE(rx.size() == 1);
      CHECK(rx[0].opcode == kWcRecvRdmaWithImm);
      CHECK(rx[0].imm == 77);
      CHECK(rx[0].byte_len == len);
      CHECK(same(c.w.b.mem(c.buf_b, len), src));
      CHECK(c.wait(c.w.a, 1).size() == 1);
    }
  }
}

TEST_CASE("RC: inline SEND, scatter/gather, atomics, SRQ", "[transport][rc]") {
  Connected c;
  auto& a = c.w.a;
  auto& b = c.w.b;
  // Inline send scattered over three receive SGEs.
  b.post_recv(c.qb, 1, {{10, c.key_b, Node::va(c.buf_b)}, {0, c.key_b, 0}, {300, c.key_b, Node::va(c.buf_b + 4096)}});
  Wr s;
  s.flags = kWqeSignaled | kWqeInline;
  s.inline_data.resize(200);
  fill(s.inline_data, 5);
  a.post_send(c.qa, s);
  auto rx = c.wait(b, 1);
  REQUIRE(rx.size() == 1);
  CHECK(rx[0].byte_len == 200);
  CHECK(same(b.mem(c.buf_b, 10), std::span(s.inline_data).first(10)));
  CHECK(same(b.mem(c.buf_b + 4096, 190), std::span(s.inline_data).subspan(10)));
  CHECK(c.wait(a, 1).size() == 1);

  // Gather from two SGEs.
  fill(a.mem(c.buf_a, 8192), 9);
  b.post_recv(c.qb, 2, {{8192, c.key_b, Node::va(c.buf_b)}});
  s = Wr{};
  s.sges = {{1000, c.key_a, Node::va(c.buf_a + 5000)}, {3000, c.key_a, Node::va(c.buf_a)}};
  a.post_send(c.qa, s);
  rx = c.wait(b, 1);
  REQUIRE(rx.size() == 1);
  CHECK(rx[0].byte_len == 4000);
  CHECK(same(b.mem(c.buf_b, 1000), a.mem(c.buf_a + 5000, 1000)));
  CHECK(same(b.mem(c.buf_b + 1000, 3000), a.mem(c.buf_a, 3000)));
  CHECK(c.wait(a, 1).size() == 1);

  // Atomics on a little-endian 64-bit word at b (§12.6).
  auto word = b.mem(c.buf_b + 64, 8);
  const uint64_t v0 = 1000;
  std::memcpy(word.data(), &v0, 8);
  Wr at;
  at.opcode = kWrFetchAdd;
  at.remote_va = Node::va(c.buf_b + 64);
  at.rkey = c.key_b;
  at.swap_add = 5;
  at.sges = {{8, c.key_a, Node::va(c.buf_a + 128)}};
  a.post_send(c.qa, at);
  auto tx = c.wait(a, 1);
  REQUIRE(tx.size() == 1);
  CHECK(tx[0].status == kWcSuccess);
  CHECK(tx[0].opcode == kWcFetchAdd);
  uint64_t got = 0, now = 0;
  std::memcpy(&got, a.mem(c.buf_a + 128, 8).data(), 8);
  std::memcpy(&now, word.data(), 8);
  CHECK(got == 1000);
  CHECK(now == 1005);
  at.opcode = kWrCmpSwap;
  at.compare = 1005;
  at.swap_add = 42;
  a.post_send(c.qa, at);
  tx = c.wait(a, 1);
  REQUIRE(tx.size() == 1);
  CHECK(tx[0].opcode == kWcCompSwap);
  std::memcpy(&now, word.data(), 8);
  CHECK(now == 42);
  at.compare = 1;  // no match: unchanged, the old value returned
  at.swap_add = 7;
  a.post_send(c.qa, at);
  REQUIRE(c.wait(a, 1).size() == 1);
  std::memcpy(&got, a.mem(c.buf_a + 128, 8).data(), 8);
  std::memcpy(&now, word.data(), 8);
  CHECK(got == 42);
  CHECK(now == 42);
  // Misaligned atomic: NAK invalid request (IBA 9.4.5).
  at.remote_va += 4;
  a.post_send(c.qa, at);
  tx = c.wait(a, 1);
  REQUIRE(tx.size() == 1);
  CHECK(tx[0].status == kWcRemInvReqErr);
}

TEST_CASE("RC over an SRQ: receives taken from the shared queue", "[transport][srq]") {
  Wire w;
  TSrq srq = w.b.create_srq(6, 0);
  TQp qa = w.a.create_qp(kQpRc), qb = w.b.create_qp(kQpRc, &srq);
  Node::Path pa, pb;
  pa.dlid = 2;
  pa.dest_qpn = qb.qpn;
  pb.dlid = 1;
  pb.dest_qpn = qa.qpn;
  w.a.connect(qa, pa);
  w.b.connect(qb, pb);
  const uint64_t ba = w.a.alloc(65536, 4096), bb = w.b.alloc(65536, 4096);
  const uint32_t ka = w.a.reg_mr(ba, 65536, kMrLocalWrite), kb = w.b.reg_mr(bb, 65536, kMrLocalWrite);
  fill(w.a.mem(ba, 65536), 3);
  for (int i = 0; i < 4; ++i) w.b.post_srq(srq, 100 + i, {{5000, kb, Node::va(bb + 5000u * i)}});
  for (int i = 0; i < 4; ++i) {
    Wr s;
    s.wr_id = i;
    s.sges = {{5000, ka, Node::va(ba + 5000u * i)}};
    w.a.post_send(qa, s);
  }
  std::vector<Cqe> rx;
  REQUIRE(w.run([&] {
    for (auto& c : w.b.poll(w.b.cq)) rx.push_back(c);
    return rx.size() == 4;
  }));
  for (int i = 0; i < 4; ++i) {
    CHECK(rx[i].wr_id == uint64_t(100 + i));
    CHECK(rx[i].byte_len == 5000);
  }
  CHECK(same(w.b.mem(bb, 20000), w.a.mem(ba, 20000)));
}

TEST_CASE("RC under 5% loss, 5% duplication, 5% reordering, 1% corruption: once, in order, intact", "[transport][faults]") {
  for (uint64_t seed : {1u, 2u, 3u}) {
    INFO("seed " << seed);
    Node::Path tweak;
    tweak.timeout = 8;  // ~1 ms
    Connected c(kQpRc, 3, tweak);
    sim::FaultSpec f{0.05, 0.05, 0.05, 0.01, seed};
    sim::FaultSpec g = f;
    g.seed = seed + 100;
    c.w.pair->set_faults(f, g);
    constexpr int kMsgs = 60;
    std::vector<size_t> lens;
    size_t off = 0;
    for (int i = 0; i < kMsgs; ++i) {
      const size_t len = (i * 977u) % 9000 + (i % 7 == 0 ? 0 : 1);
      lens.push_back(len);
      c.w.b.post_recv(c.qb, i, {{static_cast<uint32_t>(len), c.key_b, Node::va(c.buf_b + off)}});
      off += len;
    }
    fill(c.w.a.mem(c.buf_a, off), static_cast<uint32_t>(seed));
    off = 0;
    for (int i = 0; i < kMsgs; ++i) {
      Wr s;
      s.wr_id = i;
      s.sges = {{static_cast<uint32_t>(lens[i]), c.key_a, Node::va(c.buf_a + off)}};
      c.w.a.post_send(c.qa, s);
      off += lens[i];
    }
    std::vector<Cqe> rx, tx;
    REQUIRE(c.w.run([&] {
      for (auto& e : c.w.b.poll(c.w.b.cq)) rx.push_back(e);
      for (auto& e : c.w.a.poll(c.w.a.cq)) tx.push_back(e);
      return rx.size() >= kMsgs && tx.size() >= kMsgs;
    }));
    REQUIRE(rx.size() == kMsgs);
    for (int i = 0; i < kMsgs; ++i) {
      CHECK(rx[i].status == kWcSuccess);
      CHECK(rx[i].wr_id == uint64_t(i));
      CHECK(rx[i].byte_len == lens[i]);
      CHECK(tx[i].status == kWcSuccess);
      CHECK(tx[i].wr_id == uint64_t(i));
    }
    CHECK(same(c.w.b.mem(c.buf_b, off), c.w.a.mem(c.buf_a, off)));
    // A READ of it all back, under the same faults.
    Wr rd;
    rd.opcode = kWrRead;
    rd.sges = {{static_cast<uint32_t>(off), c.key_a, Node::va(c.buf_a + (1u << 20))}};
    rd.remote_va = Node::va(c.buf_b);
    rd.rkey = c.key_b;
    c.w.a.post_send(c.qa, rd);
    tx = c.wait(c.w.a, 1);
    REQUIRE(tx.size() == 1);
    CHECK(tx[0].status == kWcSuccess);
    CHECK(same(c.w.a.mem(c.buf_a + (1u << 20), off), c.w.a.mem(c.buf_a, off)));
    const auto& st = c.w.a.hca.data_stats();
    CHECK(st.retransmits > 0);  // the faults did bite
    auto ls = c.w.pair->a().stats();
    CHECK(ls.injected_drops + ls.injected_corruptions > 0);
  }
}

TEST_CASE("RC retry and RNR exhaustion end with RETRY_EXC_ERR and RNR_RETRY_EXC_ERR", "[transport][retry]") {
  SECTION("retry_cnt exhausted on a dead wire") {
    Node::Path tweak;
    tweak.timeout = 5;
    tweak.retry_cnt = 3;
    Connected c(kQpRc, 5, tweak);
    c.w.pair->set_faults({1.0, 0, 0, 0, 1}, {});
    Wr s;
    s.sges = {{100, c.key_a, Node::va(c.buf_a)}};
    c.w.a.post_send(c.qa, s);
    s.wr_id = 2;
    c.w.a.post_send(c.qa, s);
    auto tx = c.wait(c.w.a, 2);
    REQUIRE(tx.size() == 2);
    CHECK(tx[0].status == kWcRetryExcErr);
    CHECK(tx[1].status == kWcWrFlushErr);  // the QP went to ERR (§12.4)
    CHECK(c.w.a.hca.data_stats().timeouts == 4);  // 1 + retry_cnt
  }
  SECTION("rnr_retry exhausted when no receive is posted") {
    Node::Path tweak;
    tweak.rnr_retry = 2;
    Connected c(kQpRc, 5, tweak);
    Wr s;
    s.sges = {{100, c.key_a, Node::va(c.buf_a)}};
    c.w.a.post_send(c.qa, s);
    auto tx = c.wait(c.w.a, 1);
    REQUIRE(tx.size() == 1);
    CHECK(tx[0].status == kWcRnrRetryExcErr);
    CHECK(c.w.b.hca.data_stats().rnr_naks_sent == 3);
  }
  SECTION("an RNR NAK is retried until the receive is posted") {
    Connected c;
    Wr s;
    s.sges = {{100, c.key_a, Node::va(c.buf_a)}};
    c.w.a.post_send(c.qa, s);
    c.w.run([&] { return c.w.b.hca.data_stats().rnr_naks_sent >= 2; });
    c.w.b.post_recv(c.qb, 9, {{100, c.key_b, Node::va(c.buf_b)}});
    auto rx = c.wait(c.w.b, 1);
    REQUIRE(rx.size() == 1);
    CHECK(rx[0].status == kWcSuccess);
  }
}

// openib-perf --test send --mode bw: 64 SENDs in flight against a receiver
// that reposts in batches and lags behind, so its RQ runs dry again and
// again. RNR NAKs must cost rnr_retry only (7: unlimited), never retry_cnt:
// the packets behind an RNR-NAKed one are not a new sequence error
// (IBA 9.7.5.2.8, 9.7.5.2.1; docs/simhca.md §12.8).
TEST_CASE("RC: 2000 SENDs, 64 in flight, receives reposted late in batches of 16", "[transport][rnr]") {
  Connected c;  // RQ and SQ of 64; timeout 10, retry_cnt 7, rnr_retry 7, RNR timer 10 us
  constexpr uint32_t kMsgs = 2000, kInFlight = 64, kBatch = 16, kLen = 64;
  constexpr auto kAppPeriod = std::chrono::microseconds(200);  // the receiver wakes this often
  fill(c.w.a.mem(c.buf_a, size_t{kMsgs} * kLen), 7);
  uint32_t posted_rx = 0, posted_tx = 0, to_repost = 0;
  auto post_recvs = [&](uint32_t n) {
    for (uint32_t i = 0; i < n; ++i, ++posted_rx)
      c.w.b.post_recv(c.qb, posted_rx, {{kLen, c.key_b, Node::va(c.buf_b + uint64_t{posted_rx} * kLen)}});
  };
  post_recvs(64);
  std::vector<Cqe> rx, tx;
  auto wake = c.w.now;
  const bool done = c.w.run([&] {
    for (auto& e : c.w.a.poll(c.w.a.cq)) tx.push_back(e);
    while (posted_tx < kMsgs && posted_tx - tx.size() < kInFlight) {
      Wr s;
      s.wr_id = posted_tx;
      s.sges = {{kLen, c.key_a, Node::va(c.buf_a + uint64_t{posted_tx} * kLen)}};
      c.w.a.post_send(c.qa, s);
      ++posted_tx;
    }
    if (c.w.now >= wake) {  // the receiving application's turn
      wake = c.w.now + kAppPeriod;
      for (auto& e : c.w.b.poll(c.w.b.cq)) {
        rx.push_back(e);
        ++to_repost;
      }
      for (; to_repost >= kBatch && posted_rx < kMsgs; to_repost -= kBatch) post_recvs(kBatch);
    }
    return tx.size() >= kMsgs || (!tx.empty() && tx.back().status != kWcSuccess);
  }, std::chrono::seconds(10));
  REQUIRE(done);
  const auto& sa = c.w.a.hca.data_stats();
  const auto& sb = c.w.b.hca.data_stats();
  INFO("sent " << posted_tx << ", send CQEs " << tx.size() << ", receive CQEs " << rx.size()
               << ", RNR NAKs " << sb.rnr_naks_sent << ", NAKs " << sb.naks_sent << ", timeouts "
               << sa.timeouts);
  REQUIRE(tx.size() == kMsgs);
  for (uint32_t i = 0; i < kMsgs; ++i) {
    INFO("send " << i);
    REQUIRE(tx[i].status == kWcSuccess);
    REQUIRE(tx[i].wr_id == i);
  }
  // The receiver drains what is left of its CQ.
  REQUIRE(c.w.run([&] {
    for (auto& e : c.w.b.poll(c.w.b.cq)) rx.push_back(e);
    return rx.size() >= kMsgs;
  }));
  REQUIRE(rx.size() == kMsgs);
  for (uint32_t i = 0; i < kMsgs; ++i) {
    INFO("receive " << i);
    REQUIRE(rx[i].status == kWcSuccess);
    REQUIRE(rx[i].wr_id == i);
    REQUIRE(rx[i].byte_len == kLen);
  }
  CHECK(same(c.w.b.mem(c.buf_b, size_t{kMsgs} * kLen), c.w.a.mem(c.buf_a, size_t{kMsgs} * kLen)));
  CHECK(sb.rnr_naks_sent > 10);  // the receiver did run dry, again and again
  CHECK(sb.naks_sent == 0);       // and no sequence NAK followed an RNR NAK
  CHECK(sa.timeouts == 0);
}

TEST_CASE("Protection: rkey, bounds, rights, PD, P_Key, Q_Key; target memory unchanged", "[transport][protection]") {
  auto expect_remote_fault = [](const std::function<void(Connected&, Wr&)>& spoil, uint8_t op, uint8_t status) {
    Connected c;
    std::fill_n(c.w.b.mem(c.buf_b, 8192).begin(), 8192, std::byte{0x5a});
    fill(c.w.a.mem(c.buf_a, 8192), 1);
    Wr wr;
    wr.opcode = op;
    wr.sges = {{op >= kWrCmpSwap ? 8u : 4096u, c.key_a, Node::va(c.buf_a)}};
    wr.remote_va = Node::va(c.buf_b);
    wr.rkey = c.key_b;
    spoil(c, wr);
    c.w.a.post_send(c.qa, wr);
    auto tx = c.wait(c.w.a, 1);
    REQUIRE(tx.size() == 1);
    CHECK(tx[0].status == status);
    for (auto x : c.w.b.mem(c.buf_b, 8192)) REQUIRE(x == std::byte{0x5a});
    // The responder went to ERR too (IBA 9.7.5.2.3, class C).
    return c.w.b.hca.data_stats().naks_sent;
  };
  for (uint8_t op : {kWrWrite, kWrRead, kWrFetchAdd}) {
    INFO("opcode " << int(op));
    CHECK(expect_remote_fault([](Connected&, Wr& w) { w.rkey ^= 0x100; }, op, kWcRemAccessErr) == 1);
    CHECK(expect_remote_fault([](Connected&, Wr& w) { w.rkey ^= 0x1; }, op, kWcRemAccessErr) == 1);  // stale tag
    CHECK(expect_remote_fault([](Connected&, Wr& w) {  // runs past the end (atomics: aligned, just past)
      w.remote_va += Connected::kBuf - (w.opcode >= kWrCmpSwap ? 0 : 4);
    }, op, kWcRemAccessErr) == 1);
    CHECK(expect_remote_fault([](Connected&, Wr& w) { w.remote_va -= 8; }, op, kWcRemAccessErr) == 1);
    CHECK(expect_remote_fault([](Connected& c, Wr& w) {  // a region without the remote rights
      w.rkey = c.w.b.reg_mr(c.buf_b, 8192, kMrLocalWrite);
    }, op, kWcRemAccessErr) == 1);
    CHECK(expect_remote_fault([](Connected& c, Wr& w) {  // a region of another PD
      const uint32_t pd2 = Node::num(c.w.b.cmd(kOpAllocPd, {}));
      w.rkey = c.w.b.reg_mr(c.buf_b, 8192, 0xf, pd2);
    }, op, kWcRemAccessErr) == 1);
  }
  // Local key errors: LOC_PROT_ERR, nothing sent.
  {
    Connected c;
    Wr wr;
    wr.sges = {{64, c.key_a ^ 0x100, Node::va(c.buf_a)}};
    c.w.a.post_send(c.qa, wr);
    auto tx = c.wait(c.w.a, 1);
    REQUIRE(tx.size() == 1);
    CHECK(tx[0].status == kWcLocProtErr);
    CHECK(c.w.a.hca.data_stats().tx_packets == 0);
  }
  // READ into a region without LOCAL_WRITE.
  {
    Connected c;
    Wr rd;
    rd.opcode = kWrRead;
    rd.sges = {{64, c.w.a.reg_mr(c.buf_a, 4096, kMrRemoteRead), Node::va(c.buf_a)}};
    rd.remote_va = Node::va(c.buf_b);
    rd.rkey = c.key_b;
    c.w.a.post_send(c.qa, rd);
    auto tx = c.wait(c.w.a, 1);
    REQUIRE(tx.size() == 1);
    CHECK(tx[0].status == kWcLocProtErr);
  }
  // Receive buffer too small: LOC_LEN_ERR at b, REM_INV_REQ_ERR at a.
  {
    Connected c;
    c.w.b.post_recv(c.qb, 1, {{10, c.key_b, Node::va(c.buf_b)}});
    Wr s;
    s.sges = {{11, c.key_a, Node::va(c.buf_a)}};
    c.w.a.post_send(c.qa, s);
    auto rx = c.wait(c.w.b, 1);
    auto tx = c.wait(c.w.a, 1);
    REQUIRE(rx.size() == 1);
    REQUIRE(tx.size() == 1);
    CHECK(rx[0].status == kWcLocLenErr);
    CHECK(tx[0].status == kWcRemInvReqErr);
  }
  // Wrong P_Key on RC: dropped and counted at b, so a retries out.
  {
    Node::Path tweak;
    tweak.timeout = 5;
    tweak.retry_cnt = 1;
    Connected c(kQpRc, 5, tweak);
    c.w.a.set_port(4, 1, 5, 0x8002);
    c.w.b.post_recv(c.qb, 1, {{100, c.key_b, Node::va(c.buf_b)}});
    Wr s;
    s.sges = {{100, c.key_a, Node::va(c.buf_a)}};
    c.w.a.post_send(c.qa, s);
    auto tx = c.wait(c.w.a, 1);
    REQUIRE(tx.size() == 1);
    CHECK(tx[0].status == kWcRetryExcErr);
    CHECK(c.w.b.hca.data_stats().rx_bad_pkey == 2);
    CHECK(c.w.b.poll(c.w.b.cq).empty());
  }
}

TEST_CASE("UD: SEND with immediate by LID, GRH area, Q_Key and P_Key checks", "[transport][ud]") {
  Wire w;
  TQp qa = w.a.create_qp(kQpUd), qb = w.b.create_qp(kQpUd);
  Node::Path p;
  w.a.connect(qa, p);
  w.b.connect(qb, p);
  const uint64_t ba = w.a.alloc(8192, 4096), bb = w.b.alloc(8192, 4096);
  const uint32_t ka = w.a.reg_mr(ba, 8192, kMrLocalWrite), kb = w.b.reg_mr(bb, 8192, kMrLocalWrite);
  const uint32_t ah = w.a.create_ah(2);
  fill(w.a.mem(ba, 4096), 8);
  auto send = [&](uint32_t len, uint32_t qkey) {
    Wr s;
    s.opcode = kWrSendImm;
    s.imm = 0x01020304;
    s.ahn = ah;
    s.dest_qpn = qb.qpn;
    s.qkey = qkey;
    s.sges = {{len, ka, Node::va(ba)}};
    w.a.post_send(qa, s);
  };
  for (uint32_t len : {0u, 1u, 4095u, 4096u}) {
    w.b.post_recv(qb, len, {{4096 + 40, kb, Node::va(bb)}});
    send(len, 0x80000000);  // bit 31: the QP's own Q_Key (IBA 10.2.5)
    std::vector<Cqe> rx;
    REQUIRE(w.run([&] {
      for (auto& c : w.b.poll(w.b.cq)) rx.push_back(c);
      return !rx.empty();
    }));
    CHECK(rx[0].status == kWcSuccess);
    CHECK(rx[0].byte_len == len + 40);
    CHECK(rx[0].src_qp == qa.qpn);
    CHECK(rx[0].slid == 1);
    CHECK(rx[0].imm == 0x01020304);
    CHECK((rx[0].flags & kCqeFlagGrh) == 0);  // LID-routed: no GRH
    CHECK(same(w.b.mem(bb + 40, len), w.a.mem(ba, len)));
    auto tx = w.a.poll(w.a.cq);
    REQUIRE(tx.size() == 1);
    CHECK(tx[0].status == kWcSuccess);
  }
  // Over the MTU: LOC_LEN_ERR, the QP in SQE.
  send(4097, 0x80000000);
  w.run([&] { return false; }, std::chrono::milliseconds(1));
  auto tx = w.a.poll(w.a.cq);
  REQUIRE(tx.size() == 1);
  CHECK(tx[0].status == kWcLocLenErr);
  // A wrong Q_Key is dropped and counted, the receive WQE untouched.
  w.a.modify(qa.qpn, attr::kState | attr::kCurState, [](auto a) { put8(a, 0, kRts); put8(a, 1, kSqe); });
  w.b.post_recv(qb, 99, {{4096 + 40, kb, Node::va(bb)}});
  send(10, 0x22222222);
  w.run([&] { return false; }, std::chrono::milliseconds(1));
  CHECK(w.b.poll(w.b.cq).empty());
  CHECK(w.b.hca.data_stats().rx_bad_qkey == 1);
  // A wrong P_Key too.
  w.a.set_port(4, 1, 5, 0xffff);
  w.b.set_port(4, 2, 5, 0x8005);
  send(10, 0x80000000);
  w.run([&] { return false; }, std::chrono::milliseconds(1));
  CHECK(w.b.poll(w.b.cq).empty());
  CHECK(w.b.hca.data_stats().rx_bad_pkey == 1);
  // The same P_Key again: the posted WQE takes the next message.
  w.b.set_port(4, 2, 5, 0xffff);
  send(10, 0x80000000);
  std::vector<Cqe> rx;
  REQUIRE(w.run([&] {
    for (auto& c : w.b.poll(w.b.cq)) rx.push_back(c);
    return !rx.empty();
  }));
  CHECK(rx[0].wr_id == 99);
}

TEST_CASE("UC: SEND and WRITE, a lost packet loses its message only", "[transport][uc]") {
  Connected c(kQpUc, 1);
  auto& a = c.w.a;
  auto& b = c.w.b;
  fill(a.mem(c.buf_a, 65536), 4);
  for (int i = 0; i < 40; ++i) b.post_recv(c.qb, i, {{2000, c.key_b, Node::va(c.buf_b + 2000u * i)}});
  c.w.pair->set_faults({0.05, 0, 0, 0, 11}, {});
  for (int i = 0; i < 40; ++i) {
    Wr s;
    s.wr_id = i;
    s.sges = {{2000, c.key_a, Node::va(c.buf_a + 2000u * i)}};
    a.post_send(c.qa, s);
  }
  std::vector<Cqe> tx;
  REQUIRE(c.w.run([&] {
    for (auto& e : a.poll(a.cq)) tx.push_back(e);
    return tx.size() == 40;
  }));
  c.w.run([&] { return false; }, std::chrono::milliseconds(5));
  auto rx = b.poll(b.cq);
  CHECK(rx.size() < 40);  // 8 packets a message: some were hit
  CHECK(rx.size() > 10);
  // Every message delivered is intact; receive WQEs of lost ones are reused in order.
  for (size_t i = 0; i < rx.size(); ++i) {
    CHECK(rx[i].status == kWcSuccess);
    CHECK(rx[i].wr_id == i);
    CHECK(rx[i].byte_len == 2000);
  }
  // WRITE on UC.
  c.w.pair->set_faults({}, {});
  Wr wr;
  wr.opcode = kWrWrite;
  wr.sges = {{3000, c.key_a, Node::va(c.buf_a)}};
  wr.remote_va = Node::va(c.buf_b + (1u << 20));
  wr.rkey = c.key_b;
  a.post_send(c.qa, wr);
  c.w.run([&] { return false; }, std::chrono::milliseconds(1));
  CHECK(same(b.mem(c.buf_b + (1u << 20), 3000), a.mem(c.buf_a, 3000)));
}

TEST_CASE("CQ: overrun puts the CQ in error; arming raises one event", "[transport][cq]") {
  Wire w;
  TCq small = w.b.create_cq(1);  // 2 CQEs
  TQp qa = w.a.create_qp(kQpUd);
  Bytes in(64);
  TQp qb;
  qb.type = kQpUd;
  qb.sq = w.b.alloc(64 << 8, 64);
  qb.rq = w.b.alloc(64 << 7, 64);
  qb.dbr = w.b.alloc(8, 8);
  put8(in, 0, kQpUd);
  put32(in, 4, w.b.pd);
  put32(in, 8, small.cqn);
  put32(in, 0x0c, small.cqn);
  put64(in, 0x18, qb.sq);
  put64(in, 0x20, qb.rq);
  put64(in, 0x28, qb.dbr);
  put8(in, 0x30, 6);
  put8(in, 0x31, 8);
  put8(in, 0x32, 6);
  put8(in, 0x33, 7);
  qb.qpn = Node::num(w.b.cmd(kOpCreateQp, in));
  Node::Path p;
  w.a.connect(qa, p);
  w.b.connect(qb, p);
  const uint64_t bb = w.b.alloc(4096, 4096);
  const uint32_t kb = w.b.reg_mr(bb, 4096, kMrLocalWrite);
  const uint32_t ah = w.a.create_ah(2);
  // Arm (§7.3) with the consumer counter 0.
  w.b.hca.uar_write64(0, kUarCqArm, (1ull << 24) | (1ull << 28) | small.cqn);
  for (int i = 0; i < 3; ++i) w.b.post_recv(qb, i, {{100, kb, Node::va(bb)}});
  for (int i = 0; i < 3; ++i) {
    Wr s;
    s.ahn = ah;
    s.dest_qpn = qb.qpn;
    s.qkey = 0x80000000;
    w.a.post_send(qa, s);
  }
  w.run([&] { return false; }, std::chrono::milliseconds(2));
  CHECK(w.b.hca.data_stats().cq_overruns == 1);
  Bytes out;
  REQUIRE(w.b.hca.execute(kOpQueryCq, [&] { Bytes q(4); put32(q, 0, small.cqn); return q; }(), out).status == kOk);
  CHECK(get8(out, 0x12) == 1);  // state: error
  CHECK(get32(out, 0x1c) == 2);
  CHECK(w.b.host.irqs == 1);  // one CQ_COMPLETION for the arm (then CQ_ERROR on a disarmed EQ)
  auto got = w.b.poll(small);
  CHECK(got.size() == 2);
}

// Issue 29, finding 11a (docs/simhca.md §12.8, docs/ipoib.md "Security"):
// a UD send WQE's Q_Key with bit 31 set is replaced by the QP's own Q_Key
// (IBA 10.2.4, C10-15), so a QP whose Q_Key is not controlled (every QP
// of an unprivileged client: ibd refuses it the MODIFY_QP) sends no
// controlled Q_Key, whatever its WQEs say; a receiver with a controlled
// Q_Key drops and counts what it sends.
TEST_CASE("UD: a WQE's controlled Q_Key is the QP's own; a controlled receiver drops the rest", "[transport][ud]") {
  Wire w;
  TQp attacker = w.a.create_qp(kQpUd), owner = w.a.create_qp(kQpUd), victim = w.b.create_qp(kQpUd);
  Node::Path unprivileged, controlled;
  unprivileged.qkey = 0x0000000b;
  controlled.qkey = 0x8000000b;
  w.a.connect(attacker, unprivileged);
  w.a.connect(owner, controlled);
  w.b.connect(victim, controlled);
  const uint64_t ba = w.a.alloc(4096, 4096), bb = w.b.alloc(8192, 4096);
  const uint32_t ka = w.a.reg_mr(ba, 4096, kMrLocalWrite), kb = w.b.reg_mr(bb, 8192, kMrLocalWrite);
  const uint32_t ah = w.a.create_ah(2);
  auto send = [&](TQp& from, uint32_t qkey) {
    Wr s;
    s.opcode = kWrSend;
    s.ahn = ah;
    s.dest_qpn = victim.qpn;
    s.qkey = qkey;
    s.sges = {{64, ka, Node::va(ba)}};
    w.a.post_send(from, s);
  };
  w.b.post_recv(victim, 7, {{4096 + 40, kb, Node::va(bb)}});
  send(attacker, 0x8000000b);  // bit 31: the attacker's own 0x0000000b goes
  send(attacker, 0x0000000b);  // the low bits alone
  REQUIRE(w.run([&] { return w.b.hca.data_stats().rx_bad_qkey == 2; }));
  CHECK(w.b.poll(w.b.cq).empty());
  // The QP that holds the controlled Q_Key reaches the victim with it.
  send(owner, 0x80000000);
  std::vector<Cqe> rx;
  REQUIRE(w.run([&] {
    for (auto& c : w.b.poll(w.b.cq)) rx.push_back(c);
    return !rx.empty();
  }));
  CHECK(rx[0].status == kWcSuccess);
  CHECK(rx[0].wr_id == 7);
  CHECK(rx[0].src_qp == owner.qpn);
  CHECK(w.b.hca.data_stats().rx_bad_qkey == 2);
}
