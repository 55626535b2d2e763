// The IPoIB bridge's tests (test_ipoib_*.cpp): a fake BridgeIo that
// records what the bridge asks of ibd, the interface's and a peer's
// addresses, byte strings from hex and an ICMPv6 checksum written apart
// from the bridge's (RFC 4443 §2.3 over the RFC 8200 §8.1 pseudo-header).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "ipoib_tap/bridge.hpp"

namespace openib::test::ipoib {

using namespace openib::ipoib;
using Bytes = std::vector<std::uint8_t>;

inline Bytes hx(std::string_view s) {
  Bytes out;
  std::string digits;
  for (char c : s)
    if (c != ' ' && c != ':' && c != '|') digits.push_back(c);
  for (std::size_t i = 0; i + 1 < digits.size(); i += 2)
    out.push_back(static_cast<std::uint8_t>(std::stoi(digits.substr(i, 2), nullptr, 16)));
  return out;
}

inline Bytes cat(std::initializer_list<Bytes> parts) {
  Bytes out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

template <std::size_t N>
Bytes bytes(const std::array<std::uint8_t, N>& a) {
  return Bytes(a.begin(), a.end());
}

inline Gid gid_of(std::string_view s) {
  Gid g{};
  const Bytes b = hx(s);
  std::copy(b.begin(), b.end(), g.begin());
  return g;
}

inline const Gid kOwnGid = gid_of("fe80000000000000 0002c90300000001");
inline const Gid kPeerGid = gid_of("fe80000000000000 0002c90300000002");
inline const HwAddr kOwn{0x48, kOwnGid};
inline const HwAddr kPeer{0x49, kPeerGid};

inline LinkParams link_params() {
  LinkParams l;
  l.port_gid = kOwnGid;
  l.qpn = 0x48;
  l.pkey = 0xFFFF;
  l.qkey = 0x0B1B;
  l.ib_mtu = 2048;
  return l;
}

struct FakeIo : BridgeIo {
  struct Sent {
    UdDest to;
    Bytes packet;
  };
  std::vector<Sent> sent;
  std::vector<Bytes> frames;
  std::vector<Gid> resolves, leaves;
  std::vector<std::pair<Gid, bool>> joins;
  void send_ud(const UdDest& to, std::span<const std::uint8_t> p) override {
    sent.push_back({to, Bytes(p.begin(), p.end())});
  }
  void write_tap(std::span<const std::uint8_t> f) override { frames.emplace_back(f.begin(), f.end()); }
  void resolve_path(const Gid& g) override { resolves.push_back(g); }
  void join(const Gid& m, bool send_only) override { joins.emplace_back(m, send_only); }
  void leave(const Gid& m) override { leaves.push_back(m); }
};

// ICMPv6 checksums, independent of src/ipoib_tap/nd.cpp: the 16-bit
// one's complement sum of the pseudo-header (source, destination, the
// 32-bit length, 3 zero bytes, next header 58) and the whole message.
inline std::uint16_t pseudo_sum(const Bytes& ipv6) {
  Bytes all(ipv6.begin() + 8, ipv6.begin() + 40);
  const std::size_t len = ipv6.size() - 40;
  for (int shift : {24, 16, 8, 0}) all.push_back(static_cast<std::uint8_t>(len >> shift));
  all.insert(all.end(), {0, 0, 0, 58});
  all.insert(all.end(), ipv6.begin() + 40, ipv6.end());
  if (all.size() % 2) all.push_back(0);
  std::uint64_t sum = 0;
  for (std::size_t i = 0; i < all.size(); i += 2) sum += static_cast<std::uint64_t>(all[i] << 8 | all[i + 1]);
  while (sum >> 16) sum = (sum & 0xFFFF) + (sum >> 16);
  return static_cast<std::uint16_t>(sum);
}

// The checksum included, the sum is 0xFFFF (RFC 1071 §1).
inline bool icmpv6_checksum_ok(const Bytes& ipv6) { return pseudo_sum(ipv6) == 0xFFFF; }

// An IPv6 packet carrying ICMPv6 (no extension headers) with its checksum set.
inline Bytes with_icmpv6_checksum(Bytes ipv6) {
  ipv6[42] = ipv6[43] = 0;
  const auto ck = static_cast<std::uint16_t>(~pseudo_sum(ipv6));
  ipv6[42] = static_cast<std::uint8_t>(ck >> 8);
  ipv6[43] = static_cast<std::uint8_t>(ck);
  return ipv6;
}

}  // namespace openib::test::ipoib
