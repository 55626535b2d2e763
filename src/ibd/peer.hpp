// Who is on the other end of a client connection, and what it may do
// (docs/client-protocol.md §5 "Security model", docs/operations.md
// "Privileges").
//
// The credentials are SO_PEERCRED's (socket(7)): the pid, effective uid and
// gid of the process at connect() time, taken by the kernel, not claimed by
// the client. When they cannot be read, the connection is refused: there
// is no default identity (a zeroed ucred would read as root).
//
// Privilege is decided once, at accept, like the permission check of an
// open() of /dev/infiniband/umadN: a connection keeps what its peer had
// then. Root (effective uid 0) has every privilege; another uid has a
// capability when the CapEff line of /proc/<pid>/status (proc(5)) holds it,
// that file's effective uid is still the one SO_PEERCRED reported, and the
// connecting process, named by SO_PEERPIDFD, is still alive after the read
// (so the pid was not reused by another process meanwhile). Kernels before
// 6.5 have no SO_PEERPIDFD: there, reuse of the pid by another process of
// the same user that holds the capability is a race left open
// (docs/operations.md "Privileges").
#pragma once

#include <sys/types.h>

#include <cstdint>

#include "common/result.hpp"

namespace openib::ibd {

// linux/capability.h numbers.
inline constexpr int kCapNetAdmin = 12;
inline constexpr int kCapNetRaw = 13;

struct PeerCred {
  pid_t pid = 0;
  uid_t uid = static_cast<uid_t>(-1);
  gid_t gid = static_cast<gid_t>(-1);
  // Management: the user-MAD service's QP0 and SMP classes, the issm file
  // (root or CAP_NET_ADMIN).
  bool net_admin = false;
  // Controlled Q_Keys, bit 31 set (IBA 10.2.4, 3.5.3): root or
  // CAP_NET_RAW, as Linux's uverbs (modify_qp, EPERM otherwise).
  bool net_raw = false;
};

// SO_PEERCRED of a connected UNIX socket, and the privileges above. An
// error when the credentials cannot be read (the caller refuses the
// connection).
Result<PeerCred> peer_credentials(int sock);

// The effective capability set of `pid` (proc(5) CapEff), if its effective
// uid is `uid`; 0 when it cannot be read or the uid differs.
uint64_t peer_cap_eff(pid_t pid, uid_t uid);

}  // namespace openib::ibd
