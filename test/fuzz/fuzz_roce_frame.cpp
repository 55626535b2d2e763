// libFuzzer target: arbitrary bytes into parse_roce_frame() (src/sim/wire/
// roce.hpp), as they come and repaired into well-formed RoCEv2 (lengths,
// UDP port, IPv4 checksum, ICRC) so the fuzzer gets past the checks it
// cannot guess. Nothing may crash, read out of bounds or hit UB, and the
// conversions must agree with the parsers:
//  - a frame that parses converts (roce_to_ib) to an IBA packet whose LRH
//    and GRH say what the frame said and whose CRCs parse_packet() accepts:
//    if parse_packet() refuses it, only for the transport packet's own
//    faults (an unknown OpCode, missing extension headers), never for a
//    length or a CRC;
//  - that packet converts back (ib_to_roce) to a frame that parses to the
//    same transport bytes and addresses.
#include <array>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <vector>

#include "common/byte_order.hpp"
#include "sim/wire/headers.hpp"
#include "sim/wire/packet.hpp"
#include "sim/wire/roce.hpp"

using namespace openib::sim::wire;
namespace bytes = openib::bytes;

namespace {

void require(bool ok) {
  if (!ok) std::abort();
}

void check_ib_packet(const RoceFrame& f, std::span<const std::byte> pkt, std::uint16_t dlid, std::uint16_t slid) {
  const Lrh lrh = read_lrh(pkt.data());
  require(lrh.lnh == Lnh::kIbaGlobal && lrh.dlid == dlid && lrh.slid == slid && lrh.vl == 0);
  require(std::size_t{lrh.pkt_len} * 4 + kVcrcBytes == pkt.size());
  require(lrh.sl == (f.addr.vlan_tci ? *f.addr.vlan_tci >> 13 : 0));
  const Grh g = read_grh(pkt.data() + kLrhBytes);
  require(g.ip_ver == kGrhIpVer && g.nxt_hdr == kGrhNxtHdrIba);
  require(g.pay_len == f.transport.size() + kIcrcBytes);
  require(g.sgid == f.addr.sgid && g.dgid == f.addr.dgid);
  require(g.tclass == f.addr.tclass && g.hop_lmt == f.addr.hop_limit);
  require(g.flow_label == (f.addr.ipv4 ? 0 : f.addr.flow_label));
  const auto t = pkt.subspan(kLrhBytes + kGrhBytes, f.transport.size());
  require(std::equal(t.begin(), t.end(), f.transport.begin(), f.transport.end()));

  auto p = parse_packet(pkt);
  if (!p.ok()) {
    // The transport packet's fault, the same with the CRC checks off.
    const int code = p.error().code;
    require(code == EPROTO || code == EPROTONOSUPPORT);
    auto q = parse_packet(pkt, {.check_vcrc = false, .check_icrc = false});
    require(!q.ok() && q.error().code == code);
  }
}

void check_back_to_ethernet(const RoceFrame& f, std::span<const std::byte> pkt) {
  static std::vector<std::byte> out(kMaxPacketBytes + kMaxRoceOverheadBytes);
  auto m = ib_to_roce(pkt, f.addr.dmac, f.addr.smac, f.addr.vlan_tci, out);
  require(m.ok());
  auto f2 = parse_roce_frame(std::span<const std::byte>(out).first(*m));
  require(f2.ok());
  const RoceAddress &a = f.addr, &b = f2->addr;
  require(std::equal(f2->transport.begin(), f2->transport.end(), f.transport.begin(), f.transport.end()));
  require(b.dmac == a.dmac && b.smac == a.smac && b.vlan_tci == a.vlan_tci);
  require(b.sgid == a.sgid && b.dgid == a.dgid && b.tclass == a.tclass && b.hop_limit == a.hop_limit);
  require(b.ipv4 == (is_ipv4_mapped(a.sgid) && is_ipv4_mapped(a.dgid)));
  if (!a.ipv4 && !b.ipv4) require(b.flow_label == a.flow_label);
}

void check(std::span<const std::byte> frame) {
  auto r = parse_roce_frame(frame);
  auto q = parse_roce_frame(frame, {.check_icrc = false});
  if (!r.ok()) {
    // The ICRC is checked last: without it, only a bad ICRC passes.
    if (r.error().code == EBADMSG)
      require(q.ok());
    else
      require(!q.ok() && q.error().code == r.error().code);
    return;
  }
  require(q.ok());
  const RoceFrame& f = *r;
  require(f.transport.data() >= frame.data() && f.transport.data() + f.transport.size() <= frame.data() + frame.size());

  static std::array<std::byte, kMaxPacketBytes> ib;
  auto n = roce_to_ib(f, 0x12, 0x34, ib);
  if (!n.ok()) {  // only a jumbo frame's transport packet is too long for IBA
    require(n.error().code == EMSGSIZE &&
            f.transport.size() + kLrhBytes + kGrhBytes + kIcrcBytes + kVcrcBytes > kMaxPacketBytes);
    return;
  }
  const auto pkt = std::span<const std::byte>(ib).first(*n);
  check_ib_packet(f, pkt, 0x12, 0x34);
  check_back_to_ethernet(f, pkt);
}

// Makes `w` a frame the parser accepts up to the transport packet: IP and
// UDP lengths, the UDP port, the IPv4 checksum, the ICRC; BTH..pad whole
// words, TVer 0. The rest (addresses, BTH, payload) stays the fuzzer's.
void repair(std::vector<std::byte>& w) {
  if (w.size() < kEthHeaderBytes + kVlanTagBytes) return;
  std::size_t ip = kEthHeaderBytes;
  if (bytes::ld_be16(w.data() + 12) == kEtherTypeVlan) ip += kVlanTagBytes;
  const bool v4 = !(std::to_integer<unsigned>(w[ip - 1]) & 1);  // the fuzzer picks
  bytes::st_be16(w.data() + ip - 2, v4 ? kEtherTypeIpv4 : kEtherTypeIpv6);
  const std::size_t udp = ip + (v4 ? kIpv4HeaderBytes : kIpv6HeaderBytes);
  const std::size_t bth = udp + kUdpHeaderBytes;
  if (w.size() < bth + kBthBytes + kIcrcBytes) return;
  w.resize(bth + (w.size() - bth - kIcrcBytes) / 4 * 4 + kIcrcBytes);
  const std::size_t end = w.size();
  if (v4) {
    w[ip] = std::byte{0x45};
    w[ip + 9] = std::byte{17};
    w[ip + 6] &= std::byte{0x40};  // keep DF, no fragment
    w[ip + 7] = std::byte{0};
    bytes::st_be16(w.data() + ip + 2, static_cast<std::uint16_t>(end - ip));
    bytes::st_be16(w.data() + ip + 10, 0);
    std::uint32_t s = 0;
    for (std::size_t i = 0; i < kIpv4HeaderBytes; i += 2) s += bytes::ld_be16(w.data() + ip + i);
    while (s >> 16) s = (s & 0xFFFF) + (s >> 16);
    bytes::st_be16(w.data() + ip + 10, static_cast<std::uint16_t>(~s));
  } else {
    w[ip] = (w[ip] & std::byte{0x0F}) | std::byte{0x60};
    w[ip + 6] = std::byte{17};
    bytes::st_be16(w.data() + ip + 4, static_cast<std::uint16_t>(end - udp));
  }
  bytes::st_be16(w.data() + udp + 2, kRoceV2UdpPort);
  bytes::st_be16(w.data() + udp + 4, static_cast<std::uint16_t>(end - udp));
  w[bth + 1] &= std::byte{0xF0};  // TVer 0
  const std::size_t after_bth = end - kIcrcBytes - bth - kBthBytes;
  if (((std::to_integer<unsigned>(w[bth + 1]) >> 4) & 3) > after_bth) w[bth + 1] &= std::byte{0xC0};
  const auto body = std::span<const std::byte>(w).subspan(ip, end - kIcrcBytes - ip);
  bytes::st_le32(w.data() + end - kIcrcBytes, compute_roce_icrc(body));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::span<const std::byte> in(reinterpret_cast<const std::byte*>(data), size);
  (void)compute_roce_icrc(in);
  check(in);
  if (size <= kMaxRoceFrameBytes) {
    std::vector<std::byte> w(in.begin(), in.end());
    repair(w);
    check(w);
  }
  return 0;
}
