// The SMA and PMA agent engine of the emulated nodes (docs/mad.md):
// ibfabric's switches and simhca's CA ports hand it every MAD that arrives
// on QP0 (SMPs) or QP1 of class PerfMgmt, and do what it answers. Pure
// logic over byte buffers plus the NodeModel; no I/O, no clock (time is
// passed in), not thread-safe (one engine per node, called from the node's
// event loop).
//
// Addressing of what the engine returns (Outgoing):
//   out_port != 0 : send out of that physical port; for a directed-route
//                   hop the LRH DLID and SLID are the permissive LID
//                   (dlid == mad::kPermissiveLid), else dlid is the LRH DLID;
//   out_port == 0 : LID routed to `dlid` (a switch looks up its LFT; a CA
//                   never gets this for replies, it gets its own port).
// SMPs travel on VL15, QP0, no P_Key check (IBA 14.2.1). The engine never
// sees the LRH; the caller passes the packet's SLID for LID-routed SMPs.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "mad/mad.hpp"
#include "mad/smp.hpp"
#include "sim/sma/node_model.hpp"

namespace openib::sim::sma {

struct Outgoing {
  mad::Mad mad{};
  std::uint8_t out_port = 0;
  std::uint16_t dlid = 0;
};

enum class SmpActionKind : std::uint8_t {
  kReply,         // send `out` (the response to the request), see Outgoing
  kForward,       // switch: relay the DR SMP `out` unchanged further (hop updated)
  kDeliverLocal,  // give `out` to this node's QP0 consumer (an SM on this node):
                  // a response or Trap/Report for the SM, or SMInfo when has_sm()
  kDrop,          // nothing to send; `reason` says why (counted in stats)
};

struct SmpAction {
  SmpActionKind kind = SmpActionKind::kDrop;
  Outgoing out;
  std::string_view reason;          // kDrop: static text, e.g. "mkey violation"
  std::optional<Outgoing> trap;     // an extra packet to send (trap 256 on an M_Key violation)
};

struct SmaStats {
  std::uint64_t received = 0;
  std::uint64_t replied = 0;
  std::uint64_t forwarded = 0;
  std::uint64_t delivered = 0;
  std::uint64_t dropped = 0;
  std::uint64_t bad_version = 0;
  std::uint64_t unsupported = 0;     // answered with a MethodUnsupported / MethodAttr status
  std::uint64_t invalid_value = 0;   // answered kInvalidAttrValue
  std::uint64_t mkey_violations = 0;
  std::uint64_t traps_sent = 0;      // including resends
  std::uint64_t traps_repressed = 0;
};

struct SmaConfig {
  bool mkey_checks = true;                // IBA 14.2.4
  bool trap_on_mkey_violation = true;     // send trap 256 to the SM (if MasterSMLID != 0)
  std::chrono::milliseconds trap_resend_interval{1000};  // until TrapRepress
  unsigned trap_max_sends = 5;            // first send included
  std::uint8_t resp_time_value = 18;      // 4.096us * 2^18 ~ 1 s: PortInfo RespTimeValue default
};

class SmaEngine {
 public:
  explicit SmaEngine(NodeModel& model, SmaConfig cfg = {});

  // An SMP (class 0x01 or 0x81) arrived on `in_port` (switch: the external
  // port 1..N it came in by; CA: its port), LRH SLID `slid` (used for the
  // reply to a LID-routed request). Anything that is not a well-formed SMP
  // of class version 1 is dropped or answered with kBadVersion (requests
  // with a bad class version, IBA 13.4.7). Requests of an unknown attribute
  // or method are answered at once with kMethodAttrUnsupported /
  // kMethodUnsupported; they are never silently dropped. M_Key failures
  // (IBA 14.2.4.1) are dropped and counted (PortInfo:M_KeyViolations), with
  // a trap 256 in `trap` when configured.
  SmpAction handle_smp(mad::ConstBytes smp, std::uint8_t in_port, std::uint16_t slid,
                       std::chrono::steady_clock::time_point now = {});

  // Trap: build a LID-routed Trap(Notice) SMP to the SM (PortInfo:
  // MasterSMLID of port 0 for a switch, of `port` for a CA), with a fresh
  // TID; it is remembered and resent by trap_resends() until the SM's
  // TrapRepress with that TID arrives (handled inside handle_smp) or
  // trap_max_sends is reached. nullopt if no SM LID is known yet.
  std::optional<Outgoing> send_trap(const mad::Notice& notice, std::uint8_t port,
                                    std::chrono::steady_clock::time_point now);
  // Convenience: trap 128 (link state change) for a switch, issuer = port 0 LID.
  std::optional<Outgoing> send_trap_128(std::chrono::steady_clock::time_point now);
  // Traps due for resending at `now`.
  std::vector<Outgoing> trap_resends(std::chrono::steady_clock::time_point now);
  // Expire M_Key leases (IBA 14.2.4.2) at `now`. handle_smp() calls it
  // first, so the expiry is exact for every SMP without a timer; call it
  // yourself only to see PortInfo change (M_KeyProtectBits 0) between SMPs.
  void tick(std::chrono::steady_clock::time_point now);
  std::size_t traps_outstanding() const { return traps_.size(); }

  const SmaStats& stats() const { return stats_; }
  NodeModel& model() { return model_; }

 private:
  struct PendingTrap {
    Outgoing out;
    std::uint64_t tid = 0;
    unsigned sends = 0;
    std::chrono::steady_clock::time_point next;
  };
  NodeModel& model_;
  SmaConfig cfg_;
  SmaStats stats_;
  std::uint64_t next_tid_ = 1;
  std::uint16_t notice_count_ = 0;
  std::deque<PendingTrap> traps_;
  // Running M_Key lease timers, by management port (IBA 14.2.4.2).
  std::vector<std::pair<std::uint8_t, std::chrono::steady_clock::time_point>> leases_;

  friend struct SmaEngineAccess;  // sma.cpp internals
};

// ---- PMA, IBA 16.1 -------------------------------------------------------

struct PmaConfig {
  // ClassPortInfo:CapabilityMask. Default: AllPortSelect (PortSelect 0xFF
  // sums on Get, resets all on Set), PortCountersExtended, PortXmitWait.
  std::uint16_t capability_mask = mad::pma_cap::kAllPortSelect | mad::pma_cap::kExtWidthSupported |
                                  mad::pma_cap::kPortCountersXmitWaitSupported;
  std::uint32_t capability_mask2 = 0;
  std::uint8_t resp_time_value = 18;
};

struct PmaStats {
  std::uint64_t received = 0;
  std::uint64_t replied = 0;
  std::uint64_t dropped = 0;
  std::uint64_t unsupported = 0;
  std::uint64_t invalid_value = 0;
};

enum class PmaActionKind : std::uint8_t { kReply, kDrop };
struct PmaAction {
  PmaActionKind kind = PmaActionKind::kDrop;
  mad::Mad mad{};              // kReply: the GetResp; send it back to the requester
                               // (its SLID, source QP, P_Key, the GSI Q_Key of IBA 13.5.3.1)
  std::string_view reason;
};

class PmaEngine {
 public:
  explicit PmaEngine(NodeModel& model, PmaConfig cfg = {});
  // A GMP of class PerfMgmt (0x04) that arrived on `in_port`. Responses
  // and non-PerfMgmt MADs are dropped (counted). Get/Set of ClassPortInfo
  // (Get only), PortCounters, PortCountersExtended; other attributes:
  // kMethodAttrUnsupported. PortSelect must be a port of the node (switch:
  // 0..N; CA: 1..N) or 0xFF when AllPortSelect is advertised, else
  // kInvalidAttrValue. 32-bit counters saturate, data counters in words.
  PmaAction handle_gmp(mad::ConstBytes mad, std::uint8_t in_port);
  const PmaStats& stats() const { return stats_; }

 private:
  NodeModel& model_;
  PmaConfig cfg_;
  PmaStats stats_;
};

}  // namespace openib::sim::sma
