// PathRecord Get/GetTable as MADs, and their answers' status (IBA 13.4.7,
// 15.2.1.1).
#include "sa/path_query.hpp"

#include "mad/mad.hpp"

namespace openib::sa {

Result<Mad> make_path_query(const PathKey& key, std::uint64_t tid, std::uint64_t sm_key) {
  ByteVec rec(kPathRecordBytes);
  encode_path_record(rec, key.query());
  SaRequest req;
  req.method = mad::method::kGet;
  req.attr_id = attr::kPathRecord;
  req.tid = tid;
  req.sm_key = sm_key;
  req.comp_mask = key.comp_mask();
  return make_sa_request(req, rec);
}

Result<std::vector<ConstBytes>> sa_answer_records(ConstBytes answer, std::uint16_t attr_id) {
  OPENIB_TRY_ASSIGN(mad::MadHeader h, mad::decode_header(answer));
  if (h.mgmt_class != mad::mgmt_class::kSubnAdm || !mad::is_response(h.method) || h.attr_id != attr_id)
    return err(EPROTO, "not an answer of attribute {:#x}: class {:#x} method {:#x} attribute {:#x}", attr_id,
               h.mgmt_class, h.method, h.attr_id);
  if (h.status & mad::status::kBusy) return err(EBUSY, "SA busy (MAD status {:#06x})", h.status);
  if (h.status & mad::status::kRedirect) return err(EREMCHG, "SA redirects (MAD status {:#06x})", h.status);
  if (h.status & 0x001C) return err(EPROTO, "SA refused the request (MAD status {:#06x})", h.status);
  const std::uint8_t code = sa_status_code(h.status);
  if (code == status::kNoRecords) return std::vector<ConstBytes>{};
  if (code != 0) return err(EREMOTEIO, "SA answered {} (MAD status {:#06x})", sa_status_name(code), h.status);
  return sa_records(answer);
}

Result<std::vector<PathRecord>> parse_path_records(ConstBytes answer) {
  OPENIB_TRY_ASSIGN(std::vector<ConstBytes> recs, sa_answer_records(answer, attr::kPathRecord));
  std::vector<PathRecord> out;
  for (ConstBytes r : recs) {
    OPENIB_TRY_ASSIGN(PathRecord p, decode_path_record(r));
    out.push_back(p);
  }
  return out;
}

PathAnswer parse_path_answer(ConstBytes answer) {
  auto recs = parse_path_records(answer);
  if (!recs) return recs.take_error();
  if (recs->empty()) return std::optional<PathRecord>{};
  return std::optional<PathRecord>((*recs)[0]);
}

}  // namespace openib::sa
