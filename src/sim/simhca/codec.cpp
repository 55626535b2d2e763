// Byte layouts of docs/simhca.md §5.2, §6 and §7, one function per table.
#include "sim/simhca/codec.hpp"

#include <algorithm>

namespace openib::simhca {

const char* status_name(uint8_t s) {
  switch (s) {
    case kOk: return "OK";
    case kInternalError: return "INTERNAL_ERROR";
    case kBadOpcode: return "BAD_OPCODE";
    case kBadParam: return "BAD_PARAM";
    case kBadSysState: return "BAD_SYS_STATE";
    case kBadResource: return "BAD_RESOURCE";
    case kResourceBusy: return "RESOURCE_BUSY";
    case kBadResState: return "BAD_RES_STATE";
    case kNoResources: return "NO_RESOURCES";
    case kBadInputLen: return "BAD_INPUT_LEN";
    case kBadOutputLen: return "BAD_OUTPUT_LEN";
    case kBadAddress: return "BAD_ADDRESS";
    case kNotSupported: return "NOT_SUPPORTED";
    default: return "?";
  }
}

const char* opcode_name(uint16_t op) {
  switch (op) {
    case kOpNop: return "NOP";
    case kOpQueryDeviceCap: return "QUERY_DEVICE_CAP";
    case kOpInitHca: return "INIT_HCA";
    case kOpTeardownHca: return "TEARDOWN_HCA";
    case kOpQueryPort: return "QUERY_PORT";
    case kOpSetPort: return "SET_PORT";
    case kOpQueryGid: return "QUERY_GID";
    case kOpSetGid: return "SET_GID";
    case kOpCreateEq: return "CREATE_EQ";
    case kOpDestroyEq: return "DESTROY_EQ";
    case kOpQueryEq: return "QUERY_EQ";
    case kOpCreateCq: return "CREATE_CQ";
    case kOpDestroyCq: return "DESTROY_CQ";
    case kOpQueryCq: return "QUERY_CQ";
    case kOpCreateQp: return "CREATE_QP";
    case kOpModifyQp: return "MODIFY_QP";
    case kOpQueryQp: return "QUERY_QP";
    case kOpDestroyQp: return "DESTROY_QP";
    case kOpCreateSrq: return "CREATE_SRQ";
    case kOpDestroySrq: return "DESTROY_SRQ";
    case kOpQuerySrq: return "QUERY_SRQ";
    case kOpArmSrq: return "ARM_SRQ";
    case kOpAllocPd: return "ALLOC_PD";
    case kOpDeallocPd: return "DEALLOC_PD";
    case kOpCreateMkey: return "CREATE_MKEY";
    case kOpDestroyMkey: return "DESTROY_MKEY";
    case kOpQueryMkey: return "QUERY_MKEY";
    case kOpCreateAh: return "CREATE_AH";
    case kOpDestroyAh: return "DESTROY_AH";
    case kOpQueryAh: return "QUERY_AH";
    case kOpAllocUar: return "ALLOC_UAR";
    case kOpDeallocUar: return "DEALLOC_UAR";
    case kOpAttachMcg: return "ATTACH_MCG";
    case kOpDetachMcg: return "DETACH_MCG";
    default: return "unknown";
  }
}

namespace {
struct Layout {
  uint16_t op;
  uint16_t in, out;
};
// §6 opcode table: input and output layout sizes.
constexpr Layout kLayouts[] = {
    {kOpNop, 0, 0},          {kOpQueryDeviceCap, 0, 80}, {kOpInitHca, 0, 0},
    {kOpTeardownHca, 4, 0},  {kOpQueryPort, 4, 48},      {kOpSetPort, 24, 0},
    {kOpQueryGid, 4, 20},    {kOpSetGid, 24, 0},
    {kOpCreateEq, 32, 4},    {kOpDestroyEq, 4, 0},       {kOpQueryEq, 4, 40},
    {kOpCreateCq, 32, 4},    {kOpDestroyCq, 4, 0},       {kOpQueryCq, 4, 48},
    {kOpCreateQp, 64, 4},    {kOpModifyQp, 96, 0},       {kOpQueryQp, 4, 144},
    {kOpDestroyQp, 4, 0},    {kOpCreateSrq, 32, 4},      {kOpDestroySrq, 4, 0},
    {kOpQuerySrq, 4, 40},    {kOpArmSrq, 8, 0},          {kOpAllocPd, 0, 4},
    {kOpDeallocPd, 4, 0},    {kOpCreateMkey, 32, 8},     {kOpDestroyMkey, 4, 0},
    {kOpQueryMkey, 4, 40},   {kOpCreateAh, 56, 4},       {kOpDestroyAh, 4, 0},
    {kOpQueryAh, 4, 56},     {kOpAllocUar, 0, 4},        {kOpDeallocUar, 4, 0},
    {kOpAttachMcg, 24, 0},   {kOpDetachMcg, 24, 0},
};
const Layout* layout(uint16_t op) {
  for (const Layout& l : kLayouts)
    if (l.op == op) return &l;
  return nullptr;
}

Result<void> need(ByteView in, size_t n, const char* what) {
  if (in.size() < n) return err(kBadInputLen, "{}: input of {} bytes, layout needs {}", what, in.size(), n);
  return ok();
}
}  // namespace

std::optional<size_t> input_size(uint16_t op) {
  if (auto* l = layout(op)) return l->in;
  return std::nullopt;
}
std::optional<size_t> output_size(uint16_t op) {
  if (auto* l = layout(op)) return l->out;
  return std::nullopt;
}

// §5.2
Result<Entry> decode_entry(ByteView b) {
  OPENIB_TRY(need(b, kEntrySize, "command entry"));
  Entry e;
  e.opcode = get16(b, 0x00);
  e.op_mod = get16(b, 0x02);
  e.token = get32(b, 0x04);
  e.input_length = get32(b, 0x08);
  e.output_length = get32(b, 0x0c);
  e.input_mailbox = get64(b, 0x10);
  e.output_mailbox = get64(b, 0x18);
  std::copy_n(b.begin() + kEntInlineIn, kInlineSize, e.inline_input.begin());
  e.owner = get8(b, 0x67) & kOwnerBit;
  return e;
}

std::array<std::byte, 8> encode_entry_tail(uint8_t status, uint32_t syndrome) {
  std::array<std::byte, 8> t{};
  put32(t, 0, syndrome);
  put8(t, 4, status);
  put8(t, 7, 0);  // OWNER cleared: the entry is the driver's again (§5.4)
  return t;
}

// §7.6
Av decode_av(ByteView b) {
  Av a;
  a.dlid = get16(b, 0x00);
  a.sl = get8(b, 0x02);
  a.src_path_bits = get8(b, 0x03);
  a.static_rate = get8(b, 0x04);
  a.port = get8(b, 0x05);
  a.flags = get8(b, 0x06);
  a.hop_limit = get8(b, 0x07);
  a.flow_label = get32(b, 0x08);
  a.sgid_index = get8(b, 0x0c);
  a.traffic_class = get8(b, 0x0d);
  for (size_t i = 0; i < 16; ++i) a.dgid[i] = get8(b, 0x10 + i);
  for (size_t i = 0; i < 6; ++i) a.dmac[i] = get8(b, 0x20 + i);
  return a;
}

void encode_av(std::span<std::byte> o, const Av& a) {
  put16(o, 0x00, a.dlid);
  put8(o, 0x02, a.sl);
  put8(o, 0x03, a.src_path_bits);
  put8(o, 0x04, a.static_rate);
  put8(o, 0x05, a.port);
  put8(o, 0x06, a.flags);
  put8(o, 0x07, a.hop_limit);
  put32(o, 0x08, a.flow_label);
  put8(o, 0x0c, a.sgid_index);
  put8(o, 0x0d, a.traffic_class);
  for (size_t i = 0; i < 16; ++i) put8(o, 0x10 + i, a.dgid[i]);
  for (size_t i = 0; i < 6; ++i) put8(o, 0x20 + i, a.dmac[i]);
}

// §7.7
QpAttrs decode_qp_attrs(ByteView b) {
  QpAttrs a;
  a.state = get8(b, 0x00);
  a.cur_state = get8(b, 0x01);
  a.port = get8(b, 0x02);
  a.path_mtu = get8(b, 0x03);
  a.pkey_index = get16(b, 0x04);
  a.access = get8(b, 0x06);
  a.sqd_notify = get8(b, 0x07);
  a.qkey = get32(b, 0x08);
  a.dest_qpn = get32(b, 0x0c);
  a.rq_psn = get32(b, 0x10);
  a.sq_psn = get32(b, 0x14);
  a.timeout = get8(b, 0x18);
  a.retry_cnt = get8(b, 0x19);
  a.rnr_retry = get8(b, 0x1a);
  a.min_rnr_timer = get8(b, 0x1b);
  a.max_rd_atomic = get8(b, 0x1c);
  a.max_dest_rd_atomic = get8(b, 0x1d);
  if (b.size() > 0x20) a.av = decode_av(b.subspan(0x20));
  return a;
}

void encode_qp_attrs(std::span<std::byte> o, const QpAttrs& a) {
  put8(o, 0x00, a.state);
  put8(o, 0x01, a.cur_state);
  put8(o, 0x02, a.port);
  put8(o, 0x03, a.path_mtu);
  put16(o, 0x04, a.pkey_index);
  put8(o, 0x06, a.access);
  put8(o, 0x07, a.sqd_notify);
  put32(o, 0x08, a.qkey);
  put32(o, 0x0c, a.dest_qpn);
  put32(o, 0x10, a.rq_psn);
  put32(o, 0x14, a.sq_psn);
  put8(o, 0x18, a.timeout);
  put8(o, 0x19, a.retry_cnt);
  put8(o, 0x1a, a.rnr_retry);
  put8(o, 0x1b, a.min_rnr_timer);
  put8(o, 0x1c, a.max_rd_atomic);
  put8(o, 0x1d, a.max_dest_rd_atomic);
  if (o.size() > 0x20) encode_av(o.subspan(0x20), a.av);
}

// §6.10
Result<QpCreate> decode_create_qp(ByteView in) {
  OPENIB_TRY(need(in, 64, "CREATE_QP"));
  QpCreate c;
  c.type = get8(in, 0x00);
  c.port = get8(in, 0x01);
  c.flags = get8(in, 0x02);
  c.pdn = get32(in, 0x04);
  c.send_cqn = get32(in, 0x08);
  c.recv_cqn = get32(in, 0x0c);
  c.srqn = get32(in, 0x10);
  c.uar = get32(in, 0x14);
  c.sq_iova = get64(in, 0x18);
  c.rq_iova = get64(in, 0x20);
  c.dbr_iova = get64(in, 0x28);
  c.log_sq_size = get8(in, 0x30);
  c.log_sq_stride = get8(in, 0x31);
  c.log_rq_size = get8(in, 0x32);
  c.log_rq_stride = get8(in, 0x33);
  if (c.flags & ~(kQpFlagUseSrq | kQpFlagSigAll))
    return err(kBadParam, "CREATE_QP: reserved flags {:#x}", c.flags);
  return c;
}

void encode_create_qp(std::span<std::byte> o, const QpCreate& c) {
  put8(o, 0x00, c.type);
  put8(o, 0x01, c.port);
  put8(o, 0x02, c.flags);
  put32(o, 0x04, c.pdn);
  put32(o, 0x08, c.send_cqn);
  put32(o, 0x0c, c.recv_cqn);
  put32(o, 0x10, c.srqn);
  put32(o, 0x14, c.uar);
  put64(o, 0x18, c.sq_iova);
  put64(o, 0x20, c.rq_iova);
  put64(o, 0x28, c.dbr_iova);
  put8(o, 0x30, c.log_sq_size);
  put8(o, 0x31, c.log_sq_stride);
  put8(o, 0x32, c.log_rq_size);
  put8(o, 0x33, c.log_rq_stride);
}

Result<ModifyQp> decode_modify_qp(ByteView in) {
  OPENIB_TRY(need(in, 96, "MODIFY_QP"));
  ModifyQp m;
  m.qpn = get32(in, 0x00);
  m.mask = get32(in, 0x04);
  m.attrs = decode_qp_attrs(in.subspan(0x10, kQpAttrsSize));
  return m;
}

// §6.4
Result<CreateEq> decode_create_eq(ByteView in) {
  OPENIB_TRY(need(in, 32, "CREATE_EQ"));
  CreateEq c;
  c.ring_iova = get64(in, 0x00);
  c.event_mask = get64(in, 0x08);
  c.log_size = get8(in, 0x10);
  c.vector = get16(in, 0x12);
  c.uar = get32(in, 0x14);
  return c;
}

// §6.5
Result<CreateCq> decode_create_cq(ByteView in) {
  OPENIB_TRY(need(in, 32, "CREATE_CQ"));
  CreateCq c;
  c.ring_iova = get64(in, 0x00);
  c.dbr_iova = get64(in, 0x08);
  c.log_size = get8(in, 0x10);
  c.eqn = get32(in, 0x14);
  c.uar = get32(in, 0x18);
  return c;
}

// §6.9
Result<CreateSrq> decode_create_srq(ByteView in) {
  OPENIB_TRY(need(in, 32, "CREATE_SRQ"));
  CreateSrq c;
  c.ring_iova = get64(in, 0x00);
  c.dbr_iova = get64(in, 0x08);
  c.log_size = get8(in, 0x10);
  c.log_stride = get8(in, 0x11);
  c.pdn = get32(in, 0x14);
  c.limit = get32(in, 0x18);
  c.uar = get32(in, 0x1c);
  return c;
}

// §6.7
Result<CreateMkey> decode_create_mkey(ByteView in, uint32_t max_pages) {
  OPENIB_TRY(need(in, 32, "CREATE_MKEY"));
  CreateMkey c;
  c.pdn = get32(in, 0x00);
  c.access = get32(in, 0x04);
  c.start_va = get64(in, 0x08);
  c.length = get64(in, 0x10);
  c.log_page_size = get8(in, 0x18);
  c.flags = get8(in, 0x19);
  c.num_pages = get32(in, 0x1c);
  if (c.num_pages > max_pages)
    return err(kBadParam, "CREATE_MKEY: {} pages, at most {}", c.num_pages, max_pages);
  if (c.flags & kMkeyPageListByAddress) {
    OPENIB_TRY(need(in, 40, "CREATE_MKEY page list address"));
    c.page_list_iova = get64(in, 0x20);
    return c;
  }
  OPENIB_TRY(need(in, 32 + 8ull * c.num_pages, "CREATE_MKEY page list"));
  c.pages = decode_page_list(in.subspan(32), c.num_pages);
  return c;
}

std::vector<uint64_t> decode_page_list(ByteView table, uint32_t n) {
  std::vector<uint64_t> pages;
  pages.reserve(n);
  for (uint32_t i = 0; i < n; ++i) pages.push_back(get64(table, 8ull * i));
  return pages;
}

// §6.8
Result<CreateAh> decode_create_ah(ByteView in) {
  OPENIB_TRY(need(in, 56, "CREATE_AH"));
  CreateAh c;
  c.pdn = get32(in, 0x00);
  c.av = decode_av(in.subspan(0x08, kAvSize));
  return c;
}

// §6.11
Result<McgMember> decode_mcg(ByteView in) {
  OPENIB_TRY(need(in, 24, "ATTACH_MCG/DETACH_MCG"));
  McgMember m;
  m.qpn = get32(in, 0x00);
  m.reserved = get16(in, 0x04);
  m.mlid = get16(in, 0x06);
  for (size_t i = 0; i < m.mgid.size(); ++i) m.mgid[i] = get8(in, 0x08 + i);
  return m;
}

// §6.3
Result<SetPort> decode_set_port(ByteView in) {
  OPENIB_TRY(need(in, 24, "SET_PORT"));
  SetPort s;
  s.port = get8(in, 0x00);
  s.select = get8(in, 0x01);
  s.state = get8(in, 0x02);
  s.lmc = get8(in, 0x03);
  s.lid = get16(in, 0x04);
  s.sm_lid = get16(in, 0x06);
  s.active_mtu = get8(in, 0x08);
  s.sm_sl = get8(in, 0x09);
  s.pkey0 = get16(in, 0x0a);
  s.gid_prefix = get64(in, 0x10);
  s.select2 = get8(in, 0x0c);
  if (s.select2 & kSel2CapMask) {  // §6.3: the capability-mask extension of the input
    OPENIB_TRY(need(in, 32, "SET_PORT with a capability mask"));
    s.cap_set = get32(in, 0x18);
    s.cap_clear = get32(in, 0x1c);
  }
  return s;
}

// §6.12: QUERY_GID's input (port, reserved, index), SET_GID's (port, type,
// index, 4 reserved, GID). Reserved bytes must be zero.
Result<GidRef> decode_query_gid(ByteView in) {
  OPENIB_TRY(need(in, 4, "QUERY_GID"));
  if (get8(in, 0x01) != 0) return err(kBadParam, "QUERY_GID: reserved byte {:#x}", get8(in, 0x01));
  return GidRef{get8(in, 0x00), get16(in, 0x02)};
}

Bytes encode_gid_entry(const GidEntry& e) {
  Bytes o(20);
  put8(o, 0x00, e.type);
  for (size_t i = 0; i < 16; ++i) put8(o, 0x04 + i, e.gid[i]);
  return o;
}

Result<SetGid> decode_set_gid(ByteView in) {
  OPENIB_TRY(need(in, 24, "SET_GID"));
  if (get32(in, 0x04) != 0) return err(kBadParam, "SET_GID: reserved bytes {:#x}", get32(in, 0x04));
  SetGid s;
  s.ref = GidRef{get8(in, 0x00), get16(in, 0x02)};
  s.entry.type = get8(in, 0x01);
  for (size_t i = 0; i < 16; ++i) s.entry.gid[i] = get8(in, 0x08 + i);
  return s;
}

Bytes encode_port_info(const PortInfo& p) {
  Bytes o(48);
  put8(o, 0x00, p.state);
  put8(o, 0x01, p.phys_state);
  put16(o, 0x02, p.lid);
  put16(o, 0x04, p.sm_lid);
  put8(o, 0x06, p.lmc);
  put8(o, 0x07, p.sm_sl);
  put8(o, 0x08, p.max_mtu);
  put8(o, 0x09, p.active_mtu);
  put8(o, 0x0a, p.active_width);
  put8(o, 0x0b, p.active_speed);
  put16(o, 0x0c, p.pkey_table_len);
  put16(o, 0x0e, p.gid_table_len);
  put64(o, 0x10, p.gid_prefix);
  put64(o, 0x18, p.port_guid);
  put32(o, 0x20, p.cap_flags);
  put16(o, 0x24, p.pkey0);
  put8(o, 0x26, p.link_layer);
  put32(o, 0x28, p.qkey_violations);
  put32(o, 0x2c, p.pkey_violations);
  return o;
}

// §6.1
Bytes encode_caps(const Caps& c) {
  Bytes o(80);
  put32(o, 0x00, c.max_qp);
  put32(o, 0x04, c.max_cq);
  put32(o, 0x08, c.max_eq);
  put32(o, 0x0c, c.max_srq);
  put32(o, 0x10, c.max_pd);
  put32(o, 0x14, c.max_mkey);
  put32(o, 0x18, c.max_ah);
  put32(o, 0x1c, c.max_uar);
  put8(o, 0x20, c.log_max_qp_wr);
  put8(o, 0x21, c.log_max_cqe);
  put8(o, 0x22, c.log_max_eqe);
  put8(o, 0x23, c.log_max_srq_wr);
  put16(o, 0x24, c.max_sge);
  put16(o, 0x26, c.max_inline);
  put8(o, 0x28, c.num_ports);
  put8(o, 0x29, c.max_rd_atomic);
  put8(o, 0x2a, c.max_dest_rd_atomic);
  put8(o, 0x2b, c.num_msix);
  put32(o, 0x2c, c.max_mkey_pages);
  put32(o, 0x30, c.max_mailbox);
  put32(o, 0x34, c.cap_flags);
  put64(o, 0x38, c.node_guid);
  put64(o, 0x40, c.node_guid);  // sys_image_guid
  put32(o, 0x48, c.max_msg_size);
  put16(o, 0x4c, kDeviceId);
  put8(o, 0x4e, c.local_ca_ack_delay);
  return o;
}

Result<uint32_t> decode_number(ByteView in) {
  OPENIB_TRY(need(in, 4, "resource number"));
  return get32(in, 0);
}

Result<std::array<uint32_t, 2>> decode_two_numbers(ByteView in) {
  OPENIB_TRY(need(in, 8, "two numbers"));
  return std::array<uint32_t, 2>{get32(in, 0), get32(in, 4)};
}

}  // namespace openib::simhca
