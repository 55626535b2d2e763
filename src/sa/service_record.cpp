// ServiceRecord codec, IBA 15.2.5.14: its table, once.
#include "sa/service_record.hpp"

#include "sa/record_fields.hpp"

namespace openib::sa {

namespace {
// (bit offset, bit length) of IBA 15.2.5.14; 208..223 reserved.
constexpr auto kFields = [](auto& v, auto f) {
  f(0, 64, v.service_id);
  f(64, 128, v.service_gid);
  f(192, 16, v.service_pkey);
  f(224, 32, v.service_lease);
  f(256, 128, v.service_key);
  f(384, 512, v.service_name);
  for (unsigned i = 0; i < 16; ++i) f(896 + 8 * i, 8, v.data8[i]);
  for (unsigned i = 0; i < 8; ++i) f(1024 + 16 * i, 16, v.data16[i]);
  for (unsigned i = 0; i < 4; ++i) f(1152 + 32 * i, 32, v.data32[i]);
  for (unsigned i = 0; i < 2; ++i) f(1280 + 64 * i, 64, v.data64[i]);
};
}  // namespace

void encode_service_record(MutBytes out, const ServiceRecord& v) {
  encode_fields(out, kServiceRecordBytes, v, kFields);
}

Result<ServiceRecord> decode_service_record(ConstBytes in) {
  return decode_fields<ServiceRecord>(in, kServiceRecordBytes, "ServiceRecord", kFields);
}

}  // namespace openib::sa
