// libFuzzer target: simhca's SMA, PMA and MAD routing (docs/simhca.md
// §14, §15). A device core with two cabled ports, QP0 and QP1 in RTS with
// receive buffers, takes packets cut from the input: raw datagrams, and
// fuzzed MADs wrapped in well-formed packets (valid CRCs) for QP0 on VL15
// (permissive or own DLID, either port) or QP1 with the GSI Q_Key, so the
// SMA/PMA engine and the port state machine see them; and fuzzed UD
// packets to a multicast group (with or without a GRH, its DGID the group
// or fuzzed) that two UD QPs of port 1 are attached to (§6.11, §12.8).
// Loopback turns are run in between. Nothing may crash, hang, or touch memory outside the
// fake host's buffer.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "common/log.hpp"
#include "sim/simhca/hca.hpp"
#include "sim/wire/packet.hpp"
#include "fake_host.hpp"

namespace {

using namespace openib;
using namespace openib::simhca;
namespace w = openib::sim::wire;

using fuzz::FakeHost;

// A cable end that swallows what the device sends.
class SinkLink final : public sim::Link {
 public:
  Result<void> send(std::span<const std::byte>) override {
    ++sent;
    return ok();
  }
  void set_receiver(Receiver) override {}
  sim::LinkStats stats() const override { return {}; }
  uint64_t sent = 0;
};

uint32_t run(Hca& hca, uint16_t op, Bytes in) {
  Bytes out;
  Outcome o = hca.execute(op, in, out);
  return o.status == kOk && out.size() >= 4 ? get32(out, 0) : 0xffffffff;
}

// A special QP with 64 posted receive buffers of 512 bytes (§6.10, §12.2).
uint32_t special_qp(Hca& hca, FakeHost& host, uint8_t type, uint8_t port, uint32_t pd, uint32_t cq, uint32_t key,
                    uint64_t area) {
  const uint64_t sq = area, rq = area + 4096, dbr = area + 8192, bufs = area + 12288;
  Bytes c(64);
  put8(c, 0, type);
  put8(c, 1, port);
  put32(c, 4, pd);
  put32(c, 8, cq);
  put32(c, 0x0c, cq);
  put64(c, 0x18, sq);
  put64(c, 0x20, rq);
  put64(c, 0x28, dbr);
  put8(c, 0x30, 6);
  put8(c, 0x31, 6);
  put8(c, 0x32, 6);
  put8(c, 0x33, 5);
  const uint32_t qpn = run(hca, kOpCreateQp, c);
  if (qpn == 0xffffffff) return qpn;
  auto modify = [&](uint32_t mask, uint8_t state, uint32_t qkey) {
    Bytes m(96);
    put32(m, 0, qpn);
    put32(m, 4, mask);
    put8(m, 0x10, state);
    put32(m, 0x18, qkey);
    (void)run(hca, kOpModifyQp, m);
  };
  auto init = [&] {  // a UD QP names its port (§8.2); SMI/GSI have theirs
    Bytes m(96);
    put32(m, 0, qpn);
    put32(m, 4, attr::kState | attr::kPkeyIndex | attr::kQkey | (type == kQpUd ? attr::kPort : 0));
    put8(m, 0x10, kInit);
    put8(m, 0x12, type == kQpUd ? 1 : 0);
    put32(m, 0x18, type == kQpGsi ? kGsiQkey : 0);
    (void)run(hca, kOpModifyQp, m);
  };
  init();
  modify(attr::kState, kRtr, 0);
  modify(attr::kState | attr::kSqPsn, kRts, 0);
  for (uint32_t i = 0; i < 64; ++i) {  // §12.2 receive WQEs, one 512-byte buffer each
    auto wqe = std::span<std::byte>(host.mem).subspan(rq - FakeHost::kBase + 32 * i, 32);
    put64(wqe, 0, i);
    put8(wqe, 8, 1);
    put32(wqe, 16, 512);
    put32(wqe, 20, key);
    put64(wqe, 24, bufs + 512 * (i % 8));
  }
  put32(std::span<std::byte>(host.mem).subspan(dbr - FakeHost::kBase, 8), 0, 64);
  return qpn;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static bool quiet = (log::set_level("off"), true);
  (void)quiet;
  std::span<const std::byte> in(reinterpret_cast<const std::byte*>(data), size);

  FakeHost host;
  HcaOptions opts;
  opts.caps.max_qp = 16;
  opts.caps.max_cq = 4;
  opts.caps.max_eq = 2;
  opts.caps.max_pd = 2;
  opts.caps.max_mkey = 4;
  opts.caps.max_ah = 4;
  opts.caps.max_srq = 1;
  opts.caps.num_ports = 2;
  Hca hca(host, opts);
  SinkLink l1, l2;
  hca.attach_link(1, &l1);
  hca.attach_link(2, &l2);
  (void)run(hca, kOpInitHca, {});
  Bytes eq(32);
  put64(eq, 0, FakeHost::kBase);
  put64(eq, 8, 0x3fffe);  // every event but command completions (§9.4)
  put8(eq, 0x10, 6);
  (void)run(hca, kOpCreateEq, eq);
  const uint32_t pd = run(hca, kOpAllocPd, {});
  Bytes cq(32);
  put64(cq, 0, FakeHost::kBase + 4096);
  put64(cq, 8, FakeHost::kBase + 8192);
  put8(cq, 0x10, 6);
  const uint32_t cqn = run(hca, kOpCreateCq, cq);
  Bytes mk(40);  // one key over all of the fake memory (§6.7), VA = IOVA
  put32(mk, 0, pd);
  put32(mk, 4, 1);
  put64(mk, 8, FakeHost::kBase);
  put64(mk, 0x10, FakeHost::kSize);
  put8(mk, 0x18, 18);
  put32(mk, 0x1c, 1);
  put64(mk, 0x20, FakeHost::kBase);
  Bytes mko;
  (void)hca.execute(kOpCreateMkey, mk, mko);
  const uint32_t key = mko.size() >= 4 ? get32(mko, 0) : 0;
  special_qp(hca, host, kQpSmi, 1, pd, cqn, key, FakeHost::kBase + 16384);
  special_qp(hca, host, kQpGsi, 1, pd, cqn, key, FakeHost::kBase + 16384 + 20480);
  special_qp(hca, host, kQpSmi, 2, pd, cqn, key, FakeHost::kBase + 16384 + 2 * 20480);
  // Two UD QPs (Q_Key 0) attached to one group (§6.11).
  const std::array<uint8_t, 16> mgid{0xff, 0x12, 0x40, 0x1b, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff};
  for (uint32_t i = 0; i < 2; ++i) {
    const uint32_t ud = special_qp(hca, host, kQpUd, 0, pd, cqn, key, FakeHost::kBase + 16384 + (3 + i) * 20480);
    Bytes a(24);
    put32(a, 0, ud);
    put16(a, 6, 0xc001);
    for (size_t k = 0; k < 16; ++k) put8(a, 8 + k, mgid[k]);
    (void)run(hca, kOpAttachMcg, a);
  }
  Bytes sp(24);  // port 1 Active with LID 1; port 2 stays in Init for the SM
  put8(sp, 0, 1);
  put8(sp, 1, kSelState | kSelLid);
  put8(sp, 2, 4);
  put16(sp, 4, 1);
  (void)run(hca, kOpSetPort, sp);

  auto now = Hca::Clock::time_point{};
  // Chunks: [kind][len][bytes...]. kind bits 1:0: 0 raw datagram, 1 SMP
  // for QP0 (bit 2: own LID instead of the permissive one), 2 GMP for QP1,
  // 3 run the device; bit 3: port 2. A GMP with bit 2 set is instead a UD
  // SEND to the multicast group (bit 6: no GRH; bit 7: a fuzzed DGID).
  size_t at = 0;
  while (at + 2 <= in.size()) {
    const uint8_t kind = std::to_integer<uint8_t>(in[at]);
    const size_t len = std::min<size_t>(std::to_integer<uint8_t>(in[at + 1]) * 2u, in.size() - at - 2);
    auto body = in.subspan(at + 2, len);
    at += 2 + len;
    const uint8_t port = (kind & 8) ? 2 : 1;
    now += std::chrono::milliseconds(kind >> 4);
    switch (kind & 3) {
      case 0: hca.receive_packet(port, body, now); break;
      case 1:
      case 2: {
        const bool smp = (kind & 3) == 1;
        std::array<std::byte, 256> mad{};
        std::copy_n(body.begin(), std::min(body.size(), mad.size()), mad.begin());
        if (smp && body.size() > 1) mad[1] = std::byte(body.size() % 2 ? 0x81 : 0x01);
        if (!smp && body.size() > 1) mad[1] = std::byte{0x04};
        mad[0] = std::byte{1};
        w::Headers h;
        h.lrh.vl = smp ? 15 : 0;
        h.lrh.dlid = smp && !(kind & 4) ? 0xffff : 1;
        h.lrh.slid = 7;
        h.bth.opcode = w::opcode(w::Transport::kUd, w::Op::kSendOnly);
        h.bth.pkey = 0xffff;
        h.bth.dest_qp = smp ? 0 : 1;
        h.deth = w::Deth{smp ? 0u : kGsiQkey, smp ? 0u : 1u};
        if (!smp && (kind & 4)) {  // §12.8 multicast
          h.lrh.dlid = 0xc001;
          h.bth.dest_qp = 0xffffff;
          h.deth = w::Deth{body.size() % 3 ? 0u : 0x1234u, 9};
          if (!(kind & 0x40)) {
            w::Grh g;
            g.dgid = mgid;
            if (kind & 0x80) std::copy_n(mad.begin(), 16, reinterpret_cast<std::byte*>(g.dgid.data()));
            h.grh = g;
            h.lrh.lnh = w::Lnh::kIbaGlobal;
          }
          if (auto pkt = w::build_packet(h, body)) hca.receive_packet(port, *pkt, now);
          break;
        }
        if (auto pkt = w::build_packet(h, mad)) hca.receive_packet(port, *pkt, now);
        break;
      }
      default: break;
    }
    hca.run_due(now);  // loopback turns, traps, the data path
  }
  for (int i = 0; i < 4; ++i) hca.run_due(now);
  hca.attach_link(1, nullptr);
  hca.attach_link(2, nullptr);
  return 0;
}
