// Sealed memfds (sealed_memfd.hpp; memfd_create(2), fcntl(2) "File
// Sealing", proc(5) /proc/pid/fd).
#include "ibd/sealed_memfd.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <string>
#include <utility>

namespace openib::ibd {

Result<SealedMemfd> SealedMemfd::create(const char* name, size_t bytes) {
  SealedMemfd m;
  m.fd_ = UniqueFd(::memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!m.fd_) return sys_err("memfd_create for {}", name);
  if (::ftruncate(m.fd_.get(), static_cast<off_t>(bytes)) < 0) return sys_err("ftruncate of {} to {} bytes", name, bytes);
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, m.fd_.get(), 0);
  if (p == MAP_FAILED) return sys_err("mmap of {}", name);
  m.map_ = static_cast<std::byte*>(p);
  m.size_ = bytes;
  // After our own writable mapping: F_SEAL_FUTURE_WRITE refuses every later
  // writable shared mapping and write(2), whatever the fd's mode.
  if (::fcntl(m.fd_.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_FUTURE_WRITE | F_SEAL_SEAL) < 0)
    return sys_err("sealing {}", name);
  return m;
}

SealedMemfd::SealedMemfd(SealedMemfd&& o) noexcept
    : fd_(std::move(o.fd_)), map_(std::exchange(o.map_, nullptr)), size_(std::exchange(o.size_, 0)) {}

SealedMemfd& SealedMemfd::operator=(SealedMemfd&& o) noexcept {
  if (this != &o) {
    if (map_) ::munmap(map_, size_);
    fd_ = std::move(o.fd_);
    map_ = std::exchange(o.map_, nullptr);
    size_ = std::exchange(o.size_, 0);
  }
  return *this;
}

SealedMemfd::~SealedMemfd() {
  if (map_) ::munmap(map_, size_);
}

Result<UniqueFd> SealedMemfd::client_fd() const {
  const std::string path = "/proc/self/fd/" + std::to_string(fd_.get());
  UniqueFd ro(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!ro) return sys_err("re-opening {} read-only", path);
  return ro;
}

}  // namespace openib::ibd
