// tcp-conn-rate: the baseline of bench/cm.sh (docs/performance.md "CM
// connections"): TCP connect/accept/close per second over loopback, with
// K connections in flight, client and server in one process on one epoll
// loop (as openib-cm-pingpong's client and server are two processes on
// two ibds, this is the kernel's best case).
//   tcp-conn-rate [N] [K]     (default 20000 connections, 100 in flight)
// Prints "tcp: N connections in S s = R conn/s".
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unordered_map>

namespace {
[[noreturn]] void die(const char* what) {
  std::perror(what);
  std::exit(1);
}
enum Kind : uint8_t { kListener, kClient, kServer };
}  // namespace

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : 20000;
  const int k = argc > 2 ? std::atoi(argv[2]) : 100;
  int ls = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (ls < 0) die("socket");
  int one = 1;
  ::setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(ls, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) die("bind");
  if (::listen(ls, 1024) != 0) die("listen");
  socklen_t al = sizeof a;
  ::getsockname(ls, reinterpret_cast<sockaddr*>(&a), &al);
  int ep = ::epoll_create1(EPOLL_CLOEXEC);
  std::unordered_map<int, Kind> kind;
  auto watch = [&](int fd, Kind kd, uint32_t events) {
    kind[fd] = kd;
    epoll_event ev{};
    ev.events = events;
    ev.data.fd = fd;
    if (::epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) != 0) die("epoll_ctl");
  };
  auto drop = [&](int fd) {
    ::epoll_ctl(ep, EPOLL_CTL_DEL, fd, nullptr);
    kind.erase(fd);
    ::close(fd);
  };
  watch(ls, kListener, EPOLLIN);
  int started = 0, done = 0, inflight = 0;
  auto start = [&] {
    while (started < n && inflight < k) {
      int c = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
      if (c < 0) die("socket");
      // RST on close: no TIME_WAIT pile-up over 20,000 connections from one port range.
      linger lg{1, 0};
      ::setsockopt(c, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
      if (::connect(c, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 && errno != EINPROGRESS) die("connect");
      watch(c, kClient, EPOLLOUT);
      ++started;
      ++inflight;
    }
  };
  const auto t0 = std::chrono::steady_clock::now();
  start();
  epoll_event evs[256];
  while (done < n) {
    int m = ::epoll_wait(ep, evs, 256, 10000);
    if (m <= 0) die("epoll_wait (stalled)");
    for (int i = 0; i < m; ++i) {
      const int fd = evs[i].data.fd;
      auto it = kind.find(fd);
      if (it == kind.end()) continue;
      switch (it->second) {
        case kListener:
          for (;;) {
            int s = ::accept4(ls, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
            if (s < 0) break;
            watch(s, kServer, EPOLLIN | EPOLLRDHUP);
          }
          break;
        case kClient:  // connected: close it (the "disconnect")
          drop(fd);
          break;
        case kServer: {  // the peer closed: close ours; one connection done
          char b[16];
          if (::read(fd, b, sizeof b) > 0) break;
          drop(fd);
          ++done;
          --inflight;
          start();
          break;
        }
      }
    }
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("tcp: %d connections in %.2f s = %.1f conn/s\n", n, s, n / s);
  return 0;
}
