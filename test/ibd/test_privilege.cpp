// What an unprivileged local user can and cannot make ibd do
// (docs/client-protocol.md §5 "Security model", docs/operations.md
// "Privileges"): controlled Q_Keys are root's (or CAP_NET_RAW's), as in
// Linux's uverbs; an fd whose last close blocks, sent on any request,
// stalls neither ibd's loop nor its other clients. The user-MAD service's
// privileges are tested in test/umad/test_umad.cpp.
#include <poll.h>
#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>

#include "clientproto/socket.hpp"
#include "harness.hpp"
#include "openib/verbs.hpp"

namespace proto = openib::proto;
using namespace std::chrono_literals;
using namespace openib;
using namespace openib::testing;
using proto::Op;

namespace {

// RESET -> INIT of a new UD QP with Q_Key `qkey`, as the calling process;
// 0 or the errno of the MODIFY_QP. Setup failures are 1000 + errno.
int ud_qp_with_qkey(const std::string& socket, uint32_t qkey) {
  ContextOptions co;
  co.socket = socket;
  auto ctx = Context::open(co);
  if (!ctx) return 1000 + ctx.error().code;
  auto pd = (*ctx)->alloc_pd();
  auto cq = (*ctx)->create_cq(16);
  if (!pd || !cq) return 1000 + EIO;
  QpInit in;
  in.type = QpType::kUd;
  in.send_cq = in.recv_cq = cq->get();
  auto qp = (*ctx)->create_qp(**pd, in);
  if (!qp) return 1000 + qp.error().code;
  QpAttr a;
  a.state = QpState::kInit;
  a.qkey = qkey;
  auto r = (*qp)->modify(a, qp_attr::kState | qp_attr::kPkeyIndex | qp_attr::kPort | qp_attr::kQkey);
  return r ? 0 : r.error().code;
}

// A raw client-protocol connection (docs/client-protocol.md §1).
struct Conn {
  UniqueFd fd;
  uint32_t seq = 0;
  explicit Conn(const std::string& path) {
    auto s = proto::connect_socket(path);
    REQUIRE(s.ok());
    fd = std::move(*s);
  }
  // Sends a request; its reply's status within `wait`, or -1 (no reply,
  // or the connection closed).
  int call(Op op, const proto::Bytes& body, std::span<const int> fds, std::chrono::milliseconds wait) {
    proto::Header h;
    h.op = static_cast<uint16_t>(op);
    h.seq = ++seq;
    if (!proto::send_message(fd.get(), h, body, fds)) return -1;
    return reply(wait);
  }
  int reply(std::chrono::milliseconds wait) {
    pollfd p{fd.get(), POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(wait.count())) != 1) return -1;
    auto m = proto::recv_message(fd.get(), true);
    if (!m) return -1;
    auto v = proto::decode_reply(m->body);
    return v ? int(v->status) : -1;
  }
  int hello(std::chrono::milliseconds wait) {
    proto::HelloReq h;
    h.flags = proto::kHelloNoUar;
    return call(Op::kHello, proto::encode(h), {}, wait);
  }
};

}  // namespace

TEST_CASE("a controlled Q_Key (bit 31) is EPERM for user nobody, allowed for root", "[hostile][privilege]") {
  TempDir dir;
  Ibd ibd(dir.path(), "a", IbdOptions{});
  const std::string sock = ibd.socket();
  auto nobody = run_as_nobody([&] {
    return std::vector<int>{ud_qp_with_qkey(sock, 0x80000001), ud_qp_with_qkey(sock, 0x11111111)};
  });
  REQUIRE(nobody.size() == 2);
  CHECK(nobody[0] == EPERM);  // IBA 10.2.4, 3.5.3; Linux's modify_qp says EPERM
  CHECK(nobody[1] == 0);      // an ordinary Q_Key is anyone's
  CHECK(ud_qp_with_qkey(sock, 0x80000001) == 0);
  REQUIRE(ibd.alive());
}

// SERVICE_SET (docs/client-protocol.md §12): a user registers services
// for its port's own GID only (ServiceGID 0); another GID is EPERM for
// nobody, allowed for root (who then meets no SM here: ENETUNREACH).
TEST_CASE("a ServiceRecord for another GID is EPERM for user nobody", "[hostile][privilege][sa]") {
  TempDir dir;
  Ibd ibd(dir.path(), "a", IbdOptions{});
  const std::string sock = ibd.socket();
  proto::ServiceReq foreign;
  foreign.record[8] = 0xfe;  // ServiceGID (bytes 8..23) fe80::...:1
  foreign.record[9] = 0x80;
  foreign.record[23] = 1;
  const proto::ServiceReq own;  // ServiceGID 0: the port's
  auto set = [&](const proto::ServiceReq& r) {
    Conn c(sock);
    if (c.hello(5s) != 0) return -2;
    return c.call(Op::kServiceSet, proto::encode(r), {}, 10s);
  };
  auto nobody = run_as_nobody([&] { return std::vector<int>{set(foreign), set(own)}; });
  REQUIRE(nobody.size() == 2);
  CHECK(nobody[0] == EPERM);
  CHECK(nobody[1] != EPERM);
  CHECK(set(foreign) != EPERM);
  REQUIRE(ibd.alive());
}

// PATH_FLUSH drops every client's cached paths: root or CAP_NET_ADMIN
// only, as the user-MAD service; PATH_LIST is anyone's, as PATH_QUERY.
TEST_CASE("PATH_FLUSH is EPERM for user nobody, allowed for root; PATH_LIST is anyone's", "[hostile][privilege]") {
  TempDir dir;
  Ibd ibd(dir.path(), "a", IbdOptions{});
  const std::string sock = ibd.socket();
  const auto flush = proto::encode(proto::PathFlushReq{});
  const auto list = proto::encode(proto::PathListReq{});
  auto nobody = run_as_nobody([&] {
    Conn c(sock);
    return std::vector<int>{c.hello(3000ms), c.call(Op::kPathFlush, flush, {}, 3000ms),
                            c.call(Op::kPathList, list, {}, 3000ms)};
  });
  REQUIRE(nobody.size() == 3);
  CHECK(nobody[0] == 0);
  CHECK(nobody[1] == EPERM);
  CHECK(nobody[2] == 0);
  Conn root(sock);
  REQUIRE(root.hello(3000ms) == 0);
  CHECK(root.call(Op::kPathFlush, flush, {}, 3000ms) == 0);
  proto::PathFlushReq bad;
  bad.flags = 0x80;
  CHECK(root.call(Op::kPathFlush, proto::encode(bad), {}, 3000ms) == EINVAL);
  CHECK(root.call(Op::kPathList, proto::Bytes(3), {}, 3000ms) == EPROTO);  // a short body
  REQUIRE(ibd.alive());
}

// ibd closes the fds of a request it refuses (or that it no longer needs).
// A TCP socket with SO_LINGER and unsent data blocks its last close for the
// linger time: on ibd's loop that would stall every client. The test gives
// up its own reference while ibd cannot have read the message yet (an
// ALLOC_PD before it keeps the client's socket unread for 200 ms), so that
// ibd's is the last.
TEST_CASE("an fd whose close blocks, sent where ibd does not take it, stalls neither ibd nor other clients",
          "[hostile][fds]") {
  TempDir dir;
  IbdOptions o;
  // Every device command takes 200 ms (docs/client-protocol.md §3.3: the
  // client's next message is read after the reply).
  o.extra_args = {"--simhca-arg=--cmd-delay-ms", "--simhca-arg=200"};
  Ibd ibd(dir.path(), "a", o);
  const std::string sock = ibd.socket();
  LingeringTcp tcp;
  auto still_serving = [&](const char* after) {
    Conn other(sock);
    INFO("another client, after " << after);
    CHECK(other.hello(3000ms) == 0);
    CHECK(other.call(Op::kQueryDevice, proto::encode(proto::Empty{}), {}, 3000ms) == 0);
  };
  Conn bad(sock);
  REQUIRE(bad.hello(3000ms) == 0);
  // ALLOC_PD, then `bytes` (one datagram) with a lingering TCP socket
  // attached, then the test's reference closed; ALLOC_PD's reply.
  auto send_behind_alloc_pd = [&](std::span<const std::byte> bytes) {
    proto::Header h;
    h.op = static_cast<uint16_t>(Op::kAllocPd);
    h.seq = ++bad.seq;
    REQUIRE(proto::send_message(bad.fd.get(), h, proto::encode(proto::Empty{})));
    UniqueFd t(tcp.make());
    REQUIRE(send_with_fd(bad.fd.get(), bytes.data(), bytes.size(), t.get()) > 0);
    t.reset();  // not the last reference: the message in flight holds one
    CHECK(bad.reply(3000ms) == 0);
  };
  auto framed = [&](Op op, const proto::Bytes& body, uint8_t nfds) {
    proto::Header h;
    h.op = static_cast<uint16_t>(op);
    h.seq = ++bad.seq;
    h.nfds = nfds;
    return proto::frame(h, body);
  };

  SECTION("on a request that takes no fd") {
    send_behind_alloc_pd(framed(Op::kQueryDevice, proto::encode(proto::Empty{}), 1));
    CHECK(bad.reply(3000ms) == EINVAL);
    still_serving("QUERY_DEVICE with a lingering TCP socket");
    CHECK(bad.call(Op::kQueryDevice, proto::encode(proto::Empty{}), {}, 3000ms) == 0);
  }
  SECTION("on MAP_MEM, which takes a memfd") {
    send_behind_alloc_pd(framed(Op::kMapMem, proto::encode(proto::MapMemReq{4096}), 1));
    CHECK(bad.reply(3000ms) == EINVAL);
    still_serving("MAP_MEM with a lingering TCP socket");
  }
  SECTION("on CREATE_CQ, which takes an eventfd") {
    proto::CreateCqReq cq;
    cq.flags = proto::kCqEventFd;
    send_behind_alloc_pd(framed(Op::kCreateCq, proto::encode(cq), 1));
    CHECK(bad.reply(3000ms) == EINVAL);
    still_serving("CREATE_CQ with a lingering TCP socket");
  }
  SECTION("in a message whose framing is wrong (ibd disconnects the client)") {
    send_behind_alloc_pd(framed(Op::kQueryDevice, proto::encode(proto::Empty{}), 0));  // header: no fds
    CHECK(bad.reply(3000ms) == -1);  // disconnected
    still_serving("a mis-framed message with a lingering TCP socket");
  }
  SECTION("in the queue of a client ibd disconnects") {
    // A framing violation, then a message with the fd: ibd disconnects at
    // the first, the second is released with the client's socket.
    auto garbage = framed(Op::kQueryDevice, proto::encode(proto::Empty{}), 0);
    garbage[0] = std::byte{0};  // bad magic
    proto::Header h;
    h.op = static_cast<uint16_t>(Op::kAllocPd);
    h.seq = ++bad.seq;
    REQUIRE(proto::send_message(bad.fd.get(), h, proto::encode(proto::Empty{})));
    REQUIRE(::send(bad.fd.get(), garbage.data(), garbage.size(), MSG_NOSIGNAL) > 0);
    UniqueFd t(tcp.make());
    const int f = t.get();
    h.op = static_cast<uint16_t>(Op::kQueryDevice);
    h.seq = ++bad.seq;
    REQUIRE(proto::send_message(bad.fd.get(), h, proto::encode(proto::Empty{}), {&f, 1}));
    t.reset();
    // ALLOC_PD's reply, then the disconnect; or the disconnect alone: a
    // UNIX socket closed with data still queued (the fd's message) resets
    // its peer, which may then not read what was sent before (unix(7)).
    const int first = bad.reply(3000ms);
    CHECK((first == 0 || first == -1));
    if (first == 0) CHECK(bad.reply(3000ms) == -1);
    still_serving("a disconnect with a lingering TCP socket queued");
  }
  REQUIRE(ibd.alive());
}

// The kinds of fd are checked before anything else, HELLO included.
TEST_CASE("an fd of the wrong kind is EINVAL before any other check", "[hostile][fds]") {
  TempDir dir;
  Ibd ibd(dir.path(), "a", IbdOptions{});
  int p[2];
  REQUIRE(::pipe(p) == 0);
  UniqueFd r(p[0]), w(p[1]);
  Conn fresh(ibd.socket());  // no HELLO yet
  proto::CreateCqReq cq;
  cq.flags = proto::kCqEventFd;
  const int f = r.get();
  CHECK(fresh.call(Op::kCreateCq, proto::encode(cq), {&f, 1}, 3000ms) == EINVAL);
  CHECK(fresh.call(Op::kHello, proto::encode(proto::HelloReq{}), {&f, 1}, 3000ms) == EINVAL);
  CHECK(fresh.hello(3000ms) == 0);
}

// INFO's port state comes from QUERY_PORT, which waits for the device like
// every command (docs/client-protocol.md §3.3): while it takes a second,
// another client is served. Before, ibd ran INFO's QUERY_PORTs on its loop
// and answered nobody until they were done.
TEST_CASE("INFO's QUERY_PORTs do not hold up other clients", "[hostile][async]") {
  TempDir dir;
  IbdOptions o;
  o.extra_args = {"--simhca-arg=--cmd-delay-ms", "--simhca-arg=1000"};
  Ibd ibd(dir.path(), "a", o);
  Conn slow(ibd.socket()), quick(ibd.socket());
  REQUIRE(slow.hello(5000ms) == 0);
  REQUIRE(quick.hello(5000ms) == 0);
  proto::Header h;
  h.op = static_cast<uint16_t>(Op::kInfo);
  h.seq = ++slow.seq;
  REQUIRE(proto::send_message(slow.fd.get(), h, proto::encode(proto::InfoReq{})));
  // ibd has read the INFO once nothing of it is left unread (SIOCOUTQ: the
  // bytes the peer has not consumed yet, unix(7)).
  bool read = false;
  for (int i = 0; i < 5000 && !read; ++i) {
    int queued = -1;
    REQUIRE(::ioctl(slow.fd.get(), SIOCOUTQ, &queued) == 0);
    read = queued == 0;
    if (!read) ::usleep(1000);
  }
  REQUIRE(read);
  CHECK(quick.call(Op::kQueryDevice, proto::encode(proto::Empty{}), {}, 10000ms) == 0);
  pollfd p{slow.fd.get(), POLLIN, 0};
  CHECK(::poll(&p, 1, 0) == 0);  // INFO still waiting for its QUERY_PORT
  CHECK(slow.reply(10000ms) == 0);
  REQUIRE(ibd.alive());
}
