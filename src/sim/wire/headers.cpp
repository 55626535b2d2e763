#include "sim/wire/headers.hpp"

#include <cerrno>
#include <string>

namespace openib::sim::wire {

namespace {

// A cursor over memory the caller sized; the fields go in big-endian
// (IBA 1.2.1 Vol 1 1.6: most significant byte first) by the tree's
// helpers, common/byte_order.hpp.
struct Out {
  std::byte* p;
};
void put8(Out& out, std::uint32_t v) { *out.p++ = static_cast<std::byte>(v & 0xFF); }
void put16(Out& out, std::uint32_t v) {
  bytes::st_be16(out.p, static_cast<std::uint16_t>(v));
  out.p += 2;
}
void put24(Out& out, std::uint32_t v) {
  put8(out, v >> 16);
  put16(out, v);
}
void put32(Out& out, std::uint32_t v) {
  bytes::st_be32(out.p, v);
  out.p += 4;
}
void put64(Out& out, std::uint64_t v) {
  bytes::st_be64(out.p, v);
  out.p += 8;
}

// append_*(): the header's bytes at the end of `out`, by write_*().
template <std::size_t N, typename H>
void append_with(ByteVec& out, const H& h, std::byte* (*write)(std::byte*, const H&)) {
  const std::size_t at = out.size();
  out.resize(at + N);
  write(out.data() + at, h);
}

Result<void> need(ConstBytes in, std::size_t n, const char* what) {
  if (in.size() < n) return err(EPROTO, "{}: {} bytes, need {}", what, in.size(), n);
  return ok();
}

}  // namespace

// ---- LRH, IBA 7.7 ----------------------------------------------
// byte 0: VL[7:4] LVer[3:0]; byte 1: SL[7:4] resv2[3:2] LNH[1:0];
// bytes 2-3 DLID; bytes 4-5: resv5[15:11] PktLen[10:0]; bytes 6-7 SLID.

std::byte* write_lrh(std::byte* p, const Lrh& h) {
  Out out{p};
  put8(out, ((h.vl & 0xFu) << 4) | (h.lver & 0xFu));
  put8(out, ((h.sl & 0xFu) << 4) | ((h.resv2 & 0x3u) << 2) | (static_cast<unsigned>(h.lnh) & 0x3u));
  put16(out, h.dlid);
  put16(out, ((h.resv5 & 0x1Fu) << 11) | (h.pkt_len & 0x7FFu));
  put16(out, h.slid);
  return out.p;
}
void append_lrh(ByteVec& out, const Lrh& h) { append_with<kLrhBytes>(out, h, write_lrh); }

Result<Lrh> decode_lrh(ConstBytes in) {
  OPENIB_TRY(need(in, kLrhBytes, "LRH"));
  return read_lrh(in.data());
}

// ---- GRH, IBA 8.3 ----------------------------------------------
// word 0: IPVer[31:28] TClass[27:20] FlowLabel[19:0]; bytes 4-5 PayLen;
// byte 6 NxtHdr; byte 7 HopLmt; bytes 8-23 SGID; bytes 24-39 DGID.

std::byte* write_grh(std::byte* p, const Grh& h) {
  Out out{p};
  put32(out, ((h.ip_ver & 0xFu) << 28) | (std::uint32_t{h.tclass} << 20) | (h.flow_label & 0xFFFFFu));
  put16(out, h.pay_len);
  put8(out, h.nxt_hdr);
  put8(out, h.hop_lmt);
  for (auto b : h.sgid) put8(out, b);
  for (auto b : h.dgid) put8(out, b);
  return out.p;
}
void append_grh(ByteVec& out, const Grh& h) { append_with<kGrhBytes>(out, h, write_grh); }

Result<Grh> decode_grh(ConstBytes in) {
  OPENIB_TRY(need(in, kGrhBytes, "GRH"));
  return read_grh(in.data());
}

// ---- BTH, IBA 9.2 ----------------------------------------------
// byte 0 OpCode; byte 1: SE[7] M[6] PadCnt[5:4] TVer[3:0]; bytes 2-3 P_Key;
// byte 4 resv8a; bytes 5-7 DestQP; byte 8: A[7] resv7[6:0]; bytes 9-11 PSN.

std::byte* write_bth(std::byte* p, const Bth& h) {
  Out out{p};
  put8(out, h.opcode);
  put8(out, (h.se ? 0x80u : 0u) | (h.mig_req ? 0x40u : 0u) | ((h.pad_cnt & 0x3u) << 4) |
                (h.tver & 0xFu));
  put16(out, h.pkey);
  put8(out, h.resv8a);
  put24(out, h.dest_qp);
  put8(out, (h.ack_req ? 0x80u : 0u) | (h.resv7 & 0x7Fu));
  put24(out, h.psn);
  return out.p;
}
void append_bth(ByteVec& out, const Bth& h) { append_with<kBthBytes>(out, h, write_bth); }

Result<Bth> decode_bth(ConstBytes in) {
  OPENIB_TRY(need(in, kBthBytes, "BTH"));
  return read_bth(in.data());
}

// ---- Extended transport headers, IBA 9.3 -----------------------------------

std::byte* write_rdeth(std::byte* p, const Rdeth& h) {  // IBA 9.3.1: resv8, EECnxt[23:0]
  Out out{p};
  put8(out, 0);
  put24(out, h.ee_context);
  return out.p;
}
void append_rdeth(ByteVec& out, const Rdeth& h) { append_with<kRdethBytes>(out, h, write_rdeth); }
Result<Rdeth> decode_rdeth(ConstBytes in) {
  OPENIB_TRY(need(in, kRdethBytes, "RDETH"));
  return read_rdeth(in.data());
}

std::byte* write_deth(std::byte* p, const Deth& h) {  // IBA 9.3.2: Q_Key, resv8, SrcQP[23:0]
  Out out{p};
  put32(out, h.qkey);
  put8(out, 0);
  put24(out, h.src_qp);
  return out.p;
}
void append_deth(ByteVec& out, const Deth& h) { append_with<kDethBytes>(out, h, write_deth); }
Result<Deth> decode_deth(ConstBytes in) {
  OPENIB_TRY(need(in, kDethBytes, "DETH"));
  return read_deth(in.data());
}

std::byte* write_reth(std::byte* p, const Reth& h) {  // IBA 9.3.3: VA, R_Key, DMALen
  Out out{p};
  put64(out, h.va);
  put32(out, h.rkey);
  put32(out, h.dma_len);
  return out.p;
}
void append_reth(ByteVec& out, const Reth& h) { append_with<kRethBytes>(out, h, write_reth); }
Result<Reth> decode_reth(ConstBytes in) {
  OPENIB_TRY(need(in, kRethBytes, "RETH"));
  return read_reth(in.data());
}

std::byte* write_atomic_eth(std::byte* p, const AtomicEth& h) {  // IBA 9.3.4
  Out out{p};
  put64(out, h.va);
  put32(out, h.rkey);
  put64(out, h.swap_add);
  put64(out, h.compare);
  return out.p;
}
void append_atomic_eth(ByteVec& out, const AtomicEth& h) { append_with<kAtomicEthBytes>(out, h, write_atomic_eth); }
Result<AtomicEth> decode_atomic_eth(ConstBytes in) {
  OPENIB_TRY(need(in, kAtomicEthBytes, "AtomicETH"));
  return read_atomic_eth(in.data());
}

// AETH, IBA 9.3.5: Syndrome (8 bits), MSN (24 bits).
std::byte* write_aeth(std::byte* p, const Aeth& h) {
  Out out{p};
  put8(out, h.syndrome);
  put24(out, h.msn);
  return out.p;
}
void append_aeth(ByteVec& out, const Aeth& h) { append_with<kAethBytes>(out, h, write_aeth); }
Result<Aeth> decode_aeth(ConstBytes in) {
  OPENIB_TRY(need(in, kAethBytes, "AETH"));
  return read_aeth(in.data());
}

namespace {
std::uint8_t make_syndrome(AckKind kind, std::uint8_t value) {
  return static_cast<std::uint8_t>((static_cast<unsigned>(kind) << 5) | (value & 0x1Fu));
}
}  // namespace

Aeth Aeth::ack(std::uint32_t msn, std::uint8_t credits) {
  return Aeth{make_syndrome(AckKind::kAck, credits), msn & 0xFFFFFF};
}
Aeth Aeth::rnr_nak(std::uint32_t msn, std::uint8_t timer_code) {
  return Aeth{make_syndrome(AckKind::kRnrNak, timer_code), msn & 0xFFFFFF};
}
Aeth Aeth::nak(std::uint32_t msn, NakCode code) {
  return Aeth{make_syndrome(AckKind::kNak, static_cast<std::uint8_t>(code)), msn & 0xFFFFFF};
}

std::uint32_t rnr_timer_us(std::uint8_t timer_code) {
  // IBA 9.7.5.2.8: 0 = 655.36 ms; 1..31 = 0.01 ms .. 491.52 ms.
  static constexpr std::array<std::uint32_t, 32> kUs = {
      655360, 10,    20,    30,    40,    60,     80,     120,    160,    240,    320,
      480,    640,   960,   1280,  1920,  2560,   3840,   5120,   7680,   10240,  15360,
      20480,  30720, 40960, 61440, 81920, 122880, 163840, 245760, 327680, 491520};
  return kUs[timer_code & 0x1F];
}

std::byte* write_atomic_ack_eth(std::byte* p, const AtomicAckEth& h) {  // IBA 9.3.6
  Out out{p};
  put64(out, h.orig_remote_data);
  return out.p;
}
void append_atomic_ack_eth(ByteVec& out, const AtomicAckEth& h) { append_with<kAtomicAckEthBytes>(out, h, write_atomic_ack_eth); }
Result<AtomicAckEth> decode_atomic_ack_eth(ConstBytes in) {
  OPENIB_TRY(need(in, kAtomicAckEthBytes, "AtomicAckETH"));
  return read_atomic_ack_eth(in.data());
}

std::byte* write_imm_dt(std::byte* p, const ImmDt& h) {  // IBA 9.3.7
  Out out{p};
  put32(out, h.imm);
  return out.p;
}
void append_imm_dt(ByteVec& out, const ImmDt& h) { append_with<kImmDtBytes>(out, h, write_imm_dt); }
Result<ImmDt> decode_imm_dt(ConstBytes in) {
  OPENIB_TRY(need(in, kImmDtBytes, "ImmDt"));
  return read_imm_dt(in.data());
}

std::byte* write_ieth(std::byte* p, const Ieth& h) {  // IBA 9.3.8
  Out out{p};
  put32(out, h.rkey);
  return out.p;
}
void append_ieth(ByteVec& out, const Ieth& h) { append_with<kIethBytes>(out, h, write_ieth); }
Result<Ieth> decode_ieth(ConstBytes in) {
  OPENIB_TRY(need(in, kIethBytes, "IETH"));
  return read_ieth(in.data());
}

// ---- OpCode table, IBA 9.2.1 table 35 --------------------------------------

namespace {

struct OpRow {
  std::string_view name;
  ExtHeaders ext;  // without the transport's RDETH/DETH, added below
  bool payload;
};

// Indexed by OpCode bits 4-0. Which transports allow the operation is
// decided in opcode_info().
constexpr std::array<OpRow, 24> kOps = {{
    {"SEND First", kExtNone, true},
    {"SEND Middle", kExtNone, true},
    {"SEND Last", kExtNone, true},
    {"SEND Last with Immediate", kExtImmDt, true},
    {"SEND Only", kExtNone, true},
    {"SEND Only with Immediate", kExtImmDt, true},
    {"RDMA WRITE First", kExtReth, true},
    {"RDMA WRITE Middle", kExtNone, true},
    {"RDMA WRITE Last", kExtNone, true},
    {"RDMA WRITE Last with Immediate", kExtImmDt, true},
    {"RDMA WRITE Only", kExtReth, true},
    {"RDMA WRITE Only with Immediate", kExtReth | kExtImmDt, true},
    {"RDMA READ Request", kExtReth, false},
    {"RDMA READ response First", kExtAeth, true},
    {"RDMA READ response Middle", kExtNone, true},
    {"RDMA READ response Last", kExtAeth, true},
    {"RDMA READ response Only", kExtAeth, true},
    {"Acknowledge", kExtAeth, false},
    {"ATOMIC Acknowledge", kExtAeth | kExtAtomicAckEth, false},
    {"CmpSwap", kExtAtomicEth, false},
    {"FetchAdd", kExtAtomicEth, false},
    {"RESYNC", kExtNone, false},
    {"SEND Last with Invalidate", kExtIeth, true},
    {"SEND Only with Invalidate", kExtIeth, true},
}};

// Names with the transport prefix, built once: "RC SEND Only".
constexpr std::array<std::string_view, 4> kTransportNames = {"RC", "UC", "RD", "UD"};

bool allowed(Transport t, Op op) {
  auto o = static_cast<unsigned>(op);
  switch (t) {
    case Transport::kRc:  // everything except RESYNC
      return o <= 0x17 && op != Op::kResync;
    case Transport::kUc:  // SEND and RDMA WRITE only
      return o <= static_cast<unsigned>(Op::kWriteOnlyImm);
    case Transport::kRd:  // RC's set without invalidate, plus RESYNC
      return o <= static_cast<unsigned>(Op::kResync);
    case Transport::kUd:  // SEND Only (with Immediate)
      return op == Op::kSendOnly || op == Op::kSendOnlyImm;
  }
  return false;
}

}  // namespace

namespace {

std::optional<OpcodeInfo> build_opcode_info(std::uint8_t opc,
                                            const std::array<std::array<std::string, 24>, 4>& names) {
  unsigned t = opc >> 5;
  if (t > static_cast<unsigned>(Transport::kUd)) return std::nullopt;  // CNP, XRC, vendor
  auto transport = static_cast<Transport>(t);
  auto op = opcode_op(opc);
  if (static_cast<unsigned>(op) >= kOps.size() || !allowed(transport, op)) return std::nullopt;

  const OpRow& row = kOps[static_cast<unsigned>(op)];
  ExtHeaders ext = row.ext;
  if (transport == Transport::kRd) {
    // IBA 9.3.1/9.3.2: every RD packet has an RDETH; requests (not the
    // responses, which carry AETH) also have a DETH.
    ext |= kExtRdeth;
    if (!(row.ext & kExtAeth) && op != Op::kReadResponseMiddle) ext |= kExtDeth;
  } else if (transport == Transport::kUd) {
    ext |= kExtDeth;  // IBA 9.3.2: every UD packet has a DETH
  }
  return OpcodeInfo{names[t][static_cast<unsigned>(op)], ext, row.payload};
}

// Every OpCode's entry, built on first use: the packet path looks one up
// per packet.
struct OpcodeTable {
  std::array<std::array<std::string, 24>, 4> names;  // "RC SEND Only"
  std::array<std::optional<OpcodeInfo>, 256> info;
  OpcodeTable() {
    for (std::size_t i = 0; i < 4; ++i)
      for (std::size_t j = 0; j < kOps.size(); ++j)
        names[i][j] = std::string(kTransportNames[i]) + " " + std::string(kOps[j].name);
    for (unsigned opc = 0; opc < 256; ++opc) info[opc] = build_opcode_info(static_cast<std::uint8_t>(opc), names);
  }
};

}  // namespace

std::optional<OpcodeInfo> opcode_info(std::uint8_t opc) {
  static const OpcodeTable kTable;
  return kTable.info[opc];
}

ExtHeaders ext_headers(std::uint8_t opc) {
  auto info = opcode_info(opc);
  return info ? info->ext : kExtNone;
}

bool has_payload(std::uint8_t opc) {
  auto info = opcode_info(opc);
  return info && info->payload;
}

std::size_t ext_headers_size(ExtHeaders ext) {
  std::size_t n = 0;
  if (ext & kExtRdeth) n += kRdethBytes;
  if (ext & kExtDeth) n += kDethBytes;
  if (ext & kExtReth) n += kRethBytes;
  if (ext & kExtAtomicEth) n += kAtomicEthBytes;
  if (ext & kExtAeth) n += kAethBytes;
  if (ext & kExtAtomicAckEth) n += kAtomicAckEthBytes;
  if (ext & kExtImmDt) n += kImmDtBytes;
  if (ext & kExtIeth) n += kIethBytes;
  return n;
}

}  // namespace openib::sim::wire
