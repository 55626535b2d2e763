// Whether threads of this process are blocked in a system call, read from
// /proc/self/task/TID/syscall (proc(5): its first field is the number of
// the call the thread is blocked in, "running" while it runs). A test that
// must act on a sleeping thread (a receive thread in poll(), a waiter in
// FUTEX_WAIT) waits for that, instead of sleeping a while and hoping.
#pragma once

#include <sys/syscall.h>
#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <string>
#include <thread>

namespace openib::test {

// The calls poll() may be made of (glibc uses poll where the kernel has it).
inline constexpr std::initializer_list<long> kPollCalls = {
#ifdef SYS_poll
    SYS_poll,
#endif
    SYS_ppoll};

// The system call thread `tid` of this process is blocked in; -1 if it
// runs, is gone, or cannot be read.
inline long blocked_syscall(pid_t tid) {
  std::ifstream in("/proc/self/task/" + std::to_string(tid) + "/syscall");
  std::string first;
  if (!(in >> first) || first.empty() || first.find_first_not_of("0123456789") != std::string::npos) return -1;
  return std::stol(first);
}

// How many threads of this process are blocked in one of `calls`.
inline int threads_blocked_in(std::initializer_list<long> calls) {
  int n = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/task", ec)) {
    const long nr = blocked_syscall(static_cast<pid_t>(std::stol(e.path().filename().string())));
    for (long c : calls) n += nr == c;
  }
  return n;
}

// Polls `done` every millisecond until it holds (true) or `limit` passes (false).
template <typename Pred>
bool eventually(Pred done, std::chrono::milliseconds limit = std::chrono::milliseconds(5000)) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

}  // namespace openib::test
