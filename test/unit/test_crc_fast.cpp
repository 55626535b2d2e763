// The fast CRC paths of src/sim/wire/crc.cpp (the CRC-32 and the VCRC's
// CRC-16, both folded with PCLMULQDQ / VPCLMULQDQ by the same routines)
// against the byte-table forms, which test_ib_wire.cpp checks against the
// reference values: every length around the folding thresholds, odd
// alignments and chained calls; and compute_icrc, whose variant fields are
// masked inside the folding, against a masked copy through the tables.
#include <catch2/catch.hpp>

#include <cstddef>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "sim/wire/crc.hpp"
#include "sim/wire/headers.hpp"
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

TEST_CASE("Fast CRC-32 equals zlib's crc32 on known vectors, through every path", "[wire][crc]") {
  const std::string check = "123456789";
  CHECK(crc32(0, std::as_bytes(std::span(check))) == 0xCBF43926u);  // CRC-32/ISO-HDLC check value
  // Byte i = 7i + 3: values from Python's zlib.crc32, so the folding
  // (PCLMULQDQ from 64 bytes, VPCLMULQDQ from 256) is checked against zlib
  // itself and not only against the table code.
  std::vector<std::byte> v(5000);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<std::byte>(i * 7 + 3);
  const std::span<const std::byte> s(v);
  CHECK(crc32(0, s.first(64)) == 0xCBD9ECF0u);
  CHECK(crc32(0, s.first(100)) == 0xAA316B09u);
  CHECK(crc32(0, s.first(255)) == 0x8AF1EB92u);
  CHECK(crc32(0, s.first(256)) == 0x78825239u);
  CHECK(crc32(0, s.first(300)) == 0xDE0E57CEu);
  CHECK(crc32(0, s.first(4096)) == 0x5E4E1995u);
  CHECK(crc32(0, s.first(4124)) == 0x254405C2u);
  CHECK(crc32(0, s) == 0x1ABD04D4u);
}

TEST_CASE("Fast CRC-32 equals the table form at every length to 5000, odd alignments, chained", "[wire][crc]") {
  const auto buf = random_bytes(5000 + 8, 23);
  const std::span<const std::byte> all(buf);
  for (std::size_t off : {1u, 3u, 7u}) {
    for (std::size_t n = 0; n <= 5000; ++n) {
      const auto s = all.subspan(off, n);
      const std::uint32_t want = detail::crc32_table(0, s);
      if (crc32(0, s) != want || crc32(0xA5A5A5A5u, s) != detail::crc32_table(0xA5A5A5A5u, s)) {
        FAIL("length " << n << " offset " << off);
      }
    }
  }
  // Chained calls: any split of a message, each part taking whichever path
  // its length picks, gives the CRC of the whole.
  std::mt19937 rng(29);
  for (int i = 0; i < 2000; ++i) {
    const std::size_t off = rng() % 8, n = rng() % 5000, cut = rng() % (n + 1);
    const auto s = all.subspan(off, n);
    INFO("length " << n << " offset " << off << " cut " << cut);
    REQUIRE(crc32(crc32(0, s.first(cut)), s.subspan(cut)) == detail::crc32_table(0, s));
  }
}

namespace {

// The ICRC as IBA 7.8.1 defines it, written out plainly: every variant
// bit set to one on a copy, then the table CRC-32 over all of it.
std::uint32_t icrc_reference(std::span<const std::byte> packet) {
  std::vector<std::byte> m(packet.begin(), packet.end());
  auto set = [&](std::size_t off, std::byte bits) {
    if (off < m.size()) m[off] |= bits;
  };
  for (std::size_t i = 0; i < kLrhBytes; ++i) set(i, std::byte{0xFF});  // LRH
  std::size_t bth = kLrhBytes;
  if (m.size() > 1 && (std::to_integer<unsigned>(packet[1]) & 0x3) == 0x3) {  // LNH: GRH follows
    set(bth, std::byte{0x0F});                                          // TClass[7:4]
    for (std::size_t i = 1; i < 4; ++i) set(bth + i, std::byte{0xFF});  // TClass[3:0], FlowLabel
    set(bth + 7, std::byte{0xFF});                                       // HopLmt
    bth += kGrhBytes;
  }
  set(bth + 4, std::byte{0xFF});  // BTH resv8a
  return detail::crc32_table(0, m);
}

}  // namespace

TEST_CASE("compute_icrc equals the masked table CRC at every length, with and without a GRH", "[wire][crc]") {
  auto buf = random_bytes(kMaxPacketBytes + 16, 31);
  std::vector<std::size_t> lens;
  for (std::size_t n = 0; n <= 300; ++n) lens.push_back(n);
  for (std::size_t n : {511u, 512u, 513u, 1000u, 2047u, 4124u, 4164u, 4200u}) lens.push_back(n);
  for (unsigned lnh : {0x2u, 0x3u}) {  // IBA local, IBA global
    for (std::size_t off : {0u, 1u, 5u}) {
      buf[off + 1] = static_cast<std::byte>((std::to_integer<unsigned>(buf[off + 1]) & ~0x3u) | lnh);
      for (std::size_t n : lens) {
        const auto s = std::span<const std::byte>(buf).subspan(off, n);
        INFO("LNH " << lnh << " length " << n << " offset " << off);
        REQUIRE(compute_icrc(s) == icrc_reference(s));
      }
    }
  }
}

TEST_CASE("compute_icrc ignores the variant fields of a 4 KiB packet and no other bit", "[wire][crc]") {
  auto buf = random_bytes(4164, 37);
  buf[1] = static_cast<std::byte>((std::to_integer<unsigned>(buf[1]) & ~0x3u) | 0x3u);  // GRH present
  const std::uint32_t good = compute_icrc(buf);
  REQUIRE(good == icrc_reference(buf));
  auto variant = [](std::size_t bit) {
    const std::size_t byte = bit / 8;
    if (byte < kLrhBytes) return true;
    if (byte == kLrhBytes) return bit % 8 < 4;  // GRH byte 0: IPVer (high nibble), TClass[7:4]
    return (byte > kLrhBytes && byte < kLrhBytes + 4) || byte == kLrhBytes + 7 ||
           byte == kLrhBytes + kGrhBytes + 4;
  };
  for (std::size_t bit = 0; bit < 64 * 8; ++bit) {
    if (bit / 8 == 1 && bit % 8 < 2) continue;  // LNH itself decides whether a GRH is there
    buf[bit / 8] ^= static_cast<std::byte>(1u << (bit % 8));
    INFO("bit " << bit);
    if (variant(bit)) {
      REQUIRE(compute_icrc(buf) == good);
    } else {
      REQUIRE(compute_icrc(buf) != good);
    }
    buf[bit / 8] ^= static_cast<std::byte>(1u << (bit % 8));
  }
}
