#include "ibd/recovery.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <boost/asio/post.hpp>

namespace openib::ibd {

const char* Recovery::name(State s) {
  switch (s) {
    case State::kRunning: return "running";
    case State::kDead: return "dead";
    case State::kRestarting: return "restarting";
    case State::kGaveUp: return "gave_up";
    case State::kStopped: return "stopped";
  }
  return "?";
}

Recovery::Recovery(boost::asio::io_context& io, unsigned limit, Steps steps)
    : io_(io), limit_(limit), steps_(std::move(steps)), backoff_(io) {}

Recovery::~Recovery() { stop(); }

std::chrono::milliseconds Recovery::backoff(unsigned failed_attempt) {
  const unsigned shift = failed_attempt == 0 ? 0 : std::min(failed_attempt - 1, 6u);
  return std::chrono::milliseconds(std::min(5000u, 100u << shift));
}

void Recovery::lost(const std::string& why) {
  if (state_ != State::kRunning) return;
  if (limit_ == 0) {
    state_ = State::kGaveUp;
    return steps_.give_up(why);
  }
  lost_at_ = std::chrono::steady_clock::now();
  state_ = State::kDead;
  steps_.fence(why);
  if (state_ != State::kDead) return;  // stopped meanwhile
  state_ = State::kRestarting;
  attempt_ = 0;
  next_attempt();
}

void Recovery::stop() {
  state_ = State::kStopped;
  backoff_.cancel();
}

void Recovery::next_attempt() {
  const unsigned n = ++attempt_;
  std::weak_ptr<bool> alive = alive_;
  steps_.attempt(n, [this, alive, n](Result<void> r) {
    // On the loop, not inside the completion that produced it.
    boost::asio::post(io_, [this, alive, n, r = std::move(r)]() mutable {
      if (!alive.expired()) on_result(n, std::move(r));
    });
  });
}

void Recovery::on_result(unsigned n, Result<void> r) {
  if (state_ != State::kRestarting || n != attempt_) return;  // stopped, or an older attempt
  if (r) {
    state_ = State::kRunning;
    return steps_.back(n, std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - lost_at_));
  }
  steps_.failed(n, r.error());
  if (state_ != State::kRestarting) return;
  if (n >= limit_) {
    state_ = State::kGaveUp;
    return steps_.give_up(fmt::format("the device did not come back after {} attempts", n));
  }
  backoff_.expires_after(backoff(n));
  backoff_.async_wait([this, n](const boost::system::error_code& e) {
    if (!e && state_ == State::kRestarting && n == attempt_) next_attempt();
  });
}

}  // namespace openib::ibd
