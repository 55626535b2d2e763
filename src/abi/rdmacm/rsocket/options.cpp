// rsetsockopt and rgetsockopt (rdma-core's set, docs/library.md
// "rsockets"): buffer and queue sizes take effect on the connection made
// after them (on a listener: on the connections it accepts); the TCP
// options a stream application sets are accepted and reported back.
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include <rdma/rsocket.h>

#include "abi/rdmacm/rsocket/datagram.hpp"
#include "abi/rdmacm/rsocket/socket.hpp"

using namespace openib::rsocket;

namespace {

int fail(int code) {
  errno = code;
  return -1;
}

bool before_connection(const Socket& s) {
  return s.state == State::kInit || s.state == State::kBound || s.state == State::kListening;
}

int put_int(void* optval, socklen_t* optlen, int v) {
  if (!optval || !optlen || *optlen < socklen_t(sizeof(int))) return fail(EINVAL);
  std::memcpy(optval, &v, sizeof v);
  *optlen = sizeof v;
  return 0;
}

}  // namespace

extern "C" {

int rsetsockopt(int fd, int level, int optname, const void* optval, socklen_t optlen) {
  SocketPtr s = find(fd);
  if (!s) return -1;
  if (!optval || optlen < socklen_t(sizeof(int))) return fail(EINVAL);
  int v;
  std::memcpy(&v, optval, sizeof v);
  std::lock_guard lk(s->mu);
  switch (level) {
    case SOL_SOCKET:
      switch (optname) {
        case SO_REUSEADDR:
          if (s->dg && ::setsockopt(s->dg->udp, level, optname, &v, sizeof v)) return -1;
          if (s->id) rdma_set_option(s->id, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &v, sizeof v);
          break;  // (refused by the CM where it does not apply: as rdma-core, not an error)
        case SO_KEEPALIVE:
        case SO_OOBINLINE: break;
        case SO_LINGER:
          if (optlen < socklen_t(sizeof(linger))) return fail(EINVAL);
          v = static_cast<const linger*>(optval)->l_onoff;
          break;
        case SO_SNDBUF:
          if (s->has_endpoint()) return 0;  // the ring exists: no effect, as rdma-core
          s->sbuf_size = std::max<uint32_t>(uint32_t(std::max(v, 0)) * 2, kSendLowWater * 2);
          break;
        case SO_RCVBUF:
          if (s->has_endpoint()) return 0;
          s->rbuf_size = std::max<uint32_t>(uint32_t(std::max(v, 0)) * 2, kSendLowWater * 2) & ~1u;
          break;
        default: return fail(ENOTSUP);
      }
      if (optname != SO_SNDBUF && optname != SO_RCVBUF) s->so_opts = v ? s->so_opts | (1u << optname) : s->so_opts & ~(1u << optname);
      return 0;
    case IPPROTO_TCP:
      switch (optname) {
        case TCP_NODELAY:  // rsockets never delay a send
        case TCP_MAXSEG:
        case TCP_KEEPCNT:
        case TCP_KEEPINTVL: break;
        case TCP_KEEPIDLE:
          if (v <= 0) return fail(EINVAL);
          s->keepalive_time = v;
          break;
        default: return fail(ENOTSUP);
      }
      s->tcp_opts = v ? s->tcp_opts | (1u << optname) : s->tcp_opts & ~(1u << optname);
      return 0;
    case IPPROTO_IPV6:
      if (optname != IPV6_V6ONLY) return fail(ENOTSUP);
      if (s->dg && ::setsockopt(s->dg->udp, level, optname, &v, sizeof v)) return -1;
      if (s->id) rdma_set_option(s->id, RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY, &v, sizeof v);
      s->ipv6_opts = v ? s->ipv6_opts | (1u << optname) : s->ipv6_opts & ~(1u << optname);
      return 0;
    case SOL_RDMA:
      if (!before_connection(*s) || s->has_endpoint()) return fail(EINVAL);
      switch (optname) {
        case RDMA_SQSIZE: s->sq_size = uint16_t(std::min<uint32_t>(uint32_t(std::max(v, 0)), kMaxQueue)); return 0;
        case RDMA_RQSIZE: s->rq_size = uint16_t(std::min<uint32_t>(uint32_t(std::max(v, 0)), kMaxQueue)); return 0;
        case RDMA_INLINE: s->sq_inline = uint16_t(std::min<uint32_t>(uint32_t(std::max(v, 0)), kMaxQueue)); return 0;
        case RDMA_IOMAPSIZE: s->target_iomap_size = iomap_unscale(iomap_scale(uint32_t(std::max(v, 0)))); return 0;
        default: return fail(ENOTSUP);  // RDMA_ROUTE: paths come from the SA (docs)
      }
    default: return fail(ENOTSUP);
  }
}

int rgetsockopt(int fd, int level, int optname, void* optval, socklen_t* optlen) {
  SocketPtr s = find(fd);
  if (!s) return -1;
  std::lock_guard lk(s->mu);
  switch (level) {
    case SOL_SOCKET:
      switch (optname) {
        case SO_REUSEADDR:
        case SO_KEEPALIVE:
        case SO_OOBINLINE: return put_int(optval, optlen, bool(s->so_opts & (1u << optname)));
        case SO_LINGER: {
          if (!optval || !optlen || *optlen < socklen_t(sizeof(linger))) return fail(EINVAL);
          linger l{bool(s->so_opts & (1u << SO_LINGER)), 0};
          std::memcpy(optval, &l, sizeof l);
          *optlen = sizeof l;
          return 0;
        }
        case SO_SNDBUF: return put_int(optval, optlen, int(s->sbuf_size));
        case SO_RCVBUF: return put_int(optval, optlen, int(s->rbuf_size));
        case SO_ERROR: {
          const int e = s->err;
          s->err = 0;
          return put_int(optval, optlen, e);
        }
        case SO_TYPE: return put_int(optval, optlen, s->dg ? SOCK_DGRAM : SOCK_STREAM);
        default: return fail(ENOTSUP);
      }
    case IPPROTO_TCP:
      switch (optname) {
        case TCP_NODELAY: return put_int(optval, optlen, bool(s->tcp_opts & (1u << TCP_NODELAY)));
        case TCP_MAXSEG: {
          if (!s->id) return fail(EBADF);
          const rdma_route& r = s->id->route;
          return put_int(optval, optlen, r.num_paths && r.path_rec ? 1 << (7 + r.path_rec->mtu) : 2048);
        }
        case TCP_KEEPIDLE: return put_int(optval, optlen, s->keepalive_time);
        case TCP_KEEPCNT:
        case TCP_KEEPINTVL: return put_int(optval, optlen, 1);
        default: return fail(ENOTSUP);
      }
    case IPPROTO_IPV6:
      if (optname != IPV6_V6ONLY) return fail(ENOTSUP);
      return put_int(optval, optlen, bool(s->ipv6_opts & (1u << IPV6_V6ONLY)));
    case SOL_RDMA:
      switch (optname) {
        case RDMA_SQSIZE: return put_int(optval, optlen, s->sq_size);
        case RDMA_RQSIZE: return put_int(optval, optlen, s->rq_size);
        case RDMA_INLINE: return put_int(optval, optlen, s->sq_inline);
        case RDMA_IOMAPSIZE: return put_int(optval, optlen, int(s->target_iomap_size));
        default: return fail(ENOTSUP);
      }
    default: return fail(ENOTSUP);
  }
}

}  // extern "C"
