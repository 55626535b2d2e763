// libopenib: path records (docs/library.md "Path resolution").
//
// A PathResolver answers "how do I reach this GID" with the PathRecord ibd's
// path cache holds (IBA 15.2.5.16; docs/sa.md), from the port's GID 0
// within a P_Key, one reversible path: what Linux's IPoIB asks.
//
//  - A hit costs no system call and no message: ibd publishes its cached
//    paths in a shared table (PATH_TABLE) that the resolver maps read-only
//    and reads lock-free (a seqlock: a torn read is retried, never
//    returned). A stale entry (ibd revalidates it after an SM change) is
//    returned too, flagged `stale`.
//  - A miss asks ibd (PATH_QUERY), which answers from its cache or asks the
//    SA. ibd's errors come back as they are: ENETUNREACH (no SM known),
//    EHOSTUNREACH (the SA has no path), ETIMEDOUT, EBUSY, ENODEV.
//  - PathQuery::fresh skips the table and ibd's cache: straight to the SA.
//
// Synchronous: resolve() (table, else a PATH_QUERY on the Context's
// connection, waiting up to its timeout) and lookup() (table only).
// Asynchronous, without a helper thread: resolve_async() starts a lookup,
// fd() becomes readable when completions are ready, poll() returns them.
// The resolver has its own connection to ibd for this (non-blocking, one
// request on the wire at a time, the others queued in order) and an
// eventfd for completions known at once (table hits, errors); fd() is an
// epoll fd over both, usable in poll/epoll/select.
//
// Path changes: when ibd revalidates a cached path to another record (or
// to none) every client that used PATH_QUERY or PATH_TABLE gets an async
// event AsyncEventType::kPathChanged (Context::get_async_events) naming
// the port, P_Key and DGID; table entries change in place.
//
// Threading: resolve() and lookup() may be called from any number of
// threads; resolve_async() and poll() from one thread at a time. The
// Context must outlive the resolver.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "openib/result.hpp"
#include "openib/verbs.hpp"

namespace openib {

// IBA 15.2.5.16, decoded; `raw` is the record as on the wire.
struct PathRecord {
  Gid dgid, sgid;
  uint16_t dlid = 0, slid = 0;
  uint32_t flow_label = 0;
  uint8_t hop_limit = 0, tclass = 0;
  bool reversible = false;
  uint8_t numb_path = 0;
  uint16_t pkey = 0;
  uint16_t qos_class = 0;
  uint8_t sl = 0;
  uint8_t mtu = 0;               // 1 = 256 .. 5 = 4096 (enum Mtu)
  uint8_t rate = 0;              // IBA rate code (2 = 2.5 Gb/s, 3 = 10, ...)
  uint8_t packet_life_time = 0;  // 4.096 us * 2^value
  uint8_t preference = 0;
  bool stale = false;  // from the table, marked stale: ibd is revalidating it
  std::array<uint8_t, 64> raw{};
};
// Decodes a wire PathRecord (stale false).
PathRecord decode_path_record(const std::array<uint8_t, 64>& raw);

struct PathQuery {
  Gid dgid;
  uint8_t port = 1;
  uint16_t pkey = 0;   // 0: the port's P_Key at index 0
  bool fresh = false;  // from the SA, around the table and ibd's cache
};

enum class PathSource : uint8_t {
  kTable = 0,     // the shared table: no message
  kIbdCache = 1,  // ibd answered from its cache
  kSa = 2,        // ibd asked the SA
  kNone = 3,      // an error before any answer
};

struct PathCompletion {
  uint64_t id = 0;      // as resolve_async returned
  uint64_t cookie = 0;  // as given to resolve_async
  PathSource source = PathSource::kNone;
  Result<PathRecord> path = Error{EINPROGRESS, ""};
};

struct PathResolverCounters {
  uint64_t table_hits = 0, table_misses = 0;
  uint64_t table_busy = 0;      // the table was being rewritten: asked ibd instead
  uint64_t socket_queries = 0;  // PATH_QUERYs sent (sync and async)
};

class PathResolver {
 public:
  // Maps ibd's shared table (PATH_TABLE; none if ibd publishes none: then
  // every lookup asks ibd) and opens the resolver's own connection.
  static Result<std::unique_ptr<PathResolver>> open(Context& ctx);
  virtual ~PathResolver() = default;

  virtual Result<PathRecord> resolve(const PathQuery& q) = 0;
  // The table only (nullopt: not there, or being rewritten); never a message.
  virtual std::optional<PathRecord> lookup(const PathQuery& q) = 0;

  // Starts a lookup; its id. A table hit completes at once (fd() readable).
  virtual Result<uint64_t> resolve_async(const PathQuery& q, uint64_t cookie) = 0;
  virtual int fd() const = 0;
  // The completions ready now (none: empty); sends the next queued query.
  virtual std::vector<PathCompletion> poll() = 0;
  // Lookups started and not yet returned by poll().
  virtual size_t pending() const = 0;

  virtual bool has_table() const = 0;
  virtual PathResolverCounters counters() const = 0;
};

}  // namespace openib
