// The RoCEv2 GIDs of an Ethernet port's netdev (docs/operations.md "RoCE
// ports"; RoCE Annex A17.8; what Linux's roce_gid_mgmt.c does): each IP
// address of the interface is a GID of the port, kept in the port's GID
// table at entries 1.. (entry 0 is the port's own link-local fe80:: GID,
// docs/simhca.md §16.1):
//  - an IPv4 address a.b.c.d: the IPv4-mapped GID ::ffff:a.b.c.d (RFC 4291
//    2.5.5.2), type RoCEv2;
//  - an IPv6 address that is not link-local (global, ULA): the address
//    itself, type RoCEv2. Link-local addresses are left out: the
//    interface's own is GID 0 already, and a RoCEv2 packet to fe80::/10
//    is not routed.
// The table is pure: it says which SET_GID comes next (next_step) and is
// told how it ended (done); the owner sends one command at a time, so the
// table is never changed behind a command in flight.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <set>
#include <optional>
#include <vector>

#include "ipoib_tap/ip_addr.hpp"

namespace openib::eth {

using Gid = std::array<uint8_t, 16>;

// The GID of an interface address; nullopt for one that has none (IPv6
// link-local, multicast, unspecified, loopback; another family).
std::optional<Gid> roce_gid_of(const ipoib::IpAddr& a);

struct GidStep {
  uint16_t index = 0;
  std::optional<Gid> gid;  // written; nullopt: the entry removed
};

struct GidTableCounters {
  uint64_t written = 0, removed = 0, failed = 0;
  uint64_t table_full = 0;  // an address found no free entry (counted once per address)
};

class GidTable {
 public:
  // Entries 1..table_len-1 are the table's to use.
  explicit GidTable(uint16_t table_len = 16) : len_(table_len) {}
  void set_table_len(uint16_t len) { len_ = len; }

  // An address of the interface added or removed (the same GID from two
  // prefix lengths of one address counts twice, removed once each).
  void address(bool added, const ipoib::IpAddr& a);
  // The next command to make the device's table what the addresses say:
  // removals first (an entry freed), then writes at the lowest free entry.
  std::optional<GidStep> next_step();
  // How `s` ended: the device's table holds it, or not (a failed write is
  // not tried again until its address comes again or forget_device()).
  void done(const GidStep& s, bool ok);
  // The device's table is empty again (lost and back: INIT_HCA empties it).
  void forget_device();

  // The entries the device holds: index -> GID.
  const std::map<uint16_t, Gid>& programmed() const { return programmed_; }
  const GidTableCounters& counters() const { return counters_; }

 private:
  uint16_t len_;
  std::map<Gid, int> wanted_;  // GID -> addresses naming it
  std::map<uint16_t, Gid> programmed_;
  std::map<Gid, bool> failed_;  // written and refused: not again until the address is said again
  std::set<Gid> no_room_;       // found no free entry: again when one is freed
  std::set<Gid> counted_full_;  // (table_full counts an address once)
  GidTableCounters counters_;
};

}  // namespace openib::eth
