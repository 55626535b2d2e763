// The event socket of a client session (docs/client-protocol.md §13,
// "RDMA CM"): ibd's end of a SOCK_SEQPACKET pair, written only by ibd, one
// encoded event per datagram. The client's end is handed over with the
// reply to CM_OPEN / CMA_OPEN; ibd has shut its own read side, so a
// client's write fails (EPIPE).
//
// Events the client does not read at once wait in a queue, at most
// `max_queued`, and their bytes are taken from the session owner's
// event-bytes budget (budget.hpp, per client and per uid) while they wait;
// past either bound the socket is closed (the client reads EOF or
// ECONNRESET) and push() says so: an event is never dropped silently.
// Single-threaded on ibd's io_context.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <utility>
#include <vector>

#include "common/fd.hpp"
#include "common/result.hpp"
#include "ibd/budget.hpp"

namespace openib::ibd {

// The budget (optional, outliving the socket) queued events are charged
// to, as `client` of `uid`.
struct EventCharge {
  Budget* bytes = nullptr;
  uint32_t client = 0;
  uid_t uid = 0;
};

class EventSocket {
 public:
  // The pair; `first` is ibd's end, `second` the client's (blocking).
  using Charge = EventCharge;
  static Result<std::pair<std::unique_ptr<EventSocket>, UniqueFd>> open(boost::asio::io_context& io,
                                                                       size_t max_queued, Charge charge = {});
  ~EventSocket();
  EventSocket(const EventSocket&) = delete;
  EventSocket& operator=(const EventSocket&) = delete;

  // Queues one event and writes what the socket takes. False when the
  // socket is closed (now, by overrun, or earlier: the client closed it).
  enum class Push { kOk, kOverrun, kClosed };
  Push push(std::vector<std::byte> event);
  bool is_open() const { return sd_ != nullptr; }
  size_t queued() const { return out_.size(); }
  size_t queued_bytes() const;

 private:
  EventSocket(boost::asio::io_context& io, int fd, size_t max_queued, Charge charge);
  void flush();
  void close();
  static size_t cost(const std::vector<std::byte>& b) { return b.size() + sizeof b; }

  std::unique_ptr<boost::asio::posix::stream_descriptor> sd_;
  std::deque<std::vector<std::byte>> out_;
  size_t max_queued_;
  Charge charge_;
  size_t charged_ = 0;  // bytes taken from charge_.bytes
  bool write_waiting_ = false;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace openib::ibd
