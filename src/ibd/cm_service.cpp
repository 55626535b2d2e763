// ibd's connection manager service: see cm_service.hpp and docs/cm.md "In ibd".
#include "ibd/cm_service.hpp"

#include <sys/random.h>

#include <algorithm>
#include <boost/asio/post.hpp>
#include <cstring>
#include <nlohmann/json.hpp>

#include "common/iba.hpp"
#include "common/log.hpp"
#include "hca/gid_find.hpp"
#include "hca/port_caps.hpp"
#include "ibd/qp_attr_convert.hpp"
#include "sa/path_record.hpp"

namespace openib::ibd {

namespace {

enum : uint8_t { kListen = 1, kConn = 2, kSidr = 3 };

constexpr uint8_t kCmClass = 0x07, kCmVersion = 2;
constexpr uint8_t kMethodGet = 0x01, kMethodSend = 0x03;
constexpr uint16_t kAttrReq = 0x0010, kAttrRep = 0x0013, kAttrDreq = 0x0015, kAttrSidrReq = 0x0017;

uint32_t random_psn() {
  uint32_t v = 0;
  if (::getrandom(&v, sizeof v, 0) != sizeof v) v = static_cast<uint32_t>(::time(nullptr));
  v &= 0xffffff;
  return v ? v : 1;  // 0 would mean "the engine's" to Engine::accept
}

cm::Bytes private_span(const proto::CmPrivate& pd, uint8_t len) {
  return {reinterpret_cast<const std::byte*>(pd.data()), std::min<size_t>(len, pd.size())};
}

Result<void> check_private(uint8_t len, size_t max, const char* what) {
  if (len > max) return err(EINVAL, "{} carries at most {} bytes of private data, not {}", what, max, len);
  return ok();
}

// The peer's QP1 along a path (IBA 13.5.1: GSI, Q_Key 0x80010000); a GRH
// when the path leaves the subnet (hop limit > 1, IBA 15.2.5.16).
mad::MadAddress peer_of(const sa::PathRecord& p) {
  mad::MadAddress a;
  a.qpn = 1;
  a.qkey = iba::kGsiQkey;
  a.lid = p.dlid;
  a.sl = p.sl;
  // The GIDs always: an Ethernet port's MADs have a GRH whatever the
  // path's hop limit (IBA Annex A17), and the source GID picks the GID
  // table entry (the source IP's, so that an IPv4 path goes as IPv4).
  a.gid = p.dgid;
  a.local_gid = p.sgid;
  if (p.hop_limit > 1) {
    a.grh = true;
    a.hop_limit = p.hop_limit;
    a.traffic_class = p.tclass;
    a.flow_label = p.flow_label;
  }
  return a;
}

cm::CmPath cm_path_of(const sa::PathRecord& p) {
  cm::CmPath c;
  c.local_lid = p.slid;
  c.remote_lid = p.dlid;
  c.local_gid = p.sgid;
  c.remote_gid = p.dgid;
  c.flow_label = p.flow_label;
  c.packet_rate = p.rate;
  c.traffic_class = p.tclass;
  c.hop_limit = p.hop_limit;
  c.sl = p.sl;
  c.subnet_local = p.hop_limit <= 1;
  // IBA 12.6.5 Local ACK Timeout: the path's round trip plus the CA's ACK
  // delay; the packet life time counts twice, i.e. + 1 in 2^t (ib_cm's rule).
  c.local_ack_timeout = static_cast<uint8_t>(std::min(31, p.packet_life_time + 1));
  return c;
}

// The INIT attributes ibd gives a connection's QP (IBA 11.2.4.2: port,
// P_Key index 0, the remote access the CM offers, as rdma_cm's).
std::pair<uint32_t, hca::QpAttr> init_attr(uint8_t port) {
  hca::QpAttr a;
  a.state = hca::QpState::kInit;
  a.port = port;
  a.pkey_index = 0;
  a.access = hca::kAccessLocalWrite | hca::kAccessRemoteWrite | hca::kAccessRemoteRead | hca::kAccessRemoteAtomic;
  return {hca::qp_attr::kState | hca::qp_attr::kPort | hca::qp_attr::kPkeyIndex | hca::qp_attr::kAccessFlags, a};
}

void fill_private(proto::CmEventMsg& m, cm::Bytes pd) {
  const size_t n = std::min(pd.size(), m.private_data.size());
  if (n) std::memcpy(m.private_data.data(), pd.data(), n);  // (a timer event has none: no null source)
  m.private_len = static_cast<uint8_t>(n);
}

// An engine event's fields as the client sees them; its type and id are the caller's.
proto::CmEventMsg event_msg(uint8_t port, const cm::Event& e) {
  proto::CmEventMsg m;
  m.port = port;
  m.service_id = e.service_id;
  m.remote_qpn = e.remote_qpn;
  m.starting_psn = e.starting_psn;
  m.responder_resources = e.responder_resources;
  m.initiator_depth = e.initiator_depth;
  m.rnr_retry_count = e.rnr_retry_count;
  m.srq = e.srq ? 1 : 0;
  m.remote_lid = e.peer.lid;
  if (e.path) m.remote_gid = e.path->local_gid;  // the REQ's sender
  fill_private(m, e.private_data);
  return m;
}

// Service-ID ownership for CM_LISTEN (docs/cm.md "Security"). A range is
// (value, mask): the service IDs x with (x ^ value) & mask == 0.
struct SidRange {
  uint64_t value, mask;
  const char* what;
};
// The RDMA CM's: (port space << 16) + port (IBA Annex A11.3.1; Linux's
// rdma_get_service_id) for IPoIB 0x0002, TCP 0x0106, UDP 0x0111, IB 0x013F.
constexpr uint64_t kPortMask = ~uint64_t{0xffff};
constexpr SidRange kCmaRanges[] = {{uint64_t{0x0002} << 16, kPortMask, "IPoIB"},
                                   {uint64_t{0x0106} << 16, kPortMask, "TCP"},
                                   {uint64_t{0x0111} << 16, kPortMask, "UDP"},
                                   {uint64_t{0x013F} << 16, kPortMask, "IB"}};
// IPoIB connected mode's (RFC 4755; Linux's IPOIB_CM_IETF_ID | QPN).
constexpr SidRange kIpoibCmRange{uint64_t{0x10} << 56, uint64_t{0xff} << 56, "IPoIB-CM"};

bool overlaps(uint64_t sid, uint64_t mask, const SidRange& r) { return ((sid ^ r.value) & mask & r.mask) == 0; }

Result<void> may_listen(uint64_t sid, uint64_t mask, bool internal, bool privileged) {
  if (internal) return ok();  // the RDMA CM, after its own bind rules
  for (const auto& r : kCmaRanges)
    if (overlaps(sid, mask, r))
      return err(EACCES,
                 "service ID {:#x}/{:#x} is in the RDMA CM's {} port space ({:#x}/{:#x}): listen there through the "
                 "RDMA CM (rdma_bind_addr/rdma_listen), which owns those ports",
                 sid, mask, r.what, r.value, r.mask);
  if (privileged) return ok();
  if (mask != ~uint64_t{0})
    return err(EACCES, "a listen with a service ID mask ({:#x}) takes root or CAP_NET_ADMIN; listen on one service ID "
                       "(mask all ones)", mask);
  if (overlaps(sid, mask, kIpoibCmRange))
    return err(EACCES, "service ID {:#x} is in the {} range ({:#x}/{:#x}): root or CAP_NET_ADMIN only", sid,
               kIpoibCmRange.what, kIpoibCmRange.value, kIpoibCmRange.mask);
  return ok();
}

}  // namespace

CmService::CmService(boost::asio::io_context& io, hca::Device& hca, UmadService& umad, uint8_t num_ports)
    : io_(io), hca_(hca), umad_(umad), num_ports_(num_ports) {}

CmService::~CmService() {
  *alive_ = false;
  for (auto& [p, port] : ports_) {
    port.engine.reset();
    if (port.layer && port.agent) port.layer->unregister_agent(port.agent);
  }
}

void CmService::start() {
  for (uint8_t p = 1; p <= num_ports_; ++p)
    umad_.watch_layer(p, [this, p](mad::MadLayer* l) { on_layer(p, l); });
}

void CmService::on_layer(uint8_t port, mad::MadLayer* layer) {
  Port& P = ports_[port];
  ++P.generation;
  if (!layer) {
    // The device went (docs/cm.md "Device loss"): every id of the port fails.
    auto owners = std::move(P.owners);
    P.owners.clear();
    P.engine.reset();
    P.layer = nullptr;
    P.agent = 0;
    for (auto& [eid, o] : owners) {
      auto s = sessions_.find(o.first);
      if (s == sessions_.end()) continue;
      if (auto it = s->second.ids.find(o.second); it != s->second.ids.end()) it->second.engine_id = 0;
      emit_error(o.first, o.second, port, ENODEV);
    }
    fail_pending_listens(port, ENODEV);
    return;
  }
  P.layer = layer;
  mad::AgentSpec spec;
  spec.mgmt_class = kCmClass;
  spec.class_version = kCmVersion;
  spec.methods[0] = (uint64_t{1} << kMethodSend) | (uint64_t{1} << kMethodGet);
  auto a = layer->register_agent(spec, [this, port](const mad::Delivery& d) {
    if (d.status != 0) return;  // our sends await nothing; nothing comes back
    Port& pt = ports_[port];
    if (pt.engine) pt.engine->on_mad(d.from, d.data);
  });
  if (!a) {
    log::get("cm")->error("port {}: the CM agent (class 0x07 version 2) cannot be registered: {}", port,
                          a.error().message);
    return;
  }
  P.agent = *a;
  const uint64_t gen = P.generation;
  hca_.query_port_async(port, [this, alive = std::weak_ptr<bool>(alive_), port, gen](Result<hca::PortAttr> r) {
    if (alive.expired()) return;
    if (!r) {
      log::get("cm")->error("port {}: QUERY_PORT for the CM failed: {}", port, r.error().message);
      return;
    }
    make_engine(port, gen, *r);
  });
}

void CmService::make_engine(uint8_t port, uint64_t gen, const hca::PortAttr& a) {
  Port& P = ports_[port];
  if (P.generation != gen || !P.layer) return;
  cm::PortInfo info;
  info.ca_guid = hca_.caps().node_guid;
  info.gid = sa::make_gid(a.gid_prefix, a.port_guid);
  info.lid = a.lid;
  info.ca_ack_delay = hca_.caps().local_ca_ack_delay;
  P.ethernet = hca::protocol_roce(a.link_layer);
  info.ethernet = P.ethernet;
  if (P.engine) return P.engine->set_port(info);
  cm::Env env;
  env.send = [this, port](const mad::MadAddress& to, mad::ByteVec mad) -> Result<void> {
    Port& pt = ports_[port];
    if (!pt.layer || !pt.agent) return err(ENETDOWN, "port {}: no MAD layer", port);
    return pt.layer->send(pt.agent, to, mad, 0, 0);
  };
  env.event = [this, port](const cm::Event& e) { on_engine_event(port, e); };
  env.admit = [this, port](uint64_t, uint32_t listen_id) { return admit(port, listen_id); };
  P.engine = std::make_unique<cm::Engine>(io_, std::move(env), info);
  P.engine->set_limits(engine_limits_);
  log::get("cm")->info("port {}: the connection manager is up (LID {}, CA GUID {:#018x})", port, a.lid,
                       info.ca_guid);
  start_pending_listens(port);
}

void CmService::port_changed(uint8_t port) {
  auto it = ports_.find(port);
  if (it == ports_.end() || !it->second.engine) return;
  const uint64_t gen = it->second.generation;
  hca_.query_port_async(port, [this, alive = std::weak_ptr<bool>(alive_), port, gen](Result<hca::PortAttr> r) {
    if (!alive.expired() && r) make_engine(port, gen, *r);
  });
}

void CmService::set_engine_limits(const cm::EngineLimits& l) {
  engine_limits_ = l;
  for (auto& [p, port] : ports_)
    if (port.engine) port.engine->set_limits(l);
}

// ---- sessions and events ---------------------------------------------------

Result<UniqueFd> CmService::open(uint32_t client, uid_t uid) {
  if (sessions_.count(client)) return err(EBUSY, "this connection has its CM socket already");
  OPENIB_TRY_ASSIGN(auto pair, EventSocket::open(io_, max_queued_, EventCharge{event_budget_, client, uid}));
  Session s;
  s.client = client;
  s.uid = uid;
  s.events = std::move(pair.first);
  sessions_.emplace(client, std::move(s));
  ++counters_.opens;
  return std::move(pair.second);
}

Result<void> CmService::open_internal(uint32_t owner, QpOps qp, Sink sink) {
  if (sessions_.count(owner)) return err(EBUSY, "CM session {} exists", owner);
  Session s;
  s.client = owner;
  s.sink = std::move(sink);
  s.qp = std::make_unique<QpOps>(std::move(qp));
  sessions_.emplace(owner, std::move(s));
  ++counters_.opens;
  return ok();
}

Result<CmService::QpInfo> CmService::qp_lookup(uint32_t client, uint32_t handle) {
  const QpOps& ops = qp_ops_of(client);
  if (!ops.lookup) return err(ENOSYS, "no QP lookup");
  return ops.lookup(client, handle);
}

// An in-ibd user's QPs are its own; a client's are the Server's.
const CmService::QpOps& CmService::qp_ops_of(uint32_t client) const {
  const auto s = sessions_.find(client);
  return s != sessions_.end() && s->second.qp ? *s->second.qp : qp_;
}

void CmService::qp_modify(uint32_t client, uint32_t handle, uint32_t mask, const hca::QpAttr& a, Done done) {
  const QpOps& ops = qp_ops_of(client);
  if (!ops.modify) return done(err(ENOSYS, "no QP modify"));
  ops.modify(client, handle, mask, a, std::move(done));
}

void CmService::emit(uint32_t client, proto::CmEventMsg m) {
  auto it = sessions_.find(client);
  if (it == sessions_.end()) return;
  Session& s = it->second;
  if (s.sink) {
    ++counters_.events;
    // Posted: the user may call back into the service (and the engine).
    boost::asio::post(io_, [this, alive = std::weak_ptr<bool>(alive_), client, m] {
      if (alive.expired()) return;
      auto i = sessions_.find(client);
      if (i != sessions_.end() && i->second.sink) i->second.sink(m);
    });
    return;
  }
  if (!s.events || !s.events->is_open()) return;
  ++counters_.events;
  if (s.events->push(proto::encode(m)) == EventSocket::Push::kOverrun) {
    // The client reads none of its events: its CM socket is closed, so it
    // learns (ECONNRESET) instead of missing some silently.
    ++counters_.sessions_overrun;
    log::get("cm")->warn("client {}: more than {} CM events unread; its CM socket is closed", client, max_queued_);
  }
}

Result<void> CmService::charge(const Session& s) {
  if (!s.sink) return ids_budget_.take(s.client, s.uid);
  if (s.ids.size() >= kMaxInternalIds)
    return err(EDQUOT, "the RDMA CM's CM session holds {} ids already (at most {})", s.ids.size(), kMaxInternalIds);
  return ok();
}

void CmService::uncharge(uint32_t client, uint64_t n) {
  auto it = sessions_.find(client);
  if (it != sessions_.end() && !it->second.sink) ids_budget_.give(client, it->second.uid, n);
}

// A REQ or SIDR_REQ matched the listener `listen_id`: its session pays for
// the passive id (docs/cm.md "Security"); refused, the engine answers REJ
// "No resources". The id's record follows in on_engine_event, at once.
bool CmService::admit(uint8_t port, uint32_t listen_id) {
  Port& P = ports_[port];
  auto lo = P.owners.find(listen_id);
  auto s = lo == P.owners.end() ? sessions_.end() : sessions_.find(lo->second.first);
  if (s == sessions_.end()) return true;  // nobody to charge: on_engine_event rejects it
  if (charge(s->second)) return true;
  ++refused_passive_;
  return false;
}

void CmService::close_session(uint32_t client) {
  auto it = sessions_.find(client);
  if (it == sessions_.end()) return;
  uncharge(client, it->second.ids.size());
  for (auto& [h, rec] : it->second.ids) {
    if (!rec.engine_id) continue;
    auto p = ports_.find(rec.port);
    if (p == ports_.end()) continue;
    p->second.owners.erase(rec.engine_id);
    if (p->second.engine) p->second.engine->destroy(rec.engine_id);
  }
  sessions_.erase(it);
}

void CmService::client_gone(uint32_t client) { close_session(client); }

size_t CmService::ids_of(uint32_t client) const {
  auto it = sessions_.find(client);
  return it == sessions_.end() ? 0 : it->second.ids.size();
}

Result<std::pair<CmService::Session*, CmService::IdRec*>> CmService::find(uint32_t client, uint32_t handle) {
  auto s = sessions_.find(client);
  if (s == sessions_.end()) return err(ENOTCONN, "CM_OPEN first");
  auto it = s->second.ids.find(handle);
  if (it == s->second.ids.end()) return err(ENOENT, "no CM id {}", handle);
  return std::pair<Session*, IdRec*>{&s->second, &it->second};
}

Result<cm::Engine*> CmService::engine(uint8_t port) {
  if (port < 1 || port > num_ports_) return err(EINVAL, "no port {}", port);
  auto it = ports_.find(port);
  if (it == ports_.end() || !it->second.engine) {
    ++counters_.requests_without_engine;
    return err(ENETDOWN, "port {}: the connection manager is not running (no MAD layer)", port);
  }
  return it->second.engine.get();
}

uint32_t CmService::add_id(Session& s, IdRec rec) {
  uint32_t h = s.next_handle++;
  while (h == 0 || s.ids.count(h)) h = s.next_handle++;
  if (rec.engine_id) ports_[rec.port].owners[rec.engine_id] = {s.client, h};
  s.ids.emplace(h, rec);
  return h;
}

// ---- QP transitions --------------------------------------------------------

Result<std::pair<uint32_t, hca::QpAttr>> CmService::hca_attr(uint8_t port, uint32_t engine_id, uint8_t state,
                                                            uint32_t rq_psn, std::array<uint8_t, 16>* local_gid) {
  if (state == 1) return init_attr(port);
  OPENIB_TRY_ASSIGN(cm::Engine * e, engine(port));
  OPENIB_TRY_ASSIGN(cm::QpParams q, e->qp_params(engine_id, state));
  namespace m = hca::qp_attr;
  uint32_t mask = q.mask;
  hca::QpAttr a = q.attr;  // the engine's attributes are the driver's type
  if (mask & m::kAv) a.av.port = port;
  if ((mask & m::kAv) && ethernet(port)) {
    // No LIDs on Ethernet (a REQ's are the permissive 0xFFFF, IBA Annex
    // A17): the GRH carries the path; its sgid_index is the local GID's
    // entry, which move_qp looks up (local_gid).
    a.av.dlid = 0;
    a.av.src_path_bits = 0;
    a.av.grh = true;
    if (local_gid) *local_gid = q.local_gid;
  }
  // The passive side's own receive PSN (chosen at accept, before the engine
  // knows it; the REP carries it: docs/cm.md "PSNs").
  if (state == 2 && rq_psn != UINT32_MAX) mask |= m::kRqPsn, a.rq_psn = rq_psn;
  return std::pair<uint32_t, hca::QpAttr>{mask, a};
}

void CmService::move_qp(uint32_t client, uint32_t qp_handle, uint8_t port, uint32_t engine_id,
                        std::vector<uint8_t> states, uint32_t rq_psn, Done done) {
  if (states.empty()) return done(ok());
  const QpOps& ops = qp_ops_of(client);
  if (states.size() > 1 && !ethernet(port) && ops.modify_chain)
    return move_qp_chained(client, qp_handle, port, engine_id, states, rq_psn, std::move(done));
  const uint8_t state = states.front();
  states.erase(states.begin());
  std::array<uint8_t, 16> local_gid{};
  auto attr = hca_attr(port, engine_id, state, rq_psn, &local_gid);
  if (!attr) return done(attr.take_error());
  if (!((attr->first & hca::qp_attr::kAv) && ethernet(port)))
    return modify_then(client, qp_handle, port, engine_id, std::move(states), rq_psn, std::move(*attr),
                       std::move(done));
  // An Ethernet port's RTR: the source GID's entry of the GID table (the
  // IP's, docs/simhca.md §16.1), as Linux's sgid_attr.
  hca::find_gid_async(hca_, port, local_gid,
                      [this, alive = std::weak_ptr<bool>(alive_), client, qp_handle, port, engine_id,
                       states = std::move(states), rq_psn, a = std::move(*attr),
                       done = std::move(done)](Result<uint16_t> idx) mutable {
                        if (alive.expired()) return;
                        if (!idx) return done(err(idx.error().code, "the connection's source GID: {}", idx.error().message));
                        a.second.av.sgid_index = static_cast<uint8_t>(*idx);
                        modify_then(client, qp_handle, port, engine_id, std::move(states), rq_psn, std::move(a),
                                    std::move(done));
                      });
}

// An InfiniBand port's transitions need no lookup between them: they go
// to the device together (one doorbell, hca::Device::modify_qp_chain_async),
// as the passive side's INIT, RTR, RTS before its REP and the active side's
// RTR, RTS at the REP.
void CmService::move_qp_chained(uint32_t client, uint32_t qp_handle, uint8_t port, uint32_t engine_id,
                                const std::vector<uint8_t>& states, uint32_t rq_psn, Done done) {
  std::vector<hca::QpChange> steps;
  for (uint8_t state : states) {
    auto attr = hca_attr(port, engine_id, state, rq_psn, nullptr);
    if (!attr) return done(attr.take_error());
    steps.push_back({attr->first, attr->second});
  }
  counters_.qp_transitions += steps.size();
  ++counters_.qp_chains;
  const QpOps& ops = qp_ops_of(client);
  ops.modify_chain(client, qp_handle, std::move(steps),
                   [this, alive = std::weak_ptr<bool>(alive_), done = std::move(done)](Result<void> r) mutable {
                     if (alive.expired()) return;
                     if (!r) {
                       ++counters_.qp_transition_errors;
                       return done(err(r.error().code, "QP transition: {}", r.error().message));
                     }
                     done(ok());
                   });
}

void CmService::modify_then(uint32_t client, uint32_t qp_handle, uint8_t port, uint32_t engine_id,
                            std::vector<uint8_t> states, uint32_t rq_psn, std::pair<uint32_t, hca::QpAttr> attr,
                            Done done) {
  ++counters_.qp_transitions;
  qp_modify(client, qp_handle, attr.first, attr.second,
             [this, alive = std::weak_ptr<bool>(alive_), client, qp_handle, port, engine_id,
              states = std::move(states), rq_psn, done = std::move(done)](Result<void> r) mutable {
               if (alive.expired()) return;
               if (!r) {
                 ++counters_.qp_transition_errors;
                 return done(err(r.error().code, "QP transition: {}", r.error().message));
               }
               move_qp(client, qp_handle, port, engine_id, std::move(states), rq_psn, std::move(done));
             });
}

void CmService::qp_to_error(uint32_t client, const IdRec& rec) {
  if (rec.manual || rec.kind != kConn || !rec.qp) return;
  hca::QpAttr a;
  a.state = hca::QpState::kErr;
  ++counters_.qp_transitions;
  qp_modify(client, rec.qp, hca::qp_attr::kState, a, [this, alive = std::weak_ptr<bool>(alive_)](Result<void> r) {
    if (!alive.expired() && !r) ++counters_.qp_transition_errors;  // the QP may be gone already
  });
}

// ---- requests ----------------------------------------------------------------

Result<uint32_t> CmService::listen(uint32_t client, const proto::CmListenReq& r, bool privileged) {
  auto s = sessions_.find(client);
  if (s == sessions_.end()) return err(ENOTCONN, "CM_OPEN first");
  if (r.flags & ~proto::kCmListenSidr) return err(EINVAL, "unknown CM_LISTEN flags {:#x}", r.flags);
  OPENIB_TRY(may_listen(r.service_id, r.service_mask, s->second.sink != nullptr, privileged));
  const bool sidr = r.flags & proto::kCmListenSidr;
  auto e = engine(r.port);
  if (!e && !coming_up(r.port)) return e.take_error();
  IdRec rec;
  rec.port = r.port;
  rec.kind = kListen;
  if (!e) {
    // ibd has just started and the port's CM is coming up: the listen is
    // the engine's as soon as it runs, so a service started right after
    // ibd gets its connections rather than ENETDOWN (docs/cm.md "Listening").
    OPENIB_TRY(check_pending_overlap(r.port, r.service_id, r.service_mask, sidr));
    OPENIB_TRY(charge(s->second));
    rec.pending = true;
    rec.sidr = sidr;
    rec.service_id = r.service_id;
    rec.service_mask = r.service_mask;
    return add_id(s->second, rec);
  }
  OPENIB_TRY(charge(s->second));
  auto eid = (*e)->listen(r.service_id, r.service_mask, client, sidr);
  if (!eid) {
    uncharge(client);
    return eid.take_error();
  }
  rec.engine_id = *eid;
  return add_id(s->second, rec);
}

bool CmService::coming_up(uint8_t port) const {
  if (port < 1 || port > num_ports_) return false;
  auto it = ports_.find(port);
  return it == ports_.end() || it->second.generation == 0 || (it->second.layer && !it->second.engine);
}

// Two pending listens may not overlap, as the engine would refuse the
// second (EADDRINUSE): service IDs equal under both masks.
Result<void> CmService::check_pending_overlap(uint8_t port, uint64_t sid, uint64_t mask, bool sidr) const {
  for (const auto& [c, s] : sessions_)
    for (const auto& [h, rec] : s.ids)
      if (rec.pending && rec.port == port && rec.sidr == sidr && ((rec.service_id ^ sid) & rec.service_mask & mask) == 0)
        return err(EADDRINUSE, "service ID {:#x}/{:#x} overlaps a listen on port {} ({:#x}/{:#x})", sid, mask, port,
                   rec.service_id, rec.service_mask);
  return ok();
}

// The port's engine runs: it takes the listens made before.
void CmService::start_pending_listens(uint8_t port) {
  Port& P = ports_[port];
  for (auto& [client, s] : sessions_) {
    for (auto& [h, rec] : s.ids) {
      if (!rec.pending || rec.port != port) continue;
      rec.pending = false;
      auto eid = P.engine->listen(rec.service_id, rec.service_mask, client, rec.sidr);
      if (!eid) {
        log::get("cm")->warn("port {}: client {}'s listen on {:#x} made before the CM ran: {}", port, client,
                             rec.service_id, eid.error().message);
        emit_error(client, h, port, eid.error().code);
        continue;
      }
      rec.engine_id = *eid;
      P.owners[*eid] = {client, h};
    }
  }
}

// The device went before the port's engine ran: its listens fail as the
// engine's ids do (docs/cm.md "Device loss").
void CmService::fail_pending_listens(uint8_t port, int code) {
  for (auto& [client, s] : sessions_) {
    for (auto& [h, rec] : s.ids) {
      if (!rec.pending || rec.port != port) continue;
      rec.pending = false;
      emit_error(client, h, port, code);
    }
  }
}

void CmService::emit_error(uint32_t client, uint32_t handle, uint8_t port, int code) {
  proto::CmEventMsg m;
  m.type = static_cast<uint8_t>(proto::CmEventType::kError);
  m.id = handle;
  m.port = port;
  m.status = code;
  emit(client, m);
}

void CmService::connect(uint32_t client, const proto::CmConnectReq& r, IdDone done) {
  auto s = sessions_.find(client);
  if (s == sessions_.end()) return done(err(ENOTCONN, "CM_OPEN first"));
  if (r.flags & ~proto::kCmManualQp) return done(err(EINVAL, "unknown CM_CONNECT flags {:#x}", r.flags));
  if (auto c = check_private(r.private_len, 92, "a REQ"); !c) return done(c.take_error());
  if (auto e = engine(r.port); !e) return done(e.take_error());
  auto path = sa::decode_path_record(std::span<const std::byte>(reinterpret_cast<const std::byte*>(r.path.data()), 64));
  if (!path) return done(path.take_error());
  if (path->dlid == 0 && !ethernet(r.port)) return done(err(EINVAL, "the path has no DLID"));
  auto qp = qp_lookup(client, r.qp);
  if (!qp) return done(qp.take_error());
  if (qp->type > 1) return done(err(EINVAL, "CM_CONNECT takes an RC or UC QP (UD: SIDR)"));
  const bool manual = r.flags & proto::kCmManualQp;
  if (!manual && qp->state > 1) return done(err(EINVAL, "the QP must be in RESET or INIT, not state {}", qp->state));
  if (auto c = charge(s->second); !c) return done(c.take_error());
  // The id is paid for now; a connect that fails gives it back.
  done = [this, client, done = std::move(done)](Result<uint32_t> h) mutable {
    if (!h) uncharge(client);
    done(std::move(h));
  };
  // Sends the REQ once the QP is in INIT (or at once for a manual QP).
  auto send_req = [this, client, r, path = *path, qpn = qp->qpn, type = qp->type, manual](IdDone fin) mutable {
    auto ss = sessions_.find(client);
    if (ss == sessions_.end()) return fin(err(ENOTCONN, "client gone"));
    auto e = engine(r.port);
    if (!e) return fin(e.take_error());
    cm::ConnectParams p;
    p.service_id = r.service_id;
    p.peer = peer_of(path);
    p.primary = cm_path_of(path);
    if (ethernet(r.port)) {
      // A RoCE path has no LIDs: the REQ carries the permissive LID both
      // ways, as Linux's cm_format_req does for a path through a GRH.
      p.primary.local_lid = 0xffff;
      p.primary.remote_lid = 0xffff;
    }
    p.pkey = path.pkey ? path.pkey : 0xffff;
    p.path_mtu = path.mtu;
    p.qpn = qpn;
    p.qp_type = type;
    p.responder_resources = r.responder_resources;
    p.initiator_depth = r.initiator_depth;
    p.retry_count = r.retry_count;
    p.rnr_retry_count = r.rnr_retry_count;
    p.max_cm_retries = r.max_cm_retries;
    p.cm_response_timeout = r.cm_response_timeout;
    p.private_data = private_span(r.private_data, r.private_len);
    auto id = (*e)->connect(p, client);
    if (!id) return fin(id.take_error());
    IdRec rec;
    rec.port = r.port;
    rec.kind = kConn;
    rec.manual = manual;
    rec.active = true;
    rec.engine_id = *id;
    rec.qp = r.qp;
    rec.responder_resources = r.responder_resources;
    rec.initiator_depth = r.initiator_depth;
    fin(add_id(ss->second, rec));
  };
  if (manual || qp->state == 1) return send_req(std::move(done));
  move_qp(client, r.qp, r.port, 0, {1}, UINT32_MAX,
          [send_req = std::move(send_req), done = std::move(done)](Result<void> m) mutable {
            if (!m) return done(m.take_error());
            send_req(std::move(done));
          });
}

void CmService::accept(uint32_t client, const proto::CmAcceptReq& r, Done done) {
  auto f = find(client, r.id);
  if (!f) return done(f.take_error());
  IdRec& rec = *f->second;
  if (rec.kind != kConn || !rec.engine_id) return done(err(EINVAL, "CM id {} is not a connection", r.id));
  if (r.flags & ~proto::kCmManualQp) return done(err(EINVAL, "unknown CM_ACCEPT flags {:#x}", r.flags));
  auto e = engine(rec.port);
  if (!e) return done(e.take_error());
  if (rec.active) {
    // A manual_qp connect after kReply: the client moved its QP; the RTU.
    if (!rec.manual) return done(err(EINVAL, "ibd answers the REP of CM id {} itself", r.id));
    if (auto c = check_private(r.private_len, 224, "an RTU"); !c) return done(c.take_error());
    if (auto s = (*e)->send_rtu(rec.engine_id, private_span(r.private_data, r.private_len)); !s)
      return done(s.take_error());
    rec.established = true;
    proto::CmEventMsg m;
    m.type = static_cast<uint8_t>(proto::CmEventType::kEstablished);
    m.id = r.id;
    m.port = rec.port;
    emit(client, m);
    return done(ok());
  }
  if (auto c = check_private(r.private_len, 196, "a REP"); !c) return done(c.take_error());
  auto qp = qp_lookup(client, r.qp);
  if (!qp) return done(qp.take_error());
  if (qp->type > 1) return done(err(EINVAL, "CM_ACCEPT takes an RC or UC QP"));
  const bool manual = r.flags & proto::kCmManualQp;
  if (!manual && qp->state > 1) return done(err(EINVAL, "the QP must be in RESET or INIT, not state {}", qp->state));
  rec.manual = manual;
  rec.qp = r.qp;
  rec.responder_resources = r.responder_resources;
  rec.initiator_depth = r.initiator_depth;
  // A manual client moved its QP to RTR with init_qp_attr's receive PSN,
  // the engine's own (chosen when the REQ came): the REP must carry that
  // one (starting_psn 0 keeps it). Otherwise ibd picks one for the QP's RTR
  // and the REP (docs/cm.md "PSNs").
  const uint32_t psn = manual ? 0 : random_psn();
  const uint32_t eid = rec.engine_id;
  const uint8_t port = rec.port;
  auto send_rep = [this, client, r, psn, eid, port, qpn = qp->qpn](Done fin) {
    auto en = engine(port);
    if (!en) return fin(en.take_error());
    cm::AcceptParams p;
    p.qpn = qpn;
    p.starting_psn = psn;
    p.responder_resources = r.responder_resources;
    p.initiator_depth = r.initiator_depth;
    p.rnr_retry_count = r.rnr_retry_count;
    p.target_ack_delay = hca_.caps().local_ca_ack_delay;
    p.private_data = private_span(r.private_data, r.private_len);
    auto a = (*en)->accept(eid, p);
    auto fr = find(client, r.id);
    if (!a) {
      if (fr) qp_to_error(client, *fr->second);
      return fin(a.take_error());
    }
    if (fr) fr->second->accepted = true;
    fin(ok());
  };
  if (manual) return send_rep(std::move(done));
  std::vector<uint8_t> states;
  if (qp->state == 0) states.push_back(1);
  states.push_back(2);
  states.push_back(3);
  // RTR and RTS before the REP, as Linux's rdma_accept: the peer may send
  // as soon as it has the REP.
  move_qp(client, r.qp, port, eid, std::move(states), psn,
          [send_rep = std::move(send_rep), done = std::move(done)](Result<void> m) mutable {
            if (!m) return done(m.take_error());
            send_rep(std::move(done));
          });
}

Result<void> CmService::reject(uint32_t client, const proto::CmRejectReq& r) {
  OPENIB_TRY_ASSIGN(auto f, find(client, r.id));
  IdRec& rec = *f.second;
  if (rec.kind != kConn || !rec.engine_id) return err(EINVAL, "CM id {} is not a connection", r.id);
  OPENIB_TRY(check_private(r.private_len, 148, "a REJ"));
  if (r.ari_len > r.ari.size()) return err(EINVAL, "ARI of {} bytes: at most 72", r.ari_len);
  OPENIB_TRY_ASSIGN(cm::Engine * e, engine(rec.port));
  OPENIB_TRY(e->reject(rec.engine_id, r.reason,
                       cm::Bytes(reinterpret_cast<const std::byte*>(r.ari.data()), r.ari_len),
                       private_span(r.private_data, r.private_len)));
  qp_to_error(client, rec);
  return ok();
}

Result<void> CmService::disconnect(uint32_t client, const proto::CmDisconnectReq& r) {
  OPENIB_TRY_ASSIGN(auto f, find(client, r.id));
  IdRec& rec = *f.second;
  if (rec.kind != kConn || !rec.engine_id) return err(EINVAL, "CM id {} is not a connection", r.id);
  OPENIB_TRY(check_private(r.private_len, 220, "a DREQ"));
  OPENIB_TRY_ASSIGN(cm::Engine * e, engine(rec.port));
  // As rdma_disconnect: the QP to ERROR, then the DREQ.
  OPENIB_TRY(e->disconnect(rec.engine_id, private_span(r.private_data, r.private_len)));
  qp_to_error(client, rec);
  return ok();
}

Result<void> CmService::destroy(uint32_t client, uint32_t id) {
  OPENIB_TRY_ASSIGN(auto f, find(client, id));
  IdRec rec = *f.second;
  f.first->ids.erase(id);
  uncharge(client);
  if (rec.engine_id) {
    auto p = ports_.find(rec.port);
    if (p != ports_.end()) {
      p->second.owners.erase(rec.engine_id);
      if (p->second.engine) p->second.engine->destroy(rec.engine_id);
    }
  }
  return ok();
}

Result<uint32_t> CmService::sidr_query(uint32_t client, const proto::CmSidrQueryReq& r) {
  auto s = sessions_.find(client);
  if (s == sessions_.end()) return err(ENOTCONN, "CM_OPEN first");
  OPENIB_TRY(check_private(r.private_len, 216, "a SIDR_REQ"));
  OPENIB_TRY_ASSIGN(cm::Engine * e, engine(r.port));
  OPENIB_TRY_ASSIGN(auto path, sa::decode_path_record(
                                   std::span<const std::byte>(reinterpret_cast<const std::byte*>(r.path.data()), 64)));
  if (path.dlid == 0 && !ethernet(r.port)) return err(EINVAL, "the path has no DLID");
  cm::SidrParams p;
  p.service_id = r.service_id;
  p.peer = peer_of(path);
  p.pkey = path.pkey ? path.pkey : 0xffff;
  p.max_cm_retries = r.max_cm_retries;
  p.cm_response_timeout = r.cm_response_timeout;
  p.private_data = private_span(r.private_data, r.private_len);
  OPENIB_TRY(charge(s->second));
  auto eid = e->sidr_request(p, client);
  if (!eid) {
    uncharge(client);
    return eid.take_error();
  }
  IdRec rec;
  rec.port = r.port;
  rec.kind = kSidr;
  rec.active = true;
  rec.engine_id = *eid;
  return add_id(s->second, rec);
}

Result<void> CmService::sidr_reply(uint32_t client, const proto::CmSidrReplyReq& r) {
  OPENIB_TRY_ASSIGN(auto f, find(client, r.id));
  IdRec& rec = *f.second;
  if (rec.kind != kSidr || rec.active || !rec.engine_id) return err(EINVAL, "CM id {} is no SIDR request", r.id);
  OPENIB_TRY(check_private(r.private_len, 136, "a SIDR_REP"));
  uint32_t qpn = 0;
  if (r.status == 0) {
    OPENIB_TRY_ASSIGN(auto qp, qp_lookup(client, r.qp));
    if (qp.type != 2) return err(EINVAL, "a SIDR reply names a UD QP");
    qpn = qp.qpn;
  }
  OPENIB_TRY_ASSIGN(cm::Engine * e, engine(rec.port));
  // The engine keeps the answered id (a repeated SIDR_REQ gets the same
  // SIDR_REP) until CM_DESTROY or the client goes.
  OPENIB_TRY(e->sidr_reply(rec.engine_id, r.status, qpn, r.qkey, private_span(r.private_data, r.private_len)));
  return ok();
}

void CmService::init_qp_attr(uint32_t client, const proto::CmInitQpAttrReq& r, InitQpAttrDone done) {
  auto f = find(client, r.id);
  if (!f) return done(f.take_error());
  const IdRec& rec = *f->second;
  if (rec.kind != kConn || !rec.engine_id) return done(err(EINVAL, "CM id {} is not a connection", r.id));
  if (r.state < 1 || r.state > 3)
    return done(err(EINVAL, "CM_INIT_QP_ATTR: state {} (1 INIT, 2 RTR, 3 RTS)", r.state));
  std::array<uint8_t, 16> local_gid{};
  auto a = hca_attr(rec.port, rec.engine_id, r.state, UINT32_MAX, &local_gid);
  if (!a) return done(a.take_error());
  auto answer = [](const std::pair<uint32_t, hca::QpAttr>& at) {
    proto::CmInitQpAttrRep rep;
    rep.attr = to_proto(at.second);
    rep.attr.mask = at.first;
    return rep;
  };
  if (!((a->first & hca::qp_attr::kAv) && ethernet(rec.port))) return done(answer(*a));
  // An Ethernet port's RTR: as move_qp's, the source GID's table entry.
  hca::find_gid_async(hca_, rec.port, local_gid,
                      [alive = std::weak_ptr<bool>(alive_), at = std::move(*a), answer,
                       done = std::move(done)](Result<uint16_t> idx) mutable {
                        if (alive.expired()) return;
                        if (!idx) return done(err(idx.error().code, "the connection's source GID: {}", idx.error().message));
                        at.second.av.sgid_index = static_cast<uint8_t>(*idx);
                        done(answer(at));
                      });
}

// ---- engine events -------------------------------------------------------------

void CmService::on_engine_event(uint8_t port, const cm::Event& e) {
  proto::CmEventMsg m = event_msg(port, e);
  if (e.type == cm::EventType::kReqReceived || e.type == cm::EventType::kSidrReqReceived)
    return on_passive_id(port, e, m);
  Port& P = ports_[port];
  auto o = P.owners.find(e.id);
  if (o == P.owners.end()) return;  // destroyed by its client: no more events
  const uint32_t client = o->second.first, handle = o->second.second;
  m.id = handle;
  auto sit = sessions_.find(client);
  if (sit == sessions_.end()) return;
  auto rit = sit->second.ids.find(handle);
  if (rit == sit->second.ids.end()) return;
  on_id_event(port, e, client, rit->second, m);
}

// A new id from a listener (a REQ or a SIDR_REQ): the listener's client
// gets it, with the listener's handle.
void CmService::on_passive_id(uint8_t port, const cm::Event& e, proto::CmEventMsg& m) {
  using T = proto::CmEventType;
  Port& P = ports_[port];
  auto lo = P.owners.find(e.listen_id);
  auto s = lo == P.owners.end() ? sessions_.end() : sessions_.find(lo->second.first);
  if (s == sessions_.end()) {  // the listener's client is gone: nobody to ask
    boost::asio::post(io_, [this, alive = std::weak_ptr<bool>(alive_), port, id = e.id] {
      if (alive.expired()) return;
      if (auto& pt = ports_[port]; pt.engine) pt.engine->destroy(id);
    });
    return;
  }
  const uint32_t listen_handle = lo->second.second;  // (before add_id adds to P.owners)
  IdRec rec;
  rec.port = port;
  rec.kind = e.type == cm::EventType::kReqReceived ? kConn : kSidr;
  rec.engine_id = e.id;
  m.id = add_id(s->second, rec);
  m.listen_id = listen_handle;
  m.type = static_cast<uint8_t>(e.type == cm::EventType::kReqReceived ? T::kRequest : T::kSidrRequest);
  m.qkey = e.qkey;
  emit(s->first, m);
}

// An event of an id the client holds (its handle in m.id).
void CmService::on_id_event(uint8_t port, const cm::Event& e, uint32_t client, IdRec& rec, proto::CmEventMsg& m) {
  using T = proto::CmEventType;
  switch (e.type) {
    case cm::EventType::kRepReceived:
      return on_rep(port, e.id, client, rec, m);
    case cm::EventType::kRtuReceived:
    case cm::EventType::kEstablished:
      if (rec.established) return;
      rec.established = true;
      m.type = static_cast<uint8_t>(T::kEstablished);
      return emit(client, m);
    case cm::EventType::kRejReceived:
      m.type = static_cast<uint8_t>(T::kRejected);
      m.reason = e.reason;
      m.ari_len = static_cast<uint8_t>(std::min(e.ari.size(), m.ari.size()));
      if (m.ari_len) std::memcpy(m.ari.data(), e.ari.data(), m.ari_len);
      qp_to_error(client, rec);
      return emit(client, m);
    case cm::EventType::kMraReceived:
      m.type = static_cast<uint8_t>(T::kMraReceived);
      return emit(client, m);
    case cm::EventType::kDreqReceived:
      implied_established(port, client, m.id, rec);
      m.type = static_cast<uint8_t>(T::kDisconnectRequest);
      qp_to_error(client, rec);
      // ibd answers at once (as rdma_cm does); the engine is not re-entered.
      boost::asio::post(io_, [this, alive = std::weak_ptr<bool>(alive_), port, eid = e.id] {
        if (alive.expired()) return;
        if (auto& pt = ports_[port]; pt.engine) (void)pt.engine->send_drep(eid, {});
      });
      return emit(client, m);
    case cm::EventType::kStale:
      implied_established(port, client, m.id, rec);
      m.type = static_cast<uint8_t>(T::kDisconnectRequest);
      m.status = ESTALE;
      qp_to_error(client, rec);
      return emit(client, m);
    case cm::EventType::kDrepReceived:
      m.type = static_cast<uint8_t>(T::kDisconnected);
      return emit(client, m);
    case cm::EventType::kTimewaitExit:
      m.type = static_cast<uint8_t>(T::kTimewaitExit);
      forget_engine_id(port, e.id, rec);
      return emit(client, m);
    case cm::EventType::kTimeout:
      return on_timeout(port, e, client, rec, m);
    case cm::EventType::kSidrRepReceived:
      m.type = static_cast<uint8_t>(T::kSidrReply);
      m.sidr_status = e.sidr_status;
      m.qkey = e.qkey;
      forget_engine_id(port, e.id, rec);
      return emit(client, m);
    case cm::EventType::kLapReceived:
      return;  // answered by the engine (APR: no alternate paths); nothing for the client
    case cm::EventType::kReqReceived:
    case cm::EventType::kSidrReqReceived:
      return;  // on_passive_id's
  }
}

// A REP came (active side): the client hears of it; unless it moves its QP
// itself, ibd moves the QP to RTR and RTS and sends the RTU.
void CmService::on_rep(uint8_t port, uint32_t eid, uint32_t client, const IdRec& rec, proto::CmEventMsg& m) {
  m.type = static_cast<uint8_t>(proto::CmEventType::kReply);
  emit(client, m);
  if (rec.manual) return;  // the client moves its QP and sends the RTU (CM_ACCEPT)
  move_qp(client, rec.qp, port, eid, {2, 3}, UINT32_MAX,
          [this, port, client, handle = m.id, eid](Result<void> r) {
            rep_qp_moved(port, client, handle, eid, std::move(r));
          });
}

// The QP of a REP's id is at RTS (`r` ok): the RTU goes and the id is
// established; else the connection is rejected and its QP goes to ERROR.
void CmService::rep_qp_moved(uint8_t port, uint32_t client, uint32_t handle, uint32_t eid, Result<void> r) {
  auto f = find(client, handle);
  auto en = engine(port);
  if (!f || !en || f->second->engine_id != eid) return;
  proto::CmEventMsg ev;
  ev.id = handle;
  ev.port = port;
  if (r) {
    if (auto s = (*en)->send_rtu(eid, {}); !s) {
      r = s.take_error();
    } else {
      ev.type = static_cast<uint8_t>(proto::CmEventType::kEstablished);
      f->second->established = true;
      return emit(client, ev);
    }
  }
  (void)(*en)->reject(eid, 28, {}, {});
  qp_to_error(client, *f->second);
  ev.type = static_cast<uint8_t>(proto::CmEventType::kError);
  ev.status = r.error().code;
  emit(client, ev);
}

void CmService::on_timeout(uint8_t port, const cm::Event& e, uint32_t client, IdRec& rec, proto::CmEventMsg& m) {
  using T = proto::CmEventType;
  m.status = ETIMEDOUT;
  if (e.attr_id == kAttrDreq) {
    m.type = static_cast<uint8_t>(T::kDisconnected);
  } else {
    m.type = static_cast<uint8_t>(T::kTimeout);
    // A SIDR request done, or a passive id its consumer never answered
    // (cm::EngineLimits): the engine's id goes; the handle stays.
    if (e.attr_id == kAttrSidrReq || (e.attr_id == kAttrReq && !rec.active)) forget_engine_id(port, e.id, rec);
    if (e.attr_id == kAttrReq || e.attr_id == kAttrRep) qp_to_error(client, rec);
  }
  emit(client, m);
}

// The id is done (timewait over, SIDR answered or timed out): the engine
// keeps it until destroy() (cm/engine.hpp), so it is destroyed there now
// (after this event; the engine is not re-entered) and forgotten here;
// the client's handle stays until CM_DESTROY.
void CmService::forget_engine_id(uint8_t port, uint32_t eid, IdRec& rec) {
  Port& P = ports_[port];
  P.owners.erase(eid);
  rec.engine_id = 0;
  boost::asio::post(io_, [this, alive = std::weak_ptr<bool>(alive_), port, gen = P.generation, eid] {
    if (alive.expired()) return;
    if (auto& pt = ports_[port]; pt.engine && pt.generation == gen) pt.engine->destroy(eid);
  });
}

// IBA 12.9.5: a passive side whose RTU was lost learns from the peer's
// DREQ that the peer was established; its consumer hears of it first.
void CmService::implied_established(uint8_t port, uint32_t client, uint32_t handle, IdRec& rec) {
  if (rec.active || !rec.accepted || rec.established) return;
  rec.established = true;
  proto::CmEventMsg est;
  est.type = static_cast<uint8_t>(proto::CmEventType::kEstablished);
  est.id = handle;
  est.port = port;
  emit(client, est);
}

// ---- INFO ----------------------------------------------------------------------

std::string CmService::json(std::optional<uint32_t> viewer) const {
  nlohmann::json j;
  size_t ids = 0, internal = 0, internal_ids = 0;
  auto& clients = j["clients"];
  clients = nlohmann::json::array();
  for (const auto& [c, s] : sessions_) {
    if (s.sink) {  // an in-ibd user (the RDMA CM): counted apart
      ++internal;
      internal_ids += s.ids.size();
      continue;
    }
    ids += s.ids.size();
    if (viewer && *viewer != c) continue;  // another user's session: counted, not shown
    clients.push_back({{"client", c}, {"ids", s.ids.size()}, {"queued", s.events ? s.events->queued() : 0},
                       {"open", s.sink || (s.events && s.events->is_open())}});
  }
  j["sessions"] = sessions_.size() - internal;
  j["ids"] = ids;
  j["internal_sessions"] = internal;
  j["internal_ids"] = internal_ids;
  size_t pending = 0;
  for (const auto& [c, s] : sessions_)
    for (const auto& [h, rec] : s.ids) pending += rec.pending;
  j["pending_listens"] = pending;
  auto& ports = j["ports"];
  ports = nlohmann::json::array();
  for (const auto& [p, port] : ports_) {
    nlohmann::json pj;
    pj["port"] = p;
    pj["running"] = port.engine != nullptr;
    if (port.engine) pj["engine"] = nlohmann::json::parse(port.engine->json(), nullptr, false);
    ports.push_back(pj);
  }
  j["memory_bytes"] = memory_bytes();
  return j.dump();
}

std::vector<std::pair<std::string, uint64_t>> CmService::counter_list() const {
  std::vector<std::pair<std::string, uint64_t>> v = {
      {"cm.opens", counters_.opens},
      {"cm.events", counters_.events},
      {"cm.sessions_overrun", counters_.sessions_overrun},
      {"cm.qp_transitions", counters_.qp_transitions},
      {"cm.qp_transition_errors", counters_.qp_transition_errors},
      {"cm.qp_chains", counters_.qp_chains},
      {"cm.requests_without_engine", counters_.requests_without_engine},
      {"cm.ids_denied", ids_budget_.denied()},
      {"cm.passive_refused", refused_passive_},
  };
  // Gauges: the clients' ids and ibd's memory for the CM (docs/cm.md "Memory").
  uint64_t ids = 0;
  for (const auto& [c, s] : sessions_) ids += s.ids.size();
  v.emplace_back("cm.ids", ids);
  v.emplace_back("cm.memory_bytes", memory_bytes());
  for (const auto& [p, port] : ports_) {
    if (!port.engine) continue;
    const auto& c = port.engine->counters();
    const std::string pre = "cm.port" + std::to_string(p) + ".";
    uint64_t sent = 0, received = 0;
    for (auto x : c.sent) sent += x;
    for (auto x : c.received) received += x;
    v.emplace_back(pre + "sent", sent);
    v.emplace_back(pre + "received", received);
    v.emplace_back(pre + "retries", c.retries);
    v.emplace_back(pre + "timeouts", c.timeouts);
    v.emplace_back(pre + "duplicates", c.duplicates);
    v.emplace_back(pre + "stale", c.stale);
    v.emplace_back(pre + "dropped_malformed", c.dropped_malformed);
    v.emplace_back(pre + "dropped_unknown_id", c.dropped_unknown_id);
    v.emplace_back(pre + "rej_no_resources", c.rej_no_resources);
    v.emplace_back(pre + "stale_foreign", c.stale_foreign);
    v.emplace_back(pre + "rej_foreign_gid", c.rej_foreign_gid);
    v.emplace_back(pre + "passive_expired", c.passive_expired);
  }
  return v;
}

size_t CmService::memory_bytes() const {
  size_t n = 0;
  for (const auto& [p, port] : ports_) {
    if (port.engine) n += port.engine->memory_bytes();
    n += port.owners.size() * (sizeof(uint32_t) + sizeof(std::pair<uint32_t, uint32_t>) + 2 * sizeof(void*));
  }
  for (const auto& [c, s] : sessions_) {
    n += sizeof(Session) + s.ids.size() * (sizeof(uint32_t) + sizeof(IdRec) + 2 * sizeof(void*));
    if (s.events) n += s.events->queued_bytes();
  }
  return n;
}

}  // namespace openib::ibd
