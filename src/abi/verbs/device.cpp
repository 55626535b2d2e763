// Devices and contexts (docs/library.md "Verbs ABI"): ibv_get_device_list
// names the devices of the ibd at $OPENIB_SOCKET (else the default socket),
// as ibd names them; ibv_open_device is libopenib's Context::open on the
// device's own socket (docs/client-protocol.md §2.1); the queries translate
// libopenib's attributes into rdma-core's structs.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "abi/verbs/objects.hpp"
#include "clientproto/messages.hpp"
#include "common/log.hpp"

namespace openib::verbs {

void log_failure(const char* verb, const openib::Error& e) {
  static auto log = openib::log::get("verbs");
  log->debug("{}: {}", verb, e.str());
}

namespace {

// Devices live as long as the process: an application may keep an
// ibv_device* (or the context's ->device) after ibv_free_device_list, and
// a device listed again is the same pointer (rdma-core keeps them
// reference-counted; ours are few and small).
std::mutex g_devices_mu;
std::vector<std::unique_ptr<Device>> g_devices;

Device* device_named(const std::string& name, const std::string& socket) {
  for (auto& d : g_devices)
    if (d->dev.name == name && d->socket == socket) return d.get();
  auto d = std::make_unique<Device>();
  const size_t index = g_devices.size();
  d->socket = socket;
  d->dev.node_type = IBV_NODE_CA;
  d->dev.transport_type = IBV_TRANSPORT_IB;
  std::snprintf(d->dev.name, sizeof d->dev.name, "%s", name.c_str());
  std::snprintf(d->dev.dev_name, sizeof d->dev.dev_name, "uverbs%zu", index);
  // Paths in the shape of the kernel's; nothing is there (ibv_read_sysfs_file
  // answers for them from ibd, sysfs.cpp).
  std::snprintf(d->dev.dev_path, sizeof d->dev.dev_path, "/sys/class/infiniband_verbs/uverbs%zu", index);
  std::snprintf(d->dev.ibdev_path, sizeof d->dev.ibdev_path, "/sys/class/infiniband/%s", name.c_str());
  g_devices.push_back(std::move(d));
  return g_devices.back().get();
}

void fill_ops(Context& c) {
  ibv_context& ctx = c.vctx.context;
  ctx.ops.poll_cq = poll_cq;
  ctx.ops.req_notify_cq = req_notify_cq;
  ctx.ops.post_send = post_send;
  ctx.ops.post_recv = post_recv;
  ctx.ops.post_srq_recv = post_srq_recv;
  // The extended verbs the inline functions of <infiniband/verbs.h> reach
  // through verbs_get_ctx_op(); the others stay NULL, so those inlines
  // fail with EOPNOTSUPP (or take their legacy path) as on a provider
  // without them.
  c.vctx.query_port = query_port_ex;
  c.vctx.query_device_ex = query_device_ex;
  c.vctx.sz = sizeof(verbs_context);
  ctx.abi_compat = __VERBS_ABI_IS_EXTENDED;
}

uint64_t be64(uint64_t v) { return __builtin_bswap64(v); }

}  // namespace

std::vector<Device*> list_devices() {
  // The ibd's own socket, as libopenib resolves it: each device is opened
  // through it by name (docs/client-protocol.md §2.1), whatever
  // $OPENIB_DEVICE says.
  const char* env = std::getenv("OPENIB_SOCKET");
  const std::string main = env && *env ? env : openib::proto::kDefaultSocket;
  auto r = openib::list_devices(main);
  std::vector<Device*> out;
  if (!r) {
    log_failure("ibv_get_device_list", r.error());
    return out;
  }
  std::lock_guard lk(g_devices_mu);
  for (auto& e : *r) out.push_back(device_named(e.name, main));
  return out;
}

Device* find_device(const char* ibdev_path) {
  std::lock_guard lk(g_devices_mu);
  for (auto& d : g_devices)
    if (std::strcmp(d->dev.ibdev_path, ibdev_path) == 0) return d.get();
  return nullptr;
}

int query_port_ex(ibv_context* c, uint8_t port, ibv_port_attr* out, size_t len) {
  if (!c || !out) return EINVAL;
  Context& ctx = *ctx_of(c);
  auto r = ctx.impl->query_port(port);
  if (!r) return fail_int("ibv_query_port", r.error());
  ibv_port_attr a{};
  a.state = ibv_port_state(r->state);
  a.max_mtu = ibv_mtu(r->max_mtu);
  a.active_mtu = ibv_mtu(r->active_mtu);
  a.gid_tbl_len = r->gid_table_len;
  a.port_cap_flags = r->cap_flags;
  a.max_msg_sz = ctx.attr.max_msg_size;
  a.pkey_tbl_len = r->pkey_table_len;
  a.lid = r->lid;
  a.sm_lid = r->sm_lid;
  a.lmc = r->lmc;
  a.max_vl_num = 1;  // PortInfo:VLCap 1: VL0 only (docs/simhca.md SMA chapter)
  a.sm_sl = r->sm_sl;
  a.active_width = r->active_width;
  a.active_speed = r->active_speed;
  a.phys_state = r->phys_state;
  a.link_layer = uint8_t(r->link_layer == openib::LinkLayer::kEthernet ? IBV_LINK_LAYER_ETHERNET
                                                                       : IBV_LINK_LAYER_INFINIBAND);
  std::memcpy(out, &a, std::min(len, sizeof a));
  return 0;
}

namespace {

void fill_device_attr(const Context& ctx, ibv_device_attr& a) {
  const openib::DeviceAttr& d = ctx.attr;
  a = {};
  std::snprintf(a.fw_ver, sizeof a.fw_ver, "%u.%u", d.fw_rev >> 16, d.fw_rev & 0xffff);
  a.node_guid = be64(d.node_guid);
  a.sys_image_guid = be64(d.sys_image_guid);
  // The bytes one MR may cover (an ibd of protocol 4 or older does not say: 0).
  a.max_mr_size = d.max_mr_size;
  a.page_size_cap = 4096;
  a.vendor_id = d.vendor_id;
  a.vendor_part_id = d.vendor_part_id;
  a.hw_ver = d.hw_ver;
  a.max_qp = int(d.max_qp);
  a.max_qp_wr = int(d.max_qp_wr);
  a.device_cap_flags = d.device_cap_flags;
  a.max_sge = int(d.max_sge);
  a.max_sge_rd = int(d.max_sge);
  a.max_cq = int(d.max_cq);
  a.max_cqe = int(d.max_cqe);
  a.max_mr = int(d.max_mr);
  a.max_pd = int(d.max_pd);
  a.max_qp_rd_atom = d.max_dest_rd_atomic;
  a.max_qp_init_rd_atom = d.max_rd_atomic;
  a.max_res_rd_atom = int(d.max_dest_rd_atomic * d.max_qp);
  a.atomic_cap = ibv_atomic_cap(d.atomic_cap);
  a.max_ah = int(d.max_ah);
  a.max_srq = int(d.max_srq);
  a.max_srq_wr = int(d.max_srq_wr);
  a.max_srq_sge = int(d.max_sge);
  a.max_pkeys = 1;
  a.local_ca_ack_delay = d.local_ca_ack_delay;
  a.phys_port_cnt = d.num_ports;
}

}  // namespace

int query_device_ex(ibv_context* c, const ibv_query_device_ex_input* in, ibv_device_attr_ex* out,
                    size_t len) {
  if (!c || !out) return EINVAL;
  if (in && in->comp_mask) return EINVAL;
  ibv_device_attr_ex a{};
  fill_device_attr(*ctx_of(c), a.orig_attr);
  a.max_dm_size = 0;
  std::memcpy(out, &a, std::min(len, sizeof a));
  return 0;
}

}  // namespace openib::verbs

using namespace openib::verbs;

extern "C" {

ibv_device** ibv_get_device_list(int* num) {
  const std::vector<Device*> devs = list_devices();
  auto** list = static_cast<ibv_device**>(calloc(devs.size() + 1, sizeof(ibv_device*)));
  if (!list) {
    errno = ENOMEM;
    return nullptr;
  }
  for (size_t i = 0; i < devs.size(); ++i) list[i] = &devs[i]->dev;
  if (num) *num = int(devs.size());
  return list;
}
OPENIB_VERBS_1_1(ibv_get_device_list);

void ibv_free_device_list(ibv_device** list) { free(list); }
OPENIB_VERBS_1_1(ibv_free_device_list);

const char* ibv_get_device_name(ibv_device* d) { return d ? d->name : nullptr; }
OPENIB_VERBS_1_1(ibv_get_device_name);

int ibv_get_device_index(ibv_device* d) {
  if (!d) return -1;
  return std::atoi(d->dev_name + std::strlen("uverbs"));
}

__be64 ibv_get_device_guid(ibv_device* d) {
  if (!d) return 0;
  auto c = openib::Context::open({.socket = ours<Device>(d)->socket, .device = d->name});
  if (!c) return fail_int("ibv_get_device_guid", c.error()), 0;
  auto a = (*c)->query_device();
  return a ? be64(a->node_guid) : 0;
}
OPENIB_VERBS_1_1(ibv_get_device_guid);

ibv_context* ibv_open_device(ibv_device* d) {
  if (!d) return fail_null<ibv_context>("ibv_open_device", openib::err(EINVAL, "no device"));
  auto impl = openib::Context::open({.socket = ours<Device>(d)->socket, .device = d->name});
  if (!impl) return fail_null<ibv_context>("ibv_open_device", impl.error());
  auto attr = (*impl)->query_device();
  if (!attr) return fail_null<ibv_context>("ibv_open_device", attr.error());
  auto* c = new Context;
  c->impl = std::move(*impl);
  c->attr = std::move(*attr);
  ibv_context& ctx = c->vctx.context;
  ctx.device = d;
  // cmd_fd: rdma-core's is the uverbs device; ours is the connection to
  // ibd, which an application must not read or write. A fresh fd of
  // /dev/null stands in for it so that close() of it by a careless program
  // harms nothing.
  ctx.cmd_fd = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  ctx.async_fd = c->impl->async_fd();
  ctx.num_comp_vectors = 1;
  pthread_mutex_init(&ctx.mutex, nullptr);
  fill_ops(*c);
  return &ctx;
}
OPENIB_VERBS_1_1(ibv_open_device);

// Objects left on the context are the application's to lose, as with
// rdma-core (whose kernel frees them): using one afterwards is undefined.
int ibv_close_device(ibv_context* c) {
  if (!c) return EINVAL;
  Context* ctx = ctx_of(c);
  if (c->cmd_fd >= 0) ::close(c->cmd_fd);
  pthread_mutex_destroy(&c->mutex);
  delete ctx;
  return 0;
}
OPENIB_VERBS_1_1(ibv_close_device);

int ibv_query_device(ibv_context* c, ibv_device_attr* out) {
  if (!c || !out) return EINVAL;
  fill_device_attr(*ctx_of(c), *out);
  return 0;
}
OPENIB_VERBS_1_1(ibv_query_device);

// The exported ibv_query_port (IBVERBS_1.1) takes rdma-core's older, shorter
// struct (_compat_ibv_port_attr, up to link_layer): applications compiled
// against <infiniband/verbs.h> go through verbs_context's query_port
// instead (the inline ___ibv_query_port).
#undef ibv_query_port
int ibv_query_port(ibv_context* c, uint8_t port, struct _compat_ibv_port_attr* out) {
  return query_port_ex(c, port, reinterpret_cast<ibv_port_attr*>(out),
                       offsetof(ibv_port_attr, link_layer) + sizeof(uint8_t));
}
OPENIB_VERBS_1_1(ibv_query_port);

int ibv_query_gid(ibv_context* c, uint8_t port, int index, ibv_gid* gid) {
  if (!c || !gid) return -1;
  auto r = ctx_of(c)->impl->query_gid(port, index);
  if (!r) {
    errno = fail_int("ibv_query_gid", r.error());
    return -1;  // libibverbs: -1 (errno set)
  }
  std::memcpy(gid->raw, r->raw.data(), sizeof gid->raw);
  return 0;
}
OPENIB_VERBS_1_1(ibv_query_gid);

int _ibv_query_gid_ex(ibv_context* c, uint32_t port, uint32_t index, ibv_gid_entry* entry, uint32_t flags,
                      size_t entry_size) {
  if (!c || !entry || flags || port > 255 || index > INT32_MAX) return EINVAL;
  auto r = ctx_of(c)->impl->query_gid_entry(uint8_t(port), int(index));
  if (!r) return fail_int("ibv_query_gid_ex", r.error());
  ibv_gid_entry e{};
  std::memcpy(e.gid.raw, r->gid.raw.data(), sizeof e.gid.raw);
  e.gid_index = r->gid_index;
  e.port_num = r->port_num;
  e.gid_type = r->gid_type == openib::GidType::kRoceV2 ? IBV_GID_TYPE_ROCE_V2
               : r->gid_type == openib::GidType::kRoceV1 ? IBV_GID_TYPE_ROCE_V1
                                                         : IBV_GID_TYPE_IB;
  e.ndev_ifindex = 0;
  std::memcpy(entry, &e, std::min(entry_size, sizeof e));
  return 0;
}

ssize_t _ibv_query_gid_table(ibv_context* c, ibv_gid_entry* entries, size_t max_entries, uint32_t flags,
                             size_t entry_size) {
  if (!c || (!entries && max_entries) || flags || entry_size < sizeof(ibv_gid_entry)) return -EINVAL;
  Context& ctx = *ctx_of(c);
  size_t n = 0;
  for (uint8_t port = 1; port <= ctx.attr.num_ports; ++port) {
    auto p = ctx.impl->query_port(port);
    if (!p) return -fail_int("ibv_query_gid_table", p.error());
    for (int i = 0; i < p->gid_table_len; ++i) {
      ibv_gid_entry e{};
      const int rc = _ibv_query_gid_ex(c, port, uint32_t(i), &e, 0, sizeof e);
      if (rc == ENODATA) continue;  // an empty entry is not listed
      if (rc) return -rc;
      if (n == max_entries) return -EINVAL;
      std::memcpy(reinterpret_cast<char*>(entries) + n * entry_size, &e, sizeof e);
      ++n;
    }
  }
  return ssize_t(n);
}

// rdma-core's <infiniband/driver.h> (not installed): enum ibv_gid_type_sysfs
// is 0 for "IB/RoCE v1", 1 for "RoCE v2".
enum { kGidTypeSysfsIbRoceV1 = 0, kGidTypeSysfsRoceV2 = 1 };
int ibv_query_gid_type(ibv_context* c, uint8_t port, unsigned int index, int* type) {
  ibv_gid_entry e{};
  const int rc = _ibv_query_gid_ex(c, port, index, &e, 0, sizeof e);
  if (rc) {
    errno = rc;
    return -1;
  }
  // IB and RoCE v1 are one sysfs type.
  *type = e.gid_type == IBV_GID_TYPE_ROCE_V2 ? kGidTypeSysfsRoceV2 : kGidTypeSysfsIbRoceV1;
  return 0;
}

int ibv_query_pkey(ibv_context* c, uint8_t port, int index, __be16* pkey) {
  if (!c || !pkey) return -1;
  auto r = ctx_of(c)->impl->query_pkey(port, index);
  if (!r) {
    errno = fail_int("ibv_query_pkey", r.error());
    return -1;
  }
  *pkey = __builtin_bswap16(*r);
  return 0;
}
OPENIB_VERBS_1_1(ibv_query_pkey);

int ibv_get_pkey_index(ibv_context* c, uint8_t port, __be16 pkey) {
  if (!c) return -1;
  const uint16_t want = __builtin_bswap16(pkey);
  for (int i = 0;; ++i) {
    auto r = ctx_of(c)->impl->query_pkey(port, i);
    if (!r) break;
    if (*r == want) return i;  // the exact value, membership bit included, as rdma-core
  }
  errno = ENOENT;
  return -1;
}

}  // extern "C"
