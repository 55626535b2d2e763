#include "sim/cable/link_signal.hpp"

#include <algorithm>

namespace openib::sim {

namespace {
constexpr std::array<unsigned char, 6> kMagic = {'O', 'P', 'L', 'I', 'N', 'K'};
constexpr unsigned char kVersion = 1;
}  // namespace

std::array<std::byte, kLinkSignalBytes> encode_link_signal(bool up) {
  std::array<std::byte, kLinkSignalBytes> d{};
  for (std::size_t i = 0; i < kMagic.size(); ++i) d[i] = std::byte{kMagic[i]};
  d[6] = std::byte{kVersion};
  d[7] = std::byte{static_cast<unsigned char>(up ? 1 : 0)};
  return d;
}

std::optional<bool> decode_link_signal(std::span<const std::byte> d) {
  if (d.size() != kLinkSignalBytes) return std::nullopt;
  if (!std::equal(kMagic.begin(), kMagic.end(), d.begin(),
                  [](unsigned char m, std::byte b) { return std::byte{m} == b; }))
    return std::nullopt;
  if (d[6] != std::byte{kVersion} || (d[7] != std::byte{0} && d[7] != std::byte{1})) return std::nullopt;
  return d[7] == std::byte{1};
}

}  // namespace openib::sim
