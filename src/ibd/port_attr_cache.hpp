// The ports' attributes as the device last told them (issue 33: no
// QUERY_PORT per connection), as Linux's ib_cache keeps them for its
// ULPs: asked of the device once, then answered from memory until an
// event says they may have changed. The SA service owns it (the path
// query's SGID and P_Key, the SA client's SM address) and the RDMA CM reads
// it through the SA service (resolve_route's link layer, an Ethernet
// route's MTU and rate).
//
// Invalidation (the entry of a port is dropped; the next query asks the
// device again):
//  - every unaffiliated port event (IBA 11.6.3; docs/simhca.md §9.4):
//    PORT_STATE_CHANGE (the state, and the MTU, width and speed the link
//    trained to), LID_CHANGE (LID, LMC), SM_CHANGE (MasterSMLID,
//    MasterSMSL), CLIENT_REREGISTER (IBA 14.4.11: the SM may have redone
//    the port), PKEY_CHANGE (P_Key 0), GID_CHANGE (GID prefix). on_event()
//    takes any hca::Event and ignores the affiliated ones;
//  - device_lost and device_back: every port's (invalidate_all(); the
//    device that comes back may have other GUIDs, another link layer);
//  - invalidate(port), for a caller that changes a port itself.
// A QUERY_PORT in flight when its port is invalidated still answers those
// who asked before the invalidation (what the device said while they
// waited), but its answer is not kept (counted: discarded), since it may
// predate the change; a query after the invalidation starts a new command.
// Errors are never kept.
//
// Not covered, since no event announces them: the violation counters
// (pkey_violations, qkey_violations: ask the device), the NeighborMTU an
// SM sets in PortInfo (docs/simhca.md §14.3 raises no event for it; an IB
// route's MTU comes from the SA's path record, not from here), and
// SET_PORT's fields other than state and LID (ibd sets only IsSM at run
// time, which no reader of the cache uses). Who changes one of those and
// reads it back calls invalidate(port) or asks the device.
//
// One command per port at a time: queries while one is in flight wait for
// it and share its answer (counted: shared). Answers come from a handler
// of the io_context, never inside query() (cached ones are posted), as
// query_port_async's do. Single-threaded on ibd's io_context.
#pragma once

#include <boost/asio/io_context.hpp>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/result.hpp"
#include "hca/completer.hpp"
#include "hca/device.hpp"

namespace openib::ibd {

class PortAttrCache {
 public:
  using Done = hca::Completer<Result<hca::PortAttr>>;
  struct Counters {
    uint64_t hits = 0;           // answered from memory
    uint64_t queries = 0;        // QUERY_PORTs sent
    uint64_t shared = 0;         // waited for a QUERY_PORT in flight
    uint64_t invalidations = 0;  // entries dropped (or fetches disowned) by events and calls
    uint64_t discarded = 0;      // answers not kept: their port was invalidated while in flight
  };

  PortAttrCache(boost::asio::io_context& io, hca::Device& hca);
  ~PortAttrCache();
  PortAttrCache(const PortAttrCache&) = delete;
  PortAttrCache& operator=(const PortAttrCache&) = delete;

  // The port's attributes: from memory, or the one QUERY_PORT in flight
  // for it, or a new one. The device's errors as they come (EINVAL for a
  // port it does not have, ENODEV while it is away).
  void query(uint8_t port, Done done);
  // What is kept for the port now, if anything (no command).
  std::optional<hca::PortAttr> peek(uint8_t port) const;

  // A device event: a port event drops its port's entry (true); others
  // change nothing (false).
  bool on_event(const hca::Event& e);
  void invalidate(uint8_t port);
  void invalidate_all();  // device_lost, device_back

  const Counters& counters() const { return counters_; }
  // INFO's names (port_attr_cache_*), in the order above.
  std::vector<std::pair<std::string, uint64_t>> counter_list() const;

 private:
  struct Fetch {  // one QUERY_PORT in flight and who waits for it
    std::vector<Done> waiters;
  };
  struct Port {
    std::optional<hca::PortAttr> attr;
    uint64_t generation = 0;       // bumped by each invalidation
    std::shared_ptr<Fetch> fetch;  // the command in flight, if any
  };
  void fetched(uint8_t port, uint64_t generation, const std::shared_ptr<Fetch>& f, const Result<hca::PortAttr>& a);

  boost::asio::io_context& io_;
  hca::Device& hca_;
  std::map<uint8_t, Port> ports_;
  Counters counters_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace openib::ibd
