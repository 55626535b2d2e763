// DatagramLink: what the cable ends on a datagram socket share, each
// carrying one packet or frame per datagram: UdpLink (udp_link.hpp, a UDP
// socket to the peer) and PacketLink (packet_link.hpp, an AF_PACKET
// socket on a host interface). The socket itself (how it is opened, sent
// on, read) is the subclass's; here is the rest:
//
//   receive  one of two modes (docs/cables.md "Polled receive"). Threaded:
//            the link's own thread waits on the socket and on a stop
//            eventfd with poll() and calls receive(). Polled: the owner
//            calls poll(), which calls receive() on the owner's thread;
//            with an on_readable callback, the link's thread only watches
//            the socket (epoll, one-shot, re-armed by arm_readable()) while
//            the owner sleeps; without, there is no thread and the owner
//            watches fd(). OPENIB_UDP_POLLED=0 turns polling off.
//   deliver  the receivers (set_receiver, set_state_receiver) swapped
//            under a lock and called outside it; a well-formed packet
//            with no receiver counted rx_dropped_no_receiver.
//   send     fault injection (FaultSpec) under send_mu_, each packet it
//            yields sent by the subclass; tx counters.
//   capture  the Ethernet pcap tap, a failure logged once.
//
// Lifecycle: the subclass's create() opens the socket, constructs, then
// start()s (eventfd, epoll, thread). stop() ends the thread (within the
// poll timeout at worst; normally at once, through the eventfd); a
// subclass's destructor calls stop() first, since the thread calls its
// hooks. Neither may be called from the receiver.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>

#include "common/fd.hpp"
#include "common/function_ref.hpp"
#include "common/log.hpp"
#include "common/result.hpp"
#include "sim/cable/fault_injector.hpp"
#include "sim/cable/link.hpp"
#include "sim/cable/link_counters.hpp"

namespace openib::sim::wire {
class PcapEthWriter;
}

namespace openib::sim {

class DatagramLink : public Link {
 public:
  ~DatagramLink() override;
  DatagramLink(const DatagramLink&) = delete;
  DatagramLink& operator=(const DatagramLink&) = delete;

  void set_receiver(Receiver r) override;
  void set_state_receiver(StateReceiver r) override;
  LinkStats stats() const override { return counters_.snapshot(); }
  // Replaces the send-side faults (restarting their PRNG from spec.seed).
  void set_faults(const FaultSpec& spec);

  // Ends the receive thread and waits for it; idempotent. send() still works.
  // Polled, poll() then reads nothing more (and the owner stops watching).
  void stop();

  // Polled receive: whether it is on (asked for, not turned off).
  bool polled() const { return polled_; }
  // The socket, for an owner that watches it (polled, no on_readable).
  int fd() const { return sock_.get(); }
  // Polled: reads what the socket holds now, up to about `max` packets
  // (frames), and hands them to the receiver on the calling thread; how
  // many datagrams it took. One reader at a time: a second caller
  // meanwhile gets 0. Not polled: 0, the receive thread reads.
  std::size_t poll(std::size_t max);
  // Polled, before the owner sleeps: on_readable() is called (from the
  // link's thread) as soon as a datagram waits, at once if one does now.
  void arm_readable();

  const std::string& name() const { return name_; }

 protected:
  // `poll_timeout` is clamped to 1..1000 ms; `polled` and `on_readable`
  // as UdpLinkOptions'.
  DatagramLink(UniqueFd sock, std::string name, const FaultSpec& faults, wire::PcapEthWriter* pcap_eth,
               std::chrono::milliseconds poll_timeout, bool polled, std::function<void()> on_readable);
  // The stop eventfd, the watch epoll (polled with on_readable) and the
  // thread (unless polled without on_readable). Called once, by create().
  Result<void> start();
  // For create()'s log line: how the owner reads ("" when threaded).
  const char* polling_note() const;

  // Reads what the socket holds now, up to about `max` datagrams, and
  // hands each on; how many it took. On the receive thread, or in poll()
  // under read_mutex().
  virtual std::size_t receive(std::size_t max) = 0;
  // What poll() holds while it reads (a ring shared with other links).
  virtual std::mutex& read_mutex() { return read_mu_; }
  // Called in poll() under read_mutex(), before receive().
  virtual void before_poll() {}
  // Called on the link's thread after each wait, also when it timed out:
  // from the receive loop (`receiving`) or the watch loop.
  virtual void after_wait(bool /*receiving*/) {}

  // A well-formed packet to the receiver (rx_dropped_no_receiver without one).
  void deliver(std::span<const std::byte> packet);
  // A link-state change to the state receiver, counted rx_link_signals.
  void deliver_state(bool up);
  // A frame into the Ethernet capture tap, if one is set.
  void capture_frame(std::span<const std::byte> frame);
  // Counts a packet handed to send(): tx_packets, tx_bytes.
  void count_sent(std::size_t bytes);
  // Under send_mu_: `packet` through the fault injector, each packet it
  // yields to `one`, in wire order; the first error, after all are tried.
  using SendOne = FunctionRef<Result<void>(std::span<const std::byte>)>;
  Result<void> send_faulted(std::span<const std::byte> packet, SendOne one);

  // SO_RCVBUF and SO_SNDBUF raised to `bytes`, best effort: the *FORCE
  // options pass net.core.{r,w}mem_max with CAP_NET_ADMIN; else the plain
  // ones, capped by the kernel. A small buffer only means earlier drops.
  static void raise_buffers(int fd, int bytes);
  // Logs the first event of a kind at warning level, the rest at debug.
  template <typename... Args>
  static void log_once(std::atomic<bool>& warned, fmt::format_string<Args...> f, Args&&... args) {
    const bool first = !warned.exchange(true, std::memory_order_relaxed);
    log::get("cable")->log(first ? spdlog::level::warn : spdlog::level::debug, f, std::forward<Args>(args)...);
  }

  UniqueFd sock_;
  std::string name_;
  bool polled_ = false;
  std::function<void()> on_readable_;  // polled only
  std::atomic<bool> stopping_{false};

  std::mutex send_mu_;  // serialises fault injection and the datagrams it yields
  FaultInjector faults_;

  LinkCounters counters_;
  std::atomic<unsigned> warned_{0};  // rx_check.hpp's once-per-kind logging
  std::atomic<bool> warned_tx_{false}, warned_rx_{false}, warned_pcap_{false};

 private:
  void receive_loop();
  void watch_loop();  // the link's thread when polled

  UniqueFd wake_;  // eventfd: stop() wakes the thread's poll()
  UniqueFd ep_;    // polled with on_readable: the thread waits here (socket one-shot, wake_)
  wire::PcapEthWriter* pcap_eth_;
  int poll_timeout_ms_;
  std::mutex read_mu_;  // one reader of the socket at a time (poll())

  std::mutex rx_mu_;
  std::shared_ptr<const Receiver> receiver_;
  std::shared_ptr<const StateReceiver> state_receiver_;

  std::mutex stop_mu_;  // one joiner at a time
  std::atomic<std::thread::id> rx_tid_{};
  std::thread thread_;
};

}  // namespace openib::sim
