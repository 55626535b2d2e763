// A shared path table (src/sa/path_table.hpp) in test memory: an aligned
// zeroed buffer, formatted, and keys that differ in their DGID's last bytes.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "sa/path_table.hpp"

namespace openib::sa::test {

// Zeroed memory for a table of `slots` slots, 8-byte aligned.
class TableMemory {
 public:
  explicit TableMemory(std::uint32_t slots) : words_(path_table_bytes(slots) / 8 + 1) {}
  std::span<std::byte> bytes() { return std::as_writable_bytes(std::span(words_)); }
  std::span<const std::byte> cbytes() const { return std::as_bytes(std::span(words_)); }

 private:
  std::vector<std::uint64_t> words_;
};

inline PathTableKey table_key(std::uint32_t n, std::uint8_t port = 1, std::uint16_t pkey = 0xffff) {
  PathTableKey k;
  k.port = port;
  k.pkey = pkey;
  k.dgid = {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x00, 0x02, 0xc9, 0x03, 0, 0, 0, 0};
  for (int i = 0; i < 4; ++i) k.dgid[15 - i] = static_cast<std::uint8_t>(n >> (8 * i));
  return k;
}

}  // namespace openib::sa::test
