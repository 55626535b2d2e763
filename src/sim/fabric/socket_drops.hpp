// The kernel's receive drops of UDP sockets: what a cable lost before its
// reader saw it (a full socket receive buffer), read from /proc/net/udp
// and /proc/net/udp6 (the last column, "drops": the socket's sk_drops,
// proc(5)). ibfabric's `counters` shows them per cable (docs/ibfabric.md
// "Control"), so a loss in the kernel is told apart from one in the fabric.
#pragma once

#include <cstdint>
#include <string_view>
#include <unordered_map>

namespace openib::sim::fabric {

// Socket inode -> drops, from the text of /proc/net/udp or /proc/net/udp6
// (the header line and any line that does not parse are skipped).
std::unordered_map<std::uint64_t, std::uint64_t> parse_udp_drops(std::string_view text);

// The drops of every UDP socket of this network namespace (both files).
std::unordered_map<std::uint64_t, std::uint64_t> udp_socket_drops();

// The inode of socket `fd` (0 if fstat fails): the key of the maps above.
std::uint64_t socket_inode(int fd);

}  // namespace openib::sim::fabric
