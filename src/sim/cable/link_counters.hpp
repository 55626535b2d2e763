// The counters behind Link::stats(), as relaxed atomics: a link's receive
// thread and any number of send() callers bump them concurrently, and
// stats() reads a snapshot (each counter exact; the set not one instant).
// The rx counters have one writer, the link's receive side.
#pragma once

#include <atomic>
#include <cstdint>

#include "sim/cable/link.hpp"

namespace openib::sim {

struct LinkCounters {
  using C = std::atomic<std::uint64_t>;
  C tx_packets{0}, tx_bytes{0};
  C rx_packets{0}, rx_bytes{0};
  C rx_dropped_bad_crc{0}, rx_dropped_malformed{0};
  C rx_dropped_foreign{0}, rx_dropped_no_receiver{0};
  C tx_errors{0};
  C tx_link_signals{0}, rx_link_signals{0};
  C injected_drops{0}, injected_dups{0}, injected_reorders{0}, injected_corruptions{0};

  static void bump(C& c, std::uint64_t n = 1) { c.fetch_add(n, std::memory_order_relaxed); }
  // For a counter with one writer at a time (the receive side's rx
  // counters; a send path under its lock): a plain load and store, no
  // locked read-modify-write on the packet path.
  static void bump_owned(C& c, std::uint64_t n = 1) {
    c.store(c.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  }

  LinkStats snapshot() const {
    auto ld = [](const C& c) { return c.load(std::memory_order_relaxed); };
    LinkStats s;
    s.tx_packets = ld(tx_packets);
    s.tx_bytes = ld(tx_bytes);
    s.rx_packets = ld(rx_packets);
    s.rx_bytes = ld(rx_bytes);
    s.rx_dropped_bad_crc = ld(rx_dropped_bad_crc);
    s.rx_dropped_malformed = ld(rx_dropped_malformed);
    s.rx_dropped_foreign = ld(rx_dropped_foreign);
    s.rx_dropped_no_receiver = ld(rx_dropped_no_receiver);
    s.tx_errors = ld(tx_errors);
    s.tx_link_signals = ld(tx_link_signals);
    s.rx_link_signals = ld(rx_link_signals);
    s.injected_drops = ld(injected_drops);
    s.injected_dups = ld(injected_dups);
    s.injected_reorders = ld(injected_reorders);
    s.injected_corruptions = ld(injected_corruptions);
    return s;
  }
};

}  // namespace openib::sim
