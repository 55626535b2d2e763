// Hostile clients against ibd (docs/client-protocol.md "Security model"),
// while a well-behaved victim keeps an RC connection between two ibds busy
// and checks every byte it receives.
//
// The hostile side speaks the client protocol directly (src/clientproto):
// requests before HELLO, wrong magic and version, truncated, oversized and
// mis-framed datagrams, bad and foreign handles, bogus fds for MAP_MEM,
// overflowing offsets and lengths, garbage QP attributes, rings full of
// random bytes with doorbells rung on its own UAR page (naming its own QP
// and the victim's); and through libopenib, sends whose lkey or address is
// garbage and an RDMA WRITE with the victim's rkey. Each must be refused or
// end in an error completion for the hostile client only. Afterwards ibd
// is alive and answers ibdctl, the victim's data is intact, and the
// hostile clients' objects, mappings and fds are gone once they are.
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>

#include <set>
#include <sys/mman.h>
#include <linux/magic.h>
#include <sys/socket.h>
#include <sys/statfs.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <functional>
#include <optional>
#include <random>
#include <thread>

#include "clientproto/socket.hpp"
#include "cma/header.hpp"
#include "cm_path.hpp"
#include "cma_addr.hpp"
#include "harness.hpp"
#include "json_flat.hpp"
#include "openib/cm.hpp"
#include "openib/path.hpp"
#include "rc_link.hpp"

using namespace openib;
using namespace openib::testing;
using namespace std::chrono_literals;
namespace proto = openib::proto;
using proto::Op;

namespace {

// ---- a raw protocol client ------------------------------------------------

struct RawReply {
  int status = 0;
  proto::Bytes payload;
  std::vector<UniqueFd> fds;
};

// What ibd did with a request: answered (status), closed the connection,
// or said nothing within the wait.
struct Outcome {
  enum Kind { kReplied, kClosed, kSilent } kind = kSilent;
  RawReply reply;
  bool refused() const { return kind != kReplied || reply.status != 0; }
  std::string str() const {
    if (kind == kClosed) return "connection closed";
    if (kind == kSilent) return "no reply";
    return "status " + std::to_string(reply.status) +
           (reply.status ? std::string(" (") + std::strerror(reply.status) + ")" : "");
  }
};

class Raw {
 public:
  explicit Raw(const std::string& path) {
    auto s = proto::connect_socket(path);
    REQUIRE(s.ok());
    sock_ = std::move(*s);
  }
  // A socket connected elsewhere (by another process, handed over).
  explicit Raw(UniqueFd sock) : sock_(std::move(sock)) {}
  int fd() const { return sock_.get(); }

  // Sends bytes as one datagram, with fds; false if the socket is gone.
  bool send_raw(std::span<const std::byte> bytes, std::span<const int> fds = {}) {
    iovec iov{const_cast<std::byte*>(bytes.data()), bytes.size()};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 8)];
    if (!fds.empty()) {
      msg.msg_control = control;
      msg.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
      cmsghdr* c = CMSG_FIRSTHDR(&msg);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
      std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
    }
    return ::sendmsg(sock_.get(), &msg, MSG_NOSIGNAL) >= 0;
  }

  proto::Bytes frame(uint16_t op, std::span<const std::byte> body, uint8_t nfds = 0,
                     uint32_t magic = proto::kMagic, uint16_t version = proto::kVersion) {
    proto::Header h;
    h.magic = magic;
    h.version = version;
    h.op = op;
    h.seq = ++seq_;
    h.nfds = nfds;
    return proto::frame(h, body);
  }

  Outcome wait_reply(std::chrono::milliseconds wait = 3000ms) {
    pollfd pf{sock_.get(), POLLIN, 0};
    Outcome o;
    if (::poll(&pf, 1, static_cast<int>(wait.count())) != 1) return o;
    auto m = proto::recv_message(sock_.get(), true);
    if (!m) {
      o.kind = Outcome::kClosed;
      return o;
    }
    auto rv = proto::decode_reply(m->body);
    if (!rv) {
      o.kind = Outcome::kClosed;  // not a reply we can read: count as refused
      return o;
    }
    o.kind = Outcome::kReplied;
    o.reply.status = rv->status;
    o.reply.payload.assign(rv->payload.begin(), rv->payload.end());
    o.reply.fds = std::move(m->fds);
    return o;
  }

  Outcome call_bytes(uint16_t op, std::span<const std::byte> body, std::span<const int> fds = {},
                     std::chrono::milliseconds wait = 3000ms) {
    auto f = frame(op, body, static_cast<uint8_t>(fds.size()));
    if (!send_raw(f, fds)) return Outcome{Outcome::kClosed, {}};
    return wait_reply(wait);
  }
  template <class M>
  Outcome call(Op op, const M& body, std::span<const int> fds = {}) {
    auto b = proto::encode(body);
    return call_bytes(static_cast<uint16_t>(op), b, fds);
  }
  // A request that must succeed; its decoded reply.
  template <class Rep, class M>
  Rep must(Op op, const M& body, std::span<const int> fds = {}) {
    auto o = call(op, body, fds);
    INFO(proto::op_name(static_cast<uint16_t>(op)) << ": " << o.str());
    REQUIRE(o.kind == Outcome::kReplied);
    REQUIRE(o.reply.status == 0);
    last_fds_ = std::move(o.reply.fds);
    auto rep = proto::decode<Rep>(o.reply.payload);
    REQUIRE(rep.ok());
    return *rep;
  }

  proto::HelloRep hello() { return must<proto::HelloRep>(Op::kHello, proto::HelloReq{}); }
  std::vector<UniqueFd>& last_fds() { return last_fds_; }

 private:
  UniqueFd sock_;
  uint32_t seq_ = 0;
  std::vector<UniqueFd> last_fds_;
};

// A memfd of len bytes with `seals` added (MAP_MEM needs F_SEAL_SHRINK).
UniqueFd make_memfd(size_t len, int seals = F_SEAL_SHRINK) {
  UniqueFd fd(::memfd_create("hostile", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  REQUIRE(fd.valid());
  REQUIRE(::ftruncate(fd.get(), static_cast<off_t>(len)) == 0);
  if (seals) REQUIRE(::fcntl(fd.get(), F_ADD_SEALS, seals) == 0);
  return fd;
}

// A CQ of 64 entries in the client's memory `mem` (ring at 0, doorbell
// record at 4096); its handle.
uint32_t raw_cq(Raw& r, uint32_t mem) {
  proto::CreateCqReq cq;
  cq.mem = mem;
  cq.ring_offset = 0;
  cq.dbr_offset = 4096;
  cq.log_size = 6;
  return r.must<proto::ObjRep>(Op::kCreateCq, cq).handle;
}
// CREATE_QP's body for the i-th small QP (4 WQEs each way) in `mem`.
proto::CreateQpReq small_qp(uint32_t pd, uint32_t cq, uint32_t mem, uint32_t i) {
  proto::CreateQpReq q;
  q.pd = pd;
  q.send_cq = q.recv_cq = cq;
  q.mem = mem;
  q.log_sq_size = 2;
  q.log_sq_stride = 6;
  q.log_rq_size = 2;
  q.log_rq_stride = 5;
  q.sq_offset = 8192 + i * 1024;
  q.rq_offset = 8192 + i * 1024 + 256;
  q.dbr_offset = 4096 + 64 + i * 8;
  return q;
}

// ---- the victim -------------------------------------------------------------

// RC between ibd A and ibd B: A sends a message of random length and
// content, B checks it byte by byte and echoes it, A checks the echo. A
// canary region of each MR is never used and must stay as written.
struct Victim {
  static constexpr size_t kMr = 64 * 1024, kSendOff = 0, kRecvOff = 16 * 1024,
                          kCanaryOff = 48 * 1024, kCanaryLen = 16 * 1024;
  std::unique_ptr<Side> a, b;
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> rounds{0};
  std::string error;  // first failure; written by the thread only, read once it ended
  std::atomic<bool> ended{false};  // run() returned: stopped, or failed (error set)
  std::thread thread;

  static uint8_t canary(size_t i) { return static_cast<uint8_t>(0xA5 ^ (i * 13)); }

  ~Victim() { finish(); }  // also when a failed REQUIRE unwinds the test

  void start(const std::string& sa, const std::string& sb) {
    QpCap cap;
    cap.max_send_wr = 16;
    cap.max_recv_wr = 16;
    auto ra = open_side(sa, kMr, cap);
    auto rb = open_side(sb, kMr, cap);
    INFO((ra ? "" : ra.error().str()) << (rb ? "" : rb.error().str()));
    REQUIRE(ra.ok());
    REQUIRE(rb.ok());
    a = std::move(ra).value();
    b = std::move(rb).value();
    auto c = connect(*a, *b);
    INFO((c.ok() ? std::string() : c.error().str()));
    REQUIRE(c.ok());
    for (Side* s : {a.get(), b.get()})
      for (size_t i = 0; i < kCanaryLen; ++i) s->buf()[kCanaryOff + i] = canary(i);
    thread = std::thread([this] {
      run();
      ended = true;
    });
  }

  bool canaries_intact() const {
    for (Side* s : {a.get(), b.get()})
      for (size_t i = 0; i < kCanaryLen; ++i)
        if (s->buf()[kCanaryOff + i] != canary(i)) return false;
    return true;
  }

  bool finished_early() const { return ended && !stop; }

  void finish() {
    stop = true;
    if (thread.joinable()) thread.join();
  }

  // One message from `from` to `to`, checked; false (error set) on failure.
  bool one_way(Side& from, Side& to, uint32_t len, uint64_t seed) {
    if (post_recv(*to.qp, *to.mr, kRecvOff, 16 * 1024, seed)) return fail("post_recv");
    if (post_send(*from.qp, *from.mr, kSendOff, len, seed)) return fail("post_send");
    bool got_recv = false, got_send = false;
    while (!got_recv || !got_send) {
      Side& s = got_recv ? from : to;
      auto wc = wait_wc(*s.cq, 10000);
      if (!wc) return fail("round " + std::to_string(rounds) + ": " + wc.error().str());
      if (wc->status != kWcSuccess)
        return fail("round " + std::to_string(rounds) + ": completion " + wc_status_str(wc->status));
      if (wc->opcode == kWcRecv) {
        if (wc->byte_len != len)
          return fail("received " + std::to_string(wc->byte_len) + " bytes, sent " + std::to_string(len));
        if (std::memcmp(to.buf() + kRecvOff, from.buf() + kSendOff, len) != 0)
          return fail("round " + std::to_string(rounds) + ": received bytes differ");
        got_recv = true;
      } else {
        got_send = true;
      }
    }
    return true;
  }

  bool fail(const std::string& what) {
    if (error.empty()) error = what;
    return false;
  }

  void run() {
    std::mt19937_64 rng(42);
    auto deadline = std::chrono::steady_clock::now() + 240s;  // never run away
    while (!stop && std::chrono::steady_clock::now() < deadline) {
      uint32_t len = 1 + static_cast<uint32_t>(rng() % 8192);
      for (uint32_t i = 0; i < len; ++i) a->buf()[kSendOff + i] = static_cast<uint8_t>(rng());
      if (!one_way(*a, *b, len, rounds)) return;
      std::memcpy(b->buf() + kSendOff, b->buf() + kRecvOff, len);
      if (!one_way(*b, *a, len, rounds)) return;
      ++rounds;
    }
  }
};

// Runs `step` against a fresh raw connection said HELLO to (or not) and
// checks that ibd refused it.
void expect_refused(const std::string& sock, const std::string& what, bool say_hello,
                    const std::function<Outcome(Raw&)>& step) {
  Raw r(sock);
  if (say_hello) r.hello();
  Outcome o = step(r);
  INFO(what << ": " << o.str());
  CHECK(o.refused());
}

proto::Bytes bytes_of(size_t n, uint8_t v = 0) { return proto::Bytes(n, std::byte{v}); }

}  // namespace

// Each group of attacks is a SECTION: Catch2 runs the test case once per
// section, each time on fresh daemons and a fresh victim, so a failure in
// one group does not hide the others, and what follows the sections (the
// victim kept going, its data intact, every hostile object gone) is checked
// after each group.
TEST_CASE("hostile clients get errors; the victim's RC traffic and data are untouched", "[hostile]") {
  TempDir dir;
  IbdPair ibds(dir.path());
  const std::string sa = ibds.a->socket(), sb = ibds.b->socket();

  Victim victim;
  victim.start(sa, sb);
  // The victim is under way: some checked rounds done (or an error).
  REQUIRE(wait_until([&] { return victim.rounds >= 10 || victim.finished_early(); }, 20s));
  INFO("victim error: " << (victim.ended ? victim.error : std::string()));
  REQUIRE(victim.rounds >= 10);
  const Snapshot base_a = snapshot(*ibds.a), base_b = snapshot(*ibds.b);
  const uint64_t rounds_before = victim.rounds;
  INFO("victim rounds before the attacks: " << rounds_before);
  const auto attacks_start = std::chrono::steady_clock::now();

  SECTION("framing and protocol") {
    expect_refused(sa, "ALLOC_PD before HELLO", false,
                   [](Raw& r) { return r.call(Op::kAllocPd, proto::Empty{}); });
    expect_refused(sa, "QUERY_DEVICE before HELLO", false,
                   [](Raw& r) { return r.call(Op::kQueryDevice, proto::Empty{}); });
    expect_refused(sa, "wrong magic", false, [](Raw& r) {
      auto b = proto::encode(proto::HelloReq{});
      r.send_raw(r.frame(uint16_t(Op::kHello), b, 0, 0x12345678));
      return r.wait_reply();
    });
    expect_refused(sa, "wrong header version", false, [](Raw& r) {
      auto b = proto::encode(proto::HelloReq{});
      r.send_raw(r.frame(uint16_t(Op::kHello), b, 0, proto::kMagic, 99));
      return r.wait_reply();
    });
    expect_refused(sa, "HELLO offering only versions above ibd's", false, [](Raw& r) {
      proto::HelloReq h;
      h.version_min = proto::kProtocolMax + 1;
      h.version_max = proto::kProtocolMax + 5;
      return r.call(Op::kHello, h);
    });
    expect_refused(sa, "truncated header (7 bytes)", false, [](Raw& r) {
      auto b = bytes_of(7, 0x4f);
      r.send_raw(b);
      return r.wait_reply();
    });
    expect_refused(sa, "HELLO body one byte short", false, [](Raw& r) {
      auto b = proto::encode(proto::HelloReq{});
      b.pop_back();
      return r.call_bytes(uint16_t(Op::kHello), b);
    });
    expect_refused(sa, "ALLOC_PD with a 100-byte body", true,
                   [](Raw& r) { return r.call_bytes(uint16_t(Op::kAllocPd), bytes_of(100, 7)); });
    expect_refused(sa, "oversized datagram (200 KiB)", true, [](Raw& r) {
      int big = 1 << 20;
      ::setsockopt(r.fd(), SOL_SOCKET, SO_SNDBUF, &big, sizeof big);
      auto b = r.frame(uint16_t(Op::kAllocPd), bytes_of(200 * 1024, 1));
      r.send_raw(b);
      return r.wait_reply();
    });
    expect_refused(sa, "header says 2 fds, none attached", true, [](Raw& r) {
      auto f = r.frame(uint16_t(Op::kAllocPd), {}, 2);
      r.send_raw(f);
      return r.wait_reply();
    });
    expect_refused(sa, "three fds (more than the protocol allows)", true, [](Raw& r) {
      UniqueFd m1 = make_memfd(4096), m2 = make_memfd(4096), m3 = make_memfd(4096);
      int fds[3] = {m1.get(), m2.get(), m3.get()};
      auto f = r.frame(uint16_t(Op::kMapMem), proto::encode(proto::MapMemReq{4096}), 3);
      r.send_raw(f, fds);
      return r.wait_reply();
    });
    expect_refused(sa, "unknown op 999", true,
                   [](Raw& r) { return r.call_bytes(999, {}); });
    expect_refused(sa, "a second HELLO", true,
                   [](Raw& r) { return r.call(Op::kHello, proto::HelloReq{}); });
  }

  SECTION("handles: another client's, garbage ones, ones of the wrong kind") {
    {
      Raw x(sa), y(sa);
      x.hello();
      y.hello();
      auto pd = x.must<proto::HandleRep>(Op::kAllocPd, proto::Empty{});
      UniqueFd mfd = make_memfd(16384);
      int f = mfd.get();
      auto mem = x.must<proto::MapMemRep>(Op::kMapMem, proto::MapMemReq{16384}, {&f, 1});
      proto::RegMrReq rr;
      rr.pd = pd.handle;
      rr.mem = mem.handle;
      rr.length = 4096;
      rr.va = 0x10000;
      rr.access = 1;
      auto mr = x.must<proto::RegMrRep>(Op::kRegMr, rr);
      // Client y uses x's handles.
      for (auto [op, h] : {std::pair{Op::kDeallocPd, pd.handle}, {Op::kUnmapMem, mem.handle},
                           {Op::kDeregMr, mr.handle}, {Op::kDestroyQp, pd.handle},
                           {Op::kQueryQp, pd.handle}}) {
        auto o = y.call(op, proto::HandleReq{h});
        INFO("y " << proto::op_name(uint16_t(op)) << " on x's handle " << h << ": " << o.str());
        CHECK(o.kind == Outcome::kReplied);
        CHECK(o.reply.status == ENOENT);
      }
      auto o = y.call(Op::kRegMr, rr);
      INFO("y REG_MR with x's PD and memory: " << o.str());
      CHECK(o.reply.status == ENOENT);
      // Garbage handles, and handles of the wrong kind.
      for (uint32_t h : {0u, 0xffffffffu, 0x7fffffffu, 12345u}) {
        auto g = x.call(Op::kDestroyCq, proto::HandleReq{h});
        INFO("DESTROY_CQ " << h << ": " << g.str());
        CHECK(g.refused());
      }
      auto wrong = x.call(Op::kDestroyCq, proto::HandleReq{pd.handle});
      INFO("DESTROY_CQ on a PD handle: " << wrong.str());
      CHECK(wrong.refused());
      // A PD with an MR on it cannot go first; x's own objects still work.
      x.must<proto::Empty>(Op::kDeregMr, proto::HandleReq{mr.handle});
      x.must<proto::Empty>(Op::kUnmapMem, proto::HandleReq{mem.handle});
      x.must<proto::Empty>(Op::kDeallocPd, proto::HandleReq{pd.handle});
      // y tries every small handle of every kind: it has none, and the
      // victim's (whatever their numbers) are not reachable.
      for (Op op : {Op::kDestroyQp, Op::kDestroyCq, Op::kDeregMr, Op::kUnmapMem, Op::kDeallocPd}) {
        int not_found = 0;
        for (uint32_t h = 1; h <= 32; ++h) {
          auto g = y.call(op, proto::HandleReq{h});
          not_found += g.kind == Outcome::kReplied && g.reply.status == ENOENT;
        }
        INFO(proto::op_name(uint16_t(op)) << " on handles 1..32 from a client that has none");
        CHECK(not_found == 32);
      }
    }

  }

  SECTION("MAP_MEM with bogus fds") {
    auto map_with = [&](const std::string& what, std::vector<int> fds, uint64_t len) {
      expect_refused(sa, "MAP_MEM " + what, true, [&](Raw& r) {
        return r.call(Op::kMapMem, proto::MapMemReq{len}, fds);
      });
    };
    {
      int p[2];
      REQUIRE(::pipe2(p, O_CLOEXEC) == 0);
      UniqueFd p0(p[0]), p1(p[1]);
      UniqueFd devnull(::open("/dev/null", O_RDWR | O_CLOEXEC));
      std::string tmpf = dir.path() + "/plainfile";
      UniqueFd plain(::open(tmpf.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
      REQUIRE(::ftruncate(plain.get(), 65536) == 0);
      UniqueFd small = make_memfd(4096), good = make_memfd(65536), good2 = make_memfd(65536);
      UniqueFd ro(::open(("/proc/self/fd/" + std::to_string(good.get())).c_str(), O_RDONLY | O_CLOEXEC));
      map_with("with a pipe", {p0.get()}, 4096);
      map_with("with /dev/null", {devnull.get()}, 4096);
      map_with("with a plain file", {plain.get()}, 4096);
      map_with("with a read-only memfd", {ro.get()}, 4096);
      map_with("longer than the memfd", {small.get()}, 8192);
      map_with("without an fd", {}, 4096);
      map_with("with two fds", {good.get(), good2.get()}, 4096);
      map_with("of length 0", {good.get()}, 0);
      map_with("of length 4097", {good.get()}, 4097);
      map_with("of length 2^63", {good.get()}, 1ull << 63);
      map_with("of length 2^64 - 4096", {good.get()}, ~0ull - 4095);
      // MAP_MEM_RANGE (protocol 6): the same checks, and the range inside
      // the memfd.
      auto range_with = [&](const std::string& what, std::vector<int> fds, uint64_t off, uint64_t len) {
        expect_refused(sa, "MAP_MEM_RANGE " + what, true, [&](Raw& r) {
          return r.call(Op::kMapMemRange, proto::MapMemRangeReq{off, len}, fds);
        });
      };
      range_with("with a pipe", {p0.get()}, 0, 4096);
      range_with("with a plain file", {plain.get()}, 4096, 4096);
      range_with("with a read-only memfd", {ro.get()}, 4096, 4096);
      range_with("without an fd", {}, 0, 4096);
      range_with("past the memfd's end", {good.get()}, 61440, 8192);
      range_with("at the memfd's end", {good.get()}, 65536, 4096);
      range_with("at an unaligned offset", {good.get()}, 100, 4096);
      range_with("whose end wraps", {good.get()}, ~0ull - 4095, 8192);
      range_with("at offset 2^63", {good.get()}, 1ull << 63, 4096);
      range_with("of length 0", {good.get()}, 4096, 0);
      {
        // Inside the memfd it maps, and the mapping is the client's own.
        Raw r(sa);
        r.hello();
        int fd = good.get();
        auto mem = r.must<proto::MapMemRep>(Op::kMapMemRange, proto::MapMemRangeReq{61440, 4096}, {&fd, 1});
        CHECK(mem.handle != 0);
        r.must<proto::Empty>(Op::kUnmapMem, proto::HandleReq{mem.handle});
      }
    }
    // A memfd that could shrink under the device (simhca would take SIGBUS
    // copying into pages truncated away): EPERM, whatever other seals it
    // has; sealed against shrinking it maps (docs/client-protocol.md §3.1).
    {
      Raw r(sa);
      r.hello();
      UniqueFd unsealed = make_memfd(65536, 0), grow_only = make_memfd(65536, F_SEAL_GROW),
               no_sealing(::memfd_create("hostile", MFD_CLOEXEC));
      REQUIRE(::ftruncate(no_sealing.get(), 65536) == 0);
      std::string shm = "/dev/shm/openib-hostile-" + std::to_string(::getpid());
      UniqueFd tmpfs(::open(shm.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
      REQUIRE(tmpfs.valid());
      ::unlink(shm.c_str());
      REQUIRE(::ftruncate(tmpfs.get(), 65536) == 0);
      for (auto [what, fd] : {std::pair{"a memfd without seals", unsealed.get()},
                              {"a memfd sealed only against growing", grow_only.get()},
                              {"a memfd created without MFD_ALLOW_SEALING", no_sealing.get()},
                              {"a tmpfs file (seals not allowed)", tmpfs.get()}}) {
        Outcome o = r.call(Op::kMapMem, proto::MapMemReq{65536}, {&fd, 1});
        INFO("MAP_MEM of " << what << ": " << o.str());
        CHECK(o.kind == Outcome::kReplied);
        CHECK(o.reply.status == EPERM);
        // A truncation the daemon would not have survived is now harmless.
        CHECK(::ftruncate(fd, 0) == 0);
      }
      UniqueFd sealed = make_memfd(65536, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
      int f = sealed.get();
      auto mem = r.must<proto::MapMemRep>(Op::kMapMem, proto::MapMemReq{65536}, {&f, 1});
      CHECK(::ftruncate(f, 4096) == -1);
      CHECK(errno == EPERM);
      r.must<proto::Empty>(Op::kUnmapMem, proto::HandleReq{mem.handle});
    }

  }

  SECTION("offsets and lengths that overflow") {
    {
      Raw r(sa);
      r.hello();
      auto pd = r.must<proto::HandleRep>(Op::kAllocPd, proto::Empty{});
      UniqueFd mfd = make_memfd(65536);
      int f = mfd.get();
      auto mem = r.must<proto::MapMemRep>(Op::kMapMem, proto::MapMemReq{65536}, {&f, 1});
      struct MrCase {
        const char* what;
        uint64_t offset, length, va;
      };
      for (auto c : {MrCase{"offset near 2^64", ~0ull - 4095, 8192, 0},
                     MrCase{"offset + length past the memory", 32768, 65536, 0},
                     MrCase{"length 2^64 - 1", 0, ~0ull, 0},
                     MrCase{"va + length wraps", 0, 8192, ~0ull - 100},
                     MrCase{"offset 2^63", 1ull << 63, 4096, 1ull << 63}}) {
        proto::RegMrReq rr;
        rr.pd = pd.handle;
        rr.mem = mem.handle;
        rr.offset = c.offset;
        rr.length = c.length;
        rr.va = c.va;
        rr.access = 1;
        auto o = r.call(Op::kRegMr, rr);
        INFO("REG_MR " << c.what << ": " << o.str());
        CHECK(o.refused());
      }
      struct CqCase {
        const char* what;
        uint64_t ring, dbr;
        uint8_t log;
      };
      for (auto c : {CqCase{"ring past the memory", 65536, 0, 4},
                     CqCase{"ring offset near 2^64", ~0ull - 63, 0, 4},
                     CqCase{"doorbell record near 2^64", 0, ~0ull - 7, 4},
                     CqCase{"doorbell record just past the end", 0, 65536 - 4, 4},
                     CqCase{"log_size 40", 0, 4096, 40},
                     CqCase{"ring of 2^12 CQEs in 64 KiB", 4096, 0, 12}}) {
        proto::CreateCqReq cq;
        cq.mem = mem.handle;
        cq.ring_offset = c.ring;
        cq.dbr_offset = c.dbr;
        cq.log_size = c.log;
        auto o = r.call(Op::kCreateCq, cq);
        INFO("CREATE_CQ " << c.what << ": " << o.str());
        CHECK(o.refused());
      }
      proto::CreateCqReq cq;
      cq.mem = mem.handle;
      cq.ring_offset = 0;
      cq.dbr_offset = 4096;
      cq.log_size = 4;
      auto cqr = r.must<proto::ObjRep>(Op::kCreateCq, cq);
      struct QpCase {
        const char* what;
        uint64_t sq, rq, dbr;
        uint8_t lsq, lsqs, type;
      };
      for (auto c : {QpCase{"send queue near 2^64", ~0ull - 4095, 16384, 20480, 4, 6, 0},
                     QpCase{"receive queue past the memory", 8192, 65536, 20480, 4, 6, 0},
                     QpCase{"doorbell record near 2^64", 8192, 16384, ~0ull - 7, 4, 6, 0},
                     QpCase{"sq stride 2^40", 8192, 16384, 20480, 4, 40, 0},
                     QpCase{"2^30 WQEs", 8192, 16384, 20480, 30, 6, 0},
                     QpCase{"type 9", 8192, 16384, 20480, 4, 6, 9}}) {
        proto::CreateQpReq q;
        q.pd = pd.handle;
        q.send_cq = q.recv_cq = cqr.handle;
        q.mem = mem.handle;
        q.type = c.type;
        q.log_sq_size = c.lsq;
        q.log_sq_stride = c.lsqs;
        q.log_rq_size = 4;
        q.log_rq_stride = 5;
        q.sq_offset = c.sq;
        q.rq_offset = c.rq;
        q.dbr_offset = c.dbr;
        auto o = r.call(Op::kCreateQp, q);
        INFO("CREATE_QP " << c.what << ": " << o.str());
        CHECK(o.refused());
      }
      // The memory cannot be unmapped from under its CQ.
      auto busy = r.call(Op::kUnmapMem, proto::HandleReq{mem.handle});
      INFO("UNMAP_MEM under a live CQ: " << busy.str());
      CHECK(busy.refused());
    }

  }

  SECTION("garbage rings, attributes and doorbells") {
    {
      Raw r(sa);
      auto h = r.hello();
      std::vector<UniqueFd> uar_fds = std::move(r.last_fds());  // the UAR fd comes with HELLO
      auto pd = r.must<proto::HandleRep>(Op::kAllocPd, proto::Empty{});
      constexpr size_t kLen = 65536;
      UniqueFd mfd = make_memfd(kLen);
      int f = mfd.get();
      auto mem = r.must<proto::MapMemRep>(Op::kMapMem, proto::MapMemReq{kLen}, {&f, 1});
      auto* p = static_cast<uint8_t*>(
          ::mmap(nullptr, kLen, PROT_READ | PROT_WRITE, MAP_SHARED, mfd.get(), 0));
      REQUIRE(p != MAP_FAILED);
      proto::CreateCqReq cq;
      cq.mem = mem.handle;
      cq.ring_offset = 0;
      cq.dbr_offset = 4096;
      cq.log_size = 6;
      auto cqr = r.must<proto::ObjRep>(Op::kCreateCq, cq);
      proto::CreateQpReq q;
      q.pd = pd.handle;
      q.send_cq = q.recv_cq = cqr.handle;
      q.mem = mem.handle;
      q.log_sq_size = 6;
      q.log_sq_stride = 6;
      q.log_rq_size = 6;
      q.log_rq_stride = 5;
      q.sq_offset = 8192;
      q.rq_offset = 8192 + 4096;
      q.dbr_offset = 4096 + 64;
      auto qp = r.must<proto::ObjRep>(Op::kCreateQp, q);
      std::mt19937_64 rng(7);
      // Garbage attributes: random bodies of the right length.
      int accepted = 0;
      for (int i = 0; i < 300; ++i) {
        proto::Bytes b(proto::body_size<proto::ModifyQpReq>());
        for (auto& x : b) x = std::byte(rng());
        std::memcpy(b.data(), &qp.handle, 4);  // its own QP, little-endian on x86
        if (i % 2) {  // states in range, so that the device's checks (§8.3) see it
          b[8] = std::byte(rng() % 7);
          b[9] = std::byte(rng() % 7);
        }
        auto o = r.call_bytes(uint16_t(Op::kModifyQp), b);
        REQUIRE(o.kind == Outcome::kReplied);  // an error, not a hang-up
        accepted += o.reply.status == 0;
      }
      WARN("random MODIFY_QP bodies: " << accepted << " of 300 accepted");
      // Bring it to RTS towards an unused QPN on ibd B, then fill its rings
      // and records with garbage and ring doorbells through its UAR page.
      {
        proto::ModifyQpReq m;
        m.qp = qp.handle;
        m.attr.mask = qp_attr::kState | qp_attr::kPkeyIndex | qp_attr::kPort | qp_attr::kAccessFlags;
        m.attr.state = 1;
        m.attr.port = 1;
        r.call(Op::kModifyQp, m);  // it may be in ERR from the garbage: then RESET first
        m.attr.mask = qp_attr::kState;
        m.attr.state = 0;
        r.must<proto::Empty>(Op::kModifyQp, m);
        m.attr.mask = qp_attr::kState | qp_attr::kPkeyIndex | qp_attr::kPort | qp_attr::kAccessFlags;
        m.attr.state = 1;
        r.must<proto::Empty>(Op::kModifyQp, m);
        m.attr = {};
        m.attr.mask = qp_attr::kState | qp_attr::kAv | qp_attr::kPathMtu | qp_attr::kDestQpn |
                      qp_attr::kRqPsn | qp_attr::kMaxDestRdAtomic | qp_attr::kMinRnrTimer;
        m.attr.state = 2;
        m.attr.path_mtu = 5;
        m.attr.dest_qpn = 0xabcde;
        m.attr.av.dlid = 2;
        m.attr.av.port = 1;
        m.attr.max_dest_rd_atomic = 1;
        m.attr.min_rnr_timer = 1;
        r.must<proto::Empty>(Op::kModifyQp, m);
        m.attr = {};
        m.attr.mask = qp_attr::kState | qp_attr::kSqPsn | qp_attr::kTimeout | qp_attr::kRetryCnt |
                      qp_attr::kRnrRetry | qp_attr::kMaxQpRdAtomic;
        m.attr.state = 3;
        m.attr.timeout = 1;
        m.attr.retry_cnt = 1;
        m.attr.rnr_retry = 1;
        m.attr.max_rd_atomic = 1;
        r.must<proto::Empty>(Op::kModifyQp, m);
      }
      volatile uint64_t* uar = nullptr;
      void* uar_map = MAP_FAILED;
      INFO("HELLO doorbell mode " << int(h.doorbell_mode));
      if (h.doorbell_mode == proto::kDoorbellMmap) {
        REQUIRE(uar_fds.size() == 1);
        uar_map = ::mmap(nullptr, h.uar_size, PROT_READ | PROT_WRITE, MAP_SHARED,
                         uar_fds[0].get(), static_cast<off_t>(h.uar_mmap_offset));
        CHECK(uar_map != MAP_FAILED);
        if (uar_map != MAP_FAILED) uar = static_cast<volatile uint64_t*>(uar_map);
      }
      // Doorbells on its own page naming its own QP (garbage WQEs, garbage
      // counters), the victim's QP on ibd A (another UAR: to be ignored)
      // and random QPNs; random CQ_ARM, EQ_DOORBELL and stray stores.
      auto t_end = std::chrono::steady_clock::now() + 2s;
      uint64_t n_db = 0;
      const uint32_t victim_qpn_a = victim.a->qp->qp_num();
      while (std::chrono::steady_clock::now() < t_end) {
        for (size_t i = 0; i < 8192 + 8192; i += 8) {  // CQ ring, records, SQ and RQ
          uint64_t v = rng();
          std::memcpy(p + i, &v, 8);
        }
        if (uar) {
          for (int k = 0; k < 64; ++k, ++n_db) {
            // Counters that would be honoured on the right page: just ahead
            // of the victim's SQ (one SEND per round), within its own SQ
            // (so that the device reads the garbage WQEs), or random.
            uint32_t qpn, counter;
            if (k % 3 == 0) {
              qpn = victim_qpn_a;
              counter = static_cast<uint32_t>(victim.rounds.load() + 1 + rng() % 3);
            } else if (k % 3 == 1) {
              qpn = qp.number;
              counter = static_cast<uint32_t>(1 + rng() % 64);
            } else {
              qpn = static_cast<uint32_t>(rng());
              counter = static_cast<uint32_t>(rng());
            }
            uar[0x800 / 8] = (uint64_t{counter} << 32) | (qpn & 0xffffff);
            uar[0x020 / 8] = rng();
            uar[0x040 / 8] = rng();
            uar[(rng() % 512)] = rng();
          }
        }
        std::this_thread::sleep_for(1ms);  // pacing of the 2 s attack, not synchronisation
      }
      WARN(n_db << " garbage doorbells stored through a client's UAR page");
      if (uar_map != MAP_FAILED) ::munmap(uar_map, h.uar_size);
      ::munmap(p, kLen);
    }

  }

  SECTION("through libopenib: garbage lkey, an address outside the MR, the victim's rkey") {
    {
      QpCap cap;
      auto ha = open_side(sa, 65536, cap);
      auto hb = open_side(sb, 65536, cap);
      REQUIRE(ha.ok());
      REQUIRE(hb.ok());
      REQUIRE(connect(**ha, **hb).ok());
      Side& x = **ha;
      // A send whose lkey is garbage.
      Sge bad{0x1000, 64, 0xdeadbeef};
      SendWr wr;
      wr.wr_id = 77;
      wr.sg = {&bad, 1};
      REQUIRE(x.qp->post_send(wr) == 0);
      auto wc = wait_wc(*x.cq, 10000);
      REQUIRE(wc.ok());
      CHECK(wc->wr_id == 77);
      CHECK(wc->status == kWcLocProtErr);
    }
    {
      auto ha = open_side(sa, 65536);
      auto hb = open_side(sb, 65536);
      REQUIRE(ha.ok());
      REQUIRE(hb.ok());
      REQUIRE(connect(**ha, **hb).ok());
      Side& x = **ha;
      // A valid lkey with an address outside its region.
      Sge bad{reinterpret_cast<uint64_t>(x.buf()) + 65536 + 4096, 64, x.mr->lkey()};
      SendWr wr;
      wr.wr_id = 78;
      wr.sg = {&bad, 1};
      REQUIRE(x.qp->post_send(wr) == 0);
      auto wc = wait_wc(*x.cq, 10000);
      REQUIRE(wc.ok());
      CHECK(wc->wr_id == 78);
      CHECK(wc->status == kWcLocProtErr);
    }
    {
      auto ha = open_side(sa, 65536);
      auto hb = open_side(sb, 65536);
      REQUIRE(ha.ok());
      REQUIRE(hb.ok());
      REQUIRE(connect(**ha, **hb).ok());
      Side& x = **ha;
      // RDMA WRITE into the victim's canary on B with the victim's rkey,
      // through a QP of another client and PD: the responder must refuse.
      std::memset(x.buf(), 0xEE, 4096);
      uint64_t target = reinterpret_cast<uint64_t>(victim.b->buf()) + Victim::kCanaryOff;
      REQUIRE(post_send(*x.qp, *x.mr, 0, 4096, 79, WrOpcode::kWrite, target, victim.b->mr->rkey()) == 0);
      auto wc = wait_wc(*x.cq, 20000);
      REQUIRE(wc.ok());
      CHECK(wc->status == kWcRemAccessErr);
    }
  }

  // The victim kept going through all of it, and still does: more rounds
  // after the attacks (within 20 s; it does hundreds a second).
  const uint64_t rounds_mid = victim.rounds;
  const auto attacks_took = std::chrono::steady_clock::now() - attacks_start;
  wait_until([&] { return victim.rounds > rounds_mid + 10 || victim.finished_early(); }, 20s);
  const uint64_t rounds_after = victim.rounds;
  victim.finish();
  WARN("victim RC rounds (two checked messages each): " << rounds_before << " before the attacks, "
                                                        << rounds_mid << " after them, "
                                                        << rounds_after << " at the end");
  INFO("victim rounds: before " << rounds_before << ", after the attacks " << rounds_mid
                                << ", at the end " << rounds_after);
  CHECK(victim.error.empty());
  INFO("victim error: " << victim.error);
  // Attacks that lasted a second or more (the doorbell storm lasts 2 s)
  // did not stall it meanwhile; the quick ones end before its next round.
  if (attacks_took >= 1s) CHECK(rounds_mid > rounds_before);
  CHECK(rounds_after > rounds_mid);
  CHECK(victim.canaries_intact());

  REQUIRE(ibds.a->alive());
  REQUIRE(ibds.b->alive());
  CHECK(ibdctl(sa, "clients").exited_ok());
  CHECK(ibdctl(sb, "clients").exited_ok());
  // Every hostile client is gone: what ibd holds is what it held with the
  // victim alone.
  Snapshot now_a = settle(*ibds.a, base_a, 10s), now_b = settle(*ibds.b, base_b, 10s);
  INFO("A before: " << base_a.str() << "\nA after:  " << now_a.str());
  CHECK(now_a.matches(base_a));
  INFO("B before: " << base_b.str() << "\nB after:  " << now_b.str());
  CHECK(now_b.matches(base_b));
}

// Requests wait for the device asynchronously (docs/client-protocol.md
// "Request handling"): a client that pipelines gets its replies in order,
// and a client that goes while its CREATE_QP is in flight leaves nothing
// behind (the completion finds it gone; its teardown destroys the QP).
TEST_CASE("pipelined requests are answered in order; a client gone mid-command leaks nothing",
          "[hostile][async]") {
  TempDir dir;
  Ibd ibd(dir.path(), "a", IbdOptions{});
  const std::string sock = ibd.socket();
  constexpr size_t kLen = 1 << 20;
  // HELLO, PD, memory, CQ; then the CREATE_QP request body for QP i.
  struct Setup {
    explicit Setup(const std::string& s) : r(s) {
      r.hello();
      uar_fds = std::move(r.last_fds());
      pd = r.must<proto::HandleRep>(Op::kAllocPd, proto::Empty{}).handle;
      mfd = make_memfd(kLen);
      int f = mfd.get();
      mem = r.must<proto::MapMemRep>(Op::kMapMem, proto::MapMemReq{kLen}, {&f, 1}).handle;
      cqh = raw_cq(r, mem);
    }
    proto::Bytes create_qp(uint32_t i) {
      return r.frame(uint16_t(Op::kCreateQp), proto::encode(small_qp(pd, cqh, mem, i)));
    }
    Raw r;
    std::vector<UniqueFd> uar_fds;
    uint32_t pd = 0, mem = 0, cqh = 0;
    UniqueFd mfd;
  };

  {  // a first client, so that what ibd sets up once (e.g. the doorbell BAR's fd) is in the base
    Setup warm(sock);
    REQUIRE(warm.r.send_raw(warm.create_qp(0)));
    REQUIRE(warm.r.wait_reply().reply.status == 0);
  }
  // The base: snapshot() waits until ibd is done with the first client
  // (INFO departing_clients, fds_closing), so that its UAR page and socket
  // are not counted.
  const Snapshot base = snapshot(ibd);

  SECTION("pipelined CREATE_QPs: every one answered, in the order sent") {
    Setup s(sock);
    constexpr uint32_t kN = 40;
    std::vector<uint32_t> sent;
    for (uint32_t i = 0; i < kN; ++i) {
      auto f = s.create_qp(i);
      sent.push_back(proto::decode_header(f)->seq);
      REQUIRE(s.r.send_raw(f));
    }
    std::vector<uint32_t> got;
    std::set<uint32_t> qpns;
    for (uint32_t i = 0; i < kN; ++i) {
      pollfd pf{s.r.fd(), POLLIN, 0};
      REQUIRE(::poll(&pf, 1, 10000) == 1);
      auto m = proto::recv_message(s.r.fd(), true);
      REQUIRE(m.ok());
      got.push_back(m->header.seq);
      auto rv = proto::decode_reply(m->body);
      REQUIRE(rv.ok());
      REQUIRE(rv->status == 0);
      auto rep = proto::decode<proto::ObjRep>(rv->payload);
      REQUIRE(rep.ok());
      qpns.insert(rep->number);
    }
    CHECK(got == sent);
    CHECK(qpns.size() == kN);
  }
  SECTION("a client that closes while its CREATE_QPs are in flight") {
    for (int round = 0; round < 5; ++round) {
      Setup s(sock);
      for (uint32_t i = 0; i < 8; ++i) REQUIRE(s.r.send_raw(s.create_qp(i)));
      // Gone at once: ibd may be anywhere between the first command and the last.
    }
  }
  REQUIRE(ibd.alive());
  const Snapshot now = settle(ibd, base, 10s);
  INFO("before: " << base.str() << "\nafter:  " << now.str());
  CHECK(now.matches(base));
}

// PATH_QUERY (docs/client-protocol.md §11) from any client: malformed
// bodies and bad arguments are refused; without an SM (this ibd's port is
// set up statically, MasterSMLID 0) a lookup fails with ENETUNREACH, is not
// cached, and a flood of them leaves ibd serving.
TEST_CASE("PATH_QUERY: malformed and unanswerable lookups get errors", "[hostile][sa]") {
  TempDir dir;
  Ibd ibd(dir.path(), "a", IbdOptions{});
  Raw r(ibd.socket());
  r.hello();
  const uint16_t op = static_cast<uint16_t>(Op::kPathQuery);
  proto::PathQueryReq q;
  q.dgid = {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 2, 0xc9, 3, 0, 0, 0, 1};
  auto b = proto::encode(q);
  // Short and long bodies.
  for (size_t n : {size_t{0}, b.size() - 1}) {
    auto o = r.call_bytes(op, std::span(b.data(), n));
    INFO("body of " << n << " bytes: " << o.str());
    CHECK((o.kind == Outcome::kReplied && o.reply.status == EPROTO));
  }
  auto longer = b;
  longer.push_back(std::byte{0});
  CHECK(r.call_bytes(op, longer).reply.status == EPROTO);
  // Bad port, unknown flags.
  for (auto mut : std::vector<std::function<void(proto::PathQueryReq&)>>{
           [](proto::PathQueryReq& x) { x.port = 0; }, [](proto::PathQueryReq& x) { x.port = 9; },
           [](proto::PathQueryReq& x) { x.flags = 0x80000000u; }}) {
    proto::PathQueryReq bad = q;
    mut(bad);
    auto o = r.call(Op::kPathQuery, bad);
    INFO(o.str());
    CHECK((o.kind == Outcome::kReplied && o.reply.status == EINVAL));
  }
  // An fd with it: refused, the fd not kept.
  {
    UniqueFd f = make_memfd(4096);
    int fd = f.get();
    CHECK(r.call(Op::kPathQuery, q, {&fd, 1}).reply.status == EINVAL);
  }
  // The SA client attaches once ibd's MAD layer is up (ENODEV before).
  REQUIRE(wait_until([&] { return r.call(Op::kPathQuery, q).reply.status != ENODEV; }, 10s));
  // No SM: ENETUNREACH, for every lookup (errors are not cached).
  for (int i = 0; i < 500; ++i) {
    q.dgid[15] = static_cast<uint8_t>(i);
    q.dgid[14] = static_cast<uint8_t>(i >> 8);
    auto o = r.call(Op::kPathQuery, q);
    INFO("lookup " << i << ": " << o.str());
    REQUIRE(o.kind == Outcome::kReplied);
    REQUIRE(o.reply.status == ENETUNREACH);
  }
  // ibd still serves this client and others.
  Raw other(ibd.socket());
  other.hello();
  CHECK(other.call(Op::kInfo, proto::InfoReq{}).reply.status == 0);
  CHECK(r.call(Op::kInfo, proto::InfoReq{}).reply.status == 0);
}

// The path cache file in ibd's state directory (docs/sa.md "In ibd",
// "Cache file"): whatever lies there, garbage, a truncated file, a
// directory, a file of another version, ibd starts, logs why it ignored
// it, counts it, and serves; nothing of it is restored.
namespace {
// The value of counter `key` in INFO's JSON (the harness's ibdctl() runs
// `ibdctl --json`); -1 if absent.
long long counter_in(const std::string& json, const std::string& key) {
  const std::string k = "\"" + key + "\":";
  const size_t at = json.find(k);
  if (at == std::string::npos) return -1;
  return std::strtoll(json.c_str() + at + k.size(), nullptr, 10);
}
}  // namespace

// MCAST_JOIN, MCAST_LEAVE, SERVICE_SET, SERVICE_DELETE (docs/client-protocol.md
// "Multicast joins and services"): malformed bodies and bad arguments are
// refused; without an SM each join fails (ENETUNREACH) and leaves nothing
// joined; a leave or delete of what the client does not hold is ENOENT;
// past the per-client quota, EDQUOT before anything is asked.
TEST_CASE("MCAST_JOIN / SERVICE_SET: malformed, unanswerable and over-quota requests get errors", "[hostile][sa]") {
  TempDir dir;
  IbdOptions opts;
  opts.extra_args = {"--client-max-services=0"};
  Ibd ibd(dir.path(), "a", opts);
  Raw r(ibd.socket());
  r.hello();
  proto::McastJoinReq j;
  j.mgid = {0xff, 0x12, 0x12, 0x34, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  j.flags = proto::kMcastCreate;
  proto::McastLeaveReq l;
  l.mgid = j.mgid;
  proto::ServiceReq sv;
  // Short and long bodies of each op.
  const std::vector<std::pair<Op, proto::Bytes>> bodies = {{Op::kMcastJoin, proto::encode(j)},
                                                           {Op::kMcastLeave, proto::encode(l)},
                                                           {Op::kServiceSet, proto::encode(sv)},
                                                           {Op::kServiceDelete, proto::encode(sv)}};
  for (const auto& [op, b] : bodies) {
    for (size_t n : {size_t{0}, size_t{1}, b.size() - 1}) {
      auto o = r.call_bytes(static_cast<uint16_t>(op), std::span(b.data(), n));
      INFO(proto::op_name(static_cast<uint16_t>(op)) << " body of " << n << " bytes: " << o.str());
      CHECK((o.kind == Outcome::kReplied && o.reply.status == EPROTO));
    }
    auto longer = b;
    longer.push_back(std::byte{0});
    CHECK(r.call_bytes(static_cast<uint16_t>(op), longer).reply.status == EPROTO);
  }
  // The SA client attaches once ibd's MAD layer is up (ENODEV before).
  REQUIRE(wait_until([&] { return r.call(Op::kMcastJoin, j).reply.status != ENODEV; }, 10s));
  // Bad port, flags, JoinState, a GID that is not multicast.
  for (auto mut : std::vector<std::function<void(proto::McastJoinReq&)>>{
           [](proto::McastJoinReq& x) { x.port = 0; }, [](proto::McastJoinReq& x) { x.port = 9; },
           [](proto::McastJoinReq& x) { x.flags = 0x80000000u; }, [](proto::McastJoinReq& x) { x.join_state = 0; },
           [](proto::McastJoinReq& x) { x.join_state = 0x18; }, [](proto::McastJoinReq& x) { x.mgid[0] = 0xfe; }}) {
    proto::McastJoinReq bad = j;
    mut(bad);
    auto o = r.call(Op::kMcastJoin, bad);
    INFO(o.str());
    CHECK((o.kind == Outcome::kReplied && o.reply.status == EINVAL));
  }
  // No SM: ENETUNREACH for every join; none stays.
  for (int i = 0; i < 300; ++i) {
    j.mgid[15] = static_cast<uint8_t>(i);
    j.mgid[14] = static_cast<uint8_t>(i >> 8);
    auto o = r.call(Op::kMcastJoin, j);
    INFO("join " << i << ": " << o.str());
    REQUIRE(o.kind == Outcome::kReplied);
    REQUIRE(o.reply.status == ENETUNREACH);
  }
  // Nothing held: leave and delete are ENOENT.
  CHECK(r.call(Op::kMcastLeave, l).reply.status == ENOENT);
  CHECK(r.call(Op::kServiceDelete, sv).reply.status == ENOENT);
  // Services: a quota of 0 (--client-max-services=0): EDQUOT at once.
  auto q = r.call(Op::kServiceSet, sv);
  INFO(q.str());
  CHECK(q.reply.status == EDQUOT);
  // ibd still serves this client and others; nothing joined or registered.
  Raw other(ibd.socket());
  other.hello();
  CHECK(other.call(Op::kInfo, proto::InfoReq{}).reply.status == 0);
  auto info = ibdctl(ibd.socket(), "counters");
  CHECK(counter_in(info.out, "mcast_groups") == 0);
  CHECK(counter_in(info.out, "service_registrations") == 0);
  CHECK(counter_in(info.out, "mcast_errors") >= 300);  // each Set failed, none kept
}

// A client may join at most --client-max-mcast-joins groups: past it,
// EDQUOT before anything is asked of the SA.
TEST_CASE("MCAST_JOIN past the client's quota is EDQUOT", "[hostile][sa]") {
  TempDir dir;
  IbdOptions opts;
  opts.extra_args = {"--client-max-mcast-joins=0"};
  Ibd ibd(dir.path(), "a", opts);
  Raw r(ibd.socket());
  r.hello();
  proto::McastJoinReq j;
  j.mgid = {0xff, 0x12, 0x12, 0x34, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  for (int i = 0; i < 100; ++i) {
    j.mgid[15] = static_cast<uint8_t>(i);
    auto o = r.call(Op::kMcastJoin, j);
    INFO(o.str());
    REQUIRE(o.reply.status == EDQUOT);
  }
  auto info = ibdctl(ibd.socket(), "counters");
  CHECK(counter_in(info.out, "mcast_joins") == 0);
  CHECK(counter_in(info.out, "mcast_groups") == 0);
}


TEST_CASE("a bad path cache file is logged and ignored; ibd serves", "[hostile][sa]") {
  // A file of our magic and version 1 whose body is cut short, one of
  // version 9, random bytes, and a directory in the file's place.
  auto header = [](uint32_t version) {
    std::string h = "OIBPATHC";
    for (int i = 3; i >= 0; --i) h.push_back(static_cast<char>((version >> (8 * i)) & 0xff));
    h += std::string("\x00\x00\x00\x98", 4) + std::string(8, '\xfe') + std::string(8, '\0');
    return h;
  };
  std::mt19937 rng(7);
  std::string noise(4096, '\0');
  for (auto& ch : noise) ch = static_cast<char>(rng());
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"truncated", header(1).substr(0, 30)}, {"version 9", header(9) + std::string(64, '\0')},
      {"random bytes", noise}, {"a directory", ""}};
  for (const auto& [what, bytes] : cases) {
    DYNAMIC_SECTION(what) {
      TempDir dir;
      const std::string state = dir.path() + "/state";
      std::filesystem::create_directories(state);
      const std::string file = state + "/path-cache-port1.bin";
      if (what == "a directory") {
        std::filesystem::create_directories(file);
      } else {
        FILE* f = std::fopen(file.c_str(), "wb");
        REQUIRE(f);
        std::fwrite(bytes.data(), 1, bytes.size(), f);
        std::fclose(f);
      }
      IbdOptions o;
      o.extra_args = {"--state-dir", state};
      Ibd ibd(dir.path(), "a", o);
      // The file is read right after start, on the loop.
      RunResult c;
      wait_until(
          [&] {
            c = ibdctl(ibd.socket(), "counters");
            return c.exited_ok() && counter_in(c.out, "path_cache_load_errors") == 1;
          },
          10s);
      INFO("ibdctl counters: " << c.out << c.err);
      REQUIRE(counter_in(c.out, "path_cache_load_errors") == 1);
      CHECK(counter_in(c.out, "path_cache_restored") == 0);
      INFO(ibd.log_tail());
      CHECK(ibd.log_tail().find("path-cache-port1.bin") != std::string::npos);
      Raw r(ibd.socket());
      r.hello();
      CHECK(r.call(Op::kInfo, proto::InfoReq{}).reply.status == 0);
    }
  }
}

// IPOIB_INFO (docs/ipoib.md "ibdctl ipoib"): an ibd without --ipoib says
// so; with it, a body or an fd is refused, and the JSON answers any client.
// (No SM here: the interface stays down and no TAP is made.)
TEST_CASE("IPOIB_INFO: without IPoIB, with a body or an fd", "[hostile][ipoib]") {
  TempDir dir;
  {
    Ibd plain(dir.path(), "a", IbdOptions{});
    Raw r(plain.socket());
    r.hello();
    CHECK(r.call_bytes(static_cast<uint16_t>(Op::kIpoibInfo), {}).reply.status == EOPNOTSUPP);
  }
  IbdOptions opts;
  opts.extra_args = {"--ipoib", "oibt" + std::to_string(::getpid() % 100000)};
  Ibd ibd(dir.path(), "b", opts);
  Raw r(ibd.socket());
  r.hello();
  const std::byte one[1] = {std::byte{1}};
  CHECK(r.call_bytes(static_cast<uint16_t>(Op::kIpoibInfo), one).reply.status == EINVAL);
  int p[2];
  REQUIRE(::pipe(p) == 0);
  const int fds[1] = {p[0]};
  auto o = r.call_bytes(static_cast<uint16_t>(Op::kIpoibInfo), {}, fds);
  CHECK((o.kind == Outcome::kReplied && o.reply.status == EINVAL));
  ::close(p[0]);
  ::close(p[1]);
  o = r.call_bytes(static_cast<uint16_t>(Op::kIpoibInfo), {});
  REQUIRE(o.kind == Outcome::kReplied);
  REQUIRE(o.reply.status == 0);
  const std::string text(reinterpret_cast<const char*>(o.reply.payload.data()), o.reply.payload.size());
  CHECK(text.find("\"state\":\"") != std::string::npos);
  CHECK(text.find("\"name\":\"oibt") != std::string::npos);
}

// The connection manager's requests (docs/client-protocol.md "Connection
// manager") from raw clients: before CM_OPEN, with bodies of the wrong
// length or an fd, lengths past a message's maximum, another client's ids
// and QP, a bad QP state; garbage written into the CM socket. The victim
// client's listener and QP are untouched, and ibd serves on.
namespace {
// A raw client's QP (PD, memory, CQ, QP in RESET): its handle.
struct RawQp {
  explicit RawQp(Raw& r) {
    pd = r.must<proto::HandleRep>(Op::kAllocPd, proto::Empty{}).handle;
    mfd = make_memfd(65536);
    int f = mfd.get();
    mem = r.must<proto::MapMemRep>(Op::kMapMem, proto::MapMemReq{65536}, {&f, 1}).handle;
    const auto rep = r.must<proto::ObjRep>(Op::kCreateQp, small_qp(pd, raw_cq(r, mem), mem, 0));
    qp = rep.handle;
    qpn = rep.number;
  }
  UniqueFd mfd;
  uint32_t pd = 0, mem = 0, qp = 0, qpn = 0;
};

uint8_t qp_state(Raw& r, uint32_t qp) {
  return r.must<proto::QueryQpRep>(Op::kQueryQp, proto::HandleReq{qp}).attr.state;
}

int status_of(const Outcome& o) { return o.kind == Outcome::kReplied ? o.reply.status : -1; }

// One CmEventMsg from a CM socket (blocking up to `ms`); nullopt on EOF,
// an error (errno_out) or no event.
// (M: CmEventMsg, or CmaEventMsg from an RDMA CM event socket.)
template <class M = proto::CmEventMsg>
std::optional<M> read_cm_event(int fd, int ms, int* errno_out = nullptr) {
  pollfd pf{fd, POLLIN, 0};
  if (::poll(&pf, 1, ms) != 1) return std::nullopt;
  std::array<std::byte, 1024> buf;
  ssize_t n = ::recv(fd, buf.data(), buf.size(), MSG_DONTWAIT);
  if (errno_out) *errno_out = n < 0 ? errno : 0;
  if (n <= 0) return std::nullopt;
  auto m = proto::decode<M>(std::span<const std::byte>(buf.data(), size_t(n)));
  if (!m) return std::nullopt;
  return *m;
}

// A listen on port 1, also before its CM engine runs (ibd just started:
// the listen waits for the engine, docs/cm.md); then until the engine has
// taken it (CM_INFO), so that REQs from the other host find it.
uint32_t listen_when_up(Raw& r, uint64_t service) {
  proto::CmListenReq l;
  l.service_id = service;
  Outcome o = r.call(Op::kCmListen, l);
  INFO(o.str());
  REQUIRE(status_of(o) == 0);
  REQUIRE(wait_until(
      [&] {
        Outcome i = r.call(Op::kCmInfo, proto::Empty{});
        if (status_of(i) != 0) return false;
        auto j = nlohmann::json::parse(std::string(reinterpret_cast<const char*>(i.reply.payload.data()),
                                                   i.reply.payload.size()),
                                       nullptr, false);
        return j.is_object() && j.value("pending_listens", 1) == 0;
      },
      20s));
  return proto::decode<proto::HandleRep>(o.reply.payload)->handle;
}
}  // namespace

TEST_CASE("CM requests: before CM_OPEN, bad bodies and lengths, fds, another client's ids and QP",
          "[hostile][cm]") {
  TempDir dir;
  IbdPair pair(dir.path(), "warn", /*distinct_guids=*/true);
  Raw evil(pair.a->socket()), victim(pair.a->socket());
  evil.hello();
  victim.hello();

  // Before CM_OPEN: ENOTCONN for every request that needs the session.
  CHECK(status_of(evil.call(Op::kCmListen, proto::CmListenReq{})) == ENOTCONN);
  CHECK(status_of(evil.call(Op::kCmConnect, proto::CmConnectReq{})) == ENOTCONN);
  CHECK(status_of(evil.call(Op::kCmAccept, proto::CmAcceptReq{})) == ENOTCONN);
  CHECK(status_of(evil.call(Op::kCmReject, proto::CmRejectReq{})) == ENOTCONN);
  CHECK(status_of(evil.call(Op::kCmDisconnect, proto::CmDisconnectReq{})) == ENOTCONN);
  CHECK(status_of(evil.call(Op::kCmDestroy, proto::HandleReq{1})) == ENOTCONN);
  CHECK(status_of(evil.call(Op::kCmSidrQuery, proto::CmSidrQueryReq{})) == ENOTCONN);
  CHECK(status_of(evil.call(Op::kCmSidrReply, proto::CmSidrReplyReq{})) == ENOTCONN);
  CHECK(status_of(evil.call(Op::kCmInitQpAttr, proto::CmInitQpAttrReq{1, 1})) == ENOTCONN);

  // CM_OPEN: a body, or an fd, is refused; then one socket, once.
  CHECK(status_of(evil.call_bytes(uint16_t(Op::kCmOpen), bytes_of(4))) == EINVAL);
  {
    UniqueFd f = make_memfd(4096);
    int fd = f.get();
    CHECK(status_of(evil.call_bytes(uint16_t(Op::kCmOpen), {}, {&fd, 1})) == EINVAL);
  }
  evil.must<proto::Empty>(Op::kCmOpen, proto::Empty{});
  REQUIRE(evil.last_fds().size() == 1);
  UniqueFd evil_cm = std::move(evil.last_fds()[0]);
  CHECK(status_of(evil.call(Op::kCmOpen, proto::Empty{})) == EBUSY);
  victim.must<proto::Empty>(Op::kCmOpen, proto::Empty{});
  REQUIRE(victim.last_fds().size() == 1);
  UniqueFd victim_cm = std::move(victim.last_fds()[0]);

  // The victim's ids (1, 2, 3) and QP; the evil client holds none yet.
  for (uint64_t s = 0; s < 3; ++s) CHECK(listen_when_up(victim, 0x5000 + s) == s + 1);
  // (Handles are per client: PDs first, so that the victim's QP handle is
  // one the evil client's own objects never get below.)
  for (int i = 0; i < 16; ++i) victim.must<proto::HandleRep>(Op::kAllocPd, proto::Empty{});
  RawQp vqp(victim);

  // Bodies one byte short or long, for every request: EPROTO.
  auto wrong_lengths = [&](Op op, const proto::Bytes& b) {
    auto shorter = std::span(b.data(), b.size() - 1);
    CHECK(status_of(evil.call_bytes(uint16_t(op), shorter)) == EPROTO);
    auto longer = b;
    longer.push_back(std::byte{0});
    CHECK(status_of(evil.call_bytes(uint16_t(op), longer)) == EPROTO);
  };
  wrong_lengths(Op::kCmListen, proto::encode(proto::CmListenReq{}));
  wrong_lengths(Op::kCmConnect, proto::encode(proto::CmConnectReq{}));
  wrong_lengths(Op::kCmAccept, proto::encode(proto::CmAcceptReq{}));
  wrong_lengths(Op::kCmReject, proto::encode(proto::CmRejectReq{}));
  wrong_lengths(Op::kCmDisconnect, proto::encode(proto::CmDisconnectReq{}));
  wrong_lengths(Op::kCmDestroy, proto::encode(proto::HandleReq{}));
  wrong_lengths(Op::kCmSidrQuery, proto::encode(proto::CmSidrQueryReq{}));
  wrong_lengths(Op::kCmSidrReply, proto::encode(proto::CmSidrReplyReq{}));
  wrong_lengths(Op::kCmInitQpAttr, proto::encode(proto::CmInitQpAttrReq{}));
  CHECK(status_of(evil.call_bytes(uint16_t(Op::kCmInfo), bytes_of(1))) == EINVAL);
  // An fd with a request: refused.
  {
    UniqueFd f = make_memfd(4096);
    int fd = f.get();
    CHECK(status_of(evil.call(Op::kCmListen, proto::CmListenReq{}, {&fd, 1})) == EINVAL);
    CHECK(status_of(evil.call(Op::kCmDestroy, proto::HandleReq{1}, {&fd, 1})) == EINVAL);
  }

  // The victim's ids name nothing of the evil client's.
  for (uint32_t h = 1; h <= 3; ++h) {
    CHECK(status_of(evil.call(Op::kCmDestroy, proto::HandleReq{h})) == ENOENT);
    CHECK(status_of(evil.call(Op::kCmInitQpAttr, proto::CmInitQpAttrReq{h, 2})) == ENOENT);
    CHECK(status_of(evil.call(Op::kCmReject, proto::CmRejectReq{.id = h})) == ENOENT);
    CHECK(status_of(evil.call(Op::kCmDisconnect, proto::CmDisconnectReq{.id = h})) == ENOENT);
    CHECK(status_of(evil.call(Op::kCmAccept, proto::CmAcceptReq{.id = h, .qp = vqp.qp})) == ENOENT);
  }
  // Its QP neither: CM_CONNECT with it fails, the QP stays in RESET.
  proto::CmConnectReq c;
  c.qp = vqp.qp;
  c.service_id = 0x5000;
  c.path = wire_path(1, 2);
  CHECK(status_of(evil.call(Op::kCmConnect, c)) == ENOENT);
  c.flags = proto::kCmManualQp;
  CHECK(status_of(evil.call(Op::kCmConnect, c)) == ENOENT);
  CHECK(qp_state(victim, vqp.qp) == 0);

  // Lengths past the message's maximum (IBA 12.6): EINVAL.
  RawQp eqp(evil);
  REQUIRE(eqp.qp < vqp.qp);
  c.qp = eqp.qp;
  c.flags = 0;
  c.private_len = 93;
  CHECK(status_of(evil.call(Op::kCmConnect, c)) == EINVAL);
  c.private_len = 255;
  CHECK(status_of(evil.call(Op::kCmConnect, c)) == EINVAL);
  proto::CmSidrQueryReq sq;
  sq.path = wire_path(1, 2);
  sq.private_len = 217;
  CHECK(status_of(evil.call(Op::kCmSidrQuery, sq)) == EINVAL);
  CHECK(qp_state(evil, eqp.qp) == 0);

  // A connection id of the evil client's own, from a REQ of a libopenib
  // client on ibd B: accept with the victim's QP fails; reject's lengths
  // are checked; CM_INIT_QP_ATTR's state is 1..3.
  const uint32_t elisten = listen_when_up(evil, 0x6000);
  auto peer = open_side(pair.b->socket(), 65536);
  REQUIRE(peer.ok());
  auto peer_cm = CmChannel::open(*(*peer)->ctx);
  REQUIRE(peer_cm.ok());
  PathRecord pr = decode_path_record(wire_path(2, 1));
  REQUIRE((*peer_cm)->connect(*(*peer)->qp, pr, 0x6000, {}).ok());
  auto req = read_cm_event(evil_cm.get(), 5000);
  REQUIRE(req.has_value());
  REQUIRE(req->type == uint8_t(proto::CmEventType::kRequest));
  CHECK(req->listen_id == elisten);
  proto::CmAcceptReq acc;
  acc.id = req->id;
  acc.qp = vqp.qp;
  CHECK(status_of(evil.call(Op::kCmAccept, acc)) == ENOENT);
  CHECK(qp_state(victim, vqp.qp) == 0);
  CHECK(status_of(evil.call(Op::kCmInitQpAttr, proto::CmInitQpAttrReq{req->id, 7})) == EINVAL);
  CHECK(status_of(evil.call(Op::kCmInitQpAttr, proto::CmInitQpAttrReq{req->id, 0})) == EINVAL);
  proto::CmRejectReq rj;
  rj.id = req->id;
  rj.ari_len = 73;
  CHECK(status_of(evil.call(Op::kCmReject, rj)) == EINVAL);
  rj.ari_len = 0;
  rj.private_len = 149;
  CHECK(status_of(evil.call(Op::kCmReject, rj)) == EINVAL);
  proto::CmDisconnectReq dq;
  dq.id = req->id;
  dq.private_len = 221;
  CHECK(status_of(evil.call(Op::kCmDisconnect, dq)) == EINVAL);
  acc.qp = eqp.qp;
  acc.private_len = 197;
  CHECK(status_of(evil.call(Op::kCmAccept, acc)) == EINVAL);
  rj.private_len = 0;
  CHECK(status_of(evil.call(Op::kCmReject, rj)) == 0);
  auto rejected = (*peer_cm)->get_event(5000);
  REQUIRE(rejected.ok());
  CHECK(rejected->type == CmEventType::kRejected);

  // Garbage into the CM socket: ibd shut its read side, the write fails.
  const char junk[64] = "not an event";
  CHECK(::send(evil_cm.get(), junk, sizeof junk, MSG_DONTWAIT | MSG_NOSIGNAL) < 0);
  CHECK(errno == EPIPE);

  // The victim's listeners are all there (destroyable once), its QP in RESET;
  // ibd answers both clients.
  for (uint32_t h = 1; h <= 3; ++h) CHECK(status_of(victim.call(Op::kCmDestroy, proto::HandleReq{h})) == 0);
  CHECK(qp_state(victim, vqp.qp) == 0);
  CHECK(status_of(evil.call(Op::kInfo, proto::InfoReq{})) == 0);
  CHECK(status_of(victim.call(Op::kCmInfo, proto::Empty{})) == 0);
  CHECK_FALSE(read_cm_event(victim_cm.get(), 100).has_value());  // nothing was said to the victim
}

// A client that never reads its CM socket while events pile up: past
// --cm-max-queued-events (beyond what the socket holds) ibd closes it; the
// client reads what was queued, then end of file; counted; ibd serves on.
TEST_CASE("CM: a client that never reads its events loses its CM socket, not ibd its memory",
          "[hostile][cm]") {
  TempDir dir;
  // The answered SIDR queries stay ids until CM_DESTROY: more than the
  // default CM ids per client (docs/cm.md "Security") fill the socket.
  IbdPair pair(dir.path(), "warn", /*distinct_guids=*/true, /*shm_cable=*/false,
               {"--cm-max-queued-events", "8", "--client-max-cm-ids", "100000"});
  Ibd& a = *pair.a;

  Raw r(a.socket());
  r.hello();
  r.must<proto::Empty>(Op::kCmOpen, proto::Empty{});
  REQUIRE(r.last_fds().size() == 1);
  UniqueFd cm = std::move(r.last_fds()[0]);
  (void)listen_when_up(r, 0x7000);
  // SIDR queries to ibd B, where nobody listens: each answered (SIDR_REP,
  // status 1) and becomes an event, none read. Until ibd gives up on us.
  proto::CmSidrQueryReq q;
  q.service_id = 0x7100;
  q.path = wire_path(1, 2);
  auto overrun = [&] {
    auto j = ibdctl(a.socket(), "counters");
    return counter_in(j.out, "cm.sessions_overrun");
  };
  size_t sent = 0;
  for (int round = 0; round < 100 && overrun() < 1; ++round) {
    for (int i = 0; i < 500; ++i, ++sent) {
      auto o = r.call(Op::kCmSidrQuery, q);
      INFO("query " << sent << ": " << o.str());
      REQUIRE(status_of(o) == 0);
    }
    std::this_thread::sleep_for(200ms);  // the answers come back
  }
  REQUIRE(overrun() == 1);
  // What was in the socket, then end of file (ibd closed its end).
  size_t got = 0;
  int e = 0;
  while (auto m = read_cm_event(cm.get(), 2000, &e)) {
    CHECK(m->type == uint8_t(proto::CmEventType::kSidrReply));
    ++got;
  }
  INFO("sent " << sent << " queries, read " << got << " events, then errno " << e);
  CHECK(got > 0);
  CHECK(got < sent);
  CHECK((e == 0 || e == ECONNRESET));
  char c;
  CHECK(::recv(cm.get(), &c, 1, MSG_DONTWAIT) <= 0);
  // ibd serves this client (without CM events: EBUSY, its session stays) and others.
  CHECK(status_of(r.call(Op::kInfo, proto::InfoReq{})) == 0);
  Raw other(a.socket());
  other.hello();
  other.must<proto::Empty>(Op::kCmOpen, proto::Empty{});
  CHECK(status_of(other.call(Op::kCmInfo, proto::Empty{})) == 0);
}

// The RDMA CM's requests (docs/client-protocol.md §14, docs/cma.md "In
// ibd") from raw clients of an ibd without IPoIB: before CMA_OPEN, bodies
// of the wrong length or with fds, an unknown port space, private data
// past a message's limit, another client's ids and QPs, requests in the
// wrong state, writes into the event socket, privileged and taken ports.
// The victim client's id is untouched and ibd serves on.
namespace {
proto::CmaAddr cma_v4(uint8_t a, uint8_t b, uint8_t c, uint8_t d, uint16_t port) {
  return ipv4<proto::CmaAddr>(a, b, c, d, port);
}
proto::CmaAddr cma_any(uint16_t port) { return cma_v4(0, 0, 0, 0, port); }

// CMA_OPEN on a raw client; the event socket.
UniqueFd cma_open(Raw& r) {
  r.must<proto::Empty>(Op::kCmaOpen, proto::Empty{});
  REQUIRE(r.last_fds().size() == 1);
  return std::move(r.last_fds()[0]);
}
uint32_t cma_id(Raw& r, uint16_t ps = proto::kRdmaPsTcp) {
  return r.must<proto::HandleRep>(Op::kCmaCreateId, proto::CmaCreateIdReq{ps}).handle;
}
proto::CmaIdRep cma_query(Raw& r, uint32_t id) { return r.must<proto::CmaIdRep>(Op::kCmaQuery, proto::HandleReq{id}); }

std::optional<proto::CmaEventMsg> read_cma_event(int fd, int ms, int* errno_out = nullptr) {
  return read_cm_event<proto::CmaEventMsg>(fd, ms, errno_out);
}
long long cma_counter(const Ibd& ibd, const std::string& key) { return counter_in(ibdctl(ibd.socket(), "counters").out, key); }
}  // namespace

TEST_CASE("CMA requests: before CMA_OPEN, bad bodies, fds, port spaces, lengths, another client's ids and QPs",
          "[hostile][cma]") {
  TempDir dir;
  IbdPair pair(dir.path(), "warn", /*distinct_guids=*/true);
  Raw evil(pair.a->socket()), victim(pair.a->socket());
  evil.hello();
  victim.hello();

  // Before CMA_OPEN: ENOTCONN for every request on ids (CMA_INFO is ibd's, anyone's).
  CHECK(status_of(evil.call(Op::kCmaCreateId, proto::CmaCreateIdReq{})) == ENOTCONN);
  CHECK(status_of(evil.call(Op::kCmaBind, proto::CmaAddrReq{1, cma_any(7000)})) == ENOTCONN);
  CHECK(status_of(evil.call(Op::kCmaResolveAddr, proto::CmaResolveAddrReq{})) == ENOTCONN);
  CHECK(status_of(evil.call(Op::kCmaResolveRoute, proto::CmaIdTimeoutReq{})) == ENOTCONN);
  CHECK(status_of(evil.call(Op::kCmaListen, proto::CmaListenReq{})) == ENOTCONN);
  CHECK(status_of(evil.call(Op::kCmaInitQp, proto::CmaQpReq{})) == ENOTCONN);
  CHECK(status_of(evil.call(Op::kCmaConnect, proto::CmaConnReq{})) == ENOTCONN);
  CHECK(status_of(evil.call(Op::kCmaAccept, proto::CmaConnReq{})) == ENOTCONN);
  CHECK(status_of(evil.call(Op::kCmaReject, proto::CmaRejectReq{})) == ENOTCONN);
  CHECK(status_of(evil.call(Op::kCmaDisconnect, proto::HandleReq{1})) == ENOTCONN);
  CHECK(status_of(evil.call(Op::kCmaDestroyId, proto::HandleReq{1})) == ENOTCONN);
  CHECK(status_of(evil.call(Op::kCmaJoin, proto::CmaJoinReq{})) == ENOTCONN);
  CHECK(status_of(evil.call(Op::kCmaLeave, proto::CmaJoinReq{})) == ENOTCONN);
  CHECK(status_of(evil.call(Op::kCmaQuery, proto::HandleReq{1})) == ENOTCONN);
  CHECK(status_of(evil.call(Op::kCmaInitQpAttr, proto::CmaInitQpAttrReq{1, 1})) == ENOTCONN);
  CHECK(status_of(evil.call(Op::kCmaConnectOwnQp, proto::CmaConnReq{})) == ENOTCONN);
  CHECK(status_of(evil.call(Op::kCmaAcceptOwnQp, proto::CmaConnReq{})) == ENOTCONN);
  CHECK(status_of(evil.call(Op::kCmaEstablish, proto::HandleReq{1})) == ENOTCONN);
  CHECK(status_of(evil.call(Op::kCmaInfo, proto::Empty{})) == 0);

  // CMA_OPEN: a body, or an fd, is refused; then one event socket, once.
  CHECK(status_of(evil.call_bytes(uint16_t(Op::kCmaOpen), bytes_of(4))) == EINVAL);
  {
    UniqueFd f = make_memfd(4096);
    int fd = f.get();
    CHECK(status_of(evil.call_bytes(uint16_t(Op::kCmaOpen), {}, {&fd, 1})) == EINVAL);
  }
  UniqueFd evil_ev = cma_open(evil);
  CHECK(status_of(evil.call(Op::kCmaOpen, proto::Empty{})) == EBUSY);
  UniqueFd victim_ev = cma_open(victim);

  // The victim's id, bound to a port (handles are per client: the victim
  // makes a few, so that its id's handle is above the evil client's own).
  for (int i = 0; i < 7; ++i) (void)cma_id(victim);
  const uint32_t vid = cma_id(victim);
  REQUIRE(vid == 8);
  victim.must<proto::CmaAddrRep>(Op::kCmaBind, proto::CmaAddrReq{vid, cma_any(7001)});
  const proto::CmaIdRep vbefore = cma_query(victim, vid);
  CHECK(vbefore.state == uint8_t(proto::CmaState::kAddrBound));
  CHECK(vbefore.src.port == 7001);
  for (int i = 0; i < 16; ++i) victim.must<proto::HandleRep>(Op::kAllocPd, proto::Empty{});
  RawQp vqp(victim);

  // Bodies one byte short or long: EPROTO (as every request's, §3); an fd with a request: EINVAL.
  auto wrong_lengths = [&](Op op, const proto::Bytes& b) {
    INFO(proto::op_name(uint16_t(op)));
    CHECK(status_of(evil.call_bytes(uint16_t(op), std::span(b.data(), b.size() - 1))) == EPROTO);
    auto longer = b;
    longer.push_back(std::byte{0});
    CHECK(status_of(evil.call_bytes(uint16_t(op), longer)) == EPROTO);
    UniqueFd f = make_memfd(4096);
    int fd = f.get();
    CHECK(status_of(evil.call_bytes(uint16_t(op), b, {&fd, 1})) == EINVAL);
  };
  wrong_lengths(Op::kCmaCreateId, proto::encode(proto::CmaCreateIdReq{}));
  wrong_lengths(Op::kCmaBind, proto::encode(proto::CmaAddrReq{}));
  wrong_lengths(Op::kCmaResolveAddr, proto::encode(proto::CmaResolveAddrReq{}));
  wrong_lengths(Op::kCmaResolveRoute, proto::encode(proto::CmaIdTimeoutReq{}));
  wrong_lengths(Op::kCmaListen, proto::encode(proto::CmaListenReq{}));
  wrong_lengths(Op::kCmaInitQp, proto::encode(proto::CmaQpReq{}));
  wrong_lengths(Op::kCmaConnect, proto::encode(proto::CmaConnReq{}));
  wrong_lengths(Op::kCmaAccept, proto::encode(proto::CmaConnReq{}));
  wrong_lengths(Op::kCmaReject, proto::encode(proto::CmaRejectReq{}));
  wrong_lengths(Op::kCmaDisconnect, proto::encode(proto::HandleReq{}));
  wrong_lengths(Op::kCmaDestroyId, proto::encode(proto::HandleReq{}));
  wrong_lengths(Op::kCmaJoin, proto::encode(proto::CmaJoinReq{}));
  wrong_lengths(Op::kCmaLeave, proto::encode(proto::CmaJoinReq{}));
  wrong_lengths(Op::kCmaQuery, proto::encode(proto::HandleReq{}));
  wrong_lengths(Op::kCmaInitQpAttr, proto::encode(proto::CmaInitQpAttrReq{}));
  wrong_lengths(Op::kCmaConnectOwnQp, proto::encode(proto::CmaConnReq{}));
  wrong_lengths(Op::kCmaAcceptOwnQp, proto::encode(proto::CmaConnReq{}));
  wrong_lengths(Op::kCmaEstablish, proto::encode(proto::HandleReq{}));
  CHECK(status_of(evil.call_bytes(uint16_t(Op::kCmaInfo), bytes_of(1))) == EINVAL);

  // Port spaces: only TCP, UDP, IPoIB and IB.
  for (uint16_t ps : {uint16_t{0}, uint16_t{1}, uint16_t{0x0107}, uint16_t{0xFFFF}}) {
    INFO("port space " << ps);
    CHECK(status_of(evil.call(Op::kCmaCreateId, proto::CmaCreateIdReq{ps})) == EPROTONOSUPPORT);
  }

  // The victim's id names nothing of the evil client's.
  CHECK(status_of(evil.call(Op::kCmaBind, proto::CmaAddrReq{vid, cma_any(7002)})) == ENOENT);
  CHECK(status_of(evil.call(Op::kCmaResolveAddr, proto::CmaResolveAddrReq{.id = vid, .dst = cma_v4(198, 18, 0, 2, 1)})) ==
        ENOENT);
  CHECK(status_of(evil.call(Op::kCmaResolveRoute, proto::CmaIdTimeoutReq{vid})) == ENOENT);
  CHECK(status_of(evil.call(Op::kCmaListen, proto::CmaListenReq{vid})) == ENOENT);
  CHECK(status_of(evil.call(Op::kCmaInitQp, proto::CmaQpReq{vid, vqp.qp})) == ENOENT);
  CHECK(status_of(evil.call(Op::kCmaConnect, proto::CmaConnReq{.id = vid, .qp = vqp.qp})) == ENOENT);
  CHECK(status_of(evil.call(Op::kCmaAccept, proto::CmaConnReq{.id = vid, .qp = vqp.qp})) == ENOENT);
  CHECK(status_of(evil.call(Op::kCmaReject, proto::CmaRejectReq{.id = vid})) == ENOENT);
  CHECK(status_of(evil.call(Op::kCmaDisconnect, proto::HandleReq{vid})) == ENOENT);
  CHECK(status_of(evil.call(Op::kCmaJoin, proto::CmaJoinReq{.id = vid, .qp = vqp.qp, .group = cma_v4(224, 1, 1, 1, 0)})) ==
        ENOENT);
  CHECK(status_of(evil.call(Op::kCmaLeave, proto::CmaJoinReq{.id = vid, .group = cma_v4(224, 1, 1, 1, 0)})) == ENOENT);
  CHECK(status_of(evil.call(Op::kCmaQuery, proto::HandleReq{vid})) == ENOENT);
  CHECK(status_of(evil.call(Op::kCmaInitQpAttr, proto::CmaInitQpAttrReq{vid, 1})) == ENOENT);
  CHECK(status_of(evil.call(Op::kCmaConnectOwnQp, proto::CmaConnReq{.id = vid, .qp = vqp.qp})) == ENOENT);
  CHECK(status_of(evil.call(Op::kCmaAcceptOwnQp, proto::CmaConnReq{.id = vid, .qp = vqp.qp})) == ENOENT);
  CHECK(status_of(evil.call(Op::kCmaEstablish, proto::HandleReq{vid})) == ENOENT);
  CHECK(status_of(evil.call(Op::kCmaDestroyId, proto::HandleReq{vid})) == ENOENT);

  // The evil client's own ids with the victim's QP: ENOENT, the QP stays in RESET.
  RawQp eqp(evil);
  REQUIRE(eqp.qp < vqp.qp);
  const uint32_t tcp = cma_id(evil);
  const uint32_t udp = cma_id(evil, proto::kRdmaPsUdp);
  CHECK(status_of(evil.call(Op::kCmaInitQp, proto::CmaQpReq{tcp, vqp.qp})) == ENOENT);
  CHECK(status_of(evil.call(Op::kCmaInitQp, proto::CmaQpReq{udp, vqp.qp})) == ENOENT);
  // (A UD id on the loopback address has its device: a join gets as far as the QP.)
  evil.must<proto::CmaAddrRep>(Op::kCmaBind, proto::CmaAddrReq{udp, cma_v4(127, 0, 0, 1, 0)});
  CHECK(status_of(evil.call(Op::kCmaJoin, proto::CmaJoinReq{.id = udp, .qp = vqp.qp, .group = cma_v4(224, 1, 1, 1, 0)})) ==
        ENOENT);
  CHECK(qp_state(victim, vqp.qp) == 0);
  // Own QPs: a UD id with its device answers INIT from itself (its port,
  // P_Key index 0, the UDP space's Q_Key; docs/cma.md "Own QPs").
  const auto ia = evil.must<proto::CmInitQpAttrRep>(Op::kCmaInitQpAttr, proto::CmaInitQpAttrReq{udp, 1});
  CHECK(ia.attr.state == 1);
  CHECK(ia.attr.port == 1);
  CHECK(ia.attr.pkey_index == 0);
  CHECK(ia.attr.qkey == 0x01234567);
  CHECK(ia.attr.mask == (1u | 16u | 32u | 64u));  // IBV_QP_STATE, PKEY_INDEX, PORT, QKEY

  // State errors: EINVAL.
  CHECK(status_of(evil.call(Op::kCmaConnectOwnQp, proto::CmaConnReq{.id = tcp, .qp = 1})) == EINVAL);  // no route
  CHECK(status_of(evil.call(Op::kCmaAcceptOwnQp, proto::CmaConnReq{.id = tcp, .qp = 1})) == EINVAL);
  CHECK(status_of(evil.call(Op::kCmaEstablish, proto::HandleReq{tcp})) == EINVAL);  // no own-QP connect
  CHECK(status_of(evil.call(Op::kCmaInitQpAttr, proto::CmaInitQpAttrReq{tcp, 1})) == EINVAL);  // no device yet
  CHECK(status_of(evil.call(Op::kCmaInitQpAttr, proto::CmaInitQpAttrReq{udp, 4})) == EINVAL);  // not INIT..RTS
  CHECK(status_of(evil.call(Op::kCmaConnect, proto::CmaConnReq{.id = tcp, .qp = eqp.qp})) == EINVAL);  // no route
  CHECK(status_of(evil.call(Op::kCmaConnect, proto::CmaConnReq{.id = tcp, .qp = vqp.qp})) == EINVAL);
  CHECK(status_of(evil.call(Op::kCmaResolveRoute, proto::CmaIdTimeoutReq{tcp})) == EINVAL);  // no address
  CHECK(status_of(evil.call(Op::kCmaAccept, proto::CmaConnReq{.id = tcp, .qp = eqp.qp})) == EINVAL);
  CHECK(status_of(evil.call(Op::kCmaReject, proto::CmaRejectReq{.id = tcp})) == EINVAL);
  CHECK(status_of(evil.call(Op::kCmaDisconnect, proto::HandleReq{tcp})) == EINVAL);
  CHECK(status_of(evil.call(Op::kCmaDisconnect, proto::HandleReq{udp})) == EINVAL);  // UD: nothing to disconnect
  CHECK(status_of(evil.call(Op::kCmaInitQp, proto::CmaQpReq{tcp, 0})) == ENOENT);
  CHECK(status_of(evil.call(Op::kCmaJoin, proto::CmaJoinReq{.id = tcp, .qp = eqp.qp, .group = cma_v4(224, 1, 1, 1, 0)})) ==
        EINVAL);  // not a UD id
  CHECK(status_of(evil.call(Op::kCmaBind, proto::CmaAddrReq{udp, cma_any(0)})) == EINVAL);  // bound already
  CHECK(status_of(evil.call(Op::kCmaBind, proto::CmaAddrReq{tcp, cma_v4(198, 18, 0, 1, 0)})) == EADDRNOTAVAIL);
  CHECK(status_of(evil.call(Op::kCmaResolveAddr, proto::CmaResolveAddrReq{.id = tcp, .dst = cma_any(1)})) == EINVAL);
  CHECK(qp_state(evil, eqp.qp) == 0);

  // A connect request of the evil client's own, from an IB CM client on
  // ibd B with rdma_cm's service ID and CMA header: accept with the
  // victim's QP is ENOENT; private data past a REP (196) or REJ (148) is
  // EINVAL; listen on it is EINVAL; then it is rejected.
  const uint32_t lid = cma_id(evil);
  evil.must<proto::CmaAddrRep>(Op::kCmaBind, proto::CmaAddrReq{lid, cma_any(7100)});
  evil.must<proto::Empty>(Op::kCmaListen, proto::CmaListenReq{lid, 4});
  CHECK(status_of(evil.call(Op::kCmaResolveAddr, proto::CmaResolveAddrReq{.id = lid, .dst = cma_v4(198, 18, 0, 2, 1)})) ==
        EINVAL);  // a listener
  auto peer = open_side(pair.b->socket(), 65536);
  REQUIRE(peer.ok());
  auto peer_cm = CmChannel::open(*(*peer)->ctx);
  REQUIRE(peer_cm.ok());
  CmConnParams cp;
  const std::vector<uint8_t> four(4, 0xEE);
  cp.private_data = with_cma_header(ipv4<cma::Addr>(198, 18, 0, 2, 5000), ipv4<cma::Addr>(198, 18, 0, 1, 7100), four);
  REQUIRE((*peer_cm)->connect(*(*peer)->qp, decode_path_record(wire_path(2, 1)), cma::service_id(cma::kPsTcp, 7100), cp).ok());
  auto req = read_cma_event(evil_ev.get(), 5000);
  REQUIRE(req.has_value());
  REQUIRE(req->type == uint8_t(proto::CmaEventType::kConnectRequest));
  CHECK(req->listen_id == lid);
  CHECK(req->dst.port == 5000);
  CHECK(req->private_len == 56);  // the REQ's 92 bytes less the header
  CHECK(status_of(evil.call(Op::kCmaAccept, proto::CmaConnReq{.id = req->id, .qp = vqp.qp})) == ENOENT);
  CHECK(qp_state(victim, vqp.qp) == 0);
  // Own QPs are named by QP number, looked up among the caller's QPs only:
  // the victim's number is ENOENT, and its QP stays in RESET.
  CHECK(status_of(evil.call(Op::kCmaAcceptOwnQp, proto::CmaConnReq{.id = req->id, .qp = vqp.qpn})) == ENOENT);
  CHECK(qp_state(victim, vqp.qp) == 0);
  CHECK(status_of(evil.call(Op::kCmaEstablish, proto::HandleReq{req->id})) == EINVAL);  // a passive id
  // The connect request's own attributes: RTR names the peer's QP, RTS has the send side.
  const auto rtr = evil.must<proto::CmInitQpAttrRep>(Op::kCmaInitQpAttr, proto::CmaInitQpAttrReq{req->id, 2});
  CHECK(rtr.attr.state == 2);
  CHECK(rtr.attr.dest_qpn == (*peer)->qp->qp_num());
  const auto rts = evil.must<proto::CmInitQpAttrRep>(Op::kCmaInitQpAttr, proto::CmaInitQpAttrReq{req->id, 3});
  CHECK(rts.attr.state == 3);
  CHECK(status_of(evil.call(Op::kCmaAccept, proto::CmaConnReq{.id = req->id, .qp = eqp.qp, .private_len = 197})) ==
        EINVAL);
  CHECK(status_of(evil.call(Op::kCmaReject, proto::CmaRejectReq{.id = req->id, .private_len = 149})) == EINVAL);
  CHECK(status_of(evil.call(Op::kCmaListen, proto::CmaListenReq{req->id})) == EINVAL);
  CHECK(qp_state(evil, eqp.qp) == 0);
  CHECK(status_of(evil.call(Op::kCmaReject, proto::CmaRejectReq{.id = req->id, .private_len = 148})) == 0);
  auto rejected = (*peer_cm)->get_event(5000);
  REQUIRE(rejected.ok());
  CHECK(rejected->type == CmEventType::kRejected);
  CHECK(status_of(evil.call(Op::kCmaAccept, proto::CmaConnReq{.id = req->id, .qp = eqp.qp})) == EINVAL);  // answered

  // Writes into the event socket: ibd shut its read side.
  const char junk[64] = "not an event";
  CHECK(::send(evil_ev.get(), junk, sizeof junk, MSG_DONTWAIT | MSG_NOSIGNAL) < 0);
  CHECK(errno == EPIPE);

  // The victim's id is as it was, and destroyable once; ibd answers both clients.
  const proto::CmaIdRep vafter = cma_query(victim, vid);
  CHECK(vafter.state == vbefore.state);
  CHECK(vafter.src.port == vbefore.src.port);
  CHECK(vafter.src.family == vbefore.src.family);
  CHECK(vafter.qpn == 0);
  CHECK(status_of(victim.call(Op::kCmaDestroyId, proto::HandleReq{vid})) == 0);
  CHECK(status_of(victim.call(Op::kCmaDestroyId, proto::HandleReq{vid})) == ENOENT);
  CHECK(qp_state(victim, vqp.qp) == 0);
  CHECK(status_of(evil.call(Op::kInfo, proto::InfoReq{})) == 0);
  CHECK(status_of(victim.call(Op::kCmaInfo, proto::Empty{})) == 0);
  CHECK_FALSE(read_cma_event(victim_ev.get(), 100).has_value());  // nothing was said to the victim
}

// Ports (docs/cma.md "Ports"): below 1024 for root only; one port, one
// owner per port space; a dead client's ids are torn down and its ports
// free; port 0 is an ephemeral port in 32768..60999.
TEST_CASE("CMA binds: privileged ports, a port taken, freed when its client goes, ephemeral ports", "[hostile][cma]") {
  TempDir dir;
  Ibd ibd(dir.path(), "a", IbdOptions{});
  const std::string sock = ibd.socket();
  auto bind_port = [&](uint16_t port) {
    Raw r(sock);
    if (status_of(r.call(Op::kHello, proto::HelloReq{})) != 0) return -2;
    auto o = r.call(Op::kCmaOpen, proto::Empty{});
    if (status_of(o) != 0) return -3;
    o = r.call(Op::kCmaCreateId, proto::CmaCreateIdReq{});
    if (status_of(o) != 0) return -4;
    const uint32_t id = proto::decode<proto::HandleRep>(o.reply.payload)->handle;
    return status_of(r.call(Op::kCmaBind, proto::CmaAddrReq{id, cma_any(port)}));
  };
  auto nobody = run_as_nobody([&] { return std::vector<int>{bind_port(100), bind_port(1023), bind_port(7200)}; });
  REQUIRE(nobody.size() == 3);
  CHECK(nobody[0] == EACCES);
  CHECK(nobody[1] == EACCES);
  CHECK(nobody[2] == 0);
  CHECK(bind_port(100) == 0);  // root (and each client's port went with it)
  REQUIRE(wait_until([&] { return cma_counter(ibd, "cma.ids") == 0; }, 10s));

  // Two clients, one port: EADDRINUSE, also for the loopback address
  // beside a wildcard; free once the first client's connection closed.
  auto first = std::make_unique<Raw>(sock);
  first->hello();
  UniqueFd ev1 = cma_open(*first);
  const uint32_t a = cma_id(*first);
  const uint32_t a2 = cma_id(*first);
  first->must<proto::CmaAddrRep>(Op::kCmaBind, proto::CmaAddrReq{a, cma_any(7300)});
  first->must<proto::Empty>(Op::kCmaListen, proto::CmaListenReq{a2});  // a listener on an ephemeral port
  Raw second(sock);
  second.hello();
  UniqueFd ev2 = cma_open(second);
  const uint32_t b = cma_id(second);
  CHECK(status_of(second.call(Op::kCmaBind, proto::CmaAddrReq{b, cma_any(7300)})) == EADDRINUSE);
  CHECK(status_of(second.call(Op::kCmaBind, proto::CmaAddrReq{b, cma_v4(127, 0, 0, 1, 7300)})) == EADDRINUSE);
  CHECK(cma_counter(ibd, "cma.ids") == 3);
  CHECK(cma_counter(ibd, "cma.bound_ports") == 2);
  // (Another port space has ports of its own.)
  const uint32_t u = cma_id(second, proto::kRdmaPsUdp);
  CHECK(status_of(second.call(Op::kCmaBind, proto::CmaAddrReq{u, cma_any(7300)})) == 0);
  second.must<proto::Empty>(Op::kCmaDestroyId, proto::HandleReq{u});
  first.reset();
  CHECK(wait_until([&] { return cma_counter(ibd, "cma.ids") == 1 && cma_counter(ibd, "cma.bound_ports") == 0; }, 10s));
  CHECK(status_of(second.call(Op::kCmaBind, proto::CmaAddrReq{b, cma_any(7300)})) == 0);
  CHECK(cma_counter(ibd, "cma.bound_ports") == 1);

  // Port 0: ephemeral ports, each its own, in ip_local_port_range's default.
  std::set<uint16_t> got;
  for (int i = 0; i < 20; ++i) {
    const uint32_t e = cma_id(second);
    auto rep = second.must<proto::CmaAddrRep>(Op::kCmaBind, proto::CmaAddrReq{e, cma_any(0)});
    INFO("ephemeral port " << rep.addr.port);
    CHECK(rep.addr.port >= 32768);
    CHECK(rep.addr.port <= 60999);
    got.insert(rep.addr.port);
    const proto::CmaIdRep q = cma_query(second, e);
    CHECK(q.state == uint8_t(proto::CmaState::kAddrBound));
    CHECK(q.src.port == rep.addr.port);
  }
  CHECK(got.size() == 20);
  CHECK(cma_counter(ibd, "cma.bound_ports") == 21);
  CHECK(ibd.alive());
}

// Address resolution on an ibd without IPoIB: an ADDR_ERROR event with
// -ENODEV, not a crash. A client that never reads its events: past
// --cm-max-queued-events ibd closes its event socket; counted; ibd serves on.
TEST_CASE("CMA: ADDR_ERROR without IPoIB; a client that never reads its events loses its event socket",
          "[hostile][cma]") {
  TempDir dir;
  IbdOptions opts;
  opts.extra_args = {"--cm-max-queued-events", "8"};
  Ibd ibd(dir.path(), "a", opts);
  Raw r(ibd.socket());
  r.hello();
  UniqueFd ev = cma_open(r);
  const uint32_t id = cma_id(r);
  proto::CmaResolveAddrReq q;
  q.id = id;
  q.dst = cma_v4(198, 18, 0, 2, 7471);
  r.must<proto::Empty>(Op::kCmaResolveAddr, q);
  auto e = read_cma_event(ev.get(), 5000);
  REQUIRE(e.has_value());
  CHECK(e->type == uint8_t(proto::CmaEventType::kAddrError));
  CHECK(e->status == -ENODEV);
  CHECK(e->id == id);
  CHECK(e->dst.port == 7471);
  CHECK(cma_query(r, id).state == uint8_t(proto::CmaState::kAddrBound));  // bound by the resolution
  REQUIRE(ibd.alive());

  // Resolutions, each an ADDR_ERROR, none read. Until ibd gives up on us.
  size_t sent = 0;
  for (int round = 0; round < 100 && cma_counter(ibd, "cma.sessions_overrun") < 1; ++round) {
    for (int i = 0; i < 500; ++i) {
      auto o = r.call(Op::kCmaResolveAddr, q);
      INFO("resolution " << sent << ": " << o.str());
      REQUIRE(o.kind == Outcome::kReplied);
      // (EINVAL: the previous one's answer not in yet, the id still resolving.)
      REQUIRE((o.reply.status == 0 || o.reply.status == EINVAL));
      sent += o.reply.status == 0;
    }
  }
  REQUIRE(cma_counter(ibd, "cma.sessions_overrun") == 1);
  size_t got = 0;
  int err_no = 0;
  while (auto m = read_cma_event(ev.get(), 2000, &err_no)) {
    CHECK(m->type == uint8_t(proto::CmaEventType::kAddrError));
    ++got;
  }
  INFO("sent " << sent << " resolutions, read " << got << " events, then errno " << err_no);
  CHECK(got > 0);
  CHECK(got < sent);
  CHECK((err_no == 0 || err_no == ECONNRESET));
  char c;
  CHECK(::recv(ev.get(), &c, 1, MSG_DONTWAIT) <= 0);
  // ibd serves this client (its session and ids stay; CMA_OPEN again is EBUSY) and others.
  CHECK(status_of(r.call(Op::kCmaQuery, proto::HandleReq{id})) == 0);
  CHECK(status_of(r.call(Op::kCmaOpen, proto::Empty{})) == EBUSY);
  // More events for the closed socket are dropped, not counted again.
  const long long events = cma_counter(ibd, "cma.events");
  REQUIRE(wait_until([&] { return status_of(r.call(Op::kCmaResolveAddr, q)) == 0; }, 5s));
  CHECK(wait_until([&] { return cma_counter(ibd, "cma.events") > events; }, 5s));
  Raw other(ibd.socket());
  other.hello();
  UniqueFd ev2 = cma_open(other);
  const uint32_t oid = cma_id(other);
  other.must<proto::CmaAddrRep>(Op::kCmaBind, proto::CmaAddrReq{oid, cma_any(7400)});
  other.must<proto::Empty>(Op::kCmaListen, proto::CmaListenReq{oid});
  CHECK(cma_query(other, oid).state == uint8_t(proto::CmaState::kListen));
  CHECK(cma_counter(ibd, "cma.sessions_overrun") == 1);
}

// MAP_MEM_SHARED (protocol 8; docs/client-protocol.md §3): ibd opens, as
// root, the file behind a shared mapping of the client's, so it must open
// only what the client itself maps read-write on tmpfs or hugetlbfs, and
// only while the process that connected is still the client's.
TEST_CASE("MAP_MEM_SHARED: memory that is not a writable shared tmpfs mapping of the client's own, a "
          "connecting process that changed its IDs or is gone",
          "[hostile]") {
  TempDir dir;
  IbdPair pair(dir.path());
  const std::string sa = pair.a->socket();
  auto shared_call = [](Raw& r, const void* p, uint64_t len) {
    return r.call(Op::kMapMemShared, proto::MapMemRangeReq{reinterpret_cast<uint64_t>(p), len});
  };
  Raw r(sa);
  r.hello();
  constexpr size_t kLen = 4 * 4096;
  void* anon = ::mmap(nullptr, kLen, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  REQUIRE(anon != MAP_FAILED);
  auto* a = static_cast<uint8_t*>(anon);
  // The good case first: shared anonymous memory maps.
  {
    auto mem = r.must<proto::MapMemRep>(Op::kMapMemShared, proto::MapMemRangeReq{uint64_t(anon) + 4096, 8192});
    r.must<proto::Empty>(Op::kUnmapMem, proto::HandleReq{mem.handle});
  }
  // Ranges: EINVAL.
  CHECK(status_of(shared_call(r, a, 0)) == EINVAL);
  CHECK(status_of(shared_call(r, a, 4097)) == EINVAL);
  CHECK(status_of(shared_call(r, a + 100, 4096)) == EINVAL);
  CHECK(status_of(r.call(Op::kMapMemShared, proto::MapMemRangeReq{~0ull - 4095, 8192})) == EINVAL);
  CHECK(status_of(shared_call(r, a, kLen + 4096)) == EINVAL);  // runs past the mapping
  CHECK(status_of(r.call(Op::kMapMemShared, proto::MapMemRangeReq{4096, 4096})) == EINVAL);  // nothing mapped
  {
    UniqueFd f = make_memfd(4096);
    int fd = f.get();
    CHECK(status_of(r.call(Op::kMapMemShared, proto::MapMemRangeReq{uint64_t(anon), 4096}, {&fd, 1})) == EINVAL);
  }
  // Private memory (reg_mr remaps that itself): EINVAL.
  void* priv = ::mmap(nullptr, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  REQUIRE(priv != MAP_FAILED);
  CHECK(status_of(shared_call(r, priv, 8192)) == EINVAL);
  // A range across a shared and a private mapping: EINVAL.
  void* mixed = ::mmap(nullptr, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  REQUIRE(mixed != MAP_FAILED);
  REQUIRE(::mmap(static_cast<uint8_t*>(mixed) + 4096, 4096, PROT_READ | PROT_WRITE,
                 MAP_SHARED | MAP_ANONYMOUS | MAP_FIXED, -1, 0) != MAP_FAILED);
  CHECK(status_of(shared_call(r, mixed, 8192)) == EINVAL);
  // Two tmpfs files side by side: EINVAL.
  UniqueFd f1(::memfd_create("hostile-1", MFD_CLOEXEC)), f2(::memfd_create("hostile-2", MFD_CLOEXEC));
  REQUIRE(::ftruncate(f1.get(), 8192) == 0);
  REQUIRE(::ftruncate(f2.get(), 8192) == 0);
  void* two = ::mmap(nullptr, 8192, PROT_READ | PROT_WRITE, MAP_SHARED, f1.get(), 0);
  REQUIRE(two != MAP_FAILED);
  REQUIRE(::mmap(static_cast<uint8_t*>(two) + 4096, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, f2.get(),
                 4096) != MAP_FAILED);
  CHECK(status_of(shared_call(r, two, 8192)) == EINVAL);
  CHECK(status_of(shared_call(r, static_cast<uint8_t*>(two) + 4096, 4096)) == 0);  // one file alone maps
  // A tmpfs file the client maps read-only (it was opened read-only: ibd,
  // root, must not write it): EACCES.
  std::string shm = "/dev/shm/openib-hostile-ro-" + std::to_string(::getpid());
  {
    UniqueFd w(::open(shm.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
    REQUIRE(w.valid());
    REQUIRE(::ftruncate(w.get(), 8192) == 0);
  }
  UniqueFd ro(::open(shm.c_str(), O_RDONLY | O_CLOEXEC));
  ::unlink(shm.c_str());
  REQUIRE(ro.valid());
  void* rom = ::mmap(nullptr, 8192, PROT_READ, MAP_SHARED, ro.get(), 0);
  REQUIRE(rom != MAP_FAILED);
  CHECK(status_of(shared_call(r, rom, 8192)) == EACCES);
  // A file on a file system with writeback (the test's directory, not
  // tmpfs): EINVAL.
  std::string plain = dir.path() + "/shared-plain";
  UniqueFd pf(::open(plain.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
  REQUIRE(::ftruncate(pf.get(), 8192) == 0);
  void* pm = ::mmap(nullptr, 8192, PROT_READ | PROT_WRITE, MAP_SHARED, pf.get(), 0);
  REQUIRE(pm != MAP_FAILED);
  struct statfs fs{};
  REQUIRE(::fstatfs(pf.get(), &fs) == 0);
  INFO("the test's directory " << dir.path() << " must not be on tmpfs (TMPDIR)");
  REQUIRE(fs.f_type != TMPFS_MAGIC);
  CHECK(status_of(shared_call(r, pm, 8192)) == EINVAL);

  // The connecting process decides whose memory it is. A child connects
  // and hands the socket over; while it runs as the socket's uid its
  // shared memory maps, once it has switched to nobody it does not
  // (EPERM: its memory is no longer the client's), once it is gone: ESRCH.
  int sv[2], go[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
  REQUIRE(::pipe2(go, O_CLOEXEC) == 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  REQUIRE(sa.size() < sizeof addr.sun_path);
  std::memcpy(addr.sun_path, sa.c_str(), sa.size());
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    // System calls only (another thread may hold the allocator's lock).
    ::close(go[1]);  // (the parent's closing it ends the child)
    int s = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (s < 0 || ::connect(s, reinterpret_cast<sockaddr*>(&addr), sizeof addr) < 0) ::_exit(1);
    const char one = 'c';
    if (send_with_fd(sv[1], &one, 1, s) != 1) ::_exit(2);
    char cmd = 0;
    if (::read(go[0], &cmd, 1) != 1) ::_exit(0);  // told to end
    if (::setresgid(65534, 65534, 65534) != 0 || ::setresuid(65534, 65534, 65534) != 0) ::_exit(3);
    if (::write(sv[1], &cmd, 1) != 1) ::_exit(4);
    (void)::read(go[0], &cmd, 1);  // until told to end
    ::_exit(0);
  }
  ::close(go[0]);
  UniqueFd go_w(go[1]), mine(sv[0]), theirs(sv[1]);
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  char one = 0;
  iovec iov{&one, 1};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  REQUIRE(::recvmsg(mine.get(), &msg, MSG_CMSG_CLOEXEC) == 1);
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  REQUIRE(c != nullptr);
  int got = -1;
  std::memcpy(&got, CMSG_DATA(c), sizeof got);
  Raw theirs_conn{UniqueFd(got)};
  theirs_conn.hello();
  {
    // (The child inherited `anon`: the same memory at the same address.)
    auto mem = theirs_conn.must<proto::MapMemRep>(Op::kMapMemShared, proto::MapMemRangeReq{uint64_t(anon), 8192});
    theirs_conn.must<proto::Empty>(Op::kUnmapMem, proto::HandleReq{mem.handle});
  }
  char cmd = 'u';
  REQUIRE(::write(go_w.get(), &cmd, 1) == 1);
  REQUIRE(::read(mine.get(), &cmd, 1) == 1);  // switched
  CHECK(status_of(shared_call(theirs_conn, anon, 8192)) == EPERM);
  go_w.reset();  // the child ends
  int st = 0;
  REQUIRE(::waitpid(child, &st, 0) == child);
  CHECK(WIFEXITED(st));
  CHECK(WEXITSTATUS(st) == 0);
  CHECK(status_of(shared_call(theirs_conn, anon, 8192)) == ESRCH);
  // ibd serves on: the first client still maps.
  CHECK(status_of(shared_call(r, a, 4096)) == 0);
  for (auto [p, n] : {std::pair{anon, kLen}, {priv, size_t(8192)}, {mixed, size_t(8192)}, {two, size_t(8192)},
                      {rom, size_t(8192)}, {pm, size_t(8192)}})
    ::munmap(p, n);
}
