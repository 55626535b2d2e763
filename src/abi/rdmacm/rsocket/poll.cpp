// rpoll and rselect over rsockets and ordinary fds together (rdma-core's
// revents per socket state, docs/library.md "rsockets"): a socket's
// events are computed from its state and CQ; while nothing is ready the
// caller sleeps in poll() on each socket's eventfd and completion channel
// and on the ordinary fds as given.
#include <poll.h>
#include <sys/select.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <chrono>
#include <vector>

#include <rdma/rsocket.h>

#include "abi/rdmacm/rsocket/socket.hpp"

using namespace openib::rsocket;

namespace {

short revents_of(Socket& s, short events) {
  std::lock_guard lk(s.mu);
  if (s.dg) return ds_revents(s, events);
  short r = 0;
  switch (s.state) {
    case State::kListening:
      if (!s.accept_queue.empty()) r |= POLLIN;
      break;
    case State::kConnectError: r |= short((events & (POLLIN | POLLOUT)) | POLLERR); break;
    case State::kConnected:
    case State::kDisconnected:
    case State::kError:
      process(s);
      if ((events & POLLIN) && (!s.rmsg.empty() || !s.readable)) r |= POLLIN;
      if ((events & POLLOUT) && s.writable && s.state == State::kConnected && can_send(s)) r |= POLLOUT;
      // POLLHUP once what the peer sent before closing is read: rstream's
      // async mode ends its test on POLLHUP while its last data waits.
      if (s.state == State::kDisconnected && (s.rmsg.empty() || !(events & POLLIN))) r |= POLLHUP;
      if (s.state == State::kError) r |= POLLERR;
      break;
    default: break;  // init, bound, connecting: nothing yet
  }
  return r;
}

int poll_sockets(pollfd* fds, nfds_t nfds, int timeout) {
  if (!fds && nfds) {
    errno = EFAULT;
    return -1;
  }
  std::vector<SocketPtr> socks(nfds);
  for (nfds_t k = 0; k < nfds; ++k) socks[k] = fds[k].fd >= 0 ? find(fds[k].fd) : nullptr;
  const auto start = std::chrono::steady_clock::now();
  std::vector<pollfd> wait_fds;
  for (;;) {
    int ready = 0;
    wait_fds.clear();
    for (nfds_t k = 0; k < nfds; ++k) {
      fds[k].revents = 0;
      if (socks[k]) {
        fds[k].revents = revents_of(*socks[k], fds[k].events);
      } else if (fds[k].fd >= 0) {
        pollfd p{fds[k].fd, fds[k].events, 0};
        if (::poll(&p, 1, 0) > 0) fds[k].revents = p.revents;
      }
      if (fds[k].revents) ++ready;
    }
    int left = -1;
    if (timeout >= 0) {
      const auto spent = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start).count();
      left = spent >= timeout ? 0 : int(timeout - spent);
    }
    if (ready || left == 0) {
      if (!ready) idle_spin();
      return ready;
    }
    std::vector<size_t> first(nfds);  // each entry's first index in wait_fds
    for (nfds_t k = 0; k < nfds; ++k) {
      first[k] = wait_fds.size();
      if (socks[k]) {
        Socket& s = *socks[k];
        std::lock_guard lk(s.mu);
        if (arm(s)) left = 0;  // something came: look again at once
        add_wait_fds(s, wait_fds);  // (the eventfd first)
      } else if (fds[k].fd >= 0) {
        wait_fds.push_back({fds[k].fd, fds[k].events, 0});
      }
    }
    // 100 ms slices: a wake-up another thread drained in between is seen then.
    const int slice = left < 0 || left > 100 ? 100 : left;
    if (slice == 0) continue;
    if (::poll(wait_fds.data(), wait_fds.size(), slice) < 0) return -1;
    for (nfds_t k = 0; k < nfds; ++k)
      if (socks[k] && wait_fds[first[k]].revents) {  // the eventfd: consumed, the state is read above
        uint64_t v;
        [[maybe_unused]] auto n = ::read(wait_fds[first[k]].fd, &v, sizeof v);
      }
  }
}

}  // namespace

extern "C" {

int rpoll(pollfd* fds, nfds_t nfds, int timeout) {
  const int saved = errno;
  const int n = poll_sockets(fds, nfds, timeout);
  if (n >= 0) errno = saved;
  return n;
}

int rselect(int nfds, fd_set* readfds, fd_set* writefds, fd_set* exceptfds, timeval* timeout) {
  std::vector<pollfd> p;
  for (int fd = 0; fd < nfds; ++fd) {
    short ev = 0;
    if (readfds && FD_ISSET(fd, readfds)) ev |= POLLIN;
    if (writefds && FD_ISSET(fd, writefds)) ev |= POLLOUT;
    if (exceptfds && FD_ISSET(fd, exceptfds)) ev |= POLLPRI;
    if (ev) p.push_back({fd, ev, 0});
  }
  if (timeout && (timeout->tv_sec < 0 || timeout->tv_usec < 0)) {
    errno = EINVAL;
    return -1;
  }
  // (a timeout past INT_MAX ms, 24 days, waits that long)
  const long long want = timeout ? (long long)timeout->tv_sec * 1000 + timeout->tv_usec / 1000 : -1;
  const int ms = want > INT_MAX ? INT_MAX : int(want);
  const int n = rpoll(p.data(), p.size(), ms);
  if (n < 0) return -1;
  if (readfds) FD_ZERO(readfds);
  if (writefds) FD_ZERO(writefds);
  if (exceptfds) FD_ZERO(exceptfds);
  int count = 0;
  for (const pollfd& q : p) {
    if (readfds && (q.revents & (POLLIN | POLLHUP | POLLERR)) && (q.events & POLLIN)) FD_SET(q.fd, readfds), ++count;
    if (writefds && (q.revents & (POLLOUT | POLLERR)) && (q.events & POLLOUT)) FD_SET(q.fd, writefds), ++count;
    if (exceptfds && (q.revents & POLLPRI) && (q.events & POLLPRI)) FD_SET(q.fd, exceptfds), ++count;
  }
  return count;
}

}  // extern "C"
