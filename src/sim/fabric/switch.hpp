// An emulated InfiniBand switch (docs/ibfabric.md "The switch"): external
// ports 1..N and management port 0, the state an SM programs (PortInfo of
// every port, SwitchInfo, linear and multicast forwarding tables, P_Key,
// SLtoVL and VL arbitration tables) and the relay between ports (IBA 18.2).
// It is the sma::NodeModel its SMA/PMA engine (src/sim/sma) serves; the
// engine does the MAD formats and the directed-route algorithm, the switch
// does the forwarding and the link state.
//
// Single-threaded: everything runs on the fabric's event loop. Packets
// leave through the Link* of each port (a UdpLink to a host or another
// process, or an in-process cable to another switch of this fabric).
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "mad/sma_attrs.hpp"
#include "sim/cable/link.hpp"
#include "sim/fabric/topology.hpp"
#include "sim/sma/engine.hpp"
#include "sim/sma/node_model.hpp"
#include "sim/wire/packet.hpp"

namespace openib::sim::fabric {

// Why the switch dropped a packet (all counted in SwitchStats, and the
// PMA-visible ones in the port's PortCounters as IBA 16.1.3.5 says).
struct SwitchStats {
  std::uint64_t rx_packets = 0;          // handed to receive()
  std::uint64_t forwarded = 0;           // sent out of an external port (relay or own)
  std::uint64_t rx_link_down = 0;        // arrived on a port whose link is not up
  std::uint64_t rx_malformed = 0;        // not a parseable IBA packet
  std::uint64_t rx_port_not_active = 0;  // data packet on a port not Armed/Active (IBA 7.2)
  std::uint64_t no_route = 0;            // LFT/MFT has no port for the DLID (IBA 18.2.4.3)
  std::uint64_t out_port_down = 0;       // the LFT's port is not Active (IBA 18.2.4.4)
  std::uint64_t bad_dlid = 0;            // DLID 0, or the permissive LID on a data packet
  std::uint64_t vl15_dropped = 0;        // SMPs the engine dropped or that could not leave
  std::uint64_t local_dropped = 0;       // to our LID but not QP0 SMP / QP1 PerfMgmt
  std::uint64_t smps_local = 0;          // SMPs handed to the SMA engine
  std::uint64_t gmps_local = 0;          // PerfMgmt GMPs handed to the PMA engine
  std::uint64_t loop_drops = 0;          // relayed more than kMaxHops times in this process
  std::uint64_t traps_sent = 0;
};

inline constexpr unsigned kLftCap = 0xC000;   // SwitchInfo LinearFDBCap: every unicast LID
inline constexpr unsigned kMftCap = 1024;     // SwitchInfo MulticastFDBCap
inline constexpr unsigned kPKeyCap = 32;      // P_Key entries per port (one block)
inline constexpr std::uint8_t kNoPort = 0xFF; // LFT entry "drop" (IBA 14.2.5.10)

class Switch final : public sma::NodeModel {
 public:
  using Clock = std::chrono::steady_clock;

  explicit Switch(const TopoNode& node);
  Switch(const Switch&) = delete;
  Switch& operator=(const Switch&) = delete;

  const std::string& name() const { return id_.description; }
  unsigned num_ports() const { return id_.num_ports; }
  std::uint16_t lid() const { return ports_[0].pi.lid; }

  // Cabling. attach(): the port's cable end (null: none). set_link(): the
  // physical link comes up (LinkUp, PortState Init) or goes away (Polling,
  // Down); each change sets SwitchInfo:PortStateChange and sends trap 128
  // to the SM (IBA 14.2.5.1, 14.2.5.4). Ports 1..N.
  void attach(unsigned port, Link* link);
  void set_link(unsigned port, bool up, Clock::time_point now = Clock::now());
  bool link_up(unsigned port) const;

  // A packet (LRH..VCRC) that arrived on external port `port`; `hops`
  // counts in-process relays so a routing loop between this process's
  // switches ends (a hop limit standing in for HOQ lifetime, IBA 18.2.5.4).
  void receive(unsigned port, std::span<const std::byte> packet, unsigned hops = 0,
               Clock::time_point now = Clock::now());
  // Trap resends the SMA engine has due (until TrapRepress).
  void tick(Clock::time_point now);

  // Where a packet leaves: the fabric installs this to carry `hops` along
  // in-process cables; the default sends on the port's Link.
  using Emit = std::function<void(unsigned port, std::span<const std::byte> packet, unsigned hops)>;
  void set_emit(Emit e) { emit_ = std::move(e); }

  const SwitchStats& stats() const { return stats_; }
  const sma::SmaStats& sma_stats() const { return sma_.stats(); }
  const sma::PmaStats& pma_stats() const { return pma_.stats(); }
  const sma::PortCounterValues& port_counters(unsigned port) const { return ports_.at(port).ctr; }
  mad::PortInfo port_info_raw(unsigned port) const { return ports_.at(port).pi; }
  std::uint8_t lft(std::uint16_t lid) const { return lid < lft_.size() ? lft_[lid] : kNoPort; }
  void set_lft(std::uint16_t lid, std::uint8_t port) {
    if (lid < lft_.size()) lft_[lid] = port;
  }

  static constexpr unsigned kMaxHops = 64;

  // ---- sma::NodeModel ----
  const sma::NodeIdentity& identity() const override { return id_; }
  mad::PortInfo port_info(std::uint8_t port) const override;
  sma::Status set_port_info(std::uint8_t port, const mad::PortInfo& next) override;
  std::optional<mad::PKeyBlock> pkey_block(std::uint8_t port, std::uint16_t block) const override;
  sma::Status set_pkey_block(std::uint8_t port, std::uint16_t block, const mad::PKeyBlock& v) override;
  std::optional<mad::SlToVlTable> sl2vl(std::uint8_t in_port, std::uint8_t out_port) const override;
  sma::Status set_sl2vl(std::uint8_t in_port, std::uint8_t out_port, const mad::SlToVlTable& v) override;
  std::optional<mad::VlArbBlock> vlarb(std::uint8_t port, std::uint8_t part) const override;
  sma::Status set_vlarb(std::uint8_t port, std::uint8_t part, const mad::VlArbBlock& v) override;
  std::optional<mad::SwitchInfo> switch_info() const override { return si_; }
  sma::Status set_switch_info(const mad::SwitchInfo& next) override;
  std::optional<mad::LftBlock> lft_block(std::uint16_t block) const override;
  sma::Status set_lft_block(std::uint16_t block, const mad::LftBlock& v) override;
  std::optional<mad::MftBlock> mft_block(std::uint16_t block, std::uint8_t position) const override;
  sma::Status set_mft_block(std::uint16_t block, std::uint8_t position, const mad::MftBlock& v) override;
  std::optional<sma::PortCounterValues> counters(std::uint8_t port) const override;
  void reset_counters(std::uint8_t port, std::uint32_t counter_bits) override;

 private:
  struct Port {
    mad::PortInfo pi;
    Link* link = nullptr;
    sma::PortCounterValues ctr;
    mad::PKeyBlock pkeys{};
    std::vector<mad::SlToVlTable> sl2vl;  // indexed by input port (0..N)
    std::array<mad::VlArbBlock, 4> vlarb{};
  };

  bool is_own_lid(std::uint16_t dlid) const;
  bool in_state_for_data(unsigned port) const;
  void relay_unicast(unsigned in_port, std::uint16_t dlid, std::span<const std::byte> pkt, bool smp, unsigned hops);
  void relay_multicast(unsigned in_port, std::uint16_t dlid, std::span<const std::byte> pkt, unsigned hops);
  void handle_smp(unsigned in_port, const wire::ParsedPacket& p, std::span<const std::byte> pkt, unsigned hops,
                  Clock::time_point now);
  void handle_local_gmp(unsigned in_port, const wire::ParsedPacket& p);
  // Sends a MAD the switch itself produced (SMA reply, forward, trap).
  void send_smp_out(const sma::Outgoing& o, const wire::Lrh* req_lrh, unsigned hops);
  void transmit(unsigned out_port, std::span<const std::byte> pkt, unsigned hops);
  void link_changed(unsigned port, Clock::time_point now);

  sma::NodeIdentity id_;
  std::vector<Port> ports_;  // 0..N
  std::vector<bool> plugged_;  // a cable with a live far end (ports 1..N)
  mad::SwitchInfo si_;
  std::vector<std::uint8_t> lft_;
  std::vector<std::array<std::uint16_t, 16>> mft_;  // [mlid - 0xC000][position]
  sma::SmaEngine sma_;
  sma::PmaEngine pma_;
  SwitchStats stats_;
  Emit emit_;
  std::vector<std::byte> scratch_;
};

}  // namespace openib::sim::fabric
