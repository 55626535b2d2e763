// Device access: the one boundary through which the daemon touches an HCA.
//
// Two transports implement it, each in its own file:
//   kernel_vfio.cpp      Linux VFIO, container/group, type1v2 IOMMU
//   vfio_user_client.cpp vfio-user protocol 0.9.1 over a UNIX socket
// The vocabulary (regions, sparse mmap areas, IRQ indexes, DMA maps) is the
// one of <linux/vfio.h>, which both the kernel and vfio-user share; region
// and IRQ indexes are the VFIO_PCI_* constants. See docs/device-access.md.
//
// Every call returns a Result. Once a transport sees its device vanish (the
// vfio-user server closed the socket, the kernel returned ENODEV), it logs
// one line, marks itself dead, and every later call fails with ENODEV.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <linux/vfio.h>

#include "common/fd.hpp"
#include "common/result.hpp"

namespace openib::vfio {

struct DeviceInfo {
  uint32_t flags = 0;        // VFIO_DEVICE_FLAGS_*
  uint32_t num_regions = 0;
  uint32_t num_irqs = 0;
};

// One mmap-able window of a region (VFIO_REGION_INFO_CAP_SPARSE_MMAP).
struct SparseArea {
  uint64_t offset = 0;  // from the start of the region
  uint64_t size = 0;
};

struct RegionInfo {
  uint32_t index = 0;
  uint32_t flags = 0;     // VFIO_REGION_INFO_FLAG_{READ,WRITE,MMAP}
  uint64_t size = 0;
  uint64_t offset = 0;    // transport-specific offset (kernel: into the device fd)
  // Areas that may be mmap-ed. Empty with FLAG_MMAP set means the whole region.
  std::vector<SparseArea> sparse;
  // VFIO_REGION_INFO_CAP_TYPE of a device-specific region (index >=
  // VFIO_PCI_NUM_REGIONS); 0, 0 when the region carries none.
  uint32_t type = 0, subtype = 0;

  bool readable() const { return flags & VFIO_REGION_INFO_FLAG_READ; }
  bool writable() const { return flags & VFIO_REGION_INFO_FLAG_WRITE; }
  bool mmappable() const { return flags & VFIO_REGION_INFO_FLAG_MMAP; }
};

struct IrqInfo {
  uint32_t index = 0;
  uint32_t flags = 0;  // VFIO_IRQ_INFO_*
  uint32_t count = 0;
};

// An inclusive IOVA range the IOMMU accepts (VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE).
struct IovaRange {
  uint64_t start = 0;
  uint64_t last = 0;  // inclusive
};

// A DMA mapping request. All DMA memory is memfd-backed: the kernel
// transport maps `vaddr` (pinned by the IOMMU), the vfio-user transport hands
// `fd` + `fd_offset` to the server, which mmaps it itself.
struct DmaMap {
  int fd = -1;
  uint64_t fd_offset = 0;
  void* vaddr = nullptr;
  uint64_t iova = 0;
  uint64_t size = 0;
  bool readable = true;   // device may read
  bool writable = true;   // device may write
};

// An mmap of (part of) a region; unmapped on destruction.
class RegionMapping {
 public:
  RegionMapping() = default;
  RegionMapping(void* addr, size_t len) : addr_(addr), len_(len) {}
  RegionMapping(RegionMapping&& o) noexcept;
  RegionMapping& operator=(RegionMapping&& o) noexcept;
  RegionMapping(const RegionMapping&) = delete;
  RegionMapping& operator=(const RegionMapping&) = delete;
  ~RegionMapping();

  void* data() const { return addr_; }
  size_t size() const { return len_; }
  bool valid() const { return addr_ != nullptr; }

 private:
  void* addr_ = nullptr;
  size_t len_ = 0;
};

// An fd through which (part of) a region can be mmap-ed by another
// process: mmap(fd, offset_in_fd + offset_in_region) maps that region offset.
struct RegionFd {
  UniqueFd fd;             // a duplicate; the caller owns it
  uint64_t offset = 0;     // file offset of the region's start in fd
};

class Device {
 public:
  virtual ~Device() = default;

  // "vfio:0000:00:03.0" or "vfio-user:/path/to/socket" (for logs).
  virtual const std::string& name() const = 0;
  // False once the transport has seen the device vanish.
  virtual bool alive() const = 0;

  virtual Result<DeviceInfo> device_info() = 0;
  virtual Result<RegionInfo> region_info(uint32_t index) = 0;
  virtual Result<void> region_read(uint32_t index, uint64_t offset,
                                   std::span<std::byte> out) = 0;
  virtual Result<void> region_write(uint32_t index, uint64_t offset,
                                    std::span<const std::byte> in) = 0;
  // A posted write, as PCIe memory writes are: the caller does not wait for
  // the device to take it, and an error the device would report is lost
  // (a doorbell: what it starts completes or times out on its own). The
  // default waits, as region_write does; vfio-user posts (no_reply flag).
  virtual Result<void> region_write_posted(uint32_t index, uint64_t offset,
                                           std::span<const std::byte> in) {
    return region_write(index, offset, in);
  }
  // mmap [offset, offset+size) of a region; must lie inside one sparse area
  // (or the whole region if it has none). Offset and size page-aligned.
  virtual Result<RegionMapping> region_mmap(uint32_t index, uint64_t offset,
                                            uint64_t size) = 0;
  // The fd that region_mmap maps, for handing to another process (ibd
  // gives a client its UAR page this way, docs/simhca.md §4). Asked of the
  // device afresh on every call (a region's fd may change, as a UAR page's
  // does when the UAR is allocated again) and not kept by the transport.
  // Transports whose fd would expose more than the region (kernel VFIO's
  // device fd) do not offer it: EOPNOTSUPP.
  virtual Result<RegionFd> region_mmap_fd(uint32_t index) {
    return err(EOPNOTSUPP, "{}: region {} has no fd to hand out", name(), index);
  }

  // IOVA ranges the IOMMU reports; empty if it reports none (the DMA
  // layer then uses its documented default).
  virtual Result<std::vector<IovaRange>> iova_ranges() = 0;
  virtual Result<void> dma_map(const DmaMap& map) = 0;
  virtual Result<void> dma_unmap(uint64_t iova, uint64_t size) = 0;

  virtual Result<IrqInfo> irq_info(uint32_t index) = 0;
  // Route vectors [start, start+fds.size()) of an IRQ index to eventfds
  // (VFIO_IRQ_SET_DATA_EVENTFD | ACTION_TRIGGER); an fd of -1 unroutes one.
  virtual Result<void> set_irq_eventfds(uint32_t index, uint32_t start,
                                        std::span<const int> fds) = 0;
  // Disable every vector of an IRQ index (DATA_NONE, count 0).
  virtual Result<void> disable_irqs(uint32_t index) = 0;

  virtual Result<void> reset() = 0;

  // PCI config space is region VFIO_PCI_CONFIG_REGION_INDEX.
  Result<void> config_read(uint64_t offset, std::span<std::byte> out) {
    return region_read(VFIO_PCI_CONFIG_REGION_INDEX, offset, out);
  }
  Result<void> config_write(uint64_t offset, std::span<const std::byte> in) {
    return region_write(VFIO_PCI_CONFIG_REGION_INDEX, offset, in);
  }

  // Little-endian register helpers over region_read/region_write (PCI is
  // little-endian; sizes 1, 2, 4, 8).
  Result<uint32_t> read32(uint32_t index, uint64_t offset);
  Result<uint64_t> read64(uint32_t index, uint64_t offset);
  Result<void> write32(uint32_t index, uint64_t offset, uint32_t value);
  Result<void> write64(uint32_t index, uint64_t offset, uint64_t value);
  Result<void> write32_posted(uint32_t index, uint64_t offset, uint32_t value);
  Result<void> write64_posted(uint32_t index, uint64_t offset, uint64_t value);
  Result<uint16_t> config_read16(uint64_t offset);
  Result<void> config_write16(uint64_t offset, uint16_t value);
};

// Kernel VFIO: binds the device named by its PCI address ("0000:00:03.0").
// The device must already be bound to vfio-pci (see bind_vfio_pci()).
Result<std::unique_ptr<Device>> open_kernel_vfio(std::string_view pci_address);

// Binds a PCI device to vfio-pci through sysfs (driver_override + probe).
Result<void> bind_vfio_pci(std::string_view pci_address);

struct VfioUserOptions {
  int reply_timeout_ms = 5000;  // a server silent this long is treated as gone
};
// vfio-user client: connects to the server's UNIX socket and negotiates.
Result<std::unique_ptr<Device>> open_vfio_user(std::string_view socket_path,
                                               VfioUserOptions opts = {});

// "vfio:<pci address>" or "vfio-user:<socket path>".
Result<std::unique_ptr<Device>> open_device(std::string_view spec);

}  // namespace openib::vfio
