// CM_*: the connection manager's requests (docs/cm.md, docs/client-protocol.md
// "Connection manager"). Ids are the connection's own; QPs named must be
// the client's.
#include "ibd/cm_service.hpp"

namespace openib::ibd {

using proto::Op;

namespace {

Reply handle_reply(uint32_t h) { return Reply{proto::encode(proto::HandleRep{h}), {}}; }

}  // namespace

// Each operation and the member that serves it; ops() and handle() read it.
std::span<const CmService::OpEntry> CmService::op_table() {
  static constexpr OpEntry kTable[] = {
      {Op::kCmOpen, &CmService::op_open},
      {Op::kCmListen, &CmService::op_listen},
      {Op::kCmConnect, &CmService::op_connect},
      {Op::kCmAccept, &CmService::op_accept},
      {Op::kCmReject, &CmService::op_reject},
      {Op::kCmDisconnect, &CmService::op_disconnect},
      {Op::kCmDestroy, &CmService::op_destroy},
      {Op::kCmSidrQuery, &CmService::op_sidr_query},
      {Op::kCmSidrReply, &CmService::op_sidr_reply},
      {Op::kCmInitQpAttr, &CmService::op_init_qp_attr},
      {Op::kCmInfo, &CmService::op_info},
  };
  return kTable;
}

std::vector<proto::Op> CmService::ops() const {
  std::vector<proto::Op> v;
  for (const auto& o : op_table()) v.push_back(o.op);
  return v;
}

// CM_*: the connection manager (docs/cm.md, docs/client-protocol.md
// "Connection manager"). Ids are the connection's own; QPs named must be
// the client's.
Result<void> CmService::handle(const Caller& c, proto::Message& m, Respond& done) {
  OPENIB_TRY(expect_fds(m, 0));
  for (const auto& o : op_table())
    if (static_cast<Op>(m.header.op) == o.op) return (this->*o.fn)(c, m, done);
  return err(EOPNOTSUPP, "unknown CM operation {}", m.header.op);
}

Result<void> CmService::op_open(const Caller& c, proto::Message& m, Respond& done) {
  if (!m.body.empty()) return err(EINVAL, "CM_OPEN takes no body");
  OPENIB_TRY_ASSIGN(UniqueFd fd, open(c.id, c.uid));
  Reply r;
  r.fds.push_back(std::move(fd));
  done(std::move(r));
  return ok();
}

// docs/cm.md "Security": masked listens and reserved service IDs.
Result<void> CmService::op_listen(const Caller& c, proto::Message& m, Respond& done) {
  OPENIB_TRY_ASSIGN(auto req, proto::decode<proto::CmListenReq>(m.body));
  OPENIB_TRY_ASSIGN(uint32_t h, listen(c.id, req, c.privileged()));
  done(handle_reply(h));
  return ok();
}

Result<void> CmService::op_connect(const Caller& c, proto::Message& m, Respond& done) {
  OPENIB_TRY_ASSIGN(auto req, proto::decode<proto::CmConnectReq>(m.body));
  connect(c.id, req, hca::Completer<Result<uint32_t>>([done = std::move(done)](Result<uint32_t> h) mutable {
    if (!h) return done(h.take_error());
    done(handle_reply(*h));
  }));
  return ok();
}

Result<void> CmService::op_accept(const Caller& c, proto::Message& m, Respond& done) {
  OPENIB_TRY_ASSIGN(auto req, proto::decode<proto::CmAcceptReq>(m.body));
  accept(c.id, req, hca::Completer<Result<void>>([done = std::move(done)](Result<void> r) mutable {
    if (!r) return done(r.take_error());
    done(Reply{});
  }));
  return ok();
}

Result<void> CmService::op_reject(const Caller& c, proto::Message& m, Respond& done) {
  OPENIB_TRY_ASSIGN(auto req, proto::decode<proto::CmRejectReq>(m.body));
  OPENIB_TRY(reject(c.id, req));
  done(Reply{});
  return ok();
}

Result<void> CmService::op_disconnect(const Caller& c, proto::Message& m, Respond& done) {
  OPENIB_TRY_ASSIGN(auto req, proto::decode<proto::CmDisconnectReq>(m.body));
  OPENIB_TRY(disconnect(c.id, req));
  done(Reply{});
  return ok();
}

Result<void> CmService::op_destroy(const Caller& c, proto::Message& m, Respond& done) {
  OPENIB_TRY_ASSIGN(auto req, proto::decode<proto::HandleReq>(m.body));
  OPENIB_TRY(destroy(c.id, req.handle));
  done(Reply{});
  return ok();
}

Result<void> CmService::op_sidr_query(const Caller& c, proto::Message& m, Respond& done) {
  OPENIB_TRY_ASSIGN(auto req, proto::decode<proto::CmSidrQueryReq>(m.body));
  OPENIB_TRY_ASSIGN(uint32_t h, sidr_query(c.id, req));
  done(handle_reply(h));
  return ok();
}

Result<void> CmService::op_sidr_reply(const Caller& c, proto::Message& m, Respond& done) {
  OPENIB_TRY_ASSIGN(auto req, proto::decode<proto::CmSidrReplyReq>(m.body));
  OPENIB_TRY(sidr_reply(c.id, req));
  done(Reply{});
  return ok();
}

Result<void> CmService::op_init_qp_attr(const Caller& c, proto::Message& m, Respond& done) {
  OPENIB_TRY_ASSIGN(auto req, proto::decode<proto::CmInitQpAttrReq>(m.body));
  init_qp_attr(c.id, req, InitQpAttrDone([d = std::move(done)](Result<proto::CmInitQpAttrRep> rep) mutable {
                 if (!rep) return d(rep.take_error());
                 d(Reply{proto::encode(*rep), {}});
               }));
  return ok();
}

// docs/cm.md "Security": another user's sessions are counted, not listed,
// unless privileged.
Result<void> CmService::op_info(const Caller& c, proto::Message& m, Respond& done) {
  if (!m.body.empty()) return err(EINVAL, "CM_INFO takes no body");
  const std::string text = json(c.privileged() ? std::nullopt : std::optional<uint32_t>(c.id));
  if (text.size() > proto::kMaxMessage - proto::kHeaderSize - 64) return err(EMSGSIZE, "CM state too large");
  done(Reply::text(text));
  return ok();
}

}  // namespace openib::ibd
