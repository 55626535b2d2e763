// libFuzzer target: arbitrary bytes into the SA codecs (src/sa): the SA
// header, the record walk of an answer, a PathRecord answer's reading, and every record decoder (decode ->
// encode -> decode must give the same value), the GID-trap reading of a
// Notice. Nothing may crash or read out of bounds.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "codec_round_trip.hpp"
#include "mad/sma_attrs.hpp"
#include "sa/inform_info.hpp"
#include "sa/mcmember_record.hpp"
#include "sa/path_query.hpp"
#include "sa/path_record.hpp"
#include "sa/sa_mad.hpp"
#include "sa/service_record.hpp"
#include "sa/sm_records.hpp"

using namespace openib;
using namespace openib::sa;

using openib::fuzz::round_trip;

namespace {

void every_record(ConstBytes in) {
  round_trip(in, decode_path_record, encode_path_record, kPathRecordBytes);
  round_trip(in, decode_mcmember_record, encode_mcmember_record, kMcMemberRecordBytes);
  round_trip(in, decode_service_record, encode_service_record, kServiceRecordBytes);
  round_trip(in, decode_node_record, encode_node_record, kNodeRecordBytes);
  round_trip(in, decode_port_info_record, encode_port_info_record, kPortInfoRecordBytes);
  round_trip(in, decode_inform_info, encode_inform_info, kInformInfoBytes);
  if (auto n = mad::decode_notice(in); n.ok()) {
    if (auto t = parse_gid_trap(*n)) {
      const auto again = parse_gid_trap(make_gid_trap(t->trap_number, n->issuer_lid, t->gid));
      if (!again || !(*again == *t)) std::abort();
    }
  }
  if (auto p = decode_path_record(in); p.ok()) {
    // Masking twice changes nothing more than masking once.
    const std::uint64_t mask = mad::get64(in, 0);
    const PathRecord once = mask_path_record(*p, mask);
    if (!(mask_path_record(once, mask) == once)) std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  ConstBytes in(reinterpret_cast<const std::byte*>(data), size);
  (void)decode_sa_header(in);
  (void)parse_path_answer(in);
  every_record(in);
  // The input as an SA answer: every record it holds, whatever its stride.
  if (auto recs = sa_records(in); recs.ok()) {
    for (ConstBytes r : *recs) {
      if (r.data() < in.data() || r.data() + r.size() > in.data() + in.size()) std::abort();
      every_record(r);
    }
  }
  return 0;
}
