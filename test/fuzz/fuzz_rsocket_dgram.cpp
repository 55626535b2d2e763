// libFuzzer target: arbitrary bytes as what a hostile peer sends a datagram
// rsocket (src/abi/rdmacm/rsocket/datagram_wire.cpp): the input's first
// byte picks the address family and, for the UDP side, the source's; the
// rest is a UDP datagram and, the same bytes, a UD message after the GRH.
// Whatever parses must be within the input (payload at or before its end,
// no more than a slot), name a QPN above 1 and op DATA or CTRL (UDP), and
// give a source of the socket's family whose header, written again by
// format_hdr, is the one received (UD). Nothing may crash or read out of
// bounds.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "abi/rdmacm/rsocket/datagram.hpp"

using namespace openib::rsocket;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const int family = data[0] & 1 ? AF_INET6 : AF_INET;
  const int from_family = data[0] & 2 ? AF_INET6 : AF_INET;
  const std::uint8_t* msg = data + 1;
  const std::size_t len = size - 1;

  UdpDatagram u;
  if (parse_udp_datagram(msg, len, from_family, u)) {
    if (u.payload > len || (u.op != kDsOpData && u.op != kDsOpCtrl) || u.qpn < 2 || u.qpn > 0xFFFFFF) std::abort();
    if (len - u.payload > ds_max_payload(from_family)) std::abort();
  }

  SockAddr from{};
  std::size_t payload = 0;
  if (parse_ud_message(msg, len, family, from, payload)) {
    if (payload > len || len > kDsSlot || from.sa.sa_family != family) std::abort();
    DsHeader again;
    format_hdr(again, from);
    if (again.length != payload || std::memcmp(&again, msg, again.length) != 0) std::abort();
  }
  return 0;
}
