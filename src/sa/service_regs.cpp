// Service registrations over an SaRequester (service_regs.hpp; IBA 15.2.5.14).
#include "sa/service_regs.hpp"

#include <algorithm>
#include <vector>

#include "common/log.hpp"
#include "mad/mad.hpp"

namespace openib::sa {

namespace {
// Set: every component of the record (bits 0..36 but the reserved 3).
constexpr std::uint64_t kSetMask = ((1ull << 37) - 1) & ~(1ull << 3);
// Delete: the SA's key for a ServiceRecord.
constexpr std::uint64_t kDeleteMask = sr_mask::kServiceId | sr_mask::kServiceGid | sr_mask::kServicePKey;
bool finite(std::uint32_t lease) { return lease != kInfiniteLease; }
}  // namespace

ServiceRegs::~ServiceRegs() {
  alive_.reset();
  auto regs = std::move(regs_);
  for (auto& [k, r] : regs)
    if (r.waiting) std::exchange(r.waiting, nullptr)(err(ECANCELED, "the service registry is going"));
}

void ServiceRegs::register_service(Owner owner, std::uint8_t port, const ServiceRecord& rec, SetFn done, bool own) {
  if (rec.service_gid != Gid{}) return register_keyed(owner, port, rec, false, own, std::move(done));
  // IBA 15.2.5.14: the SA keys the record by the GID itself; zero stands
  // for the port's, so the key is taken with the port's GID.
  with_gid(port, rec, [this, owner, port, own, done = std::move(done)](Result<ServiceRecord> full) mutable {
    if (!full) return done(full.take_error());
    register_keyed(owner, port, *full, true, own, std::move(done));
  });
}

void ServiceRegs::register_keyed(Owner owner, std::uint8_t port, const ServiceRecord& rec, bool port_gid, bool own,
                                 SetFn done) {
  const Key k{port, rec.service_id, rec.service_gid, rec.service_pkey};
  auto it = regs_.find(k);
  if (it != regs_.end() && it->second.owner != owner)
    return done(err(EEXIST, "service {:#x} is registered by another client", rec.service_id));
  if (it != regs_.end() && it->second.waiting)
    return done(err(EBUSY, "a registration of service {:#x} is already waiting", rec.service_id));
  Reg& r = regs_[k];
  r.owner = owner;
  r.rec = rec;
  r.port_gid = port_gid;
  r.own = own;
  r.waiting = std::move(done);
  ++counters_.registered;
  if (r.busy) {
    r.redo = true;  // the record out is older: set this one after it
    return;
  }
  send_set(k, false);
}

// `owner`'s registration of the key (ServiceGID zero: the one it gave as
// the port's), or end().
std::map<ServiceRegs::Key, ServiceRegs::Reg>::const_iterator ServiceRegs::find(Owner owner, std::uint8_t port,
                                                                             std::uint64_t id, const Gid& gid,
                                                                             std::uint16_t pkey) const {
  auto it = gid == Gid{} ? std::find_if(regs_.begin(), regs_.end(),
                                        [&](const auto& kv) {
                                          return std::get<0>(kv.first) == port && std::get<1>(kv.first) == id &&
                                                 std::get<3>(kv.first) == pkey && kv.second.owner == owner &&
                                                 kv.second.port_gid;
                                        })
                         : regs_.find(Key{port, id, gid, pkey});
  return it != regs_.end() && it->second.owner == owner ? it : regs_.end();
}

bool ServiceRegs::holds(Owner owner, std::uint8_t port, std::uint64_t id, const Gid& gid, std::uint16_t pkey) const {
  return find(owner, port, id, gid, pkey) != regs_.end();
}

Result<void> ServiceRegs::unregister(Owner owner, std::uint8_t port, std::uint64_t id, const Gid& gid,
                                     std::uint16_t pkey) {
  auto c = find(owner, port, id, gid, pkey);
  if (c == regs_.end()) return err(ENOENT, "no registration of service {:#x} on port {}", id, port);
  remove(regs_.erase(c, c));  // the mutable iterator of `c`
  return ok();
}

void ServiceRegs::remove(std::map<Key, Reg>::iterator it) {
  const std::uint8_t port = std::get<0>(it->first);
  Reg r = std::move(it->second);
  regs_.erase(it);
  ++counters_.removed;
  // A Set still out is answered into nothing; the Delete follows it on
  // the same port, so the SA sees them in that order (one SA, one QP1).
  send_delete(port, r.rec);
  if (r.waiting) r.waiting(err(ECANCELED, "unregistered before the SA answered"));
}

void ServiceRegs::owner_gone(Owner owner) {
  std::vector<Key> keys;
  for (const auto& [k, r] : regs_)
    if (r.owner == owner) keys.push_back(k);
  for (const Key& k : keys)
    if (auto it = regs_.find(k); it != regs_.end() && it->second.owner == owner) remove(it);
}

void ServiceRegs::reregister(std::uint8_t port) {
  std::vector<Key> keys;
  for (auto& [k, r] : regs_) {
    if (std::get<0>(k) != port) continue;
    ++counters_.reregisters;
    if (r.busy)
      r.redo = true;
    else
      keys.push_back(k);
  }
  for (const Key& k : keys) send_set(k, false);
}

void ServiceRegs::tick() {
  const auto now = clock_.now();
  std::vector<std::pair<Key, bool>> due;
  for (auto& [k, r] : regs_) {
    if (r.busy) continue;
    if (r.failed)
      due.emplace_back(k, false);
    else if (r.done_once && (finite(r.rec.service_lease) || r.own) && now >= r.renew_at)
      due.emplace_back(k, true);
  }
  for (const auto& [k, renewal] : due) send_set(k, renewal);
}

std::size_t ServiceRegs::registrations(Owner owner) const {
  return static_cast<std::size_t>(
      std::count_if(regs_.begin(), regs_.end(), [owner](const auto& kv) { return kv.second.owner == owner; }));
}

void ServiceRegs::with_gid(std::uint8_t port, ServiceRecord rec, std::function<void(Result<ServiceRecord>)> f) {
  if (rec.service_gid != Gid{}) return f(std::move(rec));
  sa_.port_gid(port, [rec = std::move(rec), f = std::move(f), alive = std::weak_ptr<char>(alive_)](
                         Result<Gid> g) mutable {
    if (alive.expired()) return;
    if (!g) return f(g.take_error());
    rec.service_gid = *g;
    f(std::move(rec));
  });
}

void ServiceRegs::send_set(const Key& k, bool renewal) {
  Reg& r = regs_.at(k);
  r.busy = true;
  r.failed = false;
  ++counters_.sets;
  if (renewal) ++counters_.renewals;
  // The lease counts from when the SA takes the Set: renew at half of it
  // from the moment it was sent (the earlier bound), at least 1 s on.
  const std::uint32_t lease = r.rec.service_lease;
  auto every = std::chrono::seconds(std::max<std::uint32_t>(1, lease / 2));
  if (r.own) every = std::min<std::chrono::seconds>(every, kOwnRefresh);
  r.renew_at = clock_.now() + every;
  send_record(std::get<0>(k), mad::method::kSet, kSetMask, r.rec,
              [this, k](Result<ServiceRecord> res) { set_answered(k, std::move(res)); });
}

// `rec` (its ServiceGID made the port's if zero) in a request; the SA's
// echo, or the error, to `done` (not called once this is destroyed).
void ServiceRegs::send_record(std::uint8_t port, std::uint8_t method, std::uint64_t mask, ServiceRecord rec,
                              std::function<void(Result<ServiceRecord>)> done) {
  std::weak_ptr<char> alive = alive_;
  with_gid(port, std::move(rec), [this, port, method, mask, alive, done = std::move(done)](
                                     Result<ServiceRecord> full) mutable {
    if (alive.expired()) return;
    if (!full) return done(full.take_error());
    ByteVec b(kServiceRecordBytes);
    encode_service_record(b, *full);
    SaRequest req;
    req.method = method;
    req.attr_id = attr::kServiceRecord;
    req.comp_mask = mask;
    sa_.sa_request(port, req, std::move(b), [alive, done = std::move(done)](Result<ByteVec> a) {
      if (alive.expired()) return;
      if (!a) return done(a.take_error());
      auto body = sa_answer_record(*a, attr::kServiceRecord);
      if (!body) return done(body.take_error());
      done(decode_service_record(*body));
    });
  });
}

void ServiceRegs::set_answered(const Key& k, Result<ServiceRecord> res) {
  auto it = regs_.find(k);
  if (it == regs_.end()) return;  // unregistered meanwhile (its Delete is out)
  Reg& r = it->second;
  r.busy = false;
  if (res) {
    r.done_once = true;
  } else {
    ++counters_.errors;
    r.failed = !r.waiting;  // a rejoin or renewal failed: tick() asks again
    log::get("sa")->info("port {}: registering service {:#x}: {}", std::get<0>(k), r.rec.service_id,
                         res.error().str());
  }
  if (std::exchange(r.redo, false)) {
    send_set(k, false);  // a newer record, or a reregister, waits for this one
    return;
  }
  SetFn f = std::exchange(r.waiting, nullptr);
  if (!res && f) {
    // A registration the SA refused at once is not kept.
    regs_.erase(it);
    ++counters_.removed;
  }
  if (f) f(std::move(res));
}

void ServiceRegs::send_delete(std::uint8_t port, ServiceRecord rec) {
  ++counters_.deletes;
  const std::uint64_t id = rec.service_id;
  send_record(port, mad::method::kDelete, kDeleteMask, std::move(rec), [this, port, id](Result<ServiceRecord> res) {
    if (res) return;
    ++counters_.errors;
    log::get("sa")->info("port {}: deleting service {:#x}: {}", port, id, res.error().str());
  });
}

}  // namespace openib::sa
