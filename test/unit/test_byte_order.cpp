// src/common/byte_order.hpp: the tree's byte-order helpers.
#include <array>
#include <catch2/catch.hpp>

#include "common/byte_order.hpp"

using namespace openib::bytes;

TEST_CASE("byte_order: big-endian fields land most significant byte first") {
  std::array<std::byte, 16> b{};
  put16(b, 0, 0x1234);
  put32(b, 2, 0xa1b2c3d4);
  put64(b, 6, 0x0102030405060708ull);
  const uint8_t want[] = {0x12, 0x34, 0xa1, 0xb2, 0xc3, 0xd4, 1, 2, 3, 4, 5, 6, 7, 8};
  for (size_t i = 0; i < sizeof want; ++i) CHECK(std::to_integer<uint8_t>(b[i]) == want[i]);
  CHECK(get16(b, 0) == 0x1234);
  CHECK(get32(b, 2) == 0xa1b2c3d4);
  CHECK(get64(b, 6) == 0x0102030405060708ull);
  CHECK(ld_be32(b.data() + 2) == 0xa1b2c3d4);
  CHECK(ld_be64(b.data() + 6) == 0x0102030405060708ull);
  st_be16(b.data() + 14, 0xbeef);
  CHECK(get16(b, 14) == 0xbeef);
}

TEST_CASE("byte_order: bounded access never leaves the span") {
  std::array<std::byte, 4> b{};
  put32(b, 2, 0xaabbccdd);  // the two bytes that fit are written, the rest dropped
  CHECK(std::to_integer<uint8_t>(b[2]) == 0xaa);
  CHECK(std::to_integer<uint8_t>(b[3]) == 0xbb);
  CHECK(get32(b, 2) == 0xaabb0000);  // bytes past the end read as 0
  CHECK(get64(std::span<const std::byte>{}, 0) == 0);
}

TEST_CASE("byte_order: little-endian and IBA bit numbering") {
  std::array<std::byte, 8> b{};
  put_le(b, 0, 4, 0x11223344);
  CHECK(std::to_integer<uint8_t>(b[0]) == 0x44);
  CHECK(get_le32(b, 0) == 0x11223344);
  CHECK(ld_le32(b.data()) == 0x11223344);
  // IBA 7.7 LRH: VL is bits 0..3, LVer 4..7 of byte 0.
  std::array<std::byte, 2> l{};
  put_bits(l, 0, 4, 0xf);
  put_bits(l, 4, 4, 0x0);
  put_bits(l, 8, 4, 0x3);
  CHECK(std::to_integer<uint8_t>(l[0]) == 0xf0);
  CHECK(get_bits(l, 8, 4) == 3);
}
