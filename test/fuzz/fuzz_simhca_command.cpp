// libFuzzer target: simhca's command path (docs/simhca.md §5, §6, §8, §9).
// The input is cut into command entries (128 bytes) and mailbox bytes,
// written into a fake host memory, rung and executed by the device core;
// interleaved register and UAR doorbell writes come from the input too.
// The pure decoders are also fed directly. Nothing may crash, hang, or
// touch memory outside the fake host's buffer.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "common/log.hpp"
#include "sim/simhca/codec.hpp"
#include "sim/simhca/hca.hpp"
#include "sim/simhca/qp_state.hpp"
#include "fake_host.hpp"

namespace {

using namespace openib;
using namespace openib::simhca;

using fuzz::FakeHost;

constexpr uint64_t kCmdq = FakeHost::kBase;            // 32 entries
constexpr uint64_t kMailbox = FakeHost::kBase + 4096;  // fuzzed mailbox bytes

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static bool quiet = (log::set_level("off"), true);
  (void)quiet;
  std::span<const std::byte> in(reinterpret_cast<const std::byte*>(data), size);

  // The pure decoders, straight on the input.
  (void)decode_entry(in);
  (void)decode_create_qp(in);
  (void)decode_create_eq(in);
  (void)decode_create_cq(in);
  (void)decode_create_srq(in);
  (void)decode_create_mkey(in, 1024);
  (void)decode_page_list(in, static_cast<uint32_t>(in.size() / 8));
  (void)decode_create_ah(in);
  (void)decode_set_port(in);
  (void)decode_query_gid(in);
  (void)decode_set_gid(in);
  if (auto m = decode_modify_qp(in)) {
    for (uint8_t type = 0; type < 6; ++type)
      for (uint8_t cur = 0; cur < 8; ++cur) (void)check_modify(type, cur, *m, QpLimits{});
  }

  // The device core over the fake host.
  FakeHost host;
  HcaOptions opts;
  opts.caps.max_qp = 16;
  opts.caps.max_cq = 8;
  opts.caps.max_eq = 4;
  opts.caps.max_pd = 8;
  opts.caps.max_mkey = 8;
  opts.caps.max_mkey_pages = 64;           // §6.7: page lists inline or read from the fake host
  opts.caps.max_translation_entries = 96;  // reachable: the device's translation memory full
  opts.caps.max_ah = 8;
  opts.caps.max_srq = 4;
  opts.caps.log_max_eqe = 6;
  opts.caps.log_max_cqe = 6;
  Hca hca(host, opts);
  hca.bar0_write32(0x010, static_cast<uint32_t>(kCmdq));
  hca.bar0_write32(0x014, 0);
  hca.bar0_write32(0x018, 5);
  hca.bar0_write32(0x01c, 1);
  size_t pos = 0;
  if (size > 0 && (data[0] & 1)) {  // start initialized half the time, to reach deeper
    Bytes out;
    (void)hca.execute(kOpInitHca, {}, out);
  }
  for (uint32_t slot = 0; pos < size && slot < 64; ++slot) {
    const uint8_t kind = data[pos++];
    if (kind < 16 && pos + 12 <= size) {  // a register or doorbell write
      uint64_t off = 0, v = 0;
      std::memcpy(&off, data + pos, 4);
      std::memcpy(&v, data + pos + 4, 8);
      pos += 12;
      if (kind & 1) hca.uar_write64(static_cast<uint32_t>(off >> 12) % 64, off & 0xff8, v);
      else if ((off & 0xffc) != 0xf00) hca.bar0_write32(off & 0x3ffc, static_cast<uint32_t>(v));
      continue;
    }
    // A command entry, then up to 512 mailbox bytes.
    const size_t n = std::min<size_t>(kEntrySize, size - pos);
    std::byte* entry = host.mem.data() + (slot % 32) * kEntrySize;
    std::memset(entry, 0, kEntrySize);
    std::memcpy(entry, data + pos, n);
    pos += n;
    if (kind & 0x80) {  // point the mailboxes at fuzzed bytes
      put64(std::span<std::byte>(entry, kEntrySize), 0x10, kMailbox);
      put64(std::span<std::byte>(entry, kEntrySize), 0x18, kMailbox + 2048);
    }
    entry[0x67] = std::byte{static_cast<uint8_t>(kind & 0x40 ? 0 : 1)};
    const size_t m = std::min<size_t>(512, size - pos);
    std::memcpy(host.mem.data() + (kMailbox - FakeHost::kBase), data + pos, m);
    pos += m;
    hca.bar0_write32(0x020, 1u << (slot % 32));
    hca.run_due(Hca::Clock::now());
  }
  (void)hca.bar0_read32(0x024);
  return 0;
}
