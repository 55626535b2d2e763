// ibd's peer credentials and fd kinds, unit level (src/ibd/peer.hpp,
// src/ibd/fd_closer.hpp): the seams the daemon's accept and request checks
// go through.
#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <string>

#include "harness.hpp"
#include "ibd/fd_closer.hpp"
#include "ibd/peer.hpp"

using namespace openib;
using namespace openib::ibd;

TEST_CASE("peer credentials: unreadable ones are an error, never uid 0", "[peer]") {
  // SO_PEERCRED on something that is not a connected socket fails: the
  // caller (Server::on_acceptable) refuses the connection on this error.
  int p[2];
  REQUIRE(::pipe(p) == 0);
  UniqueFd r(p[0]), w(p[1]);
  auto c = peer_credentials(r.get());
  REQUIRE_FALSE(c.ok());
  CHECK(c.error().code == ENOTSOCK);
  UniqueFd unconnected(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  auto u = peer_credentials(unconnected.get());
  // An unconnected UNIX socket: Linux reports no peer (pid 0, uid -1), not root.
  if (u) {
    CHECK(u->uid != 0);
    CHECK_FALSE(u->net_admin);
    CHECK_FALSE(u->net_raw);
  }
}

TEST_CASE("peer credentials: root has the privileges, nobody none", "[peer]") {
  int sv[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) == 0);
  UniqueFd a(sv[0]), b(sv[1]);
  auto me = peer_credentials(a.get());
  REQUIRE(me.ok());
  CHECK(me->pid == ::getpid());
  CHECK(me->uid == ::geteuid());
  if (::geteuid() == 0) {
    CHECK(me->net_admin);
    CHECK(me->net_raw);
  }
  // A process whose pid was reused by another user's: its capabilities do not count.
  CHECK(peer_cap_eff(::getpid(), ::geteuid() + 1) == 0);
  auto nobody = openib::testing::run_as_nobody([] {
    int s[2];
    if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, s) != 0) return std::vector<int>{-1};
    auto c = peer_credentials(s[0]);
    if (!c) return std::vector<int>{-2};
    return std::vector<int>{int(c->uid), c->net_admin ? 1 : 0, c->net_raw ? 1 : 0};
  });
  REQUIRE(nobody.size() == 3);
  CHECK(nobody[0] != 0);
  CHECK(nobody[1] == 0);
  CHECK(nobody[2] == 0);
}

namespace {

// In a child: become nobody, keeping CAP_NET_ADMIN and CAP_NET_RAW in the
// effective set (capabilities(7): PR_SET_KEEPCAPS keeps the permitted set
// across setresuid, capset raises them again). False on failure.
bool become_capable_nobody() {
  const passwd* pw = ::getpwnam("nobody");
  const group* gr = ::getgrnam("nogroup");
  if (!pw) return false;
  const gid_t gid = gr ? gr->gr_gid : pw->pw_gid;
  if (::prctl(PR_SET_KEEPCAPS, 1) != 0) return false;
  if (::setgroups(0, nullptr) != 0 || ::setresgid(gid, gid, gid) != 0 ||
      ::setresuid(pw->pw_uid, pw->pw_uid, pw->pw_uid) != 0)
    return false;
  __user_cap_header_struct h{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct d[2]{};
  d[0].effective = d[0].permitted = (1u << kCapNetAdmin) | (1u << kCapNetRaw);
  return ::syscall(SYS_capset, &h, d) == 0;
}

bool become_plain_nobody() {
  const passwd* pw = ::getpwnam("nobody");
  const group* gr = ::getgrnam("nogroup");
  if (!pw) return false;
  const gid_t gid = gr ? gr->gr_gid : pw->pw_gid;
  return ::setgroups(0, nullptr) == 0 && ::setresgid(gid, gid, gid) == 0 &&
         ::setresuid(pw->pw_uid, pw->pw_uid, pw->pw_uid) == 0;
}

// A listening abstract-namespace socket (unix(7): no file permissions to
// get past as nobody).
struct Listener {
  UniqueFd fd;
  sockaddr_un addr{};
  Listener() : fd(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0)) {
    addr.sun_family = AF_UNIX;
    const std::string name = "openib-peer-test-" + std::to_string(::getpid());
    std::memcpy(addr.sun_path + 1, name.data(), name.size());
    REQUIRE(::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
    REQUIRE(::listen(fd.get(), 4) == 0);
  }
  bool connect_here() const {
    int s = ::socket(AF_UNIX, SOCK_SEQPACKET, 0);
    return s >= 0 && ::connect(s, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0;
  }
  UniqueFd accept_one() const {
    pollfd pf{fd.get(), POLLIN, 0};
    REQUIRE(::poll(&pf, 1, 10000) == 1);
    return UniqueFd(::accept4(fd.get(), nullptr, nullptr, SOCK_CLOEXEC));
  }
};

// linux/sched.h struct clone_args up to set_tid_size (CLONE_ARGS_SIZE_VER1).
struct CloneArgs {
  uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls, set_tid, set_tid_size;
};

// A child, with pid `want` when it is not 0 (clone3's set_tid, root only),
// that runs `f` and then waits until `go_r` reaches EOF (the child closes
// its copy of the write end `go_w`). Its pid, or -errno.
pid_t spawn(pid_t want, const std::function<bool()>& f, int ready_w, int go_r, int go_w) {
  CloneArgs a{};
  a.exit_signal = SIGCHLD;
  pid_t tid = want;
  if (want) {
    a.set_tid = reinterpret_cast<uint64_t>(&tid);
    a.set_tid_size = 1;
  }
  const long pid = ::syscall(SYS_clone3, &a, sizeof a);
  if (pid < 0) return -errno;
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (go_w >= 0) ::close(go_w);
    const char ok = f() ? 'y' : 'n';
    if (::write(ready_w, &ok, 1) != 1) ::_exit(2);
    char c;
    while (go_r >= 0 && ::read(go_r, &c, 1) > 0) {
    }
    ::_exit(0);
  }
  return static_cast<pid_t>(pid);
}

char wait_ready(int fd) {
  pollfd pf{fd, POLLIN, 0};
  char c = 0;
  if (::poll(&pf, 1, 10000) != 1 || ::read(fd, &c, 1) != 1) return 0;
  return c;
}

// Waits for `pid` (10 s at most, then SIGKILL): a stuck child fails the
// test instead of hanging it.
void reap(pid_t pid) {
  int st;
  for (int i = 0; i < 1000; ++i) {
    if (::waitpid(pid, &st, WNOHANG) == pid) return;
    ::usleep(10000);
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, &st, 0);
  FAIL("child " << pid << " did not exit within 10 s");
}

}  // namespace

// The pid of a connected peer that exited is reused by a process of the
// same uid that holds CAP_NET_ADMIN and CAP_NET_RAW (made to happen with
// clone3's set_tid): /proc/<pid>/status then shows a capable process of
// the right uid, and only SO_PEERPIDFD tells it is not the one that
// connected. The connection must get no privilege; a live capable peer
// must get them.
TEST_CASE("peer credentials: a reused pid lends no capabilities", "[peer]") {
  REQUIRE(::geteuid() == 0);  // clone3 set_tid and setresuid need root
  const passwd* pw = ::getpwnam("nobody");
  REQUIRE(pw != nullptr);
  Listener l;

  SECTION("a live peer with the capabilities has them") {
    int ready[2], go[2];
    REQUIRE(::pipe2(ready, O_CLOEXEC) == 0);
    REQUIRE(::pipe2(go, O_CLOEXEC) == 0);
    UniqueFd rr(ready[0]), rw(ready[1]), gr(go[0]), gw(go[1]);
    const pid_t c = spawn(0, [&] { return become_capable_nobody() && l.connect_here(); }, rw.get(), gr.get(), gw.get());
    REQUIRE(c > 0);
    CHECK(wait_ready(rr.get()) == 'y');
    UniqueFd s = l.accept_one();
    auto cred = peer_credentials(s.get());
    gw.reset();
    reap(c);
    REQUIRE(cred.ok());
    CHECK(cred->pid == c);
    CHECK(cred->uid == pw->pw_uid);
    CHECK(cred->net_admin);
    CHECK(cred->net_raw);
  }

  SECTION("a dead peer's pid taken by a capable process of the same uid") {
    bool done = false;
    for (int attempt = 0; attempt < 5 && !done; ++attempt) {
      int ready[2], go[2];
      REQUIRE(::pipe2(ready, O_CLOEXEC) == 0);
      REQUIRE(::pipe2(go, O_CLOEXEC) == 0);
      UniqueFd rr(ready[0]), rw(ready[1]), gr(go[0]), gw(go[1]);
      // The peer: nobody without capabilities, connects and exits.
      const pid_t a = spawn(0, [&] { return become_plain_nobody() && l.connect_here(); }, rw.get(), -1, -1);
      REQUIRE(a > 0);
      REQUIRE(wait_ready(rr.get()) == 'y');
      UniqueFd s = l.accept_one();
      REQUIRE(s.valid());
      reap(a);
      // Its pid, now free, for a capable process of the same uid.
      const pid_t b = spawn(a, [] { return become_capable_nobody(); }, rw.get(), gr.get(), gw.get());
      if (b == -EEXIST) continue;  // someone else took the pid first
      REQUIRE(b == a);
      REQUIRE(wait_ready(rr.get()) == 'y');
      // The scenario is real: /proc/<pid> shows a capable process of the peer's uid.
      CHECK(((peer_cap_eff(a, pw->pw_uid) >> kCapNetAdmin) & 1) == 1);
      auto cred = peer_credentials(s.get());
      gw.reset();
      reap(b);
      REQUIRE(cred.ok());
      CHECK(cred->pid == a);
      CHECK(cred->uid == pw->pw_uid);
      CHECK_FALSE(cred->net_admin);
      CHECK_FALSE(cred->net_raw);
      done = true;
    }
    CHECK(done);
  }
}

TEST_CASE("fd kinds: eventfd, memfd, anything else", "[peer]") {
  UniqueFd e(::eventfd(0, EFD_CLOEXEC));
  UniqueFd m(::memfd_create("k", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  int p[2];
  REQUIRE(::pipe(p) == 0);
  UniqueFd r(p[0]), w(p[1]);
  UniqueFd s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  CHECK(fd_kind(e.get()) == FdKind::kEventfd);
  CHECK(fd_kind(m.get()) == FdKind::kMemfd);
  CHECK(fd_kind(r.get()) == FdKind::kOther);
  CHECK(fd_kind(s.get()) == FdKind::kOther);
  const uint64_t before = fds_closed_off_loop();
  std::vector<UniqueFd> v;
  v.push_back(std::move(e));
  v.push_back(std::move(s));
  dispose_fds(v);
  CHECK(v.empty());
  CHECK(fds_closed_off_loop() == before + 1);  // the socket, not the eventfd
}
