// libFuzzer target: arbitrary bytes into the CM MAD codec (src/cm/wire).
// The input is read twice: as a whole MAD, and as the data area of a CM
// Send MAD whose attribute its first byte picks (so every message's
// decoder and checks are reached without the fuzzer first finding a valid
// header). Whatever decodes must encode to a MAD that decodes to the same
// value; nothing may crash or read out of bounds. Get(ClassPortInfo)
// answers are built from the input as a request too.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "cm/wire.hpp"
#include "mad/mad.hpp"

using namespace openib;
using namespace openib::cm;

namespace {

constexpr std::uint16_t kAttrs[] = {attr::kReq,     attr::kMra,     attr::kRej, attr::kRep,
                                    attr::kRtu,     attr::kDreq,    attr::kDrep, attr::kSidrReq,
                                    attr::kSidrRep, attr::kLap,     attr::kApr, attr::kClassPortInfo};

void round_trip(ConstBytes mad) {
  auto d = decode(mad);
  if (!d.ok()) {
    if (d.error().code != EBADMSG && d.error().code != EPROTONOSUPPORT) std::abort();
    return;
  }
  if (d->attr_id != attr_id_of(d->msg)) std::abort();
  (void)attr_name(d->attr_id);
  if (const auto* rej = std::get_if<Rej>(&d->msg)) (void)rej_reason_name(static_cast<std::uint16_t>(rej->reason));
  const ByteVec again = encode(d->msg, d->tid);
  if (again.size() != mad::kMadBytes) std::abort();
  auto e = decode(again);
  if (!e.ok() || !(*e == *d)) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  ConstBytes in(reinterpret_cast<const std::byte*>(data), size);
  round_trip(in);
  if (auto r = class_port_info_response(in, size > 0 ? data[0] : 0); r.ok()) {
    if (r->size() != mad::kMadBytes || mad::mad_method(*r) != kMethodGetResp ||
        mad::mad_tid(*r) != mad::mad_tid(in))
      std::abort();
  }
  if (size == 0) return 0;
  // The rest of the input as the data area of a Send of attribute kAttrs[data[0] % 12].
  mad::MadHeader h;
  h.mgmt_class = kMgmtClass;
  h.class_version = kClassVersion;
  h.method = kMethodSend;
  h.attr_id = kAttrs[data[0] % std::size(kAttrs)];
  mad::Mad m = mad::make_mad(h);
  for (std::size_t i = 1; i < size && kDataOff + i - 1 < m.size(); ++i) m[kDataOff + i - 1] = in[i];
  round_trip(m);
  return 0;
}
