// The SA client (src/sa/sa_client.hpp) over ibd's real MAD layer, with a
// fake SA behind a fake MadTransport: what a query's caller sees for each
// kind of SA behaviour (an answer, no record, BUSY, silence, no SM), and
// what detach() and destruction do to queries in flight. Answers come from
// the io_context (posted), as a port's completions would; the loop runs
// until the outcome is there (with a deadline that only stops a hang).
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <functional>
#include <optional>
#include <vector>

#include "mad/layer.hpp"
#include "mad/mad.hpp"
#include "mad/pma_attrs.hpp"
#include "mad/rmpp.hpp"
#include "sa/inform_info.hpp"
#include "sa/mcmember_record.hpp"
#include "sa/path_query.hpp"
#include "sa/sa_client.hpp"

using namespace openib;
using namespace openib::sa;

namespace {

constexpr std::uint16_t kSmLid = 0x21;
constexpr std::uint8_t kSmSl = 3;
const Gid kDgid = make_gid(0xfe80000000000000ull, 0x0002c90300000042ull);

PathKey key() {
  PathRecord q;
  q.dgid = kDgid;
  q.pkey = 0xffff;
  return PathKey(1, pr_mask::kDgid | pr_mask::kPKey, q);
}

// The SA's answer to request `req`: the same MAD as a response with `status`.
mad::Mad response_to(const mad::Mad& req, std::uint16_t status) {
  mad::Mad m = req;
  mad::make_response(m, status);
  return m;
}

// An answer carrying one PathRecord.
mad::Mad path_answer(const mad::Mad& req) {
  mad::Mad m = response_to(req, 0);
  PathRecord p;
  p.dgid = kDgid;
  p.dlid = 0x77;
  p.sl = 5;
  p.mtu = 4;  // 2048
  encode_path_record(MutBytes(m).subspan(kSaDataOff), p);
  return m;
}

// A fake SA behind the port: it answers ClassPortInfo with `cpi`, and hands
// every other request to `on_query` (nullopt: no answer). Answers are
// posted to the loop. send_table() answers with an RMPP message, its
// segments sent as the client's ACKs open the window (IBA 13.6).
class FakeSaPort final : public mad::MadTransport {
 public:
  explicit FakeSaPort(boost::asio::io_context& io) : io_(io) {}
  std::uint8_t port() const override { return 1; }
  void set_receiver(Receiver r) override { rx_ = std::move(r); }
  Result<void> send(std::uint8_t qp, const mad::MadAddress& to, std::span<const std::byte> m) override {
    mad::Mad req{};
    std::memcpy(req.data(), m.data(), req.size());
    if (auto h = mad::decode_rmpp_header(req); h && (h->flags & mad::rmpp_flag::kActive)) {
      ++acks;  // the client's side of an RMPP answer (ACK, or STOP/ABORT)
      ack_dests.push_back(to);
      if (table)
        for (const mad::Mad& seg : table->on_mad(req).to_send) deliver(seg, table_from);
      return ok();
    }
    if (mad::mad_attr_id(req) == mad::attr::kClassPortInfo) {
      ++cpi_asks;
      cpi_dests.push_back(to);
      mad::Mad a = response_to(req, cpi_status);
      mad::encode_class_port_info(MutBytes(a).subspan(kSaDataOff), cpi);
      deliver(a, to);
      return ok();
    }
    queries.push_back(req);
    dests.push_back(to);
    qps.push_back(qp);
    if (on_query)
      if (auto a = on_query(req)) deliver(*a, to);
    return ok();
  }
  bool on_cq_event(std::uint32_t) override { return false; }
  const mad::MadPortCounters& counters() const override { return counters_; }

  // A MAD from the SA (or from where a query went), handled from the loop.
  // The receive says the GSI Q_Key whoever sent it (as MadPort does).
  void deliver(const mad::Mad& m, mad::MadAddress from = sm_address()) {
    boost::asio::post(io_, [this, m, from] {
      mad::ReceivedMad r;
      r.qp = 1;
      r.from.lid = from.lid;
      r.from.qpn = from.qpn;
      r.from.qkey = mad::kGsiQkey;
      r.mad = m;
      rx_(r);
    });
  }
  static mad::MadAddress sm_address() {
    mad::MadAddress a;
    a.lid = kSmLid;
    a.qpn = 1;
    return a;
  }

  // A GetTableResp to `req` with `n` PathRecords (DLID 0x100 + i).
  void send_table(const mad::Mad& req, std::size_t n) {
    mad::ByteVec msg(kSaDataOff + kPathRecordBytes * n);
    std::copy(req.begin(), req.begin() + kSaDataOff, msg.begin());
    mad::make_response(msg, 0);
    encode_sa_header(msg, SaHeader{0, attr_offset_for(kPathRecordBytes), mad::get64(req, 48)});
    for (std::size_t i = 0; i < n; ++i) {
      PathRecord p;
      p.dlid = static_cast<std::uint16_t>(0x100 + i);
      encode_path_record(MutBytes(msg).subspan(kSaDataOff + kPathRecordBytes * i), p);
    }
    auto segs = mad::rmpp_segment(msg, kSaHeaderBytes);
    REQUIRE(segs);
    segments = segs->size();
    table = std::make_unique<mad::RmppSender>(std::move(*segs));
    table_from = dests.back();
    for (const mad::Mad& seg : table->start().to_send) deliver(seg, table_from);
  }

  mad::ClassPortInfo cpi;
  std::uint16_t cpi_status = 0;  // the MAD status of its ClassPortInfo answers
  std::size_t cpi_asks = 0;
  std::vector<mad::MadAddress> cpi_dests, ack_dests;
  mad::MadAddress table_from;
  std::function<std::optional<mad::Mad>(const mad::Mad&)> on_query;
  std::unique_ptr<mad::RmppSender> table;  // the RMPP answer being sent
  std::size_t segments = 0, acks = 0;
  std::vector<mad::Mad> queries;  // what reached the SA, but ClassPortInfo
  std::vector<mad::MadAddress> dests;
  std::vector<std::uint8_t> qps;

 private:
  boost::asio::io_context& io_;
  Receiver rx_;
  mad::MadPortCounters counters_;
};

struct Fixture {
  boost::asio::io_context io;
  FakeSaPort* sa = nullptr;
  std::unique_ptr<mad::MadLayer> layer;
  Result<SmAddress> sm = SmAddress{kSmLid, kSmSl};
  std::vector<PathAnswer> answers;   // before the client: its destructor still answers
  std::unique_ptr<SaClient> client;

  explicit Fixture(SaClientConfig cfg = config()) {
    auto t = std::make_unique<FakeSaPort>(io);
    sa = t.get();
    layer = std::make_unique<mad::MadLayer>(io, std::move(t));
    client = std::make_unique<SaClient>(io, [this](auto reply) { reply(sm); }, cfg);
  }
  // Answers come at once; the timeout (200 ms) only matters to silence.
  static SaClientConfig config() {
    return SaClientConfig{
        .timeout_ms = 200, .min_timeout_ms = 200, .max_timeout_ms = 200, .retries = 2, .busy_ms = 1, .busy_retries = 3};
  }
  void attach() {
    REQUIRE(client->attach(*layer));
    run_until([&] { return client->counters().class_port_info == 1; });
  }
  void ask() {
    client->query_path(key(), [this](PathAnswer a) { answers.push_back(std::move(a)); });
  }
  // Asks and runs the loop until the answer is there.
  const PathAnswer& ask_wait() {
    const std::size_t n = answers.size();
    ask();
    run_until([&] { return answers.size() > n; });
    REQUIRE(answers.size() == n + 1);
    return answers.back();
  }
  // Attaches, then a GetTable(PathRecord) that the fake SA answers with
  // `n` records in RMPP segments; the outcome (nullopt: none in time).
  std::optional<Result<mad::ByteVec>> get_table(std::size_t n) {
    sa->on_query = [this, n](const mad::Mad& req) -> std::optional<mad::Mad> {
      sa->send_table(req, n);
      return std::nullopt;
    };
    attach();
    std::optional<Result<mad::ByteVec>> got;
    const mad::ByteVec rec(kPathRecordBytes);
    client->query(SaRequest{.method = mad::method::kGetTable, .attr_id = attr::kPathRecord}, rec,
                  [&](Result<mad::ByteVec> r) { got = std::move(r); });
    run_until([&] { return got.has_value(); });
    return got;
  }
  // Runs the loop until `done` or 5 s passed (a guard against a hang).
  template <typename F>
  void run_until(F done) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (!done() && std::chrono::steady_clock::now() < end) {
      io.restart();
      io.run_for(std::chrono::milliseconds(5));
    }
  }
  void run_for(int ms) {
    io.restart();
    io.run_for(std::chrono::milliseconds(ms));
  }
  std::uint32_t tid_low(std::size_t i) const { return static_cast<std::uint32_t>(mad::mad_tid(sa->queries.at(i))); }
};

}  // namespace

TEST_CASE("ClassPortInfo's RespTimeValue sets the query timeout", "[sa][sa-client]") {
  SaClientConfig cfg;  // the defaults: 1000 ms until ClassPortInfo, within [100, 8000]
  Fixture f(cfg);
  f.sa->cpi.resp_time_value = 18;
  CHECK(f.client->timeout_ms() == 1000);
  REQUIRE(f.client->attach(*f.layer));
  CHECK(f.client->attached());
  CHECK(f.client->timeout_ms() == 1000);  // not answered yet
  f.run_until([&] { return f.client->counters().class_port_info == 1; });
  // 4.096 us x 2^18 x 2 = 2147.48 ms, rounded up.
  CHECK(f.client->timeout_ms() == 2148);
  REQUIRE(f.client->class_port_info());
  CHECK(f.client->class_port_info()->resp_time_value == 18);
  CHECK(f.client->counters().redirects == 0);

  SECTION("a bogus RespTimeValue stops at max_timeout_ms, a tiny one at min_timeout_ms") {
    Fixture big(cfg), small(cfg);
    big.sa->cpi.resp_time_value = 31;
    small.sa->cpi.resp_time_value = 0;
    big.attach();
    small.attach();
    CHECK(big.client->timeout_ms() == 8000);
    CHECK(small.client->timeout_ms() == 100);
  }
}

// ---- redirection (IBA 13.4.8.1, 13.5.3.3) ---------------------------------

namespace {
constexpr std::uint16_t kTargetLid = 0x99;
constexpr std::uint32_t kTargetQp = 0x1234, kTargetQkey = 0x5678;

mad::ClassPortInfo redirecting() {
  mad::ClassPortInfo c;
  c.redirect_lid = kTargetLid;
  c.redirect_sl = 7;
  c.redirect_qp = kTargetQp;
  c.redirect_qkey = kTargetQkey;
  c.redirect_pkey = 0xffff;
  return c;
}
bool at_target(const mad::MadAddress& a) {
  return a.lid == kTargetLid && a.qpn == kTargetQp && a.qkey == kTargetQkey && a.sl == 7;
}
bool at_sm(const mad::MadAddress& a) { return a.lid == kSmLid && a.qpn == 1 && a.qkey == mad::kGsiQkey; }
}  // namespace

TEST_CASE("a redirecting ClassPortInfo sends the queries after it to the redirect QP", "[sa][sa-client]") {
  Fixture f;
  f.sa->cpi = redirecting();
  SECTION("RedirectLID in a plain answer") {}
  SECTION("an answer with MAD status redirect") { f.sa->cpi_status = mad::status::kRedirect; }
  f.sa->on_query = [](const mad::Mad& req) { return path_answer(req); };
  f.attach();
  CHECK(f.client->counters().redirects == 1);
  REQUIRE(f.client->redirect());
  CHECK(f.client->redirect()->lid == kTargetLid);
  CHECK(f.client->redirect()->pkey == 0xffff);
  const PathAnswer& a = f.ask_wait();
  REQUIRE(a.ok());
  REQUIRE(a.value());
  CHECK(a.value()->dlid == 0x77);
  REQUIRE(f.sa->dests.size() == 1);
  CHECK(at_target(f.sa->dests[0]));
  CHECK(f.sa->qps[0] == 1);  // from this port's QP1
  CHECK(f.sa->cpi_dests.size() == 1);
  CHECK(at_sm(f.sa->cpi_dests[0]));  // ClassPortInfo is the SM's to answer

  // sm_changed(): the redirect goes at once; ClassPortInfo asked again (of
  // the SM), which now names none: queries go to the SM.
  f.sa->cpi = {};
  f.sa->cpi_status = 0;
  f.client->sm_changed();
  CHECK_FALSE(f.client->redirect());
  f.run_until([&] { return f.client->counters().class_port_info == 2; });
  CHECK(f.ask_wait().ok());
  REQUIRE(f.sa->dests.size() == 2);
  CHECK(at_sm(f.sa->dests[1]));
  CHECK(f.client->counters().redirects == 1);
}

TEST_CASE("another SM LID drops the redirect: the query goes to the new SM", "[sa][sa-client]") {
  Fixture f;
  f.sa->cpi = redirecting();
  f.sa->on_query = [](const mad::Mad& req) { return path_answer(req); };
  f.attach();
  REQUIRE(f.client->redirect());
  f.sm = SmAddress{0x22, kSmSl};  // MasterSMLID changed, no sm_changed() (yet)
  CHECK(f.ask_wait().ok());
  REQUIRE(f.sa->dests.size() == 1);
  CHECK(f.sa->dests[0].lid == 0x22);
  CHECK(f.sa->dests[0].qpn == 1);
  CHECK_FALSE(f.client->redirect());
}

TEST_CASE("a GetTable answer from the redirect QP is ACKed there, with its Q_Key", "[sa][sa-client]") {
  Fixture f;
  f.sa->cpi = redirecting();
  const auto got = f.get_table(5);
  REQUIRE(got);
  REQUIRE(got->ok());
  auto paths = parse_path_records(got->value());
  REQUIRE(paths.ok());
  CHECK(paths->size() == 5);
  REQUIRE(f.sa->ack_dests.size() >= 2);
  for (const auto& d : f.sa->ack_dests) {  // the receive's SL, not the redirect's
    CHECK(d.lid == kTargetLid);
    CHECK(d.qpn == kTargetQp);
    CHECK(d.qkey == kTargetQkey);
  }
}

TEST_CASE("an answer with MAD status redirect is asked again where its ClassPortInfo says", "[sa][sa-client]") {
  Fixture f;
  f.attach();
  CHECK_FALSE(f.client->redirect());
  f.sa->on_query = [&](const mad::Mad& req) -> std::optional<mad::Mad> {
    if (at_target(f.sa->dests.back())) return path_answer(req);
    mad::Mad r = response_to(req, mad::status::kRedirect);
    mad::encode_class_port_info(MutBytes(r).subspan(kSaDataOff), redirecting());
    return r;
  };
  const PathAnswer& a = f.ask_wait();
  REQUIRE(a.ok());
  REQUIRE(a.value());
  CHECK(a.value()->dlid == 0x77);
  REQUIRE(f.sa->queries.size() == 2);
  CHECK(at_sm(f.sa->dests[0]));
  CHECK(at_target(f.sa->dests[1]));
  CHECK(f.tid_low(1) == f.tid_low(0));
  CHECK(f.client->counters().redirects == 1);
  // The redirect holds for the next query: straight to the target.
  CHECK(f.ask_wait().ok());
  REQUIRE(f.sa->queries.size() == 3);
  CHECK(at_target(f.sa->dests[2]));

  SECTION("a redirect that cannot be followed (RedirectLID 0) is the caller's: EREMCHG") {
    f.sa->on_query = [](const mad::Mad& req) -> std::optional<mad::Mad> {
      mad::Mad r = response_to(req, mad::status::kRedirect);
      mad::encode_class_port_info(MutBytes(r).subspan(kSaDataOff), mad::ClassPortInfo{});
      return r;
    };
    const auto errors = f.client->counters().errors;
    const PathAnswer& b = f.ask_wait();
    REQUIRE_FALSE(b.ok());
    CHECK(b.error().code == EREMCHG);
    CHECK(f.client->counters().errors > errors);
  }
  SECTION("an SA that redirects each time: followed twice, then the caller's") {
    f.sa->on_query = [&](const mad::Mad& req) -> std::optional<mad::Mad> {
      mad::Mad r = response_to(req, mad::status::kRedirect);
      mad::encode_class_port_info(MutBytes(r).subspan(kSaDataOff), redirecting());
      return r;
    };
    const PathAnswer& b = f.ask_wait();
    REQUIRE_FALSE(b.ok());
    CHECK(b.error().code == EREMCHG);
    CHECK(f.sa->queries.size() == 3 + 3);
  }
}

TEST_CASE("a silent redirect target: the query goes to the SM, ClassPortInfo is asked again", "[sa][sa-client]") {
  SaClientConfig cfg = Fixture::config();
  cfg.min_timeout_ms = cfg.max_timeout_ms = 10;
  Fixture f(cfg);
  f.sa->cpi = redirecting();
  f.sa->on_query = [&](const mad::Mad& req) -> std::optional<mad::Mad> {
    if (at_target(f.sa->dests.back())) return std::nullopt;  // the target is gone
    return path_answer(req);
  };
  f.attach();
  REQUIRE(f.client->redirect());
  f.sa->cpi = {};  // the SM answers its own SA queries again
  const PathAnswer& a = f.ask_wait();
  REQUIRE(a.ok());
  REQUIRE(a.value());
  CHECK(a.value()->dlid == 0x77);
  REQUIRE(f.sa->queries.size() == cfg.retries + 2);
  for (std::size_t i = 0; i <= cfg.retries; ++i) CHECK(at_target(f.sa->dests[i]));
  CHECK(at_sm(f.sa->dests.back()));
  CHECK(f.client->counters().redirect_fallbacks == 1);
  CHECK(f.client->counters().timeouts == 0);
  f.run_until([&] { return f.client->counters().class_port_info == 2; });
  CHECK(f.sa->cpi_asks == 2);
  CHECK_FALSE(f.client->redirect());
  CHECK(f.ask_wait().ok());
  CHECK(at_sm(f.sa->dests.back()));

  SECTION("silent at the SM too: ETIMEDOUT after one fallback") {
    f.sa->cpi = redirecting();
    f.client->sm_changed();
    f.run_until([&] { return f.client->counters().class_port_info == 3; });
    REQUIRE(f.client->redirect());
    f.sa->on_query = [](const mad::Mad&) -> std::optional<mad::Mad> { return std::nullopt; };
    const std::size_t before = f.sa->queries.size();
    const PathAnswer& b = f.ask_wait();
    REQUIRE_FALSE(b.ok());
    CHECK(b.error().code == ETIMEDOUT);
    CHECK(f.sa->queries.size() == before + 2 * (cfg.retries + 1));
    CHECK(f.client->counters().redirect_fallbacks == 2);
  }
}

TEST_CASE("a PathRecord query is a SubnAdmGet to the SM's LID and SL on QP1, its answer the record",
          "[sa][sa-client]") {
  Fixture f;
  f.sa->on_query = [](const mad::Mad& req) { return path_answer(req); };
  f.attach();
  const PathAnswer& a = f.ask_wait();
  REQUIRE(a.ok());
  REQUIRE(a.value());
  const PathRecord& p = *a.value();
  CHECK(p.dlid == 0x77);
  CHECK(p.sl == 5);
  CHECK(p.mtu == 4);

  REQUIRE(f.sa->queries.size() == 1);
  const mad::Mad& q = f.sa->queries[0];
  CHECK(mad::mad_class(q) == mad::mgmt_class::kSubnAdm);
  CHECK(mad::get8(q, 2) == 2);  // class version
  CHECK(mad::mad_method(q) == mad::method::kGet);
  CHECK(mad::mad_attr_id(q) == attr::kPathRecord);
  CHECK(mad::get64(q, 48) == key().comp_mask());
  CHECK(mad::mad_tid(q) >> 32 != 0);  // the layer's agent bits
  CHECK(f.sa->qps[0] == 1);
  CHECK(f.sa->dests[0].qpn == 1);
  CHECK(f.sa->dests[0].qkey == 0x80010000u);
  CHECK(f.sa->dests[0].lid == kSmLid);
  CHECK(f.sa->dests[0].sl == kSmSl);
  CHECK(f.client->counters().queries == 2);  // ClassPortInfo and the path
  CHECK(f.client->counters().answers == 2);
}

TEST_CASE("a GetTable answer in RMPP segments reaches the caller reassembled", "[sa][sa-client]") {
  Fixture f;
  const auto got = f.get_table(5);
  REQUIRE(got);
  REQUIRE(got->ok());
  CHECK(f.sa->segments == 2);
  CHECK(f.sa->acks >= 2);
  auto paths = parse_path_records(got->value());
  REQUIRE(paths.ok());
  REQUIRE(paths->size() == 5);
  CHECK((*paths)[0].dlid == 0x100);
  CHECK((*paths)[4].dlid == 0x104);
  CHECK(f.client->counters().answers == 2);
}

TEST_CASE("NoRecords is 'no path'", "[sa][sa-client]") {
  Fixture f;
  f.sa->on_query = [](const mad::Mad& req) { return response_to(req, 0x0300); };
  f.attach();
  const PathAnswer& a = f.ask_wait();
  REQUIRE(a.ok());
  CHECK_FALSE(a.value());
  CHECK(f.client->counters().answers == 2);
  CHECK(f.client->counters().errors == 0);
}

TEST_CASE("BUSY is asked again with the same TID, then answered", "[sa][sa-client]") {
  Fixture f;
  int busy = 2;
  f.sa->on_query = [&](const mad::Mad& req) {
    if (busy-- > 0) return response_to(req, mad::status::kBusy);
    return path_answer(req);
  };
  f.attach();
  const PathAnswer& a = f.ask_wait();
  REQUIRE(a.ok());
  REQUIRE(a.value());
  CHECK(a.value()->dlid == 0x77);
  CHECK(f.client->counters().busy == 2);
  CHECK(f.client->counters().queries == 2);  // a re-ask is not a new query
  REQUIRE(f.sa->queries.size() == 3);
  CHECK(f.tid_low(1) == f.tid_low(0));
  CHECK(f.tid_low(2) == f.tid_low(0));
}

TEST_CASE("an SA that stays BUSY is EBUSY after busy_retries re-asks", "[sa][sa-client]") {
  Fixture f;
  f.sa->on_query = [](const mad::Mad& req) { return response_to(req, mad::status::kBusy); };
  f.attach();
  const PathAnswer& a = f.ask_wait();
  REQUIRE_FALSE(a.ok());
  CHECK(a.error().code == EBUSY);
  CHECK(f.client->counters().busy == Fixture::config().busy_retries + 1);
  CHECK(f.sa->queries.size() == Fixture::config().busy_retries + 1);
}

TEST_CASE("a silent SA is ETIMEDOUT after 1 + retries sends", "[sa][sa-client]") {
  SaClientConfig cfg = Fixture::config();
  cfg.min_timeout_ms = cfg.max_timeout_ms = 10;
  Fixture f(cfg);
  f.attach();
  CHECK(f.client->timeout_ms() == 10);
  const PathAnswer& a = f.ask_wait();
  REQUIRE_FALSE(a.ok());
  CHECK(a.error().code == ETIMEDOUT);
  CHECK(f.sa->queries.size() == cfg.retries + 1);
  CHECK(f.client->counters().timeouts == 1);
}

TEST_CASE("no SM known: ENETUNREACH and nothing sent; an SM lookup error is the query's", "[sa][sa-client]") {
  Fixture f;
  f.sm = SmAddress{0, 0};
  f.sa->on_query = [](const mad::Mad& req) { return path_answer(req); };
  REQUIRE(f.client->attach(*f.layer));  // its ClassPortInfo fails as well
  f.ask();
  f.run_for(20);
  REQUIRE(f.answers.size() == 1);
  REQUIRE_FALSE(f.answers[0].ok());
  CHECK(f.answers[0].error().code == ENETUNREACH);
  CHECK(f.sa->queries.empty());
  CHECK(f.layer->counters().sent == 0);
  CHECK(f.client->timeout_ms() == Fixture::config().timeout_ms);

  f.sm = Error{ENODEV, "port gone"};
  f.ask();
  REQUIRE(f.answers.size() == 2);
  CHECK(f.answers[1].error().code == ENODEV);
  CHECK(f.layer->counters().sent == 0);
}

TEST_CASE("queries while detached are ENODEV; a record over 200 bytes is EINVAL", "[sa][sa-client]") {
  Fixture f;
  std::vector<Result<mad::ByteVec>> got;
  auto keep = [&](Result<mad::ByteVec> r) { got.push_back(std::move(r)); };
  SaRequest req;
  req.method = mad::method::kGet;
  req.attr_id = attr::kNodeRecord;
  f.client->query(req, {}, keep);
  REQUIRE(got.size() == 1);
  CHECK(got[0].error().code == ENODEV);
  f.attach();
  const mad::ByteVec big(201);
  f.client->query(req, big, keep);
  REQUIRE(got.size() == 2);
  CHECK(got[1].error().code == EINVAL);
  CHECK(f.sa->queries.empty());
  CHECK(f.client->attach(*f.layer).error().code == EALREADY);
}

TEST_CASE("detach() ends a query in flight with EIO; its late answer is ignored; attach() again works",
          "[sa][sa-client]") {
  Fixture f;
  f.attach();
  f.ask();  // the SA keeps it
  f.run_until([&] { return f.sa->queries.size() == 1; });
  REQUIRE(f.answers.empty());
  f.client->detach();
  CHECK_FALSE(f.client->attached());
  REQUIRE(f.answers.size() == 1);
  CHECK(f.answers[0].error().code == EIO);

  const auto before = f.client->counters();
  f.sa->deliver(path_answer(f.sa->queries[0]));
  f.run_for(20);
  CHECK(f.answers.size() == 1);
  CHECK(f.client->counters().answers == before.answers);

  f.ask();
  REQUIRE(f.answers.size() == 2);
  CHECK(f.answers[1].error().code == ENODEV);

  f.sa->on_query = [](const mad::Mad& req) { return path_answer(req); };
  f.attach();
  const PathAnswer& a = f.ask_wait();
  REQUIRE(a.ok());
  CHECK(a.value()->dlid == 0x77);
}

TEST_CASE("destroying the client ends a query in flight with ECANCELED, and nothing after", "[sa][sa-client]") {
  Fixture f;
  f.attach();
  f.ask();
  f.run_until([&] { return f.sa->queries.size() == 1; });
  f.client.reset();
  REQUIRE(f.answers.size() == 1);
  CHECK(f.answers[0].error().code == ECANCELED);
  // The layer still times the request out and resends it into the agent
  // the client left behind; the late answer goes there too.
  f.run_until([&] { return f.layer->counters().timeouts == 1; });
  CHECK(f.layer->counters().timeouts == 1);
  f.sa->deliver(path_answer(f.sa->queries[0]));
  f.run_for(20);
  CHECK(f.answers.size() == 1);
}

TEST_CASE("a BUSY wait in progress ends with the client: ECANCELED, no resend", "[sa][sa-client]") {
  SaClientConfig cfg = Fixture::config();
  cfg.busy_ms = 50;
  Fixture f(cfg);
  f.sa->on_query = [](const mad::Mad& req) { return response_to(req, mad::status::kBusy); };
  f.attach();
  f.ask();
  f.run_until([&] { return f.client->counters().busy == 1; });
  f.client.reset();
  REQUIRE(f.answers.size() == 1);
  CHECK(f.answers[0].error().code == ECANCELED);
  f.run_for(100);
  CHECK(f.sa->queries.size() == 1);
}

TEST_CASE("a callback may query again", "[sa][sa-client]") {
  Fixture f;
  f.sa->on_query = [](const mad::Mad& req) { return path_answer(req); };
  f.attach();
  f.client->query_path(key(), [&](PathAnswer a) {
    f.answers.push_back(std::move(a));
    f.ask();
  });
  f.run_until([&] { return f.answers.size() == 2; });
  REQUIRE(f.answers.size() == 2);
  CHECK(f.answers[1].ok());
  CHECK(f.sa->queries.size() == 2);
}

TEST_CASE("answers with an unknown TID, of the wrong kind, or garbage do not break the client", "[sa][sa-client]") {
  Fixture f;
  f.attach();

  SECTION("an unknown TID is dropped; the right answer after it counts") {
    f.sa->on_query = [&](const mad::Mad& req) {
      mad::Mad stray = path_answer(req);
      mad::put64(stray, 8, mad::mad_tid(req) + 1000);  // same agent, no such query
      f.sa->deliver(stray);
      return path_answer(req);
    };
    const PathAnswer& a = f.ask_wait();
    REQUIRE(a.ok());
    CHECK(a.value()->dlid == 0x77);
    CHECK(f.client->counters().errors == 1);
  }
  SECTION("an answer of another class or attribute is EPROTO") {
    std::uint8_t which = 0;
    f.sa->on_query = [&](const mad::Mad& req) {
      mad::Mad a = path_answer(req);
      if (which == 0) mad::put8(a, 1, mad::mgmt_class::kPerfMgmt);
      else mad::put16(a, 16, attr::kNodeRecord);
      return a;
    };
    CHECK(f.ask_wait().error().code == EPROTO);
    which = 1;
    CHECK(f.ask_wait().error().code == EPROTO);
    CHECK(f.client->counters().errors == 2);
  }
  SECTION("an error status is the caller's to read, counted") {
    f.sa->on_query = [](const mad::Mad& req) { return response_to(req, mad::status::kMethodAttrUnsupported); };
    CHECK(f.ask_wait().error().code == EPROTO);
    CHECK(f.client->counters().errors == 1);
  }
  SECTION("bytes of every value") {
    f.sa->on_query = [&](const mad::Mad& req) {
      mad::Mad junk{};
      for (std::size_t i = 0; i < junk.size(); ++i) junk[i] = std::byte(i * 37 + 11);
      // An SA PathRecord response with the query's TID (so it reaches the
      // client, not RMPP-active); every other byte junk.
      mad::put8(junk, 1, mad::mgmt_class::kSubnAdm);
      mad::put8(junk, 3, mad::method::kGetResp);
      mad::put64(junk, 8, mad::mad_tid(req));
      mad::put16(junk, 16, attr::kPathRecord);
      mad::put8(junk, 26, 0);
      return junk;
    };
    CHECK_FALSE(f.ask_wait().ok());
  }
  // Still working afterwards.
  f.sa->on_query = [](const mad::Mad& req) { return path_answer(req); };
  CHECK(f.ask_wait().ok());
}

// ---- InformInfo subscriptions and Reports (IBA 13.4.8.2, 13.4.8.3) --------

TEST_CASE("subscribe() sends SubnAdmSet(InformInfo) for the trap; an error status is EREMOTEIO",
          "[sa][sa-client]") {
  Fixture f;
  f.attach();
  std::vector<Result<void>> got;
  f.sa->on_query = [](const mad::Mad& q) { return std::optional<mad::Mad>(response_to(q, 0)); };
  f.client->subscribe(gid_trap::kGidOutOfService, true, [&](Result<void> r) { got.push_back(std::move(r)); });
  f.run_until([&] { return !got.empty(); });
  REQUIRE(got.size() == 1);
  CHECK(got[0].ok());
  REQUIRE(f.sa->queries.size() == 1);
  const mad::Mad& q = f.sa->queries[0];
  CHECK(mad::mad_method(q) == mad::method::kSet);
  CHECK(mad::mad_attr_id(q) == mad::attr::kInformInfo);
  auto ii = decode_inform_info(ConstBytes(q).subspan(kSaDataOff, kInformInfoBytes));
  REQUIRE(ii);
  CHECK(ii->trap_number == 65);
  CHECK(ii->subscribe);
  CHECK(ii->is_generic);
  CHECK(ii->qpn == 1);
  CHECK(f.sa->dests[0].lid == kSmLid);
  // The SA refuses (ERR_REQ_INVALID).
  f.sa->on_query = [](const mad::Mad& q2) {
    return std::optional<mad::Mad>(response_to(q2, std::uint16_t{status::kReqInvalid} << 8));
  };
  f.client->subscribe(gid_trap::kGidInService, false, [&](Result<void> r) { got.push_back(std::move(r)); });
  f.run_until([&] { return got.size() == 2; });
  REQUIRE(got.size() == 2);
  REQUIRE(!got[1]);
  CHECK(got[1].error().code == EREMOTEIO);
  // on false: the same InformInfo with Subscribe 0 (ibd's shutdown() sends it).
  REQUIRE(f.sa->queries.size() == 2);
  auto off = decode_inform_info(ConstBytes(f.sa->queries[1]).subspan(kSaDataOff, kInformInfoBytes));
  REQUIRE(off);
  CHECK(off->trap_number == 64);
  CHECK_FALSE(off->subscribe);
  CHECK(off->qpn == 1);
}

namespace {
// A SubnAdmReport of `notice` from the SA, TID `tid`.
mad::Mad report(const mad::Notice& notice, std::uint64_t tid, std::uint16_t attr = mad::attr::kNotice) {
  SaRequest r;
  r.method = mad::method::kReport;
  r.attr_id = attr;
  r.tid = tid;
  ByteVec rec(mad::kNoticeBytes);
  mad::encode_notice(rec, notice);
  auto m = make_sa_request(r, rec);
  REQUIRE(m);
  return *m;
}
}  // namespace

TEST_CASE("a Report is answered with ReportResp and its Notice handed over; a bad one is dropped",
          "[sa][sa-client]") {
  Fixture f;
  std::vector<mad::Notice> seen;
  f.client->set_report_handler([&](const mad::Notice& n) { seen.push_back(n); });
  f.attach();
  const Gid gid = make_gid(0xfe80000000000000ull, 0x0002c903000000abull);
  f.sa->deliver(report(make_gid_trap(gid_trap::kGidOutOfService, kSmLid, gid), 0x1234567890ull));
  f.run_until([&] { return !seen.empty() && !f.sa->queries.empty(); });
  REQUIRE(seen.size() == 1);
  auto t = parse_gid_trap(seen[0]);
  REQUIRE(t);
  CHECK(t->trap_number == 65);
  CHECK(t->gid == gid);
  REQUIRE(f.sa->queries.size() == 1);  // the ReportResp, to the SA that sent the Report
  const mad::Mad& resp = f.sa->queries[0];
  CHECK(mad::mad_method(resp) == mad::method::kReportResp);
  CHECK(mad::mad_tid(resp) == 0x1234567890ull);
  CHECK(mad::mad_attr_id(resp) == mad::attr::kNotice);
  CHECK(f.sa->dests[0].lid == kSmLid);
  CHECK(f.client->counters().reports == 1);
  // A Report of another attribute: not answered, not handed over.
  const auto errors = f.client->counters().errors;
  f.sa->deliver(report(make_gid_trap(gid_trap::kGidInService, kSmLid, gid), 7, mad::attr::kInformInfo));
  f.run_until([&] { return f.client->counters().errors > errors; });
  CHECK(f.client->counters().errors == errors + 1);
  CHECK(seen.size() == 1);
  CHECK(f.sa->queries.size() == 1);
}

TEST_CASE("without a report handler the agent takes no Reports", "[sa][sa-client]") {
  Fixture f;
  f.attach();
  const Gid gid = make_gid(0xfe80000000000000ull, 1);
  f.sa->deliver(report(make_gid_trap(gid_trap::kGidOutOfService, kSmLid, gid), 42));
  f.run_for(50);
  CHECK(f.client->counters().reports == 0);
  CHECK(f.layer->counters().unclaimed_requests == 1);
  CHECK(f.sa->queries.empty());  // no ReportResp from this agent
}

// Issue 29 finding 6: the MAD layer's outstanding limit binds ibd's own SA
// agent too (--umad-max-outstanding). Requests past it are not dropped:
// they wait and go out, in order, as earlier ones are answered.
TEST_CASE("past the agent's outstanding limit, requests wait and are all sent and answered in order",
          "[sa][sa-client]") {
  Fixture f;
  f.layer->set_max_outstanding(4);
  f.attach();
  std::vector<Result<mad::ByteVec>> got;
  const mad::ByteVec rec(kMcMemberRecordBytes);
  for (int i = 0; i < 10; ++i)
    f.client->query(SaRequest{.method = mad::method::kDelete, .attr_id = attr::kMcMemberRecord,
                              .comp_mask = static_cast<std::uint64_t>(i)},
                    rec, [&](Result<mad::ByteVec> r) { got.push_back(std::move(r)); });
  f.run_until([&] { return f.sa->queries.size() == 4; });
  f.run_for(20);
  CHECK(f.sa->queries.size() == 4);  // the limit holds on the wire
  CHECK(got.empty());                // and nothing failed for it
  CHECK(f.client->counters().queued == 6);
  // Each answer lets one more out, the oldest first.
  for (std::size_t answered = 0; answered < 10; ++answered) {
    f.run_until([&] { return f.sa->queries.size() > answered; });
    REQUIRE(f.sa->queries.size() > answered);
    CHECK(mad::get64(f.sa->queries[answered], 48) == answered);  // ComponentMask: the order asked
    f.sa->deliver(response_to(f.sa->queries[answered], 0));
    f.run_until([&] { return got.size() > answered; });
  }
  REQUIRE(got.size() == 10);
  for (const auto& r : got) CHECK(r.ok());
  CHECK(f.sa->queries.size() == 10);
}

TEST_CASE("requests waiting for the outstanding limit fail with the others when the layer goes", "[sa][sa-client]") {
  Fixture f;
  f.layer->set_max_outstanding(1);
  f.attach();
  std::vector<int> codes;
  const mad::ByteVec rec(kMcMemberRecordBytes);
  for (int i = 0; i < 3; ++i)
    f.client->query(SaRequest{.method = mad::method::kDelete, .attr_id = attr::kMcMemberRecord}, rec,
                    [&](Result<mad::ByteVec> r) { codes.push_back(r ? 0 : r.error().code); });
  f.run_until([&] { return f.client->counters().queued == 2; });
  f.client->detach();
  CHECK(codes == std::vector<int>{EIO, EIO, EIO});
  f.run_for(20);
  CHECK(f.sa->queries.size() == 1);
}
