// The check every codec fuzz target makes: what decodes encodes to bytes
// that decode to the same value.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <span>
#include <vector>

namespace openib::fuzz {

template <typename Dec, typename Enc>
void round_trip(std::span<const std::byte> in, Dec dec, Enc enc, std::size_t size) {
  auto v = dec(in);
  if (!v.ok()) return;
  std::vector<std::byte> out(size);
  enc(out, *v);
  auto w = dec(out);
  if (!w.ok() || !(*w == *v)) std::abort();
}

}  // namespace openib::fuzz
