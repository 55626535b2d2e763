// RoCEv2 framing (IBA 1.2.1 Vol 1 Annex A17, "RoCEv2"): an IBA transport
// packet (BTH onward) carried in Ethernet II (IEEE 802.3, an optional
// 802.1Q tag), IPv4 (RFC 791) or IPv6 (RFC 8200), and UDP (RFC 768) to
// destination port 4791, followed by the ICRC. The layout and the ICRC's
// masked fields are tabled in docs/wire.md "RoCEv2".
//
//   Ethernet | [802.1Q] | IPv4 or IPv6 | UDP | BTH | ext. headers | payload | pad | ICRC
//
// The RoCEv2 ICRC (A17.4.2, as Linux's rxe computes it): CRC-32 (zlib's
// crc32) over 8 bytes of ones standing for the LRH, then the IP header with
// its variant fields as ones (IPv4: TOS, TTL, header checksum; IPv6:
// traffic class, flow label, hop limit), the UDP header with its checksum
// as ones, the BTH with its reserved byte (resv8a) as ones, and the rest of
// the packet through the pad. It is stored least significant byte first,
// like the InfiniBand ICRC. The UDP checksum is sent as 0 (RFC 768: none).
//
// simhca's packet engine works on InfiniBand packets (packet.hpp); an
// Ethernet port converts at its edge: ib_to_roce() turns a packet with a
// GRH into a frame (the GRH's GIDs become the IP addresses, its traffic
// class, flow label and hop limit the IP header's), roce_to_ib() turns a
// received frame back into a packet with an LRH and a GRH made from the IP
// header (docs/simhca.md "Ethernet ports").
//
// Error codes, so callers can count drops by kind (as parse_packet's):
//   ENOENT           not RoCEv2: another EtherType, IP protocol or UDP port
//                    (on a port with a raw QP such frames go there).
//                    An IPv4 fragment other than the first and an IPv6
//                    packet with extension headers are ENOENT too: the
//                    UDP port cannot be read without reassembly or a walk
//                    of the header chain, and RoCEv2 senders make neither.
//   EPROTO           malformed: truncated, bad version, IPv4 options,
//                    a first fragment (MF), bad IPv4 header checksum,
//                    lengths that disagree with the frame, BTH..pad not
//                    whole 4-byte words, a BTH with a bad TVer/PadCnt
//   EMSGSIZE         longer than kMaxRoceFrameBytes; roce_to_ib(): too long
//                    for an IBA packet (kMaxPacketBytes)
//   EBADMSG          ICRC mismatch
//   EINVAL           ib_to_roce() given a packet without a GRH or whose
//                    LRH.PktLen disagrees with its size, build_roce_frame()
//                    given a transport packet without a BTH, or too small
//                    an output buffer
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "common/result.hpp"
#include "sim/wire/headers.hpp"

namespace openib::sim::wire {

inline constexpr std::uint16_t kRoceV2UdpPort = 4791;  // A17.2.1 (IANA)
inline constexpr std::uint16_t kEtherTypeIpv4 = 0x0800;
inline constexpr std::uint16_t kEtherTypeIpv6 = 0x86DD;
inline constexpr std::uint16_t kEtherTypeVlan = 0x8100;  // 802.1Q
inline constexpr std::uint16_t kEtherTypeArp = 0x0806;
inline constexpr std::size_t kEthHeaderBytes = 14;
// IEEE 802.3 4.2.3.3: the shortest frame, 64 bytes with the FCS; senders
// pad shorter ones with zeros (the IP lengths tell the receiver).
inline constexpr std::size_t kMinEthFrameBytes = 60;
inline constexpr std::size_t kVlanTagBytes = 4;
inline constexpr std::size_t kIpv4HeaderBytes = 20;  // no options: RoCEv2 sends none
inline constexpr std::size_t kIpv6HeaderBytes = 40;
inline constexpr std::size_t kUdpHeaderBytes = 8;
// A jumbo frame's worth: 9000 bytes of IP packet plus the Ethernet header
// and a VLAN tag (the FCS is not carried: cables deliver frames without it,
// as QEMU's -netdev dgram and AF_PACKET do).
inline constexpr std::size_t kMaxRoceFrameBytes = 9000 + kEthHeaderBytes + kVlanTagBytes;
// The bytes a RoCEv2 frame adds to BTH..pad at most (Ethernet, a VLAN tag,
// IPv6, UDP, ICRC).
inline constexpr std::size_t kMaxRoceOverheadBytes =
    kEthHeaderBytes + kVlanTagBytes + kIpv6HeaderBytes + kUdpHeaderBytes + kIcrcBytes;

using Mac = std::array<std::uint8_t, 6>;

// ::ffff:a.b.c.d (RFC 4291 2.5.5.2): the GID of an IPv4 address.
bool is_ipv4_mapped(const Gid& g);

// What a frame's headers say besides the transport packet.
struct RoceAddress {
  Mac dmac{}, smac{};
  std::optional<std::uint16_t> vlan_tci;  // 802.1Q PCP/DEI/VID; absent: untagged
  bool ipv4 = true;          // IPv4 (both GIDs IPv4-mapped) or IPv6
  Gid sgid{}, dgid{};        // source and destination IP as GIDs (IPv4-mapped for IPv4)
  std::uint8_t tclass = 0;   // IPv4 TOS (DSCP+ECN) or IPv6 traffic class
  std::uint32_t flow_label = 0;  // IPv6 only (20 bits)
  std::uint8_t hop_limit = 64;   // TTL or hop limit
  std::uint16_t udp_sport = 0;   // RoCEv2 senders spread flows over 0xC000..0xFFFF
  bool operator==(const RoceAddress&) const = default;
};

// A parsed frame: the addresses, and a view of the transport packet from
// the BTH through the pad (the ICRC excluded).
struct RoceFrame {
  RoceAddress addr;
  std::span<const std::byte> transport;  // BTH .. pad, a view into the frame
  std::uint32_t icrc = 0;
};

struct RoceParseOptions {
  bool check_icrc = true;
};

// Parses and validates one Ethernet frame (without FCS) as RoCEv2. Bytes
// after the IP packet (the padding of a short frame) are ignored. The UDP
// checksum is not checked (A17.4.1: the ICRC covers the packet).
Result<RoceFrame> parse_roce_frame(std::span<const std::byte> frame, RoceParseOptions opts = {});

// The RoCEv2 ICRC of `ip_packet`: the bytes from the first byte of the IP
// header through the pad (the ICRC itself excluded). The caller has checked
// that the IP, UDP and BT headers are there (parse_roce_frame does); the
// IP version nibble chooses the IPv4 or the IPv6 masks.
std::uint32_t compute_roce_icrc(std::span<const std::byte> ip_packet);

// The frame's length for a transport packet of `transport_len` bytes
// (BTH..pad) with these addresses, padded to kMinEthFrameBytes.
std::size_t roce_frame_bytes(const RoceAddress& a, std::size_t transport_len);

// Writes a whole frame into `out` (at least roce_frame_bytes() long): the
// Ethernet header (and VLAN tag), the IP header with its checksum (IPv4:
// DF set, identification 0), UDP to port 4791 from a.udp_sport with
// checksum 0, `transport`, the ICRC, and zeros up to kMinEthFrameBytes.
// Returns the frame's length. EINVAL: `out` too small, `transport` shorter
// than a BTH, or a.ipv4 with GIDs that are not IPv4-mapped; EMSGSIZE: the
// frame would exceed kMaxRoceFrameBytes.
Result<std::size_t> build_roce_frame(const RoceAddress& a, std::span<const std::byte> transport,
                                     std::span<std::byte> out);

// The UDP source port of a flow (A17.2.3 leaves it to the sender; Linux's
// rdma_flow_label_to_udp_sport): the flow label's low 14 bits XOR its high
// 6, in 0xC000..0xFFFF. A flow label of 0 gets one from the two QPNs
// (Linux's rdma_calc_flow_label) so every connection has a port of its own.
std::uint16_t roce_udp_sport(std::uint32_t flow_label, std::uint32_t lqpn, std::uint32_t rqpn);

// simhca's edge conversions.
//
// An InfiniBand packet (LRH through VCRC, LNH 3: a GRH is required) to a
// frame: addresses from the GRH (IPv4 iff both GIDs are IPv4-mapped),
// `dmac`/`smac`/`vlan_tci` as given, UDP source port roce_udp_sport(GRH
// flow label, the packet's source QPN if known (DETH) else 0, BTH.DestQP).
// The packet's CRCs are not checked (the engine made it). Returns the
// frame's length in `out` (at least packet.size() + kMaxRoceOverheadBytes).
Result<std::size_t> ib_to_roce(std::span<const std::byte> ib_packet, const Mac& dmac, const Mac& smac,
                               std::optional<std::uint16_t> vlan_tci, std::span<std::byte> out);

// ib_to_roce() without copying the packet's transport part (simhca's
// sending path): `buf` holds the packet (LRH through VCRC; its CRCs are not
// read) at `ib_off`, with at least kRoceInPlaceHeadroom bytes before it and
// kMinEthFrameBytes after it. The frame's headers are written over the LRH,
// the GRH and the headroom, the ICRC (and a short frame's pad) after the
// transport part, which stays where it is. Returns where in `buf` the frame
// lies. EINVAL: no such room, or as ib_to_roce.
inline constexpr std::size_t kRoceInPlaceHeadroom =
    kEthHeaderBytes + kVlanTagBytes + kIpv6HeaderBytes + kUdpHeaderBytes - kLrhBytes - kGrhBytes;
struct RoceFrameSpan {
  std::size_t offset = 0, length = 0;
};
Result<RoceFrameSpan> ib_to_roce_in_place(std::span<std::byte> buf, std::size_t ib_off, std::size_t ib_len,
                                          const Mac& dmac, const Mac& smac, std::optional<std::uint16_t> vlan_tci);

// A parsed frame back to an InfiniBand packet: LRH (VL 0, SL from the VLAN
// PCP or 0, LNH 3, the given DLID and SLID), a GRH made from the IP header
// (IPv4: IPv4-mapped GIDs, TOS as traffic class, TTL as hop limit), the
// transport packet, a freshly computed ICRC and VCRC. Returns the packet's
// length in `out` (at least f.transport.size() + LRH + GRH + 6). The
// transport packet's OpCode and extension headers are not checked here:
// parse_packet() of the result does. EMSGSIZE: too long for the 11-bit
// PktLen (a jumbo frame can carry more than an IBA packet).
// `crcs` false: the ICRC and VCRC are left as zeros, for a receiver that
// parses the packet without checking them (simhca's Ethernet port, whose
// frame's RoCEv2 ICRC was just checked).
Result<std::size_t> roce_to_ib(const RoceFrame& f, std::uint16_t dlid, std::uint16_t slid,
                               std::span<std::byte> out, bool crcs = true);

}  // namespace openib::sim::wire
