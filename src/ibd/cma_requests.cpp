// CMA_*: the RDMA CM's requests (docs/cma.md, docs/client-protocol.md
// "RDMA CM"): ids owned by the connection; QPs named must be the client's.
#include <cstring>

#include "ibd/cma_service.hpp"

namespace openib::ibd {

using proto::Op;

namespace {

// A request answered by an empty reply once its work is done, or by its error.
hca::Completer<Result<void>> empty_when_done(Respond d) {
  return hca::Completer<Result<void>>([d = std::move(d)](Result<void> r) mutable {
    if (!r) return d(r.take_error());
    d(Reply{});
  });
}

Result<void> empty_reply(Respond& done) {
  done(Reply{});
  return ok();
}

}  // namespace

// Each operation and the member that serves it; ops() and handle() read it.
std::span<const CmaService::OpEntry> CmaService::op_table() {
  static constexpr OpEntry kTable[] = {
      {Op::kCmaOpen, &CmaService::op_open},
      {Op::kCmaCreateId, &CmaService::op_create_id},
      {Op::kCmaBind, &CmaService::op_bind},
      {Op::kCmaResolveAddr, &CmaService::op_resolve_addr},
      {Op::kCmaResolveRoute, &CmaService::op_resolve_route},
      {Op::kCmaListen, &CmaService::op_listen},
      {Op::kCmaInitQp, &CmaService::op_init_qp},
      {Op::kCmaConnect, &CmaService::op_connect},
      {Op::kCmaAccept, &CmaService::op_accept},
      {Op::kCmaReject, &CmaService::op_reject},
      {Op::kCmaDisconnect, &CmaService::op_disconnect},
      {Op::kCmaDestroyId, &CmaService::op_destroy_id},
      {Op::kCmaJoin, &CmaService::op_join},
      {Op::kCmaLeave, &CmaService::op_leave},
      {Op::kCmaQuery, &CmaService::op_query},
      {Op::kCmaInfo, &CmaService::op_info},
      {Op::kCmaInitQpAttr, &CmaService::op_init_qp_attr},
      {Op::kCmaConnectOwnQp, &CmaService::op_connect_own_qp},
      {Op::kCmaAcceptOwnQp, &CmaService::op_accept_own_qp},
      {Op::kCmaEstablish, &CmaService::op_establish},
  };
  return kTable;
}

std::vector<proto::Op> CmaService::ops() const {
  std::vector<proto::Op> v;
  for (const auto& o : op_table()) v.push_back(o.op);
  return v;
}

// Ports below 1024, and every user's ids in CMA_INFO: root or
// CAP_NET_ADMIN (Linux: CAP_NET_BIND_SERVICE for the ports); the members
// ask c.privileged().
Result<void> CmaService::handle(const Caller& c, proto::Message& m, Respond& done) {
  if (!m.fds.empty()) return err(EINVAL, "{} takes no fds", proto::op_name(m.header.op));
  for (const auto& o : op_table())
    if (static_cast<Op>(m.header.op) == o.op) return (this->*o.fn)(c, m, done);
  return err(EOPNOTSUPP, "unknown RDMA CM operation {}", m.header.op);
}

Result<void> CmaService::op_open(const Caller& c, proto::Message& m, Respond& done) {
  if (!m.body.empty()) return err(EINVAL, "CMA_OPEN takes no body");
  OPENIB_TRY_ASSIGN(UniqueFd fd, open(c.id, c.uid));
  Reply r;
  r.fds.push_back(std::move(fd));
  done(std::move(r));
  return ok();
}

Result<void> CmaService::op_create_id(const Caller& c, proto::Message& m, Respond& done) {
  OPENIB_TRY_ASSIGN(auto req, proto::decode<proto::CmaCreateIdReq>(m.body));
  OPENIB_TRY_ASSIGN(uint32_t h, create_id(c.id, req));
  done(Reply{proto::encode(proto::HandleRep{h}), {}});
  return ok();
}

Result<void> CmaService::op_bind(const Caller& c, proto::Message& m, Respond& done) {
  OPENIB_TRY_ASSIGN(auto req, proto::decode<proto::CmaAddrReq>(m.body));
  OPENIB_TRY_ASSIGN(auto rep, bind(c.id, req, c.privileged()));
  done(Reply{proto::encode(rep), {}});
  return ok();
}

Result<void> CmaService::op_resolve_addr(const Caller& c, proto::Message& m, Respond& done) {
  OPENIB_TRY_ASSIGN(auto req, proto::decode<proto::CmaResolveAddrReq>(m.body));
  OPENIB_TRY(resolve_addr(c.id, req, c.privileged()));
  return empty_reply(done);
}

Result<void> CmaService::op_resolve_route(const Caller& c, proto::Message& m, Respond& done) {
  OPENIB_TRY_ASSIGN(auto req, proto::decode<proto::CmaIdTimeoutReq>(m.body));
  OPENIB_TRY(resolve_route(c.id, req));
  return empty_reply(done);
}

Result<void> CmaService::op_listen(const Caller& c, proto::Message& m, Respond& done) {
  OPENIB_TRY_ASSIGN(auto req, proto::decode<proto::CmaListenReq>(m.body));
  OPENIB_TRY(listen(c.id, req, c.privileged()));
  return empty_reply(done);
}

Result<void> CmaService::op_init_qp(const Caller& c, proto::Message& m, Respond& done) {
  OPENIB_TRY_ASSIGN(auto req, proto::decode<proto::CmaQpReq>(m.body));
  init_qp(c.id, req, empty_when_done(std::move(done)));
  return ok();
}

Result<void> CmaService::op_connect(const Caller& c, proto::Message& m, Respond& done) {
  OPENIB_TRY_ASSIGN(auto req, proto::decode<proto::CmaConnReq>(m.body));
  connect(c.id, req, empty_when_done(std::move(done)));
  return ok();
}

Result<void> CmaService::op_accept(const Caller& c, proto::Message& m, Respond& done) {
  OPENIB_TRY_ASSIGN(auto req, proto::decode<proto::CmaConnReq>(m.body));
  accept(c.id, req, empty_when_done(std::move(done)));
  return ok();
}

Result<void> CmaService::op_init_qp_attr(const Caller& c, proto::Message& m, Respond& done) {
  OPENIB_TRY_ASSIGN(auto req, proto::decode<proto::CmaInitQpAttrReq>(m.body));
  init_qp_attr(c.id, req,
               CmService::InitQpAttrDone([d = std::move(done)](Result<proto::CmInitQpAttrRep> rep) mutable {
                 if (!rep) return d(rep.take_error());
                 d(Reply{proto::encode(*rep), {}});
               }));
  return ok();
}

Result<void> CmaService::op_connect_own_qp(const Caller& c, proto::Message& m, Respond& done) {
  OPENIB_TRY_ASSIGN(auto req, proto::decode<proto::CmaConnReq>(m.body));
  connect(c.id, req, empty_when_done(std::move(done)), true);
  return ok();
}

Result<void> CmaService::op_accept_own_qp(const Caller& c, proto::Message& m, Respond& done) {
  OPENIB_TRY_ASSIGN(auto req, proto::decode<proto::CmaConnReq>(m.body));
  accept(c.id, req, empty_when_done(std::move(done)), true);
  return ok();
}

Result<void> CmaService::op_establish(const Caller& c, proto::Message& m, Respond& done) {
  OPENIB_TRY_ASSIGN(auto req, proto::decode<proto::HandleReq>(m.body));
  establish(c.id, req.handle, empty_when_done(std::move(done)));
  return ok();
}

Result<void> CmaService::op_reject(const Caller& c, proto::Message& m, Respond& done) {
  OPENIB_TRY_ASSIGN(auto req, proto::decode<proto::CmaRejectReq>(m.body));
  OPENIB_TRY(reject(c.id, req));
  return empty_reply(done);
}

Result<void> CmaService::op_disconnect(const Caller& c, proto::Message& m, Respond& done) {
  OPENIB_TRY_ASSIGN(auto req, proto::decode<proto::HandleReq>(m.body));
  OPENIB_TRY(disconnect(c.id, req.handle));
  return empty_reply(done);
}

Result<void> CmaService::op_destroy_id(const Caller& c, proto::Message& m, Respond& done) {
  OPENIB_TRY_ASSIGN(auto req, proto::decode<proto::HandleReq>(m.body));
  OPENIB_TRY(destroy(c.id, req.handle));
  return empty_reply(done);
}

Result<void> CmaService::op_join(const Caller& c, proto::Message& m, Respond& done) {
  OPENIB_TRY_ASSIGN(auto req, proto::decode<proto::CmaJoinReq>(m.body));
  join(c.id, req, empty_when_done(std::move(done)));
  return ok();
}

Result<void> CmaService::op_leave(const Caller& c, proto::Message& m, Respond& done) {
  OPENIB_TRY_ASSIGN(auto req, proto::decode<proto::CmaJoinReq>(m.body));
  OPENIB_TRY(leave(c.id, req));
  return empty_reply(done);
}

Result<void> CmaService::op_query(const Caller& c, proto::Message& m, Respond& done) {
  OPENIB_TRY_ASSIGN(auto req, proto::decode<proto::HandleReq>(m.body));
  OPENIB_TRY_ASSIGN(auto rep, query(c.id, req.handle));
  done(Reply{proto::encode(rep), {}});
  return ok();
}

Result<void> CmaService::op_info(const Caller& c, proto::Message& m, Respond& done) {
  if (!m.body.empty()) return err(EINVAL, "CMA_INFO takes no body");
  const std::string text = json(c.uid, c.privileged());
  if (text.size() > proto::kMaxMessage - proto::kHeaderSize - 64) return err(EMSGSIZE, "RDMA CM state too large");
  done(Reply::text(text));
  return ok();
}

}  // namespace openib::ibd
