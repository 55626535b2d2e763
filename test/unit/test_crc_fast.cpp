// The fast CRC paths of src/sim/wire/crc.cpp (ISA-L's CRC-32, the
// PCLMULQDQ-folded VCRC CRC-16) against the byte-table forms, which
// test_ib_wire.cpp checks against the reference values: every length
// around the folding thresholds, odd alignments and chained calls.
#include <catch2/catch.hpp>

#include <cstddef>
#include <random>
#include <span>
#include <vector>

#include "sim/wire/crc.hpp"
#include "sim/wire/packet.hpp"

using namespace openib::sim::wire;

namespace {

std::vector<std::byte> random_bytes(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<std::byte> v(n);
  for (auto& b : v) b = static_cast<std::byte>(rng() & 0xFF);
  return v;
}

}  // namespace

TEST_CASE("Fast CRC-32 and VCRC equal the table forms at every length and alignment", "[wire][crc]") {
  const auto buf = random_bytes(kMaxPacketBytes + 16, 7);
  const std::span<const std::byte> all(buf);
  std::vector<std::size_t> lens;
  for (std::size_t n = 0; n <= 300; ++n) lens.push_back(n);
  for (std::size_t n : {511u, 512u, 513u, 1023u, 4095u, 4096u, 4097u, 4158u, 8190u}) lens.push_back(n);
  for (std::size_t n : lens) {
    for (std::size_t off : {0u, 1u, 3u, 8u, 13u}) {
      const auto s = all.subspan(off, n);
      INFO("length " << n << " offset " << off);
      REQUIRE(crc32(0, s) == detail::crc32_table(0, s));
      REQUIRE(crc16_vcrc(0, s) == detail::crc16_vcrc_table(0, s));
      // A non-trivial starting value (a chained call) goes in the same way.
      REQUIRE(crc32(0x12345678u, s) == detail::crc32_table(0x12345678u, s));
      REQUIRE(crc16_vcrc(0xBEEF, s) == detail::crc16_vcrc_table(0xBEEF, s));
    }
  }
}

TEST_CASE("Fast VCRC sees every single-bit error in a 4 KiB packet body", "[wire][crc]") {
  auto buf = random_bytes(4158, 11);
  const std::uint16_t good = crc16_vcrc(0, buf);
  REQUIRE(good == detail::crc16_vcrc_table(0, buf));
  for (std::size_t bit = 0; bit < buf.size() * 8; bit += 97) {
    buf[bit / 8] ^= static_cast<std::byte>(1u << (bit % 8));
    REQUIRE(crc16_vcrc(0, buf) != good);
    REQUIRE(crc16_vcrc(0, buf) == detail::crc16_vcrc_table(0, buf));
    buf[bit / 8] ^= static_cast<std::byte>(1u << (bit % 8));
  }
}
