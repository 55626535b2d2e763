// The ARP and IPv6 neighbour discovery translators (arp.cpp, nd.cpp):
// Ethernet's 6-byte hardware addresses <-> IPoIB's 20-byte ones, with
// the neighbour table as the dictionary. Pure functions of their input
// and the table: the bridge sends or writes what they return.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "ipoib_tap/neighbours.hpp"
#include "ipoib_tap/wire.hpp"

namespace openib::ipoib {

// spoofed: a received message names as its sender's own a 20-byte
// address its source cannot have (docs/ipoib.md "Security").
enum class Verdict { ok, malformed, unknown_mac, spoofed };

// Whether the packet's source (the DETH's source QPN, the GRH's SGID or
// the SLID) may claim `a` as its own 20-byte address; the bridge's check,
// asked before the table learns anything from the message.
using SenderCheck = std::function<bool(const HwAddr& a)>;

// ARP (RFC 826 / RFC 4391 §8). `eth_arp`: the ARP message of an Ethernet
// frame (htype 1, hlen 6); out: the IB ARP message (htype 32, hlen 20).
Verdict arp_to_ib(wire::Bytes eth_arp, NeighbourTable& nt, std::vector<std::uint8_t>& out);
// `ib_arp`: an IB ARP message; out: the Ethernet ARP message; `sender`:
// the sender's 20-byte address (learnt, with its IPv4 address). The
// sender hardware address (RFC 4391 §9.1.1) that `sender_ok` refuses:
// spoofed, nothing learnt.
Verdict arp_from_ib(wire::Bytes ib_arp, NeighbourTable& nt, std::vector<std::uint8_t>& out,
                    HwAddr& sender, const SenderCheck& sender_ok = {});

// IPv6 (RFC 4861 / RFC 4391 §9.1.1). `ipv6`: a whole IPv6 packet (the
// payload of the Ethernet frame or IPoIB packet). When it is an ND
// message (RS, RA, NS, NA, Redirect), out is the translated packet with
// its payload length and ICMPv6 checksum redone, and *is_nd is set;
// otherwise out is the packet unchanged (trimmed to its payload length).
Verdict nd_to_ib(wire::Bytes ipv6, NeighbourTable& nt, std::vector<std::uint8_t>& out, bool* is_nd);
// From IB, the addresses a message claims as its sender's own (every
// source link-layer address option; a Neighbor Advertisement's target
// link-layer address, RFC 4861 §4.4) are put to `sender_ok` first: one
// refused makes the message spoofed, nothing learnt. A Redirect's target
// address names another node and is not checked.
Verdict nd_from_ib(wire::Bytes ipv6, NeighbourTable& nt, std::vector<std::uint8_t>& out, bool* is_nd,
                   const SenderCheck& sender_ok = {});

// The ICMPv6 checksum (RFC 4443 §2.3) of an IPv6 packet whose next
// header is ICMPv6, its checksum field taken as 0.
std::uint16_t icmpv6_checksum(wire::Bytes ipv6);

}  // namespace openib::ipoib
