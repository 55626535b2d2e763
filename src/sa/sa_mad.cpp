// SA MAD header and record walking, IBA 15.2.1.1.
#include "sa/sa_mad.hpp"

#include <array>

#include "mad/mad.hpp"
#include "mad/rmpp.hpp"

namespace openib::sa {

using mad::get64;
using mad::put64;

Gid make_gid(std::uint64_t prefix, std::uint64_t guid) {
  Gid g{};
  mad::put64(std::as_writable_bytes(std::span(g)), 0, prefix);
  mad::put64(std::as_writable_bytes(std::span(g)), 8, guid);
  return g;
}
std::uint64_t gid_prefix(const Gid& g) { return get64(std::as_bytes(std::span(g)), 0); }
std::uint64_t gid_guid(const Gid& g) { return get64(std::as_bytes(std::span(g)), 8); }
void put_gid(MutBytes out, std::size_t off, const Gid& g) {
  for (std::size_t i = 0; i < g.size(); ++i) mad::put8(out, off + i, g[i]);
}
Gid get_gid(ConstBytes in, std::size_t off) {
  Gid g{};
  for (std::size_t i = 0; i < g.size(); ++i) g[i] = mad::get8(in, off + i);
  return g;
}

Result<SaHeader> decode_sa_header(ConstBytes m) {
  if (auto r = mad::need(m, kSaDataOff, "SA header"); !r) return r.take_error();
  SaHeader h;
  h.sm_key = get64(m, 36);
  h.attr_offset = mad::get16(m, 44);
  h.comp_mask = get64(m, 48);
  return h;
}

void encode_sa_header(MutBytes m, const SaHeader& h) {
  put64(m, 36, h.sm_key);
  mad::put16(m, 44, h.attr_offset);
  mad::put16(m, 46, 0);
  put64(m, 48, h.comp_mask);
}

Result<Mad> make_sa_request(const SaRequest& req, ConstBytes record) {
  if (record.size() > kSaDataBytes)
    return err(EINVAL, "SA record of {} bytes does not fit one MAD ({} bytes)", record.size(), kSaDataBytes);
  mad::MadHeader h;
  h.mgmt_class = mad::mgmt_class::kSubnAdm;
  h.class_version = mad::kSaClassVersion;
  h.method = req.method;
  h.tid = req.tid;
  h.attr_id = req.attr_id;
  h.attr_mod = req.attr_mod;
  Mad m = mad::make_mad(h);
  encode_sa_header(m, SaHeader{req.sm_key, 0, req.comp_mask});
  std::copy(record.begin(), record.end(), m.begin() + kSaDataOff);
  return m;
}

Result<std::vector<ConstBytes>> sa_records(ConstBytes answer) {
  OPENIB_TRY_ASSIGN(SaHeader h, decode_sa_header(answer));
  std::vector<ConstBytes> out;
  ConstBytes data = answer.subspan(kSaDataOff);
  // A one-MAD RMPP answer (Active, First and Last; OpenSM sends every
  // GetTableResp so) counts its used bytes in PayloadLength, SA header
  // included (IBA 13.6.2.3): the rest of the MAD is padding, not records.
  const std::uint8_t flags = mad::get8(answer, 26) & 0x7;
  constexpr std::uint8_t kWhole = mad::rmpp_flag::kActive | mad::rmpp_flag::kFirst | mad::rmpp_flag::kLast;
  if (answer.size() == mad::kMadBytes && flags == kWhole) {
    const std::uint32_t paylen = mad::get32(answer, 32);
    const std::size_t used = paylen > kSaHeaderBytes ? paylen - kSaHeaderBytes : 0;
    data = data.first(std::min(data.size(), used));
  }
  if (mad::mad_method(answer) != mad::method::kGetTableResp) {
    out.push_back(data.first(std::min(data.size(), kSaDataBytes)));
    return out;
  }
  const std::size_t stride = std::size_t{h.attr_offset} * 8;
  if (stride == 0) return out;
  for (std::size_t off = 0; off + stride <= data.size(); off += stride) out.push_back(data.subspan(off, stride));
  return out;
}

const char* sa_status_name(std::uint8_t code) {
  static constexpr std::array<const char*, 8> kNames = {
      "OK", "ERR_NO_RESOURCES", "ERR_REQ_INVALID", "ERR_NO_RECORDS", "ERR_TOO_MANY_RECORDS",
      "ERR_REQ_INVALID_GID", "ERR_REQ_INSUFFICIENT_COMPONENTS", "ERR_REQ_DENIED"};
  return code < kNames.size() ? kNames[code] : "unknown SA status";
}

Result<ConstBytes> sa_answer_record(ConstBytes answer, std::uint16_t attr_id) {
  OPENIB_TRY_ASSIGN(mad::MadHeader h, mad::decode_header(answer));
  if (h.mgmt_class != mad::mgmt_class::kSubnAdm || !mad::is_response(h.method) || h.attr_id != attr_id)
    return err(EPROTO, "not an answer about attribute {:#x}: class {:#x} method {:#x} attribute {:#x}", attr_id,
               h.mgmt_class, h.method, h.attr_id);
  if (h.status & mad::status::kBusy) return err(EBUSY, "SA busy (MAD status {:#06x})", h.status);
  if (h.status & mad::status::kRedirect) return err(EREMCHG, "SA redirects (MAD status {:#06x})", h.status);
  if (h.status & 0x001C) return err(EREMOTEIO, "SA refused the request (MAD status {:#06x})", h.status);
  if (const std::uint8_t code = sa_status_code(h.status); code != 0)
    return err(EREMOTEIO, "SA answered {} (MAD status {:#06x})", sa_status_name(code), h.status);
  OPENIB_TRY_ASSIGN(std::vector<ConstBytes> recs, sa_records(answer));
  if (recs.empty()) return err(EPROTO, "SA answer without a record");
  return recs[0];
}

}  // namespace openib::sa
