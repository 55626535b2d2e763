#include "sim/cable/datagram_link.hpp"

#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <system_error>
#include <vector>

#include "common/env.hpp"
#include "sim/wire/pcap_erf.hpp"

namespace openib::sim {

namespace {

constexpr std::size_t kRecvBatch = 256;  // datagrams drained per wake-up before stopping_ is looked at again

auto logger() { return log::get("cable"); }

}  // namespace

DatagramLink::DatagramLink(UniqueFd sock, std::string name, const FaultSpec& faults, wire::PcapEthWriter* pcap_eth,
                           std::chrono::milliseconds poll_timeout, bool polled, std::function<void()> on_readable)
    : sock_(std::move(sock)),
      name_(std::move(name)),
      polled_(polled && !env_off("OPENIB_UDP_POLLED")),
      faults_(faults),
      pcap_eth_(pcap_eth),
      poll_timeout_ms_(static_cast<int>(std::clamp<std::chrono::milliseconds::rep>(poll_timeout.count(), 1, 1000))) {
  if (polled_) on_readable_ = std::move(on_readable);
}

DatagramLink::~DatagramLink() { stop(); }

Result<void> DatagramLink::start() {
  wake_ = UniqueFd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake_) return sys_err("{}: eventfd", name_);
  // Polled, the owner reads the socket; if it also watches it, the link
  // has no thread. Else the link's thread waits on the socket (one-shot:
  // armed now, re-armed by arm_readable()) and on the stop eventfd.
  if (polled_ && on_readable_) {
    ep_ = UniqueFd(::epoll_create1(EPOLL_CLOEXEC));
    if (!ep_) return sys_err("{}: epoll_create1", name_);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u32 = 1;
    if (::epoll_ctl(ep_.get(), EPOLL_CTL_ADD, wake_.get(), &ev) != 0) return sys_err("{}: epoll_ctl", name_);
    ev.events = EPOLLIN | EPOLLONESHOT;
    ev.data.u32 = 0;
    if (::epoll_ctl(ep_.get(), EPOLL_CTL_ADD, sock_.get(), &ev) != 0) return sys_err("{}: epoll_ctl", name_);
  }
  try {
    if (!polled_ || on_readable_) thread_ = std::thread(&DatagramLink::receive_loop, this);
  } catch (const std::system_error& e) {
    return err(e.code().value(), "{}: receive thread: {}", name_, e.what());
  }
  return ok();
}

const char* DatagramLink::polling_note() const {
  if (!polled_) return "";
  return on_readable_ ? ", polled by its owner" : ", polled and watched by its owner";
}

void DatagramLink::stop() {
  stopping_.store(true, std::memory_order_release);
  std::uint64_t one = 1;
  (void)!::write(wake_.get(), &one, sizeof one);  // if this fails, the poll timeout ends the wait
  if (std::this_thread::get_id() == rx_tid_.load()) return;  // from the receiver: cannot join itself
  std::lock_guard lk(stop_mu_);
  if (thread_.joinable()) thread_.join();
}

void DatagramLink::set_faults(const FaultSpec& spec) {
  std::lock_guard lk(send_mu_);
  faults_.reset(spec);
}

void DatagramLink::set_receiver(Receiver r) {
  auto p = std::make_shared<const Receiver>(std::move(r));
  std::lock_guard lk(rx_mu_);
  receiver_ = std::move(p);
}

void DatagramLink::set_state_receiver(StateReceiver r) {
  auto p = std::make_shared<const StateReceiver>(std::move(r));
  std::lock_guard lk(rx_mu_);
  state_receiver_ = std::move(p);
}

void DatagramLink::deliver(std::span<const std::byte> packet) {
  std::shared_ptr<const Receiver> rx;
  {
    std::lock_guard lk(rx_mu_);
    rx = receiver_;
  }
  if (!rx || !*rx) {
    LinkCounters::bump(counters_.rx_dropped_no_receiver);
    return;
  }
  (*rx)(packet);
}

void DatagramLink::deliver_state(bool up) {
  LinkCounters::bump_owned(counters_.rx_link_signals);
  std::shared_ptr<const StateReceiver> srx;
  {
    std::lock_guard lk(rx_mu_);
    srx = state_receiver_;
  }
  if (srx && *srx) (*srx)(up);
}

void DatagramLink::capture_frame(std::span<const std::byte> frame) {
  if (!pcap_eth_) return;
  if (auto r = pcap_eth_->write(frame); !r) log_once(warned_pcap_, "{}: capture: {}", name_, r.error().str());
}

void DatagramLink::count_sent(std::size_t bytes) {
  LinkCounters::bump(counters_.tx_packets);
  LinkCounters::bump(counters_.tx_bytes, bytes);
}

Result<void> DatagramLink::send_faulted(std::span<const std::byte> packet, SendOne one) {
  if (!faults_.active()) return one(packet);
  std::vector<FaultInjector::Packet> out;
  faults_.apply(packet, out, counters_);
  Result<void> result;
  for (const auto& p : out)
    if (auto r = one(p); !r && result.ok()) result = std::move(r);
  return result;
}

void DatagramLink::raise_buffers(int fd, int bytes) {
  if (bytes <= 0) return;
  if (::setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &bytes, sizeof bytes) != 0)
    (void)::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof bytes);
  if (::setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &bytes, sizeof bytes) != 0)
    (void)::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof bytes);
}

// Threaded: this thread is the socket's one reader (poll() reads nothing).
void DatagramLink::receive_loop() {
  rx_tid_.store(std::this_thread::get_id());
  if (polled_) return watch_loop();
  pollfd fds[2] = {{sock_.get(), POLLIN, 0}, {wake_.get(), POLLIN, 0}};
  while (!stopping_.load(std::memory_order_acquire)) {
    const int n = ::poll(fds, 2, poll_timeout_ms_);
    if (n < 0) {
      if (errno == EINTR) continue;
      logger()->error("{}: poll: {}; receive thread ends", name_, std::strerror(errno));
      return;
    }
    after_wait(true);
    if (n == 0 || fds[1].revents != 0) continue;  // timeout or stop(): the loop condition decides
    if (fds[0].revents & POLLNVAL) return;
    receive(kRecvBatch);
  }
}

// Polled: the owner reads; this thread only tells it, once per arm, that
// the socket is readable (while the owner sleeps).
void DatagramLink::watch_loop() {
  while (!stopping_.load(std::memory_order_acquire)) {
    epoll_event ev[2];
    const int n = ::epoll_wait(ep_.get(), ev, 2, poll_timeout_ms_);
    if (n < 0) {
      if (errno == EINTR) continue;
      logger()->error("{}: epoll_wait: {}; watch thread ends", name_, std::strerror(errno));
      return;
    }
    for (int i = 0; i < n; ++i)
      if (ev[i].data.u32 == 0 && !stopping_.load(std::memory_order_acquire)) on_readable_();
    if (!stopping_.load(std::memory_order_acquire)) after_wait(false);
  }
}

void DatagramLink::arm_readable() {
  if (!on_readable_) return;
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLONESHOT;
  ev.data.u32 = 0;
  (void)::epoll_ctl(ep_.get(), EPOLL_CTL_MOD, sock_.get(), &ev);
}

std::size_t DatagramLink::poll(std::size_t max) {
  if (!polled_ || stopping_.load(std::memory_order_acquire)) return 0;
  std::unique_lock lk(read_mutex(), std::try_to_lock);
  if (!lk.owns_lock()) return 0;
  before_poll();
  return receive(max);
}

}  // namespace openib::sim
