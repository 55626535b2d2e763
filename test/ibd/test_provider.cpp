// libopenib's provider seam (src/lib/provider.hpp, docs/library.md
// "Providers"): the HELLO reply's provider name (docs/client-protocol.md
// §2, §4.1) as the codec lays it out and as a real ibd sends it; a test
// provider that wraps simhca's and counts every call carries an RC
// ping-pong between two ibds, so the library's data path goes through the
// table of operations and through nothing else; unknown names, from ibd or
// from OPENIB_PROVIDER, fail the open with EPROTONOSUPPORT naming them.
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <thread>

#include "clientproto/messages.hpp"
#include "clientproto/socket.hpp"
#include "lib/provider.hpp"
#include "test_api.hpp"

using namespace openib;
using namespace openib::testing::api;

namespace {

// ---- a provider that counts, around simhca's ------------------------------

struct Counts {
  std::atomic<uint64_t> layout{0}, encode_send{0}, encode_recv{0}, ring_sq{0}, update_rq{0}, update_srq{0},
      reset_qp{0}, cqes{0}, update_cq{0}, arm_cq{0};
  void clear() {
    for (auto* c : {&layout, &encode_send, &encode_recv, &ring_sq, &update_rq, &update_srq, &reset_qp, &cqes,
                    &update_cq, &arm_cq})
      c->store(0);
  }
};
Counts counts;
const lib::Provider& inner() { return lib::kSimhcaProvider; }
// A send WR with this wr_id is refused by the provider itself (the device never sees it).
constexpr uint64_t kRefused = 0xbadbadbad;

const lib::Provider& counting() {
  static const lib::Provider p = [] {
    lib::Provider c = inner();
    c.name = "counting";
    c.log_sq_stride = [](QpType t, uint32_t sge, uint32_t inl) {
      ++counts.layout;
      return inner().log_sq_stride(t, sge, inl);
    };
    c.log_rq_stride = [](uint32_t sge) {
      ++counts.layout;
      return inner().log_rq_stride(sge);
    };
    c.encode_send = [](std::byte* slot, size_t stride, QpType t, const SendWr& wr, uint32_t ahn,
                       const lib::SqCaps& caps) {
      ++counts.encode_send;
      if (wr.wr_id == kRefused) return EINVAL;
      return inner().encode_send(slot, stride, t, wr, ahn, caps);
    };
    c.encode_recv = [](std::byte* slot, size_t stride, const RecvWr& wr, uint32_t max_sge) {
      ++counts.encode_recv;
      return inner().encode_recv(slot, stride, wr, max_sge);
    };
    c.ring_sq = [](std::byte* uar, std::byte* dbr, uint32_t qpn, uint32_t producer) {
      ++counts.ring_sq;
      inner().ring_sq(uar, dbr, qpn, producer);
    };
    c.update_rq = [](std::byte* dbr, uint32_t producer) {
      ++counts.update_rq;
      inner().update_rq(dbr, producer);
    };
    c.update_srq = [](std::byte* dbr, uint32_t producer) {
      ++counts.update_srq;
      inner().update_srq(dbr, producer);
    };
    c.reset_qp = [](std::byte* dbr) {
      ++counts.reset_qp;
      inner().reset_qp(dbr);
    };
    c.poll_cqe = [](const std::byte* ring, uint32_t cons, uint32_t log_size, Wc& wc) {
      const int idx = inner().poll_cqe(ring, cons, log_size, wc);
      if (idx >= 0) ++counts.cqes;
      return idx;
    };
    c.update_cq = [](std::byte* dbr, uint32_t cons) {
      ++counts.update_cq;
      inner().update_cq(dbr, cons);
    };
    c.arm_cq = [](std::byte* uar, std::byte* dbr, uint32_t cqn, bool sol, uint32_t sn, uint32_t cons) {
      ++counts.arm_cq;
      inner().arm_cq(uar, dbr, cqn, sol, sn, cons);
    };
    return c;
  }();
  return p;
}

// OPENIB_PROVIDER for one scope.
struct ProviderEnv {
  explicit ProviderEnv(const char* name) { ::setenv("OPENIB_PROVIDER", name, 1); }
  ~ProviderEnv() { ::unsetenv("OPENIB_PROVIDER"); }
};

// ---- HELLO, raw ----------------------------------------------------------

struct Hello {
  proto::HelloRep rep;
  size_t payload_size = 0;
};
// A HELLO offering [lo, hi] to the ibd at `path`; the reply as it came.
Hello raw_hello(const std::string& path, uint32_t lo, uint32_t hi) {
  auto s = proto::connect_socket(path);
  REQUIRE(s.ok());
  proto::Header h;
  h.op = uint16_t(proto::Op::kHello);
  h.seq = 1;
  REQUIRE(proto::send_message(s->get(), h, proto::encode(proto::HelloReq{lo, hi, 0})).ok());
  REQUIRE(readable(s->get(), kWaitMs));
  auto m = proto::recv_message(s->get(), true);
  REQUIRE(m.ok());
  auto rv = proto::decode_reply(m->body);
  REQUIRE(rv.ok());
  REQUIRE(rv->status == 0);
  auto rep = proto::decode<proto::HelloRep>(rv->payload);
  INFO("HelloRep: " << (rep.ok() ? std::string() : rep.error().str()));
  REQUIRE(rep.ok());
  return {*rep, rv->payload.size()};
}

// A daemon that answers HELLO alone, with `rep` (and a UAR page and a
// status page, as a version 2+ ibd does), on a socket of its own.
class FakeIbd {
 public:
  FakeIbd(const std::string& dir, proto::HelloRep rep) : path_(dir + "/fake.sock") {
    listen_ = UniqueFd(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
    REQUIRE(listen_);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    REQUIRE(path_.size() < sizeof a.sun_path);
    std::memcpy(a.sun_path, path_.c_str(), path_.size() + 1);
    REQUIRE(::bind(listen_.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    REQUIRE(::listen(listen_.get(), 1) == 0);
    thread_ = std::thread([this, rep] { serve(rep); });
  }
  ~FakeIbd() {
    ::shutdown(listen_.get(), SHUT_RDWR);  // ends an accept still waiting
    thread_.join();
  }
  const std::string& path() const { return path_; }

 private:
  void serve(const proto::HelloRep& rep) {
    UniqueFd c(::accept4(listen_.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (!c) return;
    auto m = proto::recv_message(c.get());
    if (!m || m->header.op != uint16_t(proto::Op::kHello)) return;
    UniqueFd uar(::memfd_create("fake-uar", MFD_CLOEXEC)), status(::memfd_create("fake-status", MFD_CLOEXEC));
    if (!uar || !status || ::ftruncate(uar.get(), 4096) != 0 || ::ftruncate(status.get(), 4096) != 0) return;
    proto::Header h;
    h.op = uint16_t(proto::Op::kHello) | proto::kReplyBit;
    h.seq = m->header.seq;
    const int fds[2] = {uar.get(), status.get()};
    if (!proto::send_message(c.get(), h, proto::encode_reply(0, proto::encode(rep)), fds)) return;
    char b;
    (void)!::read(c.get(), &b, 1);  // until the client closes
  }

  std::string path_;
  UniqueFd listen_;
  std::thread thread_;
};

}  // namespace

// docs/client-protocol.md §9 HelloRep: 26 bytes up to version 3, then the
// 16-byte provider name at offset 26 from version 4.
TEST_CASE("HelloRep: the provider name is carried from version 4 only", "[provider]") {
  proto::HelloRep r;
  r.version = 3;
  r.client_id = 9;
  CHECK(proto::encode(r).size() == 26);
  CHECK(proto::body_size<proto::HelloRep>() == 26);
  r.version = 4;
  r.provider = proto::provider_name("mlx5");
  const proto::Bytes b = proto::encode(r);
  REQUIRE(b.size() == 42);
  CHECK(std::memcmp(b.data() + 26, "mlx5\0\0\0\0\0\0\0\0\0\0\0\0", 16) == 0);
  auto back = proto::decode<proto::HelloRep>(b);
  REQUIRE(back.ok());
  CHECK(back->client_id == 9);
  CHECK(proto::provider_name_view(back->provider) == "mlx5");
  // The length must be the one the version says.
  CHECK(proto::decode<proto::HelloRep>(std::span(b).first(26)).error().code == EPROTO);
  proto::Bytes v3 = b;
  v3[0] = std::byte{3};
  CHECK(proto::decode<proto::HelloRep>(v3).error().code == EPROTO);
  auto old = proto::decode<proto::HelloRep>(std::span(v3).first(26));
  REQUIRE(old.ok());
  CHECK(proto::provider_name_view(old->provider) == "simhca");  // what versions 1 to 3 mean
  // All 16 bytes used: no NUL.
  r.provider = proto::provider_name("0123456789abcdefXYZ");
  CHECK(proto::provider_name_view(r.provider) == "0123456789abcdef");
}

TEST_CASE("ibd names simhca's provider at a version 4 HELLO, and nothing before", "[provider]") {
  Hello v4 = raw_hello(sock_a(), 1, 4);
  CHECK(v4.rep.version == 4);
  CHECK(v4.payload_size == 42);
  CHECK(proto::provider_name_view(v4.rep.provider) == "simhca");
  Hello v3 = raw_hello(sock_a(), 1, 3);
  CHECK(v3.rep.version == 3);
  CHECK(v3.payload_size == 26);
}

TEST_CASE("register_provider: names and operations are checked; simhca's is built in", "[provider]") {
  CHECK(lib::find_provider("simhca") == &lib::kSimhcaProvider);
  CHECK(lib::find_provider("nosuch") == nullptr);
  static lib::Provider bad = lib::kSimhcaProvider;
  bad.name = "";
  CHECK(lib::register_provider(bad).error().code == EINVAL);
  bad.name = "seventeen-bytes-x";
  CHECK(lib::register_provider(bad).error().code == EINVAL);
  bad.name = "no-poll";
  bad.poll_cqe = nullptr;
  CHECK(lib::register_provider(bad).error().code == EINVAL);
  CHECK(lib::find_provider("no-poll") == nullptr);
}

TEST_CASE("a counting provider around simhca's carries an RC ping-pong: every post, doorbell, CQE and arm "
          "goes through it",
          "[provider]") {
  (void)sock_a();  // the daemons start before the environment changes
  must(lib::register_provider(counting()), "register_provider");
  REQUIRE(lib::find_provider("counting") == &counting());
  counts.clear();
  Link l;
  {
    ProviderEnv env("counting");
    EpOptions oa;
    oa.channel = true;
    l = link(oa);
  }
  CHECK(counts.layout == 4);  // two QPs: an SQ and an RQ stride each
  counts.clear();

  constexpr int kRounds = 50;
  constexpr uint32_t kLen = 64;
  must(l.a->cq->req_notify(false), "req_notify");
  CHECK(counts.arm_cq == 1);
  for (int i = 0; i < kRounds; ++i) {
    const auto seed = static_cast<uint8_t>(i);
    REQUIRE(post_recv(*l.b->qp, l.b->sge(0, 4096), 1000 + i) == 0);
    REQUIRE(post_recv(*l.a->qp, l.a->sge(4096, 4096), 2000 + i) == 0);
    fill(l.a->buf() + 8192, kLen, seed);
    REQUIRE(post_send(*l.a->qp, l.a->sge(8192, kLen), 3000 + i) == 0);
    Wc r = wait_wc(*l.b->cq);
    REQUIRE(r.status == kWcSuccess);
    REQUIRE(r.opcode == kWcRecv);
    REQUIRE(r.wr_id == uint64_t(1000 + i));
    REQUIRE(first_diff(l.b->buf(), kLen, seed) == kLen);
    // B answers with what it got.
    std::memcpy(l.b->buf() + 8192, l.b->buf(), kLen);
    REQUIRE(post_send(*l.b->qp, l.b->sge(8192, kLen), 4000 + i) == 0);
    CHECK(wait_wc(*l.b->cq).wr_id == uint64_t(4000 + i));
    // A: its send's completion and the answer, in either order.
    Wc w[2] = {wait_wc(*l.a->cq), wait_wc(*l.a->cq)};
    if (w[0].opcode == kWcRecv) std::swap(w[0], w[1]);
    CHECK(w[0].wr_id == uint64_t(3000 + i));
    REQUIRE(w[1].opcode == kWcRecv);
    REQUIRE(w[1].wr_id == uint64_t(2000 + i));
    REQUIRE(first_diff(l.a->buf() + 4096, kLen, seed) == kLen);
    if (i == 0) CHECK(must(l.a->ch->get_event(kWaitMs), "get_event") == l.a->cq.get());  // the arm worked
  }
  // Exactly one call per post, per doorbell, per CQE (wait_wc polls one at a time).
  CHECK(counts.encode_send == 2 * kRounds);
  CHECK(counts.ring_sq == 2 * kRounds);
  CHECK(counts.encode_recv == 2 * kRounds);
  CHECK(counts.update_rq == 2 * kRounds);
  CHECK(counts.cqes == 4 * kRounds);
  CHECK(counts.update_cq == 4 * kRounds);
  CHECK(counts.update_srq == 0);

  // What the provider refuses is refused: no doorbell, nothing completes.
  CHECK(post_send(*l.a->qp, l.a->sge(0, 8), kRefused) == EINVAL);
  CHECK(counts.ring_sq == 2 * kRounds);
  expect_no_wc(*l.a->cq);

  // Back to Reset: the record through the provider too.
  QpAttr reset;
  reset.state = QpState::kReset;
  must(l.a->qp->modify(reset, qp_attr::kState), "modify to Reset");
  CHECK(counts.reset_qp == 1);

  // A Context opened without the variable takes ibd's name: simhca's, uncounted.
  counts.clear();
  Link plain = link();
  REQUIRE(post_recv(*plain.b->qp, plain.b->sge(0, 64), 1) == 0);
  REQUIRE(post_send(*plain.a->qp, plain.a->sge(0, 8), 2) == 0);
  CHECK(wait_wc(*plain.b->cq).status == kWcSuccess);
  CHECK(wait_wc(*plain.a->cq).status == kWcSuccess);
  CHECK(counts.encode_send == 0);
  CHECK(counts.cqes == 0);
  CHECK(counts.layout == 0);
}

TEST_CASE("an SRQ posts through the provider", "[provider]") {
  (void)sock_a();
  must(lib::register_provider(counting()), "register_provider");
  ProviderEnv env("counting");
  counts.clear();
  EpOptions ob;
  ob.srq = true;
  Link l = link({}, ob);
  REQUIRE(post_recv(*l.b->srq, l.b->sge(0, 64), 7) == 0);
  CHECK(counts.update_srq == 1);
  REQUIRE(post_send(*l.a->qp, l.a->sge(0, 8), 8) == 0);
  Wc r = wait_wc(*l.b->cq);
  CHECK(r.wr_id == 7);
  CHECK(r.status == kWcSuccess);
}

TEST_CASE("an unknown provider name fails the open with EPROTONOSUPPORT naming it", "[provider]") {
  SECTION("named by OPENIB_PROVIDER") {
    (void)sock_a();
    ProviderEnv env("nosuch");
    ContextOptions co;
    co.socket = sock_a();
    auto c = Context::open(co);
    REQUIRE_FALSE(c.ok());
    CHECK(c.error().code == EPROTONOSUPPORT);
    CHECK_THAT(c.error().str(), Catch::Contains("'nosuch'") && Catch::Contains("OPENIB_PROVIDER"));
  }
  SECTION("named by ibd at HELLO") {
    testing::TempDir dir;
    proto::HelloRep rep;
    rep.version = 4;
    rep.client_id = 1;
    rep.uar_size = 4096;
    rep.num_ports = 1;
    rep.provider = proto::provider_name("mlx5-not-here");
    FakeIbd ibd(dir.path(), rep);
    ContextOptions co;
    co.socket = ibd.path();
    co.timeout_ms = kWaitMs;
    auto c = Context::open(co);
    REQUIRE_FALSE(c.ok());
    CHECK(c.error().code == EPROTONOSUPPORT);
    CHECK_THAT(c.error().str(), Catch::Contains("'mlx5-not-here'") && Catch::Contains("HELLO"));
  }
}
