// The file behind a shared mapping of a client's (MAP_MEM_SHARED,
// docs/client-protocol.md §3): ibd opens it through /proc/PID/map_files,
// as only a process with CAP_SYS_ADMIN can, once it has checked that the
// process is the client's and may hand that memory to the device.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string_view>

#include "common/result.hpp"
#include "common/fd.hpp"

namespace openib::ibd {

// One line of /proc/PID/maps: [lo, hi), perms, file offset, device, inode.
struct MapsLine {
  uint64_t lo = 0, hi = 0;
  char perms[5] = {};
  uint64_t offset = 0;
  unsigned major = 0, minor = 0;
  uint64_t ino = 0;
};
// nullopt for a line that is not one.
std::optional<MapsLine> parse_maps_line(std::string_view line);

struct SharedFile {
  UniqueFd fd;             // open read-write
  uint64_t offset = 0;     // of the range's first byte in the file
  uint64_t page_size = 0;  // the file's pages: 4096, or the huge page size
};

// The file that process `pid` maps at [addr, addr + length), page aligned.
// The process must still be the one whose credentials (SO_PEERCRED) are
// uid/gid: every real, effective, saved and file-system ID equal to them,
// and dumpable (/proc/PID owned by them; a process that went through a
// set-user-ID exec is not). The range must lie in mappings of one file,
// shared, readable and writable, at consecutive offsets, and the file
// must be on tmpfs (shmem: MAP_SHARED|MAP_ANONYMOUS, memfds, /dev/shm) or
// hugetlbfs. Errors: ESRCH (the process is gone), EPERM (not the client's
// any more), EINVAL (not such a mapping), EACCES (shared but not writable).
Result<SharedFile> open_shared_range(pid_t pid, uid_t uid, gid_t gid, uint64_t addr, uint64_t length);

}  // namespace openib::ibd
