// The socket calls of <rdma/rsocket.h>: rsocket,
// rbind, rlisten, raccept, rconnect, rshutdown, rclose, the names, the
// options and rfcntl (rdma-core's semantics, docs/library.md "rsockets").
// Defaults from /etc/rdma/rsocket as rdma-core reads them (mem_default,
// wmem_default, sqsize_default, rqsize_default, inline_default,
// iomap_size).
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstring>

#include <rdma/rsocket.h>

#include "abi/rdmacm/rsocket/datagram.hpp"
#include "abi/rdmacm/rsocket/socket.hpp"

using namespace openib::rsocket;

namespace {

struct Defaults {
  uint32_t rbuf = 1u << 17, sbuf = 1u << 17;
  uint16_t sq = 384, rq = 384, inl = 64;
  uint32_t iomap = 0;
};

const Defaults& defaults() {
  static const Defaults defs = [] {
    Defaults d;
    auto read = [](const char* name, unsigned& v) {
      std::string path = std::string("/etc/rdma/rsocket/") + name;
      if (FILE* f = std::fopen(path.c_str(), "r")) {
        unsigned x;
        if (std::fscanf(f, "%u", &x) == 1) v = x;
        std::fclose(f);
      }
    };
    unsigned v;
    v = d.rbuf, read("mem_default", v), d.rbuf = std::max(v, 2 * kSendLowWater) & ~1u;  // two even halves
    v = d.sbuf, read("wmem_default", v), d.sbuf = v < kSendLowWater ? 4096 : v;
    v = d.sq, read("sqsize_default", v), d.sq = uint16_t(std::min(v, 0xFFFEu));
    v = d.rq, read("rqsize_default", v), d.rq = uint16_t(std::min(v, 0xFFFEu));
    v = d.inl, read("inline_default", v), d.inl = uint16_t(std::min(v, 0xFFFFu));
    v = d.iomap, read("iomap_size", v), d.iomap = iomap_unscale(iomap_scale(v));
    return d;
  }();
  return defs;
}

int fail(int code) {
  errno = code;
  return -1;
}

void close_socket(const SocketPtr& s);

// rgetpeername/rgetsockname: the id's address, truncated to the caller's
// length, *addrlen the address's own.
int copy_name(int fd, sockaddr* addr, socklen_t* addrlen, bool peer) {
  SocketPtr s = find(fd);
  if (!s) return -1;
  if (!addr || !addrlen) return fail(EFAULT);
  std::lock_guard lk(s->mu);
  if (s->dg) return s->closed ? fail(EBADF) : ds_name(*s, addr, addrlen, peer);
  if (!s->id) return fail(EBADF);
  if (peer && s->state < State::kConnected && s->state != State::kResolvingRoute && s->state != State::kConnecting)
    return fail(ENOTCONN);
  const sockaddr* a = peer ? rdma_get_peer_addr(s->id) : rdma_get_local_addr(s->id);
  const socklen_t n = a->sa_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
  std::memcpy(addr, a, std::min(n, *addrlen));
  *addrlen = n;
  return 0;
}

}  // namespace

extern "C" {

int rsocket(int domain, int type, int protocol) {
  const int kind = type & ~(SOCK_NONBLOCK | SOCK_CLOEXEC);
  if (domain != AF_INET && domain != AF_INET6) return fail(ENOTSUP);  // AF_IB: not implemented (docs)
  const bool stream = kind == SOCK_STREAM && (protocol == 0 || protocol == IPPROTO_TCP);
  const bool dgram = kind == SOCK_DGRAM && (protocol == 0 || protocol == IPPROTO_UDP);
  if (!stream && !dgram) return fail(ENOTSUP);
  SocketPtr s = make_socket(domain, nullptr);
  if (!s) return -1;
  const Defaults& d = defaults();
  s->rbuf_size = d.rbuf;
  s->sbuf_size = d.sbuf;
  s->sq_size = d.sq;
  s->rq_size = d.rq;
  s->sq_inline = d.inl;
  s->target_iomap_size = d.iomap;
  if (type & SOCK_NONBLOCK) s->file_flags |= O_NONBLOCK;
  if (dgram) {
    if (int e = ds_open(*s, domain)) return fail(e);
    add_socket(s);
    watch_udp(s);
    return s->fd;
  }
  auto ch = std::make_shared<ChannelRef>();
  ch->ch = rdma_create_event_channel();
  if (!ch->ch) return -1;
  ::fcntl(ch->ch->fd, F_SETFL, ::fcntl(ch->ch->fd, F_GETFL) | O_NONBLOCK);
  if (rdma_create_id(ch->ch, &s->id, s.get(), RDMA_PS_TCP)) return -1;
  s->id->route.addr.src_addr.sa_family = sa_family_t(domain);
  s->channel = ch;
  add_socket(s);
  watch_channel(ch);
  return s->fd;
}

int rbind(int fd, const sockaddr* addr, socklen_t len) {
  SocketPtr s = find(fd);
  if (!s) return -1;
  std::lock_guard lk(s->mu);
  if (s->dg) return ds_bind(*s, addr, len);
  if (s->state != State::kInit) return fail(EINVAL);
  if (rdma_bind_addr(s->id, const_cast<sockaddr*>(addr))) return -1;
  s->state = State::kBound;
  return 0;
}

int rlisten(int fd, int backlog) {
  SocketPtr s = find(fd);
  if (!s) return -1;
  std::lock_guard lk(s->mu);
  if (s->dg) return fail(EOPNOTSUPP);
  if (s->state == State::kListening) return 0;
  if (s->state != State::kInit && s->state != State::kBound) return fail(EINVAL);
  if (rdma_listen(s->id, backlog)) return -1;
  s->backlog = backlog > 0 ? backlog : 128;
  s->state = State::kListening;
  return 0;
}

int raccept(int fd, sockaddr* addr, socklen_t* addrlen) {
  const int saved = errno;
  SocketPtr l = find(fd);
  if (!l) return -1;
  SocketPtr s;
  {
    std::unique_lock lk(l->mu);
    if (l->dg) return fail(EOPNOTSUPP);
    if (l->state != State::kListening) return fail(EINVAL);
    while (l->accept_queue.empty()) {
      if (l->nonblocking(0)) {
        idle_spin();
        return fail(EWOULDBLOCK);
      }
      if (wait(*l, lk) < 0) return -1;
      if (l->state != State::kListening) return fail(EINVAL);
    }
    s = l->accept_queue.front();
    l->accept_queue.pop_front();
  }
  if (addr && addrlen) rgetpeername(s->fd, addr, addrlen);
  errno = saved;
  return s->fd;
}

int rconnect(int fd, const sockaddr* addr, socklen_t len) {
  const int saved = errno;
  SocketPtr s = find(fd);
  if (!s) return -1;
  std::unique_lock lk(s->mu);
  if (s->dg) {
    if (ds_connect(*s, addr, len)) return -1;
    errno = saved;
    return 0;
  }
  switch (s->state) {
    case State::kInit:
    case State::kBound: break;
    case State::kResolvingAddr:
    case State::kResolvingRoute:
    case State::kConnecting: return fail(EALREADY);
    case State::kConnected:
    case State::kDisconnected: return fail(EISCONN);
    default: return fail(EINVAL);
  }
  if (!addr || len < sizeof(sockaddr_in)) return fail(EINVAL);
  const State before = s->state;
  sockaddr* src = before == State::kBound ? rdma_get_local_addr(s->id) : nullptr;
  s->state = State::kResolvingAddr;
  s->retries = 0;
  if (rdma_resolve_addr(s->id, src, const_cast<sockaddr*>(addr), 1000)) {
    s->state = before;
    return -1;
  }
  if (s->nonblocking(0)) return fail(EINPROGRESS);
  while (s->state >= State::kResolvingAddr && s->state <= State::kConnecting)
    if (wait(*s, lk) < 0) return -1;  // EINTR: the connection goes on, as a socket's does
  if (s->state == State::kConnected) {
    errno = saved;
    return 0;
  }
  const int e = s->err ? s->err : ECONNREFUSED;
  s->err = 0;
  return fail(e);
}

int rshutdown(int fd, int how) {
  SocketPtr s = find(fd);
  if (!s) return -1;
  std::unique_lock lk(s->mu);
  if (s->dg) return ds_shutdown(*s, how);
  if (s->state != State::kConnected) return s->state == State::kDisconnected || s->state == State::kError ? 0 : fail(ENOTCONN);
  process(*s);
  Ctrl ctrl;
  if (how == SHUT_RDWR) {
    s->readable = false;
    s->writable = false;
    ctrl = kCtrlDisconnect;
  } else if (how == SHUT_WR) {
    s->writable = false;
    ctrl = s->readable ? kCtrlShutdown : kCtrlDisconnect;
  } else if (how == SHUT_RD) {
    s->readable = false;
    if (s->writable) return 0;
    ctrl = kCtrlDisconnect;
  } else {
    return fail(EINVAL);
  }
  // A control slot, the message, then every send complete (10 s at most:
  // a dead peer's QP fails the sends sooner).
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  auto done = [&] {
    return s->closed || !s->qp || s->state == State::kError || std::chrono::steady_clock::now() > until;
  };
  while (s->ctrl_seqno == s->ctrl_max_seqno && !done()) {
    process(*s);
    if (s->ctrl_seqno == s->ctrl_max_seqno) wait(*s, lk, 100);
  }
  if (s->state == State::kConnected && s->ctrl_seqno != s->ctrl_max_seqno) send_ctrl(*s, ctrl);
  while (!done() && (s->sqe_avail != uint32_t(s->sq_size - kCtrlSlots) ||
                     s->ctrl_max_seqno - s->ctrl_seqno != kCtrlSlots)) {
    if (!process(*s)) wait(*s, lk, 100);
  }
  if (ctrl == kCtrlDisconnect && s->state == State::kConnected) s->state = State::kDisconnected;
  if (s->state == State::kDisconnected && s->qp) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_ERR;
    ibv_modify_qp(s->qp, &a, IBV_QP_STATE);
  }
  signal(*s);
  return 0;
}

int rclose(int fd) {
  const int saved = errno;
  SocketPtr s = find(fd);
  if (!s) return -1;
  bool connected;
  {
    std::lock_guard lk(s->mu);
    connected = s->state == State::kConnected && !s->dg;
  }
  if (connected) rshutdown(fd, SHUT_RDWR);
  close_socket(s);
  errno = saved;
  return 0;
}

int rgetpeername(int fd, sockaddr* addr, socklen_t* addrlen) {
  return copy_name(fd, addr, addrlen, true);
}

int rgetsockname(int fd, sockaddr* addr, socklen_t* addrlen) {
  return copy_name(fd, addr, addrlen, false);
}

int rfcntl(int fd, int cmd, ...) {
  SocketPtr s = find(fd);
  if (!s) return -1;
  va_list ap;
  va_start(ap, cmd);
  const long arg = (cmd == F_SETFL || cmd == F_SETFD) ? va_arg(ap, long) : 0;
  va_end(ap);
  std::lock_guard lk(s->mu);
  switch (cmd) {
    case F_GETFL: return s->file_flags | O_RDWR;
    case F_SETFL: s->file_flags = int(arg) & ~O_ACCMODE; return 0;
    case F_GETFD: return ::fcntl(s->fd, F_GETFD);
    case F_SETFD: return ::fcntl(s->fd, F_SETFD, int(arg));
    default: return fail(ENOTSUP);
  }
}

}  // extern "C"

namespace {

void close_socket(const SocketPtr& s) {
  auto svc = service_lock();  // no CM event for it is being handled now
  std::vector<SocketPtr> children;
  {
    std::lock_guard lk(s->mu);
    children.swap(s->accepting);
    for (auto& c : s->accept_queue) children.push_back(c);
    s->accept_queue.clear();
    s->state = State::kDisconnected;
    s->readable = s->writable = false;
  }
  for (auto& c : children) {  // connections the application never took
    std::lock_guard lk(c->mu);
    destroy_endpoint(*c);
    if (c->id) rdma_destroy_id(c->id);
    c->id = nullptr;
    forget(c->fd);
  }
  std::lock_guard lk(s->mu);
  s->closed = true;
  if (s->dg) unwatch_udp_locked(*s);  // before its UDP socket's number can be reused
  s->dg.reset();  // its QPs, address handles and UDP socket
  destroy_endpoint(*s);
  if (s->id) rdma_destroy_id(s->id);
  s->id = nullptr;
  s->channel.reset();  // the last socket on it: the service drops it
  forget(s->fd);
  signal(*s);
}

}  // namespace
