#include "sim/wire/crc.hpp"

#include <array>
#include <cstddef>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "common/byte_order.hpp"
#include "sim/wire/headers.hpp"

namespace openib::sim::wire {

namespace {

// Slicing-by-8 tables for the reflected (LSB-first) forms of the two
// polynomials: 0x04C11DB7 reflected is 0xEDB88320, 0x100B reflected is
// 0xD008. Table 0 is the classic byte-at-a-time table; table k advances a
// byte's contribution by k more zero bytes, so eight bytes are folded with
// eight lookups instead of eight dependent steps.
using Tables = std::array<std::array<std::uint32_t, 256>, 8>;
constexpr Tables make_tables(std::uint32_t reflected_poly) {
  Tables t{};
  for (unsigned n = 0; n < 256; ++n) {
    std::uint32_t c = n;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ reflected_poly : c >> 1;
    t[0][n] = c;
  }
  for (unsigned k = 1; k < 8; ++k)
    for (unsigned n = 0; n < 256; ++n) t[k][n] = (t[k - 1][n] >> 8) ^ t[0][t[k - 1][n] & 0xFF];
  return t;
}

constexpr Tables kCrc32Tables = make_tables(0xEDB88320u);
constexpr Tables kCrc16Tables = make_tables(0xD008u);

// Raw register update (no pre/post complement) of a reflected CRC of up to
// 32 bits whose register is `c`. Words are loaded little-endian, as the
// reflected register takes the first byte in its low bits, and unchecked
// (common/byte_order.hpp): the loop bounds are the checks.
std::uint32_t crc_raw(const Tables& t, std::uint32_t c, std::span<const std::byte> data) {
  const std::byte* p = data.data();
  std::size_t n = data.size();
  for (; n >= 8; n -= 8, p += 8) {
    const std::uint32_t one = c ^ bytes::ld_le32(p), two = bytes::ld_le32(p + 4);
    c = t[7][one & 0xFF] ^ t[6][(one >> 8) & 0xFF] ^ t[5][(one >> 16) & 0xFF] ^ t[4][one >> 24] ^
        t[3][two & 0xFF] ^ t[2][(two >> 8) & 0xFF] ^ t[1][(two >> 16) & 0xFF] ^ t[0][two >> 24];
  }
  if (n >= 4) {  // slicing-by-4 (the ICRC's headers are 20 and 60 bytes)
    const std::uint32_t one = c ^ bytes::ld_le32(p);
    c = t[3][one & 0xFF] ^ t[2][(one >> 8) & 0xFF] ^ t[1][(one >> 16) & 0xFF] ^ t[0][one >> 24];
    n -= 4;
    p += 4;
  }
  for (; n > 0; --n, ++p) c = t[0][(c ^ std::to_integer<std::uint32_t>(*p)) & 0xFF] ^ (c >> 8);
  return c;
}

// ---- Carry-less folding, for both CRCs ---------------------------------------
//
// Both CRCs are folded with PCLMULQDQ, after Gopal et al., "Fast CRC
// Computation for Generic Polynomials Using PCLMULQDQ" (Intel, 2009),
// reflected form. The table code above runs each CRC in a 32-bit register
// whose polynomial P'(x) has degree 32: the CRC-32's own P(x), and for the
// CRC-16 P'(x) = x^16 * P(x) = x^32 + x^28 + x^19 + x^17 + x^16 (reflected
// 0xD008 with the x^32 term implicit). That register is what is folded, so
// one set of routines serves both; only the constants below differ.
//
// A 128-bit lane loaded little-endian holds the message bits in reflected
// order: bit i is the coefficient of x^(127-i). Moving a lane R = H x^64 + L
// forward by N bits is R x^N = H x^(N+64) + L x^N, congruent mod P' to
// H (x^(N+64) mod P') + L (x^N mod P'), two 64 x 32-bit carry-less
// products that fit a lane again; the reflected product of two reflected
// 64-bit values comes out multiplied by x, so the constants are
// x^(N+63) mod P' and x^(N-1) mod P'. Folding keeps the message's value
// mod P' and hence its CRC: once one lane is left, its 16 bytes and the
// tail go through the table code from register 0.
//
// The CRC-32 used to be ISA-L's crc32_gzip_refl. Its AVX-512 kernel
// (libisal 2.30) returns without VZEROUPPER, and compute_icrc's SSE code
// then ran with dirty upper state: 0.25 to 0.35 us per 4 KiB ICRC, where
// this folding takes what the VCRC takes (0.06 to 0.09 us).

// x^n mod P' as a 32-bit value (bit d: coefficient of x^d); `poly` is P'
// with its x^32 term.
constexpr std::uint32_t xpow_mod(unsigned n, std::uint64_t poly) {
  std::uint64_t r = 1;
  for (unsigned i = 0; i < n; ++i) {
    r <<= 1;
    if (r >> 32) r ^= poly;
  }
  return static_cast<std::uint32_t>(r);
}

// The 64-bit reflected form of a polynomial of degree < 64: bit i is the
// coefficient of x^(63-i).
constexpr std::uint64_t reflect64(std::uint32_t poly) {
  std::uint64_t r = 0;
  for (unsigned d = 0; d < 32; ++d)
    if ((poly >> d) & 1) r |= std::uint64_t{1} << (63 - d);
  return r;
}

// The pair of constants that moves a lane forward by n bits, as a lane
// holds them: hi multiplies the lane's high-degree half H (its low qword).
struct FoldBy {
  std::uint64_t hi, lo;
};
constexpr FoldBy fold_by(unsigned n, std::uint64_t poly) {
  return {reflect64(xpow_mod(n + 63, poly)), reflect64(xpow_mod(n - 1, poly))};
}

// What the folding needs for one CRC: the constants derived from its P'
// for each distance folded (256 bytes per step of four 512-bit registers,
// 64 bytes per step of four 128-bit lanes or one 512-bit register, 16
// bytes per lane) and the tables that finish it.
struct FoldingCrc {
  const Tables& tables;
  FoldBy by2048, by512, by128;
};
constexpr FoldingCrc make_folding_crc(std::uint64_t poly, const Tables& tables) {
  return {tables, fold_by(2048, poly), fold_by(512, poly), fold_by(128, poly)};
}

// IBA 7.8.1: 0x04C11DB7; IBA 7.8.2: 0x100B, times x^16.
constexpr FoldingCrc kCrc32 = make_folding_crc(0x1'04C1'1DB7u, kCrc32Tables);
constexpr FoldingCrc kCrc16 = make_folding_crc(0x1'100B'0000u, kCrc16Tables);
// The tables hold the same P': entry 0x80 of table 0 is the reflected
// polynomial (seven shifts, then one with the bit out).
static_assert(kCrc32Tables[0][0x80] == 0xEDB88320u && kCrc16Tables[0][0x80] == 0xD008u);

#if defined(__x86_64__)
__attribute__((target("pclmul,sse4.1"))) inline __m128i pair128(FoldBy k) {
  return _mm_set_epi64x(static_cast<long long>(k.lo), static_cast<long long>(k.hi));
}

__attribute__((target("pclmul,sse4.1"))) inline __m128i fold(__m128i lane, __m128i k, __m128i next) {
  const __m128i hi = _mm_clmulepi64_si128(lane, k, 0x00);  // H * (x^(N+64) mod P')
  const __m128i lo = _mm_clmulepi64_si128(lane, k, 0x11);  // L * (x^N mod P')
  return _mm_xor_si128(_mm_xor_si128(hi, lo), next);
}

// The last lane and the tail (< 16 bytes) through the tables.
inline std::uint32_t finish(const FoldingCrc& crc, const std::byte (&lane)[16], std::span<const std::byte> tail) {
  return crc_raw(crc.tables, crc_raw(crc.tables, 0, lane), tail);
}

// Register update over at least 64 bytes, `ones` ORed into the first 64
// (see crc_raw_fast).
__attribute__((target("pclmul,sse4.1"))) std::uint32_t crc_raw_clmul(const FoldingCrc& crc, std::uint32_t c,
                                                                     std::span<const std::byte> data,
                                                                     const std::byte* ones) {
  const auto* p = reinterpret_cast<const __m128i*>(data.data());
  const auto* m = reinterpret_cast<const __m128i*>(ones);
  __m128i x0 = _mm_or_si128(_mm_loadu_si128(p), _mm_loadu_si128(m));
  __m128i x1 = _mm_or_si128(_mm_loadu_si128(p + 1), _mm_loadu_si128(m + 1));
  __m128i x2 = _mm_or_si128(_mm_loadu_si128(p + 2), _mm_loadu_si128(m + 2));
  __m128i x3 = _mm_or_si128(_mm_loadu_si128(p + 3), _mm_loadu_si128(m + 3));
  x0 = _mm_xor_si128(x0, _mm_cvtsi32_si128(static_cast<int>(c)));
  std::size_t blocks = data.size() / 16;
  p += 4;
  blocks -= 4;
  const __m128i k512 = pair128(crc.by512);
  for (; blocks >= 4; blocks -= 4, p += 4) {
    x0 = fold(x0, k512, _mm_loadu_si128(p));
    x1 = fold(x1, k512, _mm_loadu_si128(p + 1));
    x2 = fold(x2, k512, _mm_loadu_si128(p + 2));
    x3 = fold(x3, k512, _mm_loadu_si128(p + 3));
  }
  const __m128i k128 = pair128(crc.by128);
  x1 = fold(x0, k128, x1);
  x2 = fold(x1, k128, x2);
  x0 = fold(x2, k128, x3);
  for (; blocks > 0; --blocks, ++p) x0 = fold(x0, k128, _mm_loadu_si128(p));
  alignas(16) std::byte lane[16];
  _mm_store_si128(reinterpret_cast<__m128i*>(lane), x0);
  return finish(crc, lane, data.subspan(data.size() / 16 * 16));
}

#define OPENIB_VPCLMUL_TARGET target("avx512f,avx512vl,vpclmulqdq,pclmul,sse4.1")
__attribute__((OPENIB_VPCLMUL_TARGET)) inline __m512i fold512(__m512i lanes, __m512i k, __m512i next) {
  return _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128(lanes, k, 0x00),
                                   _mm512_clmulepi64_epi128(lanes, k, 0x11), next, 0x96);  // a ^ b ^ c
}

// The (hi, lo) constant pair in each 128-bit lane (low qword: hi).
__attribute__((OPENIB_VPCLMUL_TARGET)) inline __m512i broadcast_pair(FoldBy k) {
  const auto h = static_cast<long long>(k.hi), l = static_cast<long long>(k.lo);
  return _mm512_set_epi64(l, h, l, h, l, h, l, h);
}

// The same folding four lanes per instruction (VPCLMULQDQ on 512-bit
// registers), 256 bytes per step, for at least 256 bytes: a 4 KiB packet
// is mostly this loop.
__attribute__((OPENIB_VPCLMUL_TARGET)) std::uint32_t crc_raw_vpclmul(const FoldingCrc& crc, std::uint32_t c,
                                                                      std::span<const std::byte> data,
                                                                      const std::byte* ones) {
  const std::byte* p = data.data();
  std::size_t n = data.size();
  __m512i z0 = _mm512_xor_si512(_mm512_or_si512(_mm512_loadu_si512(p), _mm512_loadu_si512(ones)),
                                _mm512_castsi128_si512(_mm_cvtsi32_si128(static_cast<int>(c))));
  __m512i z1 = _mm512_loadu_si512(p + 64), z2 = _mm512_loadu_si512(p + 128), z3 = _mm512_loadu_si512(p + 192);
  p += 256;
  n -= 256;
  const __m512i k2048 = broadcast_pair(crc.by2048);
  for (; n >= 256; n -= 256, p += 256) {
    z0 = fold512(z0, k2048, _mm512_loadu_si512(p));
    z1 = fold512(z1, k2048, _mm512_loadu_si512(p + 64));
    z2 = fold512(z2, k2048, _mm512_loadu_si512(p + 128));
    z3 = fold512(z3, k2048, _mm512_loadu_si512(p + 192));
  }
  const __m512i k512 = broadcast_pair(crc.by512);
  z1 = fold512(z0, k512, z1);
  z2 = fold512(z1, k512, z2);
  z3 = fold512(z2, k512, z3);
  for (; n >= 64; n -= 64, p += 64) z3 = fold512(z3, k512, _mm512_loadu_si512(p));
  // Four consecutive 16-byte lanes left: fold them into one as above.
  const __m128i k128 = pair128(crc.by128);
  alignas(64) __m128i four[4];
  _mm512_store_si512(four, z3);
  __m128i x = four[0];
  x = fold(x, k128, four[1]);
  x = fold(x, k128, four[2]);
  x = fold(x, k128, four[3]);
  for (; n >= 16; n -= 16, p += 16) x = fold(x, k128, _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  alignas(16) std::byte lane[16];
  _mm_store_si128(reinterpret_cast<__m128i*>(lane), x);
  // g++ 12 emits no VZEROUPPER here (the function ends in calls to the
  // table code), and legacy-SSE code run with dirty upper ZMM state is
  // slow: a caller's SSE code right after lost about 0.2 us per call.
  _mm256_zeroupper();
  return finish(crc, lane, std::span<const std::byte>(p, n));
}

bool have_clmul() {
  static const bool yes = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
  return yes;
}
bool have_vpclmul() {
  static const bool yes = have_clmul() && __builtin_cpu_supports("avx512f") &&
                          __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("vpclmulqdq");
  return yes;
}
#endif

constexpr std::array<std::byte, 64> kNoOnes{};

// Register update (no pre/post complement) of either CRC: folding where
// it pays, tables below 64 bytes or without PCLMULQDQ. `ones` (64 bytes)
// is ORed into the message's first 64 bytes as it is read: compute_icrc's
// variant fields, all in the first 60, fold with the rest that way instead
// of going through the tables on their own. With ones, data.size() >= 64.
std::uint32_t crc_raw_fast(const FoldingCrc& crc, std::uint32_t c, std::span<const std::byte> data,
                           const std::byte* ones = kNoOnes.data()) {
#if defined(__x86_64__)
  if (data.size() >= 256 && have_vpclmul()) return crc_raw_vpclmul(crc, c, data, ones);
  if (data.size() >= 64 && have_clmul()) return crc_raw_clmul(crc, c, data, ones);
#endif
  if (ones != kNoOnes.data()) {
    std::array<std::byte, 64> head;
    for (std::size_t i = 0; i < head.size(); ++i) head[i] = data[i] | ones[i];
    c = crc_raw(crc.tables, c, head);
    data = data.subspan(64);
  }
  return crc_raw(crc.tables, c, data);
}

std::uint32_t crc32_raw(std::uint32_t c, std::span<const std::byte> data) { return crc_raw_fast(kCrc32, c, data); }
std::uint32_t vcrc_raw(std::uint32_t c, std::span<const std::byte> data) { return crc_raw_fast(kCrc16, c, data); }

// IBA 7.8.1: the variant bits of the headers the ICRC covers, as OR masks
// over the first bytes of a packet without and with a GRH.
using IcrcMask = std::array<std::byte, 64>;
static_assert(kLrhBytes + kGrhBytes + kBthBytes <= sizeof(IcrcMask));
constexpr IcrcMask make_icrc_mask(bool grh) {
  IcrcMask m{};
  for (std::size_t i = 0; i < kLrhBytes; ++i) m[i] = std::byte{0xFF};  // the whole LRH
  std::size_t bth = kLrhBytes;
  if (grh) {
    // IBA 7.8.1 / 8.3: GRH TClass, FlowLabel and HopLmt are variant;
    // IPVer, PayLen, NxtHdr and both GIDs are covered.
    m[bth + 0] = std::byte{0x0F};  // TClass[7:4]
    for (std::size_t i = 1; i < 4; ++i) m[bth + i] = std::byte{0xFF};  // TClass[3:0], FlowLabel
    m[bth + 7] = std::byte{0xFF};  // HopLmt
    bth += kGrhBytes;
  }
  m[bth + 4] = std::byte{0xFF};  // IBA 7.8.1 / 9.2: BTH resv8a (FECN/BECN live there)
  return m;
}
constexpr IcrcMask kIcrcMaskLocal = make_icrc_mask(false), kIcrcMaskGlobal = make_icrc_mask(true);

}  // namespace

namespace detail {
std::uint16_t crc16_vcrc_table(std::uint16_t crc, std::span<const std::byte> data) {
  return static_cast<std::uint16_t>(~crc_raw(kCrc16Tables, static_cast<std::uint16_t>(~crc), data));
}
std::uint32_t crc32_table(std::uint32_t crc, std::span<const std::byte> data) {
  return ~crc_raw(kCrc32Tables, ~crc, data);
}
}  // namespace detail

std::uint32_t crc32(std::uint32_t crc, std::span<const std::byte> data) {
  return ~crc32_raw(~crc, data);
}

std::uint32_t crc32_ones64(std::uint32_t crc, std::span<const std::byte> data, const std::byte (&ones)[64]) {
  return ~crc_raw_fast(kCrc32, ~crc, data, ones);
}

std::uint16_t crc16_vcrc(std::uint16_t crc, std::span<const std::byte> data) {
  // IBA 7.8.2: initial value 0xFFFF, complemented result.
  const std::uint32_t c = vcrc_raw(static_cast<std::uint16_t>(~crc), data);
  return static_cast<std::uint16_t>(~c);
}

std::uint32_t compute_icrc(std::span<const std::byte> packet) {
  // IBA 7.8.1: the ICRC covers the invariant fields only; variant fields
  // count as all ones. The LRH is variant as a whole (routers rebuild it),
  // so it enters as 8 bytes of 0xFF -- rdma-core's rxe_icrc.c starts RoCE
  // ICRCs from the same state (0xDEBB20E3 = CRC state after 8 x 0xFF).
  // The variant bits are ORed in as the first 64 bytes (LRH + GRH + BTH
  // are 60 at most) are read; a packet shorter than its headers is hashed
  // as far as it goes.
  const bool grh = packet.size() > 1 &&
                   (std::to_integer<unsigned>(packet[1]) & 0x3) == static_cast<unsigned>(Lnh::kIbaGlobal);
  const IcrcMask& mask = grh ? kIcrcMaskGlobal : kIcrcMaskLocal;
  if (packet.size() >= mask.size()) return ~crc_raw_fast(kCrc32, 0xFFFFFFFFu, packet, mask.data());
  IcrcMask head;
  for (std::size_t i = 0; i < packet.size(); ++i) head[i] = packet[i] | mask[i];
  return ~crc32_raw(0xFFFFFFFFu, std::span<const std::byte>(head).first(packet.size()));
}

std::uint16_t compute_vcrc(std::span<const std::byte> packet) {
  return crc16_vcrc(0, packet);  // IBA 7.8.2: LRH through ICRC, nothing masked
}

}  // namespace openib::sim::wire
