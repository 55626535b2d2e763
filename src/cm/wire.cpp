// The CM MAD codec (wire.hpp): each message's layout of IBA 12.6, 12.8 and
// 12.11 as (bit offset, bit length) pairs from the first bit of the data
// area. (Bodies follow; this first version only links.)
#include "cm/wire.hpp"

namespace openib::cm {

const char* attr_name(std::uint16_t) { return "unknown"; }
const char* rej_reason_name(std::uint16_t) { return "unknown"; }
std::uint16_t attr_id_of(const Message&) { return 0; }
ByteVec encode(const Message&, std::uint64_t) { return ByteVec(mad::kMadBytes); }
Result<Decoded> decode(ConstBytes) { return err(ENOSYS, "cm::decode: not yet"); }
Result<ByteVec> class_port_info_response(ConstBytes, std::uint8_t) {
  return err(ENOSYS, "cm::class_port_info_response: not yet");
}

}  // namespace openib::cm
