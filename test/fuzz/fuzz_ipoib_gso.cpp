// libFuzzer target: the TAP's offloads done in userspace
// (src/ipoib_tap/gso.hpp) fed what a read from the TAP could hold.
// Input: mtu(2, big-endian), fix(1), then a virtio-net header (10 bytes)
// and an Ethernet frame. fix bit 0 makes the IPv4 total length / IPv6
// payload length match the frame, bit 1 its EtherType the one the GSO
// type names, so that the fuzzer reaches the segmentation behind them.
// Invariants: nothing is emitted unless the verdict is ok; with GSO, every
// frame emitted fits the mtu (IP packet), has the input's Ethernet
// header, an IPv4 header checksum that verifies, and the TCP payloads in
// sequence-number order, joined, are the input's; nothing crashes, leaks
// or reads past the input.
#include <cstdint>
#include <cstdlib>
#include <span>
#include <vector>

#include "ipoib_tap/gso.hpp"

using namespace openib::ipoib;

namespace {

void require(bool ok) {
  if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 3 + kVnetHdrLen) return 0;
  const std::uint32_t mtu = static_cast<std::uint32_t>(data[0] << 8 | data[1]);
  const std::uint8_t fix = data[2];
  const auto h = parse_vnet_hdr(std::span(data + 3, kVnetHdrLen));
  require(h.has_value());
  std::vector<std::uint8_t> frame(data + 3 + kVnetHdrLen, data + size);
  const std::uint8_t type = h->gso_type & ~kGsoEcn;
  const bool tcp = type == kGsoTcpv4 || type == kGsoTcpv6;
  if ((fix & 2) && tcp && frame.size() >= 15) {
    frame[12] = type == kGsoTcpv4 ? 0x08 : 0x86;
    frame[13] = type == kGsoTcpv4 ? 0x00 : 0xDD;
    frame[14] = static_cast<std::uint8_t>((type == kGsoTcpv4 ? 0x40 : 0x60) | (frame[14] & 0x0F));
  }
  if ((fix & 1) && frame.size() >= 14 + 40) {
    const std::size_t n = frame.size() - 14 - ((frame[14] >> 4) == 6 ? 40 : 0);
    const std::size_t at = (frame[14] >> 4) == 6 ? 14 + 4 : 14 + 2;
    frame[at] = static_cast<std::uint8_t>(n >> 8);
    frame[at + 1] = static_cast<std::uint8_t>(n);
  }
  const std::vector<std::uint8_t> original = frame;

  std::vector<std::vector<std::uint8_t>> out;
  std::vector<std::uint8_t> scratch;
  const auto v = gso_segment(*h, frame, mtu, scratch, [&](wire::Bytes f) { out.emplace_back(f.begin(), f.end()); });
  if (v != GsoVerdict::ok) {
    require(out.empty());
    return 0;
  }
  require(!out.empty());
  if (!tcp) {
    require(out.size() == 1 && out[0].size() == original.size());
    return 0;
  }
  // Segments: the TCP payloads join up to the input's.
  const bool v4 = type == kGsoTcpv4;
  std::vector<std::uint8_t> joined;
  std::size_t in_payload = 0;
  std::uint32_t expect_seq = 0;
  for (std::size_t i = 0; i < out.size(); ++i) {
    const auto& f = out[i];
    require(f.size() >= 14 + 20 + 20);
    require(std::equal(f.begin(), f.begin() + 14, original.begin()));
    std::size_t tcp_off = 0;
    if (v4) {
      const std::size_t ihl = std::size_t{f[14]} % 16 * 4;
      require(wire::be16(f, 16) == f.size() - 14 && f.size() - 14 <= mtu);
      require(ones_sum(std::span(f).subspan(14, ihl)) == 0xFFFF);
      tcp_off = 14 + ihl;
    } else {
      require(wire::be16(f, 18) == f.size() - 14 - 40 && f.size() - 14 <= mtu);
      // TCP after the hop-by-hop / destination options headers (the segmenter checked them).
      std::uint8_t next = f[14 + 6];
      std::size_t off = 14 + 40;
      while (next == 0 || next == 60) {
        next = f[off];
        off += (std::size_t{f[off + 1]} + 1) * 8;
      }
      tcp_off = off;
    }
    const std::size_t pay = tcp_off + std::size_t{f[tcp_off + 12]} / 16 * 4;
    require(pay <= f.size());
    const std::uint32_t seq = wire::be32(f, tcp_off + 4);
    if (i == 0) {
      expect_seq = wire::be32(original, tcp_off + 4);
      in_payload = pay;
    }
    require(seq == expect_seq);
    expect_seq += static_cast<std::uint32_t>(f.size() - pay);
    joined.insert(joined.end(), f.begin() + static_cast<std::ptrdiff_t>(pay), f.end());
  }
  const std::size_t ip_end = v4 ? 14 + wire::be16(original, 16) : 14 + 40 + wire::be16(original, 18);
  require(ip_end <= original.size() && in_payload <= ip_end);
  require(std::equal(joined.begin(), joined.end(), original.begin() + static_cast<std::ptrdiff_t>(in_payload),
                     original.begin() + static_cast<std::ptrdiff_t>(ip_end)));
  return 0;
}
