// ibd end to end (docs/client-protocol.md, docs/operations.md): the daemon
// with its embedded simhca, driven over its socket like libopenib would.
#include "test_ibd_fixture.hpp"

using namespace openib;
using namespace openib::test;
using proto::Op;

namespace {

constexpr uint32_t kState = 1u << 0, kAccess = 1u << 3, kPkeyIndex = 1u << 4, kPort = 1u << 5,
                   kAv = 1u << 7, kPathMtu = 1u << 8, kTimeout = 1u << 9, kRetryCnt = 1u << 10,
                   kRnrRetry = 1u << 11, kRqPsn = 1u << 12, kMaxQpRdAtomic = 1u << 13,
                   kMinRnrTimer = 1u << 15, kSqPsn = 1u << 16, kMaxDestRdAtomic = 1u << 17,
                   kDestQpn = 1u << 20;

constexpr size_t kMem = 64 * 1024;

// A client with a PD, a mapped memfd, an MR, a CQ and an RC QP whose rings
// live in that memfd: [0, 16K) CQ ring (2^8 CQEs), 16K CQ dbr, 17K QP dbr,
// [20K, 24K) SQ (2^6 x 64), [24K, 26K) RQ (2^6 x 32), data from 32K.
struct Objects {
  uint32_t pd = 0, mem = 0, mr = 0, cq = 0, qp = 0, qpn = 0;
  uint64_t iova = 0;
};

Objects make_objects(IbdClient& c, int memfd, int cq_eventfd = -1) {
  Objects o;
  o.pd = c.must<proto::HandleRep>(Op::kAllocPd, proto::Empty{}).handle;
  auto mm = c.must<proto::MapMemRep>(Op::kMapMem, proto::MapMemReq{kMem}, {memfd});
  o.mem = mm.handle;
  o.iova = mm.iova;
  CHECK(o.iova != 0);
  proto::RegMrReq mr{o.pd, o.mem, 32768, 32768, 0x7f0000008000, 7};
  o.mr = c.must<proto::RegMrRep>(Op::kRegMr, mr).handle;
  proto::CreateCqReq cq{o.mem, 0, 16384, 8, 0};
  std::vector<int> fds;
  if (cq_eventfd >= 0) {
    cq.flags = proto::kCqEventFd;
    fds.push_back(cq_eventfd);
  }
  auto cr = c.must<proto::ObjRep>(Op::kCreateCq, cq, fds);
  o.cq = cr.handle;
  proto::CreateQpReq qp;
  qp.pd = o.pd;
  qp.send_cq = o.cq;
  qp.recv_cq = o.cq;
  qp.type = 0;
  qp.log_sq_size = 6;
  qp.log_sq_stride = 6;
  qp.log_rq_size = 6;
  qp.log_rq_stride = 5;
  qp.mem = o.mem;
  qp.sq_offset = 20480;
  qp.rq_offset = 24576;
  qp.dbr_offset = 17408;
  auto qr = c.must<proto::ObjRep>(Op::kCreateQp, qp);
  o.qp = qr.handle;
  o.qpn = qr.number;
  return o;
}

void to_rts(IbdClient& c, const Objects& o) {
  proto::ModifyQpReq m;
  m.qp = o.qp;
  m.attr.mask = kState | kPkeyIndex | kPort | kAccess;
  m.attr.state = 1;  // INIT
  m.attr.port = 1;
  m.attr.access = 6;
  REQUIRE(c.call(Op::kModifyQp, m).status == 0);
  m.attr = {};
  m.attr.mask = kState | kAv | kPathMtu | kDestQpn | kRqPsn | kMaxDestRdAtomic | kMinRnrTimer;
  m.attr.state = 2;  // RTR
  m.attr.path_mtu = 5;
  m.attr.dest_qpn = o.qpn;
  m.attr.rq_psn = 0x100;
  m.attr.max_dest_rd_atomic = 4;
  m.attr.min_rnr_timer = 12;
  m.attr.av.dlid = 1;
  m.attr.av.port = 1;
  REQUIRE(c.call(Op::kModifyQp, m).status == 0);
  m.attr = {};
  m.attr.mask = kState | kTimeout | kRetryCnt | kRnrRetry | kSqPsn | kMaxQpRdAtomic;
  m.attr.state = 3;  // RTS
  m.attr.timeout = 14;
  m.attr.retry_cnt = 7;
  m.attr.rnr_retry = 7;
  m.attr.sq_psn = 0x200;
  m.attr.max_rd_atomic = 4;
  auto a = c.call(Op::kModifyQp, m);
  INFO(a.message);
  REQUIRE(a.status == 0);
}

const nlohmann::json* find_client(const nlohmann::json& info, uint32_t id) {
  for (const auto& c : info["clients"])
    if (c["id"] == id) return &c;
  return nullptr;
}

}  // namespace

TEST_CASE("ibd: HELLO, objects, QP to RTS, destroy", "[ibd]") {
  IbdProcess ibd;
  IbdClient c(ibd.socket());
  UniqueFd async(::eventfd(0, EFD_CLOEXEC));
  auto hello = c.hello(async.get());
  CHECK(hello.version == proto::kVersion);
  CHECK(hello.uar != 0);
  CHECK(hello.num_ports == 1);
  REQUIRE(hello.doorbell_mode == proto::kDoorbellMmap);
  REQUIRE(c.uar_fds().size() == 1);
  // The client's own doorbell page maps.
  void* page = ::mmap(nullptr, hello.uar_size, PROT_READ | PROT_WRITE, MAP_SHARED, c.uar_fds()[0].get(),
                      static_cast<off_t>(hello.uar_mmap_offset));
  CHECK(page != MAP_FAILED);
  if (page != MAP_FAILED) ::munmap(page, hello.uar_size);

  auto dev = c.must<proto::DeviceRep>(Op::kQueryDevice, proto::Empty{});
  CHECK(dev.max_qp > 0);
  CHECK(std::string(reinterpret_cast<const char*>(dev.name.data())) == "simhca0");
  auto port = c.must<proto::PortRep>(Op::kQueryPort, proto::PortReq{1});
  CHECK(port.state == 4);  // Active, from --lid's static setup
  CHECK(port.lid == 1);

  UniqueFd mem = make_memfd(kMem);
  UniqueFd cqev(::eventfd(0, EFD_CLOEXEC));
  Objects o = make_objects(c, mem.get(), cqev.get());
  to_rts(c, o);
  auto q = c.must<proto::QueryQpRep>(Op::kQueryQp, proto::HandleReq{o.qp});
  CHECK(q.attr.state == 3);
  CHECK(q.qpn == o.qpn);

  auto info = c.info(proto::kInfoObjects);
  const auto* me = find_client(info, hello.client_id);
  REQUIRE(me != nullptr);
  CHECK((*me)["qps"] == 1);
  CHECK((*me)["mems"] == 1);
  CHECK((*me)["objects"].size() == 5);
  bool rts = false;
  for (const auto& obj : (*me)["objects"])
    if (obj["kind"] == "QP") rts = obj["qpn"] == o.qpn && obj["state"] == "RTS";
  CHECK(rts);

  // Dependencies hold: memory under a QP and a PD under an MR stay.
  CHECK(c.call(Op::kUnmapMem, proto::HandleReq{o.mem}).status == EBUSY);
  CHECK(c.call(Op::kDeallocPd, proto::HandleReq{o.pd}).status == EBUSY);
  // Destroy in order; each handle is gone afterwards.
  CHECK(c.call(Op::kDestroyQp, proto::HandleReq{o.qp}).status == 0);
  CHECK(c.call(Op::kDestroyQp, proto::HandleReq{o.qp}).status == ENOENT);
  CHECK(c.call(Op::kDestroyCq, proto::HandleReq{o.cq}).status == 0);
  CHECK(c.call(Op::kDeregMr, proto::HandleReq{o.mr}).status == 0);
  CHECK(c.call(Op::kDeallocPd, proto::HandleReq{o.pd}).status == 0);
  CHECK(c.call(Op::kUnmapMem, proto::HandleReq{o.mem}).status == 0);
  info = c.info();
  me = find_client(info, hello.client_id);
  REQUIRE(me != nullptr);
  CHECK((*me)["qps"] == 0);
  CHECK((*me)["mems"] == 0);
  CHECK(info["counters"]["dma_mapped_bytes"].get<uint64_t>() < kMem + (64u << 20));
}

TEST_CASE("ibd: handles are per client; kinds, fds, bodies and ranges are checked", "[ibd]") {
  IbdProcess ibd;
  IbdClient a(ibd.socket()), b(ibd.socket());
  // Nothing but HELLO before HELLO.
  CHECK(b.call(Op::kAllocPd, proto::Empty{}).status == EPROTO);
  a.hello();
  b.hello();
  UniqueFd mem = make_memfd(kMem);
  Objects o = make_objects(a, mem.get());

  SECTION("another client's handles do not exist for it") {
    CHECK(b.call(Op::kDeallocPd, proto::HandleReq{o.pd}).status == ENOENT);
    CHECK(b.call(Op::kDestroyQp, proto::HandleReq{o.qp}).status == ENOENT);
    CHECK(b.call(Op::kQueryQp, proto::HandleReq{o.qp}).status == ENOENT);
    proto::RegMrReq mr{o.pd, o.mem, 0, 4096, 0x1000, 1};
    CHECK(b.call(Op::kRegMr, mr).status == ENOENT);
    proto::CreateCqReq cq{o.mem, 0, 16384, 4, 0};
    CHECK(b.call(Op::kCreateCq, cq).status == ENOENT);
    // ...and a's objects are untouched.
    CHECK(a.call(Op::kQueryQp, proto::HandleReq{o.qp}).status == 0);
  }
  SECTION("a handle of the wrong kind") {
    CHECK(a.call(Op::kDeallocPd, proto::HandleReq{o.mem}).status == EINVAL);
    proto::RegMrReq mr{o.mem, o.mem, 0, 4096, 0x1000, 1};
    CHECK(a.call(Op::kRegMr, mr).status == EINVAL);
  }
  SECTION("fd counts must match the operation") {
    CHECK(a.call(Op::kMapMem, proto::MapMemReq{kMem}).status == EINVAL);  // no memfd
    UniqueFd extra = make_memfd(4096);
    CHECK(a.call(Op::kAllocPd, proto::Empty{}, {extra.get()}).status == EINVAL);
    CHECK(a.call(Op::kMapMem, proto::MapMemReq{4096}, {extra.get(), extra.get()}).status == EINVAL);
    int p[2];
    REQUIRE(::pipe2(p, O_CLOEXEC) == 0);
    CHECK(a.call(Op::kMapMem, proto::MapMemReq{4096}, {p[0]}).status == EINVAL);  // not a memfd
    ::close(p[0]);
    ::close(p[1]);
    CHECK(a.call(Op::kMapMem, proto::MapMemReq{8192}, {extra.get()}).status == EINVAL);  // too short
    CHECK(a.call(Op::kMapMem, proto::MapMemReq{100}, {extra.get()}).status == EINVAL);   // not pages
    // A CQ eventfd flag without the fd, and a non-eventfd as one.
    proto::CreateCqReq cq{o.mem, 8192, 16384 + 64, 4, proto::kCqEventFd};
    CHECK(a.call(Op::kCreateCq, cq).status == EINVAL);
    CHECK(a.call(Op::kCreateCq, cq, {extra.get()}).status == EINVAL);
  }
  SECTION("bodies must have their exact length") {
    auto pd = proto::encode(proto::HandleReq{o.pd});
    CHECK(a.raw(static_cast<uint16_t>(Op::kDeallocPd), std::span(pd).first(2)).status == EPROTO);
    auto mr = proto::encode(proto::RegMrReq{o.pd, o.mem, 0, 4096, 0x1000, 1});
    CHECK(a.raw(static_cast<uint16_t>(Op::kRegMr), std::span(mr).first(mr.size() - 1)).status == EPROTO);
    mr.push_back(std::byte{0});
    CHECK(a.raw(static_cast<uint16_t>(Op::kRegMr), mr).status == EPROTO);
    CHECK(a.raw(999, {}).status == EOPNOTSUPP);
    CHECK(a.call(Op::kHello, proto::HelloReq{}).status == EPROTO);  // HELLO twice
    // Still served after all that.
    CHECK(a.call(Op::kQueryQp, proto::HandleReq{o.qp}).status == 0);
  }
  SECTION("ranges inside the mapped memory, sizes within the device's") {
    proto::CreateCqReq cq{o.mem, kMem - 4096, 16384 + 64, 8, 0};  // ring runs past the end
    CHECK(a.call(Op::kCreateCq, cq).status == EINVAL);
    cq = {o.mem, 8192 + 8, 16384 + 64, 4, 0};  // ring not 64-byte aligned
    CHECK(a.call(Op::kCreateCq, cq).status == EINVAL);
    cq = {o.mem, 8192, UINT64_MAX - 3, 4, 0};  // offset overflow
    CHECK(a.call(Op::kCreateCq, cq).status == EINVAL);
    cq = {o.mem, 0, 16384 + 64, 60, 0};  // more CQEs than the device has
    CHECK(a.call(Op::kCreateCq, cq).status == EINVAL);
    proto::RegMrReq mr{o.pd, o.mem, kMem - 4096, 8192, 0x1000, 1};
    CHECK(a.call(Op::kRegMr, mr).status == EINVAL);
    mr = {o.pd, o.mem, 4096, 4096, 0x1000, 0x100};  // unknown access bit
    CHECK(a.call(Op::kRegMr, mr).status == EINVAL);
    proto::CreateQpReq qp;
    qp.pd = o.pd;
    qp.send_cq = o.cq;
    qp.recv_cq = o.cq;
    qp.type = 4;  // GSI: the daemon's, not a client's
    qp.log_sq_stride = 6;
    qp.log_rq_stride = 5;
    qp.mem = o.mem;
    qp.sq_offset = 20480;
    qp.rq_offset = 24576;
    qp.dbr_offset = 17416;
    CHECK(a.call(Op::kCreateQp, qp).status == EINVAL);
  }
}

TEST_CASE("ibd: a framing violation disconnects only that client", "[ibd]") {
  IbdProcess ibd;
  IbdClient a(ibd.socket()), b(ibd.socket());
  a.hello();
  b.hello();
  std::vector<std::byte> junk(20, std::byte{0x5a});  // bad magic
  REQUIRE(::send(a.fd(), junk.data(), junk.size(), MSG_NOSIGNAL) == 20);
  REQUIRE(a.readable(5000));
  auto m = proto::recv_message(a.fd());
  CHECK(!m.ok());
  CHECK(m.error().code == ECONNRESET);
  auto info = b.info();
  CHECK(info["counters"]["protocol_violations"] == 1);
  CHECK(info["clients"].size() == 1);
}

TEST_CASE("ibd: a client that disconnects has everything destroyed", "[ibd]") {
  IbdProcess ibd;
  IbdClient watcher(ibd.socket());
  watcher.hello();
  const auto start = watcher.info();
  const uint64_t mapped_before = start["counters"]["dma_mapped_bytes"];
  const uint64_t disconnects_before = start["counters"]["disconnects"];
  uint32_t gone_id = 0;
  {
    IbdClient c(ibd.socket());
    gone_id = c.hello().client_id;
    UniqueFd mem = make_memfd(kMem);
    Objects o = make_objects(c, mem.get());
    to_rts(c, o);
    auto info = watcher.info(proto::kInfoObjects);
    REQUIRE(find_client(info, gone_id) != nullptr);
    CHECK((*find_client(info, gone_id))["objects"].size() == 5);
    CHECK(info["counters"]["dma_mapped_bytes"].get<uint64_t>() == mapped_before + kMem);
  }  // closed with a QP in RTS
  nlohmann::json info;
  // Bounded: the close is seen on ibd's next turn; the client leaves the
  // table at once, its destroy commands complete a little later
  // (docs/client-protocol.md §6), then its memory is unmapped.
  for (int i = 0; i < 500; ++i) {
    info = watcher.info(proto::kInfoObjects);
    if (!find_client(info, gone_id) && info["counters"]["dma_mapped_bytes"] == mapped_before) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  CHECK(find_client(info, gone_id) == nullptr);
  CHECK(info["counters"]["dma_mapped_bytes"] == mapped_before);
  CHECK(info["counters"]["disconnects"] == disconnects_before + 1);
  // The same resources can be had again (UAR, QPs, memory).
  IbdClient again(ibd.socket());
  again.hello();
  UniqueFd mem = make_memfd(kMem);
  Objects o = make_objects(again, mem.get());
  to_rts(again, o);
}

TEST_CASE("ibd: one daemon per device", "[ibd]") {
  IbdProcess ibd;
  const int st = ibd.run_second(10000);
  REQUIRE(st != -1);
  CHECK(WIFEXITED(st));
  CHECK(WEXITSTATUS(st) != 0);
  CHECK(ibd.connectable());  // the first is unharmed
}

TEST_CASE("ibd: SIGTERM closes clients and exits 0", "[ibd]") {
  IbdProcess ibd;
  IbdClient c(ibd.socket());
  c.hello();
  UniqueFd mem = make_memfd(kMem);
  make_objects(c, mem.get());
  REQUIRE(::kill(ibd.pid(), SIGTERM) == 0);
  REQUIRE(c.readable(10000));
  auto m = proto::recv_message(c.fd());
  CHECK(!m.ok());
  CHECK(m.error().code == ECONNRESET);
  const int st = ibd.wait_exit(10000);
  REQUIRE(st != -1);
  CHECK(WIFEXITED(st));
  CHECK(WEXITSTATUS(st) == 0);
  CHECK(!std::filesystem::exists(ibd.socket()));
}

// HELLO with an async eventfd, the start-up port events fetched and the
// eventfd read: it is written next by a new event.
static UniqueFd hello_with_async_fd(IbdClient& c) {
  UniqueFd ev(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  c.hello(ev.get());
  (void)c.must<proto::AsyncEventsRep>(Op::kGetAsyncEvents, proto::Empty{});
  uint64_t v;
  (void)!::read(ev.get(), &v, sizeof v);
  return ev;
}

TEST_CASE("ibd: with --restart-limit 0 a vanished device ends the daemon with an error", "[ibd]") {
  IbdProcess ibd({"--restart-limit", "0"});
  IbdClient c(ibd.socket());
  c.hello();
  const pid_t sim = ibd.simhca_pid();
  REQUIRE(sim > 0);
  REQUIRE(::kill(sim, SIGKILL) == 0);
  REQUIRE(c.readable(10000));  // closed (or an error reply), never a hang
  const int st = ibd.wait_exit(10000);
  REQUIRE(st != -1);
  CHECK(WIFEXITED(st));
  CHECK(WEXITSTATUS(st) != 0);
}

// docs/client-protocol.md §6.1: what a client of a lost device sees.
TEST_CASE("ibd: a vanished device: DEVICE_FATAL, then ENODEV; a new client is served", "[ibd]") {
  IbdProcess ibd;
  IbdClient c(ibd.socket());
  UniqueFd ev = hello_with_async_fd(c);
  UniqueFd mem = make_memfd(kMem);
  make_objects(c, mem.get());
  const pid_t sim = ibd.simhca_pid();
  REQUIRE(sim > 0);
  REQUIRE(::kill(sim, SIGKILL) == 0);
  // The async eventfd is written (bounded generous wait; ibd notices the
  // death by SIGCHLD at once).
  pollfd p{ev.get(), POLLIN, 0};
  REQUIRE(::poll(&p, 1, 10000) == 1);
  auto evs = c.must<proto::AsyncEventsRep>(Op::kGetAsyncEvents, proto::Empty{});
  bool fatal = false;
  for (uint32_t i = 0; i < evs.count && i < evs.events.size(); ++i)
    fatal |= evs.events[i].type == 8 && evs.events[i].kind == static_cast<uint8_t>(proto::ObjKind::kDevice);
  CHECK(fatal);
  // Every request that needs the device: ENODEV, and the connection stays.
  CHECK(c.call(Op::kAllocPd, proto::Empty{}).status == ENODEV);
  CHECK(c.call(Op::kQueryPort, proto::PortReq{1}).status == ENODEV);
  // A new client's HELLO waits for the restarted device, then is served.
  IbdClient d(ibd.socket());
  d.hello();
  (void)d.must<proto::HandleRep>(Op::kAllocPd, proto::Empty{});
  CHECK(ibd.simhca_pid() != sim);
  // The old one stays on the lost device: still ENODEV.
  CHECK(c.call(Op::kAllocPd, proto::Empty{}).status == ENODEV);
  CHECK(ibd.wait_exit(0) == -1);  // ibd is still running
}

// A device that stops answering (simhca SIGSTOPped: a command that never
// completes) is a lost device too: the health check's NOP times out, ibd
// fences it (SIGKILL), tells the client and brings up a new one.
TEST_CASE("ibd: a hung device is fenced and replaced", "[ibd]") {
  IbdProcess ibd;
  IbdClient c(ibd.socket());
  UniqueFd ev = hello_with_async_fd(c);
  const pid_t sim = ibd.simhca_pid();
  REQUIRE(sim > 0);
  REQUIRE(::kill(sim, SIGSTOP) == 0);
  // Health check after 2 s idle, then the vfio-user reply timeout (5 s).
  pollfd p{ev.get(), POLLIN, 0};
  REQUIRE(::poll(&p, 1, 20000) == 1);
  auto evs = c.must<proto::AsyncEventsRep>(Op::kGetAsyncEvents, proto::Empty{});
  REQUIRE(evs.count >= 1);
  CHECK(evs.events[0].type == 8);
  CHECK(c.call(Op::kAllocPd, proto::Empty{}).status == ENODEV);
  IbdClient d(ibd.socket());
  d.hello();
  (void)d.must<proto::HandleRep>(Op::kAllocPd, proto::Empty{});
  CHECK(ibd.simhca_pid() != sim);
  CHECK(::kill(sim, 0) != 0);  // the hung one was killed and reaped
}

TEST_CASE("ibd: affiliated async events reach only the owner", "[ibd]") {
  IbdProcess ibd;
  IbdClient a(ibd.socket()), b(ibd.socket());
  UniqueFd a_ev(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)), b_ev(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  a.hello(a_ev.get());
  b.hello(b_ev.get());
  // Drain the port events of start-up, if any came after HELLO.
  (void)a.must<proto::AsyncEventsRep>(Op::kGetAsyncEvents, proto::Empty{});
  (void)b.must<proto::AsyncEventsRep>(Op::kGetAsyncEvents, proto::Empty{});
  UniqueFd mem = make_memfd(kMem);
  Objects o = make_objects(a, mem.get());
  to_rts(a, o);
  // RTS -> SQD with notification: SQ_DRAINED (docs/simhca.md §8.3, §9.4).
  proto::ModifyQpReq m;
  m.qp = o.qp;
  m.attr.mask = kState | (1u << 2);  // EN_SQD_ASYNC_NOTIFY
  m.attr.state = 4;
  m.attr.en_sqd_async_notify = 1;
  REQUIRE(a.call(Op::kModifyQp, m).status == 0);
  pollfd p{a_ev.get(), POLLIN, 0};
  REQUIRE(::poll(&p, 1, 5000) == 1);  // bounded; the event is signalled
  auto ev = a.must<proto::AsyncEventsRep>(Op::kGetAsyncEvents, proto::Empty{});
  REQUIRE(ev.count >= 1);
  bool drained = false;
  for (uint32_t i = 0; i < ev.count; ++i)
    if (ev.events[i].type == 5 && ev.events[i].kind == uint8_t(proto::ObjKind::kQp) &&
        ev.events[i].handle == o.qp)
      drained = true;
  CHECK(drained);
  auto none = b.must<proto::AsyncEventsRep>(Op::kGetAsyncEvents, proto::Empty{});
  CHECK(none.count == 0);
}

namespace {
long rss_kib(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  return -1;
}
}  // namespace

// 10,000 QPs over 100 clients; ibd's own memory per QP (hidden: run with
// test_ibd "[ibd-scale]").
TEST_CASE("ibd: 10,000 QPs over 100 clients", "[.][ibd-scale]") {
  IbdProcess ibd;
  constexpr int kClients = 100, kQps = 100;
  constexpr size_t kPerQp = 8192;  // SQ 4 KiB, RQ 2 KiB, record
  std::vector<std::unique_ptr<IbdClient>> clients;
  std::vector<UniqueFd> mems;
  const long before = rss_kib(ibd.pid());
  for (int i = 0; i < kClients; ++i) {
    auto c = std::make_unique<IbdClient>(ibd.socket());
    c->hello();
    UniqueFd mem = make_memfd(kQps * kPerQp + 65536);
    const uint32_t pd = c->must<proto::HandleRep>(Op::kAllocPd, proto::Empty{}).handle;
    const uint32_t mh = c->must<proto::MapMemRep>(Op::kMapMem, proto::MapMemReq{kQps * kPerQp + 65536},
                                                  {mem.get()}).handle;
    const uint32_t cq = c->must<proto::ObjRep>(Op::kCreateCq, proto::CreateCqReq{mh, kQps * kPerQp, kQps * kPerQp + 32768, 8, 0}).handle;
    for (int q = 0; q < kQps; ++q) {
      proto::CreateQpReq r;
      r.pd = pd;
      r.send_cq = cq;
      r.recv_cq = cq;
      r.log_sq_size = 6;
      r.log_sq_stride = 6;
      r.log_rq_size = 6;
      r.log_rq_stride = 5;
      r.mem = mh;
      r.sq_offset = q * kPerQp;
      r.rq_offset = q * kPerQp + 4096;
      r.dbr_offset = q * kPerQp + 6144;
      (void)c->must<proto::ObjRep>(Op::kCreateQp, r);
    }
    clients.push_back(std::move(c));
    mems.push_back(std::move(mem));
  }
  const long after = rss_kib(ibd.pid());
  const double per_qp = (after - before) * 1024.0 / (kClients * kQps);
  WARN("ibd RSS " << before << " KiB -> " << after << " KiB: " << per_qp << " bytes per QP");
  CHECK(per_qp <= 4096);
  auto info = clients[0]->info();
  CHECK(info["clients"].size() == kClients);
}

TEST_CASE("ibd: SRQ, a QP on it, and an AH", "[ibd]") {
  IbdProcess ibd;
  IbdClient c(ibd.socket());
  c.hello();
  UniqueFd mem = make_memfd(kMem);
  Objects o = make_objects(c, mem.get());
  // SRQ ring 2^6 x 32 at 40K, record at 17K + 16.
  proto::CreateSrqReq sr{o.pd, o.mem, 40960, 17424, 6, 5, 0};
  auto srq = c.must<proto::ObjRep>(Op::kCreateSrq, sr);
  CHECK(c.call(Op::kModifySrq, proto::ModifySrqReq{srq.handle, 4}).status == 0);
  CHECK(c.call(Op::kModifySrq, proto::ModifySrqReq{srq.handle, 64}).status != 0);  // >= size
  proto::CreateQpReq qp;
  qp.pd = o.pd;
  qp.send_cq = o.cq;
  qp.recv_cq = o.cq;
  qp.srq = srq.handle;
  qp.type = 2;  // UD
  qp.log_sq_size = 4;
  qp.log_sq_stride = 6;
  qp.mem = o.mem;
  qp.sq_offset = 49152;
  qp.dbr_offset = 17440;
  auto q = c.must<proto::ObjRep>(Op::kCreateQp, qp);
  CHECK(q.number != o.qpn);
  proto::CreateAhReq ah;
  ah.pd = o.pd;
  ah.av.dlid = 1;
  ah.av.port = 1;
  auto a = c.must<proto::ObjRep>(Op::kCreateAh, ah);
  CHECK(c.call(Op::kDestroySrq, proto::HandleReq{srq.handle}).status == EBUSY);  // the QP uses it
  CHECK(c.call(Op::kDestroyAh, proto::HandleReq{a.handle}).status == 0);
  CHECK(c.call(Op::kDestroyQp, proto::HandleReq{q.handle}).status == 0);
  CHECK(c.call(Op::kDestroySrq, proto::HandleReq{srq.handle}).status == 0);
}
