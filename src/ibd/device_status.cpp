// The device status page (docs/client-protocol.md §6.2).
#include "ibd/device_status.hpp"

#include <atomic>

#include "clientproto/messages.hpp"

namespace openib::ibd {

namespace {
std::atomic_ref<uint32_t> state_word(std::byte* map) {
  return std::atomic_ref<uint32_t>(*reinterpret_cast<uint32_t*>(map + proto::kStatusStateOffset));
}
}  // namespace

Result<std::unique_ptr<DeviceStatusPage>> DeviceStatusPage::create(uint64_t generation) {
  OPENIB_TRY_ASSIGN(auto mem, SealedMemfd::create("ibd-device-status", proto::kStatusPageSize));
  std::unique_ptr<DeviceStatusPage> page(new DeviceStatusPage(std::move(mem)));
  *reinterpret_cast<uint64_t*>(page->map_ + proto::kStatusGenerationOffset) = generation;
  state_word(page->map_).store(proto::kDeviceRunning, std::memory_order_release);
  return page;
}

void DeviceStatusPage::set_lost() { state_word(map_).store(proto::kDeviceLost, std::memory_order_release); }

bool DeviceStatusPage::lost() const {
  return state_word(map_).load(std::memory_order_acquire) == proto::kDeviceLost;
}

}  // namespace openib::ibd
