#include "common/bus_fault.hpp"

#include <setjmp.h>
#include <signal.h>

#include <atomic>
#include <cstring>
#include <mutex>

namespace openib {
namespace {

struct RecoveryPoint {
  sigjmp_buf env;
  volatile sig_atomic_t armed = 0;
};

// initial-exec: the handler reads it without a TLS allocation, which would
// not be async-signal-safe.
[[gnu::tls_model("initial-exec")]] thread_local RecoveryPoint t_point;

std::mutex g_install_mu;
struct sigaction g_prev{};  // the disposition before ours, for faults not ours
std::atomic<uint64_t> g_recovered{0};

void on_sigbus(int, siginfo_t* si, void*) {
  RecoveryPoint& p = t_point;
  // si_code > 0: raised by the kernel for this thread's access (sigaction(2)).
  if (p.armed && si->si_code > 0) {
    p.armed = 0;
    g_recovered.fetch_add(1, std::memory_order_relaxed);
    siglongjmp(p.env, 1);
  }
  // Not ours: the previous disposition takes it. A fault re-executes the
  // access on return and faults again under that disposition; a SIGBUS
  // sent by kill is sent again (SA_NODEFER: delivered at once).
  ::sigaction(SIGBUS, &g_prev, nullptr);
  if (si->si_code <= 0) ::raise(SIGBUS);
}

}  // namespace

void install_bus_fault_handler() {
  std::lock_guard lock(g_install_mu);
  struct sigaction cur{};
  ::sigaction(SIGBUS, nullptr, &cur);
  if ((cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == on_sigbus) return;
  struct sigaction sa{};
  sa.sa_sigaction = on_sigbus;
  sa.sa_flags = SA_SIGINFO | SA_NODEFER;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGBUS, &sa, &g_prev);
}

bool guarded_copy(void* dst, const void* src, size_t n) {
  // savemask 0: SIGBUS is never blocked by our handler (SA_NODEFER), so
  // there is no mask to restore and no system call here. No local changes
  // between sigsetjmp and the jump back (nothing to be clobbered).
  if (sigsetjmp(t_point.env, 0) != 0) return false;  // the handler disarmed it
  t_point.armed = 1;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  std::memcpy(dst, src, n);
  std::atomic_signal_fence(std::memory_order_seq_cst);
  t_point.armed = 0;
  return true;
}

uint64_t bus_faults_recovered() { return g_recovered.load(std::memory_order_relaxed); }

}  // namespace openib
