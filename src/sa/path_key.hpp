// What a path lookup asks, as the path cache keys it: the local port, the
// ComponentMask and the PathRecord fields that mask selects (SGID, DGID,
// P_Key, SL, TClass, MTU/rate/lifetime selectors, ...), every unselected
// field zeroed (mask_path_record) so equal questions are equal keys.
#pragma once

#include <cstdint>
#include <functional>

#include "sa/path_record.hpp"

namespace openib::sa {

class PathKey {
 public:
  PathKey() = default;
  PathKey(std::uint8_t port, std::uint64_t comp_mask, const PathRecord& query)
      : port_(port), mask_(comp_mask), query_(mask_path_record(query, comp_mask)) {}

  std::uint8_t port() const { return port_; }
  std::uint64_t comp_mask() const { return mask_; }
  const PathRecord& query() const { return query_; }
  // The DGID asked for; all zeroes when the mask does not select it.
  const Gid& dgid() const { return query_.dgid; }
  bool operator==(const PathKey&) const = default;

 private:
  std::uint8_t port_ = 0;
  std::uint64_t mask_ = 0;
  PathRecord query_;
};

struct PathKeyHash {
  std::size_t operator()(const PathKey& k) const;
};

}  // namespace openib::sa
