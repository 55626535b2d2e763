// Context::open and the control-path calls (docs/library.md).
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstdlib>

#include "clientproto/devices.hpp"
#include "common/log.hpp"
#include "lib/objects.hpp"

namespace openib {

Result<std::unique_ptr<Context>> Context::open(const ContextOptions& opts) {
  return lib::ContextImpl::open(opts);
}

namespace lib {

using proto::Op;

namespace {

// ContextOptions::poll_yield, or (negative) $OPENIB_POLL_YIELD, or the
// default; a malformed variable is reported and the default kept.
uint32_t poll_yield_of(const ContextOptions& opts) {
  if (opts.poll_yield >= 0) return uint32_t(opts.poll_yield);
  const char* env = std::getenv("OPENIB_POLL_YIELD");
  if (!env || !*env) return ContextOptions::kDefaultPollYield;
  char* end = nullptr;
  errno = 0;
  const unsigned long v = std::strtoul(env, &end, 10);
  if (errno || *end || *env == '-' || v > UINT32_MAX) {
    log::get("openib")->warn("OPENIB_POLL_YIELD='{}' is not a count (0 .. {}); using {}", env, UINT32_MAX,
                             ContextOptions::kDefaultPollYield);
    return ContextOptions::kDefaultPollYield;
  }
  return uint32_t(v);
}

// ibd's socket: the option, else $OPENIB_SOCKET, else the default.
std::string daemon_socket(const std::string& option) {
  if (!option.empty()) return option;
  const char* env = std::getenv("OPENIB_SOCKET");
  return env && *env ? env : proto::kDefaultSocket;
}

}  // namespace

Result<std::unique_ptr<Context>> ContextImpl::open(const ContextOptions& opts) {
  std::string device = opts.device;
  if (device.empty()) {
    const char* env = std::getenv("OPENIB_DEVICE");
    if (env) device = env;
  }
  // docs/client-protocol.md §2.1: each device has a socket of its own.
  OPENIB_TRY_ASSIGN(std::string path, proto::socket_for_device(daemon_socket(opts.socket), device));
  std::unique_ptr<ContextImpl> c(new ContextImpl);
  OPENIB_TRY_ASSIGN(Conn * conn, Conn::connect(path));
  c->conn_.reset(conn);
  c->conn_->set_timeout(opts.timeout_ms);
  c->socket_path_ = path;
  c->timeout_ms_ = opts.timeout_ms;
  c->poll_yield_ = poll_yield_of(opts);
  c->arena_ = std::make_unique<Arena>(*c->conn_);

  // HELLO with the async-event eventfd attached (docs/client-protocol.md).
  c->async_efd_ = UniqueFd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!c->async_efd_) return sys_err("eventfd");
  int efd = c->async_efd_.get();
  proto::HelloReq hello;
  hello.version_min = proto::kProtocolMin;
  hello.version_max = proto::kProtocolMax;
  hello.flags = proto::kHelloAsyncFd;
  OPENIB_TRY_ASSIGN(Reply r, c->conn_->call(Op::kHello, proto::encode(hello), std::span(&efd, 1)));
  OPENIB_TRY_ASSIGN(auto rep, proto::decode<proto::HelloRep>(r.payload));
  if (rep.version < proto::kProtocolMin || rep.version > proto::kProtocolMax)
    return err(EPROTO, "HELLO reply: version {}, offered {} to {}", rep.version, proto::kProtocolMin,
               proto::kProtocolMax);
  if (rep.doorbell_mode != proto::kDoorbellMmap)
    return err(EOPNOTSUPP, "ibd offers doorbell mode {}: doorbell relay not implemented", rep.doorbell_mode);
  // §4.1: the provider of the device's kind (simhca's before version 4).
  OPENIB_TRY_ASSIGN(c->provider_, choose_provider(proto::provider_name_view(rep.provider)));
  const size_t want_fds = rep.version >= proto::kProtocolStatusPage ? 2 : 1;
  if (r.fds.size() != want_fds)
    return err(EPROTO, "HELLO reply (version {}) with {} fds, expected {}", rep.version, r.fds.size(), want_fds);
  if (want_fds == 2) {  // §6.2: the status page, read-only
    void* s = ::mmap(nullptr, proto::kStatusPageSize, PROT_READ, MAP_SHARED, r.fds[1].get(), 0);
    if (s == MAP_FAILED) return sys_err("mmap of the device status page");
    c->status_page_ = static_cast<std::byte*>(s);
    c->status_word_ = reinterpret_cast<const uint32_t*>(c->status_page_ + proto::kStatusStateOffset);
  }
  const uint32_t page = c->provider_->uar_page_size;  // whole UAR pages
  if (rep.uar_size < page || rep.uar_size % page) return err(EPROTO, "HELLO reply: UAR size {}", rep.uar_size);
  void* p = ::mmap(nullptr, rep.uar_size, PROT_READ | PROT_WRITE, MAP_SHARED, r.fds[0].get(),
                   static_cast<off_t>(rep.uar_mmap_offset));
  if (p == MAP_FAILED) return sys_err("mmap UAR page {} (offset {:#x})", rep.uar, rep.uar_mmap_offset);
  c->uar_page_ = static_cast<std::byte*>(p);
  c->uar_size_ = rep.uar_size;
  c->client_id_ = rep.client_id;
  c->version_ = rep.version;
  c->uar_index_ = rep.uar;

  OPENIB_TRY_ASSIGN(c->dev_, c->device_rep());
  return std::unique_ptr<Context>(std::move(c));
}

ContextImpl::~ContextImpl() {
  if (arena_) arena_->release();
  arena_.reset();
  if (uar_page_) ::munmap(uar_page_, uar_size_);
  if (status_page_) ::munmap(status_page_, proto::kStatusPageSize);
}

bool ContextImpl::destroy(proto::Op op, uint32_t handle) {
  if (conn_->broken()) return false;  // ibd is gone and has destroyed everything
  if (device_lost_) return true;      // ibd forgot it when the device went
  auto r = conn_->call_void(op, proto::HandleReq{handle});
  if (!r && r.error().code == ENODEV) {
    device_lost_ = true;
    return true;
  }
  if (!r) log::get("openib")->warn("{} of handle {}: {}", proto::op_name(uint16_t(op)), handle, r.error().str());
  return r.ok();
}

namespace {
// DeviceAttr's libibverbs capabilities (include/openib/verbs.hpp) from
// DeviceRep's (docs/client-protocol.md "DeviceRep").
uint32_t ibv_cap_flags(const proto::DeviceRep& d) {
  uint32_t f = 0;
  if (d.cap_flags & proto::kDeviceCapPortEvents) f |= device_cap::kPortActiveEvent;
  if (d.sys_image_guid != 0) f |= device_cap::kSysImageGuid;
  // An RC responder without a receive WQE answers RNR NAK (IBA 9.7.5.2.8).
  if (d.cap_flags & proto::kDeviceCapRc) f |= device_cap::kRcRnrNakGen;
  return f;
}
}  // namespace

// QUERY_DEVICE's reply as the negotiated version has it: max_mr_size from
// protocol 5 on, 0 (not reported) before (docs/client-protocol.md "DeviceRep").
Result<proto::DeviceRep5> ContextImpl::device_rep() {
  if (version_ >= proto::kProtocolMrSize) return conn_->call<proto::DeviceRep5>(Op::kQueryDevice, proto::Empty{});
  OPENIB_TRY_ASSIGN(auto d, conn_->call<proto::DeviceRep>(Op::kQueryDevice, proto::Empty{}));
  proto::DeviceRep5 d5;
  static_cast<proto::DeviceRep&>(d5) = d;
  return d5;
}

Result<DeviceAttr> ContextImpl::query_device() {
  OPENIB_TRY_ASSIGN(auto d, device_rep());
  dev_ = d;
  DeviceAttr a;
  a.name.assign(reinterpret_cast<const char*>(d.name.data()),
                strnlen(reinterpret_cast<const char*>(d.name.data()), d.name.size()));
  a.node_guid = d.node_guid;
  a.sys_image_guid = d.sys_image_guid;
  a.fw_rev = d.fw_rev;
  a.vendor_id = d.vendor_id;
  a.vendor_part_id = d.vendor_part_id;
  a.max_qp = d.max_qp;
  a.max_cq = d.max_cq;
  a.max_srq = d.max_srq;
  a.max_pd = d.max_pd;
  a.max_mr = d.max_mr;
  a.max_ah = d.max_ah;
  a.max_qp_wr = 1u << d.log_max_qp_wr;
  a.max_cqe = 1u << d.log_max_cqe;
  a.max_srq_wr = 1u << d.log_max_srq_wr;
  a.max_sge = d.max_sge;
  a.max_inline = d.max_inline;
  a.max_msg_size = d.max_msg_size;
  a.num_ports = d.num_ports;
  a.max_rd_atomic = d.max_rd_atomic;
  a.max_dest_rd_atomic = d.max_dest_rd_atomic;
  a.hw_ver = d.hw_ver;
  a.local_ca_ack_delay = d.local_ca_ack_delay;
  a.device_cap_flags = ibv_cap_flags(d);
  a.atomic_cap = (d.cap_flags & proto::kDeviceCapAtomics) ? kAtomicHca : kAtomicNone;
  a.max_mr_size = d.max_mr_size;
  return a;
}

Result<PortAttr> ContextImpl::query_port(uint8_t port) {
  OPENIB_TRY_ASSIGN(auto p, conn_->call<proto::PortRep>(Op::kQueryPort, proto::PortReq{port}));
  PortAttr a;
  a.state = p.state;
  a.phys_state = p.phys_state;
  a.lid = p.lid;
  a.sm_lid = p.sm_lid;
  a.lmc = p.lmc;
  a.sm_sl = p.sm_sl;
  a.max_mtu = static_cast<Mtu>(p.max_mtu);
  a.active_mtu = static_cast<Mtu>(p.active_mtu);
  a.active_width = p.active_width;
  a.active_speed = p.active_speed;
  a.pkey_table_len = p.pkey_table_len;
  a.gid_table_len = p.gid_table_len;
  a.gid_prefix = p.gid_prefix;
  a.port_guid = p.port_guid;
  a.cap_flags = p.cap_flags;
  // The link layer from GID entry 0's QUERY_GID (PortRep has no field for
  // it); an ibd without QUERY_GID (EOPNOTSUPP) has InfiniBand ports only.
  auto e = query_gid_entry(port, 0);
  if (e) a.link_layer = e->link_layer;
  else if (e.error().code != EOPNOTSUPP && e.error().code != ENODATA) return e.take_error();
  return a;
}

Result<Gid> ContextImpl::query_gid(uint8_t port, int index) {
  // The device's GID table (QUERY_GID); an ibd without it: GID 0 only.
  // An empty entry reads as the zero GID, as ibv_query_gid answers.
  auto e = query_gid_entry(port, index);
  if (e) return e->gid;
  if (e.error().code == ENODATA) return Gid{};
  if (e.error().code != EOPNOTSUPP) return e.take_error();
  OPENIB_TRY_ASSIGN(PortAttr p, query_port(port));
  // GID 0 is the port's default GID, subnet prefix : port GUID (IBA 4.1.1).
  if (index != 0 || p.gid_table_len == 0)
    return err(EINVAL, "GID index {} of port {}: only index 0 is known", index, port);
  Gid g;
  for (int i = 0; i < 8; ++i) {
    g.raw[size_t(i)] = static_cast<uint8_t>(p.gid_prefix >> (56 - 8 * i));
    g.raw[size_t(8 + i)] = static_cast<uint8_t>(p.port_guid >> (56 - 8 * i));
  }
  return g;
}

Result<uint16_t> ContextImpl::query_pkey(uint8_t port, int index) {
  // QUERY_PKEY (docs/client-protocol.md §3.1); the wire's index is 16 bits.
  if (index < 0 || index > 0xffff) return err(EINVAL, "P_Key index {} of port {}", index, port);
  proto::PkeyReq req;
  req.port = port;
  req.index = static_cast<uint16_t>(index);
  OPENIB_TRY_ASSIGN(auto r, conn_->call<proto::PkeyRep>(Op::kQueryPkey, req));
  return r.pkey;
}

Result<std::unique_ptr<Pd>> ContextImpl::alloc_pd() {
  OPENIB_TRY_ASSIGN(auto r, conn_->call<proto::HandleRep>(Op::kAllocPd, proto::Empty{}));
  return std::unique_ptr<Pd>(new PdImpl(*this, r.handle));
}
PdImpl::~PdImpl() { ctx_.destroy(Op::kDeallocPd, handle_); }

// The wire <-> library boundary's one converter (docs/library.md "Types"):
// clientproto's field lists (proto::av_fields, proto::qp_attr_fields)
// walked over the public type and the wire's at once.
namespace {
struct Assign {
  template <class To, class From> void operator()(To& to, const From& from) const { to = static_cast<To>(from); }
  void operator()(Gid& to, const std::array<uint8_t, 16>& from) const { to.raw = from; }
  void operator()(std::array<uint8_t, 16>& to, const Gid& from) const { to = from.raw; }
};
}  // namespace

proto::Av to_proto(const AddressVector& av) {
  proto::Av a;
  proto::av_fields(Assign{}, a, av);
  return a;
}
AddressVector from_proto(const proto::Av& a) {
  AddressVector av;
  proto::av_fields(Assign{}, av, a);
  return av;
}
proto::QpAttr to_proto(const QpAttr& a, uint32_t mask) {
  proto::QpAttr p;
  p.mask = mask;
  proto::qp_attr_fields(Assign{}, p, a);
  return p;
}
QpAttr from_proto(const proto::QpAttr& p) {
  QpAttr a;
  proto::qp_attr_fields(Assign{}, a, p);
  a.cur_state = a.state;  // as ibv_query_qp's cur_qp_state (and CM_INIT_QP_ATTR's, as before)
  return a;
}

Result<std::unique_ptr<Ah>> ContextImpl::create_ah(Pd& pd, const AddressVector& av) {
  proto::CreateAhReq req;
  req.pd = pd.handle();
  req.av = to_proto(av);
  OPENIB_TRY_ASSIGN(auto r, conn_->call<proto::ObjRep>(Op::kCreateAh, req));
  return std::unique_ptr<Ah>(new AhImpl(*this, r.handle, r.number));
}
AhImpl::~AhImpl() { ctx_.destroy(Op::kDestroyAh, handle_); }

// ---- completion channels and async events ---------------------------------

Result<std::unique_ptr<CompChannel>> ContextImpl::create_comp_channel() {
  UniqueFd ep(::epoll_create1(EPOLL_CLOEXEC));
  if (!ep) return sys_err("epoll_create1");
  epoll_event ev{};
  ev.events = EPOLLRDHUP;  // (EPOLLHUP is always reported) ibd closed the connection
  ev.data.ptr = nullptr;
  if (::epoll_ctl(ep.get(), EPOLL_CTL_ADD, conn_->socket_fd(), &ev) < 0)
    return sys_err("epoll_ctl on the connection to ibd");
  return std::unique_ptr<CompChannel>(new CompChannelImpl(std::move(ep)));
}

Result<Cq*> CompChannelImpl::get_event(int timeout_ms) {
  epoll_event ev{};
  int n;
  do n = ::epoll_wait(ep_.get(), &ev, 1, timeout_ms);
  while (n < 0 && errno == EINTR);
  if (n < 0) return sys_err("epoll_wait on the completion channel");
  if (n == 0) return err(ETIMEDOUT, "no completion event within {} ms", timeout_ms);
  if (ev.data.ptr == nullptr) return err(ECONNRESET, "ibd closed the connection");
  auto* cq = static_cast<CqImpl*>(ev.data.ptr);
  uint64_t v;
  (void)!::read(cq->event_fd(), &v, sizeof v);  // ack (ibv_ack_cq_events)
  return static_cast<Cq*>(cq);
}

Result<std::vector<AsyncEvent>> ContextImpl::get_async_events() {
  uint64_t v;
  (void)!::read(async_efd_.get(), &v, sizeof v);  // before fetching: later events signal again
  std::vector<AsyncEvent> out;
  for (;;) {
    // §2: 25-byte events from protocol 3, 7-byte ones before.
    proto::AsyncEventsRep r;
    if (version_ >= proto::kProtocolPathEvents) {
      OPENIB_TRY_ASSIGN(r, conn_->call<proto::AsyncEventsRep3>(Op::kGetAsyncEvents, proto::Empty{}));
    } else {
      OPENIB_TRY_ASSIGN(r, conn_->call<proto::AsyncEventsRep>(Op::kGetAsyncEvents, proto::Empty{}));
    }
    if (r.dropped) log::get("openib")->warn("{} async events lost to a full queue in ibd", r.dropped);
    std::lock_guard lock(mu_);
    for (uint32_t i = 0; i < r.count && i < r.events.size(); ++i) {
      const auto& e = r.events[i];
      AsyncEvent a;
      a.type = static_cast<AsyncEventType>(e.type);
      if (a.type == AsyncEventType::kDeviceFatal) device_lost_ = true;
      a.port = e.port;
      a.pkey = e.pkey;
      a.dgid.raw = e.dgid;
      switch (static_cast<proto::ObjKind>(e.kind)) {
        case proto::ObjKind::kCq:
          if (auto it = cqs_.find(e.handle); it != cqs_.end()) a.cq = it->second;
          break;
        case proto::ObjKind::kQp:
          if (auto it = qp_handles_.find(e.handle); it != qp_handles_.end()) a.qp = it->second;
          break;
        case proto::ObjKind::kSrq:
          if (auto it = srqs_.find(e.handle); it != srqs_.end()) a.srq = it->second;
          break;
        default: break;
      }
      out.push_back(a);
    }
    if (r.count < proto::kMaxEventsPerReply) break;
  }
  return out;
}

void ContextImpl::track(CqImpl* cq) {
  std::lock_guard lock(mu_);
  cqs_[cq->handle()] = cq;
}
void ContextImpl::track(QpImpl* qp) {
  std::lock_guard lock(mu_);
  qp_handles_[qp->handle()] = qp;
  qps_.set(qp->qp_num(), qp);
}
void ContextImpl::track(SrqImpl* srq) {
  std::lock_guard lock(mu_);
  srqs_[srq->handle()] = srq;
}
void ContextImpl::forget(CqImpl* cq) {
  std::lock_guard lock(mu_);
  cqs_.erase(cq->handle());
}
void ContextImpl::forget(QpImpl* qp) {
  std::lock_guard lock(mu_);
  qp_handles_.erase(qp->handle());
  if (qps_.find(qp->qp_num()) == qp) qps_.set(qp->qp_num(), nullptr);
}
void ContextImpl::forget(SrqImpl* srq) {
  std::lock_guard lock(mu_);
  srqs_.erase(srq->handle());
}


}  // namespace lib

// Strings of libibverbs' ibv_wc_status_str.
const char* wc_status_str(uint8_t status) {
  switch (status) {
    case kWcSuccess: return "success";
    case kWcLocLenErr: return "local length error";
    case kWcLocQpOpErr: return "local QP operation error";
    case 3: return "local EE context operation error";
    case kWcLocProtErr: return "local protection error";
    case kWcWrFlushErr: return "Work Request Flushed Error";
    case 6: return "memory management operation error";
    case kWcBadRespErr: return "bad response error";
    case kWcLocAccessErr: return "local access error";
    case kWcRemInvReqErr: return "remote invalid request error";
    case kWcRemAccessErr: return "remote access error";
    case kWcRemOpErr: return "remote operation error";
    case kWcRetryExcErr: return "transport retry counter exceeded";
    case kWcRnrRetryExcErr: return "RNR retry counter exceeded";
    case 14: return "local RDD violation error";
    case 15: return "remote invalid RD request";
    case 16: return "operation aborted";
    case 17: return "invalid EE context number";
    case 18: return "invalid EE context state";
    case kWcFatalErr: return "fatal error";
    case 20: return "response timeout error";
    case kWcGeneralErr: return "general error";
    default: return "unknown";
  }
}

Result<std::vector<DeviceEntry>> list_devices(const std::string& socket) {
  const std::string main = lib::daemon_socket(socket);
  std::vector<DeviceEntry> out;
  for (auto& e : proto::list_devices(main)) out.push_back({std::move(e.name), std::move(e.socket)});
  if (out.empty()) return err(ENODEV, "no ibd device answers beside {}", main);
  return out;
}

}  // namespace openib
