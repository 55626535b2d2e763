// The index of a GID in a port's GID table (docs/device-access.md
// "Ports"): on an Ethernet port a connection's source GID is the table
// entry of its IP address (docs/simhca.md §16.1: entries 1.. are the
// netdev's addresses), as Linux's rdma_find_gid_by_port finds the
// sgid_attr. The table is read afresh each time, entry by entry
// (QUERY_PORT for its length, then QUERY_GID; an empty entry skipped), so
// that an address added or moved a moment ago is found where it is now;
// the callers (a new MAD address handle, a connection's RTR) are rare.
#pragma once

#include <array>
#include <cstdint>

#include "hca/device.hpp"

namespace openib::hca {

// `done` gets the lowest index holding `gid`, or ENOENT.
void find_gid_async(Device& hca, uint8_t port, const std::array<uint8_t, 16>& gid, Device::Done<uint16_t> done);

}  // namespace openib::hca
