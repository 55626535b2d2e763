// The asynchronous command interface (src/hca/command_interface.hpp,
// docs/device-access.md "Commands"): many commands in flight completing
// with their own outputs, the slot reserved for health checks, a command
// the device never completes (timeout, fenced slot, others unaffected), a
// device that vanishes under commands in flight (ENODEV), and the
// completer's exactly-once promise.
#include <functional>

#include "hca/prm.hpp"
#include "test_simhca_fixture.hpp"

using namespace openib;
using namespace openib::test;
using namespace openib::hca;
using Clock = std::chrono::steady_clock;

namespace {

struct AsyncFixture {
  explicit AsyncFixture(int timeout_ms = 5000) {
    dev = connect(sim);
    HcaOptions o;
    o.cmd.timeout_ms = timeout_ms;
    auto h = Hca::open(*dev, io, o);
    if (!h) FAIL(h.error().str());
    hca = std::move(h).value();
  }
  ~AsyncFixture() {
    hca.reset();
    dev.reset();
  }
  // Runs the loop until pred() holds; false after timeout_ms.
  bool run_until(const std::function<bool()>& pred, int timeout_ms = 10000) {
    const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
    while (!pred()) {
      if (Clock::now() >= deadline) return false;
      io.run_one_for(std::chrono::milliseconds(20));
    }
    return true;
  }
  CommandInterface& cmd() { return hca->commands(); }

  SimhcaProcess sim;
  boost::asio::io_context io;
  std::unique_ptr<vfio::Device> dev;
  std::unique_ptr<Hca> hca;
};

}  // namespace

TEST_CASE("async commands: many in flight complete with their own outputs", "[simhca][async]") {
  AsyncFixture f;
  // Three kinds interleaved, more than the 31 normal slots: each completion
  // must carry its own command's output (tokens matched, mailboxes per slot).
  constexpr int kEach = 40;
  std::vector<uint32_t> pds;
  int caps_ok = 0, ports_ok = 0, failures = 0;
  for (int i = 0; i < kEach; ++i) {
    f.hca->alloc_pd_async([&](Result<uint32_t> r) {
      if (r) pds.push_back(*r);
      else ++failures;
    });
    f.hca->command_async(prm::kOpQueryDeviceCap, {}, 80, [&](Result<Bytes> r) {
      if (r && decode_caps(*r).max_qp == f.hca->caps().max_qp &&
          decode_caps(*r).node_guid == f.hca->caps().node_guid)
        ++caps_ok;
      else
        ++failures;
    });
    f.hca->query_port_async(1, [&](Result<PortAttr> r) {
      if (r && r->port_guid != 0 && r->gid_table_len > 0) ++ports_ok;
      else ++failures;
    });
  }
  CHECK(f.cmd().queued() > 0);  // 120 submitted, 31 slots
  REQUIRE(f.run_until([&] { return int(pds.size()) + caps_ok + ports_ok + failures == 3 * kEach; }));
  CHECK(failures == 0);
  CHECK(caps_ok == kEach);
  CHECK(ports_ok == kEach);
  std::sort(pds.begin(), pds.end());
  CHECK(std::adjacent_find(pds.begin(), pds.end()) == pds.end());  // 40 distinct PDs
  CHECK(f.cmd().stats().max_in_flight > 1);
  CHECK(f.cmd().stats().max_in_flight <= f.cmd().num_slots() - 1);  // the reserved slot stayed free
  CHECK(f.cmd().stats().missed_events == 0);
  CHECK(f.cmd().in_flight() == 0);
  for (uint32_t pd : pds) REQUIRE(f.hca->dealloc_pd(pd).ok());
}

TEST_CASE("async commands: the reserved slot serves a NOP while 31 are busy", "[simhca][async]") {
  AsyncFixture f(/*timeout_ms*/ 60000);
  // 31 commands the device never sees (doorbell withheld) fill every
  // normal slot; a 32nd waits in the queue.
  f.cmd().test_withhold_doorbell(31);
  int normal_done = 0;
  for (int i = 0; i < 32; ++i) f.hca->command_async(prm::kOpNop, {}, 0, [&](Result<Bytes>) { ++normal_done; });
  CHECK(f.cmd().in_flight() == 31);
  CHECK(f.cmd().queued() == 1);
  std::optional<Result<void>> health;
  f.hca->nop_async([&](Result<void> r) { health = std::move(r); });
  REQUIRE(f.run_until([&] { return health.has_value(); }, 5000));
  CHECK(health->ok());
  CHECK(normal_done == 0);  // the health check did not wait for them, nor they for it
  f.hca.reset();            // closing fails what is left with ECANCELED, each exactly once
  CHECK(normal_done == 32);
}

TEST_CASE("async commands: one that never completes times out, fenced, without blocking others",
          "[simhca][async]") {
  AsyncFixture f(/*timeout_ms*/ 400);
  f.cmd().test_withhold_doorbell(1);
  std::optional<Result<uint32_t>> lost;
  f.hca->alloc_pd_async([&](Result<uint32_t> r) { lost = std::move(r); });
  int others = 0;
  for (int i = 0; i < 50; ++i)
    f.hca->alloc_pd_async([&](Result<uint32_t> r) { others += r.ok() ? 1 : 1000; });
  const auto start = Clock::now();
  REQUIRE(f.run_until([&] { return others >= 50; }, 5000));
  CHECK(others == 50);
  CHECK(!lost.has_value());  // still waiting while the others completed
  CHECK(Clock::now() - start < std::chrono::milliseconds(400));
  REQUIRE(f.run_until([&] { return lost.has_value(); }, 5000));
  REQUIRE(!lost->ok());
  CHECK(lost->error().code == ETIMEDOUT);
  CHECK(f.cmd().stats().timeouts == 1);
  // Its slot stays fenced: the device may still own the entry.
  CHECK(f.cmd().fenced() == 1);
  CHECK(f.cmd().in_flight() == 0);
  // The rest of the queue keeps working on the remaining slots.
  CHECK(f.hca->nop().ok());
}

TEST_CASE("async commands: a device that vanishes fails every command in flight with ENODEV",
          "[simhca][async][faults]") {
  AsyncFixture f;
  f.cmd().test_withhold_doorbell(10);  // these stay in flight
  std::vector<int> codes;
  for (int i = 0; i < 40; ++i)  // 10 withheld, 21 in slots, 9 queued behind... all pending
    f.hca->alloc_pd_async([&](Result<uint32_t> r) { codes.push_back(r ? 0 : r.error().code); });
  // Let the ones the device sees complete, then kill the device under the rest.
  REQUIRE(f.run_until([&] { return codes.size() == 30; }, 5000));
  CHECK(f.cmd().in_flight() == 10);
  f.sim.kill_now();
  REQUIRE(f.run_until([&] { return codes.size() == 40; }, 5000));  // the health read notices
  CHECK(std::count(codes.begin(), codes.end(), ENODEV) == 10);
  CHECK(std::count(codes.begin(), codes.end(), 0) == 30);
  // Later submissions fail at once with ENODEV too.
  std::optional<int> later;
  f.hca->nop_async([&](Result<void> r) { later = r ? 0 : r.error().code; });
  REQUIRE(f.run_until([&] { return later.has_value(); }, 2000));
  CHECK(*later == ENODEV);
}

TEST_CASE("completer: called exactly once", "[async][completer]") {
  const CompleterStats before = completer_stats();
  SECTION("a completer destroyed uncalled completes with ECANCELED") {
    std::optional<int> code;
    { Completer<Result<int>> c([&](Result<int> r) { code = r ? 0 : r.error().code; }); }
    CHECK(code == ECANCELED);
    CHECK(completer_stats().dropped == before.dropped + 1);
  }
  SECTION("a second call is dropped and counted") {
    int calls = 0;
    Completer<Result<int>> c([&](Result<int>) { ++calls; });
    c(1);
    c(2);
    CHECK(calls == 1);
    CHECK(completer_stats().called_twice == before.called_twice + 1);
  }
  SECTION("moving keeps one promise") {
    int calls = 0;
    Completer<Result<int>> a([&](Result<int>) { ++calls; });
    Completer<Result<int>> b = std::move(a);
    CHECK(!a);
    b(7);
    CHECK(calls == 1);
    CHECK(completer_stats().dropped == before.dropped);
  }
}
