// sa/local_route.hpp: an Ethernet port's route built from addresses, with
// the fields Linux's cma_resolve_iboe_route gives it, through the same
// PathRecord codec the SA's answers take.
#include <catch2/catch.hpp>

#include "sa/local_route.hpp"

using namespace openib::sa;

TEST_CASE("route_from_addresses: cma_resolve_iboe_route's fields, no LIDs, no SA", "[sa][local-route]") {
  RouteAddresses a;
  a.sgid = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 168, 7, 1};
  a.dgid = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 168, 7, 2};
  a.mtu = 3;  // 1024
  a.rate = ib_rate_code(2, 4);  // 4x QDR: 40 Gb/s
  a.tos = 0xa0;                 // precedence 5
  a.service_id = 0x0106000000004e20ull;
  const PathRecord p = route_from_addresses(a);
  CHECK(p.sgid == a.sgid);
  CHECK(p.dgid == a.dgid);
  CHECK(p.dlid == 0);
  CHECK(p.slid == 0);
  CHECK(p.pkey == 0xffff);
  CHECK(p.reversible);
  CHECK(p.numb_path == 1);
  CHECK(p.hop_limit == 64);
  CHECK(p.tclass == 0xa0);
  CHECK(p.sl == 5);
  CHECK(p.mtu == 3);
  CHECK(p.rate == 7);
  CHECK(p.mtu_selector == 2);
  CHECK(p.rate_selector == 2);
  CHECK(p.packet_life_time_selector == 2);
  CHECK(p.packet_life_time == 16);
  CHECK(p.service_id == a.service_id);
  // Through the wire form and back, as the RDMA CM keeps it.
  std::array<std::byte, kPathRecordBytes> wire{};
  encode_path_record(wire, p);
  auto back = decode_path_record(wire);
  REQUIRE(back.ok());
  CHECK(*back == p);
}

TEST_CASE("ib_rate_code: IBA 15.2.5.16 rate codes of width and speed; unknown ones 0", "[sa][local-route]") {
  CHECK(ib_rate_code(1, 1) == 2);   // 1x SDR 2.5 Gb/s
  CHECK(ib_rate_code(2, 1) == 3);   // 4x SDR 10
  CHECK(ib_rate_code(2, 2) == 6);   // 4x DDR 20
  CHECK(ib_rate_code(8, 1) == 4);   // 12x SDR 30
  CHECK(ib_rate_code(8, 4) == 10);  // 12x QDR 120
  CHECK(ib_rate_code(3, 1) == 0);
  CHECK(ib_rate_code(2, 3) == 0);
}
