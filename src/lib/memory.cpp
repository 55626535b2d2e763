// Memory registration (docs/library.md "Memory"): alloc_mr's memfd-backed
// buffers and reg_mr's in-place remap of anonymous private memory onto a
// memfd, so ibd can map the pages for the device (docs/simhca.md §12.6).
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "common/log.hpp"
#include "lib/objects.hpp"

namespace openib::lib {

using proto::Op;

namespace {

constexpr size_t kPage = 4096;

// Every byte of [s, e) lies in readable, writable, private, anonymous
// mappings (inode 0; no name, or "[heap]" / "[anon:...]").
Result<void> check_anonymous(uintptr_t s, uintptr_t e) {
  std::ifstream maps("/proc/self/maps");
  if (!maps) return sys_err("open /proc/self/maps");
  std::string line;
  uintptr_t cur = s;
  while (cur < e && std::getline(maps, line)) {
    unsigned long lo = 0, hi = 0, ino = 0;
    char perms[5] = {};
    int name_at = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx %4s %*x %*x:%*x %lu %n", &lo, &hi, perms, &ino, &name_at) < 4)
      continue;
    if (hi <= cur || lo >= e) continue;
    if (lo > cur) return err(EINVAL, "reg_mr: {:#x} is not mapped", cur);
    std::string name = name_at > 0 ? line.substr(size_t(name_at)) : "";
    bool anon = ino == 0 && (name.empty() || name == "[heap]" || name.rfind("[anon:", 0) == 0);
    if (!anon || perms[0] != 'r' || perms[1] != 'w' || perms[3] != 'p')
      return err(EINVAL, "reg_mr: [{:#x}, {:#x}) is not private anonymous read/write memory ({} {})", lo, hi,
                 perms, name.empty() ? "anonymous" : name);
    cur = hi;
  }
  if (cur < e) return err(EINVAL, "reg_mr: {:#x} is not mapped", cur);
  return ok();
}

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
  const uintptr_t a = reinterpret_cast<uintptr_t>(addr);
  const uintptr_t s = a & ~(kPage - 1);
  const uintptr_t e = (a + length + kPage - 1) & ~(kPage - 1);
  std::unique_ptr<MrImpl> mr(new MrImpl(*this));
  mr->addr_ = addr;
  mr->length_ = length;
  Remap* rm = nullptr;
  {
    std::lock_guard lock(mu_);
    // Memory an earlier reg_mr remapped: reuse its memfd.
    for (auto& r : remaps_) {
      if (s >= r->start && e <= r->start + r->size) {
        rm = r.get();
        break;
      }
      if (s < r->start + r->size && e > r->start)
        return err(EINVAL, "reg_mr: [{:#x}, {:#x}) partly overlaps registered memory [{:#x}, {:#x})", s, e,
                   r->start, r->start + r->size);
    }
    if (!rm) {
      OPENIB_TRY(check_anonymous(s, e));
      // A memfd with the current contents, mapped over the same pages
      // (MAP_FIXED): the program's pointers stay valid, the data is kept.
      auto nr = std::make_unique<Remap>();
      nr->start = s;
      nr->size = e - s;
      OPENIB_TRY_ASSIGN(nr->fd, sealed_memfd("openib-reg-mr", nr->size));
      for (size_t done = 0; done < nr->size;) {
        // Whole pages, neighbours of the caller's buffer included: the raw
        // system call, so sanitizers do not take it for an overflow.
        ssize_t n = ::syscall(SYS_pwrite64, nr->fd.get(), reinterpret_cast<const void*>(s + done),
                              nr->size - done, static_cast<off_t>(done));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return sys_err("copy [{:#x}, {:#x}) into a memfd", s, e);
        done += size_t(n);
      }
      void* p = ::mmap(reinterpret_cast<void*>(s), nr->size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED,
                       nr->fd.get(), 0);
      if (p == MAP_FAILED) return sys_err("remap [{:#x}, {:#x}) onto a memfd", s, e);
      remaps_.push_back(std::move(nr));
      rm = remaps_.back().get();
    }
    if (rm->users == 0) {
      int fd = rm->fd.get();
      OPENIB_TRY_ASSIGN(auto mm, conn_->call<proto::MapMemRep>(Op::kMapMem, proto::MapMemReq{rm->size},
                                                               std::span(&fd, 1)));
      rm->mem = mm.handle;
    }
    ++rm->users;
  }
  mr->remap_ = rm;
  proto::RegMrReq req{pd.handle(), rm->mem, a - rm->start, length, a, access};
  auto r = conn_->call<proto::RegMrRep>(Op::kRegMr, req);
  if (!r) return r.take_error();  // ~MrImpl releases the remap
  mr->handle_ = r->handle;
  mr->lkey_ = r->lkey;
  mr->rkey_ = r->rkey;
  return std::unique_ptr<Mr>(std::move(mr));
}

void ContextImpl::release_remap(Remap* r) {
  std::lock_guard lock(mu_);
  if (--r->users == 0) {
    auto res = conn_->call_void(Op::kUnmapMem, proto::HandleReq{r->mem});
    if (!res) log::get("openib")->warn("UNMAP_MEM {}: {}", r->mem, res.error().str());
    r->mem = 0;
  }
}

// The pages of a reg_mr'd range stay mapped (onto the memfd) after
// deregistration: the program still uses them (docs/library.md).
MrImpl::~MrImpl() {
  if (handle_) ctx_.destroy(Op::kDeregMr, handle_);
  if (remap_) ctx_.release_remap(remap_);
  if (mem_) ctx_.destroy(Op::kUnmapMem, mem_);
  if (map_base_) ::munmap(map_base_, map_size_);
}

}  // namespace openib::lib
