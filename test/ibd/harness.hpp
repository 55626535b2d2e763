// Test harness for ibd with real clients: ibd daemons on temporary sockets
// (optionally two cabled back to back over UDP on 127.0.0.1), stopped by
// PID; ibdctl runs; /proc counts. Everything it starts it stops, also when
// a test fails (RAII), and every wait is bounded.
//
// Binaries come from the environment (test/ibd/meson.build sets them):
// OPENIB_IBD, OPENIB_IBDCTL, OPENIB_TEST_CLIENT.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace openib::testing {

// A directory under $TMPDIR (or /tmp), mode 0755 so that an unprivileged
// client can reach the socket; removed with its contents.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string env_path(const char* name);  // the variable's value; throws if unset

struct IbdOptions {
  uint16_t lid = 1;
  std::string cable;  // LOCAL=127.0.0.1:PA,PEER=127.0.0.1:PB; empty: none
  std::string log = "warn";
  std::string socket_mode = "0666";
  std::vector<std::string> extra_args;  // more ibd arguments (e.g. --simhca-arg=--guid)
};

// One ibd daemon (with its embedded simhca child), started in the
// constructor (waits for "ibd: ready on SOCKET", at most 30 s; throws
// std::runtime_error with the log's tail otherwise) and stopped with
// SIGTERM in the destructor (SIGKILL after 10 s).
class Ibd {
 public:
  Ibd(const std::string& dir, const std::string& name, const IbdOptions& o);
  ~Ibd();
  Ibd(const Ibd&) = delete;
  Ibd& operator=(const Ibd&) = delete;

  pid_t pid() const { return pid_; }
  const std::string& socket() const { return socket_; }
  const std::string& log_path() const { return log_; }
  std::string log_tail(size_t bytes = 4000) const;
  bool alive() const;
  // The embedded simhca (a child of ibd), or 0.
  pid_t simhca_pid() const;

  // SIGTERM, then waits up to `timeout`; returns the exit status as from
  // waitpid (std::nullopt: still running after the timeout; then SIGKILLed).
  std::optional<int> stop(std::chrono::milliseconds timeout = std::chrono::seconds(10));
  // Sends a signal to ibd itself (by PID).
  void signal(int sig) const;

 private:
  pid_t pid_ = -1;
  std::string socket_, log_;
};

// True once `done()` holds, polled every 10 ms; false after `limit`.
template <class F>
bool wait_until(F done, std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

// Two free UDP ports on 127.0.0.1 (bound, read back and released).
std::vector<uint16_t> free_udp_ports(size_t n);

// Two ibds whose simhca ports are cabled to each other, LIDs 1 and 2.
// With distinct_guids, B's simhca gets node GUID kPairGuidB instead of
// simhca's default (both ends would otherwise share one GUID, so one GID).
// With shm_cable, the cable is a shared-memory one (docs/cables.md), its
// file in `dir`, instead of UDP on 127.0.0.1.
struct IbdPair {
  static constexpr uint64_t kPairGuidB = 0x123400fffe000101ull;
  // `extra_a`: more arguments for A's ibd.
  explicit IbdPair(const std::string& dir, const std::string& log = "warn", bool distinct_guids = false,
                   bool shm_cable = false, const std::vector<std::string>& extra_a = {});
  std::unique_ptr<Ibd> a, b;
};

struct RunResult {
  int status = -1;  // waitpid status; -1: timed out (killed)
  std::string out, err;
  bool exited_ok() const;
};
// Runs argv with a timeout (SIGKILL after it), capturing stdout and stderr.
RunResult run(const std::vector<std::string>& argv, std::chrono::milliseconds timeout,
              const std::map<std::string, std::string>& env = {});

// `ibdctl --socket S --json WHAT`; its stdout.
RunResult ibdctl(const std::string& socket, const std::string& what);
// Until the IB CM engine of every port of the ibd at `socket` runs (`ibdctl
// cm`: a listen made before waits for it, a connect is ENETDOWN, a REQ
// that comes is dropped); false after `timeout`.
bool wait_cm_running(const std::string& socket, std::chrono::milliseconds timeout = std::chrono::seconds(20));

// A child process with its stdout on a pipe; SIGKILLed and reaped by the
// destructor if still running. Dies with the test (PR_SET_PDEATHSIG).
class Child {
 public:
  Child(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env = {});
  ~Child();
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  pid_t pid() const { return pid_; }
  // Reads stdout until it holds a line containing `word` (true) or the
  // timeout passes or stdout closes (false).
  bool wait_for_output(const std::string& word, std::chrono::milliseconds timeout);
  // Waits for exit; the waitpid status, or nullopt after the timeout.
  std::optional<int> wait(std::chrono::milliseconds timeout);
  void kill(int sig = 9);
  const std::string& output() const { return out_; }

 private:
  pid_t pid_ = -1;
  int fd_ = -1;
  std::string out_;
};

// /proc counts of a process.
size_t count_fds(pid_t pid);
size_t count_maps(pid_t pid);
size_t count_memfd_maps(pid_t pid);  // mappings of memfd: files
std::map<std::string, long> smaps_rollup(pid_t pid);

// What ibd holds now: its fds and mappings, its simhca's, the gauges of
// ibdctl's JSON (counters, clients, objects; running totals such as
// connects or requests are left out), and the objects the device itself
// holds (INFO device.device_objects: simhca's object-count registers,
// docs/simhca.md §3.1). Used to check that what clients made is all gone
// once they are.
struct Snapshot {
  size_t ibd_fds = 0, ibd_maps = 0, ibd_memfd_maps = 0;
  size_t sim_fds = 0, sim_maps = 0, sim_memfd_maps = 0;
  std::map<std::string, double> gauges;
  // "pds", "mrs", "cqs", "qps", "srqs", "ahs", "eqs", "uars", "dma_maps";
  // empty if INFO had none (the device lost).
  std::map<std::string, double> device_objects;
  bool operator==(const Snapshot&) const = default;
  // Equal to `base`, except that the total mapping counts may have grown
  // by a few (the allocator's arenas; ASan's shadow): mappings that hold
  // client memory are the memfd ones, compared exactly.
  // The slack: ASan's allocator alone was seen to add 9 mappings after a
  // hostile run whose fds, memfd mappings and object counts were exact.
  static constexpr size_t kMapSlack = 32;
  bool matches(const Snapshot& base) const;
  std::string str() const;
};
// "k=v k=v ..." of counts, for messages (Catch cannot print a map).
std::string counts_str(const std::map<std::string, double>& counts);
bool is_gauge(const std::string& json_key);
// Throws std::runtime_error if ibdctl fails.
Snapshot snapshot(const Ibd& ibd);
// Polls until snapshot(ibd).matches(want) or `timeout`; the last snapshot.
Snapshot settle(const Ibd& ibd, const Snapshot& want, std::chrono::milliseconds timeout);

// Runs `f` in a forked child as user nobody (group nogroup, no
// supplementary groups; setresgid/setresuid, so no capability is left) and
// returns the numbers it returned, passed back through a pipe. Empty if the
// child could not drop to nobody, died, or took longer than `timeout` (it
// is then killed). The child connects to ibd itself: SO_PEERCRED is taken
// at connect().
std::vector<int> run_as_nobody(const std::function<std::vector<int>()>& f,
                               std::chrono::milliseconds timeout = std::chrono::seconds(30));

// sendmsg(2) of one datagram with `fd` attached (SCM_RIGHTS); its result.
ssize_t send_with_fd(int sock, const void* data, size_t len, int fd);

// A TCP listener on 127.0.0.1 that never accepts, and connections to it
// whose last close blocks: SO_LINGER 60 s with their send buffer full of
// data the peer never reads (socket(7), tcp(7)). Closing the listener
// resets them (and ends such a close). Throws std::runtime_error.
class LingeringTcp {
 public:
  LingeringTcp();
  ~LingeringTcp();
  LingeringTcp(const LingeringTcp&) = delete;
  LingeringTcp& operator=(const LingeringTcp&) = delete;
  int make();  // a new such connection (the caller owns the fd)

 private:
  int listener_ = -1;
  uint16_t port_ = 0;
};

}  // namespace openib::testing
