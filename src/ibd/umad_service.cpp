#include "ibd/umad_service.hpp"

#include <fcntl.h>
#include <infiniband/umad.h>
#include <sys/inotify.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstring>
#include <set>
#include <span>

#include <boost/asio/post.hpp>

#include "common/byte_order.hpp"
#include "common/log.hpp"
#include "ibd/fd_closer.hpp"
#include "mad/mad.hpp"
#include "mad/rmpp.hpp"

namespace openib::ibd {
namespace asio = boost::asio;
namespace madsock = proto::madsock;

namespace {

using madsock::kMadHdr;
using madsock::kUmadHdr;  // the kernel's struct ib_user_mad
static_assert(kUmadHdr == sizeof(ib_user_mad));
static_assert(kUmadHdr + mad::kMaxRmppMessage <= madsock::kMaxMessage);  // a reassembled message fits
// What ibd holds for one MAD socket whose client does not read (beyond
// one message, which always fits), and for all the messages clients have
// sent only part of (docs/client-protocol.md §10.1).
constexpr size_t kMaxQueuedOut = 16u << 20;
constexpr size_t kMaxPartialIn = 256u << 20;
constexpr int kSocketBuf = 8 << 20;
constexpr uint32_t kIsSmCap = 1u << 1;  // PortInfo:CapabilityMask.IsSM, IBA 14.2.5.6


mad::MadAddress from_umad(const ib_mad_addr_t& a) {
  mad::MadAddress m;
  m.qpn = ntohl(a.qpn);
  m.qkey = ntohl(a.qkey);
  m.lid = ntohs(a.lid);
  m.sl = a.sl;
  m.path_bits = a.path_bits;
  m.grh = a.grh_present != 0;
  m.gid_index = a.gid_index;
  m.hop_limit = a.hop_limit;
  m.traffic_class = a.traffic_class;
  std::memcpy(m.gid.data(), a.gid, 16);
  m.flow_label = ntohl(a.flow_label);
  m.pkey_index = a.pkey_index;
  return m;
}
ib_mad_addr_t to_umad(const mad::MadAddress& m) {
  ib_mad_addr_t a{};
  a.qpn = htonl(m.qpn);
  a.qkey = htonl(m.qkey);
  a.lid = htons(m.lid);
  a.sl = m.sl;
  a.path_bits = m.path_bits;
  a.grh_present = m.grh ? 1 : 0;
  a.gid_index = m.gid_index;
  a.hop_limit = m.hop_limit;
  a.traffic_class = m.traffic_class;
  std::memcpy(a.gid, m.gid.data(), 16);
  a.flow_label = htonl(m.flow_label);
  a.pkey_index = m.pkey_index;
  return a;
}

// One datagram of a MAD socket, MSG_TRUNC semantics (the datagram's length).
// The control buffer has room for as many fds as a datagram can carry (the
// kernel's SCM_MAX_FD, 253): without it the kernel would release fds a
// client attached inside this recvmsg, on ibd's loop, where a last close
// can block (fd_closer.hpp). They are closed by dispose_fds instead.
ssize_t recv_datagram(int sock, std::byte* buf, size_t len) {
  iovec iov{buf, len};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 253)];
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  const ssize_t n = ::recvmsg(sock, &msg, MSG_DONTWAIT | MSG_TRUNC | MSG_CMSG_CLOEXEC);
  std::vector<UniqueFd> fds;
  if (n >= 0)
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      for (size_t i = 0; i < (c->cmsg_len - CMSG_LEN(0)) / sizeof(int); ++i) {
        int fd;
        std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
        fds.emplace_back(fd);
      }
    }
  dispose_fds(fds);
  return n;
}

}  // namespace

UmadService::UmadService(asio::io_context& io, hca::Device& hca, std::string socket_path, uint8_t num_ports,
                         bool user_gmp)
    : io_(io), hca_(hca), socket_path_(std::move(socket_path)), num_ports_(num_ports), user_gmp_(user_gmp) {
  setup_issm();
}

UmadService::~UmadService() {
  while (!sessions_.empty()) close_session(sessions_.back().get());
  layers_.clear();
  if (inotify_sd_) {
    boost::system::error_code ec;
    inotify_sd_->cancel(ec);
    inotify_sd_->release();
  }
  for (uint8_t p = 1; p <= num_ports_; ++p) ::unlink(issm_path(p).c_str());
}

std::string UmadService::issm_path(uint8_t port) const {
  std::string base = socket_path_;
  if (base.size() > 5 && base.compare(base.size() - 5, 5, ".sock") == 0) base.resize(base.size() - 5);
  return base + ".issm" + std::to_string(port);
}

bool UmadService::is_sm(uint8_t port) const {
  auto it = issm_opens_.find(port);
  return it != issm_opens_.end() && it->second > 0;
}

// The issm files: plain files that ibd watches with inotify. An open is
// IN_OPEN, a close (also by a dying process) IN_CLOSE_*. Each is created
// anew, mode 0600 (only root opens it, as /dev/infiniband/issmN, whose
// open is what makes a process the port's SM): whatever was at the path is
// unlinked (a symlink itself, never its target), then O_CREAT|O_EXCL|
// O_NOFOLLOW, so a name planted meanwhile fails the create instead of
// being followed; the watch does not follow symlinks either and must be
// on the inode created.
void UmadService::setup_issm() {
  auto log = log::get("ibd");
  int fd = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  if (fd < 0) {
    log->warn("umad: inotify_init1: {}; the issm files will not set IsSM", std::strerror(errno));
    return;
  }
  inotify_ = UniqueFd(fd);
  for (uint8_t p = 1; p <= num_ports_; ++p) {
    const std::string path = issm_path(p);
    if (::unlink(path.c_str()) != 0 && errno != ENOENT)
      log->warn("umad: removing the old {}: {}", path, std::strerror(errno));
    UniqueFd f(::open(path.c_str(), O_CREAT | O_EXCL | O_NOFOLLOW | O_WRONLY | O_CLOEXEC, 0600));
    if (!f) {
      log->warn("umad: creating {}: {}; no issm file for port {}", path, std::strerror(errno), p);
      continue;
    }
    (void)::fchmod(f.get(), 0600);  // whatever the umask
    int wd = ::inotify_add_watch(fd, path.c_str(), IN_OPEN | IN_CLOSE_WRITE | IN_CLOSE_NOWRITE | IN_DONT_FOLLOW);
    struct stat made{}, seen{};
    if (wd >= 0 && (::fstat(f.get(), &made) != 0 || ::lstat(path.c_str(), &seen) != 0 ||
                    made.st_ino != seen.st_ino || made.st_dev != seen.st_dev)) {
      (void)::inotify_rm_watch(fd, wd);
      errno = EEXIST;
      wd = -1;  // replaced between the create and the watch
    }
    if (wd < 0) {
      log->warn("umad: watching {}: {}", path, std::strerror(errno));
      continue;
    }
    issm_watch_[wd] = p;
    issm_opens_[p] = 0;
  }
  inotify_sd_ = std::make_unique<asio::posix::stream_descriptor>(io_, fd);
  inotify_sd_->async_wait(asio::posix::stream_descriptor::wait_read, [this](boost::system::error_code ec) {
    if (!ec) on_inotify();
  });
}

void UmadService::on_inotify() {
  alignas(inotify_event) char buf[4096];
  for (;;) {
    ssize_t n = ::read(inotify_.get(), buf, sizeof buf);
    if (n <= 0) break;
    for (ssize_t off = 0; off < n;) {
      auto* ev = reinterpret_cast<inotify_event*>(buf + off);
      off += ssize_t(sizeof(inotify_event) + ev->len);
      auto it = issm_watch_.find(ev->wd);
      if (it == issm_watch_.end()) continue;
      int& opens = issm_opens_[it->second];
      const bool was = opens > 0;
      if (ev->mask & IN_OPEN) ++opens;
      if (ev->mask & (IN_CLOSE_WRITE | IN_CLOSE_NOWRITE)) opens = std::max(0, opens - 1);
      if (was != (opens > 0)) set_is_sm(it->second, opens > 0);
    }
  }
  inotify_sd_->async_wait(asio::posix::stream_descriptor::wait_read, [this](boost::system::error_code ec) {
    if (!ec) on_inotify();
  });
}

// docs/simhca.md §6.3: the device's PortInfo:CapabilityMask, which subnet
// managers read, gets or loses IsSM. Without a device nothing is sent: the
// count of opens is kept, and device_back() applies it to the new device.
void UmadService::set_is_sm(uint8_t port, bool set) {
  if (!device_up_) return;
  hca::PortSetup ps;
  if (set) ps.cap_set = kIsSmCap;
  else ps.cap_clear = kIsSmCap;
  // Asynchronous: this runs on the loop (docs/device-access.md).
  hca_.set_port_async(port, ps, [port, set](Result<void> r) {
    log::get("ibd")->info("umad: port {}: IsSM {}{}", port, set ? "set" : "cleared",
                          r ? "" : " (SET_PORT failed: " + r.error().str() + ")");
  });
}

namespace {
proto::UmadPortRep port_rep(const hca::PortAttr& a);
}

void UmadService::port_info_async(uint8_t port, hca::Completer<Result<proto::UmadPortRep>> done) {
  if (port < 1 || port > num_ports_) {
    asio::post(io_, [d = std::move(done), port]() mutable { d(err(EINVAL, "no port {}", port)); });
    return;
  }
  if (!device_up_) {
    asio::post(io_, [d = std::move(done)]() mutable { d(err(ENODEV, "the device is gone; ibd is recovering it")); });
    return;
  }
  hca_.query_port_async(port, [d = std::move(done)](Result<hca::PortAttr> a) mutable {
    if (!a) return d(a.take_error());
    d(port_rep(*a));
  });
}

namespace {
proto::UmadPortRep port_rep(const hca::PortAttr& a) {
  proto::UmadPortRep r;
  r.state = a.state;
  r.phys_state = a.phys_state;
  r.lid = a.lid;
  r.sm_lid = a.sm_lid;
  r.lmc = a.lmc;
  r.sm_sl = a.sm_sl;
  r.active_width = a.active_width;
  r.active_speed = a.active_speed;
  r.cap_flags = a.cap_flags;  // IsSM included while the issm file is held
  r.gid_prefix = a.gid_prefix;
  r.port_guid = a.port_guid;
  r.num_pkeys = 1;
  bytes::put_le(std::as_writable_bytes(std::span(r.pkeys)), 0, 2, a.pkey0);  // little-endian u16 each
  return r;
}
}  // namespace

Result<mad::MadLayer*> UmadService::layer(uint8_t port) {
  if (auto it = layers_.find(port); it != layers_.end()) return it->second.get();
  return err(ENODEV, "port {}: QP0 and QP1 are not open", port);
}

// The layer's chain of commands ended: the waiting opens get their
// sessions, or its error.
void UmadService::on_layer_open(uint8_t port, Result<std::unique_ptr<mad::MadLayer>> l) {
  if (!l && device_up_) {
    // Failed, perhaps because the device is being lost (the fence fails
    // every command before device_lost() is called): the waiters are
    // answered a turn of the loop later, unless the device is gone by then
    // (they then wait for device_back()).
    asio::post(io_, [this, port, e = l.error(), gen = generation_, alive = std::weak_ptr<bool>(alive_)] {
      if (alive.expired() || gen != generation_) return;
      fail_waiters(port, e);
    });
    return;
  }
  if (!l) return;  // the device is gone: the waiters wait for device_back()
  std::vector<Waiter> waiters = std::move(opening_[port]);
  opening_.erase(port);
  (*l)->set_max_outstanding(max_outstanding_);
  mad::MadLayer& layer = **l;
  layers_.emplace(port, std::move(*l));
  // After a device loss: the agents of the port's sessions, on the new layer.
  size_t again = 0;
  for (auto& s : sessions_) {
    if (s->port != port) continue;
    for (auto& [id, a] : s->agents) {
      if (a.key) continue;
      if (auto r = attach(*s, id, layer); !r)
        log::get("ibd")->warn("umad: client {} port {}: agent {} not registered again: {}", s->client, port, id,
                              r.error().str());
      else
        ++again;
    }
  }
  counters_.reregistered += again;
  log::get("ibd")->info("umad: port {}: {} up{}", port, layer.has_smi() ? "QP0 and QP1" : "QP1 (no SMI: no QP0)",
                        again ? fmt::format(", {} agents registered again", again) : std::string());
  if (auto w = watchers_.find(port); w != watchers_.end())
    for (auto& f : w->second) f(&layer);
  for (Waiter& w : waiters) w.done(new_session(w.client, port, w.privileged));
}

void UmadService::fail_waiters(uint8_t port, const Error& e) {
  log::get("ibd")->warn("umad: port {}: opening QP0 and QP1: {}", port, e.str());
  std::vector<Waiter> waiters = std::move(opening_[port]);
  opening_.erase(port);
  for (Waiter& w : waiters) w.done(e);
}

// One opening per port at a time (an open and device_back() may both ask).
void UmadService::open_layer(uint8_t port) {
  if (layers_.count(port) || !layer_opening_.insert(port).second) return;
  mad::MadLayer::open_async(io_, hca_, port,
                            [this, port, gen = generation_, alive = std::weak_ptr<bool>(alive_)](
                                Result<std::unique_ptr<mad::MadLayer>> l) mutable {
                              // ibd is stopping, or the layer was opened on a
                              // device since lost: it closes here.
                              if (alive.expired() || gen != generation_) return;
                              layer_opening_.erase(port);
                              on_layer_open(port, std::move(l));
                            },
                            dmac_);
}

// docs/operations.md §5: the QPs, CQs and AHs of the MAD layers went with
// the device; the fence has failed their commands, so closing them issues
// none that waits. Sessions and their agents stay.
void UmadService::device_lost() {
  if (!device_up_) return;
  device_up_ = false;
  ++generation_;
  layer_opening_.clear();  // those openings' results are dropped
  // Requests in flight will get no response: back to their agents now,
  // EIO, so a client waiting for them (OpenSM counts its outstanding SMPs)
  // goes on.
  for (auto& [p, l] : layers_) l->fail_outstanding(EIO);
  for (auto& s : sessions_)
    for (auto& [id, a] : s->agents) a.key = 0;
  for (auto& [p, ws] : watchers_)
    if (layers_.count(p))
      for (auto& f : ws) f(nullptr);
  layers_.clear();
  log::get("ibd")->info("umad: device lost: {} MAD sockets kept, their agents wait for the device", sessions_.size());
}

void UmadService::device_back() {
  if (device_up_) return;
  device_up_ = true;
  std::set<uint8_t> ports;
  for (auto& s : sessions_) ports.insert(s->port);
  for (auto& [p, ws] : opening_)
    if (!ws.empty()) ports.insert(p);
  for (auto& [p, ws] : watchers_)
    if (!ws.empty()) ports.insert(p);
  for (uint8_t p : ports) open_layer(p);
  // The new device starts without IsSM (§6.3): the ports whose issm file
  // is held get it again.
  for (auto& [p, n] : issm_opens_)
    if (n > 0) set_is_sm(p, true);
}

void UmadService::watch_layer(uint8_t port, LayerWatcher w) {
  auto& ws = watchers_[port];
  ws.push_back(std::move(w));
  if (auto l = layer(port); l) return ws.back()(*l);
  if (device_up_) open_layer(port);
}

bool UmadService::on_cq_event(uint32_t cqn) {
  for (auto& [p, l] : layers_)
    if (l->on_cq_event(cqn)) return true;
  return false;
}

UmadService::Session* UmadService::find_session(uint32_t client, uint8_t port) {
  for (auto& s : sessions_)
    if (s->client == client && s->port == port) return s.get();
  return nullptr;
}

void UmadService::open_async(uint32_t client, uint8_t port, bool privileged, hca::Completer<Result<UniqueFd>> done) {
  auto fail = [&](Error e) { asio::post(io_, [d = std::move(done), e = std::move(e)]() mutable { d(std::move(e)); }); };
  // As the kernel's umad device files (root's, mode 0600): management
  // traffic is for privileged users; GMPs on QP1 also for others when the
  // administrator said so (--umad-user-access=gmp).
  if (!privileged && !user_gmp_) {
    ++counters_.denied;
    return fail(err(EPERM, "the user-MAD service needs root or CAP_NET_ADMIN"));
  }
  if (port < 1 || port > num_ports_) return fail(err(EINVAL, "no port {}", port));
  bool waiting = false;
  for (auto& [p, ws] : opening_)
    for (auto& w : ws) waiting |= w.client == client && p == port;
  if (find_session(client, port) || waiting) return fail(err(EBUSY, "port {} is already open on this connection", port));
  // Without a device, the session is made now (its socket needs none);
  // the port's layer comes with device_back().
  if (layers_.count(port) || !device_up_) {
    asio::post(io_, [this, d = std::move(done), client, port, privileged,
                     alive = std::weak_ptr<bool>(alive_)]() mutable {
      if (alive.expired()) return;
      d(new_session(client, port, privileged));
    });
    return;
  }
  auto& ws = opening_[port];
  ws.push_back(Waiter{client, privileged, std::move(done)});
  open_layer(port);  // unless the port's opening is under way: then it waits for that one
}

Result<UniqueFd> UmadService::new_session(uint32_t client, uint8_t port, bool privileged) {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sv) != 0)
    return err(errno, "socketpair: {}", std::strerror(errno));
  UniqueFd theirs(sv[1]);
  // Room for RMPP messages in one datagram each way (ibd is root: FORCE).
  for (int fd : sv)
    for (int opt : {SO_SNDBUFFORCE, SO_RCVBUFFORCE}) (void)::setsockopt(fd, SOL_SOCKET, opt, &kSocketBuf, sizeof kSocketBuf);
  // The client's end blocks (umad_recv polls first, as on the kernel's fd).
  int fl = ::fcntl(sv[1], F_GETFL);
  (void)::fcntl(sv[1], F_SETFL, fl & ~O_NONBLOCK);
  auto s = std::make_unique<Session>();
  s->client = client;
  s->port = port;
  s->privileged = privileged;
  s->sock = std::make_unique<asio::posix::stream_descriptor>(io_, sv[0]);
  Session& ref = *s;
  sessions_.push_back(std::move(s));
  ++counters_.opens;
  watch(ref);
  return theirs;
}

Result<uint32_t> UmadService::register_agent(uint32_t client, const proto::UmadRegReq& r) {
  // libibumad opens one connection per port: the session of this connection.
  Session* s = nullptr;
  for (auto& x : sessions_)
    if (x->client == client) s = x.get();
  if (!s) return err(EINVAL, "UMAD_REGISTER before UMAD_OPEN");
  if (s->agents.size() >= UMAD_CA_MAX_AGENTS) return err(ENOMEM, "{} agents already", UMAD_CA_MAX_AGENTS);
  if (r.flags & ~uint32_t(UMAD_USER_RMPP)) return err(EINVAL, "unknown flags {:#x}", r.flags);
  if (!s->privileged && mad::is_smp_class(r.mgmt_class)) {  // IBA 13.4.4: SMPs go on QP0
    ++counters_.denied;
    return err(EPERM, "class {:#04x} is an SMP class: root or CAP_NET_ADMIN only", r.mgmt_class);
  }
  mad::AgentSpec spec;
  spec.mgmt_class = r.mgmt_class;
  spec.class_version = r.class_version;
  // UMAD_USER_RMPP: the process does RMPP itself; the layer passes segments.
  spec.rmpp_version = (r.flags & UMAD_USER_RMPP) ? 0 : r.rmpp_version;
  spec.oui = r.oui;
  spec.methods[0] = r.method_mask_lo;
  spec.methods[1] = r.method_mask_hi;
  uint32_t id = s->next_agent;
  while (s->agents.count(id)) id = (id + 1) % UMAD_CA_MAX_AGENTS;
  s->agents[id] = Agent{spec, 0};
  if (auto l = layer(s->port); l) {
    if (auto a = attach(*s, id, **l); !a) {
      s->agents.erase(id);
      return a.take_error();
    }
  } else if (device_up_) {
    s->agents.erase(id);
    return l.take_error();
  }  // else: recorded; registered on the port's layer when the device is back
  s->next_agent = (id + 1) % UMAD_CA_MAX_AGENTS;
  log::get("ibd")->debug("umad: client {} port {}: agent {} class {:#04x} v{} rmpp {} methods {:#x}:{:#x}", client,
                         s->port, id, spec.mgmt_class, spec.class_version, spec.rmpp_version, spec.methods[1],
                         spec.methods[0]);
  return id;
}

// Agent `id` of session `s` on layer `l` (its spec as the client gave it).
Result<uint32_t> UmadService::attach(Session& s, uint32_t id, mad::MadLayer& l) {
  Agent& a = s.agents.at(id);
  const uint32_t client = s.client;
  const uint8_t port = s.port;
  OPENIB_TRY_ASSIGN(a.key, l.register_agent(a.spec, [this, client, port, id](const mad::Delivery& d) {
                      deliver(client, port, id, d);
                    }));
  return a.key;
}

Result<void> UmadService::unregister_agent(uint32_t client, uint32_t agent) {
  for (auto& s : sessions_) {
    if (s->client != client) continue;
    auto it = s->agents.find(agent);
    if (it == s->agents.end()) continue;
    if (auto l = layers_.find(s->port); l != layers_.end() && it->second.key) l->second->unregister_agent(it->second.key);
    s->agents.erase(it);
    return ok();
  }
  return err(EINVAL, "no agent {}", agent);
}

void UmadService::client_gone(uint32_t client) {
  // Its opens still waiting for a layer are answered (to no one) now; the
  // opening itself goes on for the others and for the next client.
  for (auto& [p, ws] : opening_)
    for (auto& w : ws)
      if (w.client == client) w.done(err(ECONNRESET, "client {} left while port {} was opening", client, p));
  for (auto& [p, ws] : opening_) std::erase_if(ws, [&](const Waiter& w) { return w.client == client; });
  for (size_t i = sessions_.size(); i-- > 0;)
    if (sessions_[i]->client == client) close_session(sessions_[i].get());
}

void UmadService::close_session(Session* s) {
  if (auto l = layers_.find(s->port); l != layers_.end())
    for (auto& [id, a] : s->agents)
      if (a.key) l->second->unregister_agent(a.key);
  boost::system::error_code ec;
  s->sock->cancel(ec);
  // Datagrams still queued may carry fds the client attached: released
  // with the socket, off the loop (fd_closer.hpp).
  close_off_loop(UniqueFd(s->sock->release()));
  std::erase_if(sessions_, [&](auto& p) { return p.get() == s; });
}

// Reads what the client wrote: up to 64 datagrams per wakeup, whole
// messages or pieces (§10.1), each put together by the session's
// reassembler. Bad pieces are dropped and counted; the session goes on.
void UmadService::watch(Session& session) {
  const uint32_t client = session.client;
  const uint8_t port = session.port;
  session.sock->async_wait(asio::posix::stream_descriptor::wait_read, [this, client, port](boost::system::error_code ec) {
    if (ec) return;
    Session* s = find_session(client, port);
    if (!s) return;
    auto log = log::get("ibd");
    rx_.resize(madsock::kMaxDatagram);
    for (int i = 0; i < 64; ++i) {
      ssize_t got = recv_datagram(s->sock->native_handle(), rx_.data(), rx_.size());
      if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      if (got <= 0) {  // the client closed its MAD socket
        close_session(s);
        return;
      }
      if (size_t(got) > rx_.size()) {
        ++counters_.bad_client_mads;
        s->in.reset();
        log->warn("umad: client {}: a {}-byte datagram, over the {}-byte limit; dropped", client, got,
                  madsock::kMaxDatagram);
        continue;
      }
      auto step = s->in.feed(std::span<const std::byte>(rx_.data(), size_t(got)));
      if (!step.error.empty()) {
        ++counters_.bad_pieces;
        log->debug("umad: client {}: {}", client, step.error);
        continue;
      }
      if (s->in.buffered() && partial_bytes() > kMaxPartialIn) {
        ++counters_.bad_pieces;
        s->in.reset();
        log->warn("umad: client {}: messages half sent hold over {} bytes; this one dropped", client, kMaxPartialIn);
        continue;
      }
      if (!step.message) continue;
      if (madsock::in_pieces(s->in.message().size())) ++counters_.pieces_in;
      on_client_mad(*s, s->in.message());
      s = find_session(client, port);
      if (!s) return;
      s->in.reset();
    }
    watch(*s);
  });
}

size_t UmadService::partial_bytes() const {
  size_t n = 0;
  for (const auto& s : sessions_) n += s->in.buffered();
  return n;
}

// One write() of the client: struct ib_user_mad, then the MAD or RMPP message.
void UmadService::on_client_mad(Session& s, std::span<const std::byte> msg) {
  auto log = log::get("ibd");
  if (msg.size() < kUmadHdr + kMadHdr) {
    ++counters_.bad_client_mads;
    return;
  }
  ib_user_mad hdr;
  std::memcpy(&hdr, msg.data(), kUmadHdr);
  auto ait = s.agents.find(hdr.agent_id);
  if (ait == s.agents.end()) {
    ++counters_.bad_client_mads;
    log->debug("umad: client {}: send on unregistered agent {}", s.client, hdr.agent_id);
    return;
  }
  mad::MadAddress to = from_umad(hdr.addr);
  auto body = msg.subspan(kUmadHdr);
  // A GMP-only session (not privileged) sends nothing on or to QP0: the
  // layer picks QP0 by the MAD's class (IBA 13.4.4), so that is checked here.
  Result<void> r = ok();
  auto l = layer(s.port);
  if (!s.privileged && (mad::is_smp_class(uint8_t(body[1])) || to.qpn == 0)) {
    ++counters_.denied;
    r = err(EPERM, "an SMP or a MAD to QP0 from a session without CAP_NET_ADMIN");
  } else if (!l || !ait->second.key) {
    // No device (or its layer not open again yet): EIO, what the kernel's
    // ib_umad answers once a device's agents are dead (docs/umad.md
    // "Device loss").
    ++counters_.sends_without_device;
    r = err(EIO, "port {}: no device (ibd is recovering it)", s.port);
  } else {
    r = (*l)->send(ait->second.key, to, body, hdr.timeout_ms, hdr.retries);
  }
  if (!r) {
    ++counters_.send_errors;
    log->debug("umad: client {}: send: {}", s.client, r.error().str());
    // As a failed send with a timeout comes back from the kernel: the header.
    if (!mad::is_response_mad(body) && hdr.timeout_ms) {
      mad::Delivery d;
      const int code = r.error().code;
      d.status = uint32_t(code == EAGAIN ? ETIMEDOUT : code == EPERM || code == EIO ? code : ECOMM);
      d.from = to;
      d.data.assign(body.begin(), body.begin() + kMadHdr);
      deliver(s.client, s.port, hdr.agent_id, d);
    }
    return;
  }
  ++counters_.sent;
}

std::vector<std::pair<std::string, uint64_t>> UmadService::counter_list() const {
  std::vector<std::pair<std::string, uint64_t>> v{
      {"umad_sessions", sessions_.size()},      {"umad_opens", counters_.opens},
      {"umad_sent", counters_.sent},            {"umad_send_errors", counters_.send_errors},
      {"umad_delivered", counters_.delivered},  {"umad_dropped", counters_.dropped},
      {"umad_bad_client_mads", counters_.bad_client_mads}, {"umad_denied", counters_.denied},
      {"umad_sends_without_device", counters_.sends_without_device},
      {"umad_agents_reregistered", counters_.reregistered},
      {"umad_bad_pieces", counters_.bad_pieces}, {"umad_messages_in_pieces_sent", counters_.pieces_out},
      {"umad_messages_in_pieces_received", counters_.pieces_in}};
  for (const auto& [port, l] : layers_) {
    const auto& c = l->counters();
    const auto& q = l->port_counters();
    const std::string p = "mad_port" + std::to_string(port) + "_";
    for (auto [k, n] : std::initializer_list<std::pair<const char*, uint64_t>>{
             {"sent", c.sent}, {"send_errors", c.send_errors}, {"received", c.received},
             {"timeouts", c.timeouts}, {"retries", c.retries}, {"unmatched_responses", c.unmatched_responses},
             {"unclaimed_requests", c.unclaimed_requests}, {"rmpp_sent", c.rmpp_sent},
             {"rmpp_received", c.rmpp_received}, {"rmpp_aborted", c.rmpp_aborted},
             {"recv_errors", q.recv_errors}, {"no_send_buffer", q.no_send_buffer}, {"queued", q.queued},
             {"ahs_evicted", q.ahs_evicted}})
      v.emplace_back(p + k, n);
  }
  return v;
}

// To the client: queued on its session, written as the socket takes it
// (one datagram, or pieces, §10.1). A message is written whole or not at
// all; past kMaxQueuedOut unread bytes it is dropped, counted, as the
// kernel's queue would.
void UmadService::deliver(uint32_t client, uint8_t port, uint32_t agent, const mad::Delivery& d) {
  Session* s = find_session(client, port);
  if (!s) return;
  const size_t total = kUmadHdr + d.data.size();
  if (total > madsock::kMaxMessage || (s->out_bytes && s->out_bytes + total > kMaxQueuedOut)) {
    ++counters_.dropped;
    return;
  }
  ib_user_mad hdr{};
  hdr.agent_id = agent;
  hdr.status = d.status;
  hdr.length = uint32_t(total);
  hdr.addr = to_umad(d.from);
  Outgoing o;
  o.bytes.resize(total);
  std::memcpy(o.bytes.data(), &hdr, kUmadHdr);
  std::memcpy(o.bytes.data() + kUmadHdr, d.data.data(), d.data.size());
  o.id = ++s->next_out_id;
  s->out_bytes += total;
  s->out.push_back(std::move(o));
  if (!s->write_waiting) flush(*s);
}

void UmadService::flush(Session& s) {
  const int fd = s.sock->native_handle();
  while (!s.out.empty()) {
    Outgoing& o = s.out.front();
    const size_t total = o.bytes.size();
    ssize_t n;
    size_t len = total;
    if (!madsock::in_pieces(total)) {
      n = ::send(fd, o.bytes.data(), total, MSG_DONTWAIT | MSG_NOSIGNAL);
    } else {
      std::array<std::byte, madsock::kPieceHdr> ph;
      madsock::encode_piece_header(ph, madsock::PieceHeader{o.id, uint32_t(total), uint32_t(o.sent)});
      len = madsock::piece_len(total, o.sent);
      iovec iov[2] = {{ph.data(), ph.size()}, {o.bytes.data() + o.sent, len}};
      msghdr msg{};
      msg.msg_iov = iov;
      msg.msg_iovlen = 2;
      n = ::sendmsg(fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      s.write_waiting = true;
      const uint32_t client = s.client;
      const uint8_t port = s.port;
      s.sock->async_wait(asio::posix::stream_descriptor::wait_write, [this, client, port](boost::system::error_code ec) {
        if (ec) return;
        if (Session* x = find_session(client, port)) {
          x->write_waiting = false;
          flush(*x);
        }
      });
      return;
    }
    if (n < 0) {  // the client is gone (its end closed): the reading side ends the session
      counters_.dropped += s.out.size();
      s.out.clear();
      s.out_bytes = 0;
      return;
    }
    o.sent += len;
    if (o.sent < total) continue;
    if (madsock::in_pieces(total)) ++counters_.pieces_out;
    ++counters_.delivered;
    s.out_bytes -= total;
    s.out.pop_front();
  }
}

}  // namespace openib::ibd
