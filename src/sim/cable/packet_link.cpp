#include "sim/cable/packet_link.hpp"

#include <arpa/inet.h>
#include <linux/ethtool.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <linux/sockios.h>
#include <net/if.h>
#include <net/if_arp.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>

#include "common/log.hpp"
#include "sim/cable/rx_check.hpp"
#include "sim/wire/pcap_erf.hpp"

// Older headers lack it (Linux 4.20, packet(7)).
#ifndef PACKET_IGNORE_OUTGOING
#define PACKET_IGNORE_OUTGOING 23
#endif

namespace openib::sim {

namespace {

auto logger() { return log::get("cable"); }

ifreq ifreq_for(const std::string& iface) {
  ifreq r{};
  std::memcpy(r.ifr_name, iface.data(), std::min(iface.size(), sizeof r.ifr_name - 1));
  return r;
}

}  // namespace

Result<void> check_iface_name(const std::string& n) {
  if (n.empty() || n.size() >= IFNAMSIZ)
    return err(EINVAL, "interface name '{}': 1 to {} characters", n, IFNAMSIZ - 1);
  if (n == "." || n == "..") return err(EINVAL, "interface name '{}' is not allowed", n);
  for (char c : n)
    if (c == '/' || c == ':' || std::isspace(static_cast<unsigned char>(c)) || c == 0)
      return err(EINVAL, "interface name '{}': no '/', ':' or blanks", n);
  return ok();
}

Result<std::unique_ptr<PacketLink>> PacketLink::create(const PacketLinkOptions& opts) {
  OPENIB_TRY(check_iface_name(opts.iface));
  // Protocol 0: the socket takes no frame before bind() names the
  // interface (packet(7)), so nothing from another interface is queued.
  UniqueFd sock(::socket(AF_PACKET, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!sock) {
    if (errno == EPERM) return err(EPERM, "{}: an AF_PACKET socket needs CAP_NET_RAW", opts.name);
    return sys_err("{}: socket(AF_PACKET)", opts.name);
  }
  ifreq rq = ifreq_for(opts.iface);
  if (::ioctl(sock.get(), SIOCGIFINDEX, &rq) != 0) {
    if (errno == ENODEV) return err(ENODEV, "{}: no interface '{}' in this network namespace", opts.name, opts.iface);
    return sys_err("{}: interface '{}'", opts.name, opts.iface);
  }
  const int ifindex = rq.ifr_ifindex;
  rq = ifreq_for(opts.iface);
  if (::ioctl(sock.get(), SIOCGIFHWADDR, &rq) != 0) return sys_err("{}: interface '{}'", opts.name, opts.iface);
  if (rq.ifr_hwaddr.sa_family != ARPHRD_ETHER)
    return err(EINVAL, "{}: interface '{}' is not an Ethernet interface (hardware type {})", opts.name, opts.iface,
               rq.ifr_hwaddr.sa_family);
  rq = ifreq_for(opts.iface);
  if (::ioctl(sock.get(), SIOCGIFFLAGS, &rq) != 0) return sys_err("{}: interface '{}'", opts.name, opts.iface);
  if (!(rq.ifr_flags & IFF_UP))
    return err(ENETDOWN, "{}: interface '{}' is down (ip link set {} up)", opts.name, opts.iface, opts.iface);
  rq = ifreq_for(opts.iface);
  if (::ioctl(sock.get(), SIOCGIFMTU, &rq) != 0) return sys_err("{}: interface '{}'", opts.name, opts.iface);
  const int mtu = rq.ifr_mtu;

  raise_buffers(sock.get(), opts.socket_buffer_bytes);
  // Not our own frames back, nor the host stack's on this interface: a
  // port sees what arrives from the wire (packet(7) PACKET_IGNORE_OUTGOING).
  const int one = 1;
  const bool ignore_out = ::setsockopt(sock.get(), SOL_PACKET, PACKET_IGNORE_OUTGOING, &one, sizeof one) == 0;
  sockaddr_ll sll{};
  sll.sll_family = AF_PACKET;
  sll.sll_protocol = htons(ETH_P_ALL);
  sll.sll_ifindex = ifindex;
  if (::bind(sock.get(), reinterpret_cast<const sockaddr*>(&sll), sizeof sll) != 0)
    return sys_err("{}: bind to interface '{}'", opts.name, opts.iface);
  if (opts.promiscuous) {
    packet_mreq mr{};
    mr.mr_ifindex = ifindex;
    mr.mr_type = PACKET_MR_PROMISC;
    if (::setsockopt(sock.get(), SOL_PACKET, PACKET_ADD_MEMBERSHIP, &mr, sizeof mr) != 0)
      return sys_err("{}: promiscuous mode on '{}'", opts.name, opts.iface);
  }
  std::unique_ptr<PacketLink> link(new PacketLink(std::move(sock), opts, ifindex, mtu));
  link->ignore_outgoing_ = ignore_out;
  OPENIB_TRY(link->start());
  logger()->info("{}: interface {} (index {}, MTU {}), Ethernet frames{}{}{}", link->name_, opts.iface, ifindex, mtu,
                 opts.promiscuous ? ", promiscuous" : "", ignore_out ? "" : ", outgoing frames skipped by type",
                 link->polling_note());
  return link;
}

PacketLink::PacketLink(UniqueFd sock, const PacketLinkOptions& opts, int ifindex, int mtu)
    : DatagramLink(std::move(sock), opts.name, opts.faults, opts.pcap_eth, opts.poll_timeout, opts.polled,
                   opts.on_readable),
      iface_(opts.iface),
      ifindex_(ifindex),
      mtu_(mtu),
      rx_bufs_(new std::byte[kRxBatch * kRxBufBytes]) {}

PacketLink::~PacketLink() { stop(); }  // before the members the receive thread uses go

// The link is up when the interface is (netdevice(7) SIOCGIFFLAGS IFF_UP)
// and has its carrier: ethtool's ETHTOOL_GLINK, the driver's carrier as
// it is now (a pulled cable, a veth whose peer is down: off). A driver
// without it: IFF_RUNNING, the operational state (RFC 2863), which the
// kernel updates up to a second after the carrier changes -- too late
// for the carrier itself, so a port would go down for that second after
// every `ip link set up`.
bool PacketLink::read_carrier() {
  ifreq rq = ifreq_for(iface_);
  if (::ioctl(sock_.get(), SIOCGIFFLAGS, &rq) != 0) return false;
  const short flags = rq.ifr_flags;
  if (!(flags & IFF_UP)) return false;
  ethtool_value link{};
  link.cmd = ETHTOOL_GLINK;
  rq = ifreq_for(iface_);
  rq.ifr_data = reinterpret_cast<char*>(&link);
  if (::ioctl(sock_.get(), SIOCETHTOOL, &rq) == 0) return link.data != 0;
  return (flags & IFF_RUNNING) != 0;
}

void PacketLink::watch_carrier(bool deliver) {
  const auto now = std::chrono::steady_clock::now();
  if (now - carrier_checked_ < kCarrierPeriod) return;
  carrier_checked_ = now;
  const bool up = read_carrier();
  if (carrier_.exchange(up, std::memory_order_relaxed) == up) return;
  logger()->info("{}: interface {} {}", name_, iface_, up ? "has its carrier back: link up" : "lost its carrier: link down");
  if (deliver) return deliver_state(up);
  pending_state_.store(up ? 1 : 0, std::memory_order_release);
  if (on_readable_) on_readable_();
}

Result<void> PacketLink::send(std::span<const std::byte> frame) {
  if (frame.size() < kEthernetMinFrameBytes || frame.size() > wire::kMaxPacketBytes) {
    LinkCounters::bump(counters_.tx_errors);
    return err(EMSGSIZE, "{}: a frame of {} bytes (an Ethernet cable takes {}..{})", name_, frame.size(),
               kEthernetMinFrameBytes, wire::kMaxPacketBytes);
  }
  count_sent(frame.size());
  std::lock_guard lk(send_mu_);
  return send_faulted(frame, [&](std::span<const std::byte> p) { return send_frame(p); });
}

// One frame onto the interface: the socket is bound to it, so no address
// (packet(7): the frame is sent as it is, its header included).
Result<void> PacketLink::send_frame(std::span<const std::byte> frame) {
  for (;;) {
    const ssize_t n = ::send(sock_.get(), frame.data(), frame.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n == static_cast<ssize_t>(frame.size())) {
      capture_frame(frame);
      return ok();
    }
    const int e = n < 0 ? errno : EIO;
    if (e == EINTR) continue;
    LinkCounters::bump(counters_.tx_errors);
    // Lost on the wire: a full queue, a frame over the interface's MTU, an
    // interface down or gone. Counted, not an error of the sender's.
    if (e == EAGAIN || e == EWOULDBLOCK || e == ENOBUFS || e == EMSGSIZE || e == ENETDOWN || e == ENXIO ||
        e == ENODEV) {
      log_once(warned_tx_, "{}: a {}-byte frame not sent on {} (MTU {}): {}", name_, frame.size(), iface_, mtu_,
               std::strerror(e));
      return ok();
    }
    errno = e;
    return sys_err("{}: send on {}", name_, iface_);
  }
}

// Polled: a carrier change the link's thread saw is delivered here, on
// the owner's thread; without a thread, the owner's polls look themselves.
void PacketLink::before_poll() {
  if (!on_readable_) watch_carrier(false);
  if (const int st = pending_state_.exchange(-1, std::memory_order_acq_rel); st >= 0) deliver_state(st == 1);
}

// recvmmsg(2) into kRxBatch buffers; MSG_TRUNC makes msg_len a frame's
// real length (packet(7)), so one longer than a buffer is seen as too
// long, not cut. Without PACKET_IGNORE_OUTGOING (kernels before 4.20)
// frames sent on the interface come back typed PACKET_OUTGOING: skipped,
// uncounted, as the option would have.
std::size_t PacketLink::receive(std::size_t max) {
  iovec iov[kRxBatch];
  sockaddr_ll from[kRxBatch];
  mmsghdr hs[kRxBatch];
  for (std::size_t i = 0; i < kRxBatch; ++i) iov[i] = {rx_bufs_.get() + i * kRxBufBytes, kRxBufBytes};
  std::size_t taken = 0;
  while (taken < max && !stopping_.load(std::memory_order_acquire)) {
    const std::size_t want = std::min(kRxBatch, max - taken);
    for (std::size_t i = 0; i < want; ++i) {
      hs[i] = {};
      hs[i].msg_hdr.msg_name = &from[i];
      hs[i].msg_hdr.msg_namelen = sizeof from[i];
      hs[i].msg_hdr.msg_iov = &iov[i];
      hs[i].msg_hdr.msg_iovlen = 1;
    }
    const int r = ::recvmmsg(sock_.get(), hs, static_cast<unsigned>(want), MSG_DONTWAIT | MSG_TRUNC, nullptr);
    if (r < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return taken;
      if (errno == EINTR) continue;
      // ENETDOWN while the interface is down, for one: reported once, read on later.
      log_once(warned_rx_, "{}: recvmmsg on {}: {}", name_, iface_, std::strerror(errno));
      return taken;
    }
    for (int i = 0; i < r; ++i) {
      ++taken;
      if (!ignore_outgoing_ && from[i].sll_pkttype == PACKET_OUTGOING) continue;
      const std::byte* d = rx_bufs_.get() + static_cast<std::size_t>(i) * kRxBufBytes;
      if (hs[i].msg_len > kRxBufBytes) {  // cut by the buffer: too long whatever it held
        capture_frame(std::span<const std::byte>(d, kRxBufBytes));
        count_too_long(hs[i].msg_len);
        continue;
      }
      receive_one(std::span<const std::byte>(d, hs[i].msg_len));
    }
    if (static_cast<std::size_t>(r) < want) return taken;  // drained
  }
  return taken;
}

// A frame longer than the receive buffer (a jumbo frame, a GRO'd run of
// the host stack's TCP segments): counted as count_received_frame()
// counts one too long, with its real length.
void PacketLink::count_too_long(std::size_t len) {
  LinkCounters::bump_owned(counters_.rx_packets);
  LinkCounters::bump_owned(counters_.rx_bytes, len);
  LinkCounters::bump_owned(counters_.rx_dropped_malformed);
  const bool first = (warned_.fetch_or(2u, std::memory_order_relaxed) & 2u) == 0;
  logger()->log(first ? spdlog::level::warn : spdlog::level::debug,
                "{}: dropped a {}-byte frame from {}: an Ethernet cable takes {}..{} bytes{}", name_, len, iface_,
                kEthernetMinFrameBytes, wire::kMaxPacketBytes,
                first ? " (further drops of this kind are logged at debug level)" : "");
}

void PacketLink::receive_one(std::span<const std::byte> frame) {
  capture_frame(frame);  // before validation: the capture shows what arrived
  if (count_received_frame(frame, counters_, name_, warned_)) deliver(frame);
}

}  // namespace openib::sim
