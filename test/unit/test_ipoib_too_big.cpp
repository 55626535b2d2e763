// "Packet too big" for the kernel (src/ipoib_tap/too_big.hpp): the ICMP
// "fragmentation needed" (RFC 792, RFC 1191) and ICMPv6 "packet too big"
// (RFC 4443 §3.2) frames the bridge writes into the TAP, read back here
// field by field with parsing of the test's own and by tshark (checksums
// verified), and the frames that must get no ICMP error at all (RFC 1122
// 3.2.2, RFC 4443 §2.4(e)).
#include <catch2/catch.hpp>

#include <filesystem>
#include <unistd.h>

#include "ipoib_fixture.hpp"
#include "ipoib_tap/too_big.hpp"
#include "sim/wire/pcap_erf.hpp"
#include "tshark.hpp"

using namespace openib::test::ipoib;

namespace {

const Bytes kKernelMac = hx("020000000001");  // the TAP's
const Bytes kPeerMac = hx("020000000002");    // a neighbour's, as the bridge gives it
const Bytes kKernelIp = hx("C6120C01"), kPeerIp = hx("C6120C02");  // 198.18.12.1, .2
const Bytes kKernelIp6 = hx("20010db8000c00000000000000000001"), kPeerIp6 = hx("20010db8000c00000000000000000002");

std::uint16_t be16(const Bytes& b, std::size_t off) { return static_cast<std::uint16_t>(b[off] << 8 | b[off + 1]); }
std::uint32_t be32(const Bytes& b, std::size_t off) {
  return std::uint32_t{b[off]} << 24 | std::uint32_t{b[off + 1]} << 16 | std::uint32_t{b[off + 2]} << 8 | b[off + 3];
}
Bytes slice(const Bytes& b, std::size_t off, std::size_t n) { return Bytes(b.begin() + off, b.begin() + off + n); }

// RFC 1071: the folded one's complement sum (0xFFFF over a block whose
// checksum is right).
std::uint16_t folded(const Bytes& b) {
  std::uint64_t s = 0;
  for (std::size_t i = 0; i < b.size(); i += 2) s += static_cast<std::uint64_t>(b[i] << 8 | (i + 1 < b.size() ? b[i + 1] : 0));
  while (s >> 16) s = (s & 0xFFFF) + (s >> 16);
  return static_cast<std::uint16_t>(s);
}

Bytes eth(const Bytes& dst, const Bytes& src, std::uint16_t type) {
  return cat({dst, src, Bytes{static_cast<std::uint8_t>(type >> 8), static_cast<std::uint8_t>(type)}});
}

// An IPv4 datagram: a 20-byte header (checksum set), then `l4` (its
// first byte at offset 20), `fill` bytes of a counting pattern after it.
Bytes ipv4(const Bytes& src, const Bytes& dst, std::uint8_t proto, const Bytes& l4, std::size_t fill,
           std::uint16_t flags_frag = 0x4000) {
  const std::size_t total = 20 + l4.size() + fill;
  Bytes h = {0x45, 0, static_cast<std::uint8_t>(total >> 8), static_cast<std::uint8_t>(total), 0x12, 0x34,
             static_cast<std::uint8_t>(flags_frag >> 8), static_cast<std::uint8_t>(flags_frag), 64, proto, 0, 0};
  h = cat({h, src, dst});
  const auto ck = static_cast<std::uint16_t>(~folded(h));
  h[10] = static_cast<std::uint8_t>(ck >> 8);
  h[11] = static_cast<std::uint8_t>(ck);
  Bytes p = cat({h, l4});
  for (std::size_t i = 0; i < fill; ++i) p.push_back(static_cast<std::uint8_t>(i * 7 + 3));
  return p;
}
// A UDP header (checksum 0: none, RFC 768) for `payload` bytes.
Bytes udp(std::size_t payload) {
  const std::size_t len = 8 + payload;
  return {0x9C, 0x40, 0x00, 0x09, static_cast<std::uint8_t>(len >> 8), static_cast<std::uint8_t>(len), 0, 0};
}
Bytes udp4_frame(std::size_t payload, const Bytes& src = kKernelIp, const Bytes& dst = kPeerIp) {
  return cat({eth(kPeerMac, kKernelMac, 0x0800), ipv4(src, dst, 17, udp(payload), payload)});
}

// An IPv6 packet: the header, then `after` (extension headers and the
// upper-layer header), `fill` bytes of a counting pattern after it.
Bytes ipv6(const Bytes& src, const Bytes& dst, std::uint8_t next, const Bytes& after, std::size_t fill) {
  const std::size_t len = after.size() + fill;
  Bytes p = {0x60, 0, 0, 0, static_cast<std::uint8_t>(len >> 8), static_cast<std::uint8_t>(len), next, 64};
  p = cat({p, src, dst, after});
  for (std::size_t i = 0; i < fill; ++i) p.push_back(static_cast<std::uint8_t>(i * 5 + 1));
  return p;
}
Bytes udp6_frame(std::size_t payload, const Bytes& src = kKernelIp6, const Bytes& dst = kPeerIp6) {
  return cat({eth(kPeerMac, kKernelMac, 0x86DD), ipv6(src, dst, 17, udp(payload), payload)});
}

// The answer's Ethernet header: from the frame's destination to its
// source, the frame's EtherType; an IP header and ICMP header after it.
void check_back_to_sender(const Bytes& frame, const Bytes& out, std::uint16_t ethertype, std::size_t ip_header) {
  REQUIRE(out.size() >= 14 + ip_header + 8);
  CHECK(slice(out, 0, 6) == slice(frame, 6, 6));
  CHECK(slice(out, 6, 6) == slice(frame, 0, 6));
  CHECK(be16(out, 12) == ethertype);
}

// The answer to a frame, checked as the kernel reads it: Ethernet back to
// the sender, IPv4 from the original destination to its source, ICMP 3/4
// with the MTU, both checksums right, the original's first bytes quoted,
// no more than 576 bytes of IP. Returns the quoted bytes.
Bytes check_icmp4(const Bytes& frame, const Bytes& out, std::uint32_t mtu) {
  check_back_to_sender(frame, out, 0x0800, 20);
  const Bytes ip(out.begin() + 14, out.end());
  CHECK(ip[0] == 0x45);
  CHECK(ip[1] == 0xC0);
  CHECK(be16(ip, 2) == ip.size());
  CHECK(ip.size() <= 576);
  CHECK((be16(ip, 6) & 0x1FFF) == 0);  // no fragment
  CHECK(ip[8] == 64);
  CHECK(ip[9] == 1);
  CHECK(folded(slice(ip, 0, 20)) == 0xFFFF);
  CHECK(slice(ip, 12, 4) == slice(frame, 14 + 16, 4));
  CHECK(slice(ip, 16, 4) == slice(frame, 14 + 12, 4));
  const Bytes icmp(ip.begin() + 20, ip.end());
  CHECK(icmp[0] == 3);
  CHECK(icmp[1] == 4);
  CHECK(folded(icmp) == 0xFFFF);
  CHECK(be16(icmp, 4) == 0);  // unused (RFC 1191 §4)
  CHECK(be16(icmp, 6) == mtu);
  const Bytes quoted(icmp.begin() + 8, icmp.end());
  const std::size_t orig_len = be16(frame, 14 + 2);
  CHECK(quoted.size() == std::min<std::size_t>(orig_len, 576 - 28));
  CHECK(quoted == slice(frame, 14, quoted.size()));
  return quoted;
}

// The same for IPv6: ICMPv6 2/0, the 32-bit MTU, hop limit 64, the
// checksum over the pseudo-header, at most 1280 bytes.
Bytes check_icmp6(const Bytes& frame, const Bytes& out, std::uint32_t mtu) {
  check_back_to_sender(frame, out, 0x86DD, 40);
  const Bytes ip(out.begin() + 14, out.end());
  CHECK(be32(ip, 0) == 0x60000000);
  CHECK(be16(ip, 4) == ip.size() - 40);
  CHECK(ip.size() <= 1280);
  CHECK(ip[6] == 58);
  CHECK(ip[7] == 64);
  CHECK(slice(ip, 8, 16) == slice(frame, 14 + 24, 16));
  CHECK(slice(ip, 24, 16) == slice(frame, 14 + 8, 16));
  CHECK(icmpv6_checksum_ok(ip));
  CHECK(ip[40] == 2);
  CHECK(ip[41] == 0);
  CHECK(be32(ip, 44) == mtu);
  const Bytes quoted(ip.begin() + 48, ip.end());
  const std::size_t orig_len = 40 + be16(frame, 14 + 4);
  CHECK(quoted.size() == std::min<std::size_t>(orig_len, 1280 - 48));
  CHECK(quoted == slice(frame, 14, quoted.size()));
  return quoted;
}

}  // namespace

TEST_CASE("A too big IPv4 datagram gets ICMP fragmentation needed with the path MTU, 576 bytes at most", "[ipoib-too-big]") {
  const Bytes frame = udp4_frame(4000);  // 4028 bytes of IP, DF
  auto out = icmp_too_big(frame, 2044);
  REQUIRE(out);
  check_icmp4(frame, *out, 2044);
  CHECK(out->size() == 14 + 576);

  // Without DF too (Linux's IPoIB answers regardless), and the path MTU
  // of connected mode's datagram-mode peer with a 4 KiB IB MTU.
  const Bytes no_df = cat({eth(kPeerMac, kKernelMac, 0x0800), ipv4(kKernelIp, kPeerIp, 17, udp(5000), 5000, 0)});
  auto out2 = icmp_too_big(no_df, 4092);
  REQUIRE(out2);
  check_icmp4(no_df, *out2, 4092);

  // A small original is quoted whole, without the Ethernet padding after it.
  Bytes small = udp4_frame(72);  // 100 bytes of IP
  small.insert(small.end(), 20, 0xEE);
  auto out3 = icmp_too_big(small, 68);
  REQUIRE(out3);
  CHECK(check_icmp4(small, *out3, 68).size() == 100);
  CHECK(out3->size() == 14 + 20 + 8 + 100);

  // The first fragment (MF, offset 0) and an ICMP echo request are answered.
  const Bytes first = cat({eth(kPeerMac, kKernelMac, 0x0800), ipv4(kKernelIp, kPeerIp, 17, udp(3000), 3000, 0x2000)});
  REQUIRE(icmp_too_big(first, 1500));
  const Bytes echo = cat({eth(kPeerMac, kKernelMac, 0x0800), ipv4(kKernelIp, kPeerIp, 1, hx("0800 0000 0001 0001"), 3000)});
  auto e = icmp_too_big(echo, 1500);
  REQUIRE(e);
  check_icmp4(echo, *e, 1500);
}

TEST_CASE("A too big IPv6 packet gets ICMPv6 packet too big with the MTU, 1280 bytes at most", "[ipoib-too-big]") {
  const Bytes frame = udp6_frame(4000);
  auto out = icmp_too_big(frame, 2044);
  REQUIRE(out);
  check_icmp6(frame, *out, 2044);
  CHECK(out->size() == 14 + 1280);

  // Past extension headers: hop-by-hop options (8 bytes: PadN), a first
  // fragment (offset 0, M set), an echo request behind destination options.
  const Bytes hbh = hx("11 00 0104 00000000");  // next UDP, length 0, PadN of 4
  const Bytes hbh_frame = cat({eth(kPeerMac, kKernelMac, 0x86DD), ipv6(kKernelIp6, kPeerIp6, 0, cat({hbh, udp(3000)}), 3000)});
  auto o1 = icmp_too_big(hbh_frame, 1500);
  REQUIRE(o1);
  check_icmp6(hbh_frame, *o1, 1500);
  const Bytes frag = hx("11 00 0001 12345678");  // next UDP, offset 0, M
  const Bytes frag_frame = cat({eth(kPeerMac, kKernelMac, 0x86DD), ipv6(kKernelIp6, kPeerIp6, 44, cat({frag, udp(3000)}), 3000)});
  REQUIRE(icmp_too_big(frag_frame, 1500));
  const Bytes dst_opts = hx("3A 00 0104 00000000");  // next ICMPv6
  const Bytes echo = cat({eth(kPeerMac, kKernelMac, 0x86DD),
                          ipv6(kKernelIp6, kPeerIp6, 60, cat({dst_opts, hx("8000 0000 0001 0001")}), 3000)});
  auto o2 = icmp_too_big(echo, 1500);
  REQUIRE(o2);
  check_icmp6(echo, *o2, 1500);
  // A packet smaller than 1232 bytes is quoted whole.
  const Bytes small = udp6_frame(1300);  // 1348 bytes of IP: quoted 1232
  auto o3 = icmp_too_big(small, 1280);
  REQUIRE(o3);
  CHECK(check_icmp6(small, *o3, 1280).size() == 1232);
}

TEST_CASE("No ICMP error where the RFCs forbid one, nor for what is not a too big IP packet", "[ipoib-too-big]") {
  // Not IP, no payload, or the frame cut anywhere (the header says more).
  CHECK_FALSE(icmp_too_big(Bytes{}, 1500));
  CHECK_FALSE(icmp_too_big(cat({eth(kPeerMac, kKernelMac, 0x0806), Bytes(4000, 0)}), 1500));
  for (const Bytes& whole : {udp4_frame(1600), udp6_frame(1600)})
    for (std::size_t n = 0; n < whole.size(); n += (n < 80 ? 1 : 97)) CHECK_FALSE(icmp_too_big(slice(whole, 0, n), 1280));
  // Fits the path, or an MTU no link of the version may have.
  CHECK_FALSE(icmp_too_big(udp4_frame(2016), 2044));  // exactly 2044
  REQUIRE(icmp_too_big(udp4_frame(2017), 2044));
  CHECK_FALSE(icmp_too_big(udp6_frame(1996), 2044));
  REQUIRE(icmp_too_big(udp6_frame(1997), 2044));
  CHECK_FALSE(icmp_too_big(udp4_frame(4000), 67));
  CHECK_FALSE(icmp_too_big(udp6_frame(4000), 1279));

  // IPv4 header nonsense: version, IHL below 5, total length below IHL.
  Bytes v = udp4_frame(3000);
  v[14] = 0x65;
  CHECK_FALSE(icmp_too_big(v, 1500));
  v[14] = 0x44;
  CHECK_FALSE(icmp_too_big(v, 1500));
  v = udp4_frame(3000);
  v[14 + 2] = 0;
  v[14 + 3] = 19;
  CHECK_FALSE(icmp_too_big(v, 1500));
  // IPv6 whose ethertype says so but the version does not.
  Bytes v6 = udp6_frame(3000);
  v6[14] = 0x40;
  CHECK_FALSE(icmp_too_big(v6, 1500));

  // RFC 1122 3.2.2: not about an ICMP error (destination unreachable,
  // time exceeded, an unknown type), nor an ICMP message too short to say.
  for (std::uint8_t type : {3, 4, 5, 11, 12, 42}) {
    const Bytes icmp = cat({eth(kPeerMac, kKernelMac, 0x0800),
                            ipv4(kKernelIp, kPeerIp, 1, Bytes{type, 0, 0, 0, 0, 0, 0, 0}, 3000)});
    INFO(int(type));
    CHECK_FALSE(icmp_too_big(icmp, 1500));
  }
  // Not about a later fragment.
  const Bytes later = cat({eth(kPeerMac, kKernelMac, 0x0800), ipv4(kKernelIp, kPeerIp, 17, udp(3000), 3000, 0x2000 | 185)});
  CHECK_FALSE(icmp_too_big(later, 1500));
  // Not about a source that is no single host, nor to a group.
  for (const char* src : {"00000000", "7F000001", "E0000001", "FFFFFFFF", "F0000001"}) {
    INFO(src);
    CHECK_FALSE(icmp_too_big(udp4_frame(3000, hx(src)), 1500));
  }
  for (const char* dst : {"E0000005", "EFFFFFFA", "FFFFFFFF"}) {
    INFO(dst);
    CHECK_FALSE(icmp_too_big(udp4_frame(3000, kKernelIp, hx(dst)), 1500));
  }
  Bytes bcast = udp4_frame(3000);
  std::fill(bcast.begin(), bcast.begin() + 6, 0xFF);  // a link-layer broadcast
  CHECK_FALSE(icmp_too_big(bcast, 1500));
  Bytes group_src = udp4_frame(3000);
  group_src[6] = 0x03;  // a multicast source MAC: nowhere to answer
  CHECK_FALSE(icmp_too_big(group_src, 1500));
  Bytes group_src6 = udp6_frame(3000);
  group_src6[6] = 0x33;
  CHECK_FALSE(icmp_too_big(group_src6, 1500));

  // RFC 4443 §2.4(e): not about an ICMPv6 error (types below 128), also
  // behind an extension header; not from ::, ::1 or a group; not to a group.
  for (std::uint8_t type : {1, 2, 3, 4, 100, 127}) {
    INFO(int(type));
    const Bytes e = cat({eth(kPeerMac, kKernelMac, 0x86DD), ipv6(kKernelIp6, kPeerIp6, 58, Bytes{type, 0, 0, 0, 0, 0, 0, 0}, 3000)});
    CHECK_FALSE(icmp_too_big(e, 1500));
    const Bytes behind = cat({eth(kPeerMac, kKernelMac, 0x86DD),
                              ipv6(kKernelIp6, kPeerIp6, 0, cat({hx("3A 00 0104 00000000"), Bytes{type, 0, 0, 0}}), 3000)});
    CHECK_FALSE(icmp_too_big(behind, 1500));
  }
  for (const char* src : {"00000000000000000000000000000000", "00000000000000000000000000000001",
                          "ff020000000000000000000000000001"}) {
    INFO(src);
    CHECK_FALSE(icmp_too_big(udp6_frame(3000, hx(src)), 1500));
  }
  CHECK_FALSE(icmp_too_big(udp6_frame(3000, kKernelIp6, hx("ff020000000000000000000000000001")), 1500));
  // A later IPv6 fragment; extension headers that run past the packet.
  const Bytes later6 = cat({eth(kPeerMac, kKernelMac, 0x86DD), ipv6(kKernelIp6, kPeerIp6, 44, hx("11 00 05A8 12345678"), 3000)});
  CHECK_FALSE(icmp_too_big(later6, 1500));
  const Bytes long_ext = cat({eth(kPeerMac, kKernelMac, 0x86DD), ipv6(kKernelIp6, kPeerIp6, 60, hx("11 FF 0104 00000000"), 1500)});
  CHECK_FALSE(icmp_too_big(long_ext, 1400));  // 2048 bytes of options in 1508
  const Bytes chain = cat({eth(kPeerMac, kKernelMac, 0x86DD), ipv6(kKernelIp6, kPeerIp6, 0, Bytes(1500, 0), 0)});
  CHECK_FALSE(icmp_too_big(chain, 1400));  // hop-by-hop headers to the end, no upper layer
  // The payload length beyond the frame.
  Bytes long6 = udp6_frame(3000);
  long6[14 + 4] = 0xFF;
  CHECK_FALSE(icmp_too_big(long6, 1500));
}

TEST_CASE("tshark reads the ICMP and ICMPv6 answers as fragmentation needed / packet too big, checksums good", "[ipoib-too-big][tshark]") {
  int status = 0;
  openib::test::run_command("command -v tshark >/dev/null", status);
  if (status != 0) FAIL("tshark not found: it is a test prerequisite, installed by scripts/setup.sh");
  const auto path = std::filesystem::temp_directory_path() / ("openib_too_big." + std::to_string(::getpid()) + ".pcap");
  struct Remove {
    std::filesystem::path p;
    ~Remove() { std::filesystem::remove(p); }
  } remove{path};
  {
    auto w = openib::sim::wire::PcapEthWriter::open(path.string());
    REQUIRE(w.ok());
    for (const auto& [frame, mtu] : {std::pair{udp4_frame(4000), 2044u}, std::pair{udp6_frame(4000), 1500u}}) {
      auto out = icmp_too_big(frame, mtu);
      REQUIRE(out);
      REQUIRE((*w)->write(std::as_bytes(std::span(*out))).ok());
    }
    REQUIRE((*w)->close().ok());
  }
  const std::string tshark = openib::test::tshark_read(path.string()) + " -o ip.check_checksum:TRUE";
  auto out = openib::test::run_command(
      tshark + " -T fields -E separator=, -E occurrence=f -e ip.checksum.status -e icmp.type -e icmp.code"
               " -e icmp.mtu -e icmp.checksum.status -e ipv6.hlim -e icmpv6.type -e icmpv6.code -e icmpv6.mtu"
               " -e icmpv6.checksum.status -e _ws.malformed",
      status);
  INFO(out);
  REQUIRE(status == 0);
  // checksum.status 1: "Good" (tshark's PROTO_CHECKSUM_E_GOOD).
  CHECK(out == "1,3,4,2044,1,,,,,,\n"
               ",,,,,64,2,0,1500,1,\n");
  auto expert = openib::test::run_command(tshark + " -q -z expert", status);
  INFO(expert);
  REQUIRE(status == 0);
  for (const char* sev : {"Errors (", "Warns ("}) CHECK(expert.find(sev) == std::string::npos);
}
