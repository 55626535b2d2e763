// One daemon per device: an exclusive flock(2) on a lock file named after
// the device, held for the daemon's life (docs/operations.md "Locks").
#pragma once

#include <string>

#include "common/fd.hpp"
#include "common/result.hpp"

namespace openib::ibd {

class DeviceLock {
 public:
  // flock(LOCK_EX | LOCK_NB) on <dir>/<name(device)>.lock; EBUSY with the
  // holder's pid in the message if another daemon holds it.
  static Result<DeviceLock> acquire(const std::string& dir, const std::string& device);
  const std::string& path() const { return path_; }

 private:
  UniqueFd fd_;
  std::string path_;
};

// "vfio:0000:00:03.0" -> "vfio-0000:00:03.0"; "vfio-user:/a/b.sock" ->
// "vfio-user-_a_b.sock": a file name that says which device.
std::string lock_name(const std::string& device);

}  // namespace openib::ibd
