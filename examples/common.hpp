// Helpers the examples share: the TCP side channel (the way ibv_rc_pingpong
// exchanges its QP numbers), its text format, and error reporting.
#pragma once

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "openib/verbs.hpp"

namespace openib::examples {

[[noreturn]] inline void die(const std::string& what) {
  std::fprintf(stderr, "%s\n", what.c_str());
  std::exit(1);
}
template <class T>
T check(Result<T> r, const char* what) {
  if (!r) die(std::string(what) + ": " + r.error().str());
  return std::move(r).value();
}
inline void check(Result<void> r, const char* what) {
  if (!r) die(std::string(what) + ": " + r.error().str());
}

// Server (host empty): listen on port, accept one. Client: connect.
// Returns the connected fd or -1 with a message on stderr.
inline int tcp_connect(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if (host.empty()) hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  if (int e = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &res)) {
    std::fprintf(stderr, "%s for %s:%d\n", gai_strerror(e), host.c_str(), port);
    return -1;
  }
  int fd = -1;
  for (addrinfo* a = res; a && fd < 0; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    if (host.empty()) {
      int one = 1;
      ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
      if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 1) == 0) {
        int c = ::accept(fd, nullptr, nullptr);
        ::close(fd);
        fd = c;
        if (fd < 0) std::perror("accept");
        break;
      }
    } else if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
      break;
    }
    ::close(fd);
    fd = -1;
  }
  ::freeaddrinfo(res);
  if (fd < 0) std::fprintf(stderr, "Couldn't connect to %s:%d\n", host.empty() ? "*" : host.c_str(), port);
  return fd;
}

inline bool write_all(int fd, const void* p, size_t n) {
  auto* b = static_cast<const char*>(p);
  while (n) {
    ssize_t k = ::write(fd, b, n);
    if (k <= 0) return false;
    b += k;
    n -= size_t(k);
  }
  return true;
}
inline bool read_all(int fd, void* p, size_t n) {
  auto* b = static_cast<char*>(p);
  while (n) {
    ssize_t k = ::read(fd, b, n);
    if (k <= 0) return false;
    b += k;
    n -= size_t(k);
  }
  return true;
}

// ibv_rc_pingpong's wire format: "LLLL:QQQQQQ:PPPPPP:<32 hex digits of GID>".
struct PpDest {
  uint16_t lid = 0;
  uint32_t qpn = 0, psn = 0;
  Gid gid;
};
inline constexpr size_t kPpMsgSize = sizeof "0000:000000:000000:00000000000000000000000000000000";

inline std::string gid_str(const Gid& g) {
  char s[40];
  for (int i = 0; i < 16; ++i) std::snprintf(s + 2 * i, 3, "%02x", g.raw[size_t(i)]);
  return s;
}
inline bool send_dest(int fd, const PpDest& d) {
  char msg[kPpMsgSize];
  std::snprintf(msg, sizeof msg, "%04x:%06x:%06x:%s", d.lid, d.qpn, d.psn, gid_str(d.gid).c_str());
  return write_all(fd, msg, sizeof msg);
}
inline bool recv_dest(int fd, PpDest& d) {
  char msg[kPpMsgSize];
  if (!read_all(fd, msg, sizeof msg)) return false;
  msg[sizeof msg - 1] = 0;
  unsigned lid = 0, qpn = 0, psn = 0;
  char g[33] = {};
  if (std::sscanf(msg, "%x:%x:%x:%32s", &lid, &qpn, &psn, g) != 4 || std::strlen(g) != 32) return false;
  d.lid = uint16_t(lid);
  d.qpn = qpn;
  d.psn = psn;
  for (int i = 0; i < 16; ++i) {
    char b[3] = {g[2 * i], g[2 * i + 1], 0};
    d.gid.raw[size_t(i)] = uint8_t(std::strtoul(b, nullptr, 16));
  }
  return true;
}

inline Mtu mtu_from_bytes(int m) {
  switch (m) {
    case 256: return Mtu::k256;
    case 512: return Mtu::k512;
    case 1024: return Mtu::k1024;
    case 2048: return Mtu::k2048;
    case 4096: return Mtu::k4096;
    default: die("Invalid MTU " + std::to_string(m) + " (256, 512, 1024, 2048 or 4096)");
  }
}
// In busy-poll loops: a CPU pause hint (the device and ibd may share the CPUs).
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

inline int mtu_bytes(Mtu m) { return 128 << int(m); }

// The fill pattern of message `n` from `side` (0 server, 1 client).
inline uint8_t pattern(uint64_t n, size_t i, int side) {
  return uint8_t(n * 131 + i * 7 + size_t(side) * 101 + (i >> 8));
}

}  // namespace openib::examples
