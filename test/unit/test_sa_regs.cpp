// Multicast joins (src/sa/mcast_joins.hpp) and service registrations
// (src/sa/service_regs.hpp) over a fake SA: what is asked of the SA, with
// which JoinState bits and components, and what the owners get back.
#include <catch2/catch.hpp>

#include <deque>
#include <optional>

#include "mad/mad.hpp"
#include "sa/mcast_joins.hpp"
#include "sa/service_regs.hpp"

using namespace openib;
using namespace openib::sa;
using namespace std::chrono_literals;

namespace {

const Gid kPortGid = make_gid(0xfe80000000000000ull, 0x0002c90300000001ull);
const Gid kMgid = make_gid(0xff12601bffff0000ull, 0x1);
const Gid kMgid2 = make_gid(0xff12601bffff0000ull, 0x2);

// An SA that keeps each request until the test answers it.
class FakeSa final : public SaRequester {
 public:
  struct Req {
    std::uint8_t port;
    SaRequest req;
    ByteVec record;
    SaAnswerFn done;
  };
  void sa_request(std::uint8_t port, const SaRequest& req, ByteVec record, SaAnswerFn done) override {
    asked.push_back({port, req, std::move(record), std::move(done)});
  }
  void port_gid(std::uint8_t, std::function<void(Result<Gid>)> done) override { done(kPortGid); }

  // Answers the oldest request: its record echoed (as the SA does), with
  // `edit` applied, and SA status `sa_status`.
  template <class Edit>
  void answer(std::uint8_t sa_status, Edit edit) {
    REQUIRE(!asked.empty());
    Req r = std::move(asked.front());
    asked.pop_front();
    ByteVec rec = r.record;
    edit(rec);
    SaRequest resp = r.req;
    resp.method = mad::response_method(r.req.method);
    auto m = make_sa_request(resp, rec);
    REQUIRE(m);
    mad::put16(*m, 4, static_cast<std::uint16_t>(sa_status << 8));
    r.done(ByteVec(m->begin(), m->end()));
  }
  void answer() {
    answer(0, [](ByteVec&) {});
  }
  void fail(Error e) {
    REQUIRE(!asked.empty());
    Req r = std::move(asked.front());
    asked.pop_front();
    r.done(std::move(e));
  }
  McMemberRecord front_mcm() const {
    auto r = decode_mcmember_record(asked.front().record);
    REQUIRE(r);
    return *r;
  }
  ServiceRecord front_sr() const {
    auto r = decode_service_record(asked.front().record);
    REQUIRE(r);
    return *r;
  }
  std::deque<Req> asked;
};

// The SA's answer to a join: an MLID and the group's parameters.
void with_mlid(ByteVec& rec, std::uint16_t mlid) {
  auto r = decode_mcmember_record(rec);
  REQUIRE(r);
  r->mlid = mlid;
  r->mtu = 4;
  encode_mcmember_record(rec, *r);
}

JoinRequest join_of(std::uint8_t state, const Gid& mgid = kMgid) {
  JoinRequest j;
  j.mgid = mgid;
  j.join_state = state;
  return j;
}

struct Got {
  std::optional<Result<McMemberRecord>> r;
  McastJoins::JoinFn fn() {
    return [this](Result<McMemberRecord> x) { r = std::move(x); };
  }
};

}  // namespace

TEST_CASE("a join asks SubnAdmSet(MCMemberRecord) with MGID, PortGID, JoinState and hands back the SA's record",
          "[sa][mcast]") {
  FakeSa sa;
  McastJoins joins(sa);
  Got a;
  joins.join(7, join_of(join_state::kFullMember), a.fn());
  REQUIRE(sa.asked.size() == 1);
  CHECK(sa.asked[0].req.method == mad::method::kSet);
  CHECK(sa.asked[0].req.attr_id == attr::kMcMemberRecord);
  CHECK(sa.asked[0].req.comp_mask == (mcm_mask::kMgid | mcm_mask::kPortGid | mcm_mask::kJoinState));
  const McMemberRecord q = sa.front_mcm();
  CHECK(q.mgid == kMgid);
  CHECK(q.port_gid == kPortGid);
  CHECK(q.join_state == join_state::kFullMember);
  CHECK(!a.r);
  sa.answer(0, [](ByteVec& b) { with_mlid(b, 0xC001); });
  REQUIRE(a.r);
  REQUIRE(*a.r);
  CHECK((*a.r)->mlid == 0xC001);
  CHECK(joins.joined_state(1, kMgid) == join_state::kFullMember);
  CHECK(joins.memberships(7) == 1);
}

TEST_CASE("a creating join selects Q_Key, P_Key, SL, FlowLabel, TClass, and MTU/rate exactly when given",
          "[sa][mcast]") {
  FakeSa sa;
  Got a;  // before `joins`: its destructor completes the join left out
  McastJoins joins(sa);
  JoinRequest j = join_of(join_state::kFullMember);
  j.create = true;
  j.qkey = 0x1234;
  j.pkey = 0xFFFF;
  j.sl = 1;
  j.mtu = 4;
  joins.join(1, j, a.fn());
  REQUIRE(sa.asked.size() == 1);
  const std::uint64_t m = sa.asked[0].req.comp_mask;
  for (std::uint64_t bit : {mcm_mask::kMgid, mcm_mask::kPortGid, mcm_mask::kJoinState, mcm_mask::kQKey,
                            mcm_mask::kPKey, mcm_mask::kSl, mcm_mask::kFlowLabel, mcm_mask::kTClass,
                            mcm_mask::kMtuSelector, mcm_mask::kMtu})
    CHECK((m & bit) != 0);
  CHECK((m & (mcm_mask::kRate | mcm_mask::kRateSelector | mcm_mask::kMlid)) == 0);
  const McMemberRecord q = sa.front_mcm();
  CHECK(q.qkey == 0x1234);
  CHECK(q.pkey == 0xFFFF);
  CHECK(q.sl == 1);
  CHECK(q.mtu_selector == 2);
  CHECK(q.mtu == 4);
}

TEST_CASE("joins of one group share the request out; the port's bits are the union of its members'", "[sa][mcast]") {
  FakeSa sa;
  McastJoins joins(sa);
  Got a, b, c;
  joins.join(1, join_of(join_state::kFullMember), a.fn());
  joins.join(2, join_of(join_state::kFullMember), b.fn());
  REQUIRE(sa.asked.size() == 1);  // b waits for a's Set
  sa.answer(0, [](ByteVec& r) { with_mlid(r, 0xC002); });
  REQUIRE(a.r);
  REQUIRE(b.r);
  CHECK((*b.r)->mlid == 0xC002);
  CHECK(sa.asked.empty());
  CHECK(joins.counters().shared == 1);

  // A third member asking bits the port lacks: one more Set, of the union.
  joins.join(3, join_of(join_state::kSendOnlyNonMember), c.fn());
  REQUIRE(sa.asked.size() == 1);
  CHECK(sa.front_mcm().join_state == (join_state::kFullMember | join_state::kSendOnlyNonMember));
  sa.answer(0, [](ByteVec& r) { with_mlid(r, 0xC002); });
  REQUIRE(c.r);
  CHECK(*c.r);

  // A join the port's bits already cover is answered at once.
  Got d;
  joins.join(4, join_of(join_state::kFullMember), d.fn());
  CHECK(sa.asked.empty());
  REQUIRE(d.r);
  CHECK((*d.r)->mlid == 0xC002);
  CHECK(joins.counters().cached == 1);
  CHECK(joins.counters().sets == 2);
}

TEST_CASE("a leave deletes only the JoinState bits no member needs any more", "[sa][mcast]") {
  FakeSa sa;
  McastJoins joins(sa);
  Got a, b;
  joins.join(1, join_of(join_state::kFullMember), a.fn());
  sa.answer();
  joins.join(2, join_of(join_state::kNonMember), b.fn());
  sa.answer();
  REQUIRE(joins.joined_state(1, kMgid) == (join_state::kFullMember | join_state::kNonMember));

  // Owner 2 leaves: NonMember goes, FullMember stays.
  REQUIRE(joins.leave(2, 1, kMgid));
  REQUIRE(sa.asked.size() == 1);
  CHECK(sa.asked[0].req.method == mad::method::kDelete);
  CHECK(sa.front_mcm().join_state == join_state::kNonMember);
  CHECK(sa.front_mcm().port_gid == kPortGid);
  sa.answer();
  CHECK(joins.joined_state(1, kMgid) == join_state::kFullMember);
  CHECK(joins.groups() == 1);

  // Not a member: ENOENT, nothing sent.
  auto again = joins.leave(2, 1, kMgid);
  REQUIRE(!again);
  CHECK(again.error().code == ENOENT);
  CHECK(sa.asked.empty());

  // The last member: the rest goes and the group is forgotten.
  REQUIRE(joins.leave(1, 1, kMgid));
  REQUIRE(sa.asked.size() == 1);
  CHECK(sa.front_mcm().join_state == join_state::kFullMember);
  sa.answer();
  CHECK(joins.groups() == 0);
}

TEST_CASE("two members with the same bits: the first to leave sends nothing", "[sa][mcast]") {
  FakeSa sa;
  McastJoins joins(sa);
  Got a, b;
  joins.join(1, join_of(join_state::kFullMember), a.fn());
  joins.join(2, join_of(join_state::kFullMember), b.fn());
  sa.answer();
  REQUIRE(joins.leave(1, 1, kMgid));
  CHECK(sa.asked.empty());
  CHECK(joins.joined_state(1, kMgid) == join_state::kFullMember);
}

TEST_CASE("an SA refusal reaches the waiting joins as EREMOTEIO naming the status; nothing stays joined",
          "[sa][mcast]") {
  FakeSa sa;
  McastJoins joins(sa);
  Got a, b;
  joins.join(1, join_of(join_state::kFullMember), a.fn());
  joins.join(2, join_of(join_state::kFullMember), b.fn());
  sa.answer(status::kReqInvalid, [](ByteVec&) {});
  REQUIRE(a.r);
  REQUIRE(!*a.r);
  CHECK(a.r->error().code == EREMOTEIO);
  CHECK(a.r->error().message.find("ERR_REQ_INVALID") != std::string::npos);
  REQUIRE(b.r);
  CHECK(!*b.r);
  CHECK(joins.groups() == 0);
  CHECK(joins.memberships(1) == 0);
  CHECK(sa.asked.empty());
  // A timeout is passed on as it is.
  Got c;
  joins.join(3, join_of(join_state::kFullMember), c.fn());
  sa.fail(err(ETIMEDOUT, "no answer"));
  REQUIRE(c.r);
  CHECK(c.r->error().code == ETIMEDOUT);
}

TEST_CASE("a rejoin answered with the same MLID but another Q_Key is a change (a new SM's partitions.conf)",
          "[sa][mcast]") {
  FakeSa sa;
  McastJoins joins(sa);
  std::vector<std::uint32_t> changed;
  joins.set_change_handler([&](std::uint8_t, const McMemberRecord& r) { changed.push_back(r.qkey); });
  Got a;
  joins.join(1, join_of(join_state::kFullMember), a.fn());
  sa.answer(0, [](ByteVec& r) { with_mlid(r, 0xC001); });
  REQUIRE(a.r);
  REQUIRE(*a.r);
  const std::uint32_t before = (*a.r)->qkey;
  joins.rejoin(1);
  REQUIRE(sa.asked.size() == 1);
  sa.answer(0, [](ByteVec& r) { with_mlid(r, 0xC001); });  // the same record: no change
  CHECK(changed.empty());
  joins.rejoin(1);
  REQUIRE(sa.asked.size() == 1);
  sa.answer(0, [&](ByteVec& r) {
    with_mlid(r, 0xC001);
    auto m = decode_mcmember_record(r);
    REQUIRE(m);
    m->qkey = before ^ 0x80000000u;
    encode_mcmember_record(r, *m);
  });
  CHECK(changed == std::vector<std::uint32_t>{before ^ 0x80000000u});
  CHECK(joins.counters().mlid_changes == 1);
}

TEST_CASE("bad joins are refused without asking the SA", "[sa][mcast]") {
  FakeSa sa;
  McastJoins joins(sa);
  Got a, b, c;
  joins.join(1, join_of(0), a.fn());
  joins.join(1, join_of(join_state::kSendOnlyFullMember), b.fn());
  joins.join(1, join_of(join_state::kFullMember, make_gid(0xfe80000000000000ull, 1)), c.fn());
  for (Got* g : {&a, &b, &c}) {
    REQUIRE(g->r);
    CHECK(g->r->error().code == EINVAL);
  }
  CHECK(sa.asked.empty());
  CHECK(joins.groups() == 0);
}

TEST_CASE("rejoin after ClientReregister asks again for every group of the port, creation components included",
          "[sa][mcast]") {
  FakeSa sa;
  McastJoins joins(sa);
  std::vector<std::uint16_t> changed;
  joins.set_change_handler([&](std::uint8_t, const McMemberRecord& r) { changed.push_back(r.mlid); });
  JoinRequest j = join_of(join_state::kFullMember);
  j.create = true;
  j.qkey = 0x55;
  Got a, b, c;
  joins.join(1, j, a.fn());
  sa.answer(0, [](ByteVec& r) { with_mlid(r, 0xC001); });
  joins.join(2, join_of(join_state::kNonMember, kMgid2), b.fn());
  sa.answer(0, [](ByteVec& r) { with_mlid(r, 0xC002); });
  JoinRequest other_port = join_of(join_state::kFullMember);
  other_port.port = 2;
  joins.join(3, other_port, c.fn());
  sa.answer();
  REQUIRE(sa.asked.empty());

  joins.rejoin(1);
  REQUIRE(sa.asked.size() == 2);
  CHECK(sa.asked[0].port == 1);
  CHECK(sa.asked[1].port == 1);
  CHECK(sa.asked[0].req.method == mad::method::kSet);
  CHECK((sa.asked[0].req.comp_mask & mcm_mask::kQKey) != 0);  // the group may have to be created again
  CHECK(sa.front_mcm().qkey == 0x55);
  CHECK(sa.front_mcm().join_state == join_state::kFullMember);
  sa.answer(0, [](ByteVec& r) { with_mlid(r, 0xC00A); });  // a new SM gave another MLID
  sa.fail(err(ETIMEDOUT, "no answer"));
  CHECK(changed == std::vector<std::uint16_t>{0xC00A});
  CHECK(joins.counters().rejoins == 2);
  // The failed rejoin: kept, asked again by retry() (and only then).
  CHECK(joins.memberships(2) == 1);
  CHECK(sa.asked.empty());
  joins.retry();
  REQUIRE(sa.asked.size() == 1);
  CHECK(sa.front_mcm().mgid == kMgid2);
  CHECK(sa.front_mcm().join_state == join_state::kNonMember);
  sa.answer();
  CHECK(joins.joined_state(1, kMgid2) == join_state::kNonMember);
}

TEST_CASE("rejoin while a Set is out asks again once it is answered", "[sa][mcast]") {
  FakeSa sa;
  McastJoins joins(sa);
  Got a;
  joins.join(1, join_of(join_state::kFullMember), a.fn());
  joins.rejoin(1);
  REQUIRE(sa.asked.size() == 1);
  sa.answer();
  CHECK(a.r);
  REQUIRE(sa.asked.size() == 1);  // the answer may predate the new SM
  sa.answer();
  CHECK(sa.asked.empty());
}

TEST_CASE("an owner gone leaves its groups; its waiting join is cancelled", "[sa][mcast]") {
  FakeSa sa;
  McastJoins joins(sa);
  Got a, b, c;
  joins.join(1, join_of(join_state::kFullMember), a.fn());
  sa.answer();
  joins.join(1, join_of(join_state::kNonMember, kMgid2), b.fn());
  joins.join(2, join_of(join_state::kFullMember), c.fn());  // answered from the port's bits
  REQUIRE(c.r);
  joins.owner_gone(1);
  REQUIRE(b.r);
  CHECK(b.r->error().code == ECANCELED);
  CHECK(joins.memberships(1) == 0);
  // kMgid keeps owner 2: nothing to delete there. kMgid2's Set is out;
  // once answered, its bits are deleted.
  REQUIRE(sa.asked.size() == 1);
  sa.answer();
  REQUIRE(sa.asked.size() == 1);
  CHECK(sa.asked[0].req.method == mad::method::kDelete);
  CHECK(sa.front_mcm().mgid == kMgid2);
  sa.answer();
  CHECK(joins.groups() == 1);
}

TEST_CASE("destroying the joins cancels waiting joins; late answers are dropped", "[sa][mcast]") {
  FakeSa sa;
  Got a;
  {
    McastJoins joins(sa);
    joins.join(1, join_of(join_state::kFullMember), a.fn());
  }
  REQUIRE(a.r);
  CHECK(a.r->error().code == ECANCELED);
  sa.answer();  // nothing to reach
}

// ---- service registrations -------------------------------------------------

namespace {

class FakeClock final : public Clock {
 public:
  time_point now() const override { return t; }
  time_point t{std::chrono::hours(1)};
};

ServiceRecord service(std::uint64_t id, std::uint32_t lease) {
  ServiceRecord r;
  r.service_id = id;
  r.service_pkey = 0xFFFF;
  r.service_lease = lease;
  r.service_name = "openib-test";
  return r;
}

struct GotSr {
  std::optional<Result<ServiceRecord>> r;
  ServiceRegs::SetFn fn() {
    return [this](Result<ServiceRecord> x) { r = std::move(x); };
  }
};

}  // namespace

TEST_CASE("a registration is a SubnAdmSet(ServiceRecord) with the port's GID; the SA's echo comes back",
          "[sa][service]") {
  FakeSa sa;
  FakeClock clock;
  ServiceRegs regs(sa, clock);
  GotSr a;
  regs.register_service(5, 1, service(0x1000, kInfiniteLease), a.fn());
  REQUIRE(sa.asked.size() == 1);
  CHECK(sa.asked[0].req.method == mad::method::kSet);
  CHECK(sa.asked[0].req.attr_id == attr::kServiceRecord);
  const std::uint64_t m = sa.asked[0].req.comp_mask;
  for (std::uint64_t bit : {sr_mask::kServiceId, sr_mask::kServiceGid, sr_mask::kServicePKey, sr_mask::kServiceLease,
                            sr_mask::kServiceName, sr_mask::data64(1)})
    CHECK((m & bit) != 0);
  CHECK((m & (1ull << 3)) == 0);
  CHECK(sa.front_sr().service_gid == kPortGid);
  CHECK(sa.front_sr().service_name == "openib-test");
  sa.answer();
  REQUIRE(a.r);
  REQUIRE(*a.r);
  CHECK((*a.r)->service_id == 0x1000);
  // No lease: nothing to renew, ever.
  clock.t += 24h;
  regs.tick();
  CHECK(sa.asked.empty());
}

TEST_CASE("a finite lease is renewed at half of it while the registration lives", "[sa][service]") {
  FakeSa sa;
  FakeClock clock;
  ServiceRegs regs(sa, clock);
  GotSr a;
  regs.register_service(5, 1, service(0x1000, 20), a.fn());
  sa.answer();
  clock.t += 9s;
  regs.tick();
  CHECK(sa.asked.empty());
  clock.t += 1s;
  regs.tick();
  REQUIRE(sa.asked.size() == 1);
  CHECK(sa.front_sr().service_lease == 20);
  regs.tick();  // one renewal out at a time
  CHECK(sa.asked.size() == 1);
  sa.answer();
  CHECK(regs.counters().renewals == 1);
  clock.t += 10s;
  regs.tick();
  CHECK(sa.asked.size() == 1);
  sa.fail(err(ETIMEDOUT, "no answer"));
  // A failed renewal is asked again at the next tick.
  regs.tick();
  REQUIRE(sa.asked.size() == 1);
  sa.answer();
  CHECK(regs.size() == 1);
  // Gone: deleted, and no renewal after it.
  REQUIRE(regs.unregister(5, 1, 0x1000, Gid{}, 0xFFFF));
  REQUIRE(sa.asked.size() == 1);
  CHECK(sa.asked[0].req.method == mad::method::kDelete);
  CHECK(sa.asked[0].req.comp_mask == (sr_mask::kServiceId | sr_mask::kServiceGid | sr_mask::kServicePKey));
  CHECK(sa.front_sr().service_gid == kPortGid);
  sa.answer();
  clock.t += 1h;
  regs.tick();
  CHECK(sa.asked.empty());
}

TEST_CASE("an owner gone: its registrations deleted, another owner's kept; a key held by another is EEXIST",
          "[sa][service]") {
  FakeSa sa;
  FakeClock clock;
  ServiceRegs regs(sa, clock);
  GotSr a, b, c;
  regs.register_service(1, 1, service(0x1, kInfiniteLease), a.fn());
  sa.answer();
  regs.register_service(2, 1, service(0x2, kInfiniteLease), b.fn());
  sa.answer();
  regs.register_service(2, 1, service(0x1, kInfiniteLease), c.fn());
  REQUIRE(c.r);
  CHECK(c.r->error().code == EEXIST);
  CHECK(sa.asked.empty());
  regs.owner_gone(1);
  REQUIRE(sa.asked.size() == 1);
  CHECK(sa.asked[0].req.method == mad::method::kDelete);
  CHECK(sa.front_sr().service_id == 0x1);
  sa.answer();
  CHECK(regs.size() == 1);
  CHECK(regs.registrations(2) == 1);
  CHECK(!regs.unregister(1, 1, 0x2, Gid{}, 0xFFFF));  // not the owner's
}

TEST_CASE("reregister sets every registration of the port again; a refusal is told and not kept",
          "[sa][service]") {
  FakeSa sa;
  FakeClock clock;
  ServiceRegs regs(sa, clock);
  GotSr a, b;
  regs.register_service(1, 1, service(0x1, kInfiniteLease), a.fn());
  sa.answer();
  regs.reregister(2);
  CHECK(sa.asked.empty());
  regs.reregister(1);
  REQUIRE(sa.asked.size() == 1);
  CHECK(sa.asked[0].req.method == mad::method::kSet);
  sa.answer();
  CHECK(regs.counters().reregisters == 1);

  regs.register_service(1, 1, service(0x9, kInfiniteLease), b.fn());
  sa.answer(status::kReqDenied, [](ByteVec&) {});
  REQUIRE(b.r);
  CHECK(b.r->error().code == EREMOTEIO);
  CHECK(b.r->error().message.find("ERR_REQ_DENIED") != std::string::npos);
  CHECK(regs.size() == 1);
}

// ---- issue 29: one owner's record or parameters never another's ------------

// Finding 2: the SA keys a ServiceRecord by (ServiceID, ServiceGID,
// ServiceP_Key) with the GID itself; GID 0 is the port's. A record given
// with GID 0 and one naming the port's GID are one record: a second owner
// can neither replace nor delete the first's.
TEST_CASE("ServiceGID 0 and the port's GID are one key: another owner's is EEXIST and not its to delete",
          "[sa][service]") {
  FakeSa sa;
  FakeClock clock;
  ServiceRegs regs(sa, clock);
  ServiceRecord named = service(0x10000CE100415453ull, kInfiniteLease);
  named.service_gid = kPortGid;  // as ibd's ATS record names it
  GotSr own, other, other2;
  regs.register_service(0xFFFFFFF0u, 1, named, own.fn());
  sa.answer();
  REQUIRE(own.r);
  REQUIRE(*own.r);
  // Another owner gives GID 0: the same record at the SA.
  regs.register_service(7, 1, service(0x10000CE100415453ull, kInfiniteLease), other.fn());
  REQUIRE(other.r);
  CHECK(other.r->error().code == EEXIST);
  CHECK(sa.asked.empty());  // nothing replaced at the SA
  CHECK(!regs.unregister(7, 1, 0x10000CE100415453ull, Gid{}, 0xFFFF));
  CHECK(!regs.unregister(7, 1, 0x10000CE100415453ull, kPortGid, 0xFFFF));
  regs.owner_gone(7);
  CHECK(sa.asked.empty());  // no Delete of the record on its way out
  CHECK(regs.size() == 1);
  // The other way round: GID 0 first, the port's GID named second.
  GotSr zero;
  regs.register_service(8, 1, service(0x2000, kInfiniteLease), zero.fn());
  REQUIRE(sa.asked.size() == 1);
  CHECK(sa.front_sr().service_gid == kPortGid);
  sa.answer();
  ServiceRecord full = service(0x2000, kInfiniteLease);
  full.service_gid = kPortGid;
  regs.register_service(9, 1, full, other2.fn());
  REQUIRE(other2.r);
  CHECK(other2.r->error().code == EEXIST);
  CHECK(regs.holds(8, 1, 0x2000, Gid{}, 0xFFFF));
  CHECK(!regs.holds(9, 1, 0x2000, kPortGid, 0xFFFF));
  // Its owner deletes it by the GID it gave (0): the Delete names the port's.
  REQUIRE(regs.unregister(8, 1, 0x2000, Gid{}, 0xFFFF));
  REQUIRE(sa.asked.size() == 1);
  CHECK(sa.asked[0].req.method == mad::method::kDelete);
  CHECK(sa.front_sr().service_gid == kPortGid);
}

// Finding 7: the first creating join's parameters used to be the group's
// for every later Set, a rejoin after an SM change included.
TEST_CASE("a trusted member's group: another member's creation components are never sent", "[sa][mcast]") {
  FakeSa sa;
  McastJoins joins(sa);
  Got ipoib, bogus;
  JoinRequest own = join_of(join_state::kFullMember);
  own.trusted = true;  // IPoIB's broadcast join: the SM made the group
  joins.join(0xFFFFFFF0u, own, ipoib.fn());
  sa.answer();
  JoinRequest bad = join_of(join_state::kNonMember);
  bad.create = true;
  bad.qkey = 0xBAD;
  bad.mtu = 1;
  joins.join(5, bad, bogus.fn());
  REQUIRE(sa.asked.size() == 1);
  CHECK((sa.asked[0].req.comp_mask & (mcm_mask::kQKey | mcm_mask::kMtu)) == 0);
  sa.answer();
  REQUIRE(bogus.r);
  CHECK(*bogus.r);
  // The SM restarts: the rejoin carries nothing of the client's.
  joins.rejoin(1);
  REQUIRE(sa.asked.size() == 1);
  CHECK((sa.asked[0].req.comp_mask & (mcm_mask::kQKey | mcm_mask::kMtu)) == 0);
  sa.answer();
  CHECK(joins.joined_state(1, kMgid) == (join_state::kFullMember | join_state::kNonMember));
  // IPoIB's own creation components are the ones sent, whoever came first.
  Got created;
  JoinRequest own2 = join_of(join_state::kFullMember, kMgid2);
  JoinRequest bad2 = join_of(join_state::kFullMember, kMgid2);
  bad2.create = true;
  bad2.qkey = 0xBAD;
  joins.join(5, bad2, bogus.fn());
  sa.answer();
  own2.trusted = own2.create = true;
  own2.qkey = 0x0B1B;
  own2.join_state = join_state::kNonMember;
  joins.join(0xFFFFFFF0u, own2, created.fn());
  sa.answer();
  joins.rejoin(1);
  REQUIRE(sa.asked.size() == 2);
  sa.answer();
  CHECK(sa.front_mcm().mgid == kMgid2);
  CHECK(sa.front_mcm().qkey == 0x0B1B);
}

TEST_CASE("creation components the SA refuses fail only their owner; the Set goes again with another's",
          "[sa][mcast]") {
  FakeSa sa;
  McastJoins joins(sa);
  Got good, bad;
  JoinRequest g = join_of(join_state::kFullMember);
  g.create = true;
  g.qkey = 0x11;
  joins.join(2, g, good.fn());
  sa.answer();
  REQUIRE(good.r);
  REQUIRE(*good.r);
  // A second owner asks to create it with other parameters (and new bits):
  // the SA refuses them; the first owner's membership is untouched.
  JoinRequest b = join_of(join_state::kNonMember);
  b.create = true;
  b.qkey = 0xBAD;
  joins.join(1, b, bad.fn());
  REQUIRE(sa.asked.size() == 1);
  CHECK(sa.front_mcm().qkey == 0xBAD);
  sa.answer(status::kReqInvalid, [](ByteVec&) {});
  REQUIRE(bad.r);
  CHECK(bad.r->error().code == EREMOTEIO);
  CHECK(joins.memberships(1) == 0);
  CHECK(joins.memberships(2) == 1);
  CHECK(joins.counters().bad_create == 1);
  // The group as the SA now holds it: asked again without the refused bits.
  CHECK(sa.asked.empty());
  // The bogus owner joins without creating, then the SM restarts: the
  // rejoin carries the first owner's components, never the refused ones.
  Got plain;
  joins.join(1, join_of(join_state::kNonMember), plain.fn());
  sa.answer();
  joins.rejoin(1);
  REQUIRE(sa.asked.size() == 1);
  CHECK(sa.front_mcm().qkey == 0x11);
  sa.answer();
  // Two creators, the one picked refused at a rejoin: the other's next.
  Got c3;
  JoinRequest b3 = join_of(join_state::kFullMember, kMgid2);
  b3.create = true;
  b3.qkey = 0xBAD;
  joins.join(1, b3, c3.fn());
  sa.answer();
  JoinRequest g3 = b3;
  g3.qkey = 0x33;
  joins.join(2, g3, c3.fn());  // cached: the port holds the bits
  joins.rejoin(1);
  REQUIRE(sa.asked.size() == 2);
  sa.answer();  // kMgid
  CHECK(sa.front_mcm().qkey == 0xBAD);  // owner 1's, picked first
  sa.answer(status::kReqInvalid, [](ByteVec&) {});
  REQUIRE(sa.asked.size() == 1);  // asked again at once, with owner 2's
  CHECK(sa.front_mcm().qkey == 0x33);
  sa.answer();
  CHECK(joins.joined_state(1, kMgid2) == join_state::kFullMember);
  CHECK(joins.memberships(1) == 2);  // its membership stays; its components are gone
}

TEST_CASE("a failed rejoin is told to the lost handler for each member that held the group", "[sa][mcast]") {
  FakeSa sa;
  McastJoins joins(sa);
  std::vector<std::pair<Owner, int>> lost;
  joins.set_lost_handler([&](std::uint8_t, const Gid& mgid, Owner o, const Error& e) {
    CHECK(mgid == kMgid);
    lost.emplace_back(o, e.code);
    (void)joins.leave(o, 1, mgid);  // IPoIB goes down: it leaves
  });
  Got a, b;
  joins.join(0xFFFFFFF0u, join_of(join_state::kFullMember), a.fn());
  sa.answer();
  joins.join(3, join_of(join_state::kFullMember), b.fn());
  joins.rejoin(1);
  REQUIRE(sa.asked.size() == 1);
  sa.fail(err(ETIMEDOUT, "no answer"));
  CHECK(lost == std::vector<std::pair<Owner, int>>{{3, ETIMEDOUT}, {0xFFFFFFF0u, ETIMEDOUT}});
  CHECK(joins.counters().lost == 2);
  CHECK(joins.groups() == 0);
  // A join that fails when first asked is the joiner's error, nothing lost.
  Got c;
  joins.join(4, join_of(join_state::kFullMember), c.fn());
  sa.fail(err(ETIMEDOUT, "no answer"));
  CHECK(lost.size() == 2);
}

TEST_CASE("IPoIB's signature MGIDs (RFC 4391 section 4)", "[sa][mcast]") {
  CHECK(is_ipoib_mgid(make_gid(0xff12401bffff0000ull, 0x00000000ffffffffull)));  // broadcast, P_Key 0xffff
  CHECK(is_ipoib_mgid(make_gid(0xff15401b80010000ull, 0x00000000e0000001ull)));  // site-local IPv4
  CHECK(is_ipoib_mgid(make_gid(0xff12601bffff0000ull, 0x0000000000000001ull)));  // IPv6 all-nodes
  CHECK(!is_ipoib_mgid(make_gid(0xff12123400000000ull, 1)));
  CHECK(!is_ipoib_mgid(make_gid(0xff02401bffff0000ull, 1)));  // not transient: not IPoIB's mapping
  CHECK(!is_ipoib_mgid(make_gid(0xfe80000000000000ull, 1)));
}

// Finding 2's follow-up: ibd's own records (ATS) are set again every
// kOwnRefresh whatever their lease, so one deleted at the SA by someone
// else comes back; a client's record with no lease is never set again.
TEST_CASE("an own registration is set again every kOwnRefresh; a client's without a lease is not", "[sa][service]") {
  FakeSa sa;
  FakeClock clock;
  ServiceRegs regs(sa, clock);
  GotSr own, client;
  regs.register_service(0xFFFFFFF0u, 1, service(0x10000CE100415453ull, kInfiniteLease), own.fn(), true);
  sa.answer();
  regs.register_service(7, 1, service(0x3000, kInfiniteLease), client.fn());
  sa.answer();
  clock.t += ServiceRegs::kOwnRefresh - 1s;
  regs.tick();
  CHECK(sa.asked.empty());
  clock.t += 1s;
  regs.tick();
  REQUIRE(sa.asked.size() == 1);
  CHECK(sa.asked[0].req.method == mad::method::kSet);
  CHECK(sa.front_sr().service_id == 0x10000CE100415453ull);
  CHECK(sa.front_sr().service_gid == kPortGid);
  sa.answer();
  clock.t += ServiceRegs::kOwnRefresh;
  regs.tick();
  REQUIRE(sa.asked.size() == 1);  // again, and only the own one
  CHECK(sa.front_sr().service_id == 0x10000CE100415453ull);
}
