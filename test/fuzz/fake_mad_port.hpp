// The fuzz targets' fake port under ibd's MAD layer (src/mad/layer.hpp):
// it checks what the layer sends (QP0/QP1, whole MADs), refuses one send
// in `fail_every` (no send buffer), and keeps the last TIDs sent so that
// fuzzed answers can echo them; and the fuzz input read byte by byte.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "mad/layer.hpp"
#include "mad/mad.hpp"

namespace openib::mad::fuzz {

class FakeMadPort final : public MadTransport {
 public:
  explicit FakeMadPort(uint64_t fail_every) : fail_every_(fail_every) {}
  uint8_t port() const override { return 1; }
  void set_receiver(Receiver r) override { rx = std::move(r); }
  Result<void> send(uint8_t qp, const MadAddress&, std::span<const std::byte> m) override {
    if (qp > 1 || m.size() != kMadBytes) __builtin_trap();  // the layer must never do this
    tids.push_back(get64(m, 8));
    if (tids.size() > 64) tids.erase(tids.begin());
    if (++sent % fail_every_ == 0) return err(EAGAIN, "fake: no send buffer");
    return ok();
  }
  bool on_cq_event(uint32_t) override { return false; }
  const MadPortCounters& counters() const override { return c; }
  Receiver rx;
  std::vector<uint64_t> tids;  // the last 64 sent
  uint64_t sent = 0;

 private:
  uint64_t fail_every_;
  MadPortCounters c;
};

// The fuzzer's bytes, read in order; zeroes once they run out.
struct Input {
  const uint8_t* p;
  size_t n;
  uint8_t byte() {
    if (!n) return 0;
    --n;
    return *p++;
  }
  void take(std::byte* out, size_t k) {
    for (size_t i = 0; i < k; ++i) out[i] = std::byte(byte());
  }
};

}  // namespace openib::mad::fuzz
