// TAP offloads in userspace (issue 33 item 4; docs/ipoib.md "The TAP
// interface", Offloads): with IFF_VNET_HDR each frame read from the TAP
// comes after a virtio-net header (the kernel's
// Documentation/networking/tuntap.rst; struct virtio_net_hdr in
// <linux/virtio_net.h>, virtio spec 1.1 §5.1.6) that may say
//  - the frame is a GSO super-frame: one TCP segment of up to 64 KiB
//    that the device is to cut into segments of gso_size payload bytes;
//  - the checksum is partial (NEEDS_CSUM): the device sums the bytes from
//    csum_start to the end of the frame and stores the result at
//    csum_start + csum_offset, where the kernel left the pseudo-header's
//    sum.
// This file does what the device would: pure, no I/O. The bridge takes
// the resulting frames one by one (ipoib_service.cpp's read_tap).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "ipoib_tap/wire.hpp"

namespace openib::ipoib {

// struct virtio_net_hdr, without num_buffers: 10 bytes, little-endian (the
// TAP is asked for that with TUNSETVNETLE, tap_device.cpp).
inline constexpr std::size_t kVnetHdrLen = 10;
inline constexpr std::uint8_t kVnetNeedsCsum = 1;  // VIRTIO_NET_HDR_F_NEEDS_CSUM
inline constexpr std::uint8_t kGsoNone = 0, kGsoTcpv4 = 1, kGsoUdp = 3, kGsoTcpv6 = 4;  // VIRTIO_NET_HDR_GSO_*
inline constexpr std::uint8_t kGsoEcn = 0x80;  // VIRTIO_NET_HDR_GSO_ECN: the segment has CWR set

struct VnetHdr {
  std::uint8_t flags = 0;
  std::uint8_t gso_type = kGsoNone;  // with kGsoEcn or'ed in
  std::uint16_t hdr_len = 0;         // a hint only: the headers are parsed
  std::uint16_t gso_size = 0;        // payload bytes per segment (the MSS)
  std::uint16_t csum_start = 0;      // from the frame's first byte (the Ethernet header's)
  std::uint16_t csum_offset = 0;     // of the checksum field, from csum_start
};

// The header at the start of `b`; nullopt when `b` is shorter.
std::optional<VnetHdr> parse_vnet_hdr(wire::Bytes b);

enum class GsoVerdict {
  ok,           // the frames were emitted
  malformed,    // headers that do not parse or disagree with the frame or each other
  unsupported,  // a GSO type that was not offered (UDP fragmentation offload, ...)
};

// The frames a device would put on the wire for `frame` with header `h`,
// each passed to `emit` (valid during the call only), in order:
//  - gso_type NONE: the frame itself; with NEEDS_CSUM its checksum is
//    completed first, in place (RFC 1071 sum from csum_start to the end,
//    complemented; 0 sent as 0xFFFF, RFC 768). A csum_start/csum_offset
//    outside the frame: malformed.
//  - TCPV4 (IPv4 EtherType, protocol 6, not a fragment) / TCPV6 (IPv6
//    EtherType, TCP after any hop-by-hop, routing and destination options
//    headers): the TCP payload in segments of mss = min(gso_size, mtu -
//    IP headers - TCP header) bytes (gso_size is the connection's MSS,
//    RFC 9293 §3.7.1: never exceeded, whatever the MTU allows), each
//    with the Ethernet, IP (options, extension headers) and TCP headers
//    (options) of the frame, and (RFC 793, as Linux's tcp_gso_segment):
//    sequence number advanced by the payload before it; FIN and PSH only
//    on the last, CWR only on the first; IPv4 total length, identification
//    + index (mod 2^16) and header checksum; IPv6 payload length; the TCP
//    checksum over the pseudo-header (RFC 793 §3.1, RFC 8200 §8.1) anew.
//    Malformed: gso_size 0, headers short or inconsistent with the frame,
//    an mtu that leaves no payload. The frame's trailing bytes past the
//    IP packet (Ethernet padding) are not sent.
// `scratch` holds the segment being built (kept across calls to save
// allocations). Nothing is emitted unless the verdict is ok.
GsoVerdict gso_segment(const VnetHdr& h, wire::MutBytes frame, std::uint32_t mtu, std::vector<std::uint8_t>& scratch,
                       const std::function<void(wire::Bytes)>& emit);

// RFC 1071: the 16-bit one's complement sum of `b` (an odd byte padded
// with zero), folded, not complemented; `initial` is added in (a previous
// sum, or a pseudo-header's).
std::uint16_t ones_sum(wire::Bytes b, std::uint32_t initial = 0);

}  // namespace openib::ipoib
