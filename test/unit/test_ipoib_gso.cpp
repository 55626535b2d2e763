// The TAP's offloads done in userspace (src/ipoib_tap/gso.hpp): the
// virtio-net header read, partial checksums completed, TCP super-frames
// cut into segments as a NIC's TSO would (RFC 793 sequence numbers and
// flags, IPv4 identification and header checksum, IPv6 payload length,
// the TCP checksum over the pseudo-header), each checked here with a
// checksum and parser of the test's own; bad headers are refused whole.
#include <catch2/catch.hpp>

#include <random>

#include "ipoib_fixture.hpp"
#include "ipoib_tap/gso.hpp"

using namespace openib::test::ipoib;
using openib::ipoib::GsoVerdict;
using openib::ipoib::VnetHdr;

namespace {

std::uint16_t be16(const Bytes& b, std::size_t off) { return static_cast<std::uint16_t>(b[off] << 8 | b[off + 1]); }
std::uint32_t be32(const Bytes& b, std::size_t off) {
  return std::uint32_t{b[off]} << 24 | std::uint32_t{b[off + 1]} << 16 | std::uint32_t{b[off + 2]} << 8 | b[off + 3];
}
void put16(Bytes& b, std::size_t off, std::uint32_t v) {
  b[off] = static_cast<std::uint8_t>(v >> 8);
  b[off + 1] = static_cast<std::uint8_t>(v);
}
Bytes slice(const Bytes& b, std::size_t off, std::size_t n) { return Bytes(b.begin() + off, b.begin() + off + n); }

// RFC 1071, byte by byte: the folded sum (0xFFFF over a block whose checksum is right).
std::uint16_t folded(const Bytes& b, std::uint64_t s = 0) {
  for (std::size_t i = 0; i < b.size(); i += 2) s += static_cast<std::uint64_t>(b[i] << 8 | (i + 1 < b.size() ? b[i + 1] : 0));
  while (s >> 16) s = (s & 0xFFFF) + (s >> 16);
  return static_cast<std::uint16_t>(s);
}

const Bytes kEth4 = hx("020000000002 020000000001 0800");
const Bytes kEth6 = hx("020000000002 020000000001 86DD");
const Bytes kSrc4 = hx("C6120C01"), kDst4 = hx("C6120C02");  // 198.18.12.1 -> .2
const Bytes kSrc6 = hx("20010db8000c00000000000000000001"), kDst6 = hx("20010db8000c00000000000000000002");

Bytes pattern(std::size_t n) {
  Bytes p(n);
  for (std::size_t i = 0; i < n; ++i) p[i] = static_cast<std::uint8_t>(i * 7 + i / 251);
  return p;
}

// A TCP header with 12 bytes of options (NOP NOP timestamp: doff 8),
// sequence number `seq`, flags `flags`, checksum field left as given.
Bytes tcp_header(std::uint32_t seq, std::uint8_t flags) {
  Bytes t = hx("A1B2 1451");  // ports 41394 -> 5201
  for (int i = 0; i < 4; ++i) t.push_back(static_cast<std::uint8_t>(seq >> (24 - 8 * i)));
  t = cat({t, hx("00000001"), Bytes{0x80, flags}, hx("FFFF 0000 0000"), hx("0101080A0000000100000002")});
  return t;
}

// The kernel's super-frame: IPv4 (ID 0x1234, DF), the TCP header, `payload`.
Bytes tcp4_frame(std::uint32_t seq, std::uint8_t flags, const Bytes& payload) {
  const std::size_t total = 20 + 32 + payload.size();
  Bytes ip = cat({hx("4500"), Bytes{static_cast<std::uint8_t>(total >> 8), static_cast<std::uint8_t>(total)},
                  hx("1234 4000 4006 0000"), kSrc4, kDst4});
  return cat({kEth4, ip, tcp_header(seq, flags), payload});
}
// IPv6 with a hop-by-hop options header (8 bytes: PadN) before TCP.
Bytes tcp6_frame(std::uint32_t seq, std::uint8_t flags, const Bytes& payload) {
  const std::size_t plen = 8 + 32 + payload.size();
  Bytes ip = cat({hx("60000000"), Bytes{static_cast<std::uint8_t>(plen >> 8), static_cast<std::uint8_t>(plen)},
                  hx("0040"), kSrc6, kDst6, hx("0600 0104 00000000")});
  return cat({kEth6, ip, tcp_header(seq, flags), payload});
}

struct Run {
  GsoVerdict verdict;
  std::vector<Bytes> frames;
};
Run run(const VnetHdr& h, Bytes frame, std::uint32_t mtu) {
  Run r;
  std::vector<std::uint8_t> scratch;
  r.verdict = openib::ipoib::gso_segment(h, frame, mtu, scratch,
                                         [&](openib::ipoib::wire::Bytes f) { r.frames.emplace_back(f.begin(), f.end()); });
  return r;
}
VnetHdr gso(std::uint8_t type, std::uint16_t size) {
  VnetHdr h;
  h.flags = openib::ipoib::kVnetNeedsCsum;
  h.gso_type = type;
  h.gso_size = size;
  return h;
}

// What a receiver checks of one segment: the lengths, the checksums; the
// TCP payload is returned.
struct Seg {
  std::uint32_t seq;
  std::uint8_t flags;
  std::uint16_t id;
  Bytes payload;
};
Seg check_segment(const Bytes& f, bool v4, std::uint32_t mtu) {
  const std::size_t ip = 14, l4 = v4 ? 14 + 20 : 14 + 40 + 8;
  if (v4) {
    CHECK(be16(f, ip + 2) == f.size() - 14);
    CHECK(folded(slice(f, ip, 20)) == 0xFFFF);  // header checksum
    CHECK(be16(f, ip + 6) == 0x4000);           // DF kept
  } else {
    CHECK(be16(f, ip + 4) == f.size() - 14 - 40);
  }
  CHECK(f.size() - 14 <= mtu);
  const std::size_t len = f.size() - l4;
  std::uint64_t pseudo = 6 + len;
  for (const auto& a : v4 ? std::vector<Bytes>{kSrc4, kDst4} : std::vector<Bytes>{kSrc6, kDst6}) pseudo += folded(a);
  CHECK(folded(slice(f, l4, len), pseudo) == 0xFFFF);  // TCP checksum (RFC 793 §3.1)
  CHECK(slice(f, l4 + 20, 12) == hx("0101080A0000000100000002"));  // options on every segment
  return {be32(f, l4 + 4), f[l4 + 13], v4 ? be16(f, ip + 4) : std::uint16_t{0}, slice(f, l4 + 32, len - 32)};
}

}  // namespace

TEST_CASE("The virtio-net header is read little-endian; a short one is none", "[ipoib][gso]") {
  const auto h = openib::ipoib::parse_vnet_hdr(hx("01 81 4200 a805 2200 1000"));
  REQUIRE(h);
  CHECK(h->flags == 1);
  CHECK(h->gso_type == 0x81);
  CHECK(h->hdr_len == 0x42);
  CHECK(h->gso_size == 1448);
  CHECK(h->csum_start == 34);
  CHECK(h->csum_offset == 16);
  CHECK_FALSE(openib::ipoib::parse_vnet_hdr(hx("01 81 4200 a805 2200 10")));
}

TEST_CASE("ones_sum is RFC 1071's sum at any length and alignment", "[ipoib][gso]") {
  std::mt19937 rng(7);
  for (std::size_t n : {0u, 1u, 2u, 3u, 5u, 8u, 63u, 1500u, 65535u}) {
    Bytes b(n + 1);
    for (auto& x : b) x = static_cast<std::uint8_t>(rng());
    CHECK(openib::ipoib::ones_sum(Bytes(b.begin(), b.begin() + static_cast<long>(n))) ==
          folded(Bytes(b.begin(), b.begin() + static_cast<long>(n))));
    const Bytes odd(b.begin() + 1, b.end());  // not 4-byte aligned
    CHECK(openib::ipoib::ones_sum(odd, 0x1FFFE) == folded(odd, 0x1FFFE));
  }
  CHECK(openib::ipoib::ones_sum(hx("FFFF FFFF")) == 0xFFFF);
}

TEST_CASE("A TCPv4 super-frame is cut into MSS-sized segments a receiver accepts", "[ipoib][gso]") {
  const Bytes payload = pattern(5000);
  const std::uint32_t seq = 0xFFFFF000;  // wraps inside the frame (RFC 793 §3.3)
  const std::uint8_t flags = 0x80 | 0x10 | 0x08 | 0x01;  // CWR ACK PSH FIN
  auto r = run(gso(openib::ipoib::kGsoTcpv4 | openib::ipoib::kGsoEcn, 1448), tcp4_frame(seq, flags, payload), 2044);
  REQUIRE(r.verdict == GsoVerdict::ok);
  REQUIRE(r.frames.size() == 4);  // 1448 * 3 + 656
  Bytes joined;
  for (std::size_t i = 0; i < r.frames.size(); ++i) {
    INFO("segment " << i);
    CHECK(slice(r.frames[i], 0, 14) == kEth4);
    const auto s = check_segment(r.frames[i], true, 2044);
    CHECK(s.payload.size() == (i < 3 ? 1448u : 656u));
    CHECK(s.seq == static_cast<std::uint32_t>(seq + 1448 * i));
    CHECK(s.id == 0x1234 + i);
    CHECK(s.flags == (i == 0 ? 0x90 : i == 3 ? 0x19 : 0x10));  // CWR first; FIN, PSH last
    joined = cat({joined, s.payload});
  }
  CHECK(joined == payload);
}

TEST_CASE("The MTU caps the segment below gso_size; a frame within the MTU stays whole", "[ipoib][gso]") {
  const Bytes payload = pattern(9000);
  SECTION("MTU 1500: 1448-byte segments for a gso_size of 4000") {
    auto r = run(gso(openib::ipoib::kGsoTcpv4, 4000), tcp4_frame(1, 0x18, payload), 1500);
    REQUIRE(r.verdict == GsoVerdict::ok);
    REQUIRE(r.frames.size() == 7);
    for (const auto& f : r.frames) CHECK(f.size() <= 14 + 1500);
    CHECK(r.frames.back().size() == 14 + 52 + 9000 - 6 * 1448);
  }
  SECTION("connected mode's 65520, the MSS larger: one frame, flags and ID unchanged, checksum done") {
    auto r = run(gso(openib::ipoib::kGsoTcpv4, 65468), tcp4_frame(1, 0x19, payload), 65520);
    REQUIRE(r.verdict == GsoVerdict::ok);
    REQUIRE(r.frames.size() == 1);
    const auto s = check_segment(r.frames[0], true, 65520);
    CHECK(s.payload == payload);
    CHECK(s.flags == 0x19);
    CHECK(s.id == 0x1234);
  }
  SECTION("gso_size is the connection's MSS (RFC 9293 §3.7.1): kept below the MTU") {
    auto r = run(gso(openib::ipoib::kGsoTcpv4, 1448), tcp4_frame(1, 0x19, payload), 65520);
    REQUIRE(r.verdict == GsoVerdict::ok);
    CHECK(r.frames.size() == 7);
  }
}

TEST_CASE("A TCPv6 super-frame keeps its options header on every segment", "[ipoib][gso]") {
  const Bytes payload = pattern(4000);
  auto r = run(gso(openib::ipoib::kGsoTcpv6, 1940), tcp6_frame(100, 0x18, payload), 2044);
  REQUIRE(r.verdict == GsoVerdict::ok);
  REQUIRE(r.frames.size() == 3);  // mss min(1940, 2044 - 80 = 1964)
  Bytes joined;
  for (std::size_t i = 0; i < r.frames.size(); ++i) {
    INFO("segment " << i);
    CHECK(slice(r.frames[i], 14 + 40, 8) == hx("0600 0104 00000000"));
    const auto s = check_segment(r.frames[i], false, 2044);
    CHECK(s.seq == 100 + 1940 * i);
    CHECK(s.flags == (i == 2 ? 0x18 : 0x10));
    joined = cat({joined, s.payload});
  }
  CHECK(joined == payload);
}

TEST_CASE("A partial checksum is completed in place; without NEEDS_CSUM the frame passes untouched", "[ipoib][gso]") {
  // UDP 198.18.12.1:9 -> .2:9, 11 bytes: the field holds the pseudo-header's sum, as the kernel leaves it.
  const Bytes data = hx("68656c6c6f20776f726c64");
  Bytes udp = cat({hx("0009 0009 0013 0000"), data});
  const std::uint64_t pseudo = folded(kSrc4) + folded(kDst4) + 17 + udp.size();
  const Bytes ip = cat({hx("4500 0027 0001 4000 4011 0000"), kSrc4, kDst4});
  Bytes frame = cat({kEth4, ip, udp});
  put16(frame, 14 + 20 + 6, folded({}, pseudo));
  VnetHdr h;
  h.flags = openib::ipoib::kVnetNeedsCsum;
  h.csum_start = 34;
  h.csum_offset = 6;
  auto r = run(h, frame, 2044);
  REQUIRE(r.verdict == GsoVerdict::ok);
  REQUIRE(r.frames.size() == 1);
  CHECK(folded(slice(r.frames[0], 34, udp.size()), pseudo) == 0xFFFF);
  CHECK(slice(r.frames[0], 0, 34) == slice(frame, 0, 34));

  auto plain = run(VnetHdr{}, frame, 2044);
  REQUIRE(plain.frames.size() == 1);
  CHECK(plain.frames[0] == frame);
}

TEST_CASE("Bad offload headers are refused and nothing is emitted", "[ipoib][gso]") {
  using namespace openib::ipoib;
  const Bytes good = tcp4_frame(1, 0x10, pattern(3000));
  auto refused = [](const Run& r, GsoVerdict v) {
    CHECK(r.verdict == v);
    CHECK(r.frames.empty());
  };
  refused(run(gso(kGsoTcpv4, 0), good, 2044), GsoVerdict::malformed);          // gso_size 0
  refused(run(gso(kGsoTcpv6, 1448), good, 2044), GsoVerdict::malformed);       // IPv4 frame, TCPV6
  refused(run(gso(kGsoUdp, 1448), good, 2044), GsoVerdict::unsupported);       // UFO: not offered
  refused(run(gso(5, 1448), good, 2044), GsoVerdict::unsupported);             // USO: not offered
  refused(run(gso(kGsoTcpv4, 1448), good, 52), GsoVerdict::malformed);         // no room for payload
  refused(run(gso(kGsoTcpv4, 1448), slice(good, 0, 40), 2044), GsoVerdict::malformed);
  Bytes b = good;
  put16(b, 16, 4000);  // IP total length past the frame
  refused(run(gso(kGsoTcpv4, 1448), b, 2044), GsoVerdict::malformed);
  b = good;
  b[14 + 20 + 12] = 0x40;  // TCP data offset 4 words
  refused(run(gso(kGsoTcpv4, 1448), b, 2044), GsoVerdict::malformed);
  b = good;
  b[14 + 20 + 12] = 0xF0;  // 60 bytes of header: fits, parsed as options
  CHECK(run(gso(kGsoTcpv4, 1448), b, 2044).verdict == GsoVerdict::ok);
  b = good;
  put16(b, 14 + 6, 0x2000);  // MF: a fragment
  refused(run(gso(kGsoTcpv4, 1448), b, 2044), GsoVerdict::malformed);
  b = good;
  b[14 + 9] = 17;  // not TCP
  refused(run(gso(kGsoTcpv4, 1448), b, 2044), GsoVerdict::malformed);
  VnetHdr c;
  c.flags = kVnetNeedsCsum;
  c.csum_start = static_cast<std::uint16_t>(good.size() - 1);
  c.csum_offset = 0;
  refused(run(c, good, 2044), GsoVerdict::malformed);  // the field past the end
  c.csum_start = 34;
  c.csum_offset = 0xFFFF;
  refused(run(c, good, 2044), GsoVerdict::malformed);
}
