// Per-client and per-uid budgets of the services' resources: budget.hpp.
#include "ibd/budget.hpp"

#include <algorithm>

namespace openib::ibd {

namespace {
uint64_t at(const auto& m, auto k) {
  auto it = m.find(k);
  return it == m.end() ? 0 : it->second;
}
}  // namespace

Result<void> Budget::check(uint32_t client, uid_t uid, uint64_t n) const {
  const uint64_t c = at(clients_, client);
  if (c + n > limit_.per_client) {
    ++denied_;
    return err(EDQUOT, "the limit of {} {} per client is reached (--client-max-{})", limit_.per_client, what_,
               flag_);
  }
  if (uid != 0 && at(uids_, uid) + n > limit_.per_uid) {
    ++denied_;
    return err(EDQUOT, "the limit of {} {} per uid is reached (uid {}, --uid-max-{})", limit_.per_uid, what_, uid,
               flag_);
  }
  return ok();
}

Result<void> Budget::take(uint32_t client, uid_t uid, uint64_t n) {
  OPENIB_TRY(check(client, uid, n));
  clients_[client] += n;
  uids_[uid] += n;
  return ok();
}

void Budget::give(uint32_t client, uid_t uid, uint64_t n) {
  if (auto it = clients_.find(client); it != clients_.end()) {
    it->second -= std::min(it->second, n);
    if (it->second == 0) clients_.erase(it);
  }
  if (auto it = uids_.find(uid); it != uids_.end()) {
    it->second -= std::min(it->second, n);
    if (it->second == 0) uids_.erase(it);
  }
}

uint64_t Budget::client_usage(uint32_t client) const { return at(clients_, client); }
uint64_t Budget::uid_usage(uid_t uid) const { return at(uids_, uid); }

}  // namespace openib::ibd
