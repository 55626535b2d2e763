// The data path once the device is gone (docs/client-protocol.md §6.1, §6.2;
// docs/operations.md §5): a client with connected RC QPs, an SRQ and an
// armed CQ; ibd's embedded simhca is SIGKILLed; without the client reading
// its async events, post_send, post_recv, the SRQ's post_recv and
// req_notify fail with ENODEV, and keep failing after the device is back;
// a client started after the recovery works normally.
//
// And the device status page that carries this to the client (§6.2) is
// read-only for a hostile client: it cannot map it writable, mprotect
// libopenib's mapping writable, truncate it, grow it or write it, not even
// through a read-write re-open of /proc/self/fd/N.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

#include "clientproto/socket.hpp"
#include "common/byte_order.hpp"
#include "common/fd.hpp"
#include "harness.hpp"
#include "rc_link.hpp"

using namespace openib;
using namespace openib::testing;
namespace proto = openib::proto;

namespace {

// A HELLO (management only, so no UAR fd) offering protocol versions
// [1, version_max] straight over the socket, as a hostile client would;
// returns the negotiated version and the reply's fds.
struct RawHello {
  uint32_t version = 0;
  std::vector<UniqueFd> fds;
  UniqueFd sock;
};

RawHello raw_hello(const std::string& socket, uint32_t version_max) {
  RawHello h;
  h.sock = UniqueFd(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  REQUIRE(h.sock);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::strncpy(a.sun_path, socket.c_str(), sizeof(a.sun_path) - 1);
  REQUIRE(::connect(h.sock.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0);
  proto::Header head;
  head.op = uint16_t(proto::Op::kHello);
  head.seq = 1;
  proto::HelloReq req;
  req.version_min = 1;
  req.version_max = version_max;
  req.flags = proto::kHelloNoUar;
  REQUIRE(proto::send_message(h.sock.get(), head, proto::encode(req)).ok());
  pollfd p{h.sock.get(), POLLIN, 0};
  REQUIRE(::poll(&p, 1, 10000) == 1);
  auto m = proto::recv_message(h.sock.get());
  REQUIRE(m.ok());
  REQUIRE(m->body.size() >= 4);
  REQUIRE(bytes::get_le32(m->body, 0) == 0);  // status
  auto rep = proto::decode<proto::HelloRep>(std::span(m->body).subspan(4));
  REQUIRE(rep.ok());
  h.version = rep->version;
  h.fds = std::move(m->fds);
  return h;
}

// The address of libopenib's mapping of the status page (by its memfd name).
uintptr_t libopenib_status_mapping() {
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);)
    if (line.find("memfd:ibd-device-status") != std::string::npos)
      return std::stoull(line.substr(0, line.find('-')), nullptr, 16);
  return 0;
}

uint32_t page_state(const void* page) {
  return __atomic_load_n(reinterpret_cast<const uint32_t*>(static_cast<const std::byte*>(page) +
                                                           proto::kStatusStateOffset),
                         __ATOMIC_ACQUIRE);
}

int post_srq_recv(Srq& srq, Mr& mr, size_t offset, uint32_t len, uint64_t wr_id) {
  Sge sge{reinterpret_cast<uint64_t>(static_cast<uint8_t*>(mr.addr()) + offset), len, mr.lkey()};
  RecvWr wr;
  wr.wr_id = wr_id;
  wr.sg = {&sge, 1};
  return srq.post_recv(wr);
}

// One RDMA WRITE of 256 bytes from `from` into `to`'s buffer, its data checked.
void write_one(Side& from, Side& to, uint8_t fill) {
  std::memset(from.buf() + 4096, fill, 256);
  REQUIRE(post_send(*from.qp, *from.mr, 4096, 256, 2, WrOpcode::kWrite,
                    reinterpret_cast<uint64_t>(to.buf()), to.mr->rkey()) == 0);
  auto s = wait_wc(*from.cq, 5000);
  REQUIRE(s.ok());
  CHECK(s->status == 0);
  CHECK(to.buf()[0] == fill);
  CHECK(to.buf()[255] == fill);
}

}  // namespace

TEST_CASE("device lost: post_send, post_recv, SRQ post_recv and req_notify fail with ENODEV", "[device-lost]") {
  TempDir dir;
  IbdOptions o;
  o.log = "info";
  Ibd ibd(dir.path(), "lost", o);
  auto a = open_side(ibd.socket(), 64 * 1024);
  REQUIRE(a.ok());
  auto b = open_side(ibd.socket(), 64 * 1024);
  REQUIRE(b.ok());
  Side& x = **a;
  Side& y = **b;
  REQUIRE(connect(x, y).ok());
  write_one(x, y, 0x5a);

  // x also has an SRQ with a QP on it, and a CQ armed on a completion channel.
  auto srq = x.ctx->create_srq(*x.pd, 16, 1);
  REQUIRE(srq.ok());
  QpInit init;
  init.send_cq = x.cq.get();
  init.recv_cq = x.cq.get();
  init.srq = srq->get();
  auto srq_qp = x.ctx->create_qp(*x.pd, init);
  REQUIRE(srq_qp.ok());
  auto channel = x.ctx->create_comp_channel();
  REQUIRE(channel.ok());
  auto armed_cq = x.ctx->create_cq(16, channel->get());
  REQUIRE(armed_cq.ok());
  REQUIRE((*armed_cq)->req_notify().ok());
  REQUIRE(post_srq_recv(**srq, *x.mr, 0, 1024, 7) == 0);
  REQUIRE(post_recv(*x.qp, *x.mr, 0, 1024, 8) == 0);  // outstanding when the device goes

  // Forget the async eventfd's count so far (not the events: they stay unread).
  const int afd = x.ctx->async_fd();
  uint64_t count = 0;
  while (::read(afd, &count, sizeof(count)) == sizeof(count)) {
  }

  const pid_t sim = ibd.simhca_pid();
  REQUIRE(sim > 0);
  REQUIRE(::kill(sim, SIGKILL) == 0);
  // ibd marks the status page before it queues DEVICE_FATAL: once the
  // eventfd is readable, the data path must already refuse. The events
  // themselves are not fetched.
  pollfd p{afd, POLLIN, 0};
  INFO(ibd.log_tail());
  REQUIRE(::poll(&p, 1, 10000) == 1);

  CHECK(post_send(*x.qp, *x.mr, 4096, 64, 10) == ENODEV);
  CHECK(post_send(*y.qp, *y.mr, 4096, 64, 11) == ENODEV);
  CHECK(post_recv(*x.qp, *x.mr, 0, 1024, 12) == ENODEV);
  CHECK(post_recv(*y.qp, *y.mr, 0, 1024, 13) == ENODEV);
  CHECK(post_srq_recv(**srq, *x.mr, 0, 1024, 14) == ENODEV);
  auto arm = (*armed_cq)->req_notify();
  REQUIRE_FALSE(arm.ok());
  CHECK(arm.error().code == ENODEV);
  // poll_cq: what the CQ holds, then nothing (§6.1); no error, no flush.
  Wc wc[16];
  int polled = 0;
  for (int i = 0; i < 4; ++i) {
    const int n = x.cq->poll(wc);
    REQUIRE(n >= 0);
    polled += n;
  }
  CHECK(polled == 0);  // the recvs posted before the loss never complete
  CHECK(x.cq->poll(wc) == 0);

  // After recovery: a new pair of clients works; the old ones still get
  // ENODEV (their page stays the lost generation's).
  auto c = open_side(ibd.socket(), 64 * 1024);
  INFO(ibd.log_tail());
  REQUIRE(c.ok());
  auto d = open_side(ibd.socket(), 64 * 1024);
  REQUIRE(d.ok());
  CHECK(ibd.simhca_pid() != sim);
  REQUIRE(connect(**c, **d).ok());
  for (uint8_t i = 0; i < 10; ++i) write_one((i % 2) ? **d : **c, (i % 2) ? **c : **d, uint8_t(0x30 + i));
  CHECK(post_send(*x.qp, *x.mr, 4096, 64, 20) == ENODEV);
  CHECK(post_srq_recv(**srq, *x.mr, 0, 1024, 21) == ENODEV);
  // The old context's control calls: ENODEV too (§6.1).
  auto pd = x.ctx->alloc_pd();
  REQUIRE_FALSE(pd.ok());
  CHECK(pd.error().code == ENODEV);

  armed_cq->reset();
  srq_qp->reset();
  srq->reset();
  REQUIRE(ibd.alive());
}

TEST_CASE("device status page: a client can neither write, map writable, truncate nor grow it", "[hostile]") {
  TempDir dir;
  Ibd ibd(dir.path(), "status", IbdOptions{});
  auto s = open_side(ibd.socket(), 64 * 1024);
  REQUIRE(s.ok());
  // A version 1 client gets no status page (§2); a version 2 one gets it
  // as the last fd of HelloRep.
  RawHello v1 = raw_hello(ibd.socket(), 1);
  CHECK(v1.version == 1);
  CHECK(v1.fds.empty());
  RawHello v2 = raw_hello(ibd.socket(), 2);
  CHECK(v2.version == 2);
  REQUIRE(v2.fds.size() == 1);
  const int fd = v2.fds[0].get();
  const size_t len = proto::kStatusPageSize;
  CHECK((::fcntl(fd, F_GETFL) & O_ACCMODE) == O_RDONLY);
  void* ro = ::mmap(nullptr, len, PROT_READ, MAP_SHARED, fd, 0);
  REQUIRE(ro != MAP_FAILED);
  CHECK(page_state(ro) == proto::kDeviceRunning);

  // The fd libopenib was given: read-only.
  errno = 0;
  CHECK(::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) == MAP_FAILED);
  CHECK(errno == EACCES);
  errno = 0;
  CHECK(::ftruncate(fd, 0) == -1);
  CHECK(errno == EINVAL);  // ftruncate(2): not open for writing
  errno = 0;
  CHECK(::ftruncate(fd, 2 * len) == -1);
  CHECK(errno == EINVAL);
  const uint32_t lost = proto::kDeviceLost;
  errno = 0;
  CHECK(::pwrite(fd, &lost, sizeof(lost), proto::kStatusStateOffset) == -1);
  CHECK(errno == EBADF);
  // Neither can a read-only mapping of it, ours or libopenib's, be made writable.
  errno = 0;
  CHECK(::mprotect(ro, len, PROT_READ | PROT_WRITE) == -1);
  CHECK(errno == EACCES);
  const uintptr_t lib = libopenib_status_mapping();
  REQUIRE(lib != 0);
  errno = 0;
  CHECK(::mprotect(reinterpret_cast<void*>(lib), len, PROT_READ | PROT_WRITE) == -1);
  CHECK(errno == EACCES);

  // A read-write re-open through /proc (possible for root: a memfd's mode
  // is 0777): the seals still refuse every write, resize and new seal.
  const std::string path = "/proc/self/fd/" + std::to_string(fd);
  UniqueFd rw(::open(path.c_str(), O_RDWR | O_CLOEXEC));
  if (!rw) {
    CHECK(errno == EACCES);
  } else {
    errno = 0;
    CHECK(::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, rw.get(), 0) == MAP_FAILED);
    CHECK(errno == EPERM);  // F_SEAL_FUTURE_WRITE
    errno = 0;
    CHECK(::ftruncate(rw.get(), 0) == -1);
    CHECK(errno == EPERM);  // F_SEAL_SHRINK
    errno = 0;
    CHECK(::ftruncate(rw.get(), 2 * len) == -1);
    CHECK(errno == EPERM);  // F_SEAL_GROW
    errno = 0;
    CHECK(::pwrite(rw.get(), &lost, sizeof(lost), proto::kStatusStateOffset) == -1);
    CHECK(errno == EPERM);
    errno = 0;
    CHECK(::fcntl(rw.get(), F_ADD_SEALS, F_SEAL_WRITE) == -1);
    CHECK(errno == EPERM);  // F_SEAL_SEAL
  }

  // Nothing changed: the page says running, and the client still works.
  CHECK(page_state(ro) == proto::kDeviceRunning);
  CHECK(page_state(reinterpret_cast<const void*>(lib)) == proto::kDeviceRunning);
  ::munmap(ro, len);
  CHECK(post_recv(*(*s)->qp, *(*s)->mr, 0, 1024, 1) == 0);
  REQUIRE(ibd.alive());
}
