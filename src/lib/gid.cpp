// Context::query_gid_entry (docs/library.md "Ports and GIDs"): QUERY_GID
// (docs/client-protocol.md), the entry with its type and the port's link
// layer, as ibv_query_gid_ex answers.
#include "clientproto/messages.hpp"
#include "lib/objects.hpp"

namespace openib::lib {

Result<GidEntry> ContextImpl::query_gid_entry(uint8_t port, int index) {
  if (index < 0 || index > 0xffff) return err(EINVAL, "GID index {} of port {}", index, port);
  proto::GidReq req;
  req.port = port;
  req.index = static_cast<uint16_t>(index);
  OPENIB_TRY_ASSIGN(auto r, conn().template call<proto::GidRep>(proto::Op::kQueryGid, req));
  if (r.gid_type > proto::kGidTypeRoceV2) return err(EPROTO, "QUERY_GID: GID type {}", r.gid_type);
  if (r.link_layer != proto::kLinkLayerInfiniBand && r.link_layer != proto::kLinkLayerEthernet)
    return err(EPROTO, "QUERY_GID: link layer {}", r.link_layer);
  GidEntry e;
  e.gid.raw = r.gid;
  e.gid_index = static_cast<uint32_t>(index);
  e.port_num = port;
  e.gid_type = static_cast<GidType>(r.gid_type);
  e.link_layer = static_cast<LinkLayer>(r.link_layer);
  return e;
}

}  // namespace openib::lib
