#include "ibd/device_slot.hpp"

namespace openib::ibd {

// Each call goes to the transport, or fails with ENODEV when there is none.
#define OPENIB_SLOT_CALL(call)    \
  if (!inner_) return gone();     \
  return inner_->call

Result<vfio::DeviceInfo> DeviceSlot::device_info() { OPENIB_SLOT_CALL(device_info()); }
Result<vfio::RegionInfo> DeviceSlot::region_info(uint32_t index) { OPENIB_SLOT_CALL(region_info(index)); }
Result<void> DeviceSlot::region_read(uint32_t index, uint64_t offset, std::span<std::byte> out) {
  OPENIB_SLOT_CALL(region_read(index, offset, out));
}
Result<void> DeviceSlot::region_write(uint32_t index, uint64_t offset, std::span<const std::byte> in) {
  OPENIB_SLOT_CALL(region_write(index, offset, in));
}
Result<vfio::RegionMapping> DeviceSlot::region_mmap(uint32_t index, uint64_t offset, uint64_t size) {
  OPENIB_SLOT_CALL(region_mmap(index, offset, size));
}
Result<void> DeviceSlot::region_write_posted(uint32_t index, uint64_t offset,
                                             std::span<const std::byte> in) {
  OPENIB_SLOT_CALL(region_write_posted(index, offset, in));
}
Result<vfio::RegionFd> DeviceSlot::region_mmap_fd(uint32_t index) { OPENIB_SLOT_CALL(region_mmap_fd(index)); }
Result<std::vector<vfio::IovaRange>> DeviceSlot::iova_ranges() { OPENIB_SLOT_CALL(iova_ranges()); }
Result<void> DeviceSlot::dma_map(const vfio::DmaMap& map) { OPENIB_SLOT_CALL(dma_map(map)); }
Result<void> DeviceSlot::dma_unmap(uint64_t iova, uint64_t size) { OPENIB_SLOT_CALL(dma_unmap(iova, size)); }
Result<vfio::IrqInfo> DeviceSlot::irq_info(uint32_t index) { OPENIB_SLOT_CALL(irq_info(index)); }
Result<void> DeviceSlot::set_irq_eventfds(uint32_t index, uint32_t start, std::span<const int> fds) {
  OPENIB_SLOT_CALL(set_irq_eventfds(index, start, fds));
}
Result<void> DeviceSlot::disable_irqs(uint32_t index) { OPENIB_SLOT_CALL(disable_irqs(index)); }
Result<void> DeviceSlot::reset() { OPENIB_SLOT_CALL(reset()); }

#undef OPENIB_SLOT_CALL

}  // namespace openib::ibd
