// libFuzzer target: what a local client writes on its MAD socket, into the
// piece reassembler ibd runs for it (src/clientproto/mad_socket.hpp,
// docs/client-protocol.md §10.1). The input is a sequence of datagrams,
// each a 2-byte little-endian length, then that many bytes, or (an odd
// first byte) a piece header built from 3 bytes, then the piece's bytes. Nothing may crash; a message that comes out is one
// whole datagram or exactly its declared total, at most kMaxMessage; what
// is held never exceeds the bytes fed.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <vector>

#include "clientproto/mad_socket.hpp"
#include "common/byte_order.hpp"

using namespace openib::proto::madsock;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  Reassembler r;
  size_t fed = 0;
  std::vector<std::byte> dgram;
  while (size >= 2) {
    size_t len = size_t(data[0]) | size_t(data[1]) << 8;
    const bool make_piece = data[0] & 1;  // a piece header built from the next 3 bytes
    data += 2;
    size -= 2;
    dgram.clear();
    if (make_piece && size >= 3) {
      // Message id, total (in pieces of kPieceData) and offset from one
      // byte each: small numbers that often make a valid sequence.
      PieceHeader h;
      h.id = data[0] & 3;
      h.total = uint32_t(kPieceData) * (1 + (data[1] & 3)) + (data[1] >> 2);
      h.offset = uint32_t(kPieceData) * (data[2] & 3);
      const bool short_one = data[2] & 0x80;
      data += 3;
      size -= 3;
      dgram.resize(kPieceHdr);
      encode_piece_header(std::span<std::byte, kPieceHdr>(dgram.data(), kPieceHdr), h);
      if (h.offset < h.total) len = piece_len(h.total, h.offset) - (short_one ? 1 : 0);
      // A piece's bytes: at most 16 from the input, zeros after them (a
      // whole sequence of 64 KiB pieces from a few hundred input bytes).
      const size_t take = std::min({len, size, size_t(16)});
      dgram.resize(kPieceHdr + len);
      std::memcpy(dgram.data() + kPieceHdr, data, take);
      data += take;
      size -= take;
    } else {
      if (len > size) len = size;
      dgram.assign(reinterpret_cast<const std::byte*>(data), reinterpret_cast<const std::byte*>(data + len));
      data += len;
      size -= len;
    }
    fed += dgram.size();
    auto step = r.feed(dgram);
    if (step.message) {
      const auto m = r.message();
      if (m.size() > kMaxMessage) std::abort();
      if (is_piece(dgram) && m.size() != openib::bytes::get_le32(dgram, 8)) std::abort();
      if (!is_piece(dgram) && m.size() != dgram.size()) std::abort();
      if (!step.error.empty()) std::abort();
    }
    if (r.buffered() > fed) std::abort();
  }
  return 0;
}
