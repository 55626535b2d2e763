// ibd's user-MAD service (docs/umad.md, docs/client-protocol.md "User
// MADs"): what the kernel's ib_umad gives a process through
// /dev/infiniband/umadN, given to libibumad.so.3 clients instead. A client
// opens a port (UMAD_OPEN) and gets a SOCK_SEQPACKET "MAD socket" that
// carries the kernel's read/write format (struct ib_user_mad, then the MAD
// or RMPP message), a message longer than one datagram in pieces
// (clientproto/mad_socket.hpp); it registers agents (UMAD_REGISTER), which
// become agents of the port's MAD layer (src/mad/layer.hpp: TIDs,
// timeouts, retries, RMPP).
//
// The issm file (`<socket minus .sock>.issm<port>`, see umad_get_issm_path):
// while some process holds it open, the port's CapabilityMask has IsSM
// (watched with inotify, so a killed SM drops it too). Created anew by ibd,
// mode 0600 (root's, as /dev/infiniband/issmN), never through a symlink.
//
// Privileges (docs/operations.md "Privileges"), as ib_umad's device files
// give them: UMAD_OPEN needs root or CAP_NET_ADMIN; with `user_gmp`
// (--umad-user-access=gmp) other users may open too, for GMPs on QP1 only:
// registering an SMP class (0x01, 0x81) is EPERM for them, and an SMP or a
// MAD to QP0 written on their MAD socket is dropped (counted) and comes
// back with status EPERM.
//
// Device loss (docs/operations.md §5, docs/umad.md "Device loss"): the
// service outlives the device. device_lost() drops the MAD layers (QP0/QP1
// went with the device) but keeps the sessions, their MAD sockets and
// their agents; meanwhile a send comes back at once with status EIO (a
// response is dropped, counted), reads simply wait, registrations are
// recorded. device_back() opens the layers of the ports in use again,
// registers every agent on them and gives the ports held by an issm file
// IsSM again.
//
// Single-threaded on ibd's io_context.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "clientproto/mad_socket.hpp"
#include "clientproto/socket.hpp"
#include "common/fd.hpp"
#include "hca/device.hpp"
#include "ibd/service.hpp"
#include "mad/layer.hpp"

namespace openib::ibd {

struct UmadCounters {
  uint64_t opens = 0, sent = 0, send_errors = 0, delivered = 0, dropped = 0, bad_client_mads = 0;
  uint64_t denied = 0;  // opens, registrations and MADs refused for want of privilege
  uint64_t sends_without_device = 0;  // MADs written while the device was away (EIO)
  uint64_t reregistered = 0;          // agents registered again on a device that came back
  uint64_t bad_pieces = 0;            // pieces out of sequence or malformed, dropped (§10.1)
  uint64_t pieces_in = 0, pieces_out = 0;  // messages that crossed the MAD socket in pieces
};

class UmadService final : public Service {
 public:
  // `socket_path` names the issm files. The MAD ports are opened lazily, on
  // the first UMAD_OPEN of a port.
  UmadService(boost::asio::io_context& io, hca::Device& hca, std::string socket_path, uint8_t num_ports,
              bool user_gmp = false);
  ~UmadService() override;

  std::string_view service_name() const override { return "umad"; }
  // UMAD_PORT, UMAD_OPEN, UMAD_REGISTER, UMAD_UNREGISTER (umad_requests.cpp).
  std::vector<proto::Op> ops() const override;
  Result<void> handle(const Caller& c, proto::Message& m, Respond& done) override;

  // Client requests (the client's id is ibd's connection id).
  // QUERY_PORT, asynchronous (called from a request handler).
  void port_info_async(uint8_t port, hca::Completer<Result<proto::UmadPortRep>> done);
  // UMAD_OPEN: `done` gets the client's end of the MAD socket. The port's
  // first open brings its QP0/QP1 up (asynchronously, a chain of device
  // commands); opens arriving meanwhile wait for that one opening.
  // `privileged`: the client is root or has CAP_NET_ADMIN (peer.hpp).
  void open_async(uint32_t client, uint8_t port, bool privileged, hca::Completer<Result<UniqueFd>> done);
  Result<uint32_t> register_agent(uint32_t client, const proto::UmadRegReq& r);
  Result<void> unregister_agent(uint32_t client, uint32_t agent);
  // The client's connection closed: its MAD sockets and agents go.
  void client_gone(uint32_t client) override;

  // The device is gone (before the HCA is closed): the MAD layers go, no
  // device command is issued; sessions and agents stay.
  void device_lost() override;
  // The device is back (HCA reopened): layers reopened for the ports in
  // use, agents registered again, IsSM applied again.
  void device_back() override;

  // A completion event on CQ `cqn`: true if it was one of ours.
  bool on_cq_event(uint32_t cqn) override;

  // ibd's own users of a port's MAD layer (the SA client, sa_service.hpp):
  // `w` is called with the layer whenever it is open (now, if it is; the
  // port's layer is opened for it if not) and with nullptr when it goes
  // with the device (after its requests in flight came back with EIO).
  // The watcher must outlive the service or be gone before it calls.
  using LayerWatcher = std::function<void(mad::MadLayer*)>;
  void watch_layer(uint8_t port, LayerWatcher w);

  // Per agent, applied to each port's MAD layer (docs/operations.md "Limits").
  void set_max_outstanding(uint32_t n) { max_outstanding_ = n; }
  // An Ethernet port's MAD destination MACs (mad::MadPort, docs/arp.md "RoCE destinations").
  void set_dmac_lookup(mad::DmacLookup f) { dmac_ = std::move(f); }

  std::string issm_path(uint8_t port) const;
  bool is_sm(uint8_t port) const;
  const UmadCounters& counters() const { return counters_; }
  // Flat name -> value pairs for INFO's counters (ibdctl counters).
  std::vector<std::pair<std::string, uint64_t>> counter_list() const override;

 private:
  Result<Reply> handle_sync(const Caller& c, proto::Message& m, Respond& done);
  struct Agent {  // one UMAD_REGISTER: kept across a device loss
    mad::AgentSpec spec;
    uint32_t key = 0;  // the MAD layer's agent; 0: not registered on the current layer
  };

  struct Outgoing {  // a message for the client, `sent` bytes of it written
    std::vector<std::byte> bytes;
    uint32_t id = 0;
    size_t sent = 0;
  };

  struct Session {  // one UMAD_OPEN
    uint32_t client = 0;
    uint8_t port = 0;
    bool privileged = false;  // QP0 and SMP classes allowed
    std::unique_ptr<boost::asio::posix::stream_descriptor> sock;  // ibd's end
    std::map<uint32_t, Agent> agents;  // by umad agent id
    uint32_t next_agent = 0;
    proto::madsock::Reassembler in;    // what the client writes (§10.1)
    std::deque<Outgoing> out;          // what it has not read yet
    size_t out_bytes = 0;
    uint32_t next_out_id = 0;
    bool write_waiting = false;        // a wait for room on the socket is armed
  };

  struct Waiter {  // a UMAD_OPEN waiting for its port's layer
    uint32_t client = 0;
    bool privileged = false;
    hca::Completer<Result<UniqueFd>> done;
  };

  Result<mad::MadLayer*> layer(uint8_t port);  // an open layer, or ENODEV
  void open_layer(uint8_t port);
  void fail_waiters(uint8_t port, const Error& e);
  void on_layer_open(uint8_t port, Result<std::unique_ptr<mad::MadLayer>> l);
  Result<uint32_t> attach(Session& s, uint32_t id, mad::MadLayer& l);
  void set_is_sm(uint8_t port, bool set);
  Result<UniqueFd> new_session(uint32_t client, uint8_t port, bool privileged);
  void watch(Session& s);
  void on_client_mad(Session& s, std::span<const std::byte> msg);
  void deliver(uint32_t client, uint8_t port, uint32_t agent, const mad::Delivery& d);
  void flush(Session& s);
  size_t partial_bytes() const;  // held by all the sessions for messages in progress
  void close_session(Session* s);
  void setup_issm();
  void on_inotify();
  Session* find_session(uint32_t client, uint8_t port);

  boost::asio::io_context& io_;
  hca::Device& hca_;
  std::string socket_path_;
  uint8_t num_ports_;
  bool user_gmp_;
  std::map<uint8_t, std::unique_ptr<mad::MadLayer>> layers_;
  std::map<uint8_t, std::vector<LayerWatcher>> watchers_;
  std::map<uint8_t, std::vector<Waiter>> opening_;  // UMAD_OPENs waiting for their port's layer
  std::set<uint8_t> layer_opening_;                  // ports whose layer is being opened
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);  // for the opening's continuation
  std::vector<std::unique_ptr<Session>> sessions_;
  std::vector<std::byte> rx_;  // one datagram from a client
  // issm: the inotify fd, the watch per port, how many opens are live.
  UniqueFd inotify_;
  std::unique_ptr<boost::asio::posix::stream_descriptor> inotify_sd_;
  std::map<int, uint8_t> issm_watch_;
  std::map<uint8_t, int> issm_opens_;
  UmadCounters counters_;
  uint32_t max_outstanding_ = 0;
  mad::DmacLookup dmac_;
  bool device_up_ = true;
  uint64_t generation_ = 0;  // + 1 per device loss: a layer opened for an older device is dropped
};

}  // namespace openib::ibd
