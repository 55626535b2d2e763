// simhca's Ethernet ports (docs/simhca.md §16): RoCEv2 at the port's edge.
// The packet engine builds and takes InfiniBand packets; an Ethernet port
// turns each one it sends into a RoCEv2 frame (wire/roce.hpp: the GRH's
// GIDs become IP addresses, the address vector's dmac the Ethernet
// destination) and each RoCEv2 frame it receives back into a packet with a
// GRH made from the IP header, after the checks a RoCE NIC makes (IBA
// Annex A17; Linux's rxe_rcv: the ICRC, the destination IP one of the
// port's GIDs, an RC/UC packet's source IP the QP's peer).
#include <algorithm>

#include "sim/simhca/hca.hpp"
#include "sim/wire/packet.hpp"
#include "sim/wire/roce.hpp"

namespace openib::simhca {

namespace w = openib::sim::wire;

// RFC 4291 2.7: ff00::/8; RFC 5771: an IPv4-mapped 224.0.0.0/4.
bool is_roce_multicast_gid(const std::array<uint8_t, 16>& g) {
  if (g[0] == 0xff) return true;
  w::Gid v{};
  std::copy(g.begin(), g.end(), v.begin());
  return w::is_ipv4_mapped(v) && (g[12] & 0xf0) == 0xe0;
}

namespace {

// The Ethernet group address of a multicast GID (RFC 1112 6.4: 01:00:5e
// and the low 23 bits of the IPv4 group; RFC 2464 7: 33:33 and the last
// 32 bits of the IPv6 group), as Linux's rdma_get_mcast_mac.
w::Mac multicast_mac(const std::array<uint8_t, 16>& g) {
  if (g[0] == 0xff) return {0x33, 0x33, g[12], g[13], g[14], g[15]};
  return {0x01, 0x00, 0x5e, static_cast<uint8_t>(g[13] & 0x7f), g[14], g[15]};
}

}  // namespace

bool Hca::is_ethernet(uint8_t port) const {
  return port >= 1 && port <= kMaxPorts && port_at(port).info.link_layer == kLinkLayerEthernet;
}

// §16.1: the port's MAC: locally administered (02), then the low 40 bits
// of node GUID + port number; its port GUID is the MAC's EUI-64 (RFC 4291
// 2.5.1: ff:fe in the middle, the U/L bit inverted), so GID entry 0,
// fe80:: : port GUID, is the IPv6 link-local address Linux gives the
// port's netdev (and rxe its GID 0).
void Hca::init_ethernet_port(uint8_t port) {
  Port& pt = port_at(port);
  const uint64_t base = opts_.caps.node_guid + port;
  pt.mac = {0x02, static_cast<uint8_t>(base >> 32), static_cast<uint8_t>(base >> 24),
            static_cast<uint8_t>(base >> 16), static_cast<uint8_t>(base >> 8), static_cast<uint8_t>(base)};
  uint64_t eui = 0;
  for (uint8_t b : {static_cast<uint8_t>(pt.mac[0] ^ 0x02), pt.mac[1], pt.mac[2], uint8_t{0xff}, uint8_t{0xfe},
                    pt.mac[3], pt.mac[4], pt.mac[5]})
    eui = (eui << 8) | b;
  pt.info.link_layer = kLinkLayerEthernet;
  pt.info.port_guid = eui;
  pt.info.cap_flags = 0;  // no SMA, no subnet manager (§16.1)
  pt.info.max_mtu = 5;    // 4096: a frame of 4,096 bytes of payload fits the cable (docs/cables.md)
  pt.info.active_mtu = roce_active_mtu(opts_.eth_mtu);
}

// §16.1: the largest IBA MTU (code 1..5) whose packets fit an IP MTU of
// `ip_mtu` bytes with every header a RoCEv2 packet may carry: IPv6 40,
// UDP 8, BTH 12, XRCETH 4, AtomicETH 28, ICRC 4 (96 bytes, the allowance
// Linux's iboe_get_mtu makes, so that rxe on a netdev of that MTU reports
// the same): 1500 gives 1024, 4192 and more (jumbo frames) 4096.
uint8_t roce_active_mtu(uint16_t ip_mtu) {
  constexpr unsigned kHeaders = 40 + 8 + 12 + 4 + 28 + 4;
  uint8_t code = 5;
  while (code > 1 && (128u << code) + kHeaders > ip_mtu) --code;
  return code;
}

// A GID of the port's table (any entry): the destination IP of a RoCEv2
// frame the port takes. Asked on every frame and every packet sent
// (av_is_local): entry 0 as kept made, then only the entries SET_GID
// filled (Port::gids_used), not the whole table.
bool Hca::own_gid(uint8_t port, const std::array<uint8_t, 16>& gid) const {
  const Port& pt = port_at(port);
  if (pt.own_gid0().gid == gid) return true;
  const size_t n = std::min<size_t>(pt.info.gid_table_len, kGidTableLen);
  for (unsigned used = pt.gids_used & ~1u; used != 0; used &= used - 1) {
    const auto i = static_cast<size_t>(__builtin_ctz(used));
    if (i < n && pt.gids[i].gid == gid) return true;
  }
  return false;
}

// §16.3: an RC/UC packet's GRH names the QP's peer as source and the
// QP's own GID (its path's entry, or entry 0 when that one is gone, as
// address_packet sends) as destination.
bool Hca::addressed_to_connection(uint8_t port, const Qp& qp, const w::ParsedPacket& p) const {
  if (!p.hdr.grh || p.hdr.grh->sgid != qp.attrs.av.dgid) return false;
  return p.hdr.grh->dgid == port_at(port).source_gid(qp.attrs.av.sgid_index).gid;
}

bool Hca::av_is_local(uint8_t port, const Av& av) const {
  if (!is_ethernet(port)) return for_own_port(port, av.dlid);
  return av.grh() && own_gid(port, av.dgid);
}

bool Hca::av_is_multicast(uint8_t port, const Av& av) const {
  if (!is_ethernet(port)) return is_multicast_lid(av.dlid);
  return av.grh() && is_roce_multicast_gid(av.dgid);
}

// §16.2: a packet the engine framed (LRH through the pad; its CRCs are
// not computed) leaves as a RoCEv2 frame to the address vector's dmac (a
// group's MAC for a multicast DGID). A packet without a GRH cannot be
// framed: counted and dropped.
bool Hca::transmit_frame(uint8_t port, size_t len, sim::Link::Filler fill, const Av& av, bool multicast) {
  if (!port_may_send(port, false, false)) return false;  // (as transmit())
  Port& pt = port_at(port);
  if (!pt.link) {
    ++pt.pma.xmit_discards;
    return false;
  }
  // The packet is built after room for the frame's headers, which are then
  // written over its LRH and GRH: its payload is copied once, from host
  // memory (no IBA CRCs: the frame gets a RoCEv2 ICRC of its own).
  constexpr size_t kAt = w::kRoceInPlaceHeadroom;
  eth_frame_.resize(kAt + len + w::kMinEthFrameBytes);
  if (!fill(std::span<std::byte>(eth_frame_).subspan(kAt, len))) return false;
  const w::Mac dmac = multicast ? multicast_mac(av.dgid) : w::Mac{av.dmac};
  auto f = w::ib_to_roce_in_place(eth_frame_, kAt, len, dmac, pt.mac, std::nullopt);
  if (!f) {  // no GRH (the driver's AV lacks one), or a GID pair of mixed families
    ++dstats_.tx_not_framed;
    ++pt.pma.xmit_discards;
    return false;
  }
  if (auto r = pt.link->send(std::span<const std::byte>(eth_frame_.data() + f->offset, f->length)); !r) {
    ++pt.pma.xmit_discards;
    return false;
  }
  count_tx(port, f->length, multicast);
  return true;
}

// §16.5: a raw QP's SEND: the gathered bytes are the frame, destination
// MAC first, no FCS; they leave on the cable as they are (never looped
// back, whatever the destination). The length was checked when the WQE
// was taken (QueueEngine::fetch_send). A port that cannot send drops the
// frame and counts it, as it does a packet: the WQE still succeeds.
bool Hca::send_frame(uint8_t port, const Payload& payload) {
  Port& pt = port_at(port);
  const size_t len = payload.size();
  eth_frame_.resize(len);
  if (payload.ext) {
    if (!queues_.gather(*payload.ext, payload.off, std::span<std::byte>(eth_frame_.data(), len))) return false;
  } else {
    std::copy(payload.bytes.begin(), payload.bytes.end(), eth_frame_.begin());
  }
  if (!port_may_send(port, false, false)) return true;
  if (!pt.link || !pt.link->send(std::span<const std::byte>(eth_frame_.data(), len))) {
    ++pt.pma.xmit_discards;
    return true;
  }
  count_tx(port, len, len > 0 && (eth_frame_[0] & std::byte{1}) != std::byte{0});  // I/G bit: group address
  ++dstats_.raw_tx_frames;
  ++dstats_.tx_packets;
  return true;
}

// §16.5: a frame the RoCE transport does not take goes, whole, to every
// raw QP of the port that can receive (RTR, RTS, SQD, SQE), each its own
// copy (a tap: an ARP request for the host stack reaches every raw QP).
// Each takes its next receive WQE; none posted: counted rx_no_wqe and that
// QP misses the frame. false: the port has no raw QP able to receive (the
// caller counts the frame as before).
bool Hca::steer_to_raw(uint8_t port, std::span<const std::byte> frame) {
  Port& pt = port_at(port);
  bool taken = false;
  for (const uint32_t qpn : pt.raw_qps) {
    Qp* qp = tables_.qps.get(qpn);
    if (!qp) continue;
    const uint8_t st = qp->attrs.state;
    if (st != kRtr && st != kRts && st != kSqd && st != kSqe) continue;
    if (!taken) count_rx(port, frame.size(), (frame[0] & std::byte{1}) != std::byte{0});
    taken = true;
    const int r = queues_.fetch_recv(qpn, *qp);
    if (r <= 0) {
      if (r == 0) ++dstats_.rx_no_wqe, ++dstats_.raw_rx_no_wqe;  // as UD's (IBA 9.8.4): silently dropped
      continue;
    }
    // §12.2: the frame from the buffer's first byte (no GRH area).
    RecvCtx& rw = qp->rt.rwqe;
    Cqe c;
    if (!rw.resolved) {
      for (const Sge& s : rw.w.sges)
        if (s.length &&
            queues_.resolve(s.lkey, qp->cfg.pdn, s.addr, s.length, kMrLocalWrite, rw.ext) != KeyFault::kNone)
          c.status = kWcLocProtErr;
      rw.resolved = true;
    }
    if (c.status == kWcSuccess && frame.size() > rw.w.capacity()) c.status = kWcLocLenErr;
    if (c.status == kWcSuccess && !queues_.scatter(rw.ext, 0, frame)) c.status = kWcLocProtErr;
    if (c.status != kWcSuccess) {
      queues_.complete_recv(qpn, *qp, c);
      queues_.qp_to_error(qpn, *qp, kErr);
      continue;
    }
    c.opcode = kWcRecv;
    c.byte_len = static_cast<uint32_t>(frame.size());
    queues_.complete_recv(qpn, *qp, c);
    ++dstats_.raw_rx_frames;
  }
  return taken;
}

// §16.3: a frame from an Ethernet port's cable. RoCEv2 to one of the
// port's GIDs goes to the engine as an InfiniBand packet (LID 0 both
// ways, a multicast DLID for a multicast DGID so that the group's path
// takes it); a frame that is not RoCEv2, or RoCEv2 for another address,
// goes to the port's raw QPs (§16.5); the rest is counted and dropped.
void Hca::receive_frame(uint8_t port, std::span<const std::byte> frame) {
  Port& pt = port_at(port);
  if (!initialized_ || fatal_ || pt.info.phys_state != kPhysLinkUp) {
    ++dstats_.rx_port_down;
    return;
  }
  auto f = w::parse_roce_frame(frame);
  if (!f) {
    switch (f.error().code) {
      case ENOENT:  // ARP, IPv6 ND, other UDP...: the host stack's (§16.5)
        if (!steer_to_raw(port, frame)) ++dstats_.rx_not_roce;
        break;
      case EBADMSG: ++dstats_.rx_bad_icrc; ++pt.pma.rcv_errors; break;
      default: ++dstats_.rx_malformed; ++pt.pma.rcv_errors; break;
    }
    return;
  }
  std::array<uint8_t, 16> dgid{};
  std::copy(f->addr.dgid.begin(), f->addr.dgid.end(), dgid.begin());
  const bool multicast = is_roce_multicast_gid(dgid);
  if (!multicast && (f->addr.dmac != pt.mac || !own_gid(port, dgid))) {
    // rxe_chk_dgid: not an address of this port; a raw QP may want it (§16.5)
    if (!steer_to_raw(port, frame)) ++dstats_.rx_not_our_gid;
    return;
  }
  // A group's frame goes to a group MAC (the I/G bit) and to the multicast
  // QPN (IBA 10.5.2: 0xFFFFFF), never to QP1 or a QP by number.
  if (multicast && ((f->addr.dmac[0] & 1) == 0 || w::read_bth(f->transport.data()).dest_qp != 0xffffff)) {
    ++dstats_.rx_bad_addr;
    return;
  }
  eth_rx_.resize(f->transport.size() + w::kLrhBytes + w::kGrhBytes + w::kIcrcBytes + w::kVcrcBytes);
  // No IBA CRCs (receive_on_port does not check them; the ICRC was).
  auto n = w::roce_to_ib(*f, multicast ? uint16_t{0xc000} : uint16_t{0}, 0, eth_rx_, false);
  if (!n) {
    ++dstats_.rx_malformed;
    ++pt.pma.rcv_errors;
    return;
  }
  receive_on_port(port, std::span<const std::byte>(eth_rx_.data(), *n), false, nullptr, frame.size());
}

}  // namespace openib::simhca
