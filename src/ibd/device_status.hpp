// The device status page (docs/client-protocol.md §6.2): one page per device
// generation that ibd writes and every client of that generation maps
// read-only, so libopenib's data path sees a lost device with one load and
// no system call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "common/fd.hpp"
#include "common/result.hpp"

namespace openib::ibd {

class DeviceStatusPage {
 public:
  // A page saying "running, generation `generation`": a memfd of one page,
  // mapped writable here, then sealed against shrink, grow, further
  // writable mappings and writes (F_SEAL_FUTURE_WRITE: ibd's own mapping
  // stays writable) and further seals.
  static Result<std::unique_ptr<DeviceStatusPage>> create(uint64_t generation);
  ~DeviceStatusPage();
  DeviceStatusPage(const DeviceStatusPage&) = delete;
  DeviceStatusPage& operator=(const DeviceStatusPage&) = delete;

  // The device of this generation is gone: state := lost (release store).
  // Forever: a new generation gets a new page.
  void set_lost();
  bool lost() const;
  // A new fd for one client: the memfd re-opened O_RDONLY through
  // /proc/self/fd, so the client can neither map it writable nor truncate it.
  Result<UniqueFd> client_fd() const;

 private:
  DeviceStatusPage(UniqueFd fd, std::byte* map) : fd_(std::move(fd)), map_(map) {}
  UniqueFd fd_;
  std::byte* map_;
};

}  // namespace openib::ibd
