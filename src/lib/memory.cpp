// Memory registration (docs/library.md "Memory"): alloc_mr's memfd-backed
// buffers and reg_mr's in-place remap of anonymous private memory onto the
// process's registered-pages memfd, so ibd can map the pages for the device
// (docs/simhca.md §12.6).
#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <string_view>
#include <vector>

#include "common/log.hpp"
#include "lib/objects.hpp"

namespace openib::lib {

using proto::Op;

namespace {

constexpr size_t kPage = 4096;
// The registered-pages memfd's size: every user address of x86-64 and
// AArch64, 5-level paging included (56 bits). Sparse: it costs the pages
// in it only.
constexpr uint64_t kRegSpace = uint64_t{1} << 57;
constexpr std::string_view kRegName = "/memfd:openib-reg-mr";

// One line of /proc/self/maps.
struct Mapping {
  uintptr_t lo = 0, hi = 0;
  char perms[5] = {};
  uint64_t offset = 0;
  unsigned long ino = 0;
  std::string name;
};

// The mappings that overlap [s, e), in order (holes between them left out).
Result<std::vector<Mapping>> overlapping(uintptr_t s, uintptr_t e) {
  std::ifstream maps("/proc/self/maps");
  if (!maps) return sys_err("open /proc/self/maps");
  std::vector<Mapping> out;
  std::string line;
  while (std::getline(maps, line)) {
    Mapping m;
    unsigned long lo = 0, hi = 0;
    int name_at = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx %4s %lx %*x:%*x %lu %n", &lo, &hi, m.perms, &m.offset, &m.ino,
                    &name_at) < 5)
      continue;
    if (hi <= s) continue;
    if (lo >= e) break;
    m.lo = lo;
    m.hi = hi;
    if (name_at > 0) m.name = line.substr(size_t(name_at));
    out.push_back(std::move(m));
  }
  return out;
}

// The mappings that cover [s, e); EINVAL at the first hole.
Result<std::vector<Mapping>> mappings_of(uintptr_t s, uintptr_t e) {
  OPENIB_TRY_ASSIGN(auto out, overlapping(s, e));
  uintptr_t cur = s;
  for (const Mapping& m : out) {
    if (m.lo > cur) break;
    cur = m.hi;
  }
  if (cur < e) return err(EINVAL, "reg_mr: {:#x} is not mapped", cur);
  return out;
}

// [s, e) lies in shared mappings only, none of them the registered-pages
// memfd's (whose ranges reg_mr handles as the private memory it was):
// memory ibd maps from its file (MAP_MEM_SHARED), and which says why if it
// cannot. A range with private and shared parts is neither: EINVAL.
Result<bool> shared_range(uintptr_t s, uintptr_t e) {
  OPENIB_TRY_ASSIGN(auto maps, mappings_of(s, e));
  size_t shared = 0;
  for (const Mapping& m : maps)
    if (m.perms[3] == 's' && m.name.rfind(kRegName, 0) != 0) ++shared;
  if (shared == 0) return false;
  if (shared == maps.size()) return true;
  return err(EINVAL, "reg_mr: [{:#x}, {:#x}) has private and shared mappings in it", s, e);
}

// The process's registered pages (docs/library.md "Memory"): one sparse
// memfd in which the page at address A lives at offset A. reg_mr copies
// private anonymous pages in and maps the memfd over them (MAP_FIXED), so
// the program's pointers and data stay, and a page registered twice (by
// overlapping ranges, by two contexts) is one page, which every MR on it
// sees. ibd maps the MR's range of the memfd (MAP_MEM_RANGE). A child
// after fork() (another pid) starts a memfd of its own: the pages it
// inherited are its parent's, and are copied like private ones when it
// registers them.
class RegPages {
 public:
  static RegPages& get() {
    static RegPages* p = new RegPages;  // for the process's life: its pages stay mapped
    return *p;
  }
  std::mutex mu;

  // Under mu: the memfd of this process, made on first use.
  Result<int> fd() {
    if (fd_ && pid_ == ::getpid()) return fd_.get();
    struct rlimit rl{};
    uint64_t size = kRegSpace;
    // ftruncate past RLIMIT_FSIZE would raise SIGXFSZ.
    if (::getrlimit(RLIMIT_FSIZE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
      size = std::min<uint64_t>(size, rl.rlim_cur & ~uint64_t{kPage - 1});
    if (size == 0) return err(EFBIG, "reg_mr: RLIMIT_FSIZE leaves no room for the registered pages' memfd");
    OPENIB_TRY_ASSIGN(UniqueFd f, sealed_memfd(kRegName.substr(7).data(), size));
    struct stat st{};
    if (::fstat(f.get(), &st) < 0) return sys_err("fstat the registered pages' memfd");
    fd_ = std::move(f);
    pid_ = ::getpid();
    ino_ = st.st_ino;
    size_ = size;
    shared_ = false;
    live_.clear();  // a parent's, of its memfd
    pending_.clear();
    pending_bytes_ = 0;
    static std::once_flag once;
    std::call_once(once, [] { ::pthread_atfork(nullptr, [] { get().shared_ = true; }, nullptr); });
    return fd_.get();
  }

  // Under mu: every page of [s, e) is the memfd's page at its address.
  Result<void> adopt(uintptr_t s, uintptr_t e) {
    OPENIB_TRY_ASSIGN(int f, fd());
    if (e > size_) return err(EINVAL, "reg_mr: {:#x} is above the registered pages' memfd ({:#x} bytes)", e, size_);
    OPENIB_TRY_ASSIGN(auto maps, mappings_of(s, e));
    std::vector<std::pair<uintptr_t, uintptr_t>> copy;
    for (const Mapping& m : maps) {
      const uintptr_t lo = std::max(m.lo, s), hi = std::min(m.hi, e);
      if (ours(m)) continue;
      const bool rw = m.perms[0] == 'r' && m.perms[1] == 'w';
      const bool anon = m.ino == 0 && (m.name.empty() || m.name == "[heap]" || m.name.rfind("[anon:", 0) == 0);
      // A parent's registered pages, inherited through fork().
      const bool inherited = m.name.rfind(kRegName, 0) == 0 && m.perms[3] == 's' && m.offset == m.lo;
      if (!rw || !((anon && m.perms[3] == 'p') || inherited))
        return err(EINVAL, "reg_mr: [{:#x}, {:#x}) is not private anonymous read/write memory ({} {})", m.lo, m.hi,
                   m.perms, m.name.empty() ? "anonymous" : m.name);
      copy.emplace_back(lo, hi);
    }
    for (auto [lo, hi] : copy) {
      for (size_t done = 0; done < hi - lo;) {
        // Whole pages, neighbours of the caller's buffer included: the raw
        // system call, so sanitizers do not take it for an overflow.
        ssize_t n = ::syscall(SYS_pwrite64, f, reinterpret_cast<const void*>(lo + done), hi - lo - done,
                              static_cast<off_t>(lo + done));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return sys_err("copy [{:#x}, {:#x}) into the registered pages' memfd", lo, hi);
        done += size_t(n);
      }
      void* p = ::mmap(reinterpret_cast<void*>(lo), hi - lo, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, f,
                       static_cast<off_t>(lo));
      if (p == MAP_FAILED) return sys_err("map [{:#x}, {:#x}) onto the registered pages' memfd", lo, hi);
    }
    return ok();
  }

  // Under mu: an MR holds [s, e) (hold) or no longer does (release).
  void hold(uintptr_t s, uintptr_t e) { live_.emplace(s, e); }
  // Pages that no MR holds any more and that the program no longer maps
  // where reg_mr put them (it unmapped them) go back to the system, or the
  // memfd would keep them for the process's life. Most programs unmap
  // after deregistering, so released ranges wait in pending_, and are
  // looked at again (one read of /proc/self/maps) each time kGcBytes more
  // of them have piled up. Never after a fork(): the child may map them.
  void release(uintptr_t s, uintptr_t e) {
    if (auto it = live_.find({s, e}); it != live_.end()) live_.erase(it);
    if (shared_ || !fd_ || pid_ != ::getpid()) return;
    // Merged into pending_'s disjoint ranges.
    auto it = pending_.upper_bound(s);
    if (it != pending_.begin() && std::prev(it)->second >= s) --it;
    while (it != pending_.end() && it->first <= e) {
      pending_bytes_ -= it->second - it->first;
      s = std::min(s, it->first);
      e = std::max(e, it->second);
      it = pending_.erase(it);
    }
    pending_.emplace(s, e);
    pending_bytes_ += e - s;
    if (pending_bytes_ >= gc_at_) collect();
  }

 private:
  static constexpr uint64_t kGcBytes = 32u << 20;
  using Ranges = std::vector<std::pair<uintptr_t, uintptr_t>>;

  void collect() {
    auto maps = overlapping(pending_.begin()->first, std::prev(pending_.end())->second);
    if (!maps) return;
    std::map<uintptr_t, uintptr_t> keep;
    pending_bytes_ = 0;
    for (auto [s, e] : pending_) {
      Ranges unused{{s, e}};
      for (const Mapping& m : *maps)
        if (ours(m)) unused = minus(unused, m.lo, m.hi);
      for (auto it = live_.begin(); it != live_.end() && it->first < e; ++it)
        if (it->second > s) unused = minus(unused, it->first, it->second);
      Ranges kept{{s, e}};
      for (auto [lo, hi] : unused) {
        kept = minus(kept, lo, hi);
        if (::fallocate(fd_.get(), FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, off_t(lo), off_t(hi - lo)) < 0)
          log::get("openib")->warn("reg_mr: punching [{:#x}, {:#x}) out of the registered pages' memfd: {}", lo,
                                   hi, std::strerror(errno));
      }
      for (auto [lo, hi] : kept) {
        keep.emplace(lo, hi);
        pending_bytes_ += hi - lo;
      }
    }
    pending_ = std::move(keep);
    gc_at_ = pending_bytes_ + kGcBytes;
  }

  RegPages() = default;
  bool ours(const Mapping& m) const {
    return m.ino == ino_ && m.name.rfind(kRegName, 0) == 0 && m.offset == m.lo && m.perms[3] == 's';
  }
  static Ranges minus(const Ranges& in, uintptr_t lo, uintptr_t hi) {
    Ranges out;
    for (auto [a, b] : in) {
      if (hi <= a || lo >= b) {
        out.emplace_back(a, b);
        continue;
      }
      if (a < lo) out.emplace_back(a, lo);
      if (hi < b) out.emplace_back(hi, b);
    }
    return out;
  }

  UniqueFd fd_;
  pid_t pid_ = 0;
  ino_t ino_ = 0;
  uint64_t size_ = 0;
  bool shared_ = false;  // forked since the memfd was made
  std::multiset<std::pair<uintptr_t, uintptr_t>> live_;  // each MR's pages
  std::map<uintptr_t, uintptr_t> pending_;               // released, start -> end
  uint64_t pending_bytes_ = 0, gc_at_ = kGcBytes;
};

}  // namespace

Result<std::unique_ptr<Mr>> ContextImpl::alloc_mr(Pd& pd, size_t length, uint32_t access) {
  if (length == 0) return err(EINVAL, "alloc_mr of 0 bytes");
  const size_t size = (length + kPage - 1) / kPage * kPage;
  OPENIB_TRY_ASSIGN(MemfdMap m, memfd_map("openib-mr", size));
  std::unique_ptr<MrImpl> mr(new MrImpl(*this));
  mr->map_base_ = m.base;
  mr->map_size_ = size;
  mr->addr_ = m.base;
  mr->length_ = length;
  int fd = m.fd.get();
  OPENIB_TRY_ASSIGN(auto mm, conn_->call<proto::MapMemRep>(Op::kMapMem, proto::MapMemReq{size}, std::span(&fd, 1)));
  mr->mem_ = mm.handle;
  proto::RegMrReq req{pd.handle(), mm.handle, 0, length, reinterpret_cast<uint64_t>(m.base), access};
  OPENIB_TRY_ASSIGN(auto r, conn_->call<proto::RegMrRep>(Op::kRegMr, req));
  mr->handle_ = r.handle;
  mr->lkey_ = r.lkey;
  mr->rkey_ = r.rkey;
  return std::unique_ptr<Mr>(std::move(mr));
}

Result<std::unique_ptr<Mr>> ContextImpl::reg_mr(Pd& pd, void* addr, size_t length, uint32_t access) {
  if (!addr || length == 0) return err(EINVAL, "reg_mr of an empty range");
  if (version_ < proto::kProtocolMapRange)
    return err(EOPNOTSUPP, "reg_mr needs an ibd of protocol {} (MAP_MEM_RANGE); this one speaks {}",
               proto::kProtocolMapRange, version_);
  const uintptr_t a = reinterpret_cast<uintptr_t>(addr);
  if (a + length < a) return err(EINVAL, "reg_mr: {:#x} + {} wraps", a, length);
  const uintptr_t s = a & ~(kPage - 1);
  const uintptr_t e = (a + length + kPage - 1) & ~(kPage - 1);
  std::unique_ptr<MrImpl> mr(new MrImpl(*this));
  mr->addr_ = addr;
  mr->length_ = length;
  OPENIB_TRY_ASSIGN(bool shared, shared_range(s, e));
  if (shared) {
    // Shared memory stays where it is, shared with whoever else maps it:
    // ibd maps the same file (MAP_MEM_SHARED, protocol 8).
    if (version_ < proto::kProtocolMapShared)
      return err(EINVAL, "reg_mr: [{:#x}, {:#x}) is shared memory, which needs an ibd of protocol {} "
                 "(MAP_MEM_SHARED); this one speaks {}", s, e, proto::kProtocolMapShared, version_);
    OPENIB_TRY_ASSIGN(auto mm, conn_->call<proto::MapMemRep>(Op::kMapMemShared, proto::MapMemRangeReq{s, e - s}));
    mr->mem_ = mm.handle;
  } else {
    RegPages& pages = RegPages::get();
    std::lock_guard lock(pages.mu);
    OPENIB_TRY(pages.adopt(s, e));
    OPENIB_TRY_ASSIGN(int fd, pages.fd());
    OPENIB_TRY_ASSIGN(auto mm, conn_->call<proto::MapMemRep>(Op::kMapMemRange, proto::MapMemRangeReq{s, e - s},
                                                             std::span(&fd, 1)));
    mr->mem_ = mm.handle;
    pages.hold(s, e);
    mr->reg_start_ = s;
    mr->reg_end_ = e;
  }
  proto::RegMrReq req{pd.handle(), mr->mem_, a - s, length, a, access};
  auto r = conn_->call<proto::RegMrRep>(Op::kRegMr, req);
  if (!r) return r.take_error();  // ~MrImpl unmaps and releases the pages
  mr->handle_ = r->handle;
  mr->lkey_ = r->lkey;
  mr->rkey_ = r->rkey;
  return std::unique_ptr<Mr>(std::move(mr));
}

// The pages of a reg_mr'd range stay mapped (onto the memfd) after
// deregistration: the program still uses them (docs/library.md).
MrImpl::~MrImpl() {
  if (handle_) ctx_.destroy(Op::kDeregMr, handle_);
  if (mem_) ctx_.destroy(Op::kUnmapMem, mem_);
  if (reg_end_) {
    RegPages& pages = RegPages::get();
    std::lock_guard lock(pages.mu);
    pages.release(reg_start_, reg_end_);
  }
  if (map_base_) ::munmap(map_base_, map_size_);
}

}  // namespace openib::lib
