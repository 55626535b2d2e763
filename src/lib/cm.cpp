// libopenib's connection manager channel (include/openib/cm.hpp,
// docs/cm.md "Library"): requests on the Context's connection, events read
// from the CM socket CM_OPEN hands over (one CmEventMsg per datagram).
#include "openib/cm.hpp"

#include <algorithm>

#include "clientproto/messages.hpp"
#include "lib/event_socket.hpp"
#include "lib/objects.hpp"

namespace openib {

const char* cm_event_str(CmEventType t) {
  switch (t) {
    case CmEventType::kRequest: return "request";
    case CmEventType::kReply: return "reply";
    case CmEventType::kEstablished: return "established";
    case CmEventType::kRejected: return "rejected";
    case CmEventType::kMraReceived: return "MRA received";
    case CmEventType::kDisconnectRequest: return "disconnect request";
    case CmEventType::kDisconnected: return "disconnected";
    case CmEventType::kTimewaitExit: return "timewait exit";
    case CmEventType::kTimeout: return "timeout";
    case CmEventType::kSidrRequest: return "SIDR request";
    case CmEventType::kSidrReply: return "SIDR reply";
    case CmEventType::kError: return "error";
  }
  return "unknown";
}

namespace lib {

namespace {

using proto::Op;

class CmChannelImpl final : public CmChannel {
 public:
  CmChannelImpl(ContextImpl& ctx, UniqueFd sock) : ctx_(ctx), sock_(std::move(sock)) {}

  int fd() const override { return sock_.get(); }

  Result<CmEvent> get_event(int timeout_ms) override {
    std::array<std::byte, 1024> buf;
    OPENIB_TRY_ASSIGN(size_t r, recv_event(sock_.get(), buf, timeout_ms, "CM"));
    auto m = proto::decode<proto::CmEventMsg>(std::span<const std::byte>(buf.data(), r));
    if (!m) return err(EPROTO, "CM event: {}", m.error().message);
    CmEvent e;
    e.type = static_cast<CmEventType>(m->type);
    e.id = m->id;
    e.listen_id = m->listen_id;
    e.status = m->status;
    e.reason = m->reason;
    e.port = m->port;
    e.service_id = m->service_id;
    e.remote_qpn = m->remote_qpn;
    e.starting_psn = m->starting_psn;
    e.qkey = m->qkey;
    e.responder_resources = m->responder_resources;
    e.initiator_depth = m->initiator_depth;
    e.rnr_retry_count = m->rnr_retry_count;
    e.srq = m->srq != 0;
    e.sidr_status = m->sidr_status;
    e.remote_lid = m->remote_lid;
    e.remote_gid.raw = m->remote_gid;
    e.ari.assign(m->ari.begin(), m->ari.begin() + std::min<size_t>(m->ari_len, m->ari.size()));
    e.private_data.assign(m->private_data.begin(),
                          m->private_data.begin() + std::min<size_t>(m->private_len, m->private_data.size()));
    return e;
  }

  Result<uint32_t> listen(uint8_t port, uint64_t service_id, uint64_t mask, bool sidr) override {
    proto::CmListenReq q;
    q.port = port;
    q.flags = sidr ? proto::kCmListenSidr : 0;
    q.service_id = service_id;
    q.service_mask = mask;
    OPENIB_TRY_ASSIGN(auto r, ctx_.conn().call<proto::HandleRep>(Op::kCmListen, q));
    return r.handle;
  }

  Result<uint32_t> connect(Qp& qp, const PathRecord& path, uint64_t service_id, const CmConnParams& p,
                           uint8_t port) override {
    proto::CmConnectReq q;
    q.port = port;
    q.flags = p.manual_qp ? proto::kCmManualQp : 0;
    OPENIB_TRY_ASSIGN(q.qp, qp_handle_on(ctx_, qp));
    q.service_id = service_id;
    q.path = path.raw;
    q.responder_resources = p.responder_resources;
    q.initiator_depth = p.initiator_depth;
    q.retry_count = p.retry_count;
    q.rnr_retry_count = p.rnr_retry_count;
    q.max_cm_retries = p.max_cm_retries;
    q.cm_response_timeout = p.cm_response_timeout;
    OPENIB_TRY_ASSIGN(q.private_len, put_private(q.private_data, p.private_data, cm_private::kReq, "a REQ"));
    OPENIB_TRY_ASSIGN(auto r, ctx_.conn().call<proto::HandleRep>(Op::kCmConnect, q));
    return r.handle;
  }

  Result<void> accept(uint32_t id, Qp& qp, const CmConnParams& p) override {
    proto::CmAcceptReq q;
    q.id = id;
    OPENIB_TRY_ASSIGN(q.qp, qp_handle_on(ctx_, qp));
    q.flags = p.manual_qp ? proto::kCmManualQp : 0;
    q.responder_resources = p.responder_resources;
    q.initiator_depth = p.initiator_depth;
    q.rnr_retry_count = p.rnr_retry_count;
    OPENIB_TRY_ASSIGN(q.private_len, put_private(q.private_data, p.private_data, cm_private::kRep, "a REP"));
    return ctx_.conn().call_void(Op::kCmAccept, q);
  }

  Result<void> reject(uint32_t id, uint16_t reason, std::span<const uint8_t> private_data,
                      std::span<const uint8_t> ari) override {
    proto::CmRejectReq q;
    q.id = id;
    q.reason = reason;
    if (ari.size() > q.ari.size()) return err(EINVAL, "a REJ carries at most 72 bytes of ARI, not {}", ari.size());
    std::copy(ari.begin(), ari.end(), q.ari.begin());
    q.ari_len = static_cast<uint8_t>(ari.size());
    OPENIB_TRY_ASSIGN(q.private_len, put_private(q.private_data, private_data, cm_private::kRej, "a REJ"));
    return ctx_.conn().call_void(Op::kCmReject, q);
  }

  Result<void> disconnect(uint32_t id, std::span<const uint8_t> private_data) override {
    proto::CmDisconnectReq q;
    q.id = id;
    OPENIB_TRY_ASSIGN(q.private_len, put_private(q.private_data, private_data, cm_private::kDreq, "a DREQ"));
    return ctx_.conn().call_void(Op::kCmDisconnect, q);
  }

  Result<void> destroy(uint32_t id) override { return ctx_.conn().call_void(Op::kCmDestroy, proto::HandleReq{id}); }

  Result<uint32_t> sidr_query(const PathRecord& path, uint64_t service_id, std::span<const uint8_t> private_data,
                              uint8_t port) override {
    proto::CmSidrQueryReq q;
    q.port = port;
    q.service_id = service_id;
    q.path = path.raw;
    OPENIB_TRY_ASSIGN(q.private_len,
                      put_private(q.private_data, private_data, cm_private::kSidrReq, "a SIDR_REQ"));
    OPENIB_TRY_ASSIGN(auto r, ctx_.conn().call<proto::HandleRep>(Op::kCmSidrQuery, q));
    return r.handle;
  }

  Result<void> sidr_reply(uint32_t id, uint8_t status, Qp* qp, uint32_t qkey,
                          std::span<const uint8_t> private_data) override {
    proto::CmSidrReplyReq q;
    q.id = id;
    q.status = status;
    if (qp) {
      OPENIB_TRY_ASSIGN(q.qp, qp_handle_on(ctx_, *qp));
    }
    q.qkey = qkey;
    OPENIB_TRY_ASSIGN(q.private_len,
                      put_private(q.private_data, private_data, cm_private::kSidrRep, "a SIDR_REP"));
    return ctx_.conn().call_void(Op::kCmSidrReply, q);
  }

  Result<std::pair<QpAttr, uint32_t>> init_qp_attr(uint32_t id, QpState state) override {
    proto::CmInitQpAttrReq q;
    q.id = id;
    q.state = static_cast<uint8_t>(state);
    OPENIB_TRY_ASSIGN(auto r, ctx_.conn().call<proto::CmInitQpAttrRep>(Op::kCmInitQpAttr, q));
    return std::pair<QpAttr, uint32_t>{from_proto(r.attr), r.attr.mask};
  }

 private:
  ContextImpl& ctx_;
  UniqueFd sock_;
};

}  // namespace
}  // namespace lib

Result<std::unique_ptr<CmChannel>> CmChannel::open(Context& ctx) {
  auto& c = static_cast<lib::ContextImpl&>(ctx);
  OPENIB_TRY_ASSIGN(auto r, c.conn().call(proto::Op::kCmOpen, proto::encode(proto::Empty{})));
  if (r.fds.size() != 1) return err(EPROTO, "CM_OPEN: {} fds with the reply, expected 1", r.fds.size());
  return std::unique_ptr<CmChannel>(new lib::CmChannelImpl(c, std::move(r.fds[0])));
}

}  // namespace openib
