// CMA_*: the RDMA CM's requests (docs/cma.md, docs/client-protocol.md
// "RDMA CM"): ids owned by the connection; QPs named must be the client's.
#include <cstring>

#include "ibd/server.hpp"

namespace openib::ibd {

Result<void> Server::op_cma(Client& c, proto::Message& m, Respond& done) {
  using proto::Op;
  if (!cma_) return err(EOPNOTSUPP, "this ibd runs no RDMA CM");
  if (!m.fds.empty()) return err(EINVAL, "{} takes no fds", proto::op_name(m.header.op));
  // Ports below 1024, and every user's ids in CMA_INFO: root or
  // CAP_NET_ADMIN (Linux: CAP_NET_BIND_SERVICE for the ports).
  const bool privileged = c.uid == 0 || c.net_admin;
  auto empty = [&done] {
    done(Reply{});
    return ok();
  };
  auto async_empty = [this](Respond d) {
    return guard<void>([d = std::move(d)](Result<void> r) mutable {
      if (!r) return d(r.take_error());
      d(Reply{});
    });
  };
  switch (static_cast<Op>(m.header.op)) {
    case Op::kCmaOpen: {
      if (!m.body.empty()) return err(EINVAL, "CMA_OPEN takes no body");
      OPENIB_TRY_ASSIGN(UniqueFd fd, cma_->open(c.id, c.uid));
      Reply r;
      r.fds.push_back(std::move(fd));
      done(std::move(r));
      return ok();
    }
    case Op::kCmaCreateId: {
      OPENIB_TRY_ASSIGN(auto req, proto::decode<proto::CmaCreateIdReq>(m.body));
      OPENIB_TRY_ASSIGN(uint32_t h, cma_->create_id(c.id, req));
      done(Reply{proto::encode(proto::HandleRep{h}), {}});
      return ok();
    }
    case Op::kCmaBind: {
      OPENIB_TRY_ASSIGN(auto req, proto::decode<proto::CmaAddrReq>(m.body));
      OPENIB_TRY_ASSIGN(auto rep, cma_->bind(c.id, req, privileged));
      done(Reply{proto::encode(rep), {}});
      return ok();
    }
    case Op::kCmaResolveAddr: {
      OPENIB_TRY_ASSIGN(auto req, proto::decode<proto::CmaResolveAddrReq>(m.body));
      OPENIB_TRY(cma_->resolve_addr(c.id, req, privileged));
      return empty();
    }
    case Op::kCmaResolveRoute: {
      OPENIB_TRY_ASSIGN(auto req, proto::decode<proto::CmaIdTimeoutReq>(m.body));
      OPENIB_TRY(cma_->resolve_route(c.id, req));
      return empty();
    }
    case Op::kCmaListen: {
      OPENIB_TRY_ASSIGN(auto req, proto::decode<proto::CmaListenReq>(m.body));
      OPENIB_TRY(cma_->listen(c.id, req, privileged));
      return empty();
    }
    case Op::kCmaInitQp: {
      OPENIB_TRY_ASSIGN(auto req, proto::decode<proto::CmaQpReq>(m.body));
      cma_->init_qp(c.id, req, async_empty(std::move(done)));
      return ok();
    }
    case Op::kCmaConnect: {
      OPENIB_TRY_ASSIGN(auto req, proto::decode<proto::CmaConnReq>(m.body));
      cma_->connect(c.id, req, async_empty(std::move(done)));
      return ok();
    }
    case Op::kCmaAccept: {
      OPENIB_TRY_ASSIGN(auto req, proto::decode<proto::CmaConnReq>(m.body));
      cma_->accept(c.id, req, async_empty(std::move(done)));
      return ok();
    }
    case Op::kCmaReject: {
      OPENIB_TRY_ASSIGN(auto req, proto::decode<proto::CmaRejectReq>(m.body));
      OPENIB_TRY(cma_->reject(c.id, req));
      return empty();
    }
    case Op::kCmaDisconnect: {
      OPENIB_TRY_ASSIGN(auto req, proto::decode<proto::HandleReq>(m.body));
      OPENIB_TRY(cma_->disconnect(c.id, req.handle));
      return empty();
    }
    case Op::kCmaDestroyId: {
      OPENIB_TRY_ASSIGN(auto req, proto::decode<proto::HandleReq>(m.body));
      OPENIB_TRY(cma_->destroy(c.id, req.handle));
      return empty();
    }
    case Op::kCmaJoin: {
      OPENIB_TRY_ASSIGN(auto req, proto::decode<proto::CmaJoinReq>(m.body));
      cma_->join(c.id, req, async_empty(std::move(done)));
      return ok();
    }
    case Op::kCmaLeave: {
      OPENIB_TRY_ASSIGN(auto req, proto::decode<proto::CmaJoinReq>(m.body));
      OPENIB_TRY(cma_->leave(c.id, req));
      return empty();
    }
    case Op::kCmaQuery: {
      OPENIB_TRY_ASSIGN(auto req, proto::decode<proto::HandleReq>(m.body));
      OPENIB_TRY_ASSIGN(auto rep, cma_->query(c.id, req.handle));
      done(Reply{proto::encode(rep), {}});
      return ok();
    }
    case Op::kCmaInfo: {
      if (!m.body.empty()) return err(EINVAL, "CMA_INFO takes no body");
      const std::string text = cma_->json(c.uid, privileged);
      if (text.size() > proto::kMaxMessage - proto::kHeaderSize - 64) return err(EMSGSIZE, "RDMA CM state too large");
      done(Reply::text(text));
      return ok();
    }
    default: break;
  }
  return err(EOPNOTSUPP, "unknown RDMA CM operation {}", m.header.op);
}

void Server::set_cma(CmaService* cma) {
  cma_ = cma;
  if (cma_) cma_->set_qp_ops(qp_ops());
}

}  // namespace openib::ibd
