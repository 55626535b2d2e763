// docs/simhca.md §6.3 `link_layer` and §6.12, the GID table: entries added,
// queried with their type and removed through the driver's seam calls
// (query_gid_async, modify_gid_async), GID_CHANGE after each change, and
// bad ports, indexes, types and reserved bytes refused cleanly.
#include "hca/port_caps.hpp"
#include "hca/prm.hpp"
#include "test_simhca_fixture.hpp"

using namespace openib;
using namespace openib::test;
using namespace openib::hca;

namespace {

Result<GidEntry> query_gid(Hca& h, uint8_t port, uint16_t index) {
  return call_sync<GidEntry>(h, [&](Device::Done<GidEntry> d) { h.query_gid_async(port, index, std::move(d)); });
}
Result<void> modify_gid(Hca& h, uint8_t port, uint16_t index, std::optional<GidEntry> e) {
  return call_sync<void>(h, [&](Device::Done<void> d) { h.modify_gid_async(port, index, e, std::move(d)); });
}
GidEntry ib_gid(uint8_t last) {
  GidEntry e;
  e.gid = {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x02, 0, 0, 0, 0, 0, 0x7a, last};
  e.type = GidType::kIb;
  return e;
}
// The §5.5 status and syndrome a failed asynchronous command reports in its
// error ("... BAD_PARAM (syndrome 0x7)").
bool failed_with(const Error& e, const char* status, uint32_t syndrome) {
  return e.message.find(fmt::format("{} (syndrome {:#x})", status, syndrome)) != std::string::npos;
}
size_t gid_changes(const Hca& h) {
  size_t n = 0;
  for (const EventEntry& e : h.events()) n += e.type == prm::kEvGidChange;
  return n;
}

}  // namespace

TEST_CASE("simhca: a port says its link layer; today's ports are InfiniBand", "[simhca][gid]") {
  HcaFixture f;
  auto p = f.hca->query_port(1);
  REQUIRE(p.ok());
  CHECK(p->link_layer == LinkLayer::kInfiniBand);
  CHECK(cap_ib_smi(p->link_layer));
  CHECK(cap_ib_sa(p->link_layer));
  CHECK_FALSE(protocol_roce(p->link_layer));
  CHECK(p->gid_table_len == 16);
  // A device that does not say (0) is InfiniBand, as libibverbs reads it.
  CHECK(protocol_ib(LinkLayer::kUnspecified));
  CHECK_FALSE(cap_ib_sa(LinkLayer::kEthernet));
  CHECK(cap_ib_cm(LinkLayer::kEthernet));
}

TEST_CASE("simhca: GID entries are added, queried with their type, used as SGID and removed", "[simhca][gid]") {
  HcaFixture f;
  Hca& h = *f.hca;
  auto p = h.query_port(1);
  REQUIRE(p.ok());

  // Entry 0: the port's own, prefix : port GUID (IBA 4.1.1), type IB.
  auto g0 = query_gid(h, 1, 0);
  REQUIRE(g0.ok());
  CHECK(g0->type == GidType::kIb);
  CHECK(g0->gid[0] == 0xfe);
  CHECK(g0->gid[1] == 0x80);
  CHECK(g0->gid[15] == static_cast<uint8_t>(p->port_guid));
  // Others start empty: ENODATA, as ibv_query_gid_ex.
  CHECK(query_gid(h, 1, 3).error().code == ENODATA);

  const size_t changes = gid_changes(h);
  REQUIRE(modify_gid(h, 1, 3, ib_gid(0x33)).ok());
  auto g3 = query_gid(h, 1, 3);
  REQUIRE(g3.ok());
  CHECK(*g3 == ib_gid(0x33));
  REQUIRE(h.wait_event(prm::kEvGidChange, 2000));
  CHECK(gid_changes(h) == changes + 1);

  // §6.12: an AH may name entry 3 now; an empty entry it may not.
  auto pd = h.alloc_pd();
  REQUIRE(pd.ok());
  AddressVector av;
  av.dlid = 0x22;
  av.port = 1;
  av.grh = true;
  av.dgid[15] = 9;
  av.sgid_index = 3;
  auto ah = h.create_ah(*pd, av);
  REQUIRE(ah.ok());
  av.sgid_index = 4;
  CHECK(h.create_ah(*pd, av).error().code == EINVAL);
  CHECK(h.last_syndrome() == 24);
  REQUIRE(h.destroy_ah(*ah).ok());

  // Written again: the same GID elsewhere is refused (one entry per GID).
  auto dup = modify_gid(h, 1, 5, ib_gid(0x33));
  REQUIRE_FALSE(dup.ok());
  CHECK(dup.error().code == EINVAL);
  CHECK(failed_with(dup.error(), "BAD_PARAM", 7));

  // Removed: empty again, and removing it twice is BAD_RESOURCE.
  REQUIRE(modify_gid(h, 1, 3, std::nullopt).ok());
  CHECK(query_gid(h, 1, 3).error().code == ENODATA);
  auto twice = modify_gid(h, 1, 3, std::nullopt);
  REQUIRE_FALSE(twice.ok());
  CHECK(twice.error().code == ENOENT);
  CHECK(failed_with(twice.error(), "BAD_RESOURCE", 0));
  REQUIRE(h.dealloc_pd(*pd).ok());
}

TEST_CASE("simhca: bad GID table requests are refused and change nothing", "[simhca][gid]") {
  HcaFixture f;
  Hca& h = *f.hca;
  auto expect = [&](Result<void> r, uint32_t syndrome) {
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == EINVAL);
    CHECK(failed_with(r.error(), "BAD_PARAM", syndrome));
  };
  // Bad port, bad index, entry 0.
  CHECK(query_gid(h, 0, 0).error().code == EINVAL);
  CHECK(query_gid(h, 9, 0).error().code == EINVAL);
  auto past = query_gid(h, 1, 16);
  REQUIRE_FALSE(past.ok());
  CHECK(failed_with(past.error(), "BAD_PARAM", 2));
  expect(modify_gid(h, 2, 1, ib_gid(1)), 1);  // the fixture's device has one port
  expect(modify_gid(h, 1, 16, ib_gid(1)), 2);
  expect(modify_gid(h, 1, 0xffff, ib_gid(1)), 2);
  expect(modify_gid(h, 1, 0, ib_gid(1)), 3);
  expect(modify_gid(h, 1, 0, std::nullopt), 3);
  // A RoCEv2 entry on an InfiniBand port; the zero GID.
  GidEntry roce = ib_gid(1);
  roce.type = GidType::kRoceV2;
  expect(modify_gid(h, 1, 1, roce), 5);
  expect(modify_gid(h, 1, 1, GidEntry{}), 6);
  // Raw inputs the driver's encoder never makes: an unknown type,
  // reserved bytes set, a short input.
  Bytes in = encode_set_gid(1, 1, ib_gid(1));
  prm::put8(in, 0x01, 3);
  CHECK(h.command(prm::kOpSetGid, in, 0).error().code == EINVAL);
  CHECK(h.last_syndrome() == 4);
  in = encode_set_gid(1, 1, ib_gid(1));
  prm::put8(in, 0x05, 1);
  CHECK(h.command(prm::kOpSetGid, in, 0).error().code == EINVAL);
  in = encode_query_gid(1, 1);
  prm::put8(in, 0x01, 1);
  CHECK(h.command(prm::kOpQueryGid, in, 20).error().code == EINVAL);
  CHECK(h.command(prm::kOpSetGid, std::span(in).first(3), 0).error().code == EINVAL);
  CHECK(h.last_status() == prm::kBadInputLen);
  // Nothing changed, and the device still answers.
  for (uint16_t i = 1; i < 16; ++i) CHECK(query_gid(h, 1, i).error().code == ENODATA);
  CHECK(query_gid(h, 1, 0).ok());
}
