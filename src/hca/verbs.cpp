// Encoders and decoders of docs/simhca.md command layouts, driver side.
// Each function follows one table of the manual (section in its comment).
#include "hca/verbs.hpp"

#include "hca/prm.hpp"

namespace openib::hca {

using namespace prm;

const char* prm::status_name(uint8_t s) {
  static const char* const names[] = {
      "OK", "INTERNAL_ERROR", "BAD_OPCODE", "BAD_PARAM", "BAD_SYS_STATE", "BAD_RESOURCE",
      "RESOURCE_BUSY", "BAD_RES_STATE", "NO_RESOURCES", "BAD_INPUT_LEN", "BAD_OUTPUT_LEN",
      "BAD_ADDRESS", "NOT_SUPPORTED"};
  return s < sizeof names / sizeof names[0] ? names[s] : "unknown status";
}

namespace {
// §6.1 `device_cap_flags`, bit by bit.
DeviceFeatures decode_features(uint32_t f) {
  auto bit = [f](int n) { return (f >> n & 1) != 0; };
  DeviceFeatures d;
  d.rc = bit(0);
  d.uc = bit(1);
  d.ud = bit(2);
  d.srq = bit(3);
  d.atomics = bit(4);
  d.data_path = bit(5);
  d.port_events = bit(6);
  d.ud_multicast = bit(7);
  return d;
}
}  // namespace

// §6.1
DeviceCaps decode_caps(std::span<const std::byte> o) {
  DeviceCaps c;
  c.max_qp = get32(o, 0x00);
  c.max_cq = get32(o, 0x04);
  c.max_eq = get32(o, 0x08);
  c.max_srq = get32(o, 0x0c);
  c.max_pd = get32(o, 0x10);
  c.max_mkey = get32(o, 0x14);
  c.max_ah = get32(o, 0x18);
  c.max_uar = get32(o, 0x1c);
  c.log_max_qp_wr = get8(o, 0x20);
  c.log_max_cqe = get8(o, 0x21);
  c.log_max_eqe = get8(o, 0x22);
  c.log_max_srq_wr = get8(o, 0x23);
  c.max_sge = get16(o, 0x24);
  c.max_inline = get16(o, 0x26);
  c.num_ports = get8(o, 0x28);
  c.max_rd_atomic = get8(o, 0x29);
  c.max_dest_rd_atomic = get8(o, 0x2a);
  c.num_msix = get8(o, 0x2b);
  c.max_mkey_pages = get32(o, 0x2c);
  c.max_mailbox = get32(o, 0x30);
  c.cap_flags = get32(o, 0x34);
  c.features = decode_features(c.cap_flags);
  c.node_guid = get64(o, 0x38);
  c.sys_image_guid = get64(o, 0x40);
  c.max_msg_size = get32(o, 0x48);
  c.vendor_part_id = get16(o, 0x4c);
  c.local_ca_ack_delay = get8(o, 0x4e);
  return c;
}

// §6.3
PortAttr decode_port(std::span<const std::byte> o) {
  PortAttr p;
  p.state = get8(o, 0x00);
  p.phys_state = get8(o, 0x01);
  p.lid = get16(o, 0x02);
  p.sm_lid = get16(o, 0x04);
  p.lmc = get8(o, 0x06);
  p.sm_sl = get8(o, 0x07);
  p.max_mtu = get8(o, 0x08);
  p.active_mtu = get8(o, 0x09);
  p.active_width = get8(o, 0x0a);
  p.active_speed = get8(o, 0x0b);
  p.pkey_table_len = get16(o, 0x0c);
  p.gid_table_len = get16(o, 0x0e);
  p.gid_prefix = get64(o, 0x10);
  p.port_guid = get64(o, 0x18);
  p.cap_flags = get32(o, 0x20);
  p.pkey0 = get16(o, 0x24);
  p.link_layer = static_cast<LinkLayer>(get8(o, 0x26));
  p.qkey_violations = get32(o, 0x28);
  p.pkey_violations = get32(o, 0x2c);
  return p;
}

// §6.12
const char* gid_type_name(GidType t) {
  switch (t) {
    case GidType::kIb: return "IB";
    case GidType::kRoceV2: return "RoCEv2";
  }
  return "?";
}

Bytes encode_query_gid(uint8_t port, uint16_t index) {
  Bytes b(4);
  put8(b, 0x00, port);
  put16(b, 0x02, index);
  return b;
}

Result<std::optional<GidEntry>> decode_gid_entry(std::span<const std::byte> o) {
  if (o.size() < 20) return err(EPROTO, "QUERY_GID: {} bytes of output, 20 expected", o.size());
  const uint8_t type = get8(o, 0x00);
  if (type == 0) return std::optional<GidEntry>();
  if (type != uint8_t(GidType::kIb) && type != uint8_t(GidType::kRoceV2))
    return err(EPROTO, "QUERY_GID: entry type {}", type);
  GidEntry e;
  e.type = static_cast<GidType>(type);
  for (size_t i = 0; i < 16; ++i) e.gid[i] = get8(o, 0x04 + i);
  return std::optional<GidEntry>(e);
}

Bytes encode_set_gid(uint8_t port, uint16_t index, const std::optional<GidEntry>& e) {
  Bytes b(24);
  put8(b, 0x00, port);
  put8(b, 0x01, e ? uint8_t(e->type) : 0);  // 0: remove
  put16(b, 0x02, index);
  if (e)
    for (size_t i = 0; i < 16; ++i) put8(b, 0x08 + i, e->gid[i]);
  return b;
}

Bytes encode_set_port(uint8_t port, const PortSetup& s) {
  Bytes b(24);
  uint8_t sel = 0;
  put8(b, 0x00, port);
  if (s.state) { sel |= 1; put8(b, 0x02, *s.state); }
  if (s.lid) { sel |= 2; put16(b, 0x04, *s.lid); }
  if (s.sm_lid) { sel |= 4; put16(b, 0x06, *s.sm_lid); }
  if (s.lmc) { sel |= 8; put8(b, 0x03, *s.lmc); }
  if (s.active_mtu) { sel |= 16; put8(b, 0x08, *s.active_mtu); }
  if (s.gid_prefix) { sel |= 32; put64(b, 0x10, *s.gid_prefix); }
  if (s.sm_sl) { sel |= 64; put8(b, 0x09, *s.sm_sl); }
  put8(b, 0x01, sel);
  if (s.cap_set || s.cap_clear) {  // select2 bit 0: the 32-byte form with the capability mask
    b.resize(32);
    put8(b, 0x0c, 1);
    put32(b, 0x18, s.cap_set.value_or(0));
    put32(b, 0x1c, s.cap_clear.value_or(0));
  }
  return b;
}

// §7.6
void encode_av(std::span<std::byte> o, const AddressVector& a) {
  put16(o, 0x00, a.dlid);
  put8(o, 0x02, a.sl);
  put8(o, 0x03, a.src_path_bits);
  put8(o, 0x04, a.static_rate);
  put8(o, 0x05, a.port);
  put8(o, 0x06, a.grh ? 1 : 0);
  put8(o, 0x07, a.hop_limit);
  put32(o, 0x08, a.flow_label);
  put8(o, 0x0c, a.sgid_index);
  put8(o, 0x0d, a.traffic_class);
  for (size_t i = 0; i < 16; ++i) put8(o, 0x10 + i, a.dgid[i]);
  for (size_t i = 0; i < 6; ++i) put8(o, 0x20 + i, a.dmac[i]);
}

AddressVector decode_av(std::span<const std::byte> b) {
  AddressVector a;
  a.dlid = get16(b, 0x00);
  a.sl = get8(b, 0x02);
  a.src_path_bits = get8(b, 0x03);
  a.static_rate = get8(b, 0x04);
  a.port = get8(b, 0x05);
  a.grh = get8(b, 0x06) & 1;
  a.hop_limit = get8(b, 0x07);
  a.flow_label = get32(b, 0x08);
  a.sgid_index = get8(b, 0x0c);
  a.traffic_class = get8(b, 0x0d);
  for (size_t i = 0; i < 16; ++i) a.dgid[i] = get8(b, 0x10 + i);
  for (size_t i = 0; i < 6; ++i) a.dmac[i] = get8(b, 0x20 + i);
  return a;
}

// §6.10 MODIFY_QP: qpn, mask, 8 reserved, then the §7.7 attributes.
Bytes encode_modify_qp(uint32_t qpn, uint32_t mask, const QpAttr& a) {
  Bytes b(96);
  put32(b, 0x00, qpn);
  put32(b, 0x04, mask);
  auto o = std::span<std::byte>(b).subspan(0x10);
  put8(o, 0x00, static_cast<uint8_t>(a.state));
  put8(o, 0x01, static_cast<uint8_t>(a.cur_state));
  put8(o, 0x02, a.port);
  put8(o, 0x03, a.path_mtu);
  put16(o, 0x04, a.pkey_index);
  put8(o, 0x06, a.access);
  put8(o, 0x07, a.en_sqd_async_notify ? 1 : 0);
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
  encode_av(o.subspan(0x20), a.av);
  return b;
}

QpAttr decode_qp_attr(std::span<const std::byte> o) {
  QpAttr a;
  a.state = static_cast<QpState>(get8(o, 0x00));
  a.port = get8(o, 0x02);
  a.path_mtu = get8(o, 0x03);
  a.pkey_index = get16(o, 0x04);
  a.access = get8(o, 0x06);
  a.en_sqd_async_notify = get8(o, 0x07);
  a.qkey = get32(o, 0x08);
  a.dest_qpn = get32(o, 0x0c);
  a.rq_psn = get32(o, 0x10);
  a.sq_psn = get32(o, 0x14);
  a.timeout = get8(o, 0x18);
  a.retry_cnt = get8(o, 0x19);
  a.rnr_retry = get8(o, 0x1a);
  a.min_rnr_timer = get8(o, 0x1b);
  a.max_rd_atomic = get8(o, 0x1c);
  a.max_dest_rd_atomic = get8(o, 0x1d);
  if (o.size() >= 0x50) a.av = decode_av(o.subspan(0x20, 48));
  return a;
}

// §6.10 CREATE_QP
Bytes encode_create_qp(const QpCreateParams& p) {
  Bytes b(64);
  put8(b, 0x00, static_cast<uint8_t>(p.type));
  put8(b, 0x01, p.port);
  put8(b, 0x02, (p.srqn ? 1 : 0) | (p.sig_all ? 2 : 0));
  put32(b, 0x04, p.pdn);
  put32(b, 0x08, p.send_cqn);
  put32(b, 0x0c, p.recv_cqn);
  put32(b, 0x10, p.srqn.value_or(0));
  put32(b, 0x14, p.uar);
  put64(b, 0x18, p.sq_iova);
  put64(b, 0x20, p.rq_iova);
  put64(b, 0x28, p.dbr_iova);
  put8(b, 0x30, p.log_sq_size);
  put8(b, 0x31, p.log_sq_stride);
  put8(b, 0x32, p.log_rq_size);
  put8(b, 0x33, p.log_rq_stride);
  return b;
}

QpCreateParams decode_create_qp(std::span<const std::byte> o) {
  QpCreateParams p;
  p.type = static_cast<QpType>(get8(o, 0x00));
  p.port = get8(o, 0x01);
  const uint8_t flags = get8(o, 0x02);
  p.sig_all = flags & 2;
  p.pdn = get32(o, 0x04);
  p.send_cqn = get32(o, 0x08);
  p.recv_cqn = get32(o, 0x0c);
  if (flags & 1) p.srqn = get32(o, 0x10);
  p.uar = get32(o, 0x14);
  p.sq_iova = get64(o, 0x18);
  p.rq_iova = get64(o, 0x20);
  p.dbr_iova = get64(o, 0x28);
  p.log_sq_size = get8(o, 0x30);
  p.log_sq_stride = get8(o, 0x31);
  p.log_rq_size = get8(o, 0x32);
  p.log_rq_stride = get8(o, 0x33);
  return p;
}

// §7.1
EqContext decode_eq_context(std::span<const std::byte> o) {
  EqContext c;
  c.ring_iova = get64(o, 0x00);
  c.event_mask = get64(o, 0x08);
  c.log_size = get8(o, 0x10);
  c.armed = get8(o, 0x11);
  c.vector = get16(o, 0x12);
  c.uar = get32(o, 0x14);
  c.producer = get32(o, 0x18);
  c.consumer = get32(o, 0x1c);
  c.overruns = get32(o, 0x20);
  return c;
}

// §7.2
CqContext decode_cq_context(std::span<const std::byte> o) {
  CqContext c;
  c.ring_iova = get64(o, 0x00);
  c.dbr_iova = get64(o, 0x08);
  c.log_size = get8(o, 0x10);
  c.arm = get8(o, 0x11);
  c.state = get8(o, 0x12);
  c.eqn = get32(o, 0x14);
  c.uar = get32(o, 0x18);
  c.producer = get32(o, 0x1c);
  c.consumer = get32(o, 0x20);
  c.arm_sn = get32(o, 0x24);
  c.users = get32(o, 0x28);
  return c;
}

// §7.4
SrqContext decode_srq_context(std::span<const std::byte> o) {
  SrqContext c;
  c.ring_iova = get64(o, 0x00);
  c.dbr_iova = get64(o, 0x08);
  c.log_size = get8(o, 0x10);
  c.log_stride = get8(o, 0x11);
  c.state = get8(o, 0x12);
  c.armed = get8(o, 0x13);
  c.pdn = get32(o, 0x14);
  c.limit = get32(o, 0x18);
  c.uar = get32(o, 0x1c);
  c.users = get32(o, 0x20);
  return c;
}

// §6.7
Bytes encode_create_mkey(const MkeyParams& p, std::optional<uint64_t> page_list_iova) {
  Bytes b(page_list_iova ? 40 : 32 + 8 * p.pages.size());
  put32(b, 0x00, p.pdn);
  put32(b, 0x04, p.access);
  put64(b, 0x08, p.start_va);
  put64(b, 0x10, p.length);
  put8(b, 0x18, p.log_page_size);
  put32(b, 0x1c, p.pages.size());
  if (page_list_iova) {
    put8(b, 0x19, kMkeyPageListByAddress);
    put64(b, 0x20, *page_list_iova);
  } else {
    encode_page_list(p.pages, std::span(b).subspan(32));
  }
  return b;
}

void encode_page_list(const std::vector<uint64_t>& pages, std::span<std::byte> out) {
  for (size_t i = 0; i < pages.size(); ++i) put64(out, 8 * i, pages[i]);
}

// §7.5
MkeyContext decode_mkey_context(std::span<const std::byte> o) {
  MkeyContext c;
  c.pdn = get32(o, 0x00);
  c.access = get32(o, 0x04);
  c.start_va = get64(o, 0x08);
  c.length = get64(o, 0x10);
  c.log_page_size = get8(o, 0x18);
  c.num_pages = get32(o, 0x1c);
  c.key = get32(o, 0x20);
  return c;
}

Bytes encode_u32(uint32_t v) {
  Bytes b(4);
  put32(b, 0, v);
  return b;
}

Bytes encode_mcg(const McgMember& m) {
  Bytes b(24);
  put32(b, 0, m.qpn);
  put16(b, 6, m.mlid);
  for (size_t i = 0; i < m.mgid.size(); ++i) put8(b, 8 + i, m.mgid[i]);
  return b;
}

McgMember decode_mcg(std::span<const std::byte> in) {
  McgMember m;
  m.qpn = get32(in, 0);
  m.mlid = get16(in, 6);
  for (size_t i = 0; i < m.mgid.size(); ++i) m.mgid[i] = get8(in, 8 + i);
  return m;
}

Bytes encode_u32x2(uint32_t a, uint32_t b2) {
  Bytes b(8);
  put32(b, 0, a);
  put32(b, 4, b2);
  return b;
}

}  // namespace openib::hca
