// Per-direction fault injection on the sending side of a link (FaultSpec in
// link.hpp; semantics in docs/cables.md "Fault injection"). For each packet
// offered, in this order, with independent draws from one PRNG:
//   drop       the packet is not sent;
//   duplicate  the packet is sent twice, back to back;
//   corrupt    one bit, uniformly chosen over the whole packet (LRH through
//              VCRC), is flipped -- in the first copy only, if duplicated;
//              the receiver's VCRC check catches it;
//   reorder    the packet (with its duplicate) is held back and sent right
//              after the next packet offered. A draw is made only while
//              nothing is held, and a held packet waits for that next
//              packet (if none ever comes, it is never sent, like a loss).
// The PRNG is xoshiro256** seeded through splitmix64 and the rates compare
// against 53-bit fractions, so a seed gives the same faults on every
// platform and compiler. Not thread-safe: the link serialises calls.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "sim/cable/link.hpp"
#include "sim/cable/link_counters.hpp"

namespace openib::sim {

// xoshiro256** (Blackman and Vigna), seeded by splitmix64.
class FaultPrng {
 public:
  explicit FaultPrng(std::uint64_t seed = 1);
  std::uint64_t next();
  double uniform();  // in [0, 1), 53 bits
  std::uint64_t below(std::uint64_t n);  // in [0, n), n > 0

 private:
  std::array<std::uint64_t, 4> s_{};
};

class FaultInjector {
 public:
  using Packet = std::vector<std::byte>;

  explicit FaultInjector(const FaultSpec& spec = {}) { reset(spec); }
  // New rates and seed; restarts the PRNG and forgets a held packet.
  void reset(const FaultSpec& spec);
  // True when apply() may do anything but pass the packet through; when
  // false a caller may send the packet as is (no copy).
  bool active() const { return spec_.any() || !held_.empty(); }
  bool holding() const { return !held_.empty(); }

  // Offers one packet; appends to `out`, in wire order, what is to be sent
  // now (0 to 4 packets) and counts the faults in `c`.
  void apply(std::span<const std::byte> packet, std::vector<Packet>& out, LinkCounters& c);

 private:
  FaultSpec spec_;
  FaultPrng rng_;
  std::vector<Packet> held_;
};

}  // namespace openib::sim
