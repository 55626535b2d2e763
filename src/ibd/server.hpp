// ibd's client server (docs/client-protocol.md): the listening socket, one
// Client per connection, request validation and dispatch to the HCA
// driver, per-client object tables and their teardown, asynchronous events
// routed to their owners, INFO. Single-threaded on one io_context.
#pragma once

#include <cstring>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>

#include "clientproto/socket.hpp"
#include "hca/device.hpp"
#include "ibd/client.hpp"
#include "ibd/device_status.hpp"
#include "ibd/quota.hpp"
#include "ibd/service.hpp"

namespace openib::ibd {

struct ServerOptions {
  std::string socket;
  mode_t socket_mode = 0666;
  std::string socket_group;
  std::string device_name;  // the device's spec and how it is reached, for logs and INFO
  Limits limits;            // quota.hpp
  // Its name for clients (QUERY_DEVICE, INFO; docs/client-protocol.md §2.1),
  // and every device the daemon serves, as INFO lists them.
  std::string name = "simhca0";
  std::vector<std::pair<std::string, std::string>> all_devices;  // name, socket
};

struct ServerCounters {
  uint64_t connects = 0, disconnects = 0, requests = 0, errors = 0;
  uint64_t protocol_violations = 0, events = 0, events_dropped = 0;
  uint64_t cq_notifications = 0;
  uint64_t quarantined_mappings = 0;  // kept mapped: the device refused to let go
  uint64_t created_for_gone_client = 0;  // completions that found their client gone: undone
  uint64_t health_checks = 0, health_failures = 0;
  uint64_t device_losses = 0;  // device_lost() calls
  uint64_t connections_refused_peercred = 0;   // SO_PEERCRED failed (peer.hpp)
  uint64_t connections_refused_uid_limit = 0;  // per-uid connection limit (quota.hpp)
  uint64_t hello_timeouts = 0;
};

// Device recovery (docs/operations.md §5): Running -> Dead -> Restarting ->
// Running; main.cpp drives it, the Server serves clients accordingly.
enum class DeviceState : uint8_t { kRunning, kDead, kRestarting };
const char* device_state_name(DeviceState s);

class Server {
 public:
  Server(boost::asio::io_context& io, hca::Device& hca, ServerOptions opts);
  ~Server();

  // Creates the socket (parent directory, stale socket removed unless a
  // daemon answers on it), sets its mode and group, starts accepting.
  Result<void> start();
  // Stops accepting, disconnects every client (destroying what it owned),
  // removes the socket. Idempotent.
  void stop();
  // Called once when the device is seen gone (a command failed with the
  // device dead, or the health check failed).
  void set_on_device_gone(std::function<void()> f) { on_device_gone_ = std::move(f); }
  // Tells every client the device is gone (DEVICE_FATAL event).
  void notify_device_fatal();
  // The device is gone and ibd will bring it up again (Running -> Dead):
  // fences the command interface (requests waiting for the device get
  // ENODEV), queues DEVICE_FATAL for every client that said HELLO and wakes
  // its eventfds, forgets every client object, mapping and quarantined
  // mapping without a device command, and marks those clients stale.
  // Requests of clients without HELLO wait until device_back().
  void device_lost();
  void set_device_state(DeviceState s) { device_state_ = s; }
  // The HCA is up again (-> Running): generation + 1, waiting clients served.
  void device_back();
  DeviceState device_state() const { return device_state_; }
  uint64_t device_generation() const { return generation_; }
  // The device's services (service.hpp): the requests they serve, and the
  // events of the device's and the clients' lives. May stay unset (then
  // only the Server's own requests are served).
  void set_services(const ServiceRegistry* s) { services_ = s; }
  // The server's QP operations for the IB CM and the RDMA CM.
  ClientQps qp_ops();
  // A RoCE port's destination MACs for unicast IP GIDs (docs/arp.md "RoCE
  // destinations"): CREATE_AH, MODIFY_QP with an AV and qp_ops().modify
  // fill in an address vector's dmac with it. ENODEV: the port has no
  // netdev (an InfiniBand port): the AV goes as it is.
  using DmacLookup = std::function<Result<std::array<uint8_t, 6>>(uint8_t port, const std::array<uint8_t, 16>& dgid)>;
  void set_dmac_lookup(DmacLookup f) { dmac_lookup_ = std::move(f); }
  // A cached path changed (the SA service's path-change handler): every
  // client that looks paths up is told (PATH_CHANGED).
  void on_path_change(uint8_t port, uint16_t pkey, const std::array<uint8_t, 16>& dgid);

  size_t num_clients() const { return clients_.size(); }
  // Clients disconnected whose objects are still being destroyed.
  size_t num_departing() const { return departing_.size(); }
  const ServerCounters& counters() const { return counters_; }

 private:
  struct Owner {
    uint32_t client = 0, handle = 0;
  };

  void accept_next();
  void on_acceptable();
  void watch(uint32_t id);
  void on_readable(uint32_t id);
  // Sends the reply of the client's current request and resumes reading
  // its socket; for a client that left meanwhile, continues its teardown.
  void finish(uint32_t id, proto::Header h, Result<Reply> r);
  void disconnect(uint32_t id, const std::string& why);
  void on_hello_deadline(uint32_t id);
  // A connected client, or nullptr. Continuations look clients up by id.
  Client* client(uint32_t id);
  // A connected client or one that left and is still being torn down.
  Client* owner(uint32_t id);
  void check_device();
  void device_is_gone();
  // Wraps a continuation so that it does nothing once the Server is gone.
  template <class T, class F>
  hca::Completer<Result<T>> guard(F f);

  // Validation and dispatch of one request; `done` gets the reply (or
  // error), at once or after the device command it issued completed.
  void handle(Client& c, proto::Message& m, Respond done);
  // Handlers that issue a device command return ok() after handing `done`
  // to the command's continuation; a validation error is returned with
  // `done` still unused.
  Result<void> op_hello(Client& c, proto::Message& m, Respond& done);
  // The status page of the serving device generation (made on first use)
  // re-opened read-only for one client; retire_status_page() marks it lost
  // (docs/client-protocol.md §6.2).
  Result<UniqueFd> status_fd();
  void retire_status_page();
  Result<Reply> op_query_device(Client& c, proto::Message& m);
  Result<void> op_query_port(Client& c, proto::Message& m, Respond& done);
  Result<void> op_alloc_pd(Client& c, proto::Message& m, Respond& done);
  Result<Reply> op_map_mem(Client& c, proto::Message& m);
  Result<Reply> op_map_mem_shared(Client& c, proto::Message& m);
  Result<void> op_reg_mr(Client& c, proto::Message& m, Respond& done);
  Result<void> op_create_cq(Client& c, proto::Message& m, Respond& done);
  Result<void> op_create_srq(Client& c, proto::Message& m, Respond& done);
  Result<void> op_modify_srq(Client& c, proto::Message& m, Respond& done);
  Result<void> op_create_qp(Client& c, proto::Message& m, Respond& done);
  Result<void> op_modify_qp(Client& c, proto::Message& m, Respond& done);
  Result<void> op_query_qp(Client& c, proto::Message& m, Respond& done);
  Result<void> op_create_ah(Client& c, proto::Message& m, Respond& done);
  Result<void> op_destroy(Client& c, proto::Message& m, Kind k, Respond& done);
  Result<Reply> op_get_async_events(Client& c, proto::Message& m);
  Result<void> op_info(Client& c, proto::Message& m, Respond& done);
  // The continuation of a command that created an object `o` (its number
  // filled in from the result) for client `id`: the object is added to the
  // client's table, also when the client left meanwhile (its teardown then
  // destroys it with the rest, while the memory it uses is still mapped).
  hca::Completer<Result<uint32_t>> created(uint32_t id, Object o, Respond done);

  // Object tables.
  Result<Object*> find(Client& c, uint32_t handle, Kind k);
  Result<uint64_t> range_iova(const Object& mem, uint64_t offset, uint64_t size, uint64_t align,
                              const char* what);
  uint32_t add(Client& c, Object o);
  // After the device-side destroy (result `r`; memory needs none): the
  // entry erased and its references dropped. If the device refused, the
  // mappings the object used are quarantined (the device may still reach
  // them).
  void drop(Client& c, uint32_t handle, const Result<void>& r);
  // Asynchronous teardown of a departed client, in dependency order (QPs,
  // SRQs, CQs, AHs, MRs, PDs, memory, UAR): each step's destroys are issued
  // together, the next step starts when they completed, memory is unmapped
  // only after everything that used it is destroyed.
  void continue_teardown(uint32_t id);

  // Events (the driver's, IBA 11.6.3 -> the client's queue).
  void on_event(const hca::Event& e);
  void on_cq_event(uint32_t cqn);
  void queue_event(Client& c, proto::AsyncEvent ev);
  void signal_fd(int fd);

  // `ports[i]`: port i + 1 as QUERY_PORT returned it (nullopt: failed).
  nlohmann::json info_counters() const;
  std::string info_with_clients(nlohmann::json j, const Client& asker, uint32_t flags,
                                std::chrono::steady_clock::time_point now) const;
  std::string info_json(const Client& asker, uint32_t flags,
                        const std::vector<std::optional<hca::PortAttr>>& ports);
  // INFO's QUERY_PORTs, one after another, each a continuation; then the reply.
  void info_ports(uint32_t id, uint32_t flags, std::vector<std::optional<hca::PortAttr>> got, Respond done);

  boost::asio::io_context& io_;
  hca::Device& hca_;
  ServerOptions opts_;
  std::unique_ptr<boost::asio::posix::stream_descriptor> listener_;
  boost::asio::steady_timer health_;
  boost::asio::steady_timer accept_retry_;  // after EMFILE/ENFILE
  std::map<uint32_t, std::unique_ptr<Client>> clients_;
  std::map<uint32_t, std::unique_ptr<Client>> departing_;  // disconnected, objects being destroyed
  uint32_t next_client_ = 1;
  std::unordered_map<uint32_t, Owner> cq_owner_, qp_owner_, srq_owner_;
  std::vector<dma::DmaMapping> quarantine_;
  ServerCounters counters_;
  Quota quota_;
  HelloDeadlines hello_deadlines_;
  std::chrono::steady_clock::time_point started_;
  std::chrono::steady_clock::time_point last_activity_;
  std::function<void()> on_device_gone_;
  DmacLookup dmac_lookup_;
  Result<hca::AddressVector> with_dmac(hca::AddressVector av);
  void modify_when_resolved(uint32_t id, uint32_t handle, uint32_t mask, hca::QpAttr a,
                            hca::Completer<Result<void>> done, unsigned tries);
  const ServiceRegistry* services_ = nullptr;
  bool device_gone_ = false;
  DeviceState device_state_ = DeviceState::kRunning;
  uint64_t generation_ = 1;  // +1 each time the device comes back
  std::unique_ptr<DeviceStatusPage> status_;  // of generation_; none until a HELLO wants it
  bool stopped_ = false;
  bool health_in_flight_ = false;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);  // for continuations
};

template <class T, class F>
hca::Completer<Result<T>> Server::guard(F f) {
  return [alive = std::weak_ptr<bool>(alive_), f = std::move(f)](Result<T> r) mutable {
    if (!alive.expired()) f(std::move(r));
  };
}

}  // namespace openib::ibd
