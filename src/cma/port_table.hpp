// The RDMA CM's port spaces (docs/cma.md "Ports"): the bind semantics of
// rdma_bind_addr (cma.c's cma_get_port, cma_check_port,
// cma_alloc_any_port), and who listens on what. Pure bookkeeping: no I/O.
// Owners are opaque ids (ibd's RDMA CM ids).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <utility>
#include <vector>

#include "cma/header.hpp"

namespace openib::cma {

class PortTable {
 public:
  struct Config {
    std::uint16_t ephemeral_lo = 32768, ephemeral_hi = 60999;  // ip_local_port_range's default
  };
  // (Two constructors, not `Config c = {}`: GCC refuses a nested struct's
  // default member initializers in a default argument of its enclosing class.)
  PortTable() : PortTable(Config{}) {}
  explicit PortTable(Config c);

  // Binds `owner` to (ps, addr.addr, addr.port); port 0: an ephemeral port,
  // random start then sequential. EADDRINUSE: the port is bound in that ps
  // by a wildcard, or by the same address, or (wildcard bind) by anyone;
  // EACCES: port 1..1023 and !privileged; EADDRNOTAVAIL: ephemeral range
  // full; EINVAL: owner already bound, bad family; EPROTONOSUPPORT: not a
  // port space. Returns the port bound.
  Result<std::uint16_t> bind(std::uint64_t owner, std::uint16_t ps, const Addr& addr, bool privileged);
  void unbind(std::uint64_t owner);                  // no-op if not bound
  void set_listening(std::uint64_t owner, bool on);  // no-op if not bound

  // The listening owner a connection for (ps, dst) goes to: the one bound
  // to dst's address and port, else a wildcard on that port (an IPv6
  // wildcard also takes IPv4), else nullopt.
  std::optional<std::uint64_t> listener(std::uint16_t ps, const Addr& dst) const;
  // Owners bound to exactly this address (any port, any ps; the port of
  // the argument is ignored): who gets ADDR_CHANGE when it goes.
  std::vector<std::uint64_t> bound_to(const Addr& addr_without_port) const;
  std::optional<Addr> bound(std::uint64_t owner) const;
  std::size_t size() const;  // owners bound

 private:
  struct Binding {
    std::uint16_t ps = 0;
    Addr addr;
    bool listening = false;
  };
  using Key = std::pair<std::uint16_t, std::uint16_t>;  // (ps, port)

  bool conflicts(std::uint16_t ps, const Addr& addr) const;
  std::optional<std::uint16_t> pick_ephemeral(std::uint16_t ps, const Addr& addr);

  Config cfg_;
  std::minstd_rand rng_;
  std::map<std::uint64_t, Binding> owners_;
  std::map<Key, std::vector<std::uint64_t>> ports_;  // owners per (ps, port)
};

}  // namespace openib::cma
