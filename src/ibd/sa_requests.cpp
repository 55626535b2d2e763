// The SA client's requests (docs/client-protocol.md "Path records",
// "Multicast and services"; docs/sa.md "In ibd").
#include <algorithm>
#include <cstring>

#include "common/log.hpp"
#include "ibd/sa_service.hpp"
#include "sa/mcmember_record.hpp"

namespace openib::ibd {

using proto::Op;

std::vector<proto::Op> SaService::ops() const {
  return {Op::kPathQuery, Op::kPathTable, Op::kPathList,     Op::kPathFlush,
          Op::kMcastJoin, Op::kMcastLeave, Op::kServiceSet, Op::kServiceDelete};
}

Result<void> SaService::handle(const Caller& c, proto::Message& m, Respond& done) {
  switch (static_cast<Op>(m.header.op)) {
    case Op::kPathQuery: return op_path_query(c, m, done);
    case Op::kPathTable: return done(op_path_table(c, m)), ok();
    case Op::kPathList: return done(op_path_list(c, m)), ok();
    case Op::kPathFlush: return done(op_path_flush(c, m)), ok();
    default: return op_sa_member(c, m, done);
  }
}

// PATH_QUERY: a path record through ibd's path cache (sa_service.hpp).
Result<void> SaService::op_path_query(const Caller& c, proto::Message& m, Respond& done) {
  OPENIB_TRY_ASSIGN(auto req, proto::decode<proto::PathQueryReq>(m.body));
  OPENIB_TRY(expect_fds(m, 0));
  // The client's uid: its misses are bounded per uid (sa_service.hpp).
  path_query(c.uid, req, hca::Completer<Result<proto::PathRep>>([done = std::move(done)](Result<proto::PathRep> p) mutable {
    if (!p) return done(p.take_error());
    done(Reply{proto::encode(*p), {}});
  }));
  return ok();  // `done` is gone: the continuation answers
}

// PATH_TABLE: the shared path table, read-only (docs/client-protocol.md
// "Path records"). Any client: it holds what PATH_QUERY gives any client.
Result<Reply> SaService::op_path_table(const Caller&, proto::Message& m) {
  OPENIB_TRY(proto::decode<proto::Empty>(m.body));
  OPENIB_TRY(expect_fds(m, 0));
  const PathTableShm* t = table();
  if (!t) return err(EOPNOTSUPP, "this ibd publishes no shared path table (--path-table-slots 0)");
  OPENIB_TRY_ASSIGN(UniqueFd fd, t->client_fd());
  Reply r;
  r.payload = proto::encode(proto::PathTableRep{t->bytes(), t->slots()});
  r.fds.push_back(std::move(fd));
  return r;
}

// MCAST_JOIN, MCAST_LEAVE, SERVICE_SET, SERVICE_DELETE: joins and
// service registrations the client owns (sa_service.hpp), within the
// client's and its uid's budgets (SaService: --client-max-mcast-joins,
// --uid-max-mcast-joins, --client-max-services, --uid-max-services).
Result<void> SaService::op_sa_member(const Caller& c, proto::Message& m, Respond& done) {
  OPENIB_TRY(expect_fds(m, 0));
  switch (static_cast<Op>(m.header.op)) {
    case Op::kMcastJoin: {
      OPENIB_TRY_ASSIGN(auto req, proto::decode<proto::McastJoinReq>(m.body));
      // IPoIB's groups (RFC 4391 section 4) are ibd's: a client's join
      // with its own creation components could make the broadcast group
      // unusable for IPoIB (issue 29 finding 7).
      sa::Gid mgid;
      std::copy(req.mgid.begin(), req.mgid.end(), mgid.begin());
      if (sa::is_ipoib_mgid(mgid))
        return err(EACCES, "IPoIB's multicast groups (ff1x:401b:<pkey>::, ff1x:601b:<pkey>::) are ibd's own");
      mcast_join(c.id, c.uid, req, hca::Completer<Result<proto::McastJoinRep>>([done = std::move(done)](auto r) mutable {
        if (!r) return done(r.take_error());
        done(Reply{proto::encode(*r), {}});
      }));
      return ok();
    }
    case Op::kServiceSet: {
      OPENIB_TRY_ASSIGN(auto req, proto::decode<proto::ServiceReq>(m.body));
      // Registering a service for another GID would speak for another
      // node: management, as the user-MAD service is (DESIGN.md).
      if (!c.net_admin && std::any_of(req.record.begin() + 8, req.record.begin() + 24, [](uint8_t b) { return b; }))
        return err(EPERM, "a ServiceGID other than 0 (the port's own) is for root or CAP_NET_ADMIN");
      service_set(c.id, c.uid, req, hca::Completer<Result<proto::ServiceRep>>([done = std::move(done)](auto r) mutable {
        if (!r) return done(r.take_error());
        done(Reply{proto::encode(*r), {}});
      }));
      return ok();
    }
    case Op::kMcastLeave: {
      OPENIB_TRY_ASSIGN(auto req, proto::decode<proto::McastLeaveReq>(m.body));
      OPENIB_TRY(mcast_leave(c.id, req));
      break;
    }
    case Op::kServiceDelete: {
      OPENIB_TRY_ASSIGN(auto req, proto::decode<proto::ServiceReq>(m.body));
      OPENIB_TRY(service_delete(c.id, req));
      break;
    }
    default: return err(EOPNOTSUPP, "unknown operation {}", m.header.op);
  }
  done(Reply{});
  return ok();
}

// PATH_LIST: one page of the path cache as JSON, bounded by the message
// (docs/client-protocol.md "Path records"). Open to every client, as
// PATH_QUERY.
Result<Reply> SaService::op_path_list(const Caller& c, proto::Message& m) {
  (void)c;
  OPENIB_TRY_ASSIGN(auto req, proto::decode<proto::PathListReq>(m.body));
  OPENIB_TRY(expect_fds(m, 0));
  // The reply's header and status word come on top of the text.
  const std::string text = list_json(req.port, req.start, proto::kMaxMessage - proto::kHeaderSize - 64);
  return Reply::text(text);
}

// PATH_FLUSH: management, as the user-MAD service (root or CAP_NET_ADMIN,
// peer.hpp): a flush costs every client of the host SA queries.
Result<Reply> SaService::op_path_flush(const Caller& c, proto::Message& m) {
  OPENIB_TRY_ASSIGN(auto req, proto::decode<proto::PathFlushReq>(m.body));
  OPENIB_TRY(expect_fds(m, 0));
  if (!c.net_admin) return err(EPERM, "PATH_FLUSH: root or CAP_NET_ADMIN only");
  if (req.flags & ~proto::kPathFlushDgid) return err(EINVAL, "unknown PATH_FLUSH flags {:#x}", req.flags);
  std::optional<sa::Gid> dgid;
  if (req.flags & proto::kPathFlushDgid) {
    dgid.emplace();
    std::memcpy(dgid->data(), req.dgid.data(), dgid->size());
  }
  proto::PathFlushRep rep;
  rep.dropped = static_cast<uint32_t>(flush(req.port, dgid));
  log::get("ibd")->info("client {}: PATH_FLUSH port {}{}: {} entries dropped", c.id, req.port,
                        dgid ? " (one DGID)" : "", rep.dropped);
  return Reply{proto::encode(rep), {}};
}

}  // namespace openib::ibd
