#include "mad/layer.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <boost/asio/post.hpp>

#include "common/log.hpp"
#include "mad/smp.hpp"

namespace openib::mad {
namespace asio = boost::asio;

namespace {

constexpr size_t kCommonHeader = 24;  // IBA 13.4.2
constexpr uint8_t kTrapRepress = 0x07;
constexpr auto kRmppSegmentTimeout = std::chrono::milliseconds(500);
constexpr auto kReassemblyIdle = std::chrono::seconds(10);

bool vendor_with_oui(uint8_t c) { return c >= 0x30 && c <= 0x4f; }  // IBA 13.4.9.1

bool rmpp_active(ConstBytes mad, RmppHeader* out) {
  if (mad.size() < kRmppPayloadOff || !rmpp_class_allowed(get8(mad, 1))) return false;
  auto h = decode_rmpp_header(mad);
  if (!h || !(h->flags & rmpp_flag::kActive)) return false;
  if (out) *out = *h;
  return true;
}

}  // namespace

bool is_response_mad(ConstBytes mad) {
  const uint8_t m = get8(mad, 3);
  return (m & 0x80) || m == kTrapRepress;
}

MadLayer::MadLayer(asio::io_context& io, std::unique_ptr<MadTransport> port) : io_(io), port_(std::move(port)) {
  port_->set_receiver([this](const ReceivedMad& r) { on_receive(r); });
}

MadLayer::~MadLayer() = default;

bool MadLayer::on_cq_event(uint32_t cqn) { return port_->on_cq_event(cqn); }

Result<uint32_t> MadLayer::register_agent(const AgentSpec& spec, Handler h) {
  if (spec.rmpp_version > 1) return err(EINVAL, "RMPP version {} (1 is the only one)", spec.rmpp_version);
  // IBA 13.4.4: SMPs go on QP0, which only a port with an SMI has (Linux's
  // ib_register_mad_agent refuses QP0 agents where !rdma_cap_ib_smi).
  if (is_smp_class(spec.mgmt_class) && !port_->has_smi())
    return err(EOPNOTSUPP, "port {} has no QP0 (no SMI: not an InfiniBand port): class {:#04x} is an SMP class",
               port_->port(), spec.mgmt_class);
  if (spec.rmpp_version && !rmpp_class_allowed(spec.mgmt_class))
    return err(EINVAL, "class {:#04x} does not use RMPP", spec.mgmt_class);
  if (vendor_with_oui(spec.mgmt_class) && spec.oui == 0)
    return err(EINVAL, "class {:#04x} needs an OUI", spec.mgmt_class);
  for (auto& [k, a] : agents_)
    if (a.spec.mgmt_class == spec.mgmt_class && a.spec.class_version == spec.class_version &&
        (!vendor_with_oui(spec.mgmt_class) || a.spec.oui == spec.oui) &&
        ((a.spec.methods[0] & spec.methods[0]) || (a.spec.methods[1] & spec.methods[1])))
      return err(EBUSY, "class {:#04x} version {}: a method is already taken by another agent", spec.mgmt_class,
                 spec.class_version);
  while (next_key_ == 0 || agents_.count(next_key_)) ++next_key_;
  const uint32_t key = next_key_++;
  agents_[key] = Agent{spec, std::move(h)};
  return key;
}

void MadLayer::unregister_agent(uint32_t agent) {
  agents_.erase(agent);
  std::erase_if(pending_, [&](auto& kv) { return kv.second.agent == agent; });
  std::erase_if(outbound_, [&](auto& kv) { return kv.second.agent == agent; });
  std::erase_if(inbound_, [&](auto& kv) { return kv.second.agent == agent; });
}

Result<void> MadLayer::post(uint8_t qp, const MadAddress& to, ConstBytes mad) {
  ++posting_;
  auto r = port_->send(qp, to, mad);
  --posting_;
  if (r) ++counters_.sent;
  else ++counters_.send_errors;
  return r;
}

Result<void> MadLayer::send(uint32_t agent, const MadAddress& to, std::span<const std::byte> msg,
                            uint32_t timeout_ms, uint32_t retries) {
  auto it = agents_.find(agent);
  if (it == agents_.end()) return err(EINVAL, "no agent {}", agent);
  if (msg.size() < kCommonHeader) return err(EINVAL, "a MAD of {} bytes", msg.size());
  const AgentSpec& spec = it->second.spec;
  const uint8_t cls = get8(msg, 1);
  const uint8_t qp = is_smp_class(cls) ? 0 : 1;
  const bool request = !is_response_mad(msg);
  ByteVec copy(msg.begin(), msg.end());
  if (request) put64(copy, 8, uint64_t(agent) << 32 | (get64(copy, 8) & 0xffffffffu));
  const uint64_t tid = get64(copy, 8);
  MadAddress dest = to;
  if (qp == 1 && dest.qkey == 0) dest.qkey = kGsiQkey;

  const bool rmpp = spec.rmpp_version && rmpp_active(copy, nullptr);
  if (max_outstanding_ && (rmpp || (request && timeout_ms)) && it->second.outstanding >= max_outstanding_)
    return err(ENOBUFS, "agent {} has {} requests awaiting responses, the limit", agent, it->second.outstanding);
  if (rmpp) {
    OPENIB_TRY_ASSIGN(auto segs, rmpp_segment(copy, rmpp_class_header_bytes(cls)));
    if (outbound_.count(tid)) return err(EBUSY, "an RMPP message with TID {:#x} is already being sent", tid);
    Outbound o;
    o.agent = agent;
    o.to = dest;
    o.request = request;
    o.timeout_ms = timeout_ms;
    o.retries = retries;
    o.first = segs.front();
    o.sender = std::make_unique<RmppSender>(std::move(segs));
    o.timer = std::make_unique<asio::steady_timer>(io_);
    auto& ref = outbound_[tid] = std::move(o);
    count(agent, 1);
    ++counters_.rmpp_sent;
    run_outbound(tid, ref.sender->start());
    return ok();
  }
  if (copy.size() > kMadBytes)
    return err(EMSGSIZE, "a {}-byte MAD needs RMPP (register the agent with an RMPP version)", copy.size());
  Mad m{};
  std::copy(copy.begin(), copy.end(), m.begin());
  if (cls == 0x81) OPENIB_TRY(dr_originate(m, dest));
  OPENIB_TRY(post(qp, dest, m));
  if (request && timeout_ms) await_response(agent, qp, dest, m, timeout_ms, retries);
  return ok();
}

// IBA 14.2.2.2 (C14-9:1) and 14.2.2.4 (C14-13:1): a directed-route SMP
// leaving the node that originates it (a request at HopPointer 0, or a
// response at HopCount + 1) has its HopPointer advanced here, as Linux's
// smi_handle_dr_smp_send() does, and goes out with the permissive DLID; one
// with HopCount 0 is for this port itself (the device answers it). Where
// the directed part ends at once, it is sent LID routed.
Result<void> MadLayer::dr_originate(Mad& m, MadAddress& dest) {
  const bool d = smp_direction(m);
  const uint8_t ptr = smp_hop_ptr(m), cnt = smp_hop_cnt(m);
  const bool at_origin = d ? ptr == uint8_t(cnt + 1) : ptr == 0;
  if (!at_origin || cnt == 0) return ok();
  const DrDecision dec = dr_send(m, false, port_->port());
  switch (dec.action) {
    case DrAction::kForward:
      dest.lid = kPermissiveLid;  // IBA 4.1.5
      return ok();
    case DrAction::kLocal: return ok();
    case DrAction::kLidRoute:
      if (dec.lid) dest.lid = dec.lid;
      return ok();
    case DrAction::kDrop: break;
  }
  return err(EINVAL, "directed-route SMP not sendable from port {}: {}", port_->port(), dr_drop_name(dec.reason));
}

void MadLayer::await_response(uint32_t agent, uint8_t qp, const MadAddress& to, const Mad& mad,
                              uint32_t timeout_ms, uint32_t retries) {
  const uint64_t tid = get64(mad, 8);
  Pending p;
  p.agent = agent;
  p.qp = qp;
  p.to = to;
  p.mad = mad;
  p.timeout_ms = timeout_ms;
  p.retries_left = retries;
  p.timer = std::make_unique<asio::steady_timer>(io_);
  p.timer->expires_after(std::chrono::milliseconds(timeout_ms));
  p.timer->async_wait([this, tid](boost::system::error_code ec) {
    if (!ec) on_request_timeout(tid);
  });
  add_pending(tid, std::move(p));
}

void MadLayer::count(uint32_t agent, int delta) {
  auto it = agents_.find(agent);
  if (it == agents_.end()) return;
  if (delta > 0) ++it->second.outstanding;
  else if (it->second.outstanding) --it->second.outstanding;
}

void MadLayer::add_pending(uint64_t tid, Pending p) {
  drop_pending(tid);  // the same TID sent again: the new one replaces it
  count(p.agent, 1);
  pending_[tid] = std::move(p);
}

void MadLayer::drop_pending(uint64_t tid) {
  auto it = pending_.find(tid);
  if (it == pending_.end()) return;
  count(it->second.agent, -1);
  pending_.erase(it);
}

void MadLayer::on_request_timeout(uint64_t tid) {
  auto it = pending_.find(tid);
  if (it == pending_.end()) return;
  Pending& p = it->second;
  if (p.retries_left > 0) {
    --p.retries_left;
    ++counters_.retries;
    (void)post(p.qp, p.to, p.mad);
    p.timer->expires_after(std::chrono::milliseconds(p.timeout_ms));
    p.timer->async_wait([this, tid](boost::system::error_code ec) {
      if (!ec) on_request_timeout(tid);
    });
    return;
  }
  ++counters_.timeouts;
  const uint32_t agent = p.agent;
  const MadAddress to = p.to;
  Mad m = p.mad;
  drop_pending(tid);
  deliver(agent, ETIMEDOUT, to, std::span(m.data(), kCommonHeader));
}

void MadLayer::fail_outstanding(uint32_t status) {
  std::vector<std::tuple<uint32_t, MadAddress, Mad>> back;
  for (auto& [tid, p] : pending_) back.emplace_back(p.agent, p.to, p.mad);
  for (auto& [tid, o] : outbound_)
    if (o.request && o.timeout_ms) back.emplace_back(o.agent, o.to, o.first);
  pending_.clear();
  outbound_.clear();
  inbound_.clear();
  for (auto& [key, a] : agents_) a.outstanding = 0;
  for (auto& [agent, to, m] : back) deliver(agent, status, to, std::span(m.data(), kCommonHeader));
}

void MadLayer::run_outbound(uint64_t tid, RmppSender::Step step) {
  auto it = outbound_.find(tid);
  if (it == outbound_.end()) return;
  Outbound& o = it->second;
  for (const Mad& m : step.to_send) (void)post(1, o.to, m);
  if (step.complete) {
    const uint32_t agent = o.agent;
    if (o.request && o.timeout_ms) await_response(agent, 1, o.to, o.first, o.timeout_ms, 0);
    count(agent, -1);
    outbound_.erase(it);
    return;
  }
  if (step.failed) {
    ++counters_.rmpp_aborted;
    const uint32_t agent = o.agent;
    const MadAddress to = o.to;
    Mad first = o.first;
    count(agent, -1);
    outbound_.erase(it);
    deliver(agent, step.status == rmpp_status::kTooManyRetries ? ETIMEDOUT : ECOMM, to,
            std::span(first.data(), kCommonHeader));
    return;
  }
  arm_outbound_timer(tid);
}

void MadLayer::arm_outbound_timer(uint64_t tid) {
  auto it = outbound_.find(tid);
  if (it == outbound_.end()) return;
  it->second.timer->expires_after(kRmppSegmentTimeout);
  it->second.timer->async_wait([this, tid](boost::system::error_code ec) {
    if (ec) return;
    auto o = outbound_.find(tid);
    if (o != outbound_.end()) run_outbound(tid, o->second.sender->on_timeout());
  });
}

MadLayer::Agent* MadLayer::agent_for_request(ConstBytes mad, uint32_t* key) {
  const uint8_t cls = get8(mad, 1), version = get8(mad, 2), method = get8(mad, 3);
  const uint32_t oui = uint32_t(get_be(mad, 37, 3));  // IBA 13.4.9.1: vendor range 2 OUI at byte 37
  for (auto& [k, a] : agents_) {
    if (a.spec.mgmt_class != cls || a.spec.class_version != version) continue;
    if (vendor_with_oui(cls) && a.spec.oui != oui) continue;
    const uint64_t bits = method < 64 ? a.spec.methods[0] >> method : a.spec.methods[1] >> (method - 64);
    if (bits & 1) {
      if (key) *key = k;
      return &a;
    }
  }
  return nullptr;
}

MadLayer::Agent* MadLayer::agent_for_response(ConstBytes mad, uint32_t* key) {
  const uint32_t hi = uint32_t(get64(mad, 8) >> 32);
  auto it = agents_.find(hi);
  if (it == agents_.end()) return nullptr;
  if (key) *key = hi;
  return &it->second;
}

void MadLayer::deliver(uint32_t agent, uint32_t status, const MadAddress& from, ConstBytes data) {
  auto it = agents_.find(agent);
  if (it == agents_.end() || !it->second.handler) return;
  Delivery d;
  d.status = status;
  d.from = from;
  d.data.assign(data.begin(), data.end());
  ++counters_.delivered;
  // A copy: the handler may unregister its own agent.
  const Handler h = it->second.handler;
  h(d);
}

// A MAD handed over from inside port_->send() waits for the loop: the
// send that was under way (a request about to be awaited, an RMPP window
// being posted) finishes first, and the MAD then finds its state complete.
void MadLayer::on_receive(const ReceivedMad& r) {
  if (!posting_ && deferred_.empty()) return handle_receive(r);
  deferred_.push_back(r);  // behind those already waiting, in order
  if (deferred_.size() > 1) return;  // already scheduled
  asio::post(io_, [this, alive = std::weak_ptr<bool>(alive_)] {
    if (alive.expired()) return;
    while (!deferred_.empty() && !posting_) {
      const ReceivedMad m = deferred_.front();
      deferred_.pop_front();
      handle_receive(m);
    }
  });
}

void MadLayer::handle_receive(const ReceivedMad& r) {
  ++counters_.received;
  ConstBytes mad(r.mad.data(), r.mad.size());
  RmppHeader h;
  if (r.qp == 1 && rmpp_active(mad, &h)) {
    on_rmpp(r, h);
    return;
  }
  if (is_response_mad(mad)) {
    uint32_t key = 0;
    if (!agent_for_response(mad, &key)) {
      ++counters_.unmatched_responses;
      return;
    }
    drop_pending(get64(mad, 8));
    deliver(key, 0, r.from, mad);
    return;
  }
  uint32_t key = 0;
  if (agent_for_request(mad, &key)) {
    deliver(key, 0, r.from, mad);
    return;
  }
  ++counters_.unclaimed_requests;
}

void MadLayer::on_rmpp(const ReceivedMad& r, const RmppHeader& h) {
  ConstBytes mad(r.mad.data(), r.mad.size());
  const uint64_t tid = get64(mad, 8);
  const TransferKey key{tid, r.from.lid, r.from.qpn};
  if (h.type == rmpp_type::kAck || h.type == rmpp_type::kStop || h.type == rmpp_type::kAbort) {
    if (auto o = outbound_.find(tid); o != outbound_.end()) {
      run_outbound(tid, o->second.sender->on_mad(mad));
      return;
    }
    if (auto in = inbound_.find(key); in != inbound_.end() && h.type != rmpp_type::kAck) {
      (void)in->second.reasm->feed(mad);  // the sender gave up
      inbound_.erase(in);
      ++counters_.rmpp_aborted;
    }
    return;
  }
  // DATA: to the agent the message is for.
  uint32_t agent = 0;
  const bool response = is_response_mad(mad);
  if (response) {
    if (!agent_for_response(mad, &agent)) {
      ++counters_.unmatched_responses;
      return;
    }
  } else {
    if (!agent_for_request(mad, &agent)) {
      ++counters_.unclaimed_requests;
      return;
    }
  }
  if (agents_[agent].spec.rmpp_version == 0) {  // the agent does its own RMPP
    deliver(agent, 0, r.from, mad);
    return;
  }
  auto it = inbound_.find(key);
  if (it == inbound_.end()) {
    if (!(h.flags & rmpp_flag::kFirst)) return;  // a stray segment of a transfer we do not hold
    Inbound in;
    in.agent = agent;
    in.from = r.from;
    in.ack_to = r.from;
    // The receive does not tell the sender's Q_Key (QP1 receives say the
    // GSI's): ACKs to a response go with the Q_Key its request went with
    // (a redirected GSI QP's, IBA 13.5.3.3).
    if (auto p = pending_.find(tid); response && p != pending_.end()) in.ack_to.qkey = p->second.to.qkey;
    in.reasm = std::make_unique<RmppReassembler>(rmpp_class_header_bytes(get8(mad, 1)));
    in.timer = std::make_unique<asio::steady_timer>(io_);
    it = inbound_.emplace(key, std::move(in)).first;
    if (response) drop_pending(tid);  // the response has begun: no more resends of the request
  }
  auto step = it->second.reasm->feed(mad);
  for (const Mad& m : step.to_send) (void)post(1, it->second.ack_to, m);
  if (step.message) {
    ++counters_.rmpp_received;
    const uint32_t a = it->second.agent;
    const MadAddress from = it->second.from;
    ByteVec msg = std::move(*step.message);
    inbound_.erase(it);
    deliver(a, 0, from, msg);
    return;
  }
  if (step.failed) {
    ++counters_.rmpp_aborted;
    inbound_.erase(it);
    return;
  }
  it->second.timer->expires_after(kReassemblyIdle);
  it->second.timer->async_wait([this, key](boost::system::error_code ec) {
    if (ec) return;
    if (inbound_.erase(key)) ++counters_.rmpp_aborted;
  });
}

}  // namespace openib::mad
