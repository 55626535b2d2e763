// openib-edu-vfio-user: QEMU's "edu" educational PCI device (QEMU
// docs/specs/edu.rst, hw/misc/edu.c) served over vfio-user, on the server
// framework of src/vfio/vfio_user_server.hpp. See docs/vfio-user.md,
// "The test device".
//
//   PCI 1234:11e8, BAR0 1 MiB of registers (REGION_READ/WRITE only),
//   one MSI vector (VFIO_PCI_MSI_IRQ_INDEX) and INTx, DMA through the fds
//   of DMA_MAP, checked against the mapped IOVAs.
// Test additions, not in QEMU's edu:
//   BAR2: 2 pages backed by a memfd; page 1 is offered as a sparse mmap
//         area, page 0 only through REGION_READ/WRITE.
//   BAR0 0xF0000 (write): the server _exit()s without replying.
//   BAR0 0xF0008 (write): the server stops answering (sleeps, then exits).
//   BAR0 0xF0010, 0xF0018 (read): the server's DMA faults and, of those,
//         bus errors (ServerStats dma_faults, dma_bus_errors).
//
// Usage: openib-edu-vfio-user --socket PATH [--log LEVEL] [--persist]
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

#include "common/log.hpp"
#include "vfio/vfio_user_server.hpp"

namespace openib::test_devices {
namespace {

using namespace openib::vfio;
using namespace openib::vfio::user;

// edu.rst "MMIO area spec".
constexpr uint32_t kIdValue = 0x010000ed;
constexpr uint32_t kStatusComputing = 0x01;
constexpr uint32_t kStatusIrqFact = 0x80;
constexpr uint32_t kDmaRun = 0x1, kDmaToRam = 0x2, kDmaIrq = 0x4;
constexpr uint32_t kIrqFact = 0x1, kIrqDma = 0x100;
constexpr uint64_t kBufAddr = 0x40000, kBufSize = 4096;
constexpr uint64_t kDmaMask = (1ull << 28) - 1;  // edu's default dma_mask
constexpr uint64_t kBar0Size = 1 << 20;
constexpr uint64_t kBar2Size = 2 * 4096;
constexpr uint64_t kHookDie = 0xF0000, kHookHang = 0xF0008, kHookDmaFaults = 0xF0010,
                   kHookDmaBusErrors = 0xF0018;
constexpr uint16_t kVendor = 0x1234, kDevice = 0x11e8;
constexpr uint8_t kMsiCap = 0x40;

std::atomic<bool> g_stop{false};

class Edu final : public DeviceModel {
 public:
  Edu() { reset_config(); }

  Result<void> init() {
    bar2_fd_ = UniqueFd(::memfd_create("edu-bar2", MFD_CLOEXEC));
    if (!bar2_fd_) return sys_err("memfd_create");
    if (::ftruncate(bar2_fd_.get(), kBar2Size) < 0) return sys_err("ftruncate");
    void* p = ::mmap(nullptr, kBar2Size, PROT_READ | PROT_WRITE, MAP_SHARED, bar2_fd_.get(), 0);
    if (p == MAP_FAILED) return sys_err("mmap bar2");
    bar2_ = static_cast<std::byte*>(p);
    return ok();
  }
  ~Edu() override {
    if (bar2_) ::munmap(bar2_, kBar2Size);
  }

  std::optional<ServerRegion> region(uint32_t index) const override {
    constexpr uint32_t rw = VFIO_REGION_INFO_FLAG_READ | VFIO_REGION_INFO_FLAG_WRITE;
    switch (index) {
      case VFIO_PCI_CONFIG_REGION_INDEX: return ServerRegion{256, rw};
      case VFIO_PCI_BAR0_REGION_INDEX: return ServerRegion{kBar0Size, rw};
      case VFIO_PCI_BAR2_REGION_INDEX:
        return ServerRegion{kBar2Size, rw | VFIO_REGION_INFO_FLAG_MMAP, bar2_fd_.get(), 0,
                            {SparseArea{4096, 4096}}};
      default: return std::nullopt;
    }
  }

  IrqInfo irq(uint32_t index) const override {
    IrqInfo i;
    i.index = index;
    if (index == VFIO_PCI_INTX_IRQ_INDEX) i = {index, VFIO_IRQ_INFO_EVENTFD, 1};
    if (index == VFIO_PCI_MSI_IRQ_INDEX)
      i = {index, VFIO_IRQ_INFO_EVENTFD | VFIO_IRQ_INFO_NORESIZE, 1};
    return i;
  }

  Result<void> read(uint32_t region, uint64_t off, std::span<std::byte> out) override {
    if (region == VFIO_PCI_CONFIG_REGION_INDEX) {
      std::memcpy(out.data(), cfg_ + off, out.size());
      return ok();
    }
    if (region == VFIO_PCI_BAR2_REGION_INDEX) {
      std::memcpy(out.data(), bar2_ + off, out.size());
      return ok();
    }
    uint64_t v = mmio_read(off, out.size());
    std::memcpy(out.data(), &v, std::min<size_t>(out.size(), 8));
    if (out.size() > 8) std::memset(out.data() + 8, 0xff, out.size() - 8);
    return ok();
  }

  Result<void> write(uint32_t region, uint64_t off, std::span<const std::byte> in) override {
    if (region == VFIO_PCI_CONFIG_REGION_INDEX) {
      for (size_t i = 0; i < in.size(); ++i) {
        uint8_t m = cfg_mask_[off + i];
        cfg_[off + i] = static_cast<uint8_t>((cfg_[off + i] & ~m) |
                                             (std::to_integer<uint8_t>(in[i]) & m));
      }
      return ok();
    }
    if (region == VFIO_PCI_BAR2_REGION_INDEX) {
      std::memcpy(bar2_ + off, in.data(), in.size());
      return ok();
    }
    uint64_t v = 0;
    std::memcpy(&v, in.data(), std::min<size_t>(in.size(), 8));
    mmio_write(off, v, in.size());
    return ok();
  }

  // PCI function reset: registers, DMA engine and config space to
  // power-on values; BAR2 memory and DMA mappings are kept.
  void reset() override {
    liveness_ = fact_ = status_ = irq_status_ = 0;
    dma_src_ = dma_dst_ = dma_cnt_ = dma_cmd_ = 0;
    std::memset(buf_, 0, sizeof buf_);
    reset_config();
    ++resets_;
  }

  uint64_t bad_dma() const { return bad_dma_; }
  uint64_t resets() const { return resets_; }

 private:
  // edu.c edu_mmio_read: below 0x80 only 4-byte accesses, the DMA
  // registers 4 or 8; anything else reads as all ones.
  uint64_t mmio_read(uint64_t addr, size_t size) {
    if (addr % size != 0 || (addr < 0x80 && size != 4) || (addr >= 0x80 && size != 4 && size != 8))
      return ~0ull;
    uint64_t v = ~0ull;
    switch (addr) {
      case 0x00: v = kIdValue; break;
      case 0x04: v = liveness_; break;
      case 0x08: v = fact_; break;
      case 0x20: v = status_; break;
      case 0x24: v = irq_status_; break;
      case 0x80: v = dma_src_; break;
      case 0x88: v = dma_dst_; break;
      case 0x90: v = dma_cnt_; break;
      case 0x98: v = dma_cmd_; break;
      case kHookDmaFaults: v = server().stats().dma_faults; break;
      case kHookDmaBusErrors: v = server().stats().dma_bus_errors; break;
      default: break;
    }
    return size == 4 ? (v & 0xffffffffu) : v;
  }

  void mmio_write(uint64_t addr, uint64_t v, size_t size) {
    if (addr == kHookDie) {
      std::fprintf(stderr, "edu: test hook: dying mid-request\n");
      ::_exit(3);
    }
    if (addr == kHookHang) {
      std::fprintf(stderr, "edu: test hook: no longer answering\n");
      for (int i = 0; i < 300 && !g_stop; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
      ::_exit(4);
    }
    if (addr % size != 0 || (addr < 0x80 && size != 4) || (addr >= 0x80 && size != 4 && size != 8))
      return;
    const bool dma_busy = dma_cmd_ & kDmaRun;
    switch (addr) {
      case 0x04: liveness_ = static_cast<uint32_t>(~v); break;
      case 0x08:
        if (!(status_ & kStatusComputing)) factorial(static_cast<uint32_t>(v));
        break;
      case 0x20:
        status_ = (v & kStatusIrqFact) ? (status_ | kStatusIrqFact) : (status_ & ~kStatusIrqFact);
        break;
      case 0x60: raise_irq(static_cast<uint32_t>(v)); break;
      case 0x64: irq_status_ &= ~static_cast<uint32_t>(v); break;
      case 0x80: if (!dma_busy) dma_src_ = v; break;
      case 0x88: if (!dma_busy) dma_dst_ = v; break;
      case 0x90: if (!dma_busy) dma_cnt_ = v; break;
      case 0x98:
        if ((v & kDmaRun) && !dma_busy) {
          dma_cmd_ = static_cast<uint32_t>(v);
          run_dma();
        }
        break;
      default: break;
    }
  }

  // edu.c runs this on a thread; here it completes before the write's reply.
  void factorial(uint32_t n) {
    status_ |= kStatusComputing;
    uint32_t r = 1;
    for (uint32_t i = n; i > 0; --i) r *= i;
    fact_ = r;
    status_ &= ~kStatusComputing;
    if (status_ & kStatusIrqFact) raise_irq(kIrqFact);
  }

  // edu.c edu_raise_irq: MSI if enabled, else INTx. Over vfio-user "MSI
  // enabled" means the client routed the MSI vector or set the enable bit.
  void raise_irq(uint32_t bits) {
    irq_status_ |= bits;
    if (!irq_status_) return;
    const bool msi = (cfg_[kMsiCap + 2] & 1) || server().irq_routed(VFIO_PCI_MSI_IRQ_INDEX, 0);
    if (msi) server().trigger_irq(VFIO_PCI_MSI_IRQ_INDEX, 0);
    else server().trigger_irq(VFIO_PCI_INTX_IRQ_INDEX, 0);
  }

  // edu.c edu_dma_timer: one transfer between the 4 KiB buffer and RAM.
  // RAM addresses are clamped to the 28-bit dma_mask as edu does; a
  // transfer outside the buffer window, with bus mastering off, or to
  // unmapped IOVAs moves nothing and is counted.
  void run_dma() {
    const bool to_ram = dma_cmd_ & kDmaToRam;
    const uint64_t dev_addr = to_ram ? dma_src_ : dma_dst_;
    const uint64_t ram = (to_ram ? dma_dst_ : dma_src_) & kDmaMask;
    const bool in_window = dev_addr >= kBufAddr && dma_cnt_ > 0 && dma_cnt_ <= kBufSize &&
                           dev_addr - kBufAddr <= kBufSize - dma_cnt_;
    const bool master = cfg_[4] & 0x4;  // PCI command: bus master enable
    if (!in_window || !master) {
      ++bad_dma_;
      std::fprintf(stderr, "edu: DMA %s (dev %#llx, count %#llx)\n",
                   in_window ? "with bus mastering off" : "outside the buffer window",
                   static_cast<unsigned long long>(dev_addr),
                   static_cast<unsigned long long>(dma_cnt_));
    } else {
      auto b = std::span<std::byte>(buf_ + (dev_addr - kBufAddr), dma_cnt_);
      auto r = to_ram ? server().dma_write(ram, b) : server().dma_read(ram, b);
      if (!r) ++bad_dma_;
    }
    dma_cmd_ &= ~kDmaRun;
    if (dma_cmd_ & kDmaIrq) raise_irq(kIrqDma);
  }

  void put(uint8_t off, uint64_t v, int n, uint64_t mask = 0) {
    for (int i = 0; i < n; ++i) {
      cfg_[off + i] = static_cast<uint8_t>(v >> (8 * i));
      cfg_mask_[off + i] = static_cast<uint8_t>(mask >> (8 * i));
    }
  }

  // PCI Local Bus 3.0, 6.1 (type 0 header) and 6.8.1 (MSI capability).
  void reset_config() {
    std::memset(cfg_, 0, sizeof cfg_);
    std::memset(cfg_mask_, 0, sizeof cfg_mask_);
    put(0x00, kVendor, 2);
    put(0x02, kDevice, 2);
    put(0x04, 0, 2, 0x0407);          // command: IO, memory, bus master, INTx disable
    put(0x06, 0x0010, 2);             // status: capability list
    put(0x08, 0x10, 1);               // revision (edu.c)
    put(0x0b, 0xff, 1);               // class: PCI_CLASS_OTHERS
    put(0x10, 0, 4, ~(kBar0Size - 1) & 0xffffffffu);  // BAR0: 32-bit memory
    put(0x18, 0, 4, ~(kBar2Size - 1) & 0xffffffffu);  // BAR2: 32-bit memory
    put(0x2c, 0x1af4, 2);             // subsystem vendor (QEMU)
    put(0x2e, 0x1100, 2);             // subsystem
    put(0x34, kMsiCap, 1);            // capabilities pointer
    put(0x3c, 0, 1, 0xff);            // interrupt line
    put(0x3d, 1, 1);                  // interrupt pin INTA
    put(kMsiCap + 0, 0x05, 1);        // MSI capability, last in the list
    put(kMsiCap + 2, 0x0080, 2, 0x0001);          // 64-bit, 1 vector; enable bit
    put(kMsiCap + 4, 0, 4, 0xfffffffc);           // message address
    put(kMsiCap + 8, 0, 4, 0xffffffff);           // message upper address
    put(kMsiCap + 12, 0, 2, 0xffff);              // message data
  }

  uint8_t cfg_[256] = {};
  uint8_t cfg_mask_[256] = {};
  uint32_t liveness_ = 0, fact_ = 0, status_ = 0, irq_status_ = 0, dma_cmd_ = 0;
  uint64_t dma_src_ = 0, dma_dst_ = 0, dma_cnt_ = 0;
  std::byte buf_[kBufSize] = {};
  UniqueFd bar2_fd_;
  std::byte* bar2_ = nullptr;
  uint64_t bad_dma_ = 0, resets_ = 0;
};

void on_signal(int) { g_stop = true; }

int usage(const char* prog) {
  std::fprintf(stderr, "usage: %s --socket PATH [--log LEVEL] [--persist]\n", prog);
  return 2;
}

int run(int argc, char** argv) {
  std::string path;
  bool persist = false;
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    if (a == "--socket" && i + 1 < argc) path = argv[++i];
    else if (a == "--log" && i + 1 < argc) log::set_level(argv[++i]);
    else if (a == "--persist") persist = true;
    else return usage(argv[0]);
  }
  if (path.empty()) return usage(argv[0]);
  struct sigaction sa{};
  sa.sa_handler = on_signal;
  ::sigaction(SIGTERM, &sa, nullptr);
  ::sigaction(SIGINT, &sa, nullptr);

  Edu edu;
  if (auto r = edu.init(); !r) {
    std::fprintf(stderr, "edu: %s\n", r.error().str().c_str());
    return 1;
  }
  VfioUserServer server(edu);
  if (auto r = server.listen(path); !r) {
    std::fprintf(stderr, "edu: %s\n", r.error().str().c_str());
    return 1;
  }
  do {
    while (!g_stop && !server.connected()) {
      auto a = server.accept_client(200);
      if (!a && a.error().code != ETIMEDOUT) {
        std::fprintf(stderr, "edu: %s\n", a.error().str().c_str());
        return 1;
      }
    }
    while (!g_stop && server.connected()) {
      auto r = server.handle_message(200);
      if (!r) {
        std::fprintf(stderr, "edu: %s\n", r.error().str().c_str());
        return 1;
      }
    }
  } while (persist && !g_stop);
  const ServerStats& s = server.stats();
  std::fprintf(stderr,
               "edu: messages %llu, malformed %llu, error replies %llu, dma faults %llu "
               "(bus errors %llu), bad dma %llu, irqs %llu (dropped %llu), resets %llu\n",
               static_cast<unsigned long long>(s.messages),
               static_cast<unsigned long long>(s.bad_messages),
               static_cast<unsigned long long>(s.error_replies),
               static_cast<unsigned long long>(s.dma_faults),
               static_cast<unsigned long long>(s.dma_bus_errors),
               static_cast<unsigned long long>(edu.bad_dma()),
               static_cast<unsigned long long>(s.irqs_triggered),
               static_cast<unsigned long long>(s.irqs_dropped),
               static_cast<unsigned long long>(edu.resets()));
  return 0;
}

}  // namespace
}  // namespace openib::test_devices

int main(int argc, char** argv) { return openib::test_devices::run(argc, argv); }
