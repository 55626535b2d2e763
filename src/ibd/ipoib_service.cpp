#include "ibd/ipoib_service.hpp"

#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <nlohmann/json.hpp>

#include "common/log.hpp"
#include "hca/port_caps.hpp"
#include "ipoib_tap/ats.hpp"
#include "ipoib_tap/cm_wire.hpp"
#include "ipoib_tap/gso.hpp"
#include "ipoib_tap/kernel_groups.hpp"
#include "sa/mcmember_record.hpp"
#include "sa/path_record.hpp"
#include "sa/sa_mad.hpp"

namespace openib::ibd {
namespace {

auto logger() { return log::get("ipoib"); }

constexpr size_t kMaxFrame = 65536 + 14 + ipoib::kVnetHdrLen;  // the TAP's MTU may be raised by hand: such frames are dropped by size
// The TAP's offloads (docs/ipoib.md "The TAP interface", gso.hpp): TCP
// super-frames and partial checksums from the kernel, done here.
constexpr bool kTapOffloads = true;
constexpr size_t kGsoSlots = 40;  // send slots kept free for one super-frame's segments (64 KiB / MSS 1652)
constexpr int kReadsPerTurn = 64;
constexpr size_t kSlotMargin = 8;  // free send slots kept for the packets a resolution releases

std::string gid_text(const ipoib::Gid& g) {
  std::string s;
  for (size_t i = 0; i < 16; i += 2) s += fmt::format("{}{:02x}{:02x}", i ? ":" : "", g[i], g[i + 1]);
  return s;
}
std::string mac_text(const ipoib::Mac& m) {
  return fmt::format("{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}", m[0], m[1], m[2], m[3], m[4], m[5]);
}
// IBA MTU code (1 = 256 .. 5 = 4096) in bytes.
uint32_t mtu_bytes(uint8_t code) { return code >= 1 && code <= 5 ? 128u << code : 2048; }
// An SA rate code (IBA 15.2.5.16) as the AV's static rate: the same
// encoding (ibv_rate's values are IBA's); one the device does not know
// (docs/simhca.md §7.6: 0..18) is the port's rate, 0.
uint8_t av_rate(uint8_t sa_rate) { return sa_rate <= 18 ? sa_rate : 0; }
// MCAST_JOIN's answer as the SA's record.
Result<sa::McMemberRecord> join_record(Result<proto::McastJoinRep> r) {
  if (!r) return r.take_error();
  return sa::decode_mcmember_record(std::as_bytes(std::span(r->record)));
}

}  // namespace

IpoibService::IpoibService(boost::asio::io_context& io, hca::Device& hca, SaService& sa, IpoibConfig cfg)
    : io_(io), hca_(hca), sa_(sa), cfg_(std::move(cfg)), frame_(kMaxFrame), retry_(io) {
  cfg_.pkey |= 0x8000;  // the broadcast group's P_Key has the full-member bit (RFC 4391 §4)
  sa_.set_mcast_change_handler([this](uint8_t port, const sa::McMemberRecord& r) { mcast_changed(port, r); });
  // A rejoin (SM change) that failed for the broadcast group: the SA may
  // no longer send it to us; down (ibdctl ipoib says so), up again later
  // from scratch (issue 29 finding 7).
  sa_.set_mcast_lost_handler([this](uint8_t port, const sa::Gid& mgid, uint32_t owner) {
    if (owner == kIpoibOwner && port == cfg_.port && state_ == State::kUp && mgid == ipoib::broadcast_mgid(cfg_.pkey))
      go_down("the broadcast group was lost at a rejoin", false);
  });
  sa_.add_path_change_observer([this](uint8_t port, uint16_t, const sa::Gid& dgid) {
    if (port == cfg_.port) path_changed(dgid);
  });
}

IpoibService::~IpoibService() {
  alive_.reset();
  retry_.cancel();
  // The SA service may outlive this (ibd's teardown): it must not call back.
  sa_.set_mcast_change_handler({});
  sa_.set_mcast_lost_handler({});
  sa_.clear_path_change_observers();
}

void IpoibService::start() { bring_up(); }

// Connected mode's glue (ipoib_cm.hpp): the bridge knows the neighbours,
// this service their paths; packets that cannot wait go by UD.
void IpoibService::set_cm(CmService* cm) {
  if (!cm) return cm_.reset();
  IpoibCm::Hooks h;
  h.is_neighbour = [this](const ipoib::HwAddr& a) { return bridge_ && bridge_->knows(a); };
  h.path_of = [this](const ipoib::Gid& gid) -> const std::array<uint8_t, 64>* {
    auto it = neighbours_.find(gid);
    return it == neighbours_.end() ? nullptr : &it->second.record;
  };
  h.lid_of = [this](const ipoib::Gid& gid) -> std::optional<uint16_t> {
    auto it = neighbours_.find(gid);
    if (it == neighbours_.end()) return std::nullopt;
    return it->second.dlid;
  };
  h.receive = [this](const ipoib::HwAddr& a, std::span<const uint8_t> p) {
    if (!bridge_) return;
    ipoib::Bridge::RxInfo info;
    info.src_qpn = a.qpn;
    info.sgid = a.gid;
    bridge_->from_ib(info, p);
  };
  h.send_ud = [this](const ipoib::HwAddr& a, std::span<const uint8_t> p) {
    if (bridge_ && p.size() <= bridge_->ud_mtu() + ipoib::kEncapBytes) send_ud(ipoib::UdDest{false, a.gid, a.qpn}, p);
    else ++send_errors_;
  };
  h.slots_freed = [this] { arm_tap_read(); };
  cm_ = std::make_unique<IpoibCm>(hca_, *cm, cfg_.port, std::move(h));
}

void IpoibService::set_mode(bool connected) {
  if (cfg_.connected == connected) return;
  cfg_.connected = connected;
  logger()->info("{}: {} mode", cfg_.name, connected ? "connected" : "datagram");
  if (state_ != State::kUp) return;  // the next bring-up starts it
  if (connected) return start_connected();
  if (cm_) cm_->stop(false);
  cm_ready_ = false;
  link_changed();
}

void IpoibService::start_connected() {
  if (!cm_ || !qp_ || state_ != State::kUp || !cfg_.connected) return;
  const uint64_t ep = epoch_;
  cm_->start(qp_->qpn(), [this, ep, alive = std::weak_ptr<bool>(alive_)](bool ok) {
    if (alive.expired() || ep != epoch_ || !cfg_.connected) return;
    if (!ok) logger()->warn("{}: connected mode could not start: datagram mode", cfg_.name);
    cm_ready_ = ok;
    link_changed();
  });
}

// The link's parameters again (bring-up, a mode change): the own address's
// flags and the TAP's MTU follow the mode.
void IpoibService::link_changed() {
  if (!bridge_ || !qp_) return;
  ipoib::LinkParams lp;
  lp.port_gid = sa::make_gid(port_.gid_prefix, port_.port_guid);
  lp.qpn = qp_->qpn();
  lp.pkey = cfg_.pkey;
  lp.qkey = bcast_.qkey;
  lp.ib_mtu = mtu_bytes(bcast_.mtu);
  lp.connected = cfg_.connected && cm_ready_;
  bridge_->set_link(lp);
  if (tap_) (void)tap_->set_mtu(bridge_->mtu());
}

void IpoibService::stop() {
  // TEARDOWN_HCA reclaims the QP and AHs; the kernel removes the TAP with its fd.
  ++epoch_;
  state_ = State::kDown;
  retry_.cancel();
  if (tap_) (void)tap_->set_carrier(false);
  addrs_.reset();
  qp_.reset();
  parked_.reset();
}

void IpoibService::bring_up() {
  if (state_ != State::kDown) return;
  state_ = State::kBringingUp;
  const uint64_t ep = ++epoch_;
  ++bring_ups_;
  hca_.query_port_async(cfg_.port, [this, ep, alive = std::weak_ptr<bool>(alive_)](Result<hca::PortAttr> a) {
    if (alive.expired() || ep != epoch_) return;
    if (!a) return go_down("QUERY_PORT failed", false);
    if (!hca::cap_ipoib(a->link_layer)) {  // RFC 4391 runs on InfiniBand (Linux: rdma_cap_ipoib)
      logger()->error("{}: port {} is {}: no IPoIB on it", cfg_.name, cfg_.port, hca::link_layer_name(a->link_layer));
      state_ = State::kDown;
      return;
    }
    if (a->state != hca::kPortActive) {  // the PORT_STATE_CHANGE to Active starts it again
      state_ = State::kDown;
      return;
    }
    if ((a->pkey0 & 0x7FFF) != (cfg_.pkey & 0x7FFF)) {
      logger()->error("{}: P_Key {:#06x} is not the port's P_Key at index 0 ({:#06x}); only index 0 is used",
                      cfg_.name, cfg_.pkey, a->pkey0);
      state_ = State::kDown;
      return;
    }
    port_ = *a;
    proto::McastJoinReq j;
    j.port = cfg_.port;
    j.join_state = sa::join_state::kFullMember;
    j.pkey = cfg_.pkey;
    j.mgid = ipoib::broadcast_mgid(cfg_.pkey);
    sa_.mcast_join(kIpoibOwner, j, [this, ep, pa = *a, alive](Result<proto::McastJoinRep> r) {
      if (alive.expired()) return;
      joined_broadcast(ep, pa, join_record(std::move(r)), false);
    });
  });
}

// RFC 4391 §5: the broadcast group must exist before the interface works;
// when the SA does not have it, the join is made again with the creation
// components (as Linux's ipoib does: the port's MTU, Q_Key 0x0b1b unless
// configured: a controlled one, bit 31 set, keeps unprivileged senders out,
// docs/ipoib.md "Security").
void IpoibService::joined_broadcast(uint64_t ep, const hca::PortAttr& pa, Result<sa::McMemberRecord> r, bool created) {
  const ipoib::Gid mgid = ipoib::broadcast_mgid(cfg_.pkey);
  if (ep != epoch_) {
    if (r) (void)sa_.mcast_leave(kIpoibOwner, {cfg_.port, mgid});
    return;
  }
  if (!r && !created && r.error().code == EREMOTEIO) {
    logger()->info("{}: no broadcast group yet ({}); creating it", cfg_.name, r.error().str());
    proto::McastJoinReq j;
    j.port = cfg_.port;
    j.join_state = sa::join_state::kFullMember;
    j.pkey = cfg_.pkey;
    j.mgid = mgid;
    j.flags = proto::kMcastCreate;
    j.qkey = cfg_.qkey;
    j.mtu = pa.active_mtu;
    sa_.mcast_join(kIpoibOwner, j, [this, ep, pa, alive = std::weak_ptr<bool>(alive_)](Result<proto::McastJoinRep> r2) {
      if (alive.expired()) return;
      joined_broadcast(ep, pa, join_record(std::move(r2)), true);
    });
    return;
  }
  if (!r) {
    logger()->warn("{}: joining the broadcast group: {}", cfg_.name, r.error().str());
    return go_down("broadcast join failed", false);
  }
  bcast_ = *r;
  ipoib::UdPortConfig pc;
  pc.port = cfg_.port;
  pc.qkey = bcast_.qkey;
  pc.max_payload = mtu_bytes(bcast_.mtu);  // every member sends within the group's MTU
  pc.log_slots = 10;  // 1024 receives: a burst of a TCP window finds a WQE (measured: 256 dropped under iperf3)
  pc.log_send_slots = 9;
  // The slots are one MKEY of at most max_mkey_pages pages (ud_port.hpp):
  // a 4096-byte group (one ibd created with the port's MTU) halves them.
  const size_t max_pages = hca_.caps().max_mkey_pages;
  while (max_pages && ipoib::UdPort::buffer_bytes(pc) / 4096 > max_pages && pc.log_send_slots > 4) {
    --pc.log_slots;
    --pc.log_send_slots;
  }
  logger()->info("{}: broadcast group Q_Key {:#x}, MTU {}: UD QP of {} + {} slots, {} pages", cfg_.name, bcast_.qkey,
                 pc.max_payload, 1u << pc.log_slots, 1u << pc.log_send_slots, ipoib::UdPort::buffer_bytes(pc) / 4096);
  if (parked_) {
    auto p = std::move(parked_);
    if (parked_cfg_ == pc) {
      ++ud_qp_kept_;
      qp_cfg_ = pc;
      return port_opened(ep, std::move(p));  // the same QPN as before the flap
    }
    ipoib::UdPort::close_async(std::move(p), [] {});  // the group's Q_Key or MTU changed
  }
  qp_cfg_ = pc;
  ipoib::UdPort::open_async(hca_, pc, [this, ep, alive = std::weak_ptr<bool>(alive_)](
                                          Result<std::unique_ptr<ipoib::UdPort>> p) mutable {
    if (alive.expired()) return;
    if (!p) {
      if (ep == epoch_) go_down("opening the UD QP failed", false);
      return;
    }
    port_opened(ep, std::move(*p));
  });
}

void IpoibService::port_opened(uint64_t ep, std::unique_ptr<ipoib::UdPort> p) {
  if (ep != epoch_) return ipoib::UdPort::close_async(std::move(p), [] {});
  qp_ = std::move(p);
  qp_->set_receiver([this](const ipoib::UdReceived& r) {
    if (!bridge_) return;
    ipoib::Bridge::RxInfo info;
    info.src_qpn = r.src_qpn;
    info.slid = r.slid;
    if (r.grh) {
      info.sgid = r.sgid;
      info.dgid = r.dgid;
    }
    bridge_->from_ib(info, r.payload);
  });
  qp_->set_slots_freed([this] { arm_tap_read(); });
  const ipoib::Gid mgid = ipoib::broadcast_mgid(cfg_.pkey);
  group_ready(ep, mgid, bcast_, true, [this, ep](bool ok) {
    if (ep != epoch_) return;
    if (!ok) return go_down("attaching to the broadcast group failed", false);
    ipoib::LinkParams lp;
    lp.port_gid = sa::make_gid(port_.gid_prefix, port_.port_guid);
    lp.qpn = qp_->qpn();
    lp.pkey = cfg_.pkey;
    lp.qkey = bcast_.qkey;
    lp.ib_mtu = mtu_bytes(bcast_.mtu);  // datagram mode until connected mode's listener is up
    if (!bridge_) bridge_ = std::make_unique<ipoib::Bridge>(static_cast<ipoib::BridgeIo&>(*this), lp);
    else bridge_->set_link(lp);
    if (!tap_) {
      auto t = ipoib::TapDevice::open(cfg_.name, bridge_->own_mac(), bridge_->mtu(), kTapOffloads);
      if (!t) {
        logger()->error("{}: creating the TAP interface: {}", cfg_.name, t.error().str());
        return go_down("no TAP interface", false);
      }
      tap_.emplace(std::move(*t));
      tap_sd_ = std::make_unique<boost::asio::posix::stream_descriptor>(io_, ::dup(tap_->fd()));
      addrs_ = std::make_unique<ipoib::AddrWatch>(
          io_, tap_->ifindex(), [this](bool added, const ipoib::IpAddr& a) { address_event(added, a); });
      if (auto r = addrs_->start(); !r) logger()->warn("{}: watching addresses: {}", cfg_.name, r.error().str());
    } else {
      (void)tap_->set_mtu(bridge_->mtu());
    }
    state_ = State::kUp;
    bridge_->set_carrier(true);
    if (auto r = tap_->set_carrier(true); !r) logger()->warn("{}: carrier on: {}", cfg_.name, r.error().str());
    logger()->info("{}: up: QPN {:#x}, broadcast MLID {:#x}, Q_Key {:#x}, MTU {}, MAC {}", cfg_.name, qp_->qpn(),
                   bcast_.mlid, bcast_.qkey, bridge_->mtu(), mac_text(bridge_->own_mac()));
    sync_kernel_groups();
    arm_tap_read();
    start_connected();
  });
}

// docs/ipoib.md "Multicast": the groups the kernel holds on the interface
// now; the ones it joins later are learnt from its IGMP/MLD reports.
void IpoibService::sync_kernel_groups() {
  for (uint32_t g : ipoib::parse_proc_igmp(ipoib::read_proc_file("/proc/net/igmp"), tap_->name()))
    bridge_->member_join(ipoib::ipv4_mgid(g, cfg_.pkey));
  // Interface- and node-local groups (scope 0, 1: ff01::1) never leave the host.
  for (const auto& g : ipoib::parse_proc_igmp6(ipoib::read_proc_file("/proc/net/igmp6"), tap_->ifindex()))
    if ((g[1] & 0x0F) >= 2) bridge_->member_join(ipoib::ipv6_mgid(g, cfg_.pkey));
}

hca::AddressVector IpoibService::group_av(const sa::McMemberRecord& rec) const {
  hca::AddressVector av;  // IBA 8.3: multicast packets carry a GRH with the MGID
  av.dlid = rec.mlid;
  av.sl = rec.sl;
  av.static_rate = av_rate(rec.rate);
  av.port = cfg_.port;
  av.grh = true;
  av.dgid = rec.mgid;
  av.hop_limit = rec.hop_limit;
  av.flow_label = rec.flow_label;
  av.traffic_class = rec.tclass;
  return av;
}

void IpoibService::destroy_ah(uint32_t ahn) {
  hca_.destroy_async(hca::ObjectKind::kAh, ahn, [](Result<void>) {});
}

// A group's address handle, and for a full member the QP attached
// (ATTACH_MCG, docs/simhca.md §6.11).
void IpoibService::group_ready(uint64_t ep, const ipoib::Gid& mgid, const sa::McMemberRecord& rec, bool full,
                               std::function<void(bool)> done) {
  if (!qp_) return done(false);
  hca_.create_ah_async(qp_->pdn(), group_av(rec), [this, ep, mgid, rec, full, done = std::move(done),
                                                    alive = std::weak_ptr<bool>(alive_)](Result<uint32_t> ahn) mutable {
    if (alive.expired()) return;
    if (ep != epoch_ || !ahn) {
      if (ahn) destroy_ah(*ahn);
      return done(false);
    }
    Group& g = groups_[mgid];
    if (g.have_ah) destroy_ah(g.ahn);
    g.ahn = *ahn;
    g.have_ah = true;
    g.mlid = rec.mlid;
    g.full = g.full || full;
    if (!full || g.attached) return done(true);
    hca_.attach_mcast_async(qp_->qpn(), mgid, rec.mlid, [this, ep, mgid, done = std::move(done), alive](Result<void> r) {
      if (alive.expired()) return;
      if (ep != epoch_) return done(false);
      if (!r) {
        logger()->warn("{}: ATTACH_MCG {}: {}", cfg_.name, gid_text(mgid), r.error().str());
        return done(false);
      }
      groups_[mgid].attached = true;
      done(true);
    });
  });
}

// The SA answered a rejoin with another MLID (a restarted SM): the QP is
// attached again under it and the group's address handle made again.
void IpoibService::mcast_changed(uint8_t port, const sa::McMemberRecord& rec) {
  if (port != cfg_.port || state_ != State::kUp || !qp_) return;
  auto it = groups_.find(rec.mgid);
  if (it == groups_.end()) return;
  // A new SM may have made the broadcast group again with another Q_Key
  // (its partitions.conf): the QP's own Q_Key is set at bring-up, so the
  // interface comes up again with the new one (docs/ipoib.md "Security").
  if (rec.mgid == ipoib::broadcast_mgid(cfg_.pkey) && rec.qkey != bcast_.qkey) {
    logger()->info("{}: the broadcast group's Q_Key is now {:#x} (was {:#x})", cfg_.name, rec.qkey, bcast_.qkey);
    return go_down("the broadcast group's Q_Key changed", false);
  }
  const bool full = it->second.full;
  if (it->second.attached) {
    hca_.detach_mcast_async(qp_->qpn(), rec.mgid, it->second.mlid, [](Result<void>) {});
    it->second.attached = false;
  }
  if (rec.mgid == ipoib::broadcast_mgid(cfg_.pkey)) bcast_ = rec;
  group_ready(epoch_, rec.mgid, rec, full, [this, mgid = rec.mgid](bool ok) {
    if (!ok) logger()->warn("{}: group {} after its MLID changed: not usable", cfg_.name, gid_text(mgid));
  });
}

void IpoibService::go_down(const char* why, bool device_gone, bool keep_qp) {
  const bool was_up = state_ == State::kUp;
  ++epoch_;
  state_ = State::kDown;
  if (tap_) (void)tap_->set_carrier(false);
  if (bridge_) bridge_->set_carrier(false);
  // The SA forgets a port's memberships when it goes; ours are left so the
  // next bring-up joins afresh (a cached answer would name a group the SA
  // no longer sends to us).
  for (auto& [mgid, g] : groups_) {
    (void)sa_.mcast_leave(kIpoibOwner, {cfg_.port, mgid});
    if (!device_gone && g.have_ah) destroy_ah(g.ahn);
    // A parked QP is attached to nothing: the next bring-up attaches it
    // under the groups' MLIDs of then.
    if (keep_qp && !device_gone && g.attached && qp_)
      hca_.detach_mcast_async(qp_->qpn(), mgid, g.mlid, [](Result<void>) {});
  }
  groups_.clear();
  if (cm_) cm_->stop(device_gone);
  cm_ready_ = false;
  if (!device_gone)
    for (auto& [gid, n] : neighbours_) destroy_ah(n.ahn);
  neighbours_.clear();
  if (device_gone) parked_.reset();  // its objects went with the device
  if (qp_) {
    if (device_gone) qp_.reset();
    else if (keep_qp) parked_ = std::move(qp_), parked_cfg_ = qp_cfg_;
    else ipoib::UdPort::close_async(std::move(qp_), [] {});
  }
  if (was_up || !device_gone) logger()->info("{}: down ({})", cfg_.name, why);
  if (device_gone) return;  // device_back() brings it up again
  // A failure while the port is Active: try again later.
  retry_.expires_after(std::chrono::seconds(5));
  retry_.async_wait([this, alive = std::weak_ptr<bool>(alive_)](const boost::system::error_code& e) {
    if (!e && !alive.expired()) bring_up();
  });
}

bool IpoibService::on_cq_event(uint32_t cqn) {
  // A parked QP's CQ too: its event is taken (and its CQ re-armed) while
  // the port is down, so that it reports again once taken back.
  return (qp_ && qp_->on_cq_event(cqn)) || (parked_ && parked_->on_cq_event(cqn)) ||
         (cm_ && cm_->on_cq_event(cqn));
}

void IpoibService::port_event(const hca::Event& e) {
  if (e.kind == hca::Event::Kind::kPortState) port_state(e.port, e.new_state);
}

void IpoibService::port_state(uint8_t port, uint8_t state) {
  if (port != cfg_.port) return;
  if (state == hca::kPortActive) {
    retry_.cancel();
    return bring_up();
  }
  if (state_ != State::kDown) go_down("the port left Active", false, true);
  retry_.cancel();  // the next Active brings it up
}

void IpoibService::device_lost() {
  go_down("device lost", true);
  retry_.cancel();
}

void IpoibService::device_back() { bring_up(); }

// ---- BridgeIo -------------------------------------------------------------

void IpoibService::send_ud(const ipoib::UdDest& to, std::span<const uint8_t> packet) {
  if (!qp_) {
    ++send_errors_;
    return;
  }
  uint32_t ahn = 0;
  if (to.multicast) {
    auto it = groups_.find(to.gid);
    if (it == groups_.end() || !it->second.have_ah) {
      ++send_errors_;
      return;
    }
    ahn = it->second.ahn;
  } else {
    auto it = neighbours_.find(to.gid);
    if (it == neighbours_.end()) {
      ++send_errors_;
      return;
    }
    ahn = it->second.ahn;
  }
  if (auto r = qp_->send(ahn, to.multicast ? ipoib::kMulticastQpn : to.qpn, bcast_.qkey, packet); !r) ++send_errors_;
}

bool IpoibService::rc_usable(const ipoib::HwAddr& a) { return cm_ready_ && cm_->usable(a); }

bool IpoibService::send_rc(const ipoib::HwAddr& a, std::span<const uint8_t> packet) {
  return cm_ready_ && cm_->send(a, packet);
}

void IpoibService::write_tap(std::span<const uint8_t> frame) {
  if (!tap_) return;
  // With offloads, a zero virtio-net header first: no GSO, checksum as it is.
  static const uint8_t kNoOffload[ipoib::kVnetHdrLen] = {};
  const iovec iov[2] = {{const_cast<uint8_t*>(kNoOffload), tap_->vnet_hdr_len()},
                        {const_cast<uint8_t*>(frame.data()), frame.size()}};
  if (::writev(tap_->fd(), iov, 2) != static_cast<ssize_t>(tap_->vnet_hdr_len() + frame.size())) ++tap_write_errors_;
}

// A unicast neighbour: its PathRecord through the SA service's cache, an
// address handle from it (IBA 15.2.5.16: DLID, SL; a GRH only off-subnet).
void IpoibService::resolve_path(const ipoib::Gid& gid) {
  proto::PathQueryReq q;
  q.port = cfg_.port;
  q.pkey = cfg_.pkey;
  q.dgid = gid;
  const uint64_t ep = epoch_;
  sa_.path_query(q, [this, ep, gid, alive = std::weak_ptr<bool>(alive_)](Result<proto::PathRep> r) {
    if (alive.expired() || ep != epoch_ || !bridge_) return;
    auto pr = r ? sa::decode_path_record(std::as_bytes(std::span(r->record))) : Result<sa::PathRecord>(r.take_error());
    if (!pr || !qp_) {
      if (!pr) logger()->debug("{}: path to {}: {}", cfg_.name, gid_text(gid), pr.error().str());
      return bridge_->path_resolved(gid, false);
    }
    hca::AddressVector av;
    av.dlid = pr->dlid;
    av.sl = pr->sl;
    av.static_rate = av_rate(pr->rate);
    av.port = cfg_.port;
    if (pr->hop_limit > 1) {
      av.grh = true;
      av.dgid = gid;
      av.hop_limit = pr->hop_limit;
      av.flow_label = pr->flow_label;
      av.traffic_class = pr->tclass;
    }
    const uint16_t dlid = pr->dlid;
    hca_.create_ah_async(qp_->pdn(), av, [this, ep, gid, dlid, rec = r->record, alive](Result<uint32_t> ahn) {
      if (alive.expired()) return;
      if (ep != epoch_ || !bridge_) {
        if (ahn && ep == epoch_) destroy_ah(*ahn);
        return;
      }
      if (!ahn) return bridge_->path_resolved(gid, false);
      auto [it, fresh] = neighbours_.try_emplace(gid);
      if (!fresh) destroy_ah(it->second.ahn);
      it->second = {*ahn, dlid, rec};
      bridge_->path_resolved(gid, true);
      if (bridge_) bridge_->path_lid(gid, dlid);  // unicast arrives without GRH: its SLID names the sender
    });
  });
}

void IpoibService::path_changed(const ipoib::Gid& gid) {
  auto it = neighbours_.find(gid);
  if (it == neighbours_.end()) return;
  destroy_ah(it->second.ahn);
  neighbours_.erase(it);
  if (bridge_) bridge_->path_lost(gid);
}

void IpoibService::join(const ipoib::Gid& mgid, bool send_only) {
  proto::McastJoinReq j;
  j.port = cfg_.port;
  j.join_state = send_only ? sa::join_state::kSendOnlyNonMember : sa::join_state::kFullMember;
  j.pkey = cfg_.pkey;
  j.mgid = mgid;
  // IPv4/IPv6 groups are created like the broadcast group (RFC 4391 §4:
  // its Q_Key, MTU, SL, TClass, FlowLabel, P_Key).
  j.flags = proto::kMcastCreate;
  j.qkey = bcast_.qkey;
  j.mtu = bcast_.mtu;
  j.sl = bcast_.sl;
  j.tclass = bcast_.tclass;
  j.flow_label = bcast_.flow_label;
  const uint64_t ep = epoch_;
  sa_.mcast_join(kIpoibOwner, j, [this, ep, mgid, send_only, alive = std::weak_ptr<bool>(alive_)](
                                     Result<proto::McastJoinRep> r) {
    if (alive.expired()) return;
    if (ep != epoch_ || !bridge_) {
      if (r) (void)sa_.mcast_leave(kIpoibOwner, {cfg_.port, mgid});
      return;
    }
    auto rec = join_record(std::move(r));
    if (!rec) {
      logger()->debug("{}: join {}: {}", cfg_.name, gid_text(mgid), rec.error().str());
      return bridge_->joined(mgid, false);
    }
    group_ready(ep, mgid, *rec, !send_only, [this, mgid](bool ok) {
      if (bridge_) bridge_->joined(mgid, ok);
    });
  });
}

void IpoibService::leave(const ipoib::Gid& mgid) {
  auto it = groups_.find(mgid);
  if (it != groups_.end()) {
    if (it->second.attached && qp_) hca_.detach_mcast_async(qp_->qpn(), mgid, it->second.mlid, [](Result<void>) {});
    if (it->second.have_ah) destroy_ah(it->second.ahn);
    groups_.erase(it);
  }
  (void)sa_.mcast_leave(kIpoibOwner, {cfg_.port, mgid});
}

// ---- the TAP side ---------------------------------------------------------

void IpoibService::arm_tap_read() {
  if (!tap_sd_ || tap_waiting_ || state_ != State::kUp) return;
  tap_waiting_ = true;
  tap_sd_->async_wait(boost::asio::posix::stream_descriptor::wait_read,
                      [this, alive = std::weak_ptr<bool>(alive_)](const boost::system::error_code& e) {
                        if (alive.expired()) return;
                        tap_waiting_ = false;
                        if (!e) read_tap();
                      });
}

// Frames are read while send slots are free; when none is, the kernel's
// queue holds them until completions free some (set_slots_freed). With
// offloads a read is a virtio-net header and a frame, perhaps a TCP
// super-frame: cut to the interface's MTU (the kernel's view: in connected
// mode one of up to 65520 goes whole), checksums completed (gso.hpp); a
// header that does not make sense counts as a read error.
void IpoibService::read_tap() {
  std::vector<uint8_t> segment;  // the segments of this turn's super-frames
  const auto take = [this](std::span<const uint8_t> f) { bridge_->from_tap(f); };
  if (qp_) qp_->begin_batch();
  if (cm_ready_) cm_->begin_batch();
  for (int i = 0; i < kReadsPerTurn; ++i) {
    const size_t reserve = kSlotMargin + (tap_->vnet_hdr_len() ? kGsoSlots : 0);
    if (state_ != State::kUp || !qp_ || !bridge_ || qp_->slots_free() <= reserve) break;
    if (cm_ready_ && cm_->slots_free() == 0) break;  // connected mode's completions free some
    const ssize_t n = ::read(tap_->fd(), frame_.data(), frame_.size());
    if (n < 0) {
      if (errno != EAGAIN && errno != EINTR) ++tap_read_errors_;
      break;
    }
    const size_t hl = tap_->vnet_hdr_len();
    if (hl == 0) {
      bridge_->from_tap(std::span<const uint8_t>(frame_.data(), static_cast<size_t>(n)));
      continue;
    }
    const auto h = ipoib::parse_vnet_hdr(std::span<const uint8_t>(frame_.data(), static_cast<size_t>(n)));
    const std::span<uint8_t> f(frame_.data() + hl, h ? static_cast<size_t>(n) - hl : 0);
    if (!h || ipoib::gso_segment(*h, f, bridge_->mtu(), segment, take) != ipoib::GsoVerdict::ok) ++tap_read_errors_;
  }
  if (qp_) qp_->end_batch();  // one doorbell for the turn's sends
  if (cm_ready_) cm_->end_batch();
  arm_tap_read();
}

// ATS (docs/ipoib.md "ATS registration"): each address of the interface
// has its ServiceRecord while it exists; ServiceRegs renews and re-registers.
// Each address has a slot of its own (the ServiceID's byte 4: the SA keys
// records by ServiceID, GID and P_Key, src/ipoib_tap/ats.hpp).
void IpoibService::address_event(bool added, const ipoib::IpAddr& a) {
  uint8_t slot = 0;
  if (added) {
    auto t = ats_slots_.take(a);
    if (!t) {
      ++ats_errors_;
      return logger()->warn("{}: address {}: no ATS record ({})", cfg_.name, a.to_string(), t.error().str());
    }
    if (!t->fresh) return;  // the same address listed again (another prefix length)
    slot = t->slot;
  } else {
    auto g = ats_slots_.give_back(a);
    if (!g || !g->last) return;
    slot = g->slot;
  }
  proto::ServiceReq req;
  req.port = cfg_.port;
  const sa::ServiceRecord rec =
      ipoib::ats_record(sa::make_gid(port_.gid_prefix, port_.port_guid), cfg_.pkey, a, slot);
  sa::encode_service_record(std::as_writable_bytes(std::span(req.record)), rec);
  logger()->info("{}: address {} {}: ATS record {:#x} {}", cfg_.name, a.to_string(), added ? "added" : "removed",
                 rec.service_id, added ? "registered" : "deleted");
  if (!added) {
    if (auto r = sa_.service_delete(kIpoibOwner, req); !r) ++ats_errors_;
    return;
  }
  sa_.service_set(kIpoibOwner, req, [this, alive = std::weak_ptr<bool>(alive_)](Result<proto::ServiceRep> r) {
    if (alive.expired()) return;
    if (r) ++ats_registered_;
    else ++ats_errors_;
  });
}

// ---- ibdctl / INFO ----------------------------------------------------------

std::vector<std::pair<std::string, uint64_t>> IpoibService::counter_list() const {
  std::vector<std::pair<std::string, uint64_t>> v = {
      {"ipoib.bring_ups", bring_ups_},       {"ipoib.send_errors", send_errors_},
      {"ipoib.tap_write_errors", tap_write_errors_}, {"ipoib.tap_read_errors", tap_read_errors_},
      {"ipoib.ats_registered", ats_registered_},     {"ipoib.ats_errors", ats_errors_},
      {"ipoib.ud_qp_kept", ud_qp_kept_},
  };
  if (bridge_) {
    const auto& c = bridge_->counters();
    for (auto [k, x] : std::initializer_list<std::pair<const char*, uint64_t>>{
             {"tap_rx", c.tap_rx}, {"tap_tx", c.tap_tx}, {"ib_rx", c.ib_rx}, {"ib_tx", c.ib_tx},
             {"arp_out", c.arp_out}, {"arp_in", c.arp_in}, {"nd_out", c.nd_out}, {"nd_in", c.nd_in},
             {"drop_malformed_frame", c.drop_malformed_frame}, {"drop_ethertype", c.drop_ethertype},
             {"drop_too_big", c.drop_too_big}, {"drop_unknown_mac", c.drop_unknown_mac},
             {"drop_malformed_packet", c.drop_malformed_packet}, {"drop_own", c.drop_own}, {"drop_spoofed", c.drop_spoofed},
             {"drop_no_path", c.drop_no_path}, {"drop_no_group", c.drop_no_group},
             {"drop_queue_full", c.drop_queue_full}, {"drop_down", c.drop_down}, {"icmp_too_big", c.icmp_too_big}})
      v.emplace_back(std::string("ipoib.") + k, x);
  }
  if (cm_)
    for (auto& [k, x] : cm_->counter_list()) v.emplace_back("ipoib." + k, x);
  if (qp_) {
    const auto& q = qp_->counters();
    v.emplace_back("ipoib.qp_sent", q.sent);
    v.emplace_back("ipoib.qp_received", q.received);
    v.emplace_back("ipoib.qp_send_errors", q.send_errors);
    v.emplace_back("ipoib.qp_recv_errors", q.recv_errors);
    v.emplace_back("ipoib.qp_no_send_slot", q.no_send_slot);
  }
  return v;
}

std::string IpoibService::json(size_t max_bytes) const {
  using nlohmann::json;
  json j;
  j["name"] = cfg_.name;
  j["port"] = cfg_.port;
  j["state"] = state_ == State::kUp ? "up" : state_ == State::kBringingUp ? "bringing up" : "down";
  j["pkey"] = fmt::format("{:#06x}", cfg_.pkey);
  j["mode"] = cfg_.connected ? (cm_ready_ ? "connected" : "connected (starting)") : "datagram";
  if (tap_) j["ifindex"] = tap_->ifindex();
  if (qp_) j["qpn"] = fmt::format("{:#x}", qp_->qpn());
  if (state_ == State::kUp) {
    j["gid"] = gid_text(sa::make_gid(port_.gid_prefix, port_.port_guid));
    j["broadcast_mlid"] = fmt::format("{:#x}", bcast_.mlid);
    j["qkey"] = fmt::format("{:#x}", bcast_.qkey);
  }
  if (bridge_) {
    j["mac"] = mac_text(bridge_->own_mac());
    j["mtu"] = bridge_->mtu();
    json ns = json::array();
    for (const auto& n : bridge_->neighbours()) {
      json e{{"mac", mac_text(n.mac)}, {"qpn", fmt::format("{:#x}", n.addr.qpn)}, {"gid", gid_text(n.addr.gid)},
             {"path", n.state}, {"pending", n.pending}, {"ips", n.ips},
             {"connected_mode", (n.addr.flags & ipoib::kHwFlagRc) != 0}};
      if (auto it = neighbours_.find(n.addr.gid); it != neighbours_.end()) e["dlid"] = it->second.dlid;
      ns.push_back(std::move(e));
    }
    j["neighbours"] = std::move(ns);
    json gs = json::array();
    for (const auto& g : bridge_->groups()) {
      json e{{"mgid", gid_text(g.mgid)}, {"full_member", g.full_member}, {"state", g.state}};
      if (auto it = groups_.find(g.mgid); it != groups_.end()) e["mlid"] = fmt::format("{:#x}", it->second.mlid);
      gs.push_back(std::move(e));
    }
    j["groups"] = std::move(gs);
  }
  if (cm_ready_) j["connections"] = json::parse(cm_->json());
  json c = json::object();
  for (const auto& [k, v] : counter_list()) c[k.substr(6)] = v;
  j["counters"] = std::move(c);
  std::string text = j.dump();
  while (text.size() > max_bytes && j.contains("neighbours") && !j["neighbours"].empty()) {
    j["neighbours"].erase(j["neighbours"].size() - 1);
    j["truncated"] = true;
    text = j.dump();
  }
  return text;
}

}  // namespace openib::ibd

namespace openib::ibd {

std::array<uint8_t, 16> IpoibService::port_gid() const { return sa::make_gid(port_.gid_prefix, port_.port_guid); }

std::optional<std::array<uint8_t, 16>> IpoibService::gid_of_mac(std::span<const uint8_t> mac) const {
  if (!bridge_ || mac.size() != 6) return std::nullopt;
  ipoib::Mac m;
  std::copy(mac.begin(), mac.end(), m.begin());
  if (m == bridge_->own_mac()) return port_gid();
  auto a = bridge_->addr_of(m);
  if (!a) return std::nullopt;
  return a->gid;
}

// IPOIB_INFO: the IPoIB interface as JSON (docs/ipoib.md "ibdctl ipoib"),
// open to every client as INFO is; bounded by the message.
Result<void> IpoibService::handle(const Caller& c, proto::Message& m, Respond& done) {
  if (m.header.op == static_cast<uint16_t>(proto::Op::kIpoibSetMode)) {
    if (!c.privileged()) return err(EPERM, "root or CAP_NET_ADMIN only");
    OPENIB_TRY(expect_fds(m, 0));
    OPENIB_TRY_ASSIGN(auto r, proto::decode<proto::IpoibModeReq>(m.body));
    if (r.connected > 1) return err(EINVAL, "IPOIB_SET_MODE: mode {} (0 datagram, 1 connected)", r.connected);
    if (r.connected && !cm_) return err(ENOTSUP, "IPOIB_SET_MODE: no IB CM for connected mode");
    set_mode(r.connected != 0);
    done(Reply{});
    return ok();
  }
  if (!m.body.empty()) return err(EINVAL, "IPOIB_INFO takes no body");
  OPENIB_TRY(expect_fds(m, 0));
  const std::string text = json(proto::kMaxMessage - proto::kHeaderSize - 64);
  done(Reply::text(text));
  return ok();
}

}  // namespace openib::ibd
