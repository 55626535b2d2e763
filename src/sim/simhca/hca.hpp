// The simhca device core's composition root (docs/simhca.md §13
// "Implementation map"): the initialization segment (§3), reset (§11.5)
// and the device fatal state (§11.4) are its own; it owns the units (the
// command queue §5, the resource tables §7, the event unit §9-§10, the
// queue engine §12.1-§12.6, the transport units §12.8) and routes BAR
// accesses, UAR doorbells (§4) and packets to them. The §6 commands and
// the port agent (§12.7, §14, §15) are still its member functions
// (commands.cpp, port_agent.cpp, sma.cpp, pma.cpp).
//
// It knows nothing of vfio-user: host memory and interrupts are reached
// through a HostPort, so tests and the fuzz target can run it against a
// fake bus. Single-threaded; every entry point runs on the caller's thread.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <optional>
#include <span>
#include <vector>

#include "common/log.hpp"
#include "common/result.hpp"
#include "sim/cable/link.hpp"
#include "sim/simhca/codec.hpp"
#include "sim/simhca/command_queue.hpp"
#include "sim/simhca/event_unit.hpp"
#include "sim/simhca/host_port.hpp"
#include "sim/simhca/doorbell_scanner.hpp"
#include "sim/simhca/port.hpp"
#include "sim/simhca/queue_engine.hpp"
#include "sim/simhca/rc_requester.hpp"
#include "sim/simhca/rc_responder.hpp"
#include "sim/simhca/resource_tables.hpp"
#include "sim/simhca/resources.hpp"
#include "sim/simhca/transport_ops.hpp"
#include "sim/simhca/ud_transport.hpp"
#include "sim/sma/engine.hpp"

namespace openib::sim::wire {
struct ParsedPacket;
struct Headers;
}

namespace openib::simhca {

struct HcaOptions {
  Caps caps;                               // caps.num_ports: §13 --ports (1 or 2)
  std::chrono::milliseconds cmd_delay{0};  // §13 --cmd-delay-ms
  std::string node_desc;                   // §14.3 NodeDescription (§13 --node-desc); "" = default
  uint8_t link_layer = kLinkLayerInfiniBand;  // §16 (§13 --link-layer): every port's
  uint16_t eth_mtu = 1500;  // §16.1 (§13 --eth-mtu): an Ethernet port's IP MTU, kMinEthMtu..kMaxEthMtu
};
// §16.1: the IP MTUs --eth-mtu takes: RFC 791's 576 (every host takes
// such datagrams) to a jumbo frame's 9000 (wire/roce.hpp kMaxRoceFrameBytes).
inline constexpr uint16_t kMinEthMtu = 576, kMaxEthMtu = 9000;
// §16.1: an Ethernet port's active MTU (IBA code, 1..5) for an IP MTU (ethernet_port.cpp).
uint8_t roce_active_mtu(uint16_t ip_mtu);

struct HcaStats {
  uint64_t cmds_completed = 0;
  uint64_t cmds_dropped = 0;    // §3 CMDS_DROPPED
  uint64_t bad_access = 0;      // §3 BAD_ACCESS
  uint64_t cmds_failed = 0;     // completed with a status other than OK
  uint64_t events_written = 0;
  uint64_t events_dropped = 0;  // no EQ takes it, EQ full, or EQ ring unwritable
  uint64_t irqs_signalled = 0;
  uint64_t mmap_doorbells = 0;      // §12.5: doorbell words found changed in a UAR page
  uint64_t mmap_doorbells_bad = 0;  // ... and ignored (garbage), also in bad_access
  uint64_t sq_records_bad = 0;      // §12.5: SQ counters in doorbell records refused
};

// §12.8 data path counters (logged at exit; tests read them).
struct DataStats {
  uint64_t sq_doorbells = 0, tx_packets = 0, tx_dropped = 0, rx_packets = 0;
  uint64_t rx_malformed = 0, rx_port_down = 0, rx_bad_dlid = 0, rx_bad_pkey = 0,
           rx_bad_qkey = 0, rx_no_qp = 0, rx_bad_state = 0, rx_no_wqe = 0, rx_dropped_seq = 0,
           rx_duplicates = 0, rx_bad_response = 0;
  uint64_t acks_sent = 0, naks_sent = 0, rnr_naks_sent = 0, retransmits = 0, timeouts = 0;
  uint64_t cqes_written = 0, cqes_dropped = 0, cq_overruns = 0, wqes_executed = 0;
  uint64_t messages_received = 0;
  // §14, §15: management datagrams
  uint64_t tx_port_down = 0;       // a packet the port's state does not let out (IBA 7.2)
  uint64_t loopback_packets = 0;   // packets to this device's own port, not on the wire (§12.7)
  uint64_t rx_bad_vl = 0;          // QP0 not on VL15, or VL15 not to QP0 (IBA 7.6.5)
  uint64_t smps_answered = 0, smps_to_driver = 0, smps_dropped = 0, mkey_violations = 0;
  uint64_t gmps_answered = 0, gmps_to_driver = 0, mads_dropped = 0;
  // §6.11, §12.8: UD multicast
  uint64_t mcast_delivered = 0;     // copies received by attached QPs (a packet may make several)
  uint64_t mcast_loopback = 0;      // packets copied to the sending port's other members (§12.7)
  uint64_t rx_mcast_no_grh = 0;     // multicast DLID without a GRH
  uint64_t rx_mcast_no_group = 0;   // no QP of the port attached to the DGID
  // §16 Ethernet ports
  uint64_t rx_not_roce = 0;      // a frame that is not RoCEv2 (ARP, IPv6 ND, ...) and no raw QP took it
  uint64_t rx_bad_icrc = 0;      // RoCEv2 with a wrong ICRC (malformed ones are in rx_malformed)
  uint64_t rx_not_our_gid = 0;   // RoCEv2 to another MAC or IP than the port's (rxe_chk_dgid)
  uint64_t rx_bad_addr = 0;      // RC/UC from another IP than the QP's peer, or to QP0
  uint64_t tx_not_framed = 0;    // a packet without a GRH on an Ethernet port
  // §16.5 the raw Ethernet QP
  uint64_t raw_tx_frames = 0;    // frames raw QPs sent onto the cable
  uint64_t raw_rx_frames = 0;    // copies of frames received by raw QPs (a frame may make several)
  uint64_t raw_rx_no_wqe = 0;    // copies a raw QP dropped for want of a posted receive (also in rx_no_wqe)
};

// The composition root: it owns the units (the transport's in
// rc_requester, rc_responder, ud_transport; see docs/simhca.md
// "Implementation map") and routes BAR accesses, doorbells and packets to
// them. The transport units reach the rest of the device only through
// QueueOps (the queue engine) and WireOps (transport_ops.hpp, which Hca
// implements as the ports' side).
class Hca final : private WireOps, private CommandExecutor {
 public:
  using Clock = std::chrono::steady_clock;

  Hca(HostPort& host, HcaOptions opts);
  ~Hca();
  Hca(const Hca&) = delete;
  Hca& operator=(const Hca&) = delete;

  // §3: BAR0, 4-byte aligned accesses (the caller handles other sizes by
  // calling count_bad_access()).
  uint32_t bar0_read32(uint64_t offset) const;
  void bar0_write32(uint64_t offset, uint32_t value);
  // §4: an 8-byte write to UAR page `uar` at `offset` in the page.
  void uar_write64(uint32_t uar, uint64_t offset, uint64_t value);
  // §12.5: the scanner noticed UAR page `uar` change; the doorbell words
  // that differ from the last ones taken are doorbells.
  void uar_scan(uint32_t uar);
  void count_bad_access() { ++stats_.bad_access; }

  // §5.3: doorbell bits are latched; commands run from here. next_due()
  // says when run_due() has work (nullopt: none).
  std::optional<Clock::time_point> next_due() const;
  void run_due(Clock::time_point now);

  // §11.5 function reset.
  void reset();

  // §12.7 ports: the link of port `port` (1..num_ports). Not owned; it must
  // outlive the Hca or be detached (nullptr) first. Packets it receives are
  // handed to receive_packet() on the device's thread.
  void attach_link(uint8_t port, sim::Link* link);
  // §14.3: the far end of port `port`'s cable says it was pulled (false)
  // or plugged back (true) (docs/cables.md "Link state"): the port loses
  // its link (Polling, Down) and keeps polling until it is plugged, then
  // trains (LinkUp, Init). Repeats change nothing. On the device's thread.
  void set_cable_light(uint8_t port, bool up);
  // §12.8: one packet from the link of port 1 / of `port` (LRH through VCRC).
  void receive_packet(std::span<const std::byte> packet, Clock::time_point now);
  void receive_packet(uint8_t port, std::span<const std::byte> packet, Clock::time_point now);
  // The same for a packet its link has already checked and parsed
  // (ShmLink::set_parsed_receiver): not parsed again; wire_bytes is its
  // size, LRH through VCRC (a packet of a segment has no bytes of its own).
  void receive_packet(uint8_t port, size_t wire_bytes, const sim::wire::ParsedPacket& parsed,
                      Clock::time_point now);
  // §6.3 / §14: a port's state as QUERY_PORT shows it (port 1..num_ports).
  const PortInfo& port_info(uint8_t port) const { return port_at(port).info; }
  // §6.12: GID table entry `index` of `port` (type kGidTypeNone: empty or
  // out of the table); entry 0 is gid_prefix : port_guid.
  GidEntry gid_entry(uint8_t port, uint16_t index) const;
  const sim::sma::PortCounterValues& pma_counters(uint8_t port) const { return port_at(port).pma; }
  // §14 / §15 agent statistics.
  const sim::sma::SmaStats& sma_stats() const { return sma_->stats(); }
  const sim::sma::PmaStats& pma_stats() const { return pma_->stats(); }

  // §3 counters, the event unit's included.
  HcaStats stats() const;
  // The §12.8 counters, those the transport units keep included.
  DataStats data_stats() const;
  bool initialized() const { return initialized_; }

  // Executes one command directly (the fuzz target and the command queue
  // both come through here). `in` is the gathered input; `out` receives
  // the output layout on success.
  Outcome execute(uint16_t opcode, ByteView in, Bytes& out) override;

 private:
  // UAR doorbells (uar_doorbells.cpp), §4, §12.5: routed to the event unit
  // and the queue engine; false if refused (counted in bad_access).
  bool uar_doorbell(uint32_t uar, size_t word, uint64_t v);
  // §12.5 UAR bookkeeping: EQs, CQs and QPs make a page watched.
  void uar_ref(uint32_t uar, int delta);
  void uar_link_qp(uint32_t qpn, Qp& qp);
  void uar_unlink_qp(uint32_t qpn, Qp& qp);
  void uar_link_cq(uint32_t cqn, Cq& cq);
  void uar_unlink_cq(uint32_t cqn, Cq& cq);
  void enter_fatal(uint32_t syndrome);
  void emit_event(uint8_t type, uint32_t number, std::optional<uint32_t> eqn = std::nullopt,
                  uint8_t byte4 = 0) {
    events_.emit(type, number, eqn, byte4);
  }

  // §12.7 (port_agent.cpp): IBA 9.7.1: RC/UC segment by the path MTU; UD by the port's.
  uint32_t mtu_bytes(const Qp& qp) const override;

  // ports (port index 1..num_ports; out-of-range numbers mean port 1)
  Port& port_at(uint8_t n) { return ports_[n >= 1 && n <= kMaxPorts ? n - 1 : 0]; }
  const Port& port_at(uint8_t n) const { return ports_[n >= 1 && n <= kMaxPorts ? n - 1 : 0]; }
  uint8_t qp_port(const Qp& qp) const override;
  uint8_t port_lmc(uint8_t port) const override { return port_at(port).info.lmc; }
  void count_qkey_violation(uint8_t port) override { ++port_at(port).info.qkey_violations; }
  void reset_ports();
  void port_event_state(uint8_t port, uint8_t from, uint8_t to);
  void port_event_lid(uint8_t port, uint16_t lid);
  void port_event(uint8_t type, uint8_t port);  // §9.4 events whose data is the port
  uint8_t trained_state(uint8_t port) const;

  // §12.7 packets out (port_agent.cpp): the port side of the transport units
  // (WireOps). false only if the payload could not be read from host
  // memory (the caller fails its WQE); a packet the port drops is counted,
  // true. seg: the payload is a segment's (Link::send_segment), `h` its
  // first packet's headers.
  bool send_packet(sim::wire::Headers& h, const Payload& payload, const Av& av, uint8_t port,
                   const sim::Segment* seg) override;
  void send_packet(sim::wire::Headers& h, std::span<const std::byte> payload, const Av& av,
                   uint8_t port = 1) {
    (void)send_packet(h, Payload{payload}, av, port, nullptr);
  }
  void address_packet(sim::wire::Headers& h, const Av& av, uint8_t port) const;
  // §12.7: a packet of `len` bytes, written by `fill`, to the wire of
  // `port` (in place where the link allows), or back into this device when
  // it is addressed to the port itself (loopback). false: dropped, or
  // `fill` gave up.
  // payload_at: where the packet's payload starts (Link::send_with).
  // seg: `fill` writes a segment (Link::send_segment) of `len` bytes.
  // multicast: counted as a multicast packet (§15).
  bool transmit(uint8_t port, size_t len, sim::Link::Filler fill, bool management, bool local,
                size_t payload_at = 0, const sim::Segment* seg = nullptr, bool multicast = false);
  bool transmit(uint8_t port, std::vector<std::byte> pkt, bool management, bool local);
  bool port_may_send(uint8_t port, bool management, bool local);
  bool for_own_port(uint8_t port, uint16_t dlid) const override;
  void deliver_loopback();
  // §16 Ethernet ports (ethernet_port.cpp).
  bool is_ethernet(uint8_t port) const;
  void init_ethernet_port(uint8_t port);
  bool own_gid(uint8_t port, const std::array<uint8_t, 16>& gid) const;
  bool addressed_to_connection(uint8_t port, const Qp& qp, const sim::wire::ParsedPacket& p) const;
  bool av_is_local(uint8_t port, const Av& av) const;      // loopback: to the port itself
  bool av_is_multicast(uint8_t port, const Av& av) const;  // a multicast DLID, or (Ethernet) DGID
  bool transmit_frame(uint8_t port, size_t len, sim::Link::Filler fill, const Av& av, bool multicast);
  void receive_frame(uint8_t port, std::span<const std::byte> frame);
  // §16.5: a raw QP's frame out; a frame the RoCE transport does not take,
  // to the port's raw QPs (false: the port has none able to receive).
  bool send_frame(uint8_t port, const Payload& payload) override;
  bool steer_to_raw(uint8_t port, std::span<const std::byte> frame);
  sim::Link* qp_link(const Qp& qp) override;

  // management datagrams (port_agent.cpp, sma.cpp, pma.cpp): §14, §15
  class CaNode;  // the SMA/PMA engine's node model of this CA (sma.cpp)
  void init_agents();
  void init_sma_port(uint8_t port);
  mad::PortInfo sma_port_info(uint8_t port) const;
  uint16_t sma_set_port_info(uint8_t port, const mad::PortInfo& next);
  void port_bounce(uint8_t port, bool disable);
  void send_smp(uint8_t port, std::span<const std::byte> mad, uint16_t dlid, uint32_t dest_qp, bool local,
                const sim::wire::ParsedPacket* req);
  void trap_tick();
  void receive_from_link(uint8_t port, std::span<const std::byte> packet, const sim::wire::ParsedPacket* parsed,
                         size_t wire_bytes, Clock::time_point now);
  // `packet` is parsed unless `parsed` is given; then only wire_bytes counts.
  void receive_on_port(uint8_t port, std::span<const std::byte> packet, bool local,
                       const sim::wire::ParsedPacket* parsed = nullptr, size_t wire_bytes = 0);
  void receive_smp(uint8_t port, const sim::wire::ParsedPacket& p, bool local);
  void receive_gmp(uint8_t port, const sim::wire::ParsedPacket& p, bool local);
  // `mad`: the MAD to deliver instead of the packet's payload (the SMA's
  // receive step of IBA 14.2.2 changed its hop pointer).
  bool deliver_to_qp(uint32_t wire_qpn, uint8_t port, const sim::wire::ParsedPacket& p,
                     std::span<const std::byte> mad = {});
  void reply_gmp(uint8_t port, const sim::wire::ParsedPacket& req, std::span<const std::byte> mad, bool local);
  bool smi_is_local(uint8_t port, std::span<const std::byte> mad, uint16_t dlid) const;
  void count_tx(uint8_t port, size_t bytes, bool multicast);
  void count_rx(uint8_t port, size_t bytes, bool multicast);

  // UD multicast (multicast.cpp), §6.11, §12.7, §12.8
  void receive_multicast(uint8_t port, const sim::wire::ParsedPacket& p, bool local);
  // A QP of `port` other than `sender` attached to `mgid`: the sending
  // port's copy is needed (§12.7 loopback).
  bool other_local_members(uint8_t port, const Mgid& mgid, uint32_t sender) const;

  // commands (commands.cpp), §6
  Outcome dispatch(uint16_t opcode, ByteView in, Bytes& out);
  Outcome cmd_query_device_cap(Bytes& out);
  Outcome cmd_init_hca();
  Outcome cmd_teardown_hca(ByteView in);
  Outcome cmd_query_port(ByteView in, Bytes& out);
  Outcome cmd_set_port(ByteView in);
  Outcome cmd_query_gid(ByteView in, Bytes& out);
  Outcome cmd_set_gid(ByteView in);
  Outcome cmd_create_eq(ByteView in, Bytes& out);
  Outcome cmd_destroy_eq(ByteView in);
  Outcome cmd_query_eq(ByteView in, Bytes& out);
  Outcome cmd_create_cq(ByteView in, Bytes& out);
  Outcome cmd_destroy_cq(ByteView in);
  Outcome cmd_query_cq(ByteView in, Bytes& out);
  Outcome cmd_create_qp(ByteView in, Bytes& out);
  Outcome cmd_modify_qp(ByteView in);
  Outcome cmd_query_qp(ByteView in, Bytes& out);
  Outcome cmd_destroy_qp(ByteView in);
  Outcome cmd_create_srq(ByteView in, Bytes& out);
  Outcome cmd_destroy_srq(ByteView in);
  Outcome cmd_query_srq(ByteView in, Bytes& out);
  Outcome cmd_arm_srq(ByteView in);
  Outcome cmd_alloc_pd(Bytes& out);
  Outcome cmd_dealloc_pd(ByteView in);
  Outcome cmd_create_mkey(ByteView in, Bytes& out);
  Outcome read_page_list(CreateMkey& c);
  Outcome cmd_destroy_mkey(ByteView in);
  Outcome cmd_query_mkey(ByteView in, Bytes& out);
  Outcome cmd_create_ah(ByteView in, Bytes& out);
  Outcome cmd_destroy_ah(ByteView in);
  Outcome cmd_query_ah(ByteView in, Bytes& out);
  Outcome cmd_alloc_uar(Bytes& out);
  Outcome cmd_dealloc_uar(ByteView in);
  Outcome cmd_mcg(ByteView in, bool attach);  // ATTACH_MCG / DETACH_MCG (multicast.cpp)
  Outcome zero_ring(uint64_t iova, uint64_t bytes, uint64_t align);
  Outcome check_av(const Av& av, bool connected) const;
  void reset_tables();

  HostPort& host_;
  HcaOptions opts_;
  std::shared_ptr<spdlog::logger> log_;

  // IBA chapter 9 (§12.8), each unit with its counters.
  // §12.1 - §12.6 (queue_engine.cpp) and IBA chapter 9 (§12.8), each unit
  // with its counters.
  QueueEngine queues_{host_, tables_, events_, opts_.caps, *this, requester_, responder_, log_};
  RcRequester requester_{queues_, *this};
  RcResponder responder_{queues_, *this, log_};
  UdTransport ud_{queues_, *this};

  // §3 registers
  uint32_t status_ = 0;
  uint32_t health_syndrome_ = 0;
  std::array<uint32_t, kMsixTableSize / 4> msix_table_{};


  bool initialized_ = false;
  bool fatal_ = false;
  std::array<Port, kMaxPorts> ports_;          // §12.7, §14, §15
  sim::sma::NodeIdentity identity_;            // §14.2 NodeInfo / NodeDescription
  std::unique_ptr<sim::sma::NodeModel> node_;  // a CaNode
  std::unique_ptr<sim::sma::SmaEngine> sma_;   // §14
  std::unique_ptr<sim::sma::PmaEngine> pma_;   // §15
  std::deque<std::pair<uint8_t, std::vector<std::byte>>> loopback_;  // §12.7 packets to ourselves
  std::vector<std::byte> eth_frame_, eth_rx_;  // §16: a frame sent, a packet received; reused

  ResourceTables tables_;  // §6, §7
  EventUnit events_{host_, tables_, log_};  // §9, §10
  CommandQueue cmdq_{host_, events_, *this, opts_.caps.max_mailbox, opts_.cmd_delay, log_};  // §5

  HcaStats stats_;
  DataStats dstats_;
  Clock::time_point now_{};    // the time of the current entry point (data path timers)
};

}  // namespace openib::simhca
