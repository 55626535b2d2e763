#include "ipoib_tap/kernel_groups.hpp"

#include <arpa/inet.h>

#include <charconv>
#include <cstring>
#include <fstream>
#include <sstream>

namespace openib::ipoib {
namespace {

std::vector<std::string_view> fields(std::string_view line) {
  std::vector<std::string_view> f;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
    const size_t s = i;
    while (i < line.size() && line[i] != ' ' && line[i] != '\t') ++i;
    if (i > s) f.push_back(line.substr(s, i - s));
  }
  return f;
}

template <class F>
void for_lines(std::string_view text, F f) {
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    f(text.substr(0, nl));
    if (nl == std::string_view::npos) break;
    text.remove_prefix(nl + 1);
  }
}

bool hex_u32(std::string_view s, std::uint32_t& v) {
  if (s.size() != 8) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v, 16);
  return ec == std::errc() && p == s.data() + s.size();
}

}  // namespace

// /proc/net/igmp: a device line "Idx<TAB>Device<spaces>: Count Querier",
// then one indented line per group "Group Users Timer Reporter" where
// Group is the __be32 printed with %08X, i.e. its bytes in memory order
// read as a native integer.
std::vector<std::uint32_t> parse_proc_igmp(std::string_view text, std::string_view ifname) {
  std::vector<std::uint32_t> out;
  bool ours = false;
  for_lines(text, [&](std::string_view line) {
    if (line.empty()) return;
    if (line[0] != ' ' && line[0] != '\t') {  // a device line (or the header)
      auto f = fields(line);
      ours = f.size() >= 3 && f[1] == ifname && f[2] == ":";
      if (!ours && f.size() >= 2) {  // "Device:" with no space before the colon when the name is long
        const std::string_view d = f[1];
        ours = d.size() == ifname.size() + 1 && d.substr(0, ifname.size()) == ifname && d.back() == ':';
      }
      return;
    }
    if (!ours) return;
    auto f = fields(line);
    std::uint32_t raw = 0;
    if (f.empty() || !hex_u32(f[0], raw)) return;
    std::uint32_t be = 0;
    std::memcpy(&be, &raw, 4);
    out.push_back(ntohl(be));
  });
  return out;
}

// /proc/net/igmp6: "ifindex device address(32 hex digits) users flags timer".
std::vector<std::array<std::uint8_t, 16>> parse_proc_igmp6(std::string_view text, int ifindex) {
  std::vector<std::array<std::uint8_t, 16>> out;
  for_lines(text, [&](std::string_view line) {
    auto f = fields(line);
    if (f.size() < 3 || f[2].size() != 32) return;
    int idx = -1;
    auto [p, ec] = std::from_chars(f[0].data(), f[0].data() + f[0].size(), idx);
    if (ec != std::errc() || idx != ifindex) return;
    std::array<std::uint8_t, 16> a{};
    for (size_t i = 0; i < 16; ++i) {
      unsigned b = 0;
      auto [q, e2] = std::from_chars(f[2].data() + 2 * i, f[2].data() + 2 * i + 2, b, 16);
      if (e2 != std::errc() || q != f[2].data() + 2 * i + 2) return;
      a[i] = static_cast<std::uint8_t>(b);
    }
    out.push_back(a);
  });
  return out;
}

std::string read_proc_file(const char* path) {
  std::ifstream in(path);
  if (!in) return {};
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace openib::ipoib
