#include "lib/arena.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>

#include "lib/conn.hpp"

namespace openib::lib {

Result<UniqueFd> sealed_memfd(const char* name, size_t size) {
  UniqueFd fd(::memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!fd) return sys_err("memfd_create");
  if (::ftruncate(fd.get(), static_cast<off_t>(size)) < 0) return sys_err("ftruncate memfd to {}", size);
  if (::fcntl(fd.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0)
    return sys_err("seal memfd of {} bytes", size);
  return fd;
}

Result<MemfdMap> memfd_map(const char* name, size_t size, void* fixed_addr) {
  MemfdMap m;
  OPENIB_TRY_ASSIGN(m.fd, sealed_memfd(name, size));
  void* p = ::mmap(fixed_addr, size, PROT_READ | PROT_WRITE, MAP_SHARED | (fixed_addr ? MAP_FIXED : 0),
                   m.fd.get(), 0);
  if (p == MAP_FAILED) return sys_err("mmap memfd of {} bytes", size);
  m.base = static_cast<std::byte*>(p);
  return m;
}

Arena::~Arena() {
  for (auto& c : chunks_)
    if (c->base) ::munmap(c->base, c->size);
}

void Arena::release() {
  std::lock_guard lock(mu_);
  for (auto& c : chunks_) (void)conn_.call_void(proto::Op::kUnmapMem, proto::HandleReq{c->mem});
}

Result<uint32_t> Arena::grow(size_t min_size) {
  const size_t size = (min_size + kChunk - 1) / kChunk * kChunk;
  OPENIB_TRY_ASSIGN(MemfdMap m, memfd_map("openib-rings", size));
  auto c = std::make_unique<Chunk>();
  c->fd = std::move(m.fd);
  c->base = m.base;
  c->size = size;
  int fd = c->fd.get();
  auto rep = conn_.call<proto::MapMemRep>(proto::Op::kMapMem, proto::MapMemReq{size}, std::span(&fd, 1));
  if (!rep) {
    ::munmap(c->base, size);
    return rep.take_error();
  }
  c->mem = rep->handle;
  c->free.emplace(0, size);
  chunks_.push_back(std::move(c));
  return static_cast<uint32_t>(chunks_.size() - 1);
}

// First fit; blocks are multiples of kAlign, so every offset is aligned.
bool Arena::take(Chunk& c, size_t size, uint64_t& off) {
  for (auto it = c.free.begin(); it != c.free.end(); ++it) {
    if (it->second < size) continue;
    off = it->first;
    size_t rest = it->second - size;
    c.free.erase(it);
    if (rest) c.free.emplace(off + size, rest);
    return true;
  }
  return false;
}

Result<Block> Arena::alloc(size_t size) {
  size = (size + kAlign - 1) / kAlign * kAlign;
  std::lock_guard lock(mu_);
  uint64_t off = 0;
  uint32_t idx = UINT32_MAX;
  // Newest chunk first: it is where free space usually is.
  for (size_t i = chunks_.size(); i-- > 0;)
    if (take(*chunks_[i], size, off)) {
      idx = static_cast<uint32_t>(i);
      break;
    }
  if (idx == UINT32_MAX) {
    OPENIB_TRY_ASSIGN(idx, grow(size));
    if (!take(*chunks_[idx], size, off)) return err(ENOMEM, "ring arena: {} bytes", size);
  }
  Chunk& c = *chunks_[idx];
  Block b{idx, c.mem, off, size, c.base + off};
  std::memset(b.ptr, 0, size);
  return b;
}

void Arena::free(const Block& b) {
  if (!b.ptr) return;
  std::lock_guard lock(mu_);
  Chunk& c = *chunks_[b.chunk];
  uint64_t off = b.offset;
  size_t size = b.size;
  auto next = c.free.lower_bound(off);
  if (next != c.free.end() && next->first == off + size) {
    size += next->second;
    next = c.free.erase(next);
  }
  if (next != c.free.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == off) {
      prev->second += size;
      return;
    }
  }
  c.free.emplace(off, size);
}

}  // namespace openib::lib
