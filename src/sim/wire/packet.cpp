#include "sim/wire/packet.hpp"

#include <algorithm>
#include <cerrno>

#include "common/byte_order.hpp"
#include "sim/wire/crc.hpp"

namespace openib::sim::wire {

ExtHeaders Headers::present_ext() const {
  ExtHeaders e = kExtNone;
  if (rdeth) e |= kExtRdeth;
  if (deth) e |= kExtDeth;
  if (reth) e |= kExtReth;
  if (atomic_eth) e |= kExtAtomicEth;
  if (aeth) e |= kExtAeth;
  if (atomic_ack_eth) e |= kExtAtomicAckEth;
  if (imm_dt) e |= kExtImmDt;
  if (ieth) e |= kExtIeth;
  return e;
}

Result<ParsedPacket> parse_packet(std::span<const std::byte> dgram, ParseOptions opts) {
  ParsedPacket p;
  OPENIB_TRY(parse_packet_into(dgram, p, opts));
  return p;
}

// On the packet path: every length is checked once, up front, and the
// headers are then read in place (read_*), with no Result per header.
Result<void> parse_packet_into(std::span<const std::byte> dgram, ParsedPacket& p, ParseOptions opts) {
  Headers& h = p.hdr;
  h.grh.reset();
  h.rdeth.reset();
  h.deth.reset();
  h.reth.reset();
  h.atomic_eth.reset();
  h.aeth.reset();
  h.atomic_ack_eth.reset();
  h.imm_dt.reset();
  h.ieth.reset();
  if (dgram.size() < kLrhBytes) return err(EPROTO, "LRH: {} bytes, need {}", dgram.size(), kLrhBytes);
  h.lrh = read_lrh(dgram.data());
  const Lrh& lrh = h.lrh;

  // IBA 7.7.5: only IBA transport packets (LNH 2/3) are ours.
  if (lrh.lnh == Lnh::kRaw || lrh.lnh == Lnh::kIpNonIba)
    return err(EPROTONOSUPPORT, "raw packet (LNH {}) not supported", static_cast<int>(lrh.lnh));
  if (lrh.lver != 0) return err(EPROTONOSUPPORT, "LRH.LVer {} (IBA 7.7.2 defines 0)", lrh.lver);

  // IBA 7.7.8: PktLen counts 4-byte words from the LRH through the ICRC.
  std::size_t pkt_bytes = std::size_t{lrh.pkt_len} * 4;
  if (pkt_bytes + kVcrcBytes != dgram.size())
    return err(EMSGSIZE, "LRH.PktLen {} words = {} bytes + VCRC, datagram has {}", lrh.pkt_len,
               pkt_bytes, dgram.size());
  bool global = lrh.lnh == Lnh::kIbaGlobal;
  std::size_t min_bytes = kLrhBytes + (global ? kGrhBytes : 0) + kBthBytes + kIcrcBytes;
  if (pkt_bytes < min_bytes)
    return err(EPROTO, "packet of {} bytes shorter than its headers ({})", pkt_bytes, min_bytes);

  // IBA 7.8.2: check the link CRC first, as a receiving port would.
  p.vcrc = bytes::get_le16(dgram, pkt_bytes);  // IBA 7.8.2: least significant byte first
  if (std::uint16_t v = opts.check_vcrc ? compute_vcrc(dgram.first(pkt_bytes)) : p.vcrc; v != p.vcrc)
    return err(EBADMSG, "bad VCRC {:#06x}, computed {:#06x}", p.vcrc, v);

  auto body = dgram.first(pkt_bytes - kIcrcBytes);  // LRH .. end of pad
  p.icrc = bytes::get_le32(dgram, pkt_bytes - kIcrcBytes);  // IBA 7.8.1: the same
  auto rest = body.subspan(kLrhBytes);

  if (global) {
    const Grh& g = h.grh.emplace(read_grh(rest.data()));  // min_bytes covers it
    if (g.nxt_hdr != kGrhNxtHdrIba)  // IBA 8.3.4
      return err(EPROTO, "GRH.NxtHdr {:#04x}, expected 0x1b", g.nxt_hdr);
    if (g.ip_ver != kGrhIpVer) return err(EPROTO, "GRH.IPVer {}", g.ip_ver);
    // IBA 8.3.3: PayLen counts from after the GRH through the ICRC.
    if (std::size_t{g.pay_len} != pkt_bytes - kLrhBytes - kGrhBytes)
      return err(EMSGSIZE, "GRH.PayLen {} disagrees with LRH.PktLen ({} bytes after GRH)",
                 g.pay_len, pkt_bytes - kLrhBytes - kGrhBytes);
    rest = rest.subspan(kGrhBytes);
  }

  h.bth = read_bth(rest.data());  // min_bytes covers it
  const Bth& bth = h.bth;
  rest = rest.subspan(kBthBytes);
  if (bth.tver != 0) return err(EPROTONOSUPPORT, "BTH.TVer {} (IBA 9.2 defines 0)", bth.tver);
  auto info = opcode_info(bth.opcode);
  if (!info) return err(EPROTONOSUPPORT, "unsupported OpCode {:#04x}", bth.opcode);

  // IBA 9.2.1 table 35 / 9.3: the OpCode fixes the extension headers and
  // their order.
  ExtHeaders ext = info->ext;
  if (rest.size() < ext_headers_size(ext))
    return err(EPROTO, "{}: {} bytes after BTH, headers need {}", info->name, rest.size(),
               ext_headers_size(ext));
  // In IBA 9.3's order.
  auto take = [&rest, ext]<typename T>(std::optional<T>& slot, ExtHeaders which, std::size_t size,
                                       T (*read)(const std::byte*)) {
    if (!(ext & which)) return;
    slot.emplace(read(rest.data()));
    rest = rest.subspan(size);
  };
  take(h.rdeth, kExtRdeth, kRdethBytes, read_rdeth);
  take(h.deth, kExtDeth, kDethBytes, read_deth);
  take(h.reth, kExtReth, kRethBytes, read_reth);
  take(h.atomic_eth, kExtAtomicEth, kAtomicEthBytes, read_atomic_eth);
  take(h.aeth, kExtAeth, kAethBytes, read_aeth);
  take(h.atomic_ack_eth, kExtAtomicAckEth, kAtomicAckEthBytes, read_atomic_ack_eth);
  take(h.imm_dt, kExtImmDt, kImmDtBytes, read_imm_dt);
  take(h.ieth, kExtIeth, kIethBytes, read_ieth);

  // IBA 9.2: PadCnt bytes of pad follow the payload; packets without
  // payload have neither.
  if (!info->payload && !rest.empty())
    return err(EPROTO, "{} carries {} bytes after its headers, expected none", info->name,
               rest.size());
  if (bth.pad_cnt > rest.size())
    return err(EPROTO, "BTH.PadCnt {} exceeds the {} bytes of payload", bth.pad_cnt, rest.size());
  p.payload = rest.first(rest.size() - bth.pad_cnt);

  // IBA 7.8.1: end-to-end check last; a switch would skip it.
  if (std::uint32_t c = opts.check_icrc ? compute_icrc(body) : p.icrc; c != p.icrc)
    return err(EBADMSG, "bad ICRC {:#010x}, computed {:#010x}", p.icrc, c);
  return ok();
}

Result<PacketFrame> frame_packet(const Headers& hdr, std::size_t payload_len) {
  auto info = opcode_info(hdr.bth.opcode);
  if (!info) return err(EINVAL, "unsupported OpCode {:#04x}", hdr.bth.opcode);
  if (hdr.present_ext() != info->ext)
    return err(EINVAL, "{}: extension headers {:#x} given, OpCode needs {:#x}", info->name,
               hdr.present_ext(), info->ext);
  if (!info->payload && payload_len != 0)
    return err(EINVAL, "{} carries no payload, {} bytes given", info->name, payload_len);

  // IBA 9.2: pad the payload to a multiple of 4 bytes.
  PacketFrame f;
  f.payload_len = payload_len;
  f.pad_cnt = static_cast<std::uint8_t>((4 - payload_len % 4) % 4);
  std::size_t hdr_bytes = kLrhBytes + (hdr.grh ? kGrhBytes : 0) + kBthBytes + ext_headers_size(info->ext);
  std::size_t pkt_bytes = hdr_bytes + payload_len + f.pad_cnt + kIcrcBytes;
  if (pkt_bytes + kVcrcBytes > kMaxPacketBytes)
    return err(EINVAL, "packet of {} bytes exceeds the 11-bit PktLen", pkt_bytes);
  f.size = pkt_bytes + kVcrcBytes;

  Lrh lrh = hdr.lrh;
  lrh.lnh = hdr.grh ? Lnh::kIbaGlobal : Lnh::kIbaLocal;  // IBA 7.7.5
  lrh.pkt_len = static_cast<std::uint16_t>(pkt_bytes / 4);  // IBA 7.7.8
  Bth bth = hdr.bth;
  bth.pad_cnt = f.pad_cnt;

  std::byte* out = f.header_bytes.data();
  out = write_lrh(out, lrh);
  if (hdr.grh) {
    Grh g = *hdr.grh;
    g.pay_len = static_cast<std::uint16_t>(pkt_bytes - kLrhBytes - kGrhBytes);  // IBA 8.3.3
    out = write_grh(out, g);
  }
  out = write_bth(out, bth);
  if (hdr.rdeth) out = write_rdeth(out, *hdr.rdeth);
  if (hdr.deth) out = write_deth(out, *hdr.deth);
  if (hdr.reth) out = write_reth(out, *hdr.reth);
  if (hdr.atomic_eth) out = write_atomic_eth(out, *hdr.atomic_eth);
  if (hdr.aeth) out = write_aeth(out, *hdr.aeth);
  if (hdr.atomic_ack_eth) out = write_atomic_ack_eth(out, *hdr.atomic_ack_eth);
  if (hdr.imm_dt) out = write_imm_dt(out, *hdr.imm_dt);
  if (hdr.ieth) out = write_ieth(out, *hdr.ieth);
  f.header_len = static_cast<std::size_t>(out - f.header_bytes.data());
  return f;
}

void pad_packet(const PacketFrame& f, std::span<std::byte> d) {
  const std::size_t pad_at = f.header_len + f.payload_len;
  std::fill_n(d.begin() + static_cast<std::ptrdiff_t>(pad_at), f.pad_cnt, std::byte{0});  // IBA 9.2: pad bytes are 0
}

void seal_packet(std::span<std::byte> d) {
  if (d.size() < kLrhBytes + kIcrcBytes + kVcrcBytes) return;
  const std::size_t icrc_at = d.size() - kIcrcBytes - kVcrcBytes;
  // Both CRCs least significant byte first (IBA 7.8.1, 7.8.2).
  bytes::put_le(d, icrc_at, kIcrcBytes, compute_icrc(d.first(icrc_at)));
  bytes::put_le(d, icrc_at + kIcrcBytes, kVcrcBytes, compute_vcrc(d.first(icrc_at + kIcrcBytes)));
}

Result<std::vector<std::byte>> build_packet(const Headers& hdr, std::span<const std::byte> payload) {
  OPENIB_TRY_ASSIGN(PacketFrame f, frame_packet(hdr, payload.size()));
  std::vector<std::byte> out(f.size);
  std::copy(f.headers().begin(), f.headers().end(), out.begin());
  std::copy(payload.begin(), payload.end(), out.begin() + static_cast<std::ptrdiff_t>(f.payload_offset()));
  pad_packet(f, out);
  seal_packet(out);
  return out;
}

void rewrite_vcrc(std::span<std::byte> dgram) {
  if (dgram.size() < kLrhBytes + kIcrcBytes + kVcrcBytes) return;
  std::size_t n = dgram.size() - kVcrcBytes;
  bytes::put_le(dgram, n, kVcrcBytes, compute_vcrc(dgram.first(n)));  // IBA 7.8.2
}

}  // namespace openib::sim::wire
