#include "sim/cable/udp_link.hpp"

#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <system_error>
#include <vector>

#include "common/log.hpp"
#include "sim/cable/rx_check.hpp"
#include "sim/wire/packet.hpp"
#include "sim/wire/pcap_erf.hpp"

namespace openib::sim {

namespace {

constexpr int kRecvBatch = 256;  // datagrams drained per wake-up before stop_ is looked at again

auto logger() { return log::get("cable"); }

// Logs the first event of a kind at warning level, the rest at debug.
template <typename... Args>
void log_once(std::atomic<bool>& warned, fmt::format_string<Args...> f, Args&&... args) {
  const bool first = !warned.exchange(true, std::memory_order_relaxed);
  logger()->log(first ? spdlog::level::warn : spdlog::level::debug, f, std::forward<Args>(args)...);
}

// Raises a socket buffer: the *FORCE option passes net.core.{r,w}mem_max
// when we have CAP_NET_ADMIN; otherwise the plain one, capped by the
// kernel. Best effort: a small buffer only means earlier drops under load.
void raise_buffer(int fd, int force_opt, int opt, int bytes) {
  if (bytes <= 0) return;
  if (::setsockopt(fd, SOL_SOCKET, force_opt, &bytes, sizeof bytes) == 0) return;
  (void)::setsockopt(fd, SOL_SOCKET, opt, &bytes, sizeof bytes);
}

}  // namespace

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

  UniqueFd sock(::socket(local.family(), SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!sock) return sys_err("{}: socket", opts.name);
  if (local.family() == AF_INET6) {
    // One family per cable: an IPv6 end does not also take IPv4 datagrams.
    int one = 1;
    if (::setsockopt(sock.get(), IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one) != 0)
      return sys_err("{}: IPV6_V6ONLY", opts.name);
  }
  raise_buffer(sock.get(), SO_RCVBUFFORCE, SO_RCVBUF, opts.socket_buffer_bytes);
  raise_buffer(sock.get(), SO_SNDBUFFORCE, SO_SNDBUF, opts.socket_buffer_bytes);
  if (::bind(sock.get(), reinterpret_cast<const sockaddr*>(&local.addr), local.len) != 0)
    return sys_err("{}: bind {}", opts.name, local.str());
  sockaddr_storage bound{};
  socklen_t bound_len = sizeof bound;
  if (::getsockname(sock.get(), reinterpret_cast<sockaddr*>(&bound), &bound_len) != 0)
    return sys_err("{}: getsockname", opts.name);
  local = Endpoint::from_sockaddr(reinterpret_cast<const sockaddr*>(&bound), bound_len);

  UniqueFd wake(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake) return sys_err("{}: eventfd", opts.name);

  std::unique_ptr<UdpLink> link(new UdpLink(std::move(sock), std::move(wake), local, opts));
  link->peer_ = peer;
  try {
    link->thread_ = std::thread(&UdpLink::receive_loop, link.get());
  } catch (const std::system_error& e) {
    return err(e.code().value(), "{}: receive thread: {}", opts.name, e.what());
  }
  int rcv = 0, snd = 0;
  socklen_t l1 = sizeof rcv, l2 = sizeof snd;
  (void)::getsockopt(link->sock_.get(), SOL_SOCKET, SO_RCVBUF, &rcv, &l1);
  (void)::getsockopt(link->sock_.get(), SOL_SOCKET, SO_SNDBUF, &snd, &l2);
  logger()->info("{}: bound {}, peer {}, buffers rcv {} snd {}", link->name_, local.str(),
                 peer.len ? peer.str() : "(none yet)", rcv, snd);
  return link;
}

UdpLink::UdpLink(UniqueFd sock, UniqueFd wake, Endpoint local, const UdpLinkOptions& opts)
    : sock_(std::move(sock)),
      wake_(std::move(wake)),
      local_(local),
      name_(opts.name),
      pcap_(opts.pcap),
      pcap_iface_(opts.pcap_iface),
      poll_timeout_ms_(static_cast<int>(std::clamp<std::chrono::milliseconds::rep>(opts.poll_timeout.count(), 1, 1000))),
      faults_(opts.faults) {}

UdpLink::~UdpLink() { stop(); }

void UdpLink::stop() {
  stopping_.store(true, std::memory_order_release);
  std::uint64_t one = 1;
  (void)!::write(wake_.get(), &one, sizeof one);  // if this fails, the poll timeout ends the wait
  if (std::this_thread::get_id() == rx_tid_.load()) return;  // from the receiver: cannot join itself
  std::lock_guard lk(stop_mu_);
  if (thread_.joinable()) thread_.join();
}

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

void UdpLink::set_faults(const FaultSpec& spec) {
  std::lock_guard lk(send_mu_);
  faults_.reset(spec);
}

void UdpLink::set_receiver(Receiver r) {
  auto p = std::make_shared<const Receiver>(std::move(r));
  std::lock_guard lk(rx_mu_);
  receiver_ = std::move(p);
}

void UdpLink::capture(std::span<const std::byte> packet) {
  if (!pcap_) return;
  if (auto r = pcap_->write(packet, pcap_iface_); !r)
    log_once(warned_pcap_, "{}: capture: {}", name_, r.error().str());
}

Result<void> UdpLink::send(std::span<const std::byte> packet) {
  if (packet.size() > wire::kMaxPacketBytes) {
    LinkCounters::bump(counters_.tx_errors);
    return err(EMSGSIZE, "{}: packet of {} bytes exceeds the IBA maximum {}", name_, packet.size(),
               wire::kMaxPacketBytes);
  }
  const Endpoint to = peer();
  if (to.len == 0) {
    LinkCounters::bump(counters_.tx_errors);
    return err(ENOTCONN, "{}: no peer set", name_);
  }
  LinkCounters::bump(counters_.tx_packets);
  LinkCounters::bump(counters_.tx_bytes, packet.size());

  std::lock_guard lk(send_mu_);
  if (!faults_.active()) return send_datagram(packet, to);
  std::vector<FaultInjector::Packet> out;
  faults_.apply(packet, out, counters_);
  Result<void> result;
  for (const auto& p : out)
    if (auto r = send_datagram(p, to); !r && result.ok()) result = std::move(r);
  return result;
}

Result<void> UdpLink::send_datagram(std::span<const std::byte> packet, const Endpoint& to) {
  const ssize_t n = ::sendto(sock_.get(), packet.data(), packet.size(), MSG_DONTWAIT | MSG_NOSIGNAL,
                             reinterpret_cast<const sockaddr*>(&to.addr), to.len);
  if (n == static_cast<ssize_t>(packet.size())) {
    capture(packet);
    return ok();
  }
  const int e = n < 0 ? errno : EIO;  // a short UDP send does not happen; counted as an error if it did
  LinkCounters::bump(counters_.tx_errors);
  // A full buffer, or a far end not (yet) listening: the packet is lost on
  // the wire, as on a congested or unplugged link. Counted, not an error.
  if (e == EAGAIN || e == EWOULDBLOCK || e == ENOBUFS || e == ECONNREFUSED || e == EINTR) {
    log_once(warned_tx_, "{}: packet to {} dropped: {}", name_, to.str(), std::strerror(e));
    return ok();
  }
  errno = e;
  return sys_err("{}: sendto {}", name_, to.str());
}

void UdpLink::receive_loop() {
  rx_tid_.store(std::this_thread::get_id());
  // One byte more than the largest packet, so a longer datagram shows as
  // too long (MSG_TRUNC returns its real length) instead of fitting.
  std::vector<std::byte> buf(wire::kMaxPacketBytes + 1);
  pollfd fds[2] = {{sock_.get(), POLLIN, 0}, {wake_.get(), POLLIN, 0}};
  while (!stopping_.load(std::memory_order_acquire)) {
    const int n = ::poll(fds, 2, poll_timeout_ms_);
    if (n < 0) {
      if (errno == EINTR) continue;
      logger()->error("{}: poll: {}; receive thread ends", name_, std::strerror(errno));
      return;
    }
    if (n == 0 || fds[1].revents != 0) continue;  // timeout or stop(): the loop condition decides
    if (fds[0].revents & POLLNVAL) return;
    for (int i = 0; i < kRecvBatch && !stopping_.load(std::memory_order_acquire); ++i) {
      sockaddr_storage from{};
      socklen_t from_len = sizeof from;
      const ssize_t r = ::recvfrom(sock_.get(), buf.data(), buf.size(), MSG_DONTWAIT | MSG_TRUNC,
                                   reinterpret_cast<sockaddr*>(&from), &from_len);
      if (r < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK) break;
        if (errno == EINTR) continue;
        // E.g. an ICMP error queued on the socket: reported once, then read on.
        log_once(warned_rx_, "{}: recvfrom: {}", name_, std::strerror(errno));
        break;
      }
      const auto len = std::min(static_cast<std::size_t>(r), buf.size());
      receive_one(std::span<const std::byte>(buf.data(), len), reinterpret_cast<const sockaddr*>(&from),
                  from_len);
    }
  }
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
  capture(d);  // before validation: the capture shows what arrived
  if (!count_received(d, counters_, name_, warned_)) return;
  std::shared_ptr<const Receiver> rx;
  {
    std::lock_guard lk(rx_mu_);
    rx = receiver_;
  }
  if (!rx || !*rx) {
    LinkCounters::bump(counters_.rx_dropped_no_receiver);
    return;
  }
  (*rx)(d);
}

}  // namespace openib::sim
