// The embedded device: a simhca child process (docs/simhca.md §13) serving
// vfio-user on a socket in ibd's run directory. It dies with ibd
// (PR_SET_PDEATHSIG) and is stopped with SIGTERM, then SIGKILL after 2 s.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "common/result.hpp"
#include "vfio/device.hpp"

namespace openib::ibd {

class SimhcaChild {
 public:
  struct Params {
    std::string binary, socket, log_level, cable, pcap, faults;
    std::vector<std::string> extra;  // appended as they are
  };
  // Starts the child; does not wait for its socket.
  static Result<std::unique_ptr<SimhcaChild>> spawn(const Params& p);
  ~SimhcaChild();

  // Connects with vfio::open_device once the socket accepts; bounded by
  // timeout_ms, and fails at once if the child exits first. Waits: for
  // start-up, before ibd's loop runs.
  Result<std::unique_ptr<vfio::Device>> connect(int timeout_ms);
  // One attempt, without waiting: the device, or EAGAIN (no socket yet, or
  // it does not accept yet; the message says why), or ENODEV (the child
  // exited). For the loop, which retries on a timer (device recovery).
  Result<std::unique_ptr<vfio::Device>> try_connect();
  // Non-blocking: true (and the wait status) once the child has exited.
  bool exited(int* status = nullptr);
  // SIGTERM, wait up to 2 s, then SIGKILL; reaps. Idempotent.
  int stop();
  // SIGKILL and reap (a device being fenced: it must not touch memory any
  // more). Idempotent; the wait status.
  int kill_now();
  pid_t pid() const { return pid_; }
  const std::string& socket() const { return socket_; }

 private:
  pid_t pid_ = -1;
  int status_ = 0;
  std::string socket_;
};

std::string describe_wait_status(int status);

}  // namespace openib::ibd
