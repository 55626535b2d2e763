// IGMP / MLD snooping (igmp_mld.hpp). Joins: IGMPv1/v2 and MLDv1
// reports; v3/v2 records MODE_IS_EXCLUDE and CHANGE_TO_EXCLUDE (any
// source), and MODE_IS_INCLUDE / ALLOW_NEW_SOURCES with sources (a
// source-specific membership is still one of the group's IB group).
// Leaves: IGMPv2 leave, MLD done, CHANGE_TO_INCLUDE with no sources.
// The reports themselves are forwarded as ordinary multicast by the
// bridge, as Linux's ipoib does.
#include "ipoib_tap/igmp_mld.hpp"

#include <algorithm>
#include <optional>

namespace openib::ipoib {
namespace {

// RFC 3376 §4.2.12 / RFC 3810 §5.2.12.
enum : std::uint8_t { kModeIsInclude = 1, kModeIsExclude = 2, kToInclude = 3, kToExclude = 4, kAllowNew = 5 };

std::optional<bool> record_effect(std::uint8_t type, std::uint16_t sources) {
  switch (type) {
    case kModeIsExclude:
    case kToExclude: return true;
    case kModeIsInclude:
    case kAllowNew:
      if (sources > 0) return true;
      return std::nullopt;
    case kToInclude:
      if (sources == 0) return false;
      return true;
    default: return std::nullopt;
  }
}

// v3/v2 report records from `off` (the record count at off - 2):
// type(1) aux words(1) sources(2) group(addr) sources(addr each) aux.
void read_records(wire::Bytes m, std::size_t off, std::size_t addr, bool ipv6,
                  std::vector<MembershipChange>& out) {
  const std::size_t n = wire::be16(m, off - 2);
  for (std::size_t i = 0; i < n && off + 4 + addr <= m.size(); ++i) {
    const std::uint16_t sources = wire::be16(m, off + 2);
    const std::size_t len = 4 + addr * (1 + std::size_t{sources}) + std::size_t{m[off + 1]} * 4;
    if (off + len > m.size()) return;  // truncated: what was read stands
    if (auto join = record_effect(m[off], sources)) {
      MembershipChange c{*join, ipv6, {}};
      std::copy_n(m.begin() + static_cast<std::ptrdiff_t>(off + 4), addr, c.group.begin());
      out.push_back(c);
    }
    off += len;
  }
}

void single(wire::Bytes m, std::size_t off, std::size_t addr, bool join, bool ipv6,
            std::vector<MembershipChange>& out) {
  if (off + addr > m.size()) return;
  MembershipChange c{join, ipv6, {}};
  std::copy_n(m.begin() + static_cast<std::ptrdiff_t>(off), addr, c.group.begin());
  out.push_back(c);
}

}  // namespace

std::vector<MembershipChange> snoop_ipv4(wire::Bytes p) {
  std::vector<MembershipChange> out;
  if (p.size() < wire::kIpv4MinHeader || p[9] != wire::kProtoIgmp) return out;
  const std::size_t ihl = std::size_t{p[0] & 0x0Fu} * 4;
  const std::size_t total = std::min<std::size_t>(wire::be16(p, 2), p.size());
  if (ihl < wire::kIpv4MinHeader || total < ihl + 8) return out;
  const auto m = p.subspan(ihl, total - ihl);
  switch (m[0]) {
    case 0x12:  // v1 report
    case 0x16: single(m, 4, 4, true, false, out); break;   // v2 report
    case 0x17: single(m, 4, 4, false, false, out); break;  // v2 leave
    case 0x22: read_records(m, 8, 4, false, out); break;   // v3 report
    default: break;
  }
  return out;
}

std::vector<MembershipChange> snoop_ipv6(wire::Bytes p) {
  std::vector<MembershipChange> out;
  if (p.size() < wire::kIpv6Header) return out;
  const std::size_t total = std::min(wire::kIpv6Header + wire::be16(p, 4), p.size());
  // MLD comes after a hop-by-hop header (router alert, RFC 2711); walk
  // the extension headers that have the generic layout.
  std::uint8_t next = p[6];
  std::size_t off = wire::kIpv6Header;
  while (next == 0 || next == 43 || next == 60) {
    if (off + 8 > total) return out;
    const std::uint8_t nh = p[off];
    off += (std::size_t{p[off + 1]} + 1) * 8;
    next = nh;
  }
  if (next != wire::kProtoIcmpv6 || off + 8 > total) return out;
  const auto m = p.subspan(off, total - off);
  switch (m[0]) {
    case 131: single(m, 8, 16, true, true, out); break;   // MLDv1 report
    case 132: single(m, 8, 16, false, true, out); break;  // MLD done
    case 143: read_records(m, 8, 16, true, out); break;   // MLDv2 report
    default: break;
  }
  return out;
}

}  // namespace openib::ipoib
