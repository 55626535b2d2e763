// A per-client and per-uid budget of one kind of resource that an ibd
// service holds on a client's behalf (docs/operations.md "Limits" and
// "Security model"): CM ids, RDMA CM ids, multicast joins, service
// registrations, queued event bytes. The devices' objects have Quota
// (quota.hpp); these are the services' own, each service owning its
// Budget and calling take() before it creates and give() when it frees.
//
// uid 0 is exempt from the per-uid bound (as in Quota), not from the
// per-client one. Bookkeeping only, single-threaded on ibd's io_context.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <unordered_map>

#include "common/result.hpp"

namespace openib::ibd {

struct BudgetLimit {
  uint64_t per_client = 0;
  uint64_t per_uid = 0;
};

class Budget {
 public:
  // `what` names the resource in errors ("CM ids"); `flag` the option
  // that sets it ("cm-ids": --client-max-cm-ids, --uid-max-cm-ids).
  Budget(std::string what, std::string flag, BudgetLimit limit)
      : what_(std::move(what)), flag_(std::move(flag)), limit_(limit) {}

  void set_limit(BudgetLimit l) { limit_ = l; }
  const BudgetLimit& limit() const { return limit_; }

  // Room for `n` more for this client and its uid? Takes them if so;
  // EDQUOT naming the limit and its option if not (nothing taken).
  Result<void> take(uint32_t client, uid_t uid, uint64_t n = 1);
  // Would take() succeed? (Nothing taken.)
  Result<void> check(uint32_t client, uid_t uid, uint64_t n = 1) const;
  // Gives back what take() took (never below zero).
  void give(uint32_t client, uid_t uid, uint64_t n = 1);

  uint64_t client_usage(uint32_t client) const;
  uint64_t uid_usage(uid_t uid) const;
  // Denials so far (ibdctl counters).
  uint64_t denied() const { return denied_; }

 private:
  std::string what_, flag_;
  BudgetLimit limit_;
  std::unordered_map<uint32_t, uint64_t> clients_;
  std::unordered_map<uid_t, uint64_t> uids_;
  mutable uint64_t denied_ = 0;
};

}  // namespace openib::ibd
