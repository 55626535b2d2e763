// The switch model in process (src/sim/fabric/switch.hpp, docs/ibfabric.md
// "The switch"): its state set directly through its NodeModel face (what
// the SMA engine calls on a Set), packets fed to receive(), what it emits
// captured. Forwarding rules of IBA 18.2.4 and the counters a user reads
// through the PMA.
#include <catch2/catch.hpp>

#include <vector>

#include "mad/sma_attrs.hpp"
#include "sim/fabric/switch.hpp"
#include "sim/fabric/topology.hpp"
#include "sim/wire/crc.hpp"
#include "sim/wire/packet.hpp"

using namespace openib;
using namespace openib::sim;
using Bytes = std::vector<std::byte>;

namespace {

struct Sent {
  unsigned port;
  Bytes bytes;
};

struct Rig {
  fabric::Topology topo;
  std::unique_ptr<fabric::Switch> sw;
  std::vector<Sent> sent;

  Rig() {
    auto t = fabric::parse_topology(R"(Switch 4 "S" # "rig" enhanced port 0 lid 20 lmc 1
[1] "H1"[1]
[2] "H2"[1]
[3] "H3"[1]
[4] "H4"[1]

Ca 1 "H1"
Ca 1 "H2"
Ca 1 "H3"
Ca 1 "H4"
)");
    REQUIRE(t.ok());
    topo = *t;
    sw = std::make_unique<fabric::Switch>(topo.nodes[0]);
    sw->set_emit([this](unsigned port, std::span<const std::byte> p, unsigned) {
      sent.push_back({port, Bytes(p.begin(), p.end())});
    });
    for (unsigned p = 1; p <= 4; ++p) sw->set_link(p, true);
    mad::SwitchInfo si = *sw->switch_info();
    si.linear_fdb_top = 100;
    REQUIRE(sw->set_switch_info(si) == mad::status::kOk);
    // LIDs 1..4 behind ports 1..4.
    mad::LftBlock b;
    b.fill(0xFF);
    for (unsigned l = 1; l <= 4; ++l) b[l] = static_cast<std::uint8_t>(l);
    b[20] = b[21] = 0;
    REQUIRE(sw->set_lft_block(0, b) == mad::status::kOk);
  }
  void state(unsigned port, mad::PortState s) {
    mad::PortInfo pi = sw->port_info(static_cast<std::uint8_t>(port));
    pi.port_state = static_cast<std::uint8_t>(s);
    REQUIRE(sw->set_port_info(static_cast<std::uint8_t>(port), pi) == mad::status::kOk);
  }
  void all_active() {
    for (unsigned p = 1; p <= 4; ++p) state(p, mad::PortState::kActive);
  }
};

Bytes data(std::uint16_t dlid, std::uint16_t slid = 1, std::uint32_t qp = 0x42) {
  wire::Headers h;
  h.lrh.dlid = dlid;
  h.lrh.slid = slid;
  h.bth.opcode = 0x64;
  h.bth.dest_qp = qp;
  h.deth = wire::Deth{0x1234, 7};
  Bytes payload(64, std::byte{0x5a});
  auto p = wire::build_packet(h, payload);
  REQUIRE(p.ok());
  return *p;
}

}  // namespace

TEST_CASE("switch: unicast by LFT only between Active ports", "[switch]") {
  Rig r;
  // Ports in Init (as after training) carry no data (IBA 7.2).
  r.sw->receive(1, data(2));
  CHECK(r.sent.empty());
  CHECK(r.sw->stats().rx_port_not_active == 1);
  r.state(1, mad::PortState::kArmed);
  r.state(1, mad::PortState::kActive);
  // Out port 2 still Init: discarded there (PortXmitDiscards).
  r.sw->receive(1, data(2));
  CHECK(r.sent.empty());
  CHECK(r.sw->port_counters(2).xmit_discards == 1);
  r.state(2, mad::PortState::kActive);
  const Bytes p = data(2);
  r.sw->receive(1, p);
  REQUIRE(r.sent.size() == 1);
  CHECK(r.sent[0].port == 2);
  CHECK(r.sent[0].bytes == p);
  CHECK(r.sw->port_counters(2).xmit_pkts == 1);
  CHECK(r.sw->port_counters(2).xmit_bytes == p.size() - 2);  // LRH..ICRC
  CHECK(r.sw->port_counters(1).rcv_pkts == 3);
}

TEST_CASE("switch: no route, LinearFDBTop, bad DLIDs, own LIDs", "[switch]") {
  Rig r;
  r.all_active();
  r.sw->receive(1, data(7));  // LFT 0xFF
  r.sw->receive(1, data(150));  // above LinearFDBTop (IBA 14.2.5.4)
  CHECK(r.sent.empty());
  CHECK(r.sw->stats().no_route == 2);
  CHECK(r.sw->port_counters(1).rcv_switch_relay_errors == 2);
  r.sw->receive(1, data(0));
  r.sw->receive(1, data(0xFFFF));
  CHECK(r.sw->stats().bad_dlid == 2);
  CHECK(r.sw->port_counters(1).rcv_errors == 2);
  // LID 20 with LMC 1: 20 and 21 are the switch's; a non-PMA packet to them is dropped.
  r.sw->receive(1, data(20));
  r.sw->receive(1, data(21, 1, 1));  // QP1 but not a MAD
  CHECK(r.sw->stats().local_dropped == 2);
  CHECK(r.sent.empty());
  // Garbage shorter than an LRH+BTH: malformed, counted.
  Bytes junk(10, std::byte{1});
  r.sw->receive(1, junk);
  CHECK(r.sw->stats().rx_malformed == 1);
}

TEST_CASE("switch: the VCRC is recomputed per hop, the ICRC left alone", "[switch]") {
  Rig r;
  r.all_active();
  Bytes p = data(3);
  const Bytes good = p;
  p[p.size() - 1] ^= std::byte{0xFF};  // a stale VCRC (as if the previous hop had changed VL)
  r.sw->receive(1, p);
  REQUIRE(r.sent.size() == 1);
  CHECK(r.sent[0].bytes == good);
  CHECK(wire::parse_packet(r.sent[0].bytes).ok());
}

TEST_CASE("switch: multicast by MFT, never back out the arrival port", "[switch]") {
  Rig r;
  r.all_active();
  mad::MftBlock b{};
  b[5] = (1u << 1) | (1u << 2) | (1u << 4);  // MLID 0xC005: ports 1, 2, 4
  REQUIRE(r.sw->set_mft_block(0, 0, b) == mad::status::kOk);
  r.state(4, mad::PortState::kDown);  // port 4 retrains: Init, no data
  r.sw->receive(1, data(0xC005, 1, 0xFFFFFF));
  REQUIRE(r.sent.size() == 1);
  CHECK(r.sent[0].port == 2);
  CHECK(r.sw->port_counters(4).xmit_discards == 1);
  CHECK(r.sw->port_counters(2).multicast_xmit_pkts == 1);
  CHECK(r.sw->port_counters(1).multicast_rcv_pkts == 1);
  r.sw->receive(3, data(0xC006, 1, 0xFFFFFF));  // no entry
  CHECK(r.sw->stats().no_route == 1);
}

TEST_CASE("switch: a pulled cable, PortStateChange and trap 128 to the SM", "[switch]") {
  Rig r;
  r.all_active();
  mad::PortInfo p0 = r.sw->port_info(0);
  CHECK(p0.lid == 20);  // from the topology's "lid 20"
  p0.master_sm_lid = 3;
  REQUIRE(r.sw->set_port_info(0, p0) == mad::status::kOk);
  mad::SwitchInfo si = *r.sw->switch_info();
  si.port_state_change = false;
  REQUIRE(r.sw->set_switch_info(si) == mad::status::kOk);

  r.sw->set_link(2, false);
  const mad::PortInfo pi = r.sw->port_info(2);
  CHECK(pi.port_state == static_cast<std::uint8_t>(mad::PortState::kDown));
  CHECK(pi.port_phys_state == static_cast<std::uint8_t>(mad::PhysState::kPolling));
  CHECK(r.sw->port_counters(2).link_downed == 1);
  CHECK(r.sw->switch_info()->port_state_change);
  REQUIRE(r.sent.size() == 1);  // the trap, LID routed to the SM (LID 3, behind port 3)
  CHECK(r.sent[0].port == 3);
  auto t = wire::parse_packet(r.sent[0].bytes);
  REQUIRE(t.ok());
  CHECK(t->hdr.lrh.vl == 15);
  CHECK(t->hdr.lrh.dlid == 3);
  CHECK(t->hdr.lrh.slid == 20);
  CHECK(t->hdr.bth.dest_qp == 0);
  CHECK(mad::mad_method(t->payload) == mad::method::kTrap);
  // Nothing is taken from a port whose link is down.
  r.sw->receive(2, data(1));
  CHECK(r.sw->stats().rx_link_down == 1);
  // Plugged back: LinkUp, Init, another trap.
  r.sw->set_link(2, true);
  CHECK(r.sw->port_info(2).port_state == static_cast<std::uint8_t>(mad::PortState::kInit));
  CHECK(r.sent.size() == 2);
}

TEST_CASE("switch: PMA counter reset", "[switch]") {
  Rig r;
  r.all_active();
  r.sw->receive(1, data(2));
  REQUIRE(r.sw->port_counters(2).xmit_pkts == 1);
  r.sw->reset_counters(2, sma::counter_bit::kXmitPkts);
  CHECK(r.sw->port_counters(2).xmit_pkts == 0);
  CHECK(r.sw->port_counters(2).xmit_bytes > 0);
  REQUIRE(r.sw->counters(2).has_value());
  CHECK_FALSE(r.sw->counters(9).has_value());
}
