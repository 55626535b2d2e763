// PacketLink: the cable end of an Ethernet port on a host network
// interface (docs/cables.md "Host interfaces (AF_PACKET)"): the port's
// frames leave through the interface onto a real Ethernet network (or a
// veth, a bridge, a VLAN) and the frames arriving on it come back, so
// that the simhcas of two machines talk RoCEv2 over the network between
// them (issue 32, docs/simhca.md §16).
//
// One AF_PACKET socket (packet(7)), SOCK_RAW, bound to the interface's
// ifindex for every protocol (ETH_P_ALL), the interface put in
// promiscuous mode for the socket's life (PACKET_MR_PROMISC: frames to
// the port's MAC, which is not the interface's, get through a NIC's MAC
// filter), and told not to hand back what was sent on the interface
// (PACKET_IGNORE_OUTGOING: neither this link's frames nor the host
// stack's). Frames are Ethernet without FCS, as on the UDP Ethernet cable
// (UdpLinkOptions::Framing::kEthernet); only that framing: an IBA port
// cannot be cabled to an interface.
//
//   send()   fault injection (FaultSpec), then a non-blocking send(); a
//            full socket buffer or device queue (EAGAIN, ENOBUFS) drops
//            the frame and counts tx_errors, as a congested wire would; a
//            frame longer than the interface's MTU allows (EMSGSIZE) or
//            an interface that is down (ENETDOWN, ENXIO) likewise, logged
//            once; captured once the kernel took it.
//   receive  recvmmsg() into kRxBatch buffers; every frame received is
//            captured (if a pcap tap is set), then judged by its size
//            alone (rx_check.hpp count_received_frame: 14 ..
//            wire::kMaxPacketBytes bytes, else rx_dropped_malformed) and
//            handed to the receiver.
//
// Receive runs as UdpLink's does (DatagramLink, datagram_link.hpp;
// docs/cables.md "Polled receive"): polled by the owner (poll(), with on_readable called from the link's
// thread once per arm_readable() while the owner sleeps, or no thread at
// all if the owner watches fd()), or on the link's own receive thread.
//
// Link state (docs/cables.md "Link state"): the interface's carrier is the
// cable's light. The link looks at the interface (IFF_UP, and its carrier:
// ETHTOOL_GLINK, else IFF_RUNNING) every kCarrierPeriod and hands each
// change to the state receiver, on the thread that calls the packet
// receiver (polled: the owner's, in poll(), woken through on_readable).
// Nothing is sent: send_link_state() is ENOTSUP (the far end need not be
// a simhca; pulling the cable is `ip link set IFACE down` there).
//
// Needs CAP_NET_RAW (the socket) and the interface up. Lifecycle as
// UdpLink's: create() opens and binds, stop() ends the thread, the
// destructor stops, leaves promiscuous mode (the socket's close) and joins.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "common/fd.hpp"
#include "common/result.hpp"
#include "sim/cable/datagram_link.hpp"
#include "sim/cable/link.hpp"
#include "sim/wire/packet.hpp"

namespace openib::sim::wire {
class PcapEthWriter;
}

namespace openib::sim {

struct PacketLinkOptions {
  std::string iface;       // the host interface's name, e.g. "eth1", "veth0"
  FaultSpec faults;        // injected on send
  // Capture tap (PcapEthWriter is thread-safe) outliving the link: every
  // frame sent and every frame received, before the size check.
  wire::PcapEthWriter* pcap_eth = nullptr;
  std::string name = "packet";  // in log lines
  // SO_RCVBUF / SO_SNDBUF, best effort (SO_*BUFFORCE when allowed).
  int socket_buffer_bytes = 16 << 20;
  // Receive frames sent to any MAC (PACKET_MR_PROMISC). Off: only what
  // the interface takes anyway (its own MAC, broadcast, its multicast).
  bool promiscuous = true;
  std::chrono::milliseconds poll_timeout{100};  // bounds stop() if the wake-up is lost
  bool polled = false;                 // as UdpLinkOptions::polled
  std::function<void()> on_readable;   // as UdpLinkOptions::on_readable
};

// An interface name as the kernel takes one (dev_valid_name): 1 ..
// IFNAMSIZ-1 bytes, no '/', ':' or blank, not "." or "..". EINVAL with
// the reason otherwise.
Result<void> check_iface_name(const std::string& name);

class PacketLink final : public DatagramLink {
 public:
  static Result<std::unique_ptr<PacketLink>> create(const PacketLinkOptions& opts);
  ~PacketLink() override;  // stop()s first: its thread calls into the link

  // EMSGSIZE (counted) for a frame under 14 or over wire::kMaxPacketBytes
  // bytes; the interface's own refusals are counted drops (above); any
  // other socket error is returned (and counted).
  Result<void> send(std::span<const std::byte> frame) override;
  bool carries_frames() const override { return true; }
  // set_faults(), set_receiver(), set_state_receiver(), stats(), stop(),
  // polled(), fd(), poll() (also delivering a carrier change),
  // arm_readable(), name(): DatagramLink's.

  const std::string& iface() const { return iface_; }
  int ifindex() const { return ifindex_; }
  // The interface's MTU when the link was made (IP payload bytes: the
  // longest frame it sends is mtu() + 14, or + 18 with a VLAN tag).
  int mtu() const { return mtu_; }

  static constexpr std::size_t kRxBatch = 32;  // frames one recvmmsg() takes
  static constexpr std::chrono::milliseconds kCarrierPeriod{100};
  // The carrier as last seen (true: up, as the link starts).
  bool carrier() const { return carrier_.load(std::memory_order_relaxed); }

 private:
  PacketLink(UniqueFd sock, const PacketLinkOptions& opts, int ifindex, int mtu);
  std::size_t receive(std::size_t max) override;  // recvmmsg() into kRxBatch buffers
  // The carrier (below): looked at on the link's thread, delivered by poll().
  void after_wait(bool receiving) override { watch_carrier(receiving); }
  void before_poll() override;
  void receive_one(std::span<const std::byte> frame);
  void count_too_long(std::size_t len);
  // Looks at the carrier if kCarrierPeriod passed since the last look; a
  // change goes to the state receiver (deliver) or is left in
  // pending_state_ for poll(), the owner woken through on_readable.
  void watch_carrier(bool deliver);
  bool read_carrier();
  Result<void> send_frame(std::span<const std::byte> frame);

  std::string iface_;
  int ifindex_ = 0, mtu_ = 0;
  bool ignore_outgoing_ = false;  // PACKET_IGNORE_OUTGOING took; else outgoing frames are skipped here

  // kRxBatch buffers of kRxBufBytes: one byte over the largest frame, so
  // a longer one shows as too long (MSG_TRUNC gives its real length).
  static constexpr std::size_t kRxBufBytes = (wire::kMaxPacketBytes + 1 + 63) & ~std::size_t{63};
  std::unique_ptr<std::byte[]> rx_bufs_;

  std::atomic<bool> carrier_{true};
  std::atomic<int> pending_state_{-1};  // polled: a carrier change for poll() to deliver (-1: none)
  std::chrono::steady_clock::time_point carrier_checked_{};  // by the one looking (thread, or poll() without one)
};

}  // namespace openib::sim
