// Context::reg_mr on the program's own memory (docs/library.md "Memory"):
// malloc'd buffers registered in place, used as SEND source, receive
// buffer, RDMA WRITE target and READ source by the peer; what may not be
// registered is refused.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>

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

TEST_CASE("reg_mr refuses what it cannot register: a shared file mapping, read-only memory", "[api]") {
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

  void* ro = ::mmap(nullptr, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  REQUIRE(ro != MAP_FAILED);
  auto r2 = a->ctx->reg_mr(*a->pd, ro, 4096, kAccessLocalWrite);
  ::munmap(ro, 4096);
  REQUIRE_FALSE(r2.ok());
  CHECK(r2.error().code == EINVAL);
}

namespace {

// Bytes of memory the process's registered-pages memfd holds (its fd is
// found by name in /proc/self/fd).
uint64_t reg_memfd_bytes() {
  for (int fd = 0; fd < 1024; ++fd) {
    char link[64], target[256];
    std::snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = ::readlink(link, target, sizeof target - 1);
    if (n <= 0) continue;
    target[n] = 0;
    if (std::string_view(target).starts_with("/memfd:openib-reg-mr")) {
      struct stat st {};
      REQUIRE(::fstat(fd, &st) == 0);
      return uint64_t(st.st_blocks) * 512;
    }
  }
  FAIL("no registered-pages memfd among the process's fds");
  return 0;
}

}  // namespace

TEST_CASE("reg_mr of overlapping ranges and of one buffer by two contexts: one page, which every MR "
          "sees; unmapped pages go back to the system",
          "[api]") {
  Link l = link();
  // Three pages; the middle one registered first, then the first two
  // (partly over it), as ucmatose's 100-byte malloc'd buffers share pages.
  void* p = ::mmap(nullptr, 3 * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  REQUIRE(p != MAP_FAILED);
  auto* b = static_cast<uint8_t*>(p);
  fill(b, 3 * 4096, 81);
  auto mid = must(l.a->ctx->reg_mr(*l.a->pd, b + 4096, 4096, kAllAccess), "reg_mr middle page");
  auto over = must(l.a->ctx->reg_mr(*l.a->pd, b + 10, 2 * 4096, kAllAccess), "reg_mr over it");
  CHECK(first_diff(b, 3 * 4096, 81) == 3 * 4096);  // both remaps kept the data

  // The peer writes through one MR and reads back through the other.
  fill(l.b->buf(), 1000, 82);
  REQUIRE(post_send(*l.b->qp, l.b->sge(0, 1000), 1,
                    {.op = WrOpcode::kWrite, .remote_addr = reinterpret_cast<uint64_t>(b + 4096 + 100),
                     .rkey = over->rkey()}) == 0);
  CHECK(wait_wc(*l.b->cq).status == kWcSuccess);
  CHECK(first_diff(b + 4096 + 100, 1000, 82) == 1000);
  REQUIRE(post_send(*l.b->qp, l.b->sge(8192, 1000), 2,
                    {.op = WrOpcode::kRead, .remote_addr = reinterpret_cast<uint64_t>(b + 4096 + 100),
                     .rkey = mid->rkey()}) == 0);
  CHECK(wait_wc(*l.b->cq).status == kWcSuccess);
  CHECK(first_diff(l.b->buf() + 8192, 1000, 82) == 1000);

  // The other context (another ibd) registers all three pages: its MR and
  // A's are the same memory. B sends from them; A's peer sees what A wrote.
  auto theirs = must(l.b->ctx->reg_mr(*l.b->pd, b, 3 * 4096, kAllAccess), "reg_mr by the second context");
  fill(b + 8192, 500, 83);
  REQUIRE(post_recv(*l.a->qp, l.a->sge(0, 4096), 3) == 0);
  REQUIRE(post_send(*l.b->qp, Sge{reinterpret_cast<uint64_t>(b + 8192), 500, theirs->lkey()}, 4) == 0);
  CHECK(wait_wc(*l.b->cq).status == kWcSuccess);
  CHECK(wait_wc(*l.a->cq).byte_len == 500);
  CHECK(first_diff(l.a->buf(), 500, 83) == 500);
  // And A's peer (B) writes through A's MR into what B's MR covers.
  fill(l.b->buf() + 16384, 64, 84);
  REQUIRE(post_send(*l.b->qp, l.b->sge(16384, 64), 5,
                    {.op = WrOpcode::kWrite, .remote_addr = reinterpret_cast<uint64_t>(b + 4096 + 2000),
                     .rkey = mid->rkey()}) == 0);
  CHECK(wait_wc(*l.b->cq).status == kWcSuccess);
  REQUIRE(post_recv(*l.a->qp, l.a->sge(0, 4096), 6) == 0);
  REQUIRE(post_send(*l.b->qp, Sge{reinterpret_cast<uint64_t>(b + 4096 + 2000), 64, theirs->lkey()}, 7) == 0);
  CHECK(wait_wc(*l.b->cq).status == kWcSuccess);
  CHECK(wait_wc(*l.a->cq).byte_len == 64);
  CHECK(first_diff(l.a->buf(), 64, 84) == 64);

  mid.reset();
  over.reset();
  theirs.reset();
  CHECK(first_diff(b + 8192, 500, 83) == 500);  // the program's memory, after deregistration
  ::munmap(p, 3 * 4096);

  // Pages registered, deregistered and then unmapped are punched out of
  // the memfd once enough have been released (32 MiB, docs/library.md).
  constexpr size_t kBig = 48u << 20;
  void* r1 = ::mmap(nullptr, kBig, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  void* r2 = ::mmap(nullptr, kBig, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  REQUIRE(r1 != MAP_FAILED);
  REQUIRE(r2 != MAP_FAILED);
  std::memset(r1, 1, kBig);
  std::memset(r2, 2, kBig);
  const uint64_t before = reg_memfd_bytes();
  must(l.a->ctx->reg_mr(*l.a->pd, r1, kBig, kAccessLocalWrite), "reg_mr 48 MiB").reset();
  CHECK(reg_memfd_bytes() >= kBig);  // still mapped: kept
  ::munmap(r1, kBig);
  must(l.a->ctx->reg_mr(*l.a->pd, r2, kBig, kAccessLocalWrite), "reg_mr another 48 MiB").reset();
  CHECK(static_cast<uint8_t*>(r2)[kBig - 1] == 2);
  const uint64_t after = reg_memfd_bytes();
  INFO("memfd held " << before << " bytes before, " << after << " after");
  CHECK(after < before + kBig + kBig / 2);  // r1's pages are gone, r2's stay (pages before: punched too)
  CHECK(after >= kBig);
  ::munmap(r2, kBig);
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
