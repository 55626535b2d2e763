// See event_socket.hpp.
#include "lib/event_socket.hpp"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>

namespace openib::lib {

Result<size_t> recv_event(int fd, std::span<std::byte> buf, int timeout_ms, const char* what) {
  pollfd p{fd, POLLIN, 0};
  int n;
  do n = ::poll(&p, 1, timeout_ms);
  while (n < 0 && errno == EINTR);
  if (n < 0) return sys_err("poll on the {} socket", what);
  if (n == 0) return err(ETIMEDOUT, "no {} event within {} ms", what, timeout_ms);
  ssize_t r;
  do r = ::recv(fd, buf.data(), buf.size(), MSG_DONTWAIT);
  while (r < 0 && errno == EINTR);
  if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return err(ETIMEDOUT, "no {} event", what);
  if (r < 0) return sys_err("recv on the {} socket", what);
  if (r == 0) return err(ECONNRESET, "ibd closed the {} socket", what);
  return size_t(r);
}

Result<uint8_t> put_private(proto::CmPrivate& out, std::span<const uint8_t> in, size_t max, const char* msg) {
  max = std::min(max, out.size());
  if (in.size() > max) return err(EINVAL, "{} carries at most {} bytes of private data, not {}", msg, max, in.size());
  std::copy(in.begin(), in.end(), out.begin());
  return static_cast<uint8_t>(in.size());
}

}  // namespace openib::lib
