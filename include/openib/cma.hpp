// libopenib: the RDMA CM (docs/cma.md "Library"), in the manner of
// librdmacm: connections named by IP address and port.
//
// ibd does the work (docs/cma.md "In ibd"): address resolution through the
// kernel's neighbour table on the IPoIB interface (docs/arp.md), route
// resolution through the SA path cache, the connection through the IB CM
// with rdma_cm's service IDs and 36-byte CMA header, UD peers through SIDR
// (Q_Key 0x01234567), multicast through SA joins and the HCA's attach.
//
//  - An RdmaEventChannel belongs to one Context (CMA_OPEN: one per
//    Context). fd() becomes readable when an event is queued; get_event()
//    returns it. Ids are plain handles (uint32_t) owned by the Context's
//    connection: closing the Context (or the process dying) destroys them
//    (connections disconnected, ports unbound, groups left).
//  - The sequence is rdma_cm's: active side create_id, resolve_addr
//    (kAddrResolved), resolve_route (kRouteResolved), a QP created by the
//    application on the Context and given to connect() (kEstablished, or
//    kRejected / kUnreachable / kConnectError); passive side create_id,
//    bind_addr, listen, kConnectRequest with a new id, accept() with a QP
//    (kEstablished), disconnect() (kDisconnected on both sides, then
//    kTimewaitExit).
//  - QPs: ibd moves an RC/UC QP through INIT, RTR, RTS with the
//    connection's parameters and to ERROR on disconnect. A UD QP is
//    brought to RTS by init_qp() (what rdma_create_qp does on a UD id):
//    Q_Key 0x01234567 in the UDP and IB port spaces, the broadcast group's
//    in the IPoIB space.
//
// Threading: one thread at a time per channel.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "openib/path.hpp"
#include "openib/result.hpp"
#include "openib/verbs.hpp"

namespace openib {

enum class RdmaPortSpace : uint16_t { kIpoib = 0x0002, kTcp = 0x0106, kUdp = 0x0111, kIb = 0x013F };
inline constexpr uint32_t kRdmaUdpQkey = 0x01234567;  // RDMA_UDP_QKEY

// enum rdma_cm_event_type, with its values.
enum class RdmaCmEventType : uint8_t {
  kAddrResolved = 0, kAddrError = 1, kRouteResolved = 2, kRouteError = 3, kConnectRequest = 4,
  kConnectResponse = 5, kConnectError = 6, kUnreachable = 7, kRejected = 8, kEstablished = 9,
  kDisconnected = 10, kDeviceRemoval = 11, kMulticastJoin = 12, kMulticastError = 13, kAddrChange = 14,
  kTimewaitExit = 15,
};
// rdma_event_str's names ("RDMA_CM_EVENT_ESTABLISHED", ...).
const char* rdma_event_str(RdmaCmEventType t);

// An IPv4 or IPv6 address and port (family 0: none).
struct IpEndpoint {
  sa_family_t family = 0;
  uint16_t port = 0;  // host order
  std::array<uint8_t, 16> addr{};  // AF_INET: the first 4 bytes
  uint32_t scope_id = 0;

  static IpEndpoint from_sockaddr(const sockaddr* sa);
  // sockaddr_in or sockaddr_in6 in `out`; its length.
  socklen_t to_sockaddr(sockaddr_storage& out) const;
  // "198.18.0.1:7471", "[fe80::1%2]:7471"
  std::string str() const;
  bool any() const;  // the wildcard address
};
// getaddrinfo(3) for the RDMA CM (rdma_getaddrinfo's use): `node` an
// address or name (nullptr: the wildcard, for a passive side), `service` a
// port number; the first IPv4 or IPv6 answer. EINVAL / EADDRNOTAVAIL with
// gai_strerror's text.
Result<IpEndpoint> rdma_getaddrinfo(const char* node, const char* service, int family = AF_UNSPEC);

struct RdmaConnParam {  // struct rdma_conn_param
  std::vector<uint8_t> private_data;  // REQ: at most 56 (92 less the CMA header); REP 196; SIDR_REQ 180
  uint8_t responder_resources = 1, initiator_depth = 1;
  uint8_t retry_count = 7, rnr_retry_count = 7;
};

struct RdmaCmEvent {
  RdmaCmEventType type{};
  uint32_t id = 0;         // the id the event is about (kConnectRequest: a new id)
  uint32_t listen_id = 0;  // kConnectRequest: the listener
  int status = 0;          // rdma_cm's: 0, a negative errno, or the REJ reason (kRejected)
  uint8_t port = 0;
  IpEndpoint src, dst;     // kConnectRequest: our address and the peer's
  // conn: struct rdma_conn_param as the peer sent it
  uint8_t responder_resources = 0, initiator_depth = 0, rnr_retry_count = 0;
  bool srq = false;
  uint32_t qp_num = 0;     // the peer's QPN (UD: the remote QP; a group: 0xFFFFFF)
  // ud: struct rdma_ud_param (kEstablished on a UD id, kMulticastJoin)
  uint32_t qkey = 0;
  AddressVector ah;
  std::vector<uint8_t> private_data;
};

// What rdma_cm_id's fields say (rdma_get_local_addr, rdma_get_peer_addr,
// id->route, id->port_num).
struct RdmaIdInfo {
  uint8_t state = 0;  // enum rdma_cm_state
  uint8_t port = 0;
  RdmaPortSpace ps = RdmaPortSpace::kTcp;
  uint16_t pkey = 0;
  IpEndpoint src, dst;
  Gid sgid, dgid;
  bool have_path = false;
  PathRecord path;
  uint32_t qpn = 0;
};

class RdmaEventChannel {
 public:
  // CMA_OPEN on the Context's connection (EBUSY: the Context has one).
  static Result<std::unique_ptr<RdmaEventChannel>> open(Context& ctx);
  virtual ~RdmaEventChannel() = default;

  virtual int fd() const = 0;
  // Waits up to timeout_ms (-1: forever, 0: no wait) for the next event.
  // ETIMEDOUT; ECONNRESET when ibd went away.
  virtual Result<RdmaCmEvent> get_event(int timeout_ms) = 0;

  virtual Result<uint32_t> create_id(RdmaPortSpace ps) = 0;
  // Frees the id: a connection is disconnected, a port unbound, groups left.
  virtual Result<void> destroy_id(uint32_t id) = 0;
  // Port 0: an ephemeral port. EADDRINUSE, EACCES (a port below 1024 for
  // an unprivileged client), EADDRNOTAVAIL (an address of no IPoIB
  // interface). Returns the address bound.
  virtual Result<IpEndpoint> bind_addr(uint32_t id, const IpEndpoint& addr) = 0;
  // kAddrResolved or kAddrError (status -EHOSTUNREACH, -ETIMEDOUT, -ENODEV ...).
  virtual Result<void> resolve_addr(uint32_t id, const IpEndpoint* src, const IpEndpoint& dst,
                                    int timeout_ms = 2000) = 0;
  // kRouteResolved or kRouteError.
  virtual Result<void> resolve_route(uint32_t id, int timeout_ms = 2000) = 0;
  virtual Result<void> listen(uint32_t id, int backlog = 0) = 0;
  // rdma_create_qp's part for a UD id: the QP to RTS with the id's Q_Key
  // (an RC/UC QP is moved by connect/accept).
  virtual Result<void> init_qp(uint32_t id, Qp& qp) = 0;
  virtual Result<void> connect(uint32_t id, Qp& qp, const RdmaConnParam& p) = 0;
  // qp nullptr: a UD id answering with the QP given to init_qp.
  virtual Result<void> accept(uint32_t id, Qp* qp, const RdmaConnParam& p) = 0;
  // Own QPs (docs/cma.md "Own QPs"; protocol 7, an older ibd answers
  // EOPNOTSUPP): the application moves its QP itself with init_qp_attr's
  // attributes and mask (rdma_init_qp_attr). connect_own_qp gives
  // kConnectResponse, after which the QP goes to RTR and RTS and
  // establish() sends the RTU (rdma_establish; no event). accept_own_qp
  // takes a QP already at RTS; kEstablished follows. qp_num names a QP of
  // this channel's Context.
  virtual Result<std::pair<QpAttr, uint32_t>> init_qp_attr(uint32_t id, QpState state) = 0;
  virtual Result<void> connect_own_qp(uint32_t id, uint32_t qp_num, const RdmaConnParam& p) = 0;
  virtual Result<void> accept_own_qp(uint32_t id, uint32_t qp_num, const RdmaConnParam& p) = 0;
  virtual Result<void> establish(uint32_t id) = 0;
  virtual Result<void> reject(uint32_t id, std::span<const uint8_t> private_data = {}) = 0;
  virtual Result<void> disconnect(uint32_t id) = 0;
  // The group's address (IPv4 or IPv6 multicast); the UD QP is attached
  // to it. kMulticastJoin (ud: the group's AH, QPN 0xFFFFFF, Q_Key) or
  // kMulticastError.
  virtual Result<void> join_multicast(uint32_t id, const IpEndpoint& group, Qp& qp) = 0;
  virtual Result<void> leave_multicast(uint32_t id, const IpEndpoint& group) = 0;
  virtual Result<RdmaIdInfo> query(uint32_t id) = 0;
};

}  // namespace openib
