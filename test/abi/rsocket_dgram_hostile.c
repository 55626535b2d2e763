// A hostile peer against a datagram rsocket server: Debian's udpong run as
// "udpong -b SERVER_ADDR -p PORT" over our librdmacm.so.1 and
// libibverbs.so.1. It speaks rdma-core's SOCK_DGRAM rsocket wire format
// (librdmacm/rsocket.c of v44, its ds_ and udp_svc_ functions) with a kernel
// UDP socket and the RDMA CM and verbs of Debian's headers (linked with
// ours), and breaks it. The format, as rdma-core has it:
//  - over UDP to the server's IP:port, a ds_udp_header then the payload:
//    be32 tag 0x55555555, u8 version (4), u8 op (0 DATA, 7 CTRL), u8 length
//    (16 for IPv4, 28 for IPv6), u8 reserved, be32 QPN (low 24 bits: the
//    sender's UD QP), the sender's IPv4 address. A valid DATA is answered by
//    a CTRL over UDP (the header alone, the server's QPN), and its payload is
//    delivered with the UDP source as its sender; the server resolves an
//    address handle to the sender and answers it as UD SENDs to that QPN.
//  - as a UD SEND (Q_Key 0x01234567) to the server's QPN: a ds_header (u8
//    version 4, u8 length 8, be16 the sender's port, be32 its IPv4 address)
//    then the payload, 2,048 bytes in all at most; the receiver drops a
//    message shorter than 40 (GRH) + 8 bytes, or whose version and length
//    are not (4, 8) or (6, 24).
//  - udpong's message: u8 op (0 login, 1 start, 2 data, 3 echo, 4 end), u8
//    id, u8 seqno, u8 reserved, be32 data, then a buffer; a login is 16
//    bytes and the server sends it back (an id set) to its sender; a data
//    message gets no answer.
// Our logins carry a seqno of their own, data 0x600df00d and "dgramhst" in
// the buffer. An echo gives all of it back (any id): over UDP (a DATA
// ds_udp_header from SERVER_ADDR:PORT), or as a UD message to our QP (the
// GRH, a ds_header with the server's port and address, from the QPN that
// its CTRL named). Junk that carries a login has a seqno of its own (0xc0
// and up): an echo of it means the server took the junk.
// Both modes first send datagrams to port 9 of SERVER_ADDR until its ICMP
// port unreachable comes back (3 s at most), so that ARP and the IPoIB path
// are resolved before the battery (the first packets to a new neighbour
// are dropped but the last 3 while they resolve). Modes:
//  - udp: from a kernel UDP socket bound to LOCAL_ADDR: an empty datagram;
//    the first 1..15 bytes of a valid header; tag 0x55555554; version 4 with
//    length 28; version 6 (length 28) from our IPv4 source; length 255 in a
//    32-byte datagram; op CTRL with QPN 0xffffff, and with QPN 0; 3,000-byte
//    datagrams (a valid header and a udpong data message, and plain bytes);
//    5,000 valid-looking DATA datagrams, each a udpong data message from QPN
//    0xffffff; a DATA header of length 16 alone (an empty payload). (The
//    malformed headers name our real QPN, so that an echo would reach us.)
//    Then a valid DATA with a login and the QPN of our own UD QP (an
//    RDMA_PS_UDP id bound to LOCAL_ADDR, rdma_create_qp, receives with room
//    for the GRH), sent again each second: the server must answer with a
//    CTRL over UDP and the echo (over UDP or UD) within 5 s.
//  - ud: that login first (its CTRL names the server's QPN; no CTRL and
//    echo within 5 s: exit 6), an address handle to the server from the path
//    record of a synchronous RDMA CM id (rdma_resolve_addr/route), then UD
//    SENDs with Q_Key 0x01234567: version 9; length 0; version 4 with length
//    24; a 4-byte message; a 2,048-byte message (version 4, length 8: the
//    largest rdma-core's receive slot holds, a udpong data message); one as
//    large as the port's MTU (4,096 bytes: a receive buffer of 2,048 would
//    fail the receiving QP; it must be dropped); 5,000 udpong data messages as
//    fast as our send queue allows (the server's receive queue overruns: it
//    must drop, not die); a valid login under Q_Key 0x11111111 (its HCA must
//    drop it). Then a valid login as a UD SEND (our UDP port and LOCAL_ADDR
//    in its ds_header), sent again each second: its echo must come as a UD
//    message within 5 s; over UDP is wrong, the server knows our QPN. Any
//    other answer in this mode means the server acted on junk.
// Exit 0: the server answered as it should and took none of the junk; 4: no
// answer within 5 s (no CTRL, or no echo); 5: a wrong answer (a malformed
// CTRL or message, CTRLs naming different QPNs, the echo of junk, in ud mode
// a reply to junk or the echo over UDP); 6 (ud): no answer to the first
// login, before any abuse; 1: setup failed (socket, RDMA CM id, QP, route,
// a send of ours completing in error); 2: usage; 3: over 30 s (alarm). Our
// objects go with the process (ibd destroys a dead client's).
// It prints one summary line, "dgram-hostile: MODE: ...", with what it saw.
//   rsocket_dgram_hostile LOCAL_ADDR SERVER_ADDR PORT udp|ud   (OPENIB_SOCKET set)
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

// rdma-core's struct ds_udp_header and struct ds_header (rsocket.c);
// multi-byte fields big-endian.
struct ds_udp_header {
  uint32_t tag;
  uint8_t version;
  uint8_t op;
  uint8_t length;
  uint8_t reserved;
  uint32_t qpn;
  union {
    uint32_t ipv4;
    uint8_t ipv6[16];
  } addr;
};
_Static_assert(sizeof(struct ds_udp_header) == 28, "ds_udp_header is 28 bytes");
struct ds_header {
  uint8_t version;
  uint8_t length;
  uint16_t port;
  union {
    uint32_t ipv4;
    struct {
      uint32_t flowinfo;
      uint8_t addr[16];
    } ipv6;
  } addr;
};
_Static_assert(sizeof(struct ds_header) == 24, "ds_header is 24 bytes");
enum { DS_UDP_TAG = 0x55555555, DS_OP_DATA = 0, DS_OP_CTRL = 7, DS_UDP_HDR4 = 16, DS_UDP_HDR6 = 28, DS_HDR4 = 8 };
enum { DS_SLOT = 2048, GRH = 40 };
#define UDP_QKEY 0x01234567u  // RDMA_UDP_QKEY
#define WRONG_QKEY 0x11111111u
#define BOGUS_QPN 0xFFFFFFu

// udpong's struct message (its first 16 bytes, CTRL_MSG_SIZE).
enum { OP_LOGIN = 0, OP_DATA = 2, PONG_CTRL = 16 };
#define LOGIN_DATA 0x600DF00Du
static const char marker[8] = {'d', 'g', 'r', 'a', 'm', 'h', 's', 't'};

// Seqnos: our logins, and junk that carries a login.
enum {
  SEQ_UDP_LOGIN = 0xA1,
  SEQ_UD_FIRST = 0xB1,
  SEQ_UD_FINAL = 0xB2,
  SEQ_JUNK = 0xC0,  // SEQ_JUNK + i: junk_names[i]
  SEQ_WRONG_QKEY = 0xCF,
};
static const char* const junk_names[16] = {
    "tag 0x55555554", "version 4 length 28", "version 6 from IPv4", "length 255 (32-byte datagram)",
    "CTRL with QPN 0xffffff", "CTRL with QPN 0", "UD version 9", "UD length 0",
    "UD version 4 length 24", NULL, NULL, NULL, NULL, NULL, NULL, "UD Q_Key 0x11111111"};

enum { RQ_DEPTH = 64, SQ_DEPTH = 256, SSLOTS = 8, BURST = 5000, FLOOD = 5000 };
#define RECV_TAG (1ULL << 63)

static const char* mode = "?";
static int udp_fd = -1;
static struct sockaddr_in local_sa, server_sa;  // server_sa: SERVER_ADDR:PORT
static uint16_t our_port;                       // of udp_fd, network order
static struct rdma_cm_id* id;                   // ours: RDMA_PS_UDP, bound to LOCAL_ADDR
static struct ibv_pd* pd;
static struct ibv_cq* cq;
static struct ibv_qp* qp;
static struct ibv_mr* mr;
static struct ibv_ah* ah;  // to the server (ud)
static uint8_t* rbuf;      // RQ_DEPTH slots of GRH + DS_SLOT
static uint8_t* sbuf;      // SSLOTS send slots of DS_SLOT
static uint32_t our_qpn, server_qpn;
static double warm;  // warm_up()
static int outstanding;
static enum ibv_wc_status send_error = IBV_WC_SUCCESS;

// What the server sent us.
static unsigned echoed[256];  // per seqno: 1 over UDP, 2 over UD
static uint64_t ctrls, others, udp_foreign, recv_errors;
static char bad[256], other[160];

static void on_alarm(int sig) {
  (void)sig;
  static const char msg[] = "dgram-hostile: timed out (30 s alarm)\n";
  if (write(2, msg, sizeof msg - 1) < 0) _exit(3);
  _exit(3);
}

static void setup_fail(const char* what, int err) {
  printf("dgram-hostile: %s: setup failed: %s: %s\n", mode, what, strerror(err));
  exit(1);
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

// The first wrong thing the server sent is kept (exit 5).
static void note_bad(const char* fmt, ...) {
  if (bad[0]) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(bad, sizeof bad, fmt, ap);
  va_end(ap);
}

static const char* via_name(unsigned via) { return via == 3 ? "UDP and UD" : via == 2 ? "UD" : "UDP"; }

// ---- what we send ------------------------------------------------------

// A ds_udp_header of length hlen (16 or 28; the bytes past the IPv4
// address zero) at p.
static size_t udp_hdr(uint8_t* p, uint32_t tag, uint8_t version, uint8_t op, uint8_t length, uint32_t qpn, size_t hlen) {
  struct ds_udp_header h;
  memset(&h, 0, sizeof h);
  h.tag = htobe32(tag);
  h.version = version;
  h.op = op;
  h.length = length;
  h.qpn = htobe32(qpn);
  h.addr.ipv4 = local_sa.sin_addr.s_addr;
  memcpy(p, &h, hlen);
  return hlen;
}

// Our ds_header (version and length as given) at p: 8 bytes.
static size_t ds_hdr(uint8_t* p, uint8_t version, uint8_t length) {
  struct ds_header h;
  memset(&h, 0, sizeof h);
  h.version = version;
  h.length = length;
  h.port = our_port;
  h.addr.ipv4 = local_sa.sin_addr.s_addr;
  memcpy(p, &h, DS_HDR4);
  return DS_HDR4;
}

// A udpong message at p: 16 bytes (op, id 0, seqno, reserved 0, data, marker).
static size_t pong(uint8_t* p, uint8_t op, uint8_t seqno) {
  uint32_t data = htobe32(LOGIN_DATA);
  p[0] = op;
  p[1] = 0;
  p[2] = seqno;
  p[3] = 0;
  memcpy(p + 4, &data, 4);
  memcpy(p + 8, marker, sizeof marker);
  return PONG_CTRL;
}

// ---- what the server sends ---------------------------------------------

// A udpong payload from the server (via 1: UDP, 2: UD).
static void take_payload(const uint8_t* p, size_t len, unsigned via) {
  if (len == PONG_CTRL && p[0] == OP_LOGIN) {
    uint32_t data;
    memcpy(&data, p + 4, 4);
    if (p[3] != 0 || be32toh(data) != LOGIN_DATA || memcmp(p + 8, marker, sizeof marker)) {
      note_bad("an echo of login seqno 0x%02x over %s that does not give our message back", p[2], via_name(via));
      return;
    }
    echoed[p[2]] |= via;
    return;
  }
  if (!other[0])
    snprintf(other, sizeof other, "op %u seqno 0x%02x, %zu bytes over %s", len ? p[0] : 0, len > 2 ? p[2] : 0, len,
             via_name(via));
  others++;
}

static void note_ctrl_qpn(uint32_t qpn) {
  if (!qpn) {
    note_bad("a CTRL naming QPN 0");
    return;
  }
  if (server_qpn && qpn != server_qpn) note_bad("CTRLs naming QPN 0x%x and 0x%x", server_qpn, qpn);
  if (!server_qpn) server_qpn = qpn;
}

// A UDP datagram from the server: a CTRL, or a DATA with a payload.
static void take_udp(const uint8_t* p, size_t len) {
  struct ds_udp_header h;
  if (len < DS_UDP_HDR4) {
    note_bad("a UDP datagram of %zu bytes, shorter than a ds_udp_header", len);
    return;
  }
  memset(&h, 0, sizeof h);
  memcpy(&h, p, DS_UDP_HDR4);
  if (be32toh(h.tag) != DS_UDP_TAG || h.version != 4 || h.length != DS_UDP_HDR4 ||
      h.addr.ipv4 != server_sa.sin_addr.s_addr) {
    note_bad("a UDP datagram with tag 0x%08x version %u length %u, not a ds_udp_header from the server", be32toh(h.tag),
             h.version, h.length);
    return;
  }
  uint32_t qpn = be32toh(h.qpn) & 0xFFFFFF;
  if (h.op == DS_OP_CTRL) {
    if (len != DS_UDP_HDR4) note_bad("a CTRL with %zu bytes of payload", len - DS_UDP_HDR4);
    note_ctrl_qpn(qpn);
    ctrls++;
    return;
  }
  if (h.op != DS_OP_DATA) {
    note_bad("a UDP datagram of op %u", h.op);
    return;
  }
  take_payload(p + DS_UDP_HDR4, len - DS_UDP_HDR4, 1);
}

// A UD message from the server (after the GRH): a ds_header and a payload.
static void take_ud(const uint8_t* p, size_t len, uint32_t src_qp) {
  struct ds_header h;
  if (len < DS_HDR4) {
    note_bad("a UD message of %zu bytes, shorter than a ds_header", len);
    return;
  }
  memcpy(&h, p, DS_HDR4);
  if (h.version != 4 || h.length != DS_HDR4 || h.port != server_sa.sin_port ||
      h.addr.ipv4 != server_sa.sin_addr.s_addr) {
    char a[INET_ADDRSTRLEN] = "?";
    inet_ntop(AF_INET, &h.addr.ipv4, a, sizeof a);
    note_bad("a UD message whose ds_header says version %u length %u from %s:%u", h.version, h.length, a, ntohs(h.port));
    return;
  }
  if (server_qpn && src_qp != server_qpn) note_bad("a UD message from QPN 0x%x, its CTRL said 0x%x", src_qp, server_qpn);
  take_payload(p + DS_HDR4, len - DS_HDR4, 2);
}

static void post_recv(uint64_t slot) {
  struct ibv_sge sge = {.addr = (uintptr_t)(rbuf + slot * (GRH + DS_SLOT)), .length = GRH + DS_SLOT, .lkey = mr->lkey};
  struct ibv_recv_wr wr = {.wr_id = RECV_TAG | slot, .sg_list = &sge, .num_sge = 1}, *bad_wr;
  int r = ibv_post_recv(qp, &wr, &bad_wr);
  if (r) setup_fail("ibv_post_recv", r);
}

// Whatever arrived: UDP datagrams (up to 256) and completions. The number
// of things taken.
static int pump(int ms) {
  int n = 0;
  struct pollfd p = {.fd = udp_fd, .events = POLLIN};
  if (poll(&p, 1, ms) == 1) {
    static uint8_t buf[4096];
    for (int i = 0; i < 256; i++) {
      struct sockaddr_in from;
      socklen_t flen = sizeof from;
      ssize_t r = recvfrom(udp_fd, buf, sizeof buf, MSG_DONTWAIT, (struct sockaddr*)&from, &flen);
      if (r < 0) break;
      n++;
      if (from.sin_family != AF_INET || from.sin_addr.s_addr != server_sa.sin_addr.s_addr || from.sin_port != server_sa.sin_port) {
        udp_foreign++;
        continue;
      }
      take_udp(buf, (size_t)r);
    }
  }
  struct ibv_wc wc[32];
  int c;
  while ((c = ibv_poll_cq(cq, 32, wc)) > 0) {
    for (int i = 0; i < c; i++) {
      n++;
      if (wc[i].wr_id & RECV_TAG) {
        uint64_t slot = wc[i].wr_id & ~RECV_TAG;
        if (wc[i].status != IBV_WC_SUCCESS || wc[i].byte_len < GRH)
          recv_errors++;
        else
          take_ud(rbuf + slot * (GRH + DS_SLOT) + GRH, wc[i].byte_len - GRH, wc[i].src_qp);
        post_recv(slot);
        continue;
      }
      outstanding--;
      if (wc[i].status != IBV_WC_SUCCESS && send_error == IBV_WC_SUCCESS) send_error = wc[i].status;
    }
  }
  if (c < 0) setup_fail("ibv_poll_cq", EIO);
  return n;
}

// Takes what arrives until nothing has for quiet seconds (max at most).
static void drain(double quiet, double max) {
  double start = now(), last = start;
  while (now() - start < max && now() - last < quiet)
    if (pump(1)) last = now();
}

static void udp_send(const uint8_t* p, size_t len) {
  for (int tries = 0;; tries++) {
    if (sendto(udp_fd, p, len, 0, (struct sockaddr*)&server_sa, sizeof server_sa) == (ssize_t)len) return;
    int e = errno;
    if ((e != ENOBUFS && e != EAGAIN && e != EINTR) || tries == 1000) setup_fail("sendto (UDP)", e);
    pump(0);
    usleep(200);
  }
}

// A UD SEND of send slot slot (len bytes) to the server's QPN. 0, or the
// ibv_post_send error (ENOMEM: the send queue is full).
static int ud_post(int slot, uint32_t len, uint32_t qkey) {
  static uint64_t seq;
  struct ibv_sge sge = {.addr = (uintptr_t)(sbuf + slot * DS_SLOT), .length = len, .lkey = mr->lkey};
  struct ibv_send_wr wr, *bad_wr;
  memset(&wr, 0, sizeof wr);
  wr.wr_id = ++seq;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.ud.ah = ah;
  wr.wr.ud.remote_qpn = server_qpn;
  wr.wr.ud.remote_qkey = qkey;
  int r = ibv_post_send(qp, &wr, &bad_wr);
  if (!r) outstanding++;
  return r;
}

// Until our sends have completed (secs at most); one in error is ours.
static void ud_complete(double secs, const char* what) {
  double deadline = now() + secs;
  while (outstanding > 0 && now() < deadline) pump(0);
  if (send_error != IBV_WC_SUCCESS) {
    printf("dgram-hostile: %s: setup failed: %s: our UD SEND completed in error: %s\n", mode, what,
           ibv_wc_status_str(send_error));
    exit(1);
  }
  if (outstanding > 0) setup_fail(what, ETIMEDOUT);
}

static void ud_send(int slot, uint32_t len, uint32_t qkey, const char* what) {
  int r = ud_post(slot, len, qkey);
  if (r) setup_fail(what, r);
  ud_complete(2, what);
}

// ---- setup -------------------------------------------------------------

static void parse_addr(const char* s, uint16_t port, struct sockaddr_in* sa) {
  memset(sa, 0, sizeof *sa);
  sa->sin_family = AF_INET;
  sa->sin_port = htons(port);
  if (inet_pton(AF_INET, s, &sa->sin_addr) != 1) {
    printf("dgram-hostile: %s: setup failed: %s is not an IPv4 address\n", mode, s);
    exit(1);
  }
}

// The UDP socket, and our UD QP as rdma-core's ds_create_qp makes one: an
// RDMA_PS_UDP id bound to LOCAL_ADDR, rdma_create_qp (to RTS with Q_Key
// 0x01234567), receives of GRH + 2,048 bytes.
static void setup(void) {
  udp_fd = socket(AF_INET, SOCK_DGRAM, 0);
  if (udp_fd < 0) setup_fail("socket", errno);
  int rcvbuf = 1 << 20;
  setsockopt(udp_fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);  // best effort
  struct sockaddr_in sa = local_sa;
  if (bind(udp_fd, (struct sockaddr*)&sa, sizeof sa)) setup_fail("bind (UDP)", errno);
  socklen_t slen = sizeof sa;
  if (getsockname(udp_fd, (struct sockaddr*)&sa, &slen)) setup_fail("getsockname", errno);
  our_port = sa.sin_port;

  if (rdma_create_id(NULL, &id, NULL, RDMA_PS_UDP)) setup_fail("rdma_create_id", errno);
  sa = local_sa;
  if (rdma_bind_addr(id, (struct sockaddr*)&sa)) setup_fail("rdma_bind_addr", errno);
  if (!id->verbs) setup_fail("rdma_bind_addr: no device for LOCAL_ADDR", ENODEV);
  pd = ibv_alloc_pd(id->verbs);
  if (!pd) setup_fail("ibv_alloc_pd", errno);
  cq = ibv_create_cq(id->verbs, SQ_DEPTH + RQ_DEPTH, NULL, NULL, 0);
  if (!cq) setup_fail("ibv_create_cq", errno);
  struct ibv_qp_init_attr qa;
  memset(&qa, 0, sizeof qa);
  qa.send_cq = cq;
  qa.recv_cq = cq;
  qa.qp_type = IBV_QPT_UD;
  qa.cap.max_send_wr = SQ_DEPTH;
  qa.cap.max_recv_wr = RQ_DEPTH;
  qa.cap.max_send_sge = 1;
  qa.cap.max_recv_sge = 1;
  if (rdma_create_qp(id, pd, &qa)) setup_fail("rdma_create_qp", errno);
  qp = id->qp;
  our_qpn = qp->qp_num & 0xFFFFFF;
  struct ibv_qp_attr attr;
  struct ibv_qp_init_attr init;
  int r = ibv_query_qp(qp, &attr, IBV_QP_STATE | IBV_QP_QKEY, &init);
  if (r) setup_fail("ibv_query_qp", r);
  if (attr.qp_state != IBV_QPS_RTS || attr.qkey != UDP_QKEY) {
    printf("dgram-hostile: %s: setup failed: our UD QP is in state %d with Q_Key 0x%x (want RTS, 0x%x)\n", mode,
           attr.qp_state, attr.qkey, UDP_QKEY);
    exit(1);
  }

  size_t size = (size_t)RQ_DEPTH * (GRH + DS_SLOT) + (size_t)SSLOTS * DS_SLOT;
  if (posix_memalign((void**)&rbuf, 4096, size)) setup_fail("posix_memalign", ENOMEM);
  memset(rbuf, 0, size);
  sbuf = rbuf + (size_t)RQ_DEPTH * (GRH + DS_SLOT);
  mr = ibv_reg_mr(pd, rbuf, size, IBV_ACCESS_LOCAL_WRITE);
  if (!mr) setup_fail("ibv_reg_mr", errno);
  for (uint64_t i = 0; i < RQ_DEPTH; i++) post_recv(i);
}

// An address handle to the server as rdma-core's udp_svc_create_ah makes
// one: the path record of a synchronous id resolved to SERVER_ADDR.
static void resolve_server(void) {
  struct rdma_cm_id* rid;
  if (rdma_create_id(NULL, &rid, NULL, RDMA_PS_UDP)) setup_fail("rdma_create_id (route)", errno);
  struct sockaddr_in src = local_sa, dst = server_sa;
  if (rdma_resolve_addr(rid, (struct sockaddr*)&src, (struct sockaddr*)&dst, 2000)) setup_fail("rdma_resolve_addr", errno);
  if (rdma_resolve_route(rid, 2000)) setup_fail("rdma_resolve_route", errno);
  if (!rid->route.path_rec || rid->route.num_paths < 1) setup_fail("rdma_resolve_route: no path record", ENOENT);
  // (Each id may have a context of its own: the device is what must match.)
  if (!rid->verbs || strcmp(ibv_get_device_name(rid->verbs->device), ibv_get_device_name(id->verbs->device)))
    setup_fail("the route to SERVER_ADDR leaves by another device", EXDEV);
  struct ibv_sa_path_rec* p = rid->route.path_rec;
  struct ibv_ah_attr a;
  memset(&a, 0, sizeof a);
  if (p->hop_limit > 1) {  // another subnet: a GRH (sgid index 0)
    a.is_global = 1;
    a.grh.dgid = p->dgid;
    a.grh.flow_label = be32toh(p->flow_label);
    a.grh.hop_limit = p->hop_limit;
    a.grh.traffic_class = p->traffic_class;
  }
  a.dlid = be16toh(p->dlid);
  a.sl = p->sl;
  a.port_num = rid->port_num;
  ah = ibv_create_ah(pd, &a);
  if (!ah) setup_fail("ibv_create_ah", errno);
  rdma_destroy_id(rid);
}

// The first packets to a new neighbour wait for its ARP entry and its IPoIB
// path, and meanwhile only the last 3 are kept (Linux IPoIB's rule, ibd's
// too: src/ipoib_tap/bridge.hpp): a battery sent cold would mostly vanish
// there, before the server. So first a datagram to a closed port of
// SERVER_ADDR (9, discard), again every 100 ms until its ICMP port
// unreachable comes back (ECONNREFUSED on a connected socket): both
// directions then resolved. The seconds it took, or -1 (3 s unanswered).
static const char* warm_note(void) {
  static char b[64];
  if (warm < 0) return "path warm-up unanswered in 3 s";
  snprintf(b, sizeof b, "path warm-up %.2f s", warm);
  return b;
}

static double warm_up(void) {
  int fd = socket(AF_INET, SOCK_DGRAM, 0);
  if (fd < 0) setup_fail("socket (warm-up)", errno);
  struct sockaddr_in sa = local_sa, to = server_sa;
  to.sin_port = htons(9);
  if (bind(fd, (struct sockaddr*)&sa, sizeof sa) || connect(fd, (struct sockaddr*)&to, sizeof to))
    setup_fail("bind/connect (warm-up)", errno);
  double start = now(), took = -1;
  for (int i = 0; i < 30 && took < 0; i++) {
    uint8_t b = 0;
    if (send(fd, &b, 1, 0) < 0 && errno == ECONNREFUSED) took = now() - start;
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (took < 0 && poll(&p, 1, 100) == 1 && recv(fd, &b, 1, MSG_DONTWAIT) < 0 && errno == ECONNREFUSED)
      took = now() - start;
  }
  close(fd);
  return took;
}

// ---- the exchanges -----------------------------------------------------

// A valid UDP DATA carrying a login (our real QPN).
static void send_udp_login(uint8_t seqno) {
  uint8_t m[DS_UDP_HDR4 + PONG_CTRL];
  size_t n = udp_hdr(m, DS_UDP_TAG, 4, DS_OP_DATA, DS_UDP_HDR4, our_qpn, DS_UDP_HDR4);
  n += pong(m + n, OP_LOGIN, seqno);
  udp_send(m, n);
}

// A valid login as a UD SEND (send slot 7).
static void send_ud_login(uint8_t seqno) {
  uint8_t* m = sbuf + 7 * DS_SLOT;
  size_t n = ds_hdr(m, 4, DS_HDR4);
  n += pong(m + n, OP_LOGIN, seqno);
  ud_send(7, (uint32_t)n, UDP_QKEY, "the UD login");
}

// Sends a login (again each second) until its echo (and, if need_ctrl, a
// CTRL after it) arrives, 5 s at most. Returns the seconds it took or -1;
// *tries: how many were sent.
static double await_login(uint8_t seqno, int ud, int need_ctrl, int* tries) {
  double start = now(), next = start;
  uint64_t ctrls_before = ctrls;
  *tries = 0;
  while (now() - start < 5) {
    if (now() >= next && *tries < 5) {
      if (ud)
        send_ud_login(seqno);
      else
        send_udp_login(seqno);
      ++*tries;
      next = now() + 1;
    }
    pump(1);
    if (echoed[seqno] && (!need_ctrl || ctrls > ctrls_before)) return now() - start;
  }
  return -1;
}

// Junk that the server took: its name, or NULL.
static const char* junk_taken(void) {
  for (int i = 0; i < 16; i++)
    if (echoed[SEQ_JUNK + i]) return junk_names[i] ? junk_names[i] : "junk";
  return NULL;
}

// One junk datagram over UDP, counted.
static int malformed;
static void junk(const uint8_t* p, size_t len) {
  udp_send(p, len);
  malformed++;
}

// Why the server's answers are wrong (exit 5), or NULL.
static const char* wrong(char* buf, size_t size, int replies_are_wrong) {
  const char* taken = junk_taken();
  if (bad[0]) return bad;
  if (taken) {
    snprintf(buf, size, "it took junk: %s", taken);
    return buf;
  }
  if (replies_are_wrong && others) {
    snprintf(buf, size, "a reply to junk: %s", other);
    return buf;
  }
  return NULL;
}

static int run_udp(void) {
  uint8_t m[3000] = {0};
  // Malformed headers, each naming our real QPN, a junk login behind it.
  junk(m, 0);
  size_t n = udp_hdr(m, DS_UDP_TAG, 4, DS_OP_DATA, DS_UDP_HDR4, our_qpn, DS_UDP_HDR4);
  for (size_t k = 1; k < n; k++) junk(m, k);  // 1..15 bytes of a valid header
  n = udp_hdr(m, DS_UDP_TAG - 1, 4, DS_OP_DATA, DS_UDP_HDR4, our_qpn, DS_UDP_HDR4);
  junk(m, n + pong(m + n, OP_LOGIN, SEQ_JUNK + 0));
  n = udp_hdr(m, DS_UDP_TAG, 4, DS_OP_DATA, DS_UDP_HDR6, our_qpn, DS_UDP_HDR6);
  junk(m, n + pong(m + n, OP_LOGIN, SEQ_JUNK + 1));
  n = udp_hdr(m, DS_UDP_TAG, 6, DS_OP_DATA, DS_UDP_HDR6, our_qpn, DS_UDP_HDR6);
  junk(m, n + pong(m + n, OP_LOGIN, SEQ_JUNK + 2));
  n = udp_hdr(m, DS_UDP_TAG, 4, DS_OP_DATA, 255, our_qpn, DS_UDP_HDR4);
  junk(m, n + pong(m + n, OP_LOGIN, SEQ_JUNK + 3));
  // CTRLs with a payload (a CTRL's payload is never delivered).
  n = udp_hdr(m, DS_UDP_TAG, 4, DS_OP_CTRL, DS_UDP_HDR4, BOGUS_QPN, DS_UDP_HDR4);
  junk(m, n + pong(m + n, OP_LOGIN, SEQ_JUNK + 4));
  n = udp_hdr(m, DS_UDP_TAG, 4, DS_OP_CTRL, DS_UDP_HDR4, 0, DS_UDP_HDR4);
  junk(m, n + pong(m + n, OP_LOGIN, SEQ_JUNK + 5));
  // 3,000 bytes: a valid header (QPN 0xffffff) and a data message, then
  // plain bytes.
  memset(m, 0x5a, sizeof m);
  n = udp_hdr(m, DS_UDP_TAG, 4, DS_OP_DATA, DS_UDP_HDR4, BOGUS_QPN, DS_UDP_HDR4);
  pong(m + n, OP_DATA, 0);
  junk(m, sizeof m);
  memset(m, 0xaa, sizeof m);
  junk(m, sizeof m);
  drain(1, 3);  // (a server may resolve a route for each new QPN, as rdma-core does)
  uint64_t ctrl_junk = ctrls;
  // The burst: 64-byte udpong data messages from QPN 0xffffff.
  n = udp_hdr(m, DS_UDP_TAG, 4, DS_OP_DATA, DS_UDP_HDR4, BOGUS_QPN, DS_UDP_HDR4);
  memset(m + n, 0x5a, 64);
  pong(m + n, OP_DATA, 0);
  for (int i = 0; i < BURST; i++) {
    udp_send(m, n + 64);
    if (i % 64 == 0) pump(0);
  }
  // A valid header alone: an empty payload (after data messages: a server
  // that hands udpong 0 bytes makes it act again on the last of those,
  // which has no answer).
  junk(m, DS_UDP_HDR4);
  drain(0.5, 6);
  uint64_t ctrl_abuse = ctrls;

  int tries = 0;
  double took = await_login(SEQ_UDP_LOGIN, 0, 1, &tries);
  char what[400], why[200];
  snprintf(what, sizeof what,
           "%s; %d junk datagrams (%llu CTRL back), %d bogus-QPN DATA (%llu CTRL back), %llu other answers%s%s; "
           "then a login from our QPN 0x%x",
           warm_note(), malformed, (unsigned long long)ctrl_junk, BURST, (unsigned long long)(ctrl_abuse - ctrl_junk),
           (unsigned long long)others, other[0] ? ", first: " : "", other, our_qpn);
  const char* w = wrong(why, sizeof why, 0);
  if (w) {
    printf("dgram-hostile: udp: %s; the server answered WRONGLY: %s\n", what, w);
    return 5;
  }
  if (took < 0) {
    printf("dgram-hostile: udp: %s; the server did NOT answer within 5 s (%d sent; a CTRL: %s; the echo: %s)\n", what,
           tries, ctrls > ctrl_abuse ? "yes" : "no", echoed[SEQ_UDP_LOGIN] ? "yes" : "no");
    return 4;
  }
  printf("dgram-hostile: udp: %s; the server answered: a CTRL (its QPN 0x%x) and the echo over %s, %.2f s after (%d sent)\n",
         what, server_qpn, via_name(echoed[SEQ_UDP_LOGIN]), took, tries);
  return 0;
}

static int run_ud(void) {
  int tries = 0;
  double took = await_login(SEQ_UD_FIRST, 0, 1, &tries);
  if (took < 0 || bad[0]) {
    printf("dgram-hostile: ud: the first login over UDP (our QPN 0x%x, before any abuse): %s%s (%llu CTRL, %d sent)\n",
           our_qpn, bad[0] ? "a wrong answer: " : "no CTRL and echo within 5 s", bad, (unsigned long long)ctrls, tries);
    return bad[0] ? 5 : 6;
  }
  unsigned first_via = echoed[SEQ_UD_FIRST];
  uint64_t others_before = others;

  // Junk as UD SENDs (slot 0), each a login behind the header.
  uint8_t* m = sbuf;
  memset(m, 0, DS_SLOT);
  ds_hdr(m, 9, DS_HDR4);
  pong(m + DS_HDR4, OP_LOGIN, SEQ_JUNK + 6);
  ud_send(0, DS_HDR4 + PONG_CTRL, UDP_QKEY, "UD version 9");
  ds_hdr(m, 4, 0);  // a server reading its payload at 0 would see op 4 (end), and answer
  pong(m + DS_HDR4, OP_LOGIN, SEQ_JUNK + 7);
  ud_send(0, DS_HDR4 + PONG_CTRL, UDP_QKEY, "UD length 0");
  ds_hdr(m, 4, 24);  // a login where either length would put it
  pong(m + 24, OP_LOGIN, SEQ_JUNK + 8);
  pong(m + DS_HDR4, OP_LOGIN, SEQ_JUNK + 8);
  ud_send(0, 24 + PONG_CTRL, UDP_QKEY, "UD version 4 length 24");
  ds_hdr(m, 4, DS_HDR4);  // its first 4 bytes: version 4, length 8, our port
  ud_send(0, 4, UDP_QKEY, "a 4-byte UD message");
  memset(m, 0x5a, DS_SLOT);
  ds_hdr(m, 4, DS_HDR4);
  pong(m + DS_HDR4, OP_DATA, 0);
  ud_send(0, DS_SLOT, UDP_QKEY, "a 2048-byte UD message");
  // As large as the port's MTU carries (slots 0 and 1): more than the
  // 2,048-byte slot rdma-core's receivers post, a receive that would fail
  // a QP whose buffers are that small.
  struct ibv_port_attr pa;
  uint32_t big = 0;
  if (ibv_query_port(id->verbs, id->port_num, &pa) == 0) big = 128u << pa.active_mtu;
  if (big > DS_SLOT) {
    if (big > 2 * DS_SLOT) big = 2 * DS_SLOT;
    memset(m, 0x5a, big);
    ds_hdr(m, 4, DS_HDR4);
    pong(m + DS_HDR4, OP_DATA, 0);
    ud_send(0, big, UDP_QKEY, "an MTU-sized UD message");
  }

  // The flood: data messages of 64 bytes (slot 1) as fast as our send
  // queue takes them, 8 s at most.
  m = sbuf + DS_SLOT;
  memset(m, 0x5a, DS_SLOT);
  ds_hdr(m, 4, DS_HDR4);
  pong(m + DS_HDR4, OP_DATA, 0);
  int posted = 0;
  double deadline = now() + 8;
  while (posted < FLOOD && now() < deadline) {
    int r = ud_post(1, DS_HDR4 + 64, UDP_QKEY);
    if (r == 0) {
      posted++;
    } else if (r == ENOMEM || r == EAGAIN) {
      pump(0);
    } else {
      setup_fail("ibv_post_send (flood)", r);
    }
  }
  ud_complete(3, "the flood");
  drain(0.5, 2);

  // A valid login under the wrong Q_Key (slot 2).
  m = sbuf + 2 * DS_SLOT;
  ds_hdr(m, 4, DS_HDR4);
  pong(m + DS_HDR4, OP_LOGIN, SEQ_WRONG_QKEY);
  ud_send(2, DS_HDR4 + PONG_CTRL, WRONG_QKEY, "UD Q_Key 0x11111111");
  drain(0.3, 1);

  took = await_login(SEQ_UD_FINAL, 1, 0, &tries);
  char what[400];
  snprintf(what, sizeof what,
           "%s; first login answered (CTRL: QPN 0x%x, echo over %s); UD junk (version 9, length 0, v4 length 24, 4 "
           "bytes, 2048 bytes, %u bytes), %d of %d data messages, a login under Q_Key 0x11111111; then a UD login",
           warm_note(), server_qpn, via_name(first_via), big, posted, FLOOD);
  char why[200];
  const char* w = wrong(why, sizeof why, others > others_before);
  if (w) {
    printf("dgram-hostile: ud: %s; the server answered WRONGLY: %s\n", what, w);
    return 5;
  }
  if (took < 0) {
    printf("dgram-hostile: ud: %s; the server did NOT answer within 5 s (%d sent)\n", what, tries);
    return 4;
  }
  if (!(echoed[SEQ_UD_FINAL] & 2)) {
    printf("dgram-hostile: ud: %s; the server answered WRONGLY: the echo came over UDP, though it knows our QPN\n", what);
    return 5;
  }
  printf("dgram-hostile: ud: %s; the server answered: the echo as a UD message, %.2f s after (%d sent)\n", what, took,
         tries);
  return 0;
}

int main(int argc, char** argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  char* end = NULL;
  long port = argc == 5 ? strtol(argv[3], &end, 10) : 0;
  if (argc != 5 || !end || *end || port <= 0 || port > 65535 || (strcmp(argv[4], "udp") && strcmp(argv[4], "ud"))) {
    fprintf(stderr, "usage: %s LOCAL_ADDR SERVER_ADDR PORT udp|ud\n", argv[0]);
    return 2;
  }
  mode = argv[4];
  signal(SIGALRM, on_alarm);
  alarm(30);
  parse_addr(argv[1], 0, &local_sa);
  parse_addr(argv[2], (uint16_t)port, &server_sa);
  setup();
  warm = warm_up();
  if (!strcmp(mode, "udp")) return run_udp();
  resolve_server();
  return run_ud();
}
