// libFuzzer target: arbitrary bytes into the RDMA CM's header codec and
// MGID mapping (src/cma/header). The input's first 8 bytes are a service
// ID, the next 2 pick a port space and the next 2 a P_Key; the rest is a
// REQ's private data. Whatever decodes must encode to a header that
// decodes to the same endpoints; decode's errors are the documented ones;
// mgid_for of any address (the decoded ones, and the private data's first
// 16 bytes as IPv4 and IPv6 groups) gives a multicast GID or EINVAL.
// Nothing may crash or read out of bounds.
#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

#include <sys/socket.h>

#include "cma/header.hpp"

using namespace openib;
using namespace openib::cma;

namespace {

constexpr std::uint16_t kSpaces[] = {kPsTcp, kPsUdp, kPsIpoib, kPsIb};

std::uint64_t be(std::span<const std::uint8_t> b) {
  std::uint64_t v = 0;
  for (auto x : b) v = v << 8 | x;
  return v;
}

void check_mgid(const Addr& a, std::uint16_t ps, std::uint16_t pkey) {
  auto m = mgid_for(a, ps, pkey);
  if (!m.ok()) {
    if (m.error().code != EINVAL) std::abort();
    return;
  }
  if ((*m)[0] != 0xFF) std::abort();  // a multicast GID
  (void)a.str();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  constexpr std::size_t kPrefix = 12;
  if (size < kPrefix) return 0;
  const std::span<const std::uint8_t> in(data, size);
  const std::uint64_t sid = be(in.first(8));
  const std::uint16_t ps = kSpaces[in[8] % std::size(kSpaces)];
  const auto pkey = static_cast<std::uint16_t>(be(in.subspan(10, 2)));
  const auto pd = in.subspan(kPrefix);

  (void)split_service_id(sid);
  auto h = decode_header(pd, sid);
  if (!h.ok()) {
    const int c = h.error().code;
    if (c != EBADMSG && c != EPROTONOSUPPORT && c != EAFNOSUPPORT && c != EINVAL) std::abort();
  } else {
    if (h->src.family != h->dst.family || h->dst.port != static_cast<std::uint16_t>(sid)) std::abort();
    std::array<std::uint8_t, kHeaderBytes> again{};
    encode_header(again, h->src, h->dst);
    auto h2 = decode_header(again, sid);
    if (!h2.ok() || h2->src != h->src || h2->dst != h->dst) std::abort();
    check_mgid(h->src, ps, pkey);
    check_mgid(h->dst, ps, pkey);
  }
  if (pd.size() >= 16) {
    Addr a;
    std::copy_n(pd.begin(), 16, a.addr.begin());
    for (std::uint16_t family : {AF_INET, AF_INET6, AF_UNSPEC}) {
      a.family = family;
      check_mgid(a, ps, pkey);
    }
  }
  return 0;
}
