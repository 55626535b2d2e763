// The neighbour table (neighbours.hpp; docs/ipoib.md "MAC addresses").
#include "ipoib_tap/neighbours.hpp"

#include <algorithm>

namespace openib::ipoib {

NeighbourTable::NeighbourTable(const HwAddr& own) : own_(own), own_mac_(derive_mac(own)) {}

void NeighbourTable::set_own(const HwAddr& own) {
  own_ = own;
  by_addr_.erase(own);  // it was a neighbour's address: it is ours now
  for (auto it = by_mac_.begin(); it != by_mac_.end();)
    it = it->second == own ? by_mac_.erase(it) : std::next(it);
}

bool NeighbourTable::mac_taken(const Mac& m) const { return m == own_mac_ || by_mac_.contains(m); }

void NeighbourTable::evict_one() {
  auto victim = by_addr_.end();
  for (auto it = by_addr_.begin(); it != by_addr_.end(); ++it)
    if (it->second.pending.empty() && it->second.state != PathState::resolving &&
        (victim == by_addr_.end() || it->second.last_used < victim->second.last_used))
      victim = it;
  if (victim == by_addr_.end()) return;
  by_mac_.erase(victim->second.mac);
  by_addr_.erase(victim);
}

Mac NeighbourTable::mac_for(const HwAddr& a, bool learn_flags) {
  if (a == own_) return own_mac_;
  if (auto it = by_addr_.find(a); it != by_addr_.end()) {
    it->second.last_used = ++clock_;
    if (learn_flags) it->second.flags = a.flags;
    return it->second.mac;
  }
  if (by_addr_.size() >= kMaxNeighbours) evict_one();
  // A collision takes the next MAC up (in the low 46 bits: the locally
  // administered bit stays set, the group bit clear).
  Mac m = derive_mac(a);
  while (mac_taken(m)) {
    for (std::size_t i = m.size(); i-- > 0;) {
      const std::uint8_t step = i == 0 ? 4 : 1;
      m[i] = static_cast<std::uint8_t>(m[i] + step);
      if (m[i] >= step) break;
    }
    m[0] = static_cast<std::uint8_t>((m[0] & 0xFC) | 0x02);
  }
  Neighbour n;
  n.mac = m;
  n.last_used = ++clock_;
  if (learn_flags) n.flags = a.flags;
  by_addr_.emplace(a, std::move(n));
  by_mac_.emplace(m, a);
  return m;
}

std::optional<HwAddr> NeighbourTable::addr_of(const Mac& m) const {
  if (m == own_mac_) return own_;
  if (auto it = by_mac_.find(m); it != by_mac_.end()) {
    HwAddr a = it->second;
    if (auto n = by_addr_.find(a); n != by_addr_.end()) a.flags = n->second.flags;
    return a;
  }
  return std::nullopt;
}

Neighbour* NeighbourTable::find(const HwAddr& a) {
  auto it = by_addr_.find(a);
  if (it == by_addr_.end()) return nullptr;
  it->second.last_used = ++clock_;
  return &it->second;
}

const Neighbour* NeighbourTable::find_by_qpn(std::uint32_t qpn, std::uint16_t slid) const {
  const Neighbour* only = nullptr;
  std::size_t with_qpn = 0;
  for (const auto& [addr, n] : by_addr_) {
    if (addr.qpn != qpn) continue;
    if (n.lid) {
      if (*n.lid == slid) return &n;
      continue;  // on another port
    }
    ++with_qpn;
    only = &n;
  }
  return with_qpn == 1 ? only : nullptr;
}

void NeighbourTable::add_ip(const HwAddr& a, const std::string& ip) {
  auto* n = find(a);
  if (!n || std::find(n->ips.begin(), n->ips.end(), ip) != n->ips.end()) return;
  if (n->ips.size() >= kMaxIps) n->ips.erase(n->ips.begin());
  n->ips.push_back(ip);
}

}  // namespace openib::ipoib
