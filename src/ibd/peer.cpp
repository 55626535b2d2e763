#include "ibd/peer.hpp"

#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include "common/fd.hpp"

// socket(7) SO_PEERPIDFD (Linux 6.5; Debian 12's headers predate it).
#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77
#endif

namespace openib::ibd {

uint64_t peer_cap_eff(pid_t pid, uid_t uid) {
  if (pid <= 0) return 0;
  const std::string path = "/proc/" + std::to_string(pid) + "/status";
  std::FILE* f = std::fopen(path.c_str(), "re");
  if (!f) return 0;
  char line[256];
  bool uid_ok = false;
  uint64_t caps = 0;
  bool have_caps = false;
  while (std::fgets(line, sizeof line, f)) {
    unsigned long real = 0, eff = 0;
    unsigned long long v = 0;
    // "Uid:\treal\teffective\tsaved\tfs"
    if (std::sscanf(line, "Uid: %lu %lu", &real, &eff) == 2) uid_ok = eff == uid;
    if (std::sscanf(line, "CapEff: %llx", &v) == 1) {
      caps = v;
      have_caps = true;
    }
  }
  std::fclose(f);
  return uid_ok && have_caps ? caps : 0;
}

Result<PeerCred> peer_credentials(int sock) {
  ucred cred{};
  socklen_t len = sizeof cred;
  if (::getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return sys_err("SO_PEERCRED");
  if (len != sizeof cred) return err(EPROTO, "SO_PEERCRED returned {} bytes", len);
  PeerCred p;
  p.pid = cred.pid;
  p.uid = cred.uid;
  p.gid = cred.gid;
  if (cred.uid == 0) {
    p.net_admin = p.net_raw = true;
  } else {
    uint64_t caps = peer_cap_eff(cred.pid, cred.uid);
    // SO_PEERPIDFD names the process that connected, not its pid: if it
    // can still be signalled (signal 0, pidfd_send_signal(2)) after /proc
    // was read, it had not exited, so its pid could not have been reused
    // and the file read was its own. Gone (ESRCH, or no pidfd for a process
    // that already exited): no capabilities. A kernel without SO_PEERPIDFD
    // (ENOPROTOOPT) keeps the uid check alone (peer.hpp).
    int pidfd = -1;
    socklen_t plen = sizeof pidfd;
    if (::getsockopt(sock, SOL_SOCKET, SO_PEERPIDFD, &pidfd, &plen) == 0 && pidfd >= 0) {
      UniqueFd owned(pidfd);
      if (::syscall(SYS_pidfd_send_signal, pidfd, 0, nullptr, 0) != 0) caps = 0;
    } else if (errno != ENOPROTOOPT) {
      caps = 0;
    }
    p.net_admin = (caps >> kCapNetAdmin) & 1;
    p.net_raw = (caps >> kCapNetRaw) & 1;
  }
  return p;
}

}  // namespace openib::ibd
