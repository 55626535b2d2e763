// The PMA engine, IBA 16.1: ClassPortInfo, PortCounters,
// PortCountersExtended over the node's 64-bit counters.
#include <algorithm>
#include <limits>

#include "mad/pma_attrs.hpp"
#include "sim/sma/engine.hpp"

namespace openib::sim::sma {

using namespace openib::mad;

void reset_counter_values(PortCounterValues& v, std::uint32_t mask) {
  auto z = [&](std::uint32_t bit, std::uint64_t& f) {
    if (mask & bit) f = 0;
  };
  z(counter_bit::kSymbolErrors, v.symbol_errors);
  z(counter_bit::kLinkErrorRecovery, v.link_error_recovery);
  z(counter_bit::kLinkDowned, v.link_downed);
  z(counter_bit::kRcvErrors, v.rcv_errors);
  z(counter_bit::kRcvRemotePhysicalErrors, v.rcv_remote_physical_errors);
  z(counter_bit::kRcvSwitchRelayErrors, v.rcv_switch_relay_errors);
  z(counter_bit::kXmitDiscards, v.xmit_discards);
  z(counter_bit::kXmitConstraintErrors, v.xmit_constraint_errors);
  z(counter_bit::kRcvConstraintErrors, v.rcv_constraint_errors);
  z(counter_bit::kLocalLinkIntegrityErrors, v.local_link_integrity_errors);
  z(counter_bit::kExcessiveBufferOverrunErrors, v.excessive_buffer_overrun_errors);
  z(counter_bit::kVl15Dropped, v.vl15_dropped);
  z(counter_bit::kXmitBytes, v.xmit_bytes);
  z(counter_bit::kRcvBytes, v.rcv_bytes);
  z(counter_bit::kXmitPkts, v.xmit_pkts);
  z(counter_bit::kRcvPkts, v.rcv_pkts);
  z(counter_bit::kXmitWait, v.xmit_wait);
  z(counter_bit::kUnicastXmitPkts, v.unicast_xmit_pkts);
  z(counter_bit::kUnicastRcvPkts, v.unicast_rcv_pkts);
  z(counter_bit::kMulticastXmitPkts, v.multicast_xmit_pkts);
  z(counter_bit::kMulticastRcvPkts, v.multicast_rcv_pkts);
}

namespace {

template <typename T>
T sat(std::uint64_t v, unsigned bits = sizeof(T) * 8) {
  std::uint64_t max = bits >= 64 ? std::numeric_limits<std::uint64_t>::max() : (std::uint64_t{1} << bits) - 1;
  return static_cast<T>(std::min(v, max));
}
std::uint64_t sat_add(std::uint64_t a, std::uint64_t b) {
  return a > std::numeric_limits<std::uint64_t>::max() - b ? std::numeric_limits<std::uint64_t>::max() : a + b;
}

void accumulate(PortCounterValues& s, const PortCounterValues& v) {
  s.symbol_errors = sat_add(s.symbol_errors, v.symbol_errors);
  s.link_error_recovery = sat_add(s.link_error_recovery, v.link_error_recovery);
  s.link_downed = sat_add(s.link_downed, v.link_downed);
  s.rcv_errors = sat_add(s.rcv_errors, v.rcv_errors);
  s.rcv_remote_physical_errors = sat_add(s.rcv_remote_physical_errors, v.rcv_remote_physical_errors);
  s.rcv_switch_relay_errors = sat_add(s.rcv_switch_relay_errors, v.rcv_switch_relay_errors);
  s.xmit_discards = sat_add(s.xmit_discards, v.xmit_discards);
  s.xmit_constraint_errors = sat_add(s.xmit_constraint_errors, v.xmit_constraint_errors);
  s.rcv_constraint_errors = sat_add(s.rcv_constraint_errors, v.rcv_constraint_errors);
  s.local_link_integrity_errors = sat_add(s.local_link_integrity_errors, v.local_link_integrity_errors);
  s.excessive_buffer_overrun_errors = sat_add(s.excessive_buffer_overrun_errors, v.excessive_buffer_overrun_errors);
  s.vl15_dropped = sat_add(s.vl15_dropped, v.vl15_dropped);
  s.xmit_wait = sat_add(s.xmit_wait, v.xmit_wait);
  s.xmit_bytes = sat_add(s.xmit_bytes, v.xmit_bytes);
  s.rcv_bytes = sat_add(s.rcv_bytes, v.rcv_bytes);
  s.xmit_pkts = sat_add(s.xmit_pkts, v.xmit_pkts);
  s.rcv_pkts = sat_add(s.rcv_pkts, v.rcv_pkts);
  s.unicast_xmit_pkts = sat_add(s.unicast_xmit_pkts, v.unicast_xmit_pkts);
  s.unicast_rcv_pkts = sat_add(s.unicast_rcv_pkts, v.unicast_rcv_pkts);
  s.multicast_xmit_pkts = sat_add(s.multicast_xmit_pkts, v.multicast_xmit_pkts);
  s.multicast_rcv_pkts = sat_add(s.multicast_rcv_pkts, v.multicast_rcv_pkts);
}

// IBA 16.1.3.5: error counters stop at all ones; data in 4-byte words.
PortCounters to_port_counters(const PortCounterValues& v) {
  PortCounters pc;
  pc.symbol_error_counter = sat<std::uint16_t>(v.symbol_errors);
  pc.link_error_recovery_counter = sat<std::uint8_t>(v.link_error_recovery);
  pc.link_downed_counter = sat<std::uint8_t>(v.link_downed);
  pc.port_rcv_errors = sat<std::uint16_t>(v.rcv_errors);
  pc.port_rcv_remote_physical_errors = sat<std::uint16_t>(v.rcv_remote_physical_errors);
  pc.port_rcv_switch_relay_errors = sat<std::uint16_t>(v.rcv_switch_relay_errors);
  pc.port_xmit_discards = sat<std::uint16_t>(v.xmit_discards);
  pc.port_xmit_constraint_errors = sat<std::uint8_t>(v.xmit_constraint_errors);
  pc.port_rcv_constraint_errors = sat<std::uint8_t>(v.rcv_constraint_errors);
  pc.local_link_integrity_errors = sat<std::uint8_t>(v.local_link_integrity_errors, 4);
  pc.excessive_buffer_overrun_errors = sat<std::uint8_t>(v.excessive_buffer_overrun_errors, 4);
  pc.vl15_dropped = sat<std::uint16_t>(v.vl15_dropped);
  pc.port_xmit_data = sat<std::uint32_t>(v.xmit_bytes / 4);
  pc.port_rcv_data = sat<std::uint32_t>(v.rcv_bytes / 4);
  pc.port_xmit_pkts = sat<std::uint32_t>(v.xmit_pkts);
  pc.port_rcv_pkts = sat<std::uint32_t>(v.rcv_pkts);
  pc.port_xmit_wait = sat<std::uint32_t>(v.xmit_wait);
  return pc;
}

PortCountersExtended to_port_counters_ext(const PortCounterValues& v) {
  PortCountersExtended e;
  e.port_xmit_data = v.xmit_bytes / 4;
  e.port_rcv_data = v.rcv_bytes / 4;
  e.port_xmit_pkts = v.xmit_pkts;
  e.port_rcv_pkts = v.rcv_pkts;
  e.port_unicast_xmit_pkts = v.unicast_xmit_pkts;
  e.port_unicast_rcv_pkts = v.unicast_rcv_pkts;
  e.port_multicast_xmit_pkts = v.multicast_xmit_pkts;
  e.port_multicast_rcv_pkts = v.multicast_rcv_pkts;
  return e;
}

// PortCounters CounterSelect bits 0..15 are counter_bit 0..15 by design;
// CounterSelect2 bit 0 is PortXmitWait (IBA 16.1.3.5).
std::uint32_t pc_mask(std::uint16_t sel, std::uint8_t sel2) {
  return std::uint32_t{sel} | ((sel2 & pc_select::kXmitWait) ? counter_bit::kXmitWait : 0u);
}

std::uint32_t pce_mask(std::uint16_t sel) {
  std::uint32_t m = 0;
  if (sel & pce_select::kXmitData) m |= counter_bit::kXmitBytes;
  if (sel & pce_select::kRcvData) m |= counter_bit::kRcvBytes;
  if (sel & pce_select::kXmitPkts) m |= counter_bit::kXmitPkts;
  if (sel & pce_select::kRcvPkts) m |= counter_bit::kRcvPkts;
  if (sel & pce_select::kUnicastXmitPkts) m |= counter_bit::kUnicastXmitPkts;
  if (sel & pce_select::kUnicastRcvPkts) m |= counter_bit::kUnicastRcvPkts;
  if (sel & pce_select::kMulticastXmitPkts) m |= counter_bit::kMulticastXmitPkts;
  if (sel & pce_select::kMulticastRcvPkts) m |= counter_bit::kMulticastRcvPkts;
  return m;
}

}  // namespace

PmaEngine::PmaEngine(NodeModel& model, PmaConfig cfg) : model_(model), cfg_(cfg) {}

PmaAction PmaEngine::handle_gmp(ConstBytes in, std::uint8_t in_port) {
  ++stats_.received;
  auto dropped = [&](std::string_view why) {
    ++stats_.dropped;
    PmaAction a;
    a.reason = why;
    return a;
  };
  if (in.size() < kMadBytes) return dropped("short MAD");
  PmaAction a;
  std::copy_n(in.begin(), kMadBytes, a.mad.begin());
  Mad& m = a.mad;
  if (mad_class(m) != mgmt_class::kPerfMgmt) return dropped("not PerfMgmt");
  if (get8(m, 0) != kBaseVersion) return dropped("bad base version");
  const std::uint8_t meth = mad_method(m);
  if (is_response(meth)) return dropped("response (no PerfManager here)");
  (void)in_port;

  const NodeIdentity& id = model_.identity();
  const bool sw = id.type == NodeType::kSwitch;
  MutBytes data = pma_data(MutBytes(m));
  std::uint16_t st = status::kOk;

  // Which ports a PortSelect names (IBA 16.1.3.5); nullopt = invalid.
  auto ports_of = [&](std::uint8_t sel) -> std::optional<std::pair<std::uint8_t, std::uint8_t>> {
    if (sel == kAllPorts) {
      if (!(cfg_.capability_mask & pma_cap::kAllPortSelect)) return std::nullopt;
      return std::pair<std::uint8_t, std::uint8_t>{1, id.num_ports};
    }
    if (sel > id.num_ports || (!sw && sel == 0)) return std::nullopt;
    return std::pair<std::uint8_t, std::uint8_t>{sel, sel};
  };
  auto read = [&](std::pair<std::uint8_t, std::uint8_t> r) -> std::optional<PortCounterValues> {
    PortCounterValues sum;
    for (unsigned p = r.first; p <= r.second; ++p) {
      auto v = model_.counters(static_cast<std::uint8_t>(p));
      if (!v) return std::nullopt;
      accumulate(sum, *v);
    }
    return sum;
  };
  auto reset = [&](std::pair<std::uint8_t, std::uint8_t> r, std::uint32_t mask) {
    for (unsigned p = r.first; p <= r.second; ++p) model_.reset_counters(static_cast<std::uint8_t>(p), mask);
  };

  if (get8(m, 2) != kPmaClassVersion) {
    st = status::kBadVersion;
  } else if (meth != method::kGet && meth != method::kSet) {
    st = status::kMethodUnsupported;
  } else {
    const bool set = meth == method::kSet;
    switch (mad_attr_id(m)) {
      case attr::kClassPortInfo: {
        if (set) {
          st = status::kMethodAttrUnsupported;
          break;
        }
        ClassPortInfo cpi;
        cpi.base_version = kBaseVersion;
        cpi.class_version = kPmaClassVersion;
        cpi.capability_mask = cfg_.capability_mask;
        cpi.capability_mask2 = cfg_.capability_mask2;
        cpi.resp_time_value = cfg_.resp_time_value;
        encode_class_port_info(data, cpi);
        break;
      }
      case attr::kPortCounters: {
        auto req = decode_port_counters(data);
        auto r = req ? ports_of(req->port_select) : std::nullopt;
        if (!r) {
          st = status::kInvalidAttrValue;
          break;
        }
        if (set) reset(*r, pc_mask(req->counter_select, req->counter_select2));
        auto v = read(*r);
        if (!v) {
          st = status::kMethodAttrUnsupported;
          break;
        }
        PortCounters pc = to_port_counters(*v);
        pc.port_select = req->port_select;
        pc.counter_select = req->counter_select;
        pc.counter_select2 = req->counter_select2;
        encode_port_counters(data, pc);
        break;
      }
      case attr::kPortCountersExtended: {
        if (!(cfg_.capability_mask & (pma_cap::kExtWidthSupported | pma_cap::kExtWidthNoIetfSupported))) {
          st = status::kMethodAttrUnsupported;
          break;
        }
        auto req = decode_port_counters_ext(data);
        auto r = req ? ports_of(req->port_select) : std::nullopt;
        if (!r) {
          st = status::kInvalidAttrValue;
          break;
        }
        if (set) reset(*r, pce_mask(req->counter_select));
        auto v = read(*r);
        if (!v) {
          st = status::kMethodAttrUnsupported;
          break;
        }
        PortCountersExtended pce = to_port_counters_ext(*v);
        pce.port_select = req->port_select;
        pce.counter_select = req->counter_select;
        encode_port_counters_ext(data, pce);
        break;
      }
      default: st = status::kMethodAttrUnsupported; break;
    }
  }
  if (st == status::kMethodUnsupported || st == status::kMethodAttrUnsupported || st == status::kBadVersion)
    ++stats_.unsupported;
  if (st == status::kInvalidAttrValue) ++stats_.invalid_value;
  put8(m, 3, method::kGetResp);  // IBA 13.4.5: Get/Set are answered by GetResp
  put16(m, 4, st);
  a.kind = PmaActionKind::kReply;
  ++stats_.replied;
  return a;
}

}  // namespace openib::sim::sma
