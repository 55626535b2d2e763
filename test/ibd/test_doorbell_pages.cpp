// A client's doorbell page (docs/client-protocol.md §4 "Doorbells", §5
// "Security model"; docs/simhca.md §4): the fd HELLO hands out is the
// client's own UAR page and nothing else, sealed, and new for every
// allocation of the UAR. Attacked here as a hostile client would, through
// the raw protocol, next to well-behaved libopenib clients whose traffic
// must go on:
//   - truncating or growing the page's fd fails (EPERM), and simhca and ibd
//     stay up (before: SIGBUS in simhca at its next doorbell scan, ibd gone);
//   - the fd cannot reach another client's page (before: the fd was all of
//     BAR2, so pwrite at another page's offset rewrote its doorbells);
//   - a mapping kept after the client left does not reach the page of the
//     next client given the same UAR number (before: the same page).
#include <fcntl.h>
#include <linux/futex.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <cstring>
#include <nlohmann/json.hpp>

#include "clientproto/socket.hpp"
#include "harness.hpp"
#include "rc_link.hpp"

using namespace openib;
using namespace openib::testing;
namespace proto = openib::proto;
using proto::Op;

namespace {

constexpr size_t kCqArm = 0x020, kSqDoorbell = 0x800, kSleeping = 0x000;  // docs/simhca.md §4

// A client that says HELLO over the raw protocol and keeps what came back.
struct RawHello {
  UniqueFd sock;
  proto::HelloRep rep;
  UniqueFd uar_fd;

  explicit RawHello(const std::string& path) {
    auto s = proto::connect_socket(path);
    REQUIRE(s.ok());
    sock = std::move(*s);
    proto::Header h;
    h.op = static_cast<uint16_t>(Op::kHello);
    h.seq = 1;
    REQUIRE(proto::send_message(sock.get(), h, proto::encode(proto::HelloReq{})).ok());
    pollfd pf{sock.get(), POLLIN, 0};
    REQUIRE(::poll(&pf, 1, 10000) == 1);
    auto m = proto::recv_message(sock.get(), true);
    REQUIRE(m.ok());
    auto rv = proto::decode_reply(m->body);
    REQUIRE(rv.ok());
    INFO("HELLO: status " << rv->status);
    REQUIRE(rv->status == 0);
    auto r = proto::decode<proto::HelloRep>(rv->payload);
    REQUIRE(r.ok());
    rep = *r;
    REQUIRE(rep.doorbell_mode == proto::kDoorbellMmap);
    REQUIRE(m->fds.size() == 1);
    uar_fd = std::move(m->fds[0]);
  }
  // Maps the page as HELLO says to (PROT_READ | PROT_WRITE, MAP_SHARED).
  std::byte* map() const {
    void* p = ::mmap(nullptr, rep.uar_size, PROT_READ | PROT_WRITE, MAP_SHARED, uar_fd.get(),
                     static_cast<off_t>(rep.uar_mmap_offset));
    REQUIRE(p != MAP_FAILED);
    return static_cast<std::byte*>(p);
  }
};

std::atomic_ref<uint64_t> word(std::byte* page, size_t off) {
  return std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(page + off));
}

// A doorbell store as docs/simhca.md §12.5.2 gives the client's side: the
// word, a full fence, and the futex wake if the scanner sleeps on the page.
void ring(std::byte* page, size_t off, uint64_t v) {
  word(page, off).store(v);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  std::atomic_ref<uint32_t> sleeping(*reinterpret_cast<uint32_t*>(page + kSleeping));
  if (sleeping.load() != 0 && sleeping.exchange(0) != 0)
    ::syscall(SYS_futex, page + kSleeping, FUTEX_WAKE, 1, nullptr, nullptr, 0);
}

// One checked message from `from` to `to` (RC SEND); false with `why` set.
bool ping(Side& from, Side& to, uint32_t len, uint8_t seed, std::string& why) {
  for (uint32_t i = 0; i < len; ++i) from.buf()[i] = static_cast<uint8_t>(seed + i * 7);
  if (post_recv(*to.qp, *to.mr, 8192, len, seed) || post_send(*from.qp, *from.mr, 0, len, seed)) {
    why = "post failed";
    return false;
  }
  for (Side* s : {&from, &to}) {
    auto wc = wait_wc(*s->cq, 10000);
    if (!wc || wc->status != kWcSuccess) {
      why = wc ? std::string("completion ") + wc_status_str(wc->status) : wc.error().str();
      return false;
    }
  }
  if (std::memcmp(from.buf(), to.buf() + 8192, len) != 0) {
    why = "received bytes differ";
    return false;
  }
  return true;
}

// Two libopenib clients, one on each ibd, connected over RC.
struct Pair {
  std::unique_ptr<Side> a, b;
  Pair(const std::string& sa, const std::string& sb) {
    auto ra = open_side(sa, 65536);
    auto rb = open_side(sb, 65536);
    INFO((ra ? "" : ra.error().str()) << (rb ? "" : rb.error().str()));
    REQUIRE(ra.ok());
    REQUIRE(rb.ok());
    a = std::move(ra).value();
    b = std::move(rb).value();
    REQUIRE(connect(*a, *b).ok());
  }
  void check_traffic(int rounds) {
    std::string why;
    for (int i = 0; i < rounds; ++i) {
      INFO("round " << i << ": " << why);
      REQUIRE(ping(*a, *b, 100 + i, static_cast<uint8_t>(i), why));
      REQUIRE(ping(*b, *a, 200 + i, static_cast<uint8_t>(i + 1), why));
    }
  }
};

// The UAR numbers of the clients ibd has now (ibdctl clients).
std::vector<uint32_t> client_uars(const std::string& sock) {
  auto r = ibdctl(sock, "clients");
  REQUIRE(r.exited_ok());
  std::vector<uint32_t> out;
  auto walk = [&](auto& self, const nlohmann::json& j) -> void {
    if (j.is_object() && j.contains("uar") && j["uar"].is_number()) out.push_back(j["uar"].get<uint32_t>());
    if (j.is_structured())
      for (auto& v : j) self(self, v);
  };
  walk(walk, nlohmann::json::parse(r.out, nullptr, false));
  return out;
}

}  // namespace

TEST_CASE("a client's doorbell fd is its own sealed page, never reused", "[hostile][doorbell]") {
  TempDir dir;
  IbdPair ibds(dir.path());
  const std::string sa = ibds.a->socket(), sb = ibds.b->socket();
  const pid_t sim_a = ibds.a->simhca_pid();
  REQUIRE(sim_a > 0);

  SECTION("truncating, growing or writing past the page fails; nobody else notices") {
    Pair others(sa, sb);
    others.check_traffic(3);
    RawHello x(sa), y(sa);
    struct stat st{};
    REQUIRE(::fstat(x.uar_fd.get(), &st) == 0);
    CHECK(x.rep.uar_mmap_offset == 0);
    CHECK(static_cast<uint64_t>(st.st_size) == x.rep.uar_size);  // the page, nothing more
    std::byte* py = y.map();
    const uint64_t y_arm = word(py, kCqArm).load();
    // Another client's page, at its offset in what was BAR2's fd: out of
    // reach (writing past the sealed page's end: EPERM).
    const uint64_t garbage = 0x0123456789abcdefull;
    const off_t y_off = static_cast<off_t>(uint64_t{y.rep.uar} * y.rep.uar_size + kCqArm);
    errno = 0;
    CHECK(::pwrite(x.uar_fd.get(), &garbage, 8, y_off) == -1);
    CHECK(errno == EPERM);
    uint64_t peek = 0;
    CHECK(::pread(x.uar_fd.get(), &peek, 8, y_off) == 0);  // end of file: nothing to read
    CHECK(word(py, kCqArm).load() == y_arm);
    // The page cannot be shrunk under the device's mapping, nor grown.
    errno = 0;
    CHECK(::ftruncate(x.uar_fd.get(), 0) == -1);
    CHECK(errno == EPERM);
    errno = 0;
    CHECK(::ftruncate(x.uar_fd.get(), 1 << 30) == -1);
    CHECK(errno == EPERM);
    errno = 0;
    CHECK(::fcntl(x.uar_fd.get(), F_ADD_SEALS, F_SEAL_WRITE) == -1);  // seals are sealed
    CHECK(errno == EPERM);
    // Its own page still works as a doorbell page, garbage included.
    std::byte* px = x.map();
    ring(px, kSqDoorbell, garbage);
    ring(px, kCqArm, garbage);
    // simhca and ibd are up, the others' traffic goes on, a new client works.
    others.check_traffic(20);
    CHECK(ibds.a->alive());
    CHECK(ibds.a->simhca_pid() == sim_a);
    CHECK(::kill(sim_a, 0) == 0);
    Pair fresh(sa, sb);
    fresh.check_traffic(3);
    ::munmap(px, x.rep.uar_size);
    ::munmap(py, y.rep.uar_size);
  }

  SECTION("a mapping kept after its client left does not reach the next client of that UAR") {
    // w takes the lowest UAR, so that x's has a predecessor free once w goes.
    auto w = std::make_unique<RawHello>(sa);
    auto x = std::make_unique<RawHello>(sa);
    const uint32_t ux = x->rep.uar, before = ux - 1;
    REQUIRE(ux >= 2);
    std::byte* old = x->map();  // kept after x leaves
    x.reset();
    w.reset();
    // UAR numbers go round-robin (docs/simhca.md §6): clients come and go
    // until one got the number before x's, so that the next one gets x's.
    bool found = false;
    for (int i = 0; i < 2100 && !found; ++i) found = RawHello(sa).rep.uar == before;
    REQUIRE(found);
    // y, a libopenib client with a completion channel on its CQ it never
    // arms, is connected to a peer on ibd B.
    ContextOptions o;
    o.socket = sa;
    auto y = std::make_unique<Side>();
    y->ctx = Context::open(o).value();
    y->lid = y->ctx->query_port(1).value().lid;
    y->pd = y->ctx->alloc_pd().value();
    y->mr = y->ctx->alloc_mr(*y->pd, 65536, kAccessLocalWrite).value();
    auto channel = y->ctx->create_comp_channel().value();
    y->cq = y->ctx->create_cq(64, channel.get()).value();
    QpInit init;
    init.send_cq = init.recv_cq = y->cq.get();
    y->qp = y->ctx->create_qp(*y->pd, init).value();
    auto peer = open_side(sb, 65536);
    REQUIRE(peer.ok());
    REQUIRE(connect(*y, **peer).ok());
    const auto uars = client_uars(sa);
    INFO("x had UAR " << ux);
    REQUIRE(std::find(uars.begin(), uars.end(), ux) != uars.end());  // y has x's old UAR
    // x's old mapping: an arm of y's CQ (command 1, sequence 1), stored and
    // rung as a client would.
    ring(old, kCqArm, (uint64_t{0} << 32) | (1u << 28) | (1u << 24) | y->cq->cqn());
    std::string why;
    for (int i = 0; i < 5; ++i) {
      INFO("round " << i << ": " << why);
      REQUIRE(ping(*y, **peer, 64, static_cast<uint8_t>(i), why));
      REQUIRE(ping(**peer, *y, 64, static_cast<uint8_t>(i + 9), why));
    }
    // y asked for no event: none comes (an arm reaching y's page would have
    // signalled its channel at the first of those completions).
    auto ev = channel->get_event(300);
    CHECK_FALSE(ev.ok());
    if (!ev.ok()) CHECK(ev.error().code == ETIMEDOUT);
    // And x's old page does not show y's doorbells.
    CHECK((word(old, kSqDoorbell).load() & 0xffffff) != y->qp->qp_num());
    ::munmap(old, 4096);
    peer->reset();
    y->qp.reset();
    y->cq.reset();
    channel.reset();
    y.reset();
  }
  CHECK(ibds.a->alive());
  CHECK(ibds.b->alive());
}
