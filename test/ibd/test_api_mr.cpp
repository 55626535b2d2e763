// Context::reg_mr on the program's own memory (docs/library.md "Memory"):
// malloc'd buffers registered in place, used as SEND source, receive
// buffer, RDMA WRITE target and READ source by the peer; what may not be
// registered is refused.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>

#include "test_api.hpp"

using namespace openib;
using namespace openib::testing::api;

namespace {

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};

}  // namespace

TEST_CASE("reg_mr on malloc'd memory: contents and address kept; SEND from it, receive, RDMA WRITE "
          "and READ into and out of it",
          "[api]") {
  Link l = link();
  // Only A registers malloc'd memory (a page remapped by one Context is no
  // longer anonymous for another Context of this process).
  constexpr size_t kLen = 3 * 4096 + 123;
  std::unique_ptr<uint8_t, FreeDeleter> mem(static_cast<uint8_t*>(std::malloc(kLen)));
  REQUIRE(mem);
  uint8_t* m = mem.get();
  fill(m, kLen, 61);
  auto mr = must(l.a->ctx->reg_mr(*l.a->pd, m, kLen, kAllAccess), "reg_mr");
  CHECK(mr->addr() == m);
  CHECK(mr->length() == kLen);
  CHECK(mr->lkey() != 0);
  REQUIRE(first_diff(m, kLen, 61) == kLen);  // the remap kept the data

  Sge all{reinterpret_cast<uint64_t>(m), static_cast<uint32_t>(kLen), mr->lkey()};

  // SEND from the malloc'd buffer.
  REQUIRE(post_recv(*l.b->qp, l.b->sge(0, 16384), 1) == 0);
  REQUIRE(post_send(*l.a->qp, all, 2) == 0);
  CHECK(wait_wc(*l.a->cq).status == kWcSuccess);
  Wc r = wait_wc(*l.b->cq);
  CHECK(r.byte_len == kLen);
  CHECK(first_diff(l.b->buf(), kLen, 61) == kLen);

  // Receive into it.
  fill(l.b->buf() + 20000, kLen, 62);
  REQUIRE(post_recv(*l.a->qp, all, 3) == 0);
  REQUIRE(post_send(*l.b->qp, l.b->sge(20000, kLen), 4) == 0);
  CHECK(wait_wc(*l.b->cq).status == kWcSuccess);
  Wc r2 = wait_wc(*l.a->cq);
  CHECK(r2.wr_id == 3);
  CHECK(r2.byte_len == kLen);
  CHECK(first_diff(m, kLen, 62) == kLen);

  // The peer writes into it and reads from it with its rkey.
  fill(l.b->buf(), 1000, 63);
  REQUIRE(post_send(*l.b->qp, l.b->sge(0, 1000), 5,
                    {.op = WrOpcode::kWrite, .remote_addr = reinterpret_cast<uint64_t>(m + 5000),
                     .rkey = mr->rkey()}) == 0);
  CHECK(wait_wc(*l.b->cq).status == kWcSuccess);
  CHECK(first_diff(m + 5000, 1000, 63) == 1000);
  CHECK(m[4999] == uint8_t(62 + 4999 * 7 + (4999 >> 8)));  // neighbours as they were

  fill(m + 10000, 2000, 64);
  REQUIRE(post_send(*l.b->qp, l.b->sge(40000, 2000), 6,
                    {.op = WrOpcode::kRead, .remote_addr = reinterpret_cast<uint64_t>(m + 10000),
                     .rkey = mr->rkey()}) == 0);
  Wc rd = wait_wc(*l.b->cq);
  CHECK(rd.status == kWcSuccess);
  CHECK(first_diff(l.b->buf() + 40000, 2000, 64) == 2000);

  // A second registration inside the same pages reuses them.
  auto mr2 = must(l.a->ctx->reg_mr(*l.a->pd, m + 100, 200, kAccessLocalWrite), "reg_mr inside");
  CHECK(mr2->lkey() != mr->lkey());
  mr2.reset();
  // After deregistration the memory stays the program's, with its data.
  mr.reset();
  CHECK(first_diff(m + 10000, 2000, 64) == 2000);
  m[0] = 1;  // still writable
  CHECK(m[0] == 1);
}

TEST_CASE("reg_mr refuses what it cannot register: a shared file mapping, a range partly over "
          "registered memory",
          "[api]") {
  auto a = open_ep(sock_a());
  // A shared mapping of a file: not anonymous private memory.
  char path[] = "/tmp/openib-api-XXXXXX";
  int fd = ::mkstemp(path);
  REQUIRE(fd >= 0);
  ::unlink(path);
  REQUIRE(::ftruncate(fd, 8192) == 0);
  void* f = ::mmap(nullptr, 8192, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  REQUIRE(f != MAP_FAILED);
  auto r = a->ctx->reg_mr(*a->pd, f, 8192, kAccessLocalWrite);
  ::munmap(f, 8192);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == EINVAL);

  // Anonymous memory: three pages, register the middle one, then a range
  // over the first two (partly over the registered page).
  void* p = ::mmap(nullptr, 3 * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  REQUIRE(p != MAP_FAILED);
  auto* b = static_cast<uint8_t*>(p);
  auto mid = a->ctx->reg_mr(*a->pd, b + 4096, 4096, kAccessLocalWrite);
  CHECK(mid.ok());
  auto over = a->ctx->reg_mr(*a->pd, b, 2 * 4096, kAccessLocalWrite);
  REQUIRE_FALSE(over.ok());
  CHECK(over.error().code == EINVAL);
  if (mid.ok()) mid.value().reset();  // deregistered before the memory goes
  ::munmap(p, 3 * 4096);
}

TEST_CASE("alloc_mr of 1 GiB, the device's max_mr_size: RDMA WRITE and READ at its start, middle and "
          "end; one page more is refused",
          "[api]") {
  constexpr size_t kGiB = size_t{1} << 30;
  EpOptions big;
  big.mr_len = kGiB;  // 262144 pages: a page list by address (docs/simhca.md §6.7)
  Link l = link({}, big);
  CHECK(must(l.b->ctx->query_device(), "query_device").max_mr_size == kGiB);

  constexpr uint32_t kLen = 4000;
  // The first page, across the middle (a page boundary), the last bytes.
  const size_t offsets[] = {0, kGiB / 2 - kLen / 2, kGiB - kLen};
  uint8_t seed = 70;
  for (size_t off : offsets) {
    INFO("offset " << off);
    fill(l.a->buf(), kLen, seed);
    REQUIRE(post_send(*l.a->qp, l.a->sge(0, kLen), 1,
                      {.op = WrOpcode::kWrite, .remote_addr = l.b->va(off), .rkey = l.b->mr->rkey()}) == 0);
    CHECK(wait_wc(*l.a->cq).status == kWcSuccess);
    CHECK(first_diff(l.b->buf() + off, kLen, seed) == kLen);
    if (off > 0) CHECK(l.b->buf()[off - 1] == 0);  // nothing before it
    if (off + kLen < kGiB) CHECK(l.b->buf()[off + kLen] == 0);  // nor after it
    // And read back through the same key.
    REQUIRE(post_send(*l.a->qp, l.a->sge(8192, kLen), 2,
                      {.op = WrOpcode::kRead, .remote_addr = l.b->va(off), .rkey = l.b->mr->rkey()}) == 0);
    CHECK(wait_wc(*l.a->cq).status == kWcSuccess);
    CHECK(first_diff(l.a->buf() + 8192, kLen, seed) == kLen);
    ++seed;
  }

  auto over = l.b->ctx->alloc_mr(*l.b->pd, kGiB + 4096, kAccessLocalWrite);
  REQUIRE_FALSE(over.ok());
  CHECK(over.error().code == EINVAL);
}
