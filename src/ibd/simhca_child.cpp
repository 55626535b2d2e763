#include "ibd/simhca_child.hpp"

#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <thread>

#include "common/log.hpp"

namespace openib::ibd {

std::string describe_wait_status(int st) {
  if (WIFEXITED(st) && WEXITSTATUS(st) == 127) return "could not be executed (exit status 127; see --simhca)";
  if (WIFEXITED(st)) return fmt::format("exited with status {}", WEXITSTATUS(st));
  if (WIFSIGNALED(st)) return fmt::format("killed by signal {}", WTERMSIG(st));
  return fmt::format("wait status {:#x}", st);
}

Result<std::unique_ptr<SimhcaChild>> SimhcaChild::spawn(const Params& p) {
  std::vector<std::string> args{p.binary, "--socket", p.socket, "--log", p.log_level};
  if (!p.cable.empty()) args.insert(args.end(), {"--port1", p.cable});
  if (!p.pcap.empty()) args.insert(args.end(), {"--pcap", p.pcap});
  if (!p.faults.empty()) args.insert(args.end(), {"--faults", p.faults});
  args.insert(args.end(), p.extra.begin(), p.extra.end());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::error_code ec;
  std::filesystem::remove(p.socket, ec);  // a stale socket of ours (we hold the run-dir lock)
  const pid_t parent = ::getpid();
  // Signals stay blocked across fork until the child has ibd's handlers
  // (asio's) back to the defaults: a SIGTERM sent before the exec (ibd
  // stopping right after a restart began) then ends the child instead of
  // running ibd's handler in it and being lost.
  sigset_t all, old;
  sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &old);
  const pid_t pid = ::fork();
  if (pid == 0) {
    // Child: die with ibd, even if ibd is SIGKILLed; the race with a parent
    // that died before prctl is closed by the getppid check.
    for (int sig : {SIGTERM, SIGINT, SIGCHLD, SIGHUP}) ::signal(sig, SIG_DFL);
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) ::_exit(1);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::execvp(argv[0], argv.data());
    ::_exit(127);
  }
  const int fork_errno = errno;
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (pid < 0) {
    errno = fork_errno;
    return sys_err("fork for simhca");
  }
  auto c = std::unique_ptr<SimhcaChild>(new SimhcaChild());
  c->pid_ = pid;
  c->socket_ = p.socket;
  log::get("ibd")->info("simhca: started {} (pid {}) on {}", p.binary, pid, p.socket);
  return c;
}

SimhcaChild::~SimhcaChild() { stop(); }

bool SimhcaChild::exited(int* status) {
  if (pid_ <= 0) {
    if (status) *status = status_;
    return true;
  }
  int st = 0;
  if (::waitpid(pid_, &st, WNOHANG) == pid_) {
    pid_ = -1;
    status_ = st;
    if (status) *status = st;
    return true;
  }
  return false;
}

Result<std::unique_ptr<vfio::Device>> SimhcaChild::try_connect() {
  int st = 0;
  if (exited(&st)) return err(ENODEV, "simhca {} before its socket accepted", describe_wait_status(st));
  if (!std::filesystem::exists(socket_)) return err(EAGAIN, "simhca socket {} did not appear", socket_);
  auto d = vfio::open_device("vfio-user:" + socket_);
  if (d) return d;
  return err(EAGAIN, "{}", d.error().str());
}

Result<std::unique_ptr<vfio::Device>> SimhcaChild::connect(int timeout_ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    auto d = try_connect();
    if (d || d.error().code != EAGAIN) return d;
    if (std::chrono::steady_clock::now() >= deadline)
      return err(ETIMEDOUT, "simhca did not accept within {} ms: {}", timeout_ms, d.error().message);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

int SimhcaChild::kill_now() {
  if (pid_ <= 0) return status_;
  ::kill(pid_, SIGKILL);
  int st = 0;
  while (::waitpid(pid_, &st, 0) < 0 && errno == EINTR) {
  }
  pid_ = -1;
  status_ = st;
  return st;
}

int SimhcaChild::stop() {
  if (pid_ <= 0) return status_;
  ::kill(pid_, SIGTERM);
  for (int waited = 0; waited < 2000; waited += 10) {
    if (exited()) return status_;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  log::get("ibd")->warn("simhca (pid {}) ignored SIGTERM for 2 s; SIGKILL", pid_);
  ::kill(pid_, SIGKILL);
  int st = 0;
  ::waitpid(pid_, &st, 0);
  pid_ = -1;
  status_ = st;
  return st;
}

}  // namespace openib::ibd
