#include "clientproto/mad_socket.hpp"

#include <fmt/format.h>

#include "common/byte_order.hpp"

namespace openib::proto::madsock {

void encode_piece_header(std::span<std::byte, kPieceHdr> out, const PieceHeader& h) {
  bytes::put_le(out, 0, 4, kPieceMagic);
  bytes::put_le(out, 4, 4, h.id);
  bytes::put_le(out, 8, 4, h.total);
  bytes::put_le(out, 12, 4, h.offset);
}

bool is_piece(std::span<const std::byte> dgram) {
  return dgram.size() >= 4 && bytes::get_le32(dgram, 0) == kPieceMagic;
}

std::string check_piece(std::span<const std::byte> header, size_t data_len, PieceHeader& out) {
  if (header.size() < kPieceHdr || !is_piece(header)) return "not a piece header";
  out.id = bytes::get_le32(header, 4);
  out.total = bytes::get_le32(header, 8);
  out.offset = bytes::get_le32(header, 12);
  if (out.total > kMaxMessage)
    return fmt::format("a piece of a {}-byte message, over the {}-byte limit", out.total, kMaxMessage);
  if (!in_pieces(out.total))
    return fmt::format("a piece of a {}-byte message, which fits one datagram", out.total);
  if (out.offset >= out.total || out.offset % kPieceData)
    return fmt::format("a piece at offset {} of a {}-byte message", out.offset, out.total);
  if (data_len != piece_len(out.total, out.offset))
    return fmt::format("a piece of {} bytes at offset {} of a {}-byte message (expected {})", data_len,
                       out.offset, out.total, piece_len(out.total, out.offset));
  return {};
}

void Reassembler::reset() {
  busy_ = false;
  buf_.clear();
  buf_.shrink_to_fit();
}

Reassembler::Step Reassembler::fail(std::string why) {
  if (busy_) why += fmt::format("; message {} dropped after {} of its {} bytes", cur_.id, buf_.size(), cur_.total);
  reset();
  return Step{false, std::move(why)};
}

Reassembler::Step Reassembler::feed(std::span<const std::byte> dgram) {
  msg_ = {};
  if (!busy_ && buf_.capacity()) reset();  // the last message was taken
  if (!is_piece(dgram)) {  // passes; a message in progress goes on
    msg_ = dgram;
    return Step{true, {}};
  }
  PieceHeader h;
  const size_t data_len = dgram.size() < kPieceHdr ? 0 : dgram.size() - kPieceHdr;
  if (std::string e = check_piece(dgram, data_len, h); !e.empty()) return fail(std::move(e));
  if (h.offset == 0) {
    if (busy_) return fail(fmt::format("message {} begins before message {} ended", h.id, cur_.id));
    busy_ = true;
    cur_ = h;
    buf_.clear();
  } else if (!busy_) {
    return fail(fmt::format("a piece at offset {} of message {}, which did not begin", h.offset, h.id));
  } else if (h.id != cur_.id || h.total != cur_.total || h.offset != buf_.size()) {
    return fail(fmt::format("a piece of message {} ({} bytes) at offset {} inside message {} ({} bytes) at {}", h.id,
                            h.total, h.offset, cur_.id, cur_.total, buf_.size()));
  }
  auto data = dgram.subspan(kPieceHdr);
  buf_.insert(buf_.end(), data.begin(), data.end());
  if (buf_.size() < cur_.total) return Step{};
  busy_ = false;
  msg_ = buf_;
  return Step{true, {}};
}

}  // namespace openib::proto::madsock
