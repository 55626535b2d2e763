// The netdev of an Ethernet (RoCEv2) port in ibd (docs/operations.md "RoCE
// ports"; issue 32 deliverable 3): the kernel sees a NIC, a TAP interface
// with the port's MAC, whose frames pass whole through a raw Ethernet QP
// of ibd's own (src/eth_tap/raw_port.hpp), as a RoCE NIC shares its port
// between the kernel's netdev and its RDMA engine (docs/simhca.md §16.5:
// every frame the RoCE engine does not take reaches the raw QP). Its IP
// addresses become the port's RoCEv2 GIDs (src/eth_tap/roce_gids.hpp), as
// Linux's roce_gid_mgmt makes them.
//
// Bring-up, each time the port becomes Active (and at start when it is):
//  1. QUERY_PORT: the port must be Ethernet (check_port() refuses an
//     InfiniBand one at ibd's start: IPoIB is --ipoib);
//  2. QUERY_GID 0: fe80:: and the port's EUI-64, whose MAC (the U/L bit
//     flipped back, RFC 4291 2.5.1) is the TAP's;
//  3. the TAP is created the first time (IFF_TAP | IFF_NO_PI, MTU 1500,
//     administratively down until the user sets it up) and its addresses
//     watched from then on (src/ipoib_tap/addr_watch.hpp);
//  4. the raw QP opened, the carrier turned on.
// Carrier goes off when the port leaves Active or the device is lost, the
// QP is closed, and all is done again at the next Active. The GID table
// follows the addresses while the device is there, whatever the port's
// state (the addresses stay the interface's); the device's table is empty
// again after a loss (INIT_HCA), and written again when it is back.
//
// Data path (on ibd's loop): the TAP fd is read while the QP has free send
// slots (the kernel's queue holds the frames meanwhile); received frames
// are written to the TAP, those longer than the interface's MTU (and a
// VLAN tag) dropped and counted, as a NIC drops them.
//
// Single-threaded on ibd's io_context.
#pragma once

#include <array>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "eth_tap/raw_port.hpp"
#include "eth_tap/roce_gids.hpp"
#include "hca/device.hpp"
#include "ibd/service.hpp"
#include "ipoib_tap/addr_watch.hpp"
#include "ipoib_tap/tap_device.hpp"

namespace openib::ibd {

struct NetdevConfig {
  std::string name;  // the TAP interface's name; empty: no netdev
  uint8_t port = 1;
  uint32_t mtu = 1500;  // the IP MTU the kernel is given (Ethernet's)
};

struct NetdevCounters {
  uint64_t frames_in = 0;   // from the port, written to the TAP
  uint64_t frames_out = 0;  // read from the TAP, sent on the port
  uint64_t drop_rx_too_big = 0;  // from the port, longer than the MTU allows
  uint64_t drop_tx_too_big = 0;  // from the TAP, longer than the cable carries (or a runt)
  uint64_t drop_if_down = 0;  // from the port while the interface is administratively down (EIO)
  uint64_t send_errors = 0, tap_write_errors = 0, tap_read_errors = 0;
  uint64_t bring_ups = 0, gid_errors = 0;
};

class NetdevService final : public Service {
 public:
  NetdevService(boost::asio::io_context& io, hca::Device& hca, NetdevConfig cfg);
  ~NetdevService() override;
  NetdevService(const NetdevService&) = delete;
  NetdevService& operator=(const NetdevService&) = delete;

  std::string_view service_name() const override { return "netdev"; }

  // At ibd's start, before the loop runs: the port exists and is Ethernet
  // (an error to print and exit with otherwise).
  Result<void> check_port();
  // Brings the interface up if the port is Active already.
  void start();
  // ibd stops: carrier off, the QP forgotten (TEARDOWN_HCA takes it and
  // the GID entries; the kernel removes the TAP with its fd).
  void stop();

  bool on_cq_event(uint32_t cqn) override;
  void port_event(const hca::Event& e) override;
  void device_lost() override;
  void device_back() override;
  std::vector<std::pair<std::string, uint64_t>> counter_list() const override;

  // For the RDMA CM's address resolution (docs/arp.md): the interface's
  // index (0 before it exists), the port, its GID 0.
  int ifindex() const { return tap_ ? tap_->ifindex() : 0; }
  uint8_t port() const { return cfg_.port; }
  const std::array<uint8_t, 16>& port_gid() const { return gid0_; }

 private:
  enum class State { kDown, kBringingUp, kUp };
  void bring_up();
  void have_gid0(const hca::GidEntry& g);
  void port_opened(uint64_t epoch, std::unique_ptr<eth::RawPort> p);
  void go_down(const char* why, bool device_gone);
  void retry_later();
  void arm_tap_read();
  void read_tap();
  void from_port(std::span<const uint8_t> frame);
  size_t max_rx_frame();
  void address_event(bool added, const ipoib::IpAddr& a);
  void sync_gids();

  boost::asio::io_context& io_;
  hca::Device& hca_;
  NetdevConfig cfg_;
  State state_ = State::kDown;
  bool started_ = false;  // between start() and stop(): port events before (check_port()'s wait) are not ours
  uint64_t epoch_ = 0;  // bumped at each bring-up and go_down(): late answers of an old one are dropped
  std::array<uint8_t, 16> gid0_{};
  std::unique_ptr<eth::RawPort> qp_;
  std::optional<ipoib::TapDevice> tap_;
  std::unique_ptr<boost::asio::posix::stream_descriptor> tap_sd_;
  bool tap_waiting_ = false;
  std::unique_ptr<ipoib::AddrWatch> addrs_;
  eth::GidTable gids_;
  bool device_ok_ = true;      // GID commands may go
  bool gid_busy_ = false;      // one SET_GID in flight
  uint64_t gid_epoch_ = 0;     // bumped when the device's table is forgotten
  uint32_t mtu_ = 1500;        // the interface's MTU as last read
  std::chrono::steady_clock::time_point mtu_read_{};
  std::vector<uint8_t> frame_;  // one TAP read
  boost::asio::steady_timer retry_;
  NetdevCounters c_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace openib::ibd
