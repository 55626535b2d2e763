// src/ipoib_tap/kernel_groups.hpp: the kernel's multicast groups as
// /proc/net/igmp and /proc/net/igmp6 list them (text as Linux 6.1 prints it).
#include <catch2/catch.hpp>

#include "ipoib_tap/kernel_groups.hpp"

using namespace openib::ipoib;

namespace {
const char* kIgmp =
    "Idx\tDevice    : Count Querier\tGroup    Users Timer\tReporter\n"
    "1\tlo        :     1      V3\n"
    "\t\t\t\t010000E0     1 0:00000000\t\t0\n"
    "3\tib0       :     3      V3\n"
    "\t\t\t\t030201EF     1 0:00000000\t\t1\n"
    "\t\t\t\tFB0000E0     1 0:00000000\t\t0\n"
    "\t\t\t\t010000E0     1 0:00000000\t\t0\n"
    "4\tverylongname0:     1      V3\n"
    "\t\t\t\t050000E0     1 0:00000000\t\t0\n";
const char* kIgmp6 =
    "1    lo              ff020000000000000000000000000001     1 0000000C 0\n"
    "3    ib0             ff0200000000000000000001ffd4f715     1 00000004 0\n"
    "3    ib0             ff020000000000000000000000000001     1 0000000C 0\n"
    "3    ib0             ff010000000000000000000000000001     1 00000008 0\n"
    "4    eth0            ff020000000000000000000000000001     1 0000000C 0\n";
}  // namespace

TEST_CASE("IPv4 groups of one interface from /proc/net/igmp", "[ipoib]") {
  // 030201EF is 239.1.2.3 in memory order on a little-endian host.
  CHECK(parse_proc_igmp(kIgmp, "ib0") == std::vector<std::uint32_t>{0xEF010203, 0xE00000FB, 0xE0000001});
  CHECK(parse_proc_igmp(kIgmp, "lo") == std::vector<std::uint32_t>{0xE0000001});
  CHECK(parse_proc_igmp(kIgmp, "verylongname0") == std::vector<std::uint32_t>{0xE0000005});
  CHECK(parse_proc_igmp(kIgmp, "ib1").empty());
  CHECK(parse_proc_igmp("", "ib0").empty());
  CHECK(parse_proc_igmp("3\tib0       :     1      V3\n\t\t\t\tZZZZ     1\n\t\t\t\t01000\n", "ib0").empty());
}

TEST_CASE("IPv6 groups of one interface from /proc/net/igmp6", "[ipoib]") {
  const auto g = parse_proc_igmp6(kIgmp6, 3);
  REQUIRE(g.size() == 3);
  CHECK(g[0] == std::array<std::uint8_t, 16>{0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0xff, 0xd4, 0xf7, 0x15});
  CHECK(g[1][1] == 0x02);
  CHECK(g[2][1] == 0x01);  // node-local: listed; ibd does not join it (scope < 2)
  CHECK(parse_proc_igmp6(kIgmp6, 9).empty());
  CHECK(parse_proc_igmp6("3 ib0 ff02000000000000000000000000000g 1 0 0\n3 ib0 ff02 1\n", 3).empty());
}
