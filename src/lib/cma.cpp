// libopenib's RDMA CM channel (include/openib/cma.hpp, docs/cma.md
// "Library"): requests on the Context's connection (ops CMA_*), events
// read from the socket CMA_OPEN hands over (one CmaEventMsg per datagram),
// as cm.cpp's CmChannel. Also the IpEndpoint helpers and rdma_getaddrinfo.
#include "openib/cma.hpp"

#include <arpa/inet.h>
#include <netdb.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <mutex>
#include <unordered_map>

#include "clientproto/messages.hpp"
#include "lib/event_socket.hpp"
#include "lib/objects.hpp"
#include "openib/cm.hpp"

namespace openib {

const char* rdma_event_str(RdmaCmEventType t) {
  switch (t) {
    case RdmaCmEventType::kAddrResolved: return "RDMA_CM_EVENT_ADDR_RESOLVED";
    case RdmaCmEventType::kAddrError: return "RDMA_CM_EVENT_ADDR_ERROR";
    case RdmaCmEventType::kRouteResolved: return "RDMA_CM_EVENT_ROUTE_RESOLVED";
    case RdmaCmEventType::kRouteError: return "RDMA_CM_EVENT_ROUTE_ERROR";
    case RdmaCmEventType::kConnectRequest: return "RDMA_CM_EVENT_CONNECT_REQUEST";
    case RdmaCmEventType::kConnectResponse: return "RDMA_CM_EVENT_CONNECT_RESPONSE";
    case RdmaCmEventType::kConnectError: return "RDMA_CM_EVENT_CONNECT_ERROR";
    case RdmaCmEventType::kUnreachable: return "RDMA_CM_EVENT_UNREACHABLE";
    case RdmaCmEventType::kRejected: return "RDMA_CM_EVENT_REJECTED";
    case RdmaCmEventType::kEstablished: return "RDMA_CM_EVENT_ESTABLISHED";
    case RdmaCmEventType::kDisconnected: return "RDMA_CM_EVENT_DISCONNECTED";
    case RdmaCmEventType::kDeviceRemoval: return "RDMA_CM_EVENT_DEVICE_REMOVAL";
    case RdmaCmEventType::kMulticastJoin: return "RDMA_CM_EVENT_MULTICAST_JOIN";
    case RdmaCmEventType::kMulticastError: return "RDMA_CM_EVENT_MULTICAST_ERROR";
    case RdmaCmEventType::kAddrChange: return "RDMA_CM_EVENT_ADDR_CHANGE";
    case RdmaCmEventType::kTimewaitExit: return "RDMA_CM_EVENT_TIMEWAIT_EXIT";
  }
  return "UNKNOWN EVENT";
}

// ---- IpEndpoint -------------------------------------------------------------

IpEndpoint IpEndpoint::from_sockaddr(const sockaddr* sa) {
  IpEndpoint e;
  if (!sa) return e;
  if (sa->sa_family == AF_INET) {
    sockaddr_in in;
    std::memcpy(&in, sa, sizeof in);
    e.family = AF_INET;
    e.port = ntohs(in.sin_port);
    std::memcpy(e.addr.data(), &in.sin_addr, 4);
  } else if (sa->sa_family == AF_INET6) {
    sockaddr_in6 in6;
    std::memcpy(&in6, sa, sizeof in6);
    e.family = AF_INET6;
    e.port = ntohs(in6.sin6_port);
    std::memcpy(e.addr.data(), &in6.sin6_addr, 16);
    e.scope_id = in6.sin6_scope_id;
  }
  return e;
}

socklen_t IpEndpoint::to_sockaddr(sockaddr_storage& out) const {
  out = {};
  if (family == AF_INET) {
    sockaddr_in in{};
    in.sin_family = AF_INET;
    in.sin_port = htons(port);
    std::memcpy(&in.sin_addr, addr.data(), 4);
    std::memcpy(&out, &in, sizeof in);
    return sizeof in;
  }
  if (family == AF_INET6) {
    sockaddr_in6 in6{};
    in6.sin6_family = AF_INET6;
    in6.sin6_port = htons(port);
    std::memcpy(&in6.sin6_addr, addr.data(), 16);
    in6.sin6_scope_id = scope_id;
    std::memcpy(&out, &in6, sizeof in6);
    return sizeof in6;
  }
  return 0;
}

std::string IpEndpoint::str() const {
  char text[INET6_ADDRSTRLEN] = {};
  if (family == AF_INET) {
    ::inet_ntop(AF_INET, addr.data(), text, sizeof text);
    return fmt::format("{}:{}", text, port);
  }
  if (family == AF_INET6) {
    ::inet_ntop(AF_INET6, addr.data(), text, sizeof text);
    if (scope_id) return fmt::format("[{}%{}]:{}", text, scope_id, port);
    return fmt::format("[{}]:{}", text, port);
  }
  return fmt::format("*:{}", port);
}

bool IpEndpoint::any() const {
  const size_t n = family == AF_INET ? 4 : 16;
  return std::all_of(addr.begin(), addr.begin() + long(n), [](uint8_t b) { return b == 0; });
}

Result<IpEndpoint> rdma_getaddrinfo(const char* node, const char* service, int family) {
  if (family != AF_UNSPEC && family != AF_INET && family != AF_INET6)
    return err(EINVAL, "address family {}: AF_INET or AF_INET6 only", family);
  uint16_t port = 0;
  if (service && *service) {
    const char* end = service + std::strlen(service);
    unsigned v = 0;
    auto [p, ec] = std::from_chars(service, end, v);
    if (ec != std::errc() || p != end || v > 65535) return err(EINVAL, "'{}' is not a port number", service);
    port = uint16_t(v);
  }
  addrinfo hints{};
  hints.ai_family = family;
  hints.ai_socktype = SOCK_STREAM;  // one answer per address
  hints.ai_flags = AI_NUMERICSERV | (node ? 0 : AI_PASSIVE);
  addrinfo* res = nullptr;
  const std::string port_text = std::to_string(port);  // getaddrinfo wants a node or a service
  const int rc = ::getaddrinfo(node, port_text.c_str(), &hints, &res);
  const char* name = node ? node : "*";
  if (rc == EAI_SYSTEM) return sys_err("getaddrinfo({})", name);
  if (rc == EAI_NONAME || rc == EAI_NODATA || rc == EAI_ADDRFAMILY || rc == EAI_AGAIN || rc == EAI_FAIL)
    return err(EADDRNOTAVAIL, "{}: {}", name, gai_strerror(rc));
  if (rc != 0) return err(EINVAL, "{}: {}", name, gai_strerror(rc));
  std::unique_ptr<addrinfo, void (*)(addrinfo*)> guard(res, ::freeaddrinfo);
  for (const addrinfo* a = res; a; a = a->ai_next) {
    if (a->ai_family != AF_INET && a->ai_family != AF_INET6) continue;
    IpEndpoint e = IpEndpoint::from_sockaddr(a->ai_addr);
    e.port = port;
    return e;
  }
  return err(EADDRNOTAVAIL, "{}: no IPv4 or IPv6 address", name);
}

namespace lib {

namespace {

using proto::Op;

proto::CmaAddr to_proto(const IpEndpoint& e) {
  proto::CmaAddr a;
  a.family = e.family;
  a.port = e.port;
  a.addr = e.addr;
  a.scope_id = e.scope_id;
  return a;
}
IpEndpoint from_proto(const proto::CmaAddr& a) {
  IpEndpoint e;
  e.family = static_cast<sa_family_t>(a.family);
  e.port = a.port;
  e.addr = a.addr;
  e.scope_id = a.scope_id;
  return e;
}

bool ud_space(uint16_t ps) { return ps == proto::kRdmaPsUdp || ps == proto::kRdmaPsIpoib; }

class RdmaEventChannelImpl final : public RdmaEventChannel {
 public:
  RdmaEventChannelImpl(ContextImpl& ctx, UniqueFd sock) : ctx_(ctx), sock_(std::move(sock)) {}

  int fd() const override { return sock_.get(); }

  Result<RdmaCmEvent> get_event(int timeout_ms) override {
    std::array<std::byte, 1024> buf;
    OPENIB_TRY_ASSIGN(size_t r, recv_event(sock_.get(), buf, timeout_ms, "RDMA CM"));
    auto m = proto::decode<proto::CmaEventMsg>(std::span<const std::byte>(buf.data(), r));
    if (!m) return err(EPROTO, "RDMA CM event: {}", m.error().message);
    RdmaCmEvent e;
    e.type = static_cast<RdmaCmEventType>(m->type);
    e.id = m->id;
    e.listen_id = m->listen_id;
    e.status = m->status;
    e.port = m->port;
    e.src = from_proto(m->src);
    e.dst = from_proto(m->dst);
    e.responder_resources = m->responder_resources;
    e.initiator_depth = m->initiator_depth;
    e.rnr_retry_count = m->rnr_retry_count;
    e.srq = m->srq != 0;
    e.qp_num = m->qp_num;
    e.qkey = m->qkey;
    e.ah = lib::from_proto(m->ah);
    e.private_data.assign(m->private_data.begin(),
                          m->private_data.begin() + std::min<size_t>(m->private_len, m->private_data.size()));
    if (e.type == RdmaCmEventType::kConnectRequest) {  // the new id is in the listener's port space
      std::lock_guard lk(mu_);
      if (auto it = spaces_.find(e.listen_id); it != spaces_.end()) spaces_[e.id] = it->second;
    }
    return e;
  }

  Result<uint32_t> create_id(RdmaPortSpace ps) override {
    proto::CmaCreateIdReq q;
    q.ps = static_cast<uint16_t>(ps);
    OPENIB_TRY_ASSIGN(auto r, ctx_.conn().call<proto::HandleRep>(Op::kCmaCreateId, q));
    std::lock_guard lk(mu_);
    spaces_[r.handle] = q.ps;
    return r.handle;
  }

  Result<void> destroy_id(uint32_t id) override {
    {
      std::lock_guard lk(mu_);
      spaces_.erase(id);
    }
    return ctx_.conn().call_void(Op::kCmaDestroyId, proto::HandleReq{id});
  }

  Result<IpEndpoint> bind_addr(uint32_t id, const IpEndpoint& addr) override {
    proto::CmaAddrReq q;
    q.id = id;
    q.addr = to_proto(addr);
    OPENIB_TRY_ASSIGN(auto r, ctx_.conn().call<proto::CmaAddrRep>(Op::kCmaBind, q));
    return from_proto(r.addr);
  }

  Result<void> resolve_addr(uint32_t id, const IpEndpoint* src, const IpEndpoint& dst, int timeout_ms) override {
    if (timeout_ms <= 0) return err(EINVAL, "resolve_addr: timeout {} ms", timeout_ms);
    proto::CmaResolveAddrReq q;
    q.id = id;
    if (src) q.src = to_proto(*src);
    q.dst = to_proto(dst);
    q.timeout_ms = uint32_t(timeout_ms);
    return ctx_.conn().call_void(Op::kCmaResolveAddr, q);
  }

  Result<void> resolve_route(uint32_t id, int timeout_ms) override {
    if (timeout_ms <= 0) return err(EINVAL, "resolve_route: timeout {} ms", timeout_ms);
    return ctx_.conn().call_void(Op::kCmaResolveRoute, proto::CmaIdTimeoutReq{id, uint32_t(timeout_ms)});
  }

  Result<void> listen(uint32_t id, int backlog) override {
    if (backlog < 0) return err(EINVAL, "listen: backlog {}", backlog);
    return ctx_.conn().call_void(Op::kCmaListen, proto::CmaListenReq{id, uint32_t(backlog)});
  }

  Result<void> init_qp(uint32_t id, Qp& qp) override {
    OPENIB_TRY_ASSIGN(uint32_t h, qp_handle_on(ctx_, qp));
    return ctx_.conn().call_void(Op::kCmaInitQp, proto::CmaQpReq{id, h});
  }

  Result<void> connect(uint32_t id, Qp& qp, const RdmaConnParam& p) override {
    const bool ud = ud_space(space(id));
    OPENIB_TRY_ASSIGN(auto q, conn_req(id, &qp, p, ud ? proto::kCmaSidrReqPrivate : proto::kCmaReqPrivate,
                                       ud ? "a SIDR_REQ" : "a REQ"));
    return ctx_.conn().call_void(Op::kCmaConnect, q);
  }

  Result<void> accept(uint32_t id, Qp* qp, const RdmaConnParam& p) override {
    const bool ud = !qp || ud_space(space(id));
    OPENIB_TRY_ASSIGN(auto q, conn_req(id, qp, p, ud ? cm_private::kSidrRep : cm_private::kRep,
                                       ud ? "a SIDR_REP" : "a REP"));
    return ctx_.conn().call_void(Op::kCmaAccept, q);
  }

  Result<std::pair<QpAttr, uint32_t>> init_qp_attr(uint32_t id, QpState state) override {
    proto::CmaInitQpAttrReq q;
    q.id = id;
    q.state = static_cast<uint8_t>(state);
    OPENIB_TRY_ASSIGN(auto r, ctx_.conn().call<proto::CmInitQpAttrRep>(Op::kCmaInitQpAttr, q));
    return std::pair<QpAttr, uint32_t>{lib::from_proto(r.attr), r.attr.mask};
  }

  // CmaConnReq.qp is the QP's number here: ibd finds it among this
  // connection's QPs (docs/client-protocol.md "RDMA CM").
  Result<void> connect_own_qp(uint32_t id, uint32_t qp_num, const RdmaConnParam& p) override {
    OPENIB_TRY_ASSIGN(auto q, conn_req(id, nullptr, p, proto::kCmaReqPrivate, "a REQ"));
    q.qp = qp_num;
    return ctx_.conn().call_void(Op::kCmaConnectOwnQp, q);
  }

  Result<void> accept_own_qp(uint32_t id, uint32_t qp_num, const RdmaConnParam& p) override {
    OPENIB_TRY_ASSIGN(auto q, conn_req(id, nullptr, p, cm_private::kRep, "a REP"));
    q.qp = qp_num;
    return ctx_.conn().call_void(Op::kCmaAcceptOwnQp, q);
  }

  Result<void> establish(uint32_t id) override {
    return ctx_.conn().call_void(Op::kCmaEstablish, proto::HandleReq{id});
  }

  Result<void> reject(uint32_t id, std::span<const uint8_t> private_data) override {
    proto::CmaRejectReq q;
    q.id = id;
    const bool ud = ud_space(space(id));
    OPENIB_TRY_ASSIGN(q.private_len, put_private(q.private_data, private_data,
                                                 ud ? cm_private::kSidrRep : cm_private::kRej,
                                                 ud ? "a SIDR_REP" : "a REJ"));
    return ctx_.conn().call_void(Op::kCmaReject, q);
  }

  Result<void> disconnect(uint32_t id) override {
    return ctx_.conn().call_void(Op::kCmaDisconnect, proto::HandleReq{id});
  }

  Result<void> join_multicast(uint32_t id, const IpEndpoint& group, Qp& qp) override {
    proto::CmaJoinReq q;
    q.id = id;
    OPENIB_TRY_ASSIGN(q.qp, qp_handle_on(ctx_, qp));
    q.group = to_proto(group);
    return ctx_.conn().call_void(Op::kCmaJoin, q);
  }

  Result<void> leave_multicast(uint32_t id, const IpEndpoint& group) override {
    proto::CmaJoinReq q;
    q.id = id;
    q.group = to_proto(group);
    return ctx_.conn().call_void(Op::kCmaLeave, q);
  }

  Result<RdmaIdInfo> query(uint32_t id) override {
    OPENIB_TRY_ASSIGN(auto r, ctx_.conn().call<proto::CmaIdRep>(Op::kCmaQuery, proto::HandleReq{id}));
    RdmaIdInfo i;
    i.state = r.state;
    i.port = r.port;
    i.ps = static_cast<RdmaPortSpace>(r.ps);
    i.pkey = r.pkey;
    i.src = from_proto(r.src);
    i.dst = from_proto(r.dst);
    i.sgid.raw = r.sgid;
    i.dgid.raw = r.dgid;
    i.have_path = r.have_path != 0;
    if (i.have_path) i.path = decode_path_record(r.path);
    i.qpn = r.qpn;
    return i;
  }

 private:
  // The id's port space (0: not known here: an id of no create_id or
  // connect request this channel saw).
  uint16_t space(uint32_t id) {
    std::lock_guard lk(mu_);
    auto it = spaces_.find(id);
    return it == spaces_.end() ? 0 : it->second;
  }

  Result<proto::CmaConnReq> conn_req(uint32_t id, Qp* qp, const RdmaConnParam& p, size_t max, const char* msg) {
    proto::CmaConnReq q;
    q.id = id;
    if (qp) {
      OPENIB_TRY_ASSIGN(q.qp, qp_handle_on(ctx_, *qp));
    }
    q.responder_resources = p.responder_resources;
    q.initiator_depth = p.initiator_depth;
    q.retry_count = p.retry_count;
    q.rnr_retry_count = p.rnr_retry_count;
    OPENIB_TRY_ASSIGN(q.private_len, put_private(q.private_data, p.private_data, max, msg));
    return q;
  }

  ContextImpl& ctx_;
  UniqueFd sock_;
  std::mutex mu_;
  std::unordered_map<uint32_t, uint16_t> spaces_;  // id -> port space, for the private data limits
};

}  // namespace
}  // namespace lib

Result<std::unique_ptr<RdmaEventChannel>> RdmaEventChannel::open(Context& ctx) {
  auto& c = static_cast<lib::ContextImpl&>(ctx);
  OPENIB_TRY_ASSIGN(auto r, c.conn().call(proto::Op::kCmaOpen, proto::encode(proto::Empty{})));
  if (r.fds.size() != 1) return err(EPROTO, "CMA_OPEN: {} fds with the reply, expected 1", r.fds.size());
  return std::unique_ptr<RdmaEventChannel>(new lib::RdmaEventChannelImpl(c, std::move(r.fds[0])));
}

}  // namespace openib
