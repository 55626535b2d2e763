// The doorbell scanner (docs/simhca.md §12.5): doorbells stored through an
// mmap of a UAR page's region (§4), no REGION_WRITE, as a client process
// rings them. The client's half of the protocol is written here from the
// manual (write WQE, release fence, record, doorbell word, full fence,
// SCANNER_SLEEPING, futex wake), as the client library will.
#include <fcntl.h>
#include <linux/futex.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <fstream>
#include <optional>
#include <sstream>
#include <thread>

#include "hca/prm.hpp"
#include "test_simhca_fixture.hpp"

using namespace openib;
using namespace openib::test;
using hca::QpType;
using hca::QpState;
namespace prm = openib::hca::prm;
using hca::Bytes;

namespace {

namespace qa = hca::qp_attr;
using Clock = std::chrono::steady_clock;

// §3 and §4 offsets, from the manual.
constexpr uint64_t kScannerSleeps = 0x040, kScannerWakeups = 0x044;
constexpr uint64_t kMmapDoorbells = 0x048, kMmapDoorbellsBad = 0x04c;
constexpr uint64_t kSleeping = 0x000, kCqArm = 0x020, kEqDoorbell = 0x040, kSqDoorbell = 0x800;
constexpr uint16_t kLid = 1;

// One UAR page mapped from its own region (§4), rung as §12.5 says.
class UarPage {
 public:
  UarPage(vfio::Device& dev, uint32_t uar) {
    auto m = dev.region_mmap(prm::kUarRegionBase + uar, 0, prm::kUarPageSize);
    if (!m) FAIL(m.error().str());
    map_ = std::move(m).value();
  }
  std::atomic_ref<uint64_t> word(uint64_t off) const {
    return std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(base() + off));
  }
  std::atomic_ref<uint32_t> sleeping() const {
    return std::atomic_ref<uint32_t>(*reinterpret_cast<uint32_t*>(base() + kSleeping));
  }
  // §12.5 steps 4-6: the doorbell word, a full fence, then SCANNER_SLEEPING;
  // if set, clear it and FUTEX_WAKE it (shared). True if it woke the scanner.
  bool ring(uint64_t off, uint64_t value) const {
    word(off).store(value, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (sleeping().load(std::memory_order_relaxed) == 0) return false;
    if (sleeping().exchange(0) == 0) return false;
    ::syscall(SYS_futex, base() + kSleeping, FUTEX_WAKE, 1, nullptr, nullptr, 0);
    return true;
  }

 private:
  std::byte* base() const { return static_cast<std::byte*>(map_.data()); }
  vfio::RegionMapping map_;
};

// A device with its port Active, and UD QPs on a UAR of their own whose
// send WQEs (inline data, to the device's own LID; there is no cable, so
// the packet is dropped and the WQE completes) are staged without a doorbell.
struct DoorbellFixture : HcaFixture {
  DoorbellFixture() {
    hca::PortSetup ps;
    ps.state = hca::kPortActive;
    ps.lid = kLid;
    REQUIRE(hca->set_port(1, ps).ok());
    pd = must(hca->alloc_pd());
    uar = must(hca->alloc_uar());
    REQUIRE(uar != 0);
    cq = must(hca->create_cq(8, std::nullopt, uar));
    hca::AddressVector av;
    av.dlid = kLid;
    ah = must(hca->create_ah(pd, av));
    page = std::make_unique<UarPage>(*dev, uar);
  }
  template <typename T>
  static T must(Result<T> r) {
    if (!r) FAIL(r.error().str());
    return std::move(r).value();
  }

  hca::Qp ud_qp() {
    hca::QpInit in;
    in.type = QpType::kUd;
    in.pdn = pd;
    in.send_cqn = in.recv_cqn = cq.cqn;
    in.uar = uar;
    in.log_sq_stride = 8;
    hca::Qp q = must(hca->create_qp(in));
    hca::QpAttr a;
    a.state = QpState::kInit;
    a.port = 1;
    a.qkey = 0x11111111;
    REQUIRE(hca->modify_qp(q.qpn, qa::kState | qa::kPkeyIndex | qa::kPort | qa::kQkey, a).ok());
    a.state = QpState::kRtr;
    REQUIRE(hca->modify_qp(q.qpn, qa::kState, a).ok());
    a.state = QpState::kRts;
    REQUIRE(hca->modify_qp(q.qpn, qa::kState | qa::kSqPsn, a).ok());
    return q;
  }

  hca::SendWr send_wr(uint64_t wr_id) {
    hca::SendWr wr;
    wr.wr_id = wr_id;
    wr.inline_data = true;
    wr.sg = {hca::Sge{reinterpret_cast<uint64_t>(payload), sizeof payload, 0}};
    wr.ahn = ah;
    wr.remote_qpn = 0x123;
    return wr;
  }

  // §12.5 steps 1-3: the WQE into the ring, a release fence, the SQ
  // producer counter into the doorbell record (§12.3 offset 0x04).
  // Returns the SQ_DOORBELL value of step 4.
  uint64_t stage(hca::Qp& q, const hca::SendWr& wr) {
    Bytes w = must(hca::encode_send_wqe(wr, q.type));
    const size_t stride = size_t{1} << q.log_sq_stride;
    REQUIRE(w.size() <= stride);
    const size_t idx = q.sq_pi & ((1u << q.log_sq_size) - 1);
    auto slot = q.sq.bytes().subspan(idx * stride, stride);
    std::fill(slot.begin(), slot.end(), std::byte{0});
    std::copy(w.begin(), w.end(), slot.begin());
    ++q.sq_pi;
    std::atomic_thread_fence(std::memory_order_release);
    prm::put32(q.dbr.bytes(), 4, q.sq_pi);
    return (uint64_t{q.sq_pi} << 32) | q.qpn;
  }

  // Polls (bounded) until n completions arrived.
  std::vector<hca::WorkCompletion> wait(size_t n, int timeout_ms = 5000) {
    std::vector<hca::WorkCompletion> got;
    const auto end = Clock::now() + std::chrono::milliseconds(timeout_ms);
    while (got.size() < n && Clock::now() < end) {
      for (auto& c : hca->poll_cq(cq)) got.push_back(c);
      if (got.size() < n) std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    return got;
  }

  // Waits (bounded) until BAR0 register `off` reaches at least `want`.
  uint32_t wait_reg(uint64_t off, uint32_t want, int timeout_ms = 3000) {
    const auto end = Clock::now() + std::chrono::milliseconds(timeout_ms);
    uint32_t v = reg(off);
    while (v < want && Clock::now() < end) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      v = reg(off);
    }
    return v;
  }

  // Waits (bounded) until the scanner publishes SCANNER_SLEEPING in our page.
  bool wait_sleeping(int timeout_ms = 3000) {
    const auto end = Clock::now() + std::chrono::milliseconds(timeout_ms);
    while (Clock::now() < end) {
      if (page->sleeping().load() == 1) return true;
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    return false;
  }

  uint32_t pd = 0, uar = 0, ah = 0;
  hca::Cq cq;
  std::unique_ptr<UarPage> page;
  const char payload[16] = "mmap doorbell!!";
};

// utime + stime of a process, in clock ticks (proc(5)).
long cpu_ticks(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::istringstream rest(s.substr(s.rfind(')') + 2));
  std::string field;
  long utime = 0, stime = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i) {
    if (i == 14) utime = std::stol(field);
    if (i == 15) stime = std::stol(field);
  }
  return utime + stime;
}

}  // namespace

TEST_CASE("simhca doorbell scanner: a doorbell stored through the mmap executes the send WQE",
          "[simhca][doorbell]") {
  DoorbellFixture f;
  hca::Qp q = f.ud_qp();
  const uint32_t before = f.reg(kMmapDoorbells);
  f.page->ring(kSqDoorbell, f.stage(q, f.send_wr(41)));
  auto c = f.wait(1);
  REQUIRE(c.size() == 1);
  CHECK(c[0].wr_id == 41);
  CHECK(int(c[0].status) == hca::kWcSuccess);
  CHECK(c[0].qpn == q.qpn);
  CHECK(f.reg(kMmapDoorbells) == before + 1);
  CHECK(f.reg(kMmapDoorbellsBad) == 0);

  SECTION("a register doorbell still takes effect once, and is not taken again from the page") {
    REQUIRE(f.hca->post_send(q, f.send_wr(42)).ok());
    auto d = f.wait(1);
    REQUIRE(d.size() == 1);
    CHECK(d[0].wr_id == 42);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    CHECK(f.hca->poll_cq(f.cq).empty());
    CHECK(f.reg(kMmapDoorbells) == before + 1);
  }
}

TEST_CASE("simhca doorbell scanner: one SQ_DOORBELL store moves every QP of the UAR",
          "[simhca][doorbell]") {
  DoorbellFixture f;
  hca::Qp a = f.ud_qp(), b = f.ud_qp();
  // Both QPs post (records updated); only a's doorbell is stored. b's WQEs
  // are found through its doorbell record (§12.5).
  f.stage(b, f.send_wr(2));
  f.stage(b, f.send_wr(3));
  f.page->ring(kSqDoorbell, f.stage(a, f.send_wr(1)));
  auto c = f.wait(3);
  REQUIRE(c.size() == 3);
  std::vector<uint64_t> ids;
  for (auto& x : c) {
    CHECK(int(x.status) == hca::kWcSuccess);
    ids.push_back(x.wr_id);
  }
  std::sort(ids.begin(), ids.end());
  CHECK(ids == std::vector<uint64_t>{1, 2, 3});
}

TEST_CASE("simhca doorbell scanner: sleeps when idle, a futex wake brings it back",
          "[simhca][doorbell]") {
  DoorbellFixture f;
  hca::Qp q = f.ud_qp();
  // Idle: SCANNER_SLEEPING published in our page, sleeps counted, and the
  // scanner does not spin (simhca uses well under half a CPU).
  REQUIRE(f.wait_sleeping());
  const uint32_t sleeps = f.wait_reg(kScannerSleeps, 1);
  CHECK(sleeps >= 1);
  const long ticks = cpu_ticks(f.sim.pid());
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  CHECK(cpu_ticks(f.sim.pid()) - ticks < ::sysconf(_SC_CLK_TCK) / 4);
  CHECK(f.reg(kScannerSleeps) > sleeps);  // the 100 ms timeout, at least

  // A doorbell while it sleeps: the client sees SCANNER_SLEEPING and wakes it.
  const uint32_t wakeups = f.reg(kScannerWakeups);
  bool woke = false;
  for (uint64_t id = 1; !woke && id <= 5; ++id) {
    REQUIRE(f.wait_sleeping());
    woke = f.page->ring(kSqDoorbell, f.stage(q, f.send_wr(id)));
    auto c = f.wait(1);
    REQUIRE(c.size() == 1);
    CHECK(c[0].wr_id == id);
  }
  REQUIRE(woke);
  CHECK(f.wait_reg(kScannerWakeups, wakeups + 1) >= wakeups + 1);
}

TEST_CASE("simhca doorbell scanner: garbage in the doorbell words is counted and ignored",
          "[simhca][doorbell]") {
  DoorbellFixture f;
  hca::Qp q = f.ud_qp();
  const uint32_t bad_access = f.reg(prm::kBadAccess);
  f.page->ring(kSqDoorbell, 0xdeadbeefcafef00dull);  // no such QP; counter far ahead
  REQUIRE(f.wait_reg(kMmapDoorbellsBad, 1) == 1);
  f.page->ring(kCqArm, (uint64_t{7} << 32) | (3u << 24) | f.cq.cqn);  // command 3: reserved
  REQUIRE(f.wait_reg(kMmapDoorbellsBad, 2) == 2);
  f.page->ring(kEqDoorbell, 0x1234567800ffffffull);  // no EQ on this UAR
  REQUIRE(f.wait_reg(kMmapDoorbellsBad, 3) == 3);
  CHECK(f.reg(prm::kBadAccess) == bad_access + 3);
  CHECK(f.reg(kMmapDoorbells) == 3);
  CHECK((f.reg(prm::kStatus) & (1u << 31)) == 0);  // not fatal
  CHECK(f.hca->poll_cq(f.cq).empty());

  // A record whose SQ counter is garbage is refused; the device goes on.
  prm::put32(q.dbr.bytes(), 4, 0x7fffffff);
  f.page->ring(kSqDoorbell, (uint64_t{5} << 32) | q.qpn);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  CHECK(f.hca->poll_cq(f.cq).empty());
  prm::put32(q.dbr.bytes(), 4, 0);
  // And the page still works: a proper doorbell after the garbage.
  f.page->ring(kSqDoorbell, f.stage(q, f.send_wr(9)));
  auto c = f.wait(1);
  REQUIRE(c.size() == 1);
  CHECK(c[0].wr_id == 9);
  CHECK(int(c[0].status) == hca::kWcSuccess);
}

// §4: each UAR page is its own sealed memfd of one page, new at every
// ALLOC_UAR; a doorbell stored into one page for another UAR's object is
// ignored and counted.
TEST_CASE("simhca UAR pages: one sealed page per UAR, a new one when the UAR is allocated again",
          "[simhca][doorbell]") {
  DoorbellFixture f;
  auto fd = f.hca->uar_page_fd(f.uar);
  INFO((fd ? std::string() : fd.error().str()));
  REQUIRE(fd.ok());
  struct stat st{};
  REQUIRE(::fstat(fd->get(), &st) == 0);
  CHECK(st.st_size == 4096);  // that page, nothing else of BAR2
  errno = 0;
  CHECK(::ftruncate(fd->get(), 0) == -1);
  CHECK(errno == EPERM);
  errno = 0;
  CHECK(::ftruncate(fd->get(), 8192) == -1);
  CHECK(errno == EPERM);
  errno = 0;
  CHECK(::fcntl(fd->get(), F_ADD_SEALS, F_SEAL_WRITE) == -1);  // F_SEAL_SEAL
  CHECK(errno == EPERM);
  // UAR 0 (the driver's) is never offered; a UAR not allocated has no page.
  CHECK(f.dev->region_info(prm::kUarRegionBase + 0)->size == 0);
  CHECK(f.hca->uar_page_fd(0).error().code == EOPNOTSUPP);

  // A second UAR with a CQ (so that its page is watched): a doorbell for
  // the first UAR's QP or CQ stored into it is ignored and counted.
  hca::Qp q = f.ud_qp();
  const uint32_t other = DoorbellFixture::must(f.hca->alloc_uar());
  hca::Cq other_cq = DoorbellFixture::must(f.hca->create_cq(4, std::nullopt, other));
  UarPage other_page(*f.dev, other);
  const uint32_t bad = f.reg(kMmapDoorbellsBad);
  other_page.ring(kSqDoorbell, f.stage(q, f.send_wr(5)));
  REQUIRE(f.wait_reg(kMmapDoorbellsBad, bad + 1) == bad + 1);
  other_page.ring(kCqArm, (uint64_t{0} << 32) | (1u << 24) | f.cq.cqn);
  REQUIRE(f.wait_reg(kMmapDoorbellsBad, bad + 2) == bad + 2);
  CHECK(f.hca->poll_cq(f.cq).empty());  // the WQE was not taken from the wrong page
  f.page->ring(kSqDoorbell, (uint64_t{q.sq_pi} << 32) | q.qpn);  // the right page takes it
  auto c = f.wait(1);
  REQUIRE(c.size() == 1);
  CHECK(c[0].wr_id == 5);

  // Freed and allocated again (numbers go round-robin, §6: up to 1023
  // allocations until the same number comes back): a new page, zeroed; the
  // old mapping reaches only the orphan.
  REQUIRE(f.hca->destroy_cq(other_cq).ok());
  auto old_fd = f.hca->uar_page_fd(other);
  REQUIRE(old_fd.ok());
  REQUIRE(f.hca->dealloc_uar(other).ok());
  std::optional<uint32_t> again;
  for (int i = 0; i < 2048 && !again; ++i) {
    const uint32_t u = DoorbellFixture::must(f.hca->alloc_uar());
    if (u == other) again = u;
    else REQUIRE(f.hca->dealloc_uar(u).ok());
  }
  REQUIRE(again);
  other_page.word(kCqArm).store(0x1122334455667788ull);  // through the old mapping
  UarPage fresh(*f.dev, other);
  CHECK(fresh.word(kCqArm).load() == 0);
  CHECK(*f.dev->read64(VFIO_PCI_BAR2_REGION_INDEX, uint64_t{other} * 4096 + kCqArm) == 0);
  auto new_fd = f.hca->uar_page_fd(other);
  REQUIRE(new_fd.ok());
  struct stat a{}, b{};
  REQUIRE(::fstat(old_fd->get(), &a) == 0);
  REQUIRE(::fstat(new_fd->get(), &b) == 0);
  CHECK(a.st_ino != b.st_ino);
  REQUIRE(f.hca->dealloc_uar(other).ok());
}
