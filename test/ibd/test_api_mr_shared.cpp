// Context::reg_mr on shared memory (docs/library.md "Memory", "Shared
// memory"): ibd maps the file behind the mapping (MAP_MEM_SHARED), so the
// pages stay shared with everyone else who maps them — a forked child, the
// file itself, hugetlb pages — and the peer's RDMA WRITEs and READs reach
// them; memory that cannot be shared so is refused; a client that
// truncates the file under the device costs the peer an error completion,
// not ibd or simhca.
#include <fcntl.h>
#include <sys/file.h>
#include <sched.h>
#include <sys/ipc.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

#include "common/fd.hpp"
#include "test_api.hpp"

using namespace openib;
using namespace openib::testing::api;

namespace {

// The peer (b) writes `n` bytes of fill(seed) to `dst` through `mr`.
void peer_writes(Link& l, const Mr& mr, uint8_t* dst, uint32_t n, uint8_t seed) {
  fill(l.b->buf(), n, seed);
  REQUIRE(post_send(*l.b->qp, l.b->sge(0, n), 1,
                    {.op = WrOpcode::kWrite, .remote_addr = reinterpret_cast<uint64_t>(dst), .rkey = mr.rkey()}) == 0);
  CHECK(wait_wc(*l.b->cq).status == kWcSuccess);
}
// The peer reads `n` bytes at `src` through `mr` into its buffer at 32768.
void peer_reads(Link& l, const Mr& mr, const uint8_t* src, uint32_t n) {
  REQUIRE(post_send(*l.b->qp, l.b->sge(32768, n), 2,
                    {.op = WrOpcode::kRead, .remote_addr = reinterpret_cast<uint64_t>(src), .rkey = mr.rkey()}) == 0);
  CHECK(wait_wc(*l.b->cq).status == kWcSuccess);
}

// /proc/sys/vm/nr_hugepages raised for the test (root), put back after;
// one test process at a time (ibd-api and ibd-api-shm run side by side).
class HugePages {
 public:
  explicit HugePages(long want_free)
      : lock_(::open("/tmp/openib-test-hugepages.lock", O_RDWR | O_CREAT | O_CLOEXEC, 0600)) {
    if (lock_.valid()) ::flock(lock_.get(), LOCK_EX);
    before_ = read("/proc/sys/vm/nr_hugepages");
    const long free = read_meminfo("HugePages_Free:");
    if (free < want_free) write(before_ + (want_free - free));
    raised_ = read_meminfo("HugePages_Free:") >= want_free;
  }
  ~HugePages() { write(before_); }
  bool ok() const { return raised_; }

 private:
  static long read(const char* path) {
    long v = 0;
    std::ifstream(path) >> v;
    return v;
  }
  static long read_meminfo(const std::string& key) {
    std::ifstream f("/proc/meminfo");
    std::string k;
    long v = 0;
    while (f >> k) {
      if (k == key && f >> v) return v;
      f.ignore(256, '\n');
    }
    return 0;
  }
  static void write(long v) { std::ofstream("/proc/sys/vm/nr_hugepages") << v << "\n"; }
  UniqueFd lock_;  // released last, after the count is put back
  long before_ = 0;
  bool raised_ = false;
};

}  // namespace

TEST_CASE("reg_mr on MAP_SHARED|MAP_ANONYMOUS memory: it stays shared with a forked child, which sees the "
          "peer's RDMA WRITE and whose writes the peer READs",
          "[api][shared]") {
  Link l = link();
  constexpr size_t kLen = 4 * 4096;
  void* p = ::mmap(nullptr, kLen, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  REQUIRE(p != MAP_FAILED);
  auto* m = static_cast<uint8_t*>(p);
  fill(m, kLen, 91);
  int to_child[2], from_child[2];
  REQUIRE(::pipe2(to_child, O_CLOEXEC) == 0);
  REQUIRE(::pipe2(from_child, O_CLOEXEC) == 0);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    // Waits for the peer's WRITE, checks it, writes bytes of its own.
    char c = 0;
    if (::read(to_child[0], &c, 1) != 1) ::_exit(1);
    char ok = first_diff(m + 5000, 1000, 92) == 1000 ? 'y' : 'n';
    fill(m + 10000, 2000, 93);
    if (::write(from_child[1], &ok, 1) != 1) ::_exit(2);
    ::_exit(0);
  }
  ::close(to_child[0]);
  ::close(from_child[1]);
  auto mr = must(l.a->ctx->reg_mr(*l.a->pd, m + 10, kLen - 10, kAllAccess), "reg_mr shared anonymous");
  CHECK(first_diff(m, kLen, 91) == kLen);  // nothing moved
  peer_writes(l, *mr, m + 5000, 1000, 92);
  CHECK(first_diff(m + 5000, 1000, 92) == 1000);
  char c = 'g';
  REQUIRE(::write(to_child[1], &c, 1) == 1);
  REQUIRE(::read(from_child[0], &c, 1) == 1);
  CHECK(c == 'y');  // the child saw the peer's bytes: the pages are still shared
  int st = 0;
  REQUIRE(::waitpid(child, &st, 0) == child);
  CHECK((WIFEXITED(st) && WEXITSTATUS(st) == 0));
  peer_reads(l, *mr, m + 10000, 2000);
  CHECK(first_diff(l.b->buf() + 32768, 2000, 93) == 2000);  // and the peer reads the child's
  mr.reset();
  CHECK(first_diff(m + 10000, 2000, 93) == 2000);  // the program's memory as it was
  ::close(to_child[1]);
  ::close(from_child[0]);
  ::munmap(p, kLen);
}

// The first segment of an IPC namespace is id 0, which /proc/PID/maps
// shows as its inode: perftest's --use_hugepages gets it on a fresh machine.
TEST_CASE("reg_mr on SysV segment 0: registered, the peer's WRITE lands", "[api][shared]") {
  Link l = link();
  REQUIRE(::unshare(CLONE_NEWIPC) == 0);  // (root) a namespace of our own: its first segment is id 0
  constexpr size_t kLen = 4 * 4096;
  const int id = ::shmget(IPC_PRIVATE, kLen, IPC_CREAT | 0600);
  REQUIRE(id == 0);
  void* p = ::shmat(id, nullptr, 0);
  REQUIRE(p != reinterpret_cast<void*>(-1));
  REQUIRE(::shmctl(id, IPC_RMID, nullptr) == 0);  // gone at the last detach, as perftest's
  auto* m = static_cast<uint8_t*>(p);
  fill(m, kLen, 71);
  auto mr = must(l.a->ctx->reg_mr(*l.a->pd, m, kLen, kAllAccess), "reg_mr SysV segment 0");
  peer_writes(l, *mr, m + 100, 1000, 72);
  CHECK(first_diff(m + 100, 1000, 72) == 1000);
  mr.reset();
  CHECK(::shmdt(p) == 0);
}

TEST_CASE("reg_mr on a shared mapping of a memfd and of a /dev/shm file: the peer's WRITE is in the file, "
          "the file's bytes are what the peer READs",
          "[api][shared]") {
  Link l = link();
  std::string shm = "/dev/shm/openib-api-shared-" + std::to_string(::getpid());
  UniqueFd dev_shm(::open(shm.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  REQUIRE(dev_shm.valid());
  ::unlink(shm.c_str());
  UniqueFd memfd(::memfd_create("openib-api-shared", MFD_CLOEXEC));
  REQUIRE(memfd.valid());
  for (auto [what, fd] : {std::pair{"memfd", memfd.get()}, {"/dev/shm file", dev_shm.get()}}) {
    INFO(what);
    constexpr size_t kFile = 8 * 4096;
    REQUIRE(::ftruncate(fd, kFile) == 0);
    // The file's pages 2..5 mapped; an MR over pages 3..4 of the file.
    void* p = ::mmap(nullptr, 4 * 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 2 * 4096);
    REQUIRE(p != MAP_FAILED);
    auto* m = static_cast<uint8_t*>(p);
    auto mr = must(l.a->ctx->reg_mr(*l.a->pd, m + 4096, 2 * 4096, kAllAccess), "reg_mr");
    peer_writes(l, *mr, m + 4096 + 3000, 2000, 94);  // across the pages' boundary
    uint8_t back[2000];
    REQUIRE(::pread(fd, back, sizeof back, 3 * 4096 + 3000) == ssize_t(sizeof back));
    CHECK(first_diff(back, sizeof back, 94) == sizeof back);
    fill(back, sizeof back, 95);
    REQUIRE(::pwrite(fd, back, sizeof back, 4 * 4096 + 100) == ssize_t(sizeof back));
    peer_reads(l, *mr, m + 2 * 4096 + 100, 2000);
    CHECK(first_diff(l.b->buf() + 32768, 2000, 95) == 2000);
    mr.reset();
    ::munmap(p, 4 * 4096);
  }
}

TEST_CASE("reg_mr on MAP_SHARED hugetlb memory, a range across two huge pages; private hugetlb memory and "
          "mixed ranges are refused",
          "[api][shared]") {
  HugePages hp(2);
  INFO("could not get 2 free huge pages through /proc/sys/vm/nr_hugepages (root, memory)");
  REQUIRE(hp.ok());
  Link l = link();
  constexpr size_t kHuge = 2u << 20;
  void* p = ::mmap(nullptr, 2 * kHuge, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0);
  REQUIRE(p != MAP_FAILED);
  auto* m = static_cast<uint8_t*>(p);
  fill(m, 2 * kHuge, 96);
  // From the first huge page's middle into the second's.
  auto mr = must(l.a->ctx->reg_mr(*l.a->pd, m + kHuge / 2 + 10, kHuge, kAllAccess), "reg_mr hugetlb");
  CHECK(first_diff(m, 2 * kHuge, 96) == 2 * kHuge);
  peer_writes(l, *mr, m + kHuge - 500, 1000, 97);
  CHECK(first_diff(m + kHuge - 500, 1000, 97) == 1000);
  CHECK(m[kHuge - 501] == uint8_t(96 + (kHuge - 501) * 7 + ((kHuge - 501) >> 8)));  // neighbours as they were
  fill(m + kHuge + 4096, 3000, 98);
  peer_reads(l, *mr, m + kHuge + 4096, 3000);
  CHECK(first_diff(l.b->buf() + 32768, 3000, 98) == 3000);
  mr.reset();
  ::munmap(p, 2 * kHuge);

  // Private hugetlb pages are the process's own copies, not the file's:
  // nothing ibd could share. EINVAL.
  void* priv = ::mmap(nullptr, kHuge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0);
  REQUIRE(priv != MAP_FAILED);
  auto r = l.a->ctx->reg_mr(*l.a->pd, priv, 4096, kAccessLocalWrite);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == EINVAL);
  ::munmap(priv, kHuge);

  // A range that is private memory in part and shared in part: EINVAL.
  void* mixed = ::mmap(nullptr, 2 * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  REQUIRE(mixed != MAP_FAILED);
  REQUIRE(::mmap(static_cast<uint8_t*>(mixed) + 4096, 4096, PROT_READ | PROT_WRITE,
                 MAP_SHARED | MAP_ANONYMOUS | MAP_FIXED, -1, 0) != MAP_FAILED);
  auto r2 = l.a->ctx->reg_mr(*l.a->pd, mixed, 2 * 4096, kAccessLocalWrite);
  REQUIRE_FALSE(r2.ok());
  CHECK(r2.error().code == EINVAL);
  ::munmap(mixed, 2 * 4096);
}

TEST_CASE("a registered shared file truncated under the device: the peer's WRITE and READ complete in "
          "error, ibd and simhca serve on",
          "[api][shared]") {
  Link l = link();
  UniqueFd fd(::memfd_create("openib-api-truncated", MFD_CLOEXEC));
  REQUIRE(fd.valid());
  REQUIRE(::ftruncate(fd.get(), 4 * 4096) == 0);
  void* p = ::mmap(nullptr, 4 * 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  REQUIRE(p != MAP_FAILED);
  auto* m = static_cast<uint8_t*>(p);
  auto mr = must(l.a->ctx->reg_mr(*l.a->pd, m, 4 * 4096, kAllAccess), "reg_mr");
  peer_writes(l, *mr, m + 100, 100, 99);  // before: fine
  REQUIRE(::ftruncate(fd.get(), 0) == 0);
  fill(l.b->buf(), 1000, 100);
  REQUIRE(post_send(*l.b->qp, l.b->sge(0, 1000), 3,
                    {.op = WrOpcode::kWrite, .remote_addr = reinterpret_cast<uint64_t>(m + 8192),
                     .rkey = mr->rkey()}) == 0);
  Wc w = wait_wc(*l.b->cq);
  INFO("WRITE into truncated pages: status " << int(w.status));
  CHECK(w.status != kWcSuccess);
  mr.reset();
  ::munmap(p, 4 * 4096);
  // Both daemons and their devices serve a new connection and its data.
  Link l2 = link();
  fill(l2.a->buf(), 4096, 101);
  REQUIRE(post_send(*l2.a->qp, l2.a->sge(0, 4096), 4,
                    {.op = WrOpcode::kWrite, .remote_addr = l2.b->va(0), .rkey = l2.b->mr->rkey()}) == 0);
  CHECK(wait_wc(*l2.a->cq).status == kWcSuccess);
  CHECK(first_diff(l2.b->buf(), 4096, 101) == 4096);
}
