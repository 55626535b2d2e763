// openib-cmd-bench: the cost of one device command (docs/performance.md
// "Device commands"), the driver (src/hca) against a simhca child process
// on a vfio-user socket, as the simhca integration tests run it
// (test/integration/test_simhca_fixture.hpp), with ibd's asynchronous path:
// submit, completion by the CMD_COMPLETION event on EQ 0 (docs/simhca.md
// §5.4, §9.4) seen by the io_context, the next command from the completer.
//
//   openib-cmd-bench [--simhca PATH] [--reps N] [--ms MS] [--inflight K] [--only KIND]
//                    [--no-baseline]
//
// What it times, each for --ms of wall time, --reps rounds interleaved
// (every round measures the baseline and then each kind once, so that the
// ratios compare runs that met the machine in the same state):
//   baseline   one round trip over a UNIX socketpair between this process
//              and a forked child blocked in read(): the floor for "a
//              message to another process and its answer" on this machine
//   nop        NOP on the reserved slot (Hca::nop_async), one at a time
//   nop/slot   NOP on a normal slot (command_async), one at a time
//   query_port QUERY_PORT, one at a time
//   cq         CREATE_CQ + DESTROY_CQ (2 commands), rings allocated once
//   qp         CREATE_QP + DESTROY_QP (2 commands), rings allocated once
//   modify     MODIFY_QP RESET->INIT->RTR->RTS->RESET (4 commands, RC,
//              the attributes of ibv_modify_qp(3)'s example)
//   nop sync   NOP through the synchronous exec() (polls OWNER; ibd's
//              bring-up path, not its loop's)
//   pipe nop   K NOPs in flight on normal slots (the driver keeps up to
//              31, docs/device-access.md "Commands")
//   pipe qport K QUERY_PORTs in flight
// Per kind: median µs per command over the rounds, the median of the
// per-round ratios to the baseline, and the CPU time per command of this
// process and of simhca (all its threads, /proc/PID/task/*/schedstat).
// Bounded: rounds × kinds × --ms (default 5 × 10 × 200 ms, about 12 s).
// --only KIND runs one kind (its name in the table); --no-baseline skips
// the socketpair round trip (its "x base" column is then µs), for a
// profile of the command path alone (perf record / perf trace -s).
#include <dirent.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "hca/hca.hpp"
#include "hca/prm.hpp"
#include "vfio/device.hpp"

using namespace openib;
using namespace openib::hca;
using Clock = std::chrono::steady_clock;
namespace qa = openib::hca::qp_attr;

namespace {

pid_t g_simhca = -1, g_echo = -1;
std::string g_dir;

void cleanup() {
  for (pid_t* p : {&g_simhca, &g_echo}) {
    if (*p <= 0) continue;
    ::kill(*p, SIGTERM);
    int st = 0;
    for (int i = 0; i < 500 && ::waitpid(*p, &st, WNOHANG) == 0; ++i) ::usleep(10000);
    if (::waitpid(*p, &st, WNOHANG) == 0) {
      ::kill(*p, SIGKILL);
      ::waitpid(*p, &st, 0);
    }
    *p = -1;
  }
  if (!g_dir.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(g_dir, ec);
  }
}

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "openib-cmd-bench: %s\n", what.c_str());
  cleanup();
  std::exit(1);
}

// simhca on a socket in a fresh directory; its PID in g_simhca.
std::string start_simhca(const std::string& bin) {
  char tmpl[] = "/tmp/openib-cmd-bench-XXXXXX";
  if (!::mkdtemp(tmpl)) die("mkdtemp failed");
  g_dir = tmpl;
  const std::string sock = g_dir + "/simhca.sock";
  std::vector<std::string> args{bin, "--socket", sock, "--log", "warn"};
  g_simhca = ::fork();
  if (g_simhca < 0) die("fork failed");
  if (g_simhca == 0) {
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  for (int i = 0; i < 500 && !std::filesystem::exists(sock); ++i) ::usleep(10000);
  if (!std::filesystem::exists(sock)) die("simhca did not create " + sock);
  return "vfio-user:" + sock;
}

// CPU time of every thread of `pid`, in ns (schedstat's first field).
uint64_t cpu_ns(pid_t pid) {
  uint64_t sum = 0;
  const std::string dir = "/proc/" + std::to_string(pid) + "/task";
  DIR* d = ::opendir(dir.c_str());
  if (!d) return 0;
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] == '.') continue;
    std::ifstream f(dir + "/" + e->d_name + "/schedstat");
    uint64_t ns = 0;
    if (f >> ns) sum += ns;
  }
  ::closedir(d);
  return sum;
}
uint64_t self_cpu_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

Clock::duration window(double ms) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double, std::milli>(ms));
}

struct Sample {
  double us_per_cmd = 0, self_cpu_us = 0, sim_cpu_us = 0;
};

// The baseline: a byte to a forked child and back, over a socketpair.
class Echo {
 public:
  Echo() {
    if (::socketpair(AF_UNIX, SOCK_STREAM, 0, fd_) != 0) die("socketpair failed");
    g_echo = ::fork();
    if (g_echo < 0) die("fork failed");
    if (g_echo == 0) {
      ::close(fd_[0]);
      char c;
      while (::read(fd_[1], &c, 1) == 1)
        if (::write(fd_[1], &c, 1) != 1) break;
      ::_exit(0);
    }
    ::close(fd_[1]);
  }
  Sample run(double ms) {
    const uint64_t s0 = self_cpu_ns(), o0 = cpu_ns(g_echo);
    const auto t0 = Clock::now();
    const auto end = t0 + window(ms);
    uint64_t n = 0;
    char c = 'x';
    while (Clock::now() < end) {
      for (int i = 0; i < 64; ++i, ++n)
        if (::write(fd_[0], &c, 1) != 1 || ::read(fd_[0], &c, 1) != 1) die("echo child gone");
    }
    const double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
    return {us / double(n), double(self_cpu_ns() - s0) / 1e3 / double(n),
            double(cpu_ns(g_echo) - o0) / 1e3 / double(n)};
  }

 private:
  int fd_[2]{-1, -1};
};

QpAttr to(QpState s) {
  QpAttr a;
  a.state = s;
  return a;
}

struct Bench {
  boost::asio::io_context io;
  std::unique_ptr<vfio::Device> dev;
  std::unique_ptr<Hca> hca;
  uint32_t pdn = 0, cqn = 0;
  Cq cq;
  dma::DmaBuffer cq_ring, cq_dbr, sq, rq, qp_dbr;

  // Runs the loop until `done` is set (bounded: a command that never
  // completes times out in the driver after 5 s).
  void wait(const bool& done) {
    while (!done) io.run_one();
  }
  template <class T>
  static void check(const Result<T>& r, const char* what) {
    if (!r) die(std::string(what) + ": " + r.error().str());
  }

  // One "op" (one or more commands, in a chain) as many times as fit in
  // `ms`; µs and CPU per command.
  Sample serial(double ms, int cmds_per_op, const std::function<void(std::function<void()>)>& op) {
    const uint64_t s0 = self_cpu_ns(), o0 = cpu_ns(g_simhca);
    const auto t0 = Clock::now();
    const auto end = t0 + window(ms);
    uint64_t ops = 0;
    while (Clock::now() < end) {
      bool done = false;
      op([&done] { done = true; });
      wait(done);
      ++ops;
    }
    const double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
    const double n = double(ops * uint64_t(cmds_per_op));
    return {us / n, double(self_cpu_ns() - s0) / 1e3 / n, double(cpu_ns(g_simhca) - o0) / 1e3 / n};
  }

  // `inflight` commands kept in flight for `ms`.
  Sample pipelined(double ms, int inflight, const std::function<void(std::function<void()>)>& one) {
    const uint64_t s0 = self_cpu_ns(), o0 = cpu_ns(g_simhca);
    const auto t0 = Clock::now();
    const auto end = t0 + window(ms);
    uint64_t completed = 0;
    int outstanding = 0;
    std::function<void()> next = [&] {
      ++outstanding;
      one([&] {
        --outstanding;
        ++completed;
        if (Clock::now() < end) next();
      });
    };
    for (int i = 0; i < inflight; ++i) next();
    while (outstanding) io.run_one();
    const double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
    const double n = double(completed);
    return {us / n, double(self_cpu_ns() - s0) / 1e3 / n, double(cpu_ns(g_simhca) - o0) / 1e3 / n};
  }

  void nop(std::function<void()> k) {
    hca->nop_async([k = std::move(k)](Result<void> r) {
      check(r, "NOP");
      k();
    });
  }
  void nop_slot(std::function<void()> k) {
    hca->command_async(prm::kOpNop, {}, 0, [k = std::move(k)](Result<Bytes> r) {
      check(r, "NOP");
      k();
    });
  }
  void query_port(std::function<void()> k) {
    hca->query_port_async(1, [k = std::move(k)](Result<PortAttr> r) {
      check(r, "QUERY_PORT");
      k();
    });
  }
  void cq_pair(std::function<void()> k) {
    hca->create_cq_at_async(4, cq_ring.iova(), cq_dbr.iova(), 0, hca->eq0(), [this, k = std::move(k)](Result<uint32_t> n) mutable {
      check(n, "CREATE_CQ");
      hca->destroy_async(ObjectKind::kCq, *n, [k = std::move(k)](Result<void> r) {
        check(r, "DESTROY_CQ");
        k();
      });
    });
  }
  QpCreateParams qp_params() const {
    QpCreateParams p;
    p.type = QpType::kRc;
    p.pdn = pdn;
    p.send_cqn = p.recv_cqn = cq.cqn;
    p.sq_iova = sq.iova();
    p.rq_iova = rq.iova();
    p.dbr_iova = qp_dbr.iova();
    p.log_sq_size = 4;
    p.log_sq_stride = 6;
    p.log_rq_size = 4;
    p.log_rq_stride = 5;
    return p;
  }
  void qp_pair(std::function<void()> k) {
    hca->create_qp_at_async(qp_params(), [this, k = std::move(k)](Result<uint32_t> n) mutable {
      check(n, "CREATE_QP");
      hca->destroy_async(ObjectKind::kQp, *n, [k = std::move(k)](Result<void> r) {
        check(r, "DESTROY_QP");
        k();
      });
    });
  }
  // RESET->INIT->RTR->RTS->RESET on `qpn`, IBA 10.3.1 / 11.2.4.2 attributes.
  void modify_walk(uint32_t qpn, std::function<void()> k) {
    struct Step {
      uint32_t mask;
      QpAttr a;
    };
    auto steps = std::make_shared<std::vector<Step>>();
    QpAttr init = to(QpState::kInit);
    init.port = 1;
    init.access = kAccessRemoteWrite | kAccessRemoteRead;
    steps->push_back({qa::kState | qa::kPkeyIndex | qa::kPort | qa::kAccessFlags, init});
    QpAttr rtr = to(QpState::kRtr);
    rtr.path_mtu = 5;
    rtr.dest_qpn = 0x1234;
    rtr.rq_psn = 0x100;
    rtr.max_dest_rd_atomic = 4;
    rtr.min_rnr_timer = 12;
    rtr.av.dlid = 0x22;
    rtr.av.port = 1;
    steps->push_back({qa::kState | qa::kAv | qa::kPathMtu | qa::kDestQpn | qa::kRqPsn | qa::kMaxDestRdAtomic |
                          qa::kMinRnrTimer,
                      rtr});
    QpAttr rts = to(QpState::kRts);
    rts.timeout = 14;
    rts.retry_cnt = 7;
    rts.rnr_retry = 7;
    rts.sq_psn = 0x200;
    rts.max_rd_atomic = 4;
    steps->push_back({qa::kState | qa::kTimeout | qa::kRetryCnt | qa::kRnrRetry | qa::kSqPsn | qa::kMaxQpRdAtomic, rts});
    steps->push_back({qa::kState, to(QpState::kReset)});
    auto run = std::make_shared<std::function<void(size_t)>>();
    *run = [this, qpn, steps, run, k = std::move(k)](size_t i) {
      if (i == steps->size()) {
        *run = nullptr;  // breaks the cycle through the capture
        return k();
      }
      hca->modify_qp_async(qpn, (*steps)[i].mask, (*steps)[i].a, [run, i](Result<void> r) {
        check(r, "MODIFY_QP");
        (*run)(i + 1);
      });
    };
    (*run)(0);
  }
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::string simhca;
  if (const char* e = std::getenv("OPENIB_SIMHCA")) simhca = e;
#ifdef OPENIB_SIMHCA_PATH
  if (simhca.empty()) simhca = OPENIB_SIMHCA_PATH;
#endif
  int reps = 5, inflight = 31;
  std::string only;      // one kind alone (for a profile)
  bool baseline = true;  // --no-baseline: the commands alone (for a profile)
  double ms = 200;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) die("missing value for " + a);
      return argv[++i];
    };
    if (a == "--simhca") simhca = val();
    else if (a == "--reps") reps = std::clamp(std::atoi(val().c_str()), 1, 50);
    else if (a == "--ms") ms = std::clamp(std::atof(val().c_str()), 10.0, 2000.0);
    else if (a == "--inflight") inflight = std::clamp(std::atoi(val().c_str()), 1, 1000);
    else if (a == "--only") only = val();
    else if (a == "--no-baseline") baseline = false;
    else {
      std::fprintf(stderr, "usage: openib-cmd-bench [--simhca PATH] [--reps N] [--ms MS] [--inflight K] [--only KIND] [--no-baseline]\n");
      return 2;
    }
  }
  if (simhca.empty()) die("no simhca: --simhca PATH or OPENIB_SIMHCA");
  ::signal(SIGPIPE, SIG_IGN);

  Echo echo;
  Bench b;
  const std::string spec = start_simhca(simhca);
  {
    auto d = vfio::open_device(spec);
    for (int i = 0; i < 500 && !d.ok(); ++i) {  // bound before listen: refused, retried
      ::usleep(10000);
      d = vfio::open_device(spec);
    }
    if (!d) die("opening " + spec + ": " + d.error().str());
    b.dev = std::move(d).value();
  }
  {
    auto h = Hca::open(*b.dev, b.io);
    if (!h) die("Hca::open: " + h.error().str());
    b.hca = std::move(h).value();
  }
  // Objects the measured commands use, made once (synchronous path).
  auto pd = b.hca->alloc_pd();
  Bench::check(pd, "ALLOC_PD");
  b.pdn = *pd;
  auto cq = b.hca->create_cq(6);
  Bench::check(cq, "CREATE_CQ");
  b.cq = std::move(cq).value();
  auto& pool = b.hca->pool();
  auto alloc = [&](size_t n, size_t align) {
    auto r = pool.alloc(n, align);
    Bench::check(r, "DMA memory");
    return std::move(r).value();
  };
  b.cq_ring = alloc(16 * 64, 64);
  b.cq_dbr = alloc(8, 8);
  b.sq = alloc(16 << 6, 64);
  b.rq = alloc(16 << 5, 64);
  b.qp_dbr = alloc(8, 8);
  auto walk_qpn = b.hca->create_qp_at(b.qp_params());
  Bench::check(walk_qpn, "CREATE_QP");
  const uint32_t qpn = *walk_qpn;

  struct Kind {
    const char* name;
    const char* what;
    std::function<Sample()> run;
  };
  using K = std::function<void()>;
  std::vector<Kind> kinds{
      {"nop", "NOP, reserved slot, 1 at a time", [&] { return b.serial(ms, 1, [&](K k) { b.nop(std::move(k)); }); }},
      {"nop/slot", "NOP, normal slot, 1 at a time",
       [&] { return b.serial(ms, 1, [&](K k) { b.nop_slot(std::move(k)); }); }},
      {"query_port", "QUERY_PORT, 1 at a time",
       [&] { return b.serial(ms, 1, [&](K k) { b.query_port(std::move(k)); }); }},
      {"cq", "CREATE_CQ + DESTROY_CQ, per command",
       [&] { return b.serial(ms, 2, [&](K k) { b.cq_pair(std::move(k)); }); }},
      {"qp", "CREATE_QP + DESTROY_QP, per command",
       [&] { return b.serial(ms, 2, [&](K k) { b.qp_pair(std::move(k)); }); }},
      {"modify", "MODIFY_QP RESET>INIT>RTR>RTS>RESET, per command",
       [&] { return b.serial(ms, 4, [&](K k) { b.modify_walk(qpn, std::move(k)); }); }},
      {"nop sync", "NOP through exec() (polling), 1 at a time",
       [&] {
         const uint64_t s0 = self_cpu_ns(), o0 = cpu_ns(g_simhca);
         const auto t0 = Clock::now();
    const auto end = t0 + window(ms);
         uint64_t n = 0;
         while (Clock::now() < end) {
           Bench::check(b.hca->nop(), "NOP");
           ++n;
         }
         const double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
         return Sample{us / double(n), double(self_cpu_ns() - s0) / 1e3 / double(n),
                       double(cpu_ns(g_simhca) - o0) / 1e3 / double(n)};
       }},
      {"pipe nop", "NOP, K in flight on normal slots",
       [&] { return b.pipelined(ms, inflight, [&](K k) { b.nop_slot(std::move(k)); }); }},
      {"pipe qport", "QUERY_PORT, K in flight",
       [&] { return b.pipelined(ms, inflight, [&](K k) { b.query_port(std::move(k)); }); }},
  };

  if (!only.empty()) {
    std::erase_if(kinds, [&](const Kind& k) { return only != k.name; });
    if (kinds.empty()) die("--only: no kind " + only);
  }
  std::printf("openib-cmd-bench: simhca %s, %d rounds x %.0f ms per kind, %d in flight when pipelined\n",
              simhca.c_str(), reps, ms, inflight);
  std::printf("load average at start: ");
  {
    std::ifstream la("/proc/loadavg");
    std::string a1, a2, a3;
    la >> a1 >> a2 >> a3;
    std::printf("%s %s %s\n", a1.c_str(), a2.c_str(), a3.c_str());
  }
  // Warm-up: the first commands fault in pages on both sides.
  for (auto& k : kinds) (void)k.run();
  std::vector<std::vector<Sample>> got(kinds.size());
  std::vector<std::vector<double>> ratio(kinds.size());
  std::vector<Sample> base;
  for (int r = 0; r < reps; ++r) {
    const Sample e = baseline ? echo.run(ms) : Sample{1, 0, 0};
    base.push_back(e);
    for (size_t i = 0; i < kinds.size(); ++i) {
      const Sample s = kinds[i].run();
      got[i].push_back(s);
      ratio[i].push_back(s.us_per_cmd / e.us_per_cmd);
    }
  }
  auto col = [](const std::vector<Sample>& v, double Sample::*f) {
    std::vector<double> x;
    for (const Sample& s : v) x.push_back(s.*f);
    return median(x);
  };
  std::printf("\n%-11s %10s %8s %10s %10s  %s\n", "kind", "us/cmd", "x base", "cpu self", "cpu simhca", "what");
  std::printf("%-11s %10.2f %8.2f %10.2f %10.2f  %s\n", "baseline", col(base, &Sample::us_per_cmd), 1.0,
              col(base, &Sample::self_cpu_us), col(base, &Sample::sim_cpu_us),
              "UNIX socketpair round trip to a forked process (cpu simhca: the echo child's)");
  for (size_t i = 0; i < kinds.size(); ++i)
    std::printf("%-11s %10.2f %8.2f %10.2f %10.2f  %s\n", kinds[i].name, col(got[i], &Sample::us_per_cmd),
                median(ratio[i]), col(got[i], &Sample::self_cpu_us), col(got[i], &Sample::sim_cpu_us),
                kinds[i].what);
  const CommandStats& st = b.hca->commands().stats();
  std::printf("\ndriver: %llu commands executed, %llu doorbell writes, at most %llu in flight, %llu missed events\n",
              static_cast<unsigned long long>(st.executed), static_cast<unsigned long long>(st.doorbells),
              static_cast<unsigned long long>(st.max_in_flight), static_cast<unsigned long long>(st.missed_events));
  std::printf("load average at end: ");
  {
    std::ifstream la("/proc/loadavg");
    std::string a1, a2, a3;
    la >> a1 >> a2 >> a3;
    std::printf("%s %s %s\n", a1.c_str(), a2.c_str(), a3.c_str());
  }

  (void)b.hca->destroy_qp(qpn);
  (void)b.hca->destroy_cq(b.cq);
  (void)b.hca->dealloc_pd(b.pdn);
  b.cq_ring = {};  // DMA memory back to the pool before the pool goes
  b.cq_dbr = {};
  b.sq = {};
  b.rq = {};
  b.qp_dbr = {};
  b.hca.reset();
  b.dev.reset();
  cleanup();
  return 0;
}
