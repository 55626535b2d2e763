// What the path cache stands on (DESIGN.md: a layer talks to the one below
// through a small interface, so tests put a fake under it): something that
// issues one SA PathRecord query, and a clock. ibd implements the first
// over its MAD layer (not yet: docs/sa.md); tests implement both.
#pragma once

#include <chrono>
#include <functional>
#include <optional>

#include "common/result.hpp"
#include "sa/path_key.hpp"

namespace openib::sa {

// A query's answer: a record; no record (the SA said ERR_NO_RECORDS, IBA
// 15.2.1.1: a "no path" answer the cache keeps briefly); or an error
// (timeout, BUSY after retries, a malformed answer), which is not cached.
using PathAnswer = Result<std::optional<PathRecord>>;
using PathAnswerFn = std::function<void(PathAnswer)>;

class PathQuerier {
 public:
  virtual ~PathQuerier() = default;
  // Ask the SA for the path `key` describes (SubnAdmGet(PathRecord) with
  // key.comp_mask() and key.query(), on key.port()). `done` is called once,
  // now or later, on the caller's thread.
  virtual void query_path(const PathKey& key, PathAnswerFn done) = 0;
};

class Clock {
 public:
  using time_point = std::chrono::steady_clock::time_point;
  virtual ~Clock() = default;
  virtual time_point now() const = 0;
};

class SteadyClock final : public Clock {
 public:
  time_point now() const override { return std::chrono::steady_clock::now(); }
};

}  // namespace openib::sa
