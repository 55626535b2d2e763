// ibd's port attribute cache (src/ibd/port_attr_cache.hpp; issue 33: no
// QUERY_PORT per connection) over a simhca child, the driver wrapped in
// CountingDevice (test/ibd/counting_device.hpp) so that every QUERY_PORT
// the daemon's code sends is counted: a second path query (what the RDMA
// CM's resolve_route asks for each connection) sends none; queries in
// flight together share one; a port event (here a real one: SET_PORT
// changes the LID and the state, simhca raises LID_CHANGE and
// PORT_STATE_CHANGE, docs/simhca.md §9.4) makes the next query see the new
// attributes; every port event kind and a device loss drop the entry.
#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "../ibd/counting_device.hpp"
#include "ibd/port_attr_cache.hpp"
#include "ibd/sa_service.hpp"
#include "ibd/umad_service.hpp"
#include "test_simhca_fixture.hpp"

using namespace openib;

namespace {

// Runs the loop until `done` holds, for at most 5 s.
bool run_until(boost::asio::io_context& io, const std::function<bool()>& done) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!done() && std::chrono::steady_clock::now() < end) {
    if (io.stopped()) io.restart();
    io.run_one_for(std::chrono::milliseconds(10));
  }
  return done();
}

// A simhca child, its driver inside a CountingDevice (destroyed before the
// fixture's vfio device: declared after it).
struct Counted {
  test::HcaFixture fx;
  testing::CountingDevice dev{std::move(fx.hca)};
  uint64_t query_ports() const { return dev.calls("query_port"); }
};

// One query through the cache, answered.
Result<hca::PortAttr> query(Counted& c, ibd::PortAttrCache& cache, uint8_t port) {
  std::optional<Result<hca::PortAttr>> got;
  cache.query(port, [&](Result<hca::PortAttr> a) { got = std::move(a); });
  REQUIRE(run_until(c.fx.io, [&] { return got.has_value(); }));
  return std::move(*got);
}

}  // namespace

TEST_CASE("port attribute cache: one QUERY_PORT, shared while in flight, then answered from memory",
          "[port-attr-cache]") {
  Counted c;
  ibd::PortAttrCache cache(c.fx.io, c.dev);
  const uint64_t before = c.query_ports();
  int answered = 0;
  std::vector<uint64_t> guids;
  for (int i = 0; i < 3; ++i)
    cache.query(1, [&](Result<hca::PortAttr> a) {
      REQUIRE(a);
      guids.push_back(a->port_guid);
      ++answered;
    });
  CHECK(answered == 0);  // never inside query()
  REQUIRE(run_until(c.fx.io, [&] { return answered == 3; }));
  CHECK(c.query_ports() - before == 1);
  CHECK(cache.counters().shared == 2);
  CHECK(guids[0] != 0);
  CHECK(guids[1] == guids[0]);
  CHECK(guids[2] == guids[0]);

  for (int i = 0; i < 5; ++i) REQUIRE(query(c, cache, 1));
  CHECK(c.query_ports() - before == 1);
  CHECK(cache.counters().hits == 5);

  // The device's errors are passed on and never kept.
  CHECK_FALSE(query(c, cache, 9));
  CHECK_FALSE(cache.peek(9).has_value());
}

TEST_CASE("port attribute cache: an answer in flight when its port is invalidated is not kept",
          "[port-attr-cache]") {
  Counted c;
  ibd::PortAttrCache cache(c.fx.io, c.dev);
  std::optional<Result<hca::PortAttr>> first;
  cache.query(1, [&](Result<hca::PortAttr> a) { first = std::move(a); });
  cache.invalidate(1);  // an event while the QUERY_PORT is in flight
  std::optional<Result<hca::PortAttr>> second;
  cache.query(1, [&](Result<hca::PortAttr> a) { second = std::move(a); });
  REQUIRE(run_until(c.fx.io, [&] { return first.has_value() && second.has_value(); }));
  CHECK(*first);  // who asked before still gets the device's answer
  CHECK(cache.counters().queries == 2);  // the second did not wait for the first
  CHECK(cache.counters().discarded == 1);
  CHECK(cache.peek(1).has_value());  // the second one's answer is kept
}

TEST_CASE("SaService: the second path query sends no QUERY_PORT; after a LID change and a state change "
          "the next sees the new attributes",
          "[port-attr-cache]") {
  Counted c;
  const std::string sock = c.fx.sim.socket() + ".ibd.sock";  // the issm files go beside it, in the fixture's dir
  ibd::UmadService umad(c.fx.io, c.dev, sock, c.dev.caps().num_ports);
  ibd::SaService sa(c.fx.io, c.dev, umad, c.dev.caps().num_ports, "");
  // The port events as the Server hands them to its services (server.cpp).
  int events = 0;
  c.dev.set_event_handler([&](const hca::Event& e) {
    if (e.kind == hca::Event::Kind::kCqCompletion) return;
    ++events;
    sa.port_event(e);
  });

  auto path_query = [&] {
    proto::PathQueryReq q;
    q.port = 1;
    q.dgid = {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2};
    bool answered = false;
    // No SA client attached (no MAD layer here): the query fails after the
    // port's SGID and P_Key were read, which is what is counted.
    sa.path_query(q, [&](Result<proto::PathRep>) { answered = true; });
    REQUIRE(run_until(c.fx.io, [&] { return answered; }));
  };
  const uint64_t start = c.query_ports();
  path_query();
  const uint64_t after_first = c.query_ports();
  CHECK(after_first - start == 1);
  path_query();
  path_query();
  CHECK(c.query_ports() == after_first);  // the connections after the first: no QUERY_PORT

  auto lid = query(c, sa.port_attrs(), 1);
  REQUIRE(lid);
  REQUIRE(lid->lid == 0);  // simhca's power-on value, kept
  REQUIRE(lid->state != hca::kPortActive);  // Down: no cable here

  // The port gets LID 0x1234 and goes Active: LID_CHANGE and
  // PORT_STATE_CHANGE come back as events.
  hca::PortSetup ps;
  ps.lid = 0x1234;
  ps.state = hca::kPortActive;
  std::optional<Result<void>> set;
  c.dev.set_port_async(1, ps, [&](Result<void> r) { set = std::move(r); });
  REQUIRE(run_until(c.fx.io, [&] { return set.has_value() && events >= 2; }));
  REQUIRE(*set);

  const uint64_t before = c.query_ports();
  auto now = query(c, sa.port_attrs(), 1);
  REQUIRE(now);
  CHECK(now->lid == 0x1234);  // a stale cache would still say 0
  CHECK(now->state == hca::kPortActive);
  CHECK(c.query_ports() - before == 1);
  path_query();
  CHECK(c.query_ports() - before == 1);  // and kept again
  bool counted = false;
  for (const auto& [name, v] : sa.counter_list())
    if (name == "port_attr_cache_invalidations") counted = v >= 1;
  CHECK(counted);
}

TEST_CASE("SaService: every port event kind and the device's loss and return drop the port's attributes",
          "[port-attr-cache]") {
  Counted c;
  const std::string sock = c.fx.sim.socket() + ".ibd.sock";
  ibd::UmadService umad(c.fx.io, c.dev, sock, c.dev.caps().num_ports);
  ibd::SaService sa(c.fx.io, c.dev, umad, c.dev.caps().num_ports, "");
  using K = hca::Event::Kind;
  for (K kind : {K::kPortState, K::kLidChange, K::kSmChange, K::kClientReregister, K::kPkeyChange, K::kGidChange}) {
    INFO(hca::event_name(kind));
    REQUIRE(query(c, sa.port_attrs(), 1));
    REQUIRE(sa.port_attrs().peek(1).has_value());
    hca::Event e;
    e.kind = kind;
    e.port = 2;  // another port's event leaves port 1's alone
    sa.port_event(e);
    CHECK(sa.port_attrs().peek(1).has_value());
    e.port = 1;
    e.new_state = hca::kPortInit;
    e.lid = 7;
    sa.port_event(e);
    CHECK_FALSE(sa.port_attrs().peek(1).has_value());
  }
  // Affiliated events change nothing.
  REQUIRE(query(c, sa.port_attrs(), 1));
  hca::Event cq;
  cq.kind = K::kCqError;
  cq.port = 1;
  CHECK_FALSE(sa.port_attrs().on_event(cq));
  CHECK(sa.port_attrs().peek(1).has_value());

  sa.device_lost();
  CHECK_FALSE(sa.port_attrs().peek(1).has_value());
  REQUIRE(query(c, sa.port_attrs(), 1));
  sa.device_back();
  CHECK_FALSE(sa.port_attrs().peek(1).has_value());
}
