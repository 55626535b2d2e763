#include "clientproto/messages.hpp"

#include <cstring>

#include "common/byte_order.hpp"

namespace openib::proto {

const char* op_name(uint16_t op) {
  switch (static_cast<Op>(op & ~kReplyBit)) {
    case Op::kHello: return "HELLO";
    case Op::kQueryDevice: return "QUERY_DEVICE";
    case Op::kQueryPort: return "QUERY_PORT";
    case Op::kQueryGid: return "QUERY_GID";
    case Op::kQueryPkey: return "QUERY_PKEY";
    case Op::kMapMemRange: return "MAP_MEM_RANGE";
    case Op::kAllocPd: return "ALLOC_PD";
    case Op::kDeallocPd: return "DEALLOC_PD";
    case Op::kMapMem: return "MAP_MEM";
    case Op::kUnmapMem: return "UNMAP_MEM";
    case Op::kRegMr: return "REG_MR";
    case Op::kDeregMr: return "DEREG_MR";
    case Op::kCreateCq: return "CREATE_CQ";
    case Op::kDestroyCq: return "DESTROY_CQ";
    case Op::kCreateSrq: return "CREATE_SRQ";
    case Op::kModifySrq: return "MODIFY_SRQ";
    case Op::kDestroySrq: return "DESTROY_SRQ";
    case Op::kCreateQp: return "CREATE_QP";
    case Op::kModifyQp: return "MODIFY_QP";
    case Op::kQueryQp: return "QUERY_QP";
    case Op::kDestroyQp: return "DESTROY_QP";
    case Op::kCreateAh: return "CREATE_AH";
    case Op::kDestroyAh: return "DESTROY_AH";
    case Op::kGetAsyncEvents: return "GET_ASYNC_EVENTS";
    case Op::kInfo: return "INFO";
    case Op::kUmadPort: return "UMAD_PORT";
    case Op::kUmadOpen: return "UMAD_OPEN";
    case Op::kUmadRegister: return "UMAD_REGISTER";
    case Op::kUmadUnregister: return "UMAD_UNREGISTER";
    case Op::kPathQuery: return "PATH_QUERY";
    case Op::kPathTable: return "PATH_TABLE";
    case Op::kMcastJoin: return "MCAST_JOIN";
    case Op::kMcastLeave: return "MCAST_LEAVE";
    case Op::kServiceSet: return "SERVICE_SET";
    case Op::kServiceDelete: return "SERVICE_DELETE";
    case Op::kPathList: return "PATH_LIST";
    case Op::kIpoibInfo: return "IPOIB_INFO";
    case Op::kCmOpen: return "CM_OPEN";
    case Op::kCmListen: return "CM_LISTEN";
    case Op::kCmConnect: return "CM_CONNECT";
    case Op::kCmAccept: return "CM_ACCEPT";
    case Op::kCmReject: return "CM_REJECT";
    case Op::kCmDisconnect: return "CM_DISCONNECT";
    case Op::kCmDestroy: return "CM_DESTROY";
    case Op::kCmSidrQuery: return "CM_SIDR_QUERY";
    case Op::kCmSidrReply: return "CM_SIDR_REPLY";
    case Op::kCmInitQpAttr: return "CM_INIT_QP_ATTR";
    case Op::kCmaOpen: return "CMA_OPEN";
    case Op::kCmaCreateId: return "CMA_CREATE_ID";
    case Op::kCmaBind: return "CMA_BIND";
    case Op::kCmaResolveAddr: return "CMA_RESOLVE_ADDR";
    case Op::kCmaResolveRoute: return "CMA_RESOLVE_ROUTE";
    case Op::kCmaListen: return "CMA_LISTEN";
    case Op::kCmaInitQp: return "CMA_INIT_QP";
    case Op::kCmaConnect: return "CMA_CONNECT";
    case Op::kCmaAccept: return "CMA_ACCEPT";
    case Op::kCmaReject: return "CMA_REJECT";
    case Op::kCmaDisconnect: return "CMA_DISCONNECT";
    case Op::kCmaDestroyId: return "CMA_DESTROY_ID";
    case Op::kCmaJoin: return "CMA_JOIN";
    case Op::kCmaLeave: return "CMA_LEAVE";
    case Op::kCmaQuery: return "CMA_QUERY";
    case Op::kCmaInfo: return "CMA_INFO";
    case Op::kCmaInitQpAttr: return "CMA_INIT_QP_ATTR";
    case Op::kCmaConnectOwnQp: return "CMA_CONNECT_OWN_QP";
    case Op::kCmaAcceptOwnQp: return "CMA_ACCEPT_OWN_QP";
    case Op::kCmaEstablish: return "CMA_ESTABLISH";
    case Op::kMapMemShared: return "MAP_MEM_SHARED";
    case Op::kIpoibSetMode: return "IPOIB_SET_MODE";
    case Op::kCmInfo: return "CM_INFO";
    case Op::kPathFlush: return "PATH_FLUSH";
  }
  return "UNKNOWN";
}

void encode_header(std::span<std::byte, kHeaderSize> out, const Header& h) {
  bytes::put_le(out, 0, 4, h.magic);
  bytes::put_le(out, 4, 2, h.version);
  bytes::put_le(out, 6, 2, h.op);
  bytes::put_le(out, 8, 4, h.seq);
  out[12] = static_cast<std::byte>(h.nfds);
  out[13] = out[14] = out[15] = std::byte{0};
}

Result<Header> decode_header(std::span<const std::byte> in) {
  if (in.size() < kHeaderSize) return err(EPROTO, "message of {} bytes, shorter than the header", in.size());
  Header h;
  h.magic = bytes::get_le32(in, 0);
  h.version = bytes::get_le16(in, 4);
  h.op = bytes::get_le16(in, 6);
  h.seq = bytes::get_le32(in, 8);
  h.nfds = static_cast<uint8_t>(in[12]);
  if (h.magic != kMagic) return err(EPROTO, "bad magic {:#x}", h.magic);
  if (h.version != kVersion) return err(EPROTO, "protocol version {}, this side speaks {}", h.version, kVersion);
  if (in[13] != std::byte{0} || in[14] != std::byte{0} || in[15] != std::byte{0})
    return err(EPROTO, "reserved header bytes not zero");
  if (h.nfds > kMaxFds) return err(EPROTO, "{} fds announced, at most {}", h.nfds, kMaxFds);
  return h;
}

Bytes encode_reply(int status, std::span<const std::byte> payload) {
  Bytes out(4 + payload.size());
  bytes::put_le(out, 0, 4, static_cast<uint32_t>(status));
  if (!payload.empty()) std::memcpy(out.data() + 4, payload.data(), payload.size());
  return out;
}

Bytes encode_error_reply(int status, std::string_view message) {
  return encode_reply(status, std::as_bytes(std::span(message.data(), message.size())));
}

Result<ReplyView> decode_reply(std::span<const std::byte> in) {
  if (in.size() < 4) return err(EPROTO, "reply body of {} bytes, shorter than its status", in.size());
  ReplyView v;
  v.status = static_cast<int>(bytes::get_le32(in, 0));
  if (v.status < 0 || v.status > 4095) return err(EPROTO, "reply status {} is not an errno value", v.status);
  v.payload = in.subspan(4);
  return v;
}

Bytes frame(const Header& h, std::span<const std::byte> body) {
  Bytes out(kHeaderSize + body.size());
  encode_header(std::span<std::byte, kHeaderSize>(out.data(), kHeaderSize), h);
  if (!body.empty()) std::memcpy(out.data() + kHeaderSize, body.data(), body.size());
  return out;
}

}  // namespace openib::proto
