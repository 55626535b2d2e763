// The RDMA CM's wire conventions declared in header.hpp (docs/cma.md
// "Wire"): service IDs, struct cma_hdr, and cma_set_mgid's MGIDs.
#include "cma/header.hpp"

#include <algorithm>

#include <arpa/inet.h>
#include <sys/socket.h>

#include "ipoib_tap/bridge.hpp"  // RFC 4391's multicast mappings

namespace openib::cma {

namespace {
constexpr std::size_t kIpv4Bytes = 4;
constexpr std::size_t kAddrBytes = 16;
// struct cma_hdr's offsets.
constexpr std::size_t kOffVersion = 0, kOffIpVersion = 1, kOffPort = 2, kOffSrc = 4, kOffDst = 20;
// union cma_ip_addr: an IPv4 address in its last 4 bytes.
constexpr std::size_t kIpv4InUnion = kAddrBytes - kIpv4Bytes;

std::size_t addr_bytes(std::uint16_t family) { return family == AF_INET ? kIpv4Bytes : kAddrBytes; }

void put_addr(std::uint8_t* out, const Addr& a) {
  std::fill(out, out + kAddrBytes, 0);
  if (a.family == AF_INET)
    std::copy_n(a.addr.begin(), kIpv4Bytes, out + kIpv4InUnion);
  else
    std::copy_n(a.addr.begin(), kAddrBytes, out);
}

Addr get_addr(std::span<const std::uint8_t> in, std::uint16_t family, std::uint16_t port) {
  Addr a;
  a.family = family;
  a.port = port;
  if (family == AF_INET)
    std::copy_n(in.begin() + kIpv4InUnion, kIpv4Bytes, a.addr.begin());
  else
    std::copy_n(in.begin(), kAddrBytes, a.addr.begin());
  return a;
}

bool is_ip_ps(std::uint16_t ps) { return ps == kPsTcp || ps == kPsUdp || ps == kPsIpoib || ps == kPsIb; }
}  // namespace

bool Addr::any() const {
  const auto n = static_cast<std::ptrdiff_t>(addr_bytes(family));
  return std::all_of(addr.begin(), addr.begin() + n, [](std::uint8_t b) { return b == 0; });
}

std::string Addr::str() const {
  char buf[INET6_ADDRSTRLEN] = {};
  if (family == AF_INET) {
    ::inet_ntop(AF_INET, addr.data(), buf, sizeof buf);
    return std::string(buf) + ":" + std::to_string(port);
  }
  if (family == AF_INET6) {
    ::inet_ntop(AF_INET6, addr.data(), buf, sizeof buf);
    return "[" + std::string(buf) + "]:" + std::to_string(port);
  }
  return "(family " + std::to_string(family) + ")";
}

std::uint64_t service_id(std::uint16_t ps, std::uint16_t port) {
  return (std::uint64_t{ps} << 16) + port;
}

std::optional<std::pair<std::uint16_t, std::uint16_t>> split_service_id(std::uint64_t sid) {
  if (sid >> 32 != 0) return std::nullopt;
  const auto ps = static_cast<std::uint16_t>(sid >> 16);
  if (!is_ip_ps(ps)) return std::nullopt;
  return std::pair{ps, static_cast<std::uint16_t>(sid)};
}

bool carries_header(std::uint16_t ps) { return is_ip_ps(ps); }

void encode_header(std::span<std::uint8_t, kHeaderBytes> out, const Addr& src, const Addr& dst) {
  out[kOffVersion] = kVersion;
  out[kOffIpVersion] = static_cast<std::uint8_t>((src.family == AF_INET ? 4 : 6) << 4);
  out[kOffPort] = static_cast<std::uint8_t>(src.port >> 8);
  out[kOffPort + 1] = static_cast<std::uint8_t>(src.port);
  put_addr(out.data() + kOffSrc, src);
  put_addr(out.data() + kOffDst, dst);
}

Result<Header> decode_header(std::span<const std::uint8_t> pd, std::uint64_t sid) {
  const auto ps_port = split_service_id(sid);
  if (!ps_port) return err(EINVAL, "service ID {:#018x} is not an RDMA CM IP port space's", sid);
  if (pd.size() < kHeaderBytes)
    return err(EBADMSG, "private data of {} bytes is shorter than the {}-byte RDMA CM header", pd.size(),
               kHeaderBytes);
  if (pd[kOffVersion] != kVersion)
    return err(EPROTONOSUPPORT, "RDMA CM header version {:#04x} (only {:#04x} is known)", pd[kOffVersion],
               kVersion);
  const unsigned ipv = pd[kOffIpVersion] >> 4;
  if (ipv != 4 && ipv != 6) return err(EAFNOSUPPORT, "RDMA CM header's IP version {} (not 4 or 6)", ipv);
  const std::uint16_t family = ipv == 4 ? AF_INET : AF_INET6;
  const auto src_port = static_cast<std::uint16_t>(pd[kOffPort] << 8 | pd[kOffPort + 1]);
  return Header{get_addr(pd.subspan(kOffSrc, kAddrBytes), family, src_port),
                get_addr(pd.subspan(kOffDst, kAddrBytes), family, ps_port->second)};
}

namespace {
// The IPv4 address inside `a` (IPv4, or IPv4-mapped IPv6 ::ffff:a.b.c.d).
std::optional<std::array<std::uint8_t, 4>> ipv4_of(const Addr& a) {
  std::array<std::uint8_t, 4> v4{};
  if (a.family == AF_INET) {
    std::copy_n(a.addr.begin(), 4, v4.begin());
    return v4;
  }
  static constexpr std::array<std::uint8_t, 12> kMapped{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF};
  if (a.family != AF_INET6 || !std::equal(kMapped.begin(), kMapped.end(), a.addr.begin())) return std::nullopt;
  std::copy_n(a.addr.begin() + 12, 4, v4.begin());
  return v4;
}
}  // namespace

bool is_loopback(const Addr& a) {
  if (auto v4 = ipv4_of(a)) return (*v4)[0] == 127;
  static constexpr std::array<std::uint8_t, 16> kLo6{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  return a.family == AF_INET6 && a.addr == kLo6;
}

bool is_unicast_endpoint(const Addr& a) {
  if (is_loopback(a)) return false;
  if (auto v4 = ipv4_of(a)) {
    const auto& b = *v4;
    const bool zeronet = b[0] == 0, multicast = (b[0] & 0xF0) == 0xE0;
    const bool broadcast = b[0] == 0xFF && b[1] == 0xFF && b[2] == 0xFF && b[3] == 0xFF;
    return !zeronet && !multicast && !broadcast;
  }
  if (a.family != AF_INET6) return false;
  return !a.any() && a.addr[0] != 0xFF;
}

Result<std::array<std::uint8_t, 16>> mgid_for(const Addr& group, std::uint16_t ps, std::uint16_t pkey) {
  constexpr std::uint8_t kScope = 2;  // the broadcast group's (link-local)
  std::array<std::uint8_t, 16> mgid{};
  if (group.family == AF_INET) {
    if ((group.addr[0] & 0xF0) != 0xE0) return err(EINVAL, "{} is not an IPv4 multicast address", group.str());
    const std::uint32_t a = std::uint32_t{group.addr[0]} << 24 | std::uint32_t{group.addr[1]} << 16 |
                            std::uint32_t{group.addr[2]} << 8 | group.addr[3];
    mgid = ipoib::ipv4_mgid(a, pkey, kScope);
  } else if (group.family == AF_INET6) {
    if (group.addr[0] != 0xFF) return err(EINVAL, "{} is not an IPv6 multicast address", group.str());
    // An MGID the SA assigned (OpenSM's ff1x:a01b:: prefix; cma.c's test):
    // used as it is.
    if ((group.addr[1] & 0xF0) == 0x10 && group.addr[2] == 0xA0 && group.addr[3] == 0x1B) return group.addr;
    mgid = ipoib::ipv6_mgid(group.addr, pkey, kScope);
  } else {
    return err(EINVAL, "a multicast group needs an IPv4 or IPv6 address (family {})", group.family);
  }
  if (ps == kPsUdp) mgid[3] = 0x01;  // the RDMA CM signature (cma.c: mc_map[7])
  return mgid;
}

}  // namespace openib::cma
