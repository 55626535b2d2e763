// libFuzzer target: arbitrary slots in a shared-memory cable's ring
// (docs/cables.md "Shared-memory cable", "Segments"), as a damaged file or
// a hostile peer would leave them, taken by ShmLink::poll(). Nothing may
// crash, read outside the ring or hand over a packet whose parse does not
// hold together; the ring stays in step (everything published is taken).
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "common/log.hpp"
#include "sim/cable/shm_link.hpp"
#include "sim/wire/packet.hpp"

using namespace openib::sim;

namespace {

// The file format's offsets (docs/cables.md): ring 0 (end A sends, end B
// receives) has its control block at 4096, its head first, its tail on
// the next cache line; its slots start at 8192.
constexpr std::size_t kRing0 = 4096, kSlots0 = 8192;

struct Rig {
  std::string path = "/dev/shm/openib-fuzz-shm-" + std::to_string(::getpid());
  std::unique_ptr<ShmLink> a, b;
  std::byte* map = nullptr;  // our own view of the file
  std::size_t size = 0;
  Rig() {
    openib::log::set_level("off");
    ::unlink(path.c_str());
    ShmLinkOptions o;
    o.path = path;
    o.end = 'A';
    a = std::move(ShmLink::create(o)).value();
    o.end = 'B';
    b = std::move(ShmLink::create(o)).value();
    b->set_parsed_receiver([](std::size_t wire_bytes, const wire::ParsedPacket& p) {
      // What a device relies on: a payload no larger than an MTU, every
      // byte of it readable (inside the mapping), and a size the LRH
      // agrees with.
      if (p.payload.size() > 4096 || wire_bytes != std::size_t{p.hdr.lrh.pkt_len} * 4 + 2) std::abort();
      volatile unsigned sum = 0;
      for (std::byte x : p.payload) sum = sum + std::to_integer<unsigned>(x);  // every byte readable
    });
    const int fd = ::open(path.c_str(), O_RDWR);
    size = static_cast<std::size_t>(::lseek(fd, 0, SEEK_END));
    map = static_cast<std::byte*>(::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
    ::close(fd);
    if (map == MAP_FAILED) std::abort();
    ::unlink(path.c_str());  // the mappings keep it
  }
  std::uint64_t& word(std::size_t off) { return *reinterpret_cast<std::uint64_t*>(map + off); }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static Rig rig;
  if (size < 1) return 0;
  const std::size_t ring_bytes = std::size_t{ShmLink::kSlots} * ShmLink::kSlotBytes;
  const std::uint64_t tail = std::atomic_ref(rig.word(kRing0 + 64)).load();
  // The input, from the first free slot on (wrapping), then published.
  const std::size_t start = static_cast<std::size_t>(tail % ShmLink::kSlots) * ShmLink::kSlotBytes;
  const std::size_t n = std::min(size - 1, ring_bytes);
  for (std::size_t i = 0; i < n; ++i) rig.map[kSlots0 + (start + i) % ring_bytes] = static_cast<std::byte>(data[1 + i]);
  const std::uint64_t slots = data[0] % ShmLink::kSlots + 1;
  std::atomic_ref(rig.word(kRing0)).store(tail + slots);
  rig.b->poll(SIZE_MAX);
  // Everything published was taken: the next input starts in step.
  if (std::atomic_ref(rig.word(kRing0 + 64)).load() != tail + slots) std::abort();
  return 0;
}
