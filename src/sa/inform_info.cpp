// InformInfo (IBA 13.4.8.3) and the GID traps 64..67 (IBA 14.2.5.1).
#include "sa/inform_info.hpp"

#include "sa/record_fields.hpp"

namespace openib::sa {

namespace {
// (bit offset, bit length) of IBA 13.4.8.3; 160..175, 248..250 and
// 256..263 reserved. IsGeneric and Subscribe are whole bytes.
constexpr auto kFields = [](auto& v, auto f) {
  f(0, 128, v.gid);
  f(128, 16, v.lid_range_begin);
  f(144, 16, v.lid_range_end);
  f(176, 8, v.is_generic);
  f(184, 8, v.subscribe);
  f(192, 16, v.type);
  f(208, 16, v.trap_number);
  f(224, 24, v.qpn);
  f(251, 5, v.resp_time_value);
  f(264, 24, v.producer_type);
};
}  // namespace

void encode_inform_info(MutBytes out, const InformInfo& v) { encode_fields(out, kInformInfoBytes, v, kFields); }

Result<InformInfo> decode_inform_info(ConstBytes in) {
  return decode_fields<InformInfo>(in, kInformInfoBytes, "InformInfo", kFields);
}

InformInfo gid_trap_subscription(std::uint16_t trap_number, bool subscribe, std::uint32_t qpn) {
  InformInfo v;
  v.trap_number = trap_number;
  v.subscribe = subscribe;
  v.qpn = qpn;
  return v;
}

namespace {
constexpr std::size_t kGidDetailOff = 6;  // DataDetails bytes 0..5 reserved
constexpr std::uint32_t kClassManager = 4;  // IBA 13.4.8.2 ProducerType
bool is_gid_trap(std::uint16_t t) { return t >= gid_trap::kGidInService && t <= gid_trap::kMcGroupDeleted; }
}  // namespace

mad::Notice make_gid_trap(std::uint16_t trap_number, std::uint16_t issuer_lid, const Gid& gid) {
  mad::Notice n;
  n.is_generic = true;
  n.type = static_cast<std::uint8_t>(mad::NoticeType::kSubnMgmt);
  n.producer_type = kClassManager;
  n.trap_number = trap_number;
  n.issuer_lid = issuer_lid;
  for (std::size_t i = 0; i < gid.size(); ++i) n.data_details[kGidDetailOff + i] = gid[i];
  return n;
}

std::optional<GidTrap> parse_gid_trap(const mad::Notice& n) {
  if (!n.is_generic || !is_gid_trap(n.trap_number)) return std::nullopt;
  GidTrap t;
  t.trap_number = n.trap_number;
  for (std::size_t i = 0; i < t.gid.size(); ++i) t.gid[i] = n.data_details[kGidDetailOff + i];
  return t;
}

}  // namespace openib::sa
