// Device recovery (docs/operations.md §5) as a state machine with named
// states; what each step does to the device is the daemon's (Steps):
//
//   running --lost()--> dead --fence--> restarting --attempt ok--> running
//                                       restarting --attempt failed--> backoff, restarting
//                                       restarting --limit reached--> gave_up
//   any --stop()--> stopped
//
// A loss reported while not running is the same loss (ignored). With a
// limit of 0 a loss gives up at once, unfenced. An attempt's result is
// taken on the loop, never inside the completion that produced it (a failed
// attempt's cleanup may destroy what called it), and only while that
// attempt is the current one: a late result of an older attempt, or any
// after stop(), is dropped.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "common/result.hpp"

namespace openib::ibd {

class Recovery {
 public:
  enum class State : uint8_t { kRunning, kDead, kRestarting, kGaveUp, kStopped };
  static const char* name(State s);
  using AttemptDone = std::function<void(Result<void>)>;
  struct Steps {
    // Dead: the device fenced, its users told, everything on it forgotten.
    std::function<void(const std::string& why)> fence;
    // One bring-up attempt (numbered from 1); `done` once it is up or failed.
    std::function<void(unsigned attempt, AttemptDone done)> attempt;
    // A failed attempt's leftovers undone (before the backoff).
    std::function<void(unsigned attempt, const Error& e)> failed;
    // Running again: after `attempts`, `down` after the loss.
    std::function<void(unsigned attempts, std::chrono::milliseconds down)> back;
    // No more attempts (the limit, or a limit of 0).
    std::function<void(const std::string& why)> give_up;
  };

  Recovery(boost::asio::io_context& io, unsigned limit, Steps steps);
  ~Recovery();
  Recovery(const Recovery&) = delete;
  Recovery& operator=(const Recovery&) = delete;

  void lost(const std::string& why);
  void stop();
  State state() const { return state_; }
  unsigned attempt() const { return attempt_; }
  // The wait before attempt n + 1 after attempt n failed: 100 ms doubled
  // per attempt, at most 5 s.
  static std::chrono::milliseconds backoff(unsigned failed_attempt);

 private:
  void next_attempt();
  void on_result(unsigned attempt, Result<void> r);

  boost::asio::io_context& io_;
  unsigned limit_;
  Steps steps_;
  boost::asio::steady_timer backoff_;
  State state_ = State::kRunning;
  unsigned attempt_ = 0;
  std::chrono::steady_clock::time_point lost_at_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace openib::ibd
