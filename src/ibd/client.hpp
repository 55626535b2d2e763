// One client connection of ibd and the objects it owns
// (docs/client-protocol.md "Security model"). Handles are per client,
// never reused within a connection, and name exactly one object of one
// kind; a handle from another client's table is simply not found here.
#pragma once

#include <sys/types.h>

#include <array>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <chrono>
#include <cstdint>
#include <deque>
#include <unordered_map>

#include "clientproto/messages.hpp"
#include "common/fd.hpp"
#include "dma/dma_pool.hpp"
#include "hca/device.hpp"

namespace openib::ibd {

enum class Kind : uint8_t { kPd, kMem, kMr, kCq, kSrq, kQp, kAh };
inline constexpr size_t kNumKinds = 7;
const char* kind_name(Kind k);
// docs/simhca.md §6: the command that destroys an object of kind k by its
// number (0 for memory, which has no device object).
hca::ObjectKind device_kind(Kind k);  // the device object a client object is

// One object. Kept small (the benchmark holds 10,000 QPs): the device's
// number, the handles it depends on (each holding a reference), and the
// few fields a kind needs. Memory: its DMA mapping; CQ: its eventfd.
struct Object {
  Kind kind = Kind::kPd;
  uint8_t qp_type = 0;
  uint8_t log_size = 0;
  uint8_t qp_state = 0;  // QP: as last set by MODIFY_QP or seen by QUERY_QP
  uint32_t number = 0;  // pdn, lkey, cqn, srqn, qpn, ahn; 0 for memory
  uint32_t rkey = 0;    // MR
  uint32_t refs = 0;    // objects of this client that depend on this one
  std::array<uint32_t, 5> deps{};  // handles this one references (0: none)
  uint64_t length = 0;  // memory: bytes mapped; MR: bytes registered
  uint64_t base = 0;    // memory: the client's range's start in `map` (a hugetlb file maps whole huge pages)
  dma::DmaMapping map;  // memory only
  UniqueFd eventfd;     // CQ with completion events only
};

struct ClientCounters {
  uint64_t requests = 0, errors = 0;
  uint64_t events_dropped = 0;
};

struct Client {
  explicit Client(boost::asio::io_context& io, int fd) : sock(io, fd) {}

  uint32_t id = 0;
  boost::asio::posix::stream_descriptor sock;
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
  // At accept (peer.hpp): root or CAP_NET_ADMIN (user-MAD QP0/SMPs),
  // root or CAP_NET_RAW (controlled Q_Keys).
  bool net_admin = false, net_raw = false;
  bool hello = false;
  uint32_t version = 0;  // the protocol version HELLO negotiated
  bool closing = false;
  // One request at a time (docs/client-protocol.md "Request handling"): the
  // socket is not read while a request waits for the device, so a client
  // that pipelines cannot reorder its own requests.
  bool busy = false;
  // Asked PATH_QUERY or PATH_TABLE: gets path-change events (kEventPathChanged).
  bool path_user = false;
  bool dispatching = false;  // inside Server::on_readable's call of handle()
  bool watching = false;     // a wait for its socket is pending (at most one)
  // Said HELLO to a device that is gone (docs/client-protocol.md §6.1):
  // every request but GET_ASYNC_EVENTS and INFO gets ENODEV.
  bool stale = false;
  uint32_t teardown_outstanding = 0;  // destroy commands in flight after disconnect
  uint32_t uar = 0;  // 0: none allocated
  UniqueFd async_fd;
  std::chrono::steady_clock::time_point connected;
  uint32_t next_handle = 1;
  std::unordered_map<uint32_t, Object> objects;
  std::array<uint32_t, kNumKinds> counts{};
  std::deque<proto::AsyncEvent> events;  // at most kMaxQueuedEvents
  uint64_t events_dropped_since_fetch = 0;
  ClientCounters stats;
};

inline constexpr size_t kMaxQueuedEvents = 256;
inline constexpr size_t kMaxObjectsPerClient = 1u << 20;
// CM ids (listeners, connections, SIDR requests) per client (docs/cm.md).
inline constexpr size_t kMaxCmIdsPerClient = 1u << 17;

}  // namespace openib::ibd
