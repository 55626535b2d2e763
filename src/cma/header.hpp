// The RDMA CM's wire conventions (docs/cma.md "Wire"), as Linux's rdma_cm
// has them (facts from include/rdma/rdma_cm.h and drivers/infiniband/core/
// cma.c): the service ID of an IP port space and port, the 36-byte header
// (struct cma_hdr) at the start of a REQ's or SIDR_REQ's private data, the
// UD Q_Key, and the MGID of an IP multicast group. Pure functions: no I/O,
// no state (ibd's cma_service sits on top, src/cm below).
#pragma once

#include <array>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <utility>

#include "common/result.hpp"

namespace openib::cma {

// An IP endpoint.
struct Addr {
  std::uint16_t family = 0;               // AF_INET / AF_INET6 (0: none)
  std::uint16_t port = 0;                 // host order
  std::array<std::uint8_t, 16> addr{};    // network order; IPv4 in addr[0..3]
  auto operator<=>(const Addr&) const = default;
  bool any() const;                       // the wildcard address (0.0.0.0, ::)
  std::string str() const;                // "198.18.0.1:7174", "[fd00::1]:7174"
};

inline constexpr std::size_t kHeaderBytes = 36;   // sizeof(struct cma_hdr)
inline constexpr std::uint8_t kVersion = 0x00;    // CMA_VERSION

// Port spaces (enum rdma_ucm_port_space).
inline constexpr std::uint16_t kPsIpoib = 0x0002, kPsTcp = 0x0106, kPsUdp = 0x0111, kPsIb = 0x013F;
// The Q_Key of UD ids and their multicast groups (RDMA_UDP_QKEY).
inline constexpr std::uint32_t kUdpQkey = 0x01234567;

// (ps << 16) + port (rdma_get_service_id for an IP address).
std::uint64_t service_id(std::uint16_t ps, std::uint16_t port);
// {ps, port} of a TCP, UDP, IPoIB or IB port space's service ID; nullopt
// for any other (not the RDMA CM's).
std::optional<std::pair<std::uint16_t, std::uint16_t>> split_service_id(std::uint64_t sid);
// Whether a REQ / SIDR_REQ of this port space starts with the header:
// all four (an IP-addressed id of the IB port space too, as Linux's;
// ids addressed by GID, AF_IB, are not implemented).
bool carries_header(std::uint16_t ps);

// struct cma_hdr: cma_version, ip_version << 4, the source port (be16), the
// source and destination addresses (16 bytes each; IPv4 in the last 4 with
// 12 zero bytes before it). src and dst must be of one family (AF_INET or
// AF_INET6); dst.port is not written (it is in the service ID).
void encode_header(std::span<std::uint8_t, kHeaderBytes> out, const Addr& src, const Addr& dst);

struct Header {
  Addr src, dst;  // src.port from the header; dst.port from the service ID
};
// Reads the header at the start of `private_data` for the REQ / SIDR_REQ
// carrying `service_id`. EBADMSG: shorter than kHeaderBytes;
// EPROTONOSUPPORT: cma_version not kVersion; EAFNOSUPPORT: ip_version not
// 4 or 6; EINVAL: service_id not a TCP/UDP/IPoIB one.
Result<Header> decode_header(std::span<const std::uint8_t> private_data, std::uint64_t service_id);

// The loopback addresses: 127.0.0.0/8, ::1, and ::ffff:127.0.0.0/104.
bool is_loopback(const Addr& a);
// Whether `a` may be an endpoint of a connection a REQ's header asks for:
// a unicast address of a host. Not a wildcard or "this network" address
// (0.0.0.0/8, ::), loopback, multicast, or the limited broadcast
// 255.255.255.255 (Linux's validate_ipv4_net_dev refuses these for either
// end before it looks at routes); an IPv4-mapped IPv6 address is judged as
// its IPv4 address. No family: false.
bool is_unicast_endpoint(const Addr& a);

// cma_set_mgid: the MGID of an IP multicast address in a port space. IPv4
// and IPv6 through RFC 4391's mapping (src/ipoib_tap) with `pkey` and the
// broadcast group's scope (2, link-local); in the UDP port space byte 3 is
// 0x01 (mc_map[7], "the RDMA CM signature"). An IPv6 address that already
// is an SA-assigned MGID (ff1x:a01b::/32) is used as it is.
// EINVAL: not a multicast address (or no family).
Result<std::array<std::uint8_t, 16>> mgid_for(const Addr& group, std::uint16_t ps, std::uint16_t pkey);

}  // namespace openib::cma
