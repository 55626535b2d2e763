// What ibd's MAD layer (layer.hpp) needs from the port below it: MAD
// addresses, received MADs, and the MadTransport interface that MadPort
// (QP0/QP1 on the HCA driver, mad_port.hpp) implements and that tests and
// the fuzz target fake. No dependency on the driver.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <span>

#include "common/iba.hpp"
#include "common/result.hpp"
#include "mad/bytes.hpp"

namespace openib::mad {

using iba::kGsiQkey;  // IBA 13.5.3.1 (common/iba.hpp)

// Where a MAD came from (receive) or goes to (send). The fields of
// rdma-core's struct ib_mad_addr, host byte order.
struct MadAddress {
  uint32_t qpn = 0;    // remote QP (0 or 1 for management, any for redirected GSI)
  uint32_t qkey = 0;
  uint16_t lid = 0;    // remote LID; 0xFFFF permissive (directed-route SMPs)
  uint8_t sl = 0;
  uint8_t path_bits = 0;
  bool grh = false;
  uint8_t gid_index = 0, hop_limit = 0, traffic_class = 0;
  std::array<uint8_t, 16> gid{};
  uint32_t flow_label = 0;
  uint16_t pkey_index = 0;
  // An Ethernet port (RoCEv2, IBA Annex A17): the GID the MAD goes out
  // from (received: the GRH's DGID, so that a reply built from `from`
  // answers from the GID it was sent to). Zero: entry gid_index.
  std::array<uint8_t, 16> local_gid{};
};

// An Ethernet port's destination MAC for a DGID (ibd: arp::NeighLookup
// over the port's netdev, docs/arp.md "RoCE destinations"); an error when
// it is not known (EAGAIN: not yet).
using DmacLookup = std::function<Result<std::array<uint8_t, 6>>(uint8_t port, const std::array<uint8_t, 16>& dgid)>;

struct ReceivedMad {
  uint8_t qp = 0;  // 0 or 1: the QP it arrived on
  MadAddress from;
  std::array<std::byte, kMadBytes> mad{};
};

struct MadPortCounters {
  uint64_t sent = 0, send_errors = 0, received = 0, recv_errors = 0, no_send_buffer = 0;
  uint64_t queued = 0;  // MADs that waited for a send slot (MadPort's overflow queue)
  uint64_t ahs_evicted = 0;  // address handles the cache's bound destroyed (MadPort::kDefaultMaxAhs)
};

// What the MAD layer needs from the port below it (DESIGN: a small
// interface, so that tests and the fuzz target put a fake under the layer).
class MadTransport {
 public:
  using Receiver = std::function<void(const ReceivedMad&)>;
  virtual ~MadTransport() = default;
  virtual uint8_t port() const = 0;
  // The port has QP0, the SMI (hca/port_caps.hpp cap_ib_smi: an InfiniBand
  // port); a port without one (Ethernet) has QP1 alone.
  virtual bool has_smi() const { return true; }
  virtual void set_receiver(Receiver r) = 0;
  // One MAD (exactly kMadBytes) on QP `qp` (0 or 1) to `to`.
  virtual Result<void> send(uint8_t qp, const MadAddress& to, std::span<const std::byte> mad) = 0;
  // A completion event on CQ `cqn`: true if it was this port's (and handled).
  virtual bool on_cq_event(uint32_t cqn) = 0;
  virtual const MadPortCounters& counters() const = 0;
};

}  // namespace openib::mad
