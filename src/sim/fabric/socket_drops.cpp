// UDP sockets' receive drops from /proc/net/udp{,6} (socket_drops.hpp).
#include "sim/fabric/socket_drops.hpp"

#include <sys/stat.h>

#include <array>
#include <charconv>
#include <fstream>
#include <sstream>

namespace openib::sim::fabric {

namespace {

bool to_u64(std::string_view s, std::uint64_t& out) {
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size();
}

}  // namespace

// A line: "sl: local rem st tx:rx tr:when retrnsmt uid timeout inode ref
// pointer drops" (net/ipv4/udp.c udp4_format_sock; udp6 the same columns).
std::unordered_map<std::uint64_t, std::uint64_t> parse_udp_drops(std::string_view text) {
  std::unordered_map<std::uint64_t, std::uint64_t> out;
  bool header = true;
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    if (header) {  // "  sl  local_address ..."
      header = false;
      continue;
    }
    std::array<std::string_view, 13> f{};
    size_t n = 0;
    while (n < f.size()) {
      const size_t s = line.find_first_not_of(" \t\r");
      if (s == std::string_view::npos) break;
      line.remove_prefix(s);
      const size_t e = line.find_first_of(" \t\r");
      f[n++] = line.substr(0, e);
      line.remove_prefix(e == std::string_view::npos ? line.size() : e);
    }
    std::uint64_t inode = 0, drops = 0;
    if (n < f.size() || f[0].empty() || f[0].back() != ':' || !to_u64(f[9], inode) || !to_u64(f[12], drops))
      continue;
    if (inode != 0) out[inode] = drops;
  }
  return out;
}

std::unordered_map<std::uint64_t, std::uint64_t> udp_socket_drops() {
  std::unordered_map<std::uint64_t, std::uint64_t> all;
  for (const char* path : {"/proc/net/udp", "/proc/net/udp6"}) {
    std::ifstream f(path);
    if (!f) continue;
    std::stringstream ss;
    ss << f.rdbuf();
    all.merge(parse_udp_drops(ss.str()));
  }
  return all;
}

std::uint64_t socket_inode(int fd) {
  struct stat st{};
  return fd >= 0 && ::fstat(fd, &st) == 0 ? static_cast<std::uint64_t>(st.st_ino) : 0;
}

}  // namespace openib::sim::fabric
