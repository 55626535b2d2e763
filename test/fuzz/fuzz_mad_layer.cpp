// ibd's MAD layer (src/mad/layer.hpp) on a fake transport: random MADs
// arrive on QP0/QP1 from random addresses (requests, responses, RMPP DATA,
// ACK, STOP, ABORT with any header), and agents send random messages, with
// and without RMPP, while registered for SMP, SA (with RMPP), PMA and a
// vendor class. Nothing may crash, hang or grow without bound.
#include <boost/asio/io_context.hpp>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "fake_mad_port.hpp"
#include "mad/layer.hpp"

namespace {

using namespace openib;

using mad::fuzz::FakeMadPort;
using mad::fuzz::Input;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  boost::asio::io_context io;
  auto t = std::make_unique<FakeMadPort>(7);
  FakeMadPort* fake = t.get();
  mad::MadLayer layer(io, std::move(t));
  size_t delivered = 0;
  auto h = [&](const mad::Delivery& d) {
    if (d.data.size() > (8u << 20)) __builtin_trap();
    ++delivered;
  };
  uint32_t agents[4] = {};
  mad::AgentSpec smp{0x81, 1, 0, 0, {1u << 5 | 1u << 7, 0}};
  mad::AgentSpec sa{0x03, 2, 1, 0, {1u << 1 | 1u << 0x12, 0}};
  mad::AgentSpec pma{0x04, 1, 0, 0, {0, 0}};
  mad::AgentSpec vendor{0x32, 1, 1, 0x001405, {1u << 1, 0}};
  const mad::AgentSpec specs[4] = {smp, sa, pma, vendor};
  for (int i = 0; i < 4; ++i) {
    auto r = layer.register_agent(specs[i], h);
    if (!r) __builtin_trap();
    agents[i] = *r;
  }
  Input in{data, size};
  for (int step = 0; step < 64 && in.n; ++step) {
    const uint8_t op = in.byte();
    switch (op % 4) {
      case 0:
      case 1: {  // a MAD arrives
        mad::ReceivedMad r;
        r.qp = op & 1;
        r.from.lid = uint16_t(in.byte() << 8 | in.byte());
        r.from.qpn = in.byte() & 3;
        in.take(r.mad.data(), r.mad.size());
        if (op & 0x10) {  // a plausible header, so that the deeper paths are reached
          r.mad[0] = std::byte{1};
          r.mad[1] = std::byte{uint8_t(op & 0x20 ? 0x03 : 0x81)};
          r.mad[2] = std::byte{uint8_t(op & 0x20 ? 2 : 1)};
          r.mad[8] = std::byte{uint8_t(agents[op >> 6] >> 24)};
          r.mad[11] = std::byte{uint8_t(agents[op >> 6])};
          if (op & 0x40) r.mad[24] = std::byte{1}, r.mad[26] = std::byte{uint8_t(r.mad[26] | std::byte{1})};
        }
        fake->rx(r);
        break;
      }
      case 2: {  // an agent sends
        const size_t len = 24 + size_t(in.byte()) * 4;
        std::vector<std::byte> m(len);
        in.take(m.data(), m.size());
        mad::MadAddress to;
        to.lid = uint16_t(in.byte() | 1);
        to.qpn = 1;
        (void)layer.send(agents[op >> 6], to, m, in.byte(), in.byte() & 3);
        break;
      }
      case 3:
        io.poll();
        break;
    }
  }
  io.poll();
  (void)delivered;
  return 0;
}
