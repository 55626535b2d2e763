// docs/simhca.md §8: IBA 10.3.1 (QP states) and 11.2.4.2 (Modify QP). The
// table is the one Linux's ib_modify_qp_is_ok() encodes (drivers/infiniband/
// core/verbs.c), restricted to the RC, UC, UD, SMI and GSI types, and the
// raw Ethernet QP (§16.5; Linux's IB_QPT_RAW_PACKET rows).
#include "sim/simhca/qp_state.hpp"

namespace openib::simhca {

namespace {

using namespace attr;

constexpr int kTypes = 6;   // RC UC UD SMI GSI RAW
constexpr int kStates = 7;  // RESET .. ERR

struct Rule {
  bool valid = false;
  uint32_t req[kTypes] = {};
  uint32_t opt[kTypes] = {};
};

// Per-type masks, in order RC, UC, UD, SMI, GSI, RAW (left out: 0).
struct Masks {
  uint32_t m[kTypes];
};

constexpr Rule rule(Masks req, Masks opt) {
  Rule r;
  r.valid = true;
  for (int t = 0; t < kTypes; ++t) {
    r.req[t] = req.m[t];
    r.opt[t] = opt.m[t];
  }
  return r;
}
constexpr Rule kValid = rule({}, {});

struct Table {
  Rule r[kStates][kStates];
};

constexpr Table make_table() {
  Table t{};
  // Any state -> RESET and -> ERR take no attributes (IBA 10.3.1).
  for (int s = 0; s < kStates; ++s) {
    t.r[s][kReset] = kValid;
    t.r[s][kErr] = kValid;
  }
  // §8.2 table rows.
  t.r[kReset][kInit] = rule(
      {{kPkeyIndex | kPort | kAccessFlags, kPkeyIndex | kPort | kAccessFlags,
        kPkeyIndex | kPort | kQkey, kPkeyIndex | kQkey, kPkeyIndex | kQkey}},
      {});
  t.r[kInit][kInit] = rule(
      {}, {{kPkeyIndex | kPort | kAccessFlags, kPkeyIndex | kPort | kAccessFlags,
            kPkeyIndex | kPort | kQkey, kPkeyIndex | kQkey, kPkeyIndex | kQkey}});
  t.r[kInit][kRtr] = rule(
      {{kAv | kPathMtu | kDestQpn | kRqPsn | kMaxDestRdAtomic | kMinRnrTimer,
        kAv | kPathMtu | kDestQpn | kRqPsn, 0, 0, 0}},
      {{kAltPath | kAccessFlags | kPkeyIndex, kAltPath | kAccessFlags | kPkeyIndex,
        kPkeyIndex | kQkey, kPkeyIndex | kQkey, kPkeyIndex | kQkey}});
  t.r[kRtr][kRts] = rule(
      {{kTimeout | kRetryCnt | kRnrRetry | kSqPsn | kMaxQpRdAtomic, kSqPsn, kSqPsn, kSqPsn,
        kSqPsn}},
      {{kCurState | kAltPath | kAccessFlags | kMinRnrTimer | kPathMigState,
        kCurState | kAltPath | kAccessFlags | kPathMigState, kCurState | kQkey,
        kCurState | kQkey, kCurState | kQkey}});
  t.r[kRts][kRts] = rule(
      {}, {{kCurState | kAccessFlags | kAltPath | kPathMigState | kMinRnrTimer,
            kCurState | kAccessFlags | kAltPath | kPathMigState, kCurState | kQkey,
            kCurState | kQkey, kCurState | kQkey}});
  t.r[kRts][kSqd] = rule({}, {{kEnSqdAsyncNotify, kEnSqdAsyncNotify, kEnSqdAsyncNotify,
                               kEnSqdAsyncNotify, kEnSqdAsyncNotify}});
  // §16.5: the raw QP's port is fixed at CREATE_QP; INIT may repeat it
  // (Linux requires IB_QP_PORT here), nothing else is taken: no P_Key,
  // Q_Key, path or PSN.
  t.r[kReset][kInit].opt[kQpRaw] = kPort;
  t.r[kInit][kInit].opt[kQpRaw] = kPort;
  t.r[kSqd][kRts] = t.r[kRtr][kRts];
  for (int ty = 0; ty < kTypes; ++ty) t.r[kSqd][kRts].req[ty] = 0;
  t.r[kSqd][kSqd] = rule(
      {}, {{kPort | kAv | kTimeout | kRetryCnt | kRnrRetry | kMaxQpRdAtomic | kMaxDestRdAtomic |
                kAltPath | kAccessFlags | kPkeyIndex | kMinRnrTimer | kPathMigState,
            kAv | kAltPath | kAccessFlags | kPkeyIndex | kPathMigState, kPkeyIndex | kQkey,
            kPkeyIndex | kQkey, kPkeyIndex | kQkey}});
  // SQE -> RTS: not for RC, which never enters SQE (IBA 10.3.1).
  t.r[kSqe][kRts] = rule({}, {{0, kCurState | kAccessFlags, kCurState | kQkey,
                               kCurState | kQkey, kCurState | kQkey}});
  return t;
}

constexpr Table kTable = make_table();

bool in_range(uint8_t type, uint8_t cur, uint8_t next) {
  return type < kTypes && cur < kStates && next < kStates;
}

// §7.7 value checks; returns the offending attribute bit or 0.
uint32_t bad_value(uint8_t type, uint32_t mask, const QpAttrs& a, const QpLimits& lim) {
  if ((mask & kState) && a.state >= kStates) return kState;
  if ((mask & kPort) && (a.port < 1 || a.port > lim.num_ports)) return kPort;
  if ((mask & kPathMtu) && (a.path_mtu < 1 || a.path_mtu > lim.max_mtu)) return kPathMtu;
  if ((mask & kPkeyIndex) && a.pkey_index >= lim.pkey_table_len) return kPkeyIndex;
  if ((mask & kAccessFlags) && (a.access & 0xf0)) return kAccessFlags;
  if ((mask & kDestQpn) && a.dest_qpn >= (1u << 24)) return kDestQpn;
  if ((mask & kRqPsn) && a.rq_psn >= (1u << 24)) return kRqPsn;
  if ((mask & kSqPsn) && a.sq_psn >= (1u << 24)) return kSqPsn;
  if ((mask & kTimeout) && a.timeout > 31) return kTimeout;
  if ((mask & kRetryCnt) && a.retry_cnt > 7) return kRetryCnt;
  if ((mask & kRnrRetry) && a.rnr_retry > 7) return kRnrRetry;
  if ((mask & kMinRnrTimer) && a.min_rnr_timer > 31) return kMinRnrTimer;
  if ((mask & kMaxQpRdAtomic) && a.max_rd_atomic > lim.max_rd_atomic) return kMaxQpRdAtomic;
  if ((mask & kMaxDestRdAtomic) && a.max_dest_rd_atomic > lim.max_dest_rd_atomic)
    return kMaxDestRdAtomic;
  if (mask & kAv) {
    const Av& av = a.av;
    // §7.6: a connected QP's path is unicast (IBA 7.7 LID ranges).
    const bool connected = type == kQpRc || type == kQpUc;
    // §16: on an Ethernet port the GRH addresses the packet; the DLID is not used.
    if (lim.ethernet && (!av.grh() || (connected && is_roce_multicast_gid(av.dgid)))) return kAv;
    if (!lim.ethernet && (av.dlid == 0 || av.dlid == 0xffff || (connected && av.dlid > 0xbfff))) return kAv;
    if (av.sl > 15 || av.src_path_bits > 127 || av.static_rate > 18) return kAv;
    if (av.port != 0 && av.port > lim.num_ports) return kAv;
    if (av.flags & 0xfe) return kAv;
    if (av.grh() && (av.flow_label >= (1u << 20) || av.sgid_index >= lim.gid_table_len))
      return kAv;
  }
  return 0;
}

}  // namespace

bool transition_legal(uint8_t type, uint8_t cur, uint8_t next) {
  if (!in_range(type, cur, next)) return false;
  if (type == kQpRc && cur == kSqe && next == kRts) return false;
  return kTable.r[cur][next].valid;
}

uint32_t required_attrs(uint8_t type, uint8_t cur, uint8_t next) {
  return in_range(type, cur, next) ? kTable.r[cur][next].req[type] : 0;
}

uint32_t optional_attrs(uint8_t type, uint8_t cur, uint8_t next) {
  return in_range(type, cur, next) ? kTable.r[cur][next].opt[type] : 0;
}

// §8.3, steps 2 to 9, in order.
Verdict check_modify(uint8_t type, uint8_t cur, const ModifyQp& m, const QpLimits& lim) {
  if (m.mask & ~kAll) return {kBadParam, kSynReservedBits};
  if (m.mask & (kAltPath | kPathMigState | kCap)) return {kNotSupported, m.mask & (kAltPath | kPathMigState | kCap)};
  if ((m.mask & kCurState) && m.attrs.cur_state != cur) return {kBadResState, kCurState};
  if ((m.mask & kState) && m.attrs.state >= kStates) return {kBadParam, kSynBadValue | kState};
  const uint8_t next = target_state(cur, m);
  if (!transition_legal(type, cur, next)) return {kBadResState, 0};
  const uint32_t req = required_attrs(type, cur, next);
  const uint32_t opt = optional_attrs(type, cur, next);
  const uint32_t given = m.mask & ~kState;
  if (uint32_t missing = req & ~given) return {kBadParam, kSynMissing | missing};
  if (uint32_t extra = given & ~(req | opt)) return {kBadParam, kSynNotAllowed | extra};
  if (uint32_t bad = bad_value(type, m.mask, m.attrs, lim)) return {kBadParam, kSynBadValue | bad};
  return {};
}

void apply_modify(QpAttrs& s, const ModifyQp& m, uint8_t fixed_port) {
  const QpAttrs& a = m.attrs;
  const uint8_t next = target_state(s.state, m);
  if (next == kReset) {  // IBA 10.3.1: Reset returns the QP to its created state
    s = QpAttrs{};
    s.port = fixed_port;
    return;
  }
  if (m.mask & kPort) s.port = a.port;
  if (m.mask & kPathMtu) s.path_mtu = a.path_mtu;
  if (m.mask & kPkeyIndex) s.pkey_index = a.pkey_index;
  if (m.mask & kAccessFlags) s.access = a.access & 0x0e;
  if (m.mask & kQkey) s.qkey = a.qkey;
  if (m.mask & kDestQpn) s.dest_qpn = a.dest_qpn;
  if (m.mask & kRqPsn) s.rq_psn = a.rq_psn;
  if (m.mask & kSqPsn) s.sq_psn = a.sq_psn;
  if (m.mask & kTimeout) s.timeout = a.timeout;
  if (m.mask & kRetryCnt) s.retry_cnt = a.retry_cnt;
  if (m.mask & kRnrRetry) s.rnr_retry = a.rnr_retry;
  if (m.mask & kMinRnrTimer) s.min_rnr_timer = a.min_rnr_timer;
  if (m.mask & kMaxQpRdAtomic) s.max_rd_atomic = a.max_rd_atomic;
  if (m.mask & kMaxDestRdAtomic) s.max_dest_rd_atomic = a.max_dest_rd_atomic;
  if (m.mask & kAv) s.av = a.av;
  s.state = next;
  s.cur_state = 0;
  s.sqd_notify = 0;  // reported as sq_draining: draining completes at once (§8.1)
}

const char* qp_state_name(uint8_t s) {
  static const char* const names[] = {"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"};
  return s < kStates ? names[s] : "?";
}

}  // namespace openib::simhca
