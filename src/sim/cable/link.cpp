#include "sim/cable/link.hpp"

#include <cerrno>
#include <vector>

#include "sim/wire/packet.hpp"

namespace openib::sim {

// The general form of send_with(): the packet is written into a buffer,
// then sent as any other. Links with slots of their own override it.
Result<void> Link::send_with(std::size_t len, Filler fill, std::size_t /*payload_at*/) {
  std::vector<std::byte> buf(len);
  if (!fill(buf)) return err(ECANCELED, "packet abandoned by its sender");
  if (!carries_frames()) wire::seal_packet(buf);
  return send(buf);
}

Result<void> Link::send_segment(const Segment&, Filler) {
  return err(ENOTSUP, "this link takes packets one by one");
}

Result<void> Link::send_link_state(bool) {
  return err(ENOTSUP, "this cable carries no link-state signal");
}

}  // namespace openib::sim
