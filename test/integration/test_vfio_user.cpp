// vfio-user end to end: the client transport (open_vfio_user) against the
// edu test device server (test/devices/edu_vfio_user.cpp) run as a child
// process, and against fake servers inside this process that send
// malformed replies. Every wait is bounded; children are killed by PID.
#include <catch2/catch.hpp>

#include <dirent.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "common/fd.hpp"
#include "vfio/device.hpp"
#include "vfio/interrupts.hpp"
#include "vfio/vfio_user_proto.hpp"
#include "vfio/vfio_user_socket.hpp"

extern char** environ;

using namespace openib;
using namespace openib::vfio;
using Clock = std::chrono::steady_clock;

namespace {

constexpr uint32_t kBar0 = VFIO_PCI_BAR0_REGION_INDEX;
constexpr uint32_t kBar2 = VFIO_PCI_BAR2_REGION_INDEX;
constexpr uint32_t kMsi = VFIO_PCI_MSI_IRQ_INDEX;
// edu registers (QEMU docs/specs/edu.rst).
constexpr uint64_t kRegId = 0x00, kRegLive = 0x04, kRegFact = 0x08, kRegStatus = 0x20,
                   kRegIrqStatus = 0x24, kRegIrqRaise = 0x60, kRegIrqAck = 0x64,
                   kRegDmaSrc = 0x80, kRegDmaDst = 0x88, kRegDmaCnt = 0x90, kRegDmaCmd = 0x98;
constexpr uint64_t kEduBuf = 0x40000;
constexpr uint64_t kHookDie = 0xF0000, kHookHang = 0xF0008, kHookDmaFaults = 0xF0010,
                   kHookDmaBusErrors = 0xF0018;
constexpr long kPage = 4096;

// A private directory under /tmp, removed with everything in it.
struct TempDir {
  std::string path;
  TempDir() {
    char t[] = "/tmp/openib-vu-XXXXXX";
    REQUIRE(::mkdtemp(t) != nullptr);
    path = t;
  }
  ~TempDir() {
    if (DIR* d = ::opendir(path.c_str())) {
      while (dirent* e = ::readdir(d)) {
        std::string n = e->d_name;
        if (n != "." && n != "..") ::unlink((path + "/" + n).c_str());
      }
      ::closedir(d);
    }
    ::rmdir(path.c_str());
  }
  std::string sock() const { return path + "/edu.sock"; }
};

// The edu server as a child process; killed by PID on destruction.
struct EduServer {
  TempDir dir;
  pid_t pid = -1;

  EduServer() {
    const char* exe = std::getenv("OPENIB_EDU_SERVER");
    REQUIRE(exe != nullptr);
    std::string sock = dir.sock();
    std::vector<char*> argv{const_cast<char*>(exe), const_cast<char*>("--socket"), sock.data(),
                            nullptr};
    REQUIRE(::posix_spawn(&pid, exe, nullptr, nullptr, argv.data(), environ) == 0);
  }
  ~EduServer() {
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      (void)wait_exit(5000);
    }
  }
  // Exit status, or -1 if it did not exit within timeout_ms.
  int wait_exit(int timeout_ms) {
    auto end = Clock::now() + std::chrono::milliseconds(timeout_ms);
    while (pid > 0) {
      int st = 0;
      pid_t r = ::waitpid(pid, &st, WNOHANG);
      if (r == pid) {
        pid = -1;
        return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      }
      if (r < 0 || Clock::now() > end) return -1;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return -1;
  }
  // Connects, retrying while the server is still starting (5 s at most).
  std::unique_ptr<Device> open(VfioUserOptions opts = {}) {
    auto end = Clock::now() + std::chrono::seconds(5);
    for (;;) {
      auto d = open_vfio_user(dir.sock(), opts);
      if (d) return std::move(*d);
      INFO(d.error().str());
      REQUIRE((d.error().code == ENOENT || d.error().code == ECONNREFUSED));
      REQUIRE(Clock::now() < end);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
};

template <typename T>
T must(Result<T> r) {
  INFO((r.ok() ? std::string() : r.error().str()));
  REQUIRE(r.ok());
  return std::move(r).value();
}
void must(Result<void> r) {
  INFO((r.ok() ? std::string() : r.error().str()));
  REQUIRE(r.ok());
}
template <typename R>
int code(const R& r) {
  return r.ok() ? 0 : r.error().code;
}

// memfd of n pages, with our own view of it.
struct Memfd {
  UniqueFd fd;
  std::byte* view = nullptr;
  size_t size = 0;
  explicit Memfd(size_t pages) : size(pages * kPage) {
    fd = UniqueFd(::memfd_create("vu-test", MFD_CLOEXEC));
    REQUIRE(fd.valid());
    REQUIRE(::ftruncate(fd.get(), static_cast<off_t>(size)) == 0);
    void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
    REQUIRE(p != MAP_FAILED);
    view = static_cast<std::byte*>(p);
  }
  ~Memfd() { ::munmap(view, size); }
  std::span<std::byte> page(size_t i) const { return {view + i * kPage, size_t(kPage)}; }
};

void fill(std::span<std::byte> b, uint8_t seed) {
  for (size_t i = 0; i < b.size(); ++i) b[i] = std::byte(static_cast<uint8_t>(i * 7 + seed));
}

// Runs one edu DMA and waits for the engine to finish.
void edu_dma(Device& d, uint64_t src, uint64_t dst, uint64_t count, bool to_ram) {
  must(d.write64(kBar0, kRegDmaSrc, src));
  must(d.write64(kBar0, kRegDmaDst, dst));
  must(d.write64(kBar0, kRegDmaCnt, count));
  must(d.write32(kBar0, kRegDmaCmd, 0x1 | 0x4 | (to_ram ? 0x2 : 0)));
  for (int i = 0; i < 500; ++i) {
    if (!(must(d.read32(kBar0, kRegDmaCmd)) & 1)) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  FAIL("edu DMA did not finish");
}

size_t open_fds() {
  size_t n = 0;
  if (DIR* d = ::opendir("/proc/self/fd")) {
    while (::readdir(d)) ++n;
    ::closedir(d);
  }
  return n;
}

}  // namespace

TEST_CASE("VERSION and DEVICE_GET_INFO") {
  EduServer srv;
  auto dev = srv.open();
  CHECK(dev->alive());
  CHECK(dev->name() == "vfio-user:" + srv.dir.sock());
  DeviceInfo di = must(dev->device_info());
  CHECK(di.flags == (VFIO_DEVICE_FLAGS_PCI | VFIO_DEVICE_FLAGS_RESET));
  CHECK(di.num_regions == VFIO_PCI_NUM_REGIONS);
  CHECK(di.num_irqs == VFIO_PCI_NUM_IRQS);
  CHECK(must(dev->iova_ranges()).empty());
}

TEST_CASE("config space and BAR0 registers through REGION_READ/WRITE") {
  EduServer srv;
  auto dev = srv.open();
  CHECK(must(dev->config_read16(0x00)) == 0x1234);
  CHECK(must(dev->config_read16(0x02)) == 0x11e8);
  must(dev->config_write16(0x04, 0x0006));
  CHECK(must(dev->config_read16(0x04)) == 0x0006);
  must(dev->config_write16(0x00, 0xffff));  // read-only
  CHECK(must(dev->config_read16(0x00)) == 0x1234);
  std::byte cap[1];
  must(dev->config_read(0x34, cap));
  CHECK(std::to_integer<int>(cap[0]) == 0x40);
  must(dev->config_read(0x40, cap));
  CHECK(std::to_integer<int>(cap[0]) == 0x05);  // MSI

  RegionInfo bar0 = must(dev->region_info(kBar0));
  CHECK(bar0.size == (1u << 20));
  CHECK(bar0.readable());
  CHECK(bar0.writable());
  CHECK_FALSE(bar0.mmappable());
  CHECK(must(dev->read32(kBar0, kRegId)) == 0x010000edu);
  for (uint32_t v : {0u, 0xdeadbeefu}) {
    must(dev->write32(kBar0, kRegLive, v));
    CHECK(must(dev->read32(kBar0, kRegLive)) == ~v);
  }
  must(dev->write32(kBar0, kRegFact, 10));
  CHECK(must(dev->read32(kBar0, kRegFact)) == 3628800u);

  SECTION("refused accesses are that call's error; the device stays usable") {
    std::byte b[4];
    CHECK(code(dev->region_read(kBar0, (1u << 20) - 2, b)) == EINVAL);
    CHECK(code(dev->region_read(VFIO_PCI_BAR5_REGION_INDEX, 0, b)) == EINVAL);
    CHECK(code(dev->region_read(40, 0, b)) == EINVAL);
    CHECK(code(dev->region_mmap(kBar0, 0, kPage)) == EINVAL);
    CHECK(code(dev->region_info(40)) == EINVAL);
    CHECK(dev->alive());
    CHECK(must(dev->read32(kBar0, kRegId)) == 0x010000edu);
  }
}

TEST_CASE("GET_REGION_INFO sparse mmap, and mmap through it") {
  EduServer srv;
  auto dev = srv.open();
  RegionInfo bar2 = must(dev->region_info(kBar2));
  CHECK(bar2.size == 2 * kPage);
  CHECK(bar2.mmappable());
  REQUIRE(bar2.sparse.size() == 1);
  CHECK(bar2.sparse[0].offset == uint64_t(kPage));
  CHECK(bar2.sparse[0].size == uint64_t(kPage));

  // Outside the sparse area, or unaligned: refused by the client.
  CHECK(code(dev->region_mmap(kBar2, 0, kPage)) == EINVAL);
  CHECK(code(dev->region_mmap(kBar2, 0, 2 * kPage)) == EINVAL);
  CHECK(code(dev->region_mmap(kBar2, kPage, 2 * kPage)) == EINVAL);
  CHECK(code(dev->region_mmap(kBar2, kPage + 8, kPage)) == EINVAL);

  RegionMapping m = must(dev->region_mmap(kBar2, kPage, kPage));
  REQUIRE(m.valid());
  auto* p = static_cast<std::byte*>(m.data());
  fill({p, size_t(kPage)}, 3);
  std::vector<std::byte> back(kPage);
  must(dev->region_read(kBar2, kPage, back));
  CHECK(std::equal(back.begin(), back.end(), p));

  // And the other way: REGION_WRITE shows in the mapping.
  std::vector<std::byte> w(64, std::byte{0x5c});
  must(dev->region_write(kBar2, kPage + 128, w));
  CHECK(std::all_of(p + 128, p + 192, [](std::byte b) { return b == std::byte{0x5c}; }));
  CHECK(p[127] != std::byte{0x5c});

  // Page 0 is reachable by messages only.
  must(dev->region_write(kBar2, 16, w));
  std::vector<std::byte> r0(64);
  must(dev->region_read(kBar2, 16, r0));
  CHECK(r0 == w);
}

TEST_CASE("GET_IRQ_INFO, SET_IRQS and an interrupt on the eventfd") {
  EduServer srv;
  auto dev = srv.open();
  IrqInfo msi = must(dev->irq_info(kMsi));
  CHECK(msi.index == kMsi);
  CHECK(msi.count == 1);
  CHECK((msi.flags & VFIO_IRQ_INFO_EVENTFD));
  CHECK(must(dev->irq_info(VFIO_PCI_MSIX_IRQ_INDEX)).count == 0);
  CHECK(code(dev->irq_info(77)) == EINVAL);
  CHECK(dev->alive());

  UniqueFd efd = must(make_eventfd());
  int fds[] = {efd.get()};
  must(dev->set_irq_eventfds(kMsi, 0, fds));
  // Vector 1 does not exist: the server refuses.
  CHECK(code(dev->set_irq_eventfds(kMsi, 1, fds)) == EINVAL);

  must(dev->write32(kBar0, kRegIrqRaise, 0x1234));
  CHECK(must(wait_eventfd(efd.get(), 2000)) == 1);
  CHECK(must(dev->read32(kBar0, kRegIrqStatus)) == 0x1234);
  must(dev->write32(kBar0, kRegIrqAck, 0x1234));
  CHECK(must(dev->read32(kBar0, kRegIrqStatus)) == 0);

  // Factorial completion interrupt (status bit 0x80).
  must(dev->write32(kBar0, kRegStatus, 0x80));
  must(dev->write32(kBar0, kRegFact, 5));
  CHECK(must(wait_eventfd(efd.get(), 2000)) == 1);
  CHECK(must(dev->read32(kBar0, kRegIrqStatus)) == 0x1);
  CHECK(must(dev->read32(kBar0, kRegFact)) == 120);
  must(dev->write32(kBar0, kRegIrqAck, 0x1));

  SECTION("disabled: no interrupt reaches the eventfd") {
    must(dev->disable_irqs(kMsi));
    must(dev->write32(kBar0, kRegIrqRaise, 0x2));
    CHECK(code(wait_eventfd(efd.get(), 200)) == ETIMEDOUT);
  }
  SECTION("unrouted with -1: no interrupt reaches the eventfd") {
    int none[] = {-1};
    must(dev->set_irq_eventfds(kMsi, 0, none));
    must(dev->write32(kBar0, kRegIrqRaise, 0x2));
    CHECK(code(wait_eventfd(efd.get(), 200)) == ETIMEDOUT);
  }
}

TEST_CASE("DMA_MAP/UNMAP of memfd memory and edu DMA through the passed fds") {
  EduServer srv;
  auto dev = srv.open();
  must(dev->config_write16(0x04, 0x0006));  // memory + bus master
  UniqueFd efd = must(make_eventfd());
  int fds[] = {efd.get()};
  must(dev->set_irq_eventfds(kMsi, 0, fds));

  Memfd mem(4);
  const uint64_t src = 0x100000, dst = 0x200000, ro = 0x300000;
  must(dev->dma_map({mem.fd.get(), 0, nullptr, src, uint64_t(kPage), true, true}));
  must(dev->dma_map({mem.fd.get(), uint64_t(kPage), nullptr, dst, uint64_t(kPage), true, true}));
  must(dev->dma_map({mem.fd.get(), 2 * uint64_t(kPage), nullptr, ro, uint64_t(kPage), true, false}));

  // RAM -> edu -> RAM, bytes checked both directions.
  fill(mem.page(0), 11);
  std::fill(mem.page(1).begin(), mem.page(1).end(), std::byte{0});
  edu_dma(*dev, src, kEduBuf, kPage, false);
  CHECK(must(wait_eventfd(efd.get(), 2000)) >= 1);
  CHECK((must(dev->read32(kBar0, kRegIrqStatus)) & 0x100));
  must(dev->write32(kBar0, kRegIrqAck, 0x100));
  edu_dma(*dev, kEduBuf, dst, kPage, true);
  CHECK(must(wait_eventfd(efd.get(), 2000)) >= 1);
  CHECK(std::equal(mem.page(0).begin(), mem.page(0).end(), mem.page(1).begin()));

  // A part of the buffer to an offset inside the mapping.
  std::fill(mem.page(1).begin(), mem.page(1).end(), std::byte{0});
  edu_dma(*dev, kEduBuf + 16, dst + 0x800, 100, true);
  CHECK(std::equal(mem.page(1).begin() + 0x800, mem.page(1).begin() + 0x800 + 100,
                   mem.page(0).begin() + 16));
  CHECK(mem.page(1)[0x7ff] == std::byte{0});
  CHECK(mem.page(1)[0x800 + 100] == std::byte{0});

  SECTION("overlapping map and mismatched unmap are refused") {
    CHECK(code(dev->dma_map({mem.fd.get(), 0, nullptr, src + 0x800, uint64_t(kPage), true, true})) ==
          EEXIST);
    CHECK(code(dev->dma_unmap(dst, 2 * kPage)) == ENOENT);
    CHECK(code(dev->dma_map({-1, 0, nullptr, 0x500000, uint64_t(kPage), true, true})) == EINVAL);
    // Beyond the end of the memfd: the server would take SIGBUS; refused.
    CHECK(code(dev->dma_map({mem.fd.get(), 3 * uint64_t(kPage), nullptr, 0x600000,
                             2 * uint64_t(kPage), true, true})) == EINVAL);
    CHECK(dev->alive());
  }
  SECTION("DMA to an unmapped IOVA does not land") {
    must(dev->dma_unmap(dst, kPage));
    std::fill(mem.page(1).begin(), mem.page(1).end(), std::byte{0xa5});
    edu_dma(*dev, kEduBuf, dst, kPage, true);
    CHECK(std::all_of(mem.page(1).begin(), mem.page(1).end(),
                      [](std::byte b) { return b == std::byte{0xa5}; }));
    // Crossing from mapped into unmapped memory: nothing at all is written.
    std::fill(mem.page(0).begin(), mem.page(0).end(), std::byte{0xa5});
    edu_dma(*dev, kEduBuf, src + 0x800, kPage, true);
    CHECK(std::all_of(mem.page(0).begin(), mem.page(0).end(),
                      [](std::byte b) { return b == std::byte{0xa5}; }));
    CHECK(must(dev->read32(kBar0, kRegId)) == 0x010000edu);
  }
  SECTION("DMA to memory mapped read-only does not land") {
    std::fill(mem.page(2).begin(), mem.page(2).end(), std::byte{0xa5});
    edu_dma(*dev, kEduBuf, ro, kPage, true);
    CHECK(std::all_of(mem.page(2).begin(), mem.page(2).end(),
                      [](std::byte b) { return b == std::byte{0xa5}; }));
  }
  SECTION("without bus mastering nothing moves") {
    must(dev->config_write16(0x04, 0x0002));
    std::fill(mem.page(1).begin(), mem.page(1).end(), std::byte{0xa5});
    edu_dma(*dev, kEduBuf, dst, kPage, true);
    CHECK(mem.page(1)[0] == std::byte{0xa5});
  }
}

// docs/simhca.md §11.2: memory that stops backing a DMA mapping (here the
// client truncates its memfd after DMA_MAP, behind the server's back) fails
// the DMAs that touch it, counted as bus errors; the server does not die of
// SIGBUS and goes on serving, other mappings unaffected.
TEST_CASE("DMA to memory truncated behind the server's back fails that DMA; the server goes on") {
  EduServer srv;
  auto dev = srv.open();
  must(dev->config_write16(0x04, 0x0006));  // memory + bus master
  Memfd gone(2), kept(2);
  const uint64_t a = 0x100000, b = 0x200000;
  must(dev->dma_map({gone.fd.get(), 0, nullptr, a, 2 * uint64_t(kPage), true, true}));
  must(dev->dma_map({kept.fd.get(), 0, nullptr, b, 2 * uint64_t(kPage), true, true}));
  fill(kept.page(0), 23);
  // From here on `gone.view` must not be touched by this process either.
  REQUIRE(::ftruncate(gone.fd.get(), 0) == 0);
  edu_dma(*dev, a, kEduBuf, kPage, false);     // the device reads: bus error
  edu_dma(*dev, kEduBuf, a + kPage, 64, true);  // the device writes: bus error
  REQUIRE(dev->alive());
  CHECK(must(dev->read32(kBar0, kRegId)) == 0x010000edu);
  CHECK(must(dev->read64(kBar0, kHookDmaBusErrors)) == 2);
  CHECK(must(dev->read64(kBar0, kHookDmaFaults)) == 2);

  // Another mapping still moves data, both ways.
  edu_dma(*dev, b, kEduBuf, kPage, false);
  edu_dma(*dev, kEduBuf, b + kPage, kPage, true);
  CHECK(std::equal(kept.page(0).begin(), kept.page(0).end(), kept.page(1).begin()));
  CHECK(must(dev->read64(kBar0, kHookDmaFaults)) == 2);

  // Each access is its own error: once the file backs the pages again, the
  // same mapping works.
  REQUIRE(::ftruncate(gone.fd.get(), 2 * kPage) == 0);
  edu_dma(*dev, kEduBuf, a, kPage, true);
  CHECK(std::equal(kept.page(0).begin(), kept.page(0).end(), gone.page(0).begin()));
  CHECK(must(dev->read64(kBar0, kHookDmaBusErrors)) == 2);
}

TEST_CASE("DEVICE_RESET returns the device to power-on state") {
  EduServer srv;
  auto dev = srv.open();
  must(dev->write32(kBar0, kRegLive, 0x1234));
  must(dev->write32(kBar0, kRegStatus, 0x80));
  must(dev->config_write16(0x04, 0x0006));
  must(dev->reset());
  CHECK(must(dev->read32(kBar0, kRegLive)) == 0);
  CHECK(must(dev->read32(kBar0, kRegStatus)) == 0);
  CHECK(must(dev->config_read16(0x04)) == 0);
  CHECK(must(dev->read32(kBar0, kRegId)) == 0x010000edu);
}

TEST_CASE("a server that dies mid-request gives ENODEV, now and later") {
  EduServer srv;
  auto dev = srv.open();
  auto t0 = Clock::now();
  auto r = dev->write32(kBar0, kHookDie, 1);
  CHECK(code(r) == ENODEV);
  CHECK(Clock::now() - t0 < std::chrono::seconds(3));
  CHECK_FALSE(dev->alive());
  CHECK(code(dev->device_info()) == ENODEV);
  CHECK(code(dev->read32(kBar0, kRegId)) == ENODEV);
  CHECK(code(dev->reset()) == ENODEV);
  CHECK(code(dev->region_mmap(kBar2, kPage, kPage)) == ENODEV);
  CHECK(srv.wait_exit(5000) == 3);
}

TEST_CASE("a server that stops answering gives ETIMEDOUT, then ENODEV") {
  EduServer srv;
  auto dev = srv.open({.reply_timeout_ms = 300});
  auto t0 = Clock::now();
  auto r = dev->write32(kBar0, kHookHang, 1);
  auto took = Clock::now() - t0;
  CHECK(code(r) == ETIMEDOUT);
  CHECK(took >= std::chrono::milliseconds(250));
  CHECK(took < std::chrono::seconds(3));
  CHECK_FALSE(dev->alive());
  CHECK(code(dev->device_info()) == ENODEV);
}

// ---- fake servers --------------------------------------------------------------

namespace {

using namespace openib::vfio::user;

// Listens on a socket in a temp dir; a thread accepts one client and, for
// each step, receives one message and runs the step on it.
struct FakeServer {
  using Step = std::function<void(int sock, const Header& req, ByteSpan payload)>;
  TempDir dir;
  UniqueFd listener;
  std::thread th;
  std::vector<Header> seen;

  explicit FakeServer(std::vector<Step> steps) {
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::string p = dir.sock();
    std::memcpy(a.sun_path, p.c_str(), p.size() + 1);
    listener = UniqueFd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    REQUIRE(::bind(listener.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    REQUIRE(::listen(listener.get(), 1) == 0);
    th = std::thread([this, steps = std::move(steps)] { run(steps); });
  }
  ~FakeServer() { join(); }
  void join() {
    if (th.joinable()) th.join();
  }

  void run(const std::vector<Step>& steps) {
    pollfd p{listener.get(), POLLIN, 0};
    if (::poll(&p, 1, 5000) != 1) return;
    UniqueFd c(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
    if (!c) return;
    for (const Step& s : steps) {
      auto m = recv_message(c.get(), kMaxMessageSize, 5000);
      if (!m) return;
      auto h = decode_header(m->bytes);
      if (!h) return;
      seen.push_back(*h);
      s(c.get(), *h, ByteSpan(m->bytes).subspan(kHeaderSize));
    }
    // Wait (bounded) for the client to hang up.
    (void)recv_message(c.get(), kMaxMessageSize, 2000);
  }
};

void send_raw(int sock, const Bytes& b, std::span<const int> fds = {}) {
  (void)send_message(sock, b, fds, 2000);
}

FakeServer::Step version_reply(std::string json = capabilities_json({})) {
  return [json](int s, const Header& h, ByteSpan) {
    send_raw(s, encode_reply(h.id, h.command, encode_version({0, 1, json})));
  };
}

FakeServer::Step reply_with(Bytes payload) {
  return [payload](int s, const Header& h, ByteSpan) {
    send_raw(s, encode_reply(h.id, h.command, payload));
  };
}

const DeviceInfo kInfo{VFIO_DEVICE_FLAGS_PCI, 9, 5};

}  // namespace

TEST_CASE("fake server: malformed VERSION replies are EPROTO") {
  SECTION("bad JSON") {
    FakeServer f({version_reply("{not json")});
    CHECK(code(open_vfio_user(f.dir.sock())) == EPROTO);
  }
  SECTION("another major version") {
    FakeServer f({[](int s, const Header& h, ByteSpan) {
      send_raw(s, encode_reply(h.id, h.command, encode_version({1, 0, "{}"})));
    }});
    CHECK(code(open_vfio_user(f.dir.sock())) == EPROTO);
  }
  SECTION("a payload that is not a version") {
    FakeServer f({reply_with(Bytes{std::byte{1}})});
    CHECK(code(open_vfio_user(f.dir.sock())) == EPROTO);
  }
}

TEST_CASE("fake server: malformed replies are EPROTO and end the connection") {
  Bytes payload;
  uint16_t id_delta = 0, cmd_delta = 0;
  SECTION("mismatched id") {
    payload = encode_device_info(kInfo);
    id_delta = 1;
  }
  SECTION("mismatched command") {
    payload = encode_device_info(kInfo);
    cmd_delta = 1;
  }
  SECTION("payload too short") { payload = Bytes(12); }
  SECTION("payload larger than a GET_INFO reply can be") {
    payload = encode_device_info(kInfo);
    payload.resize(64);
  }
  SECTION("bad argsz") {
    payload = encode_device_info(kInfo);
    payload[0] = std::byte{8};
  }
  FakeServer f({version_reply(), [&](int s, const Header& h, ByteSpan) {
                  send_raw(s, encode_reply(static_cast<uint16_t>(h.id + id_delta),
                                           static_cast<uint16_t>(h.command + cmd_delta), payload));
                }});
  auto dev = must(open_vfio_user(f.dir.sock()));
  CHECK(code(dev->device_info()) == EPROTO);
  CHECK_FALSE(dev->alive());
  CHECK(code(dev->device_info()) == ENODEV);
  CHECK(code(dev->read32(kBar0, 0)) == ENODEV);
}

TEST_CASE("fake server: an oversized reply header is EPROTO without reading it") {
  FakeServer f({version_reply(), [](int s, const Header& h, ByteSpan) {
                  Header big{h.id, h.command, 16u << 20, kTypeReply, 0};
                  Bytes hdr(kHeaderSize);
                  encode_header(big, std::span<std::byte, kHeaderSize>(hdr.data(), kHeaderSize));
                  send_raw(s, hdr);
                }});
  auto dev = must(open_vfio_user(f.dir.sock(), {.reply_timeout_ms = 2000}));
  auto t0 = Clock::now();
  CHECK(code(dev->device_info()) == EPROTO);
  CHECK(Clock::now() - t0 < std::chrono::milliseconds(1500));  // no waiting for 16 MiB
  CHECK_FALSE(dev->alive());
}

TEST_CASE("fake server: a looping region capability chain is EPROTO") {
  // Fixed part with CAPS, cap_offset 32, argsz 48; two caps pointing at
  // each other.
  Bytes p = encode_region_info({kBar2, VFIO_REGION_INFO_FLAG_READ, 0x2000, 0, {}}, 32);
  auto put32 = [&](size_t off, uint32_t v) {
    for (int i = 0; i < 4; ++i) p[off + i] = static_cast<std::byte>(v >> (8 * i));
  };
  put32(0, 48);
  put32(4, VFIO_REGION_INFO_FLAG_READ | VFIO_REGION_INFO_FLAG_CAPS);
  put32(12, 32);
  p.resize(48);
  put32(32, 99 | (1u << 16));
  put32(36, 40);
  put32(40, 98 | (1u << 16));
  put32(44, 32);
  FakeServer f({version_reply(), reply_with(p)});
  auto dev = must(open_vfio_user(f.dir.sock()));
  CHECK(code(dev->region_info(kBar2)) == EPROTO);
  CHECK_FALSE(dev->alive());
}

TEST_CASE("fake server: a REGION_READ reply for another offset is EPROTO") {
  FakeServer f({version_reply(), [](int s, const Header& h, ByteSpan) {
                  Bytes d(4);
                  send_raw(s, encode_reply(h.id, h.command, encode_region_access(0x100, 0, 4, d)));
                }});
  auto dev = must(open_vfio_user(f.dir.sock()));
  CHECK(code(dev->read32(kBar0, 0)) == EPROTO);
  CHECK(code(dev->read32(kBar0, 0)) == ENODEV);
}

TEST_CASE("fake server: an error reply fails only that call") {
  FakeServer f({version_reply(),
                [](int s, const Header& h, ByteSpan) {
                  send_raw(s, encode_error_reply(h.id, h.command, EPERM));
                },
                reply_with(encode_device_info(kInfo))});
  auto dev = must(open_vfio_user(f.dir.sock()));
  CHECK(code(dev->device_info()) == EPERM);
  CHECK(dev->alive());
  CHECK(must(dev->device_info()).num_regions == 9);
}

TEST_CASE("fake server: a posted write is sent with no_reply and not waited for") {
  // The server answers nothing to the posted write: a client that waited
  // would time out (300 ms) and mark the device gone.
  uint32_t written = 0;
  FakeServer f({version_reply(), [&](int, const Header&, ByteSpan p) {
                  auto a = decode_region_access_data(p, 4);
                  if (a && a->data.size() == 4) std::memcpy(&written, a->data.data(), 4);
                },
                reply_with(encode_device_info(kInfo))});
  auto dev = must(open_vfio_user(f.dir.sock(), {.reply_timeout_ms = 300}));
  must(dev->write32_posted(kBar0, 0x40, 0x1234abcd));
  CHECK(must(dev->device_info()).num_regions == 9);  // the next call's reply is its own
  CHECK(dev->alive());
  f.join();
  REQUIRE(f.seen.size() == 3);
  CHECK(f.seen[1].command == uint16_t(Command::kRegionWrite));
  CHECK(f.seen[1].no_reply());
  CHECK_FALSE(f.seen[2].no_reply());
  CHECK(written == 0x1234abcdu);
}

TEST_CASE("fake server: unexpected fds with a reply are closed") {
  UniqueFd e1 = must(make_eventfd()), e2 = must(make_eventfd());
  const int extra[] = {e1.get(), e2.get()};
  FakeServer f({version_reply(), [&](int s, const Header& h, ByteSpan) {
                  send_raw(s, encode_reply(h.id, h.command, encode_device_info(kInfo)), extra);
                }});
  auto dev = must(open_vfio_user(f.dir.sock()));
  const size_t before = open_fds();
  CHECK(must(dev->device_info()).num_irqs == 5);
  CHECK(open_fds() == before);
}

TEST_CASE("fake server: the negotiated max_data_xfer_size splits transfers") {
  Capabilities caps;
  caps.max_data_xfer_size = 4096;
  auto answer = [](int s, const Header& h, ByteSpan p) {
    auto a = decode_region_access_header(p, kMaxDataXfer);
    if (!a) return;
    Bytes d(a->count, static_cast<std::byte>(a->offset >> 12));
    send_raw(s, encode_reply(h.id, h.command, encode_region_access(a->offset, a->region, a->count, d)));
  };
  FakeServer f({version_reply(capabilities_json(caps)), answer, answer});
  auto dev = must(open_vfio_user(f.dir.sock()));
  std::vector<std::byte> buf(8192);
  must(dev->region_read(kBar2, 0, buf));
  CHECK(buf[0] == std::byte{0});
  CHECK(buf[4095] == std::byte{0});
  CHECK(buf[4096] == std::byte{1});
  CHECK(buf[8191] == std::byte{1});
  dev.reset();
  f.join();
  REQUIRE(f.seen.size() == 3);
  CHECK(f.seen[1].size == kHeaderSize + kRegionAccessSize);
  CHECK(f.seen[2].command == static_cast<uint16_t>(Command::kRegionRead));
}

TEST_CASE("fake server: server commands while waiting are answered ENOTSUP") {
  Header client_answer{};
  FakeServer f({version_reply(),
                [](int s, const Header& h, ByteSpan) {
                  // A DMA_READ of our own first, then the reply.
                  send_raw(s, encode_command(77, Command::kDmaRead, encode_dma_access(0x1000, 8)));
                  send_raw(s, encode_reply(h.id, h.command, encode_device_info(kInfo)));
                },
                [&](int, const Header& h, ByteSpan) { client_answer = h; }});
  auto dev = must(open_vfio_user(f.dir.sock()));
  CHECK(must(dev->device_info()).num_regions == 9);
  CHECK(dev->alive());
  dev.reset();
  f.join();
  CHECK(client_answer.id == 77);
  CHECK(client_answer.is_reply());
  CHECK(client_answer.is_error());
  CHECK(client_answer.error == ENOTSUP);
}

TEST_CASE("fake server: a server that accepts but never answers VERSION times out") {
  FakeServer f({[](int, const Header&, ByteSpan) {}});
  auto t0 = Clock::now();
  CHECK(code(open_vfio_user(f.dir.sock(), {.reply_timeout_ms = 200})) == ETIMEDOUT);
  CHECK(Clock::now() - t0 < std::chrono::seconds(2));
}

// ---- the server framework against a raw client ----------------------------------

namespace {

// A raw connection to the edu server, speaking bytes.
struct RawClient {
  UniqueFd sock;
  uint16_t id = 100;

  explicit RawClient(const std::string& path) {
    auto end = Clock::now() + std::chrono::seconds(5);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::memcpy(a.sun_path, path.c_str(), path.size() + 1);
    for (;;) {
      sock = UniqueFd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
      if (::connect(sock.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) return;
      REQUIRE(Clock::now() < end);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  // Sends raw bytes and returns the reply's header.
  Header call(const Bytes& msg, std::span<const int> fds = {}) {
    must(send_message(sock.get(), msg, fds, 2000));
    auto r = must(recv_message(sock.get(), kMaxMessageSize, 2000));
    return must(decode_header(r.bytes));
  }
  Header cmd(Command c, const Bytes& payload, std::span<const int> fds = {}) {
    return call(encode_command(id++, c, payload), fds);
  }
};

void check_error(const Header& h, int errnum) {
  CHECK(h.is_reply());
  CHECK(h.is_error());
  CHECK(h.error == static_cast<uint32_t>(errnum));
}

}  // namespace

TEST_CASE("server: malformed commands get error replies; the server keeps serving") {
  EduServer srv;
  RawClient c(srv.dir.sock());

  // Anything before VERSION is refused.
  check_error(c.cmd(Command::kDeviceGetInfo, encode_device_info_request()), EPROTO);
  Header v = c.cmd(Command::kVersion, encode_version({0, 1, capabilities_json({})}));
  CHECK((v.is_reply() && !v.is_error()));
  check_error(c.cmd(Command::kVersion, encode_version({0, 1, ""})), EPROTO);  // twice

  check_error(c.cmd(Command::kDeviceGetInfo, Bytes(8)), EPROTO);
  Bytes map = encode_dma_map({VFIO_DMA_MAP_FLAG_READ, 0, 0x100000, 0x1000});
  map[0] = std::byte{31};
  check_error(c.cmd(Command::kDmaMap, map), EPROTO);
  // A well-formed DMA_MAP without an fd: DMA_READ/WRITE are not offered.
  check_error(c.cmd(Command::kDmaMap, encode_dma_map({VFIO_DMA_MAP_FLAG_READ, 0, 0x100000, 0x1000})),
              ENOTSUP);
  IrqSet bad;
  bad.flags = VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_DATA_NONE | VFIO_IRQ_SET_ACTION_TRIGGER;
  bad.index = kMsi;
  bad.count = 1;
  check_error(c.cmd(Command::kDeviceSetIrqs, encode_irq_set(bad)), EPROTO);
  // REGION_WRITE whose count disagrees with its data.
  Bytes w = encode_region_access(0x04, kBar0, 8, Bytes(4));
  check_error(c.cmd(Command::kRegionWrite, w), EPROTO);
  check_error(c.cmd(Command::kRegionRead, encode_region_access(0, kBar0, 2u << 20)), EPROTO);
  check_error(c.cmd(static_cast<Command>(99), {}), ENOTSUP);
  check_error(c.cmd(Command::kDeviceGetRegionIoFds, Bytes(16)), ENOTSUP);
  check_error(c.cmd(Command::kDeviceReset, Bytes(4)), EPROTO);
  // Unexpected fds with a command are closed, the command still answered.
  UniqueFd e = must(make_eventfd());
  int fds[] = {e.get()};
  Header gi = c.cmd(Command::kDeviceGetInfo, encode_device_info_request(), fds);
  CHECK((gi.is_reply() && !gi.is_error()));

  // Still serving.
  Bytes rd = encode_command(c.id++, Command::kRegionRead, encode_region_access(0, kBar0, 4));
  must(send_message(c.sock.get(), rd, {}, 2000));
  auto r = must(recv_message(c.sock.get(), kMaxMessageSize, 2000));
  auto m = must(decode_message(r.bytes));
  auto a = must(decode_region_access_data(m.payload, 4));
  CHECK(std::to_integer<int>(a.data[0]) == 0xed);

  // A header that cannot be framed ends the connection (and, for this
  // one-client server, the process), never a crash.
  Bytes junk(kHeaderSize);
  encode_header({1, 9, 0xffffffffu, 0, 0}, std::span<std::byte, kHeaderSize>(junk.data(), kHeaderSize));
  must(send_message(c.sock.get(), junk, {}, 2000));
  CHECK(code(recv_message(c.sock.get(), kMaxMessageSize, 2000)) == ENODEV);
  CHECK(srv.wait_exit(5000) == 0);
}
