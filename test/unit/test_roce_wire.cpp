// RoCEv2 framing (src/sim/wire/roce.hpp): the ICRC against a frame captured
// from a ConnectX-4 Lx, whole frames against byte strings computed with
// Python's zlib (not this code), every rejection of parse_roce_frame(), the
// conversions to and from IBA packets, and tshark's reading of a capture.
#include <catch2/catch.hpp>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include <unistd.h>

#include "sim/wire/crc.hpp"
#include "sim/wire/headers.hpp"
#include "sim/wire/packet.hpp"
#include "sim/wire/pcap_erf.hpp"
#include "sim/wire/roce.hpp"
#include "tshark.hpp"

using namespace openib::sim::wire;
namespace fs = std::filesystem;

namespace {

std::vector<std::byte> hex(std::string_view s) {
  std::vector<std::byte> out;
  for (std::size_t i = 0; i + 1 < s.size();) {
    if (s[i] == ' ' || s[i] == '\n') {
      ++i;
      continue;
    }
    out.push_back(static_cast<std::byte>(std::stoi(std::string(s.substr(i, 2)), nullptr, 16)));
    i += 2;
  }
  return out;
}

template <typename T>
T must(openib::Result<T> r) {
  if (!r.ok()) FAIL(r.error().str());
  return std::move(r).value();
}

int code_of(std::span<const std::byte> frame, RoceParseOptions o = {}) {
  auto r = parse_roce_frame(frame, o);
  return r.ok() ? 0 : r.error().code;
}

unsigned at(std::span<const std::byte> b, std::size_t i) { return std::to_integer<unsigned>(b[i]); }
void set(std::vector<std::byte>& b, std::size_t i, unsigned v) { b[i] = static_cast<std::byte>(v); }

// Recomputes an IPv4 header checksum (RFC 1071) after a test edits the
// header, so that the edit and not the checksum decides the outcome.
void fix_ipv4_checksum(std::vector<std::byte>& f, std::size_t ip) {
  set(f, ip + 10, 0);
  set(f, ip + 11, 0);
  std::uint32_t s = 0;
  for (std::size_t i = 0; i < 20; i += 2) s += at(f, ip + i) << 8 | at(f, ip + i + 1);
  while (s >> 16) s = (s & 0xFFFF) + (s >> 16);
  s = ~s & 0xFFFF;
  set(f, ip + 10, s >> 8);
  set(f, ip + 11, s & 0xFF);
}

Gid gid_v4(std::uint8_t a, std::uint8_t b, std::uint8_t c, std::uint8_t d) {
  return Gid{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, a, b, c, d};
}
Gid gid_v6(std::uint8_t last) { return Gid{0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, last}; }

constexpr Mac kMacA{0x02, 0, 0, 0, 0, 0x01}, kMacB{0x02, 0, 0, 0, 0, 0x02};

// A RoCEv2 CNP captured on a ConnectX-4 Lx (scapy, test/contrib/roce.uts,
// "RoCE CNP captured on ConnectX-4 Lx"): IPv4 TOS 0xc2, TTL 64, ID 0x718c,
// UDP source port 0, checksum 0, BTH OpCode 0x81 with BECN set in resv8a,
// 16 reserved bytes, and the hardware's ICRC 82 fd 00 2a.
constexpr std::string_view kCx4Cnp =
    "e41d2dab2bc2 7cfe90643b32 0800"
    "45c2003c718c400040119161 0a001101 0a001201"  // IPv4 10.0.17.1 -> 10.0.18.1
    "000012b700280000"                            // UDP 0 -> 4791, length 40
    "8100ffff40000118 00000000"                   // BTH: CNP, BECN, QP 0x118
    "00000000000000000000000000000000"            // CNP reserved bytes
    "82fd002a";                                   // ICRC

// Written from RFC 791/768 and IBA 9.2; IP checksum and ICRC computed with
// Python (zlib.crc32 from crc32(b'\xff' * 8) over the masked IP packet).
// A: IPv4 192.168.1.1 -> .2, TOS 0x68, TTL 64, UDP 0xc001 -> 4791, RC SEND
// Only PadCnt 3, QP 0x11, AckReq, PSN 5, "hello".
constexpr std::string_view kVecA =
    "020000000002 020000000001 0800"
    "4568003400004000 4011b6fd c0a80101 c0a80102"
    "c00112b700200000"
    "0430ffff00000011 80000005 68656c6c6f000000"
    "ade6fbf2";
// B: 802.1Q TCI 0x6005 (PCP 3, VID 5), IPv6 fe80::1 -> fe80::2, traffic
// class 0xa5, flow label 0x12345, hop limit 64, UDP 0xe341 -> 4791, UD
// SEND Only QP 1 PSN 7, DETH Q_Key 0x80010000 source QP 0x123, "abcd".
constexpr std::string_view kVecB =
    "020000000002 020000000001 8100 6005 86dd"
    "6a512345 0024 11 40 fe800000000000000000000000000001 fe800000000000000000000000000002"
    "e34112b700240000"
    "6400ffff00000001 00000007 8001000000000123 61626364"
    "8e8f833b";

RoceAddress addr_a() {
  RoceAddress a;
  a.dmac = kMacB;
  a.smac = kMacA;
  a.ipv4 = true;
  a.sgid = gid_v4(192, 168, 1, 1);
  a.dgid = gid_v4(192, 168, 1, 2);
  a.tclass = 0x68;
  a.hop_limit = 64;
  a.udp_sport = 0xC001;
  return a;
}

RoceAddress addr_b() {
  RoceAddress a;
  a.dmac = kMacB;
  a.smac = kMacA;
  a.vlan_tci = 0x6005;
  a.ipv4 = false;
  a.sgid = gid_v6(1);
  a.dgid = gid_v6(2);
  a.tclass = 0xa5;
  a.flow_label = 0x12345;
  a.hop_limit = 0x40;
  a.udp_sport = 0xE341;
  return a;
}

std::vector<std::byte> build(const RoceAddress& a, std::span<const std::byte> transport) {
  std::vector<std::byte> out(roce_frame_bytes(a, transport.size()));
  CHECK(must(build_roce_frame(a, transport, out)) == out.size());
  return out;
}

// IBA packets with a GRH, as simhca's engine makes them.
Headers global(std::uint8_t opc, std::uint32_t qp, const Gid& s, const Gid& d) {
  Headers h;
  h.lrh.dlid = 0xFFFF;  // not used on Ethernet
  h.lrh.slid = 0;
  h.grh.emplace();
  h.grh->tclass = 0x20;
  h.grh->hop_lmt = 64;
  h.grh->sgid = s;
  h.grh->dgid = d;
  h.bth.opcode = opc;
  h.bth.dest_qp = qp;
  h.bth.psn = 0x123456;
  h.bth.ack_req = true;
  return h;
}

std::vector<std::byte> to_frame(std::span<const std::byte> ib, std::optional<std::uint16_t> vlan = {}) {
  std::vector<std::byte> out(ib.size() + kMaxRoceOverheadBytes);
  out.resize(must(ib_to_roce(ib, kMacB, kMacA, vlan, out)));
  return out;
}

std::vector<std::byte> payload(std::size_t n) {
  std::vector<std::byte> p(n);
  for (std::size_t i = 0; i < n; ++i) p[i] = static_cast<std::byte>(i * 7 + 1);
  return p;
}

}  // namespace

TEST_CASE("RoCEv2 ICRC seed: 8 bytes of ones leave rxe's 0xDEBB20E3", "[wire][roce]") {
  // A bitwise reflected CRC-32 register (no table, no final complement),
  // from 0xFFFFFFFF over the masked LRH: rxe_icrc.c's seed.
  std::uint32_t reg = 0xFFFFFFFF;
  for (int i = 0; i < 8; ++i) {
    reg ^= 0xFF;
    for (int k = 0; k < 8; ++k) reg = (reg & 1) ? (reg >> 1) ^ 0xEDB88320u : reg >> 1;
  }
  CHECK(reg == 0xDEBB20E3u);
  // zlib's convention returns the register complemented; chaining from it
  // is what compute_roce_icrc() does.
  const std::vector<std::byte> ones(8, std::byte{0xFF});
  CHECK(crc32(0, ones) == ~0xDEBB20E3u);
}

TEST_CASE("A RoCEv2 frame captured from a ConnectX-4 Lx verifies", "[wire][roce]") {
  const auto f = hex(kCx4Cnp);
  REQUIRE(f.size() == 74);
  auto r = must(parse_roce_frame(f));
  CHECK(r.icrc == 0x2a00fd82);  // the wire's 82 fd 00 2a, least significant byte first
  CHECK(compute_roce_icrc(std::span(f).subspan(14, 56)) == 0x2a00fd82);
  CHECK(r.addr.dmac == Mac{0xe4, 0x1d, 0x2d, 0xab, 0x2b, 0xc2});
  CHECK(r.addr.smac == Mac{0x7c, 0xfe, 0x90, 0x64, 0x3b, 0x32});
  CHECK_FALSE(r.addr.vlan_tci);
  CHECK(r.addr.ipv4);
  CHECK(r.addr.sgid == gid_v4(10, 0, 17, 1));
  CHECK(r.addr.dgid == gid_v4(10, 0, 18, 1));
  CHECK(r.addr.tclass == 0xc2);
  CHECK(r.addr.hop_limit == 64);
  CHECK(r.addr.udp_sport == 0);
  REQUIRE(r.transport.size() == 28);
  CHECK(r.transport.data() == f.data() + 42);
  CHECK(read_bth(r.transport.data()).opcode == 0x81);
  CHECK(read_bth(r.transport.data()).resv8a == 0x40);

  SECTION("the variant fields are outside the ICRC") {
    auto g = f;
    set(g, 15, 0x00);  // TOS
    set(g, 22, 1);     // TTL
    fix_ipv4_checksum(g, 14);
    set(g, 40, 0x12);  // UDP checksum
    set(g, 41, 0x34);
    set(g, 46, 0x80);  // BTH resv8a: FECN instead of BECN
    CHECK(code_of(g) == 0);
  }
  SECTION("an invariant byte changed is EBADMSG") {
    for (std::size_t i : {18, 19, 26, 29, 33, 34, 35, 42, 44, 47, 51, 60, 69, 70, 73}) {
      auto g = f;
      set(g, i, at(g, i) ^ 0x01);
      if (i >= 14 && i < 34) fix_ipv4_checksum(g, 14);
      INFO("byte " << i);
      CHECK(code_of(g) == EBADMSG);
      CHECK(code_of(g, {.check_icrc = false}) == 0);
    }
  }
}

TEST_CASE("build_roce_frame writes known IPv4 and IPv6 + 802.1Q frames", "[wire][roce]") {
  const auto a = hex(kVecA), b = hex(kVecB);
  CHECK(build(addr_a(), std::span(a).subspan(42, 20)) == a);
  CHECK(build(addr_b(), std::span(b).subspan(66, 24)) == b);

  auto pa = must(parse_roce_frame(a));
  CHECK(pa.addr == addr_a());
  CHECK(pa.transport.size() == 20);
  CHECK(pa.icrc == 0xf2fbe6ad);
  auto pb = must(parse_roce_frame(b));
  CHECK(pb.addr == addr_b());
  CHECK(pb.transport.size() == 24);
  CHECK(pb.transport.data() == b.data() + 66);

  SECTION("the ICRC is stored least significant byte first") {
    const auto c = compute_roce_icrc(std::span(a).subspan(14, 48));
    CHECK(c == 0xf2fbe6ad);
    CHECK(at(a, 62) == (c & 0xFF));
    CHECK(at(a, 65) == c >> 24);
  }
  SECTION("IPv6 traffic class, flow label and hop limit are outside the ICRC") {
    auto g = b;
    set(g, 18, 0x60);  // version 6, traffic class 0, flow label 0
    set(g, 19, 0);
    set(g, 20, 0);
    set(g, 21, 0);
    set(g, 25, 1);     // hop limit
    set(g, 64, 0xAB);  // UDP checksum
    auto p = must(parse_roce_frame(g));
    CHECK(p.addr.tclass == 0);
    CHECK(p.addr.flow_label == 0);
    CHECK(p.addr.hop_limit == 1);
  }
  SECTION("IPv6 invariant fields are covered") {
    for (std::size_t i : {26, 41, 42, 57, 58, 59, 67, 72, 78, 86, 89, 91}) {
      auto g = b;
      set(g, i, at(g, i) ^ 0x10);
      INFO("byte " << i);
      CHECK(code_of(g) == EBADMSG);
    }
  }
}

TEST_CASE("RoCEv2 frames round-trip: IPv4, IPv6, 802.1Q, short frames padded", "[wire][roce]") {
  for (bool v4 : {true, false})
    for (bool vlan : {false, true})
      for (std::size_t n : {0, 1, 3, 4, 61, 1024}) {
        RoceAddress a = v4 ? addr_a() : addr_b();
        a.vlan_tci = vlan ? std::optional<std::uint16_t>(0xE00A) : std::nullopt;
        auto t = payload(kBthBytes + (n + 3) / 4 * 4);
        t[1] = std::byte{0};  // TVer 0, PadCnt 0
        auto f = build(a, t);
        INFO("ipv4 " << v4 << " vlan " << vlan << " n " << n);
        CHECK(f.size() >= kMinEthFrameBytes);
        auto p = must(parse_roce_frame(f));
        CHECK(p.addr == a);
        CHECK(std::equal(p.transport.begin(), p.transport.end(), t.begin(), t.end()));
      }
  SECTION("an empty SEND is 58 bytes and padded to 60") {
    std::vector<std::byte> t = hex("0400ffff00000011 00000001");
    auto f = build(addr_a(), t);
    REQUIRE(f.size() == 60);
    CHECK(at(f, 58) == 0);
    CHECK(at(f, 59) == 0);
    auto p = must(parse_roce_frame(f));
    CHECK(p.transport.size() == 12);
  }
  SECTION("bytes after the IP packet (a NIC's padding) are ignored") {
    auto f = hex(kVecA);
    f.resize(f.size() + 7, std::byte{0x5A});
    auto p = must(parse_roce_frame(f));
    CHECK(p.transport.size() == 20);
  }
}

TEST_CASE("parse_roce_frame tells frames that are not RoCEv2 (ENOENT)", "[wire][roce]") {
  const auto a = hex(kVecA), b = hex(kVecB);
  auto g = a;
  set(g, 12, 0x08);  // ARP
  set(g, 13, 0x06);
  CHECK(code_of(g) == ENOENT);
  g = b;
  set(g, 16, 0x08);  // ARP inside an 802.1Q tag
  set(g, 17, 0x06);
  CHECK(code_of(g) == ENOENT);
  g = a;
  set(g, 23, 6);  // TCP
  fix_ipv4_checksum(g, 14);
  CHECK(code_of(g) == ENOENT);
  g = a;
  set(g, 37, 0xb8);  // UDP port 4792
  CHECK(code_of(g) == ENOENT);
  g = a;
  set(g, 20, 0x00);  // a later fragment (offset 8): no UDP header to read
  set(g, 21, 0x01);
  fix_ipv4_checksum(g, 14);
  CHECK(code_of(g) == ENOENT);
  g = a;
  set(g, 23, 6);  // not UDP, with options: still just not ours
  set(g, 14, 0x46);
  CHECK(code_of(g) == ENOENT);
  g = b;
  set(g, 24, 0);  // IPv6 next header: hop-by-hop options (an extension header)
  CHECK(code_of(g) == ENOENT);
  g = b;
  set(g, 24, 6);  // TCP
  CHECK(code_of(g) == ENOENT);
  g = b;
  set(g, 61, 0x00);  // UDP port 4608
  CHECK(code_of(g) == ENOENT);
}

TEST_CASE("parse_roce_frame rejects malformed RoCEv2 frames (EPROTO, EMSGSIZE)", "[wire][roce]") {
  const auto a = hex(kVecA), b = hex(kVecB);
  auto first = [](const std::vector<std::byte>& f, std::size_t n) { return std::span(f).first(n); };

  CHECK(code_of(first(a, 13)) == EPROTO);  // no Ethernet header
  CHECK(code_of(first(b, 16)) == EPROTO);  // 802.1Q tag cut
  CHECK(code_of(first(a, 33)) == EPROTO);  // IPv4 header cut
  CHECK(code_of(first(a, 40)) == EPROTO);  // UDP header cut
  CHECK(code_of(first(b, 50)) == EPROTO);  // IPv6 header cut
  CHECK(code_of(first(b, 60)) == EPROTO);  // UDP header cut
  CHECK(code_of(first(a, 65)) == EPROTO);  // IPv4 total length beyond the frame
  CHECK(code_of(first(b, 93)) == EPROTO);  // IPv6 payload length beyond the frame

  std::vector<std::byte> huge(kMaxRoceFrameBytes + 1);
  CHECK(code_of(huge) == EMSGSIZE);

  auto edit = [](std::vector<std::byte> f, std::initializer_list<std::pair<std::size_t, unsigned>> e,
                 bool fix4 = true) {
    for (auto [i, v] : e) set(f, i, v);
    if (fix4) fix_ipv4_checksum(f, 14);
    return f;
  };
  CHECK(code_of(edit(a, {{14, 0x65}})) == EPROTO);  // IPv4 EtherType, version 6
  CHECK(code_of(edit(a, {{14, 0x44}})) == EPROTO);  // IHL 4
  CHECK(code_of(edit(a, {{20, 0x60}})) == EPROTO);  // MF: a first fragment
  CHECK(code_of(edit(a, {{17, 0x1b}})) == EPROTO);  // total length 27 < IP + UDP
  CHECK(code_of(edit(a, {{24, 0x00}}, false)) == EPROTO);  // bad header checksum
  CHECK(code_of(edit(a, {{39, 0x1c}})) == EPROTO);  // UDP length != IP payload
  CHECK(code_of(edit(a, {{43, 0x31}})) == EPROTO);  // BTH.TVer 1
  CHECK(code_of(edit(b, {{18, 0x4a}}, false)) == EPROTO);  // IPv6 EtherType, version 4
  CHECK(code_of(edit(b, {{23, 0x00}}, false)) == EPROTO);  // IPv6 payload length 0
  CHECK(code_of(edit(b, {{23, 0x04}}, false)) == EPROTO);  // IPv6 payload length < UDP
  {
    // IPv4 options (IHL 6) on UDP to 4791: a RoCEv2 sender never adds any.
    auto g = a;
    g.insert(g.begin() + 34, 4, std::byte{0x01});  // four NOPs
    set(g, 14, 0x46);
    set(g, 17, at(g, 17) + 4);
    fix_ipv4_checksum(g, 14);
    CHECK(code_of(g) == EPROTO);
  }
  {
    // UDP payload shorter than BTH + ICRC (IP and UDP lengths agree).
    auto g = first(a, 14 + 20 + 8 + 15);
    std::vector<std::byte> s(g.begin(), g.end());
    set(s, 17, 20 + 8 + 15);
    set(s, 39, 8 + 15);
    fix_ipv4_checksum(s, 14);
    CHECK(code_of(s) == EPROTO);
  }
  {
    // BTH .. pad not whole words: one byte fewer, lengths adjusted.
    auto s = a;
    s.erase(s.begin() + 61);
    set(s, 17, at(s, 17) - 1);
    set(s, 39, at(s, 39) - 1);
    fix_ipv4_checksum(s, 14);
    CHECK(code_of(s) == EPROTO);
  }
  {
    // PadCnt 3 with nothing after the BTH.
    std::vector<std::byte> t = hex("0430ffff00000011 00000001");
    CHECK(code_of(build(addr_a(), t)) == EPROTO);
  }
}

TEST_CASE("roce_udp_sport follows Linux's flow label rules", "[wire][roce]") {
  // rdma_flow_label_to_udp_sport(): (fl[13:0] ^ fl[19:14]) | 0xC000.
  CHECK(roce_udp_sport(0x12345, 7, 9) == 0xE341);
  CHECK(roce_udp_sport(0xFFFFF, 0, 0) == 0xFFC0);
  CHECK(roce_udp_sport(0x00001, 0, 0) == 0xC001);
  // rdma_calc_flow_label(): the QPNs' product folded to 20 bits (0xAC3E3
  // here, computed in Python), the same both ways.
  CHECK(roce_udp_sport(0, 0xABCDEF, 0x123456) == 0xC3C8);
  CHECK(roce_udp_sport(0, 0x123456, 0xABCDEF) == 0xC3C8);
  CHECK(roce_udp_sport(0, 0, 0x11) == 0xC000);
  for (std::uint32_t fl = 0; fl < 0x100000; fl += 0x1111) CHECK(roce_udp_sport(fl, 3, 5) >= 0xC000);
}

TEST_CASE("is_ipv4_mapped recognizes ::ffff:a.b.c.d only", "[wire][roce]") {
  CHECK(is_ipv4_mapped(gid_v4(10, 0, 0, 1)));
  CHECK_FALSE(is_ipv4_mapped(gid_v6(1)));
  Gid g = gid_v4(10, 0, 0, 1);
  g[10] = 0xFE;
  CHECK_FALSE(is_ipv4_mapped(g));
  g = gid_v4(10, 0, 0, 1);
  g[0] = 0x20;
  CHECK_FALSE(is_ipv4_mapped(g));
}

TEST_CASE("build_roce_frame refuses what it cannot send", "[wire][roce]") {
  const std::vector<std::byte> t = hex("0400ffff00000011 00000001");
  std::vector<std::byte> out(200);
  RoceAddress a = addr_a();
  a.dgid = gid_v6(2);  // IPv4 with an IPv6 destination
  CHECK(build_roce_frame(a, t, out).error().code == EINVAL);
  CHECK(build_roce_frame(addr_a(), std::span(t).first(11), out).error().code == EINVAL);
  CHECK(build_roce_frame(addr_a(), t, std::span(out).first(59)).error().code == EINVAL);
  std::vector<std::byte> big(9000), bigout(kMaxRoceFrameBytes + 100);
  CHECK(build_roce_frame(addr_a(), big, bigout).error().code == EMSGSIZE);
}

TEST_CASE("ib_to_roce and roce_to_ib carry an IBA packet across Ethernet", "[wire][roce]") {
  struct Case {
    const char* name;
    Headers h;
    std::size_t len;
  };
  std::vector<Case> cases;
  {
    Headers h = global(opcode(Transport::kRc, Op::kSendOnly), 0x11, gid_v4(10, 0, 0, 1), gid_v4(10, 0, 0, 2));
    cases.push_back({"RC SEND IPv4", h, 37});
  }
  {
    Headers h = global(opcode(Transport::kRc, Op::kWriteOnly), 0x22, gid_v6(1), gid_v6(2));
    h.grh->flow_label = 0xABCDE;
    h.reth = Reth{0x7F0000001000, 0x1234, 64};
    cases.push_back({"RC WRITE IPv6", h, 64});
  }
  {
    Headers h = global(opcode(Transport::kUd, Op::kSendOnly), 0x33, gid_v4(10, 0, 0, 1), gid_v4(10, 0, 0, 2));
    h.deth = Deth{0x80010000, 0x44};
    cases.push_back({"UD SEND IPv4", h, 256});
  }
  {
    Headers h = global(opcode(Transport::kRc, Op::kAcknowledge), 0x55, gid_v6(1), gid_v6(2));
    h.aeth = Aeth::ack(9, 3);
    cases.push_back({"RC ACK IPv6", h, 0});
  }
  for (const auto& c : cases)
    for (std::optional<std::uint16_t> vlan : {std::optional<std::uint16_t>(), std::optional<std::uint16_t>(0xA064)}) {
      INFO(c.name << (vlan ? " VLAN" : ""));
      const auto pay = payload(c.len);
      const auto ib = must(build_packet(c.h, pay));
      const auto orig = must(parse_packet(ib));
      const auto frame = to_frame(ib, vlan);
      auto f = must(parse_roce_frame(frame));
      const Grh& g = *c.h.grh;
      CHECK(f.addr.ipv4 == is_ipv4_mapped(g.sgid));
      CHECK(f.addr.sgid == g.sgid);
      CHECK(f.addr.dgid == g.dgid);
      CHECK(f.addr.tclass == g.tclass);
      CHECK(f.addr.hop_limit == g.hop_lmt);
      CHECK(f.addr.flow_label == (f.addr.ipv4 ? 0 : g.flow_label));
      CHECK(f.addr.vlan_tci == vlan);
      CHECK(f.addr.dmac == kMacB);
      CHECK(f.addr.smac == kMacA);
      const std::uint32_t src_qp = c.h.deth ? c.h.deth->src_qp : 0;
      CHECK(f.addr.udp_sport == roce_udp_sport(g.flow_label, src_qp, c.h.bth.dest_qp));
      // The transport packet is the IBA packet's BTH .. pad, unchanged.
      CHECK(std::equal(f.transport.begin(), f.transport.end(), ib.begin() + 48, ib.end() - 6));

      std::vector<std::byte> back(f.transport.size() + kLrhBytes + kGrhBytes + 6);
      CHECK(must(roce_to_ib(f, 0x12, 0x34, back)) == back.size());
      auto p = must(parse_packet(back));  // both CRCs freshly computed
      CHECK(p.hdr.lrh.dlid == 0x12);
      CHECK(p.hdr.lrh.slid == 0x34);
      CHECK(p.hdr.lrh.vl == 0);
      CHECK(p.hdr.lrh.sl == (vlan ? 5 : 0));  // 802.1Q PCP
      REQUIRE(p.hdr.grh);
      Grh want = g;
      want.pay_len = p.hdr.grh->pay_len;
      if (f.addr.ipv4) want.flow_label = 0;
      CHECK(*p.hdr.grh == want);
      CHECK(std::size_t{p.hdr.grh->pay_len} == f.transport.size() + kIcrcBytes);
      CHECK(p.hdr.bth == orig.hdr.bth);  // build_packet set its PadCnt
      CHECK(p.hdr.reth == c.h.reth);
      CHECK(p.hdr.deth == c.h.deth);
      CHECK(p.hdr.aeth == c.h.aeth);
      // Recomputed, and yet the same: the IBA ICRC covers only what
      // crossed the Ethernet hop unchanged (IBA 7.8.1: the LRH and the
      // GRH's variant fields are masked).
      CHECK(p.icrc == orig.icrc);
      CHECK(std::equal(p.payload.begin(), p.payload.end(), pay.begin(), pay.end()));
    }
}

// simhca's sending path frames a packet where it was built: the same
// bytes as ib_to_roce's copy, for every kind of frame and payload size
// (short frames padded), and no room is refused.
TEST_CASE("ib_to_roce_in_place writes the frame ib_to_roce writes", "[wire][roce]") {
  std::vector<Headers> hs;
  hs.push_back(global(opcode(Transport::kRc, Op::kSendOnly), 0x11, gid_v4(10, 0, 0, 1), gid_v4(10, 0, 0, 2)));
  hs.push_back(global(opcode(Transport::kRc, Op::kWriteOnly), 0x22, gid_v6(1), gid_v6(2)));
  hs.back().grh->flow_label = 0x12345;
  hs.back().reth = Reth{0x7F0000001000, 0x1234, 64};
  hs.push_back(global(opcode(Transport::kUd, Op::kSendOnly), 0x33, gid_v4(10, 0, 0, 1), gid_v4(10, 0, 0, 2)));
  hs.back().deth = Deth{0x80010000, 0x44};
  for (const Headers& h : hs)
    for (std::size_t len : {std::size_t{0}, std::size_t{1}, std::size_t{37}, std::size_t{1024}})
      for (std::optional<std::uint16_t> vlan : {std::optional<std::uint16_t>(), std::optional<std::uint16_t>(0x2064)}) {
        INFO("opcode " << int(h.bth.opcode) << " payload " << len << (vlan ? " VLAN" : ""));
        const auto ib = must(build_packet(h, payload(len)));
        std::vector<std::byte> want(ib.size() + kMaxRoceOverheadBytes + kMinEthFrameBytes);
        const std::size_t n = must(ib_to_roce(ib, kMacB, kMacA, vlan, want));
        std::vector<std::byte> buf(kRoceInPlaceHeadroom + ib.size() + kMinEthFrameBytes, std::byte{0xEE});
        std::copy(ib.begin(), ib.end(), buf.begin() + kRoceInPlaceHeadroom);
        const auto f = must(ib_to_roce_in_place(buf, kRoceInPlaceHeadroom, ib.size(), kMacB, kMacA, vlan));
        REQUIRE(f.length == n);
        CHECK(std::equal(buf.begin() + f.offset, buf.begin() + f.offset + n, want.begin()));
        CHECK(parse_roce_frame(std::span(buf).subspan(f.offset, f.length)).ok());
      }
  const auto ib = must(build_packet(hs[0], payload(8)));
  std::vector<std::byte> buf(kRoceInPlaceHeadroom + ib.size() + kMinEthFrameBytes);
  std::copy(ib.begin(), ib.end(), buf.begin() + kRoceInPlaceHeadroom);
  CHECK(ib_to_roce_in_place(buf, kRoceInPlaceHeadroom - 1, ib.size(), kMacB, kMacA, {}).error().code == EINVAL);
  CHECK(ib_to_roce_in_place(std::span(buf).first(buf.size() - 1), kRoceInPlaceHeadroom, ib.size(), kMacB, kMacA, {})
            .error()
            .code == EINVAL);
}

TEST_CASE("ib_to_roce and roce_to_ib refuse what they cannot convert", "[wire][roce]") {
  Headers h = global(opcode(Transport::kRc, Op::kSendOnly), 0x11, gid_v4(10, 0, 0, 1), gid_v4(10, 0, 0, 2));
  auto ib = must(build_packet(h, payload(8)));
  std::vector<std::byte> out(ib.size() + kMaxRoceOverheadBytes);
  CHECK(ib_to_roce(ib, kMacB, kMacA, {}, std::span(out).first(ib.size() - 20)).error().code == EINVAL);
  auto bad = ib;
  set(bad, 5, at(bad, 5) + 1);  // LRH.PktLen one word too many
  CHECK(ib_to_roce(bad, kMacB, kMacA, {}, out).error().code == EINVAL);
  Headers local = h;
  local.grh.reset();
  auto lib = must(build_packet(local, payload(8)));
  CHECK(ib_to_roce(lib, kMacB, kMacA, {}, out).error().code == EINVAL);
  CHECK(ib_to_roce(std::span(ib).first(40), kMacB, kMacA, {}, out).error().code == EINVAL);

  RoceFrame f = must(parse_roce_frame(hex(kVecA)));
  std::vector<std::byte> small(f.transport.size() + 48 + 5);
  CHECK(roce_to_ib(f, 1, 2, small).error().code == EINVAL);
  // A jumbo frame's transport packet can exceed an IBA packet's PktLen.
  std::vector<std::byte> t(8200);
  t[0] = std::byte{0x04};
  RoceFrame j = f;
  j.transport = t;
  std::vector<std::byte> big(9000);
  CHECK(roce_to_ib(j, 1, 2, big).error().code == EMSGSIZE);
}

TEST_CASE("pcap_file_header and pcap_eth_record for Ethernet captures", "[wire][roce][pcap]") {
  auto h = pcap_file_header(kLinktypeEthernet);
  CHECK(h == hex("d4c3b2a1 0200 0400 00000000 00000000 ffff0000 01000000"));
  CHECK(pcap_file_header() == hex("d4c3b2a1 0200 0400 00000000 00000000 ffff0000 c5000000"));
  const auto f = hex(kVecA);
  const auto ts = CaptureClock::time_point(std::chrono::microseconds(1'700'000'000'123'456));
  auto r = pcap_eth_record(ts, f);
  REQUIRE(r.size() == 16 + f.size());
  CHECK(std::vector<std::byte>(r.begin(), r.begin() + 16) == hex("00f15365 40e20100 42000000 42000000"));
  CHECK(std::equal(r.begin() + 16, r.end(), f.begin(), f.end()));
}

TEST_CASE("tshark decodes RoCEv2 frames as InfiniBand over UDP 4791", "[wire][roce][tshark]") {
  int status = 0;
  openib::test::run_command("command -v tshark >/dev/null", status);
  if (status != 0) FAIL("tshark not found: it is a test prerequisite, installed by scripts/setup.sh");

  struct Sample {
    std::vector<std::byte> frame;
    std::string opcode, protocols;
  };
  std::vector<Sample> samples;
  const Gid s4 = gid_v4(10, 0, 0, 1), d4 = gid_v4(10, 0, 0, 2);
  {
    Headers h = global(opcode(Transport::kRc, Op::kSendOnly), 0x11, s4, d4);
    samples.push_back({to_frame(must(build_packet(h, payload(37)))), "4", "eth:ethertype:ip:udp:infiniband:data"});
  }
  {
    Headers h = global(opcode(Transport::kRc, Op::kWriteOnly), 0x22, gid_v6(1), gid_v6(2));
    h.grh->flow_label = 0x12345;
    h.reth = Reth{0x7F0000001000, 0x1234, 64};
    samples.push_back({to_frame(must(build_packet(h, payload(64))), 0x2005), "10",
                       "eth:ethertype:vlan:ethertype:ipv6:udp:infiniband:data"});
  }
  {
    Headers h = global(opcode(Transport::kUd, Op::kSendOnly), 0x33, s4, d4);
    h.deth = Deth{0x80010000, 0x44};
    samples.push_back({to_frame(must(build_packet(h, payload(21)))), "100", "eth:ethertype:ip:udp:infiniband:data"});
  }
  {
    Headers h = global(opcode(Transport::kRc, Op::kAcknowledge), 0x55, s4, d4);
    h.aeth = Aeth::ack(9, 3);
    samples.push_back({to_frame(must(build_packet(h, {}))), "17", "eth:ethertype:ip:udp:infiniband"});
  }
  {
    std::vector<std::byte> t = hex("0400ffff00000011 00000001");  // empty SEND: a padded 60-byte frame
    samples.push_back({build(addr_a(), t), "4", "eth:ethertype:ip:udp:infiniband"});
  }

  auto path = fs::temp_directory_path() / ("openib_roce_tshark_" + std::to_string(::getpid()) + ".pcap");
  {
    auto w = must(PcapEthWriter::open(path.string()));
    for (const auto& s : samples) REQUIRE(w->write(s.frame).ok());
    CHECK(w->records() == samples.size());
  }
  // RFC 6935/6936 let a tunnel over UDP/IPv6 send checksum 0, as RoCEv2
  // does (rxe); tshark calls it an error unless told so.
  const std::string tshark =
      openib::test::tshark_read(path.string()) + " -o udp.ignore_ipv6_zero_checksum:TRUE";

  SECTION("every frame is BTH over UDP 4791 with our OpCode, nothing malformed") {
    auto out = openib::test::run_command(tshark +
                                             " -T fields -E separator=, -e frame.protocols -e udp.dstport"
                                             " -e infiniband.bth.opcode -e _ws.malformed",
                                         status);
    INFO(out);
    REQUIRE(status == 0);
    std::vector<std::string> lines;
    for (std::size_t i = 0, j; i < out.size(); i = j + 1) {
      j = out.find('\n', i);
      if (j == std::string::npos) j = out.size();
      if (j > i) lines.push_back(out.substr(i, j - i));
    }
    REQUIRE(lines.size() == samples.size());
    for (std::size_t i = 0; i < samples.size(); ++i) {
      INFO("frame " << i + 1);
      CHECK(lines[i] == samples[i].protocols + ",4791," + samples[i].opcode + ",");
    }
  }
  SECTION("the decode is clean: no malformed packet, no expert info") {
    auto out = openib::test::run_command(tshark + " -V", status);
    INFO(out.substr(0, 6000));
    REQUIRE(status == 0);
    CHECK(out.find("Malformed") == std::string::npos);
    CHECK(out.find("Expert Info") == std::string::npos);
    for (const char* want : {"Reliable Connection (RC) - SEND Only", "RDMA WRITE Only",
                             "Unreliable Datagram (UD) - SEND only", "Acknowledge",
                             "DETH - Datagram Extended Transport Header",
                             "RETH - RDMA Extended Transport Header", "AETH - ACK Extended Transport Header",
                             "802.1Q Virtual LAN", "Internet Protocol Version 6"}) {
      INFO(want);
      CHECK(out.find(want) != std::string::npos);
    }
  }
  if (std::getenv("OPENIB_KEEP_PCAP"))
    WARN("capture kept at " << path.string());
  else
    fs::remove(path);
}
