// PathRecord queries as MADs (src/sa/path_query.hpp): the request a
// PathKey makes, and what each kind of SA answer becomes for the cache.
#include <catch2/catch.hpp>

#include "hex_bytes.hpp"
#include "mad/mad.hpp"
#include "mad/rmpp.hpp"
#include "sa/path_query.hpp"

using namespace openib;
using namespace openib::sa;
using openib::test::hex;
using openib::test::prefix;

namespace {

const Gid kDgid = make_gid(0xfe80000000000000ull, 0x0002c90300000002ull);

PathKey key() {
  PathRecord q;
  q.dgid = kDgid;
  q.pkey = 0xffff;
  q.sl = 9;  // not selected: must not be sent
  return PathKey(1, pr_mask::kDgid | pr_mask::kPKey, q);
}

// The SA's answer to make_path_query(key()): `status`, `records` paths.
mad::Mad answer(std::uint16_t status, std::uint8_t method = mad::method::kGetResp, int records = 1) {
  mad::Mad m = *make_path_query(key(), 7);
  mad::make_response(m, status);
  mad::put8(m, 3, method);
  encode_sa_header(m, SaHeader{0, attr_offset_for(kPathRecordBytes), key().comp_mask()});
  for (int i = 0; i < records; ++i) {
    PathRecord p;
    p.dgid = kDgid;
    p.dlid = static_cast<std::uint16_t>(20 + i);
    p.sl = 0;
    encode_path_record(MutBytes(m).subspan(kSaDataOff + 64 * static_cast<std::size_t>(i)), p);
  }
  if (method == mad::method::kGetTableResp) {
    mad::RmppHeader r;
    r.type = mad::rmpp_type::kData;
    r.flags = mad::rmpp_flag::kActive | mad::rmpp_flag::kFirst | mad::rmpp_flag::kLast;
    r.seg_num = 1;
    r.paylen_newwin = static_cast<std::uint32_t>(kSaHeaderBytes + 64 * records);
    mad::encode_rmpp_header(m, r);
  }
  return m;
}

}  // namespace

TEST_CASE("a PathKey asks SubnAdmGet(PathRecord) with its mask and only its selected fields", "[sa]") {
  auto m = make_path_query(key(), 0x0000000500000007ull);
  REQUIRE(m.ok());
  CHECK(prefix(*m, 24) == hex("01 03 02 01 0000 0000 0000000500000007 0035 0000 00000000"));
  CHECK(mad::get64(*m, 48) == (pr_mask::kDgid | pr_mask::kPKey));
  auto q = decode_path_record(ConstBytes(*m).subspan(kSaDataOff));
  REQUIRE(q.ok());
  CHECK(q->dgid == kDgid);
  CHECK(q->pkey == 0xffff);
  CHECK(q->sl == 0);
}

TEST_CASE("an SA answer becomes a path, 'no path', or an error the caller can act on", "[sa]") {
  auto ok = parse_path_answer(answer(0));
  REQUIRE(ok.ok());
  REQUIRE(ok.value());
  CHECK(ok.value()->dlid == 20);

  auto none = parse_path_answer(answer(0x0300));  // ERR_NO_RECORDS
  REQUIRE(none.ok());
  CHECK_FALSE(none.value());

  CHECK(parse_path_answer(answer(0x0001)).error().code == EBUSY);
  CHECK(parse_path_answer(answer(0x0002)).error().code == EREMCHG);
  CHECK(parse_path_answer(answer(0x000C)).error().code == EPROTO);
  auto denied = parse_path_answer(answer(0x0700));
  CHECK(denied.error().code == EREMOTEIO);
  CHECK_THAT(denied.error().message, Catch::Contains("ERR_REQ_DENIED"));

  mad::Mad wrong_attr = answer(0);
  mad::put16(wrong_attr, 16, attr::kNodeRecord);
  CHECK(parse_path_answer(wrong_attr).error().code == EPROTO);
  CHECK(parse_path_answer(*make_path_query(key(), 1)).error().code == EPROTO);  // a request, not an answer
  CHECK(parse_path_answer(ConstBytes(answer(0)).first(30)).error().code == EPROTO);
}

TEST_CASE("a GetTable answer gives every path it holds", "[sa]") {
  auto recs = parse_path_records(answer(0, mad::method::kGetTableResp, 3));
  REQUIRE(recs.ok());
  REQUIRE(recs->size() == 3);
  CHECK((*recs)[2].dlid == 22);
  auto empty = parse_path_records(answer(0, mad::method::kGetTableResp, 0));
  REQUIRE(empty.ok());
  CHECK(empty->empty());
}
