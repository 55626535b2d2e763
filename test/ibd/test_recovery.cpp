// The recovery state machine (src/ibd/recovery.hpp) with fake steps on an
// io_context: attempts until one succeeds, with growing backoff; the limit;
// a limit of 0; a loss reported twice; results of older attempts and of
// attempts after stop() dropped; results taken on the loop.
#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "ibd/recovery.hpp"

using namespace openib;
using namespace openib::ibd;
using State = Recovery::State;

namespace {

struct Fake {
  boost::asio::io_context io;
  std::vector<std::string> log;
  std::vector<Recovery::AttemptDone> pending;  // attempts not answered yet
  Recovery::Steps steps() {
    Recovery::Steps s;
    s.fence = [this](const std::string& why) { log.push_back("fence " + why); };
    s.attempt = [this](unsigned n, Recovery::AttemptDone d) {
      log.push_back("attempt " + std::to_string(n));
      pending.push_back(std::move(d));
    };
    s.failed = [this](unsigned n, const Error& e) { log.push_back("failed " + std::to_string(n) + " " + e.message); };
    s.back = [this](unsigned n, std::chrono::milliseconds) { log.push_back("back " + std::to_string(n)); };
    s.give_up = [this](const std::string& why) { log.push_back("give_up " + why); };
    return s;
  }
  // Answers the latest attempt; the machine takes it on the loop.
  void answer(Result<void> r) {
    auto d = std::move(pending.back());
    pending.pop_back();
    d(std::move(r));
  }
  void run_for(std::chrono::milliseconds t) {
    io.restart();
    io.run_for(t);
  }
};

}  // namespace

TEST_CASE("Recovery: attempts with backoff until one succeeds", "[recovery-machine]") {
  Fake f;
  Recovery r(f.io, 10, f.steps());
  CHECK(r.state() == State::kRunning);
  r.lost("simhca died");
  CHECK(r.state() == State::kRestarting);
  r.lost("again");  // the same loss: ignored
  CHECK(f.log == std::vector<std::string>{"fence simhca died", "attempt 1"});
  f.answer(err(EIO, "no"));
  CHECK(f.log.size() == 2);  // not inside the completion
  f.run_for(std::chrono::milliseconds(50));
  CHECK(f.log.back() == "failed 1 no");
  CHECK(f.pending.empty());  // the backoff (100 ms) runs first
  f.run_for(std::chrono::milliseconds(150));
  REQUIRE(f.log.back() == "attempt 2");
  f.answer(ok());
  f.run_for(std::chrono::milliseconds(10));
  CHECK(f.log.back() == "back 2");
  CHECK(r.state() == State::kRunning);
  CHECK(r.attempt() == 2);
  CHECK(Recovery::backoff(1) == std::chrono::milliseconds(100));
  CHECK(Recovery::backoff(2) == std::chrono::milliseconds(200));
  CHECK(Recovery::backoff(7) == std::chrono::milliseconds(5000));
  CHECK(Recovery::backoff(30) == std::chrono::milliseconds(5000));
  CHECK(std::string(Recovery::name(State::kGaveUp)) == "gave_up");
}

TEST_CASE("Recovery: the limit gives up; a limit of 0 at once, unfenced", "[recovery-machine]") {
  Fake f;
  Recovery r(f.io, 1, f.steps());
  r.lost("gone");
  f.answer(err(EIO, "no"));
  f.run_for(std::chrono::milliseconds(20));
  CHECK(r.state() == State::kGaveUp);
  CHECK(f.log.back() == "give_up the device did not come back after 1 attempts");
  r.lost("again");
  CHECK(f.log.back() == "give_up the device did not come back after 1 attempts");

  Fake g;
  Recovery none(g.io, 0, g.steps());
  none.lost("gone");
  CHECK(none.state() == State::kGaveUp);
  CHECK(g.log == std::vector<std::string>{"give_up gone"});
}

TEST_CASE("Recovery: results after stop() and of older attempts are dropped", "[recovery-machine]") {
  Fake f;
  Recovery r(f.io, 5, f.steps());
  r.lost("gone");
  r.stop();
  f.answer(ok());
  f.run_for(std::chrono::milliseconds(20));
  CHECK(r.state() == State::kStopped);
  CHECK(f.log.back() == "attempt 1");  // no "back"

  Fake g;
  Recovery s(g.io, 5, g.steps());
  s.lost("gone");
  auto first = g.pending.back();  // attempt 1's completion, kept
  g.answer(err(EIO, "slow"));     // attempt 1 fails
  g.run_for(std::chrono::milliseconds(200));
  REQUIRE(g.log.back() == "attempt 2");
  first(ok());  // attempt 1 answering late: not attempt 2's result
  g.run_for(std::chrono::milliseconds(10));
  CHECK(g.log.back() == "attempt 2");
  CHECK(s.state() == State::kRestarting);
  g.answer(ok());
  g.run_for(std::chrono::milliseconds(10));
  CHECK(g.log.back() == "back 2");
  CHECK(s.state() == State::kRunning);
}
