// The CM state machine (engine.hpp; IBA 12.9 and docs/cm.md "State machine
// (src/cm/engine)"). Every id (connection, listener, SIDR request) is one
// compact Conn in one table; timers are deadlines in one ordered set under
// one asio timer; a Conn keeps the last MAD it sent only while it may have
// to send it again (retransmission, or the answer to a duplicate).
#include "cm/engine.hpp"

#include <sys/random.h>

#include <algorithm>
#include <bit>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <unordered_map>

namespace openib::cm {

using mad::get8;
using mad::get16;
using mad::put64;

namespace {

using Clock = std::chrono::steady_clock;

enum class Kind : uint8_t { kConn, kListen, kSidrOut, kSidrIn };

// Conn::flags
constexpr uint8_t kActive = 1;     // we sent the REQ (or SIDR_REQ)
constexpr uint8_t kGone = 2;       // destroy()ed: no more events; erased when it settles
constexpr uint8_t kLinger = 4;     // idle after a REJ, kept to answer a duplicate REQ with it
constexpr uint8_t kQpnBound = 8;   // local_qpn is in Impl::local_qpn_
constexpr uint8_t kUc = 16;        // transport UC (else RC)
constexpr uint8_t kExpireNext = 32;  // passive, unanswered: the armed deadline is its expiry (EngineLimits)
constexpr uint8_t kSidrSpace = 64;   // listener: of SIDR_REQs (else of REQs)
constexpr uint64_t kExactMask = ~uint64_t{0};

// IBA 12.7.34 / 9.7.6.1.3 and Linux's cm_ack_timeout(): the local ACK
// timeout covering twice the packet lifetime plus the target's ACK delay,
// 4.096 us * 2^t each: the smallest t with 2^t >= 2^(pl+1) + 2^delay.
uint8_t ack_timeout(uint8_t ack_delay, uint8_t packet_life) {
  uint64_t need = (uint64_t{1} << std::min<uint8_t>(packet_life + 1, 40)) + (uint64_t{1} << std::min<uint8_t>(ack_delay, 40));
  uint8_t t = 0;
  while (t < 31 && (uint64_t{1} << t) < need) ++t;
  return t;
}

std::chrono::nanoseconds ns(uint8_t t) { return std::chrono::nanoseconds(cm_timeout_ns(t)); }

template <std::size_t N>
Result<void> copy_pdata(std::array<uint8_t, N>& out, Bytes in, const char* what) {
  if (in.size() > N) return err(EINVAL, "cm: {} private data is {} bytes, at most {}", what, in.size(), N);
  if (!in.empty()) std::memcpy(out.data(), in.data(), in.size());
  return {};
}

template <std::size_t N>
Bytes as_bytes(const std::array<uint8_t, N>& a, std::size_t n = N) {
  return Bytes(reinterpret_cast<const std::byte*>(a.data()), std::min(n, N));
}

struct PairHash {
  std::size_t operator()(const std::pair<uint64_t, uint64_t>& k) const {
    return std::hash<uint64_t>()(k.first * 0x9e3779b97f4a7c15ull ^ k.second);
  }
};

}  // namespace

// One id. Field meanings depend on kind; kept small (docs/cm.md "Memory").
struct Conn {
  uint32_t id = 0;
  Kind kind = Kind::kConn;
  State state = State::kIdle;
  uint8_t flags = 0;
  uint8_t retries_left = 0, max_retries = 0;
  uint8_t peer_cm_timeout = 0;  // how long the peer may take to answer us (our resend period)
  uint8_t my_cm_timeout = 0;    // how long we promised to take (auto MRA at half of it)
  uint8_t packet_life = 0;
  uint8_t ack_timeout = 0;      // the QP's local ACK timeout; also sets timewait (IBA 12.9.8.2)
  uint8_t path_mtu = 0, resp_res = 0, init_depth = 0, retry_cnt = 0, rnr_retry = 0;
  uint8_t target_ack_delay = 0;
  bool srq = false;
  uint16_t pkey = 0;
  uint32_t remote_id = 0;
  uint32_t local_qpn = 0, remote_qpn = 0, sq_psn = 0, rq_psn = 0;
  uint32_t listen_id = 0;
  uint64_t remote_guid = 0;     // listener: the service ID mask
  uint64_t service_id = 0;
  uint64_t owner = 0;
  Clock::time_point deadline{};
  mad::MadAddress peer;
  CmPath path;                  // our view: local_* is us, remote_* the peer
  std::unique_ptr<mad::Mad> last;  // the last MAD sent, while it may be sent again
};

struct Engine::Impl {
  Impl(Engine& e, boost::asio::io_context& io, Env env, PortInfo port)
      : self(e), io(io), env(std::move(env)), port(port), timer(io) {}

  Engine& self;
  boost::asio::io_context& io;
  Env env;
  PortInfo port;
  boost::asio::steady_timer timer;
  Clock::time_point armed{Clock::time_point::max()};
  std::shared_ptr<bool> alive = std::make_shared<bool>(true);
  uint32_t tid_seq = 0;

  std::unordered_map<uint32_t, Conn> conns;
  std::set<std::pair<Clock::time_point, uint32_t>> timers;
  // (remote comm ID, remote CA GUID) -> id: duplicate REQs (IBA 12.9.5.1);
  // SIDR: (request ID, peer LID | 1 << 32) -> id.
  std::unordered_map<std::pair<uint64_t, uint64_t>, uint32_t, PairHash> remote;
  // (remote QPN, remote CA GUID) -> id of a connection that is not yet in timewait: stale REQs.
  std::unordered_map<std::pair<uint64_t, uint64_t>, uint32_t, PairHash> remote_qpn;
  std::unordered_map<uint32_t, uint32_t> local_qpn;  // local QPN -> id, until timewait exit
  // Listeners, one space for REQs and one for SIDR_REQs (engine.hpp
  // listen()): exact service IDs by hash; masked ones in a short list.
  struct Listeners {
    std::unordered_map<uint64_t, uint32_t> exact;
    std::vector<uint32_t> masked;
  };
  std::array<Listeners, 2> spaces;
  EngineLimits limits;

  Counters& ctr() { return self.counters_; }

  // ---- ids and randomness (IBA 12.6.3: comm IDs; unguessable here) ----
  void random(void* out, uint32_t n) {
    if (env.random) return env.random(n, static_cast<uint8_t*>(out));
    auto* p = static_cast<uint8_t*>(out);
    while (n > 0) {
      ssize_t r = getrandom(p, n, 0);
      if (r <= 0) continue;
      p += r;
      n -= static_cast<uint32_t>(r);
    }
  }
  uint32_t new_id() {
    for (;;) {
      uint32_t v = 0;
      random(&v, sizeof v);
      if (v != 0 && !conns.contains(v)) return v;
    }
  }
  uint32_t new_psn() {
    uint32_t v = 0;
    random(&v, sizeof v);
    return v & 0xffffff;
  }
  Conn* find(uint32_t id) {
    auto it = conns.find(id);
    return it == conns.end() ? nullptr : &it->second;
  }
  Conn& add(Kind k, uint64_t owner) {
    uint32_t id = new_id();
    Conn& c = conns[id];
    c.id = id;
    c.kind = k;
    c.owner = owner;
    return c;
  }

  // ---- timers ----
  void arm(Conn& c, std::chrono::nanoseconds d) {
    disarm(c);
    c.deadline = Clock::now() + d;
    timers.emplace(c.deadline, c.id);
    if (c.deadline < armed) rearm();
  }
  void disarm(Conn& c) {
    if (c.deadline == Clock::time_point{}) return;
    timers.erase({c.deadline, c.id});
    c.deadline = {};
  }
  void rearm() {
    if (timers.empty()) {
      armed = Clock::time_point::max();
      timer.cancel();
      return;
    }
    armed = timers.begin()->first;
    timer.expires_at(armed);
    timer.async_wait([this, alive = std::weak_ptr<bool>(alive)](const boost::system::error_code& ec) {
      if (ec || alive.expired()) return;
      on_timer();
    });
  }
  void on_timer() {
    auto now = Clock::now();
    while (!timers.empty() && timers.begin()->first <= now) {
      uint32_t id = timers.begin()->second;
      timers.erase(timers.begin());
      if (Conn* c = find(id)) {
        c->deadline = {};
        expire(*c);
      }
    }
    rearm();
  }
  std::chrono::nanoseconds resend_wait(const Conn& c) const {
    return ns(c.peer_cm_timeout) + 2 * ns(c.packet_life);  // IBA 12.7.31/12.7.35; Linux cm.c
  }

  // ---- sending ----
  void send_to(const mad::MadAddress& to, const Message& m) {
    uint64_t tid = (uint64_t{++tid_seq} << 32) | 0;
    auto bytes = encode(m, tid);
    send_bytes(to, std::move(bytes), attr_id_of(m));
  }
  void send_bytes(const mad::MadAddress& to, mad::ByteVec bytes, uint16_t attr) {
    ctr().sent[attr & 0x1f]++;
    auto r = env.send(to, std::move(bytes));
    if (!r) ctr().send_errors++;
  }
  // Sends m for c; keep: remember it for resending.
  void send(Conn& c, const Message& m, bool keep) {
    uint64_t tid = (uint64_t{++tid_seq} << 32) | c.id;
    auto bytes = encode(m, tid);
    if (keep) {
      if (!c.last) c.last = std::make_unique<mad::Mad>();
      std::copy_n(bytes.begin(), std::min(bytes.size(), mad::kMadBytes), c.last->begin());
    } else {
      c.last.reset();
    }
    send_bytes(c.peer, std::move(bytes), attr_id_of(m));
  }
  void resend(Conn& c) {
    if (!c.last) return;
    mad::ByteVec b(c.last->begin(), c.last->end());
    send_bytes(c.peer, std::move(b), get16(Bytes(*c.last), 16));
  }
  void send_rej(Conn& c, RejReason reason, MsgRejected what, Bytes ari, Bytes pdata, bool keep) {
    Rej r;
    r.local_comm_id = c.id;
    r.remote_comm_id = c.remote_id;
    r.message_rejected = what;
    r.reason = reason;
    std::size_t n = std::min(ari.size(), kAriBytes);
    if (n) std::memcpy(r.ari.data(), ari.data(), n);
    r.ari_length = static_cast<uint8_t>(n);
    (void)copy_pdata(r.private_data, pdata.subspan(0, std::min(pdata.size(), pdata::kRej)), "REJ");
    send(c, r, keep);
  }
  void send_rej_timeout(Conn& c, MsgRejected what) {
    // IBA 12.6.7.2: reason Timeout carries the rejecting CA's GUID as ARI.
    std::array<std::byte, 8> g{};
    put64(g, 0, port.ca_guid);
    send_rej(c, RejReason::kTimeout, what, g, {}, false);
  }

  // ---- bindings ----
  void bind_qpn(Conn& c) {
    local_qpn[c.local_qpn] = c.id;
    c.flags |= kQpnBound;
  }
  void unbind_qpn(Conn& c) {
    if (!(c.flags & kQpnBound)) return;
    auto it = local_qpn.find(c.local_qpn);
    if (it != local_qpn.end() && it->second == c.id) local_qpn.erase(it);
    c.flags &= ~kQpnBound;
  }
  void bind_remote(Conn& c) {
    remote[{c.remote_id, c.remote_guid}] = c.id;
    remote_qpn[{c.remote_qpn, c.remote_guid}] = c.id;
  }
  void unbind_remote_qpn(Conn& c) {
    auto it = remote_qpn.find({c.remote_qpn, c.remote_guid});
    if (it != remote_qpn.end() && it->second == c.id) remote_qpn.erase(it);
  }
  void unbind_remote(Conn& c) {
    unbind_remote_qpn(c);
    std::pair<uint64_t, uint64_t> key{c.remote_id, c.remote_guid};
    if (c.kind == Kind::kSidrIn) key = {c.remote_id, c.remote_guid | (uint64_t{1} << 32)};
    auto it = remote.find(key);
    if (it != remote.end() && it->second == c.id) remote.erase(it);
  }
  void erase(Conn& c) {
    disarm(c);
    unbind_qpn(c);
    unbind_remote(c);
    if (c.kind == Kind::kListen) {
      Listeners& L = spaces[(c.flags & kSidrSpace) ? 1 : 0];
      if (c.remote_guid == kExactMask) {
        L.exact.erase(c.service_id);
      } else {
        std::erase(L.masked, c.id);
      }
    }
    conns.erase(c.id);
  }
  // Idle: nothing more to send or answer. A destroyed id goes; a live one
  // stays until destroy() (its owner still names it).
  void to_idle(Conn& c) {
    c.state = State::kIdle;
    c.flags &= ~kLinger;
    disarm(c);
    c.last.reset();
    unbind_qpn(c);
    unbind_remote(c);
    if (c.flags & kGone) erase(c);
  }
  // Idle after we sent a REJ (kept in c.last): a duplicate of the message
  // it rejected gets it again until the peer's retries are over.
  void to_linger(Conn& c) {
    c.state = State::kIdle;
    c.flags |= kLinger;
    unbind_qpn(c);
    unbind_remote_qpn(c);
    arm(c, (resend_wait(c) + ns(c.my_cm_timeout)) * 2);
  }
  // IBA 12.9.8.2 / 12.4: timewait lasts the local ACK timeout (twice the
  // packet lifetime plus the target ACK delay; Linux cm_enter_timewait()).
  // The local QPN stays bound: connect()/accept() with it are EBUSY.
  void enter_timewait(Conn& c) {
    c.state = State::kTimewait;
    c.last.reset();
    unbind_remote_qpn(c);
    arm(c, ns(c.ack_timeout));
  }

  // ---- events ----
  Event event(const Conn& c, EventType t, uint16_t attr, const Message* msg = nullptr, Bytes pdata = {}) const {
    Event e;
    e.msg = msg;
    e.private_data = pdata;
    e.type = t;
    e.id = c.id;
    e.owner = c.owner;
    e.attr_id = attr;
    e.peer = c.peer;
    e.service_id = c.service_id;
    e.remote_comm_id = c.remote_id;
    e.remote_ca_guid = c.remote_guid;
    e.remote_qpn = c.remote_qpn;
    e.listen_id = c.listen_id;
    return e;
  }
  void emit(uint32_t id, const Event& e) {
    Conn* c = find(id);
    if (!c || (c->flags & kGone) || !env.event) return;
    env.event(e);
  }

  // ---- timer expiry ----
  void expire(Conn& c) {
    switch (c.state) {
      case State::kReqSent:
      case State::kMraReqRcvd:
      case State::kRepSent:
      case State::kMraRepRcvd:
      case State::kDreqSent:
      case State::kSidrReqSent:
        return retry(c);
      case State::kReqRcvd:  // IBA 12.6.6: MRA when the consumer is slow
        if (c.flags & kExpireNext) return expire_passive(c);
        auto_mra(c, MsgMraed::kReq, State::kMraReqSent);
        c.flags |= kExpireNext;
        return arm(c, passive_bound(c) - ns(c.my_cm_timeout) / 2);
      case State::kMraReqSent:
        if (c.flags & kExpireNext) expire_passive(c);
        return;
      case State::kSidrReqRcvd:
        return expire_passive(c);
      case State::kRepRcvd:
        return auto_mra(c, MsgMraed::kRep, State::kMraRepSent);
      case State::kTimewait: {
        uint32_t id = c.id;
        bool gone = c.flags & kGone;
        Event e = event(c, EventType::kTimewaitExit, 0);
        to_idle(c);
        if (!gone) emit(id, e);
        return;
      }
      case State::kIdle:  // linger over
        if (c.flags & kLinger) to_idle(c);
        return;
      default:
        return;
    }
  }
  // How long a passive id may wait for its consumer: what the peer waits
  // for us (its Remote CM Response Timeout, doubled by our MRA's service
  // timeout, IBA 12.6.6), times its Max CM Retries + 1 (IBA 12.6.5), at
  // most EngineLimits::passive_timeout_cap; a SIDR_REQ states neither: the cap.
  std::chrono::nanoseconds passive_bound(const Conn& c) const {
    if (c.kind == Kind::kSidrIn) return limits.passive_timeout_cap;
    auto per_try = ns(static_cast<uint8_t>(std::min(31, c.my_cm_timeout + 1))) + ns(c.packet_life);
    std::chrono::nanoseconds wait = per_try * (int64_t{c.max_retries} + 1);
    return std::min(wait, limits.passive_timeout_cap);
  }
  // The consumer never answered: the peer hears REJ(Timeout) (IBA 12.6.7.2
  // reason 4; SIDR_REP "rejected", IBA 12.11.2), the owner kTimeout (attr REQ
  // or SIDR_REQ), and the id is idle (gone, if already destroyed).
  void expire_passive(Conn& c) {
    ctr().passive_expired++;
    c.flags &= ~kExpireNext;
    uint32_t id = c.id;
    Event e = event(c, EventType::kTimeout, c.kind == Kind::kSidrIn ? attr::kSidrReq : attr::kReq);
    if (c.kind == Kind::kSidrIn) {
      SidrRep p;
      p.request_id = c.remote_id;
      p.status = SidrStatus::kRejected;
      p.service_id = c.service_id;
      send(c, p, false);
    } else {
      send_rej_timeout(c, MsgRejected::kReq);
    }
    to_idle(c);
    emit(id, e);
  }
  void auto_mra(Conn& c, MsgMraed what, State next) {
    Mra m;
    m.local_comm_id = c.id;
    m.remote_comm_id = c.remote_id;
    m.message_mraed = what;
    // The service timeout asked for: twice what we promised (the peer
    // resends after it, and a repeat REQ/REP gets this MRA again).
    m.service_timeout = static_cast<uint8_t>(std::min(31, c.my_cm_timeout + 1));
    c.state = next;
    ctr().mra_sent_auto++;
    send(c, m, true);
  }
  void retry(Conn& c) {
    if (c.retries_left > 0) {
      c.retries_left--;
      ctr().retries++;
      if (c.state == State::kMraReqRcvd) c.state = State::kReqSent;
      if (c.state == State::kMraRepRcvd) c.state = State::kRepSent;
      resend(c);
      arm(c, c.kind == Kind::kSidrOut ? ns(c.peer_cm_timeout) : resend_wait(c));
      return;
    }
    ctr().timeouts++;
    uint32_t id = c.id;
    uint16_t attr = c.last ? get16(Bytes(*c.last), 16) : 0;
    Event e = event(c, EventType::kTimeout, attr);
    switch (c.state) {
      case State::kReqSent:  // IBA 12.9.6: REJ(Timeout) to the peer, then idle
        send_rej_timeout(c, MsgRejected::kReq);
        to_idle(c);
        break;
      case State::kRepSent:
        send_rej_timeout(c, MsgRejected::kRep);
        to_idle(c);
        break;
      case State::kDreqSent:  // IBA 12.9.7: no DREP: timewait anyway
        enter_timewait(c);
        break;
      default:
        to_idle(c);
    }
    emit(id, e);
  }

  // ---- received messages ----
  void on_req(const mad::MadAddress& from, const Req& q, const Message& msg);
  void on_rep(const Rep& p, const Message& msg);
  void on_rtu(const Rtu& r, const Message& msg);
  void on_mra(const Mra& m, const Message& msg);
  void on_rej(const Rej& r, const Message& msg);
  void on_dreq(const mad::MadAddress& from, const Dreq& d, const Message& msg);
  void on_drep(const Drep& d, const Message& msg);
  void on_sidr_req(const mad::MadAddress& from, const SidrReq& q, const Message& msg);
  void on_sidr_rep(const SidrRep& p, const Message& msg);
  void on_lap(const mad::MadAddress& from, const Lap& l, const Message& msg);

  // The listener of a REQ (sidr false) or SIDR_REQ: the exact one by
  // hash, else the first masked one that matches (listen() keeps them
  // disjoint).
  Conn* listener_for(uint64_t service_id, bool sidr) {
    Listeners& L = spaces[sidr ? 1 : 0];
    if (auto it = L.exact.find(service_id); it != L.exact.end()) return find(it->second);
    for (uint32_t id : L.masked) {
      Conn& c = conns.at(id);
      if (((service_id ^ c.service_id) & c.remote_guid) == 0) return &c;
    }
    return nullptr;
  }
  // The connection a message names by our comm ID (its remote comm ID), if
  // its own comm ID is the peer's: both must match once the peer's is known
  // (as Linux's cm_acquire_id); before that (REQ sent, no REP or MRA yet)
  // only a REP, an MRA or a REJ of our REQ can come, and it may carry any
  // (a REJ with no listener behind it carries 0; cm_acquire_rejected_id).
  // So a REJ, DREQ, DREP or RTU of comm ID 0 names nothing established.
  Conn* conn_for(uint32_t our_id, uint32_t their_id, bool first_answer = false) {
    Conn* c = find(our_id);
    if (!c || c->kind != Kind::kConn) return nullptr;
    if (c->remote_id != 0) return c->remote_id == their_id ? c : nullptr;
    const bool req_outstanding = (c->flags & kActive) && (c->state == State::kReqSent || c->state == State::kMraReqRcvd);
    return first_answer && req_outstanding ? c : nullptr;
  }
  // IBA 12.9.8.3.1: only the old connection's peer can find it stale: the
  // REQ must come from the peer's port as we know it (source LID, with its
  // path bits, as the connection's QP1 address or path named it; source GID
  // when the peer is behind a router or a GRH came).
  static bool from_peer(const Conn& old, const mad::MadAddress& from) {
    if (from.lid != old.peer.lid && from.lid != old.path.remote_lid) return false;
    if (old.peer.grh && !from.grh) return false;
    if (from.grh && from.gid != old.peer.gid && from.gid != old.path.remote_gid) return false;
    return true;
  }
  void drop_unknown() { ctr().dropped_unknown_id++; }
  void drop_state() { ctr().dropped_bad_state++; }
  void reply_rej(const mad::MadAddress& from, const Req& q, RejReason reason) {
    Rej r;
    r.local_comm_id = 0;
    r.remote_comm_id = q.local_comm_id;
    r.message_rejected = MsgRejected::kReq;
    r.reason = reason;
    send_to(from, r);
  }
  // RoCE (IBA Annex A17.4): the MAD's GRH source is the sender's own IP
  // address, which the network routed; the REQ's Primary Local Port GID is
  // what the sender claims. A REQ naming another host's address as its
  // source (a local address of ours, to pass the RDMA CM's checks, or a
  // third host's) is refused with REJ 12 (IBA 12.6.7.2: primary remote
  // port GID rejected) and counted (docs/cm.md "Security").
  bool refused_foreign_gid(const mad::MadAddress& from, const Req& q) {
    if (!port.ethernet || (from.grh && from.gid == q.primary.local_gid)) return false;
    ctr().rej_foreign_gid++;
    reply_rej(from, q, RejReason::kInvalidGid);
    return true;
  }
  // Stale (IBA 12.9.8.3.1): the old connection is torn down from our side.
  void stale(Conn& old) {
    ctr().stale++;
    if (old.state != State::kEstablished) return;
    Dreq d;
    d.local_comm_id = old.id;
    d.remote_comm_id = old.remote_id;
    d.remote_qpn_eecn = old.remote_qpn;
    old.state = State::kDreqSent;
    old.retries_left = old.max_retries;
    send(old, d, true);
    arm(old, resend_wait(old));
    emit(old.id, event(old, EventType::kStale, attr::kReq));
  }
};

// ---- REQ (IBA 12.9.5.1 passive side) ----
void Engine::Impl::on_req(const mad::MadAddress& from, const Req& q, const Message& msg) {
  // Duplicate: the same REQ again (its sender's comm ID and CA GUID).
  if (auto it = remote.find({q.local_comm_id, q.local_ca_guid}); it != remote.end()) {
    ctr().duplicates++;
    Conn* c = find(it->second);
    if (c && (c->state == State::kMraReqSent || (c->flags & kLinger))) resend(*c);
    return;
  }
  if (refused_foreign_gid(from, q)) return;
  if (auto it = remote_qpn.find({q.local_qpn, q.local_ca_guid}); it != remote_qpn.end()) {
    reply_rej(from, q, RejReason::kStaleConn);
    Conn* old = find(it->second);
    // Not from the old connection's peer: someone who knows its CA GUID and
    // guessed its QPN. The REQ is refused (no new connection can take that
    // QPN of that CA anyway) and the old connection is left alone.
    if (old && !from_peer(*old, from)) {
      ctr().stale_foreign++;
      return;
    }
    if (old) stale(*old);
    return;
  }
  if (q.transport_service_type != transport::kRc && q.transport_service_type != transport::kUc) {
    reply_rej(from, q, RejReason::kInvalidTransportType);
    return;
  }
  Conn* l = listener_for(q.service_id, false);
  if (!l) {  // IBA 12.6.7.2: reason 8, invalid service ID
    ctr().rej_no_listener++;
    reply_rej(from, q, RejReason::kInvalidServiceId);
    return;
  }
  if (env.admit && !env.admit(l->owner, l->id)) {  // IBA 12.6.7.2: reason 3, no resources
    ctr().rej_no_resources++;
    reply_rej(from, q, RejReason::kNoResources);
    return;
  }
  uint64_t owner = l->owner;
  uint32_t listen_id = l->id;
  Conn& c = add(Kind::kConn, owner);
  c.listen_id = listen_id;
  c.state = State::kReqRcvd;
  c.peer = from;
  c.peer.qkey = mad::kGsiQkey;
  c.remote_id = q.local_comm_id;
  c.remote_guid = q.local_ca_guid;
  c.remote_qpn = q.local_qpn;
  c.service_id = q.service_id;
  // A REQ's (and a REP's) Starting PSN is the PSN its sender will receive
  // from: ours to send with (Linux's cm_req_handler/cm_rep_handler, and so
  // rxe and every rdma-core peer; docs/cm.md "PSNs"). Our own receive PSN
  // goes back in the REP.
  c.sq_psn = q.starting_psn;
  c.rq_psn = new_psn();
  c.peer_cm_timeout = q.local_cm_response_timeout;
  c.my_cm_timeout = q.remote_cm_response_timeout;
  c.max_retries = q.max_cm_retries;
  c.path_mtu = q.path_mtu;
  c.pkey = q.pkey;
  c.resp_res = q.initiator_depth;
  c.init_depth = q.responder_resources;
  c.retry_cnt = q.retry_count;
  c.rnr_retry = q.rnr_retry_count;
  c.srq = q.srq;
  if (q.transport_service_type == transport::kUc) c.flags |= kUc;
  // The REQ's path is the sender's view; ours swaps the ends.
  c.path = q.primary;
  std::swap(c.path.local_lid, c.path.remote_lid);
  std::swap(c.path.local_gid, c.path.remote_gid);
  // Linux cm_req_handler(): packet lifetime = REQ local ACK timeout - 1.
  c.packet_life = q.primary.local_ack_timeout > 0 ? q.primary.local_ack_timeout - 1 : 0;
  c.target_ack_delay = port.ca_ack_delay;
  c.ack_timeout = ack_timeout(c.target_ack_delay, c.packet_life);
  bind_remote(c);
  // The auto MRA at half the time we were given, or the expiry first.
  if (passive_bound(c) <= ns(c.my_cm_timeout) / 2) {
    c.flags |= kExpireNext;
    arm(c, passive_bound(c));
  } else {
    arm(c, ns(c.my_cm_timeout) / 2);
  }
  Event e = event(c, EventType::kReqReceived, attr::kReq, &msg, as_bytes(q.private_data));
  e.starting_psn = q.starting_psn;
  e.responder_resources = q.responder_resources;
  e.initiator_depth = q.initiator_depth;
  e.retry_count = q.retry_count;
  e.rnr_retry_count = q.rnr_retry_count;
  e.qp_type = q.transport_service_type;
  e.path_mtu = q.path_mtu;
  e.pkey = q.pkey;
  e.srq = q.srq;
  e.path = q.primary;
  emit(c.id, e);
}

// ---- REP (IBA 12.9.5.2 active side) ----
void Engine::Impl::on_rep(const Rep& p, const Message& msg) {
  Conn* c = conn_for(p.remote_comm_id, p.local_comm_id, true);
  if (!c || !(c->flags & kActive)) return drop_unknown();
  switch (c->state) {
    case State::kReqSent:
    case State::kMraReqRcvd:
      break;
    case State::kEstablished:  // our RTU was lost: again
      ctr().duplicates++;
      return resend(*c);
    case State::kMraRepSent:
      ctr().duplicates++;
      return resend(*c);
    case State::kRepRcvd:
      ctr().duplicates++;
      return;
    default:
      return drop_state();
  }
  disarm(*c);
  c->last.reset();
  c->state = State::kRepRcvd;
  c->remote_id = p.local_comm_id;
  c->remote_guid = p.local_ca_guid;
  c->remote_qpn = p.local_qpn;
  c->sq_psn = p.starting_psn;  // (the peer's receive PSN: see the REQ's)
  // Linux cm_rep_handler(): our initiator depth is the peer's responder resources and back.
  c->init_depth = p.responder_resources;
  c->resp_res = p.initiator_depth;
  c->rnr_retry = p.rnr_retry_count;
  c->target_ack_delay = p.target_ack_delay;
  c->ack_timeout = ack_timeout(p.target_ack_delay, c->packet_life);
  bind_remote(*c);
  arm(*c, ns(c->my_cm_timeout) / 2);
  Event e = event(*c, EventType::kRepReceived, attr::kRep, &msg, as_bytes(p.private_data));
  e.starting_psn = p.starting_psn;
  e.responder_resources = p.responder_resources;
  e.initiator_depth = p.initiator_depth;
  e.rnr_retry_count = p.rnr_retry_count;
  e.target_ack_delay = p.target_ack_delay;
  e.srq = p.srq;
  emit(c->id, e);
}

// ---- RTU (IBA 12.9.5.1: REP sent -> established) ----
void Engine::Impl::on_rtu(const Rtu& r, const Message& msg) {
  Conn* c = conn_for(r.remote_comm_id, r.local_comm_id);
  if (!c || (c->flags & kActive)) return drop_unknown();
  if (c->state == State::kEstablished) {
    ctr().duplicates++;
    return;
  }
  if (c->state != State::kRepSent && c->state != State::kMraRepRcvd) return drop_state();
  disarm(*c);
  c->last.reset();
  c->state = State::kEstablished;
  Event e = event(*c, EventType::kRtuReceived, attr::kRtu, &msg, as_bytes(r.private_data));
  emit(c->id, e);
}

// ---- MRA (IBA 12.6.6, 12.7.24) ----
void Engine::Impl::on_mra(const Mra& m, const Message& msg) {
  Conn* c = conn_for(m.remote_comm_id, m.local_comm_id, m.message_mraed == MsgMraed::kReq);
  if (!c) return drop_unknown();
  if (m.message_mraed == MsgMraed::kReq && c->state == State::kReqSent) {
    c->state = State::kMraReqRcvd;
  } else if (m.message_mraed == MsgMraed::kRep && c->state == State::kRepSent) {
    c->state = State::kMraRepRcvd;
  } else if (c->state == State::kMraReqRcvd || c->state == State::kMraRepRcvd) {
    ctr().duplicates++;
    return;
  } else {
    return drop_state();
  }
  if (c->remote_id == 0) c->remote_id = m.local_comm_id;
  // The wait grows by the service timeout asked for (Linux cm_mra_handler:
  // service timeout + packet lifetime); then the message is sent again.
  arm(*c, ns(m.service_timeout) + ns(c->packet_life));
  Event e = event(*c, EventType::kMraReceived, attr::kMra, &msg, as_bytes(m.private_data));
  e.service_timeout = m.service_timeout;
  emit(c->id, e);
}

// ---- REJ (IBA 12.9.5, 12.9.6; Linux cm_rej_handler's table) ----
void Engine::Impl::on_rej(const Rej& r, const Message& msg) {
  Conn* c = conn_for(r.remote_comm_id, r.local_comm_id, r.message_rejected == MsgRejected::kReq);
  if (!c) return drop_unknown();
  bool stale_or_later = r.reason == RejReason::kStaleConn;
  switch (c->state) {
    case State::kReqSent:
    case State::kMraReqRcvd:
    case State::kRepSent:
    case State::kMraRepRcvd:
    case State::kReqRcvd:
    case State::kMraReqSent:
      break;
    case State::kDreqSent:
    case State::kRepRcvd:
    case State::kMraRepSent:
    case State::kEstablished:
      stale_or_later = true;
      break;
    default:
      return drop_state();
  }
  uint32_t id = c->id;
  if (c->remote_id == 0) c->remote_id = r.local_comm_id;
  Event e = event(*c, EventType::kRejReceived, attr::kRej, &msg, as_bytes(r.private_data));
  e.reason = static_cast<uint16_t>(r.reason);
  e.ari = as_bytes(r.ari, r.ari_length);
  disarm(*c);
  if (stale_or_later) {
    enter_timewait(*c);
  } else {
    to_idle(*c);
  }
  emit(id, e);
}

// ---- DREQ (IBA 12.9.7) ----
void Engine::Impl::on_dreq(const mad::MadAddress& from, const Dreq& d, const Message& msg) {
  Conn* c = conn_for(d.remote_comm_id, d.local_comm_id);
  auto drep_unknown = [&] {  // IBA 12.9.7: a DREQ for no connection still gets a DREP
    Drep p;
    p.local_comm_id = d.remote_comm_id;
    p.remote_comm_id = d.local_comm_id;
    mad::MadAddress to = from;
    to.qkey = mad::kGsiQkey;
    send_to(to, p);
  };
  if (!c || (c->local_qpn != d.remote_qpn_eecn && (c->flags & kQpnBound))) {
    drop_unknown();
    return drep_unknown();
  }
  switch (c->state) {
    case State::kEstablished:
    case State::kDreqSent:
    case State::kRepSent:
    case State::kMraRepRcvd:
      break;
    case State::kTimewait:
      ctr().duplicates++;
      return drep_unknown();
    case State::kDreqRcvd:
      ctr().duplicates++;
      return;
    case State::kIdle:
      drop_state();
      return drep_unknown();
    default:
      return drop_state();
  }
  disarm(*c);
  c->last.reset();
  c->state = State::kDreqRcvd;
  if (c->flags & kGone) {  // nobody to answer for: answer now
    Drep p;
    p.local_comm_id = c->id;
    p.remote_comm_id = c->remote_id;
    send(*c, p, false);
    return enter_timewait(*c);
  }
  Event e = event(*c, EventType::kDreqReceived, attr::kDreq, &msg, as_bytes(d.private_data));
  emit(c->id, e);
}

void Engine::Impl::on_drep(const Drep& d, const Message& msg) {
  Conn* c = conn_for(d.remote_comm_id, d.local_comm_id);
  if (!c) return drop_unknown();
  if (c->state != State::kDreqSent) {
    if (c->state == State::kTimewait) {
      ctr().duplicates++;
      return;
    }
    return drop_state();
  }
  disarm(*c);
  Event e = event(*c, EventType::kDrepReceived, attr::kDrep, &msg, as_bytes(d.private_data));
  uint32_t id = c->id;
  enter_timewait(*c);
  emit(id, e);
}

// ---- SIDR (IBA 12.11) ----
// Who sent a SIDR_REQ, for telling a retransmission from a new request
// (the Request ID is the sender's own): its LID, and with a GRH its source
// GID folded in. On RoCE every sender's LID is the same (IBA Annex A17), so
// the LID alone would take one host's request for another's duplicate.
namespace {
uint64_t sidr_sender(const mad::MadAddress& from) {
  uint64_t who = from.lid | (uint64_t{1} << 32);
  if (!from.grh) return who;
  uint64_t hi = 0, lo = 0;
  std::memcpy(&hi, from.gid.data(), 8);
  std::memcpy(&lo, from.gid.data() + 8, 8);
  return who ^ (lo * 0x9e3779b97f4a7c15ULL) ^ std::rotl(hi, 17);
}
}  // namespace

void Engine::Impl::on_sidr_req(const mad::MadAddress& from, const SidrReq& q, const Message& msg) {
  const uint64_t who = sidr_sender(from);
  if (auto it = remote.find({q.request_id, who}); it != remote.end()) {
    ctr().duplicates++;
    if (Conn* c = find(it->second); c && c->last) resend(*c);
    return;
  }
  mad::MadAddress to = from;
  to.qkey = mad::kGsiQkey;
  Conn* l = listener_for(q.service_id, true);
  auto refuse = [&](SidrStatus st) {
    SidrRep p;
    p.request_id = q.request_id;
    p.status = st;
    p.service_id = q.service_id;
    send_to(to, p);
  };
  if (l && env.admit && !env.admit(l->owner, l->id)) {  // IBA 12.11.2 Table 121: status 2, rejected
    ctr().rej_no_resources++;
    return refuse(SidrStatus::kRejected);
  }
  if (!l) {  // IBA 12.11.2 Table 121: status 1, service ID not supported
    ctr().sidr_no_listener++;
    SidrRep p;
    p.request_id = q.request_id;
    p.status = SidrStatus::kServiceIdNotSupported;
    p.service_id = q.service_id;
    send_to(to, p);
    return;
  }
  uint64_t owner = l->owner;
  uint32_t listen_id = l->id;
  Conn& c = add(Kind::kSidrIn, owner);
  c.listen_id = listen_id;
  c.state = State::kSidrReqRcvd;
  c.peer = to;
  c.remote_id = q.request_id;
  c.remote_guid = from.lid;
  c.service_id = q.service_id;
  c.pkey = q.pkey;
  remote[{q.request_id, who}] = c.id;
  arm(c, passive_bound(c));
  Event e = event(c, EventType::kSidrReqReceived, attr::kSidrReq, &msg, as_bytes(q.private_data));
  e.pkey = q.pkey;
  e.remote_ca_guid = 0;
  emit(c.id, e);
}

void Engine::Impl::on_sidr_rep(const SidrRep& p, const Message& msg) {
  Conn* c = find(p.request_id);
  if (!c || c->kind != Kind::kSidrOut) return drop_unknown();
  if (c->state != State::kSidrReqSent) {
    ctr().duplicates++;
    return;
  }
  disarm(*c);
  c->last.reset();
  c->state = State::kIdle;
  Event e = event(*c, EventType::kSidrRepReceived, attr::kSidrRep, &msg, as_bytes(p.private_data));
  e.sidr_status = static_cast<uint8_t>(p.status);
  e.remote_qpn = p.qpn;
  e.qkey = p.qkey;
  e.service_id = p.service_id;
  uint32_t id = c->id;
  if (c->flags & kGone) erase(*c);
  emit(id, e);
}

// ---- LAP (IBA 12.8): no alternate paths here; APR says so ----
void Engine::Impl::on_lap(const mad::MadAddress& from, const Lap& l, const Message& msg) {
  Conn* c = conn_for(l.remote_comm_id, l.local_comm_id);
  Apr a;
  a.local_comm_id = c ? c->id : 0;
  a.remote_comm_id = l.local_comm_id;
  a.status = c ? AprStatus::kUnsupported : AprStatus::kInvalidCommId;
  mad::MadAddress to = from;
  to.qkey = mad::kGsiQkey;
  send_to(to, a);
  if (!c) return drop_unknown();
  Event e = event(*c, EventType::kLapReceived, attr::kLap, &msg, as_bytes(l.private_data));
  emit(c->id, e);
}

// ===== the public interface =====

Engine::Engine(boost::asio::io_context& io, Env env, PortInfo port)
    : impl_(std::make_unique<Impl>(*this, io, std::move(env), port)) {}

Engine::~Engine() {
  impl_->alive.reset();
  impl_->timer.cancel();
}

void Engine::set_port(const PortInfo& port) { impl_->port = port; }
void Engine::set_limits(const EngineLimits& l) { impl_->limits = l; }

Result<uint32_t> Engine::listen(uint64_t service_id, uint64_t mask, uint64_t owner, bool sidr) {
  auto& I = *impl_;
  Impl::Listeners& L = I.spaces[sidr ? 1 : 0];
  const char* space = sidr ? "SIDR" : "REQ";
  service_id &= mask;
  // Two (id, mask) pairs overlap if some service ID matches both.
  auto overlap = [&](const Conn& c) {
    return err(EADDRINUSE, "cm: {} listen on service ID {:#x}/{:#x} overlaps listener {:#x}/{:#x}", space, service_id,
               mask, c.service_id, c.remote_guid);
  };
  for (uint32_t id : L.masked) {
    const Conn& c = I.conns.at(id);
    if (((service_id ^ c.service_id) & mask & c.remote_guid) == 0) return overlap(c);
  }
  if (mask == kExactMask) {
    if (auto it = L.exact.find(service_id); it != L.exact.end()) return overlap(I.conns.at(it->second));
  } else {
    if (L.masked.size() >= I.limits.max_masked_listeners)
      return err(ENOSPC, "cm: {} masked {} listeners already (at most {})", L.masked.size(), space,
                 I.limits.max_masked_listeners);
    for (const auto& [sid, id] : L.exact)  // few masked listens, and only by privileged users
      if (((service_id ^ sid) & mask) == 0) return overlap(I.conns.at(id));
  }
  Conn& c = I.add(Kind::kListen, owner);
  c.state = State::kListen;
  c.service_id = service_id;
  c.remote_guid = mask;
  if (sidr) c.flags |= kSidrSpace;
  if (mask == kExactMask) {
    L.exact.emplace(service_id, c.id);
  } else {
    L.masked.push_back(c.id);
  }
  return c.id;
}

Result<uint32_t> Engine::connect(const ConnectParams& p, uint64_t owner) {
  auto& I = *impl_;
  if (p.qp_type != transport::kRc && p.qp_type != transport::kUc)
    return err(EINVAL, "cm: connect: transport {} (RC 0 or UC 1 only)", p.qp_type);
  if (p.qpn == 0 || p.qpn > 0xffffff) return err(EINVAL, "cm: connect: QPN {:#x}", p.qpn);
  if (p.path_mtu < 1 || p.path_mtu > 5) return err(EINVAL, "cm: connect: path MTU {} (1..5, IBA 9.7.1)", p.path_mtu);
  if (I.local_qpn.contains(p.qpn)) return err(EBUSY, "cm: QPN {:#x} is connected or in timewait", p.qpn);
  Req q;
  OPENIB_TRY(copy_pdata(q.private_data, p.private_data, "REQ"));
  Conn& c = I.add(Kind::kConn, owner);
  c.flags = kActive | (p.qp_type == transport::kUc ? kUc : 0);
  c.state = State::kReqSent;
  c.peer = p.peer;
  c.peer.qkey = mad::kGsiQkey;
  c.path = p.primary;
  if (c.path.local_lid == 0) c.path.local_lid = I.port.lid;  // our end, if the caller left it out
  if (c.path.local_gid == Gid{}) c.path.local_gid = I.port.gid;
  c.packet_life = p.packet_life_time ? p.packet_life_time
                                     : (p.primary.local_ack_timeout > 0 ? p.primary.local_ack_timeout - 1 : 0);
  if (c.path.local_ack_timeout == 0) c.path.local_ack_timeout = ack_timeout(I.port.ca_ack_delay, c.packet_life);
  c.ack_timeout = c.path.local_ack_timeout;
  c.service_id = p.service_id;
  c.local_qpn = p.qpn;
  c.rq_psn = p.starting_psn ? (p.starting_psn & 0xffffff) : I.new_psn();
  c.pkey = p.pkey;
  c.path_mtu = p.path_mtu;
  c.resp_res = p.responder_resources;
  c.init_depth = p.initiator_depth;
  c.retry_cnt = p.retry_count;
  c.rnr_retry = p.rnr_retry_count;
  c.srq = p.srq;
  c.max_retries = c.retries_left = std::min<uint8_t>(p.max_cm_retries, 15);
  c.peer_cm_timeout = c.my_cm_timeout = std::min<uint8_t>(p.cm_response_timeout, 31);
  I.bind_qpn(c);
  // IBA 12.6.5 Table 99
  q.local_comm_id = c.id;
  q.service_id = p.service_id;
  q.local_ca_guid = I.port.ca_guid;
  q.local_qpn = p.qpn;
  q.responder_resources = p.responder_resources;
  q.initiator_depth = p.initiator_depth;
  q.remote_cm_response_timeout = c.peer_cm_timeout;
  q.transport_service_type = p.qp_type;
  q.starting_psn = c.rq_psn;  // the PSN we receive from (docs/cm.md "PSNs")
  q.local_cm_response_timeout = c.my_cm_timeout;
  q.retry_count = p.retry_count & 7;
  q.pkey = p.pkey;
  q.path_mtu = p.path_mtu;
  q.rnr_retry_count = p.rnr_retry_count & 7;
  q.max_cm_retries = c.max_retries;
  q.srq = p.srq;
  q.primary = c.path;
  I.send(c, q, true);
  I.arm(c, I.resend_wait(c));
  return c.id;
}

Result<void> Engine::accept(uint32_t id, const AcceptParams& p) {
  auto& I = *impl_;
  Conn* c = I.find(id);
  if (!c || c->kind != Kind::kConn || (c->flags & kGone)) return err(ENOENT, "cm: accept: no id {:#x}", id);
  if (c->state != State::kReqRcvd && c->state != State::kMraReqSent)
    return err(EINVAL, "cm: accept: id {:#x} is {}", id, to_string(c->state));
  if (I.local_qpn.contains(p.qpn)) return err(EBUSY, "cm: QPN {:#x} is connected or in timewait", p.qpn);
  if (p.qpn == 0 || p.qpn > 0xffffff) return err(EINVAL, "cm: accept: QPN {:#x}", p.qpn);
  Rep r;
  OPENIB_TRY(copy_pdata(r.private_data, p.private_data, "REP"));
  c->local_qpn = p.qpn;
  if (p.starting_psn) c->rq_psn = p.starting_psn & 0xffffff;
  c->resp_res = p.responder_resources;
  c->init_depth = p.initiator_depth;
  c->target_ack_delay = p.target_ack_delay;
  c->ack_timeout = ack_timeout(p.target_ack_delay, c->packet_life);
  c->srq = p.srq;
  c->flags &= ~kExpireNext;
  I.bind_qpn(*c);
  // IBA 12.6.8 Table 105
  r.local_comm_id = c->id;
  r.remote_comm_id = c->remote_id;
  r.local_qpn = p.qpn;
  r.starting_psn = c->rq_psn;  // the PSN we receive from (docs/cm.md "PSNs")
  r.responder_resources = p.responder_resources;
  r.initiator_depth = p.initiator_depth;
  r.target_ack_delay = p.target_ack_delay & 0x1f;
  r.failover_accepted = 1;  // alternate paths: not supported (docs/cm.md)
  r.rnr_retry_count = p.rnr_retry_count & 7;
  r.srq = p.srq;
  r.local_ca_guid = I.port.ca_guid;
  c->state = State::kRepSent;
  c->retries_left = c->max_retries;
  I.send(*c, r, true);
  I.arm(*c, I.resend_wait(*c));
  return {};
}

Result<void> Engine::reject(uint32_t id, uint16_t reason, Bytes ari, Bytes private_data) {
  auto& I = *impl_;
  Conn* c = I.find(id);
  if (!c || c->kind != Kind::kConn || (c->flags & kGone)) return err(ENOENT, "cm: reject: no id {:#x}", id);
  if (ari.size() > kAriBytes) return err(EINVAL, "cm: reject: ARI is {} bytes, at most {}", ari.size(), kAriBytes);
  if (private_data.size() > pdata::kRej)
    return err(EINVAL, "cm: REJ private data is {} bytes, at most {}", private_data.size(), pdata::kRej);
  auto rsn = static_cast<RejReason>(reason);
  switch (c->state) {
    case State::kReqRcvd:
    case State::kMraReqSent:
      I.send_rej(*c, rsn, MsgRejected::kReq, ari, private_data, true);
      I.to_linger(*c);
      return {};
    case State::kRepRcvd:
    case State::kMraRepSent:
      I.send_rej(*c, rsn, MsgRejected::kRep, ari, private_data, false);
      I.enter_timewait(*c);
      return {};
    case State::kReqSent:
    case State::kMraReqRcvd:
    case State::kRepSent:
    case State::kMraRepRcvd:
      I.send_rej(*c, rsn, c->state == State::kRepSent || c->state == State::kMraRepRcvd ? MsgRejected::kRep
                                                                                          : MsgRejected::kReq,
                 ari, private_data, false);
      I.to_idle(*c);
      return {};
    default:
      return err(EINVAL, "cm: reject: id {:#x} is {}", id, to_string(c->state));
  }
}

Result<void> Engine::send_rtu(uint32_t id, Bytes private_data) {
  auto& I = *impl_;
  Conn* c = I.find(id);
  if (!c || c->kind != Kind::kConn || (c->flags & kGone)) return err(ENOENT, "cm: send_rtu: no id {:#x}", id);
  if (c->state != State::kRepRcvd && c->state != State::kMraRepSent)
    return err(EINVAL, "cm: send_rtu: id {:#x} is {}", id, to_string(c->state));
  Rtu r;
  OPENIB_TRY(copy_pdata(r.private_data, private_data, "RTU"));
  r.local_comm_id = c->id;
  r.remote_comm_id = c->remote_id;
  I.disarm(*c);
  c->state = State::kEstablished;
  I.send(*c, r, true);  // kept: a repeated REP gets it again
  return {};
}

Result<void> Engine::notify_established(uint32_t id) {
  auto& I = *impl_;
  Conn* c = I.find(id);
  if (!c || c->kind != Kind::kConn || (c->flags & kGone)) return err(ENOENT, "cm: notify_established: no id {:#x}", id);
  if (c->state == State::kEstablished) return {};
  if (c->state != State::kRepSent && c->state != State::kMraRepRcvd)
    return err(EINVAL, "cm: notify_established: id {:#x} is {}", id, to_string(c->state));
  I.disarm(*c);
  c->last.reset();
  c->state = State::kEstablished;
  Event e = I.event(*c, EventType::kEstablished, 0);
  boost::asio::post(I.io, [&I, e, alive = std::weak_ptr<bool>(I.alive)] {
    if (!alive.expired()) I.emit(e.id, e);
  });
  return {};
}

Result<void> Engine::disconnect(uint32_t id, Bytes private_data) {
  auto& I = *impl_;
  Conn* c = I.find(id);
  if (!c || c->kind != Kind::kConn || (c->flags & kGone)) return err(ENOENT, "cm: disconnect: no id {:#x}", id);
  if (c->state != State::kEstablished)
    return err(EINVAL, "cm: disconnect: id {:#x} is {}", id, to_string(c->state));
  Dreq d;
  OPENIB_TRY(copy_pdata(d.private_data, private_data, "DREQ"));
  d.local_comm_id = c->id;
  d.remote_comm_id = c->remote_id;
  d.remote_qpn_eecn = c->remote_qpn;
  c->state = State::kDreqSent;
  c->retries_left = c->max_retries;
  I.send(*c, d, true);
  I.arm(*c, I.resend_wait(*c));
  return {};
}

Result<void> Engine::send_drep(uint32_t id, Bytes private_data) {
  auto& I = *impl_;
  Conn* c = I.find(id);
  if (!c || c->kind != Kind::kConn || (c->flags & kGone)) return err(ENOENT, "cm: send_drep: no id {:#x}", id);
  if (c->state != State::kDreqRcvd) return err(EINVAL, "cm: send_drep: id {:#x} is {}", id, to_string(c->state));
  Drep d;
  OPENIB_TRY(copy_pdata(d.private_data, private_data, "DREP"));
  d.local_comm_id = c->id;
  d.remote_comm_id = c->remote_id;
  I.send(*c, d, false);
  I.enter_timewait(*c);
  return {};
}

Result<uint32_t> Engine::sidr_request(const SidrParams& p, uint64_t owner) {
  auto& I = *impl_;
  SidrReq q;
  OPENIB_TRY(copy_pdata(q.private_data, p.private_data, "SIDR_REQ"));
  Conn& c = I.add(Kind::kSidrOut, owner);
  c.flags = kActive;
  c.state = State::kSidrReqSent;
  c.peer = p.peer;
  c.peer.qkey = mad::kGsiQkey;
  c.service_id = p.service_id;
  c.pkey = p.pkey;
  c.max_retries = c.retries_left = std::min<uint8_t>(p.max_cm_retries, 15);
  c.peer_cm_timeout = std::min<uint8_t>(p.cm_response_timeout, 31);
  q.request_id = c.id;
  q.pkey = p.pkey;
  q.service_id = p.service_id;
  I.send(c, q, true);
  I.arm(c, ns(c.peer_cm_timeout));
  return c.id;
}

Result<void> Engine::sidr_reply(uint32_t id, uint8_t status, uint32_t qpn, uint32_t qkey, Bytes private_data) {
  auto& I = *impl_;
  Conn* c = I.find(id);
  if (!c || c->kind != Kind::kSidrIn || (c->flags & kGone)) return err(ENOENT, "cm: sidr_reply: no id {:#x}", id);
  if (c->state != State::kSidrReqRcvd) return err(EINVAL, "cm: sidr_reply: id {:#x} answered already", id);
  if (status > 5) return err(EINVAL, "cm: sidr_reply: status {}", status);
  SidrRep p;
  OPENIB_TRY(copy_pdata(p.private_data, private_data, "SIDR_REP"));
  p.request_id = c->remote_id;
  p.status = static_cast<SidrStatus>(status);
  p.qpn = qpn & 0xffffff;
  p.qkey = qkey;
  p.service_id = c->service_id;
  c->state = State::kIdle;
  I.disarm(*c);
  I.send(*c, p, true);  // kept: a repeated SIDR_REQ gets it again until destroy()
  return {};
}

void Engine::destroy(uint32_t id) {
  auto& I = *impl_;
  Conn* c = I.find(id);
  if (!c || (c->flags & kGone)) return;
  c->flags |= kGone;
  switch (c->state) {
    case State::kListen:
    case State::kSidrReqSent:
      return I.erase(*c);
    case State::kSidrReqRcvd: {  // IBA 12.11.2: rejected
      SidrRep p;
      p.request_id = c->remote_id;
      p.status = SidrStatus::kRejected;
      p.service_id = c->service_id;
      I.send(*c, p, false);
      return I.erase(*c);
    }
    case State::kReqSent:
    case State::kMraReqRcvd:
      I.send_rej_timeout(*c, MsgRejected::kReq);
      return I.to_idle(*c);
    case State::kReqRcvd:
    case State::kMraReqSent:  // IBA 12.6.7.2 reason 28: consumer reject
      I.send_rej(*c, RejReason::kConsumerReject, MsgRejected::kReq, {}, {}, true);
      return I.to_linger(*c);
    case State::kRepSent:
    case State::kMraRepRcvd:
      I.send_rej(*c, RejReason::kConsumerReject, MsgRejected::kRep, {}, {}, false);
      return I.to_idle(*c);
    case State::kRepRcvd:
    case State::kMraRepSent:
      I.send_rej(*c, RejReason::kConsumerReject, MsgRejected::kRep, {}, {}, false);
      return I.enter_timewait(*c);
    case State::kEstablished: {
      c->flags &= ~kGone;  // disconnect() checks it
      auto r = disconnect(id, {});
      c->flags |= kGone;
      (void)r;
      return;
    }
    case State::kDreqRcvd: {
      Drep d;
      d.local_comm_id = c->id;
      d.remote_comm_id = c->remote_id;
      I.send(*c, d, false);
      return I.enter_timewait(*c);
    }
    case State::kDreqSent:
    case State::kTimewait:
      return;  // settles by itself, then goes
    case State::kIdle:
      if (!(c->flags & kLinger)) I.erase(*c);
      return;
    default:
      return;
  }
}

void Engine::destroy_owner(uint64_t owner) {
  std::vector<uint32_t> ids;
  for (auto& [id, c] : impl_->conns)
    if (c.owner == owner && !(c.flags & kGone)) ids.push_back(id);
  for (uint32_t id : ids) destroy(id);
}

void Engine::on_mad(const mad::MadAddress& from, Bytes mad) {
  auto& I = *impl_;
  if (mad.size() >= 24 && get8(mad, 1) == kMgmtClass && get8(mad, 3) == kMethodGet &&
      get16(mad, 16) == attr::kClassPortInfo) {
    auto r = class_port_info_response(mad, 20);
    if (!r) {
      counters_.dropped_malformed++;
      return;
    }
    mad::MadAddress to = from;
    to.qkey = mad::kGsiQkey;
    counters_.received[attr::kClassPortInfo]++;
    return I.send_bytes(to, std::move(*r), attr::kClassPortInfo);
  }
  auto d = decode(mad);
  if (!d) {
    counters_.dropped_malformed++;
    return;
  }
  counters_.received[d->attr_id & 0x1f]++;
  const Message& m = d->msg;
  std::visit(
      [&](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, Req>) I.on_req(from, x, m);
        else if constexpr (std::is_same_v<T, Rep>) I.on_rep(x, m);
        else if constexpr (std::is_same_v<T, Rtu>) I.on_rtu(x, m);
        else if constexpr (std::is_same_v<T, Mra>) I.on_mra(x, m);
        else if constexpr (std::is_same_v<T, Rej>) I.on_rej(x, m);
        else if constexpr (std::is_same_v<T, Dreq>) I.on_dreq(from, x, m);
        else if constexpr (std::is_same_v<T, Drep>) I.on_drep(x, m);
        else if constexpr (std::is_same_v<T, SidrReq>) I.on_sidr_req(from, x, m);
        else if constexpr (std::is_same_v<T, SidrRep>) I.on_sidr_rep(x, m);
        else if constexpr (std::is_same_v<T, Lap>) I.on_lap(from, x, m);
        else I.drop_state();  // APR: we never send a LAP
      },
      m);
}

// Linux's ib_cm_init_qp_attr() rules (cm_init_qp_init_attr / _rtr_ / _rts_).
Result<QpParams> Engine::qp_params(uint32_t id, uint8_t target) const {
  const auto& I = *impl_;
  auto it = I.conns.find(id);
  if (it == I.conns.end() || it->second.kind != Kind::kConn || (it->second.flags & kGone))
    return err(ENOENT, "cm: qp_params: no id {:#x}", id);
  const Conn& c = it->second;
  bool active = c.flags & kActive, rc = !(c.flags & kUc);
  State s = c.state;
  bool connecting = s != State::kIdle && s != State::kTimewait && s != State::kDreqSent && s != State::kDreqRcvd;
  bool have_peer = active ? (s == State::kRepRcvd || s == State::kMraRepSent || s == State::kEstablished)
                          : (s == State::kReqRcvd || s == State::kMraReqSent || s == State::kRepSent ||
                             s == State::kMraRepRcvd || s == State::kEstablished);
  namespace m = verbs::qp_attr;
  QpParams q;
  verbs::QpAttr& a = q.attr;
  a.state = static_cast<verbs::QpState>(target);
  switch (target) {
    case 1:
      if (!connecting) return err(EINVAL, "cm: qp_params(INIT): id {:#x} is {}", id, to_string(s));
      q.mask = m::kState | m::kPkeyIndex | m::kAccessFlags;
      a.pkey_index = c.peer.pkey_index;
      a.access = verbs::kAccessLocalWrite | verbs::kAccessRemoteWrite;
      if (rc && c.resp_res) a.access |= verbs::kAccessRemoteRead | verbs::kAccessRemoteAtomic;
      return q;
    case 2:
      if (!have_peer) return err(EINVAL, "cm: qp_params(RTR): id {:#x} is {}", id, to_string(s));
      q.mask = m::kState | m::kAv | m::kPathMtu | m::kDestQpn | m::kRqPsn;
      a.av.dlid = c.path.remote_lid;
      a.av.sl = c.path.sl;
      a.av.src_path_bits = static_cast<uint8_t>(c.path.local_lid & 0x7f);
      a.av.grh = !c.path.subnet_local;
      a.av.dgid = c.path.remote_gid;
      q.local_gid = c.path.local_gid;
      a.av.flow_label = c.path.flow_label;
      a.av.hop_limit = c.path.hop_limit;
      a.av.traffic_class = c.path.traffic_class;
      a.path_mtu = c.path_mtu;
      a.dest_qpn = c.remote_qpn;
      a.rq_psn = c.rq_psn;
      if (rc) {
        q.mask |= m::kMaxDestRdAtomic | m::kMinRnrTimer;
        a.max_dest_rd_atomic = c.resp_res;
        a.min_rnr_timer = 0;
      }
      return q;
    case 3:
      if (!have_peer) return err(EINVAL, "cm: qp_params(RTS): id {:#x} is {}", id, to_string(s));
      q.mask = m::kState | m::kSqPsn;
      a.sq_psn = c.sq_psn;
      if (rc) {
        q.mask |= m::kTimeout | m::kRetryCnt | m::kRnrRetry | m::kMaxQpRdAtomic;
        a.timeout = c.ack_timeout;
        a.retry_cnt = c.retry_cnt;
        a.rnr_retry = c.rnr_retry;
        a.max_rd_atomic = c.init_depth;
      }
      return q;
    default:
      return err(EINVAL, "cm: qp_params: target state {} (1 INIT, 2 RTR, 3 RTS)", target);
  }
}

std::optional<State> Engine::state(uint32_t id) const {
  auto it = impl_->conns.find(id);
  if (it == impl_->conns.end() || (it->second.flags & kGone)) return std::nullopt;
  return it->second.state;
}

std::array<uint32_t, static_cast<std::size_t>(State::kCount_)> Engine::states() const {
  std::array<uint32_t, static_cast<std::size_t>(State::kCount_)> n{};
  for (auto& [id, c] : impl_->conns) n[static_cast<std::size_t>(c.state)]++;
  return n;
}

std::size_t Engine::memory_bytes() const {
  const auto& I = *impl_;
  // Node sizes as libstdc++ lays them out: a hash node is the value plus a
  // next pointer and the cached hash; a set node adds three pointers and a colour.
  std::size_t b = sizeof(Impl);
  b += I.conns.size() * (sizeof(std::pair<const uint32_t, Conn>) + 2 * sizeof(void*)) +
       I.conns.bucket_count() * sizeof(void*);
  for (auto& [id, c] : I.conns)
    if (c.last) b += sizeof(mad::Mad);
  b += (I.remote.size() + I.remote_qpn.size()) * (sizeof(std::pair<std::pair<uint64_t, uint64_t>, uint32_t>) + 2 * sizeof(void*)) +
       (I.remote.bucket_count() + I.remote_qpn.bucket_count()) * sizeof(void*);
  b += I.local_qpn.size() * (8 + 2 * sizeof(void*)) + I.local_qpn.bucket_count() * sizeof(void*);
  b += I.timers.size() * (sizeof(std::pair<Clock::time_point, uint32_t>) + 4 * sizeof(void*));
  for (const auto& L : I.spaces)
    b += L.exact.size() * (16 + 2 * sizeof(void*)) + L.exact.bucket_count() * sizeof(void*) +
         L.masked.capacity() * sizeof(uint32_t);
  return b;
}

std::string Engine::json() const {
  nlohmann::json j;
  auto n = states();
  nlohmann::json st = nlohmann::json::object();
  for (std::size_t i = 0; i < n.size(); ++i)
    if (n[i]) st[to_string(static_cast<State>(i))] = n[i];
  j["ids_by_state"] = st;
  nlohmann::json sent = nlohmann::json::object(), recv = nlohmann::json::object();
  for (uint16_t a = 0; a < Counters::kAttrs; ++a) {
    if (counters_.sent[a]) sent[attr_name(a)] = counters_.sent[a];
    if (counters_.received[a]) recv[attr_name(a)] = counters_.received[a];
  }
  j["sent"] = sent;
  j["received"] = recv;
  const Counters& c = counters_;
  j["send_errors"] = c.send_errors;
  j["retries"] = c.retries;
  j["timeouts"] = c.timeouts;
  j["duplicates"] = c.duplicates;
  j["stale"] = c.stale;
  j["mra_sent_auto"] = c.mra_sent_auto;
  j["dropped"] = {{"malformed", c.dropped_malformed},
                  {"unknown_id", c.dropped_unknown_id},
                  {"bad_state", c.dropped_bad_state}};
  j["rej_no_listener"] = c.rej_no_listener;
  j["sidr_no_listener"] = c.sidr_no_listener;
  j["rej_no_resources"] = c.rej_no_resources;
  j["stale_foreign"] = c.stale_foreign;
  j["passive_expired"] = c.passive_expired;
  j["memory_bytes"] = memory_bytes();
  return j.dump();
}

const char* to_string(EventType t) {
  static constexpr const char* names[] = {"REQ received", "REP received", "RTU received", "established",
                                          "REJ received", "MRA received", "DREQ received", "DREP received",
                                          "timewait exit", "timeout", "SIDR_REQ received",
                                          "SIDR_REP received", "LAP received", "stale"};
  auto i = static_cast<std::size_t>(t);
  return i < std::size(names) ? names[i] : "unknown";
}

const char* to_string(State s) {
  static constexpr const char* names[] = {"idle", "listen", "REQ sent", "REQ received", "MRA(REQ) sent",
                                          "MRA(REQ) received", "REP sent", "REP received", "MRA(REP) sent",
                                          "MRA(REP) received", "established", "DREQ sent", "DREQ received",
                                          "timewait", "SIDR_REQ sent", "SIDR_REQ received"};
  auto i = static_cast<std::size_t>(s);
  return i < std::size(names) ? names[i] : "unknown";
}

}  // namespace openib::cm
