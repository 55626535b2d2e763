// The service registry (src/ibd/service.hpp): operations routed to the
// service that claims them, a second claim refused, the device's and the
// clients' life events told to every service in registration order (the
// device coming back, port and CQ events) or its reverse (a client or the
// device leaving: users before what they use).
#include <catch2/catch.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "ibd/service.hpp"

using namespace openib;
using namespace openib::ibd;

namespace {

struct Recorder final : Service {
  Recorder(std::string n, std::vector<proto::Op> o, std::vector<std::string>& log, uint32_t own_cq = 0)
      : name_(std::move(n)), ops_(std::move(o)), log_(log), own_cq_(own_cq) {}
  std::string_view service_name() const override { return name_; }
  std::vector<proto::Op> ops() const override { return ops_; }
  Result<void> handle(const Caller& c, proto::Message&, Respond& done) override {
    log_.push_back(name_ + ".handle " + std::to_string(c.id));
    done(Reply::text(name_));
    return ok();
  }
  void client_gone(uint32_t c) override { log_.push_back(name_ + ".client_gone " + std::to_string(c)); }
  void port_event(const hca::Event& e) override { log_.push_back(name_ + ".port " + std::to_string(e.port)); }
  bool on_cq_event(uint32_t cqn) override {
    log_.push_back(name_ + ".cq " + std::to_string(cqn));
    return cqn == own_cq_;
  }
  void device_lost() override { log_.push_back(name_ + ".lost"); }
  void device_back() override { log_.push_back(name_ + ".back"); }
  std::vector<std::pair<std::string, uint64_t>> counter_list() const override { return {{name_ + ".x", 1}}; }
  std::string name_;
  std::vector<proto::Op> ops_;
  std::vector<std::string>& log_;
  uint32_t own_cq_;
};

}  // namespace

TEST_CASE("ServiceRegistry routes operations and tells life events in order", "[service-registry]") {
  std::vector<std::string> log;
  Recorder mad("umad", {proto::Op::kUmadOpen}, log, 7);
  Recorder cm("cm", {proto::Op::kCmListen, proto::Op::kCmInfo}, log);
  Recorder cma("cma", {proto::Op::kCmaBind}, log);
  ServiceRegistry reg;
  reg.add(mad);
  reg.add(cm);
  reg.add(cma);

  CHECK(reg.serving(proto::Op::kCmInfo) == &cm);
  CHECK(reg.serving(proto::Op::kCmaBind) == &cma);
  CHECK(reg.serving(proto::Op::kPathQuery) == nullptr);
  Recorder thief("thief", {proto::Op::kCmListen}, log);
  CHECK_THROWS_AS(reg.add(thief), std::logic_error);
  CHECK(reg.serving(proto::Op::kCmListen) == &cm);  // the first claim stands

  proto::Message m;
  std::string got;
  Respond done = [&got](Result<Reply> r) {
    REQUIRE(r.ok());
    for (std::byte b : r->payload) got.push_back(static_cast<char>(b));
  };
  REQUIRE(reg.serving(proto::Op::kCmaBind)->handle(Caller{5, 1000, false}, m, done).ok());
  CHECK(got == "cma");

  log.clear();
  reg.client_gone(5);
  CHECK(log == std::vector<std::string>{"cma.client_gone 5", "cm.client_gone 5", "umad.client_gone 5"});
  log.clear();
  reg.device_lost();
  reg.device_back();
  CHECK(log == std::vector<std::string>{"cma.lost", "cm.lost", "umad.lost", "umad.back", "cm.back", "cma.back"});
  log.clear();
  hca::Event e;
  e.kind = hca::Event::Kind::kPortState;
  e.port = 2;
  reg.port_event(e);
  CHECK(log == std::vector<std::string>{"umad.port 2", "cm.port 2", "cma.port 2"});
  log.clear();
  CHECK(reg.on_cq_event(7));  // umad's own: the others are not asked
  CHECK(log == std::vector<std::string>{"umad.cq 7"});
  CHECK_FALSE(reg.on_cq_event(9));
  CHECK(reg.counter_list().size() == 3);
  CHECK(Caller{1, 0, false}.privileged());
  CHECK(Caller{1, 1000, true}.privileged());
  CHECK_FALSE(Caller{1, 1000, false}.privileged());
}
