// The cable's link-state signal (docs/cables.md "Link state"): an 8-byte
// datagram, sent by whoever pulls or plugs a cable (ibfabric's `link
// down` / `link up`) to the far end, standing in for the light a physical
// link loses and regains (IBA 5.6: both ends of a link see it go).
//
//   offset 0  6 bytes  "OPLINK" (0x4f 0x50 0x4c 0x49 0x4e 0x4b)
//   offset 6  u8       version, 1
//   offset 7  u8       state: 0 down (pulled), 1 up (plugged)
//
// It is never an IBA packet: its first byte would be an LRH with LVer 15
// (IBA 7.7.2 defines 0 only), and 8 bytes are below the 26 of the
// smallest packet (LRH, BTH, ICRC, VCRC; IBA 7.7.8). A datagram that
// starts with the magic but is not exactly this is not a signal: it goes
// through the receive checks and is counted malformed.
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <span>

namespace openib::sim {

inline constexpr std::size_t kLinkSignalBytes = 8;

std::array<std::byte, kLinkSignalBytes> encode_link_signal(bool up);
// The state a signal carries (true: up); nullopt if `d` is not one.
std::optional<bool> decode_link_signal(std::span<const std::byte> d);

}  // namespace openib::sim
