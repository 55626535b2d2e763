// ibd's services (docs/operations.md "Services"): the user-MAD service, the
// SA client, IPoIB, the IB CM and the RDMA CM, each registered with the
// ServiceRegistry as Linux's ib_core registers its clients (ib_client). The
// Server knows them only through this interface: the client-protocol
// requests each serves, and the events of the device's and the clients'
// lives, each told to every service.
#pragma once

#include <sys/types.h>

#include <cstring>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "clientproto/messages.hpp"
#include "clientproto/socket.hpp"
#include "common/fd.hpp"
#include "common/result.hpp"
#include "hca/completer.hpp"
#include "hca/device.hpp"

namespace openib::ibd {

// Who asks (peer.hpp: the connection's SO_PEERCRED and capabilities).
struct Caller {
  uint32_t id = 0;  // the client connection
  uid_t uid = 0;
  bool net_admin = false;  // root or CAP_NET_ADMIN
  // Root or CAP_NET_ADMIN: management requests, other users' objects.
  bool privileged() const { return uid == 0 || net_admin; }
};

// A request's reply: its body and the fds that go with it.
struct Reply {
  proto::Bytes payload;
  std::vector<UniqueFd> fds;
  // A reply of UTF-8 text (INFO, CM_INFO, CMA_INFO, ...).
  static Reply text(std::string_view t) {
    Reply r;
    r.payload.resize(t.size());
    if (!t.empty()) std::memcpy(r.payload.data(), t.data(), t.size());
    return r;
  }
  // A reply of one message.
  template <class M>
  static Reply of(const M& m) {
    return Reply{proto::encode(m), {}};
  }
};
using Respond = hca::Completer<Result<Reply>>;

// A request carries exactly `n` fds (docs/client-protocol.md §3).
Result<void> expect_fds(const proto::Message& m, size_t n);

// The clients' QPs, through the Server (the CM and the RDMA CM move them as
// MODIFY_QP would): lookup (QPN, type, state of a client's handle) and modify.
struct ClientQpInfo {
  uint32_t qpn = 0;
  uint8_t type = 0;   // 0 RC, 1 UC, 2 UD
  uint8_t state = 0;  // as last set or seen
};
struct ClientQps {
  std::function<Result<ClientQpInfo>(uint32_t client, uint32_t handle)> lookup;
  // The handle of the client's own QP with that number (ENOENT: it has none;
  // another client's QP is never found).
  std::function<Result<uint32_t>(uint32_t client, uint32_t qpn)> handle_of;
  std::function<void(uint32_t client, uint32_t handle, uint32_t mask, const hca::QpAttr& a,
                     hca::Completer<Result<void>> done)>
      modify;
  // Several transitions in order (hca::Device::modify_qp_chain_async); the
  // steps must need no neighbour lookup (no Ethernet AV). Unset: `modify`
  // one step after the other.
  std::function<void(uint32_t client, uint32_t handle, std::vector<hca::QpChange> steps,
                     hca::Completer<Result<void>> done)>
      modify_chain;
};

class Service {
 public:
  virtual ~Service() = default;
  virtual std::string_view service_name() const = 0;

  // The client-protocol operations it serves, and one of them served: as
  // the Server's own handlers, `done` handed on (to a continuation, or
  // called) and ok() returned, or an error returned with `done` unused.
  virtual std::vector<proto::Op> ops() const { return {}; }
  virtual Result<void> handle(const Caller& c, proto::Message& m, Respond& done);

  // A client connection closed: what it owns here goes.
  virtual void client_gone(uint32_t /*client*/) {}
  // An unaffiliated event of the device (a port's state, LID, SM, P_Key
  // or GID change); affiliated ones are the owner's, through the Server.
  virtual void port_event(const hca::Event& /*e*/) {}
  // A completion event of a CQ: true if the CQ is this service's own.
  virtual bool on_cq_event(uint32_t /*cqn*/) { return false; }
  // The device is gone (its objects with it: nothing to destroy), and back.
  virtual void device_lost() {}
  virtual void device_back() {}
  // Its counters for INFO, as "name", value.
  virtual std::vector<std::pair<std::string, uint64_t>> counter_list() const { return {}; }
};

// The services of one device, in registration order (a service after the
// ones it uses: the RDMA CM after the IB CM). Events of the device's life
// coming back go in that order; those of something leaving (a client, the
// device) in reverse, users before what they use, as Linux removes its
// ib_clients.
class ServiceRegistry {
 public:
  // Its operations become its own; an operation already served by another
  // service is a programming error (std::logic_error).
  void add(Service& s);
  // The service serving `op`, or nullptr.
  Service* serving(proto::Op op) const;
  const std::vector<Service*>& in_order() const { return services_; }

  void client_gone(uint32_t client) const;
  void port_event(const hca::Event& e) const;
  bool on_cq_event(uint32_t cqn) const;
  void device_lost() const;
  void device_back() const;
  std::vector<std::pair<std::string, uint64_t>> counter_list() const;

 private:
  std::vector<Service*> services_;
  std::vector<std::pair<proto::Op, Service*>> ops_;
};

}  // namespace openib::ibd
