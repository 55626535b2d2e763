// Reference byte strings in tests: hex("01 03 02 ...") (spaces ignored)
// and the first n bytes of a buffer, to compare with one.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace openib::test {

inline std::vector<std::byte> hex(std::string_view s) {
  std::vector<std::byte> out;
  std::string digits;
  for (char c : s)
    if (c != ' ') digits.push_back(c);
  for (std::size_t i = 0; i + 1 < digits.size(); i += 2)
    out.push_back(static_cast<std::byte>(std::stoi(digits.substr(i, 2), nullptr, 16)));
  return out;
}

inline std::vector<std::byte> prefix(std::span<const std::byte> b, std::size_t n) {
  return std::vector<std::byte>(b.begin(), b.begin() + static_cast<std::ptrdiff_t>(n));
}

}  // namespace openib::test
