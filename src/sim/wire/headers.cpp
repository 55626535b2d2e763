#include "sim/wire/headers.hpp"

#include <cerrno>
#include <string>

namespace openib::sim::wire {

namespace {

// Big-endian byte helpers (IBA 1.2.1 Vol 1 1.6: most significant byte first).
void put8(ByteVec& out, std::uint32_t v) { out.push_back(static_cast<std::byte>(v & 0xFF)); }
void put16(ByteVec& out, std::uint32_t v) {
  put8(out, v >> 8);
  put8(out, v);
}
void put24(ByteVec& out, std::uint32_t v) {
  put8(out, v >> 16);
  put16(out, v);
}
void put32(ByteVec& out, std::uint32_t v) {
  put16(out, v >> 16);
  put16(out, v);
}
void put64(ByteVec& out, std::uint64_t v) {
  put32(out, static_cast<std::uint32_t>(v >> 32));
  put32(out, static_cast<std::uint32_t>(v));
}

std::uint32_t get8(ConstBytes in, std::size_t off) { return std::to_integer<std::uint32_t>(in[off]); }
std::uint32_t get16(ConstBytes in, std::size_t off) { return (get8(in, off) << 8) | get8(in, off + 1); }
std::uint32_t get24(ConstBytes in, std::size_t off) { return (get8(in, off) << 16) | get16(in, off + 1); }
std::uint32_t get32(ConstBytes in, std::size_t off) { return (get16(in, off) << 16) | get16(in, off + 2); }
std::uint64_t get64(ConstBytes in, std::size_t off) {
  return (std::uint64_t{get32(in, off)} << 32) | get32(in, off + 4);
}

Result<void> need(ConstBytes in, std::size_t n, const char* what) {
  if (in.size() < n) return err(EPROTO, "{}: {} bytes, need {}", what, in.size(), n);
  return ok();
}

}  // namespace

// ---- LRH, IBA 7.7 ----------------------------------------------
// byte 0: VL[7:4] LVer[3:0]; byte 1: SL[7:4] resv2[3:2] LNH[1:0];
// bytes 2-3 DLID; bytes 4-5: resv5[15:11] PktLen[10:0]; bytes 6-7 SLID.

void append_lrh(ByteVec& out, const Lrh& h) {
  put8(out, ((h.vl & 0xFu) << 4) | (h.lver & 0xFu));
  put8(out, ((h.sl & 0xFu) << 4) | ((h.resv2 & 0x3u) << 2) | (static_cast<unsigned>(h.lnh) & 0x3u));
  put16(out, h.dlid);
  put16(out, ((h.resv5 & 0x1Fu) << 11) | (h.pkt_len & 0x7FFu));
  put16(out, h.slid);
}

Result<Lrh> decode_lrh(ConstBytes in) {
  OPENIB_TRY(need(in, kLrhBytes, "LRH"));
  Lrh h;
  h.vl = static_cast<std::uint8_t>(get8(in, 0) >> 4);
  h.lver = static_cast<std::uint8_t>(get8(in, 0) & 0xF);
  h.sl = static_cast<std::uint8_t>(get8(in, 1) >> 4);
  h.resv2 = static_cast<std::uint8_t>((get8(in, 1) >> 2) & 0x3);
  h.lnh = static_cast<Lnh>(get8(in, 1) & 0x3);
  h.dlid = static_cast<std::uint16_t>(get16(in, 2));
  h.resv5 = static_cast<std::uint8_t>(get16(in, 4) >> 11);
  h.pkt_len = static_cast<std::uint16_t>(get16(in, 4) & 0x7FF);
  h.slid = static_cast<std::uint16_t>(get16(in, 6));
  return h;
}

// ---- GRH, IBA 8.3 ----------------------------------------------
// word 0: IPVer[31:28] TClass[27:20] FlowLabel[19:0]; bytes 4-5 PayLen;
// byte 6 NxtHdr; byte 7 HopLmt; bytes 8-23 SGID; bytes 24-39 DGID.

void append_grh(ByteVec& out, const Grh& h) {
  put32(out, ((h.ip_ver & 0xFu) << 28) | (std::uint32_t{h.tclass} << 20) | (h.flow_label & 0xFFFFFu));
  put16(out, h.pay_len);
  put8(out, h.nxt_hdr);
  put8(out, h.hop_lmt);
  for (auto b : h.sgid) put8(out, b);
  for (auto b : h.dgid) put8(out, b);
}

Result<Grh> decode_grh(ConstBytes in) {
  OPENIB_TRY(need(in, kGrhBytes, "GRH"));
  Grh h;
  std::uint32_t w0 = get32(in, 0);
  h.ip_ver = static_cast<std::uint8_t>(w0 >> 28);
  h.tclass = static_cast<std::uint8_t>((w0 >> 20) & 0xFF);
  h.flow_label = w0 & 0xFFFFF;
  h.pay_len = static_cast<std::uint16_t>(get16(in, 4));
  h.nxt_hdr = static_cast<std::uint8_t>(get8(in, 6));
  h.hop_lmt = static_cast<std::uint8_t>(get8(in, 7));
  for (std::size_t i = 0; i < 16; ++i) {
    h.sgid[i] = static_cast<std::uint8_t>(get8(in, 8 + i));
    h.dgid[i] = static_cast<std::uint8_t>(get8(in, 24 + i));
  }
  return h;
}

// ---- BTH, IBA 9.2 ----------------------------------------------
// byte 0 OpCode; byte 1: SE[7] M[6] PadCnt[5:4] TVer[3:0]; bytes 2-3 P_Key;
// byte 4 resv8a; bytes 5-7 DestQP; byte 8: A[7] resv7[6:0]; bytes 9-11 PSN.

void append_bth(ByteVec& out, const Bth& h) {
  put8(out, h.opcode);
  put8(out, (h.se ? 0x80u : 0u) | (h.mig_req ? 0x40u : 0u) | ((h.pad_cnt & 0x3u) << 4) |
                (h.tver & 0xFu));
  put16(out, h.pkey);
  put8(out, h.resv8a);
  put24(out, h.dest_qp);
  put8(out, (h.ack_req ? 0x80u : 0u) | (h.resv7 & 0x7Fu));
  put24(out, h.psn);
}

Result<Bth> decode_bth(ConstBytes in) {
  OPENIB_TRY(need(in, kBthBytes, "BTH"));
  Bth h;
  h.opcode = static_cast<std::uint8_t>(get8(in, 0));
  std::uint32_t b1 = get8(in, 1);
  h.se = (b1 & 0x80) != 0;
  h.mig_req = (b1 & 0x40) != 0;
  h.pad_cnt = static_cast<std::uint8_t>((b1 >> 4) & 0x3);
  h.tver = static_cast<std::uint8_t>(b1 & 0xF);
  h.pkey = static_cast<std::uint16_t>(get16(in, 2));
  h.resv8a = static_cast<std::uint8_t>(get8(in, 4));
  h.dest_qp = get24(in, 5);
  h.ack_req = (get8(in, 8) & 0x80) != 0;
  h.resv7 = static_cast<std::uint8_t>(get8(in, 8) & 0x7F);
  h.psn = get24(in, 9);
  return h;
}

// ---- Extended transport headers, IBA 9.3 -----------------------------------

void append_rdeth(ByteVec& out, const Rdeth& h) {  // IBA 9.3.1: resv8, EECnxt[23:0]
  put8(out, 0);
  put24(out, h.ee_context);
}
Result<Rdeth> decode_rdeth(ConstBytes in) {
  OPENIB_TRY(need(in, kRdethBytes, "RDETH"));
  return Rdeth{get24(in, 1)};
}

void append_deth(ByteVec& out, const Deth& h) {  // IBA 9.3.2: Q_Key, resv8, SrcQP[23:0]
  put32(out, h.qkey);
  put8(out, 0);
  put24(out, h.src_qp);
}
Result<Deth> decode_deth(ConstBytes in) {
  OPENIB_TRY(need(in, kDethBytes, "DETH"));
  return Deth{get32(in, 0), get24(in, 5)};
}

void append_reth(ByteVec& out, const Reth& h) {  // IBA 9.3.3: VA, R_Key, DMALen
  put64(out, h.va);
  put32(out, h.rkey);
  put32(out, h.dma_len);
}
Result<Reth> decode_reth(ConstBytes in) {
  OPENIB_TRY(need(in, kRethBytes, "RETH"));
  return Reth{get64(in, 0), get32(in, 8), get32(in, 12)};
}

void append_atomic_eth(ByteVec& out, const AtomicEth& h) {  // IBA 9.3.4
  put64(out, h.va);
  put32(out, h.rkey);
  put64(out, h.swap_add);
  put64(out, h.compare);
}
Result<AtomicEth> decode_atomic_eth(ConstBytes in) {
  OPENIB_TRY(need(in, kAtomicEthBytes, "AtomicETH"));
  return AtomicEth{get64(in, 0), get32(in, 8), get64(in, 12), get64(in, 20)};
}

// AETH, IBA 9.3.5: Syndrome (8 bits), MSN (24 bits).
void append_aeth(ByteVec& out, const Aeth& h) {
  put8(out, h.syndrome);
  put24(out, h.msn);
}
Result<Aeth> decode_aeth(ConstBytes in) {
  OPENIB_TRY(need(in, kAethBytes, "AETH"));
  return Aeth{static_cast<std::uint8_t>(get8(in, 0)), get24(in, 1)};
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

void append_atomic_ack_eth(ByteVec& out, const AtomicAckEth& h) {  // IBA 9.3.6
  put64(out, h.orig_remote_data);
}
Result<AtomicAckEth> decode_atomic_ack_eth(ConstBytes in) {
  OPENIB_TRY(need(in, kAtomicAckEthBytes, "AtomicAckETH"));
  return AtomicAckEth{get64(in, 0)};
}

void append_imm_dt(ByteVec& out, const ImmDt& h) { put32(out, h.imm); }  // IBA 9.3.7
Result<ImmDt> decode_imm_dt(ConstBytes in) {
  OPENIB_TRY(need(in, kImmDtBytes, "ImmDt"));
  return ImmDt{get32(in, 0)};
}

void append_ieth(ByteVec& out, const Ieth& h) { put32(out, h.rkey); }  // IBA 9.3.8
Result<Ieth> decode_ieth(ConstBytes in) {
  OPENIB_TRY(need(in, kIethBytes, "IETH"));
  return Ieth{get32(in, 0)};
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

std::optional<OpcodeInfo> opcode_info(std::uint8_t opc) {
  unsigned t = opc >> 5;
  if (t > static_cast<unsigned>(Transport::kUd)) return std::nullopt;  // CNP, XRC, vendor
  auto transport = static_cast<Transport>(t);
  auto op = opcode_op(opc);
  if (static_cast<unsigned>(op) >= kOps.size() || !allowed(transport, op)) return std::nullopt;

  // Full names: a static table of 4 x 24 strings, built on first use.
  static const auto kNames = [] {
    std::array<std::array<std::string, 24>, 4> names;
    for (std::size_t i = 0; i < 4; ++i)
      for (std::size_t j = 0; j < kOps.size(); ++j)
        names[i][j] = std::string(kTransportNames[i]) + " " + std::string(kOps[j].name);
    return names;
  }();

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
  return OpcodeInfo{kNames[t][static_cast<unsigned>(op)], ext, row.payload};
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
