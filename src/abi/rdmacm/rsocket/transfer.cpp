// The data path of a stream rsocket (wire.hpp): sends as RDMA WRITE WITH
// IMM into the peer's advertised receive ring, receives in order from our
// ring, credits and ring space returned by SGL messages. Every call polls
// the CQ in the caller's thread; none makes a system call unless it waits.
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <rdma/rsocket.h>

#include "abi/rdmacm/rsocket/socket.hpp"

namespace openib::rsocket {

namespace {

Sge swapped(Sge s) { return {__builtin_bswap64(s.addr), __builtin_bswap32(s.key), __builtin_bswap32(s.length)}; }

// Returns our receive ring's free half to the peer and/or grants it
// credits, when either is due (rdma-core's rule: half the ring read, or
// half the receive queue's messages).
void update_credits(Socket& s) {
  if (s.state != State::kConnected || s.ctrl_seqno == s.ctrl_max_seqno) return;
  const uint32_t half = s.rbuf_size / 2;
  if (s.rbuf_avail < half && int16_t(uint16_t(s.rseq_no - s.rseq_comp)) < 0) return;
  const uint32_t credit = uint16_t(s.rseq_no + s.rq_size);
  s.rseq_comp = uint16_t(s.rseq_no + s.rq_size / 2);
  if (s.rbuf_avail >= half) {
    Sge sge{uint64_t(uintptr_t(s.rbuf + s.rbuf_free_offset)), s.rmr->rkey, half};
    if (s.peer_swapped) sge = swapped(sge);
    const uint64_t raddr = s.remote_sgl.addr + uint64_t(s.remote_sge) * sizeof(Sge);
    if (post_message(s, kWrCtrl, &sge, sizeof sge, raddr, s.remote_sgl.key, true, imm(kOpSgl, credit))) return;
    s.rbuf_avail -= half;
    s.rbuf_free_offset = (s.rbuf_free_offset + half) % s.rbuf_size;
    s.remote_sge = (s.remote_sge + 1) % s.remote_sgl.length;
  } else {
    post_message(s, kWrCtrl, nullptr, 0, 0, 0, true, imm(kOpSgl, credit));
  }
}

void on_receive(Socket& s, uint32_t value, uint32_t byte_len) {
  const uint32_t arg = imm_arg(value);
  switch (imm_op(value)) {
    case kOpData:
      // The peer may not send more than our ring and its credits allow:
      // a peer that does is dropped (counted as an error), never read past.
      if (arg == 0 || arg > kMaxTransfer || s.rmsg_bytes + arg > s.rbuf_size || s.rmsg.size() > s.rq_size)
        return fail_socket(s, EPROTO);
      s.rmsg.push_back(arg);
      s.rmsg_bytes += arg;
      return;
    case kOpSgl:
      s.sseq_comp = uint16_t(arg);
      if (byte_len == sizeof(Sge)) {  // with a ring half: it is in our target SGL now
        Sge e;
        std::memcpy(&e, &s.target_sgl()[s.next_sgl], sizeof e);
        s.send_target[s.next_sgl] = e;  // (the peer wrote it in our byte order)
        s.next_sgl = (s.next_sgl + 1) % kSglEntries;
      }
      return;
    case kOpIomapSgl: return;  // the entry is in our target iomap
    case kOpCtrl:
      if (arg == kCtrlDisconnect) {
        s.readable = s.writable = false;
        s.state = State::kDisconnected;
      } else if (arg == kCtrlShutdown) {
        s.readable = false;
        if (!s.writable) s.state = State::kDisconnected;
      }
      return;
    default: return;  // reserved ops: ignored, as rdma-core does
  }
}

void on_send(Socket& s, uint64_t wr_id) {
  const uint64_t kind = wr_id & (0xFFull << 56);
  const auto len = uint32_t(wr_id);
  if (kind == kWrCtrl || kind == kWrDisconnect) {
    ++s.ctrl_max_seqno;
    if (kind == kWrDisconnect) {
      s.readable = s.writable = false;
      if (s.state == State::kConnected) s.state = State::kDisconnected;
    }
  } else {
    ++s.sqe_avail;
    s.sbuf_avail += len;
  }
}

}  // namespace

void fail_socket(Socket& s, int code) {
  if (s.state == State::kConnected || s.state == State::kDisconnected) {
    s.state = State::kError;
    s.err = code;
    s.readable = s.writable = false;
    if (s.qp) {
      ibv_qp_attr a{};
      a.qp_state = IBV_QPS_ERR;
      ibv_modify_qp(s.qp, &a, IBV_QP_STATE);
    }
  }
}

bool process(Socket& s) {
  if (s.dg) return ds_process(s);
  // Not before the connection is made: the peer's first messages (its
  // second ring half) wait in the CQ until its ConnData is ours.
  if (!s.cq || s.state < State::kConnected || s.state == State::kConnectError) return false;
  bool changed = false;
  ibv_wc wc[16];
  int n;
  uint32_t reposts = 0;
  while ((n = ibv_poll_cq(s.cq, 16, wc)) > 0) {
    changed = true;
    for (int k = 0; k < n; ++k) {
      const ibv_wc& w = wc[k];
      if (w.wr_id & kWrRecv) {
        if (w.status != IBV_WC_SUCCESS) {
          if (s.state == State::kConnected) fail_socket(s, EIO);
          continue;
        }
        ++reposts;
        if (w.opcode == IBV_WC_RECV_RDMA_WITH_IMM || (w.wc_flags & IBV_WC_WITH_IMM)) on_receive(s, be32toh(w.imm_data), w.byte_len);
      } else {
        if (w.status != IBV_WC_SUCCESS && s.state == State::kConnected)
          fail_socket(s, w.status == IBV_WC_WR_FLUSH_ERR ? ECONNRESET : EIO);
        on_send(s, w.wr_id);
      }
    }
  }
  // Every receive consumed goes back (one that cannot now, next time).
  s.recv_missing += reposts;
  if (s.qp && s.state == State::kConnected)
    for (; s.recv_missing > 0; --s.recv_missing) {
      ibv_recv_wr wr{}, *bad = nullptr;
      wr.wr_id = kWrRecv;
      if (ibv_post_recv(s.qp, &wr, &bad)) break;
    }
  update_credits(s);
  if (changed && s.waiters > 0) signal(s);
  return changed;
}

bool arm(Socket& s) {
  if (s.dg) return ds_arm(s);
  if (!s.cq) return false;
  ibv_cq* ev_cq;
  void* ev_ctx;
  while (ibv_get_cq_event(s.cch, &ev_cq, &ev_ctx) == 0) {
    ibv_ack_cq_events(ev_cq, 1);
    s.armed = false;
  }
  if (s.armed) return false;
  if (ibv_req_notify_cq(s.cq, 0)) return false;
  s.armed = true;
  return process(s);  // a completion before the arming raised no event
}

bool can_send(Socket& s) {
  return s.sqe_avail > 0 && s.sbuf_avail >= kSendLowWater && s.sseq_no != s.sseq_comp &&
         s.send_target[s.target_sge].length != 0;
}

int post_message(Socket& s, uint64_t wr_kind, const void* data, uint32_t len, uint64_t raddr, uint32_t rkey,
                 bool with_imm, uint32_t imm_value) {
  ibv_sge sge[2];
  ibv_send_wr wr{}, *bad = nullptr;
  wr.wr_id = wr_kind | len;
  wr.opcode = with_imm ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE;
  wr.imm_data = htobe32(imm_value);
  wr.wr.rdma.remote_addr = raddr;
  wr.wr.rdma.rkey = rkey;
  wr.sg_list = sge;
  const bool ctrl = wr_kind == kWrCtrl || wr_kind == kWrDisconnect;
  if (len == 0) {
    wr.num_sge = 0;
  } else if (len <= s.sq_inline) {
    sge[0] = {uint64_t(uintptr_t(data)), len, 0};
    wr.num_sge = 1;
    wr.send_flags = IBV_SEND_INLINE;
  } else if (ctrl) {
    // A control slot after the send ring (len <= 16).
    uint8_t* slot = s.sbuf + s.sbuf_size + (s.ctrl_seqno % kCtrlSlots) * sizeof(Sge);
    std::memcpy(slot, data, len);
    sge[0] = {uint64_t(uintptr_t(slot)), len, s.smr->lkey};
    wr.num_sge = 1;
  } else {
    // Staged in the send ring, in two pieces where it wraps.
    const uint32_t first = std::min(len, s.sbuf_size - s.sbuf_head);
    std::memcpy(s.sbuf + s.sbuf_head, data, first);
    sge[0] = {uint64_t(uintptr_t(s.sbuf + s.sbuf_head)), first, s.smr->lkey};
    wr.num_sge = 1;
    if (first < len) {
      std::memcpy(s.sbuf, static_cast<const uint8_t*>(data) + first, len - first);
      sge[1] = {uint64_t(uintptr_t(s.sbuf)), len - first, s.smr->lkey};
      wr.num_sge = 2;
    }
    s.sbuf_head = (s.sbuf_head + len) % s.sbuf_size;
  }
  if (ibv_post_send(s.qp, &wr, &bad)) return errno ? errno : EIO;
  if (ctrl) {
    ++s.ctrl_seqno;
  } else {
    --s.sqe_avail;
    s.sbuf_avail -= len;
  }
  return 0;
}

int send_ctrl(Socket& s, Ctrl c) {
  return post_message(s, c == kCtrlShutdown ? kWrCtrl : kWrDisconnect, nullptr, 0, 0, 0, true, imm(kOpCtrl, c));
}

// Sends what it can of len bytes; blocks (unless non-blocking) until the
// first byte can go, then until all have gone. Bytes sent, or -1 with errno.
ssize_t send_bytes(Socket& s, std::unique_lock<std::mutex>& lk, const uint8_t* buf, size_t len, int flags) {
  if (s.closed) {
    errno = EBADF;
    return -1;
  }
  if (s.state < State::kConnected) {
    errno = (s.state >= State::kResolvingAddr && s.state <= State::kAccepting) ? EAGAIN : ENOTCONN;
    return -1;
  }
  if (int e = flush_iomaps(s)) {
    errno = e;
    return -1;
  }
  size_t sent = 0;
  uint32_t olen = kFirstTransfer;
  while (sent < len) {
    if (!s.writable || s.state != State::kConnected) {
      if (sent) break;
      errno = s.state == State::kError ? (s.err ? s.err : EIO) : (s.established ? EPIPE : ENOTCONN);
      if (errno == EPROTO || errno == EIO) errno = ECONNRESET;
      return -1;
    }
    if (!can_send(s)) {
      process(s);
      if (!can_send(s)) {
        if (s.nonblocking(flags)) {
          if (sent) break;
          idle_spin();
          errno = EWOULDBLOCK;
          return -1;
        }
        if (s.writable && s.state == State::kConnected && wait(s, lk) < 0 && !sent) return -1;
        continue;
      }
    }
    Sge& t = s.send_target[s.target_sge];
    uint32_t xfer = uint32_t(std::min<size_t>(len - sent, olen));
    xfer = std::min({xfer, s.sbuf_avail, t.length, kMaxTransfer});
    if (olen < kMaxTransfer) olen <<= 1;
    if (int e = post_message(s, kWrData, buf + sent, xfer, t.addr, t.key, true, imm(kOpData, xfer))) {
      if (sent) break;
      errno = e;
      return -1;
    }
    t.addr += xfer;
    t.length -= xfer;
    if (t.length == 0) s.target_sge = (s.target_sge + 1) % kSglEntries;
    ++s.sseq_no;
    sent += xfer;
  }
  return ssize_t(sent);
}

// Copies up to len queued bytes (all of them with MSG_WAITALL), waiting
// for the first unless non-blocking. 0 at the end of the stream.
ssize_t recv_bytes(Socket& s, std::unique_lock<std::mutex>& lk, uint8_t* buf, size_t len, int flags) {
  if (s.closed) {
    errno = EBADF;
    return -1;
  }
  if (s.state == State::kConnectError) {
    errno = s.err ? s.err : ECONNREFUSED;
    return -1;
  }
  if (s.state < State::kConnected) {
    errno = (s.state >= State::kResolvingAddr && s.state <= State::kAccepting) ? EAGAIN : ENOTCONN;
    return -1;
  }
  const bool peek = flags & MSG_PEEK;
  size_t got = 0;
  for (;;) {
    if (s.closed) {
      if (got) return ssize_t(got);
      errno = EBADF;
      return -1;
    }
    process(s);
    uint32_t off = s.rbuf_offset;
    for (size_t k = 0; k < s.rmsg.size() && got < len;) {
      uint32_t& m = s.rmsg[k];
      const auto n = uint32_t(std::min<size_t>(m, len - got));
      const uint32_t first = std::min(n, s.rbuf_size - off);
      std::memcpy(buf + got, s.rbuf + off, first);
      if (first < n) std::memcpy(buf + got + first, s.rbuf, n - first);
      off = (off + n) % s.rbuf_size;
      got += n;
      if (peek) {
        if (n < m) break;
        ++k;
        continue;
      }
      m -= n;
      s.rmsg_bytes -= n;
      s.rbuf_offset = off;
      s.rbuf_avail += n;
      if (m == 0) {
        s.rmsg.pop_front();
        ++s.rseq_no;
      }
    }
    if (got && !peek) update_credits(s);
    if (got == len || (got && !(flags & MSG_WAITALL)) || (peek && got)) return ssize_t(got);
    if (s.state == State::kError && !got) {  // reset, not ended: -1 once the data before is read
      errno = ECONNRESET;
      return -1;
    }
    if (!s.readable || s.state != State::kConnected) return ssize_t(got);  // the end of the stream
    if (s.nonblocking(flags)) {
      if (got) return ssize_t(got);
      idle_spin();
      errno = EWOULDBLOCK;
      return -1;
    }
    if (wait(s, lk) < 0) {
      if (got) return ssize_t(got);
      return -1;
    }
  }
}

}  // namespace openib::rsocket

using namespace openib::rsocket;

namespace {

// The call on the socket; errno as the application left it unless the
// call fails (the verbs and CM calls under it set errno on their way).
template <typename F>
ssize_t with_socket(int fd, F f) {
  const int saved = errno;
  SocketPtr s = find(fd);
  if (!s) return -1;
  std::unique_lock lk(s->mu);
  const ssize_t r = f(*s, lk);
  if (r >= 0) errno = saved;
  return r;
}

}  // namespace

extern "C" {

ssize_t rsend(int fd, const void* buf, size_t len, int flags) {
  return with_socket(fd, [&](Socket& s, auto& lk) -> ssize_t {
    if (s.dg) {
      iovec v{const_cast<void*>(buf), len};
      return ds_send(s, lk, &v, 1, flags, nullptr, 0);
    }
    return send_bytes(s, lk, static_cast<const uint8_t*>(buf), len, flags);
  });
}

ssize_t rsendto(int fd, const void* buf, size_t len, int flags, const sockaddr* to, socklen_t tolen) {
  return with_socket(fd, [&](Socket& s, auto& lk) -> ssize_t {
    if (s.dg) {
      iovec v{const_cast<void*>(buf), len};
      return ds_send(s, lk, &v, 1, flags, to, tolen);
    }
    if (to) {
      errno = EISCONN;
      return -1;
    }
    return send_bytes(s, lk, static_cast<const uint8_t*>(buf), len, flags);
  });
}

ssize_t rsendmsg(int fd, const msghdr* msg, int flags) {
  if (!msg) {
    errno = EINVAL;
    return -1;
  }
  if (msg->msg_controllen) {
    errno = ENOTSUP;
    return -1;
  }
  return with_socket(fd, [&](Socket& s, auto& lk) -> ssize_t {
    if (s.dg)
      return ds_send(s, lk, msg->msg_iov, int(msg->msg_iovlen), flags, static_cast<const sockaddr*>(msg->msg_name),
                     msg->msg_namelen);
    ssize_t total = 0;
    for (size_t k = 0; k < msg->msg_iovlen; ++k) {
      const iovec& v = msg->msg_iov[k];
      if (!v.iov_len) continue;
      ssize_t n = send_bytes(s, lk, static_cast<const uint8_t*>(v.iov_base), v.iov_len, flags);
      if (n < 0) return total ? total : -1;
      total += n;
      if (size_t(n) < v.iov_len) break;
    }
    return total;
  });
}

ssize_t rwrite(int fd, const void* buf, size_t len) { return rsend(fd, buf, len, 0); }

ssize_t rwritev(int fd, const iovec* iov, int iovcnt) {
  msghdr m{};
  m.msg_iov = const_cast<iovec*>(iov);
  m.msg_iovlen = size_t(std::max(iovcnt, 0));
  return rsendmsg(fd, &m, 0);
}

ssize_t rrecv(int fd, void* buf, size_t len, int flags) {
  return rrecvfrom(fd, buf, len, flags, nullptr, nullptr);
}

ssize_t rrecvfrom(int fd, void* buf, size_t len, int flags, sockaddr* from, socklen_t* fromlen) {
  bool stream = false;
  ssize_t n = with_socket(fd, [&](Socket& s, auto& lk) -> ssize_t {
    if (s.dg) {
      iovec v{buf, len};
      return ds_recv(s, lk, &v, 1, flags, from, fromlen, nullptr);
    }
    stream = true;
    return recv_bytes(s, lk, static_cast<uint8_t*>(buf), len, flags);
  });
  if (n >= 0 && stream && from && fromlen) {
    const int saved = errno;
    rgetpeername(fd, from, fromlen);
    errno = saved;
  }
  return n;
}

ssize_t rrecvmsg(int fd, msghdr* msg, int flags) {
  if (!msg) {
    errno = EINVAL;
    return -1;
  }
  return with_socket(fd, [&](Socket& s, auto& lk) -> ssize_t {
    msg->msg_controllen = 0;
    msg->msg_flags = 0;
    if (s.dg) {
      bool truncated = false;
      socklen_t namelen = msg->msg_name ? msg->msg_namelen : 0;
      const ssize_t n = ds_recv(s, lk, msg->msg_iov, int(msg->msg_iovlen), flags,
                                static_cast<sockaddr*>(msg->msg_name), msg->msg_name ? &namelen : nullptr, &truncated);
      if (n >= 0) {
        msg->msg_namelen = namelen;
        if (truncated) msg->msg_flags |= MSG_TRUNC;
      }
      return n;
    }
    ssize_t total = 0;
    msg->msg_namelen = 0;  // (a connected stream: no source address, as TCP's)
    for (size_t k = 0; k < msg->msg_iovlen; ++k) {
      const iovec& v = msg->msg_iov[k];
      if (!v.iov_len) continue;
      // Only the first piece waits: the rest takes what is queued.
      ssize_t n = recv_bytes(s, lk, static_cast<uint8_t*>(v.iov_base), v.iov_len, total ? (flags | MSG_DONTWAIT) & ~MSG_WAITALL : flags);
      if (n < 0) return total ? total : -1;
      total += n;
      if (size_t(n) < v.iov_len) break;
    }
    return total;
  });
}

ssize_t rread(int fd, void* buf, size_t len) { return rrecv(fd, buf, len, 0); }

ssize_t rreadv(int fd, const iovec* iov, int iovcnt) {
  msghdr m{};
  m.msg_iov = const_cast<iovec*>(iov);
  m.msg_iovlen = size_t(std::max(iovcnt, 0));
  return rrecvmsg(fd, &m, 0);
}

}  // extern "C"
