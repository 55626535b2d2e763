// The device ibd drives, as one vfio::Device object that outlives the
// transports behind it (docs/operations.md §5 "Device recovery"). The HCA
// driver, its DMA pool and every mapping hold a reference to a Device; when
// the device goes and comes back (a restarted embedded simhca, a
// reconnected vfio-user socket), ibd swaps the transport inside this slot
// instead of rebuilding everything that refers to it. Empty, or holding a
// dead transport, it answers ENODEV to every call (device.hpp's contract).
#pragma once

#include <memory>
#include <string>

#include "vfio/device.hpp"

namespace openib::ibd {

class DeviceSlot final : public vfio::Device {
 public:
  explicit DeviceSlot(std::string name) : name_(std::move(name)) {}

  // Installs a new transport (the previous one is closed first).
  void replace(std::unique_ptr<vfio::Device> d) {
    inner_.reset();
    inner_ = std::move(d);
  }
  // Closes the transport: every later call fails with ENODEV.
  void clear() { inner_.reset(); }
  bool has_transport() const { return inner_ != nullptr; }

  const std::string& name() const override { return name_; }
  bool alive() const override { return inner_ && inner_->alive(); }
  Result<vfio::DeviceInfo> device_info() override;
  Result<vfio::RegionInfo> region_info(uint32_t index) override;
  Result<void> region_read(uint32_t index, uint64_t offset, std::span<std::byte> out) override;
  Result<void> region_write(uint32_t index, uint64_t offset, std::span<const std::byte> in) override;
  Result<void> region_write_posted(uint32_t index, uint64_t offset, std::span<const std::byte> in) override;
  Result<vfio::RegionMapping> region_mmap(uint32_t index, uint64_t offset, uint64_t size) override;
  Result<vfio::RegionFd> region_mmap_fd(uint32_t index) override;
  Result<std::vector<vfio::IovaRange>> iova_ranges() override;
  Result<void> dma_map(const vfio::DmaMap& map) override;
  Result<void> dma_unmap(uint64_t iova, uint64_t size) override;
  Result<vfio::IrqInfo> irq_info(uint32_t index) override;
  Result<void> set_irq_eventfds(uint32_t index, uint32_t start, std::span<const int> fds) override;
  Result<void> disable_irqs(uint32_t index) override;
  Result<void> reset() override;

 private:
  Error gone() const { return err(ENODEV, "{}: device is gone", name_); }
  std::string name_;
  std::unique_ptr<vfio::Device> inner_;
};

}  // namespace openib::ibd
