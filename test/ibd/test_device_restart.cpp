// Device recovery beyond a killed embedded simhca (docs/operations.md §5
// "Device recovery", docs/client-protocol.md §6.1):
//  - a restart that takes long (simhca --start-delay-ms, or slow commands:
//    --cmd-delay-ms) does not hold up ibd's loop: a stale client's INFO is
//    answered at once, "restarting", and SIGTERM ends ibd at once;
//  - an external vfio-user device (ibd --device vfio-user:PATH, a simhca
//    this test starts) that dies is reconnected once a new simhca listens
//    at PATH;
//  - a device that reports its own fatal error (docs/simhca.md §11.4,
//    raised by simhca's SIGUSR1 test hook) is function-reset (§11.5) and
//    brought up again, its clients told DEVICE_FATAL then ENODEV.
// Each ends with a new pair of clients running an RC ping-pong.
#include <poll.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <map>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>

#include "clientproto/socket.hpp"
#include "openib/cma.hpp"
#include "harness.hpp"
#include "rc_link.hpp"

namespace proto = openib::proto;
using namespace openib;
using namespace openib::testing;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

bool log_has(const Ibd& ibd, const std::string& what, std::chrono::milliseconds limit) {
  return wait_until([&] { return ibd.log_tail(size_t(1) << 24).find(what) != std::string::npos; }, limit);
}

// A client-protocol connection that said HELLO (no UAR) and asks for INFO:
// after a device loss it is a stale client, to which ibd still answers INFO.
class InfoClient {
 public:
  explicit InfoClient(const std::string& path) {
    fd_ = UniqueFd(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
    REQUIRE(fd_.valid());
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::strncpy(a.sun_path, path.c_str(), sizeof a.sun_path - 1);
    REQUIRE(::connect(fd_.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    proto::HelloReq h;
    h.flags = proto::kHelloNoUar;
    REQUIRE(request(proto::Op::kHello, proto::encode(h), 10s).first == 0);
  }
  // The reply's status (-1: none within `wait`) and payload.
  std::pair<int, std::string> request(proto::Op op, const proto::Bytes& body, std::chrono::milliseconds wait) {
    proto::Header h;
    h.op = static_cast<uint16_t>(op);
    h.seq = ++seq_;
    if (!proto::send_message(fd_.get(), h, body)) return {-1, {}};
    pollfd p{fd_.get(), POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(wait.count())) != 1) return {-1, {}};
    auto m = proto::recv_message(fd_.get(), true);
    if (!m) return {-1, {}};
    auto v = proto::decode_reply(m->body);
    if (!v) return {-1, {}};
    return {v->status, std::string(reinterpret_cast<const char*>(v->payload.data()), v->payload.size())};
  }

 private:
  UniqueFd fd_;
  uint32_t seq_ = 0;
};

// A simhca this test runs itself (an external device for ibd), listening
// once its socket file exists.
std::unique_ptr<Child> start_simhca(const std::string& sock) {
  auto c = std::make_unique<Child>(std::vector<std::string>{env_path("OPENIB_SIMHCA"), "--socket", sock});
  REQUIRE(wait_until([&] { return std::filesystem::exists(sock); }, 10s));
  return c;
}

// ibd on an external vfio-user device: a simhca this test runs.
struct ExternalDevice {
  TempDir dir;
  std::string sock = dir.path() + "/dev.sock";
  std::unique_ptr<Child> sim = start_simhca(sock);
  std::unique_ptr<Ibd> ibd;
  explicit ExternalDevice(const std::string& name, std::vector<std::string> more = {}) {
    IbdOptions o;
    o.log = "info";
    o.extra_args = {"--device", "vfio-user:" + sock};
    o.extra_args.insert(o.extra_args.end(), more.begin(), more.end());
    ibd = std::make_unique<Ibd>(dir.path(), name, o);
  }
};

// A traffic client (ibd-test-client --mode traffic) that is flowing.
std::unique_ptr<Child> traffic_client(const std::string& socket) {
  auto c = std::make_unique<Child>(std::vector<std::string>{env_path("OPENIB_TEST_CLIENT"), "--socket", socket,
                                                            "--mode", "traffic", "--max-seconds", "60"});
  INFO(c->output());
  REQUIRE(c->wait_for_output("flowing", 30s));
  return c;
}

// The client saw DEVICE_FATAL and then ENODEV for a control call
// (docs/client-protocol.md §6.1), and exited 3 (test_client.cpp).
void check_told(Child& c, const Ibd& ibd) {
  const bool got = c.wait_for_output("result", 15s);
  INFO("client: " << c.output() << "\n" << ibd.log_tail());
  REQUIRE(got);
  CHECK(c.output().find("fatal ") != std::string::npos);
  const auto p = c.output().find("result ");
  REQUIRE(p != std::string::npos);
  CHECK(std::atoi(c.output().c_str() + p + 7) == ENODEV);
  auto st = c.wait(10s);
  REQUIRE(st.has_value());
  CHECK(WIFEXITED(*st));
  CHECK(WEXITSTATUS(*st) == 3);
}

// An ibd whose every simhca waits 3 s before it listens (so ready 3 s
// late), or with `option` another simhca option taking 700 ms.
std::unique_ptr<Ibd> slow_ibd(const TempDir& dir, const std::string& name,
                              const std::string& option = "--start-delay-ms") {
  IbdOptions o;
  o.log = "info";
  o.extra_args = {"--simhca-arg=" + option,
                  option == "--start-delay-ms" ? "--simhca-arg=3000" : "--simhca-arg=700"};
  return std::make_unique<Ibd>(dir.path(), name, o);
}

// Its simhca SIGKILLed; once this returns, the restart is under way: a
// new simhca sleeping before it listens.
void kill_slow_simhca(const Ibd& ibd) {
  const pid_t sim = ibd.simhca_pid();
  REQUIRE(sim > 0);
  REQUIRE(::kill(sim, SIGKILL) == 0);
  REQUIRE(log_has(ibd, "recovering", 10s));
}

}  // namespace

TEST_CASE("a slow restart does not hold up ibd's loop: INFO answered at once, 'restarting'", "[restart]") {
  TempDir dir;
  auto slow = slow_ibd(dir, "slow");
  Ibd& ibd = *slow;
  InfoClient stale(ibd.socket());
  kill_slow_simhca(ibd);
  const auto t0 = Clock::now();
  auto [status, json] = stale.request(proto::Op::kInfo, proto::encode(proto::InfoReq{}), 10s);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
  INFO("INFO took " << ms << " ms: " << json << "\n" << ibd.log_tail());
  REQUIRE(status == 0);
  CHECK(ms < 1000);  // the old code answered after the restart, 3 s later
  CHECK(json.find("\"device_state\":\"restarting\"") != std::string::npos);
  // A stale client's other requests: ENODEV, also at once.
  CHECK(stale.request(proto::Op::kQueryDevice, proto::encode(proto::Empty{}), 500ms).first == ENODEV);
  // New clients wait for the device (HELLO answered once it is back).
  rc_pingpong(ibd.socket());
  CHECK(log_has(ibd, "is back after 1 attempt(s)", 1s));
  REQUIRE(ibd.alive());
}

TEST_CASE("a device slow to execute its bring-up commands does not hold up ibd's loop", "[restart]") {
  TempDir dir;
  // Every command takes 700 ms (simhca --cmd-delay-ms): the ladder's three
  // take 2.1 s.
  auto slow = slow_ibd(dir, "slowcmd", "--cmd-delay-ms");
  Ibd& ibd = *slow;
  InfoClient stale(ibd.socket());
  kill_slow_simhca(ibd);
  // INFO after INFO until the device is back: each one answered while it
  // is restarting is answered at once.
  long long worst = 0;
  int restarting = 0;
  for (int i = 0; i < 1000 && !log_has(ibd, "is back after", 0ms); ++i) {
    const auto t0 = Clock::now();
    auto [status, json] = stale.request(proto::Op::kInfo, proto::encode(proto::InfoReq{}), 10s);
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
    REQUIRE(status == 0);
    if (json.find("\"device_state\":\"restarting\"") == std::string::npos) break;
    ++restarting;
    worst = std::max(worst, static_cast<long long>(ms));
  }
  INFO(restarting << " INFOs while restarting, the slowest " << worst << " ms\n" << ibd.log_tail());
  CHECK(restarting > 0);
  CHECK(worst < 500);  // a call to reopen() held the loop for the 2.1 s
  REQUIRE(log_has(ibd, "is back after 1 attempt(s)", 15s));
  REQUIRE(ibd.alive());
}

TEST_CASE("SIGTERM during a slow restart ends ibd at once, exit 0", "[restart]") {
  TempDir dir;
  auto slow = slow_ibd(dir, "slowterm");
  Ibd& ibd = *slow;
  kill_slow_simhca(ibd);
  const auto t0 = Clock::now();
  auto st = ibd.stop(10s);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
  INFO("stopped after " << ms << " ms\n" << ibd.log_tail());
  REQUIRE(st.has_value());
  CHECK(WIFEXITED(*st));
  CHECK(WEXITSTATUS(*st) == 0);
  // The new simhca, still waiting to listen, is stopped with it (SIGTERM).
  CHECK(ms < 1500);
}

TEST_CASE("an external vfio-user device that dies is reconnected when a new simhca listens", "[restart]") {
  ExternalDevice ext("ext", {"--restart-limit", "20"});
  const Ibd& ibd = *ext.ibd;
  const std::string& sock = ext.sock;
  auto& sim = ext.sim;
  rc_pingpong(ibd.socket());
  auto client = traffic_client(ibd.socket());
  sim->kill(SIGKILL);
  REQUIRE(sim->wait(5s).has_value());
  sim.reset();
  // Noticed by a failing doorbell or the health check (docs/operations.md §5).
  check_told(*client, ibd);
  REQUIRE(log_has(ibd, "recovering", 10s));
  // Nothing listens (the dead simhca's socket file refuses): attempts fail.
  REQUIRE(log_has(ibd, "device restart attempt 1 of 20", 10s));
  REQUIRE(ibd.alive());
  sim = start_simhca(sock);
  {
    INFO(ibd.log_tail());
    REQUIRE(log_has(ibd, "is back after", 20s));
  }
  rc_pingpong(ibd.socket());
  // And again: the reconnected device is recovered like the first one.
  auto again = traffic_client(ibd.socket());
  sim->kill(SIGKILL);
  REQUIRE(sim->wait(5s).has_value());
  sim = start_simhca(sock);
  check_told(*again, ibd);
  std::string info;
  const bool back = wait_until([&] {
    info = ibdctl(ibd.socket(), "devices").out;
    return info.find("\"device_generation\":3") != std::string::npos;
  }, 30s);
  INFO(info << "\n" << ibd.log_tail());
  REQUIRE(back);
  rc_pingpong(ibd.socket());
  REQUIRE(ibd.alive());
}

TEST_CASE("a device reporting its own fatal error is reset and brought up again", "[restart]") {
  ExternalDevice ext("fatal");
  const Ibd& ibd = *ext.ibd;
  auto& sim = ext.sim;
  auto client = traffic_client(ibd.socket());
  // simhca's test hook (docs/simhca.md §11.4, §13): STATUS.FATAL, syndrome
  // 1, a DEVICE_FATAL event on EQ 0. The process stays.
  REQUIRE(::kill(sim->pid(), SIGUSR1) == 0);
  check_told(*client, ibd);
  {
    INFO(ibd.log_tail());
    CHECK(log_has(ibd, "DEVICE_FATAL (health syndrome 1)", 5s));
    REQUIRE(log_has(ibd, "is back after 1 attempt(s)", 10s));
  }
  rc_pingpong(ibd.socket());
  // The same simhca process: recovered by a reset, not a new device.
  CHECK(::kill(sim->pid(), 0) == 0);
  REQUIRE(ibd.alive());
}

// The RDMA CM (docs/cma.md "In ibd"): the device going ends every id that
// is on it with DEVICE_REMOVAL (status -ENODEV); an id on no device yet
// (unbound) hears nothing. The event socket outlives the device.
TEST_CASE("the device lost: RDMA CM ids on it get DEVICE_REMOVAL, an unbound one nothing", "[restart][cma]") {
  TempDir dir;
  IbdOptions o;
  o.log = "info";
  Ibd ibd(dir.path(), "cma-removal", o);
  ContextOptions co;
  co.socket = ibd.socket();
  auto ctx = Context::open(co);
  REQUIRE(ctx.ok());
  auto ch = RdmaEventChannel::open(**ctx);
  REQUIRE(ch.ok());
  auto& c = **ch;
  auto bound = c.create_id(RdmaPortSpace::kUdp);
  auto listening = c.create_id(RdmaPortSpace::kTcp);
  auto idle = c.create_id(RdmaPortSpace::kTcp);
  REQUIRE((bound.ok() && listening.ok() && idle.ok()));
  IpEndpoint lo;
  lo.family = AF_INET;
  lo.addr = {127, 0, 0, 1};
  REQUIRE(c.bind_addr(*bound, lo).ok());  // the loopback address: port 1 of the device
  lo.port = 7174;
  REQUIRE(c.bind_addr(*listening, lo).ok());
  // A listen before the port's CM runs waits for it (docs/cm.md); ENETDOWN
  // only while a device is lost, which it is not yet: the loop is a guard.
  auto l = c.listen(*listening);
  for (int i = 0; i < 100 && !l.ok() && l.error().code == ENETDOWN; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    l = c.listen(*listening);
  }
  INFO((l.ok() ? std::string() : l.error().str()));
  REQUIRE(l.ok());
  const pid_t sim = ibd.simhca_pid();
  REQUIRE(sim > 0);
  REQUIRE(::kill(sim, SIGKILL) == 0);
  std::map<uint32_t, int> removed;
  for (int i = 0; i < 2; ++i) {
    auto ev = c.get_event(10000);
    INFO((ev ? std::string(rdma_event_str(ev->type)) : ev.error().str()) << "\n" << ibd.log_tail());
    REQUIRE(ev.ok());
    CHECK(ev->type == RdmaCmEventType::kDeviceRemoval);
    CHECK(ev->status == -ENODEV);
    removed[ev->id] = ev->status;
  }
  CHECK(removed.count(*bound) == 1);
  CHECK(removed.count(*listening) == 1);
  auto more = c.get_event(500);
  INFO((more ? std::string(rdma_event_str(more->type)) + " on id " + std::to_string(more->id) : more.error().str()));
  CHECK(!more.ok());  // the unbound id heard nothing
  // The Context said HELLO to the device that went: its requests are
  // ENODEV now (docs/client-protocol.md §6.1); its ids go when it closes.
  auto d = c.destroy_id(*idle);
  REQUIRE(!d.ok());
  CHECK(d.error().code == ENODEV);
}
