// Datagram rsockets (SOCK_DGRAM), wire-compatible with rdma-core's
// (docs/rsockets.md "Datagram sockets"): the facts of its protocol, and
// the state a datagram socket keeps.
//
// Each socket owns a kernel UDP socket (bound where the application binds)
// and one UD QP per local IP address it sends from or is reached at, made
// by the RDMA CM in the UDP port space on the same address and port (Q_Key
// 0x01234567). Until a sender knows its peer's QPN it sends over UDP with a
// DsUdpHeader in front (op DATA, its own QPN); the receiver answers with a
// DsUdpHeader alone (op CTRL, its QPN), resolves an address handle to the
// sender and delivers the payload. From then on datagrams are UD SENDs,
// each a DsHeader (the sender's address and port) and the payload, into
// 2,048-byte receive slots behind the 40-byte GRH.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

namespace openib::rsocket {

constexpr uint32_t kDsUdpTag = 0x55555555;
constexpr uint8_t kDsOpData = 0, kDsOpCtrl = 7;
constexpr uint32_t kDsQkey = 0x01234567;  // RDMA_UDP_QKEY
constexpr uint32_t kDsSlot = 2048;        // a send slot, and the largest datagram with its header
constexpr uint32_t kDsRecvSlot = 4096;    // a receive slot: what the largest IB MTU carries, so
                                          // that no UD message overflows it (which would fail the QP)
constexpr uint32_t kGrhBytes = 40;
constexpr uint8_t kDsUdpHdr4 = 16, kDsUdpHdr6 = 28;
constexpr uint8_t kDsHdr4 = 8, kDsHdr6 = 24;
constexpr size_t kMaxDests = 1024;  // peers a socket keeps (then datagrams from new ones are dropped)
constexpr int kMaxResolving = 4;    // address resolutions in flight per socket

// In front of a datagram sent over UDP, and alone as the CTRL answer
// (length: 16 for IPv4, 28 for IPv6; qpn's top byte reserved).
struct DsUdpHeader {
  uint32_t tag;  // BE kDsUdpTag
  uint8_t version;
  uint8_t op;
  uint8_t length;
  uint8_t reserved;
  uint32_t qpn;  // BE
  union {
    uint32_t ipv4;
    uint8_t ipv6[16];
  } addr;
};
static_assert(sizeof(DsUdpHeader) == 28);

// In front of every UD datagram: where it comes from (length 8 or 24).
struct DsHeader {
  uint8_t version;
  uint8_t length;
  uint16_t port;  // BE
  union {
    uint32_t ipv4;
    struct {
      uint32_t flowinfo;
      uint8_t addr[16];
    } ipv6;
  } addr;
};
static_assert(sizeof(DsHeader) == 24);

union SockAddr {
  sockaddr sa;
  sockaddr_in sin;
  sockaddr_in6 sin6;
};
socklen_t addr_len(const SockAddr& a);
bool same_addr(const SockAddr& a, const SockAddr& b);  // family, address and port

// ---- the headers (datagram_wire.cpp) ----
void format_hdr(DsHeader& h, const SockAddr& a);  // ours, for sending from `a`
SockAddr from_hdr(const DsHeader& h);             // the source a header names

// A datagram from the UDP socket (from an address of from_family), checked:
// the tag, a version of the source's family with its header length, op
// DATA or CTRL, a QPN a datagram socket's QP can have (not 0 or 1), a
// payload that fits a slot. False: drop it.
struct UdpDatagram {
  uint8_t op = 0;
  uint32_t qpn = 0;
  size_t payload = 0;  // where the payload starts
};
bool parse_udp_datagram(const uint8_t* buf, size_t len, int from_family, UdpDatagram& out);
// A UD message (what follows the GRH, len bytes) for a socket of `family`:
// a whole header of that family, at most a send slot in all. Its source
// address and where its payload starts; false: drop it.
bool parse_ud_message(const uint8_t* msg, size_t len, int family, SockAddr& from, size_t& payload);

// The largest payload: what fits a slot behind the UDP header of the first
// exchange (a datagram may travel either way).
constexpr uint32_t ds_max_payload(int family) { return kDsSlot - (family == AF_INET6 ? kDsUdpHdr6 : kDsUdpHdr4); }

// One UD QP, on one local address (with the UDP socket's port).
struct DsQp {
  SockAddr local{};
  DsHeader hdr{};
  rdma_cm_id* id = nullptr;  // synchronous, bound to `local`
  ibv_comp_channel* cch = nullptr;
  ibv_cq* cq = nullptr;
  uint8_t* rbuf = nullptr;  // rq receive slots, then the GRH of every receive
  ibv_mr *rmr = nullptr, *smr = nullptr;
  bool armed = false;
  uint32_t max_inline = 0;   // the QP's inline capacity
  uint32_t max_payload = 0;  // datagram bytes: ds_max_payload, and what the port's MTU carries
  bool failed = false;       // a completion in error: the QP no longer works (sends: EIO)
};

// A peer address: through which QP, and once known its QPN and AH.
struct DsDest {
  SockAddr addr{};
  DsQp* qp = nullptr;
  ibv_ah* ah = nullptr;
  uint32_t qpn = 0;
  bool resolving = false;  // a resolver thread makes the AH
  std::chrono::steady_clock::time_point retry_at{};  // after a failed resolution: not before
};

// A datagram waiting for the application: in a QP's slot, or (arrived over
// UDP) in `bytes`.
struct DsMessage {
  DsQp* qp = nullptr;
  uint32_t offset = 0, length = 0;
  std::vector<uint8_t> bytes;
  SockAddr from{};
};

struct Datagram {
  int udp = -1;
  std::vector<std::unique_ptr<DsQp>> qps;
  std::vector<std::unique_ptr<DsDest>> dests;
  DsDest* conn = nullptr;  // rconnect()ed peer
  uint8_t* sbuf = nullptr;  // sq slots of kDsSlot bytes
  uint32_t sq = 0, rq = 0;
  std::vector<uint32_t> free_slots;  // send slots not in flight
  std::deque<DsMessage> queue;       // at most rq messages
  int resolving = 0;                 // resolver threads running (at most kMaxResolving)
  uint64_t dropped = 0;              // datagrams dropped: malformed, or no room
  uint64_t dropped_by[6] = {};       // by reason (datagram.cpp)
  ~Datagram();
};

}  // namespace openib::rsocket
