// Connections, object teardown and event routing of ibd's client server
// (docs/client-protocol.md). Request handlers are in requests.cpp, INFO in
// info.cpp.
#include "ibd/server.hpp"

#include <grp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <boost/asio/post.hpp>
#include <cstring>
#include <filesystem>

#include "common/log.hpp"
#include "ibd/fd_closer.hpp"
#include "ibd/peer.hpp"

namespace openib::ibd {

namespace asio = boost::asio;

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::kPd: return "PD";
    case Kind::kMem: return "memory";
    case Kind::kMr: return "MR";
    case Kind::kCq: return "CQ";
    case Kind::kSrq: return "SRQ";
    case Kind::kQp: return "QP";
    case Kind::kAh: return "AH";
  }
  return "?";
}

namespace {
auto logger() {
  static auto l = log::get("ibd");
  return l;
}

// enum ibv_event_type values (IBA 11.6.3 names).
enum IbvEvent : uint8_t {
  kIbvCqErr = 0, kIbvQpFatal = 1, kIbvQpReqErr = 2, kIbvQpAccessErr = 3, kIbvCommEst = 4,
  kIbvSqDrained = 5, kIbvDeviceFatal = 8, kIbvPortActive = 9, kIbvPortErr = 10,
  kIbvLidChange = 11, kIbvPkeyChange = 12, kIbvSmChange = 13, kIbvSrqErr = 14, kIbvSrqLimitReached = 15,
  kIbvQpLastWqeReached = 16, kIbvClientReregister = 17, kIbvGidChange = 18,
};
}  // namespace

Server::Server(asio::io_context& io, hca::Device& hca, ServerOptions opts)
    : io_(io), hca_(hca), opts_(std::move(opts)), health_(io), accept_retry_(io), quota_(opts_.limits),
      hello_deadlines_(io, opts_.limits.hello_timeout_ms, [this](uint32_t id) { on_hello_deadline(id); }),
      started_(std::chrono::steady_clock::now()), last_activity_(started_) {
  hca_.set_event_handler([this](const hca::Event& e) { on_event(e); });
}

// Commands this server issued may still be in flight (teardowns of the
// clients stop() disconnected): they are completed here, by polling, while
// the server still exists; the loop has stopped by now.
Server::~Server() {
  stop();
  if (!hca_.drain(10000)) logger()->warn("device commands still in flight at shutdown");
  alive_.reset();  // continuations that come later do nothing
  departing_.clear();
  hca_.set_event_handler(nullptr);
}

Result<void> Server::start() {
  const std::filesystem::path path(opts_.socket);
  std::error_code ec;
  if (path.has_parent_path()) {
    std::filesystem::create_directories(path.parent_path(), ec);
    if (ec) return err(ec.value(), "creating {}: {}", path.parent_path().string(), ec.message());
  }
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (opts_.socket.size() >= sizeof(addr.sun_path))
    return err(ENAMETOOLONG, "socket path {} is too long", opts_.socket);
  std::memcpy(addr.sun_path, opts_.socket.c_str(), opts_.socket.size() + 1);
  UniqueFd fd(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd) return sys_err("socket");
  // A socket file left behind: remove it, unless a daemon still answers there.
  if (std::filesystem::exists(path, ec)) {
    if (!std::filesystem::is_socket(path, ec))
      return err(EEXIST, "{} exists and is not a socket; not removing it", opts_.socket);
    UniqueFd probe(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
    if (probe && ::connect(probe.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0)
      return err(EADDRINUSE, "another daemon is serving {}", opts_.socket);
    std::filesystem::remove(path, ec);
  }
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0)
    return sys_err("bind {}", opts_.socket);
  // docs/client-protocol.md "Security model": the file's owner, group and
  // mode decide who may connect.
  if (::chmod(opts_.socket.c_str(), opts_.socket_mode) != 0) return sys_err("chmod {}", opts_.socket);
  if (!opts_.socket_group.empty()) {
    group* g = ::getgrnam(opts_.socket_group.c_str());
    if (!g) return err(ENOENT, "no group named {}", opts_.socket_group);
    if (::chown(opts_.socket.c_str(), static_cast<uid_t>(-1), g->gr_gid) != 0)
      return sys_err("chown {} to group {}", opts_.socket, opts_.socket_group);
  }
  if (::listen(fd.get(), 128) != 0) return sys_err("listen {}", opts_.socket);
  listener_ = std::make_unique<asio::posix::stream_descriptor>(io_, fd.release());
  accept_next();
  health_.expires_after(std::chrono::seconds(1));
  health_.async_wait([this](const boost::system::error_code& e) {
    if (!e) check_device();
  });
  return ok();
}

void Server::stop() {
  if (stopped_) return;
  stopped_ = true;
  health_.cancel();
  accept_retry_.cancel();
  if (listener_) {
    boost::system::error_code ec;
    listener_->close(ec);
    listener_.reset();
    std::error_code fec;
    std::filesystem::remove(opts_.socket, fec);
  }
  retire_status_page();  // the device is no longer served: posts fail (§6.2)
  while (!clients_.empty()) disconnect(clients_.begin()->first, "daemon shutting down");
}

// Health check (once a second): a device that vanished while idle is
// noticed here; a NOP after 2 s without requests probes a silent one. The
// NOP goes to the command slot reserved for it, so it never waits behind
// other commands; it is asynchronous like every command on the loop.
void Server::check_device() {
  if (stopped_ || device_state_ != DeviceState::kRunning) return;
  if (hca_.alive() && !health_in_flight_ &&
      std::chrono::steady_clock::now() - last_activity_ > std::chrono::seconds(2)) {
    last_activity_ = std::chrono::steady_clock::now();
    health_in_flight_ = true;
    ++counters_.health_checks;
    hca_.nop_async(guard<void>([this](Result<void> r) {
      health_in_flight_ = false;
      if (r) return;
      ++counters_.health_failures;
      logger()->warn("health check NOP: {}", r.error().str());
      // A NOP the device never completes (ETIMEDOUT, its slot fenced) is a
      // hung device: handled as one that is gone (docs/operations.md §5).
      if (!hca_.alive() || r.error().code == ENODEV || r.error().code == ETIMEDOUT) device_is_gone();
    }));
  }
  if (!hca_.alive()) return device_is_gone();
  health_.expires_after(std::chrono::seconds(1));
  health_.async_wait([this](const boost::system::error_code& e) {
    if (!e) check_device();
  });
}

void Server::device_is_gone() {
  if (device_gone_) return;
  device_gone_ = true;
  logger()->error("device {} is gone", opts_.device_name);
  if (on_device_gone_) asio::post(io_, on_device_gone_);
}

void Server::accept_next() {
  if (!listener_) return;
  listener_->async_wait(asio::posix::stream_descriptor::wait_read,
                        [this](const boost::system::error_code& e) {
                          if (!e) on_acceptable();
                        });
}

void Server::on_acceptable() {
  for (;;) {
    const int fd = ::accept4(listener_->native_handle(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        // Out of fds: the pending connection stays queued; try again later
        // instead of spinning on a listener that stays readable.
        logger()->warn("accept on {}: {}; retrying in 100 ms", opts_.socket, std::strerror(errno));
        accept_retry_.expires_after(std::chrono::milliseconds(100));
        accept_retry_.async_wait([this](const boost::system::error_code& e) {
          if (!e) accept_next();
        });
        return;
      }
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ECONNABORTED)
        logger()->warn("accept on {}: {}", opts_.socket, std::strerror(errno));
      break;
    }
    // Fail closed: a peer whose credentials cannot be read is refused
    // (never taken for uid 0). docs/client-protocol.md §5.
    auto cred = peer_credentials(fd);
    if (!cred) {
      ++counters_.connections_refused_peercred;
      logger()->warn("connection refused: {}", cred.error().str());
      close_off_loop(UniqueFd(fd));
      continue;
    }
    auto c = std::make_unique<Client>(io_, fd);
    c->id = next_client_++;
    c->connected = std::chrono::steady_clock::now();
    c->pid = cred->pid;
    c->uid = cred->uid;
    c->gid = cred->gid;
    c->net_admin = cred->net_admin;
    c->net_raw = cred->net_raw;
    if (auto q = quota_.admit(c->uid); !q) {  // docs/operations.md "Limits"
      ++counters_.connections_refused_uid_limit;
      logger()->debug("connection of pid {} refused: {}", c->pid, q.error().message);
      close_off_loop(UniqueFd(c->sock.release()));  // its queue may hold fds (fd_closer.hpp)
      continue;
    }
    ++counters_.connects;
    logger()->info("client {} connected: pid {} uid {} gid {}{}", c->id, c->pid, c->uid, c->gid,
                   c->net_admin ? " (privileged)" : "");
    const uint32_t id = c->id;
    clients_.emplace(id, std::move(c));
    watch(id);
    hello_deadlines_.arm(id);
  }
  accept_next();
}

// docs/operations.md "Limits": a connection that has not said HELLO in
// time goes (also one whose HELLO is still waiting for its UAR).
void Server::on_hello_deadline(uint32_t id) {
  Client* c = client(id);
  if (!c || c->hello) return;
  ++counters_.hello_timeouts;
  disconnect(id, fmt::format("no HELLO within {} ms", opts_.limits.hello_timeout_ms));
}

Client* Server::client(uint32_t id) {
  auto it = clients_.find(id);
  return it == clients_.end() ? nullptr : it->second.get();
}

Client* Server::owner(uint32_t id) {
  if (Client* c = client(id)) return c;
  auto it = departing_.find(id);
  return it == departing_.end() ? nullptr : it->second.get();
}

void Server::watch(uint32_t id) {
  Client* c = client(id);
  if (!c || c->watching) return;
  c->watching = true;
  c->sock.async_wait(asio::posix::stream_descriptor::wait_read,
                     [this, id](const boost::system::error_code& e) {
                       if (Client* w = client(id)) w->watching = false;
                       if (!e) on_readable(id);
                     });
}

// A request from a client whose device is gone: only what needs no device.
// The user-MAD requests too: sessions and agents outlive the device.
static bool served_when_stale(uint16_t op) {
  using proto::Op;
  for (Op o : {Op::kGetAsyncEvents, Op::kInfo, Op::kUmadPort, Op::kUmadOpen, Op::kUmadRegister, Op::kUmadUnregister})
    if (op == static_cast<uint16_t>(o)) return true;
  return false;
}

// One request at a time per client: a request that waits for the device
// leaves the socket unread until finish() sent its reply. Requests of
// different clients proceed concurrently, up to the device's command slots.
void Server::on_readable(uint32_t id) {
  // A few messages per wake-up, so one busy client cannot starve the rest.
  for (int n = 0; n < 16; ++n) {
    Client* c = client(id);
    if (!c) return;
    // No device (docs/operations.md §5): a client that did not say HELLO to
    // the old one waits, unread, until device_back() watches it again.
    if (device_state_ != DeviceState::kRunning && !c->stale) return;
    std::vector<UniqueFd> rejected;
    auto m = proto::recv_message(c->sock.native_handle(), /*nonblocking*/ true, &rejected);
    dispose_fds(rejected);  // never a blocking close on the loop (fd_closer.hpp)
    if (!m) {
      const int code = m.error().code;
      if (code == EAGAIN || code == EWOULDBLOCK) break;
      if (code == EPROTO) {
        // Framing we cannot trust (bad magic, truncated, oversized, fd
        // mismatch): one line, then the client goes.
        ++counters_.protocol_violations;
        disconnect(id, "protocol violation: " + m.error().message);
      } else if (code == ECONNRESET) {
        disconnect(id, "closed the connection");
      } else {
        disconnect(id, m.error().str());
      }
      return;
    }
    last_activity_ = std::chrono::steady_clock::now();
    ++counters_.requests;
    ++c->stats.requests;
    proto::Header h;
    h.op = static_cast<uint16_t>(m->header.op | proto::kReplyBit);
    h.seq = m->header.seq;
    c->busy = true;
    c->dispatching = true;
    auto done = guard<Reply>([this, id, h](Result<Reply> r) { finish(id, h, std::move(r)); });
    if (c->stale && !served_when_stale(m->header.op))
      done(err(ENODEV, "the device this client opened is gone (ibd is at device generation {}); reconnect",
               generation_));
    else
      handle(*c, *m, std::move(done));
    dispose_fds(m->fds);  // the fds the request did not keep
    c = client(id);
    if (!c) return;  // finish() disconnected it
    c->dispatching = false;
    if (c->busy) return;  // waits for the device; finish() resumes reading
    if (!hca_.alive() && device_state_ == DeviceState::kRunning) return;  // finish() ran check_device()
  }
  watch(id);
}

void Server::finish(uint32_t id, proto::Header h, Result<Reply> r) {
  Client* c = client(id);
  if (!c) {  // left while its request was in flight: nobody to answer
    if (Client* gone = owner(id)) {
      gone->busy = false;
      continue_teardown(id);
    }
    return;
  }
  c->busy = false;
  proto::Bytes body;
  std::vector<int> fds;
  if (r) {
    body = proto::encode_reply(0, r->payload);
    for (auto& f : r->fds) fds.push_back(f.get());
  } else {
    ++counters_.errors;
    ++c->stats.errors;
    logger()->debug("client {}: {} seq {}: {}", id, proto::op_name(h.op & ~proto::kReplyBit), h.seq,
                    r.error().str());
    body = proto::encode_error_reply(r.error().code, r.error().message);
  }
  auto sent = proto::send_message(c->sock.native_handle(), h, body, fds);
  if (!sent) {
    disconnect(id, sent.error().code == EAGAIN ? "not reading its replies" : sent.error().str());
    return;
  }
  if (!hca_.alive() && !device_gone_) {
    check_device();
    return;
  }
  if (!c->dispatching) watch(id);  // else on_readable's loop goes on
}

// The client leaves the table at once (a continuation that looks it up
// finds it gone); its objects are destroyed asynchronously, after the
// request it may have in flight completed.
void Server::disconnect(uint32_t id, const std::string& why) {
  auto it = clients_.find(id);
  if (it == clients_.end()) return;
  std::unique_ptr<Client> owned = std::move(it->second);
  clients_.erase(it);
  Client& c = *owned;
  c.closing = true;
  quota_.release_connection(c.uid);
  hello_deadlines_.cancel(id);
  // Wake whatever the client may be blocked on (its async eventfd, its CQs'
  // completion eventfds): it then finds the connection closed, an error,
  // instead of waiting forever for an event that will not come.
  if (c.async_fd) signal_fd(c.async_fd.get());
  for (auto& [h, o] : c.objects)
    if (o.eventfd) signal_fd(o.eventfd.get());
  boost::system::error_code ec;
  c.sock.cancel(ec);
  // Its queue may hold fds in flight, released with the socket: closed
  // where a blocking release cannot stall the loop (fd_closer.hpp).
  close_off_loop(UniqueFd(c.sock.release()));
  ++counters_.disconnects;
  logger()->info("client {} (pid {}) gone: {}; {} objects to destroy{}; {} requests, {} errors", id, c.pid,
                 why, c.objects.size(), c.busy ? " after its request in flight" : "", c.stats.requests,
                 c.stats.errors);
  departing_.emplace(id, std::move(owned));
  // What the services hold for it (service.hpp), users before what they
  // use: its RDMA CM ids before the IB CM's; CM ids DREQ'd or REJ'd
  // (docs/cm.md "In ibd"), multicast joins left, services deleted, MAD
  // sockets closed. Its QPs go with the rest below.
  if (services_) services_->client_gone(id);
  continue_teardown(id);
}

// ---- object tables -----------------------------------------------------------

Result<Object*> Server::find(Client& c, uint32_t handle, Kind k) {
  auto it = c.objects.find(handle);
  if (it == c.objects.end()) return err(ENOENT, "no {} with handle {}", kind_name(k), handle);
  if (it->second.kind != k)
    return err(EINVAL, "handle {} is a {}, not a {}", handle, kind_name(it->second.kind), kind_name(k));
  return &it->second;
}

// [offset, offset+size) inside a mapped memfd, aligned; its IOVA.
Result<uint64_t> Server::range_iova(const Object& mem, uint64_t offset, uint64_t size, uint64_t align,
                                    const char* what) {
  if (size == 0 || offset > mem.length || size > mem.length - offset)
    return err(EINVAL, "{} [{:#x}, +{:#x}) is outside the {}-byte memory", what, offset, size, mem.length);
  if (offset % align != 0) return err(EINVAL, "{} offset {:#x} is not {}-byte aligned", what, offset, align);
  return mem.map.iova() + mem.base + offset;
}

uint32_t Server::add(Client& c, Object o) {
  const uint32_t h = c.next_handle++;
  for (uint32_t d : o.deps)
    if (d) ++c.objects.at(d).refs;
  ++c.counts[static_cast<size_t>(o.kind)];
  quota_.added(c.id, c.uid, o.kind, o.kind == Kind::kMem ? o.length : 0);
  switch (o.kind) {
    case Kind::kCq: cq_owner_[o.number] = {c.id, h}; break;
    case Kind::kQp: qp_owner_[o.number] = {c.id, h}; break;
    case Kind::kSrq: srq_owner_[o.number] = {c.id, h}; break;
    default: break;
  }
  c.objects.emplace(h, std::move(o));
  return h;
}

void Server::drop(Client& c, uint32_t handle, const Result<void>& r) {
  auto it = c.objects.find(handle);
  if (it == c.objects.end()) return;
  Object& o = it->second;
  // The device may still reach memory of an object it refused to destroy:
  // keep such mappings (never reuse their IOVA) while the device lives.
  if (!r && hca_.alive()) {
    for (uint32_t d : o.deps) {
      auto dit = c.objects.find(d);
      if (d && dit != c.objects.end() && dit->second.kind == Kind::kMem && dit->second.map.valid()) {
        quarantine_.push_back(std::move(dit->second.map));
        ++counters_.quarantined_mappings;
      }
    }
  }
  for (uint32_t d : o.deps) {
    auto dit = c.objects.find(d);
    if (d && dit != c.objects.end() && dit->second.refs) --dit->second.refs;
  }
  switch (o.kind) {
    case Kind::kCq: cq_owner_.erase(o.number); break;
    case Kind::kQp: qp_owner_.erase(o.number); break;
    case Kind::kSrq: srq_owner_.erase(o.number); break;
    default: break;
  }
  --c.counts[static_cast<size_t>(o.kind)];
  quota_.removed(c.id, c.uid, o.kind, o.kind == Kind::kMem ? o.length : 0);
  c.objects.erase(it);
}

hca::ObjectKind device_kind(Kind k) {
  using D = hca::ObjectKind;
  switch (k) {
    case Kind::kPd: return D::kPd;
    case Kind::kMr: return D::kMkey;
    case Kind::kCq: return D::kCq;
    case Kind::kSrq: return D::kSrq;
    case Kind::kQp: return D::kQp;
    case Kind::kAh: return D::kAh;
    case Kind::kMem: break;  // no device object
  }
  return D::kPd;
}

void Server::continue_teardown(uint32_t id) {
  auto it = departing_.find(id);
  if (it == departing_.end()) return;
  Client& c = *it->second;
  if (c.busy || c.teardown_outstanding) return;
  if (device_state_ != DeviceState::kRunning) {  // nothing left on the device to destroy
    c.objects.clear();
    departing_.erase(it);
    return;
  }
  static constexpr Kind kOrder[] = {Kind::kQp, Kind::kSrq, Kind::kCq, Kind::kAh, Kind::kMr, Kind::kPd};
  std::vector<uint32_t> handles;
  for (Kind k : kOrder) {
    for (auto& [h, o] : c.objects)
      if (o.kind == k) handles.push_back(h);
    if (handles.empty()) continue;
    c.teardown_outstanding = static_cast<uint32_t>(handles.size());
    for (uint32_t h : handles) {
      hca_.destroy_async(device_kind(k), c.objects.at(h).number,
                         guard<void>([this, id, h](Result<void> r) {
                           Client* gone = owner(id);
                           if (!gone) return;
                           if (!r && hca_.alive()) {
                             auto o = gone->objects.find(h);
                             if (o != gone->objects.end())
                               logger()->warn("client {}: destroying {} {:#x}: {}", id, kind_name(o->second.kind),
                                              o->second.number, r.error().str());
                           }
                           drop(*gone, h, r);
                           --gone->teardown_outstanding;
                           continue_teardown(id);
                         }));
    }
    return;  // the next kind once these completed
  }
  // Nothing on the device uses the client's memory any more: unmap it.
  quota_.forget(id, c.uid);
  c.objects.clear();
  if (c.uar) {
    const uint32_t uar = std::exchange(c.uar, 0);
    c.teardown_outstanding = 1;
    hca_.destroy_async(hca::ObjectKind::kUar, uar, guard<void>([this, id, uar](Result<void> r) {
                         if (!r && hca_.alive())
                           logger()->warn("client {}: DEALLOC_UAR {}: {}", id, uar, r.error().str());
                         if (Client* gone = owner(id)) {
                           gone->teardown_outstanding = 0;
                           continue_teardown(id);
                         }
                       }));
    return;
  }
  departing_.erase(it);
}

// ---- events ------------------------------------------------------------------

// Writes 1 to a client's eventfd without ever blocking the daemon: an
// eventfd whose counter is full is skipped (poll first; the counter only
// fills if the client never reads it).
void Server::signal_fd(int fd) {
  pollfd p{fd, POLLOUT, 0};
  if (::poll(&p, 1, 0) != 1 || !(p.revents & POLLOUT)) return;
  const uint64_t one = 1;
  (void)!::write(fd, &one, sizeof one);
}

void Server::queue_event(Client& c, proto::AsyncEvent ev) {
  ++counters_.events;
  if (c.events.size() >= kMaxQueuedEvents) {
    ++c.stats.events_dropped;
    ++c.events_dropped_since_fetch;
    ++counters_.events_dropped;
  } else {
    c.events.push_back(ev);
  }
  if (c.async_fd) signal_fd(c.async_fd.get());
}

// IBA 11.6.3: affiliated events to the owner of the object, unaffiliated
// ones (port, device) to every client.
void Server::on_event(const hca::Event& e) {
  using K = hca::Event::Kind;
  auto to_owner = [&](std::unordered_map<uint32_t, Owner>& owners, uint8_t type, proto::ObjKind kind) {
    auto it = owners.find(e.number);
    if (it == owners.end()) return;
    if (Client* c = client(it->second.client))
      queue_event(*c, {type, static_cast<uint8_t>(kind), 0, it->second.handle});
  };
  auto to_all = [&](uint8_t type, proto::ObjKind kind, uint8_t port) {
    for (auto& [id, c] : clients_)
      if (c->hello && !c->stale) queue_event(*c, {type, static_cast<uint8_t>(kind), port, 0});
  };
  switch (e.kind) {
    case K::kCqCompletion: return on_cq_event(e.number);
    case K::kCqError: return to_owner(cq_owner_, kIbvCqErr, proto::ObjKind::kCq);
    case K::kQpFatal: return to_owner(qp_owner_, kIbvQpFatal, proto::ObjKind::kQp);
    case K::kQpReqErr: return to_owner(qp_owner_, kIbvQpReqErr, proto::ObjKind::kQp);
    case K::kQpAccessErr: return to_owner(qp_owner_, kIbvQpAccessErr, proto::ObjKind::kQp);
    case K::kQpLastWqeReached: return to_owner(qp_owner_, kIbvQpLastWqeReached, proto::ObjKind::kQp);
    case K::kQpCommEst: return to_owner(qp_owner_, kIbvCommEst, proto::ObjKind::kQp);
    case K::kSqDrained: return to_owner(qp_owner_, kIbvSqDrained, proto::ObjKind::kQp);
    case K::kSrqLimit: return to_owner(srq_owner_, kIbvSrqLimitReached, proto::ObjKind::kSrq);
    case K::kSrqError: return to_owner(srq_owner_, kIbvSrqErr, proto::ObjKind::kSrq);
    case K::kPortState: {
      logger()->info("port {}: state {} -> {}", e.port, e.old_state, e.new_state);
      if (services_) services_->port_event(e);
      if (e.new_state == hca::kPortActive) to_all(kIbvPortActive, proto::ObjKind::kPort, e.port);
      else if (e.old_state == hca::kPortActive) to_all(kIbvPortErr, proto::ObjKind::kPort, e.port);
      return;
    }
    case K::kLidChange: {
      logger()->info("port {}: LID {}", e.port, e.lid);
      if (services_) services_->port_event(e);
      return to_all(kIbvLidChange, proto::ObjKind::kPort, e.port);
    }
    // The SM's changes to the port (docs/simhca.md §14.3, §14.4).
    case K::kSmChange:
    case K::kClientReregister:
    case K::kPkeyChange:
    case K::kGidChange: {
      const uint8_t ibv = e.kind == K::kSmChange            ? kIbvSmChange
                          : e.kind == K::kClientReregister ? kIbvClientReregister
                          : e.kind == K::kPkeyChange       ? kIbvPkeyChange
                                                           : kIbvGidChange;
      logger()->info("port {}: {}", e.port, hca::event_name(e.kind));
      if (services_) services_->port_event(e);
      return to_all(ibv, proto::ObjKind::kPort, e.port);
    }
    case K::kDeviceFatal:
      // The device fails most commands from now on; handled as a lost
      // device (device_lost() sends every client DEVICE_FATAL), and
      // recovery resets it (docs/operations.md §5).
      logger()->error("device {}: DEVICE_FATAL (health syndrome {})", opts_.device_name, e.syndrome);
      return device_is_gone();
  }
}

// A CQ's completion event: ibd's own (user MADs, IPoIB), else the owning
// client's eventfd.
void Server::on_cq_event(uint32_t cqn) {
  if (services_ && services_->on_cq_event(cqn)) return;
  auto it = cq_owner_.find(cqn);
  if (it == cq_owner_.end()) return;
  Client* c = client(it->second.client);
  if (!c) return;
  auto o = c->objects.find(it->second.handle);
  if (o != c->objects.end() && o->second.eventfd) {
    ++counters_.cq_notifications;
    signal_fd(o->second.eventfd.get());
  }
}

// docs/client-protocol.md "Path records": to every client that looks paths up.
void Server::on_path_change(uint8_t port, uint16_t pkey, const std::array<uint8_t, 16>& dgid) {
  proto::AsyncEvent ev{proto::kEventPathChanged, static_cast<uint8_t>(proto::ObjKind::kPort), port, 0, pkey, dgid};
  for (auto& [id, c] : clients_)
    if (c->hello && c->path_user && c->async_fd && c->version >= proto::kProtocolPathEvents) queue_event(*c, ev);
}

const char* device_state_name(DeviceState s) {
  switch (s) {
    case DeviceState::kRunning: return "running";
    case DeviceState::kDead: return "dead";
    case DeviceState::kRestarting: return "restarting";
  }
  return "?";
}

void Server::device_lost() {
  if (device_state_ != DeviceState::kRunning) return;
  device_state_ = DeviceState::kDead;
  device_gone_ = true;
  ++counters_.device_losses;
  health_.cancel();
  // First, before any event: a client's next post fails with ENODEV.
  retire_status_page();
  // Fence: every command in flight or queued fails now with ENODEV; their
  // continuations answer their clients and drop what they would have made.
  if (hca_.is_open()) hca_.fence(err(ENODEV, "{}: device is gone", opts_.device_name));
  size_t notified = 0, objects = 0;
  for (auto& [id, c] : clients_) {
    if (!c->hello) continue;
    c->stale = true;
    ++notified;
    objects += c->objects.size();
    queue_event(*c, {kIbvDeviceFatal, static_cast<uint8_t>(proto::ObjKind::kDevice), 0, 0});
    // Wake a client blocked on a completion channel: it then finds the
    // error (its next call gets ENODEV), instead of waiting forever.
    for (auto& [h, o] : c->objects)
      if (o.eventfd) signal_fd(o.eventfd.get());
    // The device and its memory are gone: nothing to destroy, only to
    // forget (the DMA mappings are released locally, docs/client-protocol.md §6.1).
    c->objects.clear();
    c->counts = {};
    c->uar = 0;
  }
  // User-MAD sessions and agents outlive the device (docs/umad.md "Device loss").
  if (services_) services_->device_lost();
  for (auto& [id, c] : departing_) objects += c->objects.size();
  departing_.clear();
  cq_owner_.clear();
  qp_owner_.clear();
  srq_owner_.clear();
  quarantine_.clear();
  logger()->error("device {} lost: {} clients notified (DEVICE_FATAL), {} objects forgotten", opts_.device_name,
                  notified, objects);
  // Stale clients are still served (ENODEV); they may have been left
  // unwatched by a request that saw the device fail.
  for (auto& [id, c] : clients_)
    if (!c->busy) watch(id);
}

void Server::device_back() {
  retire_status_page();  // one made while the device was down described none
  ++generation_;
  device_state_ = DeviceState::kRunning;
  device_gone_ = false;
  last_activity_ = std::chrono::steady_clock::now();
  if (services_) services_->device_back();
  for (auto& [id, c] : clients_)
    if (!c->busy) watch(id);
  if (!stopped_) {
    health_.expires_after(std::chrono::seconds(1));
    health_.async_wait([this](const boost::system::error_code& e) {
      if (!e) check_device();
    });
  }
  logger()->info("device {} is back: generation {}", opts_.device_name, generation_);
}

void Server::notify_device_fatal() {
  retire_status_page();
  for (auto& [id, c] : clients_)
    if (c->hello) queue_event(*c, {kIbvDeviceFatal, static_cast<uint8_t>(proto::ObjKind::kDevice), 0, 0});
}

// docs/client-protocol.md §6.2: one page per device generation; the pages
// of lost generations live on in their clients' mappings, marked lost.
Result<UniqueFd> Server::status_fd() {
  if (!status_) {
    OPENIB_TRY_ASSIGN(status_, DeviceStatusPage::create(generation_));
  }
  return status_->client_fd();
}

void Server::retire_status_page() {
  if (!status_) return;
  status_->set_lost();
  status_.reset();
}

}  // namespace openib::ibd
