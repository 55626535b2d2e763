// Multicast group membership of the ports (IBA 15.2.5.17 MCMemberRecord;
// docs/sa.md "Multicast joins"): the joins ibd makes for its owners
// (clients, later IPoIB) over an SaRequester (sa_requester.hpp), with no
// I/O and no timer of its own.
//
//  - a group is (port, MGID); its members are owners, each with the
//    JoinState bits it asked (FullMember, NonMember, SendOnlyNonMember);
//  - the SA is asked SubnAdmSet(MCMemberRecord) with the union of the
//    members' bits (IBA 15.2.5.17.2: the SA ORs a port's JoinState); a
//    join whose bits the port already holds is answered from the last
//    answer, with no request; joins arriving while a request is out wait
//    for it and share it (a second Set only for bits it did not carry);
//  - the Set selects MGID, PortGID and JoinState (OpenSM's "join" mask);
//    with `create` also Q_Key, P_Key, SL, FlowLabel, TClass (the
//    components IBA o15-0.2.3 / OpenSM require to create a group) and,
//    when given, MTU, rate (selector "exactly") and HopLimit;
//  - creation components are each member's own (issue 29 finding 7): a
//    Set carries those of a `trusted` member (ibd's own: IPoIB) if one is
//    a member (none at all when it asked none: the group is the SM's),
//    else a waiting joiner's, else any member's. A Set the SA refuses
//    (EREMOTEIO) with an untrusted member's components fails that member
//    only: its components are dropped and the Set is asked again with
//    another's (or none), so one owner's bogus parameters never stick to
//    the group nor reach a later rejoin;
//  - a leave removes the owner; the bits no member needs any more go in a
//    SubnAdmDelete(MCMemberRecord) with JoinState = those bits
//    (IBA 15.2.5.17.3), sent in the background;
//  - rejoin(port) (ClientReregister, SM change: IBA 14.4.11) asks the SA
//    again for every group of the port, the creation components included
//    (a restarted SM has forgotten the group); a failed rejoin is tried
//    again by retry(), which the owner calls periodically;
//  - a Set the SA refuses fails the joins waiting for it with EREMOTEIO
//    naming the SA status (sa_answer_record()); the transport's errors
//    (ETIMEDOUT, ENETUNREACH, ...) as they are;
//  - a rejoin or retry that fails takes nothing from the members but is
//    told to the lost handler, per member (set_lost_handler: IPoIB goes
//    down rather than claim a group the SA no longer has for it).
//
// Single-threaded; callbacks may call back in. Destruction completes
// waiting joins with ECANCELED; answers arriving later are dropped.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "common/result.hpp"
#include "sa/mcmember_record.hpp"
#include "sa/sa_requester.hpp"

namespace openib::sa {

struct JoinRequest {
  std::uint8_t port = 1;
  Gid mgid{};
  std::uint8_t join_state = join_state::kFullMember;
  bool create = false;  // send the creation components below
  std::uint32_t qkey = 0;
  std::uint16_t pkey = 0xFFFF;
  std::uint8_t sl = 0;
  std::uint8_t tclass = 0;
  std::uint32_t flow_label = 0;
  std::uint8_t mtu = 0;        // IBA MTU code; 0: not selected (the SA picks)
  std::uint8_t rate = 0;       // IBA rate code; 0: not selected
  std::uint8_t hop_limit = 0;  // 0: not selected
  bool trusted = false;  // ibd's own join: its creation components are the group's
};
// The JoinState bits a JoinRequest may carry.
inline constexpr std::uint8_t kJoinStateBits =
    join_state::kFullMember | join_state::kNonMember | join_state::kSendOnlyNonMember;

struct McastCounters {
  std::uint64_t joins = 0;       // join() calls accepted
  std::uint64_t leaves = 0;      // members removed (leave() and owner_gone())
  std::uint64_t sets = 0;        // SubnAdmSet(MCMemberRecord) sent
  std::uint64_t deletes = 0;     // SubnAdmDelete(MCMemberRecord) sent
  std::uint64_t cached = 0;      // joins answered at once (the port held the bits)
  std::uint64_t shared = 0;      // joins answered by a Set asked for another join too
  std::uint64_t errors = 0;      // Sets and Deletes that failed
  std::uint64_t rejoins = 0;     // groups asked again by rejoin()
  std::uint64_t mlid_changes = 0;  // a Set answered another MLID or Q_Key than the last
  std::uint64_t bad_create = 0;    // members whose creation components the SA refused
  std::uint64_t lost = 0;          // memberships a failed rejoin or retry left without the SA's
};

class McastJoins {
 public:
  using JoinFn = std::function<void(Result<McMemberRecord>)>;
  // A Set answered a record with another MLID or Q_Key than the one
  // before (the SM restarted): who sends to the group must use the new one.
  using ChangeFn = std::function<void(std::uint8_t port, const McMemberRecord& rec)>;
  // A rejoin or retry of a group `owner` holds failed (the SA may have
  // forgotten the group: the owner's traffic to it is lost until a retry
  // succeeds).
  using LostFn = std::function<void(std::uint8_t port, const Gid& mgid, Owner owner, const Error& e)>;

  explicit McastJoins(SaRequester& sa) : sa_(sa) {}
  ~McastJoins();
  McastJoins(const McastJoins&) = delete;
  McastJoins& operator=(const McastJoins&) = delete;

  // `owner` joins (or adds bits to its membership of) a group: `done` gets
  // the SA's record (MLID, Q_Key, MTU, rate, SL, P_Key...). EINVAL: no
  // or unknown JoinState bits, or an MGID that is not multicast (IBA
  // 4.1.1: first byte 0xFF); EBUSY: this owner's earlier join of the group
  // is still waiting.
  void join(Owner owner, const JoinRequest& req, JoinFn done);
  // ENOENT if `owner` is no member of the group.
  Result<void> leave(Owner owner, std::uint8_t port, const Gid& mgid);
  // Every membership of `owner` left; its waiting joins get ECANCELED.
  void owner_gone(Owner owner);
  // The SA may have lost the port's groups (ClientReregister, SM change).
  void rejoin(std::uint8_t port);
  // Groups whose last Set failed with no join waiting (a rejoin) are asked again.
  void retry();
  void set_change_handler(ChangeFn f) { on_change_ = std::move(f); }
  void set_lost_handler(LostFn f) { on_lost_ = std::move(f); }

  // Groups `owner` is a member of (the quota's count).
  std::size_t memberships(Owner owner) const;
  bool is_member(Owner owner, std::uint8_t port, const Gid& mgid) const;
  std::size_t groups() const { return groups_.size(); }
  // The port's JoinState bits at the SA for the group (0: none / unknown).
  std::uint8_t joined_state(std::uint8_t port, const Gid& mgid) const;
  const McastCounters& counters() const { return counters_; }

 private:
  using Key = std::pair<std::uint8_t, Gid>;
  struct Member {
    std::uint8_t state = 0;    // bits asked
    std::uint8_t granted = 0;  // bits the SA has granted it
    JoinFn waiting;
    std::optional<JoinRequest> create;  // its own creation components (its latest creating join)
    bool trusted = false;
  };
  struct Group {
    std::map<Owner, Member> members;
    std::uint8_t joined = 0;  // bits the SA holds for the port
    std::optional<McMemberRecord> rec;
    std::optional<Owner> creator;  // whose creation components the Set out carries
    bool busy = false;    // a Set or Delete is out
    bool redo = false;    // rejoin() while busy: ask again after the answer
    bool failed = false;  // the last Set failed: wait for retry() or a new join
  };

  void reconcile(const Key& k);
  void answer_waiting(Group& g);
  void send(const Key& k, std::uint8_t method, std::uint8_t bits);
  void answered(const Key& k, std::uint8_t method, std::uint8_t bits, Result<McMemberRecord> r);
  McMemberRecord record_for(const Key& k, const JoinRequest* create, std::uint8_t bits, std::uint64_t& mask) const;
  // The member whose creation components a Set carries (see above), or none.
  std::optional<Owner> pick_creator(const Group& g) const;
  // A Set with `creator`'s components refused: that member fails alone;
  // true if the Set is worth asking again (others wait or hold components).
  bool drop_creator(Group& g, Owner creator, const Error& e);

  SaRequester& sa_;
  std::map<Key, Group> groups_;
  McastCounters counters_;
  ChangeFn on_change_;
  LostFn on_lost_;
  std::shared_ptr<char> alive_ = std::make_shared<char>();
};

}  // namespace openib::sa
