// An IPv4 address and port for the RDMA CM tests, as libopenib's
// IpEndpoint or the client protocol's CmaAddr (both: family, host-order
// port, the address in addr[0..3]).
#pragma once

#include <netinet/in.h>

#include <cstdint>
#include <span>
#include <vector>

#include "cma/header.hpp"

namespace openib::testing {

template <class A>
A ipv4(uint8_t a, uint8_t b, uint8_t c, uint8_t d, uint16_t port) {
  A x{};
  x.family = AF_INET;
  x.port = port;
  x.addr[0] = a;
  x.addr[1] = b;
  x.addr[2] = c;
  x.addr[3] = d;
  return x;
}

// A REQ's private data as rdma_connect writes it (docs/cma.md "Wire"):
// the 36-byte CMA header from src to dst, then `data`.
inline std::vector<uint8_t> with_cma_header(const cma::Addr& src, const cma::Addr& dst, std::span<const uint8_t> data) {
  std::vector<uint8_t> v(cma::kHeaderBytes);
  cma::encode_header(std::span<uint8_t, cma::kHeaderBytes>(v.data(), cma::kHeaderBytes), src, dst);
  v.insert(v.end(), data.begin(), data.end());
  return v;
}

}  // namespace openib::testing
