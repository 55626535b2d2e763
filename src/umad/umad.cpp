// libibumad.so.3 for ibd (docs/umad.md): the ABI of rdma-core's libibumad
// (the structs of the installed <infiniband/umad.h>, symbol versions
// IBUMAD_1.0 to 1.2 in libibumad.map), talking to ibd's user-MAD service
// instead of the kernel (docs/client-protocol.md "User MADs").
//
// A "port id" is, as with the kernel, a file descriptor: the MAD socket ibd
// hands over on UMAD_OPEN. write() of struct ib_user_mad + MAD sends, read()
// receives in the kernel's format, so poll() on umad_get_fd() works as
// programs expect. Agent registration goes over the port's control
// connection (kept in a table next to the fd).
//
// ibd's socket: $OPENIB_SOCKET, else /run/ibd/ibd.sock. Each device ibd
// serves is a CA, reached through its own socket (docs/client-protocol.md
// §2.1 "Devices"); the first is the default CA.
#include <fcntl.h>
#include <infiniband/umad.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "clientproto/devices.hpp"
#include "clientproto/mad_socket.hpp"
#include "clientproto/messages.hpp"
#include "clientproto/socket.hpp"
#include "common/byte_order.hpp"

namespace {
namespace proto = openib::proto;
namespace bytes = openib::bytes;
namespace madsock = openib::proto::madsock;
using openib::UniqueFd;

int g_debug = 0;

void debug(int level, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
void debug(int level, const char* fmt, ...) {
  if (g_debug < level) return;
  va_list ap;
  va_start(ap, fmt);
  std::fputs("libibumad (ibd): ", stderr);
  std::vfprintf(stderr, fmt, ap);
  std::fputc('\n', stderr);
  va_end(ap);
}

std::string socket_path() {
  const char* env = std::getenv("OPENIB_SOCKET");
  return env && *env ? env : proto::kDefaultSocket;
}

// One synchronous control connection to ibd.
class Control {
 public:
  static int connect(Control& out, const std::string& path) {
    int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (fd < 0) return -errno;
    UniqueFd s(fd);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    if (path.size() >= sizeof a.sun_path) return -ENAMETOOLONG;
    std::memcpy(a.sun_path, path.c_str(), path.size() + 1);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      debug(1, "connect %s: %s", path.c_str(), std::strerror(errno));
      return -errno;
    }
    out.sock_ = std::move(s);
    proto::HelloReq h;
    h.flags = proto::kHelloNoUar;
    proto::HelloRep rep;
    if (int r = out.call(proto::Op::kHello, h, rep); r < 0) return r;
    out.num_ports_ = rep.num_ports;
    return 0;
  }

  template <class Req, class Rep>
  int call(proto::Op op, const Req& req, Rep& rep, UniqueFd* fd_out = nullptr) {
    auto body = proto::encode(req);
    proto::Header h;
    h.op = static_cast<uint16_t>(op);
    h.seq = ++seq_;
    if (auto r = proto::send_message(sock_.get(), h, body); !r) return -r.error().code;
    for (;;) {
      pollfd p{sock_.get(), POLLIN, 0};
      int n = ::poll(&p, 1, 10000);
      if (n == 0) return -ETIMEDOUT;
      if (n < 0) {
        if (errno == EINTR) continue;
        return -errno;
      }
      auto m = proto::recv_message(sock_.get());
      if (!m) return -m.error().code;
      if (m->header.seq != h.seq || m->header.op != (h.op | proto::kReplyBit)) continue;
      auto v = proto::decode_reply(m->body);
      if (!v) return -EPROTO;
      if (v->status != 0) {
        debug(1, "%s: %.*s", proto::op_name(h.op), int(v->payload.size()),
              reinterpret_cast<const char*>(v->payload.data()));
        return -v->status;
      }
      auto d = proto::decode<Rep>(v->payload);
      if (!d) return -EPROTO;
      rep = *d;
      if (fd_out && !m->fds.empty()) *fd_out = std::move(m->fds[0]);
      return 0;
    }
  }
  uint8_t num_ports() const { return num_ports_; }

 private:
  UniqueFd sock_;
  uint32_t seq_ = 0;
  uint8_t num_ports_ = 0;
};

struct Device {
  std::string name;
  std::string socket;  // its own (proto::device_socket), or ibd's for the first
  proto::DeviceRep dev;
};

// The CA served at `socket`, or -ENODEV.
int query_device(Device& d, const std::string& socket) {
  Control c;
  // The first device's name is a symlink to ibd's socket: its issm files
  // are named after the socket itself.
  char real[PATH_MAX];
  d.socket = ::realpath(socket.c_str(), real) ? real : socket;
  if (int r = Control::connect(c, socket); r < 0) return -ENODEV;
  if (int r = c.call(proto::Op::kQueryDevice, proto::Empty{}, d.dev); r < 0) return r;
  d.name.assign(reinterpret_cast<const char*>(d.dev.name.data()),
                strnlen(reinterpret_cast<const char*>(d.dev.name.data()), d.dev.name.size()));
  if (d.name.size() >= UMAD_CA_NAME_LEN) d.name.resize(UMAD_CA_NAME_LEN - 1);
  return 0;
}

// The CAs in order: ibd's devices by name; an ibd that lists none (its
// first device's name link missing) still has the one at its socket.
std::vector<Device> all_devices() {
  std::vector<Device> out;
  for (const auto& e : proto::list_devices(socket_path())) {
    Device d;
    if (query_device(d, e.socket) == 0) out.push_back(std::move(d));
  }
  if (out.empty()) {
    Device d;
    if (query_device(d, socket_path()) == 0) out.push_back(std::move(d));
  }
  return out;
}

// The CA named `ca_name`; NULL or empty: ibd's first device.
int find_device(const char* ca_name, Device& d) {
  auto path = proto::socket_for_device(socket_path(), ca_name ? ca_name : "");
  if (!path) return -ENODEV;
  if (int r = query_device(d, *path); r < 0) return r;
  return ca_name && *ca_name && d.name != ca_name ? -ENODEV : 0;
}

// IBA 14.2.5.6 LinkWidthActive x LinkSpeedActive, in Gb/s as sysfs "rate".
unsigned rate_of(uint8_t width, uint8_t speed) {
  unsigned lanes = width == 1 ? 1 : width == 2 ? 4 : width == 4 ? 8 : width == 8 ? 12 : 0;
  double gbps = speed == 1 ? 2.5 : speed == 2 ? 5 : speed == 4 ? 10 : 0;
  return unsigned(lanes * gbps);
}

int fill_port(Control& c, const Device& d, int portnum, umad_port_t* port) {
  proto::PortReq req;
  req.port = uint8_t(portnum);
  proto::UmadPortRep r;
  if (int e = c.call(proto::Op::kUmadPort, req, r); e < 0) return e;
  std::memset(port, 0, sizeof *port);
  std::snprintf(port->ca_name, sizeof port->ca_name, "%s", d.name.c_str());
  port->portnum = portnum;
  port->base_lid = r.lid;
  port->lmc = r.lmc;
  port->sm_lid = r.sm_lid;
  port->sm_sl = r.sm_sl;
  port->state = r.state;
  port->phys_state = r.phys_state;
  port->rate = rate_of(r.active_width, r.active_speed);
  port->capmask = htobe32(r.cap_flags);
  port->gid_prefix = htobe64(r.gid_prefix);
  port->port_guid = htobe64(r.port_guid);
  const unsigned n = std::min<unsigned>(r.num_pkeys, proto::kUmadMaxPkeys);
  port->pkeys_size = n;
  port->pkeys = static_cast<uint16_t*>(std::calloc(n ? n : 1, sizeof(uint16_t)));
  if (!port->pkeys) return -ENOMEM;
  const auto pkeys = std::as_bytes(std::span(r.pkeys));  // little-endian u16 each (clientproto)
  for (unsigned i = 0; i < n; ++i) port->pkeys[i] = bytes::get_le16(pkeys, 2 * i);
  std::snprintf(port->link_layer, sizeof port->link_layer, "InfiniBand");
  return 0;
}

// Port ids (MAD socket fds) and their control connections.
std::mutex g_mu;
std::map<int, Control> g_ports;

// A message in pieces is written, and read, by one thread at a time per
// port: a lock per fd, by the fd's number (never freed, unlike a port).
std::array<std::mutex, 64> g_send_mu, g_recv_mu;
std::mutex& fd_lock(std::array<std::mutex, 64>& locks, int fd) { return locks[size_t(fd) % locks.size()]; }

Control* control_of(int fd) {
  auto it = g_ports.find(fd);
  return it == g_ports.end() ? nullptr : &it->second;
}

// Port 0 of CA `d` as rdma-core resolves it: its first Active port, else
// its first LinkUp port; 0 when it has neither.
int usable_port(const Device& d, bool& active) {
  Control c;
  if (Control::connect(c, d.socket) < 0) return 0;
  int up = 0;
  for (int p = 1; p <= d.dev.num_ports; ++p) {
    umad_port_t port;
    if (fill_port(c, d, p, &port) < 0) continue;
    const unsigned state = port.state, phys = port.phys_state;
    std::free(port.pkeys);
    if (state == 4) {
      active = true;
      return p;
    }
    if (!up && phys == 5) up = p;
  }
  active = false;
  return up;
}

// A CA name and port as rdma-core resolves them: NULL = the first CA with
// an Active port (else with a LinkUp port, else the first CA); port 0 =
// that CA's first Active port, else its first LinkUp port, else port 1.
int resolve(const char* ca_name, int portnum, Device& d, int& port_out) {
  if (ca_name && *ca_name) {
    if (int r = find_device(ca_name, d); r < 0) return r;
  } else if (portnum > 0) {
    if (int r = find_device(nullptr, d); r < 0) return r;
  } else {
    auto all = all_devices();
    if (all.empty()) return -ENODEV;
    int best = -1, best_port = 1;
    for (size_t i = 0; i < all.size(); ++i) {
      bool active = false;
      const int p = usable_port(all[i], active);
      if (p && (active || best < 0)) {
        best = int(i), best_port = p;
        if (active) break;
      }
    }
    d = std::move(all[best < 0 ? 0 : size_t(best)]);
    port_out = best_port;
    return 0;
  }
  if (portnum > 0) {
    if (portnum > d.dev.num_ports) return -EINVAL;
    port_out = portnum;
    return 0;
  }
  bool active = false;
  const int p = usable_port(d, active);
  port_out = p ? p : 1;
  return 0;
}

}  // namespace

extern "C" {

int umad_init(void) { return 0; }
int umad_done(void) { return 0; }

int umad_debug(int level) {
  if (level >= 0) g_debug = level;
  return g_debug;
}

int umad_get_cas_names(char cas[][UMAD_CA_NAME_LEN], int max) {
  if (max < 1) return 0;
  int n = 0;
  for (const auto& d : all_devices()) {
    if (n == max) break;
    std::snprintf(cas[n++], UMAD_CA_NAME_LEN, "%s", d.name.c_str());
  }
  return n;
}

int umad_get_ca_portguids(const char* ca_name, __be64* portguids, int max) {
  Device d;
  if (find_device(ca_name, d) < 0) return -ENODEV;
  const int n = d.dev.num_ports + 1;
  if (!portguids) return n;
  if (n > max) return -ENOMEM;
  Control c;
  if (int r = Control::connect(c, d.socket); r < 0) return r;
  portguids[0] = htobe64(0);  // a CA has no port 0
  for (int p = 1; p < n; ++p) {
    umad_port_t port;
    if (int r = fill_port(c, d, p, &port); r < 0) return r;
    portguids[p] = port.port_guid;
    std::free(port.pkeys);
  }
  return n;
}

int umad_get_ca(const char* ca_name, umad_ca_t* ca) {
  if (!ca) return -EINVAL;
  Device d;
  if (find_device(ca_name, d) < 0) return -ENODEV;
  std::memset(ca, 0, sizeof *ca);
  std::snprintf(ca->ca_name, sizeof ca->ca_name, "%s", d.name.c_str());
  ca->node_type = 1;  // IBA 14.2.5.3 NodeType: channel adapter
  ca->numports = std::min<int>(d.dev.num_ports, UMAD_CA_MAX_PORTS - 1);
  std::snprintf(ca->fw_ver, sizeof ca->fw_ver, "%u.%u.%u", d.dev.fw_rev >> 16, (d.dev.fw_rev >> 8) & 0xff,
                d.dev.fw_rev & 0xff);
  std::snprintf(ca->ca_type, sizeof ca->ca_type, "simhca");
  std::snprintf(ca->hw_ver, sizeof ca->hw_ver, "0x%x", d.dev.hw_ver);
  ca->node_guid = htobe64(d.dev.node_guid);
  ca->system_guid = htobe64(d.dev.sys_image_guid);
  Control c;
  if (int r = Control::connect(c, d.socket); r < 0) return r;
  for (int p = 1; p <= ca->numports; ++p) {
    auto* port = static_cast<umad_port_t*>(std::calloc(1, sizeof(umad_port_t)));
    if (!port || fill_port(c, d, p, port) < 0) {
      std::free(port);
      umad_release_ca(ca);
      return -EIO;
    }
    ca->ports[p] = port;
  }
  return 0;
}

int umad_release_ca(umad_ca_t* ca) {
  if (!ca) return -EINVAL;
  for (auto*& p : ca->ports) {
    if (!p) continue;
    std::free(p->pkeys);
    std::free(p);
    p = nullptr;
  }
  return 0;
}

int umad_get_port(const char* ca_name, int portnum, umad_port_t* port) {
  if (!port) return -EINVAL;
  Device d;
  int p = 0;
  if (int r = resolve(ca_name, portnum, d, p); r < 0) return r;
  Control c;
  if (int r = Control::connect(c, d.socket); r < 0) return r;
  return fill_port(c, d, p, port);
}

int umad_release_port(umad_port_t* port) {
  if (!port) return -EINVAL;
  std::free(port->pkeys);
  port->pkeys = nullptr;
  return 0;
}

// ibd watches this file: while a process holds it open, the port has IsSM
// (docs/umad.md "issm").
int umad_get_issm_path(const char* ca_name, int portnum, char path[], int max) {
  Device d;
  int p = 0;
  if (int r = resolve(ca_name, portnum, d, p); r < 0) return r;
  std::string base = d.socket;
  if (base.size() > 5 && base.compare(base.size() - 5, 5, ".sock") == 0) base.resize(base.size() - 5);
  std::snprintf(path, size_t(max), "%s.issm%d", base.c_str(), p);
  return 0;
}

int umad_open_port(const char* ca_name, int portnum) {
  Device d;
  int p = 0;
  if (int r = resolve(ca_name, portnum, d, p); r < 0) return r;
  Control c;
  if (int r = Control::connect(c, d.socket); r < 0) return r;
  proto::PortReq req;
  req.port = uint8_t(p);
  proto::Empty rep;
  UniqueFd fd;
  if (int r = c.call(proto::Op::kUmadOpen, req, rep, &fd); r < 0) return r;
  if (!fd) return -EPROTO;
  const int id = fd.release();
  std::lock_guard lock(g_mu);
  g_ports[id] = std::move(c);
  debug(1, "opened %s port %d as fd %d", d.name.c_str(), p, id);
  return id;
}

int umad_close_port(int portid) {
  std::lock_guard lock(g_mu);
  auto it = g_ports.find(portid);
  if (it == g_ports.end()) return -EINVAL;
  g_ports.erase(it);
  ::close(portid);
  return 0;
}

void* umad_get_mad(void* umad) { return static_cast<ib_user_mad*>(umad)->data; }
size_t umad_size(void) { return sizeof(ib_user_mad); }
int umad_status(void* umad) { return int(static_cast<ib_user_mad*>(umad)->status); }
ib_mad_addr_t* umad_get_mad_addr(void* umad) { return &static_cast<ib_user_mad*>(umad)->addr; }

int umad_set_grh(void* umad, void* mad_addr) {
  auto* m = static_cast<ib_user_mad*>(umad);
  auto* a = static_cast<ib_mad_addr_t*>(mad_addr);
  if (!a) {
    m->addr.grh_present = 0;
    return 0;
  }
  m->addr.grh_present = 1;
  m->addr.ib_gid = a->ib_gid;
  m->addr.flow_label = htobe32(a->flow_label);  // given in host order
  m->addr.hop_limit = a->hop_limit;
  m->addr.traffic_class = a->traffic_class;
  return 0;
}

int umad_set_pkey(void* umad, int pkey_index) {
  static_cast<ib_user_mad*>(umad)->addr.pkey_index = uint16_t(pkey_index);
  return 0;
}
int umad_get_pkey(void* umad) { return static_cast<ib_user_mad*>(umad)->addr.pkey_index; }

int umad_set_addr(void* umad, int dlid, int dqp, int sl, int qkey) {
  auto* m = static_cast<ib_user_mad*>(umad);
  m->addr.qpn = htobe32(uint32_t(dqp));
  m->addr.lid = htobe16(uint16_t(dlid));
  m->addr.qkey = htobe32(uint32_t(qkey));
  m->addr.sl = uint8_t(sl);
  return 0;
}

int umad_set_addr_net(void* umad, __be16 dlid, __be32 dqp, int sl, __be32 qkey) {
  auto* m = static_cast<ib_user_mad*>(umad);
  m->addr.qpn = dqp;
  m->addr.lid = dlid;
  m->addr.qkey = qkey;
  m->addr.sl = uint8_t(sl);
  return 0;
}

int umad_send(int portid, int agentid, void* umad, int length, int timeout_ms, int retries) {
  auto* m = static_cast<ib_user_mad*>(umad);
  // One MAD, or a whole RMPP message for an agent registered with an RMPP
  // version (ibd's MAD layer segments it), up to madsock::kMaxMessage.
  if (length < int(madsock::kMadHdr)) {
    errno = EINVAL;
    return -EINVAL;
  }
  const size_t total = sizeof(ib_user_mad) + size_t(length);
  if (total > madsock::kMaxMessage) {
    debug(1, "umad_send: a %zu-byte message, over the %zu-byte limit", total, madsock::kMaxMessage);
    errno = EMSGSIZE;
    return -EMSGSIZE;
  }
  m->timeout_ms = uint32_t(timeout_ms);
  m->retries = uint32_t(retries);
  m->agent_id = uint32_t(agentid);
  m->status = 0;
  m->length = uint32_t(total);
  auto* bytes = reinterpret_cast<std::byte*>(m);
  if (!madsock::in_pieces(total)) {
    ssize_t n = ::send(portid, m, total, MSG_NOSIGNAL);
    if (n == ssize_t(total)) return 0;
    if (!errno) errno = EIO;
    return -EIO;
  }
  // In pieces (docs/client-protocol.md §10.1), one thread at a time on a
  // port, so that two messages' pieces never mix.
  std::lock_guard lock(fd_lock(g_send_mu, portid));
  static std::atomic<uint32_t> ids{0};
  const madsock::PieceHeader h0{++ids, uint32_t(total), 0};
  for (size_t off = 0; off < total;) {
    std::array<std::byte, madsock::kPieceHdr> ph;
    madsock::PieceHeader h = h0;
    h.offset = uint32_t(off);
    madsock::encode_piece_header(ph, h);
    const size_t len = madsock::piece_len(total, off);
    iovec iov[2] = {{ph.data(), ph.size()}, {bytes + off, len}};
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = 2;
    ssize_t n = ::sendmsg(portid, &msg, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n != ssize_t(ph.size() + len)) {
      debug(1, "umad_send: piece at %zu of %zu: %s", off, total, n < 0 ? std::strerror(errno) : "short write");
      errno = EIO;
      return -EIO;
    }
    off += len;
  }
  return 0;
}

static int dev_poll(int fd, int timeout_ms) {
  pollfd p{fd, POLLIN, 0};
  int n = ::poll(&p, 1, timeout_ms);
  if (n == 0) {
    errno = ETIMEDOUT;
    return -ETIMEDOUT;
  }
  if (n < 0) return -errno;
  if (p.revents & POLLIN) return 0;
  errno = EIO;
  return -EIO;
}

int umad_poll(int portid, int timeout_ms) { return dev_poll(portid, timeout_ms); }
int umad_get_fd(int portid) { return portid; }

namespace {

// Reads the rest of a message sent in pieces (§10.1) whose first piece,
// `first`, is at the head of the socket, into `m` (room for it checked).
// The pieces follow one another; one out of sequence is EIO, and what is
// left of that message is discarded by the next umad_recv (pieces that do
// not begin a message).
int recv_pieces(int portid, std::byte* m, const madsock::PieceHeader& first) {
  for (size_t off = 0; off < first.total;) {
    // ibd is writing the rest: it comes, or ibd went.
    pollfd p{portid, POLLIN, 0};
    int r = ::poll(&p, 1, 30000);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      debug(1, "umad_recv: no piece at %zu of %u", off, first.total);
      return -EIO;
    }
    std::array<std::byte, madsock::kPieceHdr> ph;
    iovec iov[2] = {{ph.data(), ph.size()}, {m + off, first.total - off}};
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = 2;
    ssize_t n = ::recvmsg(portid, &msg, MSG_DONTWAIT);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    madsock::PieceHeader h;
    std::string e = n < ssize_t(ph.size()) ? std::string("a short datagram")
                    : (msg.msg_flags & MSG_TRUNC) ? std::string("a datagram past the message's end")
                                                  : madsock::check_piece(ph, size_t(n) - ph.size(), h);
    if (e.empty() && (h.id != first.id || h.total != first.total || h.offset != off))
      e = "a piece of another message";
    if (!e.empty()) {
      debug(1, "umad_recv: at %zu of %u: %s", off, first.total, e.c_str());
      return -EIO;
    }
    off += size_t(n) - ph.size();
  }
  return 0;
}

}  // namespace

// As the kernel's read(): a buffer too small for the MAD gets the header
// only, with `length` saying what is needed, and ENOSPC; the MAD stays
// queued. A message longer than one datagram comes in pieces (§10.1),
// read here one thread at a time per port.
int umad_recv(int portid, void* umad, int* length, int timeout_ms) {
  errno = 0;
  if (!umad || !length) {
    errno = EINVAL;
    return -EINVAL;
  }
  auto* m = static_cast<ib_user_mad*>(umad);
  auto* out = static_cast<std::byte*>(umad);
  const size_t room = sizeof(ib_user_mad) + size_t(std::max(*length, 0));
  std::lock_guard lock(fd_lock(g_recv_mu, portid));
  for (;;) {
    if (timeout_ms)
      if (int r = dev_poll(portid, timeout_ms); r < 0) return r;
    // The head datagram's first bytes and its length: a piece header and
    // struct ib_user_mad at most.
    std::array<std::byte, madsock::kPieceHdr + sizeof(ib_user_mad)> head{};
    ssize_t full = ::recv(portid, head.data(), head.size(), MSG_PEEK | MSG_TRUNC | (timeout_ms ? MSG_DONTWAIT : 0));
    if (full < 0) {
      if (errno == EAGAIN) errno = EWOULDBLOCK;
      return -errno;
    }
    if (full == 0) {  // ibd closed the MAD socket
      errno = EIO;
      return -EIO;
    }
    const size_t seen = std::min(size_t(full), head.size());
    if (!madsock::is_piece(std::span(head.data(), seen))) {
      if (size_t(full) > room) {
        std::memcpy(m, head.data(), std::min(seen, sizeof(ib_user_mad)));
        *length = int(size_t(full) - sizeof(ib_user_mad));
        errno = ENOSPC;
        return -ENOSPC;
      }
      ssize_t n = ::recv(portid, m, room, 0);
      if (n < ssize_t(sizeof(ib_user_mad))) {
        errno = EIO;
        return -EIO;
      }
      *length = int(size_t(n) - sizeof(ib_user_mad));
      return int(m->agent_id);
    }
    madsock::PieceHeader h;
    const size_t data = size_t(full) - std::min(size_t(full), madsock::kPieceHdr);
    if (std::string e = madsock::check_piece(std::span(head.data(), seen), data, h); !e.empty() || h.offset) {
      // What is left of a message cut short: discarded.
      debug(1, "umad_recv: a piece dropped: %s", e.empty() ? "it begins no message" : e.c_str());
      (void)::recv(portid, head.data(), 0, MSG_DONTWAIT);
      continue;
    }
    if (h.total > room) {
      std::memcpy(m, head.data() + madsock::kPieceHdr, sizeof(ib_user_mad));
      *length = int(h.total - sizeof(ib_user_mad));
      errno = ENOSPC;
      return -ENOSPC;
    }
    if (int r = recv_pieces(portid, out, h); r < 0) {
      errno = -r;
      return r;
    }
    *length = int(h.total - sizeof(ib_user_mad));
    return int(m->agent_id);
  }
}

int umad_register2(int port_fd, struct umad_reg_attr* attr, uint32_t* agent_id) {
  if (!attr || !agent_id) return EINVAL;
  std::lock_guard lock(g_mu);
  Control* c = control_of(port_fd);
  if (!c) return EINVAL;
  proto::UmadRegReq r;
  r.mgmt_class = attr->mgmt_class;
  r.class_version = attr->mgmt_class_version;
  r.rmpp_version = attr->rmpp_version;
  r.flags = attr->flags;
  r.oui = attr->oui;
  r.method_mask_lo = attr->method_mask[0];
  r.method_mask_hi = attr->method_mask[1];
  proto::HandleRep rep;
  if (int e = c->call(proto::Op::kUmadRegister, r, rep); e < 0) return -e;
  *agent_id = rep.handle;
  return 0;
}

static int register_common(int fd, int mgmt_class, int version, uint8_t rmpp_version, uint32_t oui,
                           long method_mask[16 / sizeof(long)]) {
  umad_reg_attr a{};
  a.mgmt_class = uint8_t(mgmt_class);
  a.mgmt_class_version = uint8_t(version);
  a.rmpp_version = rmpp_version;
  a.oui = oui;
  if (method_mask) std::memcpy(a.method_mask, method_mask, sizeof a.method_mask);
  uint32_t id = 0;
  if (int e = umad_register2(fd, &a, &id); e != 0) {
    errno = e;
    return -e;
  }
  return int(id);
}

int umad_register(int portid, int mgmt_class, int mgmt_version, uint8_t rmpp_version,
                  long method_mask[16 / sizeof(long)]) {
  return register_common(portid, mgmt_class, mgmt_version, rmpp_version, 0x001405 /* OpenIB OUI */,
                         method_mask);
}

int umad_register_oui(int portid, int mgmt_class, uint8_t rmpp_version, uint8_t oui[3],
                      long method_mask[16 / sizeof(long)]) {
  if (mgmt_class < 0x30 || mgmt_class > 0x4f) {
    errno = EINVAL;
    return -EINVAL;
  }
  const auto o = static_cast<uint32_t>(bytes::get_be(std::as_bytes(std::span(oui, 3)), 0, 3));
  return register_common(portid, mgmt_class, 1, rmpp_version, o, method_mask);
}

int umad_unregister(int portid, int agentid) {
  std::lock_guard lock(g_mu);
  Control* c = control_of(portid);
  if (!c) return -EINVAL;
  proto::HandleReq r;
  r.handle = uint32_t(agentid);
  proto::Empty rep;
  return c->call(proto::Op::kUmadUnregister, r, rep);
}

struct umad_device_node* umad_get_ca_device_list(void) {
  umad_device_node* head = nullptr;
  umad_device_node** tail = &head;
  for (const auto& d : all_devices()) {
    auto* node = static_cast<umad_device_node*>(std::calloc(1, sizeof(umad_device_node)));
    if (node) node->ca_name = strdup(d.name.c_str());
    if (!node || !node->ca_name) {
      std::free(node);
      umad_free_ca_device_list(head);
      return nullptr;
    }
    *tail = node;
    tail = &node->next;
  }
  return head;
}

void umad_free_ca_device_list(struct umad_device_node* head) {
  while (head) {
    auto* next = head->next;
    std::free(const_cast<char*>(head->ca_name));
    std::free(head);
    head = next;
  }
}

int umad_sort_ca_device_list(struct umad_device_node** head, size_t size) {
  (void)size;  // one CA per ibd: a list of at most one is sorted
  return head ? 0 : -EINVAL;
}

void umad_addr_dump(ib_mad_addr_t* addr) {
  char gid[64];
  const uint8_t* g = addr->gid;
  std::snprintf(gid, sizeof gid, "%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x", g[0],
                g[1], g[2], g[3], g[4], g[5], g[6], g[7], g[8], g[9], g[10], g[11], g[12], g[13], g[14], g[15]);
  std::fprintf(stderr,
               "qpn %u qkey 0x%x lid %u sl %d\n grh_present %d gid_index %d hop_limit %d traffic_class %d "
               "flow_label 0x%x pkey_index 0x%x\n Gid %s\n",
               be32toh(addr->qpn), be32toh(addr->qkey), be16toh(addr->lid), addr->sl, addr->grh_present,
               addr->gid_index, addr->hop_limit, addr->traffic_class, be32toh(addr->flow_label),
               addr->pkey_index, gid);
}

void umad_dump(void* umad) {
  auto* m = static_cast<ib_user_mad*>(umad);
  std::fprintf(stderr, "agent id %u status %x timeout %u\n", m->agent_id, m->status, m->timeout_ms);
  umad_addr_dump(&m->addr);
}

}  // extern "C"
