#include "harness.hpp"

#include "json_flat.hpp"

#include "clientproto/messages.hpp"
#include "clientproto/socket.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <arpa/inet.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <grp.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace openib::testing {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

TempDir::TempDir() {
  const char* base = std::getenv("TMPDIR");
  std::string tmpl = std::string(base && *base ? base : "/tmp") + "/ibd-test-XXXXXX";
  if (!::mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp: " + std::string(strerror(errno)));
  ::chmod(tmpl.c_str(), 0755);
  path_ = tmpl;
}

TempDir::~TempDir() {
  std::error_code ec;
  fs::remove_all(path_, ec);
}

std::string env_path(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) throw std::runtime_error(std::string("environment variable ") + name + " not set");
  return v;
}

namespace {

std::string read_file(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// Waits for `pid` up to `timeout`; the status, or nullopt.
std::optional<int> wait_for(pid_t pid, std::chrono::milliseconds timeout) {
  auto deadline = Clock::now() + timeout;
  for (;;) {
    int st = 0;
    pid_t r = ::waitpid(pid, &st, WNOHANG);
    if (r == pid) return st;
    if (r < 0 && errno != EINTR) return std::nullopt;
    if (Clock::now() > deadline) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

}  // namespace

Ibd::Ibd(const std::string& dir, const std::string& name, const IbdOptions& o) {
  socket_ = dir + "/" + name + ".sock";
  log_ = dir + "/" + name + ".log";
  std::string run_dir = dir + "/" + name + ".run";
  fs::create_directories(run_dir);
  std::vector<std::string> args = {env_path("OPENIB_IBD"), "--socket", socket_, "--socket-mode",
                                   o.socket_mode, "--lid", std::to_string(o.lid), "--log", o.log,
                                   "--run-dir", run_dir};
  if (!o.cable.empty()) {
    args.push_back("--cable");
    args.push_back(o.cable);
  }
  args.insert(args.end(), o.extra_args.begin(), o.extra_args.end());
  int logfd = ::open(log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (logfd < 0) throw std::runtime_error("open " + log_);
  pid_t parent = ::getpid();
  pid_ = ::fork();
  if (pid_ < 0) throw std::runtime_error("fork");
  if (pid_ == 0) {
    // ibd goes when the test goes, even if the test is SIGKILLed.
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) ::_exit(1);
    ::dup2(logfd, 2);
    int devnull = ::open("/dev/null", O_RDWR);
    ::dup2(devnull, 0);
    ::dup2(logfd, 1);
    std::vector<char*> av;
    for (auto& a : args) av.push_back(a.data());
    av.push_back(nullptr);
    ::execv(av[0], av.data());
    ::_exit(127);
  }
  ::close(logfd);
  auto deadline = Clock::now() + std::chrono::seconds(30);
  std::string want = "ibd: ready on " + socket_;
  for (;;) {
    if (read_file(log_).find(want) != std::string::npos) return;
    int st;
    if (::waitpid(pid_, &st, WNOHANG) == pid_) {
      pid_ = -1;
      throw std::runtime_error("ibd " + name + " exited before ready (status " +
                               std::to_string(st) + "):\n" + log_tail());
    }
    if (Clock::now() > deadline) {
      std::string tail = log_tail();
      stop(std::chrono::seconds(5));
      throw std::runtime_error("ibd " + name + " not ready within 30 s:\n" + tail);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

Ibd::~Ibd() {
  if (pid_ > 0) stop();
}

std::string Ibd::log_tail(size_t bytes) const {
  std::string s = read_file(log_);
  return s.size() > bytes ? s.substr(s.size() - bytes) : s;
}

bool Ibd::alive() const {
  if (pid_ <= 0) return false;
  int st;
  return ::waitpid(pid_, &st, WNOHANG) == 0;
}

pid_t Ibd::simhca_pid() const {
  if (pid_ <= 0) return 0;
  std::string dir = "/proc/" + std::to_string(pid_) + "/task/";
  std::error_code ec;
  for (auto& t : fs::directory_iterator(dir, ec)) {
    std::ifstream f(t.path() / "children");
    pid_t c;
    if (f >> c) return c;
  }
  return 0;
}

void Ibd::signal(int sig) const {
  if (pid_ > 0) ::kill(pid_, sig);
}

std::optional<int> Ibd::stop(std::chrono::milliseconds timeout) {
  if (pid_ <= 0) return std::nullopt;
  ::kill(pid_, SIGTERM);
  ::kill(pid_, SIGCONT);  // in case a test stopped it
  auto st = wait_for(pid_, timeout);
  if (!st) {
    ::kill(pid_, SIGKILL);
    wait_for(pid_, std::chrono::seconds(10));
  }
  pid_ = -1;
  return st;
}

std::vector<uint16_t> free_udp_ports(size_t n) {
  std::vector<int> socks;
  std::vector<uint16_t> ports;
  for (size_t i = 0; i < n; ++i) {
    int s = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    if (s < 0 || ::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
        ::getsockname(s, reinterpret_cast<sockaddr*>(&a), &len) != 0)
      throw std::runtime_error("udp bind");
    socks.push_back(s);
    ports.push_back(ntohs(a.sin_port));
  }
  for (int s : socks) ::close(s);
  return ports;
}

IbdPair::IbdPair(const std::string& dir, const std::string& log, bool distinct_guids, bool shm_cable,
                 const std::vector<std::string>& extra_a) {
  auto p = free_udp_ports(2);
  auto end = [](uint16_t port) { return "127.0.0.1:" + std::to_string(port); };
  IbdOptions oa, ob;
  oa.lid = 1;
  ob.lid = 2;
  oa.log = ob.log = log;
  oa.cable = "LOCAL=" + end(p[0]) + ",PEER=" + end(p[1]);
  ob.cable = "LOCAL=" + end(p[1]) + ",PEER=" + end(p[0]);
  if (shm_cable) {
    oa.cable = "SHM=" + dir + "/cable.shm,END=A";
    ob.cable = "SHM=" + dir + "/cable.shm,END=B";
  }
  if (distinct_guids) {
    char guid[32];
    std::snprintf(guid, sizeof guid, "--simhca-arg=%#llx", static_cast<unsigned long long>(kPairGuidB));
    ob.extra_args = {"--simhca-arg=--guid", guid};
  }
  oa.extra_args = extra_a;
  a = std::make_unique<Ibd>(dir, "a", oa);
  b = std::make_unique<Ibd>(dir, "b", ob);
}

bool RunResult::exited_ok() const { return status >= 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0; }

RunResult run(const std::vector<std::string>& argv, std::chrono::milliseconds timeout,
              const std::map<std::string, std::string>& env) {
  RunResult r;
  int out[2], errp[2];
  if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(errp, O_CLOEXEC) != 0) throw std::runtime_error("pipe");
  pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork");
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    ::dup2(out[1], 1);
    ::dup2(errp[1], 2);
    for (auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
    std::vector<char*> av;
    for (auto& a : argv) av.push_back(const_cast<char*>(a.c_str()));
    av.push_back(nullptr);
    ::execv(av[0], av.data());
    std::fprintf(stderr, "exec %s: %s\n", av[0], strerror(errno));
    ::_exit(127);
  }
  ::close(out[1]);
  ::close(errp[1]);
  auto deadline = Clock::now() + timeout;
  pollfd pf[2] = {{out[0], POLLIN, 0}, {errp[0], POLLIN, 0}};
  std::string* dst[2] = {&r.out, &r.err};
  int open_fds = 2;
  bool killed = false;
  while (open_fds > 0) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) {
      ::kill(pid, SIGKILL);
      killed = true;
      break;
    }
    if (::poll(pf, 2, static_cast<int>(left.count())) < 0 && errno != EINTR) break;
    for (int i = 0; i < 2; ++i) {
      if (pf[i].fd < 0 || !(pf[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      char buf[4096];
      ssize_t k = ::read(pf[i].fd, buf, sizeof buf);
      if (k > 0) {
        dst[i]->append(buf, static_cast<size_t>(k));
      } else {
        ::close(pf[i].fd);
        pf[i].fd = -1;
        --open_fds;
      }
    }
  }
  for (auto& p : pf)
    if (p.fd >= 0) ::close(p.fd);
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  auto st = wait_for(pid, killed ? std::chrono::milliseconds(10000)
                                 : std::max(left, std::chrono::milliseconds(1000)));
  if (!st) {
    ::kill(pid, SIGKILL);
    wait_for(pid, std::chrono::seconds(10));
    killed = true;
  }
  r.status = (st && !killed) ? *st : -1;
  return r;
}

Child::Child(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) throw std::runtime_error("pipe");
  pid_t parent = ::getpid();
  pid_ = ::fork();
  if (pid_ < 0) throw std::runtime_error("fork");
  if (pid_ == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(1);
    ::dup2(p[1], 1);
    for (auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
    std::vector<char*> av;
    for (auto& a : argv) av.push_back(const_cast<char*>(a.c_str()));
    av.push_back(nullptr);
    ::execv(av[0], av.data());
    ::_exit(127);
  }
  ::close(p[1]);
  fd_ = p[0];
}

Child::~Child() {
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    wait_for(pid_, std::chrono::seconds(10));
  }
  if (fd_ >= 0) ::close(fd_);
}

bool Child::wait_for_output(const std::string& word, std::chrono::milliseconds timeout) {
  auto deadline = Clock::now() + timeout;
  for (;;) {
    auto pos = out_.find(word);
    if (pos != std::string::npos && out_.find('\n', pos) != std::string::npos) return true;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0 || fd_ < 0) return false;
    pollfd pf{fd_, POLLIN, 0};
    if (::poll(&pf, 1, static_cast<int>(left.count())) <= 0) continue;
    char buf[512];
    ssize_t n = ::read(fd_, buf, sizeof buf);
    if (n <= 0) {
      ::close(fd_);
      fd_ = -1;
      return false;
    }
    out_.append(buf, static_cast<size_t>(n));
  }
}

std::optional<int> Child::wait(std::chrono::milliseconds timeout) {
  if (pid_ <= 0) return std::nullopt;
  auto st = wait_for(pid_, timeout);
  if (st) {
    pid_ = -1;
    // Collect what it printed before it went.
    if (fd_ >= 0) {
      char buf[512];
      ssize_t n;
      while ((n = ::read(fd_, buf, sizeof buf)) > 0) out_.append(buf, static_cast<size_t>(n));
    }
  }
  return st;
}

void Child::kill(int sig) {
  if (pid_ > 0) ::kill(pid_, sig);
}

RunResult ibdctl(const std::string& socket, const std::string& what) {
  return run({env_path("OPENIB_IBDCTL"), "--socket", socket, "--json", what},
             std::chrono::seconds(10));
}

bool wait_cm_running(const std::string& socket, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  do {
    RunResult r = ibdctl(socket, "cm");
    if (r.exited_ok()) {
      auto j = nlohmann::json::parse(r.out, nullptr, false);
      bool all = j.is_object() && j.contains("ports") && !j["ports"].empty();
      if (all)
        for (const auto& p : j["ports"]) all = all && p.value("running", false);
      if (all && j.value("pending_listens", 1) == 0) return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  } while (std::chrono::steady_clock::now() < deadline);
  return false;
}

size_t count_fds(pid_t pid) {
  size_t n = 0;
  std::error_code ec;
  for (auto it = fs::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec);
       !ec && it != fs::directory_iterator(); it.increment(ec))
    ++n;
  return n;
}

size_t count_maps(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/maps");
  std::string line;
  size_t n = 0;
  while (std::getline(f, line)) ++n;
  return n;
}

size_t count_memfd_maps(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/maps");
  std::string line;
  size_t n = 0;
  while (std::getline(f, line))
    if (line.find("/memfd:") != std::string::npos) ++n;
  return n;
}

std::map<std::string, long> smaps_rollup(pid_t pid) {
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

std::string Snapshot::str() const {
  std::string s = "ibd fds " + std::to_string(ibd_fds) + ", maps " + std::to_string(ibd_maps) +
                  ", memfd maps " + std::to_string(ibd_memfd_maps) + "; simhca fds " +
                  std::to_string(sim_fds) + ", maps " + std::to_string(sim_maps) +
                  ", memfd maps " + std::to_string(sim_memfd_maps) + "; ibdctl:";
  for (auto& [k, v] : gauges) s += " " + k + "=" + std::to_string(static_cast<long long>(v));
  return s + "; device objects: " + counts_str(device_objects);
}

std::string counts_str(const std::map<std::string, double>& counts) {
  std::string s;
  for (auto& [k, v] : counts) s += (s.empty() ? "" : " ") + k + "=" + std::to_string(static_cast<long long>(v));
  return s;
}

bool Snapshot::matches(const Snapshot& b) const {
  return ibd_fds == b.ibd_fds && sim_fds == b.sim_fds && ibd_memfd_maps == b.ibd_memfd_maps &&
         sim_memfd_maps == b.sim_memfd_maps && gauges == b.gauges && device_objects == b.device_objects &&
         ibd_maps <= b.ibd_maps + kMapSlack && sim_maps <= b.sim_maps + kMapSlack;
}

bool is_gauge(const std::string& key) {
  static const char* totals[] = {"connect", "disconnect", "request", "error",  "violation",
                                 "event",   "uptime",     "time",    "second", "_ms",
                                 "_us",     "notif",      "total",   "created", "destroyed",
                                 "pid",     "uid",        "gid",     "id",     "version",
                                 "guid",    "quarantin",  "max",     "lid",    "port",
                                 "since",   "age",        "name",    "interrupt", "uar",
                                 "generation", "losses", "opens",  "_sent",  "delivered",
                                 "dropped", "denied", "bad_client"};
  std::string k = key;
  for (auto& c : k) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  // The SA client's and the path cache's counters are totals; the cache's
  // size is a gauge.
  if (k.find("path_cache_entries") != std::string::npos || k.find("path_cache_pending") != std::string::npos)
    return true;
  if (k.find("sa_") != std::string::npos || k.find("path_cache_") != std::string::npos) return false;
  for (auto* t : totals)
    if (k.find(t) != std::string::npos) return false;
  return true;
}

namespace {

// A connection of the harness's own to ibd: HELLO, then INFO. ibdctl would
// do as well, but each run leaves ibd a departing client (its socket, its
// UAR page in simhca) that ibd tears down after ibdctl exited: counted or
// not, depending on timing, by whatever looks at /proc next.
class Observer {
 public:
  explicit Observer(const std::string& path) {
    auto s = proto::connect_socket(path);
    if (!s) fail(s.error().str());
    sock_ = std::move(*s);
    auto hello = proto::decode<proto::HelloRep>(call(proto::Op::kHello, proto::encode(proto::HelloReq{})));
    if (!hello) fail("HELLO reply: " + hello.error().str());
    id_ = hello->client_id;
  }
  uint32_t id() const { return id_; }
  std::string info(uint32_t flags) {
    proto::InfoReq req;
    req.flags = flags;
    const proto::Bytes p = call(proto::Op::kInfo, proto::encode(req));
    return std::string(reinterpret_cast<const char*>(p.data()), p.size());
  }

 private:
  [[noreturn]] static void fail(const std::string& what) {
    throw std::runtime_error("snapshot: " + what + ": " + std::strerror(errno));
  }
  proto::Bytes call(proto::Op op, const proto::Bytes& body) {
    proto::Header h;
    h.op = static_cast<uint16_t>(op);
    h.seq = ++seq_;
    if (!proto::send_message(sock_.get(), h, body)) fail("send");
    pollfd pf{sock_.get(), POLLIN, 0};
    if (::poll(&pf, 1, 10000) != 1) fail("no reply within 10 s");
    auto m = proto::recv_message(sock_.get(), true);
    if (!m) fail("recv: " + m.error().str());
    auto rv = proto::decode_reply(m->body);
    if (!rv || rv->status != 0) fail("error reply to op " + std::to_string(h.op));
    return proto::Bytes(rv->payload.begin(), rv->payload.end());
  }
  UniqueFd sock_;
  uint32_t id_ = 0;
  uint32_t seq_ = 0;
};

// The id of the harness's last observer of each ibd (by pid).
std::map<pid_t, uint32_t>& last_observer() {
  static std::map<pid_t, uint32_t> m;
  return m;
}

// Done with every client that left, the last observer included: not listed
// (nor one whose process is gone: ibd has yet to read its EOF), not
// departing, its socket closed (INFO departing_clients, fds_closing).
bool quiet(const std::string& counters_json, uint32_t previous) {
  const auto g = flatten_json(counters_json);
  auto at = [&](const std::string& k) { auto it = g.find(k); return it == g.end() ? -1.0 : it->second; };
  if (at("counters.departing_clients") != 0 || at("counters.fds_closing") != 0) return false;
  for (size_t i = 0; at("clients[" + std::to_string(i) + "].id") >= 0; ++i) {
    const std::string c = "clients[" + std::to_string(i) + "].";
    if (at(c + "id") == previous) return false;
    const auto pid = static_cast<pid_t>(at(c + "pid"));
    if (pid > 0 && ::kill(pid, 0) != 0 && errno == ESRCH) return false;
  }
  return true;
}

}  // namespace

Snapshot snapshot(const Ibd& ibd) {
  Observer o(ibd.socket());
  std::string counters = o.info(0);
  const auto prev = last_observer().find(ibd.pid());
  const uint32_t previous = prev == last_observer().end() ? 0 : prev->second;  // ids start at 1
  // Polls a condition (bounded: 2 s); past that, the snapshot shows what is
  // still pending (a test's client that is still leaving) rather than fail.
  for (int i = 0; i < 400 && !quiet(counters, previous); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    counters = o.info(0);
  }
  last_observer()[ibd.pid()] = o.id();
  Snapshot s;
  s.ibd_fds = count_fds(ibd.pid());
  s.ibd_maps = count_maps(ibd.pid());
  s.ibd_memfd_maps = count_memfd_maps(ibd.pid());
  if (pid_t sim = ibd.simhca_pid()) {
    s.sim_fds = count_fds(sim);
    s.sim_maps = count_maps(sim);
    s.sim_memfd_maps = count_memfd_maps(sim);
  }
  // The gauges as ibdctl --json counters / clients / objects shows them;
  // the device's object counts (docs/simhca.md §3.1) apart.
  const std::string device_objects = "device.device_objects.";
  for (const char* what : {"counters", "clients", "objects"}) {
    const std::string text = what == std::string("objects") ? o.info(proto::kInfoObjects) : o.info(0);
    for (auto& [k, v] : flatten_json(text)) {
      if (k.starts_with(device_objects)) s.device_objects[k.substr(device_objects.size())] = v;
      else if (is_gauge(k)) s.gauges[std::string(what) + ":" + k] = v;
    }
  }
  return s;
}

Snapshot settle(const Ibd& ibd, const Snapshot& want, std::chrono::milliseconds timeout) {
  auto deadline = Clock::now() + timeout;
  Snapshot s;
  do {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    s = snapshot(ibd);
  } while (!s.matches(want) && Clock::now() < deadline);
  return s;
}

std::vector<int> run_as_nobody(const std::function<std::vector<int>()>& f, std::chrono::milliseconds timeout) {
  const passwd* pw = ::getpwnam("nobody");
  const group* gr = ::getgrnam("nogroup");
  if (!pw) return {};
  const uid_t uid = pw->pw_uid;
  const gid_t gid = gr ? gr->gr_gid : pw->pw_gid;
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) return {};
  const pid_t child = ::fork();
  if (child < 0) {
    ::close(p[0]);
    ::close(p[1]);
    return {};
  }
  if (child == 0) {
    ::close(p[0]);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::setgroups(0, nullptr) != 0 || ::setresgid(gid, gid, gid) != 0 || ::setresuid(uid, uid, uid) != 0)
      ::_exit(2);
    const std::vector<int> out = f();
    const size_t bytes = out.size() * sizeof(int);
    if (bytes && ::write(p[1], out.data(), bytes) != static_cast<ssize_t>(bytes)) ::_exit(3);
    ::_exit(0);
  }
  ::close(p[1]);
  std::vector<int> got;
  std::string buf;
  const auto deadline = Clock::now() + timeout;
  bool eof = false;
  while (!eof && Clock::now() < deadline) {
    pollfd pf{p[0], POLLIN, 0};
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (::poll(&pf, 1, static_cast<int>(std::max<int64_t>(left.count(), 0))) != 1) break;
    char chunk[256];
    const ssize_t n = ::read(p[0], chunk, sizeof chunk);
    if (n <= 0) eof = true;
    else buf.append(chunk, static_cast<size_t>(n));
  }
  ::close(p[0]);
  if (!eof) ::kill(child, SIGKILL);
  int st = 0;
  ::waitpid(child, &st, 0);
  if (!eof || !WIFEXITED(st) || WEXITSTATUS(st) != 0) return {};
  got.resize(buf.size() / sizeof(int));
  std::memcpy(got.data(), buf.data(), got.size() * sizeof(int));
  return got;
}

ssize_t send_with_fd(int sock, const void* data, size_t len, int fd) {
  iovec iov{const_cast<void*>(data), len};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))];
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(c), &fd, sizeof fd);
  return ::sendmsg(sock, &msg, MSG_NOSIGNAL);
}

LingeringTcp::LingeringTcp() {
  listener_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  int small = 4096;  // inherited by the connections it queues: a small window
  if (listener_ < 0 || ::bind(listener_, reinterpret_cast<sockaddr*>(&a), len) != 0 ||
      ::getsockname(listener_, reinterpret_cast<sockaddr*>(&a), &len) != 0 ||
      ::setsockopt(listener_, SOL_SOCKET, SO_RCVBUF, &small, sizeof small) != 0 || ::listen(listener_, 16) != 0)
    throw std::runtime_error("LingeringTcp listener: " + std::string(strerror(errno)));
  port_ = ntohs(a.sin_port);
}

LingeringTcp::~LingeringTcp() {
  if (listener_ >= 0) ::close(listener_);
}

int LingeringTcp::make() {
  const int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) throw std::runtime_error("socket: " + std::string(strerror(errno)));
  int small = 4096;
  ::setsockopt(s, SOL_SOCKET, SO_SNDBUF, &small, sizeof small);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port_);
  auto fail = [&](const char* what) {
    const std::string e = std::string(what) + ": " + strerror(errno);
    ::close(s);
    throw std::runtime_error("LingeringTcp: " + e);
  };
  if (::connect(s, reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0) fail("connect");
  // Fill the peer's window, then the send buffer: writable no more, also
  // after a while (bounded rounds), with bytes left unsent.
  std::vector<char> junk(65536, 'x');
  bool full = false;
  for (int round = 0; round < 200 && !full; ++round) {
    while (::send(s, junk.data(), junk.size(), MSG_DONTWAIT | MSG_NOSIGNAL) > 0) {
    }
    pollfd p{s, POLLOUT, 0};
    full = ::poll(&p, 1, 50) == 0;
  }
  int unsent = 0;
  errno = EAGAIN;
  if (!full || ::ioctl(s, SIOCOUTQ, &unsent) != 0 || unsent <= 0) fail("send buffer not full");
  linger l{1, 60};
  if (::setsockopt(s, SOL_SOCKET, SO_LINGER, &l, sizeof l) != 0) fail("SO_LINGER");
  return s;
}

}  // namespace openib::testing
