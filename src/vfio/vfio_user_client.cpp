// placeholder: the vfio-user client is being written.
#include "vfio/device.hpp"
namespace openib::vfio {
Result<std::unique_ptr<Device>> open_vfio_user(std::string_view path, VfioUserOptions) {
  return err(ENOSYS, "vfio-user transport not built yet ({})", path);
}
}  // namespace openib::vfio
