// Whole IBA packets as carried by simhca ports and ibfabric links: one
// packet per UDP datagram, from the first byte of the LRH through the VCRC
// (docs/wire.md). parse_packet() checks framing and both CRCs and returns
// the decoded headers with a view of the payload; build_packet() is its
// inverse and fills in every computed field.
//
// Error codes, so callers can count drops by kind:
//   EPROTO           malformed: truncated header, bad field, headers or
//                    payload not what the OpCode calls for, bad PadCnt
//   EMSGSIZE         LRH.PktLen (or GRH.PayLen) disagrees with the datagram
//   EPROTONOSUPPORT  raw packet (LNH 0/1), unknown OpCode, LVer/TVer != 0
//   EBADMSG          ICRC or VCRC mismatch
//   EINVAL           build_packet() given inconsistent headers
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "common/result.hpp"
#include "sim/wire/headers.hpp"

namespace openib::sim::wire {

// Largest packet: PktLen is 11 bits of 4-byte words (IBA 7.7.8), plus VCRC.
inline constexpr std::size_t kMaxPacketBytes = 0x7FF * 4 + kVcrcBytes;

struct Headers {
  Lrh lrh;
  std::optional<Grh> grh;  // present iff lrh.lnh == kIbaGlobal
  Bth bth;
  std::optional<Rdeth> rdeth;
  std::optional<Deth> deth;
  std::optional<Reth> reth;
  std::optional<AtomicEth> atomic_eth;
  std::optional<Aeth> aeth;
  std::optional<AtomicAckEth> atomic_ack_eth;
  std::optional<ImmDt> imm_dt;
  std::optional<Ieth> ieth;

  ExtHeaders present_ext() const;  // which extension headers are set
  bool operator==(const Headers&) const = default;
};

struct ParsedPacket {
  Headers hdr;
  std::span<const std::byte> payload;  // view into the datagram, pad excluded
  std::uint32_t icrc = 0;
  std::uint16_t vcrc = 0;
};

// Which CRCs parse_packet() checks. A receiver behind a Link may skip
// both: every Link checks them before its receiver sees a packet
// (link.hpp), so the device does not check each packet twice.
struct ParseOptions {
  bool check_vcrc = true;
  bool check_icrc = true;
};

// Parse and validate one datagram (IBA 7.7, 7.8, 8.3, 9.2, 9.3).
Result<ParsedPacket> parse_packet(std::span<const std::byte> datagram, ParseOptions opts = {});
// The same into `out` (on the packet path: no copy of the result; `out`
// is unspecified after an error).
Result<void> parse_packet_into(std::span<const std::byte> datagram, ParsedPacket& out, ParseOptions opts = {});

// A packet laid out but not yet written: its encoded headers (LRH through
// the last extension header, every computed field set), then payload_len
// bytes of payload and pad_cnt zero bytes, then ICRC and VCRC; `size` is
// the whole datagram. For senders that write the payload straight into
// its destination (a cable slot): frame_packet(), write headers() and the
// payload, pad_packet() writes the pad, seal_packet() both CRCs.
struct PacketFrame {
  // Every header at once, GRH and all extension headers: a bound, held in
  // place (a frame is built per packet sent).
  static constexpr std::size_t kMaxHeaderBytes = kLrhBytes + kGrhBytes + kBthBytes + kRdethBytes +
                                                 kDethBytes + kRethBytes + kAtomicEthBytes + kAethBytes +
                                                 kAtomicAckEthBytes + kImmDtBytes + kIethBytes;
  std::array<std::byte, kMaxHeaderBytes> header_bytes;
  std::size_t header_len = 0;
  std::size_t payload_len = 0;
  std::uint8_t pad_cnt = 0;
  std::size_t size = 0;
  std::span<const std::byte> headers() const { return {header_bytes.data(), header_len}; }
  std::size_t payload_offset() const { return header_len; }
};
Result<PacketFrame> frame_packet(const Headers& hdr, std::size_t payload_len);
// `datagram` is frame.size bytes holding the headers and the payload:
// writes the pad (IBA 9.2: zeros).
void pad_packet(const PacketFrame& frame, std::span<std::byte> datagram);
// A whole datagram but its last 6 bytes: computes the ICRC (IBA 7.8.1)
// over all but those and the VCRC (IBA 7.8.2) over all but the last 2,
// and stores them there. Reads LRH.LNH (the ICRC's variant fields depend
// on it); a datagram shorter than LRH + CRCs is left as it is.
void seal_packet(std::span<std::byte> datagram);

// Build a datagram: LRH.LNH, LRH.PktLen, GRH.PayLen and BTH.PadCnt are set
// from the headers and payload given (their values in `hdr` are ignored);
// the extension headers set must be exactly those the OpCode calls for.
Result<std::vector<std::byte>> build_packet(const Headers& hdr, std::span<const std::byte> payload);

// For switches: a forwarded packet keeps its ICRC but gets a new VCRC once
// the variant fields (LRH.VL, ...) are rewritten (IBA 7.8.2). `datagram`
// must be at least LRH + CRCs long.
void rewrite_vcrc(std::span<std::byte> datagram);

}  // namespace openib::sim::wire
