// CM_*: the connection manager's requests (docs/cm.md, docs/client-protocol.md
// "Connection manager"). Ids are the connection's own; QPs named must be
// the client's.
#include "ibd/cm_service.hpp"

namespace openib::ibd {

using proto::Op;

std::vector<proto::Op> CmService::ops() const {
  return {Op::kCmOpen,   Op::kCmListen,    Op::kCmConnect,   Op::kCmAccept,     Op::kCmReject, Op::kCmDisconnect,
          Op::kCmDestroy, Op::kCmSidrQuery, Op::kCmSidrReply, Op::kCmInitQpAttr, Op::kCmInfo};
}

// CM_*: the connection manager (docs/cm.md, docs/client-protocol.md
// "Connection manager"). Ids are the connection's own; QPs named must be
// the client's.
Result<void> CmService::handle(const Caller& c, proto::Message& m, Respond& done) {
  OPENIB_TRY(expect_fds(m, 0));
  // docs/cm.md "Security": masked listens and reserved service IDs, other sessions in CM_INFO.
  const bool privileged = c.privileged();
  auto reply_handle = [](uint32_t h) { return Reply{proto::encode(proto::HandleRep{h}), {}}; };
  switch (static_cast<Op>(m.header.op)) {
    case Op::kCmOpen: {
      if (!m.body.empty()) return err(EINVAL, "CM_OPEN takes no body");
      OPENIB_TRY_ASSIGN(UniqueFd fd, open(c.id, c.uid));
      Reply r;
      r.fds.push_back(std::move(fd));
      done(std::move(r));
      return ok();
    }
    case Op::kCmListen: {
      OPENIB_TRY_ASSIGN(auto req, proto::decode<proto::CmListenReq>(m.body));
      OPENIB_TRY_ASSIGN(uint32_t h, listen(c.id, req, privileged));
      done(reply_handle(h));
      return ok();
    }
    case Op::kCmConnect: {
      OPENIB_TRY_ASSIGN(auto req, proto::decode<proto::CmConnectReq>(m.body));
      connect(c.id, req, hca::Completer<Result<uint32_t>>([done = std::move(done), reply_handle](Result<uint32_t> h) mutable {
        if (!h) return done(h.take_error());
        done(reply_handle(*h));
      }));
      return ok();
    }
    case Op::kCmAccept: {
      OPENIB_TRY_ASSIGN(auto req, proto::decode<proto::CmAcceptReq>(m.body));
      accept(c.id, req, hca::Completer<Result<void>>([done = std::move(done)](Result<void> r) mutable {
        if (!r) return done(r.take_error());
        done(Reply{});
      }));
      return ok();
    }
    case Op::kCmReject: {
      OPENIB_TRY_ASSIGN(auto req, proto::decode<proto::CmRejectReq>(m.body));
      OPENIB_TRY(reject(c.id, req));
      done(Reply{});
      return ok();
    }
    case Op::kCmDisconnect: {
      OPENIB_TRY_ASSIGN(auto req, proto::decode<proto::CmDisconnectReq>(m.body));
      OPENIB_TRY(disconnect(c.id, req));
      done(Reply{});
      return ok();
    }
    case Op::kCmDestroy: {
      OPENIB_TRY_ASSIGN(auto req, proto::decode<proto::HandleReq>(m.body));
      OPENIB_TRY(destroy(c.id, req.handle));
      done(Reply{});
      return ok();
    }
    case Op::kCmSidrQuery: {
      OPENIB_TRY_ASSIGN(auto req, proto::decode<proto::CmSidrQueryReq>(m.body));
      OPENIB_TRY_ASSIGN(uint32_t h, sidr_query(c.id, req));
      done(reply_handle(h));
      return ok();
    }
    case Op::kCmSidrReply: {
      OPENIB_TRY_ASSIGN(auto req, proto::decode<proto::CmSidrReplyReq>(m.body));
      OPENIB_TRY(sidr_reply(c.id, req));
      done(Reply{});
      return ok();
    }
    case Op::kCmInitQpAttr: {
      OPENIB_TRY_ASSIGN(auto req, proto::decode<proto::CmInitQpAttrReq>(m.body));
      OPENIB_TRY_ASSIGN(auto rep, init_qp_attr(c.id, req));
      done(Reply{proto::encode(rep), {}});
      return ok();
    }
    case Op::kCmInfo: {
      if (!m.body.empty()) return err(EINVAL, "CM_INFO takes no body");
      // Another user's sessions are counted, not listed, unless privileged.
      const std::string text = json(privileged ? std::nullopt : std::optional<uint32_t>(c.id));
      if (text.size() > proto::kMaxMessage - proto::kHeaderSize - 64) return err(EMSGSIZE, "CM state too large");
      done(Reply::text(text));
      return ok();
    }
    default: break;
  }
  return err(EOPNOTSUPP, "unknown CM operation {}", m.header.op);
}

}  // namespace openib::ibd
