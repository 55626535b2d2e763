// The QP state machine of IBA 10.3.1 with the attribute rules of IBA
// 11.2.4.2, as docs/simhca.md §8 specifies them: legal walks, illegal
// transitions, missing / not allowed / invalid attributes — each refused
// with the documented status and syndrome, the QP's state unchanged.
#include "hca/prm.hpp"
#include "test_simhca_fixture.hpp"

using namespace openib;
using namespace openib::test;
using namespace openib::hca;
namespace qa = openib::hca::qp_attr;

namespace {

constexpr uint32_t kMissing = 0x01u << 24, kNotAllowed = 0x02u << 24, kBadValue = 0x03u << 24;

struct QpFixture : HcaFixture {
  explicit QpFixture(QpType type = QpType::kRc) {
    pd = *hca->alloc_pd();
    auto c = hca->create_cq(4);
    REQUIRE(c.ok());
    cq = std::move(c).value();
    QpInit init;
    init.type = type;
    init.pdn = pd;
    init.send_cqn = cq.cqn;
    init.recv_cqn = cq.cqn;
    if (type == QpType::kSmi || type == QpType::kGsi) init.port = 1;
    auto q = hca->create_qp(init);
    REQUIRE(q.ok());
    qp = std::move(q).value();
  }
  QpState state() {
    auto i = hca->query_qp(qp.qpn);
    REQUIRE(i.ok());
    return i->attr.state;
  }
  // A refused modify: the status, the syndrome, and the state unchanged.
  void refused(uint32_t mask, const QpAttr& a, uint8_t status, std::optional<uint32_t> syndrome = {}) {
    const QpState before = state();
    auto r = hca->modify_qp(qp.qpn, mask, a);
    REQUIRE_FALSE(r.ok());
    CHECK(hca->last_status() == status);
    if (syndrome) CHECK(hca->last_syndrome() == *syndrome);
    CHECK(state() == before);
  }
  uint32_t pd = 0;
  Cq cq;
  Qp qp;
};

QpAttr to(QpState s) {
  QpAttr a;
  a.state = s;
  return a;
}

// The RC attributes of rdma-core's ibv_modify_qp(3) examples.
constexpr uint32_t kRcInit = qa::kState | qa::kPkeyIndex | qa::kPort | qa::kAccessFlags;
constexpr uint32_t kRcRtr = qa::kState | qa::kAv | qa::kPathMtu | qa::kDestQpn | qa::kRqPsn |
                            qa::kMaxDestRdAtomic | qa::kMinRnrTimer;
constexpr uint32_t kRcRts = qa::kState | qa::kTimeout | qa::kRetryCnt | qa::kRnrRetry | qa::kSqPsn |
                            qa::kMaxQpRdAtomic;

QpAttr rc_init() {
  QpAttr a = to(QpState::kInit);
  a.port = 1;
  a.pkey_index = 0;
  a.access = kAccessRemoteWrite | kAccessRemoteRead;
  return a;
}
QpAttr rc_rtr() {
  QpAttr a = to(QpState::kRtr);
  a.path_mtu = 5;
  a.dest_qpn = 0x1234;
  a.rq_psn = 0x100;
  a.max_dest_rd_atomic = 4;
  a.min_rnr_timer = 12;
  a.av.dlid = 0x22;
  a.av.sl = 1;
  a.av.port = 1;
  return a;
}
QpAttr rc_rts() {
  QpAttr a = to(QpState::kRts);
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.sq_psn = 0x200;
  a.max_rd_atomic = 4;
  return a;
}

}  // namespace

TEST_CASE("simhca QP: RC walks RESET-INIT-RTR-RTS-SQD-RTS-ERR-RESET", "[simhca][qp]") {
  QpFixture f;
  REQUIRE(f.state() == QpState::kReset);
  REQUIRE(f.hca->modify_qp(f.qp.qpn, kRcInit, rc_init()).ok());
  auto i = f.hca->query_qp(f.qp.qpn);
  CHECK(i->attr.state == QpState::kInit);
  CHECK(i->attr.port == 1);
  CHECK(i->attr.access == (kAccessRemoteWrite | kAccessRemoteRead));

  REQUIRE(f.hca->modify_qp(f.qp.qpn, kRcRtr, rc_rtr()).ok());
  i = f.hca->query_qp(f.qp.qpn);
  CHECK(i->attr.state == QpState::kRtr);
  CHECK(i->attr.dest_qpn == 0x1234);
  CHECK(i->attr.rq_psn == 0x100);
  CHECK(i->attr.path_mtu == 5);
  CHECK(i->attr.min_rnr_timer == 12);
  CHECK(i->attr.av.dlid == 0x22);

  REQUIRE(f.hca->modify_qp(f.qp.qpn, kRcRts, rc_rts()).ok());
  i = f.hca->query_qp(f.qp.qpn);
  CHECK(i->attr.state == QpState::kRts);
  CHECK(i->attr.sq_psn == 0x200);
  CHECK(i->attr.timeout == 14);
  CHECK(i->attr.retry_cnt == 7);

  // RTS->RTS with an optional attribute.
  QpAttr m;
  m.min_rnr_timer = 20;
  REQUIRE(f.hca->modify_qp(f.qp.qpn, qa::kMinRnrTimer, m).ok());
  CHECK(f.hca->query_qp(f.qp.qpn)->attr.min_rnr_timer == 20);

  // RTS->SQD with notification: SQ_DRAINED arrives (IBA 11.6.3.1).
  QpAttr sqd = to(QpState::kSqd);
  sqd.en_sqd_async_notify = true;
  REQUIRE(f.hca->modify_qp(f.qp.qpn, qa::kState | qa::kEnSqdAsyncNotify, sqd).ok());
  CHECK(f.state() == QpState::kSqd);
  REQUIRE(f.hca->wait_event(prm::kEvSqDrained, 2000));
  for (const EventEntry& e : f.hca->events())
    if (e.type == prm::kEvSqDrained) CHECK(prm::get32(e.data, 0) == f.qp.qpn);

  // SQD->SQD may change the path; SQD->RTS resumes.
  QpAttr path;
  path.timeout = 20;
  REQUIRE(f.hca->modify_qp(f.qp.qpn, qa::kTimeout, path).ok());
  CHECK(f.hca->query_qp(f.qp.qpn)->attr.timeout == 20);
  REQUIRE(f.hca->modify_qp(f.qp.qpn, qa::kState, to(QpState::kRts)).ok());
  CHECK(f.state() == QpState::kRts);

  REQUIRE(f.hca->modify_qp(f.qp.qpn, qa::kState, to(QpState::kErr)).ok());
  CHECK(f.state() == QpState::kErr);
  REQUIRE(f.hca->modify_qp(f.qp.qpn, qa::kState, to(QpState::kReset)).ok());
  i = f.hca->query_qp(f.qp.qpn);
  CHECK(i->attr.state == QpState::kReset);
  // IBA 10.3.1: RESET forgets the attributes.
  CHECK(i->attr.dest_qpn == 0);
  CHECK(i->attr.sq_psn == 0);
  CHECK(i->attr.port == 0);
  // And the QP can be brought up again.
  REQUIRE(f.hca->modify_qp(f.qp.qpn, kRcInit, rc_init()).ok());
  CHECK(f.state() == QpState::kInit);
}

TEST_CASE("simhca QP: illegal transitions are BAD_RES_STATE, state unchanged", "[simhca][qp]") {
  QpFixture f;
  f.refused(kRcRtr, rc_rtr(), prm::kBadResState);                    // RESET->RTR
  f.refused(qa::kState, to(QpState::kRts), prm::kBadResState);       // RESET->RTS
  f.refused(qa::kState, to(QpState::kSqd), prm::kBadResState);       // RESET->SQD
  f.refused(qa::kState, to(QpState::kSqe), prm::kBadResState);       // SQE is the device's
  REQUIRE(f.hca->modify_qp(f.qp.qpn, kRcInit, rc_init()).ok());
  f.refused(kRcRts, rc_rts(), prm::kBadResState);                    // INIT->RTS
  f.refused(qa::kState, to(QpState::kSqd), prm::kBadResState);       // INIT->SQD
  REQUIRE(f.hca->modify_qp(f.qp.qpn, kRcRtr, rc_rtr()).ok());
  f.refused(qa::kState | qa::kPkeyIndex | qa::kPort | qa::kAccessFlags, rc_init(), prm::kBadResState);  // RTR->INIT
  f.refused(qa::kState, to(QpState::kSqd), prm::kBadResState);       // RTR->SQD
  f.refused(0, QpAttr{}, prm::kBadResState);                         // RTR->RTR
  REQUIRE(f.hca->modify_qp(f.qp.qpn, qa::kState, to(QpState::kErr)).ok());
  f.refused(qa::kState, to(QpState::kRts), prm::kBadResState);       // ERR->RTS
  f.refused(kRcInit, rc_init(), prm::kBadResState);                  // ERR->INIT
  // CUR_STATE that does not match the QP's state.
  QpAttr cur = to(QpState::kErr);
  cur.cur_state = QpState::kRts;
  f.refused(qa::kState | qa::kCurState, cur, prm::kBadResState);
  // A state value beyond ERR is a bad parameter.
  QpAttr bogus;
  bogus.state = static_cast<QpState>(9);
  f.refused(qa::kState, bogus, prm::kBadParam, kBadValue | qa::kState);
}

TEST_CASE("simhca QP: missing, not allowed and invalid attributes are BAD_PARAM", "[simhca][qp]") {
  QpFixture f;
  // §8.2 RESET->INIT for RC requires PKEY_INDEX PORT ACCESS_FLAGS.
  f.refused(kRcInit & ~qa::kPort, rc_init(), prm::kBadParam, kMissing | qa::kPort);
  f.refused(qa::kState, to(QpState::kInit), prm::kBadParam,
            kMissing | qa::kPort | qa::kPkeyIndex | qa::kAccessFlags);
  // QKEY is not an RC attribute.
  f.refused(kRcInit | qa::kQkey, rc_init(), prm::kBadParam, kNotAllowed | qa::kQkey);
  // Values (§7.7).
  QpAttr a = rc_init();
  a.port = 2;
  f.refused(kRcInit, a, prm::kBadParam, kBadValue | qa::kPort);
  a = rc_init();
  a.pkey_index = 1;  // the P_Key table has one entry
  f.refused(kRcInit, a, prm::kBadParam, kBadValue | qa::kPkeyIndex);
  // Unsupported features and reserved bits.
  f.refused(kRcInit | qa::kAltPath, rc_init(), prm::kNotSupported);
  f.refused(kRcInit | (1u << 25), rc_init(), prm::kBadParam, 0x04u << 24);

  REQUIRE(f.hca->modify_qp(f.qp.qpn, kRcInit, rc_init()).ok());
  f.refused(kRcRtr & ~qa::kMinRnrTimer, rc_rtr(), prm::kBadParam, kMissing | qa::kMinRnrTimer);
  f.refused(kRcRtr & ~(qa::kAv | qa::kRqPsn), rc_rtr(), prm::kBadParam, kMissing | qa::kAv | qa::kRqPsn);
  f.refused(kRcRtr | qa::kSqPsn, rc_rtr(), prm::kBadParam, kNotAllowed | qa::kSqPsn);
  a = rc_rtr();
  a.path_mtu = 6;
  f.refused(kRcRtr, a, prm::kBadParam, kBadValue | qa::kPathMtu);
  a = rc_rtr();
  a.dest_qpn = 1u << 24;
  f.refused(kRcRtr, a, prm::kBadParam, kBadValue | qa::kDestQpn);
  a = rc_rtr();
  a.av.dlid = 0xc001;  // multicast LID on a connected QP
  f.refused(kRcRtr, a, prm::kBadParam, kBadValue | qa::kAv);
  a = rc_rtr();
  a.max_dest_rd_atomic = 17;  // > max_dest_rd_atomic
  f.refused(kRcRtr, a, prm::kBadParam, kBadValue | qa::kMaxDestRdAtomic);

  REQUIRE(f.hca->modify_qp(f.qp.qpn, kRcRtr, rc_rtr()).ok());
  f.refused(kRcRts & ~qa::kSqPsn, rc_rts(), prm::kBadParam, kMissing | qa::kSqPsn);
  a = rc_rts();
  a.timeout = 32;
  f.refused(kRcRts, a, prm::kBadParam, kBadValue | qa::kTimeout);
  a = rc_rts();
  a.retry_cnt = 8;
  f.refused(kRcRts, a, prm::kBadParam, kBadValue | qa::kRetryCnt);
  a = rc_rts();
  a.sq_psn = 1u << 24;
  f.refused(kRcRts, a, prm::kBadParam, kBadValue | qa::kSqPsn);
  // CUR_STATE is accepted from RTR when it matches.
  a = rc_rts();
  a.cur_state = QpState::kRtr;
  REQUIRE(f.hca->modify_qp(f.qp.qpn, kRcRts | qa::kCurState, a).ok());
  CHECK(f.state() == QpState::kRts);
  // RTS->SQD takes only EN_SQD_ASYNC_NOTIFY.
  f.refused(qa::kState | qa::kTimeout, to(QpState::kSqd), prm::kBadParam, kNotAllowed | qa::kTimeout);
}

TEST_CASE("simhca QP: UD, GSI and SMI walk with their own attribute sets", "[simhca][qp]") {
  for (QpType t : {QpType::kUd, QpType::kGsi, QpType::kSmi}) {
    CAPTURE(static_cast<int>(t));
    QpFixture f(t);
    QpAttr a = to(QpState::kInit);
    a.port = 1;
    a.qkey = 0x80010000;  // the well-known GSI Q_Key
    uint32_t mask = qa::kState | qa::kPkeyIndex | qa::kQkey;
    if (t == QpType::kUd) {
      // UD needs PORT too; SMI/GSI have theirs from creation and refuse it.
      f.refused(mask, a, prm::kBadParam, kMissing | qa::kPort);
      mask |= qa::kPort;
    } else {
      f.refused(mask | qa::kPort, a, prm::kBadParam, kNotAllowed | qa::kPort);
    }
    REQUIRE(f.hca->modify_qp(f.qp.qpn, mask, a).ok());
    CHECK(f.hca->query_qp(f.qp.qpn)->attr.qkey == 0x80010000);
    // UD/SMI/GSI INIT->RTR takes no path; an AV is refused.
    f.refused(qa::kState | qa::kAv, rc_rtr(), prm::kBadParam, kNotAllowed | qa::kAv);
    REQUIRE(f.hca->modify_qp(f.qp.qpn, qa::kState, to(QpState::kRtr)).ok());
    f.refused(qa::kState, to(QpState::kRts), prm::kBadParam, kMissing | qa::kSqPsn);
    QpAttr rts = to(QpState::kRts);
    rts.sq_psn = 7;
    REQUIRE(f.hca->modify_qp(f.qp.qpn, qa::kState | qa::kSqPsn, rts).ok());
    CHECK(f.state() == QpState::kRts);
    CHECK(f.hca->query_qp(f.qp.qpn)->attr.port == 1);
  }
}

TEST_CASE("simhca QP: any state to ERR and to RESET; RESET to ERR", "[simhca][qp]") {
  QpFixture f;
  REQUIRE(f.hca->modify_qp(f.qp.qpn, qa::kState, to(QpState::kErr)).ok());  // RESET->ERR
  CHECK(f.state() == QpState::kErr);
  REQUIRE(f.hca->modify_qp(f.qp.qpn, qa::kState, to(QpState::kErr)).ok());  // ERR->ERR
  REQUIRE(f.hca->modify_qp(f.qp.qpn, qa::kState, to(QpState::kReset)).ok());
  REQUIRE(f.hca->modify_qp(f.qp.qpn, kRcInit, rc_init()).ok());
  REQUIRE(f.hca->modify_qp(f.qp.qpn, qa::kState, to(QpState::kReset)).ok());  // INIT->RESET
  CHECK(f.state() == QpState::kReset);
  // Destroy works in any state (IBA 11.2.4.4); the number is then gone.
  REQUIRE(f.hca->modify_qp(f.qp.qpn, kRcInit, rc_init()).ok());
  const uint32_t qpn = f.qp.qpn;
  REQUIRE(f.hca->destroy_qp(f.qp).ok());
  CHECK(f.hca->modify_qp(qpn, qa::kState, to(QpState::kErr)).error().code == ENOENT);
}

// hca::Hca::modify_qp_chain_async (the CM's INIT->RTR->RTS, issue 33): the
// three MODIFY_QPs go to the device together, one CMD_DOORBELL write for
// all (docs/simhca.md §5.1: rung slots run in increasing order), and the QP
// ends in RTS; a step the device refuses fails the chain with that step's
// error, and the steps after it do not apply.
namespace {
Result<void> run_chain(QpFixture& f, std::vector<QpChange> steps) {
  std::optional<Result<void>> got;
  f.hca->modify_qp_chain_async(f.qp.qpn, std::move(steps), [&](Result<void> r) { got = std::move(r); });
  for (int i = 0; i < 500 && !got; ++i) f.io.run_one_for(std::chrono::milliseconds(20));
  REQUIRE(got);
  return std::move(*got);
}
}  // namespace

TEST_CASE("simhca QP: INIT, RTR and RTS chained take one doorbell and reach RTS", "[simhca][qp][chain]") {
  QpFixture f;
  const uint64_t bells = f.hca->commands().stats().doorbells;
  REQUIRE(run_chain(f, {{kRcInit, rc_init()}, {kRcRtr, rc_rtr()}, {kRcRts, rc_rts()}}).ok());
  CHECK(f.hca->commands().stats().doorbells == bells + 1);
  CHECK(f.state() == QpState::kRts);
}

TEST_CASE("simhca QP: a chain whose RTR is refused ends in INIT with the RTR's error", "[simhca][qp][chain]") {
  QpFixture f;
  QpAttr bad = rc_rtr();
  bad.path_mtu = 6;  // no such MTU: BAD_PARAM
  auto r = run_chain(f, {{kRcInit, rc_init()}, {kRcRtr, bad}, {kRcRts, rc_rts()}});
  REQUIRE_FALSE(r.ok());
  // The RTR's BAD_PARAM, not the RTS's BAD_RES_STATE (refused from INIT).
  CHECK(r.error().message.find("BAD_PARAM") != std::string::npos);
  CHECK(f.state() == QpState::kInit);
}
