#include "sim/cable/fault_injector.hpp"

namespace openib::sim {

namespace {
std::uint64_t splitmix64(std::uint64_t& x) {
  std::uint64_t z = (x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
std::uint64_t rotl(std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
}  // namespace

FaultPrng::FaultPrng(std::uint64_t seed) {
  for (auto& w : s_) w = splitmix64(seed);
}

std::uint64_t FaultPrng::next() {
  const std::uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const std::uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

double FaultPrng::uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

std::uint64_t FaultPrng::below(std::uint64_t n) {
  // Rejection keeps it unbiased; the loop ends with probability > 1/2 per turn,
  // and is capped anyway (the cap biases by at most n / 2^64).
  const std::uint64_t limit = UINT64_MAX - UINT64_MAX % n;
  std::uint64_t v = next();
  for (int i = 0; i < 64 && v >= limit; ++i) v = next();
  return v % n;
}

void FaultInjector::reset(const FaultSpec& spec) {
  spec_ = spec;
  rng_ = FaultPrng(spec.seed);
  held_.clear();
}

void FaultInjector::apply(std::span<const std::byte> packet, std::vector<Packet>& out, LinkCounters& c) {
  // Four draws per packet whatever the rates, so changing one rate leaves
  // the others' pattern for a seed as it was.
  const bool drop = rng_.uniform() < spec_.drop;
  const bool corrupt = rng_.uniform() < spec_.corrupt;
  const bool dup = rng_.uniform() < spec_.duplicate;
  const bool reorder = rng_.uniform() < spec_.reorder;

  std::vector<Packet> now;
  if (drop) {
    LinkCounters::bump(c.injected_drops);
  } else {
    now.emplace_back(packet.begin(), packet.end());
    if (dup) {
      Packet copy = now.front();
      now.push_back(std::move(copy));
      LinkCounters::bump(c.injected_dups);
    }
    // One copy corrupted (the first), so each corruption is one bad packet
    // on the wire and a duplicated packet still has an intact copy.
    if (Packet& p = now.front(); corrupt && !p.empty()) {
      const std::uint64_t bit = rng_.below(p.size() * 8);
      p[bit / 8] ^= static_cast<std::byte>(1u << (bit % 8));
      LinkCounters::bump(c.injected_corruptions);
    }
    if (reorder && held_.empty()) {
      held_ = std::move(now);
      LinkCounters::bump(c.injected_reorders);
      return;
    }
  }
  for (auto& p : now) out.push_back(std::move(p));
  for (auto& p : held_) out.push_back(std::move(p));
  held_.clear();
}

}  // namespace openib::sim
