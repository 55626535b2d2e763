// IPoIB over a TAP interface in ibd (docs/ipoib.md; issue 16): the glue
// between the bridge (src/ipoib_tap/bridge.hpp: the translation, no I/O),
// the TAP device, ibd's own UD QP (src/ipoib_tap/ud_port.hpp), the SA
// service (broadcast and multicast joins, paths, ATS ServiceRecords) and
// rtnetlink's address events (src/ipoib_tap/addr_watch.hpp).
//
// Bring-up, each time the port becomes Active (and at start when it is):
//  1. QUERY_PORT: the port's GID, LID, P_Key at index 0 (the configured
//     P_Key must be it: only index 0 is used), active MTU;
//  2. join the broadcast group ff12:401b:<pkey>::ffff:ffff (RFC 4391 §5)
//     as FullMember; when the SA does not have it, join again creating it
//     with Q_Key 0x0b1b, the port's MTU, SL 0 (what Linux's ipoib does);
//  3. open the UD QP with the group's Q_Key and attach it to the group;
//     an address handle for the group (MLID, SL, rate, GRH to the MGID);
//  4. the TAP interface is created the first time (its MAC: the bridge's
//     derive_mac of the interface's address; its MTU: the group's MTU - 4)
//     and its carrier turned on. Then IP addresses are watched and each
//     gets an ATS ServiceRecord (src/ipoib_tap/ats.hpp).
// Carrier goes off when the port leaves Active, the device is lost, or
// the broadcast join fails; the QP is closed, the groups left, and all of
// it done again at the next Active. An SM change or ClientReregister
// rejoins through the SA service (IBA 14.4.11); a group answered with a
// new MLID is attached again (set_mcast_change_handler).
//
// Data path (on ibd's loop): the TAP fd is read while the QP has free send
// slots (no drop when the fabric is slower: the kernel's queue holds the
// frames); receives are written to the TAP as they complete.
//
// Single-threaded on ibd's io_context.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "hca/device.hpp"
#include "ibd/ipoib_cm.hpp"
#include "ibd/service.hpp"
#include "ibd/sa_service.hpp"
#include "ipoib_tap/addr_watch.hpp"
#include "ipoib_tap/ats.hpp"
#include "ipoib_tap/bridge.hpp"
#include "ipoib_tap/tap_device.hpp"
#include "ipoib_tap/ud_port.hpp"

namespace openib::ibd {

struct IpoibConfig {
  std::string name;        // the TAP interface's name; empty: IPoIB off
  uint16_t pkey = 0xFFFF;  // with the full-member bit
  uint8_t port = 1;
  uint32_t qkey = 0x0b1b;  // the broadcast group's when ibd creates it (Linux's ipoib's)
  bool connected = false;  // connected mode (RFC 4755; docs/ipoib.md "Connected mode"), else datagram mode
};

// The owner of IPoIB's joins and registrations in the SA service (client
// ids start at 1 and count up).
inline constexpr uint32_t kIpoibOwner = 0xFFFFFFF0u;

class IpoibService final : public Service, private ipoib::BridgeIo {
 public:
  IpoibService(boost::asio::io_context& io, hca::Device& hca, SaService& sa, IpoibConfig cfg);
  ~IpoibService() override;
  IpoibService(const IpoibService&) = delete;
  IpoibService& operator=(const IpoibService&) = delete;

  std::string_view service_name() const override { return "ipoib"; }
  // IPOIB_INFO.
  std::vector<proto::Op> ops() const override { return {proto::Op::kIpoibInfo, proto::Op::kIpoibSetMode}; }
  Result<void> handle(const Caller& c, proto::Message& m, Respond& done) override;

  // The IB CM service, for connected mode (before start()).
  void set_cm(CmService* cm);
  // Connected or datagram mode, now (ibdctl ipoib mode, IPOIB_SET_MODE):
  // the TAP's MTU becomes 65520 or the broadcast group's - 4, as Linux's
  // `echo connected > /sys/class/net/ib0/mode` sets it.
  void set_mode(bool connected);
  bool connected_mode() const { return cfg_.connected; }
  // Brings the interface up if the port is Active already.
  void start();
  // ibd stops: carrier off, the QP closed (synchronously is not allowed:
  // the objects go with TEARDOWN_HCA), ATS records and joins left.
  void stop();

  // From the server's event routing (service.hpp).
  bool on_cq_event(uint32_t cqn) override;
  void port_event(const hca::Event& e) override;  // its port's state changes
  void port_state(uint8_t port, uint8_t state);
  void device_lost() override;
  void device_back() override;

  // For the RDMA CM's address resolution (docs/arp.md): the interface's
  // index (0 before it exists), the port, its GID 0 and P_Key, the
  // broadcast group's Q_Key (0 while down), and the GID behind a
  // neighbour's MAC.
  int ifindex() const { return tap_ ? tap_->ifindex() : 0; }
  uint8_t port() const { return cfg_.port; }
  std::array<uint8_t, 16> port_gid() const;
  uint16_t pkey() const { return cfg_.pkey; }
  uint32_t qkey() const { return state_ == State::kUp ? bcast_.qkey : 0; }
  std::optional<std::array<uint8_t, 16>> gid_of_mac(std::span<const uint8_t> mac) const;

  // For INFO and `ibdctl ipoib`: the interface, neighbours, groups and
  // counters as JSON text.
  // At most max_bytes: neighbours past that are left out ("truncated").
  std::string json(size_t max_bytes = SIZE_MAX) const;
  std::vector<std::pair<std::string, uint64_t>> counter_list() const override;

 private:
  enum class State { kDown, kBringingUp, kUp };
  struct Group {
    uint16_t mlid = 0;
    uint32_t ahn = 0;
    bool have_ah = false;
    bool attached = false;
    bool full = false;
  };
  struct Neighbour {
    uint32_t ahn = 0;
    uint16_t dlid = 0;
    std::array<uint8_t, 64> record{};  // its PathRecord, for connected mode's REQ
  };

  // ipoib::BridgeIo
  void send_ud(const ipoib::UdDest& to, std::span<const uint8_t> packet) override;
  void write_tap(std::span<const uint8_t> frame) override;
  void resolve_path(const ipoib::Gid& gid) override;
  void join(const ipoib::Gid& mgid, bool send_only) override;
  void leave(const ipoib::Gid& mgid) override;
  bool rc_usable(const ipoib::HwAddr& a) override;
  bool send_rc(const ipoib::HwAddr& a, std::span<const uint8_t> packet) override;
  // Connected mode on (the link's flag and the TAP's MTU follow when it is ready) or off.
  void start_connected();
  void link_changed();

  void bring_up();
  void joined_broadcast(uint64_t epoch, const hca::PortAttr& pa, Result<sa::McMemberRecord> r, bool created);
  void port_opened(uint64_t epoch, std::unique_ptr<ipoib::UdPort> p);
  // keep_qp: the port only left Active; the UD QP is parked, to be taken
  // again at the next bring-up when its configuration still fits, so that
  // our QPN, and with it our 20-byte address and MAC, outlive a link flap
  // (as Linux's ipoib_ib_dev_stop/open keep the QP).
  void go_down(const char* why, bool device_gone, bool keep_qp = false);
  void group_ready(uint64_t epoch, const ipoib::Gid& mgid, const sa::McMemberRecord& rec, bool full,
                   std::function<void(bool)> done);
  void mcast_changed(uint8_t port, const sa::McMemberRecord& rec);
  void path_changed(const ipoib::Gid& gid);
  void sync_kernel_groups();
  void arm_tap_read();
  void read_tap();
  void address_event(bool added, const ipoib::IpAddr& a);
  hca::AddressVector group_av(const sa::McMemberRecord& rec) const;
  void destroy_ah(uint32_t ahn);

  boost::asio::io_context& io_;
  hca::Device& hca_;
  SaService& sa_;
  IpoibConfig cfg_;
  State state_ = State::kDown;
  uint64_t epoch_ = 0;  // bumped at each bring-up and go_down(): late answers of an old one are dropped
  hca::PortAttr port_{};
  sa::McMemberRecord bcast_{};
  std::unique_ptr<ipoib::UdPort> qp_;
  ipoib::UdPortConfig qp_cfg_;              // what qp_ was opened with
  std::unique_ptr<ipoib::UdPort> parked_;  // go_down(keep_qp): qp_ while the port is down
  ipoib::UdPortConfig parked_cfg_;
  std::unique_ptr<IpoibCm> cm_;
  bool cm_ready_ = false;  // connected mode's listener is up: the link offers it
  std::optional<ipoib::TapDevice> tap_;
  std::unique_ptr<boost::asio::posix::stream_descriptor> tap_sd_;
  bool tap_waiting_ = false;  // an async_wait on the TAP fd is out
  std::unique_ptr<ipoib::Bridge> bridge_;
  std::unique_ptr<ipoib::AddrWatch> addrs_;
  ipoib::AtsSlots ats_slots_;
  std::map<ipoib::Gid, Group> groups_;
  std::map<ipoib::Gid, Neighbour> neighbours_;
  std::vector<uint8_t> frame_;  // one TAP read
  boost::asio::steady_timer retry_;
  uint64_t tap_write_errors_ = 0, tap_read_errors_ = 0, send_errors_ = 0, bring_ups_ = 0, ats_errors_ = 0;
  uint64_t ud_qp_kept_ = 0;  // bring-ups that took the parked UD QP back (same QPN)
  uint64_t ats_registered_ = 0;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace openib::ibd
