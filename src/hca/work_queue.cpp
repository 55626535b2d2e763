// docs/simhca.md §12.1, §12.2, §12.4, from the driver's side.
#include "hca/work_queue.hpp"

#include <cstring>

#include "hca/prm.hpp"

namespace openib::hca {

using namespace prm;

namespace {
constexpr size_t kSeg = 16;
constexpr uint8_t kSignaled = 1, kSolicited = 2, kInlineFlag = 4, kFence = 8;  // §12.1 flags
constexpr uint32_t kInlineMark = 0x80000000u;

std::span<std::byte> add_seg(Bytes& w) {
  w.resize(w.size() + kSeg);
  return std::span<std::byte>(w).last(kSeg);
}
}  // namespace

Result<Bytes> encode_send_wqe(const SendWr& wr, QpType type) {
  Bytes w(kSeg);  // control segment, filled last (num_ds)
  const auto op = static_cast<uint8_t>(wr.opcode);
  if (type == QpType::kUd || type == QpType::kSmi || type == QpType::kGsi) {
    auto s = add_seg(w);  // UD address segment
    put32(s, 0x00, wr.ahn);
    put32(s, 0x04, wr.remote_qpn);
    put32(s, 0x08, wr.remote_qkey);
  }
  if (op >= static_cast<uint8_t>(WrOpcode::kWrite)) {
    auto s = add_seg(w);  // remote address segment
    put64(s, 0x00, wr.remote_addr);
    put32(s, 0x08, wr.rkey);
  }
  if (op >= static_cast<uint8_t>(WrOpcode::kCmpSwap)) {
    auto s = add_seg(w);  // atomic segment
    put64(s, 0x00, wr.swap_add);
    put64(s, 0x08, wr.compare);
  }
  if (wr.inline_data) {
    size_t n = 0;
    for (const Sge& g : wr.sg) n += g.length;
    const size_t at = w.size();
    w.resize(at + ((4 + n + kSeg - 1) / kSeg) * kSeg);
    put32(w, at, kInlineMark | static_cast<uint32_t>(n));
    size_t off = at + 4;
    for (const Sge& g : wr.sg) {
      if (g.length) std::memcpy(w.data() + off, reinterpret_cast<const void*>(g.addr), g.length);
      off += g.length;
    }
  } else {
    for (const Sge& g : wr.sg) {
      auto s = add_seg(w);  // data segment
      put32(s, 0x00, g.length);
      put32(s, 0x04, g.lkey);
      put64(s, 0x08, g.addr);
    }
  }
  if (w.size() / kSeg > 255) return err(EINVAL, "send WQE of {} segments", w.size() / kSeg);
  put8(w, 0x00, op);
  put8(w, 0x01, (wr.signaled ? kSignaled : 0) | (wr.solicited ? kSolicited : 0) |
                    (wr.inline_data ? kInlineFlag : 0) | (wr.fence ? kFence : 0));
  put8(w, 0x02, w.size() / kSeg);
  put32(w, 0x04, wr.imm);
  put64(w, 0x08, wr.wr_id);
  return w;
}

Bytes encode_recv_wqe(const RecvWr& wr) {
  Bytes w(kSeg * (1 + wr.sg.size()));
  put64(w, 0x00, wr.wr_id);
  put8(w, 0x08, wr.sg.size());
  for (size_t i = 0; i < wr.sg.size(); ++i) {
    put32(w, kSeg * (i + 1), wr.sg[i].length);
    put32(w, kSeg * (i + 1) + 4, wr.sg[i].lkey);
    put64(w, kSeg * (i + 1) + 8, wr.sg[i].addr);
  }
  return w;
}

WorkCompletion decode_cqe(std::span<const std::byte> b) {
  WorkCompletion c;
  c.wr_id = get64(b, 0x00);
  c.byte_len = get32(b, 0x08);
  c.imm = get32(b, 0x0c);
  c.qpn = get32(b, 0x10);
  c.src_qp = get32(b, 0x14);
  c.slid = get16(b, 0x18);
  c.sl = get8(b, 0x1a);
  c.dlid_path_bits = get8(b, 0x1b);
  c.opcode = get8(b, 0x1c);
  c.status = get8(b, 0x1d);
  const uint8_t f = get8(b, 0x1e);
  c.grh = f & 1;
  c.has_imm = f & 2;
  c.solicited = f & 4;
  c.vendor_err = get8(b, 0x1f);
  c.pkey_index = get16(b, 0x20);
  c.wqe_index = get16(b, 0x22);
  return c;
}

}  // namespace openib::hca
