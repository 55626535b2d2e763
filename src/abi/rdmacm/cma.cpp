// Event channels, ids and their events (rdma_cma.h): the calls go to
// libopenib's RdmaEventChannel of the channel's own context (objects.hpp
// says why one context per channel).
#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "abi/rdmacm/objects.hpp"
#include "abi/verbs/objects.hpp"
#include "common/log.hpp"

namespace openib::rdmacm {

void log_failure(const char* call, const openib::Error& e) {
  static auto log = openib::log::get("rdmacm");
  log->debug("{}: {}", call, e.str());
}

namespace {

uint16_t be16(uint16_t v) { return __builtin_bswap16(v); }
uint32_t be32(uint32_t v) { return __builtin_bswap32(v); }

void copy_gid(const openib::Gid& g, ibv_gid& out) { std::memcpy(out.raw, g.raw.data(), 16); }

// PathRecord (IBA 15.2.5.16) as <infiniband/sa.h> holds it: wire order
// for the LIDs, P_Key and flow label.
ibv_sa_path_rec to_sa_path(const openib::PathRecord& p) {
  ibv_sa_path_rec r{};
  copy_gid(p.dgid, r.dgid);
  copy_gid(p.sgid, r.sgid);
  r.dlid = be16(p.dlid);
  r.slid = be16(p.slid);
  r.flow_label = be32(p.flow_label);
  r.hop_limit = p.hop_limit;
  r.traffic_class = p.tclass;
  r.reversible = p.reversible;
  r.numb_path = p.numb_path;
  r.pkey = be16(p.pkey);
  r.sl = p.sl;
  r.mtu_selector = 2;  // exactly
  r.mtu = p.mtu;
  r.rate_selector = 2;
  r.rate = p.rate;
  r.packet_life_time_selector = 2;
  r.packet_life_time = p.packet_life_time;
  r.preference = p.preference;
  return r;
}

void to_sockaddr(const openib::IpEndpoint& ep, sockaddr_storage& out) {
  out = {};
  if (ep.family) ep.to_sockaddr(out);
}

// rdma-core's defaults for a NULL or partial rdma_conn_param.
openib::RdmaConnParam to_param(const rdma_conn_param* p) {
  openib::RdmaConnParam r;
  if (!p) return r;
  if (p->private_data && p->private_data_len) {
    auto* b = static_cast<const uint8_t*>(p->private_data);
    r.private_data.assign(b, b + p->private_data_len);
  }
  r.responder_resources = p->responder_resources;
  r.initiator_depth = p->initiator_depth;
  r.retry_count = p->retry_count;
  r.rnr_retry_count = p->rnr_retry_count;
  return r;
}

bool ud_space(const rdma_cm_id* id) { return id->ps == RDMA_PS_UDP || id->ps == RDMA_PS_IPOIB; }

Id* new_id(Channel* ch, uint32_t handle, void* context, rdma_port_space ps) {
  auto* i = new Id;
  i->ch = ch;
  i->handle = handle;
  i->id.verbs = ch->verbs;
  i->id.channel = &ch->ch;
  i->id.context = context;
  i->id.ps = ps;
  i->id.qp_type = (ps == RDMA_PS_UDP || ps == RDMA_PS_IPOIB) ? IBV_QPT_UD : IBV_QPT_RC;
  ch->ids[handle] = i;
  return i;
}

// A synchronous id's call waits for the event it causes (rdma-core's
// ucma_complete): stored in id->event; a failed one is -1 with errno.
int complete(Id& i, int rc) {
  if (rc || !i.sync) return rc;
  if (i.id.event) {
    rdma_ack_cm_event(i.id.event);
    i.id.event = nullptr;
  }
  if (rdma_get_cm_event(&i.ch->ch, &i.id.event)) return -1;
  if (int st = i.id.event->status) {
    errno = st < 0 ? -st : ECONNREFUSED;
    return -1;
  }
  return 0;
}

}  // namespace

Channel* open_channel() {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (!list || n == 0) {
    if (list) ibv_free_device_list(list);
    fail("rdma_create_event_channel", ENODEV, "no device");
    return nullptr;
  }
  ibv_device* dev = list[0];
  if (const char* want = std::getenv("OPENIB_DEVICE"); want && *want)
    for (int k = 0; k < n; ++k)
      if (std::strcmp(list[k]->name, want) == 0) dev = list[k];
  ibv_context* verbs = ibv_open_device(dev);
  ibv_free_device_list(list);
  if (!verbs) {
    fail("rdma_create_event_channel", errno ? errno : ENODEV, "ibv_open_device failed");
    return nullptr;
  }
  auto r = openib::RdmaEventChannel::open(*openib::verbs::ctx_of(verbs)->impl);
  if (!r) {
    ibv_close_device(verbs);
    fail("rdma_create_event_channel", r.error());
    return nullptr;
  }
  auto* c = new Channel;
  c->verbs = verbs;
  c->impl = std::move(*r);
  c->ch.fd = c->impl->fd();
  return c;
}

void close_channel(Channel* c) {
  {
    std::lock_guard lk(c->mu);
    c->impl.reset();  // ibd frees what ids are left
    for (auto& [h, i] : c->ids) i->ch = nullptr;
    c->ids.clear();
  }
  if (c->default_pd) ibv_dealloc_pd(c->default_pd);
  // The application's CQs, PDs and MRs on id->verbs may outlive the channel
  // (rdma-core never closes its contexts): the context goes with the last.
  openib::verbs::release_context(c->verbs);
  // The Channel itself stays (a few bytes): another thread may still be in
  // rdma_get_cm_event on it (rping's CM thread is; see there).
}

void refresh(Id& i) {
  if (!i.ch) return;
  Result<RdmaIdInfo> r = [&] {
    std::lock_guard lk(i.ch->mu);
    return i.ch->impl->query(i.handle);
  }();
  if (!r) return log_failure("query", r.error());
  rdma_addr& a = i.id.route.addr;
  to_sockaddr(r->src, a.src_storage);
  to_sockaddr(r->dst, a.dst_storage);
  copy_gid(r->sgid, a.addr.ibaddr.sgid);
  copy_gid(r->dgid, a.addr.ibaddr.dgid);
  a.addr.ibaddr.pkey = be16(r->pkey);
  i.id.port_num = r->port;
  if (r->have_path) {
    i.path = to_sa_path(r->path);
    i.id.route.path_rec = &i.path;
    i.id.route.num_paths = 1;
  }
}

}  // namespace openib::rdmacm

using namespace openib::rdmacm;

extern "C" {

rdma_event_channel* rdma_create_event_channel() {
  Channel* c = open_channel();
  return c ? &c->ch : nullptr;
}

void rdma_destroy_event_channel(rdma_event_channel* channel) {
  if (channel) close_channel(channel_of(channel));
}

int rdma_create_id(rdma_event_channel* channel, rdma_cm_id** id, void* context, rdma_port_space ps) {
  if (!id) return fail("rdma_create_id", EINVAL, "no id");
  Channel* c = channel ? channel_of(channel) : open_channel();
  if (!c) return -1;
  openib::Result<uint32_t> h = [&] {
    std::lock_guard lk(c->mu);
    return c->impl->create_id(openib::RdmaPortSpace(ps));
  }();
  if (!h) {
    if (!channel) close_channel(c);
    return fail("rdma_create_id", h.error());
  }
  std::lock_guard lk(c->mu);
  Id* i = new_id(c, *h, context, ps);
  i->sync = !channel;
  *id = &i->id;
  return 0;
}

int rdma_destroy_id(rdma_cm_id* id) {
  if (!id) return fail("rdma_destroy_id", EINVAL, "no id");
  Id* i = id_of(id);
  if (i->id.event) rdma_ack_cm_event(i->id.event);
  if (Channel* c = i->ch) {
    {
      std::lock_guard lk(c->mu);
      c->ids.erase(i->handle);
      if (auto r = c->impl->destroy_id(i->handle); !r) log_failure("rdma_destroy_id", r.error());
    }
    if (i->sync) close_channel(c);
  }
  delete i;
  return 0;
}

int rdma_bind_addr(rdma_cm_id* id, sockaddr* addr) {
  if (!id || !addr || !id_of(id)->ch) return fail("rdma_bind_addr", EINVAL, "no id or address");
  Id* i = id_of(id);
  openib::Result<openib::IpEndpoint> r = [&] {
    std::lock_guard lk(i->ch->mu);
    return i->ch->impl->bind_addr(i->handle, openib::IpEndpoint::from_sockaddr(addr));
  }();
  if (!r) return fail("rdma_bind_addr", r.error());
  refresh(*i);
  return 0;
}

int rdma_resolve_addr(rdma_cm_id* id, sockaddr* src, sockaddr* dst, int timeout_ms) {
  if (!id || !dst || !id_of(id)->ch) return fail("rdma_resolve_addr", EINVAL, "no id or destination");
  Id* i = id_of(id);
  const auto d = openib::IpEndpoint::from_sockaddr(dst);
  openib::IpEndpoint s;
  if (src) s = openib::IpEndpoint::from_sockaddr(src);
  openib::Result<void> r = [&] {
    std::lock_guard lk(i->ch->mu);
    return i->ch->impl->resolve_addr(i->handle, src ? &s : nullptr, d, timeout_ms > 0 ? timeout_ms : 2000);
  }();
  if (!r) return fail("rdma_resolve_addr", r.error());
  return complete(*i, 0);
}

int rdma_resolve_route(rdma_cm_id* id, int timeout_ms) {
  if (!id || !id_of(id)->ch) return fail("rdma_resolve_route", EINVAL, "no id");
  Id* i = id_of(id);
  openib::Result<void> r = [&] {
    std::lock_guard lk(i->ch->mu);
    return i->ch->impl->resolve_route(i->handle, timeout_ms > 0 ? timeout_ms : 2000);
  }();
  if (!r) return fail("rdma_resolve_route", r.error());
  return complete(*i, 0);
}

int rdma_listen(rdma_cm_id* id, int backlog) {
  if (!id || !id_of(id)->ch) return fail("rdma_listen", EINVAL, "no id");
  Id* i = id_of(id);
  std::lock_guard lk(i->ch->mu);
  if (auto r = i->ch->impl->listen(i->handle, backlog); !r) return fail("rdma_listen", r.error());
  return 0;
}

// The QP given to connect/accept: the id's, or (conn_param->qp_num) one
// made by rdma_create_qp on an id of this channel. None: the application's
// own QP, named by conn_param->qp_num, which it moves itself (own_qp).
static openib::Qp* qp_for(Id& i, const rdma_conn_param* p) {
  ibv_qp* qp = i.id.qp;
  if (!qp && p)
    for (auto& [h, o] : i.ch->ids)
      if (o->id.qp && o->id.qp->qp_num == p->qp_num) qp = o->id.qp;
  if (!qp || qp->context != i.ch->verbs) return nullptr;
  return openib::verbs::ours<openib::verbs::Qp>(qp)->impl.get();
}

int rdma_connect(rdma_cm_id* id, rdma_conn_param* conn_param) {
  if (!id || !id_of(id)->ch) return fail("rdma_connect", EINVAL, "no id");
  Id* i = id_of(id);
  openib::Result<void> r = [&]() -> openib::Result<void> {
    std::lock_guard lk(i->ch->mu);
    openib::Qp* qp = qp_for(*i, conn_param);
    if (qp) return i->ch->impl->connect(i->handle, *qp, to_param(conn_param));
    if (conn_param && conn_param->qp_num && !ud_space(id))
      return i->ch->impl->connect_own_qp(i->handle, conn_param->qp_num, to_param(conn_param));
    return openib::err(EINVAL, "no QP: neither the id's nor conn_param->qp_num");
  }();
  if (!r) return fail("rdma_connect", r.error());
  return complete(*i, 0);
}

int rdma_accept(rdma_cm_id* id, rdma_conn_param* conn_param) {
  if (!id || !id_of(id)->ch) return fail("rdma_accept", EINVAL, "no id");
  Id* i = id_of(id);
  if (i->id.event) {  // rdma_get_request's event
    rdma_ack_cm_event(i->id.event);
    i->id.event = nullptr;
  }
  openib::Result<void> r = [&]() -> openib::Result<void> {
    std::lock_guard lk(i->ch->mu);
    openib::Qp* qp = qp_for(*i, conn_param);
    if (ud_space(id) || qp) return i->ch->impl->accept(i->handle, ud_space(id) ? nullptr : qp, to_param(conn_param));
    if (conn_param && conn_param->qp_num)
      return i->ch->impl->accept_own_qp(i->handle, conn_param->qp_num, to_param(conn_param));
    return openib::err(EINVAL, "no QP: neither the id's nor conn_param->qp_num");
  }();
  if (!r) return fail("rdma_accept", r.error());
  return complete(*i, 0);
}

int rdma_reject(rdma_cm_id* id, const void* private_data, uint8_t len) {
  if (!id || !id_of(id)->ch) return fail("rdma_reject", EINVAL, "no id");
  Id* i = id_of(id);
  std::span<const uint8_t> pd(static_cast<const uint8_t*>(private_data), private_data ? len : 0);
  std::lock_guard lk(i->ch->mu);
  if (auto r = i->ch->impl->reject(i->handle, pd); !r) return fail("rdma_reject", r.error());
  return 0;
}

int rdma_disconnect(rdma_cm_id* id) {
  if (!id || !id_of(id)->ch) return fail("rdma_disconnect", EINVAL, "no id");
  Id* i = id_of(id);
  std::lock_guard lk(i->ch->mu);
  if (auto r = i->ch->impl->disconnect(i->handle); !r) return fail("rdma_disconnect", r.error());
  return 0;
}

int rdma_get_cm_event(rdma_event_channel* channel, rdma_cm_event** event) {
  if (!channel || !event) return fail("rdma_get_cm_event", EINVAL, "no channel or event");
  Channel* c = channel_of(channel);
  const int fl = ::fcntl(c->ch.fd, F_GETFL);
  const bool nonblock = fl >= 0 && (fl & O_NONBLOCK);
  for (;;) {
    // Waits outside the lock: other threads keep using the channel.
    pollfd p{c->ch.fd, POLLIN, 0};
    if (!nonblock && ::poll(&p, 1, -1) < 0 && errno != EINTR) return fail("rdma_get_cm_event", errno, "poll");
    std::unique_lock lk(c->mu);
    if (!c->impl) {
      if (nonblock) return fail("rdma_get_cm_event", EBADF, "channel destroyed");
      // Destroyed by another thread: rping's CM thread comes back for the
      // next event once it acked the last, while its main thread destroys
      // the id (rdma-core's waits for that ack) and then the channel. With
      // rdma-core that thread is then blocked in read() on the fd; so here.
      lk.unlock();
      for (;;) ::pause();
    }
    auto r = c->impl->get_event(0);
    if (!r) {
      if (r.error().code != ETIMEDOUT) return fail("rdma_get_cm_event", r.error());
      if (nonblock) {
        errno = EAGAIN;
        return -1;
      }
      continue;
    }
    Id* i = nullptr;
    if (r->type == openib::RdmaCmEventType::kConnectRequest) {
      auto l = c->ids.find(r->listen_id);
      if (l == c->ids.end()) {  // its listener destroyed since: refused, not left to time out
        if (auto rj = c->impl->reject(r->id, {}); !rj) log_failure("rdma_get_cm_event", rj.error());
        if (auto d = c->impl->destroy_id(r->id); !d) log_failure("rdma_get_cm_event", d.error());
        continue;
      }
      i = new_id(c, r->id, l->second->id.context, l->second->id.ps);
      i->id.qp_type = l->second->id.qp_type;
    } else {
      auto it = c->ids.find(r->id);
      if (it == c->ids.end()) continue;  // destroyed since
      i = it->second;
    }
    lk.unlock();
    refresh(*i);
    auto* e = new Event;
    e->private_data = std::move(r->private_data);
    rdma_cm_event& ev = e->ev;
    ev.id = &i->id;
    if (r->listen_id) {
      std::lock_guard lk2(c->mu);
      if (auto l = c->ids.find(r->listen_id); l != c->ids.end()) ev.listen_id = &l->second->id;
    }
    ev.event = rdma_cm_event_type(r->type);
    ev.status = r->status;
    const void* pdata = e->private_data.empty() ? nullptr : e->private_data.data();
    const auto plen = uint8_t(std::min<size_t>(e->private_data.size(), 255));
    const bool mc = r->type == openib::RdmaCmEventType::kMulticastJoin ||
                    r->type == openib::RdmaCmEventType::kMulticastError;
    if (ud_space(&i->id) || mc) {
      ev.param.ud.private_data = pdata;
      ev.param.ud.private_data_len = plen;
      ev.param.ud.ah_attr = openib::verbs::from_av(r->ah);
      ev.param.ud.qp_num = r->qp_num;
      ev.param.ud.qkey = r->qkey;
      if (mc && !i->groups.empty()) ev.param.ud.private_data = i->groups.begin()->second;
    } else {
      ev.param.conn.private_data = pdata;
      ev.param.conn.private_data_len = plen;
      ev.param.conn.responder_resources = r->responder_resources;
      ev.param.conn.initiator_depth = r->initiator_depth;
      ev.param.conn.rnr_retry_count = r->rnr_retry_count;
      ev.param.conn.srq = r->srq;
      ev.param.conn.qp_num = r->qp_num;
    }
    *event = &ev;
    return 0;
  }
}

int rdma_ack_cm_event(rdma_cm_event* event) {
  if (!event) return fail("rdma_ack_cm_event", EINVAL, "no event");
  delete reinterpret_cast<Event*>(event);
  return 0;
}

const char* rdma_event_str(rdma_cm_event_type event) {
  if (unsigned(event) > unsigned(RDMA_CM_EVENT_TIMEWAIT_EXIT)) return "UNKNOWN EVENT";
  return openib::rdma_event_str(openib::RdmaCmEventType(event));
}

// rdma_get_local_addr and rdma_get_peer_addr are <rdma/rdma_cma.h>'s
// inlines: they read id->route.addr, which refresh() keeps.
static __be16 port_of(const sockaddr* sa) {
  if (sa->sa_family == AF_INET) return reinterpret_cast<const sockaddr_in*>(sa)->sin_port;
  if (sa->sa_family == AF_INET6) return reinterpret_cast<const sockaddr_in6*>(sa)->sin6_port;
  return 0;
}
__be16 rdma_get_src_port(rdma_cm_id* id) { return port_of(&id->route.addr.src_addr); }
__be16 rdma_get_dst_port(rdma_cm_id* id) { return port_of(&id->route.addr.dst_addr); }

int rdma_migrate_id(rdma_cm_id* id, rdma_event_channel* channel) {
  if (!id) return fail("rdma_migrate_id", EINVAL, "no id");
  if (channel && channel == id->channel) return 0;
  // Another channel has another context (objects.hpp): the id's handle
  // names nothing there.
  return fail("rdma_migrate_id", ENOSYS, "ids cannot move to another channel's context");
}

int rdma_set_option(rdma_cm_id* id, int level, int optname, void* optval, size_t optlen) {
  if (!id || !optval) return fail("rdma_set_option", EINVAL, "no id or value");
  if (level == RDMA_OPTION_ID) {
    switch (optname) {
      case RDMA_OPTION_ID_TOS:
      case RDMA_OPTION_ID_ACK_TIMEOUT:
        if (optlen != sizeof(uint8_t)) return fail("rdma_set_option", EINVAL, "bad length");
        return 0;  // hints: the SA's path gives the class and timeouts
      case RDMA_OPTION_ID_REUSEADDR:
      case RDMA_OPTION_ID_AFONLY:
        if (optlen != sizeof(int)) return fail("rdma_set_option", EINVAL, "bad length");
        return 0;
      default: break;
    }
  } else if (level == RDMA_OPTION_IB && optname == RDMA_OPTION_IB_PATH) {
    return fail("rdma_set_option", ENOSYS, "paths set by the application");
  }
  return fail("rdma_set_option", ENOSYS, "unknown option");
}

int rdma_notify(rdma_cm_id* id, ibv_event_type) {
  // A hint that the QP saw a first receive (the CM's RTU may be lost): ibd
  // moves the QP itself.
  return id ? 0 : fail("rdma_notify", EINVAL, "no id");
}

}  // extern "C"
