// libFuzzer target: arbitrary bytes into the client protocol's decoders
// (src/clientproto, docs/client-protocol.md). Nothing may crash or read out
// of bounds; a body that decodes must encode back to the same bytes, since
// every field of every layout is carried.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>

#include "clientproto/messages.hpp"

using namespace openib::proto;

namespace {
template <class M>
void round_trip(std::span<const std::byte> in) {
  auto m = decode<M>(in);
  if (!m.ok()) return;
  Bytes back = encode(*m);
  if (back.size() != in.size() || std::memcmp(back.data(), in.data(), in.size()) != 0) std::abort();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::span<const std::byte> in(reinterpret_cast<const std::byte*>(data), size);
  if (auto h = decode_header(in); h.ok()) (void)op_name(h->op);
  (void)decode_reply(in);
  round_trip<HelloReq>(in);
  round_trip<HelloRep>(in);
  round_trip<DeviceRep>(in);
  round_trip<DeviceRep5>(in);
  round_trip<PortReq>(in);
  round_trip<PortRep>(in);
  round_trip<GidReq>(in);
  round_trip<GidRep>(in);
  round_trip<PkeyReq>(in);
  round_trip<PkeyRep>(in);
  round_trip<HandleReq>(in);
  round_trip<ObjRep>(in);
  round_trip<MapMemReq>(in);
  round_trip<MapMemRangeReq>(in);
  round_trip<MapMemRep>(in);
  round_trip<RegMrReq>(in);
  round_trip<RegMrRep>(in);
  round_trip<CreateCqReq>(in);
  round_trip<CreateSrqReq>(in);
  round_trip<ModifySrqReq>(in);
  round_trip<CreateQpReq>(in);
  round_trip<ModifyQpReq>(in);
  round_trip<QueryQpRep>(in);
  round_trip<CreateAhReq>(in);
  round_trip<AsyncEventsRep>(in);
  round_trip<InfoReq>(in);
  round_trip<McastJoinReq>(in);
  round_trip<McastJoinRep>(in);
  round_trip<McastLeaveReq>(in);
  round_trip<ServiceReq>(in);
  round_trip<ServiceRep>(in);
  return 0;
}
