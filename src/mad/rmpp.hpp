// Reliable Multi-Packet Protocol (IBA 13.6): the RMPP header, segmentation
// of one long message into DATA MADs, a sender window machine and a
// reassembly machine, as the kernel MAD layer runs them for SA GetTable
// responses. Pure: no clocks, no I/O; the caller sends what is returned and
// calls on_timeout() when its timer fires.
//
// A "message" here is what libibumad hands to / gets from the kernel for an
// RMPP class: the common header (24), the RMPP header (12, filled in by the
// segmenter), the class header (SA: 20 bytes, vendor range 2: 4 bytes, IBA
// 13.6.2.1) and the data, any length. Every segment carries the common and
// class headers; the data is cut into 256 - 36 - class_hdr byte pieces.
// PayloadLength (IBA 13.6.2.3) counts the bytes after the RMPP header of
// every segment: in the first segment the total, data + N*class_hdr; in
// the last one the bytes used in it (kernel mad_rmpp.c semantics).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "common/result.hpp"
#include "mad/bytes.hpp"

namespace openib::mad {

inline constexpr std::size_t kRmppHeaderOff = 24;
inline constexpr std::size_t kRmppHeaderBytes = 12;
inline constexpr std::size_t kRmppPayloadOff = 36;          // after common + RMPP headers
inline constexpr std::size_t kRmppSegmentPayload = 220;     // 256 - 36
// The longest RMPP message sent or reassembled (headers included): what a
// MAD socket carries (clientproto/mad_socket.hpp, 64 MiB with struct
// ib_user_mad), less room to spare. IBA sets none below PayloadLength's
// 32 bits; a 324-host fat tree's PathRecord table is about 8 MB.
inline constexpr std::size_t kMaxRmppMessage = (64u << 20) - 4096;
inline constexpr std::uint8_t kRmppVersion = 1;

namespace rmpp_type {
inline constexpr std::uint8_t kNone = 0;
inline constexpr std::uint8_t kData = 1;
inline constexpr std::uint8_t kAck = 2;
inline constexpr std::uint8_t kStop = 3;
inline constexpr std::uint8_t kAbort = 4;
}  // namespace rmpp_type
namespace rmpp_flag {
inline constexpr std::uint8_t kActive = 1;
inline constexpr std::uint8_t kFirst = 2;
inline constexpr std::uint8_t kLast = 4;
}  // namespace rmpp_flag
// RMPPStatus, IBA 13.6.2.2 Table 178.
namespace rmpp_status {
inline constexpr std::uint8_t kNormal = 0;
inline constexpr std::uint8_t kResourcesExhausted = 1;  // STOP
inline constexpr std::uint8_t kTotalTimeTooLong = 118;  // ABORT from here on
inline constexpr std::uint8_t kInconsistentLastAndLength = 119;
inline constexpr std::uint8_t kInconsistentFirstAndSegNum = 120;
inline constexpr std::uint8_t kBadRmppType = 121;
inline constexpr std::uint8_t kNewWindowLastTooSmall = 122;
inline constexpr std::uint8_t kSegNumTooBig = 123;
inline constexpr std::uint8_t kIllegalStatus = 124;
inline constexpr std::uint8_t kUnsupportedVersion = 125;
inline constexpr std::uint8_t kTooManyRetries = 126;
inline constexpr std::uint8_t kUnspecified = 127;
}  // namespace rmpp_status

// The RMPP header, bytes 24..35 of the MAD (IBA 13.6.2.1).
struct RmppHeader {
  std::uint8_t version = kRmppVersion;
  std::uint8_t type = rmpp_type::kNone;
  std::uint8_t resp_time = 0x1F;   // 5 bits; 0x1F = no time value given
  std::uint8_t flags = 0;          // 3 bits: rmpp_flag
  std::uint8_t status = 0;
  std::uint32_t seg_num = 0;       // Data1
  std::uint32_t paylen_newwin = 0; // Data2: PayloadLength (DATA) / NewWindowLast (ACK)
  bool operator==(const RmppHeader&) const = default;
};
Result<RmppHeader> decode_rmpp_header(ConstBytes mad);  // needs >= 36 bytes
void encode_rmpp_header(MutBytes mad, const RmppHeader& h);

// Class header bytes after the RMPP header (IBA 13.6.2.1; kernel
// ib_get_mad_data_offset): SA 20, vendor range 2 4, others 0.
std::size_t rmpp_class_header_bytes(std::uint8_t mgmt_class);
// True if the class may use RMPP at all (SA, vendor range 2, BIS, DevMgt...).
bool rmpp_class_allowed(std::uint8_t mgmt_class);

// Cut a message (>= 36 + class_hdr bytes) into DATA segments with Active,
// First/Last, SegmentNumber 1..N and PayloadLength set. A message whose
// data fits one MAD gives one segment with First|Last. EINVAL if the
// message is shorter than its headers or would need more than max_segments;
// EMSGSIZE if it is longer than kMaxRmppMessage.
Result<std::vector<Mad>> rmpp_segment(ConstBytes message, std::size_t class_hdr_bytes,
                                      std::size_t max_segments = kMaxRmppMessage / 200 + 1);

// Build an ACK / STOP / ABORT answering the MAD `about` (common header
// copied, R bit flipped as the kernel does, IBA 13.6.3.1).
Mad rmpp_make_ack(ConstBytes about, std::uint32_t seg_num, std::uint32_t new_window_last);
Mad rmpp_make_stop_abort(ConstBytes about, std::uint8_t type, std::uint8_t status);

// ---- receiver: reassembly, IBA 13.6.4 ---------------------------------
class RmppReassembler {
 public:
  struct Config {
    std::size_t max_bytes = kMaxRmppMessage - 256;  // bound on the reassembled payload
    std::uint32_t window = 64;          // segments granted per ACK
  };
  struct Step {
    std::vector<Mad> to_send;           // ACK, or STOP/ABORT
    std::optional<ByteVec> message;     // set once, when the last segment is in
    bool failed = false;                // this transfer is over (we or the sender aborted)
    std::uint8_t status = 0;            // the RMPP status we sent / received on failure
  };
  RmppReassembler(std::size_t class_hdr_bytes, Config cfg);
  explicit RmppReassembler(std::size_t class_hdr_bytes) : RmppReassembler(class_hdr_bytes, Config{}) {}

  // Feed one MAD of this transfer (same TID/class/peer: the caller keys the
  // machines). DATA in order is appended and ACKed at window ends and at
  // the last segment; a duplicate is re-ACKed; a segment beyond the next
  // expected one is dropped (the sender will resend); a bad header is
  // answered with ABORT and ends the transfer; STOP/ABORT from the sender
  // ends it. After done() or failed, further input is ignored.
  Step feed(ConstBytes mad);
  bool done() const { return done_; }
  std::uint32_t next_expected() const { return expected_; }

 private:
  Step fail(ConstBytes about, std::uint8_t type, std::uint8_t status);
  std::size_t class_hdr_;
  Config cfg_;
  ByteVec buf_;
  std::uint32_t expected_ = 1;
  std::uint32_t newwin_ = 1;
  bool done_ = false;
  bool failed_ = false;
};

// ---- sender: window, ACKs, retries, IBA 13.6.3 ------------------------
class RmppSender {
 public:
  struct Step {
    std::vector<Mad> to_send;   // segments to (re)send now, or a STOP/ABORT
    bool complete = false;      // the receiver ACKed the last segment
    bool failed = false;        // aborted/stopped (by either side) or retries exhausted
    std::uint8_t status = 0;
  };
  // `segments` from rmpp_segment(). max_retries: timeouts tolerated without progress.
  RmppSender(std::vector<Mad> segments, unsigned max_retries = 5);
  Step start();                       // the first window (one segment, IBA: NewWindowLast starts at 1)
  Step on_mad(ConstBytes mad);        // an ACK / STOP / ABORT from the receiver
  Step on_timeout();                  // resend from the last ACKed segment + 1
  bool complete() const { return complete_; }
  std::size_t segment_count() const { return segs_.size(); }

 private:
  Step send_window();
  std::vector<Mad> segs_;
  unsigned max_retries_;
  unsigned retries_ = 0;
  std::uint32_t last_acked_ = 0;
  std::uint32_t last_sent_ = 0;
  std::uint32_t newwin_ = 1;
  bool complete_ = false;
  bool failed_ = false;
};

}  // namespace openib::mad
