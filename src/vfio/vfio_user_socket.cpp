#include "vfio/vfio_user_socket.hpp"

#include <poll.h>
#include <sys/socket.h>

#include <chrono>
#include <cstring>

namespace openib::vfio::user {
namespace {

using Clock = std::chrono::steady_clock;

class Deadline {
 public:
  explicit Deadline(int timeout_ms)
      : forever_(timeout_ms < 0), end_(Clock::now() + std::chrono::milliseconds(timeout_ms)) {}
  // Milliseconds left for poll(): -1 forever, 0 when expired.
  int left() const {
    if (forever_) return -1;
    auto ms = std::chrono::ceil<std::chrono::milliseconds>(end_ - Clock::now()).count();
    return ms > 0 ? static_cast<int>(ms) : 0;
  }

 private:
  bool forever_;
  Clock::time_point end_;
};

bool peer_gone(int e) { return e == EPIPE || e == ECONNRESET || e == ENOTCONN; }

// Waits for `events`; ETIMEDOUT when the deadline passes.
Result<void> wait_for(int sock, short events, const Deadline& d) {
  for (;;) {
    pollfd p{sock, events, 0};
    int left = d.left();
    int n = ::poll(&p, 1, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      return sys_err("vfio-user: poll");
    }
    if (n == 0) return err(ETIMEDOUT, "vfio-user: no message within the reply timeout");
    if (p.revents & POLLNVAL) return err(EBADF, "vfio-user: socket closed");
    return ok();  // readable/writable, or HUP/ERR which the next call reports
  }
}

}  // namespace

Result<void> send_message(int sock, ByteSpan msg, std::span<const int> fds, int timeout_ms) {
  if (fds.size() > kMaxFds) return err(EINVAL, "vfio-user: {} fds in one message", fds.size());
  Deadline d(timeout_ms);
  alignas(cmsghdr) char cbuf[CMSG_SPACE(sizeof(int) * kMaxFds)];
  size_t sent = 0;
  bool fds_sent = fds.empty();
  while (sent < msg.size()) {
    iovec iov{const_cast<std::byte*>(msg.data() + sent), msg.size() - sent};
    msghdr mh{};
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    if (!fds_sent) {  // the fds ride with the first byte
      std::memset(cbuf, 0, sizeof cbuf);
      mh.msg_control = cbuf;
      mh.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
      cmsghdr* c = CMSG_FIRSTHDR(&mh);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
      std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
    }
    ssize_t n = ::sendmsg(sock, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        OPENIB_TRY(wait_for(sock, POLLOUT, d));
        continue;
      }
      if (peer_gone(errno)) return sys_err("vfio-user: peer closed the socket");
      return sys_err("vfio-user: sendmsg");
    }
    fds_sent = true;
    sent += static_cast<size_t>(n);
  }
  return ok();
}

Result<Received> recv_message(int sock, size_t max_size, int timeout_ms) {
  Deadline d(timeout_ms);
  Received r;
  r.bytes.resize(kHeaderSize);
  size_t want = kHeaderSize, got = 0;
  alignas(cmsghdr) char cbuf[CMSG_SPACE(sizeof(int) * kMaxFds)];
  while (got < want) {
    iovec iov{r.bytes.data() + got, want - got};
    msghdr mh{};
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    mh.msg_control = cbuf;
    mh.msg_controllen = sizeof cbuf;
    ssize_t n = ::recvmsg(sock, &mh, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        OPENIB_TRY(wait_for(sock, POLLIN, d));
        continue;
      }
      if (peer_gone(errno)) return err(ENODEV, "vfio-user: peer reset the connection");
      return sys_err("vfio-user: recvmsg");
    }
    // Take ownership of every fd first, so each one is closed on any error.
    for (cmsghdr* c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      size_t nfd = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < nfd; ++i) {
        int fd;
        std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
        r.fds.emplace_back(fd);
      }
    }
    if (mh.msg_flags & MSG_CTRUNC)
      return err(EPROTO, "vfio-user: more than {} fds with one message", kMaxFds);
    if (n == 0) return err(ENODEV, "vfio-user: peer closed the socket");
    got += static_cast<size_t>(n);
    if (got == kHeaderSize && want == kHeaderSize) {
      OPENIB_TRY_ASSIGN(Header h, decode_header(r.bytes, max_size));
      want = h.size;
      r.bytes.resize(want);
    }
  }
  if (r.fds.size() > kMaxFds)
    return err(EPROTO, "vfio-user: {} fds with one message", r.fds.size());
  return r;
}

}  // namespace openib::vfio::user
