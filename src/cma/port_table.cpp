// rdma_bind_addr's rules (port_table.hpp; docs/cma.md "Ports"), after
// cma.c's cma_get_port / cma_check_port / cma_alloc_any_port.
#include "cma/port_table.hpp"

#include <algorithm>

#include <sys/socket.h>

namespace openib::cma {

namespace {
constexpr std::uint16_t kFirstUnprivileged = 1024;  // PROT_SOCK

bool same_address(const Addr& a, const Addr& b) { return a.family == b.family && a.addr == b.addr; }
bool known_ps(std::uint16_t ps) { return ps == kPsTcp || ps == kPsUdp || ps == kPsIpoib || ps == kPsIb; }
}  // namespace

PortTable::PortTable(Config c) : cfg_(c), rng_(std::random_device{}()) {}

// cma_check_port without SO_REUSEADDR and with IPv6 ids not v6-only (Linux's
// defaults): a wildcard on either side conflicts whatever the families,
// two specific addresses only when they are the same.
bool PortTable::conflicts(std::uint16_t ps, const Addr& addr) const {
  const auto it = ports_.find(Key{ps, addr.port});
  if (it == ports_.end()) return false;
  return std::any_of(it->second.begin(), it->second.end(), [&](std::uint64_t o) {
    const Addr& cur = owners_.at(o).addr;
    return addr.any() || cur.any() || same_address(addr, cur);
  });
}

// cma_alloc_any_port: a random start in the range, then on up, wrapping.
std::optional<std::uint16_t> PortTable::pick_ephemeral(std::uint16_t ps, const Addr& addr) {
  if (cfg_.ephemeral_lo == 0 || cfg_.ephemeral_lo > cfg_.ephemeral_hi) return std::nullopt;
  const std::uint32_t n = std::uint32_t{cfg_.ephemeral_hi} - cfg_.ephemeral_lo + 1;
  const std::uint32_t start = std::uniform_int_distribution<std::uint32_t>(0, n - 1)(rng_);
  Addr probe = addr;
  for (std::uint32_t i = 0; i < n; ++i) {
    probe.port = static_cast<std::uint16_t>(cfg_.ephemeral_lo + (start + i) % n);
    if (!conflicts(ps, probe)) return probe.port;
  }
  return std::nullopt;
}

Result<std::uint16_t> PortTable::bind(std::uint64_t owner, std::uint16_t ps, const Addr& addr, bool privileged) {
  if (owners_.contains(owner)) return err(EINVAL, "id {} is already bound", owner);
  if (addr.family != AF_INET && addr.family != AF_INET6)
    return err(EINVAL, "bind needs an IPv4 or IPv6 address (family {})", addr.family);
  if (!known_ps(ps)) return err(EPROTONOSUPPORT, "port space {:#06x} is not the RDMA CM's", ps);
  Addr a = addr;
  if (a.port == 0) {
    const auto p = pick_ephemeral(ps, a);
    if (!p)
      return err(EADDRNOTAVAIL, "no free port in {}..{} for {}", cfg_.ephemeral_lo, cfg_.ephemeral_hi, a.str());
    a.port = *p;
  } else {
    if (a.port < kFirstUnprivileged && !privileged)
      return err(EACCES, "port {} is below {}: privileged clients only", a.port, kFirstUnprivileged);
    if (conflicts(ps, a)) return err(EADDRINUSE, "{} is in use in port space {:#06x}", a.str(), ps);
  }
  owners_.emplace(owner, Binding{ps, a, false});
  ports_[Key{ps, a.port}].push_back(owner);
  return a.port;
}

void PortTable::unbind(std::uint64_t owner) {
  const auto it = owners_.find(owner);
  if (it == owners_.end()) return;
  const auto pit = ports_.find(Key{it->second.ps, it->second.addr.port});
  std::erase(pit->second, owner);
  if (pit->second.empty()) ports_.erase(pit);
  owners_.erase(it);
}

void PortTable::set_listening(std::uint64_t owner, bool on) {
  if (const auto it = owners_.find(owner); it != owners_.end()) it->second.listening = on;
}

std::optional<std::uint64_t> PortTable::listener(std::uint16_t ps, const Addr& dst) const {
  const auto it = ports_.find(Key{ps, dst.port});
  if (it == ports_.end()) return std::nullopt;
  // (bind() keeps a wildcard alone on its port, so at most one matches.)
  for (const std::uint64_t o : it->second) {
    const Binding& b = owners_.at(o);
    if (!b.listening) continue;
    if (same_address(b.addr, dst)) return o;
    if (b.addr.any() && (b.addr.family == dst.family || b.addr.family == AF_INET6)) return o;
  }
  return std::nullopt;
}

std::vector<std::uint64_t> PortTable::bound_to(const Addr& a) const {
  std::vector<std::uint64_t> out;
  for (const auto& [o, b] : owners_)
    if (same_address(b.addr, a)) out.push_back(o);
  return out;
}

std::optional<Addr> PortTable::bound(std::uint64_t owner) const {
  const auto it = owners_.find(owner);
  if (it == owners_.end()) return std::nullopt;
  return it->second.addr;
}

std::size_t PortTable::size() const { return owners_.size(); }

}  // namespace openib::cma
