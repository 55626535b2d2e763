// The sockets of the process, waiting, and the CM service thread: the
// RDMA CM's events of every socket, handled as rdma-core's rsockets do
// (its connection state machine; wire.hpp for the private data):
//   active:  ADDR_RESOLVED -> resolve route -> ROUTE_RESOLVED -> endpoint,
//            connect with our ConnData -> ESTABLISHED (the peer's ConnData)
//            -> connected; timeouts of address and route resolution are
//            retried with doubling timeouts (1 s .. 64 s), other failures
//            are the socket's SO_ERROR.
//   passive: CONNECT_REQUEST on a listener -> a new socket with the
//            listener's options, its endpoint, accept with our ConnData ->
//            ESTABLISHED -> the listener's accept queue (raccept).
//   either:  DISCONNECTED -> both directions closed (the peer's rclose or
//            its death; the peer's DISCONNECT message usually came first).
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <map>
#include <shared_mutex>
#include <thread>

#include "abi/rdmacm/objects.hpp"
#include "abi/rdmacm/rsocket/datagram.hpp"
#include "abi/rdmacm/rsocket/socket.hpp"

namespace openib::rsocket {

namespace {

// Never destroyed: the service thread runs until the process ends, after
// main() returns and static objects go too.
struct Service {
  std::mutex mu;  // the channels, and CM calls of the service
  std::shared_mutex reg_mu;  // the sockets: found by every call, changed rarely
  std::map<int, SocketPtr> sockets;
  std::vector<std::weak_ptr<ChannelRef>> channels;
  struct Udp {
    std::weak_ptr<Socket> socket;
    int fd;  // its UDP socket (valid while the socket is not closed)
  };
  std::vector<Udp> udp;  // datagram sockets
  int wake = -1;  // eventfd: the channel set changed
  std::once_flag started;
};
Service& svc = *new Service;
std::mutex& svc_mu = svc.mu;
std::map<int, SocketPtr>& sockets = svc.sockets;

SocketPtr listener_of(const Socket& l) {
  std::shared_lock lk(svc.reg_mu);
  auto it = sockets.find(l.fd);
  return it == sockets.end() ? nullptr : it->second;
}
std::vector<std::weak_ptr<ChannelRef>>& channels = svc.channels;
int& svc_wake = svc.wake;
std::once_flag& svc_started = svc.started;

constexpr int kRouteTimeoutMs = 1000;
constexpr int kMaxRetries = 6;

int status_errno(int status) { return status < 0 ? -status : (status ? status : EIO); }

void connect_failed(Socket& s, int code) {
  s.state = State::kConnectError;
  s.err = code;
  signal(s);
}

// Active side, ROUTE_RESOLVED: the endpoint, then the REQ.
void start_connect(Socket& s) {
  if (int e = create_endpoint(s)) return connect_failed(s, e);
  ConnData cd = conn_data(s);
  rdma_conn_param p{};
  p.private_data = &cd;
  p.private_data_len = sizeof cd;
  p.responder_resources = 0;
  p.initiator_depth = 0;
  p.flow_control = 1;
  p.retry_count = 7;
  p.rnr_retry_count = 7;  // control messages rely on RNR retry
  if (rdma_connect(s.id, &p)) return connect_failed(s, errno);
  s.state = State::kConnecting;
}

void active_event(Socket& s, const rdma_cm_event& ev) {
  switch (ev.event) {
    case RDMA_CM_EVENT_ADDR_RESOLVED:
      if (s.state != State::kResolvingAddr) return;
      s.retries = 0;
      s.state = State::kResolvingRoute;
      if (rdma_resolve_route(s.id, kRouteTimeoutMs)) connect_failed(s, errno);
      return;
    case RDMA_CM_EVENT_ADDR_ERROR:
      if (status_errno(ev.status) == ETIMEDOUT && s.retries < kMaxRetries &&
          rdma_resolve_addr(s.id, nullptr, rdma_get_peer_addr(s.id), kRouteTimeoutMs << ++s.retries) == 0)
        return;
      return connect_failed(s, status_errno(ev.status));
    case RDMA_CM_EVENT_ROUTE_RESOLVED:
      if (s.state == State::kResolvingRoute) start_connect(s);
      return;
    case RDMA_CM_EVENT_ROUTE_ERROR:
      if (status_errno(ev.status) == ETIMEDOUT && s.retries < kMaxRetries &&
          rdma_resolve_route(s.id, kRouteTimeoutMs << ++s.retries) == 0)
        return;
      return connect_failed(s, status_errno(ev.status));
    case RDMA_CM_EVENT_ESTABLISHED:
      if (s.state != State::kConnecting) return;
      if (int e = save_conn_data(s, ev.param.conn.private_data, ev.param.conn.private_data_len)) {
        rdma_disconnect(s.id);
        return connect_failed(s, e);
      }
      s.state = State::kConnected;
      s.readable = s.writable = s.established = true;
      signal(s);
      return;
    case RDMA_CM_EVENT_REJECTED: return connect_failed(s, ECONNREFUSED);
    case RDMA_CM_EVENT_UNREACHABLE: return connect_failed(s, ETIMEDOUT);
    case RDMA_CM_EVENT_CONNECT_ERROR: return connect_failed(s, status_errno(ev.status));
    default: return;
  }
}

// A listener's CONNECT_REQUEST: a new socket on the new id, accepted with
// our ConnData, or rejected (wrong version, backlog full, no resources).
void connect_request(Socket& l, rdma_cm_id* id, const rdma_cm_event& ev) {
  if (l.state != State::kListening ||
      l.accept_queue.size() + l.accepting.size() >= size_t(std::max(l.backlog, 1))) {
    rdma_reject(id, nullptr, 0);
    rdma_destroy_id(id);
    return;
  }
  SocketPtr s = make_socket(l.domain, &l);
  if (!s) {
    rdma_reject(id, nullptr, 0);
    rdma_destroy_id(id);
    return;
  }
  std::lock_guard lk(s->mu);
  s->id = id;
  id->context = s.get();
  s->channel = l.channel;
  int e = create_endpoint(*s);
  if (!e) e = save_conn_data(*s, ev.param.conn.private_data, ev.param.conn.private_data_len);
  ConnData cd{};
  if (!e) {
    cd = conn_data(*s);
    rdma_conn_param p{};
    p.private_data = &cd;
    p.private_data_len = sizeof cd;
    p.responder_resources = ev.param.conn.responder_resources;
    p.initiator_depth = ev.param.conn.initiator_depth;
    p.flow_control = ev.param.conn.flow_control;
    p.retry_count = 7;
    p.rnr_retry_count = 7;
    if (rdma_accept(id, &p)) e = errno;
  }
  if (e) {
    rdma_reject(id, nullptr, 0);
    destroy_endpoint(*s);
    rdma_destroy_id(id);
    s->id = nullptr;
    return;
  }
  s->state = State::kAccepting;
  add_socket(s);
  l.accepting.push_back(s);
  s->listener = listener_of(l);
}

// A connection taken out of its listener's `accepting` list: to the
// accept queue once established, else gone.
void passive_event(const SocketPtr& self, const rdma_cm_event& ev, Socket& listener) {
  Socket& s = *self;
  if (ev.event == RDMA_CM_EVENT_ESTABLISHED && listener.state == State::kListening) {
    s.state = State::kConnected;
    s.readable = s.writable = s.established = true;
    listener.accept_queue.push_back(self);
    signal(listener);
    return;
  }
  // Not established (the peer gave up, or the listener closed): gone.
  s.state = State::kError;
  s.err = ECONNABORTED;
  destroy_endpoint(s);
  if (s.id) rdma_destroy_id(s.id);
  s.id = nullptr;
  forget(s.fd);
}

void handle(rdma_cm_event& ev) {
  if (ev.event == RDMA_CM_EVENT_CONNECT_REQUEST) {
    auto* l = ev.listen_id ? static_cast<Socket*>(ev.listen_id->context) : nullptr;
    rdma_cm_id* id = ev.id;
    if (!l) {
      rdma_reject(id, nullptr, 0);
      rdma_destroy_id(id);
      return;
    }
    std::lock_guard lk(l->mu);
    connect_request(*l, id, ev);
    return;
  }
  auto* s = static_cast<Socket*>(ev.id->context);
  if (!s) return;
  // A connection not yet established is in its listener's `accepting`
  // list (changed only under svc_mu): the listener's lock first, as in
  // connect_request.
  if (SocketPtr listener = s->listener.lock()) {
    auto it = std::find_if(listener->accepting.begin(), listener->accepting.end(),
                           [&](const SocketPtr& p) { return p.get() == s; });
    if (it != listener->accepting.end()) {
      SocketPtr keep = *it;
      listener->accepting.erase(it);
      std::scoped_lock lk(listener->mu, keep->mu);
      passive_event(keep, ev, *listener);
      return;
    }
  }
  std::lock_guard lk(s->mu);
  switch (ev.event) {
    case RDMA_CM_EVENT_DISCONNECTED:
    case RDMA_CM_EVENT_DEVICE_REMOVAL:
      if (s->state == State::kConnected) {
        process(*s);  // what arrived before: the peer's DISCONNECT message, if it closed
      }
      if (s->state == State::kConnected) {
        // The connection went without the peer closing it (it died, or
        // the device went): a reset, not an end of stream; after the
        // peer's SHUTDOWN (we read its end already), the end.
        const bool ended = !s->readable && ev.event == RDMA_CM_EVENT_DISCONNECTED;
        s->readable = s->writable = false;
        s->state = ended ? State::kDisconnected : State::kError;
        if (!ended) s->err = ev.event == RDMA_CM_EVENT_DISCONNECTED ? ECONNRESET : ENODEV;
        signal(*s);
      } else if (s->state < State::kConnected) {
        connect_failed(*s, ev.event == RDMA_CM_EVENT_DISCONNECTED ? ECONNRESET : ENODEV);
      }
      return;
    default: active_event(*s, ev);
  }
}

void service_loop() {
  for (;;) {
    std::vector<pollfd> fds{{svc_wake, POLLIN, 0}};
    std::vector<std::shared_ptr<ChannelRef>> live;
    std::vector<SocketPtr> dgram;
    {
      std::lock_guard lk(svc_mu);
      std::erase_if(channels, [](const std::weak_ptr<ChannelRef>& w) { return w.expired(); });
      for (auto& w : channels)
        if (auto c = w.lock()) {
          fds.push_back({c->ch->fd, POLLIN, 0});
          live.push_back(std::move(c));
        }
      std::erase_if(svc.udp, [](const Service::Udp& u) { return u.socket.expired(); });
      for (auto& u : svc.udp)
        if (auto s = u.socket.lock()) {
          fds.push_back({u.fd, POLLIN, 0});
          dgram.push_back(std::move(s));
        }
    }
    // (the shared_ptrs in `live` and `dgram` keep them while polled)
    if (::poll(fds.data(), fds.size(), 1000) < 0 && errno != EINTR) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (fds[0].revents) {
      uint64_t v;
      [[maybe_unused]] auto n = ::read(svc_wake, &v, sizeof v);
    }
    {
      std::lock_guard lk(svc_mu);
      for (size_t k = 1; k <= live.size(); ++k) {
        if (!fds[k].revents) continue;
        for (int budget = 64; budget > 0; --budget) {
          rdma_cm_event* ev = nullptr;
          if (rdma_get_cm_event(live[k - 1]->ch, &ev)) break;
          handle(*ev);
          rdma_ack_cm_event(ev);
        }
      }
    }
    // Datagrams that came over UDP: without the service lock (the route to
    // a new peer may take the CM a while).
    for (size_t k = 0; k < dgram.size(); ++k)
      if (fds[1 + live.size() + k].revents) ds_udp_input(dgram[k]);
    live.clear();  // a channel whose last socket went is destroyed here, unpolled
  }
}

void start_service() {
  std::call_once(svc_started, [] {
    svc_wake = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    std::thread(service_loop).detach();
  });
}

}  // namespace

Socket::~Socket() {
  if (fd >= 0) ::close(fd);
}

ChannelRef::~ChannelRef() {
  if (ch) rdma_destroy_event_channel(ch);
}

bool Socket::nonblocking(int msg_flags) const { return (file_flags & O_NONBLOCK) || (msg_flags & MSG_DONTWAIT); }

SocketPtr find(int fd) {
  std::shared_lock lk(svc.reg_mu);
  auto it = sockets.find(fd);
  if (it == sockets.end()) {
    errno = EBADF;
    return nullptr;
  }
  return it->second;
}

void add_socket(const SocketPtr& s) {
  std::unique_lock lk(svc.reg_mu);
  sockets[s->fd] = s;
}

void forget(int fd) {
  SocketPtr gone;  // destroyed after the lock
  std::unique_lock lk(svc.reg_mu);
  if (auto it = sockets.find(fd); it != sockets.end()) {
    gone = std::move(it->second);
    sockets.erase(it);
  }
}

void idle_spin() {
  thread_local unsigned idle = 0;
  if (++idle % 64 == 0) sched_yield();
}

std::unique_lock<std::mutex> service_lock() { return std::unique_lock(svc_mu); }

void watch_channel(const std::shared_ptr<ChannelRef>& c) {
  start_service();
  {
    std::lock_guard lk(svc_mu);
    channels.push_back(c);
  }
  uint64_t one = 1;
  [[maybe_unused]] auto n = ::write(svc_wake, &one, sizeof one);
}

void watch_udp(const SocketPtr& s) {
  start_service();
  {
    std::lock_guard lk(svc_mu);
    svc.udp.push_back({s, s->dg->udp});
  }
  uint64_t one = 1;
  [[maybe_unused]] auto n = ::write(svc_wake, &one, sizeof one);
}

void unwatch_udp_locked(const Socket& s) {
  std::erase_if(svc.udp, [&](const Service::Udp& u) {
    auto p = u.socket.lock();
    return !p || p.get() == &s;
  });
  uint64_t one = 1;
  [[maybe_unused]] auto n = ::write(svc_wake, &one, sizeof one);
}

void add_wait_fds(Socket& s, std::vector<pollfd>& fds) {
  fds.push_back({s.fd, POLLIN, 0});
  if (s.cch) fds.push_back({s.cch->fd, POLLIN, 0});
  if (s.dg) ds_wait_fds(s, fds);
}

void signal(Socket& s) {
  uint64_t one = 1;
  [[maybe_unused]] auto n = ::write(s.fd, &one, sizeof one);
}

int wait(Socket& s, std::unique_lock<std::mutex>& lk, int timeout_ms) {
  if (s.closed) {
    errno = EBADF;
    return -1;
  }
  if (arm(s)) return 0;
  std::vector<pollfd> p;
  add_wait_fds(s, p);
  // 100 ms at most: a wake-up another waiter drained in between is seen then.
  const int slice = timeout_ms < 0 || timeout_ms > 100 ? 100 : timeout_ms;
  ++s.waiters;
  lk.unlock();
  const int rc = ::poll(p.data(), p.size(), slice);
  const int saved = errno;
  lk.lock();
  --s.waiters;
  if (s.closed) {
    errno = EBADF;
    return -1;
  }
  if (p[0].revents) {
    uint64_t v;
    [[maybe_unused]] auto n = ::read(s.fd, &v, sizeof v);
  }
  if (rc < 0 && saved == EINTR) {
    errno = EINTR;
    return -1;
  }
  return 0;
}

SocketPtr make_socket(int domain, const Socket* inherit) {
  auto s = std::make_shared<Socket>();
  s->fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (s->fd < 0) return nullptr;
  s->domain = domain;
  if (inherit) {
    s->sbuf_size = inherit->sbuf_size;
    s->rbuf_size = inherit->rbuf_size;
    s->sq_size = inherit->sq_size;
    s->rq_size = inherit->rq_size;
    s->sq_inline = inherit->sq_inline;
    s->target_iomap_size = inherit->target_iomap_size;
    s->so_opts = inherit->so_opts;
    s->tcp_opts = inherit->tcp_opts;
    s->keepalive_time = inherit->keepalive_time;
  }
  return s;
}

}  // namespace openib::rsocket
