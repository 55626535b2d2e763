// Request validation and dispatch (docs/client-protocol.md "Operations").
// Every handler checks, in order: body length (proto::decode), the fds the
// op takes, each handle against this client's table and its kind, ranges
// and sizes against the mapped memory and the device's caps; only then
// does it issue the device command.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/steady_timer.hpp>

#include "arp/eth_dmac.hpp"
#include "common/log.hpp"
#include "hca/port_caps.hpp"
#include "ibd/client_mapping.hpp"
#include "ibd/fd_closer.hpp"
#include "ibd/qp_attr_convert.hpp"
#include "ibd/server.hpp"

namespace openib::ibd {

using proto::Op;

namespace {
constexpr uint64_t kPage = 4096;
constexpr uint64_t kMaxMapLength = 16ull << 30;

// The fd must be an eventfd: ibd only ever writes 8-byte counts to it.
Result<void> check_eventfd(int fd) {
  char buf[64];
  const std::string link = "/proc/self/fd/" + std::to_string(fd);
  const ssize_t n = ::readlink(link.c_str(), buf, sizeof buf - 1);
  if (n < 0 || std::string_view(buf, static_cast<size_t>(n)) != "anon_inode:[eventfd]")
    return err(EINVAL, "the attached fd is not an eventfd");
  return ok();
}

// Before anything else (fd_closer.hpp): the kinds of fd each op takes.
// HELLO and CREATE_CQ an eventfd, MAP_MEM a memfd, every other op none.
// How many is checked by each handler (expect_fds).
Result<void> check_fd_kinds(const proto::Message& m) {
  if (m.fds.empty()) return ok();
  FdKind want;
  switch (static_cast<Op>(m.header.op)) {
    case Op::kHello:
    case Op::kCreateCq: want = FdKind::kEventfd; break;
    case Op::kMapMem:
    case Op::kMapMemRange: want = FdKind::kMemfd; break;
    default: return err(EINVAL, "{} takes no fds, got {}", proto::op_name(m.header.op), m.fds.size());
  }
  for (const UniqueFd& f : m.fds)
    if (const FdKind k = fd_kind(f.get()); k != want)
      return err(EINVAL, "{} takes {}; the attached fd is {}", proto::op_name(m.header.op), fd_kind_name(want),
                 fd_kind_name(k));
  return ok();
}

template <class M>
proto::Bytes body(const M& m) {
  return proto::encode(m);
}

// QUERY_GID (docs/client-protocol.md §3.1): the entry (the device's
// QUERY_GID, docs/simhca.md §6.12), then the port's link layer; the
// numbering of enum ibv_gid_type and ibv_port_attr.link_layer on the wire.
proto::GidRep gid_rep(const hca::GidEntry& e, const hca::PortAttr& a) {
  proto::GidRep r;
  r.gid = e.gid;
  r.gid_type = e.type == hca::GidType::kRoceV2 ? proto::kGidTypeRoceV2 : proto::kGidTypeIb;
  r.link_layer = hca::protocol_roce(a.link_layer) ? proto::kLinkLayerEthernet : proto::kLinkLayerInfiniBand;
  return r;
}

Result<void> query_gid(hca::Device& hca, const std::weak_ptr<bool>& alive, proto::Message& m, Respond& done) {
  OPENIB_TRY_ASSIGN(auto req, proto::decode<proto::GidReq>(m.body));
  OPENIB_TRY(expect_fds(m, 0));
  if (req.reserved != 0) return err(EINVAL, "QUERY_GID: reserved byte {:#x}", req.reserved);
  if (req.port < 1 || req.port > hca.caps().num_ports) return err(EINVAL, "no port {}", req.port);
  hca.query_gid_async(req.port, req.index, [&hca, alive, port = req.port,
                                            done = std::move(done)](Result<hca::GidEntry> e) mutable {
    if (alive.expired()) return;
    if (!e) return done(e.take_error());
    hca.query_port_async(port, [alive, e = *e, done = std::move(done)](Result<hca::PortAttr> a) mutable {
      if (alive.expired()) return;
      if (!a) return done(a.take_error());
      done(Reply{body(gid_rep(e, *a)), {}});
    });
  });
  return ok();
}

// QUERY_PKEY (docs/client-protocol.md §3.1): entry `index` of the port's
// P_Key table. The seam's port attributes give the table's length and
// entry 0 (docs/simhca.md §6.3 `pkey0`, §14.4: simhca's table has no other).
Result<proto::PkeyRep> pkey_rep(const hca::PortAttr& a, uint8_t port, uint16_t index) {
  if (index >= a.pkey_table_len)
    return err(EINVAL, "QUERY_PKEY: index {} past port {}'s P_Key table of {}", index, port, a.pkey_table_len);
  if (index != 0) return err(EOPNOTSUPP, "QUERY_PKEY: the device seam gives P_Key entry 0 only, not {}", index);
  return proto::PkeyRep{a.pkey0, 0};
}

Result<void> query_pkey(hca::Device& hca, const std::weak_ptr<bool>& alive, proto::Message& m, Respond& done) {
  OPENIB_TRY_ASSIGN(auto req, proto::decode<proto::PkeyReq>(m.body));
  OPENIB_TRY(expect_fds(m, 0));
  if (req.reserved != 0) return err(EINVAL, "QUERY_PKEY: reserved byte {:#x}", req.reserved);
  if (req.port < 1 || req.port > hca.caps().num_ports) return err(EINVAL, "QUERY_PKEY: no port {}", req.port);
  hca.query_port_async(req.port, [alive, port = req.port, index = req.index,
                                  done = std::move(done)](Result<hca::PortAttr> a) mutable {
    if (alive.expired()) return;
    if (!a) return done(a.take_error());
    auto r = pkey_rep(*a, port, index);
    if (!r) return done(r.take_error());
    done(Reply{body(*r), {}});
  });
  return ok();
}

// DeviceRep.cap_flags (docs/client-protocol.md "DeviceRep") from the
// driver's neutral reading of the device.
uint32_t cap_flags(const hca::DeviceFeatures& f) {
  return (f.rc ? proto::kDeviceCapRc : 0) | (f.uc ? proto::kDeviceCapUc : 0) | (f.ud ? proto::kDeviceCapUd : 0) |
         (f.srq ? proto::kDeviceCapSrq : 0) | (f.atomics ? proto::kDeviceCapAtomics : 0) |
         (f.data_path ? proto::kDeviceCapDataPath : 0) | (f.port_events ? proto::kDeviceCapPortEvents : 0) |
         (f.ud_multicast ? proto::kDeviceCapUdMulticast : 0);
}

}  // namespace

void Server::handle(Client& c, proto::Message& m, Respond done) {
  const auto op = static_cast<Op>(m.header.op);
  if (auto r = check_fd_kinds(m); !r) return done(r.take_error());
  if (!c.hello && op != Op::kHello) return done(err(EPROTO, "HELLO must come first"));
  if (c.objects.size() >= kMaxObjectsPerClient && m.header.op != static_cast<uint16_t>(Op::kInfo))
    return done(err(ENOSPC, "too many objects for one client"));
  if (auto q = quota_.check_request(c.id, c.uid, m); !q) return done(q.take_error());
  // An asynchronous handler either handed `done` to its command's
  // continuation (ok) or failed validation (error, `done` still here).
  auto run = [&](Result<void> r) {
    if (!r && done) done(r.take_error());
  };
  switch (op) {
    case Op::kHello: return run(op_hello(c, m, done));
    case Op::kQueryDevice: return done(op_query_device(c, m));
    case Op::kQueryPort: return run(op_query_port(c, m, done));
    case Op::kQueryGid: return run(query_gid(hca_, alive_, m, done));
    case Op::kQueryPkey: return run(query_pkey(hca_, alive_, m, done));
    case Op::kAllocPd: return run(op_alloc_pd(c, m, done));
    case Op::kDeallocPd: return run(op_destroy(c, m, Kind::kPd, done));
    case Op::kMapMem:
    case Op::kMapMemRange: return done(op_map_mem(c, m));
    case Op::kMapMemShared: return done(op_map_mem_shared(c, m));
    case Op::kUnmapMem: return run(op_destroy(c, m, Kind::kMem, done));
    case Op::kRegMr: return run(op_reg_mr(c, m, done));
    case Op::kDeregMr: return run(op_destroy(c, m, Kind::kMr, done));
    case Op::kCreateCq: return run(op_create_cq(c, m, done));
    case Op::kDestroyCq: return run(op_destroy(c, m, Kind::kCq, done));
    case Op::kCreateSrq: return run(op_create_srq(c, m, done));
    case Op::kModifySrq: return run(op_modify_srq(c, m, done));
    case Op::kDestroySrq: return run(op_destroy(c, m, Kind::kSrq, done));
    case Op::kCreateQp: return run(op_create_qp(c, m, done));
    case Op::kModifyQp: return run(op_modify_qp(c, m, done));
    case Op::kQueryQp: return run(op_query_qp(c, m, done));
    case Op::kDestroyQp: return run(op_destroy(c, m, Kind::kQp, done));
    case Op::kCreateAh: return run(op_create_ah(c, m, done));
    case Op::kDestroyAh: return run(op_destroy(c, m, Kind::kAh, done));
    case Op::kGetAsyncEvents: return done(op_get_async_events(c, m));
    case Op::kInfo: return run(op_info(c, m, done));
    default: break;  // the services' (service.hpp)
  }
  // Path users get PATH_CHANGED events.
  Service* svc = services_ ? services_->serving(op) : nullptr;
  if (!svc) return done(err(EOPNOTSUPP, "unknown operation {}", m.header.op));
  if (op == Op::kPathQuery || op == Op::kPathTable) c.path_user = true;
  run(svc->handle(Caller{c.id, c.uid, c.net_admin}, m, done));
}

hca::Completer<Result<uint32_t>> Server::created(uint32_t id, Object o, Respond done) {
  return guard<uint32_t>([this, id, o = std::move(o), done = std::move(done)](Result<uint32_t> r) mutable {
    if (!r) return done(r.take_error());
    o.number = *r;
    Client* c = owner(id);
    if (!c) {  // cannot happen while the server lives (a departing client waits for us)
      log::get("ibd")->warn("client {} unknown at the completion of its {} {:#x}; destroying it", id,
                            kind_name(o.kind), *r);
      hca_.destroy_async(device_kind(o.kind), *r, [](Result<void>) {});
      return done(err(ENOTCONN, "client gone"));
    }
    if (!client(id)) {
      ++counters_.created_for_gone_client;
      log::get("ibd")->info("client {} left while its {} {:#x} was being created; destroyed with the rest",
                            id, kind_name(o.kind), *r);
    }
    const Kind kind = o.kind;
    const uint32_t number = *r, rkey = o.rkey;
    const uint32_t h = add(*c, std::move(o));
    if (kind == Kind::kMr) return done(Reply{body(proto::RegMrRep{h, number, rkey}), {}});
    if (kind == Kind::kPd) return done(Reply{body(proto::HandleRep{h}), {}});
    done(Reply{body(proto::ObjRep{h, number}), {}});
  });
}

// HELLO: version, the async eventfd, the client's own UAR and the fd to
// mmap its page from (docs/client-protocol.md "Doorbells").
Result<void> Server::op_hello(Client& c, proto::Message& m, Respond& done) {
  if (c.hello) return err(EPROTO, "HELLO was already said");
  OPENIB_TRY_ASSIGN(auto req, proto::decode<proto::HelloReq>(m.body));
  // §2: the highest version both speak.
  const uint32_t version = std::min(req.version_max, proto::kProtocolMax);
  if (req.version_min > version || version < proto::kProtocolMin)
    return err(EPROTONOSUPPORT, "this ibd speaks versions {} to {}", proto::kProtocolMin, proto::kProtocolMax);
  if (req.flags & ~(proto::kHelloAsyncFd | proto::kHelloNoUar))
    return err(EINVAL, "unknown HELLO flags {:#x}", req.flags);
  OPENIB_TRY(expect_fds(m, (req.flags & proto::kHelloAsyncFd) ? 1 : 0));
  if (!m.fds.empty()) OPENIB_TRY(check_eventfd(m.fds[0].get()));
  // Version 2: the device status page, the reply's last fd (§6.2).
  UniqueFd status;
  if (version >= proto::kProtocolStatusPage) {
    auto s = status_fd();
    if (!s) return err(s.error().code, "no device status page: {}", s.error().message);
    status = std::move(*s);
  }
  if (req.flags & proto::kHelloNoUar) {
    proto::HelloRep h;
    h.version = version;
    h.client_id = c.id;
    h.num_ports = hca_.caps().num_ports;
    h.provider = proto::provider_name(hca_.info().provider);  // the driver's data-path format
    c.hello = true;
    c.version = version;
    if (!m.fds.empty()) c.async_fd = std::move(m.fds[0]);
    log::get("ibd")->info("client {}: HELLO (management only, no UAR)", c.id);
    Reply rep;
    rep.payload = body(h);
    if (status) rep.fds.push_back(std::move(status));
    done(std::move(rep));
    return ok();
  }
  UniqueFd async_fd = m.fds.empty() ? UniqueFd() : std::move(m.fds[0]);
  hca_.alloc_uar_async(guard<uint32_t>([this, id = c.id, async_fd = std::move(async_fd), version,
                                        status = std::move(status),
                                        done = std::move(done)](Result<uint32_t> uar) mutable {
    if (!uar) return done(err(uar.error().code, "no UAR for this client: {}", uar.error().message));
    Client* cl = owner(id);
    if (!cl) return;
    if (!client(id)) {  // left meanwhile: its teardown deallocates the UAR
      cl->uar = *uar;
      return done(err(ENOTCONN, "client gone"));
    }
    Reply rep;
    proto::HelloRep h;
    h.version = version;
    h.client_id = cl->id;
    h.uar = *uar;
    h.uar_size = hca_.info().uar_page_size;
    h.provider = proto::provider_name(hca_.info().provider);
    h.num_ports = hca_.caps().num_ports;
    // docs/simhca.md §4: the fd of this UAR's page alone, never BAR2's.
    auto page = hca_.uar_page_fd(*uar);
    if (page) {
      h.doorbell_mode = proto::kDoorbellMmap;
      h.uar_mmap_offset = 0;
      rep.fds.push_back(std::move(*page));
    } else if (!hca_.alive()) {
      hca_.destroy_async(hca::ObjectKind::kUar, *uar, [](Result<void>) {});
      return done(err(ENODEV, "the device is gone"));
    } else {
      log::get("ibd")->info("client {}: no doorbell page to hand out ({})", cl->id, page.error().str());
      h.doorbell_mode = proto::kDoorbellRelay;
    }
    cl->uar = *uar;
    cl->hello = true;
    cl->version = version;
    cl->async_fd = std::move(async_fd);
    rep.payload = body(h);
    if (status) rep.fds.push_back(std::move(status));
    log::get("ibd")->info("client {}: HELLO, UAR {}, doorbells {}", cl->id, cl->uar,
                          h.doorbell_mode == proto::kDoorbellMmap ? "mmap" : "relay");
    done(std::move(rep));
  }));
  return ok();
}

Result<Reply> Server::op_query_device(Client& c, proto::Message& m) {
  OPENIB_TRY(proto::decode<proto::Empty>(m.body));
  OPENIB_TRY(expect_fds(m, 0));
  const hca::DeviceCaps& k = hca_.caps();
  proto::DeviceRep5 d;
  d.node_guid = k.node_guid;
  d.sys_image_guid = k.sys_image_guid;
  d.fw_rev = hca_.info().fw_rev;
  d.vendor_id = hca_.info().vendor_id;
  d.vendor_part_id = k.vendor_part_id;
  d.max_qp = k.max_qp;
  d.max_cq = k.max_cq;
  d.max_srq = k.max_srq;
  d.max_pd = k.max_pd;
  d.max_mr = k.max_mkey;
  d.max_ah = k.max_ah;
  d.max_msg_size = k.max_msg_size;
  d.cap_flags = cap_flags(k.features);
  d.max_sge = k.max_sge;
  d.max_inline = k.max_inline;
  d.log_max_qp_wr = k.log_max_qp_wr;
  d.log_max_cqe = k.log_max_cqe;
  d.log_max_srq_wr = k.log_max_srq_wr;
  d.num_ports = k.num_ports;
  d.max_rd_atomic = k.max_rd_atomic;
  d.max_dest_rd_atomic = k.max_dest_rd_atomic;
  d.local_ca_ack_delay = k.local_ca_ack_delay;
  const std::string_view name = std::string_view(opts_.name).substr(0, d.name.size() - 1);
  std::copy(name.begin(), name.end(), d.name.begin());
  // REG_MR's limit: max_mkey_pages pages of 4 KiB (op_reg_mr).
  d.max_mr_size = uint64_t{k.max_mkey_pages} * kPage;
  if (c.version < proto::kProtocolMrSize) return Reply{body(static_cast<const proto::DeviceRep&>(d)), {}};
  return Reply{body(d), {}};
}

namespace {
proto::PortRep port_rep(const hca::PortAttr& a);
}

Result<void> Server::op_query_port(Client&, proto::Message& m, Respond& done) {
  OPENIB_TRY_ASSIGN(auto req, proto::decode<proto::PortReq>(m.body));
  OPENIB_TRY(expect_fds(m, 0));
  if (req.port < 1 || req.port > hca_.caps().num_ports) return err(EINVAL, "no port {}", req.port);
  hca_.query_port_async(req.port, guard<hca::PortAttr>([done = std::move(done)](Result<hca::PortAttr> r) mutable {
    if (!r) return done(r.take_error());
    done(Reply{body(port_rep(*r)), {}});
  }));
  return ok();
}

namespace {
proto::PortRep port_rep(const hca::PortAttr& a) {
  proto::PortRep p;
  p.state = a.state;
  p.phys_state = a.phys_state;
  p.lid = a.lid;
  p.sm_lid = a.sm_lid;
  p.lmc = a.lmc;
  p.sm_sl = a.sm_sl;
  p.max_mtu = a.max_mtu;
  p.active_mtu = a.active_mtu;
  p.active_width = a.active_width;
  p.active_speed = a.active_speed;
  p.pkey_table_len = a.pkey_table_len;
  p.gid_table_len = a.gid_table_len;
  p.gid_prefix = a.gid_prefix;
  p.port_guid = a.port_guid;
  p.cap_flags = a.cap_flags;
  return p;
}
}  // namespace

Result<void> Server::op_alloc_pd(Client& c, proto::Message& m, Respond& done) {
  OPENIB_TRY(proto::decode<proto::Empty>(m.body));
  OPENIB_TRY(expect_fds(m, 0));
  Object o;
  o.kind = Kind::kPd;
  hca_.alloc_pd_async(created(c.id, std::move(o), std::move(done)));
  return ok();
}

// MAP_MEM: a memfd sealed against shrinking, at least `length` long, mapped
// for DMA (IOMMU / vfio-user DMA_MAP) through the pool's IOVA space. The
// seal comes first: without it the length check below means nothing, and
// the device's copies would fault on pages truncated away (memfd_create(2),
// "File sealing"; docs/client-protocol.md §3.1). MAP_MEM_RANGE (protocol
// 6) maps [offset, offset + length) of it instead of its start: libopenib's
// reg_mr keeps a process's registered pages in one memfd at offsets equal
// to their addresses (docs/library.md "Memory").
Result<Reply> Server::op_map_mem(Client& c, proto::Message& m) {
  proto::MapMemRangeReq req;
  if (m.header.op == uint16_t(Op::kMapMemRange)) {
    OPENIB_TRY_ASSIGN(req, proto::decode<proto::MapMemRangeReq>(m.body));
  } else {
    OPENIB_TRY_ASSIGN(auto r, proto::decode<proto::MapMemReq>(m.body));
    req.length = r.length;
  }
  OPENIB_TRY(expect_fds(m, 1));
  if (req.length == 0 || req.length % kPage != 0 || req.length > kMaxMapLength)
    return err(EINVAL, "length {} must be a non-zero multiple of 4096, at most 16 GiB", req.length);
  if (req.offset % kPage != 0 || req.offset + req.length < req.offset)
    return err(EINVAL, "offset {:#x} must be a multiple of 4096 and offset + length not wrap", req.offset);
  const int fd = m.fds[0].get();
  const int seals = ::fcntl(fd, F_GET_SEALS);
  if (seals < 0) return err(EINVAL, "the attached fd is not a memfd");
  if (!(seals & F_SEAL_SHRINK)) return err(EPERM, "the memfd is not sealed against shrinking (F_SEAL_SHRINK)");
  struct stat st{};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return err(EINVAL, "the attached fd is not a memfd");
  if (static_cast<uint64_t>(st.st_size) < req.offset + req.length)
    return err(EINVAL, "memfd of {} bytes ends before offset {:#x} + length {}", st.st_size, req.offset,
               req.length);
  const int acc = ::fcntl(fd, F_GETFL);
  if (acc < 0 || (acc & O_ACCMODE) != O_RDWR) return err(EACCES, "the memfd must be open read-write");
  OPENIB_TRY_ASSIGN(dma::DmaMapping map, hca_.pool().map_fd(fd, req.offset, req.length, true));
  Object o;
  o.kind = Kind::kMem;
  o.length = req.length;
  o.map = std::move(map);
  const uint64_t iova = o.map.iova();
  return Reply{body(proto::MapMemRep{add(c, std::move(o)), iova}), {}};
}

// MAP_MEM_SHARED (protocol 8): [addr, addr + length) of the client's own
// address space, a read-write shared mapping of a tmpfs or hugetlbfs file,
// which ibd opens itself (client_mapping.hpp) and maps for DMA: the pages
// stay the file's, shared with whoever else maps it (a forked child, another
// process, the file). A hugetlb file is mapped in whole huge pages around
// the range. The client can truncate the file under the device: simhca
// takes the fault as a DMA error (docs/simhca.md §12.6), ibd itself never
// touches those pages.
Result<Reply> Server::op_map_mem_shared(Client& c, proto::Message& m) {
  OPENIB_TRY_ASSIGN(auto req, proto::decode<proto::MapMemRangeReq>(m.body));
  OPENIB_TRY(expect_fds(m, 0));
  if (req.length == 0 || req.length % kPage != 0 || req.length > kMaxMapLength)
    return err(EINVAL, "length {} must be a non-zero multiple of 4096, at most 16 GiB", req.length);
  if (req.offset % kPage != 0 || req.offset + req.length < req.offset)
    return err(EINVAL, "address {:#x} must be a multiple of 4096 and address + length not wrap", req.offset);
  OPENIB_TRY_ASSIGN(SharedFile f, open_shared_range(c.pid, c.uid, c.gid, req.offset, req.length));
  const uint64_t start = f.offset / f.page_size * f.page_size;
  const uint64_t end = (f.offset + req.length + f.page_size - 1) / f.page_size * f.page_size;
  OPENIB_TRY_ASSIGN(dma::DmaMapping map, hca_.pool().map_fd(f.fd.get(), start, end - start, true));
  Object o;
  o.kind = Kind::kMem;
  o.length = req.length;
  o.base = f.offset - start;
  o.map = std::move(map);
  const uint64_t iova = o.map.iova() + o.base;
  return Reply{body(proto::MapMemRep{add(c, std::move(o)), iova}), {}};
}

// REG_MR: a page list of the memory's IOVAs for [offset, offset+length),
// seen by the client at `va` (docs/simhca.md §6.7, §12.6).
Result<void> Server::op_reg_mr(Client& c, proto::Message& m, Respond& done) {
  OPENIB_TRY_ASSIGN(auto req, proto::decode<proto::RegMrReq>(m.body));
  OPENIB_TRY(expect_fds(m, 0));
  OPENIB_TRY_ASSIGN(Object * pd, find(c, req.pd, Kind::kPd));
  OPENIB_TRY_ASSIGN(Object * mem, find(c, req.mem, Kind::kMem));
  if (req.access & ~0xfu) return err(EINVAL, "unknown access bits {:#x}", req.access);
  OPENIB_TRY_ASSIGN(uint64_t first, range_iova(*mem, req.offset, req.length, 1, "MR"));
  if (req.va + req.length < req.va) return err(EINVAL, "va + length wraps");
  if (req.va % kPage != req.offset % kPage)
    return err(EINVAL, "va {:#x} and offset {:#x} differ within a page", req.va, req.offset);
  const uint64_t npages = (req.va % kPage + req.length + kPage - 1) / kPage;
  if (npages > hca_.caps().max_mkey_pages)
    return err(EINVAL, "{} pages exceed the device's {} per MR", npages, hca_.caps().max_mkey_pages);
  hca::MkeyParams p;
  p.pdn = pd->number;
  p.access = req.access;
  p.start_va = req.va;
  p.length = req.length;
  p.log_page_size = 12;
  p.pages.reserve(npages);
  const uint64_t base = first - first % kPage;
  for (uint64_t i = 0; i < npages; ++i) p.pages.push_back(base + i * kPage);
  Object o;
  o.kind = Kind::kMr;
  o.length = req.length;
  o.deps = {req.pd, req.mem, 0, 0, 0};
  hca_.create_mkey_async(p, guard<hca::Mkey>([this, id = c.id, o = std::move(o),
                                               done = std::move(done)](Result<hca::Mkey> k) mutable {
    if (!k) return done(k.take_error());
    o.rkey = k->rkey;  // the lkey is the object's number
    created(id, std::move(o), std::move(done))(k->lkey);
  }));
  return ok();
}

// CREATE_CQ: 2^log_size 64-byte CQEs, 64-byte aligned; an 8-byte doorbell
// record (docs/simhca.md §6.5); on EQ 0 and the client's UAR.
Result<void> Server::op_create_cq(Client& c, proto::Message& m, Respond& done) {
  OPENIB_TRY_ASSIGN(auto req, proto::decode<proto::CreateCqReq>(m.body));
  if (req.flags & ~proto::kCqEventFd) return err(EINVAL, "unknown CQ flags {:#x}", req.flags);
  OPENIB_TRY(expect_fds(m, (req.flags & proto::kCqEventFd) ? 1 : 0));
  if (!m.fds.empty()) OPENIB_TRY(check_eventfd(m.fds[0].get()));
  OPENIB_TRY_ASSIGN(Object * mem, find(c, req.mem, Kind::kMem));
  if (req.log_size > hca_.caps().log_max_cqe)
    return err(EINVAL, "log_size {} exceeds the device's {}", req.log_size, hca_.caps().log_max_cqe);
  OPENIB_TRY_ASSIGN(uint64_t ring, range_iova(*mem, req.ring_offset,
                                              (uint64_t{1} << req.log_size) * 64, 64, "CQ ring"));
  OPENIB_TRY_ASSIGN(uint64_t dbr, range_iova(*mem, req.dbr_offset, 8, 8, "CQ doorbell record"));
  Object o;
  o.kind = Kind::kCq;
  o.log_size = req.log_size;
  o.deps = {req.mem, 0, 0, 0, 0};
  if (!m.fds.empty()) o.eventfd = std::move(m.fds[0]);
  hca_.create_cq_at_async(req.log_size, ring, dbr, c.uar, created(c.id, std::move(o), std::move(done)));
  return ok();
}

// CREATE_SRQ (docs/simhca.md §6.9).
Result<void> Server::op_create_srq(Client& c, proto::Message& m, Respond& done) {
  OPENIB_TRY_ASSIGN(auto req, proto::decode<proto::CreateSrqReq>(m.body));
  OPENIB_TRY(expect_fds(m, 0));
  OPENIB_TRY_ASSIGN(Object * pd, find(c, req.pd, Kind::kPd));
  OPENIB_TRY_ASSIGN(Object * mem, find(c, req.mem, Kind::kMem));
  if (req.log_size > hca_.caps().log_max_srq_wr)
    return err(EINVAL, "log_size {} exceeds the device's {}", req.log_size, hca_.caps().log_max_srq_wr);
  if (req.log_stride < 5 || req.log_stride > 10) return err(EINVAL, "log_stride {} not in 5..10", req.log_stride);
  if (req.limit >= (1u << req.log_size)) return err(EINVAL, "limit {} not below the SRQ size", req.limit);
  OPENIB_TRY_ASSIGN(uint64_t ring, range_iova(*mem, req.ring_offset,
                                              (uint64_t{1} << req.log_size) << req.log_stride, 64, "SRQ ring"));
  OPENIB_TRY_ASSIGN(uint64_t dbr, range_iova(*mem, req.dbr_offset, 8, 8, "SRQ doorbell record"));
  Object o;
  o.kind = Kind::kSrq;
  o.log_size = req.log_size;
  o.deps = {req.pd, req.mem, 0, 0, 0};
  hca_.create_srq_at_async(pd->number, req.log_size, req.log_stride, ring, dbr, req.limit, c.uar,
                           created(c.id, std::move(o), std::move(done)));
  return ok();
}

Result<void> Server::op_modify_srq(Client& c, proto::Message& m, Respond& done) {
  OPENIB_TRY_ASSIGN(auto req, proto::decode<proto::ModifySrqReq>(m.body));
  OPENIB_TRY(expect_fds(m, 0));
  OPENIB_TRY_ASSIGN(Object * srq, find(c, req.srq, Kind::kSrq));
  hca_.arm_srq_async(srq->number, req.limit, guard<void>([done = std::move(done)](Result<void> r) mutable {
    if (!r) return done(r.take_error());
    done(Reply{});
  }));
  return ok();
}

// CREATE_QP (docs/simhca.md §6.10): RC, UC or UD only (QP0/QP1 are the
// daemon's); rings and doorbell record in the client's memory.
Result<void> Server::op_create_qp(Client& c, proto::Message& m, Respond& done) {
  OPENIB_TRY_ASSIGN(auto req, proto::decode<proto::CreateQpReq>(m.body));
  OPENIB_TRY(expect_fds(m, 0));
  if (req.type > 2) return err(EINVAL, "QP type {} (0 RC, 1 UC, 2 UD)", req.type);
  if (req.sig_all > 1) return err(EINVAL, "sig_all must be 0 or 1");
  OPENIB_TRY_ASSIGN(Object * pd, find(c, req.pd, Kind::kPd));
  OPENIB_TRY_ASSIGN(Object * scq, find(c, req.send_cq, Kind::kCq));
  OPENIB_TRY_ASSIGN(Object * rcq, find(c, req.recv_cq, Kind::kCq));
  Object* srq = nullptr;
  if (req.srq) {
    OPENIB_TRY_ASSIGN(srq, find(c, req.srq, Kind::kSrq));
  }
  OPENIB_TRY_ASSIGN(Object * mem, find(c, req.mem, Kind::kMem));
  const auto& k = hca_.caps();
  if (req.log_sq_size > k.log_max_qp_wr || req.log_rq_size > k.log_max_qp_wr)
    return err(EINVAL, "queue sizes 2^{}, 2^{} exceed the device's 2^{}", req.log_sq_size,
               req.log_rq_size, k.log_max_qp_wr);
  if (req.log_sq_stride < 6 || req.log_sq_stride > 11) return err(EINVAL, "log_sq_stride {} not in 6..11", req.log_sq_stride);
  hca::QpCreateParams p;
  p.type = static_cast<hca::QpType>(req.type);
  p.sig_all = req.sig_all != 0;
  p.pdn = pd->number;
  p.send_cqn = scq->number;
  p.recv_cqn = rcq->number;
  p.uar = c.uar;
  if (srq) p.srqn = srq->number;
  OPENIB_TRY_ASSIGN(p.sq_iova, range_iova(*mem, req.sq_offset,
                                          (uint64_t{1} << req.log_sq_size) << req.log_sq_stride, 64, "send queue"));
  if (!srq) {
    if (req.log_rq_stride < 5 || req.log_rq_stride > 10) return err(EINVAL, "log_rq_stride {} not in 5..10", req.log_rq_stride);
    OPENIB_TRY_ASSIGN(p.rq_iova, range_iova(*mem, req.rq_offset,
                                            (uint64_t{1} << req.log_rq_size) << req.log_rq_stride, 64, "receive queue"));
  }
  OPENIB_TRY_ASSIGN(p.dbr_iova, range_iova(*mem, req.dbr_offset, 8, 8, "QP doorbell record"));
  p.log_sq_size = req.log_sq_size;
  p.log_sq_stride = req.log_sq_stride;
  p.log_rq_size = srq ? 0 : req.log_rq_size;
  p.log_rq_stride = srq ? 5 : req.log_rq_stride;
  Object o;
  o.kind = Kind::kQp;
  o.qp_type = req.type;
  o.qp_state = 0;  // RESET
  o.deps = {req.pd, req.send_cq, req.recv_cq, req.srq, req.mem};
  hca_.create_qp_at_async(p, created(c.id, std::move(o), std::move(done)));
  return ok();
}

// A RoCE address vector's Ethernet destination, as the kernel fills it
// in for a verbs consumer (ibv_ah_attr has no MAC; Linux's
// ib_resolve_eth_dmac): where its GID decides it (arp/eth_dmac.hpp:
// link-local and multicast GIDs), else the port's netdev's neighbour
// table (dmac_lookup_, arp/neigh_lookup.hpp; EAGAIN while the kernel
// resolves it). An InfiniBand port ignores it (docs/simhca.md §7.6).
Result<hca::AddressVector> Server::with_dmac(hca::AddressVector av) {
  if (!av.grh || av.dmac != arp::Mac{}) return av;
  if (auto mac = arp::dmac_from_gid(av.dgid)) {
    av.dmac = *mac;
    return av;
  }
  if (!dmac_lookup_) return av;
  auto mac = dmac_lookup_(av.port ? av.port : 1, av.dgid);
  if (mac) av.dmac = *mac;
  else if (mac.error().code != ENODEV) return err(mac.error().code, "the destination MAC: {}", mac.error().message);
  return av;
}

// MODIFY_QP: the device validates the transition and the attributes
// (docs/simhca.md §8.3); ibd checks only that the QP is this client's.
Result<void> Server::op_modify_qp(Client& c, proto::Message& m, Respond& done) {
  OPENIB_TRY_ASSIGN(auto req, proto::decode<proto::ModifyQpReq>(m.body));
  OPENIB_TRY(expect_fds(m, 0));
  OPENIB_TRY_ASSIGN(Object * qp, find(c, req.qp, Kind::kQp));
  const proto::QpAttr& a = req.attr;
  if (a.state > 6 || a.cur_state > 6) return err(EINVAL, "QP state out of range");
  // Controlled Q_Keys (bit 31 set, IBA 10.2.4 and 3.5.3) are not for any
  // consumer: root or CAP_NET_RAW only, EPERM otherwise, as Linux's uverbs.
  if ((a.mask & hca::qp_attr::kQkey) && (a.qkey & 0x80000000u) && !c.net_raw)
    return err(EPERM, "Q_Key {:#x} is a controlled Q_Key (bit 31): root or CAP_NET_RAW only", a.qkey);
  hca::QpAttr h = to_hca(a);
  if (a.mask & hca::qp_attr::kAv) {
    OPENIB_TRY_ASSIGN(h.av, with_dmac(h.av));
  }
  const uint32_t handle = req.qp;
  const uint8_t state = (a.mask & hca::qp_attr::kState) ? a.state : 0xff;
  hca_.modify_qp_async(qp->number, a.mask, h,
                       guard<void>([this, id = c.id, handle, state, done = std::move(done)](Result<void> r) mutable {
                         if (!r) return done(r.take_error());
                         if (Client* cl = owner(id); cl && state != 0xff) {
                           if (auto it = cl->objects.find(handle); it != cl->objects.end())
                             it->second.qp_state = state;
                         }
                         done(Reply{});
                       }));
  return ok();
}

namespace {
proto::QueryQpRep query_qp_rep(const hca::QpInfo& info, uint32_t qpn);
}

Result<void> Server::op_query_qp(Client& c, proto::Message& m, Respond& done) {
  OPENIB_TRY_ASSIGN(auto req, proto::decode<proto::HandleReq>(m.body));
  OPENIB_TRY(expect_fds(m, 0));
  OPENIB_TRY_ASSIGN(Object * qp, find(c, req.handle, Kind::kQp));
  hca_.query_qp_async(qp->number, guard<hca::QpInfo>([this, id = c.id, handle = req.handle, qpn = qp->number,
                                                       done = std::move(done)](Result<hca::QpInfo> info) mutable {
    if (!info) return done(info.take_error());
    proto::QueryQpRep r = query_qp_rep(*info, qpn);
    if (Client* cl = owner(id)) {
      if (auto it = cl->objects.find(handle); it != cl->objects.end()) it->second.qp_state = r.attr.state;
    }
    done(Reply{body(r), {}});
  }));
  return ok();
}

namespace {
proto::QueryQpRep query_qp_rep(const hca::QpInfo& info, uint32_t qpn) {
  const hca::QpAttr& h = info.attr;
  proto::QueryQpRep r;
  r.attr = to_proto(h);
  r.type = static_cast<uint8_t>(info.init.type);
  r.sig_all = info.init.sig_all ? 1 : 0;
  r.log_sq_size = info.init.log_sq_size;
  r.log_rq_size = info.init.log_rq_size;
  r.qpn = qpn;
  return r;
}
}  // namespace


Result<void> Server::op_create_ah(Client& c, proto::Message& m, Respond& done) {
  OPENIB_TRY_ASSIGN(auto req, proto::decode<proto::CreateAhReq>(m.body));
  OPENIB_TRY(expect_fds(m, 0));
  OPENIB_TRY_ASSIGN(Object * pd, find(c, req.pd, Kind::kPd));
  Object o;
  o.kind = Kind::kAh;
  o.deps = {req.pd, 0, 0, 0, 0};
  OPENIB_TRY_ASSIGN(hca::AddressVector av, with_dmac(to_hca(req.av)));
  hca_.create_ah_async(pd->number, av, created(c.id, std::move(o), std::move(done)));
  return ok();
}

// The entry goes only once the device destroyed the object; if it refuses,
// the client gets the error and keeps the object.
Result<void> Server::op_destroy(Client& c, proto::Message& m, Kind k, Respond& done) {
  OPENIB_TRY_ASSIGN(auto req, proto::decode<proto::HandleReq>(m.body));
  OPENIB_TRY(expect_fds(m, 0));
  OPENIB_TRY_ASSIGN(Object * o, find(c, req.handle, k));
  if (o->refs) return err(EBUSY, "{} {} is still used by {} objects", kind_name(k), req.handle, o->refs);
  if (k == Kind::kMem) {  // no device object: the mapping goes with the entry
    drop(c, req.handle, ok());
    done(Reply{});
    return ok();
  }
  hca_.destroy_async(device_kind(k), o->number,
                     guard<void>([this, id = c.id, handle = req.handle, done = std::move(done)](Result<void> r) mutable {
                       if (!r) return done(r.take_error());
                       if (Client* cl = owner(id)) drop(*cl, handle, ok());
                       done(Reply{});
                     }));
  return ok();
}

Result<Reply> Server::op_get_async_events(Client& c, proto::Message& m) {
  OPENIB_TRY(proto::decode<proto::Empty>(m.body));
  OPENIB_TRY(expect_fds(m, 0));
  proto::AsyncEventsRep3 r;
  while (r.count < proto::kMaxEventsPerReply && !c.events.empty()) {
    r.events[r.count++] = c.events.front();
    c.events.pop_front();
  }
  r.dropped = static_cast<uint32_t>(std::min<uint64_t>(c.events_dropped_since_fetch, UINT32_MAX));
  c.events_dropped_since_fetch = 0;
  // §2: 7-byte events before protocol 3.
  if (c.version < proto::kProtocolPathEvents) return Reply{body(static_cast<const proto::AsyncEventsRep&>(r)), {}};
  return Reply{body(r), {}};
}

// INFO: the ports' state comes from QUERY_PORT, asked asynchronously like
// every command (docs/client-protocol.md "Request handling").
Result<void> Server::op_info(Client& c, proto::Message& m, Respond& done) {
  OPENIB_TRY_ASSIGN(auto req, proto::decode<proto::InfoReq>(m.body));
  OPENIB_TRY(expect_fds(m, 0));
  if (req.flags & ~proto::kInfoObjects) return err(EINVAL, "unknown INFO flags {:#x}", req.flags);
  info_ports(c.id, req.flags, {}, std::move(done));
  return ok();
}

void Server::info_ports(uint32_t id, uint32_t flags, std::vector<std::optional<hca::PortAttr>> got,
                        Respond done) {
  const auto port = static_cast<uint8_t>(got.size() + 1);
  const bool device = device_state_ == DeviceState::kRunning && hca_.is_open() && hca_.alive();
  if (!device || port > hca_.caps().num_ports) {
    Client* cl = client(id);
    if (!cl) return done(err(ENOTCONN, "client gone"));
    const std::string text = info_json(*cl, flags, got);
    return done(Reply::text(text));
  }
  hca_.query_port_async(port, guard<hca::PortAttr>([this, id, flags, got = std::move(got),
                                                    done = std::move(done)](Result<hca::PortAttr> r) mutable {
    got.push_back(r ? std::optional<hca::PortAttr>(*r) : std::nullopt);
    info_ports(id, flags, std::move(got), std::move(done));
  }));
}

}  // namespace openib::ibd

namespace openib::ibd {

ClientQps Server::qp_ops() {
  ClientQps ops;
  ops.lookup = [this](uint32_t id, uint32_t handle) -> Result<ClientQpInfo> {
    Client* c = client(id);
    if (!c) return err(ENOTCONN, "client gone");
    OPENIB_TRY_ASSIGN(Object * qp, find(*c, handle, Kind::kQp));
    return ClientQpInfo{qp->number, qp->qp_type, qp->qp_state};
  };
  ops.handle_of = [this](uint32_t id, uint32_t qpn) -> Result<uint32_t> {
    Client* c = client(id);
    if (!c) return err(ENOTCONN, "client gone");
    for (const auto& [handle, o] : c->objects)
      if (o.kind == Kind::kQp && o.number == qpn) return handle;
    return err(ENOENT, "the client has no QP {:#x}", qpn);
  };
  // The completion of a transition: the state ibd records for the QP
  // follows (0xff: the state did not change).
  auto recorded = [this](uint32_t id, uint32_t handle, uint8_t state, hca::Completer<Result<void>> done) {
    return guard<void>([this, id, handle, state, done = std::move(done)](Result<void> r) mutable {
      if (r && state != 0xff) {
        if (Client* cl = owner(id))
          if (auto it = cl->objects.find(handle); it != cl->objects.end()) it->second.qp_state = state;
      }
      done(std::move(r));
    });
  };
  ops.modify = [this, recorded](uint32_t id, uint32_t handle, uint32_t mask, const hca::QpAttr& a,
                      hca::Completer<Result<void>> done) {
    Client* c = client(id);
    if (!c) return done(err(ENOTCONN, "client gone"));
    auto qp = find(*c, handle, Kind::kQp);
    if (!qp) return done(qp.take_error());
    const uint8_t state = (mask & hca::qp_attr::kState) ? static_cast<uint8_t>(a.state) : 0xff;
    hca::QpAttr with = a;  // the CM's RTR: the AV's MAC as for MODIFY_QP
    if (mask & hca::qp_attr::kAv) {
      auto av = with_dmac(a.av);
      if (!av && av.error().code == EAGAIN) return modify_when_resolved(id, handle, mask, a, std::move(done), 0);
      if (!av) return done(av.take_error());
      with.av = *av;
    }
    hca_.modify_qp_async((*qp)->number, mask, with,
                         recorded(id, handle, state, std::move(done)));
  };
  ops.modify_chain = [this, recorded](uint32_t id, uint32_t handle, std::vector<hca::QpChange> steps,
                            hca::Completer<Result<void>> done) {
    Client* c = client(id);
    if (!c) return done(err(ENOTCONN, "client gone"));
    auto qp = find(*c, handle, Kind::kQp);
    if (!qp) return done(qp.take_error());
    if (steps.empty()) return done(ok());
    const hca::QpChange& last = steps.back();
    const uint8_t state = (last.mask & hca::qp_attr::kState) ? static_cast<uint8_t>(last.attr.state) : 0xff;
    hca_.modify_qp_chain_async(
        (*qp)->number, std::move(steps),
        recorded(id, handle, state, std::move(done)));
  };
  return ops;
}

// The CM's QP (an accept's RTR, typically: the passive side's kernel has
// no neighbour entry for the peer's address yet, e.g. IPv6, where the
// peer's solicitation came from its link-local address): the kernel is
// resolving it (NeighLookup triggered it), so the transition waits for it,
// asking again every 50 ms for at most 3 s (Linux's rdma_accept would fail
// here; a connection whose REQ came in is worth the wait), then the error.
void Server::modify_when_resolved(uint32_t id, uint32_t handle, uint32_t mask, hca::QpAttr a,
                                  hca::Completer<Result<void>> done, unsigned tries) {
  auto t = std::make_shared<boost::asio::steady_timer>(io_, std::chrono::milliseconds(50));
  t->async_wait([this, alive = std::weak_ptr<bool>(alive_), t, id, handle, mask, a, tries,
                 done = std::move(done)](const boost::system::error_code& ec) mutable {
    if (alive.expired()) return;  // ibd is stopping: the completer answers ECANCELED
    if (ec) return done(err(ECANCELED, "cancelled"));
    auto av = with_dmac(a.av);
    if (!av && av.error().code == EAGAIN && tries < 60)
      return modify_when_resolved(id, handle, mask, a, std::move(done), tries + 1);
    if (!av) return done(av.take_error());
    hca::QpAttr with = a;
    with.av = *av;  // (its dmac set: the modify below does not look it up again)
    qp_ops().modify(id, handle, mask, with, std::move(done));
  });
}

}  // namespace openib::ibd
