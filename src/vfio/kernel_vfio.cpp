// Kernel VFIO transport: the legacy container/group API with the type1v2
// IOMMU driver, as in Documentation/driver-api/vfio.rst ("VFIO Usage
// Example"): container -> group -> device fd. One container per device, so
// nothing here is global. iommufd/cdev (vfio.rst "IOMMUFD and vfio_iommu_type1",
// "VFIO device cdev") is not supported: Debian 12's kernels lack IOMMUFD.
//
// Faults: an ioctl or pread/pwrite that fails with ENODEV or EIO means the
// device went away (hot-unplug, a dead link); the transport logs one line,
// marks itself dead, and every later call fails with ENODEV.
#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <map>
#include <optional>
#include <string>

#include "common/fd.hpp"
#include "common/log.hpp"
#include "vfio/device.hpp"

namespace openib::vfio {

namespace {

constexpr const char* kSysPci = "/sys/bus/pci/devices/";

// "0000:00:03.0": only what a PCI address may contain, so it is safe to
// paste into a sysfs path.
bool valid_pci_address(std::string_view a) {
  return !a.empty() && a.size() <= 32 &&
         std::all_of(a.begin(), a.end(), [](char c) {
           return std::isxdigit(static_cast<unsigned char>(c)) || c == ':' || c == '.';
         });
}

Result<void> write_sysfs(const std::string& path, std::string_view value) {
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (!fd) return sys_err("open {}", path);
  if (::write(fd.get(), value.data(), value.size()) != static_cast<ssize_t>(value.size()))
    return sys_err("write '{}' to {}", value, path);
  return ok();
}

// Last path component of a symlink ("../../../kernel/iommu_groups/7" -> "7"),
// or nullopt if there is no such link.
std::optional<std::string> link_basename(const std::string& path) {
  char buf[4096];
  ssize_t n = ::readlink(path.c_str(), buf, sizeof(buf) - 1);
  if (n <= 0) return std::nullopt;
  std::string target(buf, static_cast<size_t>(n));
  return target.substr(target.rfind('/') + 1);
}

// [offset, offset+size) lies inside the area (overflow-safe).
bool contains(const SparseArea& a, uint64_t offset, uint64_t size) {
  return offset >= a.offset && offset - a.offset <= a.size &&
         size <= a.size - (offset - a.offset);
}

// Walks a VFIO capability chain (struct vfio_info_cap_header, vfio.h) in
// `buf` from `offset` and returns the offset of capability `id`. Offsets
// must strictly increase, so a corrupt chain cannot loop.
std::optional<size_t> find_cap(std::span<const std::byte> buf, uint32_t offset, uint16_t id) {
  uint32_t prev = 0;
  while (offset != 0 && offset > prev &&
         offset + sizeof(vfio_info_cap_header) <= buf.size()) {
    vfio_info_cap_header h;
    std::memcpy(&h, buf.data() + offset, sizeof(h));
    if (h.id == id) return offset;
    prev = offset;
    offset = h.next;
  }
  return std::nullopt;
}

// An ioctl whose struct may grow with a capability chain: query with the
// fixed part, and again with the argsz the kernel asks for (vfio.h,
// "argsz" semantics). Returns the whole buffer.
template <typename T>
int query_with_caps(int fd, unsigned long req, T head, std::vector<std::byte>& buf) {
  head.argsz = sizeof(T);
  for (int attempt = 0; attempt < 2; ++attempt) {
    buf.assign(std::max<size_t>(head.argsz, sizeof(T)), std::byte{0});
    std::memcpy(buf.data(), &head, sizeof(T));
    if (::ioctl(fd, req, buf.data()) < 0) return -1;
    T got;
    std::memcpy(&got, buf.data(), sizeof(T));
    if (got.argsz <= buf.size()) return 0;
    head.argsz = got.argsz;  // the chain did not fit: ask again with room
  }
  return 0;  // still growing: use what we have (caps then absent)
}

class KernelVfio final : public Device {
 public:
  explicit KernelVfio(std::string pci) : pci_(std::move(pci)), name_("vfio:" + pci_) {}
  Result<void> open();

  const std::string& name() const override { return name_; }
  bool alive() const override { return !dead_; }

  Result<DeviceInfo> device_info() override;
  Result<RegionInfo> region_info(uint32_t index) override;
  Result<void> region_read(uint32_t index, uint64_t offset, std::span<std::byte> out) override;
  Result<void> region_write(uint32_t index, uint64_t offset,
                            std::span<const std::byte> in) override;
  Result<RegionMapping> region_mmap(uint32_t index, uint64_t offset, uint64_t size) override;
  Result<std::vector<IovaRange>> iova_ranges() override;
  Result<void> dma_map(const DmaMap& map) override;
  Result<void> dma_unmap(uint64_t iova, uint64_t size) override;
  Result<IrqInfo> irq_info(uint32_t index) override;
  Result<void> set_irq_eventfds(uint32_t index, uint32_t start, std::span<const int> fds) override;
  Result<void> disable_irqs(uint32_t index) override;
  Result<void> reset() override;

 private:
  Error gone() const { return err(ENODEV, "{}: device is gone", name_); }
  Error fail(std::string_view what);
  Result<RegionInfo> cached_region(uint32_t index);
  Result<void> check_span(const RegionInfo& r, uint64_t offset, uint64_t len) const;
  Result<void> set_irqs(uint32_t index, uint32_t flags, uint32_t start,
                        std::span<const int> fds);

  std::string pci_, name_;
  // Declared in teardown order reversed: the device fd closes first, then
  // the group (which leaves the container), then the container.
  UniqueFd container_, group_, device_;
  std::map<uint32_t, RegionInfo> regions_;
  bool dead_ = false;
};

// A failed syscall: ENODEV/EIO mean the device vanished (logged once).
Error KernelVfio::fail(std::string_view what) {
  int e = errno;
  if ((e == ENODEV || e == EIO) && !dead_) {
    dead_ = true;
    log::get("vfio")->error("{}: device vanished during {} ({}); fencing it", name_, what,
                            std::strerror(e));
  }
  return Error{dead_ ? ENODEV : e, fmt::format("{}: {}", name_, what)};
}

// vfio.rst "VFIO Usage Example": container, API version, extension, group,
// viability, SET_CONTAINER, SET_IOMMU, GET_DEVICE_FD.
Result<void> KernelVfio::open() {
  container_ = UniqueFd(::open("/dev/vfio/vfio", O_RDWR | O_CLOEXEC));
  if (!container_) return sys_err("open /dev/vfio/vfio (is the vfio module loaded?)");
  if (::ioctl(container_.get(), VFIO_GET_API_VERSION) != VFIO_API_VERSION)
    return err(EPROTO, "/dev/vfio/vfio: unknown VFIO API version");
  if (::ioctl(container_.get(), VFIO_CHECK_EXTENSION, VFIO_TYPE1v2_IOMMU) <= 0)
    return err(ENOTSUP, "VFIO_TYPE1v2_IOMMU not supported (vfio_iommu_type1 loaded?)");

  auto group = link_basename(kSysPci + pci_ + "/iommu_group");
  if (!group) return err(ENODEV, "{}: no IOMMU group (IOMMU off, or no such device?)", pci_);
  std::string gpath = "/dev/vfio/" + *group;
  group_ = UniqueFd(::open(gpath.c_str(), O_RDWR | O_CLOEXEC));
  if (!group_) return sys_err("open {} (is {} bound to vfio-pci?)", gpath, pci_);

  vfio_group_status status{.argsz = sizeof(status), .flags = 0};
  if (::ioctl(group_.get(), VFIO_GROUP_GET_STATUS, &status) < 0)
    return sys_err("{}: VFIO_GROUP_GET_STATUS", gpath);
  if (!(status.flags & VFIO_GROUP_FLAGS_VIABLE))
    return err(EBUSY, "{} not viable: bind every device of IOMMU group {} to vfio-pci",
               gpath, *group);
  int cfd = container_.get();
  if (::ioctl(group_.get(), VFIO_GROUP_SET_CONTAINER, &cfd) < 0)
    return sys_err("{}: VFIO_GROUP_SET_CONTAINER", gpath);
  if (::ioctl(container_.get(), VFIO_SET_IOMMU, VFIO_TYPE1v2_IOMMU) < 0)
    return sys_err("VFIO_SET_IOMMU type1v2");
  device_ = UniqueFd(::ioctl(group_.get(), VFIO_GROUP_GET_DEVICE_FD, pci_.c_str()));
  if (!device_) return sys_err("{}: VFIO_GROUP_GET_DEVICE_FD", name_);
  log::get("vfio")->debug("{}: opened (group {})", name_, *group);
  return ok();
}

Result<DeviceInfo> KernelVfio::device_info() {
  if (dead_) return gone();
  vfio_device_info info{};
  info.argsz = sizeof(info);
  if (::ioctl(device_.get(), VFIO_DEVICE_GET_INFO, &info) < 0)
    return fail("VFIO_DEVICE_GET_INFO");
  return DeviceInfo{info.flags, info.num_regions, info.num_irqs};
}

// VFIO_DEVICE_GET_REGION_INFO, with the sparse-mmap capability
// (VFIO_REGION_INFO_CAP_SPARSE_MMAP) read from the chain when present.
Result<RegionInfo> KernelVfio::region_info(uint32_t index) {
  if (dead_) return gone();
  vfio_region_info head{};
  head.index = index;
  std::vector<std::byte> buf;
  if (query_with_caps(device_.get(), VFIO_DEVICE_GET_REGION_INFO, head, buf) < 0)
    return fail(fmt::format("VFIO_DEVICE_GET_REGION_INFO {}", index));
  vfio_region_info info;
  std::memcpy(&info, buf.data(), sizeof(info));
  RegionInfo r{.index = index, .flags = info.flags, .size = info.size, .offset = info.offset};
  if (info.flags & VFIO_REGION_INFO_FLAG_CAPS) {
    if (auto at = find_cap(buf, info.cap_offset, VFIO_REGION_INFO_CAP_SPARSE_MMAP)) {
      vfio_region_info_cap_sparse_mmap cap;
      std::memcpy(&cap, buf.data() + *at, sizeof(cap));
      size_t area_at = *at + sizeof(cap);
      for (uint32_t i = 0; i < cap.nr_areas; ++i) {
        vfio_region_sparse_mmap_area a;
        if (area_at + sizeof(a) > buf.size())
          return err(EPROTO, "{}: region {} sparse-mmap cap truncated", name_, index);
        std::memcpy(&a, buf.data() + area_at, sizeof(a));
        r.sparse.push_back({a.offset, a.size});
        area_at += sizeof(a);
      }
    }
  }
  regions_[index] = r;
  return r;
}

Result<RegionInfo> KernelVfio::cached_region(uint32_t index) {
  if (auto it = regions_.find(index); it != regions_.end()) return it->second;
  return region_info(index);
}

Result<void> KernelVfio::check_span(const RegionInfo& r, uint64_t offset, uint64_t len) const {
  if (offset > r.size || len > r.size - offset)
    return err(EINVAL, "{}: [{:#x}, +{:#x}) outside region {} (size {:#x})", name_, offset,
               len, r.index, r.size);
  return ok();
}

// Region I/O is pread/pwrite on the device fd at the region's offset
// (vfio.rst, "VFIO_DEVICE_GET_REGION_INFO"). Each call makes progress or fails.
Result<void> KernelVfio::region_read(uint32_t index, uint64_t offset, std::span<std::byte> out) {
  if (dead_) return gone();
  OPENIB_TRY_ASSIGN(RegionInfo r, cached_region(index));
  if (!r.readable()) return err(EACCES, "{}: region {} not readable", name_, index);
  OPENIB_TRY(check_span(r, offset, out.size()));
  for (size_t done = 0; done < out.size();) {
    ssize_t n = ::pread(device_.get(), out.data() + done, out.size() - done,
                        static_cast<off_t>(r.offset + offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return fail(fmt::format("read region {} at {:#x}", index, offset + done));
    if (n == 0) return err(EIO, "{}: short read of region {}", name_, index);
    done += static_cast<size_t>(n);
  }
  return ok();
}

Result<void> KernelVfio::region_write(uint32_t index, uint64_t offset,
                                      std::span<const std::byte> in) {
  if (dead_) return gone();
  OPENIB_TRY_ASSIGN(RegionInfo r, cached_region(index));
  if (!r.writable()) return err(EACCES, "{}: region {} not writable", name_, index);
  OPENIB_TRY(check_span(r, offset, in.size()));
  for (size_t done = 0; done < in.size();) {
    ssize_t n = ::pwrite(device_.get(), in.data() + done, in.size() - done,
                         static_cast<off_t>(r.offset + offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return fail(fmt::format("write region {} at {:#x}", index, offset + done));
    if (n == 0) return err(EIO, "{}: short write of region {}", name_, index);
    done += static_cast<size_t>(n);
  }
  return ok();
}

Result<RegionMapping> KernelVfio::region_mmap(uint32_t index, uint64_t offset, uint64_t size) {
  if (dead_) return gone();
  OPENIB_TRY_ASSIGN(RegionInfo r, region_info(index));
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  if (!r.mmappable()) return err(ENOTSUP, "{}: region {} cannot be mmap-ed", name_, index);
  if (size == 0 || offset % page || size % page)
    return err(EINVAL, "{}: mmap of region {} needs page-aligned offset/size", name_, index);
  OPENIB_TRY(check_span(r, offset, size));
  bool inside = r.sparse.empty() ||
                std::any_of(r.sparse.begin(), r.sparse.end(),
                            [&](const SparseArea& a) { return contains(a, offset, size); });
  if (!inside)
    return err(EINVAL, "{}: [{:#x}, +{:#x}) of region {} is not in a sparse mmap area", name_,
               offset, size, index);
  int prot = (r.readable() ? PROT_READ : 0) | (r.writable() ? PROT_WRITE : 0);
  void* p = ::mmap(nullptr, size, prot, MAP_SHARED, device_.get(),
                   static_cast<off_t>(r.offset + offset));
  if (p == MAP_FAILED) return fail(fmt::format("mmap region {}", index));
  return RegionMapping(p, size);
}

// VFIO_IOMMU_GET_INFO's VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE (vfio.h): the
// apertures minus reserved regions (MSI window, RMRRs) of the IOMMU.
Result<std::vector<IovaRange>> KernelVfio::iova_ranges() {
  if (dead_) return gone();
  std::vector<std::byte> buf;
  if (query_with_caps(container_.get(), VFIO_IOMMU_GET_INFO, vfio_iommu_type1_info{}, buf) < 0)
    return fail("VFIO_IOMMU_GET_INFO");
  vfio_iommu_type1_info info;
  std::memcpy(&info, buf.data(), sizeof(info));
  std::vector<IovaRange> out;
  if (!(info.flags & VFIO_IOMMU_INFO_CAPS)) return out;
  auto at = find_cap(buf, info.cap_offset, VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE);
  if (!at) return out;
  vfio_iommu_type1_info_cap_iova_range cap;
  std::memcpy(&cap, buf.data() + *at, sizeof(cap));
  size_t rat = *at + sizeof(cap);
  for (uint32_t i = 0; i < cap.nr_iovas; ++i, rat += sizeof(vfio_iova_range)) {
    if (rat + sizeof(vfio_iova_range) > buf.size())
      return err(EPROTO, "{}: IOVA range capability truncated", name_);
    vfio_iova_range vr;
    std::memcpy(&vr, buf.data() + rat, sizeof(vr));
    out.push_back({vr.start, vr.end});
  }
  return out;
}

// VFIO_IOMMU_MAP_DMA pins `vaddr` and maps it at `iova` (vfio.rst example).
Result<void> KernelVfio::dma_map(const DmaMap& m) {
  if (dead_) return gone();
  if (!m.vaddr) return err(EINVAL, "{}: kernel VFIO maps by vaddr, none given", name_);
  vfio_iommu_type1_dma_map map{};
  map.argsz = sizeof(map);
  map.flags = (m.readable ? VFIO_DMA_MAP_FLAG_READ : 0u) |
              (m.writable ? VFIO_DMA_MAP_FLAG_WRITE : 0u);
  map.vaddr = reinterpret_cast<uint64_t>(m.vaddr);
  map.iova = m.iova;
  map.size = m.size;
  if (::ioctl(container_.get(), VFIO_IOMMU_MAP_DMA, &map) < 0)
    return fail(fmt::format("VFIO_IOMMU_MAP_DMA iova {:#x} size {:#x}", m.iova, m.size));
  return ok();
}

Result<void> KernelVfio::dma_unmap(uint64_t iova, uint64_t size) {
  if (dead_) return gone();
  vfio_iommu_type1_dma_unmap unmap{};
  unmap.argsz = sizeof(unmap);
  unmap.iova = iova;
  unmap.size = size;
  if (::ioctl(container_.get(), VFIO_IOMMU_UNMAP_DMA, &unmap) < 0)
    return fail(fmt::format("VFIO_IOMMU_UNMAP_DMA iova {:#x} size {:#x}", iova, size));
  // The kernel reports how much it unmapped; nothing at all means no mapping.
  if (unmap.size != size)
    return err(ENOENT, "{}: unmapped {:#x} of {:#x} bytes at iova {:#x}", name_, unmap.size,
               size, iova);
  return ok();
}

Result<IrqInfo> KernelVfio::irq_info(uint32_t index) {
  if (dead_) return gone();
  vfio_irq_info info{};
  info.argsz = sizeof(info);
  info.index = index;
  if (::ioctl(device_.get(), VFIO_DEVICE_GET_IRQ_INFO, &info) < 0)
    return fail(fmt::format("VFIO_DEVICE_GET_IRQ_INFO {}", index));
  return IrqInfo{index, info.flags, info.count};
}

// VFIO_DEVICE_SET_IRQS: a struct vfio_irq_set followed by `count` int32
// eventfds (vfio.h). Built with memcpy into a byte buffer.
Result<void> KernelVfio::set_irqs(uint32_t index, uint32_t flags, uint32_t start,
                                  std::span<const int> fds) {
  if (dead_) return gone();
  vfio_irq_set set{};
  set.argsz = static_cast<uint32_t>(sizeof(set) + fds.size_bytes());
  set.flags = flags;
  set.index = index;
  set.start = start;
  set.count = static_cast<uint32_t>(fds.size());
  std::vector<std::byte> buf(set.argsz);
  std::memcpy(buf.data(), &set, sizeof(set));
  if (!fds.empty()) std::memcpy(buf.data() + sizeof(set), fds.data(), fds.size_bytes());
  if (::ioctl(device_.get(), VFIO_DEVICE_SET_IRQS, buf.data()) < 0)
    return fail(fmt::format("VFIO_DEVICE_SET_IRQS index {} start {} count {}", index, start,
                            fds.size()));
  return ok();
}

Result<void> KernelVfio::set_irq_eventfds(uint32_t index, uint32_t start,
                                          std::span<const int> fds) {
  if (fds.empty()) return err(EINVAL, "{}: no eventfds for IRQ index {}", name_, index);
  return set_irqs(index, VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER, start, fds);
}

Result<void> KernelVfio::disable_irqs(uint32_t index) {
  return set_irqs(index, VFIO_IRQ_SET_DATA_NONE | VFIO_IRQ_SET_ACTION_TRIGGER, 0, {});
}

Result<void> KernelVfio::reset() {
  if (dead_) return gone();
  if (::ioctl(device_.get(), VFIO_DEVICE_RESET) < 0) return fail("VFIO_DEVICE_RESET");
  return ok();
}

}  // namespace

Result<std::unique_ptr<Device>> open_kernel_vfio(std::string_view pci_address) {
  if (!valid_pci_address(pci_address))
    return err(EINVAL, "'{}' is not a PCI address like 0000:00:03.0", pci_address);
  auto dev = std::make_unique<KernelVfio>(std::string(pci_address));
  OPENIB_TRY(dev->open());
  return std::unique_ptr<Device>(std::move(dev));
}

// driver_override + drivers_probe (Documentation/ABI/testing/sysfs-bus-pci,
// "driver_override"): the device binds to vfio-pci and nothing else.
Result<void> bind_vfio_pci(std::string_view pci_address) {
  if (!valid_pci_address(pci_address))
    return err(EINVAL, "'{}' is not a PCI address like 0000:00:03.0", pci_address);
  const std::string addr(pci_address), dev = kSysPci + addr;
  if (::access(dev.c_str(), F_OK) != 0) return sys_err("no PCI device {}", dev);
  auto driver = link_basename(dev + "/driver");
  if (driver == "vfio-pci") return ok();
  OPENIB_TRY(write_sysfs(dev + "/driver_override", "vfio-pci"));
  if (driver) OPENIB_TRY(write_sysfs(dev + "/driver/unbind", addr));
  OPENIB_TRY(write_sysfs("/sys/bus/pci/drivers_probe", addr));
  driver = link_basename(dev + "/driver");
  if (driver != "vfio-pci")
    return err(ENODEV, "{} did not bind to vfio-pci (bound to '{}'; vfio-pci loaded?)", addr,
               driver.value_or("nothing"));
  log::get("vfio")->info("{}: bound to vfio-pci", addr);
  return ok();
}

}  // namespace openib::vfio
