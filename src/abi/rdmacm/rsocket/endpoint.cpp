// A connection's endpoint, as rdma-core's rsockets make it (wire.hpp): one
// CQ for both queues on a completion channel of its own, an RC QP with
// every send signaled, the send ring (with kCtrlSlots 16-byte slots after
// it for control messages that do not fit inline), the target SGL and
// iomap the peer writes (remote write), and the receive ring (remote
// write); rq_size zero-length receives posted before the REQ or REP, since
// every message is a WRITE WITH IMM.
#include <fcntl.h>
#include <sys/mman.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "abi/rdmacm/rsocket/socket.hpp"

namespace openib::rsocket {

uint8_t* zeroed_pages(size_t len) {
  void* p = nullptr;
  const size_t rounded = (len + 4095) & ~size_t(4095);
  if (posix_memalign(&p, 4096, rounded)) return nullptr;
  std::memset(p, 0, rounded);
  return static_cast<uint8_t*>(p);
}

namespace {

uint16_t clamp_queue(uint32_t v, uint32_t device_max) {
  uint32_t hi = std::min<uint32_t>(kMaxQueue, device_max ? device_max : kMaxQueue);
  return uint16_t(std::max<uint32_t>(kMinQueue, std::min(v, hi)));
}

}  // namespace

int create_endpoint(Socket& s) {
  ibv_context* verbs = s.id->verbs;
  ibv_device_attr da{};
  if (ibv_query_device(verbs, &da)) da.max_qp_wr = kMaxQueue;
  s.sq_size = clamp_queue(s.sq_size, uint32_t(da.max_qp_wr));
  s.rq_size = clamp_queue(s.rq_size, uint32_t(da.max_qp_wr));
  s.cch = ibv_create_comp_channel(verbs);
  if (!s.cch) return errno ? errno : ENOMEM;
  ::fcntl(s.cch->fd, F_SETFL, ::fcntl(s.cch->fd, F_GETFL) | O_NONBLOCK);
  s.cq = ibv_create_cq(verbs, s.sq_size + s.rq_size, nullptr, s.cch, 0);
  if (!s.cq) return errno ? errno : ENOMEM;
  ibv_qp_init_attr qa{};
  qa.send_cq = qa.recv_cq = s.cq;
  qa.qp_type = IBV_QPT_RC;
  qa.sq_sig_all = 1;
  qa.cap.max_send_wr = s.sq_size;
  qa.cap.max_recv_wr = s.rq_size;
  qa.cap.max_send_sge = 2;
  qa.cap.max_recv_sge = 1;
  qa.cap.max_inline_data = s.sq_inline;
  if (rdma_create_qp(s.id, nullptr, &qa)) {
    // A device with less inline room: without inline data.
    qa.cap.max_inline_data = 0;
    if (rdma_create_qp(s.id, nullptr, &qa)) return errno ? errno : ENOMEM;
  }
  s.qp = s.id->qp;
  s.sq_inline = uint16_t(std::min<uint32_t>(qa.cap.max_inline_data, 0xFFFF));
  s.sbuf = zeroed_pages(s.sbuf_size + kCtrlSlots * sizeof(Sge));
  s.target = zeroed_pages(kSglEntries * sizeof(Sge) + s.target_iomap_size * sizeof(IomapEntry));
  s.rbuf = zeroed_pages(s.rbuf_size);
  if (!s.sbuf || !s.target || !s.rbuf) return ENOMEM;
  ibv_pd* pd = s.qp->pd;
  constexpr int local = IBV_ACCESS_LOCAL_WRITE, remote = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
  s.smr = ibv_reg_mr(pd, s.sbuf, s.sbuf_size + kCtrlSlots * sizeof(Sge), local);
  s.tmr = ibv_reg_mr(pd, s.target, kSglEntries * sizeof(Sge) + s.target_iomap_size * sizeof(IomapEntry), remote);
  s.rmr = ibv_reg_mr(pd, s.rbuf, s.rbuf_size, remote);
  if (!s.smr || !s.tmr || !s.rmr) return errno ? errno : ENOMEM;
  for (uint32_t k = 0; k < s.rq_size; ++k) {
    ibv_recv_wr wr{}, *bad = nullptr;
    wr.wr_id = kWrRecv;
    if (ibv_post_recv(s.qp, &wr, &bad)) return errno ? errno : ENOMEM;
  }
  if (ibv_req_notify_cq(s.cq, 0)) return errno ? errno : EIO;
  s.armed = true;
  s.sqe_avail = s.sq_size - kCtrlSlots;
  s.sbuf_avail = s.sbuf_size;
  s.sbuf_head = 0;
  s.rbuf_offset = 0;
  s.rbuf_free_offset = s.rbuf_size / 2;
  s.rbuf_avail = s.rbuf_size / 2;
  s.rseq_comp = s.rq_size / 2;
  s.ctrl_seqno = 0;
  s.ctrl_max_seqno = kCtrlSlots;
  s.target_sge = 0;
  return 0;
}

ConnData conn_data(const Socket& s) {
  ConnData cd{};
  cd.version = kVersion;
  cd.flags = kFlagIomap | (__BYTE_ORDER == __BIG_ENDIAN ? kFlagBigEndian : 0);
  cd.credits = htobe16(s.rq_size);
  cd.target_iomap_size = iomap_scale(s.target_iomap_size);
  cd.target_sgl = sge_to_be({uint64_t(uintptr_t(s.target)), s.tmr->rkey, kSglEntries});
  cd.data_buf = sge_to_be({uint64_t(uintptr_t(s.rbuf)), s.rmr->rkey, s.rbuf_size / 2});
  return cd;
}

// The peer's ConnData (a hostile peer chooses every field: each is only
// ever an address in the peer's own memory, checked by the peer's HCA).
int save_conn_data(Socket& s, const void* data, size_t len) {
  if (!data || len < sizeof(ConnData)) return EPROTO;
  ConnData cd;
  std::memcpy(&cd, data, sizeof cd);
  if (cd.version != kVersion) return ENOTSUP;
  Sge sgl = sge_from_be(cd.target_sgl);
  if (sgl.length == 0 || sgl.length > 64) return EPROTO;
  s.remote_sgl = sgl;
  s.remote_sge = 1 % sgl.length;
  s.peer_swapped = bool(cd.flags & kFlagBigEndian) != (__BYTE_ORDER == __BIG_ENDIAN);
  if (cd.flags & kFlagIomap)
    s.remote_iomap = {sgl.addr + sgl.length * sizeof(Sge), sgl.key, iomap_unscale(cd.target_iomap_size)};
  s.send_target[0] = sge_from_be(cd.data_buf);
  s.next_sgl = 1;
  s.sseq_comp = be16toh(cd.credits);
  return 0;
}

void destroy_endpoint(Socket& s) {
  for (IoMapping& m : s.iomaps)
    if (m.mr) ibv_dereg_mr(m.mr);
  s.iomaps.clear();
  if (s.qp && s.id) rdma_destroy_qp(s.id);
  s.qp = nullptr;
  for (ibv_mr** mr : {&s.smr, &s.tmr, &s.rmr})
    if (*mr) {
      ibv_dereg_mr(*mr);
      *mr = nullptr;
    }
  if (s.cq) ibv_destroy_cq(s.cq);
  s.cq = nullptr;
  if (s.cch) ibv_destroy_comp_channel(s.cch);
  s.cch = nullptr;
  for (uint8_t** b : {&s.sbuf, &s.target, &s.rbuf}) {
    std::free(*b);
    *b = nullptr;
  }
  s.rmsg.clear();
  s.rmsg_bytes = 0;
  for (Sge& t : s.send_target) t = {};
  s.target_iomap_size = 0;
  s.remote_iomap = {};
}

}  // namespace openib::rsocket
