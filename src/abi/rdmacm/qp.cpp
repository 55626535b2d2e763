// QPs on ids (rdma_create_qp, rdma_create_qp_ex, rdma_destroy_qp), the
// endpoint calls over synchronous ids (rdma_create_ep, rdma_get_request,
// rdma_destroy_ep) and multicast (rdma_join_multicast, rdma_leave_multicast).
#include <cstring>
#include <utility>
#include <vector>

#include "abi/rdmacm/objects.hpp"
#include "abi/verbs/objects.hpp"

using namespace openib::rdmacm;

namespace {

ibv_pd* default_pd(Channel& c) {
  std::lock_guard lk(c.mu);
  if (!c.default_pd) c.default_pd = ibv_alloc_pd(c.verbs);
  return c.default_pd;
}

// ---- own CQs -------------------------------------------------------------------
// rdma_create_qp makes the CQs its attributes leave out, as rdma-core's
// ucma_create_cqs does: one per side, each with a completion channel of its
// own and the id as cq_context (rdma_get_send_comp/recv_comp of
// <rdma/rdma_verbs.h> wait on id->send_cq_channel and assert the context),
// and hands them back in the caller's attributes (rdma-core copies the
// attributes back). A caller that reuses those attributes for its next id
// (cmtime keeps one ibv_qp_init_attr for all) therefore puts every later QP
// on the first id's CQs. rdma-core's rdma_destroy_qp of that first id then
// destroys the CQs under the others' QPs: the kernel refuses (EBUSY) and
// they stay, lost to the application. ibd refuses the same
// (docs/client-protocol.md §3.1: DESTROY_CQ of a CQ a QP uses is EBUSY), and
// our ibv_destroy_cq would forget the CQ anyway. So here an own CQ counts the
// QPs rdma_create_qp put on it and goes with the last of them, after its id
// let it go: nothing is destroyed under a QP, nothing is left behind.

ibv_cq* make_own_cq(Channel& c, rdma_cm_id* id, uint32_t size, ibv_comp_channel** channel) {
  ibv_comp_channel* ch = ibv_create_comp_channel(id->verbs);
  if (!ch) return nullptr;
  ibv_cq* cq = ibv_create_cq(id->verbs, int(size ? size : 1), id, ch, 0);
  if (!cq) {
    const int e = errno;
    ibv_destroy_comp_channel(ch);
    errno = e;
    return nullptr;
  }
  std::lock_guard lk(c.mu);
  c.own_cqs[cq].channel = ch;
  *channel = ch;
  return cq;
}

int ensure_cqs(Channel& c, rdma_cm_id* id, ibv_qp_init_attr& a) {
  if (!a.send_cq) {
    id->send_cq = make_own_cq(c, id, a.cap.max_send_wr, &id->send_cq_channel);
    if (!id->send_cq) return -1;
    a.send_cq = id->send_cq;
  }
  if (!a.recv_cq && !a.srq) {
    id->recv_cq = make_own_cq(c, id, a.cap.max_recv_wr, &id->recv_cq_channel);
    if (!id->recv_cq) return -1;
    a.recv_cq = id->recv_cq;
  }
  return 0;
}

// The QP's two sides are users of the own CQs they are on.
void use_cqs(Channel& c, const ibv_qp* qp) {
  std::lock_guard lk(c.mu);
  for (ibv_cq* cq : {qp->send_cq, qp->recv_cq})
    if (auto it = c.own_cqs.find(cq); it != c.own_cqs.end()) ++it->second.users;
}

// The id's QP `qp` (or none, when its creation failed) destroyed: its CQs
// lose a user, the id lets its own CQs go, and those without a user left
// are destroyed (each CQ before its channel, which refuses while a CQ uses it).
void drop_qp(Channel& c, rdma_cm_id* id, ibv_qp* qp) {
  ibv_cq* used[2] = {qp ? qp->send_cq : nullptr, qp ? qp->recv_cq : nullptr};
  if (qp) ibv_destroy_qp(qp);
  std::vector<std::pair<ibv_cq*, ibv_comp_channel*>> gone;
  {
    std::lock_guard lk(c.mu);
    for (ibv_cq* cq : used)
      if (auto it = c.own_cqs.find(cq); it != c.own_cqs.end()) --it->second.users;
    for (ibv_cq* cq : {id->send_cq, id->recv_cq})
      if (auto it = c.own_cqs.find(cq); it != c.own_cqs.end()) it->second.released = true;
    for (ibv_cq* cq : {used[0], used[1], id->send_cq, id->recv_cq}) {
      auto it = c.own_cqs.find(cq);
      if (it == c.own_cqs.end() || !it->second.released || it->second.users > 0) continue;
      gone.emplace_back(cq, it->second.channel);
      c.own_cqs.erase(it);
    }
  }
  id->send_cq = id->recv_cq = nullptr;
  id->send_cq_channel = id->recv_cq_channel = nullptr;
  for (auto [cq, ch] : gone) {
    ibv_destroy_cq(cq);
    ibv_destroy_comp_channel(ch);
  }
}

}  // namespace

extern "C" {

int rdma_create_qp(rdma_cm_id* id, ibv_pd* pd, ibv_qp_init_attr* attr) {
  if (!id || !attr || !id_of(id)->ch) return fail("rdma_create_qp", EINVAL, "no id or attributes");
  Id* i = id_of(id);
  if (!pd) pd = id->pd ? id->pd : default_pd(*i->ch);
  if (!pd) return fail("rdma_create_qp", errno ? errno : ENOMEM, "no default PD");
  if (pd->context != id->verbs) return fail("rdma_create_qp", EINVAL, "a PD of another context than id->verbs");
  if (id->qp) return fail("rdma_create_qp", EINVAL, "the id has a QP");
  Channel& c = *i->ch;
  const ibv_qp_init_attr given = *attr;  // a failure leaves the caller's attributes as they were
  if (ensure_cqs(c, id, *attr)) {
    const int e = errno;
    drop_qp(c, id, nullptr);
    *attr = given;
    return fail("rdma_create_qp", e ? e : ENOMEM, "CQs");
  }
  ibv_qp* qp = ibv_create_qp(pd, attr);
  if (!qp) {
    const int e = errno;
    drop_qp(c, id, nullptr);
    *attr = given;
    return fail("rdma_create_qp", e ? e : ENOMEM, "ibv_create_qp failed");
  }
  use_cqs(c, qp);
  // A UD QP goes to RTS now with the id's Q_Key; an RC/UC one is moved by
  // ibd on connect/accept (include/openib/cma.hpp).
  if (attr->qp_type == IBV_QPT_UD) {
    openib::Result<void> r = [&] {
      std::lock_guard lk(i->ch->mu);
      return i->ch->impl->init_qp(i->handle, *openib::verbs::ours<openib::verbs::Qp>(qp)->impl);
    }();
    if (!r) {
      drop_qp(c, id, qp);
      *attr = given;
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
  ibv_qp* qp = id->qp;
  id->qp = nullptr;
  if (Channel* c = id_of(id)->ch) return drop_qp(*c, id, qp);
  ibv_destroy_qp(qp);  // its channel destroyed: ibd freed the rest
}

// Own QPs (docs/cma.md "Own QPs"): an application that creates its QP with
// ibv_create_qp moves it itself, with these attributes, and names it by
// conn_param->qp_num to rdma_connect / rdma_accept (rping -q). As rdma-core:
// the state asked for is qp_attr->qp_state; every field is written.
int rdma_init_qp_attr(rdma_cm_id* id, ibv_qp_attr* qp_attr, int* qp_attr_mask) {
  if (!id || !qp_attr || !qp_attr_mask || !id_of(id)->ch)
    return fail("rdma_init_qp_attr", EINVAL, "no id, attributes or mask");
  Id* i = id_of(id);
  auto r = [&] {
    std::lock_guard lk(i->ch->mu);
    return i->ch->impl->init_qp_attr(i->handle, openib::QpState(qp_attr->qp_state));
  }();
  if (!r) return fail("rdma_init_qp_attr", r.error());
  *qp_attr = {};
  openib::verbs::from_qp_attr(r->first, *qp_attr);
  *qp_attr_mask = int(r->second);
  return 0;
}

// After CONNECT_RESPONSE and the QP at RTS: the RTU (rdma-core: EINVAL on
// an id with a QP of rdma_create_qp, which ibd moves and establishes).
int rdma_establish(rdma_cm_id* id) {
  if (!id || id->qp || !id_of(id)->ch) return fail("rdma_establish", EINVAL, "no id, or an id with its own QP");
  Id* i = id_of(id);
  std::lock_guard lk(i->ch->mu);
  if (auto r = i->ch->impl->establish(i->handle); !r) return fail("rdma_establish", r.error());
  return 0;
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
