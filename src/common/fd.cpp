#include "common/fd.hpp"

#include <unistd.h>

namespace openib {

void UniqueFd::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

}  // namespace openib
