// The MAD socket's framing (docs/client-protocol.md §10.1): how a user MAD
// (struct ib_user_mad, then the MAD or a whole RMPP message) crosses the
// SOCK_SEQPACKET socket pair between libibumad.so.3 and ibd's user-MAD
// service, in both directions.
//
// A message of at most kMaxDatagram bytes is one datagram, exactly the
// kernel's read/write format. A longer one (an RMPP message, up to
// kMaxMessage) is cut into pieces, one datagram each: a 16-byte piece
// header, then the next at most kPieceData bytes of the message. The
// header's first word, kPieceMagic, cannot be the first word of a whole
// message (an agent id, below UMAD_CA_MAX_AGENTS). The pieces of one
// message follow each other on the socket, in order, nothing between them.
//
// Piece header, little-endian u32s: magic, message id (the sender's, the
// same in every piece of one message), total (the message's length,
// ib_user_mad included), offset (of this piece's bytes in the message).
// Every piece but the last carries exactly kPieceData bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace openib::proto::madsock {

inline constexpr size_t kUmadHdr = 64;               // struct ib_user_mad
inline constexpr size_t kMadHdr = 24;                // IBA 13.4.2 common MAD header
inline constexpr size_t kMaxMessage = 64u << 20;     // ib_user_mad + RMPP message
inline constexpr size_t kMaxDatagram = 64u << 10;    // a whole message or a piece, header included
inline constexpr size_t kPieceHdr = 16;
inline constexpr size_t kPieceData = kMaxDatagram - kPieceHdr;
inline constexpr uint32_t kPieceMagic = 0x43504d55;  // "UMPC" as bytes

struct PieceHeader {
  uint32_t id = 0;
  uint32_t total = 0;
  uint32_t offset = 0;
};

// True if a message of `total` bytes travels in pieces.
inline bool in_pieces(size_t total) { return total > kMaxDatagram; }
// How many bytes the piece at `offset` of a `total`-byte message carries.
inline size_t piece_len(size_t total, size_t offset) {
  return total - offset < kPieceData ? total - offset : kPieceData;
}

void encode_piece_header(std::span<std::byte, kPieceHdr> out, const PieceHeader& h);
// True if `dgram` starts with the piece magic (it is a piece, maybe a bad one).
bool is_piece(std::span<const std::byte> dgram);
// The header of a piece carrying `data_len` bytes, checked on its own: the
// magic, kMaxDatagram < total <= kMaxMessage, offset a multiple of
// kPieceData below total, data_len what piece_len() says. Empty string: good;
// else what is wrong.
std::string check_piece(std::span<const std::byte> header, size_t data_len, PieceHeader& out);

// Reassembles what one peer writes: whole messages pass through (also
// between the pieces of another), pieces are put together. At most one
// message in pieces is in progress; any piece out of its
// sequence (another id, a wrong offset, a continuation with nothing begun, a
// new first piece before the last one ended) drops the message in progress
// and itself. Memory grows with the bytes received, never with what a
// header claims.
class Reassembler {
 public:
  struct Step {
    bool message = false;  // message() holds a whole message now
    std::string error;     // a datagram (and a message in progress) dropped: why
  };
  Step feed(std::span<const std::byte> dgram);
  // The message completed by the last feed (valid until the next feed).
  std::span<const std::byte> message() const { return msg_; }
  // Bytes held for a message in progress.
  size_t buffered() const { return busy_ ? buf_.size() : 0; }
  // Drops a message in progress (the caller's bound on memory).
  void reset();

 private:
  Step fail(std::string why);
  std::vector<std::byte> buf_;
  std::span<const std::byte> msg_;
  PieceHeader cur_;
  bool busy_ = false;
};

}  // namespace openib::proto::madsock
