// libFuzzer target: src/arp's rtnetlink codec (src/arp/rtnl.hpp), what
// the resolver runs on every datagram of its sockets. Input: a datagram
// as the kernel would send it (any bytes). Invariants: nothing crashes or
// reads out of bounds; every message is reported (a truncated tail once,
// as Malformed); what parses keeps to its bounds (families IPv4/IPv6,
// lladdr <= 32 bytes, errors errnos); and the requests built from the
// input's first bytes split back into one well-formed message each.
#include <linux/netlink.h>
#include <sys/socket.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "arp/rtnl.hpp"

using namespace openib::arp;

namespace {

void check(const rtnl::Message& m) {
  if (auto* n = std::get_if<rtnl::Neigh>(&m)) {
    if (n->lladdr.size() > 32) std::abort();
    if (n->addr.family != AF_INET && n->addr.family != AF_INET6) std::abort();
  } else if (auto* a = std::get_if<rtnl::Addr>(&m)) {
    if (a->addr.family != AF_INET && a->addr.family != AF_INET6) std::abort();
  } else if (auto* r = std::get_if<rtnl::Route>(&m)) {
    if (r->family != AF_INET && r->family != AF_INET6) std::abort();
    if (r->gateway && r->gateway->family != r->family) std::abort();
    if (r->prefsrc && r->prefsrc->family != r->family) std::abort();
  } else if (auto* e = std::get_if<rtnl::Ack>(&m)) {
    if (e->error < 0 || e->error > 4095) std::abort();
  }
}

// A request must come back as exactly one message of its own length.
void round_trip(std::span<const uint8_t> req, uint32_t seq) {
  int count = 0;
  rtnl::for_each_message(req, [&](const rtnl::Header& h, const rtnl::Message& m) {
    ++count;
    if (std::holds_alternative<rtnl::Malformed>(m) || h.seq != seq || !(h.flags & NLM_F_REQUEST)) std::abort();
  });
  if (count != 1) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> in(data, size);
  size_t seen = 0;
  rtnl::for_each_message(in, [&](const rtnl::Header&, const rtnl::Message& m) {
    ++seen;
    check(m);
  });
  if (size > 0 && seen == 0) std::abort();
  check(rtnl::parse(in));
  // Unaligned: parse() copies before reading the headers.
  if (size > 1) check(rtnl::parse(in.subspan(1)));

  if (size >= 21) {
    Ip a;
    a.family = (data[0] & 1) ? AF_INET6 : AF_INET;
    std::memcpy(a.bytes.data(), data + 1, 16);
    if (a.family == AF_INET) std::memset(a.bytes.data() + 4, 0, 12);
    a.scope_id = data[17];
    uint32_t seq = 0;
    std::memcpy(&seq, data + 17, 4);
    alignas(nlmsghdr) uint8_t buf[rtnl::kRequestBytes];
    round_trip({buf, rtnl::get_route(buf, seq, (data[0] & 2) ? std::optional<Ip>(a) : std::nullopt, a)}, seq);
    round_trip({buf, rtnl::get_neigh(buf, seq, data[18], a)}, seq);
    round_trip({buf, rtnl::neigh_use(buf, seq, data[19], a, data[0] & 4)}, seq);
    round_trip({buf, rtnl::del_neigh(buf, seq, data[20], a)}, seq);
    round_trip({buf, rtnl::dump_addrs(buf, seq)}, seq);
  }
  return 0;
}
