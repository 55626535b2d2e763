// SMP field access and the directed-route algorithm, IBA 14.2.1-14.2.2.
#include "mad/smp.hpp"

#include <algorithm>

namespace openib::mad {

std::uint16_t smp_status(ConstBytes m) {
  std::uint16_t s = get16(m, 4);
  return mad_class(m) == mgmt_class::kSubnDirected ? static_cast<std::uint16_t>(s & ~kSmpDirectionBit) : s;
}

void smp_set_status(MutBytes m, std::uint16_t status) {
  if (mad_class(m) == mgmt_class::kSubnDirected) {
    put16(m, 4, (get16(m, 4) & kSmpDirectionBit) | (status & ~kSmpDirectionBit));
  } else {
    put16(m, 4, status);
  }
}

Mad make_smp(const SmpRequest& r, ConstBytes data) {
  MadHeader h;
  h.mgmt_class = r.directed ? mgmt_class::kSubnDirected : mgmt_class::kSubnLid;
  h.class_version = kSmpClassVersion;
  h.method = r.method;
  h.tid = r.tid;
  h.attr_id = r.attr_id;
  h.attr_mod = r.attr_mod;
  Mad m = make_mad(h);
  smp_set_mkey(m, r.mkey);
  if (r.directed) {
    std::uint8_t hops = std::min<std::uint8_t>(r.hop_cnt, kSmpMaxHops);
    smp_set_hop_cnt(m, hops);
    smp_set_hop_ptr(m, 0);
    smp_set_dr_slid(m, r.dr_slid);
    smp_set_dr_dlid(m, r.dr_dlid);
    for (std::size_t i = 1; i <= hops; ++i) smp_set_initial_path(m, i, r.initial_path[i]);
  }
  std::size_t n = std::min(data.size(), kSmpDataBytes);
  std::copy_n(data.begin(), n, m.begin() + kSmpDataOff);
  return m;
}

std::string_view dr_drop_name(DrDrop r) {
  switch (r) {
    case DrDrop::kNone: return "none";
    case DrDrop::kNotDirected: return "not a directed-route SMP";
    case DrDrop::kBadHopCount: return "hop count > 63";
    case DrDrop::kBadHopPointer: return "bad hop pointer";
    case DrDrop::kNotSwitch: return "intermediate hop at a non-switch";
    case DrDrop::kBadPort: return "path names a port the node does not have";
    case DrDrop::kWrongPort: return "sent out of a port the path does not name";
    case DrDrop::kNoLidRoute: return "LID-routed part at a non-switch";
  }
  return "?";
}

namespace {

DrDecision drop(DrDrop r) { return DrDecision{DrAction::kDrop, 0, 0, r}; }
DrDecision local() { return DrDecision{DrAction::kLocal, 0, 0, DrDrop::kNone}; }
DrDecision forward(std::uint8_t port) { return DrDecision{DrAction::kForward, port, kPermissiveLid, DrDrop::kNone}; }
DrDecision lid_route(std::uint16_t lid) { return DrDecision{DrAction::kLidRoute, 0, lid, DrDrop::kNone}; }

// A relaying switch: validate the out port, advance the hop pointer (the
// sending half of C14-9:2 / C14-13:2).
DrDecision relay(MutBytes smp, bool outbound, std::uint8_t num_ports) {
  std::uint8_t ptr = smp_hop_ptr(smp);
  std::uint8_t port = outbound ? smp_initial_path(smp, ptr + 1u) : smp_return_path(smp, ptr - 1u);
  if (port == 0 || port > num_ports) return drop(DrDrop::kBadPort);
  smp_set_hop_ptr(smp, static_cast<std::uint8_t>(outbound ? ptr + 1 : ptr - 1));
  return forward(port);
}

}  // namespace

// IBA 14.2.2.2 (C14-9), 14.2.2.4 (C14-13): receipt of a DR SMP.
DrDecision dr_receive(MutBytes smp, bool is_switch, std::uint8_t in_port, std::uint8_t num_ports) {
  if (smp.size() < kMadBytes) return drop(DrDrop::kNotDirected);
  if (mad_class(smp) != mgmt_class::kSubnDirected) return drop(DrDrop::kNotDirected);
  const std::uint8_t cnt = smp_hop_cnt(smp);
  const std::uint8_t ptr = smp_hop_ptr(smp);
  if (cnt > kSmpMaxHops) return drop(DrDrop::kBadHopCount);  // C14-6
  const bool dr_slid_perm = smp_dr_slid(smp) == kPermissiveLid;
  const bool dr_dlid_perm = smp_dr_dlid(smp) == kPermissiveLid;

  if (!smp_direction(smp)) {
    // Outbound.
    if (cnt != 0 && ptr == 0) {
      // C14-9:1 is the sender's step. It arrives here with HopPointer 0 only
      // at the end of an initial LID-routed part (DrSLID != permissive):
      // this switch starts the DR part as its node 0.
      if (!is_switch || dr_slid_perm) return drop(DrDrop::kBadHopPointer);
      return relay(smp, true, num_ports);
    }
    if (ptr != 0 && ptr < cnt) {  // C14-9:2: intermediate hop
      if (!is_switch) return drop(DrDrop::kNotSwitch);
      smp_set_return_path(smp, ptr, in_port);
      return relay(smp, true, num_ports);
    }
    if (ptr == cnt) {  // C14-9:3: end of the DR part
      if (cnt != 0) smp_set_return_path(smp, ptr, in_port);
      smp_set_hop_ptr(smp, static_cast<std::uint8_t>(ptr + 1));
      if (dr_dlid_perm) return local();
      if (!is_switch) return drop(DrDrop::kNoLidRoute);
      return lid_route(smp_dr_dlid(smp));
    }
    if (ptr == cnt + 1) return local();  // C14-9:4: after a LID-routed end part
    return drop(DrDrop::kBadHopPointer);  // C14-9:5
  }

  // Returning (D=1).
  if (cnt != 0 && ptr == cnt + 1) {
    // C14-13:1 is the responder's step; arriving with it means the response
    // came back LID routed to the node ending the DR part (DrDLID was not
    // permissive): this switch re-enters the DR part as node HopCount.
    if (!is_switch || dr_dlid_perm) return drop(DrDrop::kBadHopPointer);
    std::uint8_t port = smp_return_path(smp, cnt);
    if (port == 0 || port > num_ports) return drop(DrDrop::kBadPort);
    smp_set_hop_ptr(smp, cnt);
    return forward(port);
  }
  if (ptr >= 2 && ptr <= cnt) {  // C14-13:2: intermediate hop
    if (!is_switch) return drop(DrDrop::kNotSwitch);
    return relay(smp, false, num_ports);
  }
  if (ptr == 1) {  // C14-13:3: end of the DR part, back at node 0
    smp_set_hop_ptr(smp, 0);
    if (dr_slid_perm) return local();
    if (!is_switch) return drop(DrDrop::kNoLidRoute);
    return lid_route(smp_dr_slid(smp));
  }
  if (ptr == 0) return local();  // C14-13:4: came back LID routed
  return drop(DrDrop::kBadHopPointer);  // C14-13:5
}

// IBA 14.2.2.2 C14-9:1/3 and 14.2.2.4 C14-13:1/3: the originating node.
DrDecision dr_send(MutBytes smp, bool is_switch, std::uint8_t out_port) {
  (void)is_switch;
  if (smp.size() < kMadBytes) return drop(DrDrop::kNotDirected);
  if (mad_class(smp) != mgmt_class::kSubnDirected) return drop(DrDrop::kNotDirected);
  const std::uint8_t cnt = smp_hop_cnt(smp);
  const std::uint8_t ptr = smp_hop_ptr(smp);
  if (cnt > kSmpMaxHops) return drop(DrDrop::kBadHopCount);
  const bool dr_slid_perm = smp_dr_slid(smp) == kPermissiveLid;
  const bool dr_dlid_perm = smp_dr_dlid(smp) == kPermissiveLid;
  if (!smp_direction(smp)) {
    if (ptr != 0) return drop(DrDrop::kBadHopPointer);
    if (cnt != 0 && !dr_slid_perm) {
      // Initial LID-routed part: the SMP travels unchanged to the node that
      // starts the DR part (its LID is the caller's: lid 0 = "caller's").
      return lid_route(0);
    }
    if (cnt != 0) {  // C14-9:1
      smp_set_hop_ptr(smp, 1);
      if (smp_initial_path(smp, 1) != out_port) return drop(DrDrop::kWrongPort);
      return forward(out_port);
    }
    // C14-9:3 with HopCount 0: the DR part is this node alone.
    smp_set_hop_ptr(smp, 1);
    if (dr_dlid_perm) return local();
    return lid_route(smp_dr_dlid(smp));
  }
  if (ptr != cnt + 1) return drop(DrDrop::kBadHopPointer);
  if (!dr_dlid_perm) {
    // The request came over a LID-routed end part: the response goes back
    // LID routed to the request's LRH SLID (lid 0 = "the requester's"),
    // where the node ending the DR part takes it up again (dr_receive).
    if (cnt == 0) smp_set_hop_ptr(smp, 0);
    return lid_route(0);
  }
  if (cnt != 0) {  // C14-13:1
    smp_set_hop_ptr(smp, cnt);
    if (smp_return_path(smp, cnt) != out_port) return drop(DrDrop::kWrongPort);
    return forward(out_port);
  }
  // C14-13:3 with HopCount 0: back to this node's SM.
  smp_set_hop_ptr(smp, 0);
  if (dr_slid_perm) return local();
  return lid_route(smp_dr_slid(smp));
}

void smp_make_response(MutBytes smp, std::uint16_t status) {
  put8(smp, 3, method::kGetResp);
  smp_set_status(smp, status);
  if (mad_class(smp) == mgmt_class::kSubnDirected) smp_set_direction(smp, true);
}

std::uint8_t dr_response_port(ConstBytes smp, std::uint8_t arrival_port) {
  (void)smp;
  return arrival_port;
}

}  // namespace openib::mad
