#include "sim/wire/roce.hpp"

#include <algorithm>
#include <cerrno>

#include "common/byte_order.hpp"
#include "sim/wire/crc.hpp"
#include "sim/wire/packet.hpp"

namespace openib::sim::wire {

namespace {

using bytes::ld_be16;
using bytes::ld_be32;
using bytes::st_be16;
using bytes::st_be32;

std::uint8_t u8(std::span<const std::byte> b, std::size_t off) { return std::to_integer<std::uint8_t>(b[off]); }

// IPv4 header (RFC 791 3.1), without options.
constexpr std::size_t kIpv4TotalLen = 2, kIpv4Flags = 6, kIpv4Ttl = 8, kIpv4Protocol = 9,
                      kIpv4Checksum = 10, kIpv4Src = 12, kIpv4Dst = 16;
constexpr std::uint16_t kIpv4Df = 0x4000, kIpv4Mf = 0x2000, kIpv4FragOffset = 0x1FFF;
// IPv6 header (RFC 8200 3).
constexpr std::size_t kIpv6PayloadLen = 4, kIpv6NextHeader = 6, kIpv6HopLimit = 7, kIpv6Src = 8,
                      kIpv6Dst = 24;
// UDP header (RFC 768).
constexpr std::size_t kUdpSrcPort = 0, kUdpDstPort = 2, kUdpLength = 4, kUdpChecksum = 6;
constexpr std::uint8_t kIpProtoUdp = 17;

// The CRC of the LRH RoCEv2 does not have: A17.4.2 keeps the IBA ICRC's
// definition, whose LRH is variant as a whole, so every RoCEv2 ICRC starts
// from zlib's crc32 of 8 bytes of 0xFF (rxe_icrc.c seeds crc32_le with
// 0xDEBB20E3, the same register before the final complement; the unit
// tests check both).
constexpr std::uint32_t kMaskedLrhCrc = ~0xDEBB20E3u;

// A17.4.2 (and rxe_icrc.c): the variant bits of the IP, UDP and BT
// headers, as OR masks over the first bytes of the IP packet.
// Zeros after the BTH, to the 64 bytes crc32_ones64 ORs in.
constexpr std::size_t kMaxIcrcHeadBytes = kIpv6HeaderBytes + kUdpHeaderBytes + kBthBytes;
struct RoceIcrcMask {
  std::byte m[64];
  constexpr std::byte& operator[](std::size_t i) { return m[i]; }
  constexpr const std::byte& operator[](std::size_t i) const { return m[i]; }
};
static_assert(kMaxIcrcHeadBytes <= sizeof(RoceIcrcMask));
constexpr RoceIcrcMask make_roce_icrc_mask(bool ipv4) {
  RoceIcrcMask m{};
  std::size_t udp = 0;
  if (ipv4) {
    m[1] = std::byte{0xFF};  // TOS: DSCP and ECN, rewritten by routers
    m[kIpv4Ttl] = std::byte{0xFF};
    m[kIpv4Checksum] = m[kIpv4Checksum + 1] = std::byte{0xFF};  // follows TTL and TOS
    udp = kIpv4HeaderBytes;
  } else {
    m[0] = std::byte{0x0F};  // traffic class[7:4]; the version stays covered
    m[1] = m[2] = m[3] = std::byte{0xFF};  // traffic class[3:0], flow label
    m[kIpv6HopLimit] = std::byte{0xFF};
    udp = kIpv6HeaderBytes;
  }
  m[udp + kUdpChecksum] = m[udp + kUdpChecksum + 1] = std::byte{0xFF};
  m[udp + kUdpHeaderBytes + 4] = std::byte{0xFF};  // BTH resv8a (FECN/BECN, annex A10)
  return m;
}
constexpr RoceIcrcMask kIcrcMaskIpv4 = make_roce_icrc_mask(true), kIcrcMaskIpv6 = make_roce_icrc_mask(false);

// RFC 791 3.1 / RFC 1071: the one's complement of the one's complement sum
// of the header's 16-bit words (the checksum field counting as given).
std::uint16_t ipv4_sum(std::span<const std::byte> h) {
  std::uint32_t s = 0;
  for (std::size_t i = 0; i + 1 < kIpv4HeaderBytes; i += 2) s += ld_be16(h.data() + i);
  while (s >> 16) s = (s & 0xFFFF) + (s >> 16);
  return static_cast<std::uint16_t>(s);
}

// RFC 4291 2.5.5.2: ::ffff:a.b.c.d.
Gid ipv4_mapped(std::span<const std::byte> addr) {
  Gid g{};
  g[10] = g[11] = 0xFF;
  for (std::size_t i = 0; i < 4; ++i) g[12 + i] = std::to_integer<std::uint8_t>(addr[i]);
  return g;
}

std::size_t ip_header_bytes(bool ipv4) { return ipv4 ? kIpv4HeaderBytes : kIpv6HeaderBytes; }

// Everything the parser learns before the UDP header: where the IP packet
// is, which IP, and the addresses.
struct IpPart {
  std::span<const std::byte> packet;  // IP header through the ICRC, link padding dropped
  std::span<const std::byte> udp;     // UDP header through the ICRC
};

// IPv4, RFC 791. What is not UDP, or a fragment other than the first, is
// not RoCEv2 (ENOENT: the host stack's); what is UDP to 4791 must be one
// unfragmented datagram without options (rxe and RoCE NICs send none).
Result<IpPart> parse_ipv4(std::span<const std::byte> ip, RoceAddress& a) {
  if (ip.size() < kIpv4HeaderBytes) return err(EPROTO, "IPv4 header truncated: {} bytes", ip.size());
  const std::uint8_t vihl = u8(ip, 0);
  if ((vihl >> 4) != 4) return err(EPROTO, "IPv4 EtherType with IP version {}", vihl >> 4);
  const std::size_t ihl = std::size_t{vihl & 0xFu} * 4;
  if (ihl < kIpv4HeaderBytes) return err(EPROTO, "IPv4 IHL {} below 5", vihl & 0xF);
  if (u8(ip, kIpv4Protocol) != kIpProtoUdp) return err(ENOENT, "IP protocol {}, not UDP", u8(ip, kIpv4Protocol));
  const std::uint16_t frag = static_cast<std::uint16_t>(ld_be16(ip.data() + kIpv4Flags));
  if (frag & kIpv4FragOffset) return err(ENOENT, "IPv4 fragment at offset {}", (frag & kIpv4FragOffset) * 8);
  if (ip.size() < ihl + kUdpHeaderBytes) return err(EPROTO, "UDP header truncated");
  if (std::uint16_t port = ld_be16(ip.data() + ihl + kUdpDstPort); port != kRoceV2UdpPort)
    return err(ENOENT, "UDP port {}, not RoCEv2", port);
  // RoCEv2 from here on.
  if (ihl != kIpv4HeaderBytes) return err(EPROTO, "IPv4 options ({} header bytes)", ihl);
  if (frag & kIpv4Mf) return err(EPROTO, "fragmented IPv4 (MF set)");
  if (std::uint16_t s = ipv4_sum(ip); s != 0xFFFF) return err(EPROTO, "bad IPv4 header checksum (sum {:#06x})", s);
  const std::size_t total = ld_be16(ip.data() + kIpv4TotalLen);
  if (total < kIpv4HeaderBytes + kUdpHeaderBytes || total > ip.size())
    return err(EPROTO, "IPv4 total length {} with {} bytes in the frame", total, ip.size());
  ip = ip.first(total);  // IEEE 802.3: padding of a short frame follows
  a.ipv4 = true;
  a.tclass = u8(ip, 1);
  a.flow_label = 0;
  a.hop_limit = u8(ip, kIpv4Ttl);
  a.sgid = ipv4_mapped(ip.subspan(kIpv4Src, 4));
  a.dgid = ipv4_mapped(ip.subspan(kIpv4Dst, 4));
  return IpPart{ip, ip.subspan(kIpv4HeaderBytes)};
}

// IPv6, RFC 8200. UDP must be the first next header: extension headers are
// not walked, so a packet with any is ENOENT (left to the host stack;
// RoCEv2 senders add none).
Result<IpPart> parse_ipv6(std::span<const std::byte> ip, RoceAddress& a) {
  if (ip.size() < kIpv6HeaderBytes) return err(EPROTO, "IPv6 header truncated: {} bytes", ip.size());
  const std::uint32_t w0 = ld_be32(ip.data());
  if ((w0 >> 28) != 6) return err(EPROTO, "IPv6 EtherType with IP version {}", w0 >> 28);
  if (u8(ip, kIpv6NextHeader) != kIpProtoUdp)
    return err(ENOENT, "IPv6 next header {}, not UDP", u8(ip, kIpv6NextHeader));
  if (ip.size() < kIpv6HeaderBytes + kUdpHeaderBytes) return err(EPROTO, "UDP header truncated");
  if (std::uint16_t port = ld_be16(ip.data() + kIpv6HeaderBytes + kUdpDstPort); port != kRoceV2UdpPort)
    return err(ENOENT, "UDP port {}, not RoCEv2", port);
  // Payload length 0 would be a jumbogram, which needs a hop-by-hop header.
  const std::size_t payload = ld_be16(ip.data() + kIpv6PayloadLen);
  if (payload < kUdpHeaderBytes || kIpv6HeaderBytes + payload > ip.size())
    return err(EPROTO, "IPv6 payload length {} with {} bytes in the frame", payload, ip.size());
  ip = ip.first(kIpv6HeaderBytes + payload);
  a.ipv4 = false;
  a.tclass = static_cast<std::uint8_t>((w0 >> 20) & 0xFF);
  a.flow_label = w0 & 0xFFFFF;
  a.hop_limit = u8(ip, kIpv6HopLimit);
  for (std::size_t i = 0; i < 16; ++i) {
    a.sgid[i] = u8(ip, kIpv6Src + i);
    a.dgid[i] = u8(ip, kIpv6Dst + i);
  }
  return IpPart{ip, ip.subspan(kIpv6HeaderBytes)};
}

// Writes the IP and UDP headers for a datagram of `udp_len` bytes at p.
std::byte* write_ip_udp(std::byte* p, const RoceAddress& a, std::size_t udp_len) {
  if (a.ipv4) {  // RFC 791 3.1, as rxe's prepare4(): DF, no options
    p[0] = std::byte{0x45};
    p[1] = std::byte{a.tclass};
    st_be16(p + kIpv4TotalLen, static_cast<std::uint16_t>(kIpv4HeaderBytes + udp_len));
    st_be16(p + 4, 0);  // identification: no fragments, so none needed (RFC 6864 4.1)
    st_be16(p + kIpv4Flags, kIpv4Df);
    p[kIpv4Ttl] = std::byte{a.hop_limit};
    p[kIpv4Protocol] = std::byte{kIpProtoUdp};
    st_be16(p + kIpv4Checksum, 0);
    for (std::size_t i = 0; i < 4; ++i) {
      p[kIpv4Src + i] = std::byte{a.sgid[12 + i]};
      p[kIpv4Dst + i] = std::byte{a.dgid[12 + i]};
    }
    st_be16(p + kIpv4Checksum, static_cast<std::uint16_t>(~ipv4_sum({p, kIpv4HeaderBytes})));
    p += kIpv4HeaderBytes;
  } else {  // RFC 8200 3
    st_be32(p, (6u << 28) | (std::uint32_t{a.tclass} << 20) | (a.flow_label & 0xFFFFF));
    st_be16(p + kIpv6PayloadLen, static_cast<std::uint16_t>(udp_len));
    p[kIpv6NextHeader] = std::byte{kIpProtoUdp};
    p[kIpv6HopLimit] = std::byte{a.hop_limit};
    for (std::size_t i = 0; i < 16; ++i) {
      p[kIpv6Src + i] = std::byte{a.sgid[i]};
      p[kIpv6Dst + i] = std::byte{a.dgid[i]};
    }
    p += kIpv6HeaderBytes;
  }
  // RFC 768; annex A17: checksum 0, as rxe sends (the ICRC covers the packet).
  st_be16(p + kUdpSrcPort, a.udp_sport);
  st_be16(p + kUdpDstPort, kRoceV2UdpPort);
  st_be16(p + kUdpLength, static_cast<std::uint16_t>(udp_len));
  st_be16(p + kUdpChecksum, 0);
  return p + kUdpHeaderBytes;
}

}  // namespace

bool is_ipv4_mapped(const Gid& g) {
  return std::all_of(g.begin(), g.begin() + 10, [](std::uint8_t b) { return b == 0; }) && g[10] == 0xFF &&
         g[11] == 0xFF;
}

std::uint32_t compute_roce_icrc(std::span<const std::byte> ip) {
  const bool ipv4 = !ip.empty() && (std::to_integer<unsigned>(ip[0]) >> 4) == 4;
  const RoceIcrcMask& mask = ipv4 ? kIcrcMaskIpv4 : kIcrcMaskIpv6;
  // The masks ORed in as the packet is read, one pass (folded with
  // PCLMULQDQ, crc.hpp); a packet of less than 64 bytes through a copy.
  if (ip.size() >= sizeof(mask.m)) return crc32_ones64(kMaskedLrhCrc, ip, mask.m);
  RoceIcrcMask head;
  for (std::size_t i = 0; i < ip.size(); ++i) head[i] = ip[i] | mask[i];
  return crc32(kMaskedLrhCrc, std::span<const std::byte>(head.m, ip.size()));
}

Result<RoceFrame> parse_roce_frame(std::span<const std::byte> frame, RoceParseOptions opts) {
  if (frame.size() > kMaxRoceFrameBytes)
    return err(EMSGSIZE, "frame of {} bytes, at most {}", frame.size(), kMaxRoceFrameBytes);
  if (frame.size() < kEthHeaderBytes) return err(EPROTO, "Ethernet header truncated: {} bytes", frame.size());
  RoceFrame f;
  RoceAddress& a = f.addr;
  std::copy_n(reinterpret_cast<const std::uint8_t*>(frame.data()), 6, a.dmac.begin());
  std::copy_n(reinterpret_cast<const std::uint8_t*>(frame.data()) + 6, 6, a.smac.begin());
  std::size_t off = kEthHeaderBytes;
  std::uint16_t type = ld_be16(frame.data() + 12);
  if (type == kEtherTypeVlan) {  // IEEE 802.1Q 9.3: TPID, TCI, then the EtherType
    if (frame.size() < off + kVlanTagBytes) return err(EPROTO, "802.1Q tag truncated");
    a.vlan_tci = ld_be16(frame.data() + off);
    type = ld_be16(frame.data() + off + 2);
    off += kVlanTagBytes;
  }
  IpPart ip;
  if (type == kEtherTypeIpv4) {
    OPENIB_TRY_ASSIGN(ip, parse_ipv4(frame.subspan(off), a));
  } else if (type == kEtherTypeIpv6) {
    OPENIB_TRY_ASSIGN(ip, parse_ipv6(frame.subspan(off), a));
  } else {
    return err(ENOENT, "EtherType {:#06x}, not IP", type);
  }

  // RFC 768: the UDP length is the IP payload's: UDP header, BTH .. ICRC.
  const std::span<const std::byte> udp = ip.udp;
  if (std::size_t len = ld_be16(udp.data() + kUdpLength); len != udp.size())
    return err(EPROTO, "UDP length {}, IP payload {} bytes", len, udp.size());
  if (udp.size() < kUdpHeaderBytes + kBthBytes + kIcrcBytes)
    return err(EPROTO, "UDP payload of {} bytes shorter than BTH + ICRC", udp.size() - kUdpHeaderBytes);
  a.udp_sport = ld_be16(udp.data() + kUdpSrcPort);
  f.transport = udp.subspan(kUdpHeaderBytes, udp.size() - kUdpHeaderBytes - kIcrcBytes);
  const std::uint8_t b1 = u8(f.transport, 1);  // IBA 9.2: SE M PadCnt[5:4] TVer[3:0]
  if ((b1 & 0xF) != 0) return err(EPROTO, "BTH.TVer {} (IBA 9.2 defines 0)", b1 & 0xF);
  // IBA 9.2: the pad makes BTH .. pad whole 4-byte words (an IBA packet's
  // PktLen counts words).
  if (f.transport.size() % 4 != 0)
    return err(EPROTO, "BTH through pad is {} bytes, not whole words", f.transport.size());
  if (std::size_t pad = (b1 >> 4) & 0x3; pad > f.transport.size() - kBthBytes)
    return err(EPROTO, "BTH.PadCnt {} exceeds the {} bytes after the BTH", pad, f.transport.size() - kBthBytes);

  // A17.4.2: end-to-end check last.
  const std::size_t icrc_at = ip.packet.size() - kIcrcBytes;
  f.icrc = bytes::ld_le32(ip.packet.data() + icrc_at);  // least significant byte first
  if (opts.check_icrc)
    if (std::uint32_t c = compute_roce_icrc(ip.packet.first(icrc_at)); c != f.icrc)
      return err(EBADMSG, "bad RoCEv2 ICRC {:#010x}, computed {:#010x}", f.icrc, c);
  return f;
}

std::size_t roce_frame_bytes(const RoceAddress& a, std::size_t transport_len) {
  const std::size_t n = kEthHeaderBytes + (a.vlan_tci ? kVlanTagBytes : 0) + ip_header_bytes(a.ipv4) +
                        kUdpHeaderBytes + transport_len + kIcrcBytes;
  return std::max(n, kMinEthFrameBytes);
}

namespace {
// The frame's checks before it is written: its length, or an error.
Result<std::size_t> check_frame(const RoceAddress& a, std::size_t transport_len) {
  if (transport_len < kBthBytes) return err(EINVAL, "transport packet of {} bytes has no BTH", transport_len);
  if (a.ipv4 && !(is_ipv4_mapped(a.sgid) && is_ipv4_mapped(a.dgid)))
    return err(EINVAL, "IPv4 frame with GIDs that are not IPv4-mapped");
  const std::size_t len = roce_frame_bytes(a, transport_len);
  if (len > kMaxRoceFrameBytes) return err(EMSGSIZE, "frame of {} bytes, at most {}", len, kMaxRoceFrameBytes);
  return len;
}

// Ethernet (and VLAN tag), IP and UDP headers at p for a transport packet
// of `transport_len` bytes; returns where the transport packet goes, and
// the IP header's start in `ip`.
std::byte* write_frame_headers(std::byte* p, const RoceAddress& a, std::size_t transport_len, std::byte*& ip) {
  std::copy_n(reinterpret_cast<const std::byte*>(a.dmac.data()), 6, p);
  std::copy_n(reinterpret_cast<const std::byte*>(a.smac.data()), 6, p + 6);
  p += 12;
  if (a.vlan_tci) {  // IEEE 802.1Q 9.3
    st_be16(p, kEtherTypeVlan);
    st_be16(p + 2, *a.vlan_tci);
    p += kVlanTagBytes;
  }
  st_be16(p, a.ipv4 ? kEtherTypeIpv4 : kEtherTypeIpv6);
  p += 2;
  ip = p;
  return write_ip_udp(p, a, kUdpHeaderBytes + transport_len + kIcrcBytes);
}

// The ICRC after the transport packet (which ends at p), then the pad of
// a short frame up to `frame_end`.
void seal_frame(std::byte* ip, std::byte* p, std::byte* frame_end) {
  const auto icrc = compute_roce_icrc({ip, static_cast<std::size_t>(p - ip)});
  bytes::st_le32(p, icrc);  // least significant byte first, as the IBA ICRC
  p += kIcrcBytes;
  std::fill(p, frame_end, std::byte{0});  // IEEE 802.3: a short frame padded to 60 bytes
}
}  // namespace

Result<std::size_t> build_roce_frame(const RoceAddress& a, std::span<const std::byte> transport,
                                     std::span<std::byte> out) {
  OPENIB_TRY_ASSIGN(const std::size_t len, check_frame(a, transport.size()));
  if (out.size() < len) return err(EINVAL, "frame of {} bytes, buffer of {}", len, out.size());
  std::byte* ip = nullptr;
  std::byte* p = write_frame_headers(out.data(), a, transport.size(), ip);
  p = std::copy(transport.begin(), transport.end(), p);
  seal_frame(ip, p, out.data() + len);
  return len;
}

std::uint16_t roce_udp_sport(std::uint32_t flow_label, std::uint32_t lqpn, std::uint32_t rqpn) {
  std::uint32_t fl = flow_label & 0xFFFFF;
  if (fl == 0) {  // rdma_calc_flow_label(): the QPNs' product folded to 20 bits
    std::uint64_t v = std::uint64_t{lqpn} * rqpn;
    v ^= v >> 20;
    v ^= v >> 40;
    fl = static_cast<std::uint32_t>(v & 0xFFFFF);
  }
  // rdma_flow_label_to_udp_sport(): 14 low bits XOR the 6 high, in the
  // range 0xC000..0xFFFF that A17.2.3 leaves to the source port.
  return static_cast<std::uint16_t>(0xC000 | ((fl & 0x3FFF) ^ (fl >> 14)));
}

namespace {
constexpr std::size_t kBefore = kLrhBytes + kGrhBytes, kAfter = kIcrcBytes + kVcrcBytes;

// A frame's addresses from an InfiniBand packet's LRH and GRH (ib_to_roce).
Result<RoceAddress> roce_address_of(std::span<const std::byte> ib, const Mac& dmac, const Mac& smac,
                                    std::optional<std::uint16_t> vlan_tci) {
  if (ib.size() < kBefore + kBthBytes + kAfter) return err(EINVAL, "packet of {} bytes too short", ib.size());
  const Lrh lrh = read_lrh(ib.data());
  if (lrh.lnh != Lnh::kIbaGlobal) return err(EINVAL, "RoCEv2 needs a GRH (LNH {})", static_cast<int>(lrh.lnh));
  if (std::size_t{lrh.pkt_len} * 4 + kVcrcBytes != ib.size())
    return err(EINVAL, "LRH.PktLen {} words for a packet of {} bytes", lrh.pkt_len, ib.size());
  const Grh grh = read_grh(ib.data() + kLrhBytes);
  const auto transport = ib.subspan(kBefore, ib.size() - kBefore - kAfter);

  // The flow's source QPN where the packet names it (DETH: UD and RD).
  const std::uint8_t opc = std::to_integer<std::uint8_t>(transport[0]);
  std::uint32_t src_qp = 0;
  if (const ExtHeaders ext = ext_headers(opc); ext & kExtDeth) {
    const std::size_t at = kBthBytes + ((ext & kExtRdeth) ? kRdethBytes : 0);
    if (transport.size() >= at + kDethBytes) src_qp = read_deth(transport.data() + at).src_qp;
  }
  RoceAddress a;
  a.dmac = dmac;
  a.smac = smac;
  a.vlan_tci = vlan_tci;
  a.ipv4 = is_ipv4_mapped(grh.sgid) && is_ipv4_mapped(grh.dgid);
  a.sgid = grh.sgid;
  a.dgid = grh.dgid;
  a.tclass = grh.tclass;
  a.flow_label = a.ipv4 ? 0 : grh.flow_label;  // IPv4 has no flow label
  a.hop_limit = grh.hop_lmt;
  a.udp_sport = roce_udp_sport(grh.flow_label, src_qp, read_bth(transport.data()).dest_qp);
  return a;
}
}  // namespace

Result<std::size_t> ib_to_roce(std::span<const std::byte> ib, const Mac& dmac, const Mac& smac,
                               std::optional<std::uint16_t> vlan_tci, std::span<std::byte> out) {
  OPENIB_TRY_ASSIGN(const RoceAddress a, roce_address_of(ib, dmac, smac, vlan_tci));
  return build_roce_frame(a, ib.subspan(kBefore, ib.size() - kBefore - kAfter), out);
}

Result<RoceFrameSpan> ib_to_roce_in_place(std::span<std::byte> buf, std::size_t ib_off, std::size_t ib_len,
                                          const Mac& dmac, const Mac& smac, std::optional<std::uint16_t> vlan_tci) {
  if (ib_off < kRoceInPlaceHeadroom || ib_off > buf.size() || buf.size() - ib_off < ib_len + kMinEthFrameBytes)
    return err(EINVAL, "packet at {} of {} bytes in a buffer of {}: no room to frame it in place", ib_off, ib_len,
               buf.size());
  OPENIB_TRY_ASSIGN(const RoceAddress a, roce_address_of(buf.subspan(ib_off, ib_len), dmac, smac, vlan_tci));
  const std::size_t t = ib_len - kBefore - kAfter;
  OPENIB_TRY_ASSIGN(const std::size_t len, check_frame(a, t));
  // The headers end where the transport packet lies, over the LRH and GRH
  // (already read into `a`) and the headroom before them.
  const std::size_t headers = roce_frame_bytes(a, kMinEthFrameBytes) - kMinEthFrameBytes - kIcrcBytes;
  std::byte* const transport = buf.data() + ib_off + kBefore;
  std::byte* const frame = transport - headers;
  std::byte* ip = nullptr;
  write_frame_headers(frame, a, t, ip);
  seal_frame(ip, transport + t, frame + len);
  return RoceFrameSpan{static_cast<std::size_t>(frame - buf.data()), len};
}

Result<std::size_t> roce_to_ib(const RoceFrame& f, std::uint16_t dlid, std::uint16_t slid,
                               std::span<std::byte> out, bool crcs) {
  const std::size_t t = f.transport.size();
  if (t < kBthBytes || t % 4 != 0) return err(EINVAL, "transport packet of {} bytes", t);
  const std::size_t len = kLrhBytes + kGrhBytes + t + kIcrcBytes + kVcrcBytes;
  if (len > kMaxPacketBytes) return err(EMSGSIZE, "packet of {} bytes exceeds the 11-bit PktLen", len);
  if (out.size() < len) return err(EINVAL, "packet of {} bytes, buffer of {}", len, out.size());
  Lrh lrh;
  lrh.vl = 0;
  lrh.sl = f.addr.vlan_tci ? static_cast<std::uint8_t>(*f.addr.vlan_tci >> 13) : 0;  // 802.1Q PCP
  lrh.lnh = Lnh::kIbaGlobal;
  lrh.dlid = dlid;
  lrh.pkt_len = static_cast<std::uint16_t>((len - kVcrcBytes) / 4);  // IBA 7.7.8: LRH .. ICRC
  lrh.slid = slid;
  Grh grh;
  grh.tclass = f.addr.tclass;
  grh.flow_label = f.addr.ipv4 ? 0 : f.addr.flow_label & 0xFFFFF;
  grh.pay_len = static_cast<std::uint16_t>(t + kIcrcBytes);  // IBA 8.3.3: after the GRH through the ICRC
  grh.hop_lmt = f.addr.hop_limit;
  grh.sgid = f.addr.sgid;
  grh.dgid = f.addr.dgid;
  std::byte* p = write_grh(write_lrh(out.data(), lrh), grh);
  p = std::copy(f.transport.begin(), f.transport.end(), p);
  if (crcs) seal_packet(out.first(len));  // a fresh IBA ICRC (IBA 7.8.1) and VCRC
  else std::fill_n(p, kIcrcBytes + kVcrcBytes, std::byte{0});
  return len;
}

}  // namespace openib::sim::wire
