// A Device that records DMA mappings and can be made to vanish, for tests
// of the layers above device access.
#pragma once

#include <map>
#include <string>

#include <unistd.h>

#include "vfio/device.hpp"

namespace openib::test {

class FakeDevice : public vfio::Device {
 public:
  std::vector<vfio::IovaRange> ranges;          // what iova_ranges() reports
  std::map<uint64_t, vfio::DmaMap> maps;        // live mappings by IOVA
  int map_calls = 0, unmap_calls = 0;
  bool gone = false;
  uint32_t irq_count = 4;                       // vectors at every IRQ index
  std::map<uint32_t, int> irq_fds;              // vector -> eventfd routed to it
  bool irqs_disabled = false;

  // What the device does to raise an interrupt: signal the routed eventfd.
  bool fire(uint32_t vector) {
    auto it = irq_fds.find(vector);
    if (it == irq_fds.end() || it->second < 0) return false;
    uint64_t one = 1;
    return ::write(it->second, &one, sizeof one) == sizeof one;
  }

  const std::string& name() const override { return name_; }
  bool alive() const override { return !gone; }
  Result<vfio::DeviceInfo> device_info() override { return vfio::DeviceInfo{}; }
  Result<vfio::RegionInfo> region_info(uint32_t) override { return nodev(); }
  Result<void> region_read(uint32_t, uint64_t, std::span<std::byte>) override { return nodev(); }
  Result<void> region_write(uint32_t, uint64_t, std::span<const std::byte>) override { return nodev(); }
  Result<vfio::RegionMapping> region_mmap(uint32_t, uint64_t, uint64_t) override { return nodev(); }
  Result<std::vector<vfio::IovaRange>> iova_ranges() override { return ranges; }
  Result<void> dma_map(const vfio::DmaMap& m) override {
    map_calls++;
    if (gone) return nodev();
    for (auto& [iova, e] : maps)
      if (m.iova < iova + e.size && iova < m.iova + m.size)
        return err(EEXIST, "overlapping DMA map at {:#x}", m.iova);
    maps[m.iova] = m;
    return {};
  }
  Result<void> dma_unmap(uint64_t iova, uint64_t size) override {
    unmap_calls++;
    if (gone) return nodev();
    auto it = maps.find(iova);
    if (it == maps.end() || it->second.size != size) return err(EINVAL, "no mapping {:#x}", iova);
    maps.erase(it);
    return {};
  }
  Result<vfio::IrqInfo> irq_info(uint32_t index) override {
    if (gone) return nodev();
    return vfio::IrqInfo{index, VFIO_IRQ_INFO_EVENTFD, irq_count};
  }
  Result<void> set_irq_eventfds(uint32_t, uint32_t start, std::span<const int> fds) override {
    if (gone) return nodev();
    for (size_t i = 0; i < fds.size(); ++i) irq_fds[start + static_cast<uint32_t>(i)] = fds[i];
    irqs_disabled = false;
    return {};
  }
  Result<void> disable_irqs(uint32_t) override {
    if (gone) return nodev();
    irq_fds.clear();
    irqs_disabled = true;
    return {};
  }
  Result<void> reset() override { return nodev(); }

 private:
  static Error nodev() { return err(ENODEV, "fake device"); }
  std::string name_ = "fake";
};

}  // namespace openib::test
