// ibd stopped with SIGTERM under load: its clients must learn it within a
// bound, with an error (ECONNRESET, EPIPE, ENOTCONN, ESHUTDOWN, ENODEV or a
// DEVICE_FATAL event), not hang; ibd itself exits 0.
//
// Each client is an ibd-test-client process (test_client.cpp) in one mode:
// control-loop (allocating and freeing PDs), wait-event (blocked in
// CompChannel::get_event(-1)), poll-async (polling its CQ and watching
// async_fd()). A second case stops ibd (SIGSTOP) first, so that the
// control-loop clients are certainly blocked inside a request when the
// SIGTERM (with SIGCONT) arrives.
#include <signal.h>
#include <sys/wait.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <memory>
#include <set>
#include <sstream>
#include <thread>

#include "harness.hpp"

using namespace openib::testing;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

constexpr auto kBound = 10s;  // from SIGTERM to every client's error

void stop_under_load(bool freeze_first) {
  const std::string client = env_path("OPENIB_TEST_CLIENT");
  TempDir dir;
  IbdOptions o;
  Ibd ibd(dir.path(), "stop", o);

  const std::vector<std::string> modes = {"control-loop", "control-loop", "wait-event",
                                          "poll-async", "poll-async"};
  std::vector<std::unique_ptr<Child>> kids;
  for (auto& m : modes) {
    kids.push_back(std::make_unique<Child>(std::vector<std::string>{
        client, "--socket", ibd.socket(), "--mode", m, "--max-seconds", "120"}));
  }
  for (size_t i = 0; i < kids.size(); ++i) {
    INFO(modes[i] << " client output: " << kids[i]->output() << "\nibd log:\n" << ibd.log_tail());
    REQUIRE(kids[i]->wait_for_output("ready", 15s));
  }
  std::this_thread::sleep_for(300ms);  // under load for a moment
  if (freeze_first) {
    ibd.signal(SIGSTOP);
    std::this_thread::sleep_for(300ms);  // the control loops are now inside a request
  }
  auto t0 = Clock::now();
  auto st = ibd.stop(kBound);  // SIGTERM (and SIGCONT)
  INFO("ibd log:\n" << ibd.log_tail());
  REQUIRE(st.has_value());
  CHECK(WIFEXITED(*st));
  CHECK(WEXITSTATUS(*st) == 0);

  const std::set<int> accepted = {ECONNRESET, EPIPE, ENOTCONN, ESHUTDOWN, ENODEV};
  for (size_t i = 0; i < kids.size(); ++i) {
    auto left = kBound - (Clock::now() - t0);
    auto cst = kids[i]->wait(std::chrono::duration_cast<std::chrono::milliseconds>(
        std::max<Clock::duration>(left, 100ms)));
    double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    INFO(modes[i] << " client (#" << i << "), " << ms << " ms after SIGTERM, said: "
                  << kids[i]->output());
    CHECK(cst.has_value());  // no hang
    if (!cst) continue;
    CHECK(WIFEXITED(*cst));
    CHECK(WEXITSTATUS(*cst) == 3);  // it met an error
    auto pos = kids[i]->output().find("result ");
    REQUIRE(pos != std::string::npos);
    int code = 0;
    std::istringstream(kids[i]->output().substr(pos + 7)) >> code;
    CHECK(accepted.count(code) == 1);
  }
}

}  // namespace

TEST_CASE("SIGTERM under load: every client gets an error within the bound", "[shutdown]") {
  stop_under_load(false);
}

TEST_CASE("SIGTERM while clients are blocked in requests (ibd frozen first)", "[shutdown]") {
  stop_under_load(true);
}
