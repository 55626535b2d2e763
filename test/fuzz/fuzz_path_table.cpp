// libFuzzer target: arbitrary bytes as the shared path table's mapping
// (src/sa/path_table.hpp), as a client would map a table ibd (or anything
// else) wrote. Input: byte 0 flags, then the mapping; keys to look up are
// cut from the mapping's own slots and from the input's tail. With flag
// bit 0 the header's identity fields are made right, so the fuzzer reaches
// the slots instead of stopping at attach(). attach() and find() must never
// crash, read out of bounds or loop without bound; a refusal is EPROTO, an
// accepted table fits the mapping.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "sa/path_table.hpp"

using namespace openib::sa;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::uint8_t flags = data[0];
  ++data, --size;
  // The mapping: 8-byte aligned, as mmap's is; sized to the input.
  std::vector<std::uint64_t> words(size / 8 + 1);
  std::memcpy(words.data(), data, size);
  auto* bytes = reinterpret_cast<std::byte*>(words.data());
  if ((flags & 1) && size >= kPathTableHeaderBytes) {
    std::uint32_t slots = 64;
    while (path_table_bytes(slots * 2) <= size) slots *= 2;
    const std::uint32_t id[4] = {kPathTableMagic, kPathTableVersion, slots, static_cast<std::uint32_t>(kPathTableSlotBytes)};
    std::memcpy(bytes, id, sizeof(id));
  }
  auto r = PathTableReader::attach(std::span<const std::byte>(bytes, size));
  if (!r.ok()) {
    if (r.error().code != EPROTO) std::abort();
    return 0;
  }
  if (path_table_bytes(r->slots()) > size) std::abort();
  PathTableEntry e;
  // Keys as the slots hold them (port at slot byte 9, P_Key 10-11, DGID 16-31).
  for (std::uint32_t i = 0; i < r->slots() && i < 512; ++i) {
    const std::byte* s = bytes + kPathTableHeaderBytes + std::size_t{i} * kPathTableSlotBytes;
    PathTableKey k;
    k.port = static_cast<std::uint8_t>(s[9]);
    std::memcpy(&k.pkey, s + 10, 2);
    std::memcpy(k.dgid.data(), s + 16, 16);
    if (flags & 2) k.pkey = 0;  // through the header's default P_Key
    (void)r->find(k, &e);
  }
  // Keys from the input's tail, 19 bytes each.
  for (std::size_t off = 0; off + 19 <= size && off < 19 * 64; off += 19) {
    PathTableKey k;
    k.port = data[size - 1 - off];
    std::memcpy(&k.pkey, data + size - 3 - off, 2);
    std::memcpy(k.dgid.data(), data + size - 19 - off, 16);
    (void)r->find(k, &e);
    (void)r->find(k, nullptr);
  }
  return 0;
}
