// Closing fds that clients sent, without ever blocking ibd's loop
// (docs/client-protocol.md §5 "Security model", "fds").
//
// The last close() of a file runs its release: for most kinds that is
// quick, but a TCP socket with SO_LINGER and unsent data waits up to its
// linger time, a FUSE file waits for its server's FLUSH/RELEASE, a UNIX
// socket releases the fds still in flight in its queue (each such release
// in turn). A client can send any of these with SCM_RIGHTS. So:
//  - each request's fds are checked against the kinds its op takes (an
//    eventfd for HELLO and CREATE_CQ, a memfd for MAP_MEM, nothing for the
//    rest) before anything else;
//  - fds of the kinds ibd takes (eventfd, memfd/shmem: their release never
//    waits) are closed on the loop; every other fd, and every client
//    connection socket (its queue may hold fds in flight), is handed to one
//    closer thread, which closes them in order. A close that blocks delays
//    only that thread.
// ibd never receives fds into a control buffer too small for them: the
// kernel would release the ones cut off inside ibd's recvmsg.
#pragma once

#include <cstdint>
#include <vector>

#include "common/fd.hpp"

namespace openib::ibd {

enum class FdKind : uint8_t { kEventfd, kMemfd, kOther };
// eventfd: /proc/self/fd/N reads anon_inode:[eventfd]; memfd: a regular
// file that takes seals (F_GET_SEALS works on shmem and hugetlbfs only).
FdKind fd_kind(int fd);
const char* fd_kind_name(FdKind k);

// Closes each fd: eventfds and memfds here, the others on the closer thread.
void dispose_fds(std::vector<UniqueFd>& fds);
// Closes `fd` on the closer thread, whatever its kind.
void close_off_loop(UniqueFd fd);
// Fds handed to the closer thread so far (INFO fds_closed_off_loop_total).
uint64_t fds_closed_off_loop();
// Of those, the ones whose close() has not returned yet (INFO fds_closing).
uint64_t fds_closing_off_loop();

}  // namespace openib::ibd
