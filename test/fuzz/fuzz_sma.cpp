// libFuzzer target: arbitrary MADs into the SMA and PMA engines
// (src/sim/sma) of a fake 36-port switch and a fake 2-port CA. Byte 0
// picks the arrival port and M_Key protection, byte 1 optionally forces
// the header into shape (base/class version 1, class 0x81/0x01/0x04, a
// small hop count) so the fuzzer gets past the first checks; the rest is
// the MAD (padded to 256 bytes); a second MAD in the input is fed after
// it, so Set followed by Get paths are reached. Nothing may crash, and every request
// (Get/Set) that is not dropped for a reason must be answered.
#include <chrono>
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "../unit/test_sma_models.hpp"
#include "mad/smp.hpp"
#include "sim/sma/engine.hpp"

using namespace openib::mad;
using namespace openib::sim::sma;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  testing::FakeNode sw(NodeType::kSwitch, 36, 0x1000);
  testing::FakeNode ca(NodeType::kCa, 2, 0x2000);
  sw.port(0).master_sm_lid = 1;
  ca.port(1).master_sm_lid = 1;
  if (data[0] & 0x80) {
    sw.port(0).mkey = ca.port(1).mkey = 0x10;
    sw.port(0).mkey_protect_bits = ca.port(1).mkey_protect_bits = data[0] & 3;
  }
  SmaEngine se(sw), ce(ca);
  PmaEngine sp(sw), cp(ca);
  const auto now = std::chrono::steady_clock::time_point{} + std::chrono::seconds(1);
  const std::uint8_t port = static_cast<std::uint8_t>((data[0] >> 2) % 38);
  const std::uint8_t shape = data[1];
  ConstBytes rest(reinterpret_cast<const std::byte*>(data + 2), size - 2);
  for (std::size_t off = 0; off < rest.size() && off < 2 * kMadBytes; off += kMadBytes) {
    Mad m{};
    auto chunk = rest.subspan(off, std::min(kMadBytes, rest.size() - off));
    std::copy(chunk.begin(), chunk.end(), m.begin());
    if (shape & 1) {
      put8(m, 0, kBaseVersion);
      put8(m, 2, 1);
    }
    static constexpr std::uint8_t kClasses[] = {0, mgmt_class::kSubnDirected, mgmt_class::kSubnLid,
                                                mgmt_class::kPerfMgmt};
    if (std::uint8_t c = kClasses[(shape >> 1) & 3]; c != 0) put8(m, 1, c);
    if (shape & 8) {
      smp_set_hop_cnt(m, smp_hop_cnt(m) % 8);
      smp_set_hop_ptr(m, static_cast<std::uint8_t>(smp_hop_ptr(m) % (smp_hop_cnt(m) + 2)));
    }
    if (shape & 16) put8(m, 3, get8(m, 3) % 3);  // Get/Set mostly
    for (SmaEngine* e : {&se, &ce}) {
      auto a = e->handle_smp(m, port, static_cast<std::uint16_t>(size));
      if (a.kind == SmpActionKind::kDrop && a.reason.empty()) std::abort();
      if (a.kind == SmpActionKind::kReply && !is_response(mad_method(a.out.mad))) std::abort();
      (void)e->trap_resends(now + std::chrono::seconds(2));
    }
    for (PmaEngine* p : {&sp, &cp}) {
      auto a = p->handle_gmp(m, port);
      if (a.kind == PmaActionKind::kReply && mad_method(a.mad) != method::kGetResp) std::abort();
    }
  }
  (void)se.send_trap_128(now);
  return 0;
}
