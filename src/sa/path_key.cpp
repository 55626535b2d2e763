// PathKey's hash: FNV-1a over port, mask and the query's wire bytes.
#include "sa/path_key.hpp"

#include <array>

namespace openib::sa {

std::size_t PathKeyHash::operator()(const PathKey& k) const {
  std::array<std::byte, kPathRecordBytes + 9> buf{};
  buf[0] = std::byte{k.port()};
  mad::put64(buf, 1, k.comp_mask());
  encode_path_record(std::span(buf).subspan(9), k.query());
  std::uint64_t h = 14695981039346656037ull;
  for (std::byte b : buf) h = (h ^ std::to_integer<std::uint64_t>(b)) * 1099511628211ull;
  return static_cast<std::size_t>(h);
}

}  // namespace openib::sa
