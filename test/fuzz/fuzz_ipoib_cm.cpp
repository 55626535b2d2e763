// libFuzzer target: IPoIB connected mode's pure pieces
// (src/ipoib_tap/cm_wire.hpp, too_big.hpp) fed arbitrary bytes.
// Input: flags(1) mtu(2, big-endian) then the rest, which is
//  - IPoIB-CM private data (decode_cm_private_data) and, its first 8
//    bytes, a service ID (cm_service_qpn);
//  - an Ethernet frame from the kernel (icmp_too_big with that mtu);
//    flags bit 1 first pads it with 1400 zero bytes, bit 2 makes it IPv4
//    (bit 3: IPv6) in EtherType and version, bit 0 then makes the IPv4
//    total length / IPv6 payload length match the frame, so that the
//    fuzzer reaches the checks behind them.
// Invariants: decoded private data encodes back to the same 8 bytes and
// holds a UD QPN and an MTU decode allows; a service ID that names a QPN
// is cm_service_id of it; an answer to a frame goes back to its sender,
// is ICMP 3/4 (IPv4, at most 576 bytes of IP) or ICMPv6 2/0 (at most
// 1280), carries `mtu`, has right checksums and quotes the frame's IP
// packet from its first byte; nothing crashes, leaks or reads past the
// input.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <vector>

#include "ipoib_tap/cm_wire.hpp"
#include "ipoib_tap/too_big.hpp"
#include "ipoib_tap/translate.hpp"

using namespace openib::ipoib;

namespace {

void require(bool ok) {
  if (!ok) std::abort();
}

std::uint32_t be(std::span<const std::uint8_t> b, std::size_t off, std::size_t n) {
  std::uint32_t v = 0;
  for (std::size_t i = 0; i < n; ++i) v = v << 8 | b[off + i];
  return v;
}

// RFC 1071, folded: 0xFFFF over a block whose checksum is right.
std::uint16_t folded(std::span<const std::uint8_t> b) {
  std::uint64_t s = 0;
  for (std::size_t i = 0; i < b.size(); i += 2) s += std::uint64_t{b[i]} << 8 | (i + 1 < b.size() ? b[i + 1] : 0);
  while (s >> 16) s = (s & 0xFFFF) + (s >> 16);
  return static_cast<std::uint16_t>(s);
}

void check_private_data(std::span<const std::uint8_t> in) {
  auto d = decode_cm_private_data(in);
  if (!d.ok()) {
    require(!d.error().message.empty());
    return;
  }
  require(d->qpn > 1 && d->qpn < kMulticastQpn && d->mtu >= kCmMinMtu);
  const auto e = encode_cm_private_data(*d);
  require(std::equal(e.begin(), e.end(), in.begin()));
}

void check_service_id(std::span<const std::uint8_t> in) {
  if (in.size() < 8) return;
  const std::uint64_t sid = std::uint64_t{be(in, 0, 4)} << 32 | be(in, 4, 4);
  auto qpn = cm_service_qpn(sid);
  require(qpn.has_value() == ((sid & kCmServiceIdMask) == kCmServiceIdBase));
  if (qpn) require(cm_service_id(*qpn) == sid);
}

void check_answer(std::span<const std::uint8_t> frame, const std::vector<std::uint8_t>& out, std::uint32_t mtu) {
  const std::span<const std::uint8_t> o(out);
  require(o.size() >= 14 && std::equal(o.begin(), o.begin() + 6, frame.begin() + 6) &&
          std::equal(o.begin() + 6, o.begin() + 12, frame.begin()) && (o[0] & 1) == 0);
  const auto ip = o.subspan(14), orig = frame.subspan(14);
  std::span<const std::uint8_t> quoted;
  if (be(o, 12, 2) == 0x0800) {
    require(be(frame, 12, 2) == 0x0800 && ip.size() >= 28 && ip.size() <= 576 && be(ip, 2, 2) == ip.size());
    require(ip[0] == 0x45 && ip[9] == 1 && folded(ip.first(20)) == 0xFFFF && folded(ip.subspan(20)) == 0xFFFF);
    require(ip[20] == 3 && ip[21] == 4 && be(ip, 26, 2) == mtu && mtu < be(orig, 2, 2));
    quoted = ip.subspan(28);
  } else {
    require(be(o, 12, 2) == 0x86DD && be(frame, 12, 2) == 0x86DD);
    require(ip.size() >= 48 && ip.size() <= 1280 && be(ip, 4, 2) + 40 == ip.size() && ip[6] == 58);
    require(ip[40] == 2 && ip[41] == 0 && be(ip, 44, 4) == mtu && mtu >= 1280);
    require(icmpv6_checksum(ip) == be(ip, 42, 2));
    quoted = ip.subspan(48);
  }
  require(quoted.size() <= orig.size() && std::equal(quoted.begin(), quoted.end(), orig.begin()));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 3) return 0;
  const std::uint8_t flags = data[0];
  const std::uint32_t mtu = std::uint32_t{data[1]} << 8 | data[2];
  // A copy of exactly the rest, so that ASan sees any read past it.
  std::vector<std::uint8_t> rest(data + 3, data + size);
  check_private_data(rest);
  check_service_id(rest);

  // Bit 1: 1400 zero bytes more, an IPv6 packet above its 1280-byte
  // minimum MTU without an input of that length.
  if (flags & 2) rest.resize(rest.size() + 1400);
  // Bit 2: an IP frame, IPv6 if bit 3 else IPv4 (EtherType and version).
  if ((flags & 4) && rest.size() >= 15) {
    const bool v6 = (flags & 8) != 0;
    rest[12] = v6 ? 0x86 : 0x08;
    rest[13] = v6 ? 0xDD : 0x00;
    rest[14] = static_cast<std::uint8_t>((rest[14] & 0x0F) | (v6 ? 0x60 : 0x40));
  }
  if ((flags & 1) && rest.size() >= 14 + 40 && rest.size() - 14 <= 0xFFFF + 40) {
    const std::size_t n = rest.size() - 14;
    if (rest[12] == 0x08 && rest[13] == 0x00) {
      rest[16] = static_cast<std::uint8_t>(n >> 8);
      rest[17] = static_cast<std::uint8_t>(n);
    } else if (rest[12] == 0x86 && rest[13] == 0xDD) {
      rest[18] = static_cast<std::uint8_t>((n - 40) >> 8);
      rest[19] = static_cast<std::uint8_t>(n - 40);
    }
  }
  auto out = icmp_too_big(rest, mtu);
  if (out) check_answer(rest, *out, mtu);
  return 0;
}
