// simhca's Ethernet ports (docs/simhca.md §16, RoCEv2) in process: two
// device cores whose ports are Ethernet, cabled back to back by a
// LoopbackPair that carries Ethernet frames (LoopbackFraming::kEthernet),
// driven as test_transport.cpp drives InfiniBand ones.
//
// Addresses: each node's GID entry 1 is an IPv4-mapped RoCEv2 GID
// (::ffff:198.18.90.1 for a, .2 for b); every address vector has a GRH
// from that entry to the peer's, hop limit 64, and the peer port's MAC as
// dmac. The MAC is computed from the node GUID as §16.1 and
// ethernet_port.cpp make it (02, then the low 40 bits of node GUID + port);
// the first test checks that against what QUERY_PORT and GID 0 say (the
// port GUID is the MAC's EUI-64), so the other tests may rely on it.
#include <catch2/catch.hpp>
#include <cstring>

#include "sim/wire/packet.hpp"
#include "sim/wire/roce.hpp"
#include "transport_harness.hpp"

using namespace openib;
using namespace openib::test;
using Wr = Node::Wr;
namespace w = openib::sim::wire;

namespace {

// Host memory holds atomics' words in host order (as test_transport.cpp).
uint64_t word_at(std::span<const std::byte> m) {
  uint64_t v = 0;
  std::memcpy(&v, m.data(), 8);
  return v;
}
void set_word(std::span<std::byte> m, uint64_t v) { std::memcpy(m.data(), &v, 8); }

constexpr uint64_t kGuidA = 0x123400fffe000001ull;  // Caps' default node GUID
constexpr uint64_t kGuidB = 0x123400fffe000101ull;
// A RoCE address vector has no DLID (rdma-core leaves ah_attr.dlid 0 on
// Ethernet): a GRH instead.
constexpr uint16_t kRoceDlid = 0;

HcaOptions eth_opts(uint64_t guid, uint16_t eth_mtu = 1500) {
  HcaOptions o;
  o.link_layer = kLinkLayerEthernet;
  o.caps.node_guid = guid;
  o.eth_mtu = eth_mtu;
  return o;
}

// §16.1: 02, then the low 40 bits of node GUID + port number.
w::Mac mac_of(uint64_t node_guid, uint8_t port = 1) {
  const uint64_t b = node_guid + port;
  return {0x02, uint8_t(b >> 32), uint8_t(b >> 24), uint8_t(b >> 16), uint8_t(b >> 8), uint8_t(b)};
}

// RFC 4291 2.5.5.2: ::ffff:198.18.90.<host> (or any IPv4 address).
std::array<uint8_t, 16> ip_gid(uint8_t a, uint8_t b, uint8_t c, uint8_t d) {
  std::array<uint8_t, 16> g{};
  g[10] = g[11] = 0xff;
  g[12] = a;
  g[13] = b;
  g[14] = c;
  g[15] = d;
  return g;
}
std::array<uint8_t, 16> ip_gid(uint8_t host) { return ip_gid(198, 18, 90, host); }

void fill(std::span<std::byte> s, uint32_t seed) {
  uint32_t x = seed * 2654435761u + 1;
  for (auto& b : s) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    b = std::byte(static_cast<uint8_t>(x));
  }
}

bool same(std::span<const std::byte> a, std::span<const std::byte> b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin());
}

template <size_t N>
std::array<uint8_t, N> bytes_at(std::span<const std::byte> s, size_t at) {
  std::array<uint8_t, N> a{};
  for (size_t i = 0; i < N; ++i) a[i] = static_cast<uint8_t>(s[at + i]);
  return a;
}

Bytes query_port(Node& n, uint8_t port = 1) {
  Bytes in(4);
  put8(in, 0, port);
  return n.cmd(kOpQueryPort, in);
}

std::pair<uint8_t, std::array<uint8_t, 16>> query_gid(Node& n, uint16_t index) {
  Bytes in(4);
  put8(in, 0, 1);
  put16(in, 2, index);
  Bytes out = n.cmd(kOpQueryGid, in);
  return {get8(out, 0), bytes_at<16>(out, 4)};
}

void set_gid(Node& n, uint16_t index, uint8_t type, const std::array<uint8_t, 16>& gid, uint8_t want = kOk) {
  Bytes in(24);
  put8(in, 0, 1);
  put8(in, 1, type);
  put16(in, 2, index);
  for (size_t i = 0; i < 16; ++i) put8(in, 8 + i, gid[i]);
  n.cmd(kOpSetGid, in, want);
}

void attach_mcg(Node& n, uint32_t qpn, uint16_t mlid, const std::array<uint8_t, 16>& mgid, uint8_t want = kOk) {
  Bytes in(24);
  put32(in, 0, qpn);
  put16(in, 6, mlid);
  for (size_t i = 0; i < 16; ++i) put8(in, 8 + i, mgid[i]);
  n.cmd(kOpAttachMcg, in, want);
}

struct Frame {
  bool to_b = false;
  std::vector<std::byte> bytes;
};

// Two Ethernet nodes back to back, each with its IPv4 GID in entry 1; every
// frame the pair delivers is kept in `frames`.
struct Roce {
  explicit Roce(uint16_t eth_mtu = 1500)
      : w(eth_opts(kGuidA, eth_mtu), eth_opts(kGuidB, eth_mtu), sim::LoopbackFraming::kEthernet) {
    set_gid(w.a, 1, kGidTypeRoceV2, ip_gid(1));
    set_gid(w.b, 1, kGidTypeRoceV2, ip_gid(2));
    w.tap = [this](bool to_b, std::span<const std::byte> f) { frames.push_back({to_b, {f.begin(), f.end()}}); };
  }
  Node& node(bool b) { return b ? w.b : w.a; }
  // A GRH from entry 1 to the other node's IPv4 GID and MAC.
  static Node::Grh grh_to(bool to_b) {
    Node::Grh g;
    g.sgid_index = 1;
    g.hop_limit = 64;
    g.dgid = ip_gid(to_b ? 2 : 1);
    g.dmac = mac_of(to_b ? kGuidB : kGuidA);
    return g;
  }
  std::vector<Cqe> wait(Node& n, size_t count, std::chrono::milliseconds limit = std::chrono::seconds(10)) {
    std::vector<Cqe> got;
    w.run([&] {
      for (auto& c : n.poll(n.cq)) got.push_back(c);
      return got.size() >= count;
    }, limit);
    return got;
  }
  // Lets the devices run for a while (timers included); the CQEs that came.
  std::vector<Cqe> settle(Node& n) {
    w.run([] { return false; }, std::chrono::milliseconds(5));
    return n.poll(n.cq);
  }
  Wire w;
  std::vector<Frame> frames;
};

// An RC pair a <-> b with path MTU 1024 (the ports' active MTU at the
// default IP MTU; or as given) and a 1 MiB region on each side.
struct RcPair : Roce {
  explicit RcPair(uint8_t path_mtu = 3, uint16_t eth_mtu = 1500) : Roce(eth_mtu) {
    qa = w.a.create_qp(kQpRc);
    qb = w.b.create_qp(kQpRc);
    Node::Path pa, pb;
    pa.mtu = pb.mtu = path_mtu;
    pa.dlid = pb.dlid = kRoceDlid;
    pa.grh = grh_to(true);
    pb.grh = grh_to(false);
    pa.dest_qpn = qb.qpn;
    pb.dest_qpn = qa.qpn;
    pa.psn = 0x100;
    pb.psn = 0x100;
    w.a.connect(qa, pa);
    w.b.connect(qb, pb);
    const uint32_t all = kMrLocalWrite | kMrRemoteWrite | kMrRemoteRead | kMrRemoteAtomic;
    buf_a = w.a.alloc(kBuf, 4096);
    buf_b = w.b.alloc(kBuf, 4096);
    key_a = w.a.reg_mr(buf_a, kBuf, all);
    key_b = w.b.reg_mr(buf_b, kBuf, all);
  }
  // SEND of `len` bytes a -> b into a fresh receive; checks both CQEs and the data.
  void send_ok(uint32_t len, uint64_t id) {
    INFO("SEND of " << len << " bytes");
    fill(w.a.mem(buf_a, len), len + 7);
    std::fill_n(w.b.mem(buf_b, len + 1).begin(), len + 1, std::byte{0xee});
    w.b.post_recv(qb, id, {{len + 64, key_b, Node::va(buf_b)}});
    Wr s;
    s.wr_id = id;
    s.sges = {{len, key_a, Node::va(buf_a)}};
    w.a.post_send(qa, s);
    auto rx = wait(w.b, 1);
    auto tx = wait(w.a, 1);
    REQUIRE(rx.size() == 1);
    REQUIRE(tx.size() == 1);
    CHECK(tx[0].status == kWcSuccess);
    CHECK(tx[0].opcode == kWcSend);
    CHECK(rx[0].status == kWcSuccess);
    CHECK(rx[0].opcode == kWcRecv);
    CHECK(rx[0].wr_id == id);
    CHECK(rx[0].qpn == qb.qpn);
    CHECK(rx[0].byte_len == len);
    CHECK(same(w.b.mem(buf_b, len), w.a.mem(buf_a, len)));
    CHECK(w.b.mem(buf_b + len, 1)[0] == std::byte{0xee});
  }
  static constexpr size_t kBuf = 1u << 20;
  TQp qa, qb;
  uint64_t buf_a = 0, buf_b = 0;
  uint32_t key_a = 0, key_b = 0;
};

// A UD QP on each node, Q_Key 0x11111111, with an AH towards the other.
struct UdPair : Roce {
  UdPair() {
    qa = w.a.create_qp(kQpUd);
    qb = w.b.create_qp(kQpUd);
    Node::Path p;
    p.qkey = kQkey;
    w.a.connect(qa, p);
    w.b.connect(qb, p);
    buf_a = w.a.alloc(8192, 4096);
    buf_b = w.b.alloc(8192, 4096);
    key_a = w.a.reg_mr(buf_a, 8192, kMrLocalWrite);
    key_b = w.b.reg_mr(buf_b, 8192, kMrLocalWrite);
    ah_a = w.a.create_ah(kRoceDlid, grh_to(true));
    ah_b = w.b.create_ah(kRoceDlid, grh_to(false));
  }
  static constexpr uint32_t kQkey = 0x11111111;
  TQp qa, qb;
  uint64_t buf_a = 0, buf_b = 0;
  uint32_t key_a = 0, key_b = 0, ah_a = 0, ah_b = 0;
};

// The transport packet (BTH..pad) of a frame, and a frame rebuilt from it.
std::vector<std::byte> transport_of(const w::RoceFrame& f) { return {f.transport.begin(), f.transport.end()}; }
std::vector<std::byte> rebuild(const w::RoceAddress& a, std::span<const std::byte> transport) {
  std::vector<std::byte> out(w::roce_frame_bytes(a, transport.size()));
  auto n = w::build_roce_frame(a, transport, out);
  REQUIRE(n.ok());
  out.resize(*n);
  return out;
}
uint32_t bth_psn(std::span<const std::byte> t) {
  return (uint32_t(uint8_t(t[9])) << 16) | (uint32_t(uint8_t(t[10])) << 8) | uint8_t(t[11]);
}
void set_bth_psn(std::span<std::byte> t, uint32_t psn) {
  t[9] = std::byte(uint8_t(psn >> 16));
  t[10] = std::byte(uint8_t(psn >> 8));
  t[11] = std::byte(uint8_t(psn));
}
void set_bth_dest_qp(std::span<std::byte> t, uint32_t qpn) {
  t[5] = std::byte(uint8_t(qpn >> 16));
  t[6] = std::byte(uint8_t(qpn >> 8));
  t[7] = std::byte(uint8_t(qpn));
}

}  // namespace

TEST_CASE("RoCE port: QUERY_PORT, GID 0 from the MAC, and what an Ethernet port refuses", "[roce-port]") {
  Roce r;
  for (bool is_b : {false, true}) {
    Node& n = r.node(is_b);
    INFO("node " << (is_b ? "b" : "a"));
    const Bytes p = query_port(n);
    CHECK(get8(p, 0x26) == kLinkLayerEthernet);
    CHECK(get8(p, 0x00) == 4);  // Active as soon as the cable is attached: no subnet manager
    CHECK(get8(p, 0x01) == 5);  // LinkUp
    CHECK(get16(p, 0x02) == 0);  // no LID
    CHECK(get8(p, 0x09) == 3);   // active MTU 1024
    // The port GUID is the EUI-64 of the MAC (RFC 4291 2.5.1), the MAC
    // the one §16.1 derives from the node GUID.
    const w::Mac mac = mac_of(is_b ? kGuidB : kGuidA);
    const uint64_t eui = (uint64_t(mac[0] ^ 0x02) << 56) | (uint64_t(mac[1]) << 48) | (uint64_t(mac[2]) << 40) |
                         (uint64_t{0xfffe} << 24) | (uint64_t(mac[3]) << 16) | (uint64_t(mac[4]) << 8) | mac[5];
    CHECK(get64(p, 0x18) == eui);
    // GID 0: fe80::<EUI-64>, type RoCEv2.
    auto [type0, gid0] = query_gid(n, 0);
    CHECK(type0 == kGidTypeRoceV2);
    const std::array<uint8_t, 16> ll{0xfe, 0x80, 0, 0, 0, 0, 0, 0, uint8_t(mac[0] ^ 0x02), mac[1], mac[2], 0xff,
                                     0xfe, mac[3], mac[4], mac[5]};
    CHECK(gid0 == ll);
    // GID 1: the IPv4 address written by the fixture.
    auto [type1, gid1] = query_gid(n, 1);
    CHECK(type1 == kGidTypeRoceV2);
    CHECK(gid1 == ip_gid(is_b ? 2 : 1));
  }
  CHECK(mac_of(kGuidA) != mac_of(kGuidB));
  // An IB GID on an Ethernet port: BAD_PARAM 5; nothing written.
  {
    Bytes in(24);
    put8(in, 0, 1);
    put8(in, 1, kGidTypeIb);
    put16(in, 2, 2);
    put8(in, 8, 0xfe);
    put8(in, 9, 0x80);
    put8(in, 23, 9);
    Bytes out;
    Outcome o = r.w.a.hca.execute(kOpSetGid, in, out);
    CHECK(o.status == kBadParam);
    CHECK(o.syndrome == 5);
    CHECK(query_gid(r.w.a, 2).first == kGidTypeNone);
  }
  // SET_PORT with a LID (or a state): BAD_PARAM 12; the MTU alone is allowed.
  for (uint8_t sel : {uint8_t(kSelLid), uint8_t(kSelState), uint8_t(kSelLid | kSelMtu)}) {
    Bytes in(24);
    put8(in, 0, 1);
    put8(in, 1, sel);
    put8(in, 2, 4);
    put16(in, 4, 7);
    put8(in, 8, 2);
    Bytes out;
    Outcome o = r.w.a.hca.execute(kOpSetPort, in, out);
    INFO("select " << int(sel));
    CHECK(o.status == kBadParam);
    CHECK(o.syndrome == 12);
  }
  CHECK(get16(query_port(r.w.a), 0x02) == 0);
  CHECK(get8(query_port(r.w.a), 0x09) == 3);
  // QP0 (SMI) does not exist on RoCE: CREATE_QP refused; GSI is fine.
  {
    Bytes in(64);
    put8(in, 0, kQpSmi);
    put8(in, 1, 1);
    put32(in, 4, r.w.a.pd);
    put32(in, 8, r.w.a.cq.cqn);
    put32(in, 0x0c, r.w.a.cq.cqn);
    put64(in, 0x18, r.w.a.alloc(64 << 7));
    put64(in, 0x20, r.w.a.alloc(64 << 7));
    put64(in, 0x28, r.w.a.alloc(8, 8));
    put8(in, 0x30, 6);
    put8(in, 0x31, 7);
    put8(in, 0x32, 6);
    put8(in, 0x33, 7);
    Bytes out;
    Outcome o = r.w.a.hca.execute(kOpCreateQp, in, out);
    CHECK(o.status == kBadParam);
    CHECK(o.syndrome == 2);
    put8(in, 0, kQpGsi);
    o = r.w.a.hca.execute(kOpCreateQp, in, out);
    CHECK(o.status == kOk);
  }
}

// §6.3/§16.1: the MTU is what SET_PORT may still set on an Ethernet port
// (Active with LID 0, which an InfiniBand port may not be).
TEST_CASE("RoCE port: SET_PORT of the MTU alone on an Ethernet port", "[roce-port]") {
  Roce r;
  Bytes in(24);
  put8(in, 0, 1);
  put8(in, 1, kSelMtu);
  put8(in, 8, 2);
  r.w.a.cmd(kOpSetPort, in);
  CHECK(get8(query_port(r.w.a), 0x09) == 2);
  CHECK(get8(query_port(r.w.a), 0x00) == 4);
}

TEST_CASE("RoCE port: RC SEND across the 1024-byte MTU, WRITE, READ, atomics, byte for byte", "[roce-port]") {
  RcPair c;
  uint64_t id = 0;
  for (uint32_t len : {1u, 1023u, 1024u, 1025u, 3000u, 4096u, 10000u}) c.send_ok(len, ++id);
  // Multi-packet messages went as several frames of at most 1024 bytes of payload.
  size_t most = 0;
  for (const Frame& f : c.frames) {
    auto p = w::parse_roce_frame(f.bytes);
    REQUIRE(p.ok());
    most = std::max(most, p->transport.size());
  }
  CHECK(most > 1024);            // BTH + 1024 bytes
  CHECK(most <= 12 + 1024 + 4);  // never more than an MTU of payload

  // RDMA WRITE of 5000 bytes into b at an offset.
  const uint32_t len = 5000;
  auto src = c.w.a.mem(c.buf_a, len);
  fill(src, 99);
  Wr wr;
  wr.opcode = kWrWrite;
  wr.wr_id = ++id;
  wr.sges = {{len, c.key_a, Node::va(c.buf_a)}};
  wr.remote_va = Node::va(c.buf_b) + 8;
  wr.rkey = c.key_b;
  c.w.a.post_send(c.qa, wr);
  auto tx = c.wait(c.w.a, 1);
  REQUIRE(tx.size() == 1);
  CHECK(tx[0].status == kWcSuccess);
  CHECK(tx[0].opcode == kWcRdmaWrite);
  CHECK(same(c.w.b.mem(c.buf_b + 8, len), src));
  // RDMA READ of it back into a's upper half.
  Wr rd;
  rd.opcode = kWrRead;
  rd.wr_id = ++id;
  rd.sges = {{len, c.key_a, Node::va(c.buf_a + (512u << 10))}};
  rd.remote_va = Node::va(c.buf_b) + 8;
  rd.rkey = c.key_b;
  c.w.a.post_send(c.qa, rd);
  tx = c.wait(c.w.a, 1);
  REQUIRE(tx.size() == 1);
  CHECK(tx[0].status == kWcSuccess);
  CHECK(tx[0].opcode == kWcRdmaRead);
  CHECK(tx[0].byte_len == len);
  CHECK(same(c.w.a.mem(c.buf_a + (512u << 10), len), src));
  // FETCH_ADD and CMP_SWAP on an 8-byte word of b.
  const uint64_t target = c.buf_b + 64 * 1024;
  set_word(c.w.b.mem(target, 8), 1000);
  Wr fa;
  fa.opcode = kWrFetchAdd;
  fa.wr_id = ++id;
  fa.swap_add = 234;
  fa.remote_va = Node::va(target);
  fa.rkey = c.key_b;
  fa.sges = {{8, c.key_a, Node::va(c.buf_a + 128)}};
  c.w.a.post_send(c.qa, fa);
  tx = c.wait(c.w.a, 1);
  REQUIRE(tx.size() == 1);
  CHECK(tx[0].status == kWcSuccess);
  CHECK(tx[0].opcode == kWcFetchAdd);
  CHECK(word_at(c.w.a.mem(c.buf_a + 128, 8)) == 1000);
  CHECK(word_at(c.w.b.mem(target, 8)) == 1234);
  Wr cs = fa;
  cs.opcode = kWrCmpSwap;
  cs.wr_id = ++id;
  cs.compare = 1234;
  cs.swap_add = 0x5555;
  cs.sges = {{8, c.key_a, Node::va(c.buf_a + 136)}};
  c.w.a.post_send(c.qa, cs);
  tx = c.wait(c.w.a, 1);
  REQUIRE(tx.size() == 1);
  CHECK(tx[0].status == kWcSuccess);
  CHECK(tx[0].opcode == kWcCompSwap);
  CHECK(word_at(c.w.a.mem(c.buf_a + 136, 8)) == 1234);
  CHECK(word_at(c.w.b.mem(target, 8)) == 0x5555);
  // Nothing dropped on the way.
  const DataStats sa = c.w.a.hca.data_stats(), sb = c.w.b.hca.data_stats();
  CHECK(sa.rx_bad_icrc + sb.rx_bad_icrc + sa.rx_bad_addr + sb.rx_bad_addr + sa.tx_not_framed + sb.tx_not_framed == 0);
}

TEST_CASE("RoCE port: UD SEND both ways with Q_Key; the GRH carries the sender's IP GID", "[roce-port]") {
  UdPair u;
  for (bool to_b : {true, false}) {
    INFO((to_b ? "a -> b" : "b -> a"));
    Node& from = u.node(!to_b);
    Node& to = u.node(to_b);
    TQp& qs = to_b ? u.qa : u.qb;
    TQp& qr = to_b ? u.qb : u.qa;
    const uint64_t sbuf = to_b ? u.buf_a : u.buf_b, rbuf = to_b ? u.buf_b : u.buf_a;
    const uint32_t skey = to_b ? u.key_a : u.key_b, rkey = to_b ? u.key_b : u.key_a;
    for (uint32_t len : {0u, 1u, 700u, 1024u}) {
      INFO("length " << len);
      fill(from.mem(sbuf, len), len + 3);
      std::fill_n(to.mem(rbuf, 40 + len).begin(), 40 + len, std::byte{0});
      to.post_recv(qr, 500 + len, {{4096 + 40, rkey, Node::va(rbuf)}});
      Wr s;
      s.opcode = kWrSendImm;
      s.imm = 0xa0b0c0d0;
      s.ahn = to_b ? u.ah_a : u.ah_b;
      s.dest_qpn = qr.qpn;
      s.qkey = UdPair::kQkey;
      s.sges = {{len, skey, Node::va(sbuf)}};
      from.post_send(qs, s);
      auto rx = u.wait(to, 1);
      REQUIRE(rx.size() == 1);
      CHECK(rx[0].status == kWcSuccess);
      CHECK(rx[0].opcode == kWcRecv);
      CHECK(rx[0].wr_id == 500 + len);
      CHECK(rx[0].qpn == qr.qpn);
      CHECK(rx[0].src_qp == qs.qpn);
      CHECK(rx[0].byte_len == len + 40);
      CHECK(rx[0].imm == 0xa0b0c0d0);
      CHECK((rx[0].flags & kCqeFlagGrh) != 0);
      CHECK((rx[0].flags & kCqeFlagImm) != 0);
      // The GRH area: IPVer 6, SGID the sender's IPv4 GID, DGID ours.
      auto grh = to.mem(rbuf, 40);
      CHECK((uint8_t(grh[0]) >> 4) == 6);
      CHECK(bytes_at<16>(grh, 8) == ip_gid(to_b ? 1 : 2));
      CHECK(bytes_at<16>(grh, 24) == ip_gid(to_b ? 2 : 1));
      CHECK(same(to.mem(rbuf + 40, len), from.mem(sbuf, len)));
      auto tx = u.wait(from, 1);
      REQUIRE(tx.size() == 1);
      CHECK(tx[0].status == kWcSuccess);
    }
  }
  // A wrong Q_Key: dropped and counted, the receive WQE left for the next.
  u.w.b.post_recv(u.qb, 77, {{4096 + 40, u.key_b, Node::va(u.buf_b)}});
  Wr s;
  s.ahn = u.ah_a;
  s.dest_qpn = u.qb.qpn;
  s.qkey = 0x22222222;
  s.sges = {{10, u.key_a, Node::va(u.buf_a)}};
  u.w.a.post_send(u.qa, s);
  CHECK(u.settle(u.w.b).empty());
  CHECK(u.w.b.hca.data_stats().rx_bad_qkey == 1);
  s.qkey = UdPair::kQkey;
  u.w.a.post_send(u.qa, s);
  auto rx = u.wait(u.w.b, 1);
  REQUIRE(rx.size() == 1);
  CHECK(rx[0].wr_id == 77);
}

TEST_CASE("RoCE port: every frame on the wire is RoCEv2 over IPv4 between the two MACs", "[roce-port]") {
  RcPair c;
  c.send_ok(3000, 1);
  Wr rd;  // a READ: responses from b
  rd.opcode = kWrRead;
  rd.sges = {{2500, c.key_a, Node::va(c.buf_a + 8192)}};
  rd.remote_va = Node::va(c.buf_b);
  rd.rkey = c.key_b;
  c.w.a.post_send(c.qa, rd);
  REQUIRE(c.wait(c.w.a, 1).size() == 1);
  // And a UD pair on the same nodes.
  TQp ua = c.w.a.create_qp(kQpUd), ub = c.w.b.create_qp(kQpUd);
  c.w.a.connect(ua, {});
  c.w.b.connect(ub, {});
  const uint32_t ah = c.w.a.create_ah(kRoceDlid, Roce::grh_to(true));
  c.w.b.post_recv(ub, 9, {{4096, c.key_b, Node::va(c.buf_b)}});
  Wr s;
  s.ahn = ah;
  s.dest_qpn = ub.qpn;
  s.qkey = 0x11111111;
  s.sges = {{100, c.key_a, Node::va(c.buf_a)}};
  c.w.a.post_send(ua, s);
  REQUIRE(c.wait(c.w.b, 1).size() == 1);

  size_t to_b = 0, to_a = 0, ud = 0;
  for (const Frame& f : c.frames) {
    INFO("frame " << (&f - c.frames.data()) << (f.to_b ? " a -> b" : " b -> a") << ", " << f.bytes.size() << " bytes");
    auto p = w::parse_roce_frame(f.bytes);  // checks the ICRC and the IPv4 checksum
    REQUIRE(p.ok());
    CHECK(p->addr.ipv4);
    CHECK(!p->addr.vlan_tci);
    // Ethernet II, IPv4, UDP to 4791, read from the bytes themselves.
    CHECK(uint8_t(f.bytes[12]) == 0x08);  // EtherType IPv4
    CHECK(uint8_t(f.bytes[13]) == 0x00);
    CHECK(uint8_t(f.bytes[14]) == 0x45);       // IPv4, no options
    CHECK(uint8_t(f.bytes[14 + 9]) == 17);     // UDP
    CHECK(uint8_t(f.bytes[14 + 20 + 2]) == (w::kRoceV2UdpPort >> 8));  // destination port 4791
    CHECK(uint8_t(f.bytes[14 + 20 + 3]) == (w::kRoceV2UdpPort & 0xff));
    ++(f.to_b ? to_b : to_a);
    CHECK(p->addr.dmac == mac_of(f.to_b ? kGuidB : kGuidA));
    CHECK(p->addr.smac == mac_of(f.to_b ? kGuidA : kGuidB));
    CHECK(p->addr.sgid == ip_gid(f.to_b ? 1 : 2));
    CHECK(p->addr.dgid == ip_gid(f.to_b ? 2 : 1));
    CHECK(p->addr.hop_limit == 64);
    CHECK(p->addr.udp_sport >= 0xc000);
    if (w::opcode_transport(uint8_t(p->transport[0])) == w::Transport::kUd) ++ud;
  }
  CHECK(to_b >= 4);  // 3 SEND packets, the READ request, the UD SEND
  CHECK(to_a >= 4);  // ACKs and 3 READ responses
  CHECK(ud == 1);
  CHECK(c.w.pair->a().stats().rx_dropped_malformed + c.w.pair->b().stats().rx_dropped_malformed == 0);
}

TEST_CASE("RoCE port: hostile frames are counted and dropped; the connection survives", "[roce-port]") {
  RcPair c;
  c.send_ok(100, 1);
  // The SEND's frame, a -> b: the model for the forged ones.
  const Frame* good = nullptr;
  for (const Frame& f : c.frames)
    if (f.to_b) good = &f;
  REQUIRE(good != nullptr);
  const std::vector<std::byte> model = good->bytes;
  auto parsed = w::parse_roce_frame(model);
  REQUIRE(parsed.ok());
  const w::RoceAddress addr = parsed->addr;
  const std::vector<std::byte> transport = transport_of(*parsed);
  const uint32_t next_psn = (bth_psn(transport) + 1) & 0xffffff;
  Node& b = c.w.b;
  auto inject = [&](std::span<const std::byte> f) { b.hca.receive_packet(1, f, c.w.now); };
  DataStats before = b.hca.data_stats();

  // A receive WQE that none of the forged frames may take.
  b.post_recv(c.qb, 42, {{4096, c.key_b, Node::va(c.buf_b)}});

  // A flipped payload byte: bad ICRC.
  {
    std::vector<std::byte> f = model;
    f[14 + 20 + 8 + 12 + 5] ^= std::byte{0x40};  // Ethernet, IPv4, UDP, BTH, into the payload
    inject(f);
    CHECK(b.hca.data_stats().rx_bad_icrc == before.rx_bad_icrc + 1);
  }
  // ARP (who-has 198.18.90.2): not RoCE.
  {
    std::vector<std::byte> f(60);
    for (size_t i = 0; i < 6; ++i) f[i] = std::byte{0xff};
    for (size_t i = 0; i < 6; ++i) f[6 + i] = std::byte{mac_of(kGuidA)[i]};
    f[12] = std::byte{0x08};
    f[13] = std::byte{0x06};
    const uint8_t arp[] = {0, 1, 8, 0, 6, 4, 0, 1};
    for (size_t i = 0; i < sizeof arp; ++i) f[14 + i] = std::byte{arp[i]};
    inject(f);
    CHECK(b.hca.data_stats().rx_not_roce == before.rx_not_roce + 1);
  }
  // RoCEv2 to another IP (198.18.90.77), well formed: not ours.
  {
    w::RoceAddress a = addr;
    a.dgid = ip_gid(77);
    inject(rebuild(a, transport));
    CHECK(b.hca.data_stats().rx_not_our_gid == before.rx_not_our_gid + 1);
  }
  // RoCEv2 to b's IP but another MAC: not ours either.
  {
    w::RoceAddress a = addr;
    a.dmac = {0x02, 0x11, 0x22, 0x33, 0x44, 0x55};
    inject(rebuild(a, transport));
    CHECK(b.hca.data_stats().rx_not_our_gid == before.rx_not_our_gid + 2);
  }
  // The next SEND of the connection, right QPN and PSN, from another IP
  // (198.18.90.9): checksum and ICRC made good by build_roce_frame.
  {
    w::RoceAddress a = addr;
    a.sgid = ip_gid(9);
    std::vector<std::byte> t = transport;
    set_bth_psn(t, next_psn);
    auto f = rebuild(a, t);
    REQUIRE(w::parse_roce_frame(f).ok());
    inject(f);
    CHECK(b.hca.data_stats().rx_bad_addr == before.rx_bad_addr + 1);
  }
  // To QP0 (RoCE has none).
  {
    std::vector<std::byte> t = transport;
    set_bth_dest_qp(t, 0);
    inject(rebuild(addr, t));
    CHECK(b.hca.data_stats().rx_bad_addr == before.rx_bad_addr + 2);
  }
  // Runt and giant frames through the cable: the pair drops them; a frame
  // of exactly an Ethernet header gets to the port (and is no RoCE).
  {
    const uint64_t malformed = c.w.pair->b().stats().rx_dropped_malformed;
    const size_t seen = c.frames.size();
    std::vector<std::byte> runt(13, std::byte{0}), giant(w::kMaxPacketBytes + 1, std::byte{0});
    std::vector<std::byte> hdr_only(14, std::byte{0});
    hdr_only[12] = std::byte{0x08};
    hdr_only[13] = std::byte{0x06};
    REQUIRE(c.w.pair->a().send(runt).ok());
    REQUIRE(c.w.pair->a().send(giant).ok());
    REQUIRE(c.w.pair->a().send(hdr_only).ok());
    c.w.pair->pump();
    CHECK(c.w.pair->b().stats().rx_dropped_malformed == malformed + 2);
    REQUIRE(c.frames.size() == seen + 1);
    CHECK(c.frames.back().bytes.size() == 14);
    CHECK(b.hca.data_stats().rx_not_roce == before.rx_not_roce + 2);
  }
  // Nothing was delivered, nothing answered...
  CHECK(c.settle(b).empty());
  CHECK(c.settle(c.w.a).empty());
  // ...and the connection carries its next SEND (PSN next_psn) into the
  // WQE posted before the junk.
  fill(c.w.a.mem(c.buf_a, 200), 5);
  Wr s;
  s.wr_id = 43;
  s.sges = {{200, c.key_a, Node::va(c.buf_a)}};
  c.w.a.post_send(c.qa, s);
  auto rx = c.wait(b, 1);
  REQUIRE(rx.size() == 1);
  CHECK(rx[0].status == kWcSuccess);
  CHECK(rx[0].wr_id == 42);
  CHECK(rx[0].byte_len == 200);
  CHECK(same(b.mem(c.buf_b, 200), c.w.a.mem(c.buf_a, 200)));
  auto tx = c.wait(c.w.a, 1);
  REQUIRE(tx.size() == 1);
  CHECK(tx[0].status == kWcSuccess);
  const Frame* last = nullptr;
  for (const Frame& f : c.frames)
    if (f.to_b) last = &f;
  auto lp = w::parse_roce_frame(last->bytes);
  REQUIRE(lp.ok());
  CHECK(bth_psn(lp->transport) == next_psn);  // the forged frame used the PSN this one needed
}

TEST_CASE("RoCE port: a UD SEND to the node's own IP GID loops back inside it", "[roce-port]") {
  Roce r;
  Node& a = r.w.a;
  TQp q1 = a.create_qp(kQpUd), q2 = a.create_qp(kQpUd);
  a.connect(q1, {});
  a.connect(q2, {});
  const uint64_t buf = a.alloc(8192, 4096);
  const uint32_t key = a.reg_mr(buf, 8192, kMrLocalWrite);
  Node::Grh g = Roce::grh_to(false);  // to a itself: its own IPv4 GID and MAC
  const uint32_t ah = a.create_ah(kRoceDlid, g);
  fill(a.mem(buf, 300), 11);
  a.post_recv(q2, 5, {{1024, key, Node::va(buf + 4096)}});
  Wr s;
  s.ahn = ah;
  s.dest_qpn = q2.qpn;
  s.qkey = 0x11111111;
  s.sges = {{300, key, Node::va(buf)}};
  a.post_send(q1, s);
  auto cqes = r.wait(a, 2);
  REQUIRE(cqes.size() == 2);
  const Cqe* rx = nullptr;
  for (const Cqe& e : cqes)
    if (e.opcode == kWcRecv) rx = &e;
  REQUIRE(rx != nullptr);
  CHECK(rx->status == kWcSuccess);
  CHECK(rx->qpn == q2.qpn);
  CHECK(rx->src_qp == q1.qpn);
  CHECK(rx->byte_len == 340);
  CHECK(bytes_at<16>(a.mem(buf + 4096, 40), 8) == ip_gid(1));
  CHECK(same(a.mem(buf + 4096 + 40, 300), a.mem(buf, 300)));
  // An AV's DLID means nothing on an Ethernet port: one with a stray DLID
  // loops back the same.
  a.post_recv(q2, 6, {{1024, key, Node::va(buf + 4096)}});
  s.ahn = a.create_ah(5, g);
  a.post_send(q1, s);
  cqes = r.wait(a, 2);
  REQUIRE(cqes.size() == 2);
  for (const Cqe& e : cqes) CHECK(e.status == kWcSuccess);
  // Nothing crossed the wire.
  CHECK(r.frames.empty());
  CHECK(r.w.pair->a().stats().tx_packets == 0);
  CHECK(r.w.b.hca.data_stats().rx_packets == 0);
}

namespace {

// A UD send from a to a group b's QP is attached to; the frames seen.
void multicast_case(const std::array<uint8_t, 16>& mgid, uint8_t sgid_index, const w::Mac& group_mac) {
  Roce r;
  TQp qa = r.w.a.create_qp(kQpUd), qb = r.w.b.create_qp(kQpUd);
  r.w.a.connect(qa, {});
  r.w.b.connect(qb, {});
  attach_mcg(r.w.b, qb.qpn, 0xc001, mgid);
  // A member on the sending port too: it gets the device's own copy (§12.7).
  TQp qa2 = r.w.a.create_qp(kQpUd);
  r.w.a.connect(qa2, {});
  attach_mcg(r.w.a, qa2.qpn, 0xc001, mgid);
  const uint64_t ba = r.w.a.alloc(4096, 4096), bb = r.w.b.alloc(4096, 4096);
  const uint32_t ka = r.w.a.reg_mr(ba, 4096, kMrLocalWrite), kb = r.w.b.reg_mr(bb, 4096, kMrLocalWrite);
  r.w.a.post_recv(qa2, 2, {{1024, ka, Node::va(ba + 2048)}});
  Node::Grh g;
  g.sgid_index = sgid_index;
  g.dgid = mgid;
  const uint32_t ah = r.w.a.create_ah(kRoceDlid, g);  // the DGID makes it multicast (§16.2)
  fill(r.w.a.mem(ba, 64), 3);
  r.w.b.post_recv(qb, 1, {{1024, kb, Node::va(bb)}});
  Wr s;
  s.ahn = ah;
  s.dest_qpn = 0xffffff;
  s.qkey = 0x11111111;
  s.sges = {{64, ka, Node::va(ba)}};
  r.w.a.post_send(qa, s);
  auto rx = r.wait(r.w.b, 1);
  REQUIRE(rx.size() == 1);
  CHECK(rx[0].status == kWcSuccess);
  CHECK(rx[0].src_qp == qa.qpn);
  CHECK(rx[0].byte_len == 64 + 40);
  CHECK(bytes_at<16>(r.w.b.mem(bb, 40), 24) == mgid);
  CHECK(same(r.w.b.mem(bb + 40, 64), r.w.a.mem(ba, 64)));
  REQUIRE(r.frames.size() == 1);
  auto p = w::parse_roce_frame(r.frames[0].bytes);
  REQUIRE(p.ok());
  CHECK(p->addr.dmac == group_mac);
  CHECK(p->addr.smac == mac_of(kGuidA));
  w::Gid want{};
  std::copy(mgid.begin(), mgid.end(), want.begin());
  CHECK(p->addr.dgid == want);
  CHECK(r.w.b.hca.data_stats().mcast_delivered == 1);
  // The sending port's other member got its copy, without a frame of its own.
  auto own = r.wait(r.w.a, 2);  // the send's completion and qa2's receive
  const Cqe* got = nullptr;
  for (const Cqe& e : own)
    if (e.opcode == kWcRecv) got = &e;
  REQUIRE(got != nullptr);
  CHECK(got->status == kWcSuccess);
  CHECK(got->qpn == qa2.qpn);
  CHECK(got->byte_len == 64 + 40);
  CHECK(same(r.w.a.mem(ba + 2048 + 40, 64), r.w.a.mem(ba, 64)));
  CHECK(r.w.a.hca.data_stats().mcast_loopback == 1);
  CHECK(r.frames.size() == 1);
}

}  // namespace

TEST_CASE("RoCE port: multicast to an IPv6 group from the link-local GID", "[roce-port]") {
  // ff0e::1:2:3 from GID 0 (fe80::, IPv6 both): dmac 33:33 + the low 32 bits.
  std::array<uint8_t, 16> mgid{0xff, 0x0e};
  mgid[13] = 1;
  mgid[14] = 2;
  mgid[15] = 3;
  multicast_case(mgid, 0, {0x33, 0x33, 0x00, 0x01, 0x02, 0x03});
}

// §16.4: an IPv4 group is an IPv4-mapped GID of 224.0.0.0/4 (ATTACH_MCG
// takes it on an Ethernet port), sent to its RFC 1112 group MAC.
TEST_CASE("RoCE port: multicast to ::ffff:239.1.2.3 goes to 01:00:5e:01:02:03", "[roce-port]") {
  multicast_case(ip_gid(239, 1, 2, 3), 1, {0x01, 0x00, 0x5e, 0x01, 0x02, 0x03});
}

// §16.3: a QP of the device itself cannot reach another's connection
// either: a packet looped back inside the device from a QP whose path is
// the port's own GID is not from the connection's peer.
TEST_CASE("RoCE port: a local QP cannot inject into a connection of the same port", "[roce-port]") {
  RcPair c;
  Node& b = c.w.b;
  TQp qx = b.create_qp(kQpRc);
  Node::Path px;
  px.mtu = 3;
  px.grh = Roce::grh_to(false);
  px.grh->dgid = ip_gid(2);  // b's own GID: the packets stay inside b
  px.dest_qpn = c.qb.qpn;
  px.psn = 0x100;  // the PSN qb expects next
  b.connect(qx, px);
  const uint64_t buf = b.alloc(4096, 4096);
  const uint32_t key = b.reg_mr(buf, 4096, kMrLocalWrite);
  b.post_recv(c.qb, 77, {{4096, c.key_b, Node::va(c.buf_b)}});
  const uint64_t before = b.hca.data_stats().rx_bad_addr;
  Wr s;
  s.wr_id = 1;
  s.sges = {{64, key, Node::va(buf)}};
  b.post_send(qx, s);
  for (const Cqe& e : c.settle(b)) CHECK(e.qpn != c.qb.qpn);  // qb took nothing
  CHECK(b.hca.data_stats().rx_bad_addr > before);
  CHECK(c.frames.empty());
  // The real connection still works, into the receive posted above.
  Wr t;
  t.wr_id = 2;
  fill(c.w.a.mem(c.buf_a, 100), 5);
  t.sges = {{100, c.key_a, Node::va(c.buf_a)}};
  c.w.a.post_send(c.qa, t);
  auto rx = c.wait(b, 1);
  REQUIRE(rx.size() == 1);
  CHECK(rx[0].status == kWcSuccess);
  CHECK(rx[0].wr_id == 77);
  CHECK(rx[0].byte_len == 100);
}

// §16.1/§16.2: nothing leaves a port whose cable the far end pulled; it
// goes out again once the cable is back.
TEST_CASE("RoCE port: a pulled cable stops the port's frames, a plugged one brings them back", "[roce-port]") {
  UdPair u;
  Node& a = u.w.a;
  auto send = [&](uint64_t id) {
    Wr s;
    s.wr_id = id;
    s.ahn = u.ah_a;
    s.dest_qpn = u.qb.qpn;
    s.qkey = UdPair::kQkey;
    s.sges = {{32, u.key_a, Node::va(u.buf_a)}};
    a.post_send(u.qa, s);
  };
  a.hca.set_cable_light(1, false);
  CHECK(get8(query_port(a), 0) == kPsDown);
  const uint64_t down_before = a.hca.data_stats().tx_port_down;
  send(1);
  u.settle(a);
  CHECK(u.frames.empty());
  CHECK(a.hca.data_stats().tx_port_down == down_before + 1);
  a.hca.set_cable_light(1, true);
  CHECK(get8(query_port(a), 0) == kPsActive);
  u.w.b.post_recv(u.qb, 9, {{1024, u.key_b, Node::va(u.buf_b)}});
  send(2);
  auto rx = u.wait(u.w.b, 1);
  REQUIRE(rx.size() == 1);
  CHECK(rx[0].status == kWcSuccess);
  CHECK(u.frames.size() == 1);
}

// §7.6, §16.2: a connected QP's path is unicast, on Ethernet too: an RC
// path to a multicast group is refused, as a CREATE_AH for one is taken.
TEST_CASE("RoCE port: an RC path to a multicast GID is refused", "[roce-port]") {
  Roce r;
  Node& a = r.w.a;
  TQp q = a.create_qp(kQpRc);
  using namespace attr;
  a.modify(q.qpn, kState | kPkeyIndex | kPort | kAccessFlags, [&](auto m) {
    put8(m, 0, kInit);
    put8(m, 2, 1);
  });
  Node::Grh g = Roce::grh_to(true);
  g.dgid = ip_gid(239, 1, 2, 3);
  a.modify(
      q.qpn, kState | kAv | kPathMtu | kDestQpn | kRqPsn | kMaxDestRdAtomic | kMinRnrTimer,
      [&](auto m) {
        put8(m, 0, kRtr);
        put8(m, 3, 3);
        put32(m, 0x0c, 5);
        put8(m, 0x25, 1);
        Node::put_grh(m.subspan(0x20, 48), g);
      },
      kBadParam);
  g.dgid = ip_gid(2);  // the same to a unicast GID is taken
  a.modify(q.qpn, kState | kAv | kPathMtu | kDestQpn | kRqPsn | kMaxDestRdAtomic | kMinRnrTimer, [&](auto m) {
    put8(m, 0, kRtr);
    put8(m, 3, 3);
    put32(m, 0x0c, 5);
    put8(m, 0x25, 1);
    Node::put_grh(m.subspan(0x20, 48), g);
  });
}

// §6.12/§16.2-3: the port keeps GID entry 0 made and knows which entries
// are filled (port.hpp), so every SET_GID must show in the very next
// packet: a rewritten entry is the next frame's source IP and the only
// address of it the port takes; a removed one is no longer taken (counted
// rx_not_our_gid), and a path from it sends from entry 0.
TEST_CASE("RoCE port: a GID entry rewritten or removed shows in the next frame, both ways", "[roce-port]") {
  UdPair u;
  Node& a = u.w.a;
  Node& b = u.w.b;
  uint64_t id = 0;
  // A UD SEND a -> b through `ah`; b's CQEs (none within 5 ms: dropped).
  auto send = [&](uint32_t ah, bool taken) {
    b.post_recv(u.qb, ++id, {{4096 + 40, u.key_b, Node::va(u.buf_b)}});
    Wr s;
    s.wr_id = id;
    s.ahn = ah;
    s.dest_qpn = u.qb.qpn;
    s.qkey = UdPair::kQkey;
    s.sges = {{8, u.key_a, Node::va(u.buf_a)}};
    a.post_send(u.qa, s);
    auto rx = taken ? u.wait(b, 1) : u.settle(b);
    (void)u.settle(a);  // a's send CQE
    return rx;
  };
  // The last frame a -> b, parsed.
  auto last_to_b = [&] {
    const Frame* f = nullptr;
    for (const Frame& x : u.frames)
      if (x.to_b) f = &x;
    REQUIRE(f != nullptr);
    auto p = w::parse_roce_frame(f->bytes);
    REQUIRE(p.ok());
    return p->addr;
  };
  auto rx = send(u.ah_a, true);
  REQUIRE(rx.size() == 1);
  CHECK(last_to_b().sgid == ip_gid(1));

  // a's entry 1 rewritten: the next frame is from the new IP, and b's GRH says so.
  set_gid(a, 1, kGidTypeRoceV2, ip_gid(3));
  rx = send(u.ah_a, true);
  REQUIRE(rx.size() == 1);
  CHECK(rx[0].status == kWcSuccess);
  CHECK(last_to_b().sgid == ip_gid(3));
  CHECK(bytes_at<16>(b.mem(u.buf_b, 40), 8) == ip_gid(3));

  // b's entry 1 rewritten: frames to its old IP are not b's any more...
  set_gid(b, 1, kGidTypeRoceV2, ip_gid(4));
  const uint64_t not_ours = b.hca.data_stats().rx_not_our_gid;
  CHECK(send(u.ah_a, false).empty());
  CHECK(b.hca.data_stats().rx_not_our_gid == not_ours + 1);
  // ... frames to the new one are (the receive WQE left by the drop takes it).
  Node::Grh to4 = Roce::grh_to(true);
  to4.dgid = ip_gid(4);
  const uint32_t ah4 = a.create_ah(kRoceDlid, to4);
  rx = send(ah4, true);
  REQUIRE(rx.size() == 1);
  CHECK(rx[0].wr_id == id - 1);
  CHECK(last_to_b().dgid == ip_gid(4));
  (void)u.settle(b);  // the WQE this SEND posted

  // b's entry 1 removed: nothing to 198.18.90.4 is taken, each frame counted.
  set_gid(b, 1, kGidTypeNone, {});
  for (int i = 0; i < 2; ++i) CHECK(send(ah4, false).empty());
  CHECK(b.hca.data_stats().rx_not_our_gid == not_ours + 3);

  // a's entry 1 removed after an AH from it was made: the AH sends from
  // entry 0, a's link-local GID (§6.12), here to b's (an IPv6 frame).
  Node::Grh ll = Roce::grh_to(true);
  ll.dgid = query_gid(b, 0).second;
  const uint32_t ah_ll = a.create_ah(kRoceDlid, ll);
  set_gid(a, 1, kGidTypeNone, {});
  rx = send(ah_ll, true);
  REQUIRE(rx.size() >= 1);
  const w::RoceAddress last = last_to_b();
  CHECK_FALSE(last.ipv4);
  CHECK(last.sgid == query_gid(a, 0).second);
  CHECK(last.dgid == ll.dgid);
}

// §6.12: GID 0 is gid_prefix : port_guid and follows SET_PORT's subnet
// prefix at once (an InfiniBand port: an Ethernet one has no prefix to set).
TEST_CASE("RoCE port: GID 0 follows a subnet prefix set on an InfiniBand port", "[roce-port]") {
  Wire wire;
  Node& n = wire.a;
  const auto before = query_gid(n, 0);
  CHECK(before.first == kGidTypeIb);
  CHECK(before.second[0] == 0xfe);
  Bytes in(24);
  put8(in, 0, 1);
  put8(in, 1, kSelGidPrefix);
  put64(in, 0x10, 0xfec0000000001234ull);
  n.cmd(kOpSetPort, in);
  const auto after = query_gid(n, 0);
  CHECK(after.first == kGidTypeIb);
  const std::array<uint8_t, 8> prefix{0xfe, 0xc0, 0, 0, 0, 0, 0x12, 0x34};
  CHECK(std::equal(prefix.begin(), prefix.end(), after.second.begin()));
  CHECK(std::equal(after.second.begin() + 8, after.second.end(), before.second.begin() + 8));  // the port GUID
}

// §16.1 (§13 --eth-mtu): the active MTU is the largest IBA MTU whose
// RoCEv2 packets, with every header they may carry (96 bytes), fit the
// IP MTU, as rxe reports on a netdev of that MTU; at a jumbo IP MTU, RC
// packets carry 4096 bytes each.
TEST_CASE("RoCE port: the active MTU follows the IP MTU; jumbo frames carry 4096-byte packets", "[roce-port]") {
  CHECK(roce_active_mtu(576) == 1);   // 480 bytes left: 256
  CHECK(roce_active_mtu(1119) == 2);  // 1023: 512
  CHECK(roce_active_mtu(1120) == 3);  // 1024
  CHECK(roce_active_mtu(1500) == 3);
  CHECK(roce_active_mtu(4191) == 4);
  CHECK(roce_active_mtu(4192) == 5);
  CHECK(roce_active_mtu(9000) == 5);
  RcPair c(5, 9000);
  CHECK(get8(query_port(c.w.a), 0x09) == 5);
  CHECK(get8(query_port(c.w.b), 0x08) == 5);
  uint64_t id = 0;
  for (uint32_t len : {4095u, 4096u, 4097u, 20000u}) c.send_ok(len, ++id);
  size_t most = 0, longest = 0;
  for (const Frame& f : c.frames) {
    auto p = w::parse_roce_frame(f.bytes);
    REQUIRE(p.ok());
    most = std::max(most, p->transport.size());
    longest = std::max(longest, f.bytes.size());
  }
  CHECK(most == 12 + 4096);  // BTH + an MTU of payload (SEND: no other header)
  CHECK(longest <= 14 + 9000);
  const DataStats sa = c.w.a.hca.data_stats(), sb = c.w.b.hca.data_stats();
  CHECK(sa.rx_bad_icrc + sb.rx_bad_icrc + sa.rx_malformed + sb.rx_malformed + sa.tx_not_framed + sb.tx_not_framed == 0);
}
