// ibv_get_sysfs_path and ibv_read_sysfs_file. ibd's devices have no sysfs
// directory; programs still read a device's attribute files through
// ibv_read_sysfs_file(dev->ibdev_path, ...) (ibv_devinfo reads board_id),
// so for our devices' paths the files the kernel's ib_core shows in
// /sys/class/infiniband/<dev>/ are answered from ibd. Any other path is
// read from the file system, as libibverbs does.
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "abi/verbs/objects.hpp"

using namespace openib::verbs;

namespace {

std::string guid_str(uint64_t g) {
  char b[24];
  std::snprintf(b, sizeof b, "%04x:%04x:%04x:%04x", unsigned(g >> 48), unsigned(g >> 32) & 0xffff,
                unsigned(g >> 16) & 0xffff, unsigned(g) & 0xffff);
  return b;
}

// The kernel's text of one attribute file of a device (ib_core's sysfs.c
// names), or nothing for a file the device does not have.
bool device_file(Device& d, const char* file, std::string& out) {
  auto c = openib::Context::open({.socket = d.socket, .device = d.dev.name});
  if (!c) return false;
  auto a = (*c)->query_device();
  if (!a) return false;
  const std::string f = file;
  if (f == "node_type") out = "1: CA";
  else if (f == "node_guid") out = guid_str(a->node_guid);
  else if (f == "sys_image_guid") out = guid_str(a->sys_image_guid);
  else if (f == "fw_ver") out = std::to_string(a->fw_rev >> 16) + "." + std::to_string(a->fw_rev & 0xffff);
  else if (f == "hw_rev") out = std::to_string(a->hw_ver);
  else if (f == "hca_type") out = std::string(d.dev.name);
  else if (f == "board_id") out = "openib-" + std::to_string(a->vendor_id) + "-" + std::to_string(a->vendor_part_id);
  else return false;
  return true;
}

}  // namespace

extern "C" {

int ibv_get_sysfs_path(char* buf, size_t size) {
  const char* env = std::getenv("SYSFS_PATH");
  return std::snprintf(buf, size, "%s", env && *env ? env : "/sys");
}

int ibv_read_sysfs_file(const char* dir, const char* file, char* buf, size_t size) {
  if (!dir || !file || !buf || !size) {
    errno = EINVAL;
    return -1;
  }
  std::string text;
  if (Device* d = find_device(dir)) {
    if (!device_file(*d, file, text)) {
      errno = ENOENT;
      return -1;
    }
  } else {
    const std::string path = std::string(dir) + "/" + file;
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    char tmp[4096];
    const ssize_t n = ::read(fd, tmp, sizeof tmp);
    ::close(fd);
    if (n < 0) return -1;
    text.assign(tmp, size_t(n));
    while (!text.empty() && text.back() == '\n') text.pop_back();
  }
  const size_t n = std::min(text.size(), size - 1);
  std::memcpy(buf, text.data(), n);
  buf[n] = '\0';
  return int(n);
}

}  // extern "C"
