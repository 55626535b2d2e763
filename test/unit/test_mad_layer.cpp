// ibd's MAD layer (src/mad/layer.hpp) on a transport that completes a
// transfer from inside its own send(): the response to a request, or the
// RMPP ACK of a window, arrives before send() has returned. ibd's loop
// once ran event handlers while it waited for a device command, so a MAD
// could come up through the layer while the layer was still in the middle
// of a send (issue 13, finding 5: a use-after-free in the layer). The
// asynchronous command interface ended that; these tests catch its return
// (run under ASan + UBSan by scripts/test.sh): the layer must handle such a
// completion without touching freed state and deliver the right result.
#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <functional>
#include <vector>

#include "mad/layer.hpp"

using namespace openib;
using namespace openib::mad;

namespace {

constexpr uint8_t kSubnAdm = 0x03;  // IBA 15.2.5: SA, class version 2, RMPP
constexpr uint8_t kPerf = 0x04;     // IBA 16.1: PMA, class version 1

// A transport whose send() runs `on_send` (which may call the receiver,
// as a port that polls its CQ inside a send would).
class ReentrantTransport final : public MadTransport {
 public:
  uint8_t port() const override { return 1; }
  void set_receiver(Receiver r) override { rx = std::move(r); }
  Result<void> send(uint8_t qp, const MadAddress& to, std::span<const std::byte> m) override {
    REQUIRE(m.size() == kMadBytes);
    Mad copy{};
    std::memcpy(copy.data(), m.data(), kMadBytes);
    sent.push_back(copy);
    if (on_send) on_send(qp, to, copy);
    return ok();
  }
  bool on_cq_event(uint32_t) override { return false; }
  const MadPortCounters& counters() const override { return c; }
  void receive(uint8_t qp, const Mad& m, uint16_t lid = 7) {
    ReceivedMad r;
    r.qp = qp;
    r.from.lid = lid;
    r.from.qpn = qp;
    r.mad = m;
    rx(r);
  }

  Receiver rx;
  std::function<void(uint8_t, const MadAddress&, const Mad&)> on_send;
  std::vector<Mad> sent;
  MadPortCounters c;
};

Mad request(uint8_t cls, uint8_t version, uint8_t method, uint32_t tid_low) {
  Mad m{};
  put8(m, 0, 1);  // BaseVersion
  put8(m, 1, cls);
  put8(m, 2, version);
  put8(m, 3, method);
  put64(m, 8, tid_low);
  return m;
}

struct Fixture {
  boost::asio::io_context io;
  ReentrantTransport* port = nullptr;
  std::unique_ptr<MadLayer> layer;
  std::vector<Delivery> got;
  Fixture() {
    auto t = std::make_unique<ReentrantTransport>();
    port = t.get();
    layer = std::make_unique<MadLayer>(io, std::move(t));
  }
  uint32_t agent(uint8_t cls, uint8_t version, uint8_t rmpp) {
    AgentSpec s;
    s.mgmt_class = cls;
    s.class_version = version;
    s.rmpp_version = rmpp;
    auto a = layer->register_agent(s, [this](const Delivery& d) { got.push_back(d); });
    REQUIRE(a);
    return *a;
  }
  // Runs the loop until `n` deliveries came or 2 s passed.
  void run_until(size_t n) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    while (got.size() < n && std::chrono::steady_clock::now() < end) {
      io.restart();
      io.run_for(std::chrono::milliseconds(10));
    }
  }
};

}  // namespace

TEST_CASE("a response that arrives inside send() completes the request once, with the response",
          "[mad][layer][reentrant]") {
  Fixture f;
  const uint32_t a = f.agent(kPerf, 1, 0);
  // The "device" answers every request at once, from inside the send.
  f.port->on_send = [&](uint8_t qp, const MadAddress&, const Mad& m) {
    if (is_response_mad(m)) return;
    Mad rsp = m;
    put8(rsp, 3, get8(m, 3) | 0x80);  // GetResp(), same TID
    put8(rsp, 64, 0x5a);              // a payload byte to recognise it
    f.port->receive(qp, rsp);
  };
  const Mad req = request(kPerf, 1, 0x01 /*Get*/, 0x1234);
  REQUIRE(f.layer->send(a, MadAddress{.qpn = 1, .lid = 7}, req, /*timeout_ms*/ 50, /*retries*/ 1));
  f.run_until(1);
  REQUIRE(f.got.size() == 1);
  CHECK(f.got[0].status == 0);
  CHECK(get8(f.got[0].data, 3) == 0x81);
  CHECK(get8(f.got[0].data, 64) == 0x5a);
  CHECK((get64(f.got[0].data, 8) & 0xffffffffu) == 0x1234);
  // No timeout after the response, and no resend: the request was complete.
  f.io.restart();
  f.io.run_for(std::chrono::milliseconds(200));
  CHECK(f.got.size() == 1);
  CHECK(f.port->sent.size() == 1);
  CHECK(f.layer->counters().timeouts == 0);
  CHECK(f.layer->counters().retries == 0);
}

TEST_CASE("RMPP ACKs that arrive inside send() finish the transfer without touching freed state",
          "[mad][layer][reentrant]") {
  Fixture f;
  const uint32_t a = f.agent(kSubnAdm, 2, 1);
  // Every DATA segment is ACKed at once, from inside its send: the last
  // ACK completes the transfer (the layer erases it) while the layer is
  // still posting the window.
  f.port->on_send = [&](uint8_t, const MadAddress&, const Mad& m) {
    auto h = decode_rmpp_header(m);
    if (!h || h->type != rmpp_type::kData) return;
    Mad ack = m;
    RmppHeader ah;
    ah.version = 1;
    ah.type = rmpp_type::kAck;
    ah.flags = rmpp_flag::kActive;
    ah.seg_num = h->seg_num;
    ah.paylen_newwin = 16;  // NewWindowLast: room for every segment
    encode_rmpp_header(ack, ah);
    put8(ack, 3, get8(m, 3) | 0x80);
    f.port->receive(1, ack);
  };
  // A 3-segment SA response (GetTableResp), sent by the agent.
  const size_t seg_payload = kMadBytes - kRmppPayloadOff - rmpp_class_header_bytes(kSubnAdm);
  ByteVec msg(kMadBytes + 2 * seg_payload, std::byte{0});
  put8(msg, 0, 1);
  put8(msg, 1, kSubnAdm);
  put8(msg, 2, 2);
  put8(msg, 3, 0x92);  // GetTableResp
  put64(msg, 8, 0x55);
  RmppHeader h;
  h.version = 1;
  h.type = rmpp_type::kData;
  h.flags = rmpp_flag::kActive;
  encode_rmpp_header(msg, h);
  REQUIRE(f.layer->send(a, MadAddress{.qpn = 1, .lid = 7}, msg, 0, 0));
  f.io.restart();
  f.io.run_for(std::chrono::milliseconds(100));
  size_t data_segments = 0;
  for (const Mad& m : f.port->sent) {
    auto sh = decode_rmpp_header(m);
    if (sh && sh->type == rmpp_type::kData) ++data_segments;
  }
  CHECK(data_segments == 3);
  CHECK(f.layer->counters().rmpp_aborted == 0);
  CHECK(f.got.empty());  // a response: nothing comes back to the agent
  // The transfer is over: the same TID may be sent again (EBUSY otherwise).
  f.port->on_send = nullptr;
  CHECK(f.layer->send(a, MadAddress{.qpn = 1, .lid = 7}, msg, 0, 0));
}

TEST_CASE("an agent's requests awaiting responses are bounded", "[mad][layer]") {
  Fixture f;
  const uint32_t a = f.agent(kPerf, 1, 0);
  f.layer->set_max_outstanding(4);
  for (uint32_t i = 0; i < 4; ++i)
    REQUIRE(f.layer->send(a, MadAddress{.qpn = 1, .lid = 7}, request(kPerf, 1, 1, i), 10000, 0));
  auto r = f.layer->send(a, MadAddress{.qpn = 1, .lid = 7}, request(kPerf, 1, 1, 99), 10000, 0);
  REQUIRE(!r);
  CHECK(r.error().code == ENOBUFS);
  // A request without a timeout awaits nothing: not counted.
  CHECK(f.layer->send(a, MadAddress{.qpn = 1, .lid = 7}, request(kPerf, 1, 1, 100), 0, 0));
  // A response frees a place.
  Mad rsp = f.port->sent[0];
  put8(rsp, 3, 0x81);
  f.port->receive(1, rsp);
  REQUIRE(f.got.size() == 1);
  CHECK(f.layer->send(a, MadAddress{.qpn = 1, .lid = 7}, request(kPerf, 1, 1, 101), 10000, 0));
}
