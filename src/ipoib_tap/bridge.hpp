// The IPoIB bridge (docs/ipoib.md; RFC 4391, RFC 4392; issue 16): the
// translation between the kernel's Ethernet frames on the TAP interface
// and IPoIB datagram-mode packets on ibd's UD QP, with no I/O of its own.
// What it needs from ibd (UD sends, frames written to the TAP, path
// resolution, multicast joins) goes through BridgeIo, whose answers come
// back as calls (path_resolved, joined); tests put a fake under it.
//
//  - TAP -> IB: the 14-byte Ethernet header becomes the 4-byte IPoIB
//    header (EtherType, 2 reserved bytes: RFC 4391 §6). Unicast
//    destinations are neighbours: a MAC the bridge handed out for a
//    20-byte address (ARP/ND translation, received packets). Broadcast
//    goes to the broadcast group; IPv4/IPv6 multicast to the group of
//    the IP destination address (RFC 4391 §4), joined SendOnlyNonMember
//    first when the interface is no member. A neighbour or group not
//    ready yet holds the last kPendingPerDest packets (Linux keeps 3).
//  - IB -> TAP: the IPoIB header becomes an Ethernet header whose source
//    is the sender's MAC (learnt from its 20-byte address) and whose
//    destination is the TAP's MAC, or the multicast MAC of the group.
//  - ARP (RFC 4391 §8: htype 32, hlen 20 on IB; htype 1, hlen 6 on the
//    TAP) and IPv6 neighbour discovery (RFC 4391 §9.1.1: link-layer
//    address options of length 3; ICMPv6 checksum redone) are translated
//    both ways.
//  - MACs: each remote 20-byte address gets a locally administered
//    unicast MAC derived from its GID and QPN alone (never its LID), so
//    it survives a LID change and an ibd restart; a collision takes the
//    next free one.
//  - Every frame or packet dropped is counted by reason, never forwarded
//    half-translated.
//
// Single-threaded (ibd's loop). BridgeIo calls may call back in.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace openib::ipoib {

using Gid = std::array<std::uint8_t, 16>;
using Mac = std::array<std::uint8_t, 6>;

inline constexpr std::size_t kEncapBytes = 4;      // RFC 4391 §6
inline constexpr std::size_t kHwAddrBytes = 20;    // RFC 4391 §9.1.1
inline constexpr std::size_t kPendingPerDest = 3;  // packets held per unresolved destination
inline constexpr std::uint32_t kMulticastQpn = 0xFFFFFF;

// The 20-byte link-layer address (RFC 4391 §9.1.1): 1 byte of flags, the
// 24-bit QPN, the 16-byte GID. The flags (RFC 4755 §3.1: 0x80 connected
// mode offered) are what the address says of its owner, not part of the
// address: two addresses with the same QPN and GID are equal.
struct HwAddr {
  std::uint32_t qpn = 0;  // 24 bits
  Gid gid{};
  std::uint8_t flags = 0;
  bool operator==(const HwAddr& o) const { return qpn == o.qpn && gid == o.gid; }
  auto operator<=>(const HwAddr& o) const {
    if (auto c = qpn <=> o.qpn; c != 0) return c;
    return gid <=> o.gid;
  }
};
void encode_hwaddr(std::span<std::uint8_t, kHwAddrBytes> out, const HwAddr& a);
HwAddr decode_hwaddr(std::span<const std::uint8_t, kHwAddrBytes> in);

// The interface's own parameters, from the port and the broadcast group's
// MCMemberRecord.
struct LinkParams {
  Gid port_gid{};           // GID index 0
  std::uint32_t qpn = 0;    // the IPoIB UD QP
  std::uint16_t pkey = 0xFFFF;  // with the full-member bit
  std::uint32_t qkey = 0;   // the broadcast group's Q_Key
  std::uint32_t ib_mtu = 2048;  // the broadcast group's MTU in bytes (datagram mode's TAP MTU = this - 4)
  // Connected mode (RFC 4755; docs/ipoib.md "Connected mode"): the own
  // address offers it (flags 0x80), the TAP's MTU is 65520, and unicast to
  // a neighbour that offers it too goes over the glue's RC connection.
  bool connected = false;
};

// RFC 4391 §4: the MGID of the broadcast group, and of an IPv4 / IPv6
// multicast address (`scope`: the 4-bit scope nibble; 2 link-local).
Gid broadcast_mgid(std::uint16_t pkey, std::uint8_t scope = 2);
Gid ipv4_mgid(std::uint32_t group_host_order, std::uint16_t pkey, std::uint8_t scope = 2);
// IPv6 groups take the broadcast group's scope (2), not their own: what
// Linux's ipv6_ib_mc_map (include/net/if_inet6.h) does, so a group of
// wider scope (ff05::...) maps to the MGID a Linux host joins.
Gid ipv6_mgid(const std::array<std::uint8_t, 16>& group, std::uint16_t pkey, std::uint8_t scope = 2);
// The MAC the bridge gives a 20-byte address (before collision handling).
Mac derive_mac(const HwAddr& a);

// Where a UD packet goes. Unicast: the neighbour's GID and QPN (the glue
// holds its address handle since path_resolved); multicast: the MGID, QPN
// 0xFFFFFF, the group's MLID and Q_Key known to the glue since joined().
struct UdDest {
  bool multicast = false;
  Gid gid{};
  std::uint32_t qpn = 0;
};

// What the bridge asks of ibd.
class BridgeIo {
 public:
  virtual ~BridgeIo() = default;
  // One IPoIB packet (the 4-byte header and the payload) to send.
  virtual void send_ud(const UdDest& to, std::span<const std::uint8_t> packet) = 0;
  // One Ethernet frame for the kernel.
  virtual void write_tap(std::span<const std::uint8_t> frame) = 0;
  // Find a path to `gid` and make its address handle; answer with
  // Bridge::path_resolved(gid, ok) (may be called from inside).
  virtual void resolve_path(const Gid& gid) = 0;
  // Join (send_only: SendOnlyNonMember, else FullMember) / leave a group;
  // answer joins with Bridge::joined(mgid, ok).
  virtual void join(const Gid& mgid, bool send_only) = 0;
  virtual void leave(const Gid& mgid) = 0;
  // Connected mode: may packets to `a` (a neighbour offering connected
  // mode) go over an RC connection? False: the glue has fallen back to
  // datagram mode for it (its REQ was refused or timed out).
  virtual bool rc_usable(const HwAddr& /*a*/) { return false; }
  // One IPoIB packet to `a` over its RC connection, made on demand and
  // the packet held meanwhile. False: there is none and will be none
  // (fallen back): the bridge sends it by UD if it fits.
  virtual bool send_rc(const HwAddr& /*a*/, std::span<const std::uint8_t> /*packet*/) { return false; }
};

// Why frames or packets were dropped, and what went through.
struct BridgeCounters {
  std::uint64_t tap_rx = 0, tap_tx = 0;  // frames from / to the kernel
  std::uint64_t ib_rx = 0, ib_tx = 0;    // packets from / to the fabric
  std::uint64_t arp_out = 0, arp_in = 0, nd_out = 0, nd_in = 0;  // translated
  std::uint64_t drop_malformed_frame = 0;  // short or inconsistent Ethernet/ARP/IPv6/ND
  std::uint64_t drop_ethertype = 0;        // not IPv4, ARP or IPv6
  std::uint64_t drop_too_big = 0;          // payload above the interface's MTU
  std::uint64_t icmp_too_big = 0;          // above its path's MTU: ICMP "fragmentation needed" / "packet too big" to the kernel
  std::uint64_t drop_unknown_mac = 0;      // unicast to a MAC that is no neighbour
  std::uint64_t drop_malformed_packet = 0; // short or inconsistent IPoIB/ARP/ND from the fabric
  std::uint64_t drop_own = 0;              // our own multicast looped back
  std::uint64_t drop_spoofed = 0;          // ARP/ND naming another 20-byte address than its source's
  std::uint64_t drop_no_path = 0;          // path resolution failed (queued packets too)
  std::uint64_t drop_no_group = 0;         // multicast join failed
  std::uint64_t drop_queue_full = 0;       // older pending packets pushed out
  std::uint64_t drop_down = 0;             // no carrier
};

// A neighbour as ibdctl shows it.
struct NeighbourInfo {
  Mac mac{};
  HwAddr addr;  // flags: as its ARP/ND last said
  std::string state;  // "none", "resolving", "ready", "failed"
  std::size_t pending = 0;
  std::vector<std::string> ips;  // seen in ARP / ND (text form)
};

struct GroupInfo {
  Gid mgid{};
  bool full_member = false;  // else send-only
  std::string state;          // "joining", "joined", "failed"
};

class Bridge {
 public:
  Bridge(BridgeIo& io, const LinkParams& link);
  ~Bridge();
  Bridge(const Bridge&) = delete;
  Bridge& operator=(const Bridge&) = delete;

  // The TAP's own MAC (derive_mac of the interface's 20-byte address).
  Mac own_mac() const;
  // The 20-byte address behind a MAC the bridge handed out (the kernel's
  // neighbour entry names it; the RDMA CM's address resolution reads it).
  std::optional<HwAddr> addr_of(const Mac& m) const;
  // Whether `a` is a neighbour the bridge knows (ARP/ND or its packets).
  bool knows(const HwAddr& a) const;
  // The TAP's MTU: in datagram mode the payload an IPoIB packet may carry
  // (ib_mtu - 4), in connected mode 65520 (Linux's IPOIB_CM_MTU; RFC 4755 §5).
  std::uint32_t mtu() const;
  // What a UD packet may carry: ib_mtu - 4 (multicast, and neighbours
  // without a connection).
  std::uint32_t ud_mtu() const;
  // New link parameters (broadcast group rejoined with another Q_Key or
  // MTU, GID or QPN changed): neighbours' paths are forgotten (resolved
  // again on the next send); MACs stay.
  void set_link(const LinkParams& link);
  // Carrier off: pending packets dropped (drop_down), sends dropped until
  // on again; neighbour paths forgotten; send-only groups forgotten.
  // Carrier on (also when it already was; the bridge starts with it on):
  // member groups joined again, and 224.0.0.1 / ff02::1 joined as a
  // member the first time (else at the first frame from the TAP).
  void set_carrier(bool up);

  // One Ethernet frame the kernel sent on the TAP.
  void from_tap(std::span<const std::uint8_t> frame);
  // One received UD packet: the 4-byte IPoIB header and payload (after the
  // 40-byte GRH slot), with the sender's QPN (DETH) and, when the packet
  // had a GRH, its SGID and DGID (multicast packets always do).
  struct RxInfo {
    std::uint32_t src_qpn = 0;
    std::uint16_t slid = 0;
    std::optional<Gid> sgid;
    std::optional<Gid> dgid;
  };
  void from_ib(const RxInfo& info, std::span<const std::uint8_t> packet);

  void path_resolved(const Gid& gid, bool ok);
  // The LID of the resolved path to `gid` (optional: lets from_ib name
  // the sender of a packet without GRH when QPNs repeat across hosts).
  void path_lid(const Gid& gid, std::uint16_t lid);
  // A path changed or went away (path cache revalidation, trap 65): the
  // neighbours on it resolve again on their next send.
  void path_lost(const Gid& gid);
  void joined(const Gid& mgid, bool ok);
  // The kernel joined / left an IP multicast group on the interface (the
  // glue learns it from the IGMP/MLD reports the kernel sends: the bridge
  // parses them itself in from_tap and calls io.join/leave; these are for
  // groups learnt otherwise).
  void member_join(const Gid& mgid);
  void member_leave(const Gid& mgid);

  std::vector<NeighbourInfo> neighbours() const;
  std::vector<GroupInfo> groups() const;
  const BridgeCounters& counters() const { return counters_; }

 private:
  struct Impl;
  Impl* impl_;
  BridgeIo& io_;
  BridgeCounters counters_;
};

}  // namespace openib::ipoib
