// openib-bench: libopenib through two ibd daemons against TCP over loopback
// and memcpy, on the same machine, in one run (docs/performance.md).
//
//   openib-bench --socket-a A.sock --socket-b B.sock [--ibd-pid PID] [--simhca-pid PID] [--quick]
//                [--nap-us N] [--yield-every N] [--skip-many-qps] [--procs N] [--qps-per-proc N]
//                [--scale N] [--only latency|write|qps] [--clients thread|procs|both]
//   openib-bench --baselines-only
//
// What it measures, and how:
//  (a) 8-byte RC SEND half round-trip: one process, one thread, two Contexts
//      (one per ibd, each ibd with its simhca, cabled back to back: shared
//      memory or UDP, bench/run.sh --cable).
//      The thread posts a SEND on A, polls B's CQ for the receive, posts the
//      reply on B, polls A's CQ for it: a true ping-pong (B answers only after
//      it has received), with one busy poller instead of two, so that the two
//      simhca processes keep the CPU they need on a 2-core machine.
//      Half RTT = elapsed / (2 x iterations); median of 5 repetitions.
//  (b) 64 KiB RC RDMA WRITE bandwidth, A -> B, 16 WRITEs in flight, every one
//      signaled; the target buffer is checked against the source afterwards.
//  (c) TCP over 127.0.0.1 with TCP_NODELAY: 8-byte ping-pong half RTT (two
//      threads) and 64 KiB streaming bandwidth (two threads).
//  (d) memcpy of 64 KiB blocks between page-aligned buffers.
//  (a2), (b2) with --clients procs|both: the same ping-pong and WRITE stream
//      with side B in a second client process (forked before anything of
//      libopenib is opened; QPN, LID, address and rkey cross a socketpair),
//      each side polling its own CQ: "two client processes".
//  (f) the floor for a cross-process signal: two processes pass a counter
//      back and forth through two cache lines of shared memory, spinning,
//      and again sleeping in FUTEX_WAIT / woken by FUTEX_WAKE.
//  (g) with --ref-socket-a/-b: (a) and (b) also through a reference pair of
//      ibds (bench/run.sh --udp-ref: the direct UDP cable beside the
//      switch), interleaved, and the ratios to it.
//  (e) 10,000 RC QPs across 100 client processes on ibd A (each: Context,
//      PD, one CQ, 100 QPs with 1-entry rings), the creation rate over the
//      whole (first create to last, CLOCK_MONOTONIC across processes), and
//      the anonymous memory of ibd and of its simhca child per QP
//      (/proc/PID/smaps_rollup Pss_Anon and Anonymous, before and after).
// (a)-(c), (a2), (b2) are interleaved: every openib repetition runs right after a TCP
// one of the same kind, so that the ratios compare runs that met the
// machine in the same state (its two CPUs are shared and noisy).
// Targets (issue 14's, for the layout named by --layout, which bench/run.sh
// passes) are printed with PASS/MISS; the exit status is 0 unless a
// measurement could not be made at all.
#include <dirent.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <new>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "rc_link.hpp"

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "openib-bench: %s\n", what.c_str());
  std::exit(2);
}

bool full_write(int fd, const void* p, size_t n) {
  auto* c = static_cast<const char*>(p);
  while (n) {
    ssize_t k = ::write(fd, c, n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    c += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}
bool full_read(int fd, void* p, size_t n) {
  auto* c = static_cast<char*>(p);
  while (n) {
    ssize_t k = ::read(fd, c, n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    c += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}

// ---- TCP over loopback ------------------------------------------------------
struct TcpPair {
  int client = -1, server = -1;
  ~TcpPair() {
    if (client >= 0) ::close(client);
    if (server >= 0) ::close(server);
  }
};

TcpPair tcp_pair() {
  int l = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  if (l < 0 || ::bind(l, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || ::listen(l, 1) != 0 ||
      ::getsockname(l, reinterpret_cast<sockaddr*>(&a), &len) != 0)
    die(std::string("tcp listen: ") + std::strerror(errno));
  TcpPair p;
  p.client = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (::connect(p.client, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0)
    die(std::string("tcp connect: ") + std::strerror(errno));
  p.server = ::accept4(l, nullptr, nullptr, SOCK_CLOEXEC);
  ::close(l);
  if (p.server < 0) die("tcp accept");
  int one = 1;
  ::setsockopt(p.client, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  ::setsockopt(p.server, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return p;
}

// 8-byte ping-pong; returns the median half round trip in microseconds.
double tcp_latency_us(int reps, int iters) {
  std::vector<double> r;
  for (int rep = 0; rep < reps; ++rep) {
    TcpPair p = tcp_pair();
    std::thread echo([&] {
      char b[8];
      for (int i = 0; i < iters + 100; ++i)
        if (!full_read(p.server, b, 8) || !full_write(p.server, b, 8)) return;
    });
    char b[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    for (int i = 0; i < 100; ++i) full_write(p.client, b, 8), full_read(p.client, b, 8);
    auto t0 = Clock::now();
    for (int i = 0; i < iters; ++i)
      if (!full_write(p.client, b, 8) || !full_read(p.client, b, 8)) die("tcp ping-pong");
    r.push_back(seconds_since(t0) * 1e6 / (2.0 * iters));
    echo.join();
  }
  return median(r);
}

// 64 KiB blocks streamed one way; returns the median in MB/s (10^6 bytes).
double tcp_bandwidth_mbs(int reps, size_t block, int blocks) {
  std::vector<double> r;
  std::vector<char> src(block, 'x');
  for (int rep = 0; rep < reps; ++rep) {
    TcpPair p = tcp_pair();
    std::thread sink([&] {
      std::vector<char> b(block);
      size_t want = block * static_cast<size_t>(blocks), got = 0;
      while (got < want) {
        ssize_t k = ::read(p.server, b.data(), std::min(b.size(), want - got));
        if (k <= 0) return;
        got += static_cast<size_t>(k);
      }
      char ack = 1;
      full_write(p.server, &ack, 1);
    });
    auto t0 = Clock::now();
    for (int i = 0; i < blocks; ++i)
      if (!full_write(p.client, src.data(), block)) die("tcp stream");
    char ack;
    if (!full_read(p.client, &ack, 1)) die("tcp ack");
    double s = seconds_since(t0);
    sink.join();
    r.push_back(static_cast<double>(block) * blocks / s / 1e6);
  }
  return median(r);
}

// ---- memcpy -----------------------------------------------------------------
// Between two page-aligned buffers, as registered memory (an MR's pages)
// is: two malloc'd 64 KiB vectors sit 64 KiB + 16 bytes apart, and on some
// CPUs (an AMD EPYC here) that placement copies at about 2 GB/s against
// 34-39 GB/s page-aligned (issue 14), which made openib/memcpy an artifact.
double memcpy_mbs(int reps, size_t block, int copies) {
  struct Free {
    void operator()(char* p) const { std::free(p); }
  };
  const size_t bytes = (block + 4095) / 4096 * 4096;
  std::unique_ptr<char, Free> a(static_cast<char*>(std::aligned_alloc(4096, bytes)));
  std::unique_ptr<char, Free> b(static_cast<char*>(std::aligned_alloc(4096, bytes)));
  if (!a || !b) die("memcpy: aligned_alloc");
  std::memset(a.get(), 'a', bytes);
  std::memset(b.get(), 'b', bytes);
  std::vector<double> r;
  for (int rep = 0; rep < reps; ++rep) {
    auto t0 = Clock::now();
    for (int i = 0; i < copies; ++i) {
      a.get()[0] = static_cast<char>(i);
      std::memcpy(b.get(), a.get(), block);
      asm volatile("" : : "r"(b.get()) : "memory");  // keep the copy
    }
    r.push_back(static_cast<double>(block) * copies / seconds_since(t0) / 1e6);
  }
  return median(r);
}

// ---- shared-memory ping-pong between two processes ---------------------------
// The floor for any signal from one process to another on this machine: a
// forked child and the parent hand a counter back and forth through two
// cache lines of a shared mapping. `futex` false: each side spins on the
// line it waits for (a pause per poll, a sched_yield every 1024, as the
// openib poller does); true: each side sleeps in FUTEX_WAIT and the other
// wakes it (FUTEX_WAKE after the store), so every hop costs a wake-up.
struct alignas(64) PingLine {
  std::atomic<uint32_t> v{0};
};
struct PingPage {
  PingLine ping, pong;
};

void futex_wake(std::atomic<uint32_t>& w) {
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(&w), FUTEX_WAKE, 1, nullptr, nullptr, 0);
}

// Waits until `w` holds `want`.
void ping_wait(std::atomic<uint32_t>& w, uint32_t want, bool futex) {
  for (unsigned spins = 1;; ++spins) {
    uint32_t v = w.load(std::memory_order_acquire);
    if (v == want) return;
    if (futex) {
      ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(&w), FUTEX_WAIT, v, nullptr, nullptr, 0);
      continue;
    }
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
    if (spins % 1024 == 0) ::sched_yield();
  }
}

// Median half round trip in microseconds.
double shm_pingpong_us(int reps, int iters, bool futex) {
  void* m = ::mmap(nullptr, sizeof(PingPage), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) die("shm ping-pong: mmap");
  auto* pg = new (m) PingPage;
  const uint32_t total = static_cast<uint32_t>(reps) * static_cast<uint32_t>(iters + 100);
  pid_t pid = ::fork();
  if (pid < 0) die("shm ping-pong: fork");
  if (pid == 0) {
    ::alarm(120);  // never outlive a lost parent
    for (uint32_t i = 1; i <= total; ++i) {
      ping_wait(pg->ping.v, i, futex);
      pg->pong.v.store(i, std::memory_order_release);
      if (futex) futex_wake(pg->pong.v);
    }
    ::_exit(0);
  }
  uint32_t i = 0;
  auto one = [&] {
    ++i;
    pg->ping.v.store(i, std::memory_order_release);
    if (futex) futex_wake(pg->ping.v);
    ping_wait(pg->pong.v, i, futex);
  };
  std::vector<double> r;
  for (int rep = 0; rep < reps; ++rep) {
    for (int k = 0; k < 100; ++k) one();
    auto t0 = Clock::now();
    for (int k = 0; k < iters; ++k) one();
    r.push_back(seconds_since(t0) * 1e6 / (2.0 * iters));
  }
  int st;
  ::waitpid(pid, &st, 0);
  ::munmap(m, sizeof(PingPage));
  return median(r);
}

// ---- /proc ------------------------------------------------------------------
[[maybe_unused]] std::map<std::string, long> smaps_rollup(int pid) {
  std::map<std::string, long> m;
  std::ifstream f("/proc/" + std::to_string(pid) + "/smaps_rollup");
  std::string line;
  while (std::getline(f, line)) {
    auto colon = line.find(':');
    if (colon == std::string::npos || line.find(" kB") == std::string::npos) continue;
    m[line.substr(0, colon)] = std::atol(line.c_str() + colon + 1);
  }
  return m;
}

[[maybe_unused]] std::vector<int> children_of(int pid) {
  std::vector<int> out;
  std::string dir = "/proc/" + std::to_string(pid) + "/task/";
  // Every thread's children file (a child belongs to the thread that forked it).
  if (auto* d = ::opendir(dir.c_str())) {
    while (auto* e = ::readdir(d)) {
      if (e->d_name[0] == '.') continue;
      std::ifstream f(dir + e->d_name + "/children");
      int c;
      while (f >> c) out.push_back(c);
    }
    ::closedir(d);
  }
  return out;
}

const char* verdict(bool ok) { return ok ? "PASS" : "MISS"; }

// Issue 14's targets for the layout run.sh started (--layout), as ratios to
// TCP loopback measured in the same run; 0: none for that layout and kind
// of client (bench/all.sh prints the same table for every layout).
struct Targets {
  double lat_max = 0, bw_min = 0;
};
Targets targets_for(const std::string& layout, bool two_procs) {
  if (layout == "one-shm" && !two_procs) return {0.5, 1.5};
  if (layout == "each-shm" && two_procs) return {0.5, 0};
  if (layout == "each-udp") return {1.0, 1.0};
  return {};
}
// A ratio line, with its target and PASS/MISS when the layout has one.
void print_ratio(const char* label, double ratio, double target, bool at_most) {
  if (target <= 0) {
    std::printf("%-44s %12.2f\n", label, ratio);
    return;
  }
  std::printf("%-44s %12.2f   target %s %.1f  %s\n", label, ratio, at_most ? "<=" : ">=", target,
              verdict(at_most ? ratio <= target : ratio >= target));
}

using namespace openib;
using namespace openib::testing;

std::unique_ptr<Side> must_side(const std::string& sock, size_t len, QpCap cap) {
  auto s = open_side(sock, len, cap);
  if (!s) die("open " + sock + ": " + s.error().str());
  return std::move(s).value();
}

// How the polling thread waits between empty polls: 0 spins, with a
// sched_yield every --yield-every empty polls (default 1024; 1 hands the
// CPU at once to the simhca processes that must run for the completion,
// which made no clear difference on the 2-CPU VM); N > 0
// sleeps N microseconds (--nap-us).
int g_nap_us = 0;
unsigned g_yield_every = 1024;

Result<Wc> next_wc(Cq& cq, int timeout_ms) {
  auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  if (g_nap_us <= 0) {
    Wc wc;
    for (unsigned spins = 1;; ++spins) {
      const int n = cq.poll({&wc, 1});
      if (n < 0) return err(-n, "poll_cq failed");
      if (n == 1) return wc;
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();  // a spin-wait hint: frees the core's resources, reads the CQ line less often
#endif
      if (spins % g_yield_every == 0) {
        if (Clock::now() > deadline) return err(ETIMEDOUT, "no completion within {} ms", timeout_ms);
        ::sched_yield();
      }
    }
  }
  Wc wc;
  for (;;) {
    if (cq.poll({&wc, 1}) == 1) return wc;
    if (Clock::now() > deadline) return err(ETIMEDOUT, "no completion within {} ms", timeout_ms);
    ::usleep(static_cast<useconds_t>(g_nap_us));
  }
}

// Waits for a receive completion on `s`, counting the send completions met.
void wait_recv(Side& s, int timeout_ms) {
  for (;;) {
    auto wc = next_wc(*s.cq, timeout_ms);
    if (!wc) die("ping-pong: " + wc.error().str());
    if (wc->status != kWcSuccess)
      die(std::string("ping-pong: completion status ") + wc_status_str(wc->status));
    if (wc->opcode == kWcRecv) return;
  }
}

// The receives the ping-pong keeps posted (each one taken is posted again).
void prime_recvs(Side& a, Side& b) {
  constexpr int kRecvDepth = 16;
  for (Side* s : {&a, &b})
    for (int i = 0; i < kRecvDepth; ++i)
      if (post_recv(*s->qp, *s->mr, 64, 8, 1)) die("post_recv");
}

double openib_latency_us(Side& a, Side& b, int reps, int iters) {
  auto one = [&] {
    if (post_send(*a.qp, *a.mr, 0, 8, 2)) die("post_send A");
    wait_recv(b, 5000);
    if (post_recv(*b.qp, *b.mr, 64, 8, 1)) die("post_recv B");
    if (post_send(*b.qp, *b.mr, 0, 8, 2)) die("post_send B");
    wait_recv(a, 5000);
    if (post_recv(*a.qp, *a.mr, 64, 8, 1)) die("post_recv A");
  };
  for (int i = 0; i < 50; ++i) one();
  std::vector<double> r;
  for (int rep = 0; rep < reps; ++rep) {
    auto t0 = Clock::now();
    int done = 0;
    for (; done < iters && seconds_since(t0) < 20; ++done) one();
    r.push_back(seconds_since(t0) * 1e6 / (2.0 * done));
  }
  // Drain the send completions still queued, so that the CQs are quiet.
  Wc wc[16];
  for (Side* s : {&a, &b})
    while (s->cq->poll(wc) > 0) {
    }
  return median(r);
}

uint8_t write_pattern(size_t i) { return static_cast<uint8_t>(i * 7 + 3); }

// The WRITE stream from `a` into the remote buffer (remote, rkey): `count`
// WRITEs of `block` bytes, kDepth in flight; the median in MB/s.
double write_stream_mbs(Side& a, uint64_t remote, uint32_t rkey, int reps, size_t block, int count) {
  constexpr int kDepth = 16;
  for (size_t i = 0; i < block; ++i) a.buf()[i] = write_pattern(i);
  std::vector<double> r;
  for (int rep = 0; rep < reps; ++rep) {
    int posted = 0, done = 0;
    auto t0 = Clock::now();
    while (done < count) {
      while (posted < count && posted - done < kDepth) {
        if (post_send(*a.qp, *a.mr, 0, static_cast<uint32_t>(block), 3, WrOpcode::kWrite, remote, rkey))
          die("post WRITE");
        ++posted;
      }
      auto wc = next_wc(*a.cq, 10000);
      if (!wc) die("WRITE: " + wc.error().str());
      if (wc->status != kWcSuccess) die(std::string("WRITE: ") + wc_status_str(wc->status));
      ++done;
    }
    r.push_back(static_cast<double>(block) * count / seconds_since(t0) / 1e6);
  }
  return median(r);
}

double openib_write_mbs(Side& a, Side& b, int reps, size_t block, int count) {
  std::memset(b.buf(), 0, block);
  double mbs = write_stream_mbs(a, reinterpret_cast<uint64_t>(b.buf()), b.mr->rkey(), reps, block, count);
  if (std::memcmp(a.buf(), b.buf(), block) != 0) die("WRITE: target differs from the source");
  return mbs;
}

// ---- side B in a second client process ---------------------------------------
// "Two client processes": side A stays in this process, side B is opened by
// a forked child (forked before this process opens anything of libopenib),
// which answers the ping-pong on its own CQ and is the WRITE stream's
// target. They exchange LID, QPN, buffer address and rkey, and then
// commands, over a socketpair.
struct PeerInfo {
  uint16_t lid = 0;
  uint32_t qpn = 0;
  uint64_t addr = 0;
  uint32_t rkey = 0;
};
struct PeerCmd {
  char op = 0;  // 'P' answer n SENDs, 'Z' zero the buffer, 'C' compare it with the WRITE pattern, 'Q' quit
  int32_t n = 0;
  uint64_t len = 0;
};

[[noreturn]] void peer_process(const std::string& sock, size_t len, QpCap cap, int fd) {
  ::alarm(900);  // never outlive a lost parent
  auto b = must_side(sock, len, cap);
  PeerInfo mine{b->lid, b->qp->qp_num(), reinterpret_cast<uint64_t>(b->buf()), b->mr->rkey()}, theirs;
  if (!full_write(fd, &mine, sizeof mine) || !full_read(fd, &theirs, sizeof theirs)) ::_exit(3);
  if (auto r = to_rts(*b->qp, theirs.qpn, theirs.lid); !r) die("peer to RTS: " + r.error().str());
  for (int i = 0; i < 16; ++i)
    if (post_recv(*b->qp, *b->mr, 64, 8, 1)) die("peer post_recv");
  PeerCmd c;
  char ok = 'R';
  if (!full_write(fd, &ok, 1)) ::_exit(3);
  while (full_read(fd, &c, sizeof c) && c.op != 'Q') {
    ok = 'D';
    if (c.op == 'P') {
      for (int i = 0; i < c.n; ++i) {
        wait_recv(*b, 5000);
        if (post_recv(*b->qp, *b->mr, 64, 8, 1)) die("peer post_recv");
        if (post_send(*b->qp, *b->mr, 0, 8, 2)) die("peer post_send");
      }
    } else if (c.op == 'Z') {
      std::memset(b->buf(), 0, c.len);
    } else if (c.op == 'C') {
      for (size_t i = 0; i < c.len; ++i)
        if (b->buf()[i] != write_pattern(i)) ok = 'N';
    }
    if (!full_write(fd, &ok, 1)) break;
  }
  b.reset();
  ::_exit(0);
}

struct Peer {
  pid_t pid = -1;
  int fd = -1;
  PeerInfo info;
  char call(PeerCmd c) {
    char r = 0;
    if (!full_write(fd, &c, sizeof c) || !full_read(fd, &r, 1)) die("the second client process is gone");
    return r;
  }
  ~Peer() {
    if (pid <= 0) return;
    PeerCmd q{'Q', 0, 0};
    full_write(fd, &q, sizeof q);
    ::close(fd);
    int st;
    ::waitpid(pid, &st, 0);
  }
};

// `other`: a peer already forked, whose socket this child must not hold
// (else that peer would not see its end close).
std::unique_ptr<Peer> fork_peer(const std::string& sock, size_t len, QpCap cap, const Peer* other = nullptr) {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) die("socketpair");
  std::fflush(stdout);
  pid_t pid = ::fork();
  if (pid < 0) die("fork");
  if (pid == 0) {
    ::close(sv[0]);
    if (other) ::close(other->fd);
    peer_process(sock, len, cap, sv[1]);
  }
  ::close(sv[1]);
  auto p = std::make_unique<Peer>();
  p->pid = pid;
  p->fd = sv[0];
  return p;
}

// Side A against the peer's B: exchange, to RTS, receives posted.
void connect_peer(Side& a, Peer& p) {
  if (!full_read(p.fd, &p.info, sizeof p.info)) die("the second client process could not open its side (its error above)");
  if (auto r = to_rts(*a.qp, p.info.qpn, p.info.lid); !r) die("to RTS: " + r.error().str());
  PeerInfo mine{a.lid, a.qp->qp_num(), reinterpret_cast<uint64_t>(a.buf()), a.mr->rkey()};
  char ready = 0;
  if (!full_write(p.fd, &mine, sizeof mine) || !full_read(p.fd, &ready, 1) || ready != 'R')
    die("the second client process did not get ready");
  for (int i = 0; i < 16; ++i)
    if (post_recv(*a.qp, *a.mr, 64, 8, 1)) die("post_recv");
}

double peer_latency_us(Side& a, Peer& p, int reps, int iters) {
  auto one = [&] {
    if (post_send(*a.qp, *a.mr, 0, 8, 2)) die("post_send A");
    wait_recv(a, 5000);
    if (post_recv(*a.qp, *a.mr, 64, 8, 1)) die("post_recv A");
  };
  std::vector<double> r;
  for (int rep = 0; rep < reps; ++rep) {
    PeerCmd c{'P', 50 + iters, 0};
    if (!full_write(p.fd, &c, sizeof c)) die("the second client process is gone");
    for (int i = 0; i < 50; ++i) one();
    auto t0 = Clock::now();
    for (int i = 0; i < iters; ++i) one();
    r.push_back(seconds_since(t0) * 1e6 / (2.0 * iters));
    char d = 0;
    if (!full_read(p.fd, &d, 1)) die("the second client process is gone");
  }
  Wc wc[16];
  while (a.cq->poll(wc) > 0) {
  }
  return median(r);
}

double peer_write_mbs(Side& a, Peer& p, int reps, size_t block, int count) {
  p.call({'Z', 0, block});
  double mbs = write_stream_mbs(a, p.info.addr, p.info.rkey, reps, block, count);
  if (p.call({'C', 0, block}) != 'D') die("WRITE (2 processes): target differs from the source");
  return mbs;
}

// ---- (e) many QPs -----------------------------------------------------------
void wait_for_start(int report_fd, int go_fd) {
  const char ready = 'R';
  full_write(report_fd, &ready, 1);
  char c;
  while (::read(go_fd, &c, 1) < 0 && errno == EINTR) {
  }
}

struct ChildReport {
  double t0 = 0, t1 = 0;  // CLOCK_MONOTONIC seconds around the create_qp loop
  int created = 0;
  char error[200] = {};
};

double mono_now() {
  timespec ts;
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + ts.tv_nsec / 1e9;
}

// A child: Context, PD, one CQ; says it is ready (one byte on report_fd)
// and waits for the parent's start (EOF on go_fd), so the timed window holds
// QP creation only, not the other children's exec and HELLO; then `n` RC QPs;
// report; wait for the parent.
[[noreturn]] void qp_child(const std::string& sock, int n, int report_fd, int release_fd, int go_fd) {
  ::alarm(600);  // never outlive a lost parent
  ChildReport rep;
  std::vector<std::unique_ptr<Qp>> qps;
  ContextOptions o;
  o.socket = sock;
  auto ctx = Context::open(o);
  std::unique_ptr<Pd> pd;
  std::unique_ptr<Cq> cq;
  if (!ctx) {
    std::snprintf(rep.error, sizeof rep.error, "open: %s", ctx.error().str().c_str());
  } else if (auto p = (*ctx)->alloc_pd(); !p) {
    std::snprintf(rep.error, sizeof rep.error, "alloc_pd: %s", p.error().str().c_str());
  } else if (auto c = (*ctx)->create_cq(16); !c) {
    pd = std::move(p).value();
    std::snprintf(rep.error, sizeof rep.error, "create_cq: %s", c.error().str().c_str());
  } else {
    pd = std::move(p).value();
    cq = std::move(c).value();
    QpInit init;
    init.send_cq = init.recv_cq = cq.get();
    init.cap.max_send_wr = init.cap.max_recv_wr = 1;
    wait_for_start(report_fd, go_fd);
    rep.t0 = mono_now();
    for (int i = 0; i < n; ++i) {
      auto q = (*ctx)->create_qp(*pd, init);
      if (!q) {
        std::snprintf(rep.error, sizeof rep.error, "create_qp #%d: %s", i,
                      q.error().str().c_str());
        break;
      }
      qps.push_back(std::move(q).value());
    }
    rep.t1 = mono_now();
    rep.created = static_cast<int>(qps.size());
  }
  if (!rep.t0) wait_for_start(report_fd, go_fd);  // failed before: still ready, then report
  full_write(report_fd, &rep, sizeof rep);
  char c;
  while (::read(release_fd, &c, 1) < 0 && errno == EINTR) {
  }
  // The objects go with the process: ibd's cleanup on disconnect.
  ::_exit(0);
}

struct ManyQps {
  int created = 0, failed_children = 0;
  std::string first_error;
  double rate = 0, seconds = 0;
  std::map<std::string, long> ibd_before, ibd_after, sim_before, sim_after;
};

ManyQps many_qps(const std::string& self, const std::string& sock, int ibd_pid, int sim_pid, int procs,
                 int per_proc) {
  ManyQps m;
  if (ibd_pid > 0) {
    if (sim_pid <= 0) {  // the embedded simhca: ibd's child
      auto kids = children_of(ibd_pid);
      if (!kids.empty()) sim_pid = kids.front();
    }
    m.ibd_before = smaps_rollup(ibd_pid);
    if (sim_pid) m.sim_before = smaps_rollup(sim_pid);
  }
  int release[2], go[2];
  if (::pipe2(release, O_CLOEXEC) != 0 || ::pipe2(go, O_CLOEXEC) != 0) die("pipe");
  struct Kid {
    pid_t pid;
    int fd;
    bool got = false;
    ChildReport rep;
  };
  std::vector<Kid> kids;
  for (int i = 0; i < procs; ++i) {
    int rp[2];
    if (::pipe2(rp, O_CLOEXEC) != 0) die("pipe");
    pid_t pid = ::fork();
    if (pid < 0) die("fork");
    if (pid == 0) {
      std::string n = std::to_string(per_proc), rfd = std::to_string(rp[1]),
                  lfd = std::to_string(release[0]), gfd = std::to_string(go[0]);
      ::fcntl(rp[1], F_SETFD, 0);
      ::fcntl(release[0], F_SETFD, 0);
      ::fcntl(go[0], F_SETFD, 0);
      ::execl(self.c_str(), self.c_str(), "--qp-child", sock.c_str(), n.c_str(), rfd.c_str(),
              lfd.c_str(), gfd.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
    ::close(rp[1]);
    kids.push_back({pid, rp[0]});
  }
  ::close(release[0]);
  ::close(go[0]);
  auto t0 = Clock::now();
  // The start barrier: every child's ready byte (or its end), then EOF on go.
  for (auto& k : kids) {
    char c;
    ssize_t r;
    while ((r = ::read(k.fd, &c, 1)) < 0 && errno == EINTR) {
    }
    (void)r;
  }
  ::close(go[1]);
  size_t got = 0;
  while (got < kids.size() && seconds_since(t0) < 300) {
    std::vector<pollfd> pf;
    for (auto& k : kids)
      if (!k.got) pf.push_back({k.fd, POLLIN, 0});
    if (::poll(pf.data(), pf.size(), 1000) <= 0) continue;
    for (auto& k : kids) {
      if (k.got) continue;
      pollfd one{k.fd, POLLIN, 0};
      if (::poll(&one, 1, 0) != 1) continue;
      k.got = true;
      ++got;
      if (!full_read(k.fd, &k.rep, sizeof k.rep)) {
        std::snprintf(k.rep.error, sizeof k.rep.error, "child exited without a report");
      }
    }
  }
  if (ibd_pid > 0) {
    m.ibd_after = smaps_rollup(ibd_pid);
    if (sim_pid) m.sim_after = smaps_rollup(sim_pid);
  }
  double first = 1e300, last = 0;
  for (auto& k : kids) {
    if (!k.got) std::snprintf(k.rep.error, sizeof k.rep.error, "no report within 300 s");
    m.created += k.rep.created;
    if (k.rep.error[0]) {
      ++m.failed_children;
      if (m.first_error.empty()) m.first_error = k.rep.error;
    }
    if (k.rep.created > 0) {
      first = std::min(first, k.rep.t0);
      last = std::max(last, k.rep.t1);
    }
  }
  if (last > first) {
    m.seconds = last - first;
    m.rate = m.created / m.seconds;
  }
  ::close(release[1]);  // every child returns from read() and exits
  auto t1 = Clock::now();
  for (auto& k : kids) {
    int st;
    while (::waitpid(k.pid, &st, WNOHANG) == 0) {
      if (seconds_since(t1) > 30) {
        ::kill(k.pid, SIGKILL);
        ::waitpid(k.pid, &st, 0);
        break;
      }
      ::usleep(10000);
    }
    ::close(k.fd);
  }
  return m;
}

struct Args {
  std::string sock_a, sock_b;
  int ibd_pid = 0;
  int simhca_pid = 0;  // --simhca-pid: a simhca that is not ibd's child
  bool quick = false, baselines_only = false, skip_many = false;
  int procs = 100, per_proc = 100;
  int scale = 1;  // --scale N: N times the openib iterations (for profiling)
  std::string only;  // --only latency|write|qps: that openib phase alone, no baselines (profiling, A/B runs)
  bool thread = true, two_procs = false;  // --clients thread|procs|both
  std::string ref_a, ref_b;  // --ref-socket-a/-b: a reference pair (one thread) measured interleaved
  std::string layout = "one-shm";  // --layout: which of issue 14's targets apply (bench/run.sh)
};

}  // namespace

int main(int argc, char** argv) {
  ::signal(SIGPIPE, SIG_IGN);
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string s = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) die("missing value after " + s);
      return argv[++i];
    };
    if (s == "--qp-child") {
      if (argc != 7) die("--qp-child SOCK N REPORT_FD RELEASE_FD GO_FD");
      qp_child(argv[2], std::atoi(argv[3]), std::atoi(argv[4]), std::atoi(argv[5]), std::atoi(argv[6]));
    } else if (s == "--socket-a") {
      a.sock_a = next();
    } else if (s == "--socket-b") {
      a.sock_b = next();
    } else if (s == "--ibd-pid") {
      a.ibd_pid = std::atoi(next().c_str());
    } else if (s == "--simhca-pid") {
      a.simhca_pid = std::atoi(next().c_str());
    } else if (s == "--procs") {
      a.procs = std::atoi(next().c_str());
    } else if (s == "--qps-per-proc") {
      a.per_proc = std::atoi(next().c_str());
    } else if (s == "--nap-us") {
      g_nap_us = std::atoi(next().c_str());
    } else if (s == "--yield-every") {
      g_yield_every = static_cast<unsigned>(std::max(1, std::atoi(next().c_str())));
    } else if (s == "--skip-many-qps") {
      a.skip_many = true;
    } else if (s == "--scale") {
      a.scale = std::max(1, std::atoi(next().c_str()));
    } else if (s == "--only") {
      a.only = next();
      if (a.only != "latency" && a.only != "write" && a.only != "qps") die("--only takes latency, write or qps");
    } else if (s == "--clients") {
      std::string c = next();
      if (c != "thread" && c != "procs" && c != "both") die("--clients takes thread, procs or both");
      a.thread = c != "procs";
      a.two_procs = c != "thread";
    } else if (s == "--ref-socket-a") {
      a.ref_a = next();
    } else if (s == "--ref-socket-b") {
      a.ref_b = next();
    } else if (s == "--layout") {
      a.layout = next();
      if (a.layout != "one-shm" && a.layout != "each-shm" && a.layout != "one-udp" && a.layout != "each-udp" &&
          a.layout != "switch")
        die("--layout takes one-shm, each-shm, one-udp, each-udp or switch");
    } else if (s == "--quick") {
      a.quick = true;
    } else if (s == "--baselines-only") {
      a.baselines_only = true;
    } else {
      die("usage: openib-bench --socket-a A --socket-b B [--ibd-pid PID] [--simhca-pid PID] [--quick] "
          "[--clients thread|procs|both] [--layout L] [--ref-socket-a A --ref-socket-b B] [--procs N] [--qps-per-proc N] [--nap-us N] [--yield-every N] [--skip-many-qps] [--scale N] [--only latency|write|qps] | --baselines-only");
    }
  }
  const int reps = a.quick ? 3 : 5;
  constexpr size_t kBlock = 64 * 1024;
  QpCap cap;
  cap.max_send_wr = 64;
  cap.max_recv_wr = 32;
  const bool openib = a.only != "qps" && !a.baselines_only;
  if (openib && (a.sock_a.empty() || a.sock_b.empty())) die("--socket-a and --socket-b are required");
  // The second client process first, before this one has threads or
  // anything of libopenib.
  // With a reference pair, its side B in a second process as well.
  const bool ref = openib && !a.ref_a.empty() && !a.ref_b.empty();
  std::unique_ptr<Peer> peer, rpeer;
  if (openib && a.two_procs) peer = fork_peer(a.sock_b, kBlock, cap);
  if (ref && a.two_procs) rpeer = fork_peer(a.ref_b, kBlock, cap, peer.get());

  std::printf("openib-bench: %u CPUs online\n", std::thread::hardware_concurrency());
  const int lat_iters = a.quick ? 2000 : 20000, tcp_blocks = a.quick ? 512 : 4096;
  const int openib_lat_iters = (a.quick ? 300 : 2000) * a.scale;
  const int openib_writes = (a.quick ? 100 : 4096) * a.scale;
  const int memcpy_copies = a.quick ? 10000 : 100000;
  const int shm_iters = a.quick ? 20000 : 100000;
  auto print_shm = [&] {
    std::printf("%-44s %12.2f us\n", "shm ping-pong 2 processes, spin, half RTT", shm_pingpong_us(reps, shm_iters, false));
    std::printf("%-44s %12.2f us\n", "shm ping-pong 2 processes, futex, half RTT", shm_pingpong_us(reps, shm_iters / 4, true));
  };
  if (a.baselines_only) {
    std::printf("%-44s %12.2f us\n", "TCP loopback 8 B half RTT (NODELAY)", tcp_latency_us(reps, lat_iters));
    std::printf("%-44s %12.1f MB/s\n", "TCP loopback 64 KiB stream", tcp_bandwidth_mbs(reps, kBlock, tcp_blocks));
    std::printf("%-44s %12.1f MB/s\n", "memcpy 64 KiB, page-aligned buffers", memcpy_mbs(reps, kBlock, memcpy_copies));
    print_shm();
    return 0;
  }
  std::vector<double> tl, ol, pl, tb, ob, pb, rl, rb, rpl, rpb;
  if (openib) {  // The openib phases: QPs through the two daemons, closed before the many-QP phase.
    std::unique_ptr<Side> A, B, A2, RA, RB, RA2;
    if (a.thread) {
      A = must_side(a.sock_a, kBlock, cap);
      B = must_side(a.sock_b, kBlock, cap);
      if (auto r = connect(*A, *B); !r) die("connect: " + r.error().str());
      prime_recvs(*A, *B);
    }
    if (peer) {
      A2 = must_side(a.sock_a, kBlock, cap);
      connect_peer(*A2, *peer);
    }
    if (rpeer) {
      RA2 = must_side(a.ref_a, kBlock, cap);
      connect_peer(*RA2, *rpeer);
    }
    if (ref && a.thread) {
      RA = must_side(a.ref_a, kBlock, cap);
      RB = must_side(a.ref_b, kBlock, cap);
      if (auto r = connect(*RA, *RB); !r) die("connect (reference): " + r.error().str());
      prime_recvs(*RA, *RB);
    }
    if (a.only == "latency") {
      if (A) std::printf("%-44s %12.2f us\n", "openib RC SEND 8 B half RTT", openib_latency_us(*A, *B, reps, openib_lat_iters));
      if (peer) std::printf("%-44s %12.2f us\n", "openib RC SEND 8 B half RTT, 2 processes", peer_latency_us(*A2, *peer, reps, openib_lat_iters));
      return 0;
    }
    if (a.only == "write") {
      if (A) std::printf("%-44s %12.1f MB/s\n", "openib RC WRITE 64 KiB", openib_write_mbs(*A, *B, reps, kBlock, openib_writes));
      if (peer) std::printf("%-44s %12.1f MB/s\n", "openib RC WRITE 64 KiB, 2 processes", peer_write_mbs(*A2, *peer, reps, kBlock, openib_writes));
      return 0;
    }
    // Each openib repetition runs next to a TCP one of the same kind, so
    // that both meet the machine in the same state (two shared, noisy
    // CPUs); each figure is the median of its repetitions.
    for (int rep = 0; rep < reps; ++rep) {
      tl.push_back(tcp_latency_us(1, lat_iters));
      if (A) ol.push_back(openib_latency_us(*A, *B, 1, openib_lat_iters));
      if (peer) pl.push_back(peer_latency_us(*A2, *peer, 1, openib_lat_iters));
      if (RA) rl.push_back(openib_latency_us(*RA, *RB, 1, openib_lat_iters));
      if (rpeer) rpl.push_back(peer_latency_us(*RA2, *rpeer, 1, openib_lat_iters));
    }
    for (int rep = 0; rep < reps; ++rep) {
      tb.push_back(tcp_bandwidth_mbs(1, kBlock, tcp_blocks));
      if (A) ob.push_back(openib_write_mbs(*A, *B, 1, kBlock, openib_writes));
      if (peer) pb.push_back(peer_write_mbs(*A2, *peer, 1, kBlock, openib_writes));
      if (RA) rb.push_back(openib_write_mbs(*RA, *RB, 1, kBlock, openib_writes));
      if (rpeer) rpb.push_back(peer_write_mbs(*RA2, *rpeer, 1, kBlock, openib_writes));
    }
    peer.reset();  // the second process closes its side and exits
    rpeer.reset();
  }
  if (a.only == "qps") goto many;  // (e) alone: bench/qp_rate_ab.sh
  {
  const double tcp_lat = median(tl), lat = median(ol), tcp_bw = median(tb), bw = median(ob);
  const double mem_bw = memcpy_mbs(reps, kBlock, memcpy_copies);
  std::printf("%-44s %12.2f us\n", "TCP loopback 8 B half RTT (NODELAY)", tcp_lat);
  std::printf("%-44s %12.1f MB/s\n", "TCP loopback 64 KiB stream", tcp_bw);
  std::printf("%-44s %12.1f MB/s\n", "memcpy 64 KiB, page-aligned buffers", mem_bw);
  print_shm();
  if (a.thread) {
    std::printf("%-44s %12.2f us\n", "openib RC SEND 8 B half RTT", lat);
    std::printf("%-44s %12.1f MB/s\n", "openib RC WRITE 64 KiB", bw);
    const Targets t = targets_for(a.layout, false);
    print_ratio("latency ratio openib/TCP", lat / tcp_lat, t.lat_max, true);
    print_ratio("bandwidth ratio openib/TCP", bw / tcp_bw, t.bw_min, false);
    std::printf("%-44s %12.3f\n", "bandwidth ratio openib/memcpy", bw / mem_bw);
  }
  if (a.two_procs) {
    const double plat = median(pl), pbw = median(pb);
    const Targets t = targets_for(a.layout, true);
    std::printf("%-44s %12.2f us\n", "openib RC SEND 8 B half RTT, 2 processes", plat);
    std::printf("%-44s %12.1f MB/s\n", "openib RC WRITE 64 KiB, 2 processes", pbw);
    print_ratio("latency ratio openib/TCP, 2 processes", plat / tcp_lat, t.lat_max, true);
    print_ratio("bandwidth ratio openib/TCP, 2 processes", pbw / tcp_bw, t.bw_min, false);
    std::printf("%-44s %12.3f\n", "bandwidth ratio openib/memcpy, 2 processes", pbw / mem_bw);
  }
  // The reference pair (bench/run.sh --udp-ref: the direct UDP cable next
  // to the switch), with one thread and with two processes as asked,
  // interleaved with the rest. Issue 14's target: through one switch vs
  // the direct UDP cable.
  const bool sw = a.layout == "switch";
  auto print_ref = [&](const std::vector<double>& l, const std::vector<double>& b, double olat, double obw,
                       const char* suffix) {
    const double rlat = median(l), rbw = median(b);
    std::printf("%-44s %12.2f us\n", ("reference RC SEND 8 B half RTT" + std::string(suffix)).c_str(), rlat);
    std::printf("%-44s %12.1f MB/s\n", ("reference RC WRITE 64 KiB" + std::string(suffix)).c_str(), rbw);
    print_ratio(("latency ratio openib/reference" + std::string(suffix)).c_str(), olat / rlat, sw ? 1.5 : 0, true);
    print_ratio(("bandwidth ratio openib/reference" + std::string(suffix)).c_str(), obw / rbw, sw ? 0.7 : 0, false);
  };
  if (!rl.empty()) print_ref(rl, rb, lat, bw, "");
  if (!rpl.empty()) print_ref(rpl, rpb, median(pl), median(pb), ", 2 processes");
  std::fflush(stdout);
  }
  if (a.skip_many) return 0;
many:
  char self[4096];
  ssize_t n = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) die("readlink /proc/self/exe");
  self[n] = 0;
  ManyQps m = many_qps(self, a.sock_a, a.ibd_pid, a.simhca_pid, a.procs, a.per_proc);
  int want = a.procs * a.per_proc;
  std::printf("%-44s %12d of %d (%d processes; %d failed%s%s)\n", "QPs created", m.created, want,
              a.procs, m.failed_children, m.first_error.empty() ? "" : ": ",
              m.first_error.c_str());
  std::printf("%-44s %12.0f QPs/s over %.3f s   target >= 10000  %s\n", "QP creation rate",
              m.rate, m.seconds, verdict(m.rate >= 10000 && m.created == want));
  auto per_qp = [&](const char* who, std::map<std::string, long>& before,
                    std::map<std::string, long>& after) {
    if (before.empty() || after.empty() || m.created == 0) {
      std::printf("%-44s   (not measured: no pid)\n", who);
      return;
    }
    const char* key = before.count("Pss_Anon") ? "Pss_Anon" : "Anonymous";
    double kib = static_cast<double>(after[key] - before[key]) / m.created;
    double rss = static_cast<double>(after["Rss"] - before["Rss"]) / m.created;
    std::printf("%-44s %12.2f KiB/QP (%s %ld -> %ld kB; Rss %+.2f KiB/QP)   target <= 4  %s\n",
                who, kib, key, before[key], after[key], rss, verdict(kib <= 4.0));
  };
  per_qp("ibd anonymous memory per QP", m.ibd_before, m.ibd_after);
  per_qp("simhca anonymous memory per QP", m.sim_before, m.sim_after);
  return m.created > 0 ? 0 : 1;
}
