// MCMemberRecord codec, IBA 15.2.5.17: its table, once.
#include "sa/mcmember_record.hpp"

#include "sa/record_fields.hpp"

namespace openib::sa {

namespace {
// (bit offset, bit length) of IBA 15.2.5.17; 393..415 reserved.
constexpr auto kFields = [](auto& v, auto f) {
  f(0, 128, v.mgid);
  f(128, 128, v.port_gid);
  f(256, 32, v.qkey);
  f(288, 16, v.mlid);
  f(304, 2, v.mtu_selector);
  f(306, 6, v.mtu);
  f(312, 8, v.tclass);
  f(320, 16, v.pkey);
  f(336, 2, v.rate_selector);
  f(338, 6, v.rate);
  f(344, 2, v.packet_life_time_selector);
  f(346, 6, v.packet_life_time);
  f(352, 4, v.sl);
  f(356, 20, v.flow_label);
  f(376, 8, v.hop_limit);
  f(384, 4, v.scope);
  f(388, 4, v.join_state);
  f(392, 1, v.proxy_join);
};
}  // namespace

void encode_mcmember_record(MutBytes out, const McMemberRecord& v) {
  encode_fields(out, kMcMemberRecordBytes, v, kFields);
}

Result<McMemberRecord> decode_mcmember_record(ConstBytes in) {
  return decode_fields<McMemberRecord>(in, kMcMemberRecordBytes, "MCMemberRecord", kFields);
}

}  // namespace openib::sa
