// simhca's multicast group table (docs/simhca.md §6.11; IBA 11.3.1 Attach
// and Detach QP to/from a multicast group, 10.5.2 multicast): which UD QPs
// are attached to which MGID. Device-wide; the receive side picks the
// members on the port a packet came in on (§12.8). Bounded: kMaxMcgs
// groups of at most kMaxMcgQps QPs each (fixed limits, §6.11).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <vector>

namespace openib::simhca {

inline constexpr uint32_t kMaxMcgs = 1024, kMaxMcgQps = 32;

// IBA 4.1.1: multicast LIDs are 0xC000..0xFFFE (0xFFFF is the permissive LID).
constexpr bool is_multicast_lid(uint16_t lid) { return lid >= 0xc000 && lid != 0xffff; }

using Mgid = std::array<uint8_t, 16>;

struct McastGroup {
  uint16_t mlid = 0;            // of the last attach (the device matches by MGID)
  std::vector<uint32_t> qpns;   // in attach order, each once
};

class McastGroups {
 public:
  enum class Attach : uint8_t { kAttached, kAlready, kGroupFull, kTableFull };

  void reset() { groups_.clear(); }
  size_t size() const { return groups_.size(); }
  const McastGroup* find(const Mgid& mgid) const {
    auto it = groups_.find(mgid);
    return it == groups_.end() ? nullptr : &it->second;
  }

  // Attaching a member again changes nothing (ibv_attach_mcast(3): it
  // still receives one copy).
  Attach attach(const Mgid& mgid, uint16_t mlid, uint32_t qpn) {
    auto it = groups_.find(mgid);
    if (it == groups_.end()) {
      if (groups_.size() >= kMaxMcgs) return Attach::kTableFull;
      it = groups_.emplace(mgid, McastGroup{}).first;
    }
    McastGroup& g = it->second;
    if (std::find(g.qpns.begin(), g.qpns.end(), qpn) != g.qpns.end()) return Attach::kAlready;
    if (g.qpns.size() >= kMaxMcgQps) return Attach::kGroupFull;
    g.mlid = mlid;
    g.qpns.push_back(qpn);
    return Attach::kAttached;
  }

  // False if `qpn` is not a member. A group left empty goes.
  bool detach(const Mgid& mgid, uint32_t qpn) {
    auto it = groups_.find(mgid);
    if (it == groups_.end() || !erase_member(it->second, qpn)) return false;
    if (it->second.qpns.empty()) groups_.erase(it);
    return true;
  }

  // DESTROY_QP: out of every group.
  void detach_all(uint32_t qpn) {
    for (auto it = groups_.begin(); it != groups_.end();) {
      erase_member(it->second, qpn);
      it = it->second.qpns.empty() ? groups_.erase(it) : std::next(it);
    }
  }

 private:
  static bool erase_member(McastGroup& g, uint32_t qpn) {
    auto m = std::find(g.qpns.begin(), g.qpns.end(), qpn);
    if (m == g.qpns.end()) return false;
    g.qpns.erase(m);
    return true;
  }

  std::map<Mgid, McastGroup> groups_;
};

}  // namespace openib::simhca
