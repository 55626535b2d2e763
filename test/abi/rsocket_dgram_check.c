// A datagram rsocket client against Debian's udpong server (test rsockets,
// rsockets.sh runs it), written as an application writes one: the calls of
// <rdma/rsocket.h> with SOCK_DGRAM, linked with our librdmacm.so.1. udpong
// answers a message whose first byte is 0 (login), 1 (start), 3 (echo) or 4
// (end) by sending the same bytes back to where it came from, so every
// answer can be checked byte for byte:
//  1. rsocket(AF_INET, SOCK_DGRAM), rconnect to the server, a login (16 B).
//  2. echo messages of every size from 16 to the largest payload (2,032 B;
//     then every 97th size), each with its own pattern; rpoll for POLLIN,
//     rrecv, the answer equal to what was sent.
//  3. rsend of 2,033 bytes: EMSGSIZE; of 2,032: sent.
//  4. MSG_PEEK sees the next datagram and leaves it; rrecvmsg into 8 bytes
//     gives 8 bytes and MSG_TRUNC, the rest of that datagram discarded;
//     rrecvfrom names the server's address and port.
//  5. a second socket, not connected, rsendto the server: answered to it.
//  6. non-blocking rrecv with nothing queued: EWOULDBLOCK; rpoll for
//     POLLOUT: writable; rgetsockopt SO_TYPE: SOCK_DGRAM; rlisten: error.
//  7. rshutdown(SHUT_WR): rsend fails with EPIPE; rshutdown(SHUT_RD): rrecv
//     returns 0 at once.
// Lost datagrams are sent again (UDP semantics: the first ones travel over
// UDP while the address handle is made); 10 tries each, 1 s apart.
// Exit 0 and "dgram-check: ok ..." when all hold; 1 and the failing step.
//   rsocket_dgram_check SERVER_ADDR PORT   (OPENIB_SOCKET set)
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <rdma/rsocket.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define MAX_PAYLOAD 2032

static void die(const char* step) {
  printf("dgram-check: FAIL: %s (errno %d %s)\n", step, errno, strerror(errno));
  exit(1);
}

static void fill(uint8_t* b, size_t len, unsigned seed) {
  b[0] = 3;  // udpong's echo
  b[1] = 0;
  b[2] = (uint8_t)seed;
  b[3] = 0;
  for (size_t k = 4; k < len; ++k) b[k] = (uint8_t)(k * 131 + seed * 7 + 1);
}

// Sends `out` (len bytes) until the same bytes come back (10 tries); byte
// 1 is udpong's client id, which it sets in its answer to a login.
static void echo(int fd, const struct sockaddr_in* to, const uint8_t* out, size_t len, const char* step) {
  static uint8_t in[4096];
  for (int tries = 0; tries < 10; ++tries) {
    ssize_t n = to ? rsendto(fd, out, len, 0, (const struct sockaddr*)to, sizeof *to) : rsend(fd, out, len, 0);
    if (n != (ssize_t)len) die(step);
    for (;;) {
      struct pollfd p = {fd, POLLIN, 0};
      int r = rpoll(&p, 1, 1000);
      if (r < 0) die(step);
      if (r == 0) break;  // lost: again
      n = rrecv(fd, in, sizeof in, MSG_DONTWAIT);
      if (n < 0) die(step);
      if (out[0] == 0) in[1] = out[1];  // a login: any id
      if ((size_t)n == len && memcmp(in, out, len) == 0) return;
      // an older answer (a retry's): skip it
    }
  }
  errno = ETIMEDOUT;
  die(step);
}

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: rsocket_dgram_check SERVER_ADDR PORT\n");
    return 2;
  }
  alarm(120);
  struct sockaddr_in srv = {0};
  srv.sin_family = AF_INET;
  srv.sin_port = htons((uint16_t)atoi(argv[2]));
  if (inet_pton(AF_INET, argv[1], &srv.sin_addr) != 1) die("address");

  int fd = rsocket(AF_INET, SOCK_DGRAM, 0);
  if (fd < 0) die("rsocket");
  if (rconnect(fd, (struct sockaddr*)&srv, sizeof srv)) die("rconnect");
  uint8_t out[4096];
  memset(out, 0, 16);  // login
  echo(fd, NULL, out, 16, "login");

  int sizes = 0;
  for (size_t len = 16; len <= MAX_PAYLOAD; len += (len < 64 ? 1 : 97)) {
    fill(out, len, (unsigned)len);
    echo(fd, NULL, out, len, "echo");
    ++sizes;
  }
  fill(out, MAX_PAYLOAD, 5);
  echo(fd, NULL, out, MAX_PAYLOAD, "echo of the largest payload");

  errno = 0;
  if (rsend(fd, out, MAX_PAYLOAD + 1, 0) != -1 || errno != EMSGSIZE) die("2,033 bytes not refused with EMSGSIZE");

  // MSG_PEEK, truncation, the source address.
  fill(out, 100, 9);
  echo(fd, NULL, out, 100, "echo before peek");  // the path is warm now
  if (rsend(fd, out, 100, 0) != 100) die("send for peek");
  uint8_t in[256];
  struct pollfd p = {fd, POLLIN, 0};
  if (rpoll(&p, 1, 5000) != 1 || !(p.revents & POLLIN)) die("rpoll POLLIN for peek");
  if (rrecv(fd, in, 50, MSG_PEEK) != 50 || memcmp(in, out, 50)) die("MSG_PEEK");
  struct sockaddr_in from;
  socklen_t fromlen = sizeof from;
  memset(in, 0, sizeof in);
  if (rrecvfrom(fd, in, sizeof in, 0, (struct sockaddr*)&from, &fromlen) != 100 || memcmp(in, out, 100))
    die("the datagram after MSG_PEEK");
  if (fromlen != sizeof from || from.sin_addr.s_addr != srv.sin_addr.s_addr || from.sin_port != srv.sin_port)
    die("rrecvfrom's source is not the server");
  if (rsend(fd, out, 100, 0) != 100) die("send for truncation");
  if (rpoll(&p, 1, 5000) != 1) die("rpoll POLLIN for truncation");
  struct iovec iov = {in, 8};
  struct msghdr m = {0};
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  if (rrecvmsg(fd, &m, 0) != 8 || !(m.msg_flags & MSG_TRUNC) || memcmp(in, out, 8)) die("rrecvmsg truncation");
  errno = 0;
  if (rrecv(fd, in, sizeof in, MSG_DONTWAIT) != -1 || (errno != EWOULDBLOCK && errno != EAGAIN))
    die("the rest of a truncated datagram was not discarded");

  p.events = POLLOUT;
  if (rpoll(&p, 1, 1000) != 1 || !(p.revents & POLLOUT)) die("rpoll POLLOUT");
  int type = 0;
  socklen_t tl = sizeof type;
  if (rgetsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tl) || type != SOCK_DGRAM) die("SO_TYPE");
  if (rlisten(fd, 1) == 0) die("rlisten on a datagram socket succeeded");

  // An unconnected socket: rsendto.
  int fd2 = rsocket(AF_INET, SOCK_DGRAM, 0);
  if (fd2 < 0) die("second rsocket");
  fill(out, 777, 11);
  echo(fd2, &srv, out, 777, "rsendto from a second socket");
  if (rclose(fd2)) die("rclose second");
  // rshutdown as UDP's: the send side, then the receive side.
  if (rshutdown(fd, SHUT_WR)) die("rshutdown SHUT_WR");
  errno = 0;
  if (rsend(fd, out, 16, 0) != -1 || errno != EPIPE) die("rsend after SHUT_WR did not fail with EPIPE");
  if (rshutdown(fd, SHUT_RD)) die("rshutdown SHUT_RD");
  if (rrecv(fd, in, sizeof in, 0) != 0) die("rrecv after SHUT_RD did not return 0");
  if (rclose(fd)) die("rclose");
  printf("dgram-check: ok: %d sizes echoed and verified (16..%d B), EMSGSIZE, MSG_PEEK, MSG_TRUNC, rsendto, rshutdown\n", sizes,
         MAX_PAYLOAD);
  return 0;
}
