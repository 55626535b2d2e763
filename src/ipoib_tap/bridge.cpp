// The IPoIB bridge (bridge.hpp; docs/ipoib.md "Translation rules"): the
// Ethernet header <-> IPoIB header, unicast destinations through the
// neighbour table and their paths, multicast through the IB groups.
#include "ipoib_tap/bridge.hpp"

#include <algorithm>
#include <deque>

#include "ipoib_tap/cm_wire.hpp"
#include "ipoib_tap/igmp_mld.hpp"
#include "ipoib_tap/neighbours.hpp"
#include "ipoib_tap/too_big.hpp"
#include "ipoib_tap/translate.hpp"

namespace openib::ipoib {
namespace {

using Packet = std::vector<std::uint8_t>;
using Queue = std::deque<Packet>;
constexpr Mac kBroadcastMac{0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF};
// IPv4 224.0.0.1 (all hosts) and IPv6 ff02::1 (all nodes): on the
// interface's multicast list from the start, never reported by IGMP/MLD.
constexpr std::uint32_t kAllHosts = 0xE0000001;
constexpr std::array<std::uint8_t, 16> kAllNodes{0xFF, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};

HwAddr own_addr(const LinkParams& l) {
  return HwAddr{l.qpn & 0xFFFFFF, l.port_gid, l.connected ? kHwFlagRc : std::uint8_t{0}};
}

bool is_multicast_gid(const Gid& g) { return g[0] == 0xFF; }

// IPv4 header checks (RFC 791 §3.1): the packet is trimmed to its total
// length (Ethernet pads short frames); nullopt when inconsistent.
std::optional<wire::Bytes> valid_ipv4(wire::Bytes p) {
  if (p.size() < wire::kIpv4MinHeader || (p[0] >> 4) != 4) return std::nullopt;
  const std::size_t ihl = std::size_t{p[0] & 0x0Fu} * 4, total = wire::be16(p, 2);
  if (ihl < wire::kIpv4MinHeader || total < ihl || total > p.size()) return std::nullopt;
  return p.first(total);
}

struct Group {
  bool full_member = false;
  enum class State { joining, joined, failed } state = State::joining;
  Queue pending;
};

}  // namespace

struct Bridge::Impl {
  Impl(BridgeIo& i, BridgeCounters& c, const LinkParams& l)
      : io(i), cnt(c), link(l), nt(own_addr(l)), bcast(broadcast_mgid(l.pkey)) {}

  BridgeIo& io;
  BridgeCounters& cnt;
  LinkParams link;
  NeighbourTable nt;
  Gid bcast;
  std::map<Gid, Group> groups;
  bool carrier = true;
  bool standard_joined = false;  // all-hosts, all-nodes

  std::uint32_t ud_mtu() const { return link.ib_mtu > kEncapBytes ? link.ib_mtu - kEncapBytes : 0; }
  std::uint32_t mtu() const { return link.connected ? kCmMtu : ud_mtu(); }

  void send(const UdDest& to, const Packet& p) {
    ++cnt.ib_tx;
    io.send_ud(to, p);
  }

  // Connected mode with this neighbour (RFC 4755): both offer it and the
  // glue has not fallen back to datagram mode for it.
  bool rc_capable(const HwAddr& a) {
    if (!link.connected) return false;
    const Neighbour* n = nt.find(a);
    return n && (n->flags & kHwFlagRc) && io.rc_usable(a);
  }

  // A unicast packet whose path is ready: over the RC connection when
  // there is (or will be) one, else by UD if it fits.
  // ARP and ND go by UD always: they are what teaches the peer this
  // address, which its IPoIB-CM listener requires before it accepts our
  // REQ (ipoib_cm.hpp); an ARP reply held behind a connection the peer
  // refuses would never arrive.
  static bool neighbour_discovery(const Packet& p) {
    if (p.size() < kEncapBytes) return false;
    const std::uint16_t type = wire::be16(p, 0);
    if (type == wire::kEtherArp) return true;
    const std::size_t icmp = kEncapBytes + wire::kIpv6Header;
    return type == wire::kEtherIpv6 && p.size() > icmp && p[kEncapBytes + 6] == 58 && p[icmp] >= 133 && p[icmp] <= 137;
  }

  void deliver(const HwAddr& a, const Packet& p) {
    if (!neighbour_discovery(p) && rc_capable(a) && io.send_rc(a, p)) return void(++cnt.ib_tx);
    if (p.size() > ud_mtu() + kEncapBytes) return void(++cnt.drop_too_big);  // its connection went meanwhile
    send(UdDest{false, a.gid, a.qpn}, p);
  }

  // A frame above its path's MTU: the kernel is told as Linux's ipoib
  // tells it (ICMP "fragmentation needed" / ICMPv6 "packet too big" with
  // datagram mode's MTU, too_big.hpp) and learns the path MTU.
  void too_big(wire::Bytes frame) {
    auto icmp = icmp_too_big(frame, ud_mtu());
    if (!icmp) return void(++cnt.drop_too_big);
    ++cnt.icmp_too_big;
    ++cnt.tap_tx;
    io.write_tap(*icmp);
  }

  void enqueue(Queue& q, Packet&& p) {
    if (q.size() >= kPendingPerDest) {
      q.pop_front();
      ++cnt.drop_queue_full;
    }
    q.push_back(std::move(p));
  }

  // ---- unicast: a neighbour's path (RFC 4391 §2: UD to its QPN) ----
  void send_unicast(const HwAddr& a, Packet&& p) {
    Neighbour* n = nt.find(a);
    if (!n) {  // addr_of found it: cannot happen, but never forward blind
      ++cnt.drop_unknown_mac;
      return;
    }
    if (n->state == PathState::ready) return deliver(a, p);
    enqueue(n->pending, std::move(p));
    if (n->state == PathState::resolving) return;
    // One resolution per GID: another neighbour (QPN) on it may be asking.
    const bool asking = std::any_of(nt.all().begin(), nt.all().end(), [&](const auto& e) {
      return e.first.gid == a.gid && e.second.state == PathState::resolving;
    });
    n->state = PathState::resolving;
    if (!asking) io.resolve_path(a.gid);  // may answer from inside
  }

  void path_resolved(const Gid& gid, bool ok) {
    std::vector<std::pair<HwAddr, Queue>> to_send;
    for (auto& [a, n] : nt.all()) {
      if (a.gid != gid) continue;
      if (ok) {
        n.state = PathState::ready;
        to_send.emplace_back(a, std::move(n.pending));
        n.pending.clear();
      } else if (n.state == PathState::resolving || !n.pending.empty()) {
        n.state = PathState::failed;
        cnt.drop_no_path += n.pending.size();
        n.pending.clear();
      }
    }
    for (auto& [a, q] : to_send)
      for (auto& p : q) deliver(a, p);
  }

  // ---- multicast: the IB group of the destination (RFC 4391 §4) ----
  void send_group(const Gid& mgid, Packet&& p) {
    const UdDest to{true, mgid, kMulticastQpn};
    if (mgid == bcast) return send(to, p);  // joined by the glue before carrier
    auto [it, fresh] = groups.try_emplace(mgid);
    Group& g = it->second;
    if (g.state == Group::State::joined) return send(to, p);
    enqueue(g.pending, std::move(p));
    if (fresh || g.state == Group::State::failed) {
      g.state = Group::State::joining;
      io.join(mgid, !g.full_member);  // SendOnlyNonMember unless a member
    }
  }

  void joined(const Gid& mgid, bool ok) {
    auto it = groups.find(mgid);
    if (it == groups.end()) return;
    Queue q = std::move(it->second.pending);
    it->second.pending.clear();
    it->second.state = ok ? Group::State::joined : Group::State::failed;
    if (!ok) {
      cnt.drop_no_group += q.size();
      return;
    }
    for (auto& p : q) send(UdDest{true, mgid, kMulticastQpn}, p);
  }

  void member_join(const Gid& mgid) {
    if (mgid == bcast) return;
    auto [it, fresh] = groups.try_emplace(mgid);
    Group& g = it->second;
    if (!fresh && g.full_member) return;
    g.full_member = true;
    if (fresh || g.state == Group::State::failed) g.state = Group::State::joining;
    io.join(mgid, false);
  }

  void member_leave(const Gid& mgid) {
    auto it = groups.find(mgid);
    if (mgid == bcast || it == groups.end() || !it->second.full_member) return;
    cnt.drop_no_group += it->second.pending.size();
    groups.erase(it);
    io.leave(mgid);
  }

  // Not from the constructor: the glue may answer a join from inside the
  // call, before it holds the Bridge.
  void join_standard_groups() {
    if (standard_joined) return;
    standard_joined = true;
    member_join(ipv4_mgid(kAllHosts, link.pkey));
    member_join(ipv6_mgid(kAllNodes, link.pkey));
  }

  void snoop(const std::vector<MembershipChange>& changes) {
    for (const auto& c : changes) {
      const Gid mgid = c.ipv6 ? ipv6_mgid(c.group, link.pkey)
                              : ipv4_mgid(wire::be32(c.group, 0), link.pkey);
      if (c.join)
        member_join(mgid);
      else
        member_leave(mgid);
    }
  }

  void from_tap(wire::Bytes frame);
  void from_ib(const RxInfo& info, wire::Bytes packet);
  Mac source_mac(const RxInfo& info);
  bool may_claim(const RxInfo& info, const HwAddr& a) const;
};

// ---- TAP -> IB ----------------------------------------------------------
void Bridge::Impl::from_tap(wire::Bytes frame) {
  ++cnt.tap_rx;
  if (!carrier) return void(++cnt.drop_down);
  join_standard_groups();
  if (frame.size() < wire::kEthHeader) return void(++cnt.drop_malformed_frame);
  Mac dst{};
  std::copy_n(frame.begin(), 6, dst.begin());
  const std::uint16_t type = wire::be16(frame, 12);
  const auto payload = frame.subspan(wire::kEthHeader);
  if (type != wire::kEtherArp && type != wire::kEtherIpv4 && type != wire::kEtherIpv6)
    return void(++cnt.drop_ethertype);
  if (payload.size() > mtu()) return void(++cnt.drop_too_big);

  // RFC 4391 §6: EtherType, 2 reserved bytes, the payload.
  Packet out{static_cast<std::uint8_t>(type >> 8), static_cast<std::uint8_t>(type), 0, 0};
  std::vector<std::uint8_t> body;
  Verdict v = Verdict::ok;
  std::vector<MembershipChange> changes;
  if (type == wire::kEtherArp) {
    v = arp_to_ib(payload, nt, body);
    if (v == Verdict::ok) ++cnt.arp_out;
  } else if (type == wire::kEtherIpv4) {
    auto ip = valid_ipv4(payload);
    if (!ip) return void(++cnt.drop_malformed_frame);
    body.assign(ip->begin(), ip->end());
    changes = snoop_ipv4(body);
  } else {
    bool nd = false;
    v = nd_to_ib(payload, nt, body, &nd);
    if (v == Verdict::ok && nd) ++cnt.nd_out;
    if (v == Verdict::ok) changes = snoop_ipv6(body);
  }
  if (v == Verdict::malformed) return void(++cnt.drop_malformed_frame);
  if (v == Verdict::unknown_mac) return void(++cnt.drop_unknown_mac);
  if (body.size() > mtu()) return void(++cnt.drop_too_big);  // ND options grow
  out.insert(out.end(), body.begin(), body.end());

  // Where it goes, from the Ethernet destination (RFC 4391 §4).
  // Multicast above the group's MTU is dropped, as Linux's ipoib does in
  // connected mode (an ICMP error about a multicast destination would come
  // from a multicast source, which the kernel ignores).
  if (dst == kBroadcastMac) {
    if (body.size() > ud_mtu()) return void(++cnt.drop_too_big);
    snoop(changes);
    return send_group(bcast, std::move(out));
  }
  if (dst[0] & 1) {
    std::optional<Gid> mgid;
    if (type == wire::kEtherIpv4 && (body[16] & 0xF0) == 0xE0)
      mgid = ipv4_mgid(wire::be32(body, 16), link.pkey);
    if (type == wire::kEtherIpv6 && body[24] == 0xFF) {
      std::array<std::uint8_t, 16> group{};
      std::copy_n(body.begin() + 24, 16, group.begin());
      mgid = ipv6_mgid(group, link.pkey);
    }
    if (!mgid) return void(++cnt.drop_malformed_frame);  // a group MAC, no IP group
    if (body.size() > ud_mtu()) return void(++cnt.drop_too_big);
    snoop(changes);
    return send_group(*mgid, std::move(out));
  }
  const auto a = nt.addr_of(dst);
  if (!a || *a == nt.own()) return void(++cnt.drop_unknown_mac);
  if (body.size() > ud_mtu() && !rc_capable(*a)) return too_big(frame);
  snoop(changes);
  send_unicast(*a, std::move(out));
}

// ---- IB -> TAP ----------------------------------------------------------
// The Ethernet source of a received packet. With a GRH (every multicast
// packet; unicast ones routed or sent with one) the SGID and the DETH's
// QPN are the sender's 20-byte address. Without one (Linux sends unicast
// IPoIB without a GRH on one subnet) only the QPN and the SLID are known:
// the neighbour with that QPN whose path has that LID (path_lid), else
// the only neighbour with that QPN; else a MAC made of the QPN and the
// SLID (02-style locally administered 06:qq:qq:qq:ll:ll) that names no
// neighbour. The kernel learns neighbours from ARP and ND only (whose
// addresses are translated from their payload), never from the source
// MAC of IP packets, so such a MAC reaches no table.
Mac Bridge::Impl::source_mac(const RxInfo& info) {
  if (info.sgid) return nt.mac_for(HwAddr{info.src_qpn & 0xFFFFFF, *info.sgid});
  if (const Neighbour* n = nt.find_by_qpn(info.src_qpn & 0xFFFFFF, info.slid)) return n->mac;
  return Mac{0x06, static_cast<std::uint8_t>(info.src_qpn >> 16), static_cast<std::uint8_t>(info.src_qpn >> 8),
             static_cast<std::uint8_t>(info.src_qpn), static_cast<std::uint8_t>(info.slid >> 8),
             static_cast<std::uint8_t>(info.slid)};
}

// docs/ipoib.md "Security": whether a packet's source may name `a` as its
// own 20-byte address (RFC 4391 §9.1.1: flags, QPN, GID) in ARP or ND.
// The QPN must be the DETH's source QPN (IBA 9.8.4.2: the device writes
// it, no consumer chooses it). The GID must be the GRH's SGID (which the
// device takes from its own GID table, IBA 8.3); without a GRH only the
// SLID is known: a GID whose path has another LID, or a LID whose path
// belongs to another GID, cannot be the source's. A LID seen on no path
// tells nothing: then only the QPN is checked.
bool Bridge::Impl::may_claim(const RxInfo& info, const HwAddr& a) const {
  if (a.qpn != (info.src_qpn & 0xFFFFFF)) return false;
  if (info.sgid) return *info.sgid == a.gid;
  for (const auto& [addr, n] : nt.all()) {
    if (!n.lid) continue;
    if (addr.gid == a.gid && *n.lid != info.slid) return false;
    if (addr.gid != a.gid && *n.lid == info.slid) return false;
  }
  return true;
}

void Bridge::Impl::from_ib(const RxInfo& info, wire::Bytes packet) {
  ++cnt.ib_rx;
  if (!carrier) return void(++cnt.drop_down);
  // Our own multicast, looped back by the fabric (IBA 10.5.2.4 lets an
  // HCA deliver it to its own QP).
  if ((info.src_qpn & 0xFFFFFF) == nt.own().qpn && info.sgid == nt.own().gid) return void(++cnt.drop_own);
  if (packet.size() < kEncapBytes) return void(++cnt.drop_malformed_packet);
  const std::uint16_t type = wire::be16(packet, 0);
  const auto payload = packet.subspan(kEncapBytes);
  const bool multicast = info.dgid && is_multicast_gid(*info.dgid);

  std::vector<std::uint8_t> body;
  Mac dst = multicast ? kBroadcastMac : nt.own_mac();
  std::optional<Mac> src;
  const SenderCheck claim_ok = [&](const HwAddr& a) { return may_claim(info, a); };
  if (type == wire::kEtherArp) {
    HwAddr sender;
    const Verdict v = arp_from_ib(payload, nt, body, sender, claim_ok);
    if (v == Verdict::spoofed) return void(++cnt.drop_spoofed);
    if (v != Verdict::ok) return void(++cnt.drop_malformed_packet);
    src = nt.mac_for(sender);
    ++cnt.arp_in;
  } else if (type == wire::kEtherIpv4) {
    auto ip = valid_ipv4(payload);
    if (!ip) return void(++cnt.drop_malformed_packet);
    body.assign(ip->begin(), ip->end());
    // RFC 1112 §6.4: 01:00:5e and the low 23 bits of the group.
    if (multicast && (body[16] & 0xF0) == 0xE0)
      dst = Mac{0x01, 0x00, 0x5E, static_cast<std::uint8_t>(body[17] & 0x7F), body[18], body[19]};
  } else if (type == wire::kEtherIpv6) {
    bool nd = false;
    const Verdict v = nd_from_ib(payload, nt, body, &nd, claim_ok);
    if (v == Verdict::spoofed) return void(++cnt.drop_spoofed);
    if (v != Verdict::ok) return void(++cnt.drop_malformed_packet);
    if (nd) ++cnt.nd_in;
    // RFC 2464 §7: 33:33 and the low 32 bits of the group.
    if (multicast && body[24] == 0xFF) dst = Mac{0x33, 0x33, body[36], body[37], body[38], body[39]};
  } else {
    return void(++cnt.drop_ethertype);
  }
  if (!src) src = source_mac(info);

  std::vector<std::uint8_t> frame(dst.begin(), dst.end());
  frame.insert(frame.end(), src->begin(), src->end());
  frame.push_back(static_cast<std::uint8_t>(type >> 8));
  frame.push_back(static_cast<std::uint8_t>(type));
  frame.insert(frame.end(), body.begin(), body.end());
  ++cnt.tap_tx;
  io.write_tap(frame);
}

// ---- Bridge -------------------------------------------------------------
Bridge::Bridge(BridgeIo& io, const LinkParams& link) : impl_(new Impl(io, counters_, link)), io_(io) {}

Bridge::~Bridge() { delete impl_; }

Mac Bridge::own_mac() const { return impl_->nt.own_mac(); }
std::optional<HwAddr> Bridge::addr_of(const Mac& m) const { return impl_->nt.addr_of(m); }
std::uint32_t Bridge::mtu() const { return impl_->mtu(); }
std::uint32_t Bridge::ud_mtu() const { return impl_->ud_mtu(); }
bool Bridge::knows(const HwAddr& a) const { return impl_->nt.all().count(a) != 0; }

void Bridge::set_link(const LinkParams& link) {
  Impl& b = *impl_;
  b.link = link;
  b.nt.set_own(own_addr(link));
  b.bcast = broadcast_mgid(link.pkey);
  // Resolving ones too: the glue may have dropped the request; their
  // packets wait for the next send's request or the old answer.
  for (auto& [a, n] : b.nt.all()) n.state = PathState::none;
}

void Bridge::set_carrier(bool up) {
  Impl& b = *impl_;
  if (up == b.carrier) {
    if (up) b.join_standard_groups();
    return;
  }
  b.carrier = up;
  if (!up) {
    // Pending packets go; paths are resolved again; send-only groups are
    // joined again on demand, the member ones when the carrier is back.
    for (auto& [a, n] : b.nt.all()) {
      counters_.drop_down += n.pending.size();
      n.pending.clear();
      n.state = PathState::none;
    }
    for (auto it = b.groups.begin(); it != b.groups.end();) {
      counters_.drop_down += it->second.pending.size();
      if (!it->second.full_member) {
        it = b.groups.erase(it);
        continue;
      }
      it->second.pending.clear();
      it->second.state = Group::State::failed;
      ++it;
    }
    return;
  }
  std::vector<Gid> members;
  for (auto& [mgid, g] : b.groups)
    if (g.full_member) members.push_back(mgid);
  for (const Gid& m : members) {
    auto it = b.groups.find(m);
    if (it == b.groups.end() || it->second.state != Group::State::failed) continue;
    it->second.state = Group::State::joining;
    io_.join(m, false);
  }
  b.standard_joined = false;  // joined again below if they were forgotten
  b.join_standard_groups();
}

void Bridge::from_tap(std::span<const std::uint8_t> frame) { impl_->from_tap(frame); }
void Bridge::from_ib(const RxInfo& info, std::span<const std::uint8_t> packet) { impl_->from_ib(info, packet); }
void Bridge::path_resolved(const Gid& gid, bool ok) { impl_->path_resolved(gid, ok); }

void Bridge::path_lost(const Gid& gid) {
  for (auto& [a, n] : impl_->nt.all()) {
    if (a.gid != gid) continue;
    if (n.state == PathState::ready) n.state = PathState::none;
    n.lid.reset();  // no longer evidence of who sends from which LID (may_claim)
  }
}

void Bridge::path_lid(const Gid& gid, std::uint16_t lid) {
  for (auto& [a, n] : impl_->nt.all())
    if (a.gid == gid) n.lid = lid;
}

void Bridge::joined(const Gid& mgid, bool ok) { impl_->joined(mgid, ok); }
void Bridge::member_join(const Gid& mgid) { impl_->member_join(mgid); }
void Bridge::member_leave(const Gid& mgid) { impl_->member_leave(mgid); }

std::vector<NeighbourInfo> Bridge::neighbours() const {
  static constexpr const char* kState[] = {"none", "resolving", "ready", "failed"};
  std::vector<NeighbourInfo> out;
  for (const auto& [a, n] : impl_->nt.all())
    out.push_back(NeighbourInfo{n.mac, HwAddr{a.qpn, a.gid, n.flags}, kState[static_cast<int>(n.state)],
                                n.pending.size(), n.ips});
  return out;
}

std::vector<GroupInfo> Bridge::groups() const {
  static constexpr const char* kState[] = {"joining", "joined", "failed"};
  std::vector<GroupInfo> out{GroupInfo{impl_->bcast, true, "joined"}};
  for (const auto& [mgid, g] : impl_->groups)
    out.push_back(GroupInfo{mgid, g.full_member, kState[static_cast<int>(g.state)]});
  return out;
}

}  // namespace openib::ipoib
