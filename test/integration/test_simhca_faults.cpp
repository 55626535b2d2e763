// Faults (docs/simhca.md §5.3, §5.5, §11): garbage command entries answered
// with errors while the device keeps working, commands in the wrong device
// state, a command queue outside mapped memory, device fatal, and a simhca
// that dies under the driver (ENODEV, never a hang).
#include <sys/mman.h>
#include <unistd.h>

#include <random>

#include "hca/prm.hpp"
#include "test_simhca_fixture.hpp"

using namespace openib;
using namespace openib::test;
using namespace openib::hca;
using Clock = std::chrono::steady_clock;

namespace {

constexpr uint32_t kBar0 = VFIO_PCI_BAR0_REGION_INDEX;
using Entry = std::array<std::byte, prm::kEntrySize>;

Entry make_entry(uint16_t opcode, uint32_t in_len, uint32_t out_len, uint64_t in_mbox = 0,
                 uint64_t out_mbox = 0, bool owner = true) {
  Entry e{};
  prm::put16(e, prm::kEntOpcode, opcode);
  prm::put32(e, prm::kEntToken, 0xabcd);
  prm::put32(e, prm::kEntInLen, in_len);
  prm::put32(e, prm::kEntOutLen, out_len);
  prm::put64(e, prm::kEntInMbox, in_mbox);
  prm::put64(e, prm::kEntOutMbox, out_mbox);
  prm::put8(e, prm::kEntStatus, 0xee);
  prm::put8(e, prm::kEntFlags, owner ? prm::kOwnerBit : 0);
  return e;
}

uint8_t run_raw(Hca& h, const Entry& e) {
  auto r = h.commands().exec_raw(e, 3000);
  REQUIRE(r.ok());
  CHECK((prm::get8(*r, prm::kEntFlags) & prm::kOwnerBit) == 0);
  return prm::get8(*r, prm::kEntStatus);
}

constexpr uint64_t kUnmapped = 0x7f0000000000ull;  // inside the IOVA space, never mapped here
constexpr uint64_t kDmaFaults = 0x050, kDmaBusErrors = 0x054;  // §3, from the manual

}  // namespace

TEST_CASE("simhca faults: garbage command entries get error statuses, the device goes on", "[simhca][faults]") {
  HcaFixture f;
  Hca& h = *f.hca;
  const uint64_t in_mbox = h.commands().mailbox_iova(false);
  const uint64_t out_mbox = h.commands().mailbox_iova(true);

  CHECK(run_raw(h, make_entry(0x7777, 0, 0)) == prm::kBadOpcode);
  CHECK(run_raw(h, make_entry(prm::kOpNop, 0x7fffffff, 0)) == prm::kBadInputLen);
  CHECK(run_raw(h, make_entry(prm::kOpNop, 0, 0xffffffff)) == prm::kBadOutputLen);
  CHECK(run_raw(h, make_entry(prm::kOpCreateQp, 64, 4, 0)) == prm::kBadAddress);          // no mailbox
  CHECK(run_raw(h, make_entry(prm::kOpCreateQp, 64, 4, kUnmapped)) == prm::kBadAddress);  // unmapped
  CHECK(run_raw(h, make_entry(prm::kOpCreateQp, 64, 4, in_mbox + 3)) == prm::kBadAddress);  // misaligned
  CHECK(run_raw(h, make_entry(prm::kOpDeallocPd, 2, 0)) == prm::kBadInputLen);
  CHECK(run_raw(h, make_entry(prm::kOpAllocPd, 0, 2)) == prm::kBadOutputLen);
  CHECK(run_raw(h, make_entry(prm::kOpAllocPd, 0, 64, 0, kUnmapped)) == prm::kBadAddress);
  CHECK(run_raw(h, make_entry(prm::kOpQueryQp, 4, 144, 0, out_mbox + 4)) == prm::kBadAddress);
  // None of the failed ALLOC_PDs allocated anything (§5.5: no effect).
  auto pd = h.alloc_pd();
  REQUIRE(pd.ok());
  CHECK(*pd == 0);
  REQUIRE(h.dealloc_pd(*pd).ok());

  // An entry without OWNER is never executed: dropped and counted (§5.3).
  const uint32_t dropped = f.reg(prm::kCmdsDropped);
  auto left = h.commands().exec_raw(make_entry(prm::kOpAllocPd, 0, 4, 0, 0, false), 1000);
  REQUIRE(left.ok());
  CHECK(prm::get8(*left, prm::kEntStatus) == 0xee);
  CHECK(f.reg(prm::kCmdsDropped) == dropped + 1);

  // Random entries: random opcodes (valid ones half the time), lengths,
  // mailbox pointers (ours half the time) and mailbox contents.
  std::mt19937_64 rng(0x5eed);
  const uint16_t valid[] = {0x0001, 0x0100, 0x0103, 0x0104, 0x0200, 0x0201, 0x0202, 0x0300,
                            0x0301, 0x0302, 0x0400, 0x0401, 0x0402, 0x0403, 0x0500, 0x0501,
                            0x0502, 0x0503, 0x0600, 0x0601, 0x0700, 0x0701, 0x0702, 0x0800,
                            0x0801, 0x0802, 0x0900, 0x0901, 0x0a00, 0x0a01};
  for (int i = 0; i < 300; ++i) {
    Entry e;
    for (auto& b : e) b = std::byte(static_cast<uint8_t>(rng()));
    if (rng() & 1) prm::put16(e, prm::kEntOpcode, valid[rng() % std::size(valid)]);
    if (rng() & 1) prm::put32(e, prm::kEntInLen, rng() % 300);
    if (rng() & 1) prm::put32(e, prm::kEntOutLen, rng() % 300);
    if (rng() & 1) prm::put64(e, prm::kEntInMbox, in_mbox);
    if (rng() & 1) prm::put64(e, prm::kEntOutMbox, out_mbox);
    prm::put8(e, prm::kEntFlags, prm::kOwnerBit);
    const uint8_t st = run_raw(h, e);
    CHECK(st <= prm::kNotSupported);
  }
  // The device still works, and the driver's own commands still complete.
  CHECK(h.nop().ok());
  auto caps = h.query_device();
  REQUIRE(caps.ok());
  CHECK(caps->vendor_part_id == 0x1b1e);
  auto pd2 = h.alloc_pd();
  CHECK(pd2.ok());
  CHECK((f.reg(prm::kStatus) & prm::kStatusFatal) == 0);
}

TEST_CASE("simhca faults: commands in the wrong device state are BAD_SYS_STATE", "[simhca][faults]") {
  SimhcaProcess sim;
  auto dev = connect(sim);
  auto pool = dma::DmaPool::create(*dev);
  REQUIRE(pool.ok());
  auto ci = CommandInterface::create(*dev, **pool);
  REQUIRE(ci.ok());
  CommandInterface& c = **ci;
  auto st = [&](uint16_t op, Bytes in, size_t out) {
    auto r = c.exec(op, in, out);
    REQUIRE(r.ok());
    return r->status;
  };
  CHECK(st(prm::kOpAllocPd, {}, 4) == prm::kBadSysState);  // before INIT_HCA
  CHECK(st(prm::kOpQueryPort, encode_u32(1 << 24), 48) == prm::kBadSysState);
  CHECK(st(prm::kOpNop, {}, 0) == prm::kOk);
  CHECK(st(prm::kOpQueryDeviceCap, {}, 80) == prm::kOk);
  CHECK(st(prm::kOpInitHca, {}, 0) == prm::kOk);
  CHECK(st(prm::kOpInitHca, {}, 0) == prm::kBadSysState);  // twice
  CHECK(st(prm::kOpAllocPd, {}, 4) == prm::kOk);
  CHECK(st(prm::kOpTeardownHca, encode_u32(2), 0) == prm::kBadParam);
  CHECK(st(prm::kOpTeardownHca, encode_u32(0), 0) == prm::kResourceBusy);  // the PD
  CHECK(st(prm::kOpTeardownHca, encode_u32(1), 0) == prm::kOk);
  CHECK(st(prm::kOpAllocPd, {}, 4) == prm::kBadSysState);  // after TEARDOWN_HCA
  CHECK(c.disable().ok());
}

TEST_CASE("simhca faults: a command queue outside mapped memory is a counted fault", "[simhca][faults]") {
  SimhcaProcess sim;
  auto dev = connect(sim);
  auto w = [&](uint64_t off, uint32_t v) { REQUIRE(dev->write32(kBar0, off, v).ok()); };
  auto r = [&](uint64_t off) { return *dev->read32(kBar0, off); };
  // §3: enable refused for a misaligned address or a size above 5.
  w(prm::kCmdqAddrLo, 0x1234);
  w(prm::kCmdqCtrl, 1);
  CHECK((r(prm::kStatus) & prm::kStatusCmdqError));
  CHECK_FALSE((r(prm::kStatus) & prm::kStatusCmdqEnabled));
  w(prm::kCmdqAddrLo, 0);
  w(prm::kCmdqAddrHi, 0x7f00);  // 0x7f0000000000: aligned, never mapped
  w(prm::kCmdqSize, 6);
  w(prm::kCmdqCtrl, 1);
  CHECK_FALSE((r(prm::kStatus) & prm::kStatusCmdqEnabled));
  w(prm::kCmdqSize, 2);
  w(prm::kCmdqCtrl, 1);
  REQUIRE((r(prm::kStatus) & prm::kStatusCmdqEnabled));
  // Frozen while enabled.
  w(prm::kCmdqSize, 3);
  CHECK(r(prm::kCmdqSize) == 2);
  // Ring slots 0 and 1 and a bit beyond the 4-entry queue.
  w(prm::kCmdDoorbell, 0x3 | 0x100);
  uint32_t st = 0;
  for (int i = 0; i < 200 && !(st & prm::kStatusCmdqFault); ++i) {
    st = r(prm::kStatus);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  CHECK((st & prm::kStatusCmdqFault));
  CHECK(r(prm::kCmdsDropped) == 3);
  CHECK(r(prm::kCmdsCompleted) == 0);
  // The device is unharmed: a proper queue works.
  auto pool = dma::DmaPool::create(*dev);
  REQUIRE(pool.ok());
  auto ci = CommandInterface::create(*dev, **pool);
  REQUIRE(ci.ok());
  CHECK_FALSE((r(prm::kStatus) & prm::kStatusCmdqFault));  // cleared by the disable
  auto nop = (*ci)->exec(prm::kOpNop, {}, 0);
  REQUIRE(nop.ok());
  CHECK(nop->ok());
}

TEST_CASE("simhca faults: device fatal is reported as an event and fails commands", "[simhca][faults]") {
  HcaFixture f;
  REQUIRE(f.dev->write32(kBar0, prm::kSimFault, 0x46415441).ok());
  REQUIRE(f.hca->wait_event(prm::kEvDeviceFatal, 2000));
  CHECK((f.reg(prm::kStatus) & prm::kStatusFatal));
  CHECK(f.reg(prm::kHealthSyndrome) == 1);
  auto pd = f.hca->alloc_pd();
  REQUIRE_FALSE(pd.ok());
  CHECK(pd.error().code == EIO);
  CHECK(f.hca->last_status() == prm::kInternalError);
  CHECK(f.hca->nop().ok());  // NOP and QUERY_DEVICE_CAP still answer
  CHECK(f.hca->query_device().ok());
  // Only a reset leaves the fatal state (§11.4).
  CHECK_FALSE(f.hca->close().ok());
  REQUIRE(f.dev->write32(kBar0, prm::kReset, 1).ok());
  CHECK(f.reg(prm::kStatus) == 0);
  auto h = Hca::open(*f.dev, f.io);
  REQUIRE(h.ok());
  CHECK((*h)->alloc_pd().ok());
}

TEST_CASE("simhca faults: simhca killed mid-command gives ENODEV, not a hang", "[simhca][faults]") {
  HcaFixture f({"--cmd-delay-ms", "300"});
  std::thread killer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    f.sim.kill_now();
  });
  const auto t0 = Clock::now();
  auto r = f.hca->nop();
  const auto took = Clock::now() - t0;
  killer.join();
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == ENODEV);
  CHECK(took < std::chrono::seconds(2));
  CHECK_FALSE(f.dev->alive());
  // Every later call fails fast, and the teardown ladder does not hang.
  CHECK(f.hca->alloc_pd().error().code == ENODEV);
  const auto t1 = Clock::now();
  auto c = f.hca->close();
  CHECK_FALSE(c.ok());
  CHECK(Clock::now() - t1 < std::chrono::seconds(1));
}

TEST_CASE("simhca faults: simhca gone while idle: the next command is ENODEV", "[simhca][faults]") {
  HcaFixture f;
  REQUIRE(f.hca->nop().ok());
  f.sim.kill_now();
  const auto t0 = Clock::now();
  auto r = f.hca->alloc_pd();
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == ENODEV);
  CHECK(Clock::now() - t0 < std::chrono::seconds(2));
}

// §11.2: host memory that fails under the device (here the driver's own
// memfd truncated behind simhca's back; ibd refuses client memfds that can
// shrink, docs/client-protocol.md §3.1, but a page can fail otherwise) is a
// DMA error on that memory only: the QP whose send ring it holds completes
// with an error and leaves RTS, the CQ whose ring it holds goes to error
// with an event; QPs and CQs in other memory keep working, and simhca
// counts the bus errors (§3 DMA_BUS_ERRORS) instead of dying of SIGBUS.
TEST_CASE("simhca faults: ring memory that faults errors its QP and CQ only; the device goes on",
          "[simhca][faults]") {
  HcaFixture f;
  auto must = [](auto r) {
    if (!r) FAIL(r.error().str());
    return std::move(r).value();
  };
  PortSetup ps;
  ps.state = kPortActive;
  ps.lid = 1;
  REQUIRE(f.hca->set_port(1, ps).ok());
  const uint32_t pd = must(f.hca->alloc_pd()), uar = must(f.hca->alloc_uar());
  AddressVector av;
  av.dlid = 1;  // our own LID: no cable, the packet is dropped and the WQE completes
  const uint32_t ah = must(f.hca->create_ah(pd, av));
  Cq good = must(f.hca->create_cq(6, std::nullopt, uar));

  // Four pages of a memfd: 0 doorbell records, 1 SQ and 2 RQ of the victim
  // QP, 3 the ring of the victim CQ.
  constexpr uint64_t kPg = 4096;
  UniqueFd mfd(::memfd_create("simhca-fault", MFD_CLOEXEC));
  REQUIRE(mfd.valid());
  REQUIRE(::ftruncate(mfd.get(), 4 * kPg) == 0);
  dma::DmaMapping mem = must(f.hca->pool().map_fd(mfd.get(), 0, 4 * kPg, true));
  const uint32_t bad_cqn = must(f.hca->create_cq_at(6, mem.iova() + 3 * kPg, mem.iova(), uar));
  QpCreateParams p;
  p.type = QpType::kUd;
  p.pdn = pd;
  p.send_cqn = p.recv_cqn = good.cqn;
  p.uar = uar;
  p.sq_iova = mem.iova() + kPg;
  p.rq_iova = mem.iova() + 2 * kPg;
  p.dbr_iova = mem.iova() + 64;
  p.log_sq_size = p.log_rq_size = 4;
  const uint32_t victim = must(f.hca->create_qp_at(p));

  auto to_rts = [&](uint32_t qpn) {
    QpAttr a;
    a.state = QpState::kInit;
    a.port = 1;
    a.qkey = 0x11111111;
    REQUIRE(f.hca->modify_qp(qpn, qp_attr::kState | qp_attr::kPkeyIndex | qp_attr::kPort | qp_attr::kQkey, a).ok());
    a.state = QpState::kRtr;
    REQUIRE(f.hca->modify_qp(qpn, qp_attr::kState, a).ok());
    a.state = QpState::kRts;
    REQUIRE(f.hca->modify_qp(qpn, qp_attr::kState | qp_attr::kSqPsn, a).ok());
  };
  auto ud_qp = [&](uint32_t cqn) {
    QpInit in;
    in.type = QpType::kUd;
    in.pdn = pd;
    in.send_cqn = in.recv_cqn = cqn;
    in.uar = uar;
    Qp q = must(f.hca->create_qp(in));
    to_rts(q.qpn);
    return q;
  };
  to_rts(victim);
  Qp bystander = ud_qp(good.cqn), cq_victim = ud_qp(bad_cqn);
  const char payload[8] = "faults!";
  auto send = [&](Qp& q, uint64_t wr_id) {
    SendWr wr;
    wr.wr_id = wr_id;
    wr.inline_data = true;
    wr.sg = {Sge{reinterpret_cast<uint64_t>(payload), sizeof payload, 0}};
    wr.ahn = ah;
    wr.remote_qpn = 0x123;
    REQUIRE(f.hca->post_send(q, wr).ok());
  };
  auto wait_cqe = [&]() -> std::optional<WorkCompletion> {
    for (auto end = Clock::now() + std::chrono::seconds(5); Clock::now() < end;) {
      auto c = f.hca->poll_cq(good, 1);
      if (!c.empty()) return c[0];
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    return std::nullopt;
  };
  send(bystander, 1);
  auto c = wait_cqe();
  REQUIRE(c);
  CHECK(int(c->status) == kWcSuccess);

  // Pages 1..3 go away; the records in page 0 stay.
  REQUIRE(::ftruncate(mfd.get(), kPg) == 0);
  const uint32_t faults_before = f.reg(kDmaFaults);

  // The victim QP's WQE cannot be read: an error completion for it, and its
  // SQ leaves RTS (UD: SQE), as for any unreadable send ring.
  prm::put32(std::span(static_cast<std::byte*>(mem.data()) + 64, 8), dp::kDbrQpSq, 1);
  REQUIRE(f.dev->write64(VFIO_PCI_BAR2_REGION_INDEX, uar * prm::kUarPageSize + prm::kUarSqDoorbell,
                         dp::sq_doorbell(victim, 1)).ok());
  c = wait_cqe();
  REQUIRE(c);
  CHECK(c->qpn == victim);
  CHECK(int(c->status) == kWcLocQpOpErr);
  CHECK(must(f.hca->query_qp(victim)).attr.state == QpState::kSqe);

  // The victim CQ cannot take its CQE: CQ error event.
  send(cq_victim, 2);
  REQUIRE(f.hca->wait_event(prm::kEvCqError, 5000));

  // Everything else goes on: the bystander's sends complete, commands work.
  send(bystander, 3);
  c = wait_cqe();
  REQUIRE(c);
  CHECK(c->wr_id == 3);
  CHECK(int(c->status) == kWcSuccess);
  CHECK(f.hca->nop().ok());
  CHECK(f.reg(kDmaBusErrors) == 2);
  CHECK(f.reg(kDmaFaults) == faults_before + 2);
  CHECK(::kill(f.sim.pid(), 0) == 0);
}
