// simhca's device loop (docs/simhca.md §13): the socket watch, a thread
// per device blocked in epoll on its vfio-user socket.
#pragma once

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <functional>
#include <mutex>
#include <thread>

#include "common/fd.hpp"
#include "sim/simhca/doorbell_scanner.hpp"

namespace openib::simhca::server {

// Tells the device loop that the vfio-user socket is readable: a thread
// blocked in epoll_wait on it (one-shot). If the loop is asleep (it holds
// the device lock whenever it is not), the watcher takes the lock and
// serves the message itself through `serve` (true: handled, watch on),
// which saves the loop's wake-up on the command path; otherwise it raises
// a flag and wakes the loop, which handles the message and re-arms (§13).
class SocketWatch {
 public:
  // Called with the device lock held: 0 not served (the loop will), 1
  // served, 2 served and the loop must re-arm its sleep.
  using Serve = std::function<int()>;
  SocketWatch(openib::simhca::DeviceWaiter& w, std::mutex& device, Serve serve)
      : waiter_(w),
        device_(device),
        serve_(std::move(serve)),
        ep_(::epoll_create1(EPOLL_CLOEXEC)),
        stop_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {}
  ~SocketWatch() {
    const uint64_t one = 1;
    (void)!::write(stop_.get(), &one, sizeof one);
    if (thread_.joinable()) thread_.join();
  }
  bool start() {
    if (!ep_ || !stop_) return false;
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = -1;
    if (::epoll_ctl(ep_.get(), EPOLL_CTL_ADD, stop_.get(), &ev) != 0) return false;
    thread_ = std::thread([this] { run(); });
    return true;
  }
  // Loop thread: watch `fd` (-1: none). Raises the flag at once if readable.
  void set_fd(int fd) {
    if (fd_ >= 0) (void)::epoll_ctl(ep_.get(), EPOLL_CTL_DEL, fd_, nullptr);
    fd_ = fd;
    ready_.store(false);
    if (fd_ < 0) return;
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLONESHOT;
    ev.data.fd = fd_;
    (void)::epoll_ctl(ep_.get(), EPOLL_CTL_ADD, fd_, &ev);
  }
  bool ready() const { return ready_.load(std::memory_order_acquire); }
  // Loop thread, after handling a message: watch for the next one.
  void rearm() {
    ready_.store(false, std::memory_order_relaxed);
    if (fd_ < 0) return;
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLONESHOT;
    ev.data.fd = fd_;
    (void)::epoll_ctl(ep_.get(), EPOLL_CTL_MOD, fd_, &ev);
  }

 private:
  void run() {
    for (;;) {
      epoll_event ev[2];
      const int n = ::epoll_wait(ep_.get(), ev, 2, -1);
      if (n < 0 && errno != EINTR) return;
      for (int i = 0; i < n; ++i) {
        if (ev[i].data.fd == -1) return;  // stop
        if (waiter_.asleep() && device_.try_lock()) {
          const int served = waiter_.asleep() ? serve_() : 0;
          if (served) rearm();
          device_.unlock();
          if (served == 2) waiter_.notify();
          if (served) continue;
        }
        ready_.store(true, std::memory_order_release);
        waiter_.notify();
      }
    }
  }

  openib::simhca::DeviceWaiter& waiter_;
  std::mutex& device_;
  Serve serve_;
  openib::UniqueFd ep_, stop_;
  int fd_ = -1;
  std::atomic<bool> ready_{false};
  std::thread thread_;
};

}  // namespace openib::simhca::server
