// A client killed with SIGKILL while its objects are live, 1,000 times:
// ibd must destroy, unmap and count back everything each one owned
// (DESIGN.md "When a client dies"). Each client (ibd-test-client) holds a
// PD, an MR, CQs, QPs at RTS, an SRQ with receives posted and a QP on it,
// an AH and a user-MAD agent; every other one is killed while it sends to
// itself (--mode traffic, after its first SEND completed). Afterwards ibd's
// object counts (ibdctl), its open fds and mappings, its simhca's, and the
// objects the device itself holds (PDs, MKEYs, CQs, QPs, SRQs, AHs, EQs,
// UARs and DMA mappings: simhca's object-count registers, docs/simhca.md
// §3.1, in INFO) are where they started.
//
// OPENIB_KILL_LOOP_N overrides the number of kills (default 1000).
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>

#include "harness.hpp"

using namespace openib::testing;
using Clock = std::chrono::steady_clock;

namespace {

struct Spawned {
  pid_t pid = -1;
  int out = -1;
};

Spawned spawn_client(const std::string& client, const std::string& socket, const char* mode = "hold") {
  int p[2];
  REQUIRE(::pipe2(p, O_CLOEXEC) == 0);
  pid_t parent = ::getpid();
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(1);
    ::dup2(p[1], 1);
    ::execl(client.c_str(), client.c_str(), "--socket", socket.c_str(), "--max-seconds", "30", "--mode",
            mode, static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(p[1]);
  return {pid, p[0]};
}

// Reads the child's stdout until a line with `word` or `timeout_ms`.
bool wait_ready(int fd, int timeout_ms, std::string& got, const std::string& word = "ready") {
  auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    if (auto at = got.find(word); at != std::string::npos && got.find('\n', at) != std::string::npos)
      return true;
    int left = static_cast<int>(
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count());
    if (left <= 0) return false;
    pollfd pf{fd, POLLIN, 0};
    if (::poll(&pf, 1, left) <= 0) continue;
    char buf[256];
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) return false;
    got.append(buf, static_cast<size_t>(n));
  }
}

void kill_and_reap(pid_t pid) {
  ::kill(pid, SIGKILL);
  int st;
  while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
}

}  // namespace

TEST_CASE("a client SIGKILLed with live objects, 1000 times, leaves ibd as it was", "[kill]") {
  const int n = std::getenv("OPENIB_KILL_LOOP_N") ? std::atoi(std::getenv("OPENIB_KILL_LOOP_N"))
                                                  : 1000;
  const std::string client = env_path("OPENIB_TEST_CLIENT");
  TempDir dir;
  IbdOptions o;
  o.log = "warn";
  Ibd ibd(dir.path(), "kill", o);

  // One client first, run to completion, so that lazily created state
  // (a first UAR, a first mapping) is part of the baseline.
  {
    auto c = spawn_client(client, ibd.socket());
    std::string got;
    bool ready = wait_ready(c.out, 10000, got);
    kill_and_reap(c.pid);
    ::close(c.out);
    REQUIRE(ready);
  }
  // snapshot() waits until ibd is done with that client (its process is
  // gone: not listed, not departing).
  const Snapshot before = snapshot(ibd);
  INFO("before: " << before.str());

  auto t0 = Clock::now();
  double worst_ms = 0;
  std::mt19937 rng(12345);
  int mid_setup_kills = 0;
  for (int i = 0; i < n; ++i) {
    auto t = Clock::now();
    // Odd rounds: killed with traffic flowing.
    const bool traffic = i % 2 == 1;
    auto c = spawn_client(client, ibd.socket(), traffic ? "traffic" : "hold");
    std::string got;
    bool ready = wait_ready(c.out, 10000, got, traffic ? "flowing" : "ready");
    kill_and_reap(c.pid);
    ::close(c.out);
    if (!ready) {
      FAIL("kill #" << i << ": the client did not say ready within 10 s (got '" << got
                    << "'); ibd alive: " << ibd.alive() << "\n"
                    << ibd.log_tail());
    }
    // Every tenth round, also a client killed at a random point of its
    // setup (objects half made); not counted in the n.
    if (i % 10 == 5) {
      auto k = spawn_client(client, ibd.socket());
      std::this_thread::sleep_for(std::chrono::microseconds(rng() % 20000));
      kill_and_reap(k.pid);
      ::close(k.out);
      ++mid_setup_kills;
    }
    worst_ms = std::max(worst_ms, std::chrono::duration<double, std::milli>(Clock::now() - t).count());
    if (i % 100 == 99) REQUIRE(ibd.alive());
  }
  double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  WARN(n << " SIGKILLs after ready (+" << mid_setup_kills << " during setup) in " << secs
         << " s: " << secs * 1000 / n << " ms per round, worst " << worst_ms << " ms");

  // ibd notices each hang-up on its loop; give it a bounded moment.
  Snapshot after = settle(ibd, before, std::chrono::seconds(20));
  INFO("after:  " << after.str());
  CHECK(after.ibd_fds == before.ibd_fds);
  CHECK(after.ibd_maps <= before.ibd_maps + Snapshot::kMapSlack);  // allocator slack
  CHECK(after.ibd_memfd_maps == before.ibd_memfd_maps);
  CHECK(after.sim_fds == before.sim_fds);
  CHECK(after.sim_maps <= before.sim_maps + Snapshot::kMapSlack);
  CHECK(after.sim_memfd_maps == before.sim_memfd_maps);
  CHECK(after.gauges == before.gauges);
  // The device's own counts (docs/simhca.md §3.1): nothing any dead client
  // made is left in simhca.
  CHECK_FALSE(before.device_objects.empty());
  CHECK(counts_str(after.device_objects) == counts_str(before.device_objects));
  REQUIRE(ibd.alive());
  // And ibd still serves: one more client gets to ready.
  auto c = spawn_client(client, ibd.socket());
  std::string got;
  bool ready = wait_ready(c.out, 10000, got);
  kill_and_reap(c.pid);
  ::close(c.out);
  CHECK(ready);
  auto st = ibd.stop();
  REQUIRE(st.has_value());
  CHECK(WIFEXITED(*st));
  CHECK(WEXITSTATUS(*st) == 0);
}
