#include "sim/cable/udp_link.hpp"

#include <netinet/in.h>
#include <netinet/udp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <vector>

#include "common/env.hpp"
#include "common/log.hpp"
#include "sim/cable/link_signal.hpp"
#include "sim/cable/rx_check.hpp"
#include "sim/wire/packet.hpp"
#include "sim/wire/pcap_erf.hpp"

namespace openib::sim {

namespace {

// A UDP GSO message (UDP_SEGMENT, udp(7)): the kernel takes at most 64
// segments (UDP_MAX_SEGMENTS; more on newer kernels) and one IP datagram's
// worth of payload, 65,507 bytes over IPv4.
constexpr std::size_t kGsoMaxSegments = 64;
constexpr std::size_t kGsoMaxBytes = 65000;

// OPENIB_UDP_BATCH=0|1|2 overrides UdpLinkOptions::io (0 single, 1 batch, 2 gso).
UdpLinkOptions::Io io_from_env(UdpLinkOptions::Io dflt) {
  const char* e = std::getenv("OPENIB_UDP_BATCH");
  if (!e || e[0] < '0' || e[0] > '2' || e[1] != 0) return dflt;
  return static_cast<UdpLinkOptions::Io>(e[0] - '0');
}

auto logger() { return log::get("cable"); }

}  // namespace

int unprivileged_port_start() {
  std::ifstream f("/proc/sys/net/ipv4/ip_unprivileged_port_start");
  int v = 1024;
  if (!(f >> v) || v < 0) return 1024;
  return v;
}

std::string takeable_ports_warning(const Endpoint& local, const Endpoint* peer, int start) {
  std::string ends;
  auto note = [&](const char* what, const Endpoint& e) {
    if (e.port() != 0 && e.port() < start) return;
    ends += fmt::format("{}{} {}", ends.empty() ? "" : ", ", what, e.port() == 0 ? e.str() + " (ephemeral)" : e.str());
  };
  note("local", local);
  if (peer && peer->len) note("peer", *peer);
  if (ends.empty()) return {};
  return fmt::format("{} at or above net.ipv4.ip_unprivileged_port_start ({}): while that end is stopped any "
                     "local user can bind its port and send into the cable (docs/cables.md)",
                     ends, start);
}

Result<std::unique_ptr<UdpLink>> UdpLink::create(const UdpLinkOptions& opts) {
  OPENIB_TRY_ASSIGN(Endpoint local, parse_endpoint(opts.local));
  Endpoint peer;
  if (!opts.peer.empty()) {
    OPENIB_TRY_ASSIGN(peer, parse_endpoint(opts.peer));
    if (peer.family() != local.family())
      return err(EAFNOSUPPORT, "{}: peer {} and local {} are of different address families", opts.name,
                 peer.str(), local.str());
  }
  if (opts.pcap_iface > 3) return err(EINVAL, "{}: pcap interface {} (ERF has 0-3)", opts.name, opts.pcap_iface);
  // Run as root, the cable's ends are meant to be root's alone.
  if (::geteuid() == 0) {
    if (auto w = takeable_ports_warning(local, &peer, unprivileged_port_start()); !w.empty())
      logger()->warn("{}: {}", opts.name, w);
  }

  UniqueFd sock(::socket(local.family(), SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!sock) return sys_err("{}: socket", opts.name);
  if (local.family() == AF_INET6) {
    // One family per cable: an IPv6 end does not also take IPv4 datagrams.
    int one = 1;
    if (::setsockopt(sock.get(), IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one) != 0)
      return sys_err("{}: IPV6_V6ONLY", opts.name);
  }
  raise_buffers(sock.get(), opts.socket_buffer_bytes);
  if (::bind(sock.get(), reinterpret_cast<const sockaddr*>(&local.addr), local.len) != 0)
    return sys_err("{}: bind {}", opts.name, local.str());
  sockaddr_storage bound{};
  socklen_t bound_len = sizeof bound;
  if (::getsockname(sock.get(), reinterpret_cast<sockaddr*>(&bound), &bound_len) != 0)
    return sys_err("{}: getsockname", opts.name);
  local = Endpoint::from_sockaddr(reinterpret_cast<const sockaddr*>(&bound), bound_len);

  std::unique_ptr<UdpLink> link(new UdpLink(std::move(sock), local, opts));
  link->peer_ = peer;
  OPENIB_TRY(link->start());
  int rcv = 0, snd = 0;
  socklen_t l1 = sizeof rcv, l2 = sizeof snd;
  (void)::getsockopt(link->sock_.get(), SOL_SOCKET, SO_RCVBUF, &rcv, &l1);
  (void)::getsockopt(link->sock_.get(), SOL_SOCKET, SO_SNDBUF, &snd, &l2);
  static constexpr const char* kIoNames[] = {"sendto/recvfrom", "sendmmsg/recvmmsg", "sendmmsg+GSO/recvmmsg"};
  logger()->info("{}: bound {}, peer {}, buffers rcv {} snd {}, {}{}{}{}", link->name_, local.str(),
                 peer.len ? peer.str() : "(none yet)", rcv, snd, kIoNames[static_cast<int>(link->io())],
                 link->gro_ ? "+GRO" : "", link->eth_ ? ", Ethernet frames" : "", link->polling_note());
  return link;
}

UdpLink::UdpLink(UniqueFd sock, Endpoint local, const UdpLinkOptions& opts)
    : DatagramLink(std::move(sock), opts.name, opts.faults, opts.pcap_eth, opts.poll_timeout, opts.polled,
                   opts.on_readable),
      local_(local),
      pcap_(opts.pcap),
      pcap_iface_(opts.pcap_iface),
      io_(io_from_env(opts.io)) {
  eth_ = opts.framing == UdpLinkOptions::Framing::kEthernet;
  segments_ = !env_off("OPENIB_UDP_SEGMENTS");
  if (io() == UdpLinkOptions::Io::kSingle) {
    // One byte more than the largest packet, so a longer datagram shows as
    // too long (MSG_TRUNC returns its real length) instead of fitting.
    single_.resize(wire::kMaxPacketBytes + 1);
    return;
  }
  // OPENIB_UDP_GRO=0: no GRO whatever the options say.
  if (io() == UdpLinkOptions::Io::kGso && opts.gro && !env_off("OPENIB_UDP_GRO") && (polled_ || !opts.rx_ring)) {
    const int one = 1;  // best effort: without it, datagrams come one by one
    gro_ = ::setsockopt(sock_.get(), SOL_UDP, UDP_GRO, &one, sizeof one) == 0;
  }
  rx_slots_ = gro_ ? kGroRxBatch : kRxBatch;
  rx_slot_bytes_ = gro_ ? kGroRxBufBytes : kRxBufBytes;
  if (polled_ && opts.rx_ring) {
    rx_ring_ = opts.rx_ring;
    std::lock_guard lk(rx_ring_->mu);
    if (!rx_ring_->bytes) rx_ring_->bytes.reset(new std::byte[kRingBytes]);
    rx_base_ = rx_ring_->bytes.get();
    return;
  }
  rx_bufs_.reset(new std::byte[rx_slots_ * rx_slot_bytes_]);
  rx_base_ = rx_bufs_.get();
}

UdpLink::~UdpLink() { stop(); }  // before the members the receive thread uses go

Endpoint UdpLink::peer() const {
  std::lock_guard lk(peer_mu_);
  return peer_;
}

Result<void> UdpLink::set_peer(std::string_view peer) {
  OPENIB_TRY_ASSIGN(Endpoint p, parse_endpoint(peer));
  if (p.family() != local_.family())
    return err(EAFNOSUPPORT, "{}: peer {} and local {} are of different address families", name_, p.str(),
               local_.str());
  logger()->info("{}: peer {}", name_, p.str());
  std::lock_guard lk(peer_mu_);
  peer_ = p;
  return ok();
}

Result<void> UdpLink::send_link_state(bool up) {
  const Endpoint to = peer();
  if (to.len == 0) return err(ENOTCONN, "{}: no peer set", name_);
  const auto d = encode_link_signal(up);
  std::lock_guard lk(send_mu_);
  OPENIB_TRY(flush_locked());  // packets queued before the signal leave first
  const ssize_t n = ::sendto(sock_.get(), d.data(), d.size(), MSG_DONTWAIT | MSG_NOSIGNAL,
                             reinterpret_cast<const sockaddr*>(&to.addr), to.len);
  if (n != static_cast<ssize_t>(d.size())) return count_tx_failure(n < 0 ? errno : EIO, to, 1);
  LinkCounters::bump(counters_.tx_link_signals);
  return ok();
}

void UdpLink::capture(std::span<const std::byte> packet) {
  if (eth_) return capture_frame(packet);
  if (!pcap_) return;
  if (auto r = pcap_->write(packet, pcap_iface_); !r)
    log_once(warned_pcap_, "{}: capture: {}", name_, r.error().str());
}

Result<void> UdpLink::check_send(std::size_t len, Endpoint& to) {
  if (len > wire::kMaxPacketBytes) {
    LinkCounters::bump(counters_.tx_errors);
    return err(EMSGSIZE, "{}: packet of {} bytes exceeds the IBA maximum {}", name_, len, wire::kMaxPacketBytes);
  }
  to = peer();
  if (to.len == 0) {
    LinkCounters::bump(counters_.tx_errors);
    return err(ENOTCONN, "{}: no peer set", name_);
  }
  return ok();
}

Result<void> UdpLink::send_with(std::size_t len, Filler fill, std::size_t payload_at) {
  {
    std::unique_lock lk(send_mu_);
    if (batch_depth_ > 0 && !faults_.active()) {
      Endpoint to;
      OPENIB_TRY(check_send(len, to));
      if (!tx_ends_.empty() && !tx_to_.same_as(reinterpret_cast<const sockaddr*>(&to.addr), to.len))
        (void)flush_locked();  // set_peer() in the batch; its errors are counted
      tx_to_ = to;
      const std::size_t at = tx_bytes_.size();
      tx_bytes_.resize(at + len);
      const std::span<std::byte> pkt(tx_bytes_.data() + at, len);
      if (!fill(pkt)) {
        tx_bytes_.resize(at);
        return err(ECANCELED, "{}: packet abandoned by its sender", name_);
      }
      if (!eth_) wire::seal_packet(pkt);
      tx_ends_.push_back(tx_bytes_.size());
      count_sent(len);
      return tx_ends_.size() >= kTxBatch ? flush_locked() : ok();
    }
  }
  return Link::send_with(len, fill, payload_at);
}

std::size_t UdpLink::segment_room(std::size_t mtu) {
  if (eth_ || !segments_ || mtu == 0 || io() != UdpLinkOptions::Io::kGso) return 1;
  std::lock_guard lk(send_mu_);
  return faults_.active() ? 1 : kTxBatch;
}

// docs/cables.md "Segments over UDP": packet 0 is the first packet as
// filled; packet i is its headers without extension headers, PSN + i,
// OpCode Middle (the last: seg.last_opcode, SE, AckReq), framed anew
// (LRH.PktLen, GRH.PayLen, BTH.PadCnt) for its payload; every packet gets
// both CRCs.
Result<void> UdpLink::send_segment(const Segment& seg, Filler fill) {
  using namespace wire;
  std::lock_guard lk(send_mu_);
  Endpoint to;
  OPENIB_TRY(check_send(std::size_t{seg.hdr_len} + seg.mtu + Segment::kCrcBytes, to));
  if (seg.count < 2 || seg.count > kTxBatch || seg.mtu == 0 || seg.last_len == 0 || seg.last_len > seg.mtu ||
      seg.hdr_len < kLrhBytes + kBthBytes || faults_.active() || io() != UdpLinkOptions::Io::kGso || eth_) {
    LinkCounters::bump(counters_.tx_errors);
    return err(EINVAL, "{}: segment of {} packets of {} bytes refused", name_, seg.count, seg.mtu);
  }
  seg_buf_.resize(seg.bytes());
  if (!fill(std::span<std::byte>(seg_buf_.data(), seg_buf_.size())))
    return err(ECANCELED, "{}: segment abandoned by its sender", name_);
  if (!tx_ends_.empty() && (tx_ends_.size() + seg.count > kTxBatch ||
                            !tx_to_.same_as(reinterpret_cast<const sockaddr*>(&to.addr), to.len)))
    (void)flush_locked();  // room for the whole segment in one sendmmsg(); errors are counted
  tx_to_ = to;
  const std::size_t restart = tx_bytes_.size(), restart_ends = tx_ends_.size();
  auto abandon = [&](std::string_view why) {
    tx_bytes_.resize(restart);
    tx_ends_.resize(restart_ends);
    LinkCounters::bump(counters_.tx_errors);
    return err(EINVAL, "{}: segment of {} packets: {}", name_, seg.count, why);
  };
  // Packet 0: as filled, then its CRCs.
  const std::size_t first = std::size_t{seg.hdr_len} + seg.mtu;
  tx_bytes_.insert(tx_bytes_.end(), seg_buf_.begin(), seg_buf_.begin() + static_cast<std::ptrdiff_t>(first));
  tx_bytes_.resize(tx_bytes_.size() + Segment::kCrcBytes);
  const std::span<std::byte> p0(tx_bytes_.data() + restart, first + Segment::kCrcBytes);
  seal_packet(p0);
  ParsedPacket q;
  if (auto r = parse_packet_into(p0, q, ParseOptions{false, false}); !r) return abandon(r.error().str());
  if (q.payload.size() != seg.mtu) return abandon("first packet's payload is not the MTU");
  tx_ends_.push_back(tx_bytes_.size());
  Headers h = q.hdr;
  const Transport tr = opcode_transport(h.bth.opcode);
  const Op op = opcode_op(h.bth.opcode);
  const bool send = op == Op::kSendFirst || op == Op::kSendMiddle;
  if (!send && op != Op::kWriteFirst && op != Op::kWriteMiddle) return abandon("not a SEND or WRITE");
  h.reth.reset();
  h.bth.opcode = opcode(tr, send ? Op::kSendMiddle : Op::kWriteMiddle);
  const std::uint32_t psn = h.bth.psn;
  for (std::size_t i = 1; i < seg.count; ++i) {
    const bool last = i + 1 == seg.count;
    const std::size_t len = last ? seg.last_len : seg.mtu;
    h.bth.psn = (psn + static_cast<std::uint32_t>(i)) & 0xffffff;
    if (last) {
      h.bth.opcode = seg.last_opcode;
      h.bth.se = seg.last_se;
      h.bth.ack_req = seg.last_ack_req;
    }
    auto f = frame_packet(h, len);
    if (!f) return abandon(f.error().str());
    const std::size_t at = tx_bytes_.size();
    tx_bytes_.resize(at + f->size);
    const std::span<std::byte> pkt(tx_bytes_.data() + at, f->size);
    std::memcpy(pkt.data(), f->header_bytes.data(), f->header_len);
    std::memcpy(pkt.data() + f->header_len, seg_buf_.data() + seg.hdr_len + i * std::size_t{seg.mtu}, len);
    pad_packet(*f, pkt);
    seal_packet(pkt);
    tx_ends_.push_back(tx_bytes_.size());
  }
  for (std::size_t i = restart_ends; i < tx_ends_.size(); ++i) count_sent(tx_ends_[i] - (i == 0 ? 0 : tx_ends_[i - 1]));
  return batch_depth_ > 0 && tx_ends_.size() < kTxBatch ? ok() : flush_locked();
}

Result<void> UdpLink::send(std::span<const std::byte> packet) {
  Endpoint to;
  OPENIB_TRY(check_send(packet.size(), to));
  count_sent(packet.size());

  std::lock_guard lk(send_mu_);
  return send_faulted(packet, [&](std::span<const std::byte> p) {
    return batch_depth_ ? queue_datagram(p, to) : send_datagram(p, to);
  });
}

void UdpLink::begin_batch() {
  if (io() == UdpLinkOptions::Io::kSingle) return;  // never changes to or from kSingle
  std::lock_guard lk(send_mu_);
  ++batch_depth_;
}

void UdpLink::end_batch() {
  if (io() == UdpLinkOptions::Io::kSingle) return;
  std::lock_guard lk(send_mu_);
  if (batch_depth_ == 0 || --batch_depth_ > 0) return;
  if (auto r = flush_locked(); !r) log_once(warned_tx_, "{}: {}", name_, r.error().str());
}

Result<void> UdpLink::queue_datagram(std::span<const std::byte> packet, const Endpoint& to) {
  Result<void> result;
  if (!tx_ends_.empty() && !tx_to_.same_as(reinterpret_cast<const sockaddr*>(&to.addr), to.len)) result = flush_locked();  // set_peer() in the batch
  tx_to_ = to;
  tx_bytes_.insert(tx_bytes_.end(), packet.begin(), packet.end());
  tx_ends_.push_back(tx_bytes_.size());
  if (tx_ends_.size() >= kTxBatch) {
    if (auto r = flush_locked(); !r && result.ok()) result = std::move(r);
  }
  return result;
}

// The queue in one sendmmsg() (sendmmsg(2)): a message per packet, or per
// run of equal-size packets (and a shorter last one) as one UDP GSO
// message (udp(7) UDP_SEGMENT) that the kernel cuts into exactly those
// datagrams. A message the socket refuses is counted as its packets
// lost; a GSO message refused for being one (EINVAL, EIO: an interface
// MTU below the packet, no checksum offload) turns GSO off for the link
// and its packets go one by one.
Result<void> UdpLink::flush_locked() {
  const std::size_t n = tx_ends_.size();
  if (n == 0) return ok();
  const bool gso = io() == UdpLinkOptions::Io::kGso;
  constexpr std::size_t kCmsgBytes = CMSG_SPACE(sizeof(std::uint16_t));
  struct Msg {
    iovec iov;
    std::size_t first, count;  // packets
    alignas(cmsghdr) unsigned char cmsg[kCmsgBytes];
  };
  Msg ms[kTxBatch];
  mmsghdr hs[kTxBatch];
  auto start = [&](std::size_t i) { return i == 0 ? std::size_t{0} : tx_ends_[i - 1]; };
  auto len = [&](std::size_t i) { return tx_ends_[i] - start(i); };
  std::size_t m = 0;
  for (std::size_t i = 0; i < n;) {
    std::size_t j = i + 1;
    if (gso) {
      const std::size_t size = len(i);
      auto fits = [&](std::size_t k) { return k - i < kGsoMaxSegments && tx_ends_[k] - start(i) <= kGsoMaxBytes; };
      while (j < n && len(j) == size && fits(j)) ++j;
      if (j < n && len(j) < size && fits(j)) ++j;  // the kernel's last segment may be shorter
    }
    Msg& g = ms[m];
    g.iov = {tx_bytes_.data() + start(i), tx_ends_[j - 1] - start(i)};
    g.first = i;
    g.count = j - i;
    mmsghdr& h = hs[m];
    h = {};
    h.msg_hdr.msg_name = const_cast<sockaddr_storage*>(&tx_to_.addr);
    h.msg_hdr.msg_namelen = tx_to_.len;
    h.msg_hdr.msg_iov = &g.iov;
    h.msg_hdr.msg_iovlen = 1;
    if (g.count > 1) {
      std::memset(g.cmsg, 0, sizeof g.cmsg);
      h.msg_hdr.msg_control = g.cmsg;
      h.msg_hdr.msg_controllen = kCmsgBytes;
      cmsghdr* c = CMSG_FIRSTHDR(&h.msg_hdr);
      c->cmsg_level = SOL_UDP;
      c->cmsg_type = UDP_SEGMENT;
      c->cmsg_len = CMSG_LEN(sizeof(std::uint16_t));
      const auto seg = static_cast<std::uint16_t>(len(i));
      std::memcpy(CMSG_DATA(c), &seg, sizeof seg);
    }
    ++m;
    i = j;
  }
  Result<void> result;
  for (std::size_t k = 0; k < m;) {
    const int r = ::sendmmsg(sock_.get(), hs + k, static_cast<unsigned>(m - k), MSG_DONTWAIT | MSG_NOSIGNAL);
    if (r > 0) {
      for (std::size_t x = k; x < k + static_cast<std::size_t>(r); ++x)
        for (std::size_t p = ms[x].first; p < ms[x].first + ms[x].count; ++p)
          capture(std::span<const std::byte>(tx_bytes_.data() + start(p), len(p)));
      k += static_cast<std::size_t>(r);
      continue;
    }
    const int e = r < 0 ? errno : EIO;
    if (e == EINTR) continue;
    const Msg& g = ms[k];
    if (g.count > 1 && (e == EINVAL || e == EIO || e == EOPNOTSUPP || e == ENOPROTOOPT)) {
      if (io_.exchange(UdpLinkOptions::Io::kBatch) == UdpLinkOptions::Io::kGso)
        logger()->warn("{}: UDP GSO refused ({}); sending packet by packet", name_, std::strerror(e));
      for (std::size_t p = g.first; p < g.first + g.count; ++p)
        if (auto s2 = send_datagram(std::span<const std::byte>(tx_bytes_.data() + start(p), len(p)), tx_to_);
            !s2 && result.ok())
          result = std::move(s2);
    } else if (auto f = count_tx_failure(e, tx_to_, g.count); !f && result.ok()) {
      result = std::move(f);
    }
    ++k;
  }
  tx_bytes_.clear();
  tx_ends_.clear();
  return result;
}

Result<void> UdpLink::send_datagram(std::span<const std::byte> packet, const Endpoint& to) {
  const ssize_t n = ::sendto(sock_.get(), packet.data(), packet.size(), MSG_DONTWAIT | MSG_NOSIGNAL,
                             reinterpret_cast<const sockaddr*>(&to.addr), to.len);
  if (n == static_cast<ssize_t>(packet.size())) {
    capture(packet);
    return ok();
  }
  // A short UDP send does not happen; counted as an error if it did.
  return count_tx_failure(n < 0 ? errno : EIO, to, 1);
}

Result<void> UdpLink::count_tx_failure(int e, const Endpoint& to, std::size_t packets) {
  LinkCounters::bump(counters_.tx_errors, packets);
  // A full buffer, or a far end not (yet) listening: the packets are lost
  // on the wire, as on a congested or unplugged link. Counted, not an error.
  if (e == EAGAIN || e == EWOULDBLOCK || e == ENOBUFS || e == ECONNREFUSED || e == EINTR) {
    log_once(warned_tx_, "{}: {} packet(s) to {} dropped: {}", name_, packets, to.str(), std::strerror(e));
    return ok();
  }
  errno = e;
  return sys_err("{}: sendto {}", name_, to.str());
}

std::mutex& UdpLink::read_mutex() { return rx_ring_ ? rx_ring_->mu : DatagramLink::read_mutex(); }

std::size_t UdpLink::receive(std::size_t max) { return rx_base_ ? receive_batch(max) : receive_single(max); }

std::size_t UdpLink::receive_single(std::size_t max) {
  std::byte* buf = single_.data();
  const std::size_t size = single_.size();
  std::size_t i = 0;
  for (; i < max && !stopping_.load(std::memory_order_acquire); ++i) {
    sockaddr_storage from{};
    socklen_t from_len = sizeof from;
    const ssize_t r = ::recvfrom(sock_.get(), buf, size, MSG_DONTWAIT | MSG_TRUNC,
                                 reinterpret_cast<sockaddr*>(&from), &from_len);
    if (r < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      if (errno == EINTR) continue;
      // E.g. an ICMP error queued on the socket: reported once, then read on.
      log_once(warned_rx_, "{}: recvfrom: {}", name_, std::strerror(errno));
      break;
    }
    const auto len = std::min(static_cast<std::size_t>(r), size);
    receive_one(std::span<const std::byte>(buf, len), reinterpret_cast<const sockaddr*>(&from), from_len);
  }
  return i;
}

// recvmmsg(2) into the ring of rx_slots_ buffers. Each buffer is larger
// than the largest packet and MSG_TRUNC makes msg_len a datagram's real
// length, so a longer datagram is seen as too long (malformed), not cut.
// With UDP_GRO, a datagram with a UDP_GRO control message is the peer's
// GSO message whole: its segments, gso_size bytes each but the last, are
// the datagrams a receiver without GRO would have read, taken in turn.
std::size_t UdpLink::receive_batch(std::size_t max) {
  constexpr std::size_t kCmsgBytes = CMSG_SPACE(sizeof(int));
  struct Slot {
    iovec iov;
    sockaddr_storage from;
    alignas(cmsghdr) unsigned char cmsg[kCmsgBytes];
  };
  Slot slots[kRxBatch];
  mmsghdr hs[kRxBatch];
  const std::size_t n_slots = rx_slots_;
  for (std::size_t i = 0; i < n_slots; ++i) slots[i].iov = {rx_base_ + i * rx_slot_bytes_, rx_slot_bytes_};
  std::size_t taken = 0;  // packets
  while (taken < max && !stopping_.load(std::memory_order_acquire)) {
    for (std::size_t i = 0; i < n_slots; ++i) {
      hs[i] = {};
      hs[i].msg_hdr.msg_name = &slots[i].from;
      hs[i].msg_hdr.msg_namelen = sizeof slots[i].from;
      hs[i].msg_hdr.msg_iov = &slots[i].iov;
      hs[i].msg_hdr.msg_iovlen = 1;
      if (gro_) {
        hs[i].msg_hdr.msg_control = slots[i].cmsg;
        hs[i].msg_hdr.msg_controllen = kCmsgBytes;
      }
    }
    const int r = ::recvmmsg(sock_.get(), hs, static_cast<unsigned>(n_slots), MSG_DONTWAIT | MSG_TRUNC, nullptr);
    if (r < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return taken;
      if (errno == EINTR) continue;
      log_once(warned_rx_, "{}: recvmmsg: {}", name_, std::strerror(errno));
      return taken;
    }
    for (int i = 0; i < r; ++i) {
      msghdr& m = hs[i].msg_hdr;
      const std::byte* d = rx_base_ + static_cast<std::size_t>(i) * rx_slot_bytes_;
      const auto len = std::min<std::size_t>(hs[i].msg_len, rx_slot_bytes_);
      const auto* from = reinterpret_cast<const sockaddr*>(&slots[i].from);
      std::size_t seg = 0;
      if (gro_)
        for (cmsghdr* c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c))
          if (c->cmsg_level == SOL_UDP && c->cmsg_type == UDP_GRO && c->cmsg_len >= CMSG_LEN(sizeof(int))) {
            int v = 0;
            std::memcpy(&v, CMSG_DATA(c), sizeof v);
            if (v > 0) seg = static_cast<std::size_t>(v);
          }
      if (seg == 0 || seg >= len) {
        receive_one(std::span<const std::byte>(d, len), from, m.msg_namelen);
        ++taken;
        continue;
      }
      gro_datagrams_.fetch_add(1, std::memory_order_relaxed);
      for (std::size_t off = 0; off < len; off += seg, ++taken)
        receive_one(std::span<const std::byte>(d + off, std::min(seg, len - off)), from, m.msg_namelen);
    }
    if (static_cast<std::size_t>(r) < n_slots) return taken;  // drained
  }
  return taken;
}

void UdpLink::receive_one(std::span<const std::byte> d, const sockaddr* from, socklen_t from_len) {
  bool from_peer;
  {
    std::lock_guard lk(peer_mu_);
    from_peer = peer_.len != 0 && peer_.same_as(from, from_len);
  }
  if (!from_peer) {
    LinkCounters::bump(counters_.rx_dropped_foreign);
    log_once(warned_foreign_, "{}: dropped a {}-byte datagram from {}, not the peer", name_, d.size(),
             Endpoint::from_sockaddr(from, from_len).str());
    return;
  }
  if (const auto up = decode_link_signal(d)) return deliver_state(*up);  // docs/cables.md "Link state": not a packet
  capture(d);  // before validation: the capture shows what arrived
  // A frame's contents are its port's to judge (only its size here); a
  // packet gets the IBA checks.
  if (eth_ ? count_received_frame(d, counters_, name_, warned_) : count_received(d, counters_, name_, warned_))
    deliver(d);
}

}  // namespace openib::sim
