// placeholder: the kernel VFIO transport is being written.
#include "vfio/device.hpp"
namespace openib::vfio {
Result<std::unique_ptr<Device>> open_kernel_vfio(std::string_view pci) {
  return err(ENOSYS, "kernel VFIO transport not built yet ({})", pci);
}
Result<void> bind_vfio_pci(std::string_view pci) {
  return err(ENOSYS, "bind_vfio_pci not built yet ({})", pci);
}
}  // namespace openib::vfio
