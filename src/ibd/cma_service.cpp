// ibd's RDMA CM: see cma_service.hpp and docs/cma.md "In ibd".
#include "ibd/cma_service.hpp"

#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <boost/asio/post.hpp>
#include <cstring>
#include <nlohmann/json.hpp>

#include "arp/group_membership.hpp"
#include "arp/neigh_lookup.hpp"
#include "hca/gid_find.hpp"
#include "common/log.hpp"
#include "hca/port_caps.hpp"
#include "ibd/qp_attr_convert.hpp"
#include "sa/local_route.hpp"
#include "sa/mcmember_record.hpp"
#include "sa/path_record.hpp"

namespace openib::ibd {

namespace {

using T = proto::CmaEventType;
using S = proto::CmaState;

// Linux's rdma_cm: CMA_CM_RESPONSE_TIMEOUT, CMA_MAX_CM_RETRIES.
constexpr uint8_t kCmResponseTimeout = 20, kMaxCmRetries = 15;
constexpr uint32_t kDefaultBacklog = 1024;
constexpr uint16_t kRejConsumer = 28;  // IBA 12.6.7.2
constexpr uint8_t kSidrReject = 2;     // IBA 12.11.2

cma::Addr from_proto(const proto::CmaAddr& a) {
  cma::Addr c;
  c.family = a.family;
  c.port = a.port;
  c.addr = a.addr;
  return c;
}
proto::CmaAddr to_proto(const cma::Addr& a) {
  proto::CmaAddr p;
  p.family = a.family;
  p.port = a.port;
  p.addr = a.addr;
  return p;
}
arp::Ip to_ip(const cma::Addr& a, uint32_t scope = 0) {
  arp::Ip ip;
  ip.family = a.family;
  ip.bytes = a.addr;
  ip.scope_id = scope;
  return ip;
}
bool is_multicast(const cma::Addr& a) {
  return (a.family == AF_INET && (a.addr[0] & 0xF0) == 0xE0) || (a.family == AF_INET6 && a.addr[0] == 0xFF);
}
bool valid_ps(uint16_t ps) {
  return ps == cma::kPsTcp || ps == cma::kPsUdp || ps == cma::kPsIpoib || ps == cma::kPsIb;
}
bool ud_ps(uint16_t ps) { return ps == cma::kPsUdp || ps == cma::kPsIpoib; }
uint64_t owner_key(uint32_t client, uint32_t handle) { return (uint64_t{client} << 32) | handle; }
const char* state_name(S s) {
  switch (s) {
    case S::kIdle: return "idle";
    case S::kAddrQuery: return "addr_query";
    case S::kAddrResolved: return "addr_resolved";
    case S::kRouteQuery: return "route_query";
    case S::kRouteResolved: return "route_resolved";
    case S::kConnect: return "connect";
    case S::kDisconnect: return "disconnect";
    case S::kAddrBound: return "addr_bound";
    case S::kListen: return "listen";
    case S::kDeviceRemoval: return "device_removal";
    case S::kDestroying: return "destroying";
  }
  return "?";
}
Result<void> check_private(uint8_t len, size_t max, const char* what) {
  if (len > max) return err(EINVAL, "{} carries at most {} bytes of private data, not {}", what, max, len);
  return ok();
}
void copy_private(proto::CmPrivate& to, uint8_t& to_len, const uint8_t* from, size_t n) {
  n = std::min(n, to.size());
  if (n) std::memcpy(to.data(), from, n);
  to_len = static_cast<uint8_t>(n);
}
// The IB CM event's private data into the RDMA CM event.
void with_private(proto::CmaEventMsg& m, const proto::CmEventMsg& e) {
  copy_private(m.private_data, m.private_len, e.private_data.data(), e.private_len);
}

}  // namespace

CmaService::CmaService(boost::asio::io_context& io, hca::Device& hca, CmService& cm, SaService& sa, uint8_t num_ports)
    : io_(io), hca_(hca), cm_(cm), sa_(sa), num_ports_(num_ports) {}

CmaService::~CmaService() { *alive_ = false; }

void CmaService::set_resolver(arp::Resolver* r) {
  arp_ = r;
  if (arp_)
    arp_->set_addr_change_handler(
        [this](int ifindex, const arp::Ip& a, bool added) { address_changed(ifindex, a, added); });
}

Result<void> CmaService::start() {
  CmService::QpOps ops;
  ops.lookup = [this](uint32_t, uint32_t tok) -> Result<CmService::QpInfo> {
    auto t = tokens_.find(tok);
    if (t == tokens_.end()) return err(ENOENT, "no QP token {}", tok);
    if (!qp_.lookup) return err(ENOSYS, "no QP lookup");
    return qp_.lookup(t->second.first, t->second.second);
  };
  ops.modify = [this](uint32_t, uint32_t tok, uint32_t mask, const hca::QpAttr& a, Done done) {
    auto t = tokens_.find(tok);
    if (t == tokens_.end()) return done(err(ENOENT, "no QP token {}", tok));
    if (!qp_.modify) return done(err(ENOSYS, "no QP modify"));
    qp_.modify(t->second.first, t->second.second, mask, a, std::move(done));
  };
  ops.modify_chain = [this](uint32_t, uint32_t tok, std::vector<hca::QpChange> steps, Done done) {
    auto t = tokens_.find(tok);
    if (t == tokens_.end()) return done(err(ENOENT, "no QP token {}", tok));
    if (!qp_.modify_chain) return done(err(ENOSYS, "no QP modify"));
    qp_.modify_chain(t->second.first, t->second.second, std::move(steps), std::move(done));
  };
  return cm_.open_internal(kCmaCmOwner, std::move(ops), [this](const proto::CmEventMsg& e) { on_cm_event(e); });
}

// ---- sessions, ids, events -------------------------------------------------

Result<UniqueFd> CmaService::open(uint32_t client, uid_t uid) {
  if (sessions_.count(client)) return err(EBUSY, "this connection has its RDMA CM socket already");
  OPENIB_TRY_ASSIGN(auto pair, EventSocket::open(io_, max_queued_, EventCharge{event_budget_, client, uid}));
  Session s;
  s.uid = uid;
  s.events = std::move(pair.first);
  sessions_.emplace(client, std::move(s));
  ++counters_.opens;
  return std::move(pair.second);
}

Result<CmaService::Id*> CmaService::find(uint32_t client, uint32_t handle) {
  auto s = sessions_.find(client);
  if (s == sessions_.end()) return err(ENOTCONN, "CMA_OPEN first");
  auto it = s->second.ids.find(handle);
  if (it == s->second.ids.end()) return err(ENOENT, "no RDMA CM id {}", handle);
  return &it->second;
}

CmaService::Id* CmaService::find_id(uint32_t client, uint32_t handle) {
  auto r = find(client, handle);
  return r ? *r : nullptr;
}

CmaService::Id* CmaService::waiting(uint32_t client, uint32_t handle, uint64_t op, proto::CmaState state) {
  Id* i = find_id(client, handle);
  return i && i->op == op && i->state == state ? i : nullptr;
}

size_t CmaService::ids_of(uint32_t client) const {
  auto it = sessions_.find(client);
  return it == sessions_.end() ? 0 : it->second.ids.size();
}

bool CmaService::emit_to(uint32_t client, proto::CmaEventMsg m) {
  auto it = sessions_.find(client);
  if (it == sessions_.end() || !it->second.events) return false;
  ++counters_.events;
  // No switch: clang 14's ASan reports the logger temporary of a case
  // that returns as used after its scope.
  const EventSocket::Push p = it->second.events->push(proto::encode(m));
  if (p == EventSocket::Push::kOk) return true;
  if (p == EventSocket::Push::kOverrun) {
    ++counters_.sessions_overrun;
    auto log = log::get("cma");
    log->warn("client {}: more than {} RDMA CM events (or its uid's event bytes) unread; its event socket is closed",
              client, max_queued_);
  }
  return false;
}

bool CmaService::emit_ok(const Id& id, proto::CmaEventMsg m) {
  m.id = id.handle;
  m.port = id.port;
  if (!m.src.family) m.src = to_proto(id.src);
  if (!m.dst.family) m.dst = to_proto(id.dst);
  return emit_to(id.client, m);
}

// Every id, the client's own (CMA_CREATE_ID) or a connect request's for
// its listener, is charged to the session's client and uid (finding 4 of
// issue 29: no more than --client-max-cma-ids / --uid-max-cma-ids).
Result<uint32_t> CmaService::new_id(Session& s, uint32_t client, uint16_t ps) {
  OPENIB_TRY(ids_budget_.take(client, s.uid));
  uint32_t h = s.next_handle++;
  while (h == 0 || s.ids.count(h)) h = s.next_handle++;
  Id id;
  id.client = client;
  id.handle = h;
  id.ps = ps;
  s.ids.emplace(h, std::move(id));
  return h;
}

void CmaService::erase_id(uint32_t client, uint32_t handle) {
  auto s = sessions_.find(client);
  if (s == sessions_.end() || !s->second.ids.erase(handle)) return;
  ids_budget_.give(client, s->second.uid);
}

Result<uint32_t> CmaService::create_id(uint32_t client, const proto::CmaCreateIdReq& r) {
  auto s = sessions_.find(client);
  if (s == sessions_.end()) return err(ENOTCONN, "CMA_OPEN first");
  if (!valid_ps(r.ps)) return err(EPROTONOSUPPORT, "port space {:#06x} (TCP 0x0106, UDP 0x0111, IPoIB 0x0002, IB 0x013f)", r.ps);
  return new_id(s->second, client, r.ps);
}

uint32_t CmaService::qkey_of(const Id& id) const {
  if (id.ps == cma::kPsIpoib) return ipoib_qkey_ ? ipoib_qkey_() : 0;
  return cma::kUdpQkey;
}

uint32_t CmaService::token(uint32_t client, uint32_t qp) {
  if (auto it = token_of_.find({client, qp}); it != token_of_.end()) return it->second;
  uint32_t t = next_token_++;
  while (t == 0 || tokens_.count(t)) t = next_token_++;
  tokens_[t] = {client, qp};
  token_of_[{client, qp}] = t;
  return t;
}

// ---- binding and resolution --------------------------------------------------

Result<void> CmaService::do_bind(Id& id, const cma::Addr& a, bool privileged) {
  if (a.family != AF_INET && a.family != AF_INET6) return err(EAFNOSUPPORT, "address family {}", a.family);
  uint8_t port = 0;
  if (!a.any()) {
    if (is_multicast(a)) return err(EADDRNOTAVAIL, "{} is a multicast address", a.str());
    std::optional<arp::Link> link;
    if (arp_) link = arp_->link_of_address(to_ip(a));
    if (!link && !cma::is_loopback(a)) return err(EADDRNOTAVAIL, "{} is no address of an IPoIB interface of this ibd", a.str());
    // A loopback address takes port 1 (rdma_cm's loopback binding takes a device's first port).
    port = link ? link->port : 1;
    if (link) {
      // RoCE: the bound address's own GID (its GID table entry, docs/arp.md
      // "RoCE destinations"), not the port's GID 0.
      id.sgid = link->ethernet ? arp::gid_of_ip(to_ip(a)) : link->gid;
      id.pkey = link->pkey;
    }
  }
  OPENIB_TRY_ASSIGN(uint16_t p, ports_.bind(owner_key(id.client, id.handle), id.ps, a, privileged));
  id.src = a;
  id.src.port = p;
  id.bound = true;
  if (port) id.port = port;
  id.state = S::kAddrBound;
  return ok();
}

Result<proto::CmaAddrRep> CmaService::bind(uint32_t client, const proto::CmaAddrReq& r, bool privileged) {
  OPENIB_TRY_ASSIGN(Id * id, find(client, r.id));
  if (id->state != S::kIdle || id->bound) return err(EINVAL, "id {} is bound already", r.id);
  OPENIB_TRY(do_bind(*id, from_proto(r.addr), privileged));
  proto::CmaAddrRep rep;
  rep.addr = to_proto(id->src);
  return rep;
}

Result<void> CmaService::resolve_addr(uint32_t client, const proto::CmaResolveAddrReq& r, bool privileged) {
  OPENIB_TRY_ASSIGN(Id * id, find(client, r.id));
  if (id->state != S::kIdle && id->state != S::kAddrBound && id->state != S::kAddrResolved)
    return err(EINVAL, "id {} is {}: resolve_addr wants it idle or bound", r.id, state_name(id->state));
  cma::Addr dst = from_proto(r.dst);
  if (dst.family != AF_INET && dst.family != AF_INET6) return err(EAFNOSUPPORT, "destination family {}", dst.family);
  if (dst.any()) return err(EINVAL, "the destination is a wildcard address");
  cma::Addr src = from_proto(r.src);
  if (!id->bound) {
    cma::Addr b = src.family ? src : cma::Addr{};
    if (!b.family) b.family = dst.family;
    if (b.family != dst.family) return err(EINVAL, "source and destination families differ");
    OPENIB_TRY(do_bind(*id, b, privileged));
  }
  id->dst = dst;
  id->state = S::kAddrQuery;
  const uint64_t op = ++id->op;
  auto answer = [this, alive = std::weak_ptr<bool>(alive_), client, h = r.id, op](Result<arp::Resolved> res) {
    if (alive.expired()) return;
    Id* i = waiting(client, h, op, S::kAddrQuery);
    if (!i) return;
    proto::CmaEventMsg m;
    if (!res) {
      i->state = S::kAddrBound;
      m.type = static_cast<uint8_t>(T::kAddrError);
      m.status = -res.error().code;
      log::get("cma")->debug("client {} id {}: address {} not resolved: {}", client, h, i->dst.str(),
                             res.error().message);
      return emit(*i, m);
    }
    i->port = res->port;
    i->sgid = res->sgid;
    i->dgid = res->dgid;
    i->pkey = res->pkey;
    i->dmac = res->dmac;
    if (is_multicast(i->dst) && !res->ethernet)  // IB: the group's MGID in the id's port space (cma_set_mgid)
      if (auto mg = cma::mgid_for(i->dst, i->ps, i->pkey ? i->pkey : 0xFFFF); mg) i->dgid = *mg;
    if (i->src.any()) std::copy(res->src.bytes.begin(), res->src.bytes.end(), i->src.addr.begin());
    i->state = S::kAddrResolved;
    m.type = static_cast<uint8_t>(T::kAddrResolved);
    emit(*i, m);
  };
  if (is_multicast(dst) && arp_ && !id->src.any()) {
    // A group (mckey) from a bound address: that address's interface, no
    // route needed (unbound: the ARP module routes the group's address).
    if (auto link = arp_->link_of_address(to_ip(id->src)); link) {
      arp::Resolved res;
      res.port = link->port;
      res.sgid = link->ethernet ? arp::gid_of_ip(to_ip(id->src)) : link->gid;
      res.pkey = link->pkey;
      res.src = to_ip(id->src);
      res.dst = to_ip(dst);
      res.ethernet = link->ethernet;
      if (link->ethernet) res.dgid = arp::gid_of_ip(res.dst);  // the group's IP (rdma_ip2gid)
      boost::asio::post(io_, [answer, res]() mutable { answer(res); });
      return ok();
    }
  }
  if (!arp_) {
    boost::asio::post(io_, [answer]() mutable {
      answer(err(ENODEV, "this ibd has no IPoIB interface: no address resolution"));
    });
    return ok();
  }
  std::optional<arp::Ip> s;
  if (!id->src.any()) s = to_ip(id->src);
  arp_->resolve(s, to_ip(dst, r.dst.scope_id), std::chrono::milliseconds(r.timeout_ms ? r.timeout_ms : 2000),
                std::move(answer));
  return ok();
}

Result<void> CmaService::resolve_route(uint32_t client, const proto::CmaIdTimeoutReq& r) {
  OPENIB_TRY_ASSIGN(Id * id, find(client, r.id));
  if (id->state != S::kAddrResolved && id->state != S::kRouteResolved)
    return err(EINVAL, "id {} is {}: resolve_route wants its address resolved", r.id, state_name(id->state));
  id->state = S::kRouteQuery;
  const uint64_t op = ++id->op;
  // The port says what it can do (docs/device-access.md "Ports"): the SA
  // where it has one (rdma_cap_ib_sa), else a route from the addresses
  // (Linux's cma_resolve_iboe_route). Its attributes come from the SA
  // service's port attribute cache (port_attr_cache.hpp), as Linux's from
  // ib_cache: no QUERY_PORT per route while no port event came.
  sa_.port_attrs().query(id->port, [this, alive = std::weak_ptr<bool>(alive_), client, h = r.id,
                                    op](Result<hca::PortAttr> a) {
    if (alive.expired()) return;
    Id* i = waiting(client, h, op, S::kRouteQuery);
    if (!i) return;
    if (!a) return route_done(*i, a.take_error());
    if (hca::cap_ib_sa(a->link_layer)) return route_from_sa(client, *i);
    ++counters_.local_routes;
    route_done(*i, route_from_addresses(*i, *a));
  });
  return ok();
}

void CmaService::route_from_sa(uint32_t client, Id& id) {
  proto::PathQueryReq q;
  q.port = id.port;
  q.pkey = id.pkey;
  q.dgid = id.dgid;
  sa_.path_query(sessions_.at(client).uid, q, [this, alive = std::weak_ptr<bool>(alive_), client, h = id.handle,
                                               op = id.op](Result<proto::PathRep> p) {
    if (alive.expired()) return;
    Id* i = waiting(client, h, op, S::kRouteQuery);
    if (!i) return;
    if (!p) return route_done(*i, p.take_error());
    route_done(*i, p->record);
  });
}

// An Ethernet port's route (sa/local_route.hpp): the id's SGID (its
// source address's GID table entry) and DGID, the port's active MTU and
// rate, the default hop limit. The destination MAC the resolver found
// stays with the id (Id::dmac, Linux's sa_path_rec.roce.dmac; the path
// record has no field for it); the address vectors built from the route
// get theirs where they are made (Server::with_dmac, the MAD layer's
// handles), from the same neighbour table entry the resolution waited for.
Result<std::array<uint8_t, 64>> CmaService::route_from_addresses(const Id& id, const hca::PortAttr& a) {
  sa::RouteAddresses in;
  in.sgid = id.sgid;
  in.dgid = id.dgid;
  in.mtu = a.active_mtu;
  in.rate = sa::ib_rate_code(a.active_width, a.active_speed);
  in.service_id = cma::service_id(id.ps, id.dst.port);
  std::array<uint8_t, 64> rec{};
  sa::encode_path_record(std::as_writable_bytes(std::span(rec)), sa::route_from_addresses(in));
  return rec;
}

void CmaService::route_done(Id& id, Result<std::array<uint8_t, 64>> path) {
  proto::CmaEventMsg m;
  if (!path) {
    id.state = S::kAddrResolved;
    m.type = static_cast<uint8_t>(T::kRouteError);
    m.status = -path.error().code;
    return emit(id, m);
  }
  id.path = *path;
  id.have_path = true;
  id.state = S::kRouteResolved;
  m.type = static_cast<uint8_t>(T::kRouteResolved);
  emit(id, m);
}

// ---- listening -------------------------------------------------------------------

Result<void> CmaService::listen(uint32_t client, const proto::CmaListenReq& r, bool privileged) {
  OPENIB_TRY_ASSIGN(Id * id, find(client, r.id));
  if (id->state == S::kListen) {
    id->backlog = r.backlog ? r.backlog : kDefaultBacklog;
    return ok();
  }
  if (id->state == S::kIdle && !id->bound) {
    cma::Addr any;
    any.family = AF_INET6;  // an IPv6 wildcard takes IPv4 too (rdma_listen on an unbound id)
    OPENIB_TRY(do_bind(*id, any, privileged));
  }
  if (id->state != S::kAddrBound) return err(EINVAL, "id {} is {}: listen wants it bound", r.id, state_name(id->state));
  std::vector<uint8_t> hca_ports;
  if (id->port) {
    hca_ports.push_back(id->port);
  } else {
    for (uint8_t p = 1; p <= num_ports_; ++p) hca_ports.push_back(p);
  }
  Error last{ENETDOWN, "no port"};
  std::vector<std::tuple<uint8_t, uint16_t, uint16_t>> got;
  for (uint8_t p : hca_ports) {
    auto key = std::make_tuple(p, id->ps, id->src.port);
    auto it = cm_listens_.find(key);
    if (it == cm_listens_.end()) {
      proto::CmListenReq lr;
      lr.port = p;
      lr.flags = ud_ps(id->ps) ? proto::kCmListenSidr : 0;
      lr.service_id = cma::service_id(id->ps, id->src.port);
      auto h = cm_.listen(kCmaCmOwner, lr);
      if (!h) {
        last = h.take_error();
        continue;
      }
      it = cm_listens_.emplace(key, CmListen{*h, 0}).first;
      listen_key_[*h] = key;
    }
    ++it->second.refs;
    got.push_back(key);
  }
  if (got.empty()) return Result<void>(std::move(last));
  id->listens = std::move(got);
  id->backlog = r.backlog ? r.backlog : kDefaultBacklog;
  id->state = S::kListen;
  ports_.set_listening(owner_key(client, r.id), true);
  return ok();
}

void CmaService::refuse(const proto::CmEventMsg& e, bool sidr, uint64_t* why) {
  ++counters_.requests_refused;
  if (why) ++*why;
  if (sidr) {
    proto::CmSidrReplyReq q;
    q.id = e.id;
    q.status = kSidrReject;
    (void)cm_.sidr_reply(kCmaCmOwner, q);
  } else {
    proto::CmRejectReq q;
    q.id = e.id;
    q.reason = kRejConsumer;
    (void)cm_.reject(kCmaCmOwner, q);
  }
  (void)cm_.destroy(kCmaCmOwner, e.id);
}

// What Linux's rdma_cm asks of a REQ before it looks for a listener
// (cma.c: cma_ib_id_from_event, cma_get_net_dev, validate_net_dev; issue 29
// finding 3; docs/cma.md "Security"), as far as ibd can tell:
//  - both endpoints in the header are unicast addresses of hosts: not
//    loopback, wildcard, multicast or broadcast (validate_ipv4_net_dev);
//  - the destination is an address of the IPoIB interface of the port the
//    REQ came in on (ib_get_net_dev_by_params finds no net_dev otherwise:
//    -ENODEV);
//  - the source is no address of this host, unless the REQ came from this
//    port's own GID (Linux's route check, fib_lookup towards the source
//    through the IPoIB interface, refuses a local address of another
//    interface; ibd has no route lookup here and refuses any local source
//    from another host).
// Without an IPoIB interface (no ARP module) only the first check can be
// made: such an ibd has no addresses to check against.
Result<void> CmaService::check_request(const cma::Header& h, uint8_t hport, const proto::CmEventMsg& e) const {
  if (!cma::is_unicast_endpoint(h.dst))
    return err(EHOSTUNREACH, "the destination {} is no unicast address of a host", h.dst.str());
  if (!cma::is_unicast_endpoint(h.src))
    return err(EHOSTUNREACH, "the source {} is no unicast address of a host", h.src.str());
  if (!arp_) return ok();
  auto link = arp_->link_of_address(to_ip(h.dst));
  if (!link) return err(ENODEV, "the destination {} is no address of an IPoIB interface of this ibd", h.dst.str());
  if (link->port != hport)
    return err(ENODEV, "the destination {} is an address of port {}'s interface, the REQ came to port {}", h.dst.str(),
               link->port, hport);
  if (!from_holder_of(h, e, *link))
    return err(EHOSTUNREACH, "the source {} is an address of this host, but the REQ came from another port",
               h.src.str());
  return ok();
}

// A REQ whose source is an address of this host came from this port, or
// from the port of an IPoIB interface holding that address (another device
// of this ibd cabled to this one); any other source passes.
bool CmaService::from_holder_of(const cma::Header& h, const proto::CmEventMsg& e, const arp::Link& dst_link) const {
  if (e.remote_gid == dst_link.gid || !arp_->is_local_address(to_ip(h.src))) return true;
  // RoCE: the REQ's source GID is the source address's own, an address of
  // this netdev's port (a connection within the host, looped back).
  if (dst_link.ethernet && e.remote_gid == arp::gid_of_ip(to_ip(h.src)))
    if (auto l = arp_->link_of_address(to_ip(h.src)); l && l->port == dst_link.port) return true;
  if (!host_links_) return false;
  for (int ifindex : arp_->interfaces_of_address(to_ip(h.src)))
    if (auto l = host_links_(ifindex); l && l->gid == e.remote_gid) return true;
  return false;
}

void CmaService::on_request(const proto::CmEventMsg& e) {
  const bool sidr = e.type == static_cast<uint8_t>(proto::CmEventType::kSidrRequest);
  auto lk = listen_key_.find(e.listen_id);
  if (lk == listen_key_.end()) return refuse(e, sidr);
  const auto key = lk->second;
  const auto [hport, ps, port] = key;
  auto hdr = cma::decode_header(std::span<const uint8_t>(e.private_data.data(), e.private_len), e.service_id);
  if (!hdr) {
    log::get("cma")->debug("a request to port {} without a usable CMA header: {}", port, hdr.error().message);
    return refuse(e, sidr);
  }
  if (auto c = check_request(*hdr, hport, e); !c) {
    log::get("cma")->debug("a request to port {} refused: {}", port, c.error().message);
    return refuse(e, sidr, &counters_.requests_bad_address);
  }
  auto owner = ports_.listener(ps, hdr->dst);
  if (!owner) return refuse(e, sidr);
  const uint32_t client = static_cast<uint32_t>(*owner >> 32), lh = static_cast<uint32_t>(*owner);
  Id* l = find_id(client, lh);
  // A listener bound to an address of one port listens on that port only
  // (cma_match_net_dev): the REQ must have come to one of its IB CM listeners.
  if (!l || l->state != S::kListen || std::find(l->listens.begin(), l->listens.end(), key) == l->listens.end())
    return refuse(e, sidr);
  if (l->pending >= l->backlog) return refuse(e, sidr, &counters_.requests_over_backlog);
  auto s = sessions_.find(client);
  auto h = new_id(s->second, client, ps);
  if (!h) {
    log::get("cma")->debug("client {} listener {}: connect request refused: {}", client, lh, h.error().message);
    return refuse(e, sidr, &counters_.requests_over_budget);
  }
  ++l->pending;
  Id& c = s->second.ids.at(*h);
  c.state = S::kConnect;
  c.src = hdr->dst;
  c.dst = hdr->src;
  c.port = hport;
  c.sgid = l->sgid;
  // RoCE: a wildcard listener's connection is from the address it came to.
  if (auto dl = arp_ ? arp_->link_of_address(to_ip(hdr->dst)) : std::nullopt; dl && dl->ethernet)
    c.sgid = arp::gid_of_ip(to_ip(hdr->dst));
  c.dgid = e.remote_gid;
  c.pkey = l->pkey;
  c.cm = e.id;
  c.parent = lh;
  by_cm_[e.id] = {client, *h};
  proto::CmaEventMsg m;
  m.type = static_cast<uint8_t>(T::kConnectRequest);
  m.listen_id = lh;
  m.responder_resources = e.responder_resources;
  m.initiator_depth = e.initiator_depth;
  m.rnr_retry_count = e.rnr_retry_count;
  m.srq = e.srq;
  m.qp_num = e.remote_qpn;
  m.qkey = e.qkey;
  m.ah.dlid = e.remote_lid;
  m.ah.port = hport;
  m.ah.dgid = e.remote_gid;
  const size_t off = cma::kHeaderBytes;
  copy_private(m.private_data, m.private_len, e.private_data.data() + off, e.private_len > off ? e.private_len - off : 0);
  if (emit_ok(c, m)) {
    ++counters_.connect_requests;
    return;
  }
  // Nobody will hear of it (the event socket is closed): refused now, not left to expire.
  by_cm_.erase(e.id);
  c.cm = 0;
  unpend(c);
  erase_id(client, *h);
  refuse(e, sidr);
}

void CmaService::unpend(Id& id) {
  if (!id.parent) return;
  if (Id* l = find_id(id.client, id.parent); l && l->pending) --l->pending;
  id.parent = 0;
}

// The IB CM expired a REQ the client left unanswered (kTimeout on a
// REQ-received id). Linux's ib_cm keeps such an id until its user answers;
// here it goes (issue 29 finding 10): the REJ is the IB CM's, the backlog
// slot and the id are freed, and the client, who heard of the request, is
// told as Linux tells a connection that timed out (cma_ib_handler:
// IB_CM_REP_ERROR / IB_CM_REQ_ERROR -> RDMA_CM_EVENT_UNREACHABLE,
// -ETIMEDOUT). A later request on that id is ENOENT.
void CmaService::request_expired(Id& id) {
  ++counters_.requests_expired;
  unpend(id);
  forget_cm(id);
  proto::CmaEventMsg m;
  m.type = static_cast<uint8_t>(T::kUnreachable);
  m.status = -ETIMEDOUT;
  emit(id, m);
  release(id);
  erase_id(id.client, id.handle);
}

// ---- QPs ----------------------------------------------------------------------

void CmaService::move_ud_qp(uint32_t client, uint32_t qp, uint8_t port, uint32_t qkey, std::vector<uint8_t> states,
                            Done done) {
  if (states.empty()) return done(ok());
  const uint8_t st = states.front();
  states.erase(states.begin());
  hca::QpAttr a;
  uint32_t mask = hca::qp_attr::kState;
  a.state = static_cast<hca::QpState>(st);
  if (st == 1) {  // INIT: port, P_Key index 0, Q_Key (rdma_cm's cma_init_ud_qp)
    a.port = port;
    a.pkey_index = 0;
    a.qkey = qkey;
    mask |= hca::qp_attr::kPort | hca::qp_attr::kPkeyIndex | hca::qp_attr::kQkey;
  } else if (st == 3) {
    a.sq_psn = 0;
    mask |= hca::qp_attr::kSqPsn;
  }
  qp_.modify(client, qp, mask, a,
             [this, alive = std::weak_ptr<bool>(alive_), client, qp, port, qkey, states = std::move(states),
              done = std::move(done)](Result<void> r) mutable {
               if (alive.expired()) return;
               if (!r) return done(err(r.error().code, "UD QP transition: {}", r.error().message));
               move_ud_qp(client, qp, port, qkey, std::move(states), std::move(done));
             });
}

void CmaService::init_qp(uint32_t client, const proto::CmaQpReq& r, Done done) {
  auto f = find(client, r.id);
  if (!f) return done(f.take_error());
  Id* id = *f;
  if (!qp_.lookup) return done(err(ENOSYS, "no QP lookup"));
  auto q = qp_.lookup(client, r.qp);
  if (!q) return done(q.take_error());
  const bool ud = ud_ps(id->ps);
  if (ud != (q->type == 2)) return done(err(EINVAL, "a {} id takes a {} QP", ud ? "UD" : "connected", ud ? "UD" : "RC or UC"));
  id->qp = r.qp;
  id->qpn = q->qpn;
  if (!ud) return done(ok());  // the IB CM moves it at connect / accept
  if (!id->port) return done(err(EINVAL, "id {} has no device yet: bind or resolve its address first", r.id));
  const uint32_t qkey = qkey_of(*id);
  if (!qkey) return done(err(ENETDOWN, "the IPoIB interface is down: no Q_Key for the IPoIB port space"));
  std::vector<uint8_t> states;
  if (q->state == 0) states = {1, 2, 3};
  else if (q->state == 1) states = {2, 3};
  else if (q->state == 2) states = {3};
  move_ud_qp(client, r.qp, id->port, qkey, std::move(states), std::move(done));
}

// ---- connecting ------------------------------------------------------------------

// The client's QP by handle, or (own QPs) by number among its own objects:
// another client's QP is never found (docs/cma.md "Own QPs").
Result<std::pair<uint32_t, CmService::QpInfo>> CmaService::client_qp(uint32_t client, uint32_t qp, bool by_number) {
  if (!qp_.lookup || !qp_.handle_of) return err(ENOSYS, "no QP lookup");
  uint32_t handle = qp;
  if (by_number) {
    OPENIB_TRY_ASSIGN(handle, qp_.handle_of(client, qp));
  }
  OPENIB_TRY_ASSIGN(auto q, qp_.lookup(client, handle));
  if (q.type > 1) return err(EINVAL, "a connection takes an RC or UC QP");
  return std::pair<uint32_t, CmService::QpInfo>{handle, q};
}

void CmaService::connect(uint32_t client, const proto::CmaConnReq& r, Done done, bool own_qp) {
  auto f = find(client, r.id);
  if (!f) return done(f.take_error());
  Id* id = *f;
  if (id->state != S::kRouteResolved)
    return done(err(EINVAL, "id {} is {}: connect wants its route resolved", r.id, state_name(id->state)));
  const bool ud = ud_ps(id->ps);
  if (auto c = check_private(r.private_len, ud ? proto::kCmaSidrReqPrivate : proto::kCmaReqPrivate,
                             ud ? "a SIDR_REQ (after the CMA header)" : "a REQ (after the CMA header)");
      !c)
    return done(c.take_error());
  proto::CmPrivate pd{};
  cma::encode_header(std::span<uint8_t, cma::kHeaderBytes>(pd.data(), cma::kHeaderBytes), id->src, id->dst);
  if (r.private_len) std::memcpy(pd.data() + cma::kHeaderBytes, r.private_data.data(), r.private_len);
  const uint8_t plen = static_cast<uint8_t>(cma::kHeaderBytes + r.private_len);
  const uint64_t sid = cma::service_id(id->ps, id->dst.port);
  if (ud) {
    proto::CmSidrQueryReq q;
    q.port = id->port;
    q.max_cm_retries = kMaxCmRetries;
    q.cm_response_timeout = kCmResponseTimeout;
    q.service_id = sid;
    q.path = id->path;
    q.private_len = plen;
    q.private_data = pd;
    auto h = cm_.sidr_query(kCmaCmOwner, q);
    if (!h) return done(h.take_error());
    id->cm = *h;
    by_cm_[*h] = {client, r.id};
    id->state = S::kConnect;
    return done(ok());
  }
  auto q = client_qp(client, r.qp, own_qp);
  if (!q) return done(q.take_error());
  proto::CmConnectReq c;
  c.port = id->port;
  // An own QP: the IB CM leaves it to the client, which moves it with
  // CMA_INIT_QP_ATTR's attributes and sends the RTU by CMA_ESTABLISH.
  c.flags = own_qp ? proto::kCmManualQp : 0;
  c.qp = token(client, q->first);
  c.service_id = sid;
  c.path = id->path;
  c.responder_resources = r.responder_resources;
  c.initiator_depth = r.initiator_depth;
  c.retry_count = r.retry_count;
  c.rnr_retry_count = r.rnr_retry_count;
  c.max_cm_retries = kMaxCmRetries;
  c.cm_response_timeout = kCmResponseTimeout;
  c.private_len = plen;
  c.private_data = pd;
  id->qp = q->first;
  id->qpn = q->second.qpn;
  id->own_qp = own_qp;
  id->active = true;
  id->state = S::kConnect;
  const uint64_t op = ++id->op;
  cm_.connect(kCmaCmOwner, c,
              [this, alive = std::weak_ptr<bool>(alive_), client, h = r.id, op, done = std::move(done)](
                  Result<uint32_t> cmh) mutable {
                if (alive.expired()) return done(err(ECANCELED, "ibd is stopping"));
                Id* i = find_id(client, h);
                if (!i || i->op != op) {
                  if (cmh) (void)cm_.destroy(kCmaCmOwner, *cmh);
                  return done(err(ECANCELED, "the id went"));
                }
                if (!cmh) {
                  i->state = S::kRouteResolved;
                  return done(cmh.take_error());
                }
                i->cm = *cmh;
                by_cm_[*cmh] = {client, h};
                done(ok());
              });
}

void CmaService::accept(uint32_t client, const proto::CmaConnReq& r, Done done, bool own_qp) {
  auto f = find(client, r.id);
  if (!f) return done(f.take_error());
  Id* id = *f;
  if (!id->cm || id->state != S::kConnect || !id->parent)
    return done(err(EINVAL, "id {} has no connect request to accept", r.id));
  if (ud_ps(id->ps)) {
    if (own_qp) return done(err(EINVAL, "a UD id answers with CMA_ACCEPT"));
    if (auto c = check_private(r.private_len, 136, "a SIDR_REP"); !c) return done(c.take_error());
    const uint32_t qp = r.qp ? r.qp : id->qp;
    if (!qp) return done(err(EINVAL, "a UD accept names a QP (or init_qp one first)"));
    proto::CmSidrReplyReq q;
    q.id = id->cm;
    q.status = 0;
    const bool new_token = !token_of_.contains({client, qp});
    q.qp = token(client, qp);
    q.qkey = qkey_of(*id);
    q.private_len = r.private_len;
    q.private_data = r.private_data;
    if (auto s = cm_.sidr_reply(kCmaCmOwner, q); !s) {
      // (A handle that is no QP of the client's, say: the token goes with
      // the refusal, or accepts of made-up handles would pile them up.)
      if (new_token) {
        tokens_.erase(q.qp);
        token_of_.erase({client, qp});
      }
      return done(s.take_error());
    }
    unpend(*id);
    return done(ok());
  }
  if (auto c = check_private(r.private_len, 196, "a REP"); !c) return done(c.take_error());
  auto q = client_qp(client, r.qp, own_qp);
  if (!q) return done(q.take_error());
  id->qp = q->first;
  id->qpn = q->second.qpn;
  id->own_qp = own_qp;
  proto::CmAcceptReq a;
  a.id = id->cm;
  a.qp = token(client, q->first);
  // An own QP is at RTS already, with the send PSN CMA_INIT_QP_ATTR gave:
  // the IB CM's, which the REP carries.
  a.flags = own_qp ? proto::kCmManualQp : 0;
  a.responder_resources = r.responder_resources;
  a.initiator_depth = r.initiator_depth;
  a.rnr_retry_count = r.rnr_retry_count;
  a.private_len = r.private_len;
  a.private_data = r.private_data;
  // The request stays the listener's until the IB CM took the accept: a
  // refused one (a QP in the wrong state) may be accepted again or rejected.
  cm_.accept(kCmaCmOwner, a,
             [this, alive = std::weak_ptr<bool>(alive_), client, h = r.id, done = std::move(done)](
                 Result<void> res) mutable {
               if (alive.expired()) return done(err(ECANCELED, "ibd is stopping"));
               if (Id* i = res ? find_id(client, h) : nullptr) unpend(*i);
               done(std::move(res));
             });
}

// ---- own QPs (docs/cma.md "Own QPs") ---------------------------------------

// rdma_init_qp_attr, as Linux's: a connection's attributes are the IB CM's
// (ib_cm_init_qp_attr's rules, docs/cm.md "QPs"); before there is one, and
// for a UD id, the id's own (cma_ib_init_qp_attr): INIT with the port, P_Key
// index 0 and no remote access (UD: the id's Q_Key instead); a UD QP's RTR
// is the state alone, its RTS send PSN 0.
void CmaService::init_qp_attr(uint32_t client, const proto::CmaInitQpAttrReq& r, CmService::InitQpAttrDone done) {
  auto f = find(client, r.id);
  if (!f) return done(f.take_error());
  const Id* id = *f;
  if (r.state < 1 || r.state > 3)
    return done(err(EINVAL, "CMA_INIT_QP_ATTR: state {} (1 INIT, 2 RTR, 3 RTS)", r.state));
  const bool ud = ud_ps(id->ps);
  if (!ud && id->cm) return cm_.init_qp_attr(kCmaCmOwner, proto::CmInitQpAttrReq{id->cm, r.state}, std::move(done));
  done(own_qp_attr(*id, r.state));
}

Result<proto::CmInitQpAttrRep> CmaService::own_qp_attr(const Id& id, uint8_t state) const {
  const bool ud = ud_ps(id.ps);
  if (!id.port) return err(EINVAL, "id {} has no device yet: bind or resolve its address first", id.handle);
  if (!ud && state > 1) return err(EINVAL, "id {} has no connection: RTR and RTS come with its REQ or REP", id.handle);
  hca::QpAttr a;
  uint32_t mask = hca::qp_attr::kState;
  a.state = static_cast<hca::QpState>(state);
  if (state == 1) {
    a.port = id.port;
    a.pkey_index = 0;
    mask |= hca::qp_attr::kPort | hca::qp_attr::kPkeyIndex;
    if (ud) {
      a.qkey = qkey_of(id);
      if (!a.qkey) return err(ENETDOWN, "the IPoIB interface is down: no Q_Key for the IPoIB port space");
      mask |= hca::qp_attr::kQkey;
    } else {
      mask |= hca::qp_attr::kAccessFlags;  // none until the connection says
    }
  } else if (state == 3) {
    mask |= hca::qp_attr::kSqPsn;
  }
  proto::CmInitQpAttrRep rep;
  rep.attr = to_proto(a);
  rep.attr.mask = mask;
  return rep;
}

// rdma_establish: the RTU of an own-QP connect whose REP came (the IB CM's
// CM_ACCEPT of an active manual id).
void CmaService::establish(uint32_t client, uint32_t h, Done done) {
  auto f = find(client, h);
  if (!f) return done(f.take_error());
  Id* id = *f;
  if (!id->own_qp || !id->active || !id->cm || id->state != S::kConnect)
    return done(err(EINVAL, "id {} has no own-QP connect to establish", h));
  proto::CmAcceptReq a;
  a.id = id->cm;
  a.flags = proto::kCmManualQp;
  cm_.accept(kCmaCmOwner, a, std::move(done));
}

Result<void> CmaService::reject(uint32_t client, const proto::CmaRejectReq& r) {
  OPENIB_TRY_ASSIGN(Id * id, find(client, r.id));
  if (!id->cm || id->state != S::kConnect || !id->parent)
    return err(EINVAL, "id {} has no connect request to reject", r.id);
  if (ud_ps(id->ps)) {
    OPENIB_TRY(check_private(r.private_len, 136, "a SIDR_REP"));
    proto::CmSidrReplyReq q;
    q.id = id->cm;
    q.status = kSidrReject;
    q.private_len = r.private_len;
    q.private_data = r.private_data;
    OPENIB_TRY(cm_.sidr_reply(kCmaCmOwner, q));
  } else {
    OPENIB_TRY(check_private(r.private_len, 148, "a REJ"));
    proto::CmRejectReq q;
    q.id = id->cm;
    q.reason = kRejConsumer;
    q.private_len = r.private_len;
    q.private_data = r.private_data;
    OPENIB_TRY(cm_.reject(kCmaCmOwner, q));
  }
  unpend(*id);
  forget_cm(*id);
  id->state = S::kDisconnect;
  return ok();
}

Result<void> CmaService::disconnect(uint32_t client, uint32_t h) {
  OPENIB_TRY_ASSIGN(Id * id, find(client, h));
  if (ud_ps(id->ps)) return err(EINVAL, "id {} is a UD id: nothing to disconnect", h);
  if (id->state == S::kDisconnect || id->reported_disconnect) return ok();  // (as rdma_disconnect, once)
  if (!id->cm || id->state != S::kConnect) return err(EINVAL, "id {} is {}: not connected", h, state_name(id->state));
  proto::CmDisconnectReq q;
  q.id = id->cm;
  OPENIB_TRY(cm_.disconnect(kCmaCmOwner, q));
  id->state = S::kDisconnect;
  return ok();
}

// ---- the IB CM's events ----------------------------------------------------------

void CmaService::forget_cm(Id& id) {
  if (!id.cm) return;
  by_cm_.erase(id.cm);
  (void)cm_.destroy(kCmaCmOwner, id.cm);
  id.cm = 0;
}

void CmaService::on_cm_event(const proto::CmEventMsg& e) {
  using C = proto::CmEventType;
  const auto type = static_cast<C>(e.type);
  if (type == C::kRequest || type == C::kSidrRequest) return on_request(e);
  auto o = by_cm_.find(e.id);
  if (o == by_cm_.end()) return;  // destroyed meanwhile
  Id* id = find_id(o->second.first, o->second.second);
  if (!id) {
    by_cm_.erase(o);
    return;
  }
  proto::CmaEventMsg m;
  switch (type) {
    case C::kReply:
      if (!id->own_qp) {
        id->rep = e;  // ibd moves the QP and sends the RTU: kEstablished follows
        return;
      }
      // rdma_cm's CONNECT_RESPONSE: the client moves its QP to RTR and RTS,
      // then CMA_ESTABLISH sends the RTU.
      m.type = static_cast<uint8_t>(T::kConnectResponse);
      put_rep(m, e);
      return emit(*id, m);
    case C::kEstablished:
      // After CMA_ESTABLISH's RTU rdma_cm reports nothing more: the
      // application had CONNECT_RESPONSE (rdma-core's ucma_process_conn_resp).
      if (id->own_qp && id->active) return;
      return on_established(*id);
    case C::kRejected:  // (a connect request the peer gave up on: out of the backlog)
      m.type = static_cast<uint8_t>(T::kRejected);
      m.status = e.reason;
      with_private(m, e);
      unpend(*id);
      id->state = S::kDisconnect;
      forget_cm(*id);
      return emit(*id, m);
    case C::kMraReceived:
      return;
    case C::kDisconnectRequest:
    case C::kDisconnected:
      return report_disconnected(*id, m);
    case C::kTimewaitExit:
      m.type = static_cast<uint8_t>(T::kTimewaitExit);
      forget_cm(*id);
      return emit(*id, m);
    case C::kTimeout:
      return on_cm_timeout(*id);
    case C::kSidrReply:
      return on_sidr_reply(*id, e);
    case C::kError:
      return on_cm_error(*id, e);
    case C::kRequest:
    case C::kSidrRequest:
      return;
  }
}

// The connection is down (a DREQ, a DREP, or our DREQ unanswered): the id
// reports it once, with `m`'s status.
void CmaService::report_disconnected(Id& id, proto::CmaEventMsg m) {
  id.state = S::kDisconnect;
  if (id.reported_disconnect) return;
  id.reported_disconnect = true;
  m.type = static_cast<uint8_t>(T::kDisconnected);
  emit(id, m);
}

void CmaService::put_rep(proto::CmaEventMsg& m, const proto::CmEventMsg& rep) {
  m.responder_resources = rep.responder_resources;
  m.initiator_depth = rep.initiator_depth;
  m.rnr_retry_count = rep.rnr_retry_count;
  m.srq = rep.srq;
  m.qp_num = rep.remote_qpn;
  copy_private(m.private_data, m.private_len, rep.private_data.data(), rep.private_len);
}

void CmaService::on_established(Id& id) {
  proto::CmaEventMsg m;
  m.type = static_cast<uint8_t>(T::kEstablished);
  if (id.rep) {  // the active side: the REP's parameters and private data (rdma_cm's conn param)
    put_rep(m, *id.rep);
    id.rep.reset();
  }
  emit(id, m);
}

void CmaService::on_cm_timeout(Id& id) {
  if (id.parent) return request_expired(id);  // a connect request never answered
  proto::CmaEventMsg m;
  m.type = static_cast<uint8_t>(T::kUnreachable);
  m.status = -ETIMEDOUT;
  if (id.state == S::kDisconnect) return report_disconnected(id, m);  // our DREQ went unanswered
  id.state = S::kDisconnect;
  forget_cm(id);
  emit(id, m);
}

// A SIDR_REP (IBA 12.11.2): refused, the id is unreachable; else the
// peer's QP, Q_Key and the address vector along the id's path.
void CmaService::on_sidr_reply(Id& id, const proto::CmEventMsg& e) {
  proto::CmaEventMsg m;
  if (e.sidr_status != 0) {
    m.type = static_cast<uint8_t>(T::kUnreachable);
    m.status = e.sidr_status;
    with_private(m, e);
    forget_cm(id);
    return emit(id, m);
  }
  auto path = sa::decode_path_record(std::as_bytes(std::span(id.path)));
  m.type = static_cast<uint8_t>(T::kEstablished);
  m.qp_num = e.remote_qpn;
  m.qkey = e.qkey;
  if (path) {
    m.ah.dlid = path->dlid;
    m.ah.sl = path->sl;
    m.ah.port = id.port;
    m.ah.dgid = path->dgid;
    if (path->hop_limit > 1) {
      m.ah.grh = 1;
      m.ah.hop_limit = path->hop_limit;
      m.ah.flow_label = path->flow_label;
      m.ah.traffic_class = path->tclass;
    }
  }
  with_private(m, e);
  forget_cm(id);
  if (!path || !m.ah.grh) return emit(id, m);
  // The GRH's source is the path's SGID: its GID table entry, as Linux's
  // ib_init_ah_attr_from_path takes the path's sgid_attr. On an Ethernet
  // port that is the source address's entry (docs/simhca.md §16.1), not
  // entry 0 (the link-local GID: the datagrams would go as IPv6). The
  // address gone meanwhile: ADDR_ERROR (the event Linux's
  // cma_sidr_rep_handler gives a reply it cannot take).
  hca::find_gid_async(hca_, id.port, path->sgid,
                      [this, alive = std::weak_ptr<bool>(alive_), client = id.client, h = id.handle, op = id.op,
                       m](Result<uint16_t> idx) mutable {
                        if (alive.expired()) return;
                        Id* i = find_id(client, h);
                        if (!i || i->op != op) return;
                        if (!idx) {
                          proto::CmaEventMsg a;
                          a.type = static_cast<uint8_t>(T::kAddrError);
                          a.status = -idx.error().code;
                          return emit(*i, a);
                        }
                        m.ah.sgid_index = static_cast<uint8_t>(*idx);
                        emit(*i, m);
                      });
}

// The IB CM's kError: the device gone (ENODEV, reported once as
// DEVICE_REMOVAL), or a connection that failed.
void CmaService::on_cm_error(Id& id, const proto::CmEventMsg& e) {
  proto::CmaEventMsg m;
  if (e.status == ENODEV) {
    if (id.state == S::kDeviceRemoval) return;
    id.state = S::kDeviceRemoval;
    ++counters_.device_removals;
    m.type = static_cast<uint8_t>(T::kDeviceRemoval);
    m.status = -ENODEV;
    return emit(id, m);
  }
  m.type = static_cast<uint8_t>(T::kConnectError);
  m.status = -e.status;
  emit(id, m);
}

// ---- multicast ----------------------------------------------------------------

void CmaService::join(uint32_t client, const proto::CmaJoinReq& r, Done done) {
  auto f = find(client, r.id);
  if (!f) return done(f.take_error());
  Id* id = *f;
  if (!ud_ps(id->ps)) return done(err(EINVAL, "multicast needs a UDP or IPoIB port space id"));
  if (!id->port) return done(err(EINVAL, "id {} has no device yet: bind or resolve its address first", r.id));
  const cma::Addr g = from_proto(r.group);
  if (!is_multicast(g)) return done(err(EINVAL, "{} is not a multicast address", g.str()));
  if (auto link = arp_ ? arp_->link_of_address(to_ip(id->src)) : std::nullopt; link && link->ethernet) {
    if (g.family != id->src.family)  // (a frame's two IP addresses are of one version)
      return done(err(EINVAL, "group {} is not of the id's address family", g.str()));
    if (!qp_.lookup) return done(err(ENOSYS, "no QP lookup"));
    auto q = qp_.lookup(client, r.qp ? r.qp : id->qp);
    if (!q) return done(q.take_error());
    if (q->type != 2) return done(err(EINVAL, "multicast takes a UD QP"));
    return join_roce(*id, g, q->qpn, *link, std::move(done));
  }
  auto mg = cma::mgid_for(g, id->ps, id->pkey ? id->pkey : 0xFFFF);
  if (!mg) return done(mg.take_error());
  if (id->groups.count(*mg)) return done(err(EADDRINUSE, "id {} has joined {} already", r.id, g.str()));
  if (!qp_.lookup) return done(err(ENOSYS, "no QP lookup"));
  auto q = qp_.lookup(client, r.qp ? r.qp : id->qp);
  if (!q) return done(q.take_error());
  if (q->type != 2) return done(err(EINVAL, "multicast takes a UD QP"));
  const uint32_t qkey = qkey_of(*id);
  if (!qkey) return done(err(ENETDOWN, "the IPoIB interface is down: no Q_Key for the IPoIB port space"));
  Group grp;
  grp.mgid = *mg;
  grp.qpn = q->qpn;
  id->groups[*mg] = std::move(grp);
  proto::McastJoinReq j;
  j.port = id->port;
  j.join_state = 1;  // FullMember
  j.flags = proto::kMcastCreate;
  j.mgid = *mg;
  j.qkey = qkey;
  sa_.mcast_join(client | kCmaJoinOwnerBit, sessions_.at(client).uid, j,  // (the uid's join budget)
                 [this, alive = std::weak_ptr<bool>(alive_), client, h = r.id, mgid = *mg, g](
                     Result<proto::McastJoinRep> rep) {
                   if (alive.expired()) return;
                   ib_joined(client, h, mgid, g, std::move(rep));
                 });
  done(ok());
}

// The SA's answer to an InfiniBand join (join): the QP attached to the
// group, then MULTICAST_JOIN with the group's address handle.
void CmaService::ib_joined(uint32_t client, uint32_t h, const std::array<uint8_t, 16>& mgid, const cma::Addr& g,
                           Result<proto::McastJoinRep> rep) {
  Id* i = find_id(client, h);
  if (!i || !i->groups.count(mgid)) return;
  auto fail = [&](const Error& e) {
    proto::CmaEventMsg m;
    m.type = static_cast<uint8_t>(T::kMulticastError);
    m.status = -e.code;
    m.dst = to_proto(g);
    i->groups.erase(mgid);
    emit(*i, m);
  };
  if (!rep) return fail(rep.error());
  auto rec = sa::decode_mcmember_record(std::as_bytes(std::span(rep->record)));
  if (!rec) return fail(rec.error());
  Group& gr = i->groups[mgid];
  gr.mlid = rec->mlid;
  hca_.attach_mcast_async(
      gr.qpn, mgid, rec->mlid,
      [this, alive = std::weak_ptr<bool>(alive_), client, h, mgid, g, qpn = gr.qpn, rec = *rec](Result<void> a) {
        if (alive.expired()) return;
        Id* i2 = find_id(client, h);
        if (!i2 || !i2->groups.count(mgid)) return a ? undo_attach(client, h, mgid, qpn, rec.mlid) : void();
        proto::CmaEventMsg m;
        m.dst = to_proto(g);
        if (!a) {
          m.type = static_cast<uint8_t>(T::kMulticastError);
          m.status = -a.error().code;
          (void)sa_.mcast_leave(client | kCmaJoinOwnerBit, proto::McastLeaveReq{i2->port, mgid});
          i2->groups.erase(mgid);
          return emit(*i2, m);
        }
        i2->groups[mgid].attached = true;
        m.type = static_cast<uint8_t>(T::kMulticastJoin);
        m.qp_num = 0xFFFFFF;
        m.qkey = rec.qkey;
        m.ah.dlid = rec.mlid;
        m.ah.sl = rec.sl;
        m.ah.port = i2->port;
        m.ah.grh = 1;
        m.ah.dgid = mgid;
        m.ah.flow_label = rec.flow_label;
        m.ah.traffic_class = rec.tclass;
        m.ah.hop_limit = rec.hop_limit;
        emit(*i2, m);
      });
}

// A join on a RoCE port, as Linux's cma_iboe_join_multicast (no SA: IBA
// Annex A17 has none): the MGID is the group's address as a GID
// (::ffff:a.b.c.d for an IPv4 group, as for RoCEv2; an IPv6 group itself),
// the MLID 0, the Q_Key the id's; the client's QP is attached to the MGID
// (docs/simhca.md §16.4) and the event's address vector goes to the group
// with a GRH from the id's source address's GID table entry and hop limit
// 64 (Linux's IPV6_DEFAULT_HOPLIMIT for RoCEv2); its MAC is the group's
// (RFC 1112 6.4, RFC 2464 7; arp::dmac_from_gid, when the client makes
// the AH). The kernel joins the group on the netdev (IGMP/MLD report, as
// Linux's cma_igmp_send) for as long as the id holds it. Linux refuses an
// IPv6 group on RoCEv2 (ENOTSUPP); here it works as an IPv4 one.
void CmaService::join_roce(Id& id, const cma::Addr& g, uint32_t qpn, const arp::Link& link, Done done) {
  const auto mgid = arp::gid_of_ip(to_ip(g));
  if (id.groups.count(mgid)) return done(err(EADDRINUSE, "id {} has joined {} already", id.handle, g.str()));
  const uint32_t qkey = qkey_of(id);
  if (!qkey) return done(err(ENETDOWN, "no Q_Key for the IPoIB port space on a RoCE port"));
  const uid_t uid = sessions_.at(id.client).uid;
  if (auto t = sa_.join_budget().take(id.client, uid); !t) return done(t.take_error());
  auto membership = arp::join_group(link.ifindex, to_ip(g));
  if (!membership) {
    sa_.join_budget().give(id.client, uid);
    return done(err(membership.error().code, "the kernel's membership: {}", membership.error().message));
  }
  Group grp;
  grp.mgid = mgid;
  grp.qpn = qpn;
  grp.roce = true;
  grp.uid = uid;
  grp.membership = std::move(*membership);
  grp.serial = next_join_++;
  const uint64_t serial = grp.serial;
  id.groups.emplace(mgid, std::move(grp));
  ++counters_.roce_joins;
  // The event (or the error) for this join, if the id still holds it.
  auto holder = [this, client = id.client, h = id.handle, mgid, serial]() -> Id* {
    Id* i = find_id(client, h);
    if (!i) return nullptr;
    auto it = i->groups.find(mgid);
    return it != i->groups.end() && it->second.serial == serial ? i : nullptr;
  };
  auto fail = [this, g, mgid](Id& i, const Error& e) {
    proto::CmaEventMsg m;
    m.type = static_cast<uint8_t>(T::kMulticastError);
    m.status = -e.code;
    m.dst = to_proto(g);
    if (auto it = i.groups.find(mgid); it != i.groups.end()) {
      drop_group(i, mgid, it->second);
      i.groups.erase(it);
    }
    emit(i, m);
  };
  hca::find_gid_async(
      hca_, id.port, id.sgid,
      [this, alive = std::weak_ptr<bool>(alive_), holder, fail, g, mgid, qpn, qkey, client = id.client,
       h = id.handle](Result<uint16_t> idx) {
        if (alive.expired()) return;
        Id* i = holder();
        if (!i) return;
        if (!idx) return fail(*i, Error{idx.error().code, "the id's source GID: " + idx.error().message});
        hca_.attach_mcast_async(qpn, mgid, 0, [this, alive, holder, fail, g, mgid, qkey, qpn, client, h,
                                               sgid_index = *idx](Result<void> a) {
          if (alive.expired()) return;
          Id* i2 = holder();
          if (!i2) return a ? undo_attach(client, h, mgid, qpn, 0) : void();
          if (!a) return fail(*i2, a.error());
          i2->groups[mgid].attached = true;
          proto::CmaEventMsg m;
          m.dst = to_proto(g);
          m.type = static_cast<uint8_t>(T::kMulticastJoin);
          m.qp_num = 0xFFFFFF;
          m.qkey = qkey;
          m.ah.dlid = 0;
          m.ah.port = i2->port;
          m.ah.grh = 1;
          m.ah.dgid = mgid;
          m.ah.sgid_index = static_cast<uint8_t>(sgid_index);
          m.ah.hop_limit = 64;
          emit(*i2, m);
        });
      });
  done(ok());
}

// An attach that completed after its join was left or its id destroyed
// (drop_group saw it not yet attached): the QP is detached again, unless
// the id holds that group on that QP anew (a rejoin, whose own attach is
// the one that counts). Without this the QP kept receiving the group.
void CmaService::undo_attach(uint32_t client, uint32_t h, const std::array<uint8_t, 16>& mgid, uint32_t qpn,
                             uint16_t mlid) {
  if (Id* i = find_id(client, h))
    if (auto it = i->groups.find(mgid); it != i->groups.end() && it->second.qpn == qpn) return;
  ++counters_.late_attaches_undone;
  hca_.detach_mcast_async(qpn, mgid, mlid, [](Result<void>) {});
}

void CmaService::drop_group(const Id& id, const std::array<uint8_t, 16>& mgid, Group& g) {
  if (g.attached) hca_.detach_mcast_async(g.qpn, mgid, g.mlid, [](Result<void>) {});
  if (g.roce) {
    sa_.join_budget().give(id.client, g.uid);
    g.membership.reset();  // the kernel leaves (IGMP/MLD) when its last membership goes
  } else {
    (void)sa_.mcast_leave(id.client | kCmaJoinOwnerBit, proto::McastLeaveReq{id.port, mgid});
  }
}

Result<void> CmaService::leave(uint32_t client, const proto::CmaJoinReq& r) {
  OPENIB_TRY_ASSIGN(Id * id, find(client, r.id));
  const cma::Addr g = from_proto(r.group);
  if (!is_multicast(g)) return err(EINVAL, "{} is not a multicast address", g.str());
  auto it = id->groups.find(arp::gid_of_ip(to_ip(g)));  // a RoCE group's MGID
  if (it == id->groups.end() || !it->second.roce) {
    OPENIB_TRY_ASSIGN(auto mg, cma::mgid_for(g, id->ps, id->pkey ? id->pkey : 0xFFFF));
    it = id->groups.find(mg);
  }
  if (it == id->groups.end()) return err(ENOENT, "id {} has not joined {}", r.id, g.str());
  drop_group(*id, it->first, it->second);
  id->groups.erase(it);
  return ok();
}

// ---- teardown -----------------------------------------------------------------

void CmaService::release(Id& id) {
  ++id.op;
  for (auto& [mg, g] : id.groups) drop_group(id, mg, g);
  id.groups.clear();
  for (const auto& key : id.listens) {
    auto it = cm_listens_.find(key);
    if (it == cm_listens_.end()) continue;
    if (--it->second.refs == 0) {
      (void)cm_.destroy(kCmaCmOwner, it->second.cm);
      listen_key_.erase(it->second.cm);
      cm_listens_.erase(it);
    }
  }
  id.listens.clear();
  unpend(id);
  // The IB CM sends the DREQ (established) or REJ (being made) itself.
  forget_cm(id);
  if (id.bound) ports_.unbind(owner_key(id.client, id.handle));
  id.bound = false;
  if (auto it = token_of_.find({id.client, id.qp}); id.qp && it != token_of_.end()) {
    tokens_.erase(it->second);
    token_of_.erase(it);
  }
}

Result<void> CmaService::destroy(uint32_t client, uint32_t h) {
  OPENIB_TRY_ASSIGN(Id * id, find(client, h));
  release(*id);
  erase_id(client, h);
  return ok();
}

void CmaService::client_gone(uint32_t client) {
  auto s = sessions_.find(client);
  if (s == sessions_.end()) return;
  for (auto& [h, id] : s->second.ids) release(id);
  ids_budget_.give(client, s->second.uid, s->second.ids.size());
  sessions_.erase(s);
  sa_.client_gone(client | kCmaJoinOwnerBit);
  for (auto it = token_of_.lower_bound({client, 0}); it != token_of_.end() && it->first.first == client;) {
    tokens_.erase(it->second);
    it = token_of_.erase(it);
  }
}

void CmaService::device_lost() {
  for (auto& [c, s] : sessions_)
    for (auto& [h, id] : s.ids) {
      if (!id.port || id.state == S::kDeviceRemoval) continue;
      id.state = S::kDeviceRemoval;
      ++counters_.device_removals;
      proto::CmaEventMsg m;
      m.type = static_cast<uint8_t>(T::kDeviceRemoval);
      m.status = -ENODEV;
      emit(id, m);
    }
}

void CmaService::address_changed(int, const arp::Ip& a, bool added) {
  if (added) return;
  for (auto& [c, s] : sessions_)
    for (auto& [h, id] : s.ids) {
      if (id.src.family != a.family || id.src.addr != a.bytes) continue;
      ++counters_.addr_changes;
      proto::CmaEventMsg m;
      m.type = static_cast<uint8_t>(T::kAddrChange);
      emit(id, m);
    }
}

// ---- QUERY, INFO ----------------------------------------------------------------

Result<proto::CmaIdRep> CmaService::query(uint32_t client, uint32_t h) {
  OPENIB_TRY_ASSIGN(Id * id, find(client, h));
  proto::CmaIdRep r;
  r.state = static_cast<uint8_t>(id->state);
  r.port = id->port;
  r.ps = id->ps;
  r.pkey = id->pkey;
  r.src = to_proto(id->src);
  r.dst = to_proto(id->dst);
  r.sgid = id->sgid;
  r.dgid = id->dgid;
  r.have_path = id->have_path;
  r.path = id->path;
  r.qpn = id->qpn;
  return r;
}

// Another user's endpoints and QPNs are not everyone's to read (issue 29):
// the ids listed are those of the caller's uid (ibdctl asks on a
// connection of its own), all of them only for a privileged caller; the
// counters and gauges stay global (as /proc/net's totals).
std::string CmaService::json(uid_t uid, bool privileged) const {
  nlohmann::json j;
  j["sessions"] = sessions_.size();
  j["ids_shown"] = privileged ? "all" : "own";
  auto& ids = j["ids"];
  ids = nlohmann::json::array();
  size_t n = 0;
  for (const auto& [c, s] : sessions_) {
    if (!privileged && s.uid != uid) continue;
    for (const auto& [h, id] : s.ids) {
      if (++n > 256) break;  // INFO stays small; the counters give the totals
      ids.push_back({{"client", c}, {"id", h}, {"ps", id.ps}, {"state", state_name(id.state)},
                     {"src", id.src.str()}, {"dst", id.dst.family ? id.dst.str() : ""}, {"port", id.port},
                     {"qpn", id.qpn}, {"groups", id.groups.size()}});
    }
  }
  j["bound_ports"] = ports_.size();
  j["cm_listeners"] = cm_listens_.size();
  for (const auto& [k, v] : counter_list()) j["counters"][k] = v;
  if (arp_) j["arp"] = nlohmann::json::parse(arp_->json(), nullptr, false);
  return j.dump();
}

std::vector<std::pair<std::string, uint64_t>> CmaService::counter_list() const {
  uint64_t ids = 0;
  for (const auto& [c, s] : sessions_) ids += s.ids.size();
  std::vector<std::pair<std::string, uint64_t>> v = {
      {"cma.opens", counters_.opens},
      {"cma.events", counters_.events},
      {"cma.sessions_overrun", counters_.sessions_overrun},
      {"cma.connect_requests", counters_.connect_requests},
      {"cma.requests_refused", counters_.requests_refused},
      {"cma.late_attaches_undone", counters_.late_attaches_undone},
      {"cma.addr_changes", counters_.addr_changes},
      {"cma.device_removals", counters_.device_removals},
      {"cma.requests_bad_address", counters_.requests_bad_address},
      {"cma.requests_over_backlog", counters_.requests_over_backlog},
      {"cma.requests_over_budget", counters_.requests_over_budget},
      {"cma.requests_expired", counters_.requests_expired},
      {"cma.local_routes", counters_.local_routes},
      {"cma.roce_joins", counters_.roce_joins},
      {"cma.ids_denied", ids_budget_.denied()},
      {"cma.ids", ids},
      {"cma.bound_ports", ports_.size()},
  };
  if (arp_) {
    const auto& a = arp_->counters();
    v.emplace_back("arp.requests", a.requests);
    v.emplace_back("arp.cache_hits", a.cache_hits);
    v.emplace_back("arp.shared", a.shared);
    v.emplace_back("arp.kernel_resolutions", a.kernel_resolutions);
    v.emplace_back("arp.retries", a.retries);
    v.emplace_back("arp.failures", a.failures);
    v.emplace_back("arp.timeouts", a.timeouts);
    v.emplace_back("arp.invalidations", a.invalidations);
    v.emplace_back("arp.netlink_errors", a.netlink_errors);
    v.emplace_back("arp.udp_probes", a.udp_probes);
    v.emplace_back("arp.malformed", a.malformed);
  }
  return v;
}

}  // namespace openib::ibd
