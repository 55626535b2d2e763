// libopenib's PathResolver (include/openib/path.hpp) against a real ibd
// (docs/library.md "Path resolution"; docs/client-protocol.md "Path
// records"). This ibd has no SM (its port is set up statically), so:
//  - a miss gets the error PATH_QUERY gives (ENETUNREACH), synchronously
//    and through the resolver's fd;
//  - a real table hit comes from the path cache file: ibd restores its
//    entries at start (stale, and they stay: no SM to revalidate them),
//    publishes them, and the resolver reads them with no message to ibd;
//  - a hostile client that got the table's fd can change nothing in it, and
//    a client that goes right after getting the fd leaves ibd serving.
#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "clientproto/socket.hpp"
#include "harness.hpp"
#include "json_flat.hpp"
#include "openib/path.hpp"
#include "sa/cache_file.hpp"

using namespace openib;
using namespace openib::testing;
using namespace std::chrono_literals;

namespace {

std::map<std::string, double> info(const Ibd& ibd) {
  RunResult r = ibdctl(ibd.socket(), "counters");
  REQUIRE(r.exited_ok());
  return flatten_json(r.out);
}
// A counter of ibdctl's JSON by its last name ("counters.requests" before a
// client's own "requests"); -1 if absent.
double counter(const std::map<std::string, double>& m, const std::string& name) {
  for (const std::string& k : {"counters." + name, name, "sa." + name, "counters.sa." + name})
    if (auto it = m.find(k); it != m.end()) return it->second;
  for (const auto& [k, v] : m)
    if (k.ends_with("." + name) && k.find('[') == std::string::npos) return v;
  return -1;
}

template <class T>
T must(Result<T> r, const char* what) {
  INFO(what << ": " << (r ? std::string("ok") : r.error().str()));
  REQUIRE(r.ok());
  return std::move(*r);
}

Gid remote_gid() {
  Gid g;
  g.raw = {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 2, 0xc9, 3, 0, 0, 0, 0x42};
  return g;
}

// Waits (bounded) for `fd` readable, then polls the resolver until `n`
// completions came.
std::vector<PathCompletion> completions(PathResolver& r, size_t n) {
  std::vector<PathCompletion> got;
  const auto deadline = std::chrono::steady_clock::now() + 15s;
  while (got.size() < n && std::chrono::steady_clock::now() < deadline) {
    pollfd p{r.fd(), POLLIN, 0};
    ::poll(&p, 1, 500);
    for (auto& c : r.poll()) got.push_back(std::move(c));
  }
  return got;
}

}  // namespace

TEST_CASE("PathResolver without an SM: the error PATH_QUERY gives", "[path]") {
  for (const char* slots : {"65536", "0"}) {
    DYNAMIC_SECTION("--path-table-slots " << slots) {
      TempDir dir;
      IbdOptions o;
      o.extra_args = {"--path-table-slots", slots};
      Ibd ibd(dir.path(), "a", o);
      ContextOptions co;
      co.socket = ibd.socket();
      auto ctx = must(Context::open(co), "Context::open");
      auto res = must(PathResolver::open(*ctx), "PathResolver::open");
      CHECK(res->has_table() == (std::string(slots) != "0"));
      PathQuery q;
      q.dgid = remote_gid();
      // The SA client attaches once ibd's MAD layer is up (ENODEV before).
      Result<PathRecord> r = Error{ENODEV, ""};
      wait_until([&] { return (r = res->resolve(q)).error().code != ENODEV; }, 10s);
      REQUIRE(!r.ok());
      CHECK(r.error().code == ENETUNREACH);
      CHECK(!res->lookup(q));
      q.fresh = true;
      CHECK(res->resolve(q).error().code == ENETUNREACH);
      // Asynchronously: three at once, queued on the resolver's own connection.
      std::vector<uint64_t> ids;
      for (uint64_t cookie : {7, 8, 9}) ids.push_back(must(res->resolve_async(q, cookie), "resolve_async"));
      auto got = completions(*res, 3);
      REQUIRE(got.size() == 3);
      for (size_t i = 0; i < 3; ++i) {
        CHECK(got[i].id == ids[i]);
        CHECK(got[i].cookie == 7 + i);
        CHECK(got[i].source == PathSource::kNone);
        CHECK(got[i].path.error().code == ENETUNREACH);
      }
      CHECK(res->pending() == 0);
      CHECK(res->counters().table_hits == 0);
      CHECK(res->counters().socket_queries >= 5);
      // ibd gone: a lookup in flight and the ones after it end with an error.
      REQUIRE(must(res->resolve_async(q, 10), "resolve_async") > 0);
      REQUIRE(ibd.stop().has_value());
      got = completions(*res, 1);
      REQUIRE(got.size() == 1);
      CHECK(!got[0].path.ok());
      must(res->resolve_async(q, 11), "resolve_async");
      got = completions(*res, 1);
      REQUIRE(got.size() == 1);
      CHECK(got[0].cookie == 11);
      CHECK(!got[0].path.ok());
      CHECK(res->pending() == 0);
      pollfd p{res->fd(), POLLIN, 0};
      CHECK(::poll(&p, 1, 0) == 0);  // nothing left to report: the closed socket is out of the set
    }
  }
}

namespace {
// ibd with a path cache file in its state directory holding one path of
// PATH_QUERY's form from port 1's GID to remote_gid(), DLID 0x77.
struct WarmIbd {
  TempDir dir;
  std::string state = dir.path() + "/state";
  std::unique_ptr<Ibd> ibd;
  Gid sgid;
  uint64_t prefix = 0;
  WarmIbd() {
    std::filesystem::create_directories(state);
    IbdOptions o;
    o.extra_args = {"--state-dir", state};
    {  // the port's GID first
      Ibd first(dir.path(), "a", o);
      ContextOptions co;
      co.socket = first.socket();
      auto ctx = must(Context::open(co), "Context::open");
      auto p = must(ctx->query_port(1), "query_port");
      prefix = p.gid_prefix;
      sgid = must(ctx->query_gid(1, 0), "query_gid");
    }
    sa::PathRecord q;
    q.dgid = remote_gid().raw;
    q.sgid = sgid.raw;
    q.pkey = 0xffff;
    q.numb_path = 1;
    q.reversible = true;
    const uint64_t mask =
        sa::pr_mask::kDgid | sa::pr_mask::kSgid | sa::pr_mask::kPKey | sa::pr_mask::kNumbPath | sa::pr_mask::kReversible;
    sa::PathRecord rec = q;
    rec.dlid = 0x77;
    rec.slid = 1;
    rec.sl = 3;
    rec.mtu = 4;
    rec.rate = 3;
    sa::CacheFile f;
    f.tag = sa::CacheFileTag{prefix, 0};
    f.saved_unix_ms = static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count());
    f.paths.push_back(sa::CachedPath{sa::PathKey(1, mask, q), rec, 1s, false});
    REQUIRE(sa::save_cache_file(sa::cache_file_path(state, 1), f).ok());
    ibd = std::make_unique<Ibd>(dir.path(), "a", o);
    std::map<std::string, double> m;
    wait_until([&] { return counter(m = info(*ibd), "path_table_entries") == 1; }, 10s);
    INFO(ibd->log_tail());
    REQUIRE(counter(m, "path_cache_restored") == 1);
    REQUIRE(counter(m, "path_table_entries") == 1);
  }
};
}  // namespace

TEST_CASE("a path in ibd's cache is read from the shared table with no message", "[path]") {
  WarmIbd w;
  ContextOptions co;
  co.socket = w.ibd->socket();
  auto ctx = must(Context::open(co), "Context::open");
  auto res = must(PathResolver::open(*ctx), "PathResolver::open");
  REQUIRE(res->has_table());
  PathQuery q;
  q.dgid = remote_gid();
  // ibd's request count moves by what one ibdctl run costs, and no more.
  const double r0 = counter(info(*w.ibd), "requests");
  const double r1 = counter(info(*w.ibd), "requests");
  const auto before = info(*w.ibd);
  for (int i = 0; i < 10000; ++i) {
    auto p = res->lookup(q);
    REQUIRE(p);
    REQUIRE(p->dlid == 0x77);
  }
  auto p = must(res->resolve(q), "resolve");  // the table answers resolve() too
  CHECK(p.dlid == 0x77);
  CHECK(p.slid == 1);
  CHECK(p.sl == 3);
  CHECK(p.mtu == 4);
  CHECK(p.pkey == 0xffff);
  CHECK(p.dgid.raw == remote_gid().raw);
  CHECK(p.sgid.raw == w.sgid.raw);
  CHECK(p.stale);  // restored from the file; no SM has confirmed it
  const uint64_t id = must(res->resolve_async(q, 99), "resolve_async");
  auto got = completions(*res, 1);
  REQUIRE(got.size() == 1);
  CHECK(got[0].id == id);
  CHECK(got[0].cookie == 99);
  CHECK(got[0].source == PathSource::kTable);
  REQUIRE(got[0].path.ok());
  CHECK(got[0].path->dlid == 0x77);
  const auto after = info(*w.ibd);
  CHECK(counter(after, "requests") - counter(before, "requests") == r1 - r0);
  CHECK(counter(after, "path_cache_stale_hits") == counter(before, "path_cache_stale_hits"));
  CHECK(res->counters().socket_queries == 0);
  CHECK(res->counters().table_hits == 10002);
  // Another P_Key or DGID: not in the table, asked of ibd (no SM: ENETUNREACH).
  q.pkey = 0x8001;
  CHECK(!res->lookup(q));
  CHECK(res->resolve(q).error().code == ENETUNREACH);
  CHECK(res->counters().socket_queries == 1);
}

namespace {
// A raw protocol client: HELLO (management only), then `op` with `body`;
// the reply's status and fds.
struct RawCall {
  int status = -1;
  std::vector<UniqueFd> fds;
};
UniqueFd raw_hello(const std::string& socket) {
  auto s = proto::connect_socket(socket);
  REQUIRE(s.ok());
  proto::Header h;
  h.op = static_cast<uint16_t>(proto::Op::kHello);
  h.seq = 1;
  proto::HelloReq hello;
  hello.flags = proto::kHelloNoUar;
  REQUIRE(proto::send_message(s->get(), h, proto::encode(hello)).ok());
  pollfd p{s->get(), POLLIN, 0};
  REQUIRE(::poll(&p, 1, 10000) == 1);
  REQUIRE(proto::recv_message(s->get()).ok());
  return std::move(*s);
}
RawCall raw_call(int sock, proto::Op op, std::span<const std::byte> body, std::span<const int> fds = {}) {
  proto::Header h;
  h.op = static_cast<uint16_t>(op);
  h.seq = 2;
  RawCall out;
  if (!proto::send_message(sock, h, body, fds)) return out;
  pollfd p{sock, POLLIN, 0};
  if (::poll(&p, 1, 10000) != 1) return out;
  auto m = proto::recv_message(sock);
  if (!m) return out;
  auto rv = proto::decode_reply(m->body);
  if (!rv) return out;
  out.status = rv->status;
  out.fds = std::move(m->fds);
  return out;
}
}  // namespace

TEST_CASE("PATH_TABLE: a client can neither change nor resize the table; one that goes leaves ibd serving",
          "[path][hostile]") {
  WarmIbd w;
  const std::string& sock = w.ibd->socket();
  UniqueFd s = raw_hello(sock);
  const auto empty = proto::encode(proto::Empty{});
  // Malformed: a body, an fd attached.
  const std::byte junk[3] = {};
  CHECK(raw_call(s.get(), proto::Op::kPathTable, junk).status == EPROTO);
  {
    int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    CHECK(raw_call(s.get(), proto::Op::kPathTable, empty, {&devnull, 1}).status == EINVAL);
    ::close(devnull);
  }
  RawCall t = raw_call(s.get(), proto::Op::kPathTable, empty);
  REQUIRE(t.status == 0);
  REQUIRE(t.fds.size() == 1);
  const int fd = t.fds[0].get();
  const off_t n = ::lseek(fd, 0, SEEK_END);
  REQUIRE(n > 0);
  CHECK(::mmap(nullptr, size_t(n), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) == MAP_FAILED);
  void* ro = ::mmap(nullptr, size_t(n), PROT_READ, MAP_SHARED, fd, 0);
  REQUIRE(ro != MAP_FAILED);
  CHECK(::mprotect(ro, size_t(n), PROT_READ | PROT_WRITE) != 0);
  ::munmap(ro, size_t(n));
  CHECK(::ftruncate(fd, 0) != 0);
  const char garbage[16] = "garbage garbage";
  CHECK(::pwrite(fd, garbage, sizeof garbage, 0) < 0);
  CHECK(::fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, n) != 0);
  CHECK(::fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE) != 0);
  // Re-opened read-write through /proc: still sealed.
  const std::string proc = "/proc/self/fd/" + std::to_string(fd);
  UniqueFd rw(::open(proc.c_str(), O_RDWR | O_CLOEXEC));
  if (rw) {
    CHECK(::mmap(nullptr, size_t(n), PROT_READ | PROT_WRITE, MAP_SHARED, rw.get(), 0) == MAP_FAILED);
    CHECK(::ftruncate(rw.get(), 0) != 0);
    CHECK(::ftruncate(rw.get(), n * 2) != 0);
    CHECK(::pwrite(rw.get(), garbage, sizeof garbage, 0) < 0);
    CHECK(::fallocate(rw.get(), FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, n) != 0);
  }
  // Clients that go at once: after asking (the reply unread), and right after
  // getting the fd (a child that exits).
  for (int i = 0; i < 20; ++i) {
    UniqueFd c = raw_hello(sock);
    proto::Header h;
    h.op = static_cast<uint16_t>(proto::Op::kPathTable);
    h.seq = 2;
    CHECK(proto::send_message(c.get(), h, empty).ok());
  }
  for (int i = 0; i < 5; ++i) {
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      auto c = proto::connect_socket(sock);
      if (!c) ::_exit(2);
      proto::Header h;
      h.op = static_cast<uint16_t>(proto::Op::kHello);
      h.seq = 1;
      proto::HelloReq hello;
      hello.flags = proto::kHelloNoUar;
      (void)proto::send_message(c->get(), h, proto::encode(hello));
      (void)proto::recv_message(c->get());
      h.op = static_cast<uint16_t>(proto::Op::kPathTable);
      h.seq = 2;
      (void)proto::send_message(c->get(), h, empty);
      auto m = proto::recv_message(c->get());
      ::_exit(m && m->fds.size() == 1 ? 0 : 1);
    }
    int st = 0;
    REQUIRE(::waitpid(pid, &st, 0) == pid);
    CHECK((WIFEXITED(st) && WEXITSTATUS(st) == 0));
  }
  // ibd is fine and its table intact.
  REQUIRE(w.ibd->alive());
  ContextOptions co;
  co.socket = sock;
  auto ctx = must(Context::open(co), "Context::open");
  auto res = must(PathResolver::open(*ctx), "PathResolver::open");
  PathQuery q;
  q.dgid = remote_gid();
  auto p = res->lookup(q);
  REQUIRE(p);
  CHECK(p->dlid == 0x77);
  CHECK(counter(info(*w.ibd), "path_table_entries") == 1);
}
