#include "vfio/device.hpp"

#include <sys/mman.h>

#include <bit>
#include <cstring>
#include <utility>

namespace openib::vfio {

RegionMapping::RegionMapping(RegionMapping&& o) noexcept
    : addr_(std::exchange(o.addr_, nullptr)), len_(std::exchange(o.len_, 0)) {}

RegionMapping& RegionMapping::operator=(RegionMapping&& o) noexcept {
  if (this != &o) {
    if (addr_) ::munmap(addr_, len_);
    addr_ = std::exchange(o.addr_, nullptr);
    len_ = std::exchange(o.len_, 0);
  }
  return *this;
}

RegionMapping::~RegionMapping() {
  if (addr_) ::munmap(addr_, len_);
}

// PCI registers are little-endian; x86 and the hosts we build for are too.
static_assert(std::endian::native == std::endian::little);

template <typename T>
static Result<T> read_le(Device& d, uint32_t index, uint64_t offset) {
  T v{};
  OPENIB_TRY(d.region_read(index, offset,
                           std::as_writable_bytes(std::span<T, 1>(&v, 1))));
  return v;
}

template <typename T>
static Result<void> write_le(Device& d, uint32_t index, uint64_t offset, T v) {
  return d.region_write(index, offset, std::as_bytes(std::span<const T, 1>(&v, 1)));
}

Result<uint32_t> Device::read32(uint32_t index, uint64_t offset) {
  return read_le<uint32_t>(*this, index, offset);
}
Result<uint64_t> Device::read64(uint32_t index, uint64_t offset) {
  return read_le<uint64_t>(*this, index, offset);
}
Result<void> Device::write32(uint32_t index, uint64_t offset, uint32_t value) {
  return write_le(*this, index, offset, value);
}
Result<void> Device::write32_posted(uint32_t index, uint64_t offset, uint32_t value) {
  return region_write_posted(index, offset, std::as_bytes(std::span<const uint32_t, 1>(&value, 1)));
}
Result<void> Device::write64_posted(uint32_t index, uint64_t offset, uint64_t value) {
  return region_write_posted(index, offset, std::as_bytes(std::span<const uint64_t, 1>(&value, 1)));
}
Result<void> Device::write64(uint32_t index, uint64_t offset, uint64_t value) {
  return write_le(*this, index, offset, value);
}
Result<uint16_t> Device::config_read16(uint64_t offset) {
  return read_le<uint16_t>(*this, VFIO_PCI_CONFIG_REGION_INDEX, offset);
}
Result<void> Device::config_write16(uint64_t offset, uint16_t value) {
  return write_le(*this, VFIO_PCI_CONFIG_REGION_INDEX, offset, value);
}

Result<std::unique_ptr<Device>> open_device(std::string_view spec) {
  constexpr std::string_view kVfio = "vfio:", kUser = "vfio-user:";
  if (spec.starts_with(kUser)) return open_vfio_user(spec.substr(kUser.size()));
  if (spec.starts_with(kVfio)) return open_kernel_vfio(spec.substr(kVfio.size()));
  return err(EINVAL, "device '{}': expected vfio:<pci address> or vfio-user:<socket>", spec);
}

}  // namespace openib::vfio
