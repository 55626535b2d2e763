#include "sim/cable/rx_check.hpp"

#include <cerrno>
#include <optional>

#include "common/byte_order.hpp"
#include "common/log.hpp"
#include "sim/cable/link.hpp"
#include "sim/wire/crc.hpp"
#include "sim/wire/headers.hpp"
#include "sim/wire/packet.hpp"

namespace openib::sim {

RxVerdict check_received(std::span<const std::byte> d, std::string* why, wire::ParsedPacket* parsed, bool crcs) {
  using namespace wire;
  // Shortest IBA packet: LRH, BTH, ICRC, VCRC (IBA 7.7.8). Below that there
  // is nothing a CRC could be taken over.
  if (d.size() < kLrhBytes + kBthBytes + kIcrcBytes + kVcrcBytes || d.size() > kMaxPacketBytes) {
    if (why) *why = "datagram of " + std::to_string(d.size()) + " bytes cannot be an IBA packet";
    return RxVerdict::kMalformed;
  }
  // VCRC, IBA 7.8.2: over LRH..ICRC, stored least significant byte first
  // (the length was checked above, so the load is unchecked).
  const std::size_t n = d.size() - kVcrcBytes;
  const std::uint16_t stored = bytes::ld_le16(d.data() + n);
  if (crcs && compute_vcrc(d.first(n)) != stored) {
    if (why) *why = "bad VCRC";
    return RxVerdict::kBadCrc;
  }
  std::optional<ParsedPacket> local;  // built only when the caller wants no parse back
  // The VCRC was just checked.
  auto p = parse_packet_into(d, parsed ? *parsed : local.emplace(), ParseOptions{.check_vcrc = false, .check_icrc = crcs});
  if (p.ok()) return RxVerdict::kGood;
  if (why) *why = p.error().str();
  return p.error().code == EBADMSG ? RxVerdict::kBadCrc : RxVerdict::kMalformed;
}

bool count_received(std::span<const std::byte> d, LinkCounters& c, const std::string& link_name,
                    std::atomic<unsigned>& warned, wire::ParsedPacket* parsed, bool crcs) {
  LinkCounters::bump_owned(c.rx_packets);
  LinkCounters::bump_owned(c.rx_bytes, d.size());
  std::string why;
  const RxVerdict v = check_received(d, &why, parsed, crcs);
  if (v == RxVerdict::kGood) return true;
  const bool crc = v == RxVerdict::kBadCrc;
  LinkCounters::bump_owned(crc ? c.rx_dropped_bad_crc : c.rx_dropped_malformed);
  const unsigned bit = crc ? 1u : 2u;
  const bool first = (warned.fetch_or(bit, std::memory_order_relaxed) & bit) == 0;
  log::get("cable")->log(first ? spdlog::level::warn : spdlog::level::debug,
                         "{}: dropped a {}-byte datagram, {}: {}{}", link_name, d.size(),
                         crc ? "bad CRC" : "malformed", why,
                         first ? " (further drops of this kind are logged at debug level)" : "");
  return false;
}

bool count_received_frame(std::span<const std::byte> d, LinkCounters& c, const std::string& link_name,
                          std::atomic<unsigned>& warned) {
  LinkCounters::bump_owned(c.rx_packets);
  LinkCounters::bump_owned(c.rx_bytes, d.size());
  if (d.size() >= kEthernetMinFrameBytes && d.size() <= wire::kMaxPacketBytes) return true;
  LinkCounters::bump_owned(c.rx_dropped_malformed);
  const bool first = (warned.fetch_or(2u, std::memory_order_relaxed) & 2u) == 0;
  log::get("cable")->log(first ? spdlog::level::warn : spdlog::level::debug,
                         "{}: dropped a {}-byte datagram: not an Ethernet frame of {}..{} bytes{}", link_name,
                         d.size(), kEthernetMinFrameBytes, wire::kMaxPacketBytes,
                         first ? " (further drops of this kind are logged at debug level)" : "");
  return false;
}

}  // namespace openib::sim
