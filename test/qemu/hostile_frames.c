/* The hostile host of qemu-rxe-hostile (docs/qemu-test.md): run in the QEMU
 * guest (built static: the busybox initramfs has no C library of its own),
 * it writes hand-made Ethernet frames on the guest's RoCE NIC through an
 * AF_PACKET raw socket, at ibd's Ethernet (RoCEv2) port, while a good RC
 * connection (the guest's rping against the host's) runs on the same cable.
 *
 *   hostile_frames IFNAME HOST_MAC RQPN SQ_PSN
 *
 * IFNAME   the guest's RoCE NIC (its MTU raised to 9000 for the giants)
 * HOST_MAC the MAC of ibd's port (and of its netdev roce0)
 * RQPN     the QPN of the host's end of the connection (`rdma res show qp`'s
 *          rqpn of the guest's rping QP)
 * SQ_PSN   the guest QP's next send PSN (its sq-psn): the PSN the host's
 *          responder expects, give or take the requests in flight
 *
 * The guest is 198.18.80.2, the host 198.18.80.1. Every RoCEv2 frame made
 * here has a UDP source port in 0xBA00..0xBAFF (the good connection's are
 * in 0xC000..0xFFFF: IBA A17.3.1, rxe's and simhca's choice), so that the
 * capture tells them apart. Each class's frames are sent in a burst; a
 * line "HOSTILE <class> <frames sent> <bytes> <milliseconds>" per class and
 * "HOSTILE total <frames> <bytes>" at the end say what left the socket.
 * Exit status 0 unless the socket could not be opened or sends failed.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum { kMaxFrame = 9014, kRoceUdpPort = 4791, kSportBase = 0xBA00 };

static int sock = -1;
static struct sockaddr_ll dst_ll;
static uint8_t host_mac[6], own_mac[6];
static const uint8_t kHostIp[4] = {198, 18, 80, 1}, kGuestIp[4] = {198, 18, 80, 2};
static unsigned long total_frames, total_bytes, send_failures;
static uint32_t rng = 0x2545F491u;

static uint32_t next_random(void) { /* xorshift32 */
  rng ^= rng << 13;
  rng ^= rng >> 17;
  rng ^= rng << 5;
  return rng;
}

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

/* One frame out. A full transmit queue (ENOBUFS) is waited out, bounded. */
static int send_frame(const uint8_t* f, size_t len) {
  for (int tries = 0; tries < 2000; ++tries) {
    if (sendto(sock, f, len, 0, (const struct sockaddr*)&dst_ll, sizeof dst_ll) == (ssize_t)len) {
      ++total_frames;
      total_bytes += len;
      return 1;
    }
    if (errno != ENOBUFS && errno != EAGAIN) break;
    usleep(500);
  }
  if (send_failures++ < 5) fprintf(stderr, "hostile_frames: sending %zu bytes: %s\n", len, strerror(errno));
  return 0;
}

static void put16(uint8_t* p, unsigned v) { p[0] = (uint8_t)(v >> 8), p[1] = (uint8_t)v; }
static void put24(uint8_t* p, uint32_t v) { p[0] = (uint8_t)(v >> 16), p[1] = (uint8_t)(v >> 8), p[2] = (uint8_t)v; }

/* CRC-32 as zlib's crc32(): reflected polynomial 0xEDB88320, register
 * preset to all ones, result complemented; chainable. */
static uint32_t crc32_update(uint32_t crc, const uint8_t* p, size_t n) {
  uint32_t c = ~crc;
  while (n--) {
    c ^= *p++;
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
  }
  return ~c;
}

/* RoCEv2's ICRC (IBA A17.4.2, docs/wire.md "RoCEv2"): the IBA ICRC over
 * 8 bytes of ones standing for the LRH, then the IPv4 header, UDP header
 * and BTH with their variant fields as ones (IPv4 TOS, TTL and header
 * checksum; UDP checksum; BTH resv8a), then the rest of the packet up to
 * the ICRC. It goes on the wire least significant byte first. */
static uint32_t roce_icrc_ipv4(const uint8_t* ip, size_t len) {
  static const uint8_t ones[8] = {0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF};
  uint8_t head[20 + 8 + 12];
  size_t n = len < sizeof head ? len : sizeof head;
  memcpy(head, ip, n);
  head[1] = head[8] = head[10] = head[11] = 0xFF;
  head[20 + 6] = head[20 + 7] = 0xFF;
  head[20 + 8 + 4] = 0xFF;
  uint32_t c = crc32_update(0, ones, sizeof ones);
  c = crc32_update(c, head, n);
  return crc32_update(c, ip + n, len - n);
}

/* RFC 1071: the Internet checksum over n bytes, starting from sum. */
static uint16_t inet_csum(const uint8_t* p, size_t n, uint32_t sum) {
  for (size_t i = 0; i + 1 < n; i += 2) sum += (uint32_t)(p[i] << 8 | p[i + 1]);
  if (n & 1) sum += (uint32_t)p[n - 1] << 8;
  while (sum >> 16) sum = (sum & 0xFFFF) + (sum >> 16);
  return (uint16_t)~sum;
}

static size_t eth_header(uint8_t* f, const uint8_t* dmac, unsigned type) {
  memcpy(f, dmac, 6);
  memcpy(f + 6, own_mac, 6);
  put16(f + 12, type);
  return 14;
}

/* RFC 791: a 20-byte IPv4 header (DF, TTL 64, no options), checksum set. */
static void ipv4_header(uint8_t* ip, unsigned total, unsigned proto, const uint8_t* src, const uint8_t* dst) {
  memset(ip, 0, 20);
  ip[0] = 0x45;
  put16(ip + 2, total);
  put16(ip + 4, next_random() & 0xFFFF);
  put16(ip + 6, 0x4000);
  ip[8] = 64;
  ip[9] = (uint8_t)proto;
  memcpy(ip + 12, src, 4);
  memcpy(ip + 16, dst, 4);
  put16(ip + 10, inet_csum(ip, 20, 0));
}

struct Roce {
  const uint8_t* src_ip; /* default: the guest's */
  const uint8_t* dst_ip; /* default: the host's */
  unsigned sport;        /* UDP source port */
  uint32_t qpn, psn;
  size_t payload;   /* bytes after the BTH before the pad */
  int bad_icrc;     /* ICRC off by one bit */
  int tver;         /* BTH.TVer (0: IBA 9.2) */
  int ud;           /* a UD SEND Only (opcode 0x64) with a DETH from QP1, Q_Key 0x80010000 */
  const uint8_t* data; /* the payload (default: a pattern) */
};

/* An RC SEND Only (IBA 9.2 opcode 0x04), or with `ud` a UD SEND Only
 * (0x64, a DETH: IBA 9.3.2) in RoCEv2 over IPv4 (IBA A17.4), P_Key 0xFFFF,
 * AckReq set. Returns the frame's length. */
static size_t roce_frame(uint8_t* f, const struct Roce* r) {
  size_t pad = (4 - r->payload % 4) % 4;
  const size_t hdrs = r->ud ? 12 + 8 : 12; /* BTH (+ DETH) */
  size_t tl = hdrs + r->payload + pad;     /* BTH .. pad */
  size_t udp_len = 8 + tl + 4;
  size_t at = eth_header(f, host_mac, 0x0800);
  uint8_t* ip = f + at;
  ipv4_header(ip, 20 + (unsigned)udp_len, 17, r->src_ip ? r->src_ip : kGuestIp, r->dst_ip ? r->dst_ip : kHostIp);
  uint8_t* udp = ip + 20;
  put16(udp, r->sport);
  put16(udp + 2, kRoceUdpPort);
  put16(udp + 4, (unsigned)udp_len);
  put16(udp + 6, 0); /* A17.4.1: the ICRC covers the packet, the checksum is 0 */
  uint8_t* bth = udp + 8;
  bth[0] = r->ud ? 0x64 : 0x04;
  bth[1] = (uint8_t)((pad << 4) | (r->tver & 0xF));
  put16(bth + 2, 0xFFFF);
  bth[4] = 0;
  put24(bth + 5, r->qpn & 0xFFFFFF);
  bth[8] = 0x80;
  put24(bth + 9, r->psn & 0xFFFFFF);
  if (r->ud) { /* DETH: the GSI's Q_Key (IBA 13.5.1), source QP 1 */
    put16(bth + 12, 0x8001);
    put16(bth + 14, 0x0000);
    bth[16] = 0;
    put24(bth + 17, 1);
  }
  for (size_t i = 0; i < r->payload; ++i) bth[hdrs + i] = r->data ? r->data[i] : (uint8_t)('h' + i % 16);
  memset(bth + hdrs + r->payload, 0, pad);
  uint32_t icrc = roce_icrc_ipv4(ip, 20 + 8 + tl) ^ (r->bad_icrc ? 1u : 0u);
  uint8_t* ic = bth + tl;
  ic[0] = (uint8_t)icrc, ic[1] = (uint8_t)(icrc >> 8), ic[2] = (uint8_t)(icrc >> 16), ic[3] = (uint8_t)(icrc >> 24);
  return at + 20 + udp_len;
}

/* IPv4/UDP to the host's MAC and IP, to port dport, with n bytes of data
 * (the discard service, RFC 863, for the giants). */
static size_t udp_frame(uint8_t* f, unsigned dport, size_t n, int garbage) {
  size_t at = eth_header(f, host_mac, 0x0800);
  ipv4_header(f + at, (unsigned)(20 + 8 + n), 17, kGuestIp, kHostIp);
  uint8_t* udp = f + at + 20;
  put16(udp, kSportBase + 0xF0);
  put16(udp + 2, dport);
  put16(udp + 4, (unsigned)(8 + n));
  put16(udp + 6, 0);
  for (size_t i = 0; i < n; ++i) udp[8 + i] = garbage ? (uint8_t)next_random() : (uint8_t)i;
  return at + 28 + n;
}

/* RFC 826: who has 198.18.80.1, tell 198.18.80.2 (the guest's true MAC and
 * address, so that the host's neighbour table stays right), broadcast. */
static size_t arp_request(uint8_t* f) {
  static const uint8_t bcast[6] = {0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF};
  size_t at = eth_header(f, bcast, 0x0806);
  uint8_t* a = f + at;
  put16(a, 1);
  put16(a + 2, 0x0800);
  a[4] = 6, a[5] = 4;
  put16(a + 6, 1);
  memcpy(a + 8, own_mac, 6);
  memcpy(a + 14, kGuestIp, 4);
  memset(a + 18, 0, 6);
  memcpy(a + 24, kHostIp, 4);
  return at + 28;
}

/* The IPv6 link-local address of a MAC (RFC 4291 2.5.1, modified EUI-64). */
static void link_local(uint8_t* a, const uint8_t* mac) {
  memset(a, 0, 16);
  a[0] = 0xFE, a[1] = 0x80;
  a[8] = mac[0] ^ 0x02, a[9] = mac[1], a[10] = mac[2], a[11] = 0xFF, a[12] = 0xFE;
  a[13] = mac[3], a[14] = mac[4], a[15] = mac[5];
}

/* RFC 4861 4.3: a Neighbor Solicitation from the guest's link-local
 * address for the host port's (the link-local address of roce0), to its
 * solicited-node group (RFC 4291 2.7.1) at 33:33 + its last 32 bits (RFC
 * 2464 7), with the source link-layer address option. */
static size_t nd_solicitation(uint8_t* f) {
  uint8_t target[16], src[16], dst[16] = {0xFF, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01, 0xFF};
  link_local(target, host_mac);
  link_local(src, own_mac);
  memcpy(dst + 13, target + 13, 3);
  uint8_t dmac[6] = {0x33, 0x33, dst[12], dst[13], dst[14], dst[15]};
  size_t at = eth_header(f, dmac, 0x86DD);
  uint8_t* ip = f + at;
  const unsigned icmp_len = 8 + 16 + 8;
  memset(ip, 0, 40);
  ip[0] = 0x60;
  put16(ip + 4, icmp_len);
  ip[6] = 58;  /* ICMPv6 */
  ip[7] = 255; /* RFC 4861 7.1.1: hop limit 255 */
  memcpy(ip + 8, src, 16);
  memcpy(ip + 24, dst, 16);
  uint8_t* m = ip + 40;
  memset(m, 0, icmp_len);
  m[0] = 135;
  memcpy(m + 8, target, 16);
  m[24] = 1, m[25] = 1; /* source link-layer address, 8 bytes */
  memcpy(m + 26, own_mac, 6);
  /* RFC 8200 8.1: the checksum over the pseudo-header and the message. */
  uint32_t sum = 0;
  for (int i = 0; i < 32; i += 2) sum += (uint32_t)(ip[8 + i] << 8 | ip[9 + i]);
  sum += icmp_len + 58;
  put16(m + 2, inet_csum(m, icmp_len, sum));
  return at + 40 + icmp_len;
}

/* A CM REQ (IBA 12.6.5; offsets from the MAD's start) from the guest to
 * the host's rping listener (the RDMA CM's TCP port space, port 7174:
 * service ID 0x0106 << 16 | 7174, IBA A11.3.1) with an RDMA CM header
 * (rdma-core's struct cma_hdr) from 198.18.80.1:0xBA10 to 198.18.80.1:7174,
 * whose Primary Local Port GID claims the IPv4-mapped GID of `claimed`
 * (the host's own address, or a third host's) while the frame's IP source
 * is the guest's. RC, LIDs 0xFFFF (RoCE), path MTU 1024. */
static void cm_req(uint8_t* m, uint32_t n, const uint8_t* claimed) {
  memset(m, 0, 256);
  m[0] = 1, m[1] = 0x07, m[2] = 2, m[3] = 0x03; /* CM class 2, Send */
  put16(m + 8, 0xBA5E), put16(m + 10, 0), put16(m + 12, (unsigned)(n >> 16)), put16(m + 14, n & 0xFFFF);
  put16(m + 16, 0x0010); /* REQ */
  put16(m + 24, 0xBA00), put16(m + 26, n & 0xFFFF); /* Local Communication ID */
  put16(m + 36, 0x0106), put16(m + 38, 7174);        /* Service ID */
  memcpy(m + 40, own_mac, 6);                         /* Local CA GUID (any) */
  put24(m + 56, 0x1000 + n), m[59] = 1;               /* Local QPN, responder resources */
  m[63] = 1;                                          /* initiator depth */
  m[67] = (uint8_t)(20 << 3);                         /* remote CM response timeout, RC */
  put24(m + 68, 0x123456), m[71] = (uint8_t)(20 << 3 | 7);
  put16(m + 72, 0xFFFF), m[74] = (uint8_t)(3 << 4 | 7), m[75] = (uint8_t)(15 << 4);
  put16(m + 76, 0xFFFF), put16(m + 78, 0xFFFF); /* LIDs: none on RoCE */
  static const uint8_t v4mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF};
  memcpy(m + 80, v4mapped, 12), memcpy(m + 92, claimed, 4); /* Primary Local Port GID */
  memcpy(m + 96, v4mapped, 12), memcpy(m + 108, kHostIp, 4);
  m[117] = 64, m[119] = (uint8_t)(18 << 3); /* hop limit, local ACK timeout */
  uint8_t* h = m + 164;                     /* private data: struct cma_hdr */
  h[1] = 0x40, put16(h + 2, 0xBA10);
  memcpy(h + 4 + 12, claimed, 4), memcpy(h + 20 + 12, kHostIp, 4);
}

static void report(const char* cls, unsigned long f0, unsigned long b0, double t0) {
  printf("HOSTILE %s %lu %lu %.0f\n", cls, total_frames - f0, total_bytes - b0, now_ms() - t0);
  fflush(stdout);
}

/* CLASS(name, statements...): runs them and reports what they sent. */
#define CLASS(name, ...)                                 \
  do {                                                   \
    unsigned long f0_ = total_frames, b0_ = total_bytes; \
    double t0_ = now_ms();                               \
    __VA_ARGS__;                                         \
    report(name, f0_, b0_, t0_);                         \
  } while (0)

static int parse_mac(const char* s, uint8_t* mac) {
  unsigned v[6];
  if (sscanf(s, "%x:%x:%x:%x:%x:%x", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5]) != 6) return 0;
  for (int i = 0; i < 6; ++i) mac[i] = (uint8_t)v[i];
  return 1;
}

int main(int argc, char** argv) {
  if (argc != 5 || !parse_mac(argv[2], host_mac)) {
    fprintf(stderr, "usage: %s IFNAME HOST_MAC RQPN SQ_PSN\n", argv[0]);
    return 2;
  }
  const uint32_t rqpn = (uint32_t)strtoul(argv[3], NULL, 0) & 0xFFFFFF;
  const uint32_t sq_psn = (uint32_t)strtoul(argv[4], NULL, 0) & 0xFFFFFF;
  sock = socket(AF_PACKET, SOCK_RAW, 0); /* protocol 0: send only, receive nothing */
  if (sock < 0) {
    perror("hostile_frames: socket(AF_PACKET)");
    return 1;
  }
  struct ifreq ifr;
  memset(&ifr, 0, sizeof ifr);
  snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "%s", argv[1]);
  if (ioctl(sock, SIOCGIFINDEX, &ifr) < 0) {
    perror("hostile_frames: SIOCGIFINDEX");
    return 1;
  }
  dst_ll.sll_family = AF_PACKET;
  dst_ll.sll_ifindex = ifr.ifr_ifindex;
  dst_ll.sll_halen = 6;
  if (ioctl(sock, SIOCGIFHWADDR, &ifr) < 0) {
    perror("hostile_frames: SIOCGIFHWADDR");
    return 1;
  }
  memcpy(own_mac, ifr.ifr_hwaddr.sa_data, 6);
  memcpy(dst_ll.sll_addr, host_mac, 6);

  static uint8_t f[kMaxFrame];
  static const uint8_t kForeignIp[4] = {198, 18, 80, 77}, kOtherHostIp[4] = {198, 18, 80, 99};
  /* A QPN the host has not made (simhca numbers its QPs from the bottom). */
  const uint32_t no_qpn = rqpn == 0xABCDE ? 0xABCDF : 0xABCDE;

  /* 1. A wrong ICRC, to the connection's QP from the right addresses and at
   * the expected PSN: rx_bad_icrc (docs/simhca.md §16.3 step 2). */
  CLASS("bad_icrc", for (int i = 0; i < 200; ++i) {
    struct Roce r = {.sport = kSportBase + 1, .qpn = rqpn, .psn = sq_psn, .payload = 64, .bad_icrc = 1};
    send_frame(f, roce_frame(f, &r));
  });
  /* 2. A right ICRC to a QPN that does not exist: rx_no_qp (IBA 9.6.1.5). */
  CLASS("no_qp", for (int i = 0; i < 200; ++i) {
    struct Roce r = {.sport = kSportBase + 2, .qpn = no_qpn, .psn = (uint32_t)i, .payload = 64};
    send_frame(f, roce_frame(f, &r));
  });
  /* 3. To the connection's QP at its expected PSN, but from an address that
   * is not its peer's (another IP, another port): rx_bad_addr (§16.3 step
   * 4, as rxe's address check); and to QP0, which an Ethernet port lacks. */
  CLASS("bad_addr", for (int i = 0; i < 200; ++i) {
    struct Roce r = {.src_ip = kForeignIp, .sport = kSportBase + 3, .qpn = rqpn, .psn = sq_psn + (uint32_t)(i % 4),
                     .payload = 64};
    send_frame(f, roce_frame(f, &r));
  });
  CLASS("qp0", for (int i = 0; i < 50; ++i) {
    struct Roce r = {.sport = kSportBase + 4, .qpn = 0, .psn = (uint32_t)i, .payload = 256};
    send_frame(f, roce_frame(f, &r));
  });
  /* 4. From the peer's own addresses to the connection's QP, a right ICRC,
   * but a PSN 64 Ki and more behind the expected one: duplicates (IBA
   * 9.7.5.1.1), answered by an ACK, never executed. */
  CLASS("old_psn", for (int i = 0; i < 100; ++i) {
    struct Roce r = {.sport = kSportBase + 5, .qpn = rqpn, .psn = sq_psn - 0x10000u - (uint32_t)i, .payload = 64};
    send_frame(f, roce_frame(f, &r));
  });
  /* 5. Runts and malformed headers (§16.3 step 2: rx_malformed), 25 each. */
  CLASS("malformed", for (int i = 0; i < 25; ++i) {
    size_t n;
    struct Roce r = {.sport = kSportBase + 6, .qpn = no_qpn, .psn = (uint32_t)i, .payload = 32};
    n = eth_header(f, host_mac, 0x0800); /* an Ethernet header and nothing */
    send_frame(f, n);
    n = roce_frame(f, &r); /* 6 bytes of an IPv4 header */
    send_frame(f, 14 + 6);
    n = roce_frame(f, &r); /* the IPv4 header, total length 20, no UDP header */
    put16(f + 16, 20);
    f[24] = f[25] = 0;
    put16(f + 24, inet_csum(f + 14, 20, 0));
    send_frame(f, 14 + 20);
    n = roce_frame(f, &r); /* UDP to 4791 without a BTH */
    put16(f + 16, 28);
    f[24] = f[25] = 0;
    put16(f + 24, inet_csum(f + 14, 20, 0));
    put16(f + 38, 8);
    send_frame(f, 14 + 28);
    n = roce_frame(f, &r); /* IPv4 total length past the frame's end */
    put16(f + 16, 400);
    f[24] = f[25] = 0;
    put16(f + 24, inet_csum(f + 14, 20, 0));
    send_frame(f, n);
    n = roce_frame(f, &r); /* a bad IPv4 header checksum */
    f[24] ^= 0x5A;
    send_frame(f, n);
    n = roce_frame(f, &r); /* UDP length that disagrees with IP's */
    put16(f + 38, 20);
    send_frame(f, n);
    r.tver = 1; /* BTH.TVer 1 (IBA 9.2 defines 0) */
    n = roce_frame(f, &r);
    send_frame(f, n);
  });
  /* 6. UDP to 4791 with random bytes: a BTH-shaped mess whose ICRC is
   * wrong (or whose lengths or TVer are): bad ICRC or malformed. */
  CLASS("garbage", for (int i = 0; i < 200; ++i) {
    size_t n = udp_frame(f, kRoceUdpPort, 16 + 4 * (next_random() % 60), 1);
    send_frame(f, n);
  });
  /* 7. Giants on the guest's 9000-byte MTU: UDP to the discard port that
   * ibd's netdev drops as longer than roce0's MTU (netdev.drop_rx_too_big);
   * RoCEv2 of the same sizes to no QP (rx_no_qp; the longer ones are
   * rx_malformed, below) and with a bad ICRC (rx_bad_icrc); and 9,014-byte frames, longer than the cable carries
   * (docs/cables.md: dropped by the cable's receive check). */
  CLASS("giant_udp", for (int i = 0; i < 10; ++i) {
    send_frame(f, udp_frame(f, 9, 3000 - 42, 0));
    send_frame(f, udp_frame(f, 9, 8190 - 42, 0));
  });
  CLASS("giant_no_qp", for (int i = 0; i < 10; ++i) {
    struct Roce r = {.sport = kSportBase + 7, .qpn = no_qpn, .psn = (uint32_t)i, .payload = 2998 - 58};
    send_frame(f, roce_frame(f, &r));
  });
  /* 8,190 bytes of valid RoCEv2: more than any InfiniBand packet holds
   * (IBA 7.7.8: LRH.PktLen, 11 bits of words), so malformed. */
  CLASS("giant_roce", for (int i = 0; i < 5; ++i) {
    struct Roce r = {.sport = kSportBase + 7, .qpn = no_qpn, .psn = (uint32_t)i, .payload = 8190 - 58};
    send_frame(f, roce_frame(f, &r));
  });
  CLASS("giant_bad_icrc", for (int i = 0; i < 5; ++i) {
    struct Roce r = {.sport = kSportBase + 8, .qpn = rqpn, .psn = sq_psn, .payload = 2998 - 58, .bad_icrc = 1};
    send_frame(f, roce_frame(f, &r));
    r.payload = 8190 - 58;
    send_frame(f, roce_frame(f, &r));
  });
  CLASS("giant_9014", for (int i = 0; i < 5; ++i) send_frame(f, udp_frame(f, 9, 9014 - 42, 0)));
  /* 8. Valid RoCEv2 for another host of the LAN (198.18.80.99) at the
   * port's MAC: not the port's GID, so the host stack's (§16.5), which
   * drops it (not its address). */
  CLASS("not_our_ip", for (int i = 0; i < 50; ++i) {
    struct Roce r = {.dst_ip = kOtherHostIp, .sport = kSportBase + 9, .qpn = rqpn, .psn = sq_psn, .payload = 64};
    send_frame(f, roce_frame(f, &r));
  });
  /* 9. CM REQs from the guest to the host's rping listener that claim to
   * come from the host's own address (which the RDMA CM would take for a
   * local connection) or from a third host: the Primary Local Port GID is
   * not the frame's source, so ibd's CM refuses them with REJ 12 and
   * counts them (cm.port1.rej_foreign_gid; docs/cm.md "Security"). */
  CLASS("forged_req", for (uint32_t i = 0; i < 40; ++i) {
    static uint8_t mad[256];
    cm_req(mad, i, i % 2 ? kOtherHostIp : kHostIp);
    struct Roce r = {.sport = kSportBase + 10, .qpn = 1, .psn = i, .payload = 256, .ud = 1, .data = mad};
    send_frame(f, roce_frame(f, &r));
    usleep(2000); /* paced: QP1's receive ring is the target, not its depth */
  });
  /* 10. An ARP storm and an IPv6 neighbour discovery storm toward the host's
   * port, as fast as the guest sends. */
  CLASS("arp_storm", for (int i = 0; i < 5000; ++i) send_frame(f, arp_request(f)));
  CLASS("nd_storm", for (int i = 0; i < 5000; ++i) send_frame(f, nd_solicitation(f)));

  printf("HOSTILE total %lu %lu\n", total_frames, total_bytes);
  printf("HOSTILE failures %lu\n", send_failures);
  return send_failures ? 1 : 0;
}
