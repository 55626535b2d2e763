// libFuzzer target: simhca's WQE parser (docs/simhca.md §12.1, §12.2) and
// the memory-key translation of §12.6. The first byte picks the QP type
// and limits; the rest is one SQ or RQ stride as the driver would write it.
// Properties: never a crash; a decoded WQE stays inside the stride and the
// limits; translated extents cover exactly the range asked, inside the
// region's pages.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "sim/simhca/wqe.hpp"

using namespace openib::simhca;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t sel = data[0];
  ByteView wqe(reinterpret_cast<const std::byte*>(data + 1), size - 1);
  const WqeLimits lim{static_cast<uint16_t>(sel >> 4), static_cast<uint16_t>((sel & 8) ? 64 : 512)};
  auto w = decode_send_wqe(wqe, sel % 6, lim);
  if (w) {
    if (size_t{w->num_ds} * kSegSize > wqe.size()) std::abort();
    if (w->sges.size() > lim.max_sge) std::abort();
    if (w->inline_data.size() > lim.max_inline) std::abort();
    if (w->length() > kMaxMsgSize) std::abort();
  } else if (w.error().code != kWcLocQpOpErr && w.error().code != kWcLocLenErr) {
    std::abort();
  }
  auto r = decode_recv_wqe(wqe, lim.max_sge);
  if (r && (r->sges.size() > lim.max_sge || kSegSize * (1 + r->sges.size()) > wqe.size())) std::abort();

  // Key translation of a range taken from the input against a 3-page region.
  if (wqe.size() >= 16) {
    static const std::vector<uint64_t> pages{0x10000, 0x30000, 0x50000};
    const KeyRegion reg{0x101, 1, kMrLocalWrite | kMrRemoteRead, 0x4000'0100, 3 * 4096 - 0x200, 12, &pages};
    const uint64_t va = 0x40000000 + (get32(wqe, 0) % 0x4000);
    const uint64_t len = get32(wqe, 4) % 0x4000;
    std::vector<Extent> ext;
    if (translate(&reg, 0x101, 1, va, len, get8(wqe, 8) & 0xf, ext) == KeyFault::kNone) {
      uint64_t total = 0;
      for (const Extent& e : ext) {
        total += e.len;
        bool inside = false;
        for (uint64_t p : pages) inside |= e.iova >= p && e.iova + e.len <= p + 4096 * 3;
        if (!inside) std::abort();
      }
      if (total != len || va < reg.start_va || va + len > reg.start_va + reg.length) std::abort();
    }
  }
  return 0;
}
