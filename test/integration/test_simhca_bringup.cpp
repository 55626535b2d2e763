// simhca and the HCA driver: PCI identity, the init segment, the bring-up
// and teardown ladders, interrupts (docs/simhca.md §2-§5, §9-§11).
#include "hca/prm.hpp"
#include "test_simhca_fixture.hpp"

using namespace openib;
using namespace openib::test;
namespace prm = openib::hca::prm;

static constexpr uint32_t kBar0 = VFIO_PCI_BAR0_REGION_INDEX;

TEST_CASE("simhca: PCI identity, BARs and MSI-X as the manual gives them", "[simhca]") {
  SimhcaProcess sim;
  auto dev = connect(sim);
  // §2
  CHECK(*dev->config_read16(0x00) == 0x1234);
  CHECK(*dev->config_read16(0x02) == 0x1b1e);
  CHECK(*dev->config_read16(0x0a) == 0x0c06);  // class: serial bus / InfiniBand
  CHECK(*dev->config_read16(0x40) == 0x0011);  // MSI-X capability, last
  CHECK((*dev->config_read16(0x42) & 0x7ff) == 31);
  auto bar0 = dev->region_info(VFIO_PCI_BAR0_REGION_INDEX);
  REQUIRE(bar0.ok());
  CHECK(bar0->size == 16 * 1024);
  CHECK_FALSE(bar0->mmappable());
  // §4: 1024 UAR pages, for register accesses only; each allocated UAR's
  // page is a region of its own (none allocated yet: size 0).
  auto bar2 = dev->region_info(VFIO_PCI_BAR2_REGION_INDEX);
  REQUIRE(bar2.ok());
  CHECK(bar2->size == 1024 * 4096);
  CHECK_FALSE(bar2->mmappable());
  CHECK(dev->region_mmap(VFIO_PCI_BAR2_REGION_INDEX, 3 * 4096, 4096).error().code == EINVAL);
  CHECK(dev->device_info()->num_regions == 9 + 1024);
  auto page3 = dev->region_info(prm::kUarRegionBase + 3);
  REQUIRE(page3.ok());
  CHECK(page3->size == 0);
  CHECK_FALSE(page3->mmappable());
  // §10: 32 MSI-X vectors, eventfd-capable.
  auto msix = dev->irq_info(VFIO_PCI_MSIX_IRQ_INDEX);
  REQUIRE(msix.ok());
  CHECK(msix->count == 32);
  CHECK((msix->flags & VFIO_IRQ_INFO_EVENTFD));
  // §3
  CHECK(*dev->read32(kBar0, prm::kInterfaceRev) == 1);
  CHECK(*dev->read32(kBar0, prm::kMagic) == 0x53494d48);
  CHECK(*dev->read32(kBar0, prm::kFwRev) == 0x00010000);
  CHECK(*dev->read32(kBar0, prm::kCapSummary) == (1u | 10u << 8 | 32u << 16 | 5u << 24));
  CHECK(*dev->read32(kBar0, prm::kStatus) == 0);
  // §1: a 2-byte read of a register reads all ones and is counted.
  std::array<std::byte, 2> two{};
  REQUIRE(dev->region_read(kBar0, prm::kInterfaceRev, two).ok());
  CHECK(two[0] == std::byte{0xff});
  CHECK(*dev->read32(kBar0, prm::kBadAccess) == 1);
  // Writes to a read-only register are ignored and counted.
  REQUIRE(dev->write32(kBar0, prm::kInterfaceRev, 7).ok());
  CHECK(*dev->read32(kBar0, prm::kInterfaceRev) == 1);
  CHECK(*dev->read32(kBar0, prm::kBadAccess) == 2);
}

TEST_CASE("simhca: bring-up ladder, then the teardown ladder in reverse", "[simhca]") {
  SimhcaProcess sim;
  auto dev = connect(sim);
  boost::asio::io_context io;
  {
    auto h = hca::Hca::open(*dev, io);
    REQUIRE(h.ok());
    hca::Hca& hca = **h;
    const uint32_t st = *dev->read32(kBar0, prm::kStatus);
    CHECK((st & prm::kStatusCmdqEnabled));
    CHECK((st & prm::kStatusHcaInitialized));
    CHECK(hca.fw_rev() == 0x00010000);
    // §6.1 capabilities.
    CHECK(hca.caps().max_qp == 16384);
    CHECK(hca.caps().max_pd == 256);
    CHECK(hca.caps().num_ports == 1);
    CHECK(hca.caps().num_msix == 32);
    CHECK(hca.caps().vendor_part_id == 0x1b1e);
    CHECK(hca.caps().node_guid == 0x123400fffe000001ull);
    CHECK((hca.caps().cap_flags & (1u << 5)) != 0);  // DATA_PATH (§6.1, §12)
    // EQ 0 on vector 0, the first EQ after INIT_HCA.
    CHECK(hca.eq0() == 0);
    auto eq = hca.query_eq(0);
    REQUIRE(eq.ok());
    CHECK(eq->vector == 0);
    CHECK(eq->uar == 0);
    CHECK((eq->event_mask & 1));
    REQUIRE(hca.close().ok());
    CHECK(*dev->read32(kBar0, prm::kStatus) == 0);  // HCA and queue down
    CHECK_FALSE(hca.is_open());
    CHECK(hca.close().ok());  // idempotent
  }
  // The ladder can be climbed again on the same device.
  auto again = hca::Hca::open(*dev, io);
  REQUIRE(again.ok());
  CHECK((*again)->eq0() == 0);
  CHECK((*again)->nop().ok());
  CHECK((*again)->close().ok());
}

TEST_CASE("simhca: command completions arrive as events on MSI-X vector 0", "[simhca]") {
  HcaFixture f;
  const uint64_t irqs_before = f.hca->interrupts_seen();
  const uint64_t events_before = f.hca->commands().stats().events;
  const uint32_t produced_before = f.hca->query_eq(0)->producer;
  // Asynchronous NOPs, one after the other, completed by the loop's EQ
  // handler (the synchronous path polls and sees no interrupt).
  int done = 0;
  std::function<void()> next = [&] {
    f.hca->command_async(prm::kOpNop, {}, 0, [&](Result<hca::Bytes> r) {
      REQUIRE(r.ok());
      if (++done < 20) next();
    });
  };
  next();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (done < 20 && std::chrono::steady_clock::now() < deadline) f.io.run_one_for(std::chrono::milliseconds(50));
  REQUIRE(done == 20);
  // One CMD_COMPLETION per command, each on a re-armed EQ: one interrupt each.
  CHECK(f.hca->commands().stats().events - events_before >= 20);
  CHECK(f.hca->interrupts_seen() - irqs_before >= 20);
  CHECK(f.hca->commands().stats().missed_events == 0);
  auto eq = f.hca->query_eq(0);
  REQUIRE(eq.ok());
  CHECK(eq->producer - produced_before == 21);  // 20 NOPs + the QUERY_EQ itself
  CHECK(eq->overruns == 0);
  CHECK(f.reg(prm::kCmdsCompleted) >= 24);
}

TEST_CASE("simhca: the EQ ring wraps with the ownership phase", "[simhca]") {
  SimhcaProcess sim;
  auto dev = connect(sim);
  boost::asio::io_context io;
  hca::HcaOptions opts;
  opts.eq0_log_size = 2;  // 4 entries: wraps every 4 commands
  auto h = hca::Hca::open(*dev, io, opts);
  REQUIRE(h.ok());
  for (int i = 0; i < 50; ++i) REQUIRE((*h)->nop().ok());
  CHECK((*h)->commands().stats().missed_events == 0);
  auto eq = (*h)->query_eq(0);
  REQUIRE(eq.ok());
  CHECK(eq->overruns == 0);
  CHECK(eq->producer >= 50);
}

TEST_CASE("simhca: RESET register returns the power-on state", "[simhca]") {
  HcaFixture f;
  auto pd = f.hca->alloc_pd();
  REQUIRE(pd.ok());
  REQUIRE(f.dev->write32(kBar0, prm::kReset, 1).ok());
  CHECK(f.reg(prm::kStatus) == 0);
  CHECK(f.reg(prm::kCmdqCtrl) == 0);
  CHECK(f.reg(prm::kCmdsCompleted) == 0);
  // The driver's queue is gone: its close() must cope (commands time out
  // or fail), then a fresh bring-up works.
  f.hca.reset();
  auto h = hca::Hca::open(*f.dev, f.io);
  REQUIRE(h.ok());
  auto pd2 = (*h)->alloc_pd();
  REQUIRE(pd2.ok());
  CHECK(*pd2 == 0);  // tables started afresh
  REQUIRE((*h)->dealloc_pd(*pd2).ok());
  CHECK((*h)->close().ok());
}

TEST_CASE("simhca: SIGTERM ends it cleanly and removes its socket", "[simhca]") {
  SimhcaProcess sim;
  {
    auto dev = connect(sim);
    CHECK(dev->read32(kBar0, prm::kMagic).ok());
  }
  REQUIRE(::kill(sim.pid(), SIGTERM) == 0);
  const int st = sim.wait_exit(5000);
  REQUIRE(st != -1);
  CHECK(WIFEXITED(st));
  CHECK(WEXITSTATUS(st) == 0);
  CHECK_FALSE(std::filesystem::exists(sim.socket()));
}
