#include "ibd/ipoib_cm.hpp"

#include <nlohmann/json.hpp>

#include "common/log.hpp"
#include "ipoib_tap/cm_wire.hpp"

namespace openib::ibd {
namespace {

auto logger() { return log::get("ipoib"); }
using E = proto::CmEventType;

std::string gid_text(const ipoib::Gid& g) {
  std::string s;
  for (size_t i = 0; i < 16; i += 2) s += fmt::format("{}{:02x}{:02x}", i ? ":" : "", g[i], g[i + 1]);
  return s;
}

// RFC 4755 §6: our UD QPN and the largest message our receives take.
proto::CmPrivate own_private(uint32_t ud_qpn, uint8_t& len) {
  proto::CmPrivate pd{};
  const auto b = ipoib::encode_cm_private_data({ud_qpn, ipoib::kCmBufBytes});
  std::copy(b.begin(), b.end(), pd.begin());
  len = uint8_t(b.size());
  return pd;
}

Result<ipoib::CmPrivateData> peer_private(const proto::CmEventMsg& e) {
  return ipoib::decode_cm_private_data(std::span<const uint8_t>(e.private_data.data(), e.private_len));
}

}  // namespace

IpoibCm::IpoibCm(hca::Device& hca, CmService& cm, uint8_t port, Hooks hooks)
    : hca_(hca), cm_(cm), port_num_(port), hooks_(std::move(hooks)) {}

IpoibCm::~IpoibCm() {
  alive_.reset();
  if (session_) cm_.client_gone(kIpoibCmOwner);
}

CmService::QpOps IpoibCm::qp_ops() {
  CmService::QpOps ops;
  ops.lookup = [this](uint32_t, uint32_t h) -> Result<CmService::QpInfo> {
    auto it = qp_state_.find(h);
    if (it == qp_state_.end()) return err(ENOENT, "no connected-mode QP {:#x}", h);
    return CmService::QpInfo{h, 0, it->second};
  };
  ops.handle_of = [this](uint32_t, uint32_t qpn) -> Result<uint32_t> {
    if (!qp_state_.count(qpn)) return err(ENOENT, "no connected-mode QP {:#x}", qpn);
    return qpn;
  };
  ops.modify = [this](uint32_t, uint32_t h, uint32_t mask, const hca::QpAttr& a, hca::Completer<Result<void>> done) {
    if (!qp_state_.count(h)) return done(err(ENOENT, "no connected-mode QP {:#x}", h));
    hca_.modify_qp_async(h, mask, a, [this, h, mask, st = uint8_t(a.state), alive = std::weak_ptr<bool>(alive_),
                                      d = std::move(done)](Result<void> r) mutable {
      if (!alive.expired() && r && (mask & hca::qp_attr::kState))
        if (auto it = qp_state_.find(h); it != qp_state_.end()) it->second = st;
      d(std::move(r));
    });
  };
  return ops;
}

void IpoibCm::start(uint32_t ud_qpn, std::function<void(bool)> done) {
  stop(false);
  ud_qpn_ = ud_qpn;
  const uint64_t ep = ++epoch_;
  ipoib::CmPortConfig pc;
  pc.port = port_num_;
  const size_t max_pages = hca_.caps().max_mkey_pages;
  while (max_pages && ipoib::CmPort::buffer_bytes(pc) / 4096 > max_pages && pc.log_recv_slots > 2) {
    --pc.log_recv_slots;
    --pc.log_send_slots;
  }
  ipoib::CmPort::open_async(hca_, pc, [this, ep, pc, done = std::move(done), alive = std::weak_ptr<bool>(alive_)](
                                          Result<std::unique_ptr<ipoib::CmPort>> p) mutable {
    if (alive.expired()) return;
    if (!p || ep != epoch_) {
      if (p) ipoib::CmPort::close_async(std::move(*p), [] {});
      else logger()->warn("connected mode: {}", p.error().str());
      return done(false);
    }
    port_ = std::move(*p);
    port_->set_receiver([this](uint32_t qpn, std::span<const uint8_t> b) {
      auto it = rx_.find(qpn);
      if (it == rx_.end()) return void(++counters_.drop_unknown_qp);
      it->second.established = true;  // IBA 12.9.5: data before the RTU
      if (hooks_.receive) hooks_.receive(it->second.peer, b);
    });
    port_->set_broken([this](uint32_t qpn) { qp_broken(qpn); });
    port_->set_slots_freed([this] {
      if (hooks_.slots_freed) hooks_.slots_freed();
    });
    open_session();
    proto::CmListenReq l;
    l.port = port_num_;
    l.service_id = ipoib::cm_service_id(ud_qpn_);
    auto h = cm_.listen(kIpoibCmOwner, l, true);
    if (!h) {
      logger()->warn("connected mode: listening on {:#x}: {}", l.service_id, h.error().str());
      stop(false);
      return done(false);
    }
    listen_id_ = *h;
    logger()->info("connected mode: listening on service ID {:#x}, {} receive and {} send slots of {} bytes",
                   l.service_id, 1u << pc.log_recv_slots, 1u << pc.log_send_slots, pc.recv_bytes);
    done(true);
  });
}

void IpoibCm::open_session() {
  if (session_) return;
  auto r = cm_.open_internal(kIpoibCmOwner, qp_ops(), [this, alive = std::weak_ptr<bool>(alive_)](
                                                          const proto::CmEventMsg& e) {
    if (!alive.expired()) on_event(e);
  });
  session_ = bool(r);
  if (!r) logger()->warn("connected mode: CM session: {}", r.error().str());
}

void IpoibCm::stop(bool device_gone) {
  ++epoch_;
  // The CM ends every id of the session: DREQ for the established, REJ
  // for the others; the events of the old session are not ours any more.
  if (session_) cm_.client_gone(kIpoibCmOwner);
  session_ = false;
  listen_id_ = 0;
  for (auto& [a, t] : tx_) counters_.drop_queue_full += t.queue.size();
  tx_.clear();
  rx_.clear();
  qp_state_.clear();
  tx_by_qpn_.clear();
  by_id_.clear();
  if (!port_) return;
  if (device_gone) port_.reset();
  else ipoib::CmPort::close_async(std::move(port_), [] {});
}

bool IpoibCm::usable(const ipoib::HwAddr& a) const {
  if (!port_ || !session_) return false;
  auto it = tx_.find(a);
  return it == tx_.end() || it->second.state != TxState::kFallback ||
         std::chrono::steady_clock::now() >= it->second.retry_at;
}

size_t IpoibCm::slots_free() const { return port_ ? port_->slots_free() : 0; }
void IpoibCm::begin_batch() {
  if (port_) port_->begin_batch();
}
void IpoibCm::end_batch() {
  if (port_) port_->end_batch();
}
bool IpoibCm::on_cq_event(uint32_t cqn) { return port_ && port_->on_cq_event(cqn); }

bool IpoibCm::send(const ipoib::HwAddr& a, std::span<const uint8_t> packet) {
  if (!usable(a)) return false;
  Tx& t = tx_[a];
  switch (t.state) {
    case TxState::kUp:
      if (packet.size() > t.peer_mtu) return false;
      if (auto r = port_->send(t.qpn, packet); !r) ++counters_.drop_no_slot;
      return true;
    case TxState::kConnecting:
      break;
    case TxState::kFallback:  // its time is over: try again
    case TxState::kNone:
      t.state = TxState::kConnecting;
      connect(a);
      break;
  }
  auto it = tx_.find(a);  // connect() may have failed at once
  if (it == tx_.end() || it->second.state != TxState::kConnecting) return false;
  if (it->second.queue.size() >= kMaxQueued) {
    it->second.queue.pop_front();
    ++counters_.drop_queue_full;
  }
  it->second.queue.emplace_back(packet.begin(), packet.end());
  return true;
}

// RFC 4755 §5: an RC QP, then a REQ to the neighbour's service ID with
// our UD QPN and receive MTU.
void IpoibCm::connect(const ipoib::HwAddr& a) {
  ++counters_.connects;
  const uint64_t ep = epoch_;
  port_->create_qp_async([this, a, ep, alive = std::weak_ptr<bool>(alive_)](Result<uint32_t> q) {
    if (alive.expired()) return;
    if (ep != epoch_ || !port_) {
      if (q && port_) port_->destroy_qp(*q);
      return;
    }
    auto it = tx_.find(a);
    if (!q || it == tx_.end() || it->second.state != TxState::kConnecting) {
      if (q) port_->destroy_qp(*q);
      if (it != tx_.end()) end_tx(a, true);
      return;
    }
    connect_qp(a, *q);
  });
}

void IpoibCm::connect_qp(const ipoib::HwAddr& a, uint32_t qpn) {
  Tx& t = tx_[a];
  t.qpn = qpn;
  qp_state_[qpn] = 0;
  tx_by_qpn_[qpn] = a;
  const auto* path = hooks_.path_of ? hooks_.path_of(a.gid) : nullptr;
  if (!path) return end_tx(a, true);
  proto::CmConnectReq c;
  c.port = port_num_;
  c.qp = qpn;
  c.service_id = ipoib::cm_service_id(a.qpn);
  c.path = *path;
  // Our fabric may lose a packet: the transport retries (Linux sends 0,
  // on hardware that does not lose any); RNR retries without end, the
  // peer's SRQ refilled by its loop.
  c.retry_count = 7;
  c.rnr_retry_count = 7;
  c.private_data = own_private(ud_qpn_, c.private_len);
  const uint64_t ep = epoch_;
  cm_.connect(kIpoibCmOwner, c, [this, a, ep, alive = std::weak_ptr<bool>(alive_)](Result<uint32_t> h) {
    if (alive.expired() || ep != epoch_) return;
    auto it = tx_.find(a);
    if (it == tx_.end()) {
      if (h) (void)cm_.destroy(kIpoibCmOwner, *h);
      return;
    }
    if (!h) {
      logger()->debug("connected mode: REQ to {}: {}", gid_text(a.gid), h.error().str());
      return end_tx(a, true);
    }
    it->second.id = *h;
    by_id_[*h] = {true, it->second.qpn};
  });
}

void IpoibCm::on_event(const proto::CmEventMsg& e) {
  if (!session_) return;
  if (e.type == uint8_t(E::kRequest)) return on_request(e);
  auto b = by_id_.find(e.id);
  if (b == by_id_.end()) return;
  const auto [is_tx, qpn] = b->second;
  if (!is_tx) {
    auto r = rx_.find(qpn);
    if (r != rx_.end()) rx_event(qpn, r->second, e);
    return;
  }
  auto a = tx_by_qpn_.find(qpn);
  if (a == tx_by_qpn_.end()) return;
  const ipoib::HwAddr addr = a->second;
  auto t = tx_.find(addr);
  if (t != tx_.end()) tx_event(addr, t->second, e);
}

void IpoibCm::tx_event(const ipoib::HwAddr& a, Tx& t, const proto::CmEventMsg& e) {
  switch (E(e.type)) {
    case E::kReply: {
      auto pd = peer_private(e);
      if (!pd) {
        ++counters_.rej_bad_private;
        logger()->info("connected mode: REP from {}: {}", gid_text(a.gid), pd.error().str());
        return end_tx(a, true);
      }
      t.peer_mtu = pd->mtu;
      return;
    }
    case E::kEstablished:
      return tx_up(a, t);
    case E::kRejected:
    case E::kTimeout:
    case E::kError:
      return end_tx(a, true);
    case E::kDisconnectRequest:
    case E::kDisconnected:
      ++counters_.disconnects;
      return end_tx(a, false);
    default:
      return;
  }
}

void IpoibCm::tx_up(const ipoib::HwAddr& a, Tx& t) {
  if (t.state != TxState::kConnecting) return;
  if (t.peer_mtu == 0) t.peer_mtu = ipoib::kCmBufBytes;
  t.state = TxState::kUp;
  ++counters_.established_tx;
  logger()->debug("connected mode: to {} QPN {:#x} up (QP {:#x})", gid_text(a.gid), a.qpn, t.qpn);
  auto q = std::move(t.queue);
  t.queue.clear();
  port_->begin_batch();
  for (const auto& p : q) {
    if (p.size() <= t.peer_mtu && port_->send(t.qpn, p)) continue;
    if (hooks_.send_ud) hooks_.send_ud(a, p);
  }
  port_->end_batch();
}

void IpoibCm::end_tx(const ipoib::HwAddr& a, bool fallback) {
  auto it = tx_.find(a);
  if (it == tx_.end()) return;
  Tx t = std::move(it->second);
  if (t.id) {
    (void)cm_.destroy(kIpoibCmOwner, t.id);  // DREQ when established, REJ when not
    by_id_.erase(t.id);
  }
  if (t.qpn) {
    tx_by_qpn_.erase(t.qpn);
    qp_state_.erase(t.qpn);
    if (port_) port_->destroy_qp(t.qpn);
  }
  if (!fallback) {
    counters_.drop_queue_full += t.queue.size();
    tx_.erase(it);
    return;
  }
  ++counters_.fallbacks;
  logger()->info("connected mode: {} QPN {:#x}: datagram mode for {} s", gid_text(a.gid), a.qpn,
                 std::chrono::duration_cast<std::chrono::seconds>(kFallbackFor).count());
  Tx f;
  f.state = TxState::kFallback;
  f.retry_at = std::chrono::steady_clock::now() + kFallbackFor;
  it->second = std::move(f);
  for (const auto& p : t.queue)
    if (hooks_.send_ud) hooks_.send_ud(a, p);
}

// A REQ for our listener (RFC 4755 §5): well-formed private data from a
// neighbour, within kMaxRx, gets an RC QP on the SRQ and a REP.
void IpoibCm::on_request(const proto::CmEventMsg& e) {
  auto refuse = [&](uint64_t& counter, uint16_t reason, const std::string& why) {
    ++counter;
    logger()->info("connected mode: REQ from {} refused: {}", gid_text(e.remote_gid), why);
    proto::CmRejectReq q;
    q.id = e.id;
    q.reason = reason;
    (void)cm_.reject(kIpoibCmOwner, q);
    (void)cm_.destroy(kIpoibCmOwner, e.id);
  };
  if (e.listen_id != listen_id_ || !port_) return refuse(counters_.rej_full, 28, "not listening");
  auto pd = peer_private(e);
  if (!pd) return refuse(counters_.rej_bad_private, 28, pd.error().str());
  const ipoib::HwAddr peer{pd->qpn & 0xFFFFFF, e.remote_gid};
  if (!hooks_.is_neighbour || !hooks_.is_neighbour(peer))
    return refuse(counters_.rej_not_neighbour, 28, fmt::format("QPN {:#x} is no neighbour", peer.qpn));
  // The REQ's GID is what its sender claims; the LID it came from is not.
  if (auto lid = hooks_.lid_of ? hooks_.lid_of(peer.gid) : std::nullopt; lid && *lid != e.remote_lid)
    return refuse(counters_.rej_spoofed, 28, fmt::format("it came from LID {:#x}, its path's is {:#x}", e.remote_lid, *lid));
  if (rx_.size() >= kMaxRx) return refuse(counters_.rej_full, 3, "too many connections");  // IBA 12.6.7.2: no resources
  accept(e.id, peer);
}

void IpoibCm::accept(uint32_t id, const ipoib::HwAddr& peer) {
  const uint64_t ep = epoch_;
  port_->create_qp_async([this, id, peer, ep, alive = std::weak_ptr<bool>(alive_)](Result<uint32_t> q) {
    if (alive.expired()) return;
    if (ep != epoch_ || !port_ || !q) {
      if (q && port_) port_->destroy_qp(*q);
      if (ep == epoch_) (void)cm_.destroy(kIpoibCmOwner, id);
      return;
    }
    const uint32_t qpn = *q;
    qp_state_[qpn] = 0;
    rx_[qpn] = Rx{peer, id, false};
    by_id_[id] = {false, qpn};
    proto::CmAcceptReq a;
    a.id = id;
    a.qp = qpn;
    a.rnr_retry_count = 7;
    a.private_data = own_private(ud_qpn_, a.private_len);
    cm_.accept(kIpoibCmOwner, a, [this, qpn, ep, alive](Result<void> r) {
      if (alive.expired() || ep != epoch_ || r) return;
      logger()->info("connected mode: accepting on QP {:#x}: {}", qpn, r.error().str());
      end_rx(qpn);
    });
  });
}

void IpoibCm::rx_event(uint32_t qpn, Rx& r, const proto::CmEventMsg& e) {
  switch (E(e.type)) {
    case E::kEstablished:
      if (!r.established) ++counters_.established_rx;
      r.established = true;
      return;
    case E::kTimeout:
      ++counters_.rtu_timeouts;
      return end_rx(qpn);
    case E::kDisconnectRequest:
    case E::kDisconnected:
      ++counters_.disconnects;
      return end_rx(qpn);
    case E::kRejected:
    case E::kError:
      return end_rx(qpn);
    default:
      return;
  }
}

void IpoibCm::end_rx(uint32_t qpn) {
  auto it = rx_.find(qpn);
  if (it == rx_.end()) return;
  (void)cm_.destroy(kIpoibCmOwner, it->second.id);
  by_id_.erase(it->second.id);
  rx_.erase(it);
  qp_state_.erase(qpn);
  if (port_) port_->destroy_qp(qpn);
}

// A completion in error: the connection is over (the peer gone, a too
// long message into our receive); the next packet connects again.
void IpoibCm::qp_broken(uint32_t qpn) {
  ++counters_.broken;
  if (rx_.count(qpn)) return end_rx(qpn);
  auto a = tx_by_qpn_.find(qpn);
  if (a != tx_by_qpn_.end()) return end_tx(ipoib::HwAddr(a->second), false);
  if (port_) port_->destroy_qp(qpn);
}

std::vector<std::pair<std::string, uint64_t>> IpoibCm::counter_list() const {
  const auto& c = counters_;
  std::vector<std::pair<std::string, uint64_t>> v = {
      {"cm_connects", c.connects},           {"cm_established_tx", c.established_tx},
      {"cm_established_rx", c.established_rx}, {"cm_fallbacks", c.fallbacks},
      {"cm_rej_not_neighbour", c.rej_not_neighbour}, {"cm_rej_spoofed", c.rej_spoofed},
      {"cm_rej_bad_private", c.rej_bad_private},
      {"cm_rej_full", c.rej_full},           {"cm_rtu_timeouts", c.rtu_timeouts},
      {"cm_disconnects", c.disconnects},     {"cm_broken", c.broken},
      {"cm_drop_queue_full", c.drop_queue_full}, {"cm_drop_no_slot", c.drop_no_slot},
      {"cm_drop_unknown_qp", c.drop_unknown_qp}};
  if (port_) {
    const auto& p = port_->counters();
    v.insert(v.end(), {{"cm_qp_sent", p.sent}, {"cm_qp_received", p.received}, {"cm_qp_send_errors", p.send_errors},
                       {"cm_qp_recv_errors", p.recv_errors}, {"cm_qp_no_send_slot", p.no_send_slot}});
  }
  return v;
}

std::string IpoibCm::json() const {
  static constexpr const char* kState[] = {"none", "connecting", "up", "datagram"};
  nlohmann::json j = nlohmann::json::array();
  for (const auto& [a, t] : tx_)
    j.push_back({{"direction", "send"}, {"gid", gid_text(a.gid)}, {"qpn", fmt::format("{:#x}", a.qpn)},
                 {"state", kState[int(t.state)]}, {"rc_qpn", fmt::format("{:#x}", t.qpn)}, {"queued", t.queue.size()}});
  for (const auto& [qpn, r] : rx_)
    j.push_back({{"direction", "receive"}, {"gid", gid_text(r.peer.gid)}, {"qpn", fmt::format("{:#x}", r.peer.qpn)},
                 {"state", r.established ? "up" : "connecting"}, {"rc_qpn", fmt::format("{:#x}", qpn)}});
  return j.dump();
}

}  // namespace openib::ibd
