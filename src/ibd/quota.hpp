// Per-client and per-uid limits of ibd (docs/operations.md "Limits",
// docs/client-protocol.md §3.2 and §5): what one connection, and all the
// connections of one uid together, may hold of the device's objects and of
// the DMA mappings, how many connections a uid may have open, and how long
// a connection may stay without HELLO. uid 0 is exempt from the per-uid
// limits (it may stop ibd anyway), not from the per-client ones.
//
// The bookkeeping only: the server asks check_*() before it issues a
// device command and reports each object added to and removed from a
// client's table; a request over a limit gets EDQUOT.
#pragma once

#include <sys/types.h>

#include <array>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <unordered_map>

#include "clientproto/socket.hpp"
#include "common/result.hpp"
#include "ibd/budget.hpp"
#include "ibd/client.hpp"

namespace CLI {
class App;
}

namespace openib::ibd {

// Object counts by Kind (client.hpp), MAP_MEM bytes (kMem's "objects" are
// its mappings), connections (per uid only).
struct Usage {
  std::array<uint64_t, kNumKinds> objects{};
  uint64_t map_bytes = 0;
  uint32_t connections = 0;
};

struct Limits {
  Usage per_client;  // .connections unused
  Usage per_uid;
  uint32_t hello_timeout_ms = 5000;  // 0: never closed for it
  uint32_t umad_max_outstanding = 256;  // per user-MAD agent (src/mad/layer.hpp)
  // What ibd's services hold for a client (budget.hpp; docs/operations.md
  // "Security model"), per client and per uid (uid 0 exempt from the latter):
  // CM ids (listeners, connections, SIDR requests, and the passive
  // connections REQs create for a listener), RDMA CM ids, multicast groups
  // joined (MCAST_JOIN and the RDMA CM's joins together), services
  // registered through ibd's SA client (docs/sa.md), and the bytes of
  // events queued for a client that does not read them (CM and RDMA CM).
  BudgetLimit cm_ids{1024, 4096};
  BudgetLimit cma_ids{1024, 4096};
  BudgetLimit mcast_joins{64, 256};
  BudgetLimit services{16, 64};
  BudgetLimit event_bytes{1u << 20, 8u << 20};
  // Fresh SA queries (path-cache misses) a uid may cause per second, and the
  // burst it may spend at once (a token bucket; uid 0 exempt; 0: no bound).
  uint32_t uid_sa_queries_per_sec = 200;
  uint32_t uid_sa_query_burst = 1000;
  Limits();
};

// The flags (and so the TOML keys) that set `l`: --client-max-pds,
// --uid-max-connections, --hello-timeout-ms, ... (docs/operations.md).
void add_limit_options(CLI::App& app, Limits& l);

class Quota {
 public:
  explicit Quota(const Limits& l) : limits_(l) {}
  const Limits& limits() const { return limits_; }

  // A new connection of `uid`: EDQUOT when the uid has its maximum.
  Result<void> admit(uid_t uid);
  void release_connection(uid_t uid);

  // Room for one more object of kind `k` (and `bytes` more mapped, for
  // memory) for this client and its uid? EDQUOT naming the limit if not.
  Result<void> check(uint32_t client, uid_t uid, Kind k, uint64_t bytes = 0) const;
  void added(uint32_t client, uid_t uid, Kind k, uint64_t bytes);
  void removed(uint32_t client, uid_t uid, Kind k, uint64_t bytes);
  // check() for the object a request would create (ok for other requests).
  Result<void> check_request(uint32_t client, uid_t uid, const proto::Message& m) const;
  // The client's table is gone (what it still counted leaves its uid's).
  void forget(uint32_t client, uid_t uid);

  const Usage* uid_usage(uid_t uid) const;

 private:
  Limits limits_;
  std::unordered_map<uint32_t, Usage> clients_;
  std::unordered_map<uid_t, Usage> uids_;
};

// One timer per connection that has not said HELLO: `expired(id)` runs
// when it fires (the caller closes the connection unless it said HELLO).
class HelloDeadlines {
 public:
  HelloDeadlines(boost::asio::io_context& io, uint32_t timeout_ms, std::function<void(uint32_t)> expired)
      : io_(io), timeout_ms_(timeout_ms), expired_(std::move(expired)) {}
  void arm(uint32_t id);
  void cancel(uint32_t id) { timers_.erase(id); }
  size_t armed() const { return timers_.size(); }

 private:
  boost::asio::io_context& io_;
  uint32_t timeout_ms_;
  std::function<void(uint32_t)> expired_;
  std::unordered_map<uint32_t, std::unique_ptr<boost::asio::steady_timer>> timers_;
};

}  // namespace openib::ibd
