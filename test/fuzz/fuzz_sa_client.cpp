// ibd's SA client (src/sa/sa_client.hpp) on the real MAD layer over a fake
// transport: the client asks PathRecords, subscribes to traps, is told of
// SM changes, detached and attached again, while arbitrary MADs arrive on
// QP1 as the SA's answers (echoing a TID the client used, or not; GetResp,
// GetTableResp with or without RMPP, BUSY, redirects, ClassPortInfo) and
// as Reports. Nothing may crash or hang, and every completion is called
// exactly once: at most once while the client lives, all of them by the
// time it is destroyed.
#include <boost/asio/io_context.hpp>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "fake_mad_port.hpp"
#include "mad/layer.hpp"
#include "mad/mad.hpp"
#include "sa/path_record.hpp"
#include "sa/sa_client.hpp"
#include "sa/sa_mad.hpp"

namespace {

using namespace openib;

// Keeps the TIDs of what the layer sent, so answers can echo them.
using mad::fuzz::FakeMadPort;
using mad::fuzz::Input;

constexpr uint16_t kAttrs[] = {sa::attr::kPathRecord, mad::attr::kClassPortInfo, mad::attr::kNotice,
                               mad::attr::kInformInfo, sa::attr::kNodeRecord};
constexpr uint8_t kMethods[] = {mad::method::kGetResp, mad::method::kGetTableResp, mad::method::kReport, 0x95};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  boost::asio::io_context io;
  auto t = std::make_unique<FakeMadPort>(11);
  FakeMadPort* fake = t.get();
  mad::MadLayer layer(io, std::move(t));
  uint64_t asked = 0, answered = 0;
  {
    sa::SaClientConfig cfg;
    cfg.timeout_ms = 1;  // timers may fire within io.poll() of a later step
    cfg.min_timeout_ms = 1;
    cfg.max_timeout_ms = 2;
    cfg.busy_ms = 1;
    sa::SaClient client(io, [](auto reply) { reply(sa::SmAddress{1, 0}); }, cfg);
    client.set_report_handler([](const mad::Notice&) {});
    (void)client.attach(layer);
    Input in{data, size};
    for (int step = 0; step < 96 && in.n; ++step) {
      const uint8_t op = in.byte();
      switch (op % 8) {
        case 0:
        case 1:
        case 2: {  // a MAD from "the SA"
          mad::ReceivedMad r;
          r.qp = 1;
          r.from.lid = 1;
          r.from.qpn = 1;
          in.take(r.mad.data(), r.mad.size());
          if (op & 0x08) {  // plausible, to reach past the layer's checks
            r.mad[0] = std::byte{1};
            r.mad[1] = std::byte{mad::mgmt_class::kSubnAdm};
            r.mad[2] = std::byte{2};
            r.mad[3] = std::byte{kMethods[(op >> 4) & 3]};
            const uint16_t a = kAttrs[(op >> 6) % std::size(kAttrs)];
            r.mad[16] = std::byte(a >> 8);
            r.mad[17] = std::byte(a & 0xff);
            if (!fake->tids.empty()) mad::put64(r.mad, 8, fake->tids[in.byte() % fake->tids.size()]);
            if (!(op & 0x04)) r.mad[4] = r.mad[5] = std::byte{0};  // status OK, else whatever came
          }
          fake->rx(r);
          break;
        }
        case 3: {  // a lookup
          sa::PathRecord q;
          q.dgid[15] = in.byte();
          q.numb_path = 1;
          const uint64_t mask = sa::pr_mask::kDgid | sa::pr_mask::kNumbPath | (op & 0x10 ? sa::pr_mask::kSl : 0);
          ++asked;
          client.query_path(sa::PathKey(1, mask, q), [&](sa::PathAnswer) {
            if (++answered > asked) __builtin_trap();
          });
          break;
        }
        case 4:
          ++asked;
          client.subscribe(op & 0x10 ? 64 : 65, op & 0x20, [&](Result<void>) {
            if (++answered > asked) __builtin_trap();
          });
          break;
        case 5:
          client.sm_changed();
          break;
        case 6:
          if (op & 0x10) client.detach();
          else (void)client.attach(layer);
          break;
        case 7:
          io.poll();
          break;
      }
    }
    io.poll();
  }
  // The client is gone: everything asked has been answered, once.
  if (answered != asked) __builtin_trap();
  io.poll();
  return 0;
}
