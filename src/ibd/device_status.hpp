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
#include "ibd/sealed_memfd.hpp"

namespace openib::ibd {

class DeviceStatusPage {
 public:
  // A page saying "running, generation `generation`": a sealed memfd of
  // one page (sealed_memfd.hpp).
  static Result<std::unique_ptr<DeviceStatusPage>> create(uint64_t generation);
  DeviceStatusPage(const DeviceStatusPage&) = delete;
  DeviceStatusPage& operator=(const DeviceStatusPage&) = delete;

  // The device of this generation is gone: state := lost (release store).
  // Forever: a new generation gets a new page.
  void set_lost();
  bool lost() const;
  // A new fd for one client: the memfd re-opened O_RDONLY through
  // /proc/self/fd, so the client can neither map it writable nor truncate it.
  Result<UniqueFd> client_fd() const { return mem_.client_fd(); }

 private:
  explicit DeviceStatusPage(SealedMemfd mem) : mem_(std::move(mem)), map_(mem_.mem().data()) {}
  SealedMemfd mem_;
  std::byte* map_;
};

}  // namespace openib::ibd
