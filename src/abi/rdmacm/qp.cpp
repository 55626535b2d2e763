// QPs on ids (rdma_create_qp, rdma_create_qp_ex, rdma_destroy_qp), the
// endpoint calls over synchronous ids (rdma_create_ep, rdma_get_request,
// rdma_destroy_ep) and multicast (rdma_join_multicast, rdma_leave_multicast).
#include <cstring>

#include "abi/rdmacm/objects.hpp"
#include "abi/verbs/objects.hpp"

using namespace openib::rdmacm;

namespace {

ibv_pd* default_pd(Channel& c) {
  std::lock_guard lk(c.mu);
  if (!c.default_pd) c.default_pd = ibv_alloc_pd(c.verbs);
  return c.default_pd;
}

// rdma-core makes the CQs an attribute leaves out (id->send_cq, recv_cq).
int ensure_cqs(rdma_cm_id* id, ibv_qp_init_attr& a) {
  if (!a.send_cq) {
    id->send_cq = ibv_create_cq(id->verbs, int(a.cap.max_send_wr ? a.cap.max_send_wr : 1), nullptr, nullptr, 0);
    if (!id->send_cq) return -1;
    a.send_cq = id->send_cq;
  }
  if (!a.recv_cq && !a.srq) {
    id->recv_cq = ibv_create_cq(id->verbs, int(a.cap.max_recv_wr ? a.cap.max_recv_wr : 1), nullptr, nullptr, 0);
    if (!id->recv_cq) return -1;
    a.recv_cq = id->recv_cq;
  }
  return 0;
}

void destroy_own_cqs(rdma_cm_id* id) {
  if (id->send_cq) ibv_destroy_cq(id->send_cq);
  if (id->recv_cq) ibv_destroy_cq(id->recv_cq);
  id->send_cq = id->recv_cq = nullptr;
}

}  // namespace

extern "C" {

int rdma_create_qp(rdma_cm_id* id, ibv_pd* pd, ibv_qp_init_attr* attr) {
  if (!id || !attr || !id_of(id)->ch) return fail("rdma_create_qp", EINVAL, "no id or attributes");
  Id* i = id_of(id);
  if (!pd) pd = id->pd ? id->pd : default_pd(*i->ch);
  if (!pd) return fail("rdma_create_qp", errno ? errno : ENOMEM, "no default PD");
  if (pd->context != id->verbs) return fail("rdma_create_qp", EINVAL, "a PD of another context than id->verbs");
  if (ensure_cqs(id, *attr)) {
    const int e = errno;
    destroy_own_cqs(id);
    return fail("rdma_create_qp", e ? e : ENOMEM, "CQs");
  }
  ibv_qp* qp = ibv_create_qp(pd, attr);
  if (!qp) {
    const int e = errno;
    destroy_own_cqs(id);
    return fail("rdma_create_qp", e ? e : ENOMEM, "ibv_create_qp failed");
  }
  // A UD QP goes to RTS now with the id's Q_Key; an RC/UC one is moved by
  // ibd on connect/accept (include/openib/cma.hpp).
  if (attr->qp_type == IBV_QPT_UD) {
    openib::Result<void> r = [&] {
      std::lock_guard lk(i->ch->mu);
      return i->ch->impl->init_qp(i->handle, *openib::verbs::ours<openib::verbs::Qp>(qp)->impl);
    }();
    if (!r) {
      ibv_destroy_qp(qp);
      destroy_own_cqs(id);
      return fail("rdma_create_qp", r.error());
    }
    qp->state = IBV_QPS_RTS;
  }
  id->qp = qp;
  id->qp_type = attr->qp_type;
  id->pd = pd;
  return 0;
}

int rdma_create_qp_ex(rdma_cm_id* id, ibv_qp_init_attr_ex* attr) {
  if (!id || !attr) return fail("rdma_create_qp_ex", EINVAL, "no id or attributes");
  const uint32_t known = IBV_QP_INIT_ATTR_PD;
  if (attr->comp_mask & ~known) return fail("rdma_create_qp_ex", ENOSYS, "extended QP attributes");
  ibv_qp_init_attr a{};
  a.qp_context = attr->qp_context;
  a.send_cq = attr->send_cq;
  a.recv_cq = attr->recv_cq;
  a.srq = attr->srq;
  a.cap = attr->cap;
  a.qp_type = attr->qp_type;
  a.sq_sig_all = attr->sq_sig_all;
  const int rc = rdma_create_qp(id, (attr->comp_mask & IBV_QP_INIT_ATTR_PD) ? attr->pd : nullptr, &a);
  if (rc == 0) attr->cap = a.cap;
  return rc;
}

void rdma_destroy_qp(rdma_cm_id* id) {
  if (!id || !id->qp) return;
  ibv_destroy_qp(id->qp);
  id->qp = nullptr;
  destroy_own_cqs(id);
}

int rdma_init_qp_attr(rdma_cm_id* id, ibv_qp_attr*, int*) {
  // ibd moves the QP of a connection itself (include/openib/cma.hpp): an
  // application that moves its own QP is not supported.
  return fail("rdma_init_qp_attr", id ? ENOSYS : EINVAL, "QPs moved by the application");
}

int rdma_establish(rdma_cm_id* id) {
  return fail("rdma_establish", id ? ENOSYS : EINVAL, "QPs moved by the application");
}

int rdma_create_ep(rdma_cm_id** id, rdma_addrinfo* res, ibv_pd* pd, ibv_qp_init_attr* qp_init_attr) {
  if (!id || !res) return fail("rdma_create_ep", EINVAL, "no id or address");
  rdma_cm_id* cm = nullptr;
  if (rdma_create_id(nullptr, &cm, nullptr, rdma_port_space(res->ai_port_space ? res->ai_port_space : RDMA_PS_TCP)))
    return -1;
  int rc = 0;
  if (res->ai_flags & RAI_PASSIVE) {
    rc = res->ai_src_addr ? rdma_bind_addr(cm, res->ai_src_addr) : fail("rdma_create_ep", EINVAL, "no address");
  } else {
    rc = rdma_resolve_addr(cm, res->ai_src_addr, res->ai_dst_addr, 2000);
    if (rc == 0) rc = rdma_resolve_route(cm, 2000);
  }
  if (rc == 0 && pd) cm->pd = pd;
  if (rc == 0 && qp_init_attr && !(res->ai_flags & RAI_PASSIVE)) rc = rdma_create_qp(cm, pd, qp_init_attr);
  if (rc) {
    const int e = errno;
    rdma_destroy_id(cm);
    errno = e;
    return -1;
  }
  *id = cm;
  return 0;
}

void rdma_destroy_ep(rdma_cm_id* id) {
  if (!id) return;
  rdma_destroy_qp(id);
  rdma_destroy_id(id);
}

int rdma_get_request(rdma_cm_id* listen, rdma_cm_id** id) {
  if (!listen || !id || !id_of(listen)->sync) return fail("rdma_get_request", EINVAL, "not a synchronous listener");
  for (;;) {
    rdma_cm_event* ev = nullptr;
    if (rdma_get_cm_event(listen->channel, &ev)) return -1;
    if (ev->event != RDMA_CM_EVENT_CONNECT_REQUEST) {
      rdma_ack_cm_event(ev);
      continue;
    }
    rdma_cm_id* cm = ev->id;
    cm->event = ev;  // acked by rdma_accept or rdma_destroy_id
    if (listen->pd) cm->pd = listen->pd;
    *id = cm;
    return 0;
  }
}

int rdma_create_srq(rdma_cm_id* id, ibv_pd*, ibv_srq_init_attr*) {
  return fail("rdma_create_srq", id ? ENOSYS : EINVAL, "SRQs on ids");
}
int rdma_create_srq_ex(rdma_cm_id* id, ibv_srq_init_attr_ex*) {
  return fail("rdma_create_srq_ex", id ? ENOSYS : EINVAL, "SRQs on ids");
}
void rdma_destroy_srq(rdma_cm_id*) {}

static std::vector<uint8_t> group_key(const sockaddr* addr) {
  const auto* b = reinterpret_cast<const uint8_t*>(addr);
  return {b, b + (addr->sa_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in))};
}

int rdma_join_multicast(rdma_cm_id* id, sockaddr* addr, void* context) {
  if (!id || !addr || !id_of(id)->ch || !id->qp) return fail("rdma_join_multicast", EINVAL, "no id, address or QP");
  Id* i = id_of(id);
  std::lock_guard lk(i->ch->mu);
  auto r = i->ch->impl->join_multicast(i->handle, openib::IpEndpoint::from_sockaddr(addr),
                                       *openib::verbs::ours<openib::verbs::Qp>(id->qp)->impl);
  if (!r) return fail("rdma_join_multicast", r.error());
  i->groups[group_key(addr)] = context;
  return 0;
}

int rdma_join_multicast_ex(rdma_cm_id* id, rdma_cm_join_mc_attr_ex* attr, void* context) {
  if (!attr || !(attr->comp_mask & RDMA_CM_JOIN_MC_ATTR_ADDRESS))
    return fail("rdma_join_multicast_ex", EINVAL, "no address");
  if ((attr->comp_mask & RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS) && attr->join_flags != RDMA_MC_JOIN_FLAG_FULLMEMBER)
    return fail("rdma_join_multicast_ex", ENOSYS, "send-only membership");
  return rdma_join_multicast(id, attr->addr, context);
}

int rdma_leave_multicast(rdma_cm_id* id, sockaddr* addr) {
  if (!id || !addr || !id_of(id)->ch) return fail("rdma_leave_multicast", EINVAL, "no id or address");
  Id* i = id_of(id);
  std::lock_guard lk(i->ch->mu);
  if (auto r = i->ch->impl->leave_multicast(i->handle, openib::IpEndpoint::from_sockaddr(addr)); !r)
    return fail("rdma_leave_multicast", r.error());
  i->groups.erase(group_key(addr));
  return 0;
}

}  // extern "C"
