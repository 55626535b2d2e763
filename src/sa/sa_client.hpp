// The SA client of one port (IBA 15.4; docs/sa.md "SA client"): SA
// queries as an agent of ibd's MAD layer (class 0x03, version 2, RMPP
// version 1, no request methods), sent on QP1 to the SM's LID and SL as
// the port's PortInfo gives them (Q_Key 0x80010000, IBA 13.5.3.1).
//
//  - ClassPortInfo (IBA 13.4.8.1) is asked first after each attach();
//    its RespTimeValue sets the query timeout: 4.096 us x 2^RespTimeValue
//    x 2 (the SA's response time, and as much again for the packets' way
//    there and back), rounded up to whole ms, within
//    [Config::min_timeout_ms, Config::max_timeout_ms]. Until it has
//    answered (and if it never does), the configured timeout is used.
//  - redirection (IBA 13.5.3.3): a ClassPortInfo with RedirectLID != 0, or
//    an answer with MAD status "redirect" (IBA 13.4.7) carrying one, sends
//    every later query (but ClassPortInfo, always the SM's) to RedirectLID,
//    RedirectSL, RedirectQP with RedirectQ_Key; the redirected answer is
//    re-sent there. A target that stays silent (ETIMEDOUT) is dropped: the
//    query goes once more to the SM's QP1, and ClassPortInfo is asked
//    again. sm_changed() and a new SM LID drop the redirect. Not followed:
//    GID-only redirects (RedirectLID 0), RedirectQP 0 (docs/sa.md).
//  - each query is sent with the timeout and Config::retries resends (the
//    MAD layer's, IBA 13.4.6.4); ETIMEDOUT after the last one.
//  - an answer with MAD status BUSY is asked again (same TID) after
//    Config::busy_ms, doubling, up to Config::busy_retries times; then EBUSY.
//  - an answer that is not an SA response to the attribute asked is EPROTO.
//  - a query the MAD layer refuses for its agent's outstanding limit
//    (ENOBUFS: MadLayer::set_max_outstanding, the user-MAD service's
//    --umad-max-outstanding, which binds every agent of the layer) is not
//    failed: it waits, in order, and is sent as earlier queries complete
//    (issue 29 finding 6: ibd's own Deletes, rejoins and registrations are
//    never dropped). Counted in `queued`.
//  - a multi-record answer (GetTableResp) arrives reassembled by the MAD
//    layer's RMPP.
//  - PathQuerier: query_path() is a SubnAdmGet(PathRecord) (path_query.hpp),
//    as the path cache asks it.
//
// detach() (the port's layer goes with its device) completes every query
// in flight with EIO; queries made while detached fail at once with
// ENODEV. Neither detach() nor the destructor touches the layer: the agent
// stays registered there, its handler inert (the layer goes with its
// device; a later attach() registers a new agent). Single-threaded on
// ibd's io_context; callbacks run on it and may call the client again.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>

#include "common/result.hpp"
#include "mad/layer.hpp"
#include "mad/pma_attrs.hpp"
#include "mad/sma_attrs.hpp"
#include "sa/path_source.hpp"
#include "sa/sa_mad.hpp"

namespace openib::sa {

// Where the SA is: the SM's LID and SL from the port's PortInfo (IBA
// 14.2.5.6 MasterSMLID, MasterSMSL). LID 0: no SM known (ENETUNREACH).
struct SmAddress {
  std::uint16_t lid = 0;
  std::uint8_t sl = 0;
};

// Where queries go while the SA redirects (IBA 13.4.8.1 ClassPortInfo
// RedirectLID, RedirectSL, RedirectQP, RedirectQ_Key, RedirectP_Key).
// The P_Key is kept, not used: MADs go with the port's P_Key at index 0
// (simhca ports have one, PartitionCap 1; libibmad does not map it either).
struct SaRedirect {
  std::uint16_t lid = 0;
  std::uint8_t sl = 0;
  std::uint32_t qpn = 0;
  std::uint32_t qkey = 0;
  std::uint16_t pkey = 0;
  std::uint16_t sm_lid = 0;  // the SM that redirected: another SM drops the redirect
  bool operator==(const SaRedirect&) const = default;
};

struct SaClientConfig {
  std::uint32_t timeout_ms = 1000;     // until ClassPortInfo has answered
  std::uint32_t min_timeout_ms = 100;  // floor of the RespTimeValue-derived timeout
  std::uint32_t max_timeout_ms = 8000; // ceiling of it (a bogus RespTimeValue of 31)
  std::uint32_t retries = 3;
  std::uint32_t busy_ms = 50;          // first wait after BUSY, doubled each time
  std::uint32_t busy_retries = 5;
};

struct SaClientCounters {
  std::uint64_t queries = 0;         // SA requests made (a BUSY re-ask is not a new one)
  std::uint64_t answers = 0;         // answered with MAD status 0 (records or NoRecords)
  std::uint64_t timeouts = 0;        // no answer after every retry
  std::uint64_t busy = 0;            // BUSY answers (each one)
  std::uint64_t errors = 0;          // other error statuses and malformed answers
  std::uint64_t class_port_info = 0; // ClassPortInfo answers taken
  std::uint64_t redirects = 0;       // redirects followed (a new target taken)
  std::uint64_t redirect_fallbacks = 0;  // a silent target dropped: back to the SM
  std::uint64_t reports = 0;         // Reports received and answered
  std::uint64_t queued = 0;          // sends that waited for the agent's outstanding limit
};

class SaClient final : public PathQuerier {
 public:
  // Asks, for each query, where the SM is now (an asynchronous PortInfo
  // read in ibd); an error or LID 0 fails the query with it / ENETUNREACH.
  using SmFn = std::function<void(std::function<void(Result<SmAddress>)>)>;
  // The raw answer: the whole SA MAD, or the reassembled RMPP message;
  // its MAD status is the caller's to read (path_query.hpp does for
  // PathRecords) except BUSY, which the client handles itself.
  using AnswerFn = std::function<void(Result<mad::ByteVec>)>;

  SaClient(boost::asio::io_context& io, SmFn sm, SaClientConfig cfg = {});
  // Queries in flight are completed with ECANCELED.
  ~SaClient() override;
  SaClient(const SaClient&) = delete;
  SaClient& operator=(const SaClient&) = delete;

  // The port's MAD layer is open (again): registers the agent on it and
  // asks ClassPortInfo. EBUSY if the layer refuses the agent; EALREADY if
  // attached (detach() first).
  Result<void> attach(mad::MadLayer& layer);
  // The layer is going (device lost): queries in flight complete with EIO,
  // the agent is forgotten (the layer is not touched: it may be gone).
  void detach();
  bool attached() const { return layer_ != nullptr; }

  // Any SA request (`req.tid` is ignored: the client assigns TIDs) with a
  // record of at most 200 bytes.
  void query(const SaRequest& req, ConstBytes record, AnswerFn done);
  // PathQuerier: SubnAdmGet(PathRecord) for `key`.
  void query_path(const PathKey& key, PathAnswerFn done) override;
  // Reports (IBA 13.4.8.2; SubnAdmReport, 15.2.2): with a handler set
  // before attach(), the agent also takes Report requests; each is
  // answered with ReportResp (the Notice echoed, IBA 13.4.5) and its
  // Notice handed to the handler. A Report that is not a readable Notice
  // is counted in `errors` and not answered.
  using ReportFn = std::function<void(const mad::Notice&)>;
  void set_report_handler(ReportFn f) { on_report_ = std::move(f); }
  // SubnAdmSet(InformInfo) (IBA 13.4.8.3, 15.2.5.12): subscribes (or,
  // `on` false, unsubscribes) to generic trap `trap` from any issuer, its
  // Reports to this port's QP1. The SA's answer echoes the InformInfo; an
  // error status is EREMOTEIO.
  void subscribe(std::uint16_t trap, bool on, std::function<void(Result<void>)> done);
  // The SM may be another one now (SM_CHANGE, ClientReregister): the
  // redirect is dropped and its ClassPortInfo asked again. (While none has answered, e.g. ibd
  // started before the SM, each query also asks it, one at a time.)
  void sm_changed();

  // The timeout in use now (ms), and the ClassPortInfo it came from.
  std::uint32_t timeout_ms() const { return timeout_ms_; }
  const std::optional<mad::ClassPortInfo>& class_port_info() const { return cpi_; }
  const SaClientCounters& counters() const { return counters_; }
  // Where queries go instead of the SM's QP1 (nullopt: no redirect).
  const std::optional<SaRedirect>& redirect() const { return redirect_; }

 private:
  struct Pending {
    SaRequest req;
    mad::ByteVec record;
    AnswerFn done;
    std::uint32_t busy_left = 0;
    std::uint32_t busy_wait_ms = 0;
    std::unique_ptr<boost::asio::steady_timer> busy_timer;
    std::optional<SaRedirect> sent_to;  // the redirect target of the last send
    bool sm_only = false;               // fell back from a silent target: the SM's QP1 only
    std::uint32_t redirects_left = 2;   // redirect answers followed for this query
    bool fell_back = false;             // once only
    std::uint16_t sm_lid = 0;           // the SM's LID at the last send
  };

  void send(std::uint32_t tid);
  void send_blocked();  // a slot of the agent's outstanding limit may be free: the oldest waiting query
  void on_delivery(const mad::Delivery& d);
  void finish(std::uint32_t tid, Result<mad::ByteVec> r);
  void fail_all(int code, const char* why);  // every pending query, erased first
  void ask_class_port_info();
  // Follows a redirect ClassPortInfo from the SM at `sm_lid`: false if it
  // cannot be followed (RedirectLID 0 or RedirectQP 0).
  bool take_redirect(const mad::ClassPortInfo& cpi, std::uint16_t sm_lid);
  void drop_redirect(const char* why);
  bool redirect_answer(std::uint32_t tid, ConstBytes data);  // MAD status "redirect"
  void send_timed_out(std::uint32_t tid);
  bool cpi_asking_ = false;  // a ClassPortInfo query is in flight
  void on_report(const mad::Delivery& d);
  ReportFn on_report_;

  boost::asio::io_context& io_;
  SmFn sm_;
  SaClientConfig cfg_;
  mad::MadLayer* layer_ = nullptr;
  std::uint32_t agent_ = 0;
  std::uint32_t attach_gen_ = 0;  // deliveries from an earlier attach's agent are ignored
  std::uint32_t next_tid_ = 1;  // the TID's low 32 bits (the layer owns the high ones)
  std::map<std::uint32_t, Pending> pending_;
  std::deque<std::uint32_t> blocked_;  // TIDs the layer refused for its outstanding limit, oldest first
  std::uint32_t timeout_ms_ = 0;
  std::optional<mad::ClassPortInfo> cpi_;
  std::optional<SaRedirect> redirect_;
  std::uint16_t sm_lid_ = 0;  // the SM's LID at the latest send
  SaClientCounters counters_;
  std::shared_ptr<char> alive_ = std::make_shared<char>();
};

}  // namespace openib::sa
