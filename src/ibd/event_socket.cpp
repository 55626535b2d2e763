// A client session's event socket: see event_socket.hpp.
#include "ibd/event_socket.hpp"

#include <fcntl.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace openib::ibd {

Result<std::pair<std::unique_ptr<EventSocket>, UniqueFd>> EventSocket::open(boost::asio::io_context& io,
                                                                          size_t max_queued, Charge charge) {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sv) != 0)
    return err(errno, "socketpair: {}", std::strerror(errno));
  UniqueFd ours(sv[0]), theirs(sv[1]);
  // Room for bursts (10,000 connections' events); the queue takes the rest.
  int sz = 4 << 20;
  if (::setsockopt(ours.get(), SOL_SOCKET, SO_SNDBUFFORCE, &sz, sizeof sz) != 0)
    (void)::setsockopt(ours.get(), SOL_SOCKET, SO_SNDBUF, &sz, sizeof sz);
  ::shutdown(ours.get(), SHUT_RD);  // ibd's to write only: the client's writes fail
  // The client's end blocks (the library polls first).
  if (int fl = ::fcntl(theirs.get(), F_GETFL); fl >= 0) (void)::fcntl(theirs.get(), F_SETFL, fl & ~O_NONBLOCK);
  std::unique_ptr<EventSocket> s(new EventSocket(io, ours.release(), max_queued ? max_queued : 1, charge));
  return std::pair<std::unique_ptr<EventSocket>, UniqueFd>{std::move(s), std::move(theirs)};
}

EventSocket::EventSocket(boost::asio::io_context& io, int fd, size_t max_queued, Charge charge)
    : sd_(std::make_unique<boost::asio::posix::stream_descriptor>(io, fd)), max_queued_(max_queued), charge_(charge) {}

EventSocket::~EventSocket() {
  *alive_ = false;
  close();
}

size_t EventSocket::queued_bytes() const {
  size_t n = 0;
  for (const auto& b : out_) n += cost(b);
  return n;
}

EventSocket::Push EventSocket::push(std::vector<std::byte> event) {
  if (!sd_) return Push::kClosed;
  const size_t c = cost(event);
  const bool over_bytes = charge_.bytes && !charge_.bytes->take(charge_.client, charge_.uid, c);
  if (!over_bytes) charged_ += charge_.bytes ? c : 0;
  out_.push_back(std::move(event));
  if (over_bytes || out_.size() > max_queued_) {
    // The client reads none of its events: the socket is closed, so it
    // learns (EOF) instead of missing some silently.
    close();
    return Push::kOverrun;
  }
  if (!write_waiting_) flush();
  return sd_ ? Push::kOk : Push::kClosed;
}

void EventSocket::flush() {
  while (!out_.empty() && sd_) {
    const auto& b = out_.front();
    ssize_t n = ::send(sd_->native_handle(), b.data(), b.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      write_waiting_ = true;
      sd_->async_wait(boost::asio::posix::stream_descriptor::wait_write,
                      [this, alive = std::weak_ptr<bool>(alive_)](boost::system::error_code ec) {
                        if (alive.expired() || ec) return;
                        write_waiting_ = false;
                        flush();
                      });
      return;
    }
    if (n < 0) return close();  // the client closed its end: nothing more to tell it
    if (charge_.bytes) {
      const size_t c = std::min(charged_, cost(b));
      charge_.bytes->give(charge_.client, charge_.uid, c);
      charged_ -= c;
    }
    out_.pop_front();
  }
}

void EventSocket::close() {
  out_.clear();
  if (charge_.bytes && charged_) charge_.bytes->give(charge_.client, charge_.uid, charged_);
  charged_ = 0;
  if (!sd_) return;
  boost::system::error_code ec;
  sd_->cancel(ec);
  sd_.reset();
}

}  // namespace openib::ibd
