// The project's libibumad.so.3 against a real ibd (docs/umad.md): the C API
// as OpenSM and infiniband-diags call it, through <infiniband/umad.h>.
#include <fcntl.h>
#include <infiniband/umad.h>
#include <signal.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "clientproto/mad_socket.hpp"
#include "clientproto/messages.hpp"
#include "clientproto/socket.hpp"
#include "harness.hpp"

#include <nlohmann/json.hpp>

using namespace openib::testing;
using Clock = std::chrono::steady_clock;

namespace {

struct Env {
  TempDir dir;
  std::unique_ptr<Ibd> ibd;
  explicit Env(uint16_t lid = 7, std::vector<std::string> extra = {}) {
    IbdOptions o;
    o.lid = lid;
    o.extra_args = std::move(extra);
    ibd = std::make_unique<Ibd>(dir.path(), "u", o);
    ::setenv("OPENIB_SOCKET", ibd->socket().c_str(), 1);
  }
};

// A PerfMgmt Get(ClassPortInfo) (IBA 16.1.2) with TID `tid`.
void pma_get_classportinfo(uint8_t* mad, uint64_t tid) {
  std::memset(mad, 0, 256);
  mad[0] = 1;     // BaseVersion
  mad[1] = 0x04;  // PerfMgmt
  mad[2] = 1;     // ClassVersion
  mad[3] = 0x01;  // Get
  for (int i = 0; i < 8; ++i) mad[8 + i] = uint8_t(tid >> (56 - 8 * i));
  mad[16] = 0x00;
  mad[17] = 0x01;  // ClassPortInfo
}

uint32_t cap_mask(int port) {
  umad_port_t p;
  REQUIRE(umad_get_port(nullptr, port, &p) == 0);
  uint32_t c = be32toh(p.capmask);
  umad_release_port(&p);
  return c;
}

bool wait_cap(uint32_t bit, bool set) {
  for (int i = 0; i < 100; ++i) {
    if (((cap_mask(1) & bit) != 0) == set) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

// A raw control connection to ibd (docs/client-protocol.md), HELLO done:
// requests are sent and their replies read separately, so a test can keep
// one outstanding while another connection goes on.
struct RawConn {
  openib::UniqueFd fd;
  uint32_t seq = 0;
  explicit RawConn(const std::string& path) {
    namespace proto = openib::proto;
    int s = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    REQUIRE(s >= 0);
    fd = openib::UniqueFd(s);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::strncpy(a.sun_path, path.c_str(), sizeof a.sun_path - 1);
    REQUIRE(::connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    proto::HelloReq h;
    h.flags = proto::kHelloNoUar;
    send(proto::Op::kHello, proto::encode(h));
    REQUIRE(reply().status == 0);
  }
  void send(openib::proto::Op op, const openib::proto::Bytes& body) {
    openib::proto::Header h;
    h.op = static_cast<uint16_t>(op);
    h.seq = ++seq;
    REQUIRE(openib::proto::send_message(fd.get(), h, body));
  }
  bool readable(int timeout_ms) {
    pollfd p{fd.get(), POLLIN, 0};
    return ::poll(&p, 1, timeout_ms) == 1;
  }
  struct Rep {
    int status = -1;
    size_t fds = 0;
    std::vector<openib::UniqueFd> fd;  // kept: closing a MAD socket ends its session
  };
  Rep reply() {
    REQUIRE(readable(10000));
    auto m = openib::proto::recv_message(fd.get());
    REQUIRE(m);
    auto v = openib::proto::decode_reply(m->body);
    REQUIRE(v);
    return {int(v->status), m->fds.size(), std::move(m->fds)};
  }
};

}  // namespace

// ibd's loop never waits for a device command (issue 12): the first
// UMAD_OPEN of a port brings QP0/QP1 up by a chain of about ten commands,
// and other clients' requests are served between them. With an ibd that
// ran the chain on its loop, no reply to another client could come before
// the UMAD_OPEN's (at most the one read just before it). Every command
// takes 20 ms of firmware time (simhca --cmd-delay-ms), so the chain takes
// about 200 ms and a QUERY_PORT 20, whatever the machine's load.
TEST_CASE("umad: other clients are served while a port's QP0/QP1 open", "[umad]") {
  namespace proto = openib::proto;
  Env env(7, {"--simhca-arg=--cmd-delay-ms", "--simhca-arg=20"});
  RawConn opener(env.ibd->socket()), second(env.ibd->socket()), leaver(env.ibd->socket()),
      other(env.ibd->socket());
  proto::PortReq port;
  port.port = 1;
  opener.send(proto::Op::kUmadOpen, proto::encode(port));
  second.send(proto::Op::kUmadOpen, proto::encode(port));  // shares the opening
  leaver.send(proto::Op::kUmadOpen, proto::encode(port));
  leaver.fd = openib::UniqueFd();  // leaves while the port opens
  int served = 0;
  while (!opener.readable(0)) {
    other.send(proto::Op::kUmadPort, proto::encode(port));
    const auto r = other.reply();
    REQUIRE(r.status == 0);
    if (!opener.readable(0)) ++served;
  }
  INFO("served " << served);
  CHECK(served >= 2);
  const auto a = opener.reply();
  CHECK(a.status == 0);
  CHECK(a.fds == 1);
  const auto b = second.reply();
  CHECK(b.status == 0);
  CHECK(b.fds == 1);
  // Open now, the next client's UMAD_OPEN is answered from the open layer;
  // a second open of the same port on one connection is refused.
  RawConn late(env.ibd->socket());
  late.send(proto::Op::kUmadOpen, proto::encode(port));
  const auto first = late.reply();
  CHECK(first.fds == 1);
  late.send(proto::Op::kUmadOpen, proto::encode(port));
  CHECK(late.reply().status == EBUSY);
  const int id = umad_open_port(nullptr, 1);  // and libibumad's own path
  CHECK(id >= 0);
  if (id >= 0) umad_close_port(id);
}

TEST_CASE("umad: no ibd, no CA", "[umad]") {
  TempDir dir;
  ::setenv("OPENIB_SOCKET", (dir.path() + "/nobody.sock").c_str(), 1);
  char cas[UMAD_MAX_DEVICES][UMAD_CA_NAME_LEN];
  CHECK(umad_get_cas_names(cas, UMAD_MAX_DEVICES) == 0);
  umad_ca_t ca;
  CHECK(umad_get_ca(nullptr, &ca) < 0);
  CHECK(umad_open_port(nullptr, 0) < 0);
  CHECK(umad_get_ca_device_list() == nullptr);
}

TEST_CASE("umad: the CA and its port, live from the device", "[umad]") {
  Env env(7);
  char cas[UMAD_MAX_DEVICES][UMAD_CA_NAME_LEN];
  REQUIRE(umad_get_cas_names(cas, UMAD_MAX_DEVICES) == 1);
  CHECK(std::string(cas[0]) == "simhca0");
  umad_ca_t ca;
  REQUIRE(umad_get_ca(cas[0], &ca) == 0);
  CHECK(ca.node_type == 1);
  REQUIRE(ca.numports >= 1);
  CHECK(ca.node_guid != 0);
  REQUIRE(ca.ports[1] != nullptr);
  CHECK(ca.ports[1]->base_lid == 7);
  CHECK(ca.ports[1]->state == 4);  // Active (ibd's static setup)
  CHECK(std::string(ca.ports[1]->link_layer) == "InfiniBand");
  CHECK(ca.ports[1]->pkeys_size >= 1);
  CHECK(ca.ports[1]->pkeys[0] == 0xffff);
  CHECK(ca.ports[1]->port_guid != 0);
  const uint64_t port_guid = ca.ports[1]->port_guid;
  CHECK(umad_release_ca(&ca) == 0);
  CHECK(umad_get_ca("mlx5_0", &ca) < 0);  // not a CA of this ibd

  __be64 guids[4] = {};
  REQUIRE(umad_get_ca_portguids(nullptr, guids, 4) == ca.numports + 1);
  CHECK(guids[1] == port_guid);
  umad_port_t p;
  REQUIRE(umad_get_port(nullptr, 0, &p) == 0);  // port 0: the first Active one
  CHECK(p.portnum == 1);
  CHECK(p.base_lid == 7);
  umad_release_port(&p);
  umad_device_node* list = umad_get_ca_device_list();
  REQUIRE(list != nullptr);
  CHECK(std::string(list->ca_name) == "simhca0");
  CHECK(list->next == nullptr);
  umad_free_ca_device_list(list);
}

TEST_CASE("umad: agents are one per class, version and method", "[umad]") {
  Env env;
  int fd = umad_open_port(nullptr, 0);
  REQUIRE(fd >= 0);
  CHECK(umad_get_fd(fd) == fd);
  long trap_mask[2] = {1L << 0x05, 0};  // Trap
  int a = umad_register(fd, 0x81, 1, 0, trap_mask);
  REQUIRE(a >= 0);
  CHECK(umad_register(fd, 0x81, 1, 0, trap_mask) < 0);  // the method is taken
  int b = umad_register(fd, 0x01, 1, 0, trap_mask);       // another class: fine
  REQUIRE(b >= 0);
  CHECK(b != a);
  CHECK(umad_register(fd, 0x81, 1, 0, nullptr) >= 0);     // no methods: responses only
  CHECK(umad_register(fd, 0x03, 2, 2, nullptr) < 0);       // RMPP version 2 does not exist
  CHECK(umad_unregister(fd, a) == 0);
  CHECK(umad_unregister(fd, a) < 0);
  CHECK(umad_register(fd, 0x81, 1, 0, trap_mask) >= 0);  // free again
  CHECK(umad_close_port(fd) == 0);
  CHECK(umad_close_port(fd) < 0);
}

TEST_CASE("umad: a request nobody answers comes back ETIMEDOUT after its retries", "[umad]") {
  Env env;
  int fd = umad_open_port(nullptr, 0);
  REQUIRE(fd >= 0);
  int agent = umad_register(fd, 0x04, 1, 0, nullptr);
  REQUIRE(agent >= 0);
  std::vector<uint8_t> buf(umad_size() + 256);
  pma_get_classportinfo(static_cast<uint8_t*>(umad_get_mad(buf.data())), 0x1122334455667788ull);
  umad_set_addr(buf.data(), 0x1234 /* nobody */, 1, 0, 0x80010000);
  const auto t0 = Clock::now();
  REQUIRE(umad_send(fd, agent, buf.data(), 256, 100, 2) == 0);
  std::vector<uint8_t> in(umad_size() + 256);
  // A buffer too small for what is queued: the header, the length needed,
  // ENOSPC, and the MAD stays queued.
  int len = 8;
  int r = umad_recv(fd, in.data(), &len, 5000);
  REQUIRE(r == -ENOSPC);
  CHECK(len == 24);
  len = 256;
  r = umad_recv(fd, in.data(), &len, 1000);
  const auto waited = Clock::now() - t0;
  REQUIRE(r == agent);
  CHECK(umad_status(in.data()) == ETIMEDOUT);
  CHECK(len == 24);  // the common header only, as from the kernel
  auto* mad = static_cast<uint8_t*>(umad_get_mad(in.data()));
  uint64_t tid = 0;
  for (int i = 0; i < 8; ++i) tid = tid << 8 | mad[8 + i];
  CHECK((tid & 0xffffffffu) == 0x55667788u);  // ibd owns bits 63:32, the sender the rest
  CHECK(waited >= std::chrono::milliseconds(290));  // three sends, 100 ms each
  CHECK(waited < std::chrono::seconds(5));
  len = 256;
  CHECK(umad_recv(fd, in.data(), &len, 200) == -ETIMEDOUT);  // nothing more
  umad_close_port(fd);
}

TEST_CASE("umad: the issm file sets IsSM while it is held, also by a process that dies", "[umad]") {
  Env env;
  char path[256];
  REQUIRE(umad_get_issm_path(nullptr, 1, path, sizeof path) == 0);
  constexpr uint32_t kIsSm = 1u << 1;
  CHECK((cap_mask(1) & kIsSm) == 0);
  int f = ::open(path, O_RDONLY | O_NONBLOCK);
  REQUIRE(f >= 0);
  CHECK(wait_cap(kIsSm, true));
  ::close(f);
  CHECK(wait_cap(kIsSm, false));
  pid_t child = ::fork();
  if (child == 0) {
    int g = ::open(path, O_RDONLY | O_NONBLOCK);
    if (g < 0) ::_exit(1);
    ::pause();
    ::_exit(0);
  }
  REQUIRE(child > 0);
  CHECK(wait_cap(kIsSm, true));
  ::kill(child, SIGKILL);
  int st = 0;
  ::waitpid(child, &st, 0);
  CHECK(wait_cap(kIsSm, false));
}

TEST_CASE("umad: a client killed with agents registered leaves none behind", "[umad]") {
  Env env;
  long get_mask[2] = {1L << 0x01, 0};
  int pipefd[2];
  REQUIRE(::pipe(pipefd) == 0);
  pid_t child = ::fork();
  if (child == 0) {
    int fd = umad_open_port(nullptr, 0);
    int a = fd >= 0 ? umad_register(fd, 0x09, 1, 0, get_mask) : -1;  // a vendor class, method Get
    char c = a >= 0 ? 'y' : 'n';
    (void)!::write(pipefd[1], &c, 1);
    ::pause();
    ::_exit(0);
  }
  REQUIRE(child > 0);
  char c = 0;
  REQUIRE(::read(pipefd[0], &c, 1) == 1);
  REQUIRE(c == 'y');
  int fd = umad_open_port(nullptr, 0);
  REQUIRE(fd >= 0);
  CHECK(umad_register(fd, 0x09, 1, 0, get_mask) < 0);  // held by the child
  ::kill(child, SIGKILL);
  int st = 0;
  ::waitpid(child, &st, 0);
  int a = -1;
  for (int i = 0; i < 100 && a < 0; ++i) {
    a = umad_register(fd, 0x09, 1, 0, get_mask);
    if (a < 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  CHECK(a >= 0);
  umad_close_port(fd);
  ::close(pipefd[0]);
  ::close(pipefd[1]);
}

TEST_CASE("umad: garbage on the MAD socket is dropped, the session and ibd go on", "[umad]") {
  Env env;
  int fd = umad_open_port(nullptr, 0);
  REQUIRE(fd >= 0);
  int agent = umad_register(fd, 0x04, 1, 0, nullptr);
  REQUIRE(agent >= 0);
  // Raw writes past the library: too short, an agent never registered, a
  // header claiming more than was sent, pure noise of many sizes.
  std::vector<uint8_t> junk(umad_size() + 256, 0xA5);
  CHECK(::send(fd, junk.data(), 3, MSG_NOSIGNAL) == 3);
  auto* hdr = reinterpret_cast<ib_user_mad*>(junk.data());
  hdr->agent_id = 31;
  CHECK(::send(fd, junk.data(), junk.size(), MSG_NOSIGNAL) == ssize_t(junk.size()));
  hdr->agent_id = uint32_t(agent);
  hdr->length = 1u << 30;
  CHECK(::send(fd, junk.data(), umad_size() + 10, MSG_NOSIGNAL) == ssize_t(umad_size() + 10));
  uint32_t x = 12345;
  for (size_t n = 1; n < junk.size(); n += 37) {
    for (auto& b : junk) b = uint8_t((x = x * 1103515245 + 12345) >> 16);
    (void)::send(fd, junk.data(), n, MSG_NOSIGNAL);
  }
  // The session still works: a request to nobody comes back timed out.
  std::vector<uint8_t> buf(umad_size() + 256);
  pma_get_classportinfo(static_cast<uint8_t*>(umad_get_mad(buf.data())), 77);
  umad_set_addr(buf.data(), 0x1234, 1, 0, 0x80010000);
  REQUIRE(umad_send(fd, agent, buf.data(), 256, 50, 0) == 0);
  int len = 256;
  int got = -1;
  for (int i = 0; i < 200 && got != agent; ++i) {  // junk that parsed as a request of ours may come back first
    len = 256;
    got = umad_recv(fd, buf.data(), &len, 2000);
    if (got == agent) {
      auto* mad = static_cast<uint8_t*>(umad_get_mad(buf.data()));
      if (mad[15] != 77) got = -1;  // not our TID
    }
    if (got < 0 && got != -1) break;
  }
  CHECK(got == agent);
  CHECK(umad_status(buf.data()) == ETIMEDOUT);
  CHECK(env.ibd->alive());
  umad_ca_t ca;
  CHECK(umad_get_ca(nullptr, &ca) == 0);
  umad_release_ca(&ca);
  umad_close_port(fd);
}

// A Get of vendor class 0x09 (IBA 13.4.4) to LID `lid`, QP1, TID `tid`,
// written on `fd` for `agent`, awaiting a response for 100 ms.
int send_vendor_get(int fd, int agent, uint16_t lid, uint64_t tid) {
  std::vector<uint8_t> buf(umad_size() + 256);
  auto* mad = static_cast<uint8_t*>(umad_get_mad(buf.data()));
  pma_get_classportinfo(mad, tid);
  mad[1] = 0x09;
  umad_set_addr(buf.data(), lid, 1, 0, 0x80010000);
  return umad_send(fd, agent, buf.data(), 256, 100, 0);
}

// Two MAD sockets of port 1, each with an agent of vendor class 0x09: the
// receiver's takes Gets, the sender's sends them.
struct VendorPair {
  int rfd = -1, receiver = -1, sfd = -1, sender = -1;
  VendorPair() {
    long get_mask[2] = {1L << 0x01, 0};  // method Get
    rfd = umad_open_port(nullptr, 0);
    REQUIRE(rfd >= 0);
    receiver = umad_register(rfd, 0x09, 1, 0, get_mask);
    REQUIRE(receiver >= 0);
    sfd = umad_open_port(nullptr, 0);
    REQUIRE(sfd >= 0);
    sender = umad_register(sfd, 0x09, 1, 0, nullptr);
    REQUIRE(sender >= 0);
  }
};

// What umad_recv on `fd` got within `timeout_ms`: the agent (or the
// negative errno), the status and the low 32 bits of the TID.
struct Got {
  int agent = -1;
  int status = -1;
  uint32_t tid = 0;
};
Got recv_one(int fd, int timeout_ms) {
  std::vector<uint8_t> in(umad_size() + 256);
  int len = 256;
  Got g;
  g.agent = umad_recv(fd, in.data(), &len, timeout_ms);
  if (g.agent < 0) return g;
  g.status = umad_status(in.data());
  auto* m = static_cast<uint8_t*>(umad_get_mad(in.data()));
  for (int i = 12; i < 16; ++i) g.tid = g.tid << 8 | m[i];
  return g;
}

// SIGKILLs ibd's embedded simhca and waits for ibd to say it is recovering;
// returns the killed simhca's PID.
pid_t kill_device(Env& env) {
  const pid_t sim = env.ibd->simhca_pid();
  REQUIRE(sim > 0);
  REQUIRE(::kill(sim, SIGKILL) == 0);
  REQUIRE(wait_until([&] { return env.ibd->log_tail(100000).find("recovering") != std::string::npos; },
                     std::chrono::seconds(10)));
  return sim;
}

// Waits until port 1 answers umad_get_port again (a new connection's HELLO
// waits for the recovery) and checks that ibd runs a new simhca.
void wait_device_back(Env& env, pid_t killed) {
  umad_port_t port;
  REQUIRE(wait_until([&] {
    if (umad_get_port(nullptr, 1, &port) != 0) return false;
    umad_release_port(&port);
    return true;
  }, std::chrono::seconds(60)));
  CHECK(env.ibd->simhca_pid() != killed);
}

// docs/operations.md §5 "Device recovery", docs/umad.md "Device loss": the
// device is lost (simhca SIGKILLed) under user-MAD clients. Their MAD
// sockets and agents stay: a request written while the device is away
// comes back at once with status EIO, a read just waits; once the device
// is back, an agent registered before the loss receives a request sent to
// it, and the port held by an issm file has IsSM again. Every device
// command takes 50 ms (simhca --cmd-delay-ms), so the restart, dozens of
// commands, leaves seconds for the send during the loss.
TEST_CASE("umad: MAD sockets and agents outlive a lost device; a send meanwhile comes back EIO", "[umad]") {
  Env env(7, {"--simhca-arg=--cmd-delay-ms", "--simhca-arg=50"});
  const VendorPair v;
  const int rfd = v.rfd, receiver = v.receiver, sfd = v.sfd, sender = v.sender;
  // Before the loss: the request reaches the receiver (loopback to LID 7).
  REQUIRE(send_vendor_get(sfd, sender, 7, 0x100) == 0);
  Got g = recv_one(rfd, 5000);
  REQUIRE(g.agent == receiver);
  CHECK(g.tid == 0x100);
  CHECK(recv_one(sfd, 5000).status == ETIMEDOUT);  // nobody answers it
  char issm[256];
  REQUIRE(umad_get_issm_path(nullptr, 1, issm, sizeof issm) == 0);
  constexpr uint32_t kIsSm = 1u << 1;
  const int sm = ::open(issm, O_RDONLY | O_NONBLOCK);
  REQUIRE(sm >= 0);
  REQUIRE(wait_cap(kIsSm, true));

  const pid_t sim = kill_device(env);
  // During the loss: the send comes back at once, EIO; the receiver's read
  // waits (no error, nothing).
  REQUIRE(send_vendor_get(sfd, sender, 7, 0x200) == 0);
  g = recv_one(sfd, 5000);
  CHECK(g.agent == sender);
  CHECK(g.status == EIO);
  CHECK(g.tid == 0x200);
  CHECK(recv_one(rfd, 100).agent == -ETIMEDOUT);
  INFO(env.ibd->log_tail());
  CHECK(env.ibd->log_tail(100000).find("is back") == std::string::npos);  // it was during the loss

  // After recovery (a new connection's HELLO waits for it): the agent
  // registered before the loss receives a request again, on the same fd.
  wait_device_back(env, sim);
  bool received = false;
  for (uint64_t tid = 0x300; tid < 0x300 + 100 && !received; ++tid) {
    REQUIRE(send_vendor_get(sfd, sender, 7, tid) == 0);
    g = recv_one(rfd, 1000);
    received = g.agent == receiver && g.tid == tid;
    // The sender's copy: EIO while the port's MAD layer reopens, then
    // ETIMEDOUT (the receiver does not answer).
    const Got back = recv_one(sfd, 5000);
    CHECK(back.agent == sender);
    CHECK((back.status == EIO || back.status == ETIMEDOUT));
  }
  CHECK(received);
  CHECK(wait_cap(kIsSm, true));  // the issm file is still held
  ::close(sm);
  CHECK(wait_cap(kIsSm, false));
  umad_close_port(sfd);
  umad_close_port(rfd);
}

// docs/operations.md "Privileges": the user-MAD service is root's (or
// CAP_NET_ADMIN's), as /dev/infiniband/umadN and issmN are (mode 0600).
TEST_CASE("umad: user nobody gets EPERM from UMAD_OPEN and EACCES on the issm file; root gets both", "[umad]") {
  Env env;
  char path[256];
  REQUIRE(umad_get_issm_path(nullptr, 1, path, sizeof path) == 0);
  constexpr uint32_t kIsSm = 1u << 1;
  auto got = run_as_nobody([&] {
    const int fd = umad_open_port(nullptr, 0);
    const int issm = ::open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    return std::vector<int>{fd < 0 ? -fd : 0, issm < 0 ? errno : 0};
  });
  REQUIRE(got.size() == 2);
  CHECK(got[0] == EPERM);
  CHECK(got[1] == EACCES);
  CHECK((cap_mask(1) & kIsSm) == 0);
  // Root: the port, an SMP class, the issm file.
  const int fd = umad_open_port(nullptr, 0);
  REQUIRE(fd >= 0);
  long mask[2] = {1L << 0x01, 0};  // Get
  CHECK(umad_register(fd, 0x81, 1, 0, mask) >= 0);
  const int issm = ::open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  CHECK(issm >= 0);
  CHECK(wait_cap(kIsSm, true));
  if (issm >= 0) ::close(issm);
  umad_close_port(fd);
}

// --umad-user-access=gmp: every user may use QP1 (GMPs), no one but root
// and CAP_NET_ADMIN QP0: an SMP class is EPERM, and an SMP or a MAD to QP0
// written through a GMP agent comes back with status EPERM.
TEST_CASE("umad: with --umad-user-access=gmp, nobody sends GMPs on QP1 and nothing on QP0", "[umad]") {
  Env env(7, {"--umad-user-access=gmp"});
  auto got = run_as_nobody([&] {
    std::vector<int> out;
    const int fd = umad_open_port(nullptr, 0);
    out.push_back(fd < 0 ? -fd : 0);
    if (fd < 0) return out;
    long mask[2] = {1L << 0x01, 0};
    const int smp = umad_register(fd, 0x81, 1, 0, mask);
    out.push_back(smp < 0 ? -smp : 0);
    const int lid_smp = umad_register(fd, 0x01, 1, 0, mask);
    out.push_back(lid_smp < 0 ? -lid_smp : 0);
    const int pma = umad_register(fd, 0x04, 1, 0, nullptr);
    out.push_back(pma < 0 ? -pma : 0);
    if (pma < 0) return out;
    std::vector<uint8_t> buf(umad_size() + 256), in(umad_size() + 256);
    auto status_of = [&](uint64_t tid) {
      int len = 256;
      const int r = umad_recv(fd, in.data(), &len, 5000);
      if (r < 0) return 1000 - r;
      auto* m = static_cast<uint8_t*>(umad_get_mad(in.data()));
      uint64_t t = 0;
      for (int i = 0; i < 8; ++i) t = t << 8 | m[8 + i];
      return (t & 0xffffffffu) == (tid & 0xffffffffu) ? int(umad_status(in.data())) : 2000;
    };
    // An SMP (DR Get NodeInfo, IBA 14.2.5.3) written on the PMA agent.
    auto* mad = static_cast<uint8_t*>(umad_get_mad(buf.data()));
    pma_get_classportinfo(mad, 0x101);
    mad[1] = 0x81;
    mad[16] = 0x00;
    mad[17] = 0x11;
    umad_set_addr(buf.data(), 0xffff, 0, 0, 0);
    out.push_back(umad_send(fd, pma, buf.data(), 256, 100, 0));
    out.push_back(status_of(0x101));
    // A GMP to QP0.
    pma_get_classportinfo(mad, 0x102);
    umad_set_addr(buf.data(), 7, 0, 0, 0x80010000);
    out.push_back(umad_send(fd, pma, buf.data(), 256, 100, 0));
    out.push_back(status_of(0x102));
    // A GMP to QP1 of a LID nobody has: sent, then timed out.
    pma_get_classportinfo(mad, 0x103);
    umad_set_addr(buf.data(), 0x1234, 1, 0, 0x80010000);
    out.push_back(umad_send(fd, pma, buf.data(), 256, 100, 0));
    out.push_back(status_of(0x103));
    umad_close_port(fd);
    return out;
  });
  REQUIRE(got.size() == 10);
  CHECK(got[0] == 0);      // UMAD_OPEN
  CHECK(got[1] == EPERM);  // class 0x81
  CHECK(got[2] == EPERM);  // class 0x01
  CHECK(got[3] == 0);      // PerfMgmt
  CHECK(got[4] == 0);
  CHECK(got[5] == EPERM);  // the SMP
  CHECK(got[6] == 0);
  CHECK(got[7] == EPERM);  // to QP0
  CHECK(got[8] == 0);
  CHECK(got[9] == ETIMEDOUT);
}

// The user-MAD service is made once, with ibd's options, and outlives the
// device: --umad-user-access (and --umad-max-outstanding) still hold after a
// device loss (issue 13: the service made anew at each restart had lost
// them, and user nobody got EPERM).
TEST_CASE("umad: --umad-user-access=gmp still holds after a device loss", "[umad]") {
  Env env(7, {"--umad-user-access=gmp"});
  const pid_t sim = kill_device(env);
  wait_device_back(env, sim);
  auto got = run_as_nobody([&] {
    const int fd = umad_open_port(nullptr, 0);
    const int pma = fd < 0 ? fd : umad_register(fd, 0x04, 1, 0, nullptr);
    if (fd >= 0) umad_close_port(fd);
    return std::vector<int>{fd < 0 ? -fd : 0, pma < 0 ? -pma : 0};
  });
  REQUIRE(got.size() == 2);
  CHECK(got[0] == 0);  // UMAD_OPEN
  CHECK(got[1] == 0);  // a PerfMgmt agent
}

// The issm file is created by ibd, mode 0600, and never through a symlink:
// one planted at its path (the socket's directory may be writable by
// others) neither gets its target truncated or chmodded nor is watched.
TEST_CASE("umad: a symlink planted at the issm path is not followed; the file is 0600", "[umad]") {
  TempDir dir;
  const std::string victim = dir.path() + "/victim";
  {
    int v = ::open(victim.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
    REQUIRE(v >= 0);
    REQUIRE(::write(v, "precious", 8) == 8);
    ::close(v);
    ::chmod(victim.c_str(), 0644);
  }
  const std::string issm = dir.path() + "/u.issm1";
  REQUIRE(::symlink(victim.c_str(), issm.c_str()) == 0);
  IbdOptions o;
  o.lid = 7;
  Ibd ibd(dir.path(), "u", o);
  ::setenv("OPENIB_SOCKET", ibd.socket().c_str(), 1);
  char path[256];
  REQUIRE(umad_get_issm_path(nullptr, 1, path, sizeof path) == 0);
  REQUIRE(std::string(path) == issm);
  struct stat st{};
  REQUIRE(::stat(victim.c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0644);
  CHECK(st.st_size == 8);
  REQUIRE(::lstat(issm.c_str(), &st) == 0);
  CHECK(S_ISREG(st.st_mode));
  CHECK((st.st_mode & 07777) == 0600);
  CHECK(st.st_uid == ::geteuid());
  constexpr uint32_t kIsSm = 1u << 1;
  const int f = ::open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  REQUIRE(f >= 0);
  CHECK(wait_cap(kIsSm, true));
  ::close(f);
  CHECK(wait_cap(kIsSm, false));
}

// A MAD socket's datagrams take no fds; one attached to a datagram is
// released where its close cannot stall ibd (docs/client-protocol.md §5).
// ibd is stopped (SIGSTOP) while the datagram is queued, so that the
// test's reference goes first and ibd's is the last.
TEST_CASE("umad: an fd whose close blocks, attached to a MAD socket's datagram, stalls no one", "[umad]") {
  Env env;
  const int fd = umad_open_port(nullptr, 0);
  REQUIRE(fd >= 0);
  const int agent = umad_register(fd, 0x04, 1, 0, nullptr);
  REQUIRE(agent >= 0);
  LingeringTcp tcp;
  openib::UniqueFd t(tcp.make());
  std::vector<uint8_t> buf(umad_size() + 256);
  pma_get_classportinfo(static_cast<uint8_t*>(umad_get_mad(buf.data())), 0x77);
  umad_set_addr(buf.data(), 0x1234 /* nobody */, 1, 0, 0x80010000);
  auto* hdr = static_cast<ib_user_mad*>(static_cast<void*>(buf.data()));
  hdr->agent_id = uint32_t(agent);
  hdr->timeout_ms = 100;
  REQUIRE(::kill(env.ibd->pid(), SIGSTOP) == 0);
  const bool sent = send_with_fd(fd, buf.data(), buf.size(), t.get()) > 0;
  t.reset();  // not the last reference: the queued datagram holds one
  REQUIRE(::kill(env.ibd->pid(), SIGCONT) == 0);
  REQUIRE(sent);
  // The MAD was sent as usual (and timed out), and another client is served.
  std::vector<uint8_t> in(umad_size() + 256);
  int len = 256;
  CHECK(umad_recv(fd, in.data(), &len, 5000) == agent);
  CHECK(umad_status(in.data()) == ETIMEDOUT);
  RawConn other(env.ibd->socket());
  other.send(openib::proto::Op::kQueryDevice, openib::proto::encode(openib::proto::Empty{}));
  CHECK(other.readable(3000));
  umad_close_port(fd);
}

namespace {

constexpr uint8_t kVendorClass = 0x30;  // vendor range 2 (IBA 13.4.4): RMPP, OUI at byte 37
uint8_t g_oui[3] = {0x00, 0x14, 0x05};

// A Set of vendor class 0x30 with RMPP active (IBA 13.6.2.1: version 1,
// DATA, Active), `bytes` long, TID `tid`, to LID `lid`; its data after the
// class header (byte 40 on) a pattern of `seed`.
std::vector<uint8_t> vendor_rmpp_set(size_t bytes, uint64_t tid, uint16_t lid, uint8_t seed) {
  std::vector<uint8_t> buf(umad_size() + bytes);
  auto* mad = static_cast<uint8_t*>(umad_get_mad(buf.data()));
  mad[0] = 1;
  mad[1] = kVendorClass;
  mad[2] = 1;
  mad[3] = 0x02;  // Set
  for (int i = 0; i < 8; ++i) mad[8 + i] = uint8_t(tid >> (56 - 8 * i));
  mad[17] = 0x10;
  mad[24] = 1;     // RMPPVersion
  mad[25] = 1;     // DATA
  mad[26] = 0x01;  // Active
  std::memcpy(mad + 37, g_oui, 3);
  for (size_t i = 40; i < bytes; ++i) mad[i] = uint8_t(i * 7 + seed);
  umad_set_addr(buf.data(), lid, 1, 0, 0x80010000);
  return buf;
}

int64_t counter(const Env& env, const std::string& name) {
  auto r = ibdctl(env.ibd->socket(), "counters");
  INFO(r.err);
  REQUIRE(r.exited_ok());
  auto j = nlohmann::json::parse(r.out);
  return j["counters"].value(name, int64_t(-1));
}

// The MAD socket's piece header (docs/client-protocol.md §10.1).
std::vector<uint8_t> piece(uint32_t id, uint32_t total, uint32_t offset, size_t data, uint8_t fill = 0) {
  std::vector<uint8_t> p(16 + data, fill);
  const uint32_t w[4] = {0x43504d55, id, total, offset};
  std::memcpy(p.data(), w, 16);
  return p;
}

// A vendor Get from sfd's agent to rfd's agent (loopback) arrives: the
// MAD socket and ibd still serve.
bool still_served(int sfd, int sender, int rfd, int receiver, uint64_t tid) {
  if (send_vendor_get(sfd, sender, 7, tid) != 0) return false;
  for (int i = 0; i < 20; ++i) {
    Got g = recv_one(rfd, 5000);
    if (g.agent < 0) return false;
    if (g.agent == receiver && g.tid == uint32_t(tid)) return true;
  }
  return false;
}

}  // namespace

// docs/client-protocol.md §10.1: an RMPP message longer than one datagram
// and than the old 4 MiB limit of one crosses the MAD socket in pieces,
// written by umad_send (to ibd, which segments it) and read by umad_recv
// (from ibd, which reassembled it): whole, its length exact, and a buffer
// too small for it gets ENOSPC with the length needed, the message queued.
TEST_CASE("umad: a 5 MiB RMPP message crosses the MAD socket whole, both ways", "[umad]") {
  Env env;
  long set_mask[2] = {1L << 0x02, 0};
  const int rfd = umad_open_port(nullptr, 0);
  REQUIRE(rfd >= 0);
  const int receiver = umad_register_oui(rfd, kVendorClass, 1, g_oui, set_mask);
  REQUIRE(receiver >= 0);
  const int sfd = umad_open_port(nullptr, 0);
  REQUIRE(sfd >= 0);
  const int sender = umad_register_oui(sfd, kVendorClass, 1, g_oui, nullptr);
  REQUIRE(sender >= 0);
  const size_t bytes = (5u << 20) + 123;
  auto out = vendor_rmpp_set(bytes, 0x4242, 7, 3);
  REQUIRE(umad_send(sfd, sender, out.data(), int(bytes), 0, 0) == 0);
  std::vector<uint8_t> in(umad_size() + 256);
  int len = 256;
  int r = umad_recv(rfd, in.data(), &len, 120000);
  REQUIRE(r == -ENOSPC);
  REQUIRE(len == int(bytes));
  in.resize(umad_size() + size_t(len));
  r = umad_recv(rfd, in.data(), &len, 1000);
  REQUIRE(r == receiver);
  REQUIRE(len == int(bytes));
  CHECK(umad_status(in.data()) == 0);
  auto* got = static_cast<uint8_t*>(umad_get_mad(in.data()));
  auto* sent = static_cast<uint8_t*>(umad_get_mad(out.data()));
  CHECK(got[1] == kVendorClass);
  CHECK(got[15] == 0x42);
  CHECK(std::memcmp(got + 40, sent + 40, bytes - 40) == 0);
  CHECK(counter(env, "umad_messages_in_pieces_received") == 1);
  CHECK(counter(env, "umad_messages_in_pieces_sent") == 1);
  CHECK(counter(env, "umad_bad_pieces") == 0);
  // Past the documented maximum: a clear error, nothing sent.
  std::vector<uint8_t> huge(umad_size() + (64u << 20));
  CHECK(umad_send(sfd, sender, huge.data(), int(64u << 20), 0, 0) == -EMSGSIZE);
  // A short one after it: one datagram, as before.
  out = vendor_rmpp_set(1000, 0x4343, 7, 5);
  REQUIRE(umad_send(sfd, sender, out.data(), 1000, 0, 0) == 0);
  len = int(in.size() - umad_size());
  CHECK(umad_recv(rfd, in.data(), &len, 10000) == receiver);
  CHECK(len == 1000);
  umad_close_port(sfd);
  umad_close_port(rfd);
}

// Pieces written past the library, as any local client could: a bogus
// header, a huge total, two messages' pieces interleaved, a continuation
// nothing began, a message begun and never finished. Each is dropped and
// counted; the session and ibd go on, as does a client leaving
// mid-message.
TEST_CASE("umad: bogus, huge, interleaved and unfinished pieces are dropped; ibd goes on", "[umad]") {
  Env env;
  long get_mask[2] = {1L << 0x01, 0};
  const VendorPair v;
  const int rfd = v.rfd, receiver = v.receiver, sfd = v.sfd, sender = v.sender;
  auto put = [&](int fd, const std::vector<uint8_t>& p) {
    CHECK(::send(fd, p.data(), p.size(), MSG_NOSIGNAL) == ssize_t(p.size()));
  };
  constexpr size_t kData = (64u << 10) - 16;  // a full piece's data
  const uint32_t total = 3 * kData;           // a message of three pieces
  int64_t bad = 0;
  SECTION("bogus headers") {
    put(sfd, piece(1, 0, 0, 10));                  // a total that fits one datagram
    put(sfd, piece(1, total, 5, kData));           // an offset inside a piece
    put(sfd, piece(1, total, 0, 100));             // a first piece too short
    put(sfd, std::vector<uint8_t>{0x55, 0x4d, 0x50, 0x43, 1, 2});  // the magic, then too little
    bad = 4;
  }
  SECTION("a huge total") {
    put(sfd, piece(2, 0xffffffffu, 0, kData));
    put(sfd, piece(2, (64u << 20) + 1, 0, kData));
    bad = 2;
  }
  SECTION("two messages interleaved") {
    put(sfd, piece(3, total, 0, kData));
    put(sfd, piece(4, total, 0, kData));      // begins before 3 ended: 3 goes, and this
    put(sfd, piece(3, total, kData, kData));  // nothing begun: dropped
    put(sfd, piece(4, total, kData, kData));  // nor here
    bad = 3;
  }
  SECTION("a message begun, a MAD in between, never finished") {
    put(sfd, piece(5, total, 0, kData));
    put(sfd, piece(5, total, kData, kData));
    bad = 0;  // held, until the client leaves (below)
  }
  SECTION("a client that leaves mid-message") {
    const int other = umad_open_port(nullptr, 0);
    REQUIRE(other >= 0);
    REQUIRE(umad_register(other, 0x09, 1, 0, nullptr) >= 0);
    put(other, piece(6, 64u << 20, 0, kData));
    put(other, piece(6, 64u << 20, kData, kData));
    umad_close_port(other);
  }
  // Whole MADs still pass (also between a message's pieces).
  CHECK(still_served(sfd, sender, rfd, receiver, 0x500));
  CHECK(counter(env, "umad_bad_pieces") == bad);
  CHECK(counter(env, "umad_messages_in_pieces_received") == 0);
  CHECK(env.ibd->alive());
  umad_close_port(sfd);
  umad_close_port(rfd);
  // A new client is served as before.
  const int fd = umad_open_port(nullptr, 0);
  REQUIRE(fd >= 0);
  const int a = umad_register(fd, 0x09, 1, 0, get_mask);
  REQUIRE(a >= 0);
  const int b = umad_register(fd, 0x09, 1, 0, nullptr);
  REQUIRE(b >= 0);
  CHECK(still_served(fd, b, fd, a, 0x600));
  umad_close_port(fd);
}

// The framing alone (src/clientproto/mad_socket.hpp): a message in three
// pieces, a whole one between them, comes out whole; a piece of another
// message in the middle drops both.
TEST_CASE("umad: the MAD socket's pieces put together, and out of sequence dropped", "[umad]") {
  namespace ms = openib::proto::madsock;
  const uint32_t total = uint32_t(2 * ms::kPieceData + 100);
  std::vector<std::byte> msg(total);
  for (size_t i = 0; i < msg.size(); ++i) msg[i] = std::byte(i * 13);
  auto piece_of = [&](uint32_t id, uint32_t offset) {
    std::vector<std::byte> d(ms::kPieceHdr);
    ms::encode_piece_header(std::span<std::byte, ms::kPieceHdr>(d.data(), ms::kPieceHdr), {id, total, offset});
    d.insert(d.end(), msg.begin() + offset, msg.begin() + offset + ms::piece_len(total, offset));
    return d;
  };
  ms::Reassembler r;
  auto s = r.feed(piece_of(9, 0));
  CHECK((!s.message && s.error.empty()));
  std::vector<std::byte> whole(ms::kUmadHdr + 256, std::byte{1});
  s = r.feed(whole);
  REQUIRE(s.message);
  CHECK(r.message().size() == whole.size());
  CHECK(r.buffered() == ms::kPieceData);  // the message in pieces goes on
  s = r.feed(piece_of(9, uint32_t(ms::kPieceData)));
  CHECK((!s.message && s.error.empty()));
  s = r.feed(piece_of(9, uint32_t(2 * ms::kPieceData)));
  REQUIRE(s.message);
  REQUIRE(r.message().size() == total);
  CHECK(std::memcmp(r.message().data(), msg.data(), total) == 0);
  // Interleaved: message 10 begun, a piece of 11 at the offset 10 expects.
  CHECK(r.feed(piece_of(10, 0)).error.empty());
  s = r.feed(piece_of(11, uint32_t(ms::kPieceData)));
  CHECK(!s.message);
  CHECK(!s.error.empty());
  CHECK(r.buffered() == 0);
  s = r.feed(piece_of(10, uint32_t(ms::kPieceData)));  // what is left of 10: nothing began it
  CHECK(!s.error.empty());
  CHECK(r.buffered() == 0);
}
