// PathRecord codec, IBA 15.2.5.16: its table, once.
#include "sa/path_record.hpp"

#include "sa/record_fields.hpp"

namespace openib::sa {

namespace {
// (bit offset, bit length) of IBA 15.2.5.16; 353..355 and 464..511 reserved.
constexpr auto kFields = [](auto& v, auto f) {
  f(0, 64, v.service_id);
  f(64, 128, v.dgid);
  f(192, 128, v.sgid);
  f(320, 16, v.dlid);
  f(336, 16, v.slid);
  f(352, 1, v.raw_traffic);
  f(356, 20, v.flow_label);
  f(376, 8, v.hop_limit);
  f(384, 8, v.tclass);
  f(392, 1, v.reversible);
  f(393, 7, v.numb_path);
  f(400, 16, v.pkey);
  f(416, 12, v.qos_class);
  f(428, 4, v.sl);
  f(432, 2, v.mtu_selector);
  f(434, 6, v.mtu);
  f(440, 2, v.rate_selector);
  f(442, 6, v.rate);
  f(448, 2, v.packet_life_time_selector);
  f(450, 6, v.packet_life_time);
  f(456, 8, v.preference);
};
}  // namespace

void encode_path_record(MutBytes out, const PathRecord& v) { encode_fields(out, kPathRecordBytes, v, kFields); }

Result<PathRecord> decode_path_record(ConstBytes in) {
  return decode_fields<PathRecord>(in, kPathRecordBytes, "PathRecord", kFields);
}

PathRecord mask_path_record(const PathRecord& v, std::uint64_t m) {
  PathRecord o;
  auto keep = [m](std::uint64_t bit) { return (m & bit) != 0; };
  if (keep(1ull << 0)) o.service_id |= v.service_id & 0xFF00000000000000ull;  // ServiceID_8MSB
  if (keep(1ull << 1)) o.service_id |= v.service_id & 0x00FFFFFFFFFFFFFFull;  // ServiceID_56LSB
  if (keep(pr_mask::kDgid)) o.dgid = v.dgid;
  if (keep(pr_mask::kSgid)) o.sgid = v.sgid;
  if (keep(pr_mask::kDlid)) o.dlid = v.dlid;
  if (keep(pr_mask::kSlid)) o.slid = v.slid;
  if (keep(pr_mask::kRawTraffic)) o.raw_traffic = v.raw_traffic;
  if (keep(pr_mask::kFlowLabel)) o.flow_label = v.flow_label;
  if (keep(pr_mask::kHopLimit)) o.hop_limit = v.hop_limit;
  if (keep(pr_mask::kTClass)) o.tclass = v.tclass;
  if (keep(pr_mask::kReversible)) o.reversible = v.reversible;
  if (keep(pr_mask::kNumbPath)) o.numb_path = v.numb_path;
  if (keep(pr_mask::kPKey)) o.pkey = v.pkey;
  if (keep(pr_mask::kQosClass)) o.qos_class = v.qos_class;
  if (keep(pr_mask::kSl)) o.sl = v.sl;
  if (keep(pr_mask::kMtuSelector)) o.mtu_selector = v.mtu_selector;
  if (keep(pr_mask::kMtu)) o.mtu = v.mtu;
  if (keep(pr_mask::kRateSelector)) o.rate_selector = v.rate_selector;
  if (keep(pr_mask::kRate)) o.rate = v.rate;
  if (keep(pr_mask::kPacketLifeTimeSelector)) o.packet_life_time_selector = v.packet_life_time_selector;
  if (keep(pr_mask::kPacketLifeTime)) o.packet_life_time = v.packet_life_time;
  if (keep(pr_mask::kPreference)) o.preference = v.preference;
  return o;
}

}  // namespace openib::sa
