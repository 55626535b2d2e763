// libFuzzer target: every vfio-user decoder, client side (replies) and
// server side (commands), on arbitrary bytes. A decoder may reject
// anything but must never read out of bounds, loop, or crash; what it
// accepts must re-encode to something it accepts again.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <string_view>

#include "vfio/vfio_user_proto.hpp"

using namespace openib::vfio;
using namespace openib::vfio::user;

namespace {

void check(bool c) {
  if (!c) std::abort();
}

void decode_all(ByteSpan p) {
  // Server side: commands.
  (void)decode_version(p);
  (void)decode_dma_map(p);
  (void)decode_dma_unmap(p);
  (void)decode_device_info_request(p);
  (void)decode_region_info_request(p);
  (void)decode_irq_info_request(p);
  if (auto s = decode_irq_set(p); s.ok()) check(decode_irq_set(encode_irq_set(*s)).ok());
  (void)decode_region_access_header(p, kMaxDataXfer);
  (void)decode_region_access_data(p, kMaxDataXfer);
  // Client side: replies and server commands.
  if (auto v = decode_version(p); v.ok()) (void)parse_capabilities(v->json);
  (void)decode_device_info(p);
  if (auto r = decode_region_info(p); r.ok() && !r->truncated) {
    for (const SparseArea& a : r->info.sparse) check(a.offset + a.size <= r->info.size);
    auto again = decode_region_info(encode_region_info(r->info, kMaxRegionInfoSize));
    check(again.ok() && again->info.sparse.size() == r->info.sparse.size());
  }
  (void)decode_irq_info(p);
  (void)decode_dma_access_header(p, kMaxDataXfer);
  (void)decode_dma_access_data(p, kMaxDataXfer);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ByteSpan in(reinterpret_cast<const std::byte*>(data), size);
  // As a whole message, and its payload on its own.
  if (auto m = decode_message(in); m.ok()) {
    check(m->header.size == size);
    decode_all(m->payload);
  }
  (void)decode_header(in);
  decode_all(in);
  // The JSON parser on the raw text.
  (void)parse_capabilities(std::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}
