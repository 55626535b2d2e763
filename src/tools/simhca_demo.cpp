// openib-simhca-demo: two simhca processes (docs/simhca.md §13) cabled back
// to back over UDP on 127.0.0.1, both driven through the HCA driver
// (src/hca): an RC QP pair walked to RTS, then a SEND, a 1 MiB RDMA WRITE, an
// RDMA READ of it back, a fetch-and-add, a compare-and-swap, and a UD SEND,
// each checked. Exits 0 only if every check passed.
//
//   openib-simhca-demo [--simhca PATH] [--pcap FILE] [--roce]
//
// --roce: the same over Ethernet ports (docs/simhca.md §16): RoCEv2 frames
// on an Ethernet cable, no LIDs, each port given the GID of an IPv4
// address (198.18.91.1 and .2) and every address vector a GRH and the
// peer's MAC, read from its GID 0 (the link-local EUI-64 of the MAC).
// --bench N: after the checks, N round trips of an 8-byte RC SEND (half the
// round trip printed) and N RDMA WRITEs of 64 KiB, 16 in flight (MB/s
// printed), for bench/roce.sh's comparison of the two kinds of port.
//
// --simhca defaults to the simhca built next to this program
// (build/src/sim/simhca/simhca); --pcap FILE makes simhca N capture its
// port to FILE.hcaN. The children are ended by PID and the temporary
// directory removed on every exit path.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "hca/hca.hpp"
#include "vfio/device.hpp"

namespace fs = std::filesystem;
using namespace openib;

namespace {

constexpr size_t kMiB = 1u << 20, kBuf = 3 * kMiB;  // per side: 768 pages, one mkey
bool g_roce = false;  // --roce
int g_bench = 0;      // --bench N
volatile sig_atomic_t g_stop = 0;
pid_t g_pids[2] = {-1, -1};

void on_signal(int) {
  g_stop = 1;
  for (pid_t p : g_pids)
    if (p > 0) ::kill(p, SIGTERM);
}

[[noreturn]] void fail(const std::string& what) { throw std::runtime_error(what); }
void must(Result<void> r, const char* what) {
  if (!r) fail(std::string(what) + ": " + r.error().str());
}
template <typename T>
T must(Result<T> r, const char* what) {
  if (!r) fail(std::string(what) + ": " + r.error().str());
  return std::move(r).value();
}

uint16_t free_udp_port() {
  int s = ::socket(AF_INET, SOCK_DGRAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t l = sizeof a;
  if (s < 0 || ::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::getsockname(s, reinterpret_cast<sockaddr*>(&a), &l) != 0)
    fail("cannot pick a UDP port");
  ::close(s);
  return ntohs(a.sin_port);
}

// FNV-1a, 64 bits: the checksum printed for each transfer.
uint64_t fnv(const std::byte* p, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ std::to_integer<uint8_t>(p[i])) * 0x100000001b3ull;
  return h;
}

// The simhca children and the temporary directory; the destructor ends the
// children by PID (SIGTERM, then SIGKILL after 5 s) and removes the directory.
struct Children {
  std::string dir;
  ~Children() {
    for (pid_t& p : g_pids) {
      if (p <= 0) continue;
      ::kill(p, SIGTERM);
      int st = 0;
      for (int i = 0; i < 500 && ::waitpid(p, &st, WNOHANG) == 0; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      if (::waitpid(p, &st, WNOHANG) == 0) {
        ::kill(p, SIGKILL);
        ::waitpid(p, &st, 0);
      }
      p = -1;
    }
    std::error_code ec;
    if (!dir.empty()) fs::remove_all(dir, ec);
  }
  // Starts simhca N; its log (stderr) goes to dir/hcaN.log.
  void start(int n, const std::string& bin, std::vector<std::string> args) {
    const pid_t pid = ::fork();
    if (pid < 0) fail("fork failed");
    if (pid == 0) {
      const std::string log = dir + "/hca" + std::to_string(n) + ".log";
      std::freopen(log.c_str(), "w", stderr);
      std::vector<char*> argv;
      argv.push_back(const_cast<char*>(bin.c_str()));
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    g_pids[n - 1] = pid;
  }
};

// One device: driver up, port 1 Active with its LID, a PD, a CQ and a
// registered buffer whose virtual addresses are this process's pointers.
struct Side {
  Side(const std::string& sock, uint16_t lid) : lid(lid) {
    // The socket file appears at bind(), before listen(): until then a
    // connect is refused. Retry for up to 5 s.
    auto d = vfio::open_device("vfio-user:" + sock);
    for (int i = 0; i < 500 && !d && !g_stop; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      d = vfio::open_device("vfio-user:" + sock);
    }
    dev = must(std::move(d), "connect");
    hca = must(hca::Hca::open(*dev, io), "bring-up");
    if (g_roce) {
      roce_port();
    } else {
      hca::PortSetup ps;
      ps.state = hca::kPortActive;
      ps.lid = lid;
      must(hca->set_port(1, ps), "SET_PORT");
    }
    pd = must(hca->alloc_pd(), "ALLOC_PD");
    cq = must(hca->create_cq(8), "CREATE_CQ");
    buf = must(hca->pool().alloc(kBuf, 4096), "DMA buffer");
    hca::MkeyParams mp;
    mp.pdn = pd;
    mp.access = hca::kAccessLocalWrite | hca::kAccessRemoteWrite | hca::kAccessRemoteRead |
                hca::kAccessRemoteAtomic;
    mp.start_va = va(0);
    mp.length = kBuf;
    for (uint64_t i = 0; i < kBuf / 4096; ++i) mp.pages.push_back(buf.iova() + i * 4096);
    key = must(hca->create_mkey(mp), "CREATE_MKEY").lkey;
  }
  // §16: an Ethernet port is Active once cabled; it gets the GID of
  // 198.18.91.<lid> (IPv4-mapped, RoCEv2) at index 1; its MAC is read back
  // from GID 0, fe80:: and the MAC's EUI-64 (RFC 4291 2.5.1).
  void roce_port() {
    const auto pa = must(hca->query_port(1), "QUERY_PORT");
    if (pa.link_layer != hca::LinkLayer::kEthernet || pa.state != hca::kPortActive || pa.lid != 0)
      fail("port 1 is not an Active Ethernet port without a LID");
    gid = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 198, 18, 91, static_cast<uint8_t>(lid)};
    must(sync<void>([&](auto done) { hca->modify_gid_async(1, 1, hca::GidEntry{gid, hca::GidType::kRoceV2}, done); }),
         "SET_GID");
    const auto g0 = must(sync<hca::GidEntry>([&](auto done) { hca->query_gid_async(1, 0, done); }), "QUERY_GID");
    mac = {static_cast<uint8_t>(g0.gid[8] ^ 2), g0.gid[9], g0.gid[10], g0.gid[13], g0.gid[14], g0.gid[15]};
  }
  // An asynchronous verb run to its completion on this side's io_context.
  template <typename T, typename F>
  Result<T> sync(F&& start) {
    std::optional<Result<T>> res;
    start([&res](Result<T> r) { res.emplace(std::move(r)); });
    while (!res && !g_stop) io.run_one_for(std::chrono::milliseconds(100));
    if (!res) return err(EINTR, "interrupted");
    return std::move(*res);
  }
  // The address vector to `peer`: its LID, or (--roce) a GRH to its GID and its MAC.
  hca::AddressVector av_to(const Side& peer) const {
    hca::AddressVector av;
    av.port = 1;
    av.dlid = g_roce ? 0 : peer.lid;
    if (g_roce) {
      av.grh = true;
      av.sgid_index = 1;
      av.hop_limit = 64;
      av.dgid = peer.gid;
      av.dmac = peer.mac;
    }
    return av;
  }
  std::byte* p(size_t off) { return static_cast<std::byte*>(buf.data()) + off; }
  uint64_t va(size_t off) { return reinterpret_cast<uint64_t>(p(off)); }
  hca::Sge sge(size_t off, size_t len) { return {va(off), uint32_t(len), key}; }

  hca::Qp qp(hca::QpType t) {
    hca::QpInit in;
    in.type = t;
    in.pdn = pd;
    in.send_cqn = in.recv_cqn = cq.cqn;
    return must(hca->create_qp(in), "CREATE_QP");
  }
  // RESET -> INIT -> RTR -> RTS (§8.2); RC to (av, dest_qpn), UD to none.
  void to_rts(const hca::Qp& q, const hca::AddressVector& av, uint32_t dest_qpn) {
    using namespace hca::qp_attr;
    const bool ud = q.type == hca::QpType::kUd;
    hca::QpAttr a;
    a.port = a.av.port = 1;
    a.qkey = 0x11111111;
    a.access = hca::kAccessRemoteWrite | hca::kAccessRemoteRead | hca::kAccessRemoteAtomic;
    a.path_mtu = 3;  // 1024
    a.dest_qpn = dest_qpn;
    a.av = av;
    a.timeout = 12;
    a.retry_cnt = a.rnr_retry = 7;
    a.min_rnr_timer = 1;
    a.max_rd_atomic = a.max_dest_rd_atomic = 16;
    a.state = hca::QpState::kInit;
    must(hca->modify_qp(q.qpn, kState | kPkeyIndex | kPort | (ud ? kQkey : kAccessFlags), a), "INIT");
    a.state = hca::QpState::kRtr;
    const uint32_t rtr = ud ? 0 : kAv | kPathMtu | kDestQpn | kRqPsn | kMaxDestRdAtomic | kMinRnrTimer;
    must(hca->modify_qp(q.qpn, kState | rtr, a), "RTR");
    a.state = hca::QpState::kRts;
    const uint32_t rts = ud ? 0 : kTimeout | kRetryCnt | kRnrRetry | kMaxQpRdAtomic;
    must(hca->modify_qp(q.qpn, kState | kSqPsn | rts, a), "RTS");
  }
  // One completion (bounded busy wait), checked for success and opcode.
  hca::WorkCompletion wait(uint8_t opcode, const char* what) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (std::chrono::steady_clock::now() < end && !g_stop) {
      auto c = hca->poll_cq(cq, 1);
      if (c.empty()) {
        std::this_thread::sleep_for(std::chrono::microseconds(50));
        continue;
      }
      if (c[0].status != hca::kWcSuccess || c[0].opcode != opcode)
        fail(std::string(what) + ": completion status " + std::to_string(c[0].status) + " opcode " +
             std::to_string(c[0].opcode));
      return c[0];
    }
    fail(std::string(what) + ": no completion");
  }

  // Destroyed in reverse: buffer and CQ memory, then the driver's teardown
  // ladder, then the device connection.
  boost::asio::io_context io;
  std::unique_ptr<vfio::Device> dev;
  std::unique_ptr<hca::Hca> hca;
  uint16_t lid;
  std::array<uint8_t, 16> gid{};  // --roce: index 1's
  std::array<uint8_t, 6> mac{};   // --roce: the port's
  uint32_t pd = 0, key = 0;
  hca::Cq cq;
  dma::DmaBuffer buf;
};

void fill(std::byte* p, size_t n, uint32_t x) {
  for (size_t i = 0; i < n; ++i) {
    x ^= x << 13, x ^= x >> 17, x ^= x << 5;
    p[i] = std::byte(static_cast<uint8_t>(x));
  }
}

void line(const char* op, size_t bytes, uint64_t sum, bool ok, const char* extra = "") {
  std::printf("%-26s %8zu bytes  fnv64 %016llx  %s%s\n", op, bytes, (unsigned long long)sum,
              ok ? "ok" : "MISMATCH", extra);
  if (!ok) fail(std::string(op) + ": check failed");
}

// The first "data path" statistics line simhca logged (when the driver left,
// before the device reset), if any.
void print_counters(const std::string& log, int n) {
  std::ifstream in(log);
  std::string l, last;
  while (last.empty() && std::getline(in, l))
    if (l.find("data path:") != std::string::npos) last = l;
  if (!last.empty()) std::printf("hca%d port 1:%s\n", n, last.substr(last.find("data path:") + 10).c_str());
}

// The next completion of `s`, any kind (bounded busy wait), checked for success.
hca::WorkCompletion next(Side& s, const char* what) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < end && !g_stop)
    if (auto c = s.hca->poll_cq(s.cq, 1); !c.empty()) {
      if (c[0].status != hca::kWcSuccess) fail(std::string(what) + ": status " + std::to_string(c[0].status));
      return c[0];
    }
  fail(std::string(what) + ": no completion");
}

// --bench: ping-pong latency and WRITE bandwidth over the connected pair.
void bench(Side& A, Side& B, hca::Qp& qa, hca::Qp& qb, uint64_t& id) {
  using clk = std::chrono::steady_clock;
  const size_t off = 2 * kMiB + 16384;
  must(B.hca->post_recv(qb, {++id, {B.sge(off, 64)}}), "post_recv");
  must(A.hca->post_recv(qa, {++id, {A.sge(off, 64)}}), "post_recv");
  hca::SendWr s;
  s.sg = {A.sge(off + 64, 8)};
  hca::SendWr t = s;
  t.sg = {B.sge(off + 64, 8)};
  const auto t0 = clk::now();
  for (int i = 0; i < g_bench; ++i) {  // A -> B, B -> A; each receive reposted before its reply
    s.wr_id = ++id;
    must(A.hca->post_send(qa, s), "ping");
    while (next(B, "ping").opcode != hca::kWcRecv) {}
    must(B.hca->post_recv(qb, {++id, {B.sge(off, 64)}}), "post_recv");
    t.wr_id = ++id;
    must(B.hca->post_send(qb, t), "pong");
    while (next(A, "pong").opcode != hca::kWcRecv) {}
    must(A.hca->post_recv(qa, {++id, {A.sge(off, 64)}}), "post_recv");
  }
  const double rtt_us = std::chrono::duration<double, std::micro>(clk::now() - t0).count() / g_bench;
  // The pong's send completions may trail: drain what is left.
  while (!A.hca->poll_cq(A.cq, 16).empty() || !B.hca->poll_cq(B.cq, 16).empty()) {}
  constexpr size_t kLen = 64 * 1024, kWindow = 16;
  hca::SendWr w;
  w.opcode = hca::WrOpcode::kWrite;
  w.sg = {A.sge(0, kLen)};
  w.remote_addr = B.va(0);
  w.rkey = B.key;
  size_t posted = 0, done = 0;
  const auto t1 = clk::now();
  while (done < size_t(g_bench)) {
    while (posted < size_t(g_bench) && posted - done < kWindow) {
      w.wr_id = ++id;
      must(A.hca->post_send(qa, w), "WRITE");
      ++posted;
    }
    next(A, "WRITE");
    ++done;
  }
  const double secs = std::chrono::duration<double>(clk::now() - t1).count();
  std::printf("bench %s: rc_send_8B_half_rtt_us %.2f rc_write_64KiB_MBps %.1f (%d each)\n",
              g_roce ? "roce" : "ib", rtt_us / 2, double(kLen) * g_bench / secs / 1e6, g_bench);
}

int run(const std::string& bin, const std::string& pcap, Children& kids) {
  const uint16_t pa = free_udp_port(), pb = free_udp_port();
  auto args = [&](int n, uint16_t local, uint16_t peer) {
    std::vector<std::string> v{"--socket", kids.dir + "/hca" + std::to_string(n) + ".sock", "--log", "info",
                               "--guid", n == 1 ? "0x123400fffe000001" : "0x123400fffe000002", "--port1",
                               "LOCAL=127.0.0.1:" + std::to_string(local) + ",PEER=127.0.0.1:" + std::to_string(peer)};
    if (g_roce) v.insert(v.end(), {"--link-layer", "ethernet"});
    if (!pcap.empty()) v.insert(v.end(), {"--pcap", pcap + ".hca" + std::to_string(n)});
    return v;
  };
  kids.start(1, bin, args(1, pa, pb));
  kids.start(2, bin, args(2, pb, pa));
  std::printf("simhca 1 pid %d udp 127.0.0.1:%u, simhca 2 pid %d udp 127.0.0.1:%u\n", g_pids[0], pa,
              g_pids[1], pb);
  {
    Side A(kids.dir + "/hca1.sock", 1), B(kids.dir + "/hca2.sock", 2);
    hca::Qp qa = A.qp(hca::QpType::kRc), qb = B.qp(hca::QpType::kRc);
    A.to_rts(qa, A.av_to(B), qb.qpn);
    B.to_rts(qb, B.av_to(A), qa.qpn);
    if (g_roce)
      std::printf("both Ethernet ports Active (198.18.91.1 %02x:%02x:%02x:%02x:%02x:%02x, 198.18.91.2 "
                  "%02x:%02x:%02x:%02x:%02x:%02x); RC QPs 0x%x <-> 0x%x in RTS\n",
                  A.mac[0], A.mac[1], A.mac[2], A.mac[3], A.mac[4], A.mac[5], B.mac[0], B.mac[1], B.mac[2],
                  B.mac[3], B.mac[4], B.mac[5], qa.qpn, qb.qpn);
    else
      std::printf("both ports Active (LIDs 1, 2); RC QPs 0x%x <-> 0x%x in RTS\n", qa.qpn, qb.qpn);
    uint64_t id = 0;

    // RC SEND: A[2 MiB] -> B[2 MiB]
    const char msg[] = "hello from hca1 over RC, through the driver and a UDP cable";
    std::memcpy(A.p(2 * kMiB), msg, sizeof msg);
    must(B.hca->post_recv(qb, {++id, {B.sge(2 * kMiB, 256)}}), "post_recv");
    hca::SendWr s;
    s.wr_id = ++id;
    s.sg = {A.sge(2 * kMiB, sizeof msg)};
    must(A.hca->post_send(qa, s), "post_send SEND");
    auto rx = B.wait(hca::kWcRecv, "RC SEND receive");
    A.wait(hca::kWcSend, "RC SEND");
    line("RC SEND", rx.byte_len, fnv(B.p(2 * kMiB), rx.byte_len),
         rx.byte_len == sizeof msg && std::memcmp(B.p(2 * kMiB), msg, sizeof msg) == 0);

    // RDMA WRITE 1 MiB: A[0, 1 MiB) -> B[0, 1 MiB)
    fill(A.p(0), kMiB, 12345);
    hca::SendWr w;
    w.wr_id = ++id;
    w.opcode = hca::WrOpcode::kWrite;
    w.sg = {A.sge(0, kMiB)};
    w.remote_addr = B.va(0);
    w.rkey = B.key;
    must(A.hca->post_send(qa, w), "post_send WRITE");
    A.wait(hca::kWcRdmaWrite, "RDMA WRITE");
    line("RC RDMA WRITE", kMiB, fnv(B.p(0), kMiB), std::memcmp(B.p(0), A.p(0), kMiB) == 0);

    // RDMA READ it back: B[0, 1 MiB) -> A[1 MiB, 2 MiB)
    hca::SendWr r;
    r.wr_id = ++id;
    r.opcode = hca::WrOpcode::kRead;
    r.sg = {A.sge(kMiB, kMiB)};
    r.remote_addr = B.va(0);
    r.rkey = B.key;
    must(A.hca->post_send(qa, r), "post_send READ");
    auto rd = A.wait(hca::kWcRdmaRead, "RDMA READ");
    line("RC RDMA READ (compared)", rd.byte_len, fnv(A.p(kMiB), kMiB),
         rd.byte_len == kMiB && std::memcmp(A.p(kMiB), A.p(0), kMiB) == 0);

    // Atomics on B[2 MiB + 4096], results into A[2 MiB + 4096].
    const size_t at_off = 2 * kMiB + 4096;
    uint64_t v = 100, got = 0;
    std::memcpy(B.p(at_off), &v, 8);
    hca::SendWr at;
    at.wr_id = ++id;
    at.opcode = hca::WrOpcode::kFetchAdd;
    at.sg = {A.sge(at_off, 8)};
    at.remote_addr = B.va(at_off);
    at.rkey = B.key;
    at.swap_add = 11;
    must(A.hca->post_send(qa, at), "post_send FETCH_ADD");
    A.wait(hca::kWcFetchAdd, "FETCH_ADD");
    std::memcpy(&got, A.p(at_off), 8);
    std::memcpy(&v, B.p(at_off), 8);
    line("RC FETCH_ADD 100 += 11", 8, fnv(A.p(at_off), 8), got == 100 && v == 111,
         ("  (original " + std::to_string(got) + ", now " + std::to_string(v) + ")").c_str());
    at.wr_id = ++id;
    at.opcode = hca::WrOpcode::kCmpSwap;
    at.compare = 111;
    at.swap_add = 5;
    must(A.hca->post_send(qa, at), "post_send CMP_SWAP");
    A.wait(hca::kWcCompSwap, "CMP_SWAP");
    std::memcpy(&got, A.p(at_off), 8);
    std::memcpy(&v, B.p(at_off), 8);
    line("RC CMP_SWAP 111 -> 5", 8, fnv(A.p(at_off), 8), got == 111 && v == 5,
         ("  (original " + std::to_string(got) + ", now " + std::to_string(v) + ")").c_str());

    // UD SEND: A[2 MiB + 8192] -> B[2 MiB + 8192], after 40 bytes of GRH area.
    hca::Qp ua = A.qp(hca::QpType::kUd), ub = B.qp(hca::QpType::kUd);
    A.to_rts(ua, {}, 0);
    B.to_rts(ub, {}, 0);
    const uint32_t ah = must(A.hca->create_ah(A.pd, A.av_to(B)), "CREATE_AH");
    const size_t ud_off = 2 * kMiB + 8192, ud_len = 512;
    fill(A.p(ud_off), ud_len, 777);
    must(B.hca->post_recv(ub, {++id, {B.sge(ud_off, ud_len + 40)}}), "post_recv UD");
    hca::SendWr u;
    u.wr_id = ++id;
    u.sg = {A.sge(ud_off, ud_len)};
    u.ahn = ah;
    u.remote_qpn = ub.qpn;
    must(A.hca->post_send(ua, u), "post_send UD");
    rx = B.wait(hca::kWcRecv, "UD SEND receive");
    A.wait(hca::kWcSend, "UD SEND");
    // With a GRH (--roce), its SGID (bytes 8..23 of the GRH area) is A's GID.
    const bool from_a = g_roce ? std::memcmp(B.p(ud_off + 8), A.gid.data(), 16) == 0 : rx.slid == 1;
    line("UD SEND", rx.byte_len - 40, fnv(B.p(ud_off + 40), ud_len),
         rx.byte_len == ud_len + 40 && rx.src_qp == ua.qpn && from_a &&
             std::memcmp(B.p(ud_off + 40), A.p(ud_off), ud_len) == 0);

    if (g_bench > 0) bench(A, B, qa, qb, id);
    for (auto* q : {&qa, &ua}) must(A.hca->destroy_qp(*q), "DESTROY_QP");
    for (auto* q : {&qb, &ub}) must(B.hca->destroy_qp(*q), "DESTROY_QP");
    must(A.hca->destroy_ah(ah), "DESTROY_AH");
  }  // drivers closed: each simhca logs its data-path counters
  for (int n = 1; n <= 2; ++n) {
    // Ends the child (SIGTERM, bounded wait) so its log is complete.
    ::kill(g_pids[n - 1], SIGTERM);
    int st = 0;
    for (int i = 0; i < 500 && ::waitpid(g_pids[n - 1], &st, WNOHANG) == 0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (::waitpid(g_pids[n - 1], &st, WNOHANG) == 0) continue;  // the destructor kills it
    g_pids[n - 1] = -1;
    print_counters(kids.dir + "/hca" + std::to_string(n) + ".log", n);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  std::string bin, pcap;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if ((a == "--simhca" || a == "--pcap") && i + 1 < argc) {
      (a == "--simhca" ? bin : pcap) = argv[++i];
    } else if (a == "--roce") {
      g_roce = true;
    } else if (a == "--bench" && i + 1 < argc) {
      g_bench = std::clamp(std::atoi(argv[++i]), 1, 1000000);
    } else {
      std::fprintf(stderr, "usage: %s [--simhca PATH] [--pcap FILE] [--roce] [--bench N]\n", argv[0]);
      return a == "-h" || a == "--help" ? 0 : 2;
    }
  }
  if (bin.empty()) {
    std::error_code ec;
    bin = (fs::read_symlink("/proc/self/exe", ec).parent_path() / "../sim/simhca/simhca").lexically_normal();
  }
  if (::access(bin.c_str(), X_OK) != 0) {
    std::fprintf(stderr, "simhca-demo: no simhca program at %s (use --simhca PATH)\n", bin.c_str());
    return 1;
  }
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
  Children kids;
  char tmpl[] = "/tmp/openib-simhca-demo-XXXXXX";
  if (!::mkdtemp(tmpl)) {
    std::perror("simhca-demo: mkdtemp");
    return 1;
  }
  kids.dir = tmpl;
  try {
    run(bin, pcap, kids);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "simhca-demo: FAILED: %s\n", e.what());
    return 1;
  }
  std::printf("simhca-demo: all checks passed\n");
  return 0;
}
