#include "ibd/netdev_service.hpp"

#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/post.hpp>
#include <cerrno>
#include <cstring>

#include "common/fd.hpp"
#include "common/log.hpp"
#include "hca/port_caps.hpp"

namespace openib::ibd {
namespace {

auto logger() { return log::get("netdev"); }

constexpr size_t kMaxTapFrame = 65536 + 14;  // the TAP's MTU may be raised by hand: such frames are dropped by size
constexpr int kReadsPerTurn = 64;
// A received frame may carry an 802.1Q tag beyond the MTU and the
// Ethernet header (IEEE 802.3 §3.5: 1,522 bytes for a 1,500-byte MTU).
constexpr size_t kEthOverhead = 14 + 4;

std::string gid_text(const eth::Gid& g) {
  std::string s;
  for (size_t i = 0; i < 16; i += 2) s += fmt::format("{}{:02x}{:02x}", i ? ":" : "", g[i], g[i + 1]);
  return s;
}

// RFC 4291 2.5.1 / docs/simhca.md §16.1: GID 0 is fe80:: and the MAC's
// EUI-64 (ff:fe in the middle, the U/L bit inverted); the MAC back from it.
std::array<uint8_t, 6> mac_of_gid0(const eth::Gid& g) {
  return {static_cast<uint8_t>(g[8] ^ 0x02), g[9], g[10], g[13], g[14], g[15]};
}

// SIOCGIFMTU (netdevice(7)) by name, in ibd's network namespace.
Result<uint32_t> read_mtu(const std::string& name) {
  UniqueFd s(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!s) return sys_err("socket for SIOCGIFMTU");
  ifreq r{};
  std::memcpy(r.ifr_name, name.data(), std::min(name.size(), std::size_t{IFNAMSIZ - 1}));
  if (::ioctl(s.get(), SIOCGIFMTU, &r) != 0) return sys_err("SIOCGIFMTU on {}", name);
  return static_cast<uint32_t>(r.ifr_mtu);
}

}  // namespace

NetdevService::NetdevService(boost::asio::io_context& io, hca::Device& hca, NetdevConfig cfg)
    : io_(io), hca_(hca), cfg_(std::move(cfg)), mtu_(cfg_.mtu), frame_(kMaxTapFrame), retry_(io) {}

NetdevService::~NetdevService() {
  alive_.reset();
  retry_.cancel();
}

Result<void> NetdevService::check_port() {
  auto pa = hca::call_sync<hca::PortAttr>(
      hca_, [&](hca::Device::Done<hca::PortAttr> d) { hca_.query_port_async(cfg_.port, std::move(d)); });
  if (!pa) return err(pa.error().code, "--netdev {}: port {}: {}", cfg_.name, cfg_.port, pa.error().str());
  if (!hca::protocol_roce(pa->link_layer))
    return err(EINVAL, "--netdev {}: port {} is {}, not Ethernet: a netdev needs a RoCE port (IPoIB is --ipoib)",
               cfg_.name, cfg_.port, hca::link_layer_name(pa->link_layer));
  gids_.set_table_len(pa->gid_table_len);
  return ok();
}

void NetdevService::start() {
  started_ = true;
  bring_up();
}

void NetdevService::stop() {
  started_ = false;
  ++epoch_;
  state_ = State::kDown;
  retry_.cancel();
  if (tap_) (void)tap_->set_carrier(false);
  device_ok_ = false;  // TEARDOWN_HCA takes the QP; INIT_HCA empties the GID table
  ++gid_epoch_;
  addrs_.reset();
  qp_.reset();
}

// ---- bring-up -------------------------------------------------------------

void NetdevService::bring_up() {
  if (state_ != State::kDown) return;
  state_ = State::kBringingUp;
  const uint64_t ep = ++epoch_;
  ++c_.bring_ups;
  hca_.query_port_async(cfg_.port, [this, ep, alive = std::weak_ptr<bool>(alive_)](Result<hca::PortAttr> a) {
    if (alive.expired() || ep != epoch_) return;
    if (!a) {
      go_down("QUERY_PORT failed", false);
      return retry_later();
    }
    if (!hca::protocol_roce(a->link_layer)) {  // check_port() refused it at start
      logger()->error("{}: port {} is {}: no netdev on it", cfg_.name, cfg_.port, hca::link_layer_name(a->link_layer));
      state_ = State::kDown;
      return;
    }
    gids_.set_table_len(a->gid_table_len);
    const bool active = a->state == hca::kPortActive;
    hca_.query_gid_async(cfg_.port, 0, [this, ep, active, alive](Result<hca::GidEntry> g) {
      if (alive.expired() || ep != epoch_) return;
      if (!g) {
        logger()->warn("{}: QUERY_GID {} 0: {}", cfg_.name, cfg_.port, g.error().str());
        go_down("QUERY_GID failed", false);
        return retry_later();
      }
      have_gid0(*g);
      if (ep != epoch_ || !tap_) return;
      if (!active) {  // the PORT_STATE_CHANGE to Active starts it again
        state_ = State::kDown;
        return;
      }
      eth::RawPortConfig pc;
      pc.port = cfg_.port;
      // One MKEY of at most max_mkey_pages pages (raw_port.hpp).
      const size_t max_pages = hca_.caps().max_mkey_pages;
      while (max_pages && eth::RawPort::buffer_bytes(pc) / 4096 > max_pages && pc.log_send_slots > 4) {
        --pc.log_slots;
        --pc.log_send_slots;
      }
      eth::RawPort::open_async(hca_, pc, [this, ep, alive](Result<std::unique_ptr<eth::RawPort>> p) mutable {
        if (alive.expired()) return;
        if (!p) {
          if (ep == epoch_) {
            go_down("opening the raw Ethernet QP failed", false);
            retry_later();
          }
          return;
        }
        port_opened(ep, std::move(*p));
      });
    });
  });
}

// The TAP, the first time: the port's MAC (from GID 0), the configured
// MTU, carrier off; its addresses watched from then on.
void NetdevService::have_gid0(const hca::GidEntry& g) {
  gid0_ = g.gid;
  if (tap_) return;
  const auto mac = mac_of_gid0(g.gid);
  auto t = ipoib::TapDevice::open(cfg_.name, mac, cfg_.mtu);
  if (!t) {
    logger()->error("{}: creating the TAP interface: {}", cfg_.name, t.error().str());
    go_down("no TAP interface", false);
    return retry_later();
  }
  tap_.emplace(std::move(*t));
  (void)tap_->set_carrier(false);
  mtu_ = cfg_.mtu;
  // A descriptor of its own for asio, which closes what it holds (the TAP
  // device closes its fd too: as IpoibService).
  tap_sd_ = std::make_unique<boost::asio::posix::stream_descriptor>(io_, ::dup(tap_->fd()));
  logger()->info("{}: TAP interface, ifindex {}, MAC {:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}, MTU {}, port {}",
                 tap_->name(), tap_->ifindex(), mac[0], mac[1], mac[2], mac[3], mac[4], mac[5], cfg_.mtu, cfg_.port);
  addrs_ = std::make_unique<ipoib::AddrWatch>(io_, tap_->ifindex(),
                                              [this](bool added, const ipoib::IpAddr& a) { address_event(added, a); });
  if (auto r = addrs_->start(); !r) {
    logger()->warn("{}: no address watch (no RoCEv2 GIDs from its addresses): {}", cfg_.name, r.error().str());
    addrs_.reset();
  }
}

void NetdevService::port_opened(uint64_t ep, std::unique_ptr<eth::RawPort> p) {
  if (ep != epoch_) return eth::RawPort::close_async(std::move(p), [] {});
  qp_ = std::move(p);
  qp_->set_receiver([this](std::span<const uint8_t> f) { from_port(f); });
  qp_->set_slots_freed([this] { arm_tap_read(); });
  qp_->set_broken([this] {
    // The QP is in ERR (docs/simhca.md §12.4): another one, later (not
    // from inside its own completion handling: post).
    boost::asio::post(io_, [this, ep = epoch_, alive = std::weak_ptr<bool>(alive_)] {
      if (alive.expired() || ep != epoch_) return;
      go_down("the raw Ethernet QP failed", false);
      retry_later();
    });
  });
  state_ = State::kUp;
  if (tap_) (void)tap_->set_carrier(true);
  logger()->info("{}: up (raw QP {:#x} on port {})", cfg_.name, qp_->qpn(), cfg_.port);
  arm_tap_read();
}

void NetdevService::go_down(const char* why, bool device_gone) {
  const bool was_up = state_ == State::kUp;
  ++epoch_;
  state_ = State::kDown;
  if (tap_) (void)tap_->set_carrier(false);
  if (qp_) {
    if (device_gone) qp_.reset();  // its objects went with the device
    else eth::RawPort::close_async(std::move(qp_), [] {});
  }
  if (was_up) logger()->info("{}: down ({})", cfg_.name, why);
}

// A failure while the port may be Active: again in 5 s.
void NetdevService::retry_later() {
  retry_.expires_after(std::chrono::seconds(5));
  retry_.async_wait([this, alive = std::weak_ptr<bool>(alive_)](const boost::system::error_code& e) {
    if (!e && !alive.expired()) bring_up();
  });
}

bool NetdevService::on_cq_event(uint32_t cqn) { return qp_ && qp_->on_cq_event(cqn); }

void NetdevService::port_event(const hca::Event& e) {
  if (!started_ || e.kind != hca::Event::Kind::kPortState || e.port != cfg_.port) return;
  retry_.cancel();
  if (e.new_state == hca::kPortActive) {
    if (state_ == State::kBringingUp) go_down("restarted", false);  // it may have seen the port Down
    return bring_up();
  }
  if (state_ != State::kDown) go_down("the port left Active", false);
}

void NetdevService::device_lost() {
  go_down("device lost", true);
  retry_.cancel();
  device_ok_ = false;
  ++gid_epoch_;  // answers of the lost device's SET_GIDs are not the table's
  gid_busy_ = false;
  gids_.forget_device();
}

void NetdevService::device_back() {
  if (!started_) return;
  device_ok_ = true;
  sync_gids();  // INIT_HCA emptied the table: every address again
  bring_up();
}

// ---- data path --------------------------------------------------------------

void NetdevService::arm_tap_read() {
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
// queue holds them until completions free some (set_slots_freed).
void NetdevService::read_tap() {
  if (qp_) qp_->begin_batch();
  for (int i = 0; i < kReadsPerTurn; ++i) {
    if (state_ != State::kUp || !qp_ || qp_->slots_free() == 0) break;
    const ssize_t n = ::read(tap_->fd(), frame_.data(), frame_.size());
    if (n < 0) {
      if (errno != EAGAIN && errno != EINTR) ++c_.tap_read_errors;
      break;
    }
    const auto len = static_cast<size_t>(n);
    if (len < eth::kMinFrameBytes || len > eth::kMaxFrameBytes) {  // the cable would not carry it
      ++c_.drop_tx_too_big;
      continue;
    }
    if (auto r = qp_->send(std::span<const uint8_t>(frame_.data(), len)); !r) {
      ++c_.send_errors;
      continue;
    }
    ++c_.frames_out;
  }
  if (qp_) qp_->end_batch();  // one doorbell for the turn's sends
  arm_tap_read();
}

// The longest frame the interface takes now: its MTU (read again, at most
// once a second, when a longer frame comes: the user may have raised it)
// with the Ethernet header and a VLAN tag.
size_t NetdevService::max_rx_frame() { return size_t{mtu_} + kEthOverhead; }

void NetdevService::from_port(std::span<const uint8_t> frame) {
  if (!tap_) return;
  if (frame.size() > max_rx_frame()) {
    const auto now = std::chrono::steady_clock::now();
    if (now - mtu_read_ >= std::chrono::seconds(1)) {
      mtu_read_ = now;
      if (auto m = read_mtu(tap_->name())) mtu_ = *m;
    }
    if (frame.size() > max_rx_frame()) {  // as a NIC drops a giant
      ++c_.drop_rx_too_big;
      return;
    }
  }
  if (::write(tap_->fd(), frame.data(), frame.size()) != static_cast<ssize_t>(frame.size())) {
    if (errno == EIO) ++c_.drop_if_down;  // the kernel takes none while the interface is down
    else ++c_.tap_write_errors;
    return;
  }
  ++c_.frames_in;
}

// ---- addresses -> GIDs ------------------------------------------------------

void NetdevService::address_event(bool added, const ipoib::IpAddr& a) {
  auto g = eth::roce_gid_of(a);
  logger()->info("{}: address {} {}{}", cfg_.name, a.to_string(), added ? "added" : "removed",
                 g ? fmt::format(" (RoCEv2 GID {})", gid_text(*g)) : std::string(" (no GID)"));
  gids_.address(added, a);
  sync_gids();
}

// One SET_GID at a time (roce_gids.hpp): each answer asks for the next.
void NetdevService::sync_gids() {
  if (!device_ok_ || gid_busy_) return;
  auto s = gids_.next_step();
  if (!s) return;
  gid_busy_ = true;
  std::optional<hca::GidEntry> e;
  if (s->gid) e = hca::GidEntry{*s->gid, hca::GidType::kRoceV2};
  hca_.modify_gid_async(cfg_.port, s->index, e,
                        [this, step = *s, ge = gid_epoch_, alive = std::weak_ptr<bool>(alive_)](Result<void> r) {
                          if (alive.expired() || ge != gid_epoch_) return;
                          gid_busy_ = false;
                          if (!r) {
                            ++c_.gid_errors;
                            logger()->warn("{}: SET_GID {} {}: {}", cfg_.name, step.index,
                                           step.gid ? gid_text(*step.gid) : std::string("(remove)"), r.error().str());
                          }
                          gids_.done(step, r.ok());
                          sync_gids();
                        });
}

// ---- ibdctl ------------------------------------------------------------------

std::vector<std::pair<std::string, uint64_t>> NetdevService::counter_list() const {
  std::vector<std::pair<std::string, uint64_t>> v = {
      {"netdev.frames_in", c_.frames_in},
      {"netdev.frames_out", c_.frames_out},
      {"netdev.drop_rx_too_big", c_.drop_rx_too_big},
      {"netdev.drop_tx_too_big", c_.drop_tx_too_big},
      {"netdev.drop_if_down", c_.drop_if_down},
      {"netdev.send_errors", c_.send_errors},
      {"netdev.tap_write_errors", c_.tap_write_errors},
      {"netdev.tap_read_errors", c_.tap_read_errors},
      {"netdev.bring_ups", c_.bring_ups},
      {"netdev.up", state_ == State::kUp ? 1u : 0u},
      {"netdev.gids", gids_.programmed().size()},
      {"netdev.gids_written", gids_.counters().written},
      {"netdev.gids_removed", gids_.counters().removed},
      {"netdev.gid_errors", c_.gid_errors},
      {"netdev.gid_table_full", gids_.counters().table_full},
  };
  if (qp_) {
    const auto& q = qp_->counters();
    v.emplace_back("netdev.qp_sent", q.sent);
    v.emplace_back("netdev.qp_received", q.received);
    v.emplace_back("netdev.qp_send_errors", q.send_errors);
    v.emplace_back("netdev.qp_recv_errors", q.recv_errors);
    v.emplace_back("netdev.qp_no_send_slot", q.no_send_slot);
  }
  return v;
}

}  // namespace openib::ibd
