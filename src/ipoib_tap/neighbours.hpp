// The bridge's neighbour table (docs/ipoib.md "MAC addresses"): each
// remote 20-byte address the bridge has seen, the MAC it handed out for
// it, the state of its path, its packets waiting for that path and the IP
// addresses ARP/ND showed for it. The interface's own address and MAC
// are reserved in it so that no neighbour gets the TAP's MAC.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "ipoib_tap/bridge.hpp"

namespace openib::ipoib {

enum class PathState { none, resolving, ready, failed };

struct Neighbour {
  Mac mac{};
  PathState state = PathState::none;
  std::deque<std::vector<std::uint8_t>> pending;  // whole IPoIB packets
  std::vector<std::string> ips;
  std::optional<std::uint16_t> lid;  // of its path, when the glue told it
  std::uint64_t last_used = 0;       // for eviction when the table is full
  std::uint8_t flags = 0;            // its 20-byte address's flags, as its ARP/ND last said (RFC 4755 §4)
};

class NeighbourTable {
 public:
  static constexpr std::size_t kMaxNeighbours = 4096;  // bounded against floods
  static constexpr std::size_t kMaxIps = 8;

  explicit NeighbourTable(const HwAddr& own);
  // A new own address (set_link): the own MAC stays what it was.
  void set_own(const HwAddr& own);
  const HwAddr& own() const { return own_; }
  const Mac& own_mac() const { return own_mac_; }

  // The MAC of a 20-byte address (the own MAC for the own address),
  // learning the address when new. A full table forgets the least
  // recently used neighbour with nothing pending (its MAC is derived the
  // same way when it comes back, collisions aside).
  // learn_flags: `a` comes from the neighbour's own ARP/ND, whose flags
  // (connected mode offered) are kept.
  Mac mac_for(const HwAddr& a, bool learn_flags = false);
  // The address behind a MAC the bridge handed out (or the own MAC), with
  // the flags last learnt.
  std::optional<HwAddr> addr_of(const Mac& m) const;
  Neighbour* find(const HwAddr& a);
  // Unicast packets come without a GRH: the neighbour with this QPN and
  // LID, else the only neighbour with this QPN (bridge.cpp, from_ib).
  const Neighbour* find_by_qpn(std::uint32_t qpn, std::uint16_t slid) const;
  void add_ip(const HwAddr& a, const std::string& ip);

  std::map<HwAddr, Neighbour>& all() { return by_addr_; }
  const std::map<HwAddr, Neighbour>& all() const { return by_addr_; }

 private:
  bool mac_taken(const Mac& m) const;
  void evict_one();

  HwAddr own_;
  Mac own_mac_{};
  std::map<HwAddr, Neighbour> by_addr_;
  std::map<Mac, HwAddr> by_mac_;
  std::uint64_t clock_ = 0;
};

}  // namespace openib::ipoib
