// openib-educheck: drives QEMU's "edu" PCI device (src/tools/edu.hpp)
// through the Device interface only, so it runs unchanged over kernel VFIO
// (inside a QEMU guest with a vIOMMU, test/qemu/run.sh) and over vfio-user
// (the edu emulation in test/devices/). Prints one "VERIFIED: ..." line per
// property it proved; exits 1 on the first failure, 2 on bad usage.
// See docs/qemu-test.md for what each line proves.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <string_view>
#include <thread>

#include "common/fd.hpp"
#include "common/log.hpp"
#include "dma/dma_pool.hpp"
#include "tools/edu.hpp"
#include "vfio/device.hpp"
#include "vfio/interrupts.hpp"

namespace openib::edu {
namespace {

using vfio::Device;
constexpr uint32_t kBar = VFIO_PCI_BAR0_REGION_INDEX;
constexpr uint32_t kMsi = VFIO_PCI_MSI_IRQ_INDEX;
constexpr int kIrqTimeoutMs = 5000;  // edu's DMA timer is 100 ms; TCG is slow
constexpr uint8_t kSentinel = 0xa5;

// Unbuffered-enough: each line is flushed, so a hang or crash later still
// leaves what was proven on the console.
void verified(const std::string& what) {
  std::printf("VERIFIED: %s\n", what.c_str());
  std::fflush(stdout);
}
void info(const std::string& what) {
  std::printf("INFO: %s\n", what.c_str());
  std::fflush(stdout);
}

template <typename T>
Result<void> expect_eq(T got, T want, std::string_view what) {
  if (got == want) return ok();
  return err(EIO, "{}: read {:#x}, expected {:#x}", what, got, want);
}

// Everything one check needs: the device, its MSI eventfd, its DMA pool.
struct Edu {
  Device& dev;
  UniqueFd irq;
  std::unique_ptr<dma::DmaPool> pool;
};

Result<void> check_ids(Device& dev) {
  OPENIB_TRY_ASSIGN(uint16_t vendor, dev.config_read16(0x00));
  OPENIB_TRY_ASSIGN(uint16_t device, dev.config_read16(0x02));
  if (vendor != kVendorId || device != kDeviceId)
    return err(ENODEV, "PCI id {:04x}:{:04x} is not edu ({:04x}:{:04x})", vendor, device,
               kVendorId, kDeviceId);
  verified(fmt::format("PCI config space id {:04x}:{:04x}", vendor, device));
  OPENIB_TRY_ASSIGN(uint32_t id, dev.read32(kBar, kRegId));
  OPENIB_TRY(expect_eq(id, kIdValue, "identification register"));
  verified(fmt::format("identification {:#010x}", id));
  return ok();
}

// The same register through an mmap of BAR0, if the transport offers one.
Result<void> check_mmap(Device& dev) {
  OPENIB_TRY_ASSIGN(vfio::RegionInfo r, dev.region_info(kBar));
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  uint64_t at = r.sparse.empty() ? 0 : r.sparse.front().offset;
  bool covers_id = r.sparse.empty() || (at == 0 && r.sparse.front().size >= page);
  if (!r.mmappable() || r.size < page || !covers_id) {
    info("BAR0 offers no mmap covering the id register; skipped the mmap check");
    return ok();
  }
  OPENIB_TRY_ASSIGN(vfio::RegionMapping m, dev.region_mmap(kBar, 0, page));
  auto* regs = static_cast<volatile uint32_t*>(m.data());
  OPENIB_TRY(expect_eq(static_cast<uint32_t>(regs[kRegId / 4]), kIdValue, "mmap-ed id register"));
  regs[kRegLiveness / 4] = 0x5a5a0000;
  OPENIB_TRY(expect_eq(static_cast<uint32_t>(regs[kRegLiveness / 4]), ~0x5a5a0000u,
                       "mmap-ed liveness register"));
  verified("BAR0 mmap reads identification and liveness");
  return ok();
}

Result<void> check_liveness(Device& dev) {
  for (uint32_t v : {0x00000000u, 0xdeadbeefu, 0x12345678u}) {
    OPENIB_TRY(dev.write32(kBar, kRegLiveness, v));
    OPENIB_TRY_ASSIGN(uint32_t got, dev.read32(kBar, kRegLiveness));
    OPENIB_TRY(expect_eq(got, ~v, "liveness register"));
  }
  verified("liveness register");
  return ok();
}

// Polls until (reg & mask) == 0, for at most timeout_ms.
Result<void> wait_clear(Device& dev, uint64_t reg, uint32_t mask, int timeout_ms,
                        std::string_view what) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    OPENIB_TRY_ASSIGN(uint32_t v, dev.read32(kBar, reg));
    if (!(v & mask)) return ok();
    if (std::chrono::steady_clock::now() > deadline)
      return err(ETIMEDOUT, "{} still busy after {} ms (register {:#x} = {:#x})", what,
                 timeout_ms, reg, v);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

Result<void> check_factorial(Device& dev) {
  OPENIB_TRY(dev.write32(kBar, kRegFactorial, 10));
  OPENIB_TRY(wait_clear(dev, kRegStatus, kStatusComputing, kIrqTimeoutMs, "factorial"));
  OPENIB_TRY_ASSIGN(uint32_t f, dev.read32(kBar, kRegFactorial));
  OPENIB_TRY(expect_eq(f, 3628800u, "factorial of 10"));
  verified("factorial 10! = 3628800");
  return ok();
}

// PCI command register (PCI Local Bus 3.0, 6.2.2): bit 1 memory space,
// bit 2 bus master. Without bus mastering edu's DMA goes nowhere.
Result<void> enable_bus_master(Device& dev) {
  OPENIB_TRY_ASSIGN(uint16_t cmd, dev.config_read16(0x04));
  OPENIB_TRY(dev.config_write16(0x04, cmd | 0x6));
  OPENIB_TRY_ASSIGN(uint16_t now, dev.config_read16(0x04));
  if ((now & 0x6) != 0x6) return err(EIO, "PCI command {:#06x}: bus master did not stick", now);
  verified(fmt::format("bus mastering enabled (PCI command {:#06x})", now));
  return ok();
}

// edu has one MSI vector (not MSI-X); route it to an eventfd.
Result<UniqueFd> route_msi(Device& dev) {
  OPENIB_TRY_ASSIGN(vfio::IrqInfo irq, dev.irq_info(kMsi));
  if (irq.count < 1 || !(irq.flags & VFIO_IRQ_INFO_EVENTFD))
    return err(ENOTSUP, "MSI index has {} vectors, flags {:#x}", irq.count, irq.flags);
  OPENIB_TRY_ASSIGN(UniqueFd fd, vfio::make_eventfd());
  const int fds[] = {fd.get()};
  OPENIB_TRY(dev.set_irq_eventfds(kMsi, 0, fds));
  return fd;
}

// Waits for the MSI, then checks and acknowledges `bits` in irq status.
Result<void> take_irq(Edu& e, uint32_t bits, std::string_view what) {
  auto n = vfio::wait_eventfd(e.irq.get(), kIrqTimeoutMs);
  if (!n) return err(n.error().code, "{}: {}", what, n.error().message);
  OPENIB_TRY_ASSIGN(uint32_t st, e.dev.read32(kBar, kRegIrqStatus));
  if ((st & bits) != bits) return err(EIO, "{}: irq status {:#x} lacks {:#x}", what, st, bits);
  OPENIB_TRY(e.dev.write32(kBar, kRegIrqAck, bits));
  OPENIB_TRY_ASSIGN(uint32_t after, e.dev.read32(kBar, kRegIrqStatus));
  if (after & bits) return err(EIO, "{}: irq status {:#x} after ack", what, after);
  return ok();
}

Result<void> check_irq_raise(Edu& e) {
  OPENIB_TRY(e.dev.write32(kBar, kRegIrqRaise, 0x8000));
  OPENIB_TRY(take_irq(e, 0x8000, "interrupt raised through register 0x60"));
  verified("interrupt raised via 0x60 arrived as MSI on the eventfd, acked via 0x64");
  return ok();
}

// Starts one DMA between RAM (`iova`) and the start of edu's buffer.
// Refuses anything that would reach outside edu's window (edu.hpp,
// kMaxTransfer) or its 28-bit mask, since QEMU stops the VM on an
// out-of-window transfer.
Result<void> start_dma(Device& dev, uint64_t iova, uint64_t count, bool to_ram) {
  if (count == 0 || count > kMaxTransfer || iova > kDmaLimit || count > kDmaLimit - iova + 1)
    return err(EINVAL, "DMA of {} bytes at iova {:#x} is outside edu's limits", count, iova);
  OPENIB_TRY_ASSIGN(uint32_t busy, dev.read32(kBar, kRegDmaCmd));
  if (busy & kDmaStart) return err(EBUSY, "edu DMA engine busy (cmd {:#x})", busy);
  OPENIB_TRY(dev.write64(kBar, kRegDmaSrc, to_ram ? kBufferAddr : iova));
  OPENIB_TRY(dev.write64(kBar, kRegDmaDst, to_ram ? iova : kBufferAddr));
  OPENIB_TRY(dev.write64(kBar, kRegDmaCount, count));
  return dev.write32(kBar, kRegDmaCmd, kDmaStart | kDmaIrq | (to_ram ? kDmaToRam : 0));
}

// A DMA that must complete with its MSI.
Result<void> dma(Edu& e, uint64_t iova, uint64_t count, bool to_ram) {
  OPENIB_TRY(start_dma(e.dev, iova, count, to_ram));
  OPENIB_TRY(take_irq(e, kIrqDma, to_ram ? "DMA device->RAM" : "DMA RAM->device"));
  return wait_clear(e.dev, kRegDmaCmd, kDmaStart, kIrqTimeoutMs, "DMA");
}

void fill_pattern(std::span<std::byte> b, uint32_t seed) {
  for (size_t i = 0; i < b.size(); ++i)
    b[i] = std::byte(static_cast<uint8_t>((i * 131 + seed) ^ (i >> 8)));
}

Result<void> check_dma_roundtrip(Edu& e) {
  OPENIB_TRY_ASSIGN(dma::DmaBuffer src, e.pool->alloc(kBufferSize, 4096));
  OPENIB_TRY_ASSIGN(dma::DmaBuffer dst, e.pool->alloc(kBufferSize, 4096));
  info(fmt::format("DMA buffers at iova {:#x} and {:#x}", src.iova(), dst.iova()));
  fill_pattern(src.bytes(), 7);
  // Page in halves through the start of edu's window (edu.hpp, kMaxTransfer).
  for (uint64_t at = 0; at < kBufferSize; at += kMaxTransfer) {
    OPENIB_TRY(dma(e, src.iova() + at, kMaxTransfer, false));
    OPENIB_TRY(dma(e, dst.iova() + at, kMaxTransfer, true));
  }
  if (!std::equal(src.bytes().begin(), src.bytes().end(), dst.bytes().begin()))
    return err(EIO, "DMA round trip: destination differs from source");
  verified("dma RAM->device->RAM 4096 bytes intact through the IOMMU");
  verified("completion MSI received on eventfd");
  return ok();
}

// Memory we own (a memfd and our own view of it), mapped by the pool.
struct Probe {
  UniqueFd fd;
  std::byte* view = nullptr;
  ~Probe() { if (view) ::munmap(view, kBufferSize); }
  std::span<std::byte> bytes() const { return {view, kBufferSize}; }
};

Result<void> make_probe(Probe& p) {
  p.fd = UniqueFd(::memfd_create("educheck-probe", MFD_CLOEXEC));
  if (!p.fd) return sys_err("memfd_create");
  if (::ftruncate(p.fd.get(), kBufferSize) < 0) return sys_err("ftruncate memfd");
  void* v = ::mmap(nullptr, kBufferSize, PROT_READ | PROT_WRITE, MAP_SHARED, p.fd.get(), 0);
  if (v == MAP_FAILED) return sys_err("mmap memfd");
  p.view = static_cast<std::byte*>(v);
  return ok();
}

// Map memory, show a DMA lands in it, unmap it, then DMA to the same IOVA
// again: the IOMMU (or the vfio-user server) must drop the write.
Result<void> check_unmapped(Edu& e) {
  Probe p;
  OPENIB_TRY(make_probe(p));
  OPENIB_TRY_ASSIGN(dma::DmaMapping m, e.pool->map_fd(p.fd.get(), 0, kBufferSize, true));
  const uint64_t iova = m.iova();
  std::fill(p.bytes().begin(), p.bytes().end(), std::byte{0});
  // edu's window still holds the second half of the round trip's pattern.
  OPENIB_TRY(dma(e, iova, kMaxTransfer, true));
  std::vector<std::byte> want(kBufferSize);
  fill_pattern(want, 7);
  if (!std::equal(want.begin() + kMaxTransfer, want.end(), p.bytes().begin()))
    return err(EIO, "DMA to mapped iova {:#x} did not land", iova);

  const uint64_t unmaps = e.pool->stats().unmaps_total;
  m = dma::DmaMapping{};  // dma_unmap; the IOVA goes back to the pool
  if (e.pool->stats().unmaps_total != unmaps + 1)
    return err(EIO, "destroying the mapping did not unmap iova {:#x}", iova);
  std::fill(p.bytes().begin(), p.bytes().end(), std::byte{kSentinel});

  // The device may or may not signal a faulted transfer: wait for the
  // engine to go idle, then drain whatever interrupt came.
  OPENIB_TRY(start_dma(e.dev, iova, kMaxTransfer, true));
  OPENIB_TRY(wait_clear(e.dev, kRegDmaCmd, kDmaStart, kIrqTimeoutMs, "DMA to unmapped iova"));
  (void)vfio::wait_eventfd(e.irq.get(), 1000);
  OPENIB_TRY(e.dev.write32(kBar, kRegIrqAck, kIrqDma));
  auto touched = std::count_if(p.bytes().begin(), p.bytes().end(),
                               [](std::byte b) { return b != std::byte{kSentinel}; });
  if (touched) return err(EIO, "{} bytes changed after DMA to unmapped iova {:#x}", touched, iova);
  OPENIB_TRY_ASSIGN(uint32_t id, e.dev.read32(kBar, kRegId));
  OPENIB_TRY(expect_eq(id, kIdValue, "identification after the faulted DMA"));
  verified(fmt::format("DMA to an unmapped IOVA did not reach memory (iova {:#x})", iova));
  return ok();
}

Result<void> run(Device& dev) {
  OPENIB_TRY_ASSIGN(vfio::DeviceInfo di, dev.device_info());
  info(fmt::format("{}: {} regions, {} irq indexes, flags {:#x}", dev.name(), di.num_regions,
                   di.num_irqs, di.flags));
  OPENIB_TRY(check_ids(dev));
  OPENIB_TRY(check_mmap(dev));
  OPENIB_TRY(check_liveness(dev));
  OPENIB_TRY(check_factorial(dev));
  OPENIB_TRY(enable_bus_master(dev));
  OPENIB_TRY_ASSIGN(auto ranges, dev.iova_ranges());
  for (const auto& r : ranges) info(fmt::format("IOMMU iova range {:#x}-{:#x}", r.start, r.last));

  Edu e{dev, {}, nullptr};
  OPENIB_TRY_ASSIGN(e.irq, route_msi(dev));
  OPENIB_TRY_ASSIGN(e.pool, dma::DmaPool::create(dev, {.iova_limit = kDmaLimit}));
  Result<void> r = check_irq_raise(e);
  if (r) r = check_dma_roundtrip(e);
  if (r) r = check_unmapped(e);
  e.pool.reset();
  if (dev.alive()) (void)dev.disable_irqs(kMsi);
  return r;
}

int usage(const char* prog) {
  std::fprintf(stderr,
               "usage: %s --device <vfio:0000:00:03.0 | vfio-user:/path/sock> [--bind] "
               "[--log <level>]\n"
               "  --bind  first bind the PCI device to vfio-pci (vfio: only)\n",
               prog);
  return 2;
}

}  // namespace
}  // namespace openib::edu

int main(int argc, char** argv) {
  using namespace openib;
  std::string spec;
  bool bind = false;
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    if (a == "--device" && i + 1 < argc) spec = argv[++i];
    else if (a == "--bind") bind = true;
    else if (a == "--log" && i + 1 < argc) log::set_level(argv[++i]);
    else return edu::usage(argv[0]);
  }
  if (spec.empty()) return edu::usage(argv[0]);

  if (bind) {
    constexpr std::string_view kVfio = "vfio:";
    if (!std::string_view(spec).starts_with(kVfio)) {
      std::fprintf(stderr, "FAILED: --bind needs a vfio:<pci address> device\n");
      return 2;
    }
    if (auto b = vfio::bind_vfio_pci(std::string_view(spec).substr(kVfio.size())); !b) {
      std::fprintf(stderr, "FAILED: bind: %s\n", b.error().str().c_str());
      return 1;
    }
  }
  auto dev = vfio::open_device(spec);
  if (!dev) {
    std::fprintf(stderr, "FAILED: open %s: %s\n", spec.c_str(), dev.error().str().c_str());
    return 1;
  }
  if (auto r = edu::run(**dev); !r) {
    std::printf("FAILED: %s\n", r.error().str().c_str());
    return 1;
  }
  std::printf("ALL VERIFIED\n");
  return 0;
}
