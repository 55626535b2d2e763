// libFuzzer target: the IPoIB bridge (src/ipoib_tap/bridge.hpp) fed
// arbitrary Ethernet frames and IPoIB packets, with path and join answers
// (synchronous from inside the BridgeIo call, or later) and carrier and
// link changes in between. Input: records of
//   op(1) len(1) bytes(len)
// op & 7: 0 from_tap, 1 from_tap to a known neighbour's / the own MAC,
// 2 from_ib (the first 7 bytes: QPN(3) SLID(2) GRH flags(1) sgid pick(1)),
// 3 answer the oldest path request, 4 answer the oldest join, 5 carrier,
// 6 set_link with another MTU, 7 path_lost / member_leave. Bit 4 of
// ops 0-2 sets the ICMPv6 checksum of an IPv6 payload.
// Invariants: no packet sent is larger than mtu + 4 or shorter than 4, or
// carries an EtherType other than IPv4/ARP/IPv6; no frame written is
// shorter than 14 or comes from a group MAC; multicast sends go to an
// MGID on QPN 0xFFFFFF; every ND message written or sent has a right
// ICMPv6 checksum; nothing crashes, leaks or loops.
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <vector>

#include "ipoib_tap/bridge.hpp"
#include "ipoib_tap/translate.hpp"

using namespace openib::ipoib;

namespace {

bool allowed_type(std::uint16_t t) { return t == 0x0800 || t == 0x0806 || t == 0x86DD; }

// An ND message (ICMPv6 133-137 right after the IPv6 header) must carry
// a right checksum on the way out.
void check_nd(std::span<const std::uint8_t> ipv6) {
  if (ipv6.size() < 41 || ipv6[6] != 58 || ipv6[40] < 133 || ipv6[40] > 137) return;
  std::vector<std::uint8_t> p(ipv6.begin(), ipv6.end());
  const std::uint16_t stored = static_cast<std::uint16_t>(p[42] << 8 | p[43]);
  if (icmpv6_checksum(p) != stored) std::abort();
}

struct Io : BridgeIo {
  Bridge* bridge = nullptr;
  bool sync = false;  // answer from inside the call
  bool ok = true;
  std::deque<Gid> paths, joins;
  std::uint32_t mtu = 0;
  void send_ud(const UdDest& to, std::span<const std::uint8_t> p) override {
    if (p.size() < kEncapBytes || p.size() > mtu + kEncapBytes) std::abort();
    if (!allowed_type(static_cast<std::uint16_t>(p[0] << 8 | p[1])) || p[2] != 0 || p[3] != 0) std::abort();
    if (to.multicast && (to.gid[0] != 0xFF || to.qpn != kMulticastQpn)) std::abort();
    if (!to.multicast && to.qpn > 0xFFFFFF) std::abort();
    if (p[1] == 0xDD) check_nd(p.subspan(kEncapBytes));
  }
  void write_tap(std::span<const std::uint8_t> f) override {
    if (f.size() < 14 || (f[6] & 1) || !allowed_type(static_cast<std::uint16_t>(f[12] << 8 | f[13]))) std::abort();
    if (f[13] == 0xDD) check_nd(f.subspan(14));
  }
  void resolve_path(const Gid& g) override {
    if (sync) return bridge->path_resolved(g, ok);
    paths.push_back(g);
  }
  void join(const Gid& m, bool) override {
    if (sync) return bridge->joined(m, ok);
    joins.push_back(m);
  }
  void leave(const Gid&) override {}
};

// With op bit 4, an IPv6 ICMPv6 payload at `at` gets a right checksum, so
// that ND messages get past the check into the option translation.
void fix_checksum(std::vector<std::uint8_t>& b, std::size_t at) {
  if (b.size() < at + 44 || b[at + 6] != 58) return;
  const std::size_t end = std::min(b.size(), at + 40 + (std::size_t{b[at + 4]} << 8 | b[at + 5]));
  if (end < at + 44) return;
  std::span<std::uint8_t> p(b.data() + at, end - at);
  const std::uint16_t c = icmpv6_checksum(p);
  p[42] = static_cast<std::uint8_t>(c >> 8);
  p[43] = static_cast<std::uint8_t>(c);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  Io io;
  LinkParams link;
  link.port_gid = Gid{0xFE, 0x80, 0, 0, 0, 0, 0, 0, 0, 2, 0xC9, 3, 0, 0, 0, 1};
  link.qpn = 0x48;
  link.ib_mtu = 2048;
  Bridge bridge(io, link);
  io.bridge = &bridge;
  io.mtu = bridge.mtu();
  std::span<const std::uint8_t> in(data, size);
  while (in.size() >= 2) {
    const std::uint8_t op = in[0];
    const std::size_t len = std::min<std::size_t>(in[1], in.size() - 2);
    std::vector<std::uint8_t> b(in.begin() + 2, in.begin() + 2 + static_cast<std::ptrdiff_t>(len));
    in = in.subspan(2 + len);
    io.sync = op & 0x40;
    io.ok = !(op & 0x80);
    const std::uint8_t sel = b.empty() ? 0 : b[0];
    switch (op & 7) {
      case 0:
        if (op & 0x10) fix_checksum(b, 14);
        bridge.from_tap(b);
        break;
      case 1: {
        // Aim at a MAC the bridge knows, so that unicast gets further.
        auto ns = bridge.neighbours();
        const Mac m = ns.empty() || (op & 8) ? bridge.own_mac() : ns[sel % ns.size()].mac;
        if (b.size() < 14) b.resize(14);
        std::copy(m.begin(), m.end(), b.begin());
        if (op & 0x10) fix_checksum(b, 14);
        bridge.from_tap(b);
        break;
      }
      case 2: {
        if (b.size() < 7) break;
        Bridge::RxInfo rx;
        rx.src_qpn = std::uint32_t{b[0]} << 16 | std::uint32_t{b[1]} << 8 | b[2];
        rx.slid = static_cast<std::uint16_t>(b[3] << 8 | b[4]);
        auto ns = bridge.neighbours();
        if (b[5] & 1) rx.sgid = ns.empty() || (b[5] & 4) ? link.port_gid : ns[b[6] % ns.size()].addr.gid;
        if (b[5] & 2) rx.dgid = (b[5] & 8) ? broadcast_mgid(link.pkey) : link.port_gid;
        if (op & 0x10) fix_checksum(b, 7 + kEncapBytes);
        bridge.from_ib(rx, std::span(b).subspan(7));
        break;
      }
      case 3:
        if (!io.paths.empty()) {
          const Gid g = io.paths.front();
          io.paths.pop_front();
          if (op & 0x20) bridge.path_lid(g, sel);
          bridge.path_resolved(g, io.ok);
        }
        break;
      case 4:
        if (!io.joins.empty()) {
          const Gid g = io.joins.front();
          io.joins.pop_front();
          bridge.joined(g, io.ok);
        }
        break;
      case 5: bridge.set_carrier(op & 8); break;
      case 6:
        link.ib_mtu = 256u << (sel % 5);  // 256 .. 4096
        bridge.set_link(link);
        io.mtu = bridge.mtu();
        break;
      case 7: {
        auto gs = bridge.groups();
        auto ns = bridge.neighbours();
        if (!ns.empty()) bridge.path_lost(ns[sel % ns.size()].addr.gid);
        if (!gs.empty()) bridge.member_leave(gs[sel % gs.size()].mgid);
        break;
      }
    }
  }
  (void)bridge.counters();
  return 0;
}
