// A hostile rsocket peer against an rstream server (test rsockets,
// rsockets.sh runs it): it speaks rdma-core's rsocket wire format
// (librdmacm/rsocket.c of v44: the 40-byte rs_conn_data as CM private data,
// every message an RDMA WRITE WITH IMM whose imm is op << 29 | data) with
// the RDMA CM and verbs of Debian's headers (linked with our librdmacm.so.1
// and libibverbs.so.1), and breaks the protocol:
//  - version: the connect request's rs_conn_data has version 0x7f (rdma-core
//    checks version == 1 and rejects the request with rdma_reject).
//    Outcome: RDMA_CM_EVENT_REJECTED, exit 0; ESTABLISHED (the server took
//    it) exit 5.
//  - oversize: a valid rs_conn_data (version 1, credits = our receive queue
//    depth, 16; target_sgl = our own 2-entry REMOTE_WRITE array; data_buf =
//    a REMOTE_WRITE buffer), zero-length receives posted; once connected, a
//    DATA message (0 bytes written) whose imm claims 0x1FFFFFFF bytes, more
//    than the buffer the server advertised (and than 64 KiB, the largest
//    rsocket message), then 2,000 DATA messages claiming 1 byte each, 0
//    written, with no regard for credits.
//  - flood: the same connection, then a legitimate part (every message
//    within the credits the server granted, data really written where the
//    server's data_buf says): the 16-byte sync as 16 one-byte messages, the
//    server's sync answer awaited, then 100 x 16 bytes (rstream -C 100 -S 16:
//    the server reads them, then sends 100 x 16 bytes back). Our conn data
//    gave it 16 credits and we grant none again, so after its sync answer and
//    15 messages the server is blocked in rsend and reads nothing more. Then
//    2,000 one-byte DATA messages (1 byte written each, inside data_buf):
//    far more than its 384-odd credits or receive ring allow.
// After the abuse it waits (8 s at most) for the server to drop the
// connection: an RDMA_CM_EVENT_DISCONNECTED, or our sends (and the 0-byte
// RDMA WRITE probes it posts meanwhile) completing in error because the
// server's QP went away (retry exceeded, remote errors). Exit 0: dropped;
// exit 4: the server kept the connection. Exit 1: setup failed (no route,
// connect refused...), 2: usage, 3: took over 30 s (alarm).
// It prints one summary line, "hostile: MODE: ...", with what it saw.
//   rsocket_hostile ADDR PORT version|oversize|flood   (OPENIB_SOCKET set)
#define _GNU_SOURCE
#include <endian.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <netdb.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

// rdma-core's struct rs_sge and struct rs_conn_data (rsocket.c); in the
// conn data every field is big-endian.
struct rs_sge {
  uint64_t addr;
  uint32_t key;
  uint32_t length;
};
struct rs_conn_data {
  uint8_t version;
  uint8_t flags;
  uint16_t credits;
  uint8_t reserved[3];
  uint8_t target_iomap_size;
  struct rs_sge target_sgl;
  struct rs_sge data_buf;
};
_Static_assert(sizeof(struct rs_conn_data) == 40, "rs_conn_data is 40 bytes");
enum { RS_CONN_FLAG_IOMAP = 2, RS_OP_DATA = 0, RS_OP_SGL = 4 };
#define RS_IMM(op, data) (((uint32_t)(op) << 29) | ((uint32_t)(data) & 0x1FFFFFFF))

enum { RQ_DEPTH = 16, SQ_DEPTH = 256, SQ_MAX_OUT = 200, FLOOD = 2000 };
enum { DBUF_SIZE = 65536, SBUF_SIZE = 4096, TSGL_SIZE = 4096 };
#define RECV_TAG (1ULL << 63)

static const char* mode = "?";
static struct rdma_event_channel* channel;
static struct rdma_cm_id* id;
static struct ibv_pd* pd;
static struct ibv_cq* cq;
static struct ibv_mr *tsgl_mr, *dbuf_mr, *sbuf_mr;
static uint8_t *tsgl, *dbuf, *sbuf;
static struct rs_sge peer_data;      // the server's data_buf (host order)
static uint16_t peer_credits;        // the server's rq_size
static uint16_t sseq_no, sseq_comp;  // our DATA messages sent / the server's limit
static uint64_t data_off;            // bytes written into peer_data so far
static int outstanding;              // sends posted, not completed
static uint64_t send_ok, recv_data, recv_sgl, recv_other;
static enum ibv_wc_status first_error = IBV_WC_SUCCESS;
static int rnr_seen, disconnected, qp_broken;

static void on_alarm(int sig) {
  (void)sig;
  static const char msg[] = "hostile: timed out (30 s alarm)\n";
  if (write(2, msg, sizeof msg - 1) < 0) _exit(3);
  _exit(3);
}

static void setup_fail(const char* what, int err) {
  printf("hostile: %s: setup failed: %s: %s\n", mode, what, strerror(err));
  exit(1);
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

// The next CM event within ms milliseconds: its type, status and (for
// ESTABLISHED) the private data copied into pdata. 0, or -1 on timeout.
static int get_event(int ms, enum rdma_cm_event_type* type, int* status, void* pdata, size_t* plen) {
  struct pollfd p = {.fd = channel->fd, .events = POLLIN};
  int r = poll(&p, 1, ms);
  if (r <= 0) return -1;
  struct rdma_cm_event* ev;
  if (rdma_get_cm_event(channel, &ev)) return -1;
  *type = ev->event;
  *status = ev->status;
  if (pdata && plen) {
    size_t n = ev->param.conn.private_data ? ev->param.conn.private_data_len : 0;
    if (n > *plen) n = *plen;
    if (n) memcpy(pdata, ev->param.conn.private_data, n);
    *plen = n;
  }
  rdma_ack_cm_event(ev);
  return 0;
}

static void expect_event(enum rdma_cm_event_type want, const char* what) {
  enum rdma_cm_event_type t;
  int st;
  if (get_event(5000, &t, &st, NULL, NULL)) setup_fail(what, ETIMEDOUT);
  if (t != want) {
    printf("hostile: %s: setup failed: %s: %s (status %d)\n", mode, what, rdma_event_str(t), st);
    exit(1);
  }
}

static void post_recv(uint64_t n) {
  struct ibv_recv_wr wr = {.wr_id = RECV_TAG | n, .sg_list = NULL, .num_sge = 0}, *bad;
  int r = ibv_post_recv(id->qp, &wr, &bad);
  if (r && !qp_broken) setup_fail("ibv_post_recv", r);
}

// Completions so far: sends counted (the first error kept), receives
// counted by their op and posted again; CM events looked at.
static void poll_all(void) {
  struct ibv_wc wc[32];
  int n;
  while ((n = ibv_poll_cq(cq, 32, wc)) > 0) {
    for (int i = 0; i < n; i++) {
      if (wc[i].wr_id & RECV_TAG) {
        if (wc[i].status != IBV_WC_SUCCESS) continue;
        uint32_t imm = be32toh(wc[i].imm_data);
        if (wc[i].opcode == IBV_WC_RECV_RDMA_WITH_IMM && imm >> 29 == RS_OP_DATA) {
          recv_data++;
        } else if (wc[i].opcode == IBV_WC_RECV_RDMA_WITH_IMM && imm >> 29 == RS_OP_SGL) {
          recv_sgl++;
          sseq_comp = (uint16_t)imm;  // the server's new credit limit
        } else {
          recv_other++;
        }
        post_recv(wc[i].wr_id);
        continue;
      }
      outstanding--;
      if (wc[i].status == IBV_WC_SUCCESS) {
        send_ok++;
        continue;
      }
      qp_broken = 1;  // our QP is in error now: the rest flush
      if (wc[i].status == IBV_WC_RNR_RETRY_EXC_ERR) rnr_seen = 1;
      if (first_error == IBV_WC_SUCCESS) first_error = wc[i].status;
    }
  }
  struct pollfd p = {.fd = channel->fd, .events = POLLIN};
  while (!disconnected && poll(&p, 1, 0) == 1) {
    enum rdma_cm_event_type t;
    int st;
    if (get_event(0, &t, &st, NULL, NULL)) break;
    if (t == RDMA_CM_EVENT_DISCONNECTED) disconnected = 1;
  }
}

// Waits until fewer than max sends are outstanding (or deadline).
static int wait_outstanding(int max, double deadline) {
  for (;;) {
    poll_all();
    if (outstanding <= max) return 0;
    if (now() > deadline || qp_broken) return -1;
    usleep(200);
  }
}

// One RDMA WRITE (WITH IMM when with_imm) of len bytes of sbuf to the
// server's data_buf at offset off. 0, or the ibv_post_send error.
static int post_write(uint32_t len, uint64_t off, int with_imm, uint32_t imm) {
  static uint64_t seq;
  struct ibv_sge sge = {.addr = (uintptr_t)sbuf, .length = len, .lkey = sbuf_mr->lkey};
  struct ibv_send_wr wr = {0}, *bad;
  wr.wr_id = ++seq;
  wr.sg_list = len ? &sge : NULL;
  wr.num_sge = len ? 1 : 0;
  wr.opcode = with_imm ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.imm_data = htobe32(imm);
  wr.wr.rdma.remote_addr = peer_data.addr + off;
  wr.wr.rdma.rkey = peer_data.key;
  if (wait_outstanding(SQ_MAX_OUT, now() + 3)) return EAGAIN;
  int r = ibv_post_send(id->qp, &wr, &bad);
  if (!r) outstanding++;
  return r;
}

// A DATA message of len bytes (1..SBUF_SIZE) written at the next place of
// the server's data_buf, as rdma-core's rs_write_data does.
static int send_data(uint32_t len) {
  if (data_off + len > peer_data.length) return ENOSPC;
  memset(sbuf, 0x5a, len);
  int r = post_write(len, data_off, 1, RS_IMM(RS_OP_DATA, len));
  if (!r) {
    data_off += len;
    sseq_no++;
  }
  return r;
}

// Legitimate DATA messages: each one waits for a credit first.
static void send_legit(int count, uint32_t len) {
  for (int i = 0; i < count; i++) {
    double deadline = now() + 5;
    while ((uint16_t)(sseq_comp - sseq_no) == 0) {
      poll_all();
      if (now() > deadline) {
        printf("hostile: %s: no credit from the server within 5 s (%u sent, limit %u)\n", mode, sseq_no, sseq_comp);
        exit(1);
      }
      usleep(200);
    }
    int r = send_data(len);
    if (r) setup_fail("posting a legitimate message", r);
  }
  if (wait_outstanding(0, now() + 5) || first_error != IBV_WC_SUCCESS) {
    printf("hostile: %s: the server refused legitimate messages: %s (%llu ok)\n", mode,
           first_error != IBV_WC_SUCCESS ? ibv_wc_status_str(first_error) : "not completed in 5 s",
           (unsigned long long)send_ok);
    exit(1);
  }
}

static void wait_recv_data(uint64_t n, double secs) {
  double deadline = now() + secs;
  while (recv_data < n && now() < deadline && !qp_broken && !disconnected) {
    poll_all();
    usleep(200);
  }
}

static void setup(const char* addr, const char* port) {
  struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICHOST}, *ai;
  int r = getaddrinfo(addr, port, &hints, &ai);
  if (r) {
    printf("hostile: %s: setup failed: getaddrinfo %s: %s\n", mode, addr, gai_strerror(r));
    exit(1);
  }
  channel = rdma_create_event_channel();
  if (!channel) setup_fail("rdma_create_event_channel", errno);
  if (rdma_create_id(channel, &id, NULL, RDMA_PS_TCP)) setup_fail("rdma_create_id", errno);
  if (rdma_resolve_addr(id, NULL, ai->ai_addr, 2000)) setup_fail("rdma_resolve_addr", errno);
  freeaddrinfo(ai);
  expect_event(RDMA_CM_EVENT_ADDR_RESOLVED, "address resolution");
  if (rdma_resolve_route(id, 2000)) setup_fail("rdma_resolve_route", errno);
  expect_event(RDMA_CM_EVENT_ROUTE_RESOLVED, "route resolution");

  pd = ibv_alloc_pd(id->verbs);
  if (!pd) setup_fail("ibv_alloc_pd", errno);
  cq = ibv_create_cq(id->verbs, SQ_DEPTH + RQ_DEPTH, NULL, NULL, 0);
  if (!cq) setup_fail("ibv_create_cq", errno);
  struct ibv_qp_init_attr qa = {0};
  qa.send_cq = cq;
  qa.recv_cq = cq;
  qa.qp_type = IBV_QPT_RC;
  qa.cap.max_send_wr = SQ_DEPTH;
  qa.cap.max_recv_wr = RQ_DEPTH;
  qa.cap.max_send_sge = 1;
  qa.cap.max_recv_sge = 1;
  if (rdma_create_qp(id, pd, &qa)) setup_fail("rdma_create_qp", errno);

  if (posix_memalign((void**)&tsgl, 4096, TSGL_SIZE) || posix_memalign((void**)&dbuf, 4096, DBUF_SIZE) ||
      posix_memalign((void**)&sbuf, 4096, SBUF_SIZE))
    setup_fail("posix_memalign", ENOMEM);
  memset(tsgl, 0, TSGL_SIZE);
  memset(dbuf, 0, DBUF_SIZE);
  const int remote = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
  tsgl_mr = ibv_reg_mr(pd, tsgl, TSGL_SIZE, remote);
  dbuf_mr = ibv_reg_mr(pd, dbuf, DBUF_SIZE, remote);
  sbuf_mr = ibv_reg_mr(pd, sbuf, SBUF_SIZE, IBV_ACCESS_LOCAL_WRITE);
  if (!tsgl_mr || !dbuf_mr || !sbuf_mr) setup_fail("ibv_reg_mr", errno);
  for (uint64_t i = 0; i < RQ_DEPTH; i++) post_recv(i);
}

// rdma_connect with our rs_conn_data (version as given); the event that
// answers it. On ESTABLISHED the server's conn data is read.
static enum rdma_cm_event_type connect_as(uint8_t version, int* status) {
  struct rs_conn_data cd;
  memset(&cd, 0, sizeof cd);
  cd.version = version;
  cd.flags = RS_CONN_FLAG_IOMAP;  // v44 always sets it; our iomap has 0 entries
  cd.credits = htobe16(RQ_DEPTH);
  cd.target_sgl.addr = htobe64((uintptr_t)tsgl);
  cd.target_sgl.key = htobe32(tsgl_mr->rkey);
  cd.target_sgl.length = htobe32(2);
  cd.data_buf.addr = htobe64((uintptr_t)dbuf);
  cd.data_buf.key = htobe32(dbuf_mr->rkey);
  cd.data_buf.length = htobe32(DBUF_SIZE / 2);
  struct rdma_conn_param param = {0};
  param.private_data = &cd;
  param.private_data_len = sizeof cd;
  param.flow_control = 1;
  param.retry_count = 3;      // a server that goes away shows soon
  param.rnr_retry_count = 7;  // as rsockets: RNR retried for ever
  if (rdma_connect(id, &param)) setup_fail("rdma_connect", errno);
  uint8_t pdata[256];
  size_t plen = sizeof pdata;
  enum rdma_cm_event_type t;
  if (get_event(10000, &t, status, pdata, &plen)) setup_fail("waiting for the connection", ETIMEDOUT);
  if (t == RDMA_CM_EVENT_ESTABLISHED && version == 1) {
    struct rs_conn_data sd;
    if (plen < sizeof sd) {
      printf("hostile: %s: the server's reply carries %zu bytes of private data, not an rs_conn_data\n", mode, plen);
      exit(1);
    }
    memcpy(&sd, pdata, sizeof sd);
    if (sd.version != 1) {
      printf("hostile: %s: the server's conn data has version %u\n", mode, sd.version);
      exit(1);
    }
    peer_credits = be16toh(sd.credits);
    sseq_comp = peer_credits;
    peer_data.addr = be64toh(sd.data_buf.addr);
    peer_data.key = be32toh(sd.data_buf.key);
    peer_data.length = be32toh(sd.data_buf.length);
  }
  return t;
}

// Up to secs for the server to drop the connection; probes (0-byte RDMA
// WRITEs, no imm: nothing the server's rsocket sees) while our QP works.
static const char* wait_reaction(double secs, double* took) {
  double start = now(), next_probe = start;
  while (now() - start < secs) {
    poll_all();
    if (disconnected) break;
    if (qp_broken && !rnr_seen) break;
    if (!qp_broken && outstanding == 0 && now() >= next_probe) {
      post_write(0, 0, 0, 0);
      next_probe = now() + 0.2;
    }
    usleep(1000);
  }
  *took = now() - start;
  if (disconnected) return "RDMA_CM_EVENT_DISCONNECTED";
  if (qp_broken && !rnr_seen) return ibv_wc_status_str(first_error);
  return NULL;
}

int main(int argc, char** argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc != 4 || (strcmp(argv[3], "version") && strcmp(argv[3], "oversize") && strcmp(argv[3], "flood"))) {
    fprintf(stderr, "usage: %s ADDR PORT version|oversize|flood\n", argv[0]);
    return 2;
  }
  mode = argv[3];
  signal(SIGALRM, on_alarm);
  alarm(30);
  setup(argv[1], argv[2]);

  int status = 0;
  if (!strcmp(mode, "version")) {
    enum rdma_cm_event_type t = connect_as(0x7f, &status);
    if (t == RDMA_CM_EVENT_REJECTED) {
      printf("hostile: version: conn data version 0x7f: RDMA_CM_EVENT_REJECTED (status %d)\n", status);
      return 0;
    }
    printf("hostile: version: conn data version 0x7f: %s (status %d)\n", rdma_event_str(t), status);
    return t == RDMA_CM_EVENT_ESTABLISHED ? 5 : 1;
  }

  enum rdma_cm_event_type t = connect_as(1, &status);
  if (t != RDMA_CM_EVENT_ESTABLISHED) {
    printf("hostile: %s: connect: %s (status %d)\n", mode, rdma_event_str(t), status);
    return 1;
  }
  char what[320];
  int flood = FLOOD;
  if (!strcmp(mode, "oversize")) {
    // The oversize claim, then the flood: zero-payload messages claiming 1 byte each.
    int r = post_write(0, 0, 1, RS_IMM(RS_OP_DATA, 0x1FFFFFFF));
    if (r) setup_fail("posting the oversize message", r);
    sseq_no++;
    int posted = 0;
    for (; posted < flood && !qp_broken && !disconnected; posted++) {
      if (post_write(0, 0, 1, RS_IMM(RS_OP_DATA, 1))) break;
      sseq_no++;
    }
    snprintf(what, sizeof what, "DATA imm 0x1fffffff (0 bytes written, data_buf %u bytes), then %d of %d zero-payload 1-byte DATA",
             peer_data.length, posted, flood);
  } else {
    // flood: the legitimate part first (rstream -C 100 -S 16 on the server).
    send_legit(16, 1);           // its sync: 16 bytes
    wait_recv_data(1, 5);        // its sync answer
    send_legit(100, 16);         // 100 transfers of 16 bytes
    wait_recv_data(RQ_DEPTH, 5); // its answers, as far as our 16 credits go
    if (recv_data < 1) {
      printf("hostile: flood: no sync answer from the server within 5 s\n");
      return 1;
    }
    uint64_t legit_answers = recv_data;
    if (data_off + (uint64_t)flood > peer_data.length) flood = (int)(peer_data.length - data_off);
    int posted = 0;
    for (; posted < flood && !qp_broken && !disconnected; posted++)
      if (send_data(1)) break;
    snprintf(what, sizeof what,
             "legitimate part done (116 messages; %llu DATA back, the server then out of credits), then %d of %d one-byte DATA "
             "beyond its %u credits",
             (unsigned long long)legit_answers, posted, flood, peer_credits);
  }
  double took = 0;
  const char* how = wait_reaction(8, &took);
  if (how) {
    printf("hostile: %s: server credits %u; %s; %llu sends completed; the server dropped the connection: %s %.1f s after\n",
           mode, peer_credits, what, (unsigned long long)send_ok, how, took);
    return 0;
  }
  printf("hostile: %s: server credits %u; %s; %llu sends completed (%d outstanding%s); the server KEPT the connection for %.0f s\n",
         mode, peer_credits, what, (unsigned long long)send_ok, outstanding,
         rnr_seen ? ", RNR retries exceeded: its receive queue ran dry" : "", took);
  return 4;
}
