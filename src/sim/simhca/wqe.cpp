// docs/simhca.md §12.1, §12.2, §12.4 byte layouts and the IBA 10.6 key
// checks of §12.6. Pure functions.
#include "sim/simhca/wqe.hpp"

#include <algorithm>

#include "sim/simhca/registers.hpp"

namespace openib::simhca {

const char* wc_status_name(uint8_t s) {
  switch (s) {
    case kWcSuccess: return "SUCCESS";
    case kWcLocLenErr: return "LOC_LEN_ERR";
    case kWcLocQpOpErr: return "LOC_QP_OP_ERR";
    case kWcLocProtErr: return "LOC_PROT_ERR";
    case kWcWrFlushErr: return "WR_FLUSH_ERR";
    case kWcBadRespErr: return "BAD_RESP_ERR";
    case kWcLocAccessErr: return "LOC_ACCESS_ERR";
    case kWcRemInvReqErr: return "REM_INV_REQ_ERR";
    case kWcRemAccessErr: return "REM_ACCESS_ERR";
    case kWcRemOpErr: return "REM_OP_ERR";
    case kWcRetryExcErr: return "RETRY_EXC_ERR";
    case kWcRnrRetryExcErr: return "RNR_RETRY_EXC_ERR";
    case kWcFatalErr: return "FATAL_ERR";
    case kWcGeneralErr: return "GENERAL_ERR";
    default: return "?";
  }
}

uint64_t SendWqe::length() const {
  if (flags & kWqeInline) return inline_data.size();
  uint64_t n = 0;
  for (const Sge& s : sges) n += s.length;
  return n;
}

uint64_t RecvWqe::capacity() const {
  uint64_t n = 0;
  for (const Sge& s : sges) n += s.length;
  return n;
}

namespace {

Error wc(uint8_t status, const char* why) { return Error{status, why}; }

Sge decode_sge(ByteView b, size_t off) { return {get32(b, off), get32(b, off + 4), get64(b, off + 8)}; }

// §12.1: which opcodes a QP type may post (IBA 10.7.1: UD and the special
// QPs send only; UC has no READ or atomics, IBA 9.8; the raw Ethernet QP
// SEND only, §16.5).
bool opcode_allowed(uint8_t qp_type, uint8_t op) {
  switch (qp_type) {
    case kQpRc: return op <= kWrFetchAdd;
    case kQpUc: return op <= kWrWriteImm;
    case kQpUd:
    case kQpSmi:
    case kQpGsi: return op <= kWrSendImm;
    case kQpRaw: return op == kWrSend;  // §16.5: a frame has no immediate data
    default: return false;
  }
}

}  // namespace

Result<SendWqe> decode_send_wqe(ByteView wqe, uint8_t qp_type, const WqeLimits& lim) {
  if (wqe.size() < kSegSize) return wc(kWcLocQpOpErr, "WQE shorter than a control segment");
  SendWqe w;
  w.opcode = get8(wqe, 0x00);
  w.flags = get8(wqe, 0x01);
  w.num_ds = get8(wqe, 0x02);
  w.imm = get32(wqe, 0x04);
  w.wr_id = get64(wqe, 0x08);
  if (!opcode_allowed(qp_type, w.opcode)) return wc(kWcLocQpOpErr, "opcode not valid for the QP type");
  if (w.flags & 0xf0) return wc(kWcLocQpOpErr, "reserved flag bits");
  const size_t end = size_t{w.num_ds} * kSegSize;
  if (w.num_ds < 1 || end > wqe.size()) return wc(kWcLocQpOpErr, "num_ds outside the stride");
  size_t pos = kSegSize;
  const bool ud = qp_type == kQpUd || qp_type == kQpSmi || qp_type == kQpGsi;
  const bool rdma = w.opcode >= kWrWrite && w.opcode <= kWrRead;
  if (ud) {
    if (pos + kSegSize > end) return wc(kWcLocQpOpErr, "missing UD address segment");
    w.ahn = get32(wqe, pos);
    w.dest_qpn = get32(wqe, pos + 4);
    w.qkey = get32(wqe, pos + 8);
    if (w.dest_qpn >> 24) return wc(kWcLocQpOpErr, "dest_qpn over 24 bits");
    pos += kSegSize;
  }
  if (rdma || w.is_atomic()) {
    if (pos + kSegSize > end) return wc(kWcLocQpOpErr, "missing remote address segment");
    w.remote_va = get64(wqe, pos);
    w.rkey = get32(wqe, pos + 8);
    pos += kSegSize;
  }
  if (w.is_atomic()) {
    if (pos + kSegSize > end) return wc(kWcLocQpOpErr, "missing atomic segment");
    w.swap_add = get64(wqe, pos);
    w.compare = get64(wqe, pos + 8);
    pos += kSegSize;
  }
  if (w.flags & kWqeInline) {
    // Inline data carries a message to send: not for READ or atomics.
    if (w.opcode == kWrRead || w.is_atomic()) return wc(kWcLocQpOpErr, "inline data on READ/atomic");
    if (pos + 4 > end) return wc(kWcLocQpOpErr, "missing inline header");
    const uint32_t hdr = get32(wqe, pos);
    const uint32_t n = hdr & ~kInlineMark;
    if (!(hdr & kInlineMark)) return wc(kWcLocQpOpErr, "inline header without its mark");
    if (n > lim.max_inline) return wc(kWcLocQpOpErr, "inline data over max_inline");
    if (pos + 4 + n > end) return wc(kWcLocQpOpErr, "inline data beyond num_ds");
    w.inline_data.assign(wqe.begin() + static_cast<ptrdiff_t>(pos + 4),
                         wqe.begin() + static_cast<ptrdiff_t>(pos + 4 + n));
    return w;
  }
  const size_t nsge = (end - pos) / kSegSize;
  if (nsge > lim.max_sge) return wc(kWcLocQpOpErr, "more data segments than max_sge");
  uint64_t total = 0;
  for (size_t i = 0; i < nsge; ++i, pos += kSegSize) {
    Sge s = decode_sge(wqe, pos);
    total += s.length;
    w.sges.push_back(s);
  }
  // IBA 9.4.5: an atomic's local buffer takes the 8-byte original value.
  if (w.is_atomic() && (w.sges.size() != 1 || w.sges[0].length != 8))
    return wc(kWcLocQpOpErr, "atomic needs one 8-byte data segment");
  if (total > kMaxMsgSize) return wc(kWcLocLenErr, "message over max_msg_size");
  return w;
}

Result<RecvWqe> decode_recv_wqe(ByteView wqe, uint16_t max_sge) {
  if (wqe.size() < kSegSize) return wc(kWcLocQpOpErr, "receive WQE shorter than its header");
  RecvWqe r;
  r.wr_id = get64(wqe, 0x00);
  const size_t n = get8(wqe, 0x08);
  if (n > max_sge || kSegSize * (1 + n) > wqe.size()) return wc(kWcLocQpOpErr, "num_sge out of range");
  uint64_t total = 0;
  for (size_t i = 0; i < n; ++i) {
    r.sges.push_back(decode_sge(wqe, kSegSize * (1 + i)));
    total += r.sges.back().length;
  }
  if (total > kMaxMsgSize) r.sges.clear();  // treated as capacity 0: any message is too long
  return r;
}

std::array<std::byte, 64> encode_cqe(const Cqe& c, uint8_t owner) {
  std::array<std::byte, 64> b{};
  put64(b, 0x00, c.wr_id);
  put32(b, 0x08, c.byte_len);
  put32(b, 0x0c, c.imm);
  put32(b, 0x10, c.qpn);
  put32(b, 0x14, c.src_qp);
  put16(b, 0x18, c.slid);
  put8(b, 0x1a, c.sl);
  put8(b, 0x1b, c.dlid_path_bits);
  put8(b, 0x1c, c.opcode);
  put8(b, 0x1d, c.status);
  put8(b, 0x1e, c.flags);
  put8(b, 0x1f, c.vendor_err);
  put16(b, 0x20, c.pkey_index);
  put16(b, 0x22, c.wqe_index);
  put8(b, 0x3f, owner & 1);
  return b;
}

Cqe decode_cqe(ByteView b) {
  Cqe c;
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
  c.flags = get8(b, 0x1e);
  c.vendor_err = get8(b, 0x1f);
  c.pkey_index = get16(b, 0x20);
  c.wqe_index = get16(b, 0x22);
  return c;
}

// IBA 10.6.7.2 (memory access checks) / §12.6.
KeyFault translate(const KeyRegion* r, uint32_t key, uint32_t pdn, uint64_t va, uint64_t len,
                   uint32_t need, std::vector<Extent>& out) {
  if (!r || r->key != key || !r->pages) return KeyFault::kInvalidKey;
  if (r->pdn != pdn) return KeyFault::kWrongPd;
  if (va < r->start_va || len > r->length || va - r->start_va > r->length - len)
    return KeyFault::kBounds;
  if ((r->access & need) != need) return KeyFault::kAccess;
  if (r->log_page_size < 12 || r->log_page_size > 30) return KeyFault::kInvalidKey;
  const uint64_t psize = uint64_t{1} << r->log_page_size;
  const uint64_t base = r->start_va & ~(psize - 1);
  uint64_t done = 0;
  while (done < len) {
    const uint64_t v = va + done;
    const uint64_t page = (v - base) >> r->log_page_size;
    if (page >= r->pages->size()) return KeyFault::kBounds;  // a page list shorter than §6.7 says
    const uint64_t in_page = v & (psize - 1);
    const uint64_t n = std::min(len - done, psize - in_page);
    const uint64_t iova = (*r->pages)[page] + in_page;
    if (!out.empty() && out.back().iova + out.back().len == iova) out.back().len += n;
    else out.push_back({iova, n});
    done += n;
  }
  return KeyFault::kNone;
}

}  // namespace openib::simhca
