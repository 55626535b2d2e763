// libFuzzer target: the procfs parsers of the kernel's multicast groups
// (src/ipoib_tap/kernel_groups.hpp: /proc/net/igmp, /proc/net/igmp6).
// Input: byte 0 picks the interface (its low 3 bits the name's length
// 1..8 taken from bytes 1.., or the index for igmp6); the rest is the
// file's text. Invariants: nothing crashes or reads out of bounds; each
// parser finds at most one group per line; what it found, written back
// in the kernel's own format, parses to the same groups.
#include <arpa/inet.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "ipoib_tap/kernel_groups.hpp"

using namespace openib::ipoib;

namespace {

// Linux's igmp_mc_seq_show: "Idx\tDevice    : Count Querier" and one
// "\t\t\t\t%08X %5d %d:%08lX\t\t%d" line per group (the __be32 as a
// native integer).
std::string igmp_text(std::string_view ifname, const std::vector<std::uint32_t>& groups) {
  std::string t = "Idx\tDevice    : Count Querier\tGroup    Users Timer\tReporter\n";
  t += "7\t" + std::string(ifname) + "       :     " + std::to_string(groups.size()) + "      V3\n";
  for (std::uint32_t g : groups) {
    const std::uint32_t be = htonl(g);
    std::uint32_t raw = 0;
    std::memcpy(&raw, &be, 4);
    char line[64];
    std::snprintf(line, sizeof line, "\t\t\t\t%08X     1 0:00000000\t\t0\n", raw);
    t += line;
  }
  return t;
}

// Linux's igmp6_mc_seq_show: "%-4d %-15s %pi6 %5d %08X %ld".
std::string igmp6_text(int ifindex, const std::vector<std::array<std::uint8_t, 16>>& groups) {
  std::string t;
  for (const auto& g : groups) {
    char addr[33];
    for (size_t i = 0; i < 16; ++i) std::snprintf(addr + 2 * i, 3, "%02x", g[i]);
    t += std::to_string(ifindex) + "    ib0             " + addr + "     1 00000004 0\n";
  }
  return t;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const size_t name_len = std::min<size_t>((data[0] & 7) + 1, size - 1);
  const int ifindex = data[0] >> 3;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  const std::string_view ifname = text.substr(0, name_len);
  const size_t lines = size_t(std::count(text.begin(), text.end(), '\n')) + 1;

  const auto v4 = parse_proc_igmp(text, ifname);
  if (v4.size() > lines) std::abort();
  // The round trip only for names the kernel could print (no blanks, no
  // colon, no line break: the file's separators).
  if (!ifname.empty() && ifname.find_first_of(" \t\n:") == std::string_view::npos &&
      parse_proc_igmp(igmp_text(ifname, v4), ifname) != v4)
    std::abort();

  const auto v6 = parse_proc_igmp6(text, ifindex);
  if (v6.size() > lines) std::abort();
  if (parse_proc_igmp6(igmp6_text(ifindex, v6), ifindex) != v6) std::abort();
  return 0;
}
