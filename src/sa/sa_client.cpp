// The SA client of one port (IBA 15.4; timeouts and retries IBA 13.4.6.4,
// BUSY IBA 13.4.7, ClassPortInfo IBA 13.4.8.1, redirection IBA 13.5.3.3).
// docs/sa.md "SA client".
#include "sa/sa_client.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <limits>

#include "common/log.hpp"
#include "mad/mad.hpp"
#include "sa/inform_info.hpp"
#include "sa/path_query.hpp"

namespace openib::sa {

namespace {

const auto& logger() {
  static const auto l = log::get("sa");
  return l;
}

// 4.096 us x 2^RespTimeValue x 2 in whole ms (rounded up), within
// [lo, hi]. RespTimeValue is 5 bits (IBA 13.4.8.1): 8192 ns x 2^31 fits
// 64 bits.
std::uint32_t timeout_from_resp_time(std::uint8_t rtv, std::uint32_t lo, std::uint32_t hi) {
  const std::uint64_t ns = std::uint64_t{8192} << (rtv & 0x1f);
  const std::uint64_t ms = (ns + 999'999) / 1'000'000;
  return static_cast<std::uint32_t>(std::clamp<std::uint64_t>(ms, lo, std::max(lo, hi)));
}

// An answer that counts as answered: MAD status 0, or SA status NoRecords
// with no common status bits (IBA 15.2.1.1).
bool answered(std::uint16_t st) {
  return st == mad::status::kOk || ((st & 0x00ff) == 0 && sa_status_code(st) == status::kNoRecords);
}

}  // namespace

SaClient::SaClient(boost::asio::io_context& io, SmFn sm, SaClientConfig cfg)
    : io_(io), sm_(std::move(sm)), cfg_(cfg), timeout_ms_(cfg.timeout_ms) {}

SaClient::~SaClient() {
  alive_.reset();  // no timer, SM lookup or delivery reaches this client any more
  layer_ = nullptr;
  ++attach_gen_;
  fail_all(ECANCELED, "the SA client is going away");
}

Result<void> SaClient::attach(mad::MadLayer& layer) {
  if (layer_) return err(EALREADY, "the SA client is attached to a MAD layer already");
  mad::AgentSpec spec;
  spec.mgmt_class = mad::mgmt_class::kSubnAdm;
  spec.class_version = mad::kSaClassVersion;
  spec.rmpp_version = 1;  // GetTable answers arrive reassembled (IBA 13.6)
  if (on_report_) spec.methods[0] = std::uint64_t{1} << mad::method::kReport;
  const std::uint32_t gen = ++attach_gen_;
  auto agent = layer.register_agent(spec, [this, alive = std::weak_ptr<char>(alive_), gen](const mad::Delivery& d) {
    if (alive.expired() || gen != attach_gen_) return;  // destroyed, or an earlier attach's layer
    on_delivery(d);
  });
  if (!agent) return err(EBUSY, "SA agent refused by the MAD layer of port {}: {}", layer.port(), agent.error().message);
  layer_ = &layer;
  agent_ = *agent;
  timeout_ms_ = cfg_.timeout_ms;  // until this layer's SA has said its RespTimeValue
  cpi_.reset();
  redirect_.reset();
  ask_class_port_info();
  return ok();
}

void SaClient::detach() {
  if (!layer_) return;
  layer_ = nullptr;
  ++attach_gen_;
  fail_all(EIO, "the port's MAD layer went away");
}

void SaClient::fail_all(int code, const char* why) {
  std::map<std::uint32_t, Pending> gone;
  gone.swap(pending_);
  blocked_.clear();  // callbacks may make new queries: those are not in `gone`
  for (auto& [tid, p] : gone) {
    if (p.busy_timer) p.busy_timer->cancel();
    AnswerFn done = std::move(p.done);
    if (done) done(err(code, "SA query {:#06x} (TID {:#x}): {}", p.req.attr_id, tid, why));
  }
}

void SaClient::query(const SaRequest& req, ConstBytes record, AnswerFn done) {
  if (!layer_) return done(err(ENODEV, "SA query {:#06x}: no MAD layer (port not open)", req.attr_id));
  if (record.size() > kSaDataBytes)
    return done(err(EINVAL, "SA query {:#06x}: a record of {} bytes (at most {})", req.attr_id, record.size(),
                    kSaDataBytes));
  while (next_tid_ == 0 || pending_.count(next_tid_)) ++next_tid_;
  const std::uint32_t tid = next_tid_++;
  Pending p;
  p.req = req;
  p.record.assign(record.begin(), record.end());
  p.done = std::move(done);
  p.busy_left = cfg_.busy_retries;
  p.busy_wait_ms = cfg_.busy_ms;
  pending_.emplace(tid, std::move(p));
  ++counters_.queries;
  send(tid);
  if (!cpi_ && !cpi_asking_ && req.attr_id != mad::attr::kClassPortInfo) ask_class_port_info();
}

void SaClient::sm_changed() {
  if (redirect_) drop_redirect("the SM may have changed");
  if (layer_ && !cpi_asking_) ask_class_port_info();
}

void SaClient::query_path(const PathKey& key, PathAnswerFn done) {
  // make_path_query() builds the whole MAD; query() takes it apart again
  // into the request and its record (the TID is the client's).
  auto m = make_path_query(key, 0);
  if (!m) return done(m.take_error());
  auto h = decode_sa_header(*m);
  if (!h) return done(h.take_error());
  SaRequest req;
  req.method = mad::mad_method(*m);
  req.attr_id = mad::mad_attr_id(*m);
  req.attr_mod = mad::mad_attr_mod(*m);
  req.sm_key = h->sm_key;
  req.comp_mask = h->comp_mask;
  query(req, ConstBytes(*m).subspan(kSaDataOff, kPathRecordBytes), [done = std::move(done)](Result<ByteVec> r) {
    if (!r) return done(r.take_error());
    done(parse_path_answer(*r));
  });
}

// Asks where the SM is now, then sends the pending query `tid` there.
void SaClient::send(std::uint32_t tid) {
  if (!sm_) return finish(tid, err(ENETUNREACH, "SA query: nothing tells where the SM is"));
  sm_([this, alive = std::weak_ptr<char>(alive_), tid](Result<SmAddress> sm) {
    if (alive.expired()) return;
    auto it = pending_.find(tid);
    if (it == pending_.end() || !layer_) return;  // finished meanwhile (detached)
    if (!sm) {
      const int code = sm.error().code ? sm.error().code : ENETUNREACH;
      return finish(tid, err(code, "SA query: where the SM is: {}", sm.error().message));
    }
    if (sm->lid == 0) return finish(tid, err(ENETUNREACH, "SA query: no SM known (MasterSMLID 0)"));
    Pending& p = it->second;
    SaRequest req = p.req;
    req.tid = tid;  // the layer puts the agent's key in bits 63:32
    auto m = make_sa_request(req, p.record);
    if (!m) return finish(tid, m.take_error());
    if (redirect_ && redirect_->sm_lid != sm->lid) drop_redirect("the SM's LID changed");
    sm_lid_ = p.sm_lid = sm->lid;
    mad::MadAddress to;
    to.qpn = 1;  // the SA is the SM port's GSI (IBA 15.4)
    to.qkey = mad::kGsiQkey;
    to.lid = sm->lid;
    to.sl = sm->sl;
    p.sent_to.reset();
    // IBA 13.5.3.3: while redirected, the class's requests go to the
    // redirect QP; ClassPortInfo is asked of the SM (it says where).
    if (redirect_ && !p.sm_only && p.req.attr_id != mad::attr::kClassPortInfo) {
      p.sent_to = redirect_;
      to.qpn = redirect_->qpn;
      to.qkey = redirect_->qkey;
      to.lid = redirect_->lid;
      to.sl = redirect_->sl;
    }
    if (auto s = layer_->send(agent_, to, *m, timeout_ms_, cfg_.retries); !s) {
      if (s.error().code != ENOBUFS) return finish(tid, s.take_error());
      // The agent's outstanding limit: sent when an earlier query completes.
      ++counters_.queued;
      blocked_.push_back(tid);
    }
  });
}

void SaClient::send_blocked() {
  while (!blocked_.empty()) {
    const std::uint32_t tid = blocked_.front();
    blocked_.pop_front();
    if (pending_.count(tid)) return send(tid);  // refused again: back in the queue
  }
}

void SaClient::on_delivery(const mad::Delivery& d) {
  if (d.data.size() < mad::kMadHeaderBytes) {
    ++counters_.errors;
    return;
  }
  const ConstBytes data(d.data);
  if (d.status == 0 && mad::mad_method(data) == mad::method::kReport) return on_report(d);
  const auto tid = static_cast<std::uint32_t>(mad::mad_tid(data));
  auto it = pending_.find(tid);
  if (it == pending_.end()) {  // late (after its timeout), or not ours
    ++counters_.errors;
    logger()->debug("SA answer with TID {:#x} matches no query: dropped", mad::mad_tid(data));
    return;
  }
  Pending& p = it->second;
  if (d.status == ETIMEDOUT) {
    if (p.sent_to && !p.fell_back) return send_timed_out(tid);
    ++counters_.timeouts;
    return finish(tid, err(ETIMEDOUT, "SA query {:#06x}: no answer in {} tries of {} ms", p.req.attr_id,
                           cfg_.retries + 1, timeout_ms_));
  }
  if (d.status) return finish(tid, err(static_cast<int>(d.status), "SA query {:#06x} not completed", p.req.attr_id));
  const bool sa_response = data.size() >= kSaDataOff && mad::mad_class(data) == mad::mgmt_class::kSubnAdm &&
                           mad::is_response(mad::mad_method(data));
  // IBA 13.4.7: a redirect answer carries a ClassPortInfo (its attribute
  // the query's or ClassPortInfo's): the query is sent where it says.
  if (sa_response && (mad::mad_status(data) & mad::status::kRedirect) && redirect_answer(tid, data)) return;
  if (!sa_response || mad::mad_attr_id(data) != p.req.attr_id) {
    ++counters_.errors;
    return finish(tid, err(EPROTO, "SA query {:#06x}: answered by a {}-byte MAD of class {:#04x}, method {:#04x}, "
                                   "attribute {:#06x}",
                           p.req.attr_id, data.size(), mad::mad_class(data), mad::mad_method(data),
                           mad::mad_attr_id(data)));
  }
  const std::uint16_t st = mad::mad_status(data);
  if (st & mad::status::kBusy) {  // IBA 13.4.7: ask again later
    ++counters_.busy;
    if (p.busy_left == 0)
      return finish(tid, err(EBUSY, "SA query {:#06x}: SA still busy after {} re-asks", p.req.attr_id,
                             cfg_.busy_retries));
    --p.busy_left;
    send_blocked();  // its slot is free until the re-ask
    const std::uint32_t wait = p.busy_wait_ms;
    p.busy_wait_ms = static_cast<std::uint32_t>(
        std::min<std::uint64_t>(std::uint64_t{wait} * 2, std::numeric_limits<std::uint32_t>::max()));
    if (!p.busy_timer) p.busy_timer = std::make_unique<boost::asio::steady_timer>(io_);
    p.busy_timer->expires_after(std::chrono::milliseconds(wait));
    p.busy_timer->async_wait([this, alive = std::weak_ptr<char>(alive_), tid](boost::system::error_code ec) {
      if (ec || alive.expired() || !pending_.count(tid)) return;
      send(tid);
    });
    return;
  }
  if ((st & mad::status::kRedirect) && p.req.attr_id != mad::attr::kClassPortInfo) {
    ++counters_.errors;  // redirect_answer() could not follow it (logged there)
  } else if (answered(st) || st == mad::status::kRedirect) {
    ++counters_.answers;
  } else {
    ++counters_.errors;
  }
  finish(tid, ByteVec(d.data));
}

void SaClient::finish(std::uint32_t tid, Result<mad::ByteVec> r) {
  auto it = pending_.find(tid);
  if (it == pending_.end()) return;
  AnswerFn done = std::move(it->second.done);
  pending_.erase(it);  // before done: it may query again
  send_blocked();      // its slot (if it had one) goes to the oldest waiting
  if (done) done(std::move(r));
}

void SaClient::ask_class_port_info() {
  SaRequest req;
  req.method = mad::method::kGet;
  req.attr_id = mad::attr::kClassPortInfo;
  cpi_asking_ = true;
  query(req, {}, [this, gen = attach_gen_, alive = std::weak_ptr<char>(alive_)](Result<ByteVec> r) {
    if (alive.expired()) return;
    cpi_asking_ = false;
    if (!r) {
      const bool going = r.error().code == ECANCELED || r.error().code == EIO;
      logger()->log(going ? spdlog::level::debug : spdlog::level::info,
                    "SA ClassPortInfo not known: {}; timeout stays {} ms", r.error().str(), timeout_ms_);
      return;
    }
    if (gen != attach_gen_) return;  // a later attach asks its own
    const ConstBytes a(*r);
    const std::uint16_t st = mad::mad_status(a);
    if (st != mad::status::kOk && st != mad::status::kRedirect) {
      logger()->info("SA ClassPortInfo refused (MAD status {:#06x}); timeout stays {} ms", st, timeout_ms_);
      return;
    }
    auto cpi = mad::decode_class_port_info(a.subspan(kSaDataOff));
    if (!cpi) {
      ++counters_.errors;
      logger()->warn("SA ClassPortInfo unreadable: {}", cpi.error().str());
      return;
    }
    ++counters_.class_port_info;
    timeout_ms_ = timeout_from_resp_time(cpi->resp_time_value, cfg_.min_timeout_ms, cfg_.max_timeout_ms);
    if (cpi->redirect_lid == 0 && st != mad::status::kRedirect) drop_redirect("the SA's ClassPortInfo names none now");
    else if (!take_redirect(*cpi, sm_lid_)) drop_redirect("the SA's ClassPortInfo names one not followed");
    logger()->debug("SA RespTimeValue {}: query timeout {} ms", cpi->resp_time_value, timeout_ms_);
    cpi_ = *cpi;
  });
}

bool SaClient::take_redirect(const mad::ClassPortInfo& cpi, std::uint16_t sm_lid) {
  if (cpi.redirect_lid == 0 || cpi.redirect_qp == 0) {
    ++counters_.errors;
    logger()->warn("SA redirect to LID {} QP {:#x} not followed (GID-only redirects and QP0 are not supported)",
                   cpi.redirect_lid, cpi.redirect_qp);
    return false;
  }
  const SaRedirect r{cpi.redirect_lid, cpi.redirect_sl, cpi.redirect_qp, cpi.redirect_qkey, cpi.redirect_pkey,
                     sm_lid};
  if (redirect_ != r) {
    ++counters_.redirects;
    logger()->info("SA redirects to LID {} SL {} QP {:#x} Q_Key {:#x} P_Key {:#06x}", r.lid, r.sl, r.qpn, r.qkey,
                   r.pkey);
  }
  redirect_ = r;
  return true;
}

void SaClient::drop_redirect(const char* why) {
  if (!redirect_) return;
  logger()->info("SA redirect to LID {} QP {:#x} dropped: {}", redirect_->lid, redirect_->qpn, why);
  redirect_.reset();
}

// An answer with MAD status "redirect" to pending query `tid`: true if the
// query was sent again to the target its ClassPortInfo names. A
// ClassPortInfo query's own redirect answer is its answer (taken there).
bool SaClient::redirect_answer(std::uint32_t tid, ConstBytes data) {
  Pending& p = pending_.at(tid);
  if (p.req.attr_id == mad::attr::kClassPortInfo) return false;
  auto cpi = data.size() >= kSaDataOff + mad::kClassPortInfoBytes
                 ? mad::decode_class_port_info(data.subspan(kSaDataOff))
                 : Result<mad::ClassPortInfo>(err(EPROTO, "no ClassPortInfo"));
  if (!cpi || p.redirects_left == 0) {
    logger()->warn("SA query {:#06x}: a redirect answer not followed: {}", p.req.attr_id,
                   cpi ? "redirected too often" : cpi.error().str());
    return false;
  }
  if (!take_redirect(*cpi, p.sm_lid)) return false;
  --p.redirects_left;
  p.sm_only = false;
  send(tid);
  return true;
}

// A query sent to the redirect target had no answer after every retry:
// the target is dropped, the query asked once more of the SM's QP1, and
// ClassPortInfo asked again (the SM says where its SA is now).
void SaClient::send_timed_out(std::uint32_t tid) {
  Pending& p = pending_.at(tid);
  if (redirect_ && p.sent_to == redirect_) {
    ++counters_.redirect_fallbacks;
    drop_redirect("no answer there: back to the SM");
  }
  p.fell_back = true;
  p.sm_only = true;
  send(tid);
  if (layer_ && !cpi_asking_) ask_class_port_info();
}

void SaClient::on_report(const mad::Delivery& d) {
  const ConstBytes data(d.data);
  auto n = data.size() >= kSaDataOff ? mad::decode_notice(data.subspan(kSaDataOff))
                                     : Result<mad::Notice>(err(EPROTO, "short"));
  if (mad::mad_class(data) != mad::mgmt_class::kSubnAdm || mad::mad_attr_id(data) != mad::attr::kNotice || !n ||
      !layer_) {
    ++counters_.errors;
    logger()->debug("SA Report dropped: {}", n ? "not a Notice" : n.error().str());
    return;
  }
  // IBA 13.4.5: ReportResp, the same TID, the Notice echoed.
  mad::Mad resp{};
  std::copy_n(data.begin(), std::min(data.size(), resp.size()), resp.begin());
  mad::make_response(resp, 0);
  if (auto r = layer_->send(agent_, d.from, resp, 0, 0); !r)
    logger()->info("SA ReportResp to LID {}: {}", d.from.lid, r.error().str());
  ++counters_.reports;
  if (on_report_) on_report_(*n);
}

void SaClient::subscribe(std::uint16_t trap, bool on, std::function<void(Result<void>)> done) {
  ByteVec rec(kInformInfoBytes);
  encode_inform_info(rec, gid_trap_subscription(trap, on, 1));
  SaRequest req;
  req.method = mad::method::kSet;
  req.attr_id = mad::attr::kInformInfo;
  query(req, rec, [done = std::move(done), trap, on](Result<ByteVec> r) {
    if (!r) return done(r.take_error());
    const std::uint16_t st = mad::mad_status(*r);
    if (st != mad::status::kOk)
      return done(err(EREMOTEIO, "InformInfo {} trap {}: MAD status {:#06x}", on ? "subscribe" : "unsubscribe",
                      trap, st));
    done(ok());
  });
}

}  // namespace openib::sa
