// What a port can do, asked of its link layer (docs/device-access.md
// "Ports"), as Linux's rdma_protocol_* and rdma_cap_* helpers
// (include/rdma/ib_verbs.h) ask of a port's core capability flags: every
// component asks these instead of assuming InfiniBand, so one code path
// serves an InfiniBand port and a RoCE one.
//
//   predicate      InfiniBand  Ethernet (RoCEv2)  Linux's
//   protocol_ib        yes        no              rdma_protocol_ib
//   protocol_roce      no         yes             rdma_protocol_roce
//   cap_ib_smi         yes        no              rdma_cap_ib_smi: QP0, the SMA, subnet managers
//   cap_ib_sa          yes        no              rdma_cap_ib_sa: SA queries (paths, joins, services)
//   cap_ib_mad         yes        yes             rdma_cap_ib_mad: QP1, GMPs
//   cap_ib_cm          yes        yes             rdma_cap_ib_cm: the IB CM's MADs
//   cap_ipoib          yes        no              rdma_cap_ipoib
//   cap_af_ib          yes        no              rdma_cap_af_ib: AF_IB addresses
//   cap_eth_ah         no         yes             rdma_cap_eth_ah: AHs need a MAC
//
// An Ethernet port's routes are built from addresses, not asked of the SA
// (sa/local_route.hpp, Linux's cma_resolve_iboe_route).
#pragma once

#include "hca/verbs.hpp"

namespace openib::hca {

// A device that does not say (0) is InfiniBand, as libibverbs reads it.
constexpr bool protocol_ib(LinkLayer l) { return l != LinkLayer::kEthernet; }
constexpr bool protocol_roce(LinkLayer l) { return l == LinkLayer::kEthernet; }
constexpr bool cap_ib_smi(LinkLayer l) { return protocol_ib(l); }
constexpr bool cap_ib_sa(LinkLayer l) { return protocol_ib(l); }
constexpr bool cap_ib_mad(LinkLayer l) { return protocol_ib(l) || protocol_roce(l); }
constexpr bool cap_ib_cm(LinkLayer l) { return cap_ib_mad(l); }
constexpr bool cap_ipoib(LinkLayer l) { return protocol_ib(l); }
constexpr bool cap_af_ib(LinkLayer l) { return protocol_ib(l); }
constexpr bool cap_eth_ah(LinkLayer l) { return protocol_roce(l); }

// The GID type a port's table holds (docs/simhca.md §6.12).
constexpr GidType native_gid_type(LinkLayer l) { return protocol_roce(l) ? GidType::kRoceV2 : GidType::kIb; }

constexpr const char* link_layer_name(LinkLayer l) { return protocol_roce(l) ? "Ethernet" : "InfiniBand"; }

}  // namespace openib::hca
