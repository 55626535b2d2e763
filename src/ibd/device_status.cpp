// The device status page (docs/client-protocol.md §6.2; memfd_create(2),
// fcntl(2) "File Sealing", proc(5) /proc/pid/fd).
#include "ibd/device_status.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <string>

#include "clientproto/messages.hpp"

namespace openib::ibd {

namespace {
std::atomic_ref<uint32_t> state_word(std::byte* map) {
  return std::atomic_ref<uint32_t>(*reinterpret_cast<uint32_t*>(map + proto::kStatusStateOffset));
}
}  // namespace

Result<std::unique_ptr<DeviceStatusPage>> DeviceStatusPage::create(uint64_t generation) {
  UniqueFd fd(::memfd_create("ibd-device-status", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!fd) return sys_err("memfd_create for the device status page");
  if (::ftruncate(fd.get(), proto::kStatusPageSize) < 0) return sys_err("ftruncate of the device status page");
  void* p = ::mmap(nullptr, proto::kStatusPageSize, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (p == MAP_FAILED) return sys_err("mmap of the device status page");
  auto* map = static_cast<std::byte*>(p);
  std::unique_ptr<DeviceStatusPage> page(new DeviceStatusPage(std::move(fd), map));
  *reinterpret_cast<uint64_t*>(map + proto::kStatusGenerationOffset) = generation;
  state_word(map).store(proto::kDeviceRunning, std::memory_order_release);
  // After our own writable mapping: F_SEAL_FUTURE_WRITE refuses every later
  // writable shared mapping and write(2), whatever the fd's mode.
  if (::fcntl(page->fd_.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_FUTURE_WRITE | F_SEAL_SEAL) < 0)
    return sys_err("sealing the device status page");
  return page;
}

DeviceStatusPage::~DeviceStatusPage() { ::munmap(map_, proto::kStatusPageSize); }

void DeviceStatusPage::set_lost() { state_word(map_).store(proto::kDeviceLost, std::memory_order_release); }

bool DeviceStatusPage::lost() const {
  return state_word(map_).load(std::memory_order_acquire) == proto::kDeviceLost;
}

Result<UniqueFd> DeviceStatusPage::client_fd() const {
  const std::string path = "/proc/self/fd/" + std::to_string(fd_.get());
  UniqueFd ro(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!ro) return sys_err("re-opening the device status page read-only ({})", path);
  return ro;
}

}  // namespace openib::ibd
