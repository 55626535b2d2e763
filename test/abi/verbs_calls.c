// Our libibverbs.so.1 as a C program compiled against Debian's
// <infiniband/verbs.h> sees it (test verbs-utils runs it against an ibd
// whose port is up; docs/library.md "Verbs ABI"):
//  - the context is an extended verbs_context: the inline paths of the
//    header (ibv_query_port, ibv_query_device_ex, ibv_query_gid_ex) reach
//    our extended ops and agree with the exported functions;
//  - hostile and unsupported calls fail as libibverbs' providers fail
//    (NULL with errno, or the errno value) and leave the context usable:
//    NULL objects, bad attribute masks and types, objects of another
//    context, memory that cannot be registered, work requests the device
//    cannot carry, a receive queue overrun, one QP posted to from two
//    threads at once.
// Prints "ok: ..." per check; exits 1 at the first failure.
//   verbs_calls (with OPENIB_SOCKET set)
// With --loop KIND it instead makes and destroys objects of one kind (pd,
// mr, cq, channel, qp, srq, ah) or posts and polls (post), over and over
// for at most 60 s: verbs_utils.sh SIGKILLs it in the middle of those calls
// and checks that ibd keeps nothing of it.
#include <errno.h>
#include <infiniband/verbs.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define CHECK(cond, ...)                             \
  do {                                               \
    if (!(cond)) {                                   \
      fprintf(stderr, "FAIL (line %d): ", __LINE__); \
      fprintf(stderr, __VA_ARGS__);                  \
      fprintf(stderr, "\n");                         \
      exit(1);                                       \
    }                                                \
  } while (0)
#define NULL_WITH(expr, err)                                                                        \
  do {                                                                                              \
    errno = 0;                                                                                      \
    void* p_ = (void*)(expr);                                                                       \
    CHECK(p_ == NULL && errno == (err), "%s: %p errno %d (%s), expected NULL with %d", #expr, p_, \
          errno, strerror(errno), err);                                                             \
  } while (0)
#define RETURNS(expr, err)                                                           \
  do {                                                                               \
    int r_ = (expr);                                                                 \
    CHECK(r_ == (err), "%s returned %d (%s), expected %d", #expr, r_, strerror(r_), err); \
  } while (0)

static struct ibv_context* open_first(void) {
  int n = 0;
  struct ibv_device** list = ibv_get_device_list(&n);
  CHECK(list && n >= 1, "no device (%d)", n);
  struct ibv_context* ctx = ibv_open_device(list[0]);
  CHECK(ctx, "ibv_open_device: %s", strerror(errno));
  ibv_free_device_list(list);
  return ctx;
}

static void layouts(struct ibv_context* ctx) {
  struct verbs_context* v = verbs_get_ctx(ctx);
  CHECK(v && v->sz >= sizeof(*v), "not an extended verbs_context");
  CHECK(ctx->ops.poll_cq && ctx->ops.post_send && ctx->ops.post_recv && ctx->ops.req_notify_cq &&
            ctx->ops.post_srq_recv,
        "data-path ops missing");
  struct ibv_port_attr inl, exported;
  memset(&exported, 0, sizeof exported);
  RETURNS(ibv_query_port(ctx, 1, &inl), 0);  // the header's inline: verbs_context's query_port
  RETURNS((ibv_query_port)(ctx, 1, (struct _compat_ibv_port_attr*)&exported), 0);
  CHECK(inl.state == IBV_PORT_ACTIVE && inl.lid == exported.lid && inl.lid != 0 &&
            inl.link_layer == IBV_LINK_LAYER_INFINIBAND && exported.active_mtu == inl.active_mtu,
        "ports differ: state %d lid %u/%u link layer %u", inl.state, inl.lid, exported.lid, inl.link_layer);
  struct ibv_device_attr a;
  struct ibv_device_attr_ex ax;
  RETURNS(ibv_query_device(ctx, &a), 0);
  RETURNS(ibv_query_device_ex(ctx, NULL, &ax), 0);
  CHECK(memcmp(&a, &ax.orig_attr, sizeof a) == 0, "ibv_query_device_ex's orig_attr differs");
  CHECK(a.phys_port_cnt == 1 && a.max_qp > 0 && a.max_cqe > 0, "device attributes: ports %u", a.phys_port_cnt);
  struct ibv_gid_entry e;
  union ibv_gid g;
  RETURNS(ibv_query_gid_ex(ctx, 1, 0, &e, 0), 0);
  CHECK(ibv_query_gid(ctx, 1, 0, &g) == 0 && memcmp(&g, &e.gid, 16) == 0 && e.gid_type == IBV_GID_TYPE_IB,
        "GID 0: type %u", e.gid_type);
  CHECK(g.raw[0] == 0xfe && g.raw[1] == 0x80, "GID 0 is not link-local");
  RETURNS(ibv_query_gid_ex(ctx, 1, 100000, &e, 0), EINVAL);
  __be16 pkey;
  CHECK(ibv_query_pkey(ctx, 1, 0, &pkey) == 0 && (be16toh(pkey) & 0x7fff) == 0x7fff, "P_Key 0");
  CHECK(ibv_get_pkey_index(ctx, 1, pkey) == 0, "P_Key index of %#x", be16toh(pkey));
  CHECK(ibv_query_pkey(ctx, 1, 1, &pkey) == -1 && errno == EINVAL, "P_Key 1 exists");
  printf("ok: extended context; query_port/device(_ex)/gid(_ex)/pkey agree (LID %u)\n", inl.lid);
}

static void unsupported(struct ibv_context* ctx, struct ibv_pd* pd, struct ibv_cq* cq) {
  struct ibv_cq_init_attr_ex cx = {.cqe = 16};
  NULL_WITH(ibv_create_cq_ex(ctx, &cx), EOPNOTSUPP);
  NULL_WITH(ibv_alloc_mw(pd, IBV_MW_TYPE_1), EOPNOTSUPP);
  // (with only IBV_QP_INIT_ATTR_PD the header's inline takes ibv_create_qp)
  struct ibv_qp_init_attr_ex qx = {.qp_type = IBV_QPT_RC, .send_cq = cq, .recv_cq = cq, .pd = pd,
                                   .comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
                                   .send_ops_flags = IBV_QP_EX_WITH_SEND};
  NULL_WITH(ibv_create_qp_ex(ctx, &qx), EOPNOTSUPP);
  struct ibv_xrcd_init_attr xa = {0};
  NULL_WITH(ibv_open_xrcd(ctx, &xa), EOPNOTSUPP);
  NULL_WITH(ibv_import_device(ctx->cmd_fd), EOPNOTSUPP);
  char buf[64];
  NULL_WITH(ibv_reg_dmabuf_mr(pd, 0, sizeof buf, 0, 0, IBV_ACCESS_LOCAL_WRITE), EOPNOTSUPP);
  printf("ok: extended CQs/QPs, memory windows, XRC, imports, dma-buf MRs: NULL with EOPNOTSUPP\n");
}

static void hostile_objects(struct ibv_context* ctx, struct ibv_pd* pd, struct ibv_cq* cq) {
  NULL_WITH(ibv_open_device(NULL), EINVAL);
  NULL_WITH(ibv_alloc_pd(NULL), EINVAL);
  NULL_WITH(ibv_create_cq(ctx, 0, NULL, NULL, 0), EINVAL);
  NULL_WITH(ibv_create_cq(ctx, 16, NULL, NULL, 7), EINVAL);  // no completion vector 7
  NULL_WITH(ibv_create_cq(ctx, 1 << 30, NULL, NULL, 0), EINVAL);
  struct ibv_qp_init_attr qi = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RAW_PACKET,
                                .cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1}};
  NULL_WITH(ibv_create_qp(pd, &qi), EOPNOTSUPP);
  qi.qp_type = IBV_QPT_RC;
  qi.cap.max_send_wr = 1u << 30;
  NULL_WITH(ibv_create_qp(pd, &qi), EINVAL);
  // A CQ of another context: its handle would name another object (or
  // nothing) on this context's connection.
  struct ibv_context* other = open_first();
  struct ibv_cq* ocq = ibv_create_cq(other, 16, NULL, NULL, 0);
  CHECK(ocq, "a CQ on the second context: %s", strerror(errno));
  qi.cap.max_send_wr = 4;
  qi.send_cq = qi.recv_cq = ocq;
  NULL_WITH(ibv_create_qp(pd, &qi), EINVAL);
  RETURNS(ibv_destroy_cq(ocq), 0);
  RETURNS(ibv_close_device(other), 0);
  // Memory: remote write without local write; a read-only mapping; a file.
  static char heap[8192];
  NULL_WITH(ibv_reg_mr(pd, heap, sizeof heap, IBV_ACCESS_REMOTE_WRITE), EINVAL);
  void* ro = mmap(NULL, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  NULL_WITH(ibv_reg_mr(pd, ro, 4096, IBV_ACCESS_LOCAL_WRITE), EINVAL);
  munmap(ro, 4096);
  NULL_WITH(ibv_reg_mr(pd, heap, 0, IBV_ACCESS_LOCAL_WRITE), EINVAL);
  NULL_WITH(ibv_reg_mr_iova2(pd, heap, sizeof heap, 0x1000, IBV_ACCESS_LOCAL_WRITE), EOPNOTSUPP);
  printf("ok: NULL objects, zero and huge sizes, raw QPs, another context's CQ, unregistrable memory refused\n");
}

struct poster {
  struct ibv_qp* qp;
  struct ibv_mr* mr;
  int posted, refused;
};

// Posts receives until the queue is full, from one thread of two.
static void* post_many(void* arg) {
  struct poster* p = arg;
  for (int i = 0; i < 4096; ++i) {
    struct ibv_sge sge = {(uintptr_t)p->mr->addr, 64, p->mr->lkey};
    struct ibv_recv_wr wr = {.wr_id = (uint64_t)i, .sg_list = &sge, .num_sge = 1}, *bad = NULL;
    int rc = ibv_post_recv(p->qp, &wr, &bad);
    if (rc == 0) ++p->posted;
    else if (rc == ENOMEM && bad == &wr) ++p->refused;
    else return (void*)1;
  }
  return NULL;
}

static void hostile_posts(struct ibv_pd* pd, struct ibv_cq* cq) {
  struct ibv_qp_init_attr qi = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
                                .cap = {.max_send_wr = 8, .max_recv_wr = 64, .max_send_sge = 1, .max_recv_sge = 1}};
  struct ibv_qp* qp = ibv_create_qp(pd, &qi);
  CHECK(qp && qi.cap.max_recv_wr >= 64 && qp->state == IBV_QPS_RESET, "RC QP: %s", strerror(errno));
  // Masks: an alternate path is not supported; Reset -> RTS is not a transition.
  struct ibv_qp_attr at = {.qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = 1,
                           .qp_access_flags = IBV_ACCESS_REMOTE_WRITE};
  RETURNS(ibv_modify_qp(qp, &at, IBV_QP_STATE | IBV_QP_ALT_PATH), EOPNOTSUPP);
  at.qp_state = IBV_QPS_RTS;
  CHECK(ibv_modify_qp(qp, &at, IBV_QP_STATE) != 0, "Reset -> RTS accepted");
  at.qp_state = IBV_QPS_INIT;
  RETURNS(ibv_modify_qp(qp, &at, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS), 0);
  CHECK(qp->state == IBV_QPS_INIT, "qp->state %d after INIT", qp->state);
  void* mem = aligned_alloc(4096, 4096);
  struct ibv_mr* mr = ibv_reg_mr(pd, mem, 4096, IBV_ACCESS_LOCAL_WRITE);
  CHECK(mr && mr->addr == mem && mr->length == 4096 && mr->lkey, "reg_mr: %s", strerror(errno));
  // A work request the device cannot carry: bad_wr names it, the ones before are posted.
  struct ibv_sge sge = {(uintptr_t)mem, 64, mr->lkey};
  struct ibv_send_wr w2 = {.wr_id = 2, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_BIND_MW};
  struct ibv_send_wr w1 = {.wr_id = 1, .next = &w2, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND};
  struct ibv_send_wr* bad = NULL;
  CHECK(ibv_post_send(qp, &w1, &bad) == EINVAL && bad == &w2, "BIND_MW: bad_wr %p", (void*)bad);
  w1.next = NULL;
  w1.send_flags = 1u << 20;  // no such flag
  CHECK(ibv_post_send(qp, &w1, &bad) == EINVAL && bad == &w1, "unknown send flag accepted");
  w1.send_flags = 0;
  w1.num_sge = -1;
  CHECK(ibv_post_send(qp, &w1, &bad) == EINVAL && bad == &w1, "num_sge -1 accepted");
  // Two threads fill the receive queue at once: every post either lands or
  // is refused as full, and together exactly the queue's size lands.
  struct poster a = {qp, mr, 0, 0}, b = {qp, mr, 0, 0};
  pthread_t ta, tb;
  void *ra, *rb;
  pthread_create(&ta, NULL, post_many, &a);
  pthread_create(&tb, NULL, post_many, &b);
  pthread_join(ta, &ra);
  pthread_join(tb, &rb);
  CHECK(!ra && !rb, "a post failed with something other than ENOMEM");
  CHECK(a.posted + b.posted == (int)qi.cap.max_recv_wr, "%d + %d receives posted, the queue holds %u",
        a.posted, b.posted, qi.cap.max_recv_wr);
  printf("ok: bad masks, transitions and work requests refused with bad_wr; 2 threads filled %u receives\n",
         qi.cap.max_recv_wr);
  // Objects still used stay, EBUSY, as the kernel answers (qperf
  // deallocates its PD before deregistering its MR).
  RETURNS(ibv_destroy_cq(cq), EBUSY);  // the QP's send and receive CQ
  RETURNS(ibv_dealloc_pd(pd), EBUSY);  // the QP's and the MR's
  RETURNS(ibv_destroy_qp(qp), 0);
  RETURNS(ibv_dealloc_pd(pd), EBUSY);  // the MR's
  RETURNS(ibv_dereg_mr(mr), 0);
  free(mem);
}

// A UD QP in RTS (§10.3.1: no peer needed) on pd/cq.
static struct ibv_qp* ud_qp_rts(struct ibv_pd* pd, struct ibv_cq* cq) {
  struct ibv_qp_init_attr ia = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_UD,
                                .cap = {.max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1, .max_recv_sge = 1}};
  struct ibv_qp* qp = ibv_create_qp(pd, &ia);
  CHECK(qp, "ibv_create_qp UD: %s", strerror(errno));
  struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = 0x11111111};
  RETURNS(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY), 0);
  a.qp_state = IBV_QPS_RTR;
  RETURNS(ibv_modify_qp(qp, &a, IBV_QP_STATE), 0);
  a.qp_state = IBV_QPS_RTS;
  RETURNS(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN), 0);
  return qp;
}

static int loop(const char* kind) {
  struct ibv_context* ctx = open_first();
  struct ibv_pd* pd = ibv_alloc_pd(ctx);
  CHECK(pd, "ibv_alloc_pd: %s", strerror(errno));
  struct ibv_cq* cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
  CHECK(cq, "ibv_create_cq: %s", strerror(errno));
  struct ibv_port_attr pa;
  RETURNS(ibv_query_port(ctx, 1, &pa), 0);
  char* mem = malloc(1 << 16);
  CHECK(mem, "malloc");
  struct ibv_mr* mr = ibv_reg_mr(pd, mem, 1 << 16, IBV_ACCESS_LOCAL_WRITE);
  CHECK(mr, "ibv_reg_mr: %s", strerror(errno));
  struct ibv_qp* ud = strcmp(kind, "post") == 0 ? ud_qp_rts(pd, cq) : NULL;
  struct ibv_ah_attr aa = {.dlid = pa.lid, .port_num = 1};
  struct ibv_ah* ah = ud ? ibv_create_ah(pd, &aa) : NULL;
  printf("looping: %s\n", kind);
  fflush(stdout);
  const time_t end = time(NULL) + 60;
  for (unsigned long i = 0; time(NULL) < end; ++i) {
    if (strcmp(kind, "pd") == 0) {
      struct ibv_pd* p = ibv_alloc_pd(ctx);
      CHECK(p && ibv_dealloc_pd(p) == 0, "pd %lu", i);
    } else if (strcmp(kind, "mr") == 0) {
      struct ibv_mr* m = ibv_reg_mr(pd, mem + (i % 4096), 4096 + i % 8192, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
      CHECK(m && ibv_dereg_mr(m) == 0, "mr %lu: %s", i, strerror(errno));
    } else if (strcmp(kind, "cq") == 0) {
      struct ibv_cq* c = ibv_create_cq(ctx, 16 << (i % 4), NULL, NULL, 0);
      CHECK(c && ibv_destroy_cq(c) == 0, "cq %lu", i);
    } else if (strcmp(kind, "channel") == 0) {
      struct ibv_comp_channel* ch = ibv_create_comp_channel(ctx);
      struct ibv_cq* c = ch ? ibv_create_cq(ctx, 16, NULL, ch, 0) : NULL;
      CHECK(c && ibv_req_notify_cq(c, 0) == 0, "channel %lu", i);
      CHECK(ibv_destroy_cq(c) == 0 && ibv_destroy_comp_channel(ch) == 0, "channel destroy %lu", i);
    } else if (strcmp(kind, "qp") == 0) {
      struct ibv_qp_init_attr ia = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
                                    .cap = {.max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1}};
      struct ibv_qp* q = ibv_create_qp(pd, &ia);
      CHECK(q, "qp %lu: %s", i, strerror(errno));
      struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1};
      RETURNS(ibv_modify_qp(q, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS), 0);
      RETURNS(ibv_destroy_qp(q), 0);
    } else if (strcmp(kind, "srq") == 0) {
      struct ibv_srq_init_attr si = {.attr = {.max_wr = 16, .max_sge = 1}};
      struct ibv_srq* q = ibv_create_srq(pd, &si);
      CHECK(q && ibv_destroy_srq(q) == 0, "srq %lu: %s", i, strerror(errno));
    } else if (strcmp(kind, "ah") == 0) {
      struct ibv_ah* a = ibv_create_ah(pd, &aa);
      CHECK(a && ibv_destroy_ah(a) == 0, "ah %lu: %s", i, strerror(errno));
    } else if (strcmp(kind, "post") == 0) {
      struct ibv_sge sg = {.addr = (uintptr_t)mem, .length = 256, .lkey = mr->lkey};
      struct ibv_recv_wr rw = {.wr_id = i, .sg_list = &sg, .num_sge = 1}, *bad_r;
      struct ibv_send_wr sw = {.wr_id = i, .sg_list = &sg, .num_sge = 1, .opcode = IBV_WR_SEND,
                               .send_flags = IBV_SEND_SIGNALED,
                               .wr.ud = {.ah = ah, .remote_qpn = ud->qp_num, .remote_qkey = 0x11111111}},
                       *bad_s;
      ibv_post_recv(ud, &rw, &bad_r);  // ENOMEM when full: fine
      ibv_post_send(ud, &sw, &bad_s);
      struct ibv_wc wc[16];
      ibv_poll_cq(cq, 16, wc);
    } else {
      CHECK(0, "unknown kind %s", kind);
    }
  }
  return 0;  // not reached before the kill, normally
}

int main(int argc, char** argv) {
  if (argc == 3 && strcmp(argv[1], "--loop") == 0) return loop(argv[2]);
  struct ibv_context* ctx = open_first();
  layouts(ctx);
  struct ibv_pd* pd = ibv_alloc_pd(ctx);
  CHECK(pd, "ibv_alloc_pd: %s", strerror(errno));
  struct ibv_comp_channel* ch = ibv_create_comp_channel(ctx);
  CHECK(ch && ch->fd >= 0, "ibv_create_comp_channel: %s", strerror(errno));
  struct ibv_cq* cq = ibv_create_cq(ctx, 64, (void*)0x1234, ch, 0);
  CHECK(cq && cq->cqe >= 64 && cq->cq_context == (void*)0x1234 && cq->channel == ch, "ibv_create_cq: %s",
        strerror(errno));
  RETURNS(ibv_destroy_comp_channel(ch), EBUSY);  // a CQ still uses it
  unsupported(ctx, pd, cq);
  hostile_objects(ctx, pd, cq);
  hostile_posts(pd, cq);
  // The context still works after all of it.
  struct ibv_pd* pd2 = ibv_alloc_pd(ctx);
  CHECK(pd2, "ibv_alloc_pd after the hostile calls: %s", strerror(errno));
  RETURNS(ibv_dealloc_pd(pd2), 0);
  RETURNS(ibv_destroy_cq(cq), 0);
  RETURNS(ibv_destroy_comp_channel(ch), 0);
  RETURNS(ibv_dealloc_pd(pd), 0);
  RETURNS(ibv_close_device(ctx), 0);
  printf("PASS: verbs calls\n");
  return 0;
}
