// "Packet too big" for the kernel (issue 33): what Linux's IPoIB does with
// a packet larger than the path to its neighbour carries (in connected
// mode a peer in datagram mode, or one whose REP offered a smaller MTU:
// ipoib_cm_skb_too_long), as a frame the bridge writes back into the TAP,
// so that the kernel learns the path MTU and sends smaller packets:
//  - IPv4: ICMP Destination Unreachable, code 4 "fragmentation needed"
//    (RFC 792) with the next-hop MTU (RFC 1191 §4), whether or not the
//    packet had DF set (as Linux's IPoIB: the bridge does not fragment);
//  - IPv6: ICMPv6 Packet Too Big (RFC 4443 §3.2) with the MTU.
// The answer comes from the original destination (the path's far end as
// the kernel sees it), to the original source, on the Ethernet addresses
// of the frame swapped.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace openib::ipoib {

// `frame`: one Ethernet frame the kernel sent on the TAP (14-byte header,
// IPv4 or IPv6 payload, trailing padding allowed) that is too big for its
// path; `mtu`: the largest IP packet the path carries. Returns the
// Ethernet frame to write to the TAP:
//  - Ethernet: source = the frame's destination, destination = its source.
//  - IPv4: TOS 0xC0 (RFC 1812 4.3.2.5: precedence 6), DF, TTL 64, source =
//    the original destination, destination = the original source; ICMP
//    type 3 code 4, the MTU in the low 16 bits of the second word, then as
//    much of the original datagram as keeps the ICMP packet within 576
//    bytes (RFC 1812 4.3.2.3); header and ICMP checksums set.
//  - IPv6: hop limit 64 (Linux's default for ICMPv6 errors; only ND needs
//    255), addresses as for IPv4; ICMPv6 type 2 code 0, the 32-bit MTU,
//    then as much of the original packet as keeps the whole within 1280
//    bytes (RFC 4443 §2.4(c)); the checksum over the pseudo-header.
// nullopt, when no ICMP error may be sent (RFC 1122 3.2.2, RFC 1812
// 4.3.2.7, RFC 4443 §2.4(e)) or the frame is nothing to answer:
//  - not IPv4/IPv6, a header that is short, inconsistent with the frame's
//    length or whose extension headers run past it;
//  - an ICMP error, or an ICMP type not known as informational (IPv4); an
//    ICMPv6 error message (type < 128);
//  - a fragment that is not the first;
//  - a source that names no single host: unspecified, loopback,
//    multicast, IPv4 broadcast or class E; a multicast source MAC;
//  - a multicast or broadcast destination (IPv4 forbids the error; IPv6
//    allows it, but the answer's source would then be a group, which the
//    kernel drops), or, for IPv4, a multicast destination MAC;
//  - a packet that fits `mtu`, or an `mtu` below what every link of the
//    IP version carries (68 for IPv4, RFC 791; 1280 for IPv6, RFC 8200 §5).
std::optional<std::vector<std::uint8_t>> icmp_too_big(std::span<const std::uint8_t> frame, std::uint32_t mtu);

}  // namespace openib::ipoib
