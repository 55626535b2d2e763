// CMA_*: the RDMA CM's requests (docs/cma.md, docs/client-protocol.md
// "RDMA CM"): ids owned by the connection; QPs named must be the client's.
#include <cstring>

#include "ibd/cma_service.hpp"

namespace openib::ibd {

using proto::Op;

std::vector<proto::Op> CmaService::ops() const {
  return {Op::kCmaOpen,    Op::kCmaCreateId,   Op::kCmaBind,      Op::kCmaResolveAddr, Op::kCmaResolveRoute,
          Op::kCmaListen,  Op::kCmaInitQp,     Op::kCmaConnect,   Op::kCmaAccept,      Op::kCmaReject,
          Op::kCmaDisconnect, Op::kCmaDestroyId, Op::kCmaJoin,    Op::kCmaLeave,       Op::kCmaQuery,
          Op::kCmaInfo};
}

Result<void> CmaService::handle(const Caller& c, proto::Message& m, Respond& done) {
  if (!m.fds.empty()) return err(EINVAL, "{} takes no fds", proto::op_name(m.header.op));
  // Ports below 1024, and every user's ids in CMA_INFO: root or
  // CAP_NET_ADMIN (Linux: CAP_NET_BIND_SERVICE for the ports).
  const bool privileged = c.privileged();
  auto empty = [&done] {
    done(Reply{});
    return ok();
  };
  auto async_empty = [](Respond d) {
    return hca::Completer<Result<void>>([d = std::move(d)](Result<void> r) mutable {
      if (!r) return d(r.take_error());
      d(Reply{});
    });
  };
  switch (static_cast<Op>(m.header.op)) {
    case Op::kCmaOpen: {
      if (!m.body.empty()) return err(EINVAL, "CMA_OPEN takes no body");
      OPENIB_TRY_ASSIGN(UniqueFd fd, open(c.id, c.uid));
      Reply r;
      r.fds.push_back(std::move(fd));
      done(std::move(r));
      return ok();
    }
    case Op::kCmaCreateId: {
      OPENIB_TRY_ASSIGN(auto req, proto::decode<proto::CmaCreateIdReq>(m.body));
      OPENIB_TRY_ASSIGN(uint32_t h, create_id(c.id, req));
      done(Reply{proto::encode(proto::HandleRep{h}), {}});
      return ok();
    }
    case Op::kCmaBind: {
      OPENIB_TRY_ASSIGN(auto req, proto::decode<proto::CmaAddrReq>(m.body));
      OPENIB_TRY_ASSIGN(auto rep, bind(c.id, req, privileged));
      done(Reply{proto::encode(rep), {}});
      return ok();
    }
    case Op::kCmaResolveAddr: {
      OPENIB_TRY_ASSIGN(auto req, proto::decode<proto::CmaResolveAddrReq>(m.body));
      OPENIB_TRY(resolve_addr(c.id, req, privileged));
      return empty();
    }
    case Op::kCmaResolveRoute: {
      OPENIB_TRY_ASSIGN(auto req, proto::decode<proto::CmaIdTimeoutReq>(m.body));
      OPENIB_TRY(resolve_route(c.id, req));
      return empty();
    }
    case Op::kCmaListen: {
      OPENIB_TRY_ASSIGN(auto req, proto::decode<proto::CmaListenReq>(m.body));
      OPENIB_TRY(listen(c.id, req, privileged));
      return empty();
    }
    case Op::kCmaInitQp: {
      OPENIB_TRY_ASSIGN(auto req, proto::decode<proto::CmaQpReq>(m.body));
      init_qp(c.id, req, async_empty(std::move(done)));
      return ok();
    }
    case Op::kCmaConnect: {
      OPENIB_TRY_ASSIGN(auto req, proto::decode<proto::CmaConnReq>(m.body));
      connect(c.id, req, async_empty(std::move(done)));
      return ok();
    }
    case Op::kCmaAccept: {
      OPENIB_TRY_ASSIGN(auto req, proto::decode<proto::CmaConnReq>(m.body));
      accept(c.id, req, async_empty(std::move(done)));
      return ok();
    }
    case Op::kCmaReject: {
      OPENIB_TRY_ASSIGN(auto req, proto::decode<proto::CmaRejectReq>(m.body));
      OPENIB_TRY(reject(c.id, req));
      return empty();
    }
    case Op::kCmaDisconnect: {
      OPENIB_TRY_ASSIGN(auto req, proto::decode<proto::HandleReq>(m.body));
      OPENIB_TRY(disconnect(c.id, req.handle));
      return empty();
    }
    case Op::kCmaDestroyId: {
      OPENIB_TRY_ASSIGN(auto req, proto::decode<proto::HandleReq>(m.body));
      OPENIB_TRY(destroy(c.id, req.handle));
      return empty();
    }
    case Op::kCmaJoin: {
      OPENIB_TRY_ASSIGN(auto req, proto::decode<proto::CmaJoinReq>(m.body));
      join(c.id, req, async_empty(std::move(done)));
      return ok();
    }
    case Op::kCmaLeave: {
      OPENIB_TRY_ASSIGN(auto req, proto::decode<proto::CmaJoinReq>(m.body));
      OPENIB_TRY(leave(c.id, req));
      return empty();
    }
    case Op::kCmaQuery: {
      OPENIB_TRY_ASSIGN(auto req, proto::decode<proto::HandleReq>(m.body));
      OPENIB_TRY_ASSIGN(auto rep, query(c.id, req.handle));
      done(Reply{proto::encode(rep), {}});
      return ok();
    }
    case Op::kCmaInfo: {
      if (!m.body.empty()) return err(EINVAL, "CMA_INFO takes no body");
      const std::string text = json(c.uid, privileged);
      if (text.size() > proto::kMaxMessage - proto::kHeaderSize - 64) return err(EMSGSIZE, "RDMA CM state too large");
      done(Reply::text(text));
      return ok();
    }
    default: break;
  }
  return err(EOPNOTSUPP, "unknown RDMA CM operation {}", m.header.op);
}

}  // namespace openib::ibd
