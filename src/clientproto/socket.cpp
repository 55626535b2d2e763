#include "clientproto/socket.hpp"

#include <sys/socket.h>
#include <sys/un.h>

#include <cstring>

namespace openib::proto {

Result<UniqueFd> connect_socket(const std::string& path) {
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  if (path.size() >= sizeof sa.sun_path) return err(ENAMETOOLONG, "socket path {} too long", path);
  std::memcpy(sa.sun_path, path.data(), path.size());
  UniqueFd s(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  if (!s) return sys_err("socket");
  if (::connect(s.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) < 0) return sys_err("connect to ibd at {}", path);
  return s;
}

Result<void> send_message(int sock, Header h, std::span<const std::byte> body,
                          std::span<const int> fds) {
  if (fds.size() > kMaxFds) return err(EINVAL, "{} fds, at most {}", fds.size(), kMaxFds);
  if (kHeaderSize + body.size() > kMaxMessage)
    return err(EMSGSIZE, "message of {} bytes exceeds {}", kHeaderSize + body.size(), kMaxMessage);
  h.nfds = static_cast<uint8_t>(fds.size());
  std::array<std::byte, kHeaderSize> head;
  encode_header(head, h);
  iovec iov[2] = {{head.data(), head.size()},
                  {const_cast<std::byte*>(body.data()), body.size()}};
  msghdr msg{};
  msg.msg_iov = iov;
  msg.msg_iovlen = body.empty() ? 1 : 2;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFds)];
  if (!fds.empty()) {
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
  }
  for (;;) {
    ssize_t n = ::sendmsg(sock, &msg, MSG_NOSIGNAL);
    if (n >= 0) return ok();
    if (errno == EINTR) continue;
    return sys_err("sendmsg {}", op_name(h.op));
  }
}

namespace {
constexpr size_t kScmMaxFd = 253;  // the kernel's SCM_MAX_FD: most fds one message carries
}

Result<Message> recv_message(int sock, bool nonblocking, std::vector<UniqueFd>* rejected) {
  Message m;
  m.body.resize(kMaxMessage);
  iovec iov{m.body.data(), m.body.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  static_assert(kMaxFds <= kScmMaxFd);
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kScmMaxFd)];
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  ssize_t n;
  for (;;) {
    n = ::recvmsg(sock, &msg, MSG_CMSG_CLOEXEC | (nonblocking ? MSG_DONTWAIT : 0));
    if (n >= 0 || errno != EINTR) break;
  }
  if (n < 0) return sys_err("recvmsg");
  auto fail = [&](Error e) -> Result<Message> {
    if (rejected)
      for (auto& f : m.fds) rejected->push_back(std::move(f));
    return e;
  };
  // Take ownership of every fd first, so that each error path closes them
  // (or hands them to `rejected`).
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      m.fds.emplace_back(fd);
    }
  }
  if (n == 0) return fail(err(ECONNRESET, "peer closed the connection"));
  if (msg.msg_flags & MSG_TRUNC) return fail(err(EPROTO, "message longer than {} bytes", kMaxMessage));
  if (msg.msg_flags & MSG_CTRUNC) return fail(err(EPROTO, "fds cut off (control data truncated)"));
  if (m.fds.size() > kMaxFds) return fail(err(EPROTO, "{} fds attached, at most {}", m.fds.size(), kMaxFds));
  auto h = decode_header(std::span(m.body.data(), static_cast<size_t>(n)));
  if (!h) return fail(h.take_error());
  m.header = *h;
  if (m.fds.size() != m.header.nfds)
    return fail(err(EPROTO, "{} fds attached, header says {}", m.fds.size(), m.header.nfds));
  m.body.resize(static_cast<size_t>(n));
  m.body.erase(m.body.begin(), m.body.begin() + kHeaderSize);
  return m;
}

}  // namespace openib::proto
