// Zero-copy transfers (riomap, riounmap, riowrite; wire.hpp): a buffer
// riomap()ed PROT_WRITE is registered for remote write and announced in
// one of the peer's iomap entries (the peer's RDMA_IOMAPSIZE) before our
// next send; riowrite() writes at an offset of a buffer the peer mapped,
// as a plain RDMA WRITE that the peer does not see complete: a later
// message on the stream proves it landed (RC keeps the order).
#include <sys/mman.h>

#include <algorithm>
#include <cerrno>

#include <rdma/rsocket.h>

#include "abi/rdmacm/rsocket/socket.hpp"

namespace openib::rsocket {

int flush_iomaps(Socket& s) {
  for (IoMapping& m : s.iomaps) {
    if (m.sent || m.index < 0) continue;
    if (!can_send(s)) process(s);
    if (!can_send(s)) return 0;  // the next send tries again
    IomapEntry e{m.offset, {uint64_t(uintptr_t(m.buf)), m.mr->rkey, uint32_t(m.len)}};
    if (s.peer_swapped) {
      e.offset = __builtin_bswap64(e.offset);
      e.sge = {__builtin_bswap64(e.sge.addr), __builtin_bswap32(e.sge.key), __builtin_bswap32(e.sge.length)};
    }
    const uint64_t raddr = s.remote_iomap.addr + uint64_t(m.index) * sizeof(IomapEntry);
    if (int err = post_message(s, kWrData, &e, sizeof e, raddr, s.remote_iomap.key, true, imm(kOpIomapSgl, uint32_t(m.index))))
      return err;
    ++s.sseq_no;  // the peer never gives this credit back (rdma-core's rule)
    m.sent = true;
  }
  return 0;
}

}  // namespace openib::rsocket

using namespace openib::rsocket;

extern "C" {

off_t riomap(int fd, void* buf, size_t len, int prot, int, off_t offset) {
  SocketPtr s = find(fd);
  if (!s) return -1;
  std::lock_guard lk(s->mu);
  if (!s->qp || s->state != State::kConnected || (prot != PROT_WRITE && prot != PROT_NONE) || !buf || !len ||
      len > UINT32_MAX) {
    errno = EINVAL;
    return -1;
  }
  IoMapping m;
  if (prot == PROT_WRITE) {
    std::vector<bool> used(s->remote_iomap.length);
    for (const IoMapping& o : s->iomaps)
      if (o.index >= 0) used[size_t(o.index)] = true;
    for (uint32_t k = 0; k < s->remote_iomap.length && m.index < 0; ++k)
      if (!used[k]) m.index = int(k);
    if (m.index < 0) {
      errno = ENOMEM;  // the peer offered no (more) iomap entries
      return -1;
    }
  }
  m.mr = ibv_reg_mr(s->qp->pd, buf, len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  if (!m.mr) return -1;
  m.buf = buf;
  m.len = len;
  m.offset = offset == -1 ? uint64_t(uintptr_t(buf)) : uint64_t(offset);
  s->iomaps.push_back(m);
  return off_t(m.offset);
}

int riounmap(int fd, void* buf, size_t len) {
  SocketPtr s = find(fd);
  if (!s) return -1;
  std::lock_guard lk(s->mu);
  for (auto it = s->iomaps.begin(); it != s->iomaps.end(); ++it)
    if (it->buf == buf && it->len == len) {
      ibv_dereg_mr(it->mr);
      s->iomaps.erase(it);
      return 0;
    }
  errno = EINVAL;
  return -1;
}

size_t riowrite(int fd, const void* buf, size_t count, off_t offset, int flags) {
  SocketPtr s = find(fd);
  if (!s) return 0;
  std::unique_lock lk(s->mu);
  if (s->state != State::kConnected || !s->writable) {
    errno = s->established ? EPIPE : ENOTCONN;
    return 0;
  }
  if (int e = flush_iomaps(*s)) {
    errno = e;
    return 0;
  }
  const auto* src = static_cast<const uint8_t*>(buf);
  size_t done = 0;
  uint32_t olen = kFirstTransfer;
  while (done < count && !s->closed && s->qp) {
    // The peer's entry holding this offset (it writes them into our iomap).
    const uint64_t at = uint64_t(offset) + done;
    const IomapEntry* entry = nullptr;
    for (uint32_t k = 0; k < s->target_iomap_size; ++k) {
      const IomapEntry& e = s->target_iomap()[k];
      if (e.sge.length && e.offset <= at && at < e.offset + e.sge.length) entry = &e;
    }
    if (!entry) {
      if (!done) errno = EINVAL;
      break;
    }
    // Sends' conditions without the credit: a plain WRITE uses none.
    if (!(s->sqe_avail > 0 && s->sbuf_avail >= kSendLowWater)) {
      process(*s);
      if (!(s->sqe_avail > 0 && s->sbuf_avail >= kSendLowWater)) {
        if (s->nonblocking(flags)) {
          if (!done) errno = EWOULDBLOCK;
          break;
        }
        if (s->state != State::kConnected || !s->writable) {
          if (!done) errno = ECONNRESET;
          break;
        }
        if (wait(*s, lk) < 0) break;
        continue;
      }
    }
    const uint64_t room = entry->offset + entry->sge.length - at;
    uint32_t xfer = uint32_t(std::min<uint64_t>({uint64_t(count - done), olen, room, s->sbuf_avail, kMaxTransfer}));
    if (olen < kMaxTransfer) olen <<= 1;
    if (int e = post_message(*s, kWrWrite, src + done, xfer, entry->sge.addr + (at - entry->offset), entry->sge.key,
                             false, 0)) {
      if (!done) errno = e;
      break;
    }
    done += xfer;
  }
  return done;
}

}  // extern "C"
