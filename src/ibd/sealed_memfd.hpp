// Memory ibd writes and clients only read (docs/client-protocol.md §6.2,
// §12): a memfd mapped writable here, then sealed against shrink, grow,
// further writable mappings and writes (F_SEAL_FUTURE_WRITE: ibd's own
// mapping stays writable) and further seals. A client gets the memfd
// re-opened read-only; even re-opened read-write through /proc it can
// neither write it, map it writable, nor resize it (fcntl(2) "File
// Sealing", memfd_create(2)). The device status page and the shared path
// table are such memory.
#pragma once

#include <cstddef>
#include <span>

#include "common/fd.hpp"
#include "common/result.hpp"

namespace openib::ibd {

class SealedMemfd {
 public:
  // `bytes` zeroed bytes named `name` (as /proc/PID/maps shows it).
  static Result<SealedMemfd> create(const char* name, size_t bytes);
  SealedMemfd() = default;
  SealedMemfd(SealedMemfd&& o) noexcept;
  SealedMemfd& operator=(SealedMemfd&& o) noexcept;
  ~SealedMemfd();

  std::span<std::byte> mem() const { return {map_, size_}; }
  size_t size() const { return size_; }
  // A new fd for one client: the memfd re-opened O_RDONLY through /proc/self/fd.
  Result<UniqueFd> client_fd() const;

 private:
  UniqueFd fd_;
  std::byte* map_ = nullptr;
  size_t size_ = 0;
};

}  // namespace openib::ibd
