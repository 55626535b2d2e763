// How the stub providers fail (docs/library.md "Verbs ABI"): as rdma-core's
// providers do when the device is not theirs.
#pragma once

#include <cerrno>
#include <cstddef>

namespace openib::abi {

// A call that returns an object: NULL, errno EOPNOTSUPP.
inline std::nullptr_t no_device() {
  errno = EOPNOTSUPP;
  return nullptr;
}

// A call that returns a descriptor or a byte count: -1, errno EOPNOTSUPP.
inline int no_device_minus_one() {
  errno = EOPNOTSUPP;
  return -1;
}

}  // namespace openib::abi
