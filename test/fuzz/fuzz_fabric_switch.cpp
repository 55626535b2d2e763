// libFuzzer target: packets into an ibfabric switch (src/sim/fabric/switch.hpp)
// with its SMA/PMA engine. The input is a sequence of chunks, each
// [length][kind|port][bytes], fed to one switch in order so that Sets change
// the state later packets meet:
//   kind 0  the bytes as a raw datagram (any garbage);
//   kind 1  the bytes as a MAD in a well-formed VL15 SMP (DR or LID routed);
//   kind 2  the bytes as a MAD in a well-formed QP1 GMP to the switch's LID;
//   kind 3  a data packet to the DLID in the first two bytes.
// Nothing may crash, hang or read out of bounds; every packet the switch
// emits must leave by one of its ports and parse as an IBA packet.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <vector>

#include "common/log.hpp"
#include "mad/bytes.hpp"
#include "sim/fabric/switch.hpp"
#include "sim/fabric/topology.hpp"
#include "sim/wire/packet.hpp"

using namespace openib;
using namespace openib::sim;

namespace {

const fabric::TopoNode& node() {
  static const fabric::Topology t = [] {
    auto r = fabric::parse_topology("Switch 8 \"S\" # \"fuzz\" enhanced port 0 lid 5 lmc 1\n[1] \"H\"[1]\n\nHca 1 \"H\"\n");
    if (!r) std::abort();
    return std::move(r).value();
  }();
  return t.nodes[0];
}

std::vector<std::byte> wrap(std::span<const std::byte> body, std::uint8_t vl, std::uint16_t dlid, std::uint32_t qp) {
  mad::Mad m{};
  for (size_t i = 0; i < body.size() && i < m.size(); ++i) m[i] = body[i];
  wire::Headers h;
  h.lrh.vl = vl;
  h.lrh.dlid = dlid;
  h.lrh.slid = 1;
  h.bth.opcode = 0x64;  // UD SEND Only
  h.bth.dest_qp = qp;
  h.deth = wire::Deth{qp == 1 ? 0x80010000u : 0u, qp};
  auto p = wire::build_packet(h, m);
  if (!p) std::abort();
  return *p;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const bool quiet = [] {
    openib::log::set_level("off");
    return true;
  }();
  (void)quiet;
  fabric::Switch sw(node());
  size_t emitted = 0;
  sw.set_emit([&](unsigned port, std::span<const std::byte> p, unsigned) {
    if (port < 1 || port > sw.num_ports()) std::abort();
    if (!wire::parse_packet(p)) std::abort();
    ++emitted;
  });
  for (unsigned p = 1; p <= 8; ++p) sw.set_link(p, p % 3 != 0);
  auto now = fabric::Switch::Clock::time_point{};
  size_t off = 0;
  while (off + 2 <= size) {
    const size_t len = data[off];
    const std::uint8_t kp = data[off + 1];
    off += 2;
    const size_t n = std::min(len, size - off);
    std::span<const std::byte> body(reinterpret_cast<const std::byte*>(data + off), n);
    off += n;
    const unsigned port = 1 + (kp & 7);
    now += std::chrono::milliseconds(300);
    switch ((kp >> 3) & 3) {
      case 0:
        sw.receive(port, body, 0, now);
        break;
      case 1:
        sw.receive(port, wrap(body, 15, n > 0 && (kp & 0x80) ? 0xFFFF : 5, 0), 0, now);
        break;
      case 2:
        sw.receive(port, wrap(body, 0, 5, 1), 0, now);
        break;
      default: {
        const std::uint16_t dlid = n >= 2 ? static_cast<std::uint16_t>((std::to_integer<unsigned>(body[0]) << 8) |
                                                                      std::to_integer<unsigned>(body[1]))
                                          : 0;
        sw.receive(port, wrap(body, 0, dlid, 0x10), (kp >> 5) & 3, now);
        break;
      }
    }
    if (kp == 0xFF) sw.set_link(port, false, now);
    sw.tick(now);
  }
  return 0;
}
