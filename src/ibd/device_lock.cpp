#include "ibd/device_lock.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <filesystem>
#include <string>

namespace openib::ibd {

std::string lock_name(const std::string& device) {
  std::string s = device;
  if (auto pos = s.find(':'); pos != std::string::npos) s[pos] = '-';
  for (char& c : s)
    if (c == '/') c = '_';
  return s + ".lock";
}

Result<DeviceLock> DeviceLock::acquire(const std::string& dir, const std::string& device) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return err(ec.value(), "creating lock directory {}: {}", dir, ec.message());
  DeviceLock l;
  l.path_ = dir + "/" + lock_name(device);
  int fd = ::open(l.path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return sys_err("opening lock file {}", l.path_);
  l.fd_ = UniqueFd(fd);
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK) return sys_err("flock {}", l.path_);
    char buf[32] = {};
    const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
    std::string holder = n > 0 ? std::string(buf, static_cast<size_t>(n)) : "?";
    while (!holder.empty() && (holder.back() == '\n' || holder.back() == ' ')) holder.pop_back();
    return err(EBUSY, "{} is owned by another ibd (pid {}; lock {})", device, holder, l.path_);
  }
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, pid.data(), pid.size(), 0) < 0)
    return sys_err("writing lock file {}", l.path_);
  return l;
}

}  // namespace openib::ibd
