// The two link CRCs of an IBA packet (IBA 1.2.1 Vol 1 7.8). Conventions,
// and how they were checked, are in docs/wire.md section "CRCs".
//
// ICRC (7.8.1): CRC-32, polynomial 0x04C11DB7, reflected, initial value
//   0xFFFFFFFF, final complement -- exactly zlib's crc32() -- computed over
//   the packet from the LRH to the end of the pad with every variant field
//   replaced by ones: the whole LRH; GRH TClass, FlowLabel and HopLmt; the
//   BTH's resv8a byte. On the wire least significant byte first.
// VCRC (7.8.2): CRC-16, polynomial 0x100B, reflected, initial value 0xFFFF,
//   final complement, over every byte from the LRH through the ICRC. On the
//   wire least significant byte first, like the ICRC (both are serial CRCs
//   sent in the order the bits were shifted in).
// Speed (about 90 ns per CRC of a 4 KiB packet when measured; see
// `git log -p docs/performance.md`): both are folded with PCLMULQDQ (VPCLMULQDQ
// where the CPU has it) by one routine in crc.cpp, and fall back to
// slicing-by-8 tables, which the unit tests compare them with.
#pragma once

#include <cstdint>
#include <span>

namespace openib::sim::wire {

// Plain CRC-32 (zlib's crc32), chainable: crc32(crc32(0, a), b) == crc32(0, a ++ b).
std::uint32_t crc32(std::uint32_t crc, std::span<const std::byte> data);

// crc32() of `data` with `ones` ORed into its first 64 bytes as they are
// read, in one pass: for the RoCEv2 ICRC (roce.cpp), whose variant header
// fields count as ones. data.size() >= 64.
std::uint32_t crc32_ones64(std::uint32_t crc, std::span<const std::byte> data, const std::byte (&ones)[64]);

// Plain CRC-16 of the VCRC kind, chainable the same way (start from 0).
std::uint16_t crc16_vcrc(std::uint16_t crc, std::span<const std::byte> data);

// ICRC of `packet`, which runs from the first byte of the LRH to the last
// byte of the pad (the ICRC and VCRC excluded). Reads LRH.LNH to know
// whether a GRH is present; `packet` must hold the LRH, the GRH if any and
// the BTH (the caller has checked the length).
std::uint32_t compute_icrc(std::span<const std::byte> packet);

// VCRC of `packet`, from the first byte of the LRH through the ICRC.
std::uint16_t compute_vcrc(std::span<const std::byte> packet);

// The byte-table (slicing-by-8) forms of crc32() and crc16_vcrc(): the
// reference the fast paths (carry-less folding) are tested against.
namespace detail {
std::uint32_t crc32_table(std::uint32_t crc, std::span<const std::byte> data);
std::uint16_t crc16_vcrc_table(std::uint16_t crc, std::span<const std::byte> data);
}  // namespace detail

}  // namespace openib::sim::wire
