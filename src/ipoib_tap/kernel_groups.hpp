// The IP multicast groups the kernel holds on an interface, as procfs
// lists them (/proc/net/igmp, /proc/net/igmp6: Linux's
// net/ipv4/igmp.c and net/ipv6/mcast.c seq files). Read once each time the
// IPoIB interface gets its carrier (docs/ipoib.md "Multicast"): groups the
// kernel joined while there was no carrier sent their IGMP/MLD reports
// nowhere, and the bridge learns the rest from the reports themselves.
// Never polled.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace openib::ipoib {

// IPv4 groups of interface `ifname` (host byte order). Malformed lines are skipped.
std::vector<std::uint32_t> parse_proc_igmp(std::string_view text, std::string_view ifname);
// IPv6 groups of interface `ifindex`.
std::vector<std::array<std::uint8_t, 16>> parse_proc_igmp6(std::string_view text, int ifindex);
// The files' text ("" when unreadable).
std::string read_proc_file(const char* path);

}  // namespace openib::ipoib
