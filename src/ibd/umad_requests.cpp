// UMAD_*: the user-MAD service's requests (docs/client-protocol.md "User
// MADs", docs/umad.md).
#include "common/log.hpp"
#include "ibd/umad_service.hpp"

namespace openib::ibd {

using proto::Op;

std::vector<proto::Op> UmadService::ops() const {
  return {Op::kUmadPort, Op::kUmadOpen, Op::kUmadRegister, Op::kUmadUnregister};
}

// UMAD_*: the user-MAD service (docs/client-protocol.md "User MADs").
Result<void> UmadService::handle(const Caller& c, proto::Message& m, Respond& done) {
  auto r = handle_sync(c, m, done);
  if (r && done) done(std::move(*r));
  if (!r) return r.take_error();
  return ok();
}

Result<Reply> UmadService::handle_sync(const Caller& c, proto::Message& m, Respond& done) {
  Reply rep;
  switch (static_cast<Op>(m.header.op)) {
    case Op::kUmadPort: {
      OPENIB_TRY_ASSIGN(auto req, proto::decode<proto::PortReq>(m.body));
      OPENIB_TRY(expect_fds(m, 0));
      port_info_async(req.port, hca::Completer<Result<proto::UmadPortRep>>([done = std::move(done)](Result<proto::UmadPortRep> p) mutable {
        if (!p) return done(p.take_error());
        done(Reply{proto::encode(*p), {}});
      }));
      return rep;  // `done` is gone: the continuation answers
    }
    case Op::kUmadOpen: {
      OPENIB_TRY_ASSIGN(auto req, proto::decode<proto::PortReq>(m.body));
      OPENIB_TRY(expect_fds(m, 0));
      open_async(c.id, req.port, c.net_admin, hca::Completer<Result<UniqueFd>>([done = std::move(done), id = c.id, port = req.port](
                                                         Result<UniqueFd> fd) mutable {
        if (!fd) return done(fd.take_error());
        log::get("ibd")->info("client {}: UMAD_OPEN port {}", id, port);
        Reply r;
        r.fds.push_back(std::move(*fd));
        done(std::move(r));
      }));
      return rep;  // `done` is gone: the continuation answers
    }
    case Op::kUmadRegister: {
      OPENIB_TRY_ASSIGN(auto req, proto::decode<proto::UmadRegReq>(m.body));
      OPENIB_TRY(expect_fds(m, 0));
      OPENIB_TRY_ASSIGN(uint32_t id, register_agent(c.id, req));
      proto::HandleRep h;
      h.handle = id;
      rep.payload = proto::encode(h);
      return rep;
    }
    case Op::kUmadUnregister: {
      OPENIB_TRY_ASSIGN(auto req, proto::decode<proto::HandleReq>(m.body));
      OPENIB_TRY(expect_fds(m, 0));
      OPENIB_TRY(unregister_agent(c.id, req.handle));
      return rep;
    }
    default: break;
  }
  return err(EOPNOTSUPP, "unknown operation {}", m.header.op);
}

}  // namespace openib::ibd
