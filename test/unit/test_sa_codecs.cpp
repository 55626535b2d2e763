// SA codecs (src/sa): each record against a byte string written by hand
// from the IBA table it implements (bit offsets as in the spec), then
// decoded back; the SA header at its IBA 15.2.1.1 offsets; the records of
// one-MAD and reassembled GetTable answers; the GID traps 64..67.
// The fields rdma-core's libibmad knows (PathRecord DGID, SGID, DLID, SLID,
// NumbPath, SL; every MCMemberRecord field; ServiceRecord ID, GID, P_Key,
// lease, key, name; the SA header's AttributeOffset and ComponentMask)
// were also set with its mad_set_field() in a scratch program and gave the
// same bytes as these strings; the tests do not link libibmad.
#include <catch2/catch.hpp>

#include <string>
#include <string_view>

#include "mad/mad.hpp"
#include "mad/rmpp.hpp"
#include "sa/inform_info.hpp"
#include "sa/mcmember_record.hpp"
#include "sa/path_record.hpp"
#include "sa/sa_mad.hpp"
#include "sa/service_record.hpp"
#include "sa/sm_records.hpp"
#include "hex_bytes.hpp"

using namespace openib;
using namespace openib::sa;

using openib::test::hex;
using openib::test::prefix;

namespace {

const Gid kGid1 = make_gid(0xfe80000000000000ull, 0x0002c90300000001ull);
const Gid kGid2 = make_gid(0xfe80000000000000ull, 0x0002c90300000002ull);

}  // namespace

TEST_CASE("GIDs are prefix then GUID, big-endian (IBA 4.1.1)", "[sa]") {
  CHECK(ByteVec(std::as_bytes(std::span(kGid1)).begin(), std::as_bytes(std::span(kGid1)).end()) ==
        hex("fe80000000000000 0002c90300000001"));
  CHECK(gid_prefix(kGid1) == 0xfe80000000000000ull);
  CHECK(gid_guid(kGid1) == 0x0002c90300000001ull);
}

TEST_CASE("SA request: class 3 version 2, SM_Key, AttributeOffset, ComponentMask at IBA 15.2.1.1 offsets", "[sa]") {
  PathRecord q;
  q.dgid = kGid2;
  SaRequest req;
  req.method = mad::method::kGet;
  req.attr_id = attr::kPathRecord;
  req.tid = 0x0000000100000002ull;
  req.sm_key = 0x1122334455667788ull;
  req.comp_mask = pr_mask::kDgid | pr_mask::kSgid | pr_mask::kNumbPath;
  ByteVec rec(kPathRecordBytes);
  encode_path_record(rec, q);
  auto m = make_sa_request(req, rec);
  REQUIRE(m.ok());
  CHECK(prefix(*m, 24) == hex("01 03 02 01 0000 0000 0000000100000002 0035 0000 00000000"));
  CHECK(prefix(ConstBytes(*m).subspan(24), 32) ==
        hex("000000000000000000000000 1122334455667788 0000 0000 000000000000100c"));
  CHECK(prefix(ConstBytes(*m).subspan(kSaDataOff + 8), 16) == hex("fe80000000000000 0002c90300000002"));
  auto h = decode_sa_header(*m);
  REQUIRE(h.ok());
  CHECK(*h == SaHeader{0x1122334455667788ull, 0, req.comp_mask});
  CHECK_FALSE(decode_sa_header(ConstBytes(*m).first(55)).ok());
  CHECK_FALSE(make_sa_request(req, ByteVec(kSaDataBytes + 1)).ok());
  CHECK(attr_offset_for(kMcMemberRecordBytes) == 7);
  CHECK(attr_offset_for(kPathRecordBytes) == 8);
  CHECK(sa_status_code(0x0300) == status::kNoRecords);
}

TEST_CASE("PathRecord matches the IBA 15.2.5.16 layout", "[sa]") {
  const ByteVec ref = hex(
      "0102030405060708"                    // ServiceID
      "fe80000000000000 0002c90300000002"   // DGID
      "fe80000000000000 0002c90300000001"   // SGID
      "0011 0022"                           // DLID, SLID
      "81234540"                            // RawTraffic 1, FlowLabel 0x12345, HopLimit 0x40
      "a0 81 ffff"                          // TClass, Reversible 1 + NumbPath 1, P_Key
      "1235"                                // QoSClass 0x123, SL 5
      "84 83 92 01"                         // MTU =2048, Rate =10G, PacketLifeTime =0x12, Preference
      "000000000000");
  REQUIRE(ref.size() == kPathRecordBytes);
  auto p = decode_path_record(ref);
  REQUIRE(p.ok());
  CHECK(p->service_id == 0x0102030405060708ull);
  CHECK(p->dgid == kGid2);
  CHECK(p->sgid == kGid1);
  CHECK(p->dlid == 0x11);
  CHECK(p->slid == 0x22);
  CHECK(p->raw_traffic);
  CHECK(p->flow_label == 0x12345);
  CHECK(p->hop_limit == 0x40);
  CHECK(p->tclass == 0xa0);
  CHECK(p->reversible);
  CHECK(p->numb_path == 1);
  CHECK(p->pkey == 0xffff);
  CHECK(p->qos_class == 0x123);
  CHECK(p->sl == 5);
  CHECK(p->mtu_selector == static_cast<std::uint8_t>(Selector::kExactly));
  CHECK(p->mtu == 4);
  CHECK(p->rate_selector == 2);
  CHECK(p->rate == 3);
  CHECK(p->packet_life_time_selector == 2);
  CHECK(p->packet_life_time == 0x12);
  CHECK(p->preference == 1);
  ByteVec out(kPathRecordBytes, std::byte{0xEE});
  encode_path_record(out, *p);
  CHECK(out == ref);
  CHECK_FALSE(decode_path_record(ConstBytes(ref).first(63)).ok());
}

TEST_CASE("A path query's unselected fields do not count (mask_path_record)", "[sa]") {
  PathRecord a, b;
  a.dgid = b.dgid = kGid2;
  a.sl = 3;
  b.sl = 7;
  a.service_id = 0xAA00000000000001ull;
  CHECK(mask_path_record(a, pr_mask::kDgid) == mask_path_record(b, pr_mask::kDgid));
  CHECK_FALSE(mask_path_record(a, pr_mask::kDgid | pr_mask::kSl) == mask_path_record(b, pr_mask::kDgid | pr_mask::kSl));
  CHECK(mask_path_record(a, 1ull << 0).service_id == 0xAA00000000000000ull);  // ServiceID_8MSB only
  CHECK(mask_path_record(a, pr_mask::kServiceId).service_id == a.service_id);
}

TEST_CASE("MCMemberRecord matches the IBA 15.2.5.17 layout", "[sa]") {
  const ByteVec ref = hex(
      "ff12401bffff0000 00000000ffffffff"   // MGID: IPoIB broadcast, P_Key ffff
      "fe80000000000000 0002c90300000001"   // PortGID
      "0000000b c001"                       // Q_Key, MLID
      "84 00 ffff 83 92"                    // MTU =2048, TClass, P_Key, Rate =10G, PacketLifeTime =0x12
      "100001ff"                            // SL 1, FlowLabel 1, HopLimit 0xff
      "21 80 0000");                        // Scope 2 + JoinState FullMember, ProxyJoin
  REQUIRE(ref.size() == kMcMemberRecordBytes);
  auto m = decode_mcmember_record(ref);
  REQUIRE(m.ok());
  CHECK(gid_prefix(m->mgid) == 0xff12401bffff0000ull);
  CHECK(m->port_gid == kGid1);
  CHECK(m->qkey == 0xb);
  CHECK(m->mlid == 0xc001);
  CHECK(m->mtu_selector == 2);
  CHECK(m->mtu == 4);
  CHECK(m->pkey == 0xffff);
  CHECK(m->rate == 3);
  CHECK(m->packet_life_time == 0x12);
  CHECK(m->sl == 1);
  CHECK(m->flow_label == 1);
  CHECK(m->hop_limit == 0xff);
  CHECK(m->scope == 2);
  CHECK(m->join_state == join_state::kFullMember);
  CHECK(m->proxy_join);
  ByteVec out(kMcMemberRecordBytes, std::byte{0xEE});
  encode_mcmember_record(out, *m);
  CHECK(out == ref);
  CHECK_FALSE(decode_mcmember_record(ConstBytes(ref).first(51)).ok());
}

TEST_CASE("ServiceRecord matches the IBA 15.2.5.14 layout", "[sa]") {
  ServiceRecord s;
  s.service_id = 0x1000000000000001ull;
  s.service_gid = kGid1;
  s.service_pkey = 0x8001;
  s.service_lease = 600;
  s.service_key[0] = 0xab;
  s.service_name = "openib-test";
  s.data8[15] = 0x99;
  s.data16[1] = 0x0203;
  s.data32[3] = 0x04050607;
  s.data64[1] = 0x08090a0b0c0d0e0full;
  ByteVec out(kServiceRecordBytes, std::byte{0xEE});
  encode_service_record(out, s);
  CHECK(prefix(out, 48) == hex("1000000000000001 fe80000000000000 0002c90300000001 8001 0000 00000258"
                              "ab000000000000000000000000000000"));
  CHECK(prefix(ConstBytes(out).subspan(48), 12) == hex("6f70656e69622d7465737400"));  // "openib-test", NUL padded
  CHECK(mad::get8(out, 127) == 0x99);
  CHECK(prefix(ConstBytes(out).subspan(128), 4) == hex("0000 0203"));
  CHECK(prefix(ConstBytes(out).subspan(156), 4) == hex("04050607"));
  CHECK(prefix(ConstBytes(out).subspan(168), 8) == hex("08090a0b0c0d0e0f"));
  auto d = decode_service_record(out);
  REQUIRE(d.ok());
  CHECK(*d == s);
  CHECK(sr_mask::data64(1) == 1ull << 36);
  CHECK_FALSE(decode_service_record(ConstBytes(out).first(175)).ok());
}

TEST_CASE("NodeRecord and PortInfoRecord frame NodeInfo/PortInfo as IBA 15.2.5.2/15.2.5.3 say", "[sa]") {
  NodeRecord n;
  n.lid = 5;
  n.node_info.node_type = 1;
  n.node_info.num_ports = 2;
  n.node_info.node_guid = 0x0002c90300000010ull;
  n.node_description = "host1 HCA-1";
  ByteVec out(kNodeRecordBytes, std::byte{0xEE});
  encode_node_record(out, n);
  CHECK(prefix(out, 8) == hex("0005 0000 01 01 01 02"));  // LID, reserved, BaseVersion, ClassVersion, NodeType, NumPorts
  CHECK(prefix(ConstBytes(out).subspan(16), 8) == hex("0002c90300000010"));  // NodeInfo bytes 12..19: NodeGUID
  CHECK(prefix(ConstBytes(out).subspan(44), 12) == hex("686f73743120484341 2d3100"));
  auto d = decode_node_record(out);
  REQUIRE(d.ok());
  CHECK(*d == n);
  CHECK_FALSE(decode_node_record(ConstBytes(out).first(107)).ok());

  PortInfoRecord p;
  p.endport_lid = 5;
  p.port_num = 1;
  p.port_info.lid = 5;
  p.port_info.gid_prefix = 0xfe80000000000000ull;
  p.port_info.port_state = 4;
  ByteVec pout(kPortInfoRecordBytes, std::byte{0xEE});
  encode_port_info_record(pout, p);
  CHECK(prefix(pout, 4) == hex("0005 01 00"));
  CHECK(prefix(ConstBytes(pout).subspan(12), 10) == hex("fe80000000000000 0005"));  // PortInfo bytes 8..17
  auto pd = decode_port_info_record(pout);
  REQUIRE(pd.ok());
  CHECK(*pd == p);
}

TEST_CASE("InformInfo matches the IBA 13.4.8.3 layout", "[sa]") {
  InformInfo ii = gid_trap_subscription(gid_trap::kGidOutOfService, true, 1);
  ii.resp_time_value = 0x13;
  ByteVec out(kInformInfoBytes, std::byte{0xEE});
  encode_inform_info(out, ii);
  CHECK(out == hex("00000000000000000000000000000000"  // GID: any
                   "ffff 0000 0000 01 01"              // LIDRangeBegin all, End, reserved, IsGeneric, Subscribe
                   "ffff 0041"                         // Type all, TrapNumber 65
                   "00000113"                          // QPN 1, RespTimeValue 0x13
                   "00 ffffff"));                      // reserved, ProducerType all
  auto d = decode_inform_info(out);
  REQUIRE(d.ok());
  CHECK(*d == ii);
  CHECK_FALSE(decode_inform_info(ConstBytes(out).first(35)).ok());
}

TEST_CASE("GID traps 64..67 carry the GID in DataDetails bytes 6..21", "[sa]") {
  const mad::Notice n = make_gid_trap(gid_trap::kGidOutOfService, 1, kGid2);
  ByteVec out(mad::kNoticeBytes);
  mad::encode_notice(out, n);
  CHECK(prefix(out, 10) == hex("83 000004 0041 0001 0000"));  // generic SubnMgmt, class manager, trap 65, LID 1
  CHECK(prefix(ConstBytes(out).subspan(10), 22) == hex("000000000000 fe80000000000000 0002c90300000002"));
  auto d = mad::decode_notice(out);
  REQUIRE(d.ok());
  auto t = parse_gid_trap(*d);
  REQUIRE(t);
  CHECK(*t == GidTrap{65, kGid2});
  mad::Notice other = *d;
  other.trap_number = 128;
  CHECK_FALSE(parse_gid_trap(other));
}

TEST_CASE("sa_records: one record in a GetResp, PayloadLength-bounded records in a GetTableResp", "[sa]") {
  mad::MadHeader h;
  h.mgmt_class = mad::mgmt_class::kSubnAdm;
  h.class_version = 2;
  h.method = mad::method::kGetTableResp;
  h.attr_id = attr::kPathRecord;
  mad::Mad m = mad::make_mad(h);
  encode_sa_header(m, SaHeader{0, attr_offset_for(kPathRecordBytes), 0});
  PathRecord a, b;
  a.dlid = 1;
  b.dlid = 2;
  encode_path_record(MutBytes(m).subspan(kSaDataOff), a);
  encode_path_record(MutBytes(m).subspan(kSaDataOff + 64), b);
  mad::RmppHeader r;
  r.type = mad::rmpp_type::kData;
  r.flags = mad::rmpp_flag::kActive | mad::rmpp_flag::kFirst | mad::rmpp_flag::kLast;
  r.seg_num = 1;
  r.paylen_newwin = kSaHeaderBytes + 2 * 64;
  mad::encode_rmpp_header(m, r);
  auto recs = sa_records(m);
  REQUIRE(recs.ok());
  REQUIRE(recs->size() == 2);  // not 3: the third 64 bytes are padding
  CHECK(decode_path_record((*recs)[1])->dlid == 2);

  // A reassembled message of three records (longer than one MAD's data).
  ByteVec msg(kSaDataOff + 3 * 64);
  std::copy(m.begin(), m.begin() + kSaDataOff, msg.begin());
  mad::encode_rmpp_header(msg, mad::RmppHeader{});
  for (int i = 0; i < 3; ++i) {
    PathRecord p;
    p.dlid = static_cast<std::uint16_t>(10 + i);
    encode_path_record(MutBytes(msg).subspan(kSaDataOff + 64 * static_cast<std::size_t>(i)), p);
  }
  recs = sa_records(msg);
  REQUIRE(recs.ok());
  REQUIRE(recs->size() == 3);
  CHECK(decode_path_record((*recs)[2])->dlid == 12);

  // AttributeOffset 0: no records; a GetResp: exactly one.
  encode_sa_header(msg, SaHeader{});
  CHECK(sa_records(msg)->empty());
  mad::put8(m, 3, mad::method::kGetResp);
  CHECK(sa_records(m)->size() == 1);
  CHECK_FALSE(sa_records(ConstBytes(m).first(40)).ok());
}
