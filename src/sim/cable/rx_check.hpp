// What a port does with a datagram that arrived on its cable, before any
// receiver sees it (docs/cables.md "Validation"): the link layer's VCRC
// check over the whole datagram first (IBA 7.8.2: every bit from the LRH
// through the ICRC, so any single flipped bit anywhere is caught here,
// before a flipped LRH field could pass as a framing error), then
// parse_packet()'s framing, header and ICRC checks (IBA 7.7, 7.8.1, 9.2).
#pragma once

#include <atomic>
#include <cstddef>
#include <span>
#include <string>

#include "sim/cable/link_counters.hpp"

namespace openib::sim {

enum class RxVerdict {
  kGood,       // hand to the receiver
  kBadCrc,     // VCRC or ICRC wrong: rx_dropped_bad_crc
  kMalformed,  // anything else parse_packet() rejects: rx_dropped_malformed
};

// Classifies one received datagram; `why` (if given) gets the reason of a
// drop, `parsed` (if given) the packet of a kGood verdict.
// `crcs` false: the sender's cable offloaded the CRCs (ShmLink): framing only.
RxVerdict check_received(std::span<const std::byte> datagram, std::string* why = nullptr,
                         wire::ParsedPacket* parsed = nullptr, bool crcs = true);

// Counts a verdict in `c` (rx_packets and rx_bytes for every datagram, as
// IBA's PortRcvPkts counts packets with errors too, plus the drop counter)
// and logs a drop: the first of each kind per link at warning level, the
// rest at debug. `warned` is the link's memory of which kinds it has
// logged (bit 0 bad CRC, bit 1 malformed). Returns true for kGood.
// `parsed` (if given) gets the packet when the result is true.
bool count_received(std::span<const std::byte> datagram, LinkCounters& c, const std::string& link_name,
                    std::atomic<unsigned>& warned, wire::ParsedPacket* parsed = nullptr, bool crcs = true);

// The same for a cable carrying Ethernet frames (docs/cables.md "Ethernet
// cables"): only the size is judged, kEthernetMinFrameBytes ..
// wire::kMaxPacketBytes, else rx_dropped_malformed (logged as above).
bool count_received_frame(std::span<const std::byte> frame, LinkCounters& c, const std::string& link_name,
                          std::atomic<unsigned>& warned);

}  // namespace openib::sim
