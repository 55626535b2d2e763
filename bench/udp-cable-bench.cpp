// udp-cable-bench: what one packet costs on the UDP cable (src/sim/cable/
// udp_link.*) in each of its I/O modes (docs/cables.md "Batches"), as CPU
// time (user + system, both ends and their receive threads: getrusage),
// which a machine shared with other work stretches far less than the
// elapsed time. Two UdpLinks on 127.0.0.1; the sender sends 4 KiB-payload
// packets (a 64 KiB WRITE's) in batches of 16 (the RC window per turn) and
// keeps at most 1,024 unreceived, so nothing is lost to a full buffer.
//
//   udp-cable-bench [PACKETS [PAYLOAD]]   (default 100000 packets of 4096 bytes
//                                          of payload; one line per mode)
#include <sys/resource.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "sim/cable/udp_link.hpp"
#include "sim/wire/headers.hpp"
#include "sim/wire/packet.hpp"

using namespace openib::sim;
using namespace openib::sim::wire;

namespace {

double cpu_seconds() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

std::vector<std::byte> write_middle(std::uint32_t psn, std::size_t len) {
  Headers h;
  h.lrh.dlid = 2;
  h.lrh.slid = 1;
  h.bth.opcode = opcode(Transport::kRc, Op::kWriteMiddle);
  h.bth.pkey = 0xFFFF;
  h.bth.dest_qp = 0x12;
  h.bth.psn = psn & 0xFFFFFF;
  std::vector<std::byte> pl(len, std::byte{0x5a});
  auto r = build_packet(h, pl);
  if (!r) std::exit(2);
  return std::move(r).value();
}

struct Result {
  double cpu_us_per_packet, wall_us_per_packet;
  LinkStats tx, rx;
};

Result run(UdpLinkOptions::Io io, bool gro, std::size_t packets, std::size_t batch, std::size_t payload) {
  UdpLinkOptions o;
  o.io = io;
  o.gro = gro;
  o.local = "127.0.0.1:0";
  o.name = "a";
  auto a = UdpLink::create(o);
  o.name = "b";
  if (!a) std::exit(2);
  o.peer = (*a)->local_endpoint().str();
  auto b = UdpLink::create(o);
  if (!b) std::exit(2);
  if (!(*a)->set_peer((*b)->local_endpoint().str())) std::exit(2);
  std::atomic<std::size_t> got{0};
  (*b)->set_receiver([&](std::span<const std::byte>) { got.fetch_add(1, std::memory_order_relaxed); });
  const auto pkt = write_middle(1, payload);
  const double c0 = cpu_seconds();
  const auto t0 = std::chrono::steady_clock::now();
  std::size_t sent = 0;
  while (sent < packets) {
    // A window of 1,024: the receiver keeps up, nothing is lost.
    for (int spins = 0; sent - got.load(std::memory_order_relaxed) > 1024; ++spins) std::this_thread::yield();
    LinkBatch lb(batch > 1 ? a->get() : nullptr);
    for (std::size_t i = 0; i < batch && sent < packets; ++i, ++sent) (void)(*a)->send(pkt);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (got.load() < packets - (*a)->stats().tx_errors && std::chrono::steady_clock::now() < deadline)
    std::this_thread::yield();
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  Result r{(cpu_seconds() - c0) / static_cast<double>(packets) * 1e6, wall / static_cast<double>(packets) * 1e6,
           (*a)->stats(), (*b)->stats()};
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  const std::size_t packets = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 100000;
  const std::size_t payload = argc > 2 ? std::strtoul(argv[2], nullptr, 10) : 4096;
  if (packets == 0 || payload == 0 || payload > 4096) {
    std::fprintf(stderr, "usage: udp-cable-bench [PACKETS [PAYLOAD 1..4096]]\n");
    return 2;
  }
  struct Mode {
    const char* name;
    UdpLinkOptions::Io io;
    bool gro;
  } modes[] = {{"sendto/recvfrom (before)", UdpLinkOptions::Io::kSingle, false},
               {"sendmmsg/recvmmsg", UdpLinkOptions::Io::kBatch, false},
               {"sendmmsg+GSO/recvmmsg", UdpLinkOptions::Io::kGso, false},
               {"sendmmsg+GSO/recvmmsg+GRO", UdpLinkOptions::Io::kGso, true}};
  std::printf("udp-cable-bench: %zu packets of %zu B payload, batches of 16; CPU and elapsed time per packet\n",
              packets, payload);
  for (const Mode& m : modes) {
    const Result r = run(m.io, m.gro, packets, 16, payload);
    std::printf("%-28s %7.2f us CPU %7.2f us elapsed  (%.0f MB/s; tx errors %llu, rx %llu)\n", m.name,
                r.cpu_us_per_packet, r.wall_us_per_packet, static_cast<double>(payload) / r.wall_us_per_packet,
                static_cast<unsigned long long>(r.tx.tx_errors), static_cast<unsigned long long>(r.rx.rx_packets));
  }
  return 0;
}
