// Multicast joins over an SaRequester (mcast_joins.hpp; IBA 15.2.5.17).
#include "sa/mcast_joins.hpp"

#include "common/log.hpp"
#include "mad/mad.hpp"

namespace openib::sa {

McastJoins::~McastJoins() {
  alive_.reset();  // answers still out are dropped
  auto groups = std::move(groups_);
  for (auto& [k, g] : groups)
    for (auto& [o, m] : g.members)
      if (m.waiting) std::exchange(m.waiting, nullptr)(err(ECANCELED, "the join service is going"));
}

void McastJoins::join(Owner owner, const JoinRequest& req, JoinFn done) {
  if (req.join_state == 0 || (req.join_state & ~kJoinStateBits))
    return done(err(EINVAL, "JoinState {:#x}: FullMember, NonMember or SendOnlyNonMember bits only", req.join_state));
  if (req.mgid[0] != 0xFF) return done(err(EINVAL, "not a multicast GID (IBA 4.1.1: it starts with 0xFF)"));
  const Key k{req.port, req.mgid};
  Group& g = groups_[k];
  Member& m = g.members[owner];
  if (m.waiting) return done(err(EBUSY, "a join of this group is already waiting"));
  ++counters_.joins;
  m.state |= req.join_state;
  m.trusted = m.trusted || req.trusted;
  if (req.create) m.create = req;  // its own: never another member's (issue 29 finding 7)
  if (!g.busy && g.rec && (m.state & ~g.joined) == 0) {
    ++counters_.cached;
    m.granted = m.state;
    return done(*g.rec);
  }
  m.waiting = std::move(done);
  g.failed = false;  // a new join asks again
  reconcile(k);
}

Result<void> McastJoins::leave(Owner owner, std::uint8_t port, const Gid& mgid) {
  const Key k{port, mgid};
  auto it = groups_.find(k);
  if (it == groups_.end() || !it->second.members.contains(owner))
    return err(ENOENT, "not a member of that group on port {}", port);
  Member m = std::move(it->second.members.at(owner));
  it->second.members.erase(owner);
  ++counters_.leaves;
  if (m.waiting) m.waiting(err(ECANCELED, "left before the join was answered"));
  reconcile(k);
  return ok();
}

void McastJoins::owner_gone(Owner owner) {
  std::vector<Key> keys;
  for (const auto& [k, g] : groups_)
    if (g.members.contains(owner)) keys.push_back(k);
  for (const Key& k : keys) (void)leave(owner, k.first, k.second);
}

void McastJoins::rejoin(std::uint8_t port) {
  std::vector<Key> keys;
  for (auto& [k, g] : groups_) {
    if (k.first != port) continue;
    ++counters_.rejoins;
    if (g.busy) {
      g.redo = true;
      continue;
    }
    g.joined = 0;
    g.failed = false;
    keys.push_back(k);
  }
  for (const Key& k : keys) reconcile(k);
}

void McastJoins::retry() {
  std::vector<Key> keys;
  for (auto& [k, g] : groups_)
    if (g.failed && !g.busy) {
      g.failed = false;
      keys.push_back(k);
    }
  for (const Key& k : keys) reconcile(k);
}

std::size_t McastJoins::memberships(Owner owner) const {
  std::size_t n = 0;
  for (const auto& [k, g] : groups_) n += g.members.contains(owner);
  return n;
}

bool McastJoins::is_member(Owner owner, std::uint8_t port, const Gid& mgid) const {
  auto it = groups_.find(Key{port, mgid});
  return it != groups_.end() && it->second.members.contains(owner);
}

std::uint8_t McastJoins::joined_state(std::uint8_t port, const Gid& mgid) const {
  auto it = groups_.find(Key{port, mgid});
  return it == groups_.end() ? 0 : it->second.joined;
}

// What the SA should hold for the port against what it holds: a Set for
// missing bits, a Delete for surplus ones, else the waiting joins answered.
void McastJoins::reconcile(const Key& k) {
  auto it = groups_.find(k);
  if (it == groups_.end()) return;
  Group& g = it->second;
  if (g.busy) return;
  std::uint8_t want = 0;
  for (const auto& [o, m] : g.members) want |= m.state;
  if ((want & ~g.joined) && !g.failed) return send(k, mad::method::kSet, want);
  if (g.joined & ~want) return send(k, mad::method::kDelete, g.joined & ~want);
  if (g.members.empty()) {
    groups_.erase(it);
    return;
  }
  answer_waiting(g);
}

// The joins whose bits the port now holds get the record.
void McastJoins::answer_waiting(Group& g) {
  if (!g.rec) return;  // failed, nothing granted: the waiting joins were told
  std::vector<JoinFn> ready;
  for (auto& [o, m] : g.members)
    if (m.waiting && (m.state & ~g.joined) == 0) {
      m.granted = m.state;
      ready.push_back(std::exchange(m.waiting, nullptr));
    }
  if (ready.size() > 1) counters_.shared += ready.size() - 1;
  const McMemberRecord rec = *g.rec;
  for (auto& f : ready) f(rec);
}

// IBA 15.2.5.17: MGID, PortGID and JoinState select the membership; a
// creating Set adds the group's parameters (o15-0.2.3; OpenSM's
// REQUIRED_MC_CREATE_COMP_MASK: Q_Key, P_Key, SL, FlowLabel, TClass).
McMemberRecord McastJoins::record_for(const Key& k, const JoinRequest* create, std::uint8_t bits,
                                      std::uint64_t& mask) const {
  McMemberRecord r;
  r.mgid = k.second;
  r.join_state = bits;
  mask = mcm_mask::kMgid | mcm_mask::kPortGid | mcm_mask::kJoinState;
  if (!create) return r;
  const JoinRequest& c = *create;
  r.qkey = c.qkey;
  r.pkey = c.pkey;
  r.sl = c.sl;
  r.flow_label = c.flow_label;
  r.tclass = c.tclass;
  mask |= mcm_mask::kQKey | mcm_mask::kPKey | mcm_mask::kSl | mcm_mask::kFlowLabel | mcm_mask::kTClass;
  constexpr std::uint8_t kExactly = 2;  // IBA 15.2.5.16 selector: exactly the value
  if (c.mtu) {
    r.mtu_selector = kExactly;
    r.mtu = c.mtu;
    mask |= mcm_mask::kMtuSelector | mcm_mask::kMtu;
  }
  if (c.rate) {
    r.rate_selector = kExactly;
    r.rate = c.rate;
    mask |= mcm_mask::kRateSelector | mcm_mask::kRate;
  }
  if (c.hop_limit) {
    r.hop_limit = c.hop_limit;
    mask |= mcm_mask::kHopLimit;
  }
  return r;
}

// Whose creation components a Set carries: a trusted member's (ibd's own
// group: none if it asked none, the SM made the group), else a waiting
// joiner's, else any member's (a rejoin of a group the SA may have lost).
std::optional<Owner> McastJoins::pick_creator(const Group& g) const {
  bool trusted = false;
  for (const auto& [o, m] : g.members) {
    if (m.trusted && m.create) return o;
    trusted = trusted || m.trusted;
  }
  if (trusted) return std::nullopt;
  for (const auto& [o, m] : g.members)
    if (m.waiting && m.create) return o;
  for (const auto& [o, m] : g.members)
    if (m.create) return o;
  return std::nullopt;
}

void McastJoins::send(const Key& k, std::uint8_t method, std::uint8_t bits) {
  Group& g = groups_.at(k);
  g.busy = true;
  // A Delete carries only the selecting components (IBA 15.2.5.17.3).
  g.creator = method == mad::method::kSet ? pick_creator(g) : std::nullopt;
  const JoinRequest* create = g.creator ? &*g.members.at(*g.creator).create : nullptr;
  std::uint64_t mask = 0;
  McMemberRecord rec = record_for(k, create, bits, mask);
  ++(method == mad::method::kSet ? counters_.sets : counters_.deletes);
  std::weak_ptr<char> alive = alive_;
  sa_.port_gid(k.first, [this, k, method, bits, rec, mask, alive](Result<Gid> gid) mutable {
    if (alive.expired()) return;
    if (!gid) return answered(k, method, bits, gid.take_error());
    rec.port_gid = *gid;
    ByteVec b(kMcMemberRecordBytes);
    encode_mcmember_record(b, rec);
    SaRequest req;
    req.method = method;
    req.attr_id = attr::kMcMemberRecord;
    req.comp_mask = mask;
    sa_.sa_request(k.first, req, std::move(b), [this, k, method, bits, alive](Result<ByteVec> a) {
      if (alive.expired()) return;
      if (!a) return answered(k, method, bits, a.take_error());
      auto body = sa_answer_record(*a, attr::kMcMemberRecord);
      if (!body) return answered(k, method, bits, body.take_error());
      answered(k, method, bits, decode_mcmember_record(*body));
    });
  });
}

void McastJoins::answered(const Key& k, std::uint8_t method, std::uint8_t bits, Result<McMemberRecord> r) {
  std::vector<Owner> lost;
  struct TellLost {
    McastJoins* self;
    const Key& k;
    const std::vector<Owner>& lost;
    const Result<McMemberRecord>& r;
    ~TellLost() {
      if (self->on_lost_ && !r)
        for (Owner o : lost) self->on_lost_(k.first, k.second, o, r.error());
    }
  } tell{this, k, lost, r};
  auto it = groups_.find(k);
  if (it == groups_.end()) return;
  Group& g = it->second;
  g.busy = false;
  auto log = log::get("sa");
  if (method == mad::method::kDelete) {
    // Left either way: a Delete the SA refused is not asked again (the
    // SA drops the membership when the port goes, or at the next rejoin).
    g.joined &= static_cast<std::uint8_t>(~bits);
    if (!r) {
      ++counters_.errors;
      log->warn("port {}: leaving group {:016x}:{:016x} (JoinState {:#x}): {}", k.first, gid_prefix(k.second),
                gid_guid(k.second), bits, r.error().str());
    }
  } else if (r) {
    g.joined |= bits;
    // Another MLID or Q_Key than before: a new SM made the group again
    // (its Q_Key from its own configuration, docs/ipoib.md "Security").
    if (g.rec && (g.rec->mlid != r->mlid || g.rec->qkey != r->qkey)) {
      ++counters_.mlid_changes;
      if (on_change_) on_change_(k.first, *r);
    }
    g.rec = *r;
  } else {
    ++counters_.errors;
    log->info("port {}: joining group {:016x}:{:016x} (JoinState {:#x}): {}", k.first, gid_prefix(k.second),
              gid_guid(k.second), bits, r.error().str());
    std::vector<JoinFn> failed;
    const std::optional<Owner> creator = std::exchange(g.creator, std::nullopt);
    auto c = creator ? g.members.find(*creator) : g.members.end();
    if (c != g.members.end() && !c->second.trusted && r.error().code == EREMOTEIO) {
      // The SA refused the group as this member would create it: that
      // member fails alone, its components dropped (issue 29 finding 7).
      ++counters_.bad_create;
      log->info("port {}: group {:016x}:{:016x}: owner {:#x}'s creation components refused; not used again",
                k.first, gid_prefix(k.second), gid_guid(k.second), c->first);
      if (c->second.waiting) failed.push_back(std::exchange(c->second.waiting, nullptr));
      c->second.create.reset();
      c->second.state = c->second.granted;
      if (!c->second.state) g.members.erase(c);
      bool again = false;
      for (const auto& [o, m] : g.members) again = again || m.waiting || m.create;
      if (again) {
        if (std::exchange(g.redo, false)) g.joined = 0;
        reconcile(k);  // asked again (busy) before the failed owner hears: its calls wait
        for (auto& f : failed) f(r.error());
        return;
      }
    }
    g.failed = true;
    // A rejoin that failed: the SA holds nothing of the group for the
    // port, though members were granted it; they are told.
    // (Told once this answer is dealt with: the handler may leave.)
    if (g.joined == 0)
      for (const auto& [o, m] : g.members)
        if (m.granted && !m.waiting) {
          ++counters_.lost;
          lost.push_back(o);
        }
    // The joins that waited for it fail; what members had been granted stays.
    for (auto m = g.members.begin(); m != g.members.end();) {
      if (m->second.waiting) failed.push_back(std::exchange(m->second.waiting, nullptr));
      m->second.state = m->second.granted;
      m = m->second.state ? std::next(m) : g.members.erase(m);
    }
    if (g.redo) g.failed = false;
    for (auto& f : failed) f(r.error());
    if (!groups_.contains(k)) return;
  }
  if (groups_.at(k).redo) {
    // Asked again for a rejoin: what this answer granted is told first.
    if (r) answer_waiting(groups_.at(k));
    if (!groups_.contains(k)) return;
    groups_.at(k).redo = false;
    groups_.at(k).joined = 0;
  }
  reconcile(k);
}

}  // namespace openib::sa
