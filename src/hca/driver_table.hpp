// The driver table (docs/device-access.md "Device drivers"): which driver
// serves a PCI function, chosen by its vendor and device IDs, as ixy's
// driver table and Linux's pci_device_id tables do. simhca's driver
// (hca.hpp) is built in; a test adds an entry of its own with add_driver().
#pragma once

#include <boost/asio/io_context.hpp>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/result.hpp"
#include "hca/device.hpp"
#include "vfio/device.hpp"

namespace openib::hca {

struct Driver {
  std::string name;
  uint16_t vendor_id = 0, device_id = 0;
  // Brings the device up on the transport (which outlives the Device).
  std::function<Result<std::unique_ptr<Device>>(vfio::Device&, boost::asio::io_context&)> open;
};

// The drivers, the built-in ones first.
const std::vector<Driver>& drivers();
// An entry ahead of the built-in ones (a test's driver; one wrapping a
// built-in one for the same IDs takes precedence).
void add_driver(Driver d);

// The PCI IDs read from the function's config space, the first driver
// whose IDs match brings it up; ENODEV naming the IDs if none does.
Result<std::unique_ptr<Device>> open_device(vfio::Device& transport, boost::asio::io_context& io);

}  // namespace openib::hca
