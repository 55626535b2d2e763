// Datagram rsockets (datagram.hpp; docs/rsockets.md "Datagram sockets"):
// the UD QPs per local address, the peers, sending (UD SEND once the peer's
// QPN is known, else over UDP with the header), receiving (the QPs' slots,
// and what the service thread takes from the UDP socket), waiting.
//
// Every datagram from outside is checked before it is queued: a UD message
// needs the GRH, a whole DsHeader and a known version; a UDP one the tag,
// a version that matches its source's family, a QPN that can be a UD QP's,
// and a payload that fits a slot. Anything else, and anything that finds
// the queue full (rq messages), is dropped and counted, as UDP drops.
#include <fcntl.h>
#include <poll.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <system_error>
#include <thread>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "abi/rdmacm/rsocket/datagram.hpp"
#include "abi/rdmacm/rsocket/socket.hpp"

namespace openib::rsocket {

namespace {

constexpr uint64_t kSlotRecv = kWrRecv;  // | the slot's offset; sends: the slot's index

int fail(int code) {
  errno = code;
  return -1;
}

bool debug() {
  static const bool say = std::getenv("OPENIB_RSOCKET_DEBUG") != nullptr;
  return say;
}

// A datagram dropped: counted by reason; with OPENIB_RSOCKET_DEBUG set, the
// first 4 of each reason and every 1024th are said on stderr.
enum Drop { kBadUdp, kUnreachable, kBadUd, kFailedRecv, kQueueFull, kTooManyPeers, kDropReasons };
constexpr const char* kDropWhy[kDropReasons] = {
    "a UDP datagram without a valid header", "a UDP datagram from an address no RDMA device reaches",
    "a UD message without a valid header", "a failed receive", "the receive queue is full",
    "a UDP datagram from a new peer past the socket's 1024"};

void drop(Datagram& d, Drop why) {
  ++d.dropped;
  const uint64_t n = ++d.dropped_by[why];
  if (debug() && (n <= 4 || n % 1024 == 0))
    std::fprintf(stderr, "[openib] rsocket: datagram dropped: %s (%llu of this reason, %llu in all)\n", kDropWhy[why],
                 static_cast<unsigned long long>(n), static_cast<unsigned long long>(d.dropped));
}

bool any_addr(const SockAddr& a) {
  return a.sa.sa_family == AF_INET ? a.sin.sin_addr.s_addr == htonl(INADDR_ANY)
                                   : std::memcmp(&a.sin6.sin6_addr, &in6addr_any, 16) == 0;
}

uint16_t port_of(const SockAddr& a) { return a.sa.sa_family == AF_INET ? a.sin.sin_port : a.sin6.sin6_port; }
void set_port(SockAddr& a, uint16_t be_port) { (a.sa.sa_family == AF_INET ? a.sin.sin_port : a.sin6.sin6_port) = be_port; }

bool to_addr(const sockaddr* in, socklen_t len, SockAddr& out) {
  if (!in) return false;
  out = SockAddr{};
  if (in->sa_family == AF_INET && len >= socklen_t(sizeof(sockaddr_in))) {
    std::memcpy(&out.sin, in, sizeof(sockaddr_in));
    return true;
  }
  if (in->sa_family == AF_INET6 && len >= socklen_t(sizeof(sockaddr_in6))) {
    std::memcpy(&out.sin6, in, sizeof(sockaddr_in6));
    return true;
  }
  return false;
}

// The UDP socket's own address; an unbound one is bound to an ephemeral
// port first (the port is in every header we send: it must be the one
// replies reach).
int udp_name(Datagram& d, int family, SockAddr& out) {
  socklen_t len = sizeof out;
  if (::getsockname(d.udp, &out.sa, &len)) return errno;
  if (port_of(out) == 0) {
    SockAddr any{};
    any.sa.sa_family = sa_family_t(family);
    if (::bind(d.udp, &any.sa, addr_len(any))) return errno;
    len = sizeof out;
    if (::getsockname(d.udp, &out.sa, &len)) return errno;
  }
  return 0;
}

// Which local address reaches `to` (the UDP socket's, or the kernel's
// route choice when it is bound to the wildcard), with its port.
int local_source(Datagram& d, const SockAddr& to, SockAddr& src) {
  if (int e = udp_name(d, to.sa.sa_family, src)) return e;
  if (!any_addr(src)) return 0;
  const uint16_t port = port_of(src);
  const int probe = ::socket(to.sa.sa_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (probe < 0) return errno;
  socklen_t len = sizeof src;
  int e = 0;
  if (::connect(probe, &to.sa, addr_len(to)) || ::getsockname(probe, &src.sa, &len)) e = errno;
  ::close(probe);
  set_port(src, port);
  return e;
}

int post_recv(Socket& s, DsQp& q, uint32_t offset) {
  ibv_sge sge[2] = {{uint64_t(uintptr_t(q.rbuf + size_t(s.dg->rq) * kDsRecvSlot)), kGrhBytes, q.rmr->lkey},
                    {uint64_t(uintptr_t(q.rbuf + offset)), kDsRecvSlot, q.rmr->lkey}};
  ibv_recv_wr wr{}, *bad = nullptr;
  wr.wr_id = kSlotRecv | offset;
  wr.sg_list = sge;
  wr.num_sge = 2;
  const int e = ibv_post_recv(q.id->qp, &wr, &bad);
  if (e) q.failed = true;
  return e;
}

void destroy_qp(DsQp& q) {
  if (q.id && q.id->qp) rdma_destroy_qp(q.id);
  if (q.cq) {
    ibv_cq* ev_cq;
    void* ctx;
    while (q.cch && ibv_get_cq_event(q.cch, &ev_cq, &ctx) == 0) ibv_ack_cq_events(ev_cq, 1);
    ibv_destroy_cq(q.cq);
  }
  if (q.cch) ibv_destroy_comp_channel(q.cch);
  if (q.rmr) ibv_dereg_mr(q.rmr);
  if (q.smr) ibv_dereg_mr(q.smr);
  if (q.id) rdma_destroy_id(q.id);
  std::free(q.rbuf);
  q = DsQp{};
}

// The send slots, sized on the first QP from the options then in force
// (rdma-core's: as many slots as the buffer holds, at most the queue).
int make_slots(Socket& s, ibv_context* verbs) {
  Datagram& d = *s.dg;
  if (d.sbuf) return 0;
  ibv_device_attr da{};
  const uint32_t dev_max = ibv_query_device(verbs, &da) == 0 && da.max_qp_wr > 0 ? uint32_t(da.max_qp_wr) : kMaxQueue;
  auto size = [&](uint32_t queue, uint32_t bytes) {
    return std::max<uint32_t>(2, std::min({uint32_t(queue), bytes / kDsSlot, dev_max, uint32_t(kMaxQueue)}));
  };
  d.sq = size(s.sq_size, s.sbuf_size);
  d.rq = size(s.rq_size, s.rbuf_size);
  d.sbuf = zeroed_pages(size_t(d.sq) * kDsSlot);
  if (!d.sbuf) return ENOMEM;
  d.free_slots.clear();
  for (uint32_t k = d.sq; k > 0; --k) d.free_slots.push_back(k - 1);
  return 0;
}

// A UD QP on `local` (synchronous id of the UDP port space: the CM gives it
// Q_Key 0x01234567 and moves it to RTS), its slots, every receive posted.
int create_qp(Socket& s, const SockAddr& local, DsQp*& out) {
  Datagram& d = *s.dg;
  auto q = std::make_unique<DsQp>();
  q->local = local;
  format_hdr(q->hdr, local);
  auto undo = [&](int e) {
    destroy_qp(*q);
    return e ? e : EIO;
  };
  if (rdma_create_id(nullptr, &q->id, nullptr, RDMA_PS_UDP)) return errno ? errno : ENOMEM;
  if (rdma_bind_addr(q->id, const_cast<sockaddr*>(&q->local.sa))) return undo(errno);
  if (!q->id->verbs) return undo(EADDRNOTAVAIL);  // not an address of an RDMA device
  if (int e = make_slots(s, q->id->verbs)) return undo(e);
  q->rbuf = zeroed_pages(size_t(d.rq) * kDsRecvSlot + kGrhBytes);
  if (!q->rbuf) return undo(ENOMEM);
  q->cch = ibv_create_comp_channel(q->id->verbs);
  if (!q->cch) return undo(errno);
  ::fcntl(q->cch->fd, F_SETFL, ::fcntl(q->cch->fd, F_GETFL) | O_NONBLOCK);
  q->cq = ibv_create_cq(q->id->verbs, int(d.sq + d.rq), nullptr, q->cch, 0);
  if (!q->cq) return undo(errno);
  ibv_qp_init_attr qa{};
  qa.send_cq = qa.recv_cq = q->cq;
  qa.qp_type = IBV_QPT_UD;
  qa.sq_sig_all = 1;
  qa.cap.max_send_wr = d.sq;
  qa.cap.max_recv_wr = d.rq;
  qa.cap.max_send_sge = 1;
  qa.cap.max_recv_sge = 2;
  qa.cap.max_inline_data = s.sq_inline;
  if (rdma_create_qp(q->id, nullptr, &qa)) {
    qa.cap.max_inline_data = 0;
    if (rdma_create_qp(q->id, nullptr, &qa)) return undo(errno);
  }
  q->max_inline = qa.cap.max_inline_data;
  // A UD message is one packet: the payload behind our header within the
  // port's MTU (a larger send would fail the QP).
  ibv_port_attr pa{};
  const uint32_t mtu = ibv_query_port(q->id->verbs, q->id->port_num, &pa) == 0 ? 128u << pa.active_mtu : 4096;
  q->max_payload = std::min<uint32_t>(ds_max_payload(local.sa.sa_family), mtu - q->hdr.length);
  const int local_write = IBV_ACCESS_LOCAL_WRITE;  // (an int: ibv_reg_mr's macro ORs in another enum)
  q->smr = ibv_reg_mr(q->id->pd, d.sbuf, size_t(d.sq) * kDsSlot, local_write);
  q->rmr = ibv_reg_mr(q->id->pd, q->rbuf, size_t(d.rq) * kDsRecvSlot + kGrhBytes, local_write);
  if (!q->smr || !q->rmr) return undo(errno);
  for (uint32_t k = 0; k < d.rq; ++k)
    if (int e = post_recv(s, *q, k * kDsRecvSlot)) return undo(e);
  out = q.get();
  d.qps.push_back(std::move(q));
  return 0;
}

// The peer `to`: known, or new (on the QP of the local address that
// reaches it, made now if it is the first).
int get_dest(Socket& s, const SockAddr& to, DsDest*& out) {
  Datagram& d = *s.dg;
  for (auto& p : d.dests)
    if (same_addr(p->addr, to)) {
      out = p.get();
      return 0;
    }
  if (d.dests.size() >= kMaxDests) return ENOBUFS;
  SockAddr src{};
  if (int e = local_source(d, to, src)) return e;
  DsQp* q = nullptr;
  for (auto& p : d.qps)
    if (same_addr(p->local, src)) q = p.get();
  if (!q)
    if (int e = create_qp(s, src, q)) return e;
  auto dest = std::make_unique<DsDest>();
  dest->addr = to;
  dest->qp = q;
  out = dest.get();
  d.dests.push_back(std::move(dest));
  return 0;
}

// The iovecs' bytes, or SIZE_MAX past `limit` (no sum that wraps).
size_t iov_total(const iovec* iov, int n, size_t limit) {
  size_t t = 0;
  for (int k = 0; k < n; ++k) {
    if (iov[k].iov_len > limit - t) return SIZE_MAX;
    t += iov[k].iov_len;
  }
  return t;
}

// Over UDP, the header first: op DATA with the payload, or CTRL alone.
ssize_t udp_send(Socket& s, const DsDest& dest, uint8_t op, const iovec* iov, int n) {
  const DsQp& q = *dest.qp;
  DsUdpHeader h{};
  h.tag = htobe32(kDsUdpTag);
  h.version = q.hdr.version;
  h.op = op;
  h.qpn = htobe32(q.id->qp->qp_num & 0xFFFFFF);
  if (h.version == 4) {
    h.length = kDsUdpHdr4;
    h.addr.ipv4 = q.hdr.addr.ipv4;
  } else {
    h.length = kDsUdpHdr6;
    std::memcpy(h.addr.ipv6, q.hdr.addr.ipv6.addr, 16);
  }
  std::vector<iovec> v{{&h, h.length}};
  v.insert(v.end(), iov, iov + n);
  msghdr m{};
  m.msg_name = const_cast<sockaddr*>(&dest.addr.sa);
  m.msg_namelen = addr_len(dest.addr);
  m.msg_iov = v.data();
  m.msg_iovlen = v.size();
  const ssize_t r = ::sendmsg(s.dg->udp, &m, MSG_DONTWAIT | MSG_NOSIGNAL);
  return r < 0 ? r : r - h.length;
}

// A UD SEND from a free slot: our header, then the payload.
int ud_send(Socket& s, const DsDest& dest, const iovec* iov, int n, size_t len) {
  Datagram& d = *s.dg;
  const DsQp& q = *dest.qp;
  const uint32_t slot = d.free_slots.back();
  uint8_t* p = d.sbuf + size_t(slot) * kDsSlot;
  std::memcpy(p, &q.hdr, q.hdr.length);
  size_t at = q.hdr.length;
  for (int k = 0; k < n; ++k) {
    std::memcpy(p + at, iov[k].iov_base, iov[k].iov_len);
    at += iov[k].iov_len;
  }
  ibv_sge sge{uint64_t(uintptr_t(p)), uint32_t(q.hdr.length + len), q.smr->lkey};
  ibv_send_wr wr{}, *bad = nullptr;
  wr.wr_id = slot;
  wr.opcode = IBV_WR_SEND;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.send_flags = sge.length <= q.max_inline ? IBV_SEND_INLINE : 0;
  wr.wr.ud.ah = dest.ah;
  wr.wr.ud.remote_qpn = dest.qpn;
  wr.wr.ud.remote_qkey = kDsQkey;
  if (int e = ibv_post_send(q.id->qp, &wr, &bad)) return e;
  d.free_slots.pop_back();
  return 0;
}

bool valid_recv(const Datagram& d, const DsQp& q, uint32_t offset, uint32_t byte_len, SockAddr& from) {
  size_t payload;
  return offset % kDsRecvSlot == 0 && offset < d.rq * kDsRecvSlot && byte_len >= kGrhBytes &&
         parse_ud_message(q.rbuf + offset, byte_len - kGrhBytes, q.local.sa.sa_family, from, payload);
}

// The address handle to `to` from the QP's address and port: the CM's
// route (a synchronous id), as rdma-core builds it. Runs without s.mu.
int resolve_route(const SockAddr& local, const SockAddr& to, ibv_ah_attr& attr) {
  rdma_cm_id* id = nullptr;
  if (rdma_create_id(nullptr, &id, nullptr, RDMA_PS_UDP)) return errno ? errno : ENOMEM;
  SockAddr src = local;
  set_port(src, 0);
  int e = 0;
  if (rdma_resolve_addr(id, &src.sa, const_cast<sockaddr*>(&to.sa), 2000) || rdma_resolve_route(id, 2000) ||
      !id->route.path_rec)
    e = errno ? errno : EHOSTUNREACH;
  if (!e) {
    const ibv_sa_path_rec& pr = *id->route.path_rec;
    attr = ibv_ah_attr{};
    ibv_port_attr pa{};
    const bool roce = ibv_query_port(id->verbs, id->port_num, &pa) == 0 && pa.link_layer == IBV_LINK_LAYER_ETHERNET;
    if (pr.hop_limit > 1 || roce) {
      attr.is_global = 1;
      attr.grh.dgid = pr.dgid;
      attr.grh.flow_label = be32toh(pr.flow_label);
      attr.grh.hop_limit = pr.hop_limit > 1 ? pr.hop_limit : 64;
      attr.grh.traffic_class = pr.traffic_class;
    }
    // RoCE (IBA Annex A17): every packet has a GRH, from the GID table
    // entry of the route's source address (an IPv4 one for an IPv4 peer;
    // entry 0 is the link-local IPv6 GID, which an IPv4 peer drops).
    if (roce) {
      e = EADDRNOTAVAIL;
      for (int i = 0; i < pa.gid_tbl_len; ++i) {
        ibv_gid g{};
        if (ibv_query_gid(id->verbs, id->port_num, i, &g) == 0 && std::memcmp(&g, &pr.sgid, sizeof g) == 0) {
          attr.grh.sgid_index = static_cast<uint8_t>(i);
          e = 0;
          break;
        }
      }
    }
    attr.dlid = be16toh(pr.dlid);
    attr.sl = pr.sl;
    attr.static_rate = pr.rate;
    attr.port_num = id->port_num;
  }
  rdma_destroy_id(id);
  return e;
}

}  // namespace

Datagram::~Datagram() {
  for (auto& p : dests)
    if (p->ah) ibv_destroy_ah(p->ah);
  for (auto& q : qps) destroy_qp(*q);
  std::free(sbuf);
  if (udp >= 0) ::close(udp);
}

bool Socket::has_endpoint() const { return qp || (dg && dg->sbuf); }

int ds_open(Socket& s, int domain) {
  s.dg = std::make_unique<Datagram>();
  s.dg->udp = ::socket(domain, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (s.dg->udp < 0) return errno;
  s.state = State::kBound;  // (no connection: readable and writable from the start)
  s.readable = s.writable = true;
  return 0;
}

int ds_bind(Socket& s, const sockaddr* addr, socklen_t len) {
  if (!s.dg->qps.empty()) return fail(EINVAL);  // already sending from an address
  return ::bind(s.dg->udp, addr, len);
}

int ds_connect(Socket& s, const sockaddr* addr, socklen_t len) {
  Datagram& d = *s.dg;
  if (addr && addr->sa_family == AF_UNSPEC) {  // dissolve the association, as UDP
    d.conn = nullptr;
    SockAddr mine{};
    socklen_t ml = sizeof mine;
    const bool named = ::getsockname(d.udp, &mine.sa, &ml) == 0;
    if (::connect(d.udp, addr, len)) return -1;
    // The kernel lets go of an ephemeral port here; our QPs' headers name
    // it, so the socket keeps it.
    SockAddr now{};
    socklen_t nl = sizeof now;
    if (named && !d.qps.empty() && ::getsockname(d.udp, &now.sa, &nl) == 0 && port_of(now) != port_of(mine))
      ::bind(d.udp, &mine.sa, ml);
    return 0;
  }
  SockAddr to;
  if (!to_addr(addr, len, to) || to.sa.sa_family != s.domain) return fail(addr ? EAFNOSUPPORT : EFAULT);
  if (::connect(d.udp, addr, len)) return -1;
  DsDest* dest = nullptr;
  if (int e = get_dest(s, to, dest)) return fail(e);
  d.conn = dest;
  return 0;
}

int ds_shutdown(Socket& s, int how) {
  if (how != SHUT_RD && how != SHUT_WR && how != SHUT_RDWR) return fail(EINVAL);
  if (!s.dg->conn) return fail(ENOTCONN);  // as UDP's
  if (how != SHUT_WR) s.readable = false;
  if (how != SHUT_RD) s.writable = false;
  signal(s);
  return 0;
}

int ds_name(Socket& s, sockaddr* addr, socklen_t* len, bool peer) {
  return peer ? ::getpeername(s.dg->udp, addr, len) : ::getsockname(s.dg->udp, addr, len);
}

bool ds_process(Socket& s) {
  Datagram& d = *s.dg;
  bool changed = false;
  for (auto& qp : d.qps) {
    DsQp& q = *qp;
    ibv_wc wc[16];
    int n;
    while ((n = ibv_poll_cq(q.cq, 16, wc)) > 0) {
      changed = true;
      for (int k = 0; k < n; ++k) {
        const ibv_wc& w = wc[k];
        // A completion in error means the QP left RTS (nothing a peer
        // sends can cause it: receive slots hold the largest MTU, sends
        // fit the MTU): it is marked failed, its sends give EIO.
        if (w.status != IBV_WC_SUCCESS && !q.failed) {
          q.failed = true;
          if (debug())
            std::fprintf(stderr, "[openib] rsocket: datagram QP %u failed: %s\n", q.id->qp->qp_num,
                         ibv_wc_status_str(w.status));
        }
        if (!(w.wr_id & kSlotRecv)) {
          if (w.wr_id < d.sq) d.free_slots.push_back(uint32_t(w.wr_id));
          continue;
        }
        const auto offset = uint32_t(w.wr_id & ~kSlotRecv);
        if (w.status == IBV_WC_WR_FLUSH_ERR) continue;  // the QP is in error
        SockAddr from{};
        if (w.status == IBV_WC_SUCCESS && valid_recv(d, q, offset, w.byte_len, from) && d.queue.size() < d.rq) {
          DsMessage m;
          m.qp = &q;
          m.offset = offset;
          m.length = w.byte_len - kGrhBytes;
          m.from = from;
          d.queue.push_back(std::move(m));
        } else {
          drop(d, w.status != IBV_WC_SUCCESS ? kFailedRecv : d.queue.size() >= d.rq ? kQueueFull : kBadUd);
          post_recv(s, q, offset);
        }
      }
    }
  }
  if (changed && s.waiters > 0) signal(s);
  return changed;
}

bool ds_arm(Socket& s) {
  for (auto& qp : s.dg->qps) {
    DsQp& q = *qp;
    ibv_cq* ev_cq;
    void* ctx;
    while (ibv_get_cq_event(q.cch, &ev_cq, &ctx) == 0) {
      ibv_ack_cq_events(ev_cq, 1);
      q.armed = false;
    }
    if (!q.armed && ibv_req_notify_cq(q.cq, 0) == 0) q.armed = true;
  }
  return ds_process(s);  // a completion before the arming raised no event
}

void ds_wait_fds(Socket& s, std::vector<pollfd>& fds) {
  for (auto& q : s.dg->qps) fds.push_back({q->cch->fd, POLLIN, 0});
}

short ds_revents(Socket& s, short events) {
  if (s.closed) return POLLNVAL;
  ds_process(s);
  short r = 0;
  if ((events & POLLIN) && (!s.dg->queue.empty() || !s.readable)) r |= POLLIN;
  // Writable while a slot is free (before the first QP: every slot is).
  if ((events & POLLOUT) && (!s.dg->sbuf || !s.dg->free_slots.empty())) r |= POLLOUT;
  return r;
}

ssize_t ds_send(Socket& s, std::unique_lock<std::mutex>& lk, const iovec* iov, int n, int flags, const sockaddr* to,
                socklen_t tolen) {
  if (s.closed) return fail(EBADF);
  if (!s.writable) return fail(EPIPE);
  Datagram& d = *s.dg;
  if (n < 0 || (n > 0 && !iov)) return fail(EINVAL);
  for (int k = 0; k < n; ++k)
    if (iov[k].iov_len && !iov[k].iov_base) return fail(EFAULT);
  const size_t len = iov_total(iov, n, ds_max_payload(s.domain));
  if (len == SIZE_MAX) return fail(EMSGSIZE);
  DsDest* dest = d.conn;
  if (to) {
    SockAddr a;
    if (!to_addr(to, tolen, a) || a.sa.sa_family != s.domain) return fail(EAFNOSUPPORT);
    if (!dest || !same_addr(dest->addr, a))
      if (int e = get_dest(s, a, dest)) return fail(e);
  }
  if (!dest) return fail(EDESTADDRREQ);
  if (len > dest->qp->max_payload) return fail(EMSGSIZE);
  if (dest->qp->failed) return fail(EIO);
  if (!dest->ah) {
    // Over UDP: a blocking socket waits for room in the UDP socket.
    for (;;) {
      const ssize_t r = udp_send(s, *dest, kDsOpData, iov, n);
      if (r >= 0 || errno != EAGAIN || s.nonblocking(flags)) return r;
      pollfd p{d.udp, POLLOUT, 0};
      lk.unlock();
      ::poll(&p, 1, 100);
      lk.lock();
      if (s.closed) return fail(EBADF);
    }
  }
  while (d.free_slots.empty()) {
    ds_process(s);
    if (!d.free_slots.empty()) break;
    if (s.nonblocking(flags)) {
      idle_spin();
      return fail(EWOULDBLOCK);
    }
    if (wait(s, lk) < 0) return -1;
    if (s.closed) return fail(EBADF);
  }
  if (int e = ud_send(s, *dest, iov, n, len)) return fail(e);
  return ssize_t(len);
}

ssize_t ds_recv(Socket& s, std::unique_lock<std::mutex>& lk, const iovec* iov, int n, int flags, sockaddr* from,
                socklen_t* fromlen, bool* truncated) {
  Datagram& d = *s.dg;
  for (;;) {
    if (s.closed) return fail(EBADF);
    ds_process(s);
    if (!d.queue.empty()) break;
    if (!s.readable) return 0;  // after rshutdown(SHUT_RD), as UDP's
    if (s.nonblocking(flags)) {
      idle_spin();
      return fail(EWOULDBLOCK);
    }
    if (wait(s, lk) < 0) return -1;
  }
  DsMessage& m = d.queue.front();
  const uint8_t* data;
  size_t len;
  if (m.qp) {
    const uint8_t* slot = m.qp->rbuf + m.offset;
    const uint8_t hl = slot[1];
    data = slot + hl;
    len = m.length - hl;
  } else {
    data = m.bytes.data();
    len = m.bytes.size();
  }
  size_t copied = 0;
  for (int k = 0; k < n && copied < len; ++k) {
    const size_t c = std::min(iov[k].iov_len, len - copied);
    std::memcpy(iov[k].iov_base, data + copied, c);
    copied += c;
  }
  if (truncated) *truncated = copied < len;
  if (from && fromlen) {
    const socklen_t al = addr_len(m.from);
    std::memcpy(from, &m.from, std::min(*fromlen, al));
    *fromlen = al;
  }
  if (!(flags & MSG_PEEK)) {
    if (m.qp) post_recv(s, *m.qp, m.offset);
    d.queue.pop_front();
  }
  return ssize_t((flags & MSG_TRUNC) ? len : copied);
}

namespace {

// The address handle to the peer, made by a thread of its own (the CM's
// address and route resolution may take seconds: not on the service
// thread, not under the socket's lock). s.mu held. Until it is there the
// socket sends to the peer over UDP; a failure is tried again 5 s later.
void resolve(const SocketPtr& sp, DsDest& dest) {
  Datagram& d = *sp->dg;
  dest.resolving = true;
  ++d.resolving;
  DsDest* at = &dest;  // lives while the socket is not closed (checked before use)
  const SockAddr local = dest.qp->local, to = dest.addr;
  try {
    std::thread([sp, at, local, to] {
    ibv_ah_attr attr{};
    const int e = resolve_route(local, to, attr);
    std::lock_guard lk(sp->mu);
    if (sp->closed || !sp->dg) return;
    --sp->dg->resolving;
    at->resolving = false;
    if (!e) at->ah = ibv_create_ah(at->qp->id->pd, &attr);
    if (!at->ah) at->retry_at = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    if (debug()) {
      if (at->ah)
        std::fprintf(stderr, "[openib] rsocket: address handle to a datagram peer, LID %u\n", attr.dlid);
      else
        std::fprintf(stderr, "[openib] rsocket: no address handle to a datagram peer: %s\n", std::strerror(e ? e : errno));
    }
    }).detach();
  } catch (const std::system_error&) {  // no thread now: another datagram tries again
    dest.resolving = false;
    --d.resolving;
  }
}

}  // namespace

void ds_udp_input(const SocketPtr& sp) {
  Socket& s = *sp;
  std::unique_lock lk(s.mu);
  alignas(8) uint8_t buf[kDsSlot + 64];
  for (int budget = 64; budget > 0; --budget) {
    if (s.closed || !s.dg) return;
    Datagram& d = *s.dg;
    SockAddr from{};
    iovec v{buf, sizeof buf};
    msghdr m{};
    m.msg_name = &from;
    m.msg_namelen = sizeof from;
    m.msg_iov = &v;
    m.msg_iovlen = 1;
    const ssize_t got = ::recvmsg(d.udp, &m, MSG_DONTWAIT);
    if (got < 0) return;
    UdpDatagram h{};
    if ((m.msg_flags & MSG_TRUNC) || !parse_udp_datagram(buf, size_t(got), from.sa.sa_family, h)) {
      drop(d, kBadUdp);
      continue;
    }
    DsDest* dest = nullptr;
    if (int e = get_dest(s, from, dest)) {
      drop(d, e == ENOBUFS ? kTooManyPeers : kUnreachable);
      continue;
    }
    if (h.op == kDsOpData) udp_send(s, *dest, kDsOpCtrl, nullptr, 0);  // our QPN, for its next datagrams
    dest->qpn = h.qpn;
    if (!dest->ah && !dest->resolving && d.resolving < kMaxResolving &&
        std::chrono::steady_clock::now() >= dest->retry_at)
      resolve(sp, *dest);
    if (h.op != kDsOpData) continue;
    if (d.queue.size() >= d.rq) {
      drop(d, kQueueFull);
      continue;
    }
    DsMessage msg;
    msg.bytes.assign(buf + h.payload, buf + got);
    msg.from = from;
    d.queue.push_back(std::move(msg));
    signal(s);
  }
}

}  // namespace openib::rsocket
