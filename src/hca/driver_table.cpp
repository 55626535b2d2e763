#include "hca/driver_table.hpp"

#include "common/log.hpp"
#include "hca/hca.hpp"
#include "hca/prm.hpp"

namespace openib::hca {

namespace {

std::vector<Driver>& table() {
  static std::vector<Driver> t{
      Driver{"simhca", prm::kVendorId, prm::kDeviceId,
             [](vfio::Device& d, boost::asio::io_context& io) -> Result<std::unique_ptr<Device>> {
               OPENIB_TRY_ASSIGN(auto h, Hca::open(d, io));
               return std::unique_ptr<Device>(std::move(h));
             }},
  };
  return t;
}

}  // namespace

const std::vector<Driver>& drivers() { return table(); }

void add_driver(Driver d) { table().insert(table().begin(), std::move(d)); }

Result<std::unique_ptr<Device>> open_device(vfio::Device& transport, boost::asio::io_context& io) {
  OPENIB_TRY_ASSIGN(uint16_t vendor, transport.config_read16(0x00));  // PCI config space header
  OPENIB_TRY_ASSIGN(uint16_t device, transport.config_read16(0x02));
  for (const Driver& d : table()) {
    if (d.vendor_id != vendor || d.device_id != device) continue;
    log::get("hca")->debug("{}: PCI {:04x}:{:04x}, driver {}", transport.name(), vendor, device, d.name);
    return d.open(transport, io);
  }
  return err(ENODEV, "{}: PCI {:04x}:{:04x}: no driver for it (drivers: {})", transport.name(), vendor, device,
             [] {
               std::string names;
               for (const Driver& d : table()) names += (names.empty() ? "" : ", ") + d.name;
               return names;
             }());
}

}  // namespace openib::hca
