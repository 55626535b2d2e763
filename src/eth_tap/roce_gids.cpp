#include "eth_tap/roce_gids.hpp"

#include <sys/socket.h>

#include <algorithm>

namespace openib::eth {

std::optional<Gid> roce_gid_of(const ipoib::IpAddr& a) {
  Gid g{};
  if (a.family == AF_INET) {
    // RFC 4291 2.5.5.2: ::ffff:a.b.c.d; 0.0.0.0 and 127/8 name no port.
    if (a.bytes[0] == 0 || a.bytes[0] == 127) return std::nullopt;
    g[10] = g[11] = 0xff;
    std::copy(a.bytes.begin(), a.bytes.begin() + 4, g.begin() + 12);
    return g;
  }
  if (a.family != AF_INET6) return std::nullopt;
  const bool link_local = a.bytes[0] == 0xfe && (a.bytes[1] & 0xc0) == 0x80;  // fe80::/10
  const bool multicast = a.bytes[0] == 0xff;
  const bool zero_prefix = std::all_of(a.bytes.begin(), a.bytes.begin() + 15, [](uint8_t b) { return b == 0; });
  if (link_local || multicast || zero_prefix) return std::nullopt;  // zero_prefix: :: and ::1
  std::copy(a.bytes.begin(), a.bytes.end(), g.begin());
  return g;
}

void GidTable::address(bool added, const ipoib::IpAddr& a) {
  auto g = roce_gid_of(a);
  if (!g) return;
  if (added) {
    ++wanted_[*g];
    failed_.erase(*g);  // said again: try again
    no_room_.erase(*g);
    return;
  }
  auto it = wanted_.find(*g);
  if (it == wanted_.end()) return;
  if (--it->second <= 0) {
    wanted_.erase(it);
    failed_.erase(*g);
    no_room_.erase(*g);
    counted_full_.erase(*g);
  }
}

std::optional<GidStep> GidTable::next_step() {
  for (const auto& [index, gid] : programmed_)
    if (!wanted_.count(gid)) return GidStep{index, std::nullopt};
  for (const auto& w : wanted_) {
    const Gid& gid = w.first;
    if (failed_.count(gid) || no_room_.count(gid)) continue;
    if (std::any_of(programmed_.begin(), programmed_.end(), [&](const auto& e) { return e.second == gid; })) continue;
    for (uint16_t i = 1; i < len_; ++i)
      if (!programmed_.count(i)) return GidStep{i, gid};
    // No room: counted once, and tried again when an entry is freed (done).
    if (counted_full_.insert(gid).second) ++counters_.table_full;
    no_room_.insert(gid);
  }
  return std::nullopt;
}

void GidTable::done(const GidStep& s, bool ok) {
  if (!s.gid) {
    // A removal that failed: the entry is not ours to rely on either way.
    programmed_.erase(s.index);
    if (ok) ++counters_.removed;
    else ++counters_.failed;
    no_room_.clear();  // an entry is free: the addresses that found none try again
    return;
  }
  if (ok) {
    programmed_[s.index] = *s.gid;
    ++counters_.written;
  } else {
    ++counters_.failed;
    failed_[*s.gid] = true;
  }
}

void GidTable::forget_device() {
  programmed_.clear();
  failed_.clear();
  no_room_.clear();
}

}  // namespace openib::eth
