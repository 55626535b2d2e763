// The connection manager against hostile local users and hostile remote
// hosts (issue 29; docs/cm.md "Security"): service-ID ownership for
// CM_LISTEN (user nobody may listen on one service ID, never with a mask,
// never in the RDMA CM's or IPoIB-CM's ranges), CM_INFO showing a user only
// its own sessions, CM ids bounded per client and per uid, and REQs from a
// remote host bounded by the listener's budget (REJ "No resources").
// The engine-level cases (stale REQs from another LID, comm ID 0, expiry of
// unanswered REQs, 40,000 listeners) are in test/unit/test_cm_engine.cpp.
#include <poll.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <nlohmann/json.hpp>
#include <thread>

#include "clientproto/socket.hpp"
#include "cm_path.hpp"
#include "harness.hpp"
#include "openib/cm.hpp"
#include "openib/path.hpp"
#include "rc_link.hpp"

using namespace openib;
using namespace openib::testing;
using namespace std::chrono_literals;
namespace proto = openib::proto;

namespace {

constexpr uint64_t kRdmaCmTcpPort = (uint64_t{0x0106} << 16) + 18515;  // rping's port in the TCP port space
constexpr uint64_t kIpoibCm = 0x1000000000000042ull;                  // IPOIB_CM_IETF_ID | QPN 0x42

// A libopenib context on `socket` with its CM channel.
struct CmUser {
  std::unique_ptr<Context> ctx;
  std::unique_ptr<CmChannel> cm;
  explicit CmUser(const std::string& socket) {
    ContextOptions o;
    o.socket = socket;
    auto c = Context::open(o);
    if (!c) return;
    ctx = std::move(*c);
    auto ch = CmChannel::open(*ctx);
    if (ch) cm = std::move(*ch);
  }
  bool ok() const { return cm != nullptr; }
  // 0 or the errno of CM_LISTEN (also right after ibd started, before
  // the port's CM runs: the listen waits for it, docs/cm.md).
  int listen(uint64_t sid, uint64_t mask = ~uint64_t{0}, bool sidr = false, uint32_t* id = nullptr) {
    auto r = cm->listen(1, sid, mask, sidr);
    if (r && id) *id = *r;
    return r ? 0 : r.error().code;
  }
  // The next event of `type` within `ms` (others skipped).
  std::optional<CmEvent> next(CmEventType type, int ms = 10000) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    while (std::chrono::steady_clock::now() < deadline) {
      auto e = cm->get_event(100);
      if (e && e->type == type) return *e;
    }
    return std::nullopt;
  }
};

// CM_INFO as the calling process, on a raw connection with a CM session of
// its own (CM_OPEN): the JSON, or null.
nlohmann::json cm_info(const std::string& socket) {
  auto s = proto::connect_socket(socket);
  if (!s) return nullptr;
  UniqueFd fd = std::move(*s);
  auto call = [&](proto::Op op, const proto::Bytes& body) -> std::optional<std::string> {
    proto::Header h;
    h.op = static_cast<uint16_t>(op);
    h.seq = 1;
    if (!proto::send_message(fd.get(), h, body, {})) return std::nullopt;
    pollfd p{fd.get(), POLLIN, 0};
    if (::poll(&p, 1, 10000) != 1) return std::nullopt;
    auto m = proto::recv_message(fd.get(), true);
    if (!m) return std::nullopt;
    auto v = proto::decode_reply(m->body);
    if (!v || v->status != 0) return std::nullopt;
    return std::string(reinterpret_cast<const char*>(v->payload.data()), v->payload.size());
  };
  proto::HelloReq hello;
  hello.flags = proto::kHelloNoUar;
  if (!call(proto::Op::kHello, proto::encode(hello))) return nullptr;
  if (!call(proto::Op::kCmOpen, {})) return nullptr;
  auto text = call(proto::Op::kCmInfo, {});
  if (!text) return nullptr;
  return nlohmann::json::parse(*text, nullptr, false);
}

// One byte through a pipe, to step the nobody child and the test in turn.
bool signal_fd(int fd) { return ::write(fd, "x", 1) == 1; }
bool await_fd(int fd, int ms = 30000) {
  pollfd p{fd, POLLIN, 0};
  char c;
  return ::poll(&p, 1, ms) == 1 && ::read(fd, &c, 1) == 1;
}

}  // namespace

TEST_CASE("CM_LISTEN as user nobody: masks, the RDMA CM's and IPoIB-CM's service IDs are EACCES; "
          "the victim's listen and REQs still work; CM_INFO shows nobody only its own",
          "[hostile][cm]") {
  TempDir dir;
  IbdPair pair(dir.path(), "warn", /*distinct_guids=*/true);
  const std::string sock = pair.a->socket();
  CmUser probe(sock);
  REQUIRE(probe.ok());
  REQUIRE(probe.listen(0x7777) == 0);  // also before the port's CM runs (ibd just started)
  // Both CMs running (the probe's listen taken by A's engine): B's REQs reach A.
  REQUIRE(wait_cm_running(sock));
  REQUIRE(wait_cm_running(pair.b->socket()));

  int to_test[2], to_child[2];
  REQUIRE(::pipe(to_test) == 0);
  REQUIRE(::pipe(to_child) == 0);
  // The victim (root), while nobody's session (and whatever it could
  // listen on) is still open: its listens work, a REQ from host B reaches it.
  int victim_listen = -1, victim_sidr = -1, root_cma = -1, root_masked = -1;
  std::optional<CmEvent> victim_req;
  CmUser victim(sock);
  REQUIRE(victim.ok());
  auto peer = open_side(pair.b->socket(), 4096);
  REQUIRE(peer.ok());
  auto peer_cm = CmChannel::open(*(*peer)->ctx);
  REQUIRE(peer_cm.ok());
  std::thread root([&] {
    if (!await_fd(to_test[0])) return;
    uint32_t vl = 0;
    victim_listen = victim.listen(0x5003, ~uint64_t{0}, false, &vl);
    victim_sidr = victim.listen(0x5003, ~uint64_t{0}, true);
    // The RDMA CM's ranges are the RDMA CM's, even for root; a mask is root's.
    root_cma = victim.listen(kRdmaCmTcpPort);
    root_masked = victim.listen(0x9000, ~uint64_t{0xff});
    PathRecord pr = decode_path_record(wire_path(2, 1));
    if ((*peer_cm)->connect(*(*peer)->qp, pr, 0x5003, {}).ok()) victim_req = victim.next(CmEventType::kRequest);
    if (victim_req && victim_req->listen_id != vl) victim_req.reset();
    signal_fd(to_child[1]);
  });
  auto nobody = run_as_nobody([&] {
    std::vector<int> v;
    CmUser evil(sock);
    if (!evil.ok()) return std::vector<int>{-1};
    v.push_back(evil.listen(0, 0));                           // every service ID
    v.push_back(evil.listen(kRdmaCmTcpPort));                 // rping's, in the RDMA CM's TCP space
    v.push_back(evil.listen(uint64_t{0x013F} << 16 | 7));     // the IB port space
    v.push_back(evil.listen(kIpoibCm));                       // IPoIB connected mode's
    v.push_back(evil.listen(0x5002, ~uint64_t{0xff}));        // any mask
    v.push_back(evil.listen(0x5001));                         // one service ID of its own: fine
    v.push_back(evil.listen(0x5001, ~uint64_t{0}, true));     // and its SIDR space too
    v.push_back(evil.listen(0x5001));                         // but not twice
    signal_fd(to_test[1]);
    v.push_back(await_fd(to_child[0]) ? 0 : -1);
    // CM_INFO: nobody's own session listed, the others only counted.
    auto j = cm_info(sock);
    if (j.is_null() || j.is_discarded()) return std::vector<int>{-2};
    v.push_back(static_cast<int>(j["clients"].size()));
    v.push_back(j["sessions"].get<int>());
    return v;
  });
  root.join();
  REQUIRE(nobody.size() == 11);
  CHECK(nobody[0] == EACCES);
  CHECK(nobody[1] == EACCES);
  CHECK(nobody[2] == EACCES);
  CHECK(nobody[3] == EACCES);
  CHECK(nobody[4] == EACCES);
  CHECK(nobody[5] == 0);
  CHECK(nobody[6] == 0);
  CHECK(nobody[7] == EADDRINUSE);
  CHECK(nobody[8] == 0);
  CHECK(nobody[9] == 1);   // its own session only (CM_INFO's connection's)
  CHECK(nobody[10] == 4);  // the probe's, the victim's, nobody's two
  CHECK(victim_listen == 0);
  CHECK(victim_sidr == 0);
  CHECK(root_cma == EACCES);
  CHECK(root_masked == 0);
  CHECK(victim_req.has_value());
  // Root sees every session.
  auto all = cm_info(sock);
  REQUIRE(!all.is_null());
  CHECK(all["clients"].size() == all["sessions"].get<size_t>());
  for (int fd : {to_test[0], to_test[1], to_child[0], to_child[1]}) ::close(fd);
  REQUIRE(pair.a->alive());
}

TEST_CASE("CM ids: past --client-max-cm-ids and --uid-max-cm-ids EDQUOT; REQs past a listener's budget get REJ 3",
          "[hostile][cm]") {
  TempDir dir;
  IbdPair pair(dir.path(), "warn", /*distinct_guids=*/true, false,
               {"--client-max-cm-ids=3", "--uid-max-cm-ids=5"});
  const std::string sock = pair.a->socket();
  CmUser listener(sock);  // root: its client bound is 3 too (uid 0 is exempt only from the uid bound)
  REQUIRE(listener.ok());
  REQUIRE(listener.listen(0x6000) == 0);
  REQUIRE(wait_cm_running(sock));
  REQUIRE(wait_cm_running(pair.b->socket()));

  // Two sessions of nobody: 3 for the first; the second stops at 5 for the uid.
  auto nobody = run_as_nobody([&] {
    std::vector<int> v;
    CmUser one(sock), two(sock);
    if (!one.ok() || !two.ok()) return std::vector<int>{-1};
    uint32_t first = 0;
    v.push_back(one.listen(0x6100, ~uint64_t{0}, false, &first));
    v.push_back(one.listen(0x6101));
    v.push_back(one.listen(0x6102));
    v.push_back(one.listen(0x6103));  // the client's 4th
    v.push_back(two.listen(0x6200));
    v.push_back(two.listen(0x6201));
    v.push_back(two.listen(0x6202));  // the uid's 6th
    v.push_back(one.cm->destroy(first) ? 0 : -1);
    v.push_back(two.listen(0x6202));  // room again
    return v;
  });
  REQUIRE(nobody.size() == 9);
  CHECK(nobody[0] == 0);
  CHECK(nobody[1] == 0);
  CHECK(nobody[2] == 0);
  CHECK(nobody[3] == EDQUOT);
  CHECK(nobody[4] == 0);
  CHECK(nobody[5] == 0);
  CHECK(nobody[6] == EDQUOT);
  CHECK(nobody[7] == 0);
  CHECK(nobody[8] == 0);

  // Host B sends 3 REQs to the root listener, which answers none: its
  // session holds 1 + 2 ids, the third REQ is refused with REJ 3 ("No
  // resources", IBA 12.6.7.2) instead of making a 4th.
  std::vector<std::unique_ptr<Side>> sides;
  std::vector<std::unique_ptr<CmChannel>> chans;
  PathRecord pr = decode_path_record(wire_path(2, 1));
  for (int i = 0; i < 3; ++i) {
    auto s = open_side(pair.b->socket(), 4096);
    REQUIRE(s.ok());
    auto ch = CmChannel::open(*(*s)->ctx);
    REQUIRE(ch.ok());
    REQUIRE((*ch)->connect(*(*s)->qp, pr, 0x6000, {}).ok());
    sides.push_back(std::move(*s));
    chans.push_back(std::move(*ch));
    if (i < 2) REQUIRE(listener.next(CmEventType::kRequest).has_value());
  }
  std::optional<CmEvent> rej;
  REQUIRE(wait_until(
      [&] {
        auto e = chans[2]->get_event(100);
        if (e && e->type == CmEventType::kRejected) rej = *e;
        return rej.has_value();
      },
      20s));
  CHECK(rej->reason == 3);
  CHECK_FALSE(listener.next(CmEventType::kRequest, 500).has_value());
  REQUIRE(pair.a->alive());
}
