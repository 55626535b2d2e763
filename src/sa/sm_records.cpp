// NodeRecord (IBA 15.2.5.2) and PortInfoRecord (IBA 15.2.5.3) framing.
#include "sa/sm_records.hpp"

namespace openib::sa {

void encode_node_record(MutBytes out, const NodeRecord& v) {
  mad::zero(out, kNodeRecordBytes);
  mad::put16(out, 0, v.lid);
  if (out.size() >= 4) mad::encode_node_info(out.subspan(4), v.node_info);
  if (out.size() >= 44) mad::encode_node_description(out.subspan(44), v.node_description);
}

Result<NodeRecord> decode_node_record(ConstBytes in) {
  if (auto r = mad::need(in, kNodeRecordBytes, "NodeRecord"); !r) return r.take_error();
  NodeRecord v;
  v.lid = mad::get16(in, 0);
  OPENIB_TRY_ASSIGN(v.node_info, mad::decode_node_info(in.subspan(4)));
  OPENIB_TRY_ASSIGN(v.node_description, mad::decode_node_description(in.subspan(44)));
  return v;
}

void encode_port_info_record(MutBytes out, const PortInfoRecord& v) {
  mad::zero(out, kPortInfoRecordBytes);
  mad::put16(out, 0, v.endport_lid);
  mad::put8(out, 2, v.port_num);
  mad::put8(out, 3, v.options);
  if (out.size() >= 4) mad::encode_port_info(out.subspan(4), v.port_info);
}

Result<PortInfoRecord> decode_port_info_record(ConstBytes in) {
  if (auto r = mad::need(in, kPortInfoRecordBytes, "PortInfoRecord"); !r) return r.take_error();
  PortInfoRecord v;
  v.endport_lid = mad::get16(in, 0);
  v.port_num = mad::get8(in, 2);
  v.options = mad::get8(in, 3);
  OPENIB_TRY_ASSIGN(v.port_info, mad::decode_port_info(in.subspan(4)));
  return v;
}

}  // namespace openib::sa
