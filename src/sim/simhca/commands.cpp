// simhca's commands, docs/simhca.md §6. Every command validates all of its
// input before it changes anything, so a failed command has no effect
// (§5.5); events it raises wait in the event unit (event_unit.cpp) and are written
// after its completion (§9.4).
#include <algorithm>

#include "sim/simhca/hca.hpp"
#include "sim/simhca/qp_state.hpp"

namespace openib::simhca {

namespace {

// A decoder's Error carries the §5.5 status in its code (codec.hpp).
Outcome fail(const Error& e) { return {static_cast<uint8_t>(e.code), 0}; }

constexpr uint64_t kEventTypesMask = 0x3ffffull;  // §9.4: types 0x00 - 0x11

}  // namespace

#define SIMHCA_DECODE(var, expr)          \
  auto var##_r = (expr);                  \
  if (!var##_r) return fail(var##_r.error()); \
  auto& var = *var##_r

Outcome Hca::execute(uint16_t op, ByteView in, Bytes& out) {
  auto need = input_size(op);
  if (!need) return {kBadOpcode, 0};
  if (in.size() < *need) return {kBadInputLen, static_cast<uint32_t>(*need)};
  // §6: states in which a command is allowed; §11.4 the fatal state.
  if (fatal_ && op != kOpNop && op != kOpQueryDeviceCap) return {kInternalError, health_syndrome_};
  if (!initialized_ && op != kOpNop && op != kOpQueryDeviceCap && op != kOpInitHca)
    return {kBadSysState, 0};
  events_.begin_command();
  Outcome o = dispatch(op, in, out);
  events_.end_command();
  return o;
}

Outcome Hca::dispatch(uint16_t op, ByteView in, Bytes& out) {
  switch (op) {
    case kOpNop: return {};
    case kOpQueryDeviceCap: return cmd_query_device_cap(out);
    case kOpInitHca: return cmd_init_hca();
    case kOpTeardownHca: return cmd_teardown_hca(in);
    case kOpQueryPort: return cmd_query_port(in, out);
    case kOpSetPort: return cmd_set_port(in);
    case kOpQueryGid: return cmd_query_gid(in, out);
    case kOpSetGid: return cmd_set_gid(in);
    case kOpCreateEq: return cmd_create_eq(in, out);
    case kOpDestroyEq: return cmd_destroy_eq(in);
    case kOpQueryEq: return cmd_query_eq(in, out);
    case kOpCreateCq: return cmd_create_cq(in, out);
    case kOpDestroyCq: return cmd_destroy_cq(in);
    case kOpQueryCq: return cmd_query_cq(in, out);
    case kOpCreateQp: return cmd_create_qp(in, out);
    case kOpModifyQp: return cmd_modify_qp(in);
    case kOpQueryQp: return cmd_query_qp(in, out);
    case kOpDestroyQp: return cmd_destroy_qp(in);
    case kOpCreateSrq: return cmd_create_srq(in, out);
    case kOpDestroySrq: return cmd_destroy_srq(in);
    case kOpQuerySrq: return cmd_query_srq(in, out);
    case kOpArmSrq: return cmd_arm_srq(in);
    case kOpAllocPd: return cmd_alloc_pd(out);
    case kOpDeallocPd: return cmd_dealloc_pd(in);
    case kOpCreateMkey: return cmd_create_mkey(in, out);
    case kOpDestroyMkey: return cmd_destroy_mkey(in);
    case kOpQueryMkey: return cmd_query_mkey(in, out);
    case kOpCreateAh: return cmd_create_ah(in, out);
    case kOpDestroyAh: return cmd_destroy_ah(in);
    case kOpQueryAh: return cmd_query_ah(in, out);
    case kOpAllocUar: return cmd_alloc_uar(out);
    case kOpDeallocUar: return cmd_dealloc_uar(in);
    case kOpAttachMcg: return cmd_mcg(in, true);
    case kOpDetachMcg: return cmd_mcg(in, false);
    default: return {kBadOpcode, 0};
  }
}

static Bytes number_out(uint32_t n) {
  Bytes o(4);
  put32(o, 0, n);
  return o;
}

// ---- §6.1, §6.2 -------------------------------------------------------------

Outcome Hca::cmd_query_device_cap(Bytes& out) {
  out = encode_caps(opts_.caps);
  return {};
}

Outcome Hca::cmd_init_hca() {
  if (initialized_) return {kBadSysState, 1};
  reset_tables();
  if (!host_.uar_alloc(0)) return {kNoResources, 0};  // §4: UAR 0's page
  tables_.uars.alloc_at(0, Uar{});  // UAR 0: the driver's
  for (Port& pt : ports_) pt.clear_gids();  // §6.12: the driver that initializes fills the table
  initialized_ = true;
  status_ |= kStatusHcaInitialized;
  return {};
}

Outcome Hca::cmd_teardown_hca(ByteView in) {
  const uint32_t mode = get32(in, 0);
  if (mode > 1) return {kBadParam, 1};
  if (mode == 0 && tables_.live_objects() > 0) return {kResourceBusy, tables_.live_objects()};
  reset_tables();
  initialized_ = false;
  status_ &= ~kStatusHcaInitialized;
  return {};
}

// ---- §6.3 ports ---------------------------------------------------------------

Outcome Hca::cmd_query_port(ByteView in, Bytes& out) {
  const uint8_t port = get8(in, 0);
  if (port < 1 || port > opts_.caps.num_ports) return {kBadParam, 1};
  out = encode_port_info(port_at(port).info);
  return {};
}

Outcome Hca::cmd_set_port(ByteView in) {
  SIMHCA_DECODE(s, decode_set_port(in));
  if (s.port < 1 || s.port > opts_.caps.num_ports) return {kBadParam, 1};
  Port& pt = port_at(s.port);
  const auto unicast = [](uint16_t lid) { return lid >= 1 && lid <= 0xbfff; };  // IBA 4.1.3
  if ((s.select & kSelState) && (s.state < 1 || s.state > 4)) return {kBadParam, 2};
  if ((s.select & kSelLid) && !unicast(s.lid)) return {kBadParam, 3};
  if ((s.select & kSelSmLid) && s.sm_lid != 0 && !unicast(s.sm_lid)) return {kBadParam, 4};
  if ((s.select & kSelLmc) && s.lmc > 7) return {kBadParam, 5};
  if ((s.select & kSelMtu) && (s.active_mtu < 1 || s.active_mtu > pt.info.max_mtu)) return {kBadParam, 6};
  if ((s.select & kSelSmSl) && s.sm_sl > 15) return {kBadParam, 7};
  if ((s.select & kSelPkey) && (s.pkey0 & 0x7fff) == 0) return {kBadParam, 9};  // IBA 10.9.1.2
  if (s.select2 & ~kSel2CapMask) return {kBadParam, 10};
  // §16.1: an Ethernet port has no LID, SM or subnet prefix, and its state follows its link.
  if (pt.info.link_layer == kLinkLayerEthernet &&
      (s.select & (kSelState | kSelLid | kSelSmLid | kSelLmc | kSelGidPrefix | kSelSmSl)))
    return {kBadParam, 12};
  // §6.3: the driver may set and clear only the bits of kDriverCapFlags.
  if ((s.cap_set | s.cap_clear) & ~kDriverCapFlags) return {kBadParam, 11};
  PortInfo p = pt.info;
  p.cap_flags = (p.cap_flags | s.cap_set) & ~s.cap_clear;
  if (s.select & kSelState) p.state = s.state;
  if (s.select & kSelLid) p.lid = s.lid;
  if (s.select & kSelSmLid) p.sm_lid = s.sm_lid;
  if (s.select & kSelLmc) p.lmc = s.lmc;
  if (s.select & kSelMtu) p.active_mtu = s.active_mtu;
  if (s.select & kSelSmSl) p.sm_sl = s.sm_sl;
  if (s.select & kSelGidPrefix) p.gid_prefix = s.gid_prefix;
  if (s.select & kSelPkey) p.pkey0 = s.pkey0;
  // Armed/Active need a LID (not on an Ethernet port, §16.1: Active without one).
  if (p.state >= 3 && p.lid == 0 && p.link_layer != kLinkLayerEthernet) return {kBadParam, 8};
  const PortInfo old = pt.info;
  pt.info = p;
  if (p.state != old.state) port_event_state(s.port, old.state, p.state);
  if (p.lid != old.lid) port_event_lid(s.port, p.lid);
  return {};
}

// ---- §6.12 GID table ------------------------------------------------------------

GidEntry Hca::gid_entry(uint8_t port, uint16_t index) const {
  if (port < 1 || port > opts_.caps.num_ports) return {};
  const Port& pt = port_at(port);
  if (index >= pt.info.gid_table_len || index >= kGidTableLen) return {};
  if (index > 0) return pt.gids[index];
  return pt.own_gid0();  // §6.12: entry 0, the port's own GID
}

Outcome Hca::cmd_query_gid(ByteView in, Bytes& out) {
  SIMHCA_DECODE(q, decode_query_gid(in));
  if (q.port < 1 || q.port > opts_.caps.num_ports) return {kBadParam, 1};
  if (q.index >= port_at(q.port).info.gid_table_len) return {kBadParam, 2};
  out = encode_gid_entry(gid_entry(q.port, q.index));
  return {};
}

// §6.12: the type must be the port's link layer's (IB on an InfiniBand
// port, RoCEv2 on an Ethernet one); entry 0 is the port's own.
Outcome Hca::cmd_set_gid(ByteView in) {
  SIMHCA_DECODE(s, decode_set_gid(in));
  if (s.ref.port < 1 || s.ref.port > opts_.caps.num_ports) return {kBadParam, 1};
  Port& pt = port_at(s.ref.port);
  if (s.ref.index >= pt.info.gid_table_len) return {kBadParam, 2};
  if (s.ref.index == 0) return {kBadParam, 3};
  const GidEntry& e = s.entry;
  if (e.type > kGidTypeRoceV2) return {kBadParam, 4};
  GidEntry& slot = pt.gids[s.ref.index];
  if (e.type == kGidTypeNone) {  // remove
    if (slot.type == kGidTypeNone) return {kBadResource, 0};
    slot = GidEntry{};
    pt.gids_used = static_cast<uint16_t>(pt.gids_used & ~(1u << s.ref.index));
    port_event(kEvGidChange, s.ref.port);
    return {};
  }
  const uint8_t want = pt.info.link_layer == kLinkLayerEthernet ? kGidTypeRoceV2 : kGidTypeIb;
  if (e.type != want) return {kBadParam, 5};
  if (e.gid == std::array<uint8_t, 16>{}) return {kBadParam, 6};  // the zero GID marks no entry
  for (uint16_t i = 0; i < pt.info.gid_table_len; ++i)
    if (i != s.ref.index && gid_entry(s.ref.port, i) == e) return {kBadParam, 7};  // one entry per GID
  if (slot == e) return {};
  slot = e;
  pt.gids_used = static_cast<uint16_t>(pt.gids_used | (1u << s.ref.index));
  port_event(kEvGidChange, s.ref.port);
  return {};
}

// ---- §6.4 EQs -----------------------------------------------------------------

// §6.4/§6.5: rings are zeroed by the device, which also proves them
// mapped and writable (§11.2).
Outcome Hca::zero_ring(uint64_t iova, uint64_t bytes, uint64_t align) {
  if (iova == 0 || (iova & (align - 1)) || iova + bytes < iova) return {kBadAddress, 10};
  Bytes zeros(std::min<uint64_t>(bytes, 64 * 1024));
  for (uint64_t done = 0; done < bytes; done += zeros.size()) {
    auto n = std::min<uint64_t>(zeros.size(), bytes - done);
    if (!host_.dma_write(iova + done, std::span<const std::byte>(zeros).first(n))) return {kBadAddress, 11};
  }
  return {};
}

Outcome Hca::cmd_create_eq(ByteView in, Bytes& out) {
  SIMHCA_DECODE(c, decode_create_eq(in));
  if (c.log_size < 1 || c.log_size > opts_.caps.log_max_eqe) return {kBadParam, 1};
  if (c.vector >= opts_.caps.num_msix) return {kBadParam, 2};
  if (c.event_mask & ~kEventTypesMask) return {kBadParam, 3};
  Uar* uar = tables_.uars.get(c.uar);
  if (!uar) return {kBadResource, 4};
  if (!tables_.eqs.has_free()) return {kNoResources, 0};
  if (Outcome o = zero_ring(c.ring_iova, (uint64_t{1} << c.log_size) * kEqeSize, 64); o.status) return o;
  Eq eq;
  eq.cfg = c;
  const uint32_t eqn = *tables_.eqs.alloc(eq);
  uar_ref(c.uar, +1);
  out = number_out(eqn);
  return {};
}

Outcome Hca::cmd_destroy_eq(ByteView in) {
  const uint32_t eqn = get32(in, 0);
  Eq* eq = tables_.eqs.get(eqn);
  if (!eq) return {kBadResource, 0};
  if (eq->users) return {kResourceBusy, eq->users};
  uar_ref(eq->cfg.uar, -1);
  tables_.eqs.free(eqn);
  return {};
}

Outcome Hca::cmd_query_eq(ByteView in, Bytes& out) {
  const Eq* eq = tables_.eqs.get(get32(in, 0));
  if (!eq) return {kBadResource, 0};
  out.assign(40, std::byte{0});  // §7.1
  put64(out, 0x00, eq->cfg.ring_iova);
  put64(out, 0x08, eq->cfg.event_mask);
  put8(out, 0x10, eq->cfg.log_size);
  put8(out, 0x11, eq->armed ? 1 : 0);
  put16(out, 0x12, eq->cfg.vector);
  put32(out, 0x14, eq->cfg.uar);
  put32(out, 0x18, eq->producer);
  put32(out, 0x1c, eq->consumer);
  put32(out, 0x20, eq->overruns);
  return {};
}

// ---- §6.5 CQs -----------------------------------------------------------------

Outcome Hca::cmd_create_cq(ByteView in, Bytes& out) {
  SIMHCA_DECODE(c, decode_create_cq(in));
  if (c.log_size > opts_.caps.log_max_cqe) return {kBadParam, 1};
  Eq* eq = tables_.eqs.get(c.eqn);
  if (!eq) return {kBadResource, 2};
  Uar* uar = tables_.uars.get(c.uar);
  if (!uar) return {kBadResource, 3};
  if (!tables_.cqs.has_free()) return {kNoResources, 0};
  std::array<std::byte, 8> dbr{};
  if (c.dbr_iova == 0 || (c.dbr_iova & 7) || !host_.dma_read(c.dbr_iova, dbr)) return {kBadAddress, 4};
  if (Outcome o = zero_ring(c.ring_iova, (uint64_t{1} << c.log_size) * kCqeSize, 64); o.status) return o;
  Cq cq;
  cq.cfg = c;
  const uint32_t cqn = *tables_.cqs.alloc(cq);
  ++eq->users;
  uar_ref(c.uar, +1);
  uar_link_cq(cqn, *tables_.cqs.get(cqn));
  out = number_out(cqn);
  return {};
}

Outcome Hca::cmd_destroy_cq(ByteView in) {
  const uint32_t cqn = get32(in, 0);
  Cq* cq = tables_.cqs.get(cqn);
  if (!cq) return {kBadResource, 0};
  if (cq->users) return {kResourceBusy, cq->users};
  --tables_.eqs.get(cq->cfg.eqn)->users;
  uar_unlink_cq(cqn, *cq);
  uar_ref(cq->cfg.uar, -1);
  tables_.cqs.free(cqn);
  return {};
}

Outcome Hca::cmd_query_cq(ByteView in, Bytes& out) {
  const Cq* cq = tables_.cqs.get(get32(in, 0));
  if (!cq) return {kBadResource, 0};
  out.assign(48, std::byte{0});  // §7.2
  put64(out, 0x00, cq->cfg.ring_iova);
  put64(out, 0x08, cq->cfg.dbr_iova);
  put8(out, 0x10, cq->cfg.log_size);
  put8(out, 0x11, cq->arm);
  put8(out, 0x12, cq->state);
  put32(out, 0x14, cq->cfg.eqn);
  put32(out, 0x18, cq->cfg.uar);
  put32(out, 0x1c, cq->producer);
  put32(out, 0x20, cq->consumer);
  put32(out, 0x24, cq->arm_sn);
  put32(out, 0x28, cq->users);
  return {};
}

// ---- §6.6 PDs and UARs ----------------------------------------------------------

Outcome Hca::cmd_alloc_pd(Bytes& out) {
  auto n = tables_.pds.alloc(Pd{});
  if (!n) return {kNoResources, 0};
  out = number_out(*n);
  return {};
}

Outcome Hca::cmd_dealloc_pd(ByteView in) {
  const uint32_t pdn = get32(in, 0);
  Pd* pd = tables_.pds.get(pdn);
  if (!pd) return {kBadResource, 0};
  if (pd->users) return {kResourceBusy, pd->users};
  tables_.pds.free(pdn);
  return {};
}

Outcome Hca::cmd_alloc_uar(Bytes& out) {
  auto n = tables_.uars.alloc(Uar{});
  if (!n) return {kNoResources, 0};
  if (!host_.uar_alloc(*n)) {  // §4: a new page for every allocation
    tables_.uars.free(*n);
    return {kNoResources, 1};
  }
  out = number_out(*n);
  return {};
}

Outcome Hca::cmd_dealloc_uar(ByteView in) {
  const uint32_t n = get32(in, 0);
  Uar* uar = n == 0 ? nullptr : tables_.uars.get(n);
  if (!uar) return {kBadResource, 0};
  if (uar->users) return {kResourceBusy, uar->users};
  tables_.uars.free(n);
  host_.uar_free(n);
  return {};
}

// ---- §6.9 SRQs ------------------------------------------------------------------

Outcome Hca::cmd_create_srq(ByteView in, Bytes& out) {
  SIMHCA_DECODE(c, decode_create_srq(in));
  if (c.log_size > opts_.caps.log_max_srq_wr) return {kBadParam, 1};
  if (c.log_stride < 5 || c.log_stride > 10) return {kBadParam, 2};
  if (c.limit >= (1u << c.log_size)) return {kBadParam, 3};
  Pd* pd = tables_.pds.get(c.pdn);
  if (!pd) return {kBadResource, 4};
  Uar* uar = tables_.uars.get(c.uar);
  if (!uar) return {kBadResource, 5};
  if (c.ring_iova == 0 || (c.ring_iova & 63)) return {kBadAddress, 6};
  std::array<std::byte, 8> dbr{};
  if (c.dbr_iova == 0 || (c.dbr_iova & 7) || !host_.dma_read(c.dbr_iova, dbr)) return {kBadAddress, 7};
  Srq srq;
  srq.cfg = c;
  auto n = tables_.srqs.alloc(srq);
  if (!n) return {kNoResources, 0};
  ++pd->users;
  ++uar->users;
  out = number_out(*n);
  return {};
}

Outcome Hca::cmd_destroy_srq(ByteView in) {
  const uint32_t n = get32(in, 0);
  Srq* srq = tables_.srqs.get(n);
  if (!srq) return {kBadResource, 0};
  if (srq->users) return {kResourceBusy, srq->users};
  --tables_.pds.get(srq->cfg.pdn)->users;
  --tables_.uars.get(srq->cfg.uar)->users;
  tables_.srqs.free(n);
  return {};
}

Outcome Hca::cmd_query_srq(ByteView in, Bytes& out) {
  const Srq* s = tables_.srqs.get(get32(in, 0));
  if (!s) return {kBadResource, 0};
  out.assign(40, std::byte{0});  // §7.4
  put64(out, 0x00, s->cfg.ring_iova);
  put64(out, 0x08, s->cfg.dbr_iova);
  put8(out, 0x10, s->cfg.log_size);
  put8(out, 0x11, s->cfg.log_stride);
  put8(out, 0x12, s->state);
  put8(out, 0x13, s->cfg.limit ? 1 : 0);
  put32(out, 0x14, s->cfg.pdn);
  put32(out, 0x18, s->cfg.limit);
  put32(out, 0x1c, s->cfg.uar);
  put32(out, 0x20, s->users);
  return {};
}

// §6.9 ARM_SRQ, IBA 11.2.3.3 (Modify SRQ: SRQ limit).
Outcome Hca::cmd_arm_srq(ByteView in) {
  SIMHCA_DECODE(v, decode_two_numbers(in));
  Srq* s = tables_.srqs.get(v[0]);
  if (!s) return {kBadResource, 0};
  if (v[1] >= (1u << s->cfg.log_size)) return {kBadParam, 1};
  s->cfg.limit = v[1];
  return {};
}

// ---- §6.7 MKEYs -----------------------------------------------------------------

Outcome Hca::cmd_create_mkey(ByteView in, Bytes& out) {
  SIMHCA_DECODE(c, decode_create_mkey(in, opts_.caps.max_mkey_pages));
  Pd* pd = tables_.pds.get(c.pdn);
  if (!pd) return {kBadResource, 1};
  constexpr uint32_t kLocalWrite = 1, kRemoteWrite = 2, kRemoteAtomic = 8;
  if (c.access & ~0xfu) return {kBadParam, 2};
  // IBA 10.6.3.1: remote write or atomic access needs local write.
  if ((c.access & (kRemoteWrite | kRemoteAtomic)) && !(c.access & kLocalWrite)) return {kBadParam, 3};
  if (c.length == 0 || c.start_va + c.length < c.start_va) return {kBadParam, 4};
  if (c.log_page_size < 12 || c.log_page_size > 30) return {kBadParam, 5};
  const uint64_t page = uint64_t{1} << c.log_page_size;
  const uint64_t span = (c.start_va & (page - 1)) + c.length;
  const uint64_t pages = span / page + (span % page ? 1 : 0);
  if (pages != c.num_pages) return {kBadParam, 6};
  // §6.7: the translation memory is shared by every MKEY.
  if (c.num_pages > opts_.caps.max_translation_entries - tables_.mkey_pages) return {kNoResources, 1};
  if (c.flags & kMkeyPageListByAddress) {
    if (Outcome o = read_page_list(c); o.status != kOk) return o;
  }
  for (uint64_t p : c.pages)
    if (p & (page - 1)) return {kBadParam, 7};
  Mkey m;
  m.cfg = std::move(c);
  auto idx = tables_.mkeys.alloc(std::move(m));
  if (!idx) return {kNoResources, 0};
  // §6.7: key = index << 8 | tag, tag 1..255 advancing on each reuse.
  uint8_t& tag = tables_.mkey_tags[*idx];
  tag = static_cast<uint8_t>(tag == 255 ? 1 : tag + 1);
  Mkey* mk = tables_.mkeys.get(*idx);
  mk->key = (*idx << 8) | tag;
  tables_.mkey_pages += mk->cfg.num_pages;
  ++pd->users;
  out.assign(8, std::byte{0});
  put32(out, 0, mk->key);
  put32(out, 4, mk->key);
  return {};
}

// §6.7 page list by address: the device copies the driver's translation
// table into its own memory with one checked DMA read (§11.2), so the
// driver may free it once the command completes.
Outcome Hca::read_page_list(CreateMkey& c) {
  if (c.page_list_iova == 0 || (c.page_list_iova & 7)) return {kBadAddress, 8};
  Bytes table(8ull * c.num_pages);
  if (!host_.dma_read(c.page_list_iova, table)) return {kBadAddress, 9};
  c.pages = decode_page_list(table, c.num_pages);
  return {};
}

Outcome Hca::cmd_destroy_mkey(ByteView in) {
  const uint32_t key = get32(in, 0);
  Mkey* m = tables_.mkeys.get(key >> 8);
  if (!m || m->key != key) return {kBadResource, 0};
  --tables_.pds.get(m->cfg.pdn)->users;
  tables_.mkey_pages -= m->cfg.num_pages;
  tables_.mkeys.free(key >> 8);
  return {};
}

Outcome Hca::cmd_query_mkey(ByteView in, Bytes& out) {
  const uint32_t key = get32(in, 0);
  const Mkey* m = tables_.mkeys.get(key >> 8);
  if (!m || m->key != key) return {kBadResource, 0};
  out.assign(40, std::byte{0});  // §7.5
  put32(out, 0x00, m->cfg.pdn);
  put32(out, 0x04, m->cfg.access);
  put64(out, 0x08, m->cfg.start_va);
  put64(out, 0x10, m->cfg.length);
  put8(out, 0x18, m->cfg.log_page_size);
  put32(out, 0x1c, m->cfg.num_pages);
  put32(out, 0x20, m->key);
  return {};
}

// ---- §6.8 AHs ---------------------------------------------------------------------

// §7.6 address vector ranges.
Outcome Hca::check_av(const Av& av, bool connected) const {
  // §7.6: an AH may name the permissive LID 0xffff (directed-route SMPs
  // from QP0, IBA 14.2.2); a connected path only a unicast LID.
  const bool eth = is_ethernet(av.port);  // §16: a GRH instead of LIDs
  if (eth && (!av.grh() || (connected && is_roce_multicast_gid(av.dgid)))) return {kBadParam, 20};
  if (!eth && (av.dlid == 0 || (connected && av.dlid > 0xbfff))) return {kBadParam, 20};
  if (av.sl > 15 || av.src_path_bits > 127 || av.static_rate > 18) return {kBadParam, 21};
  if (av.port < 1 || av.port > opts_.caps.num_ports) return {kBadParam, 22};
  if (av.flags & 0xfe) return {kBadParam, 23};
  // §6.12: the SGID index names an entry of the port's GID table.
  if (av.grh() && (av.flow_label >= (1u << 20) || gid_entry(av.port, av.sgid_index).type == kGidTypeNone))
    return {kBadParam, 24};
  // §6.8: a multicast DLID goes with a GRH whose DGID is a multicast GID
  // (IBA 4.1.1; the receivers match the group by its MGID, §12.8).
  if (!eth && is_multicast_lid(av.dlid) && (!av.grh() || av.dgid[0] != 0xff)) return {kBadParam, 25};
  return {};
}

Outcome Hca::cmd_create_ah(ByteView in, Bytes& out) {
  SIMHCA_DECODE(c, decode_create_ah(in));
  Pd* pd = tables_.pds.get(c.pdn);
  if (!pd) return {kBadResource, 1};
  if (Outcome o = check_av(c.av, false); o.status) return o;
  auto n = tables_.ahs.alloc(Ah{c.pdn, c.av});
  if (!n) return {kNoResources, 0};
  ++pd->users;
  out = number_out(*n);
  return {};
}

Outcome Hca::cmd_destroy_ah(ByteView in) {
  const uint32_t n = get32(in, 0);
  Ah* ah = tables_.ahs.get(n);
  if (!ah) return {kBadResource, 0};
  --tables_.pds.get(ah->pdn)->users;
  tables_.ahs.free(n);
  return {};
}

Outcome Hca::cmd_query_ah(ByteView in, Bytes& out) {
  const Ah* ah = tables_.ahs.get(get32(in, 0));
  if (!ah) return {kBadResource, 0};
  out.assign(8 + kAvSize, std::byte{0});
  put32(out, 0x00, ah->pdn);
  encode_av(std::span<std::byte>(out).subspan(0x08), ah->av);
  return {};
}

// ---- §6.10 QPs ----------------------------------------------------------------------

Outcome Hca::cmd_create_qp(ByteView in, Bytes& out) {
  SIMHCA_DECODE(c, decode_create_qp(in));
  const Caps& caps = opts_.caps;
  const bool special = c.type == kQpSmi || c.type == kQpGsi;
  const bool raw = c.type == kQpRaw;
  if (c.type > kQpRaw) return {kBadParam, 1};
  if (special && (c.port < 1 || c.port > caps.num_ports || c.use_srq())) return {kBadParam, 2};
  if (c.type == kQpSmi && is_ethernet(c.port)) return {kBadParam, 2};  // §16.1: no QP0 on RoCE
  // §16.5: a raw Ethernet QP is given its port here, an Ethernet one.
  if (raw && (c.port < 1 || c.port > caps.num_ports || !is_ethernet(c.port))) return {kBadParam, 2};
  if (!special && !raw && c.port != 0) return {kBadParam, 3};
  if (c.log_sq_size > caps.log_max_qp_wr || c.log_sq_stride < 6 || c.log_sq_stride > 11)
    return {kBadParam, 4};
  if (!c.use_srq() &&
      (c.log_rq_size > caps.log_max_qp_wr || c.log_rq_stride < 5 || c.log_rq_stride > 10))
    return {kBadParam, 5};
  Pd* pd = tables_.pds.get(c.pdn);
  Cq* scq = tables_.cqs.get(c.send_cqn);
  Cq* rcq = tables_.cqs.get(c.recv_cqn);
  Srq* srq = c.use_srq() ? tables_.srqs.get(c.srqn) : nullptr;
  Uar* uar = tables_.uars.get(c.uar);
  if (!pd || !scq || !rcq || !uar || (c.use_srq() && !srq)) return {kBadResource, 6};
  if (srq && srq->cfg.pdn != c.pdn) return {kBadParam, 7};
  if (c.sq_iova == 0 || (c.sq_iova & 63)) return {kBadAddress, 8};
  if (!c.use_srq() && (c.rq_iova == 0 || (c.rq_iova & 63))) return {kBadAddress, 9};
  std::array<std::byte, 8> dbr{};
  if (c.dbr_iova == 0 || (c.dbr_iova & 7) || !host_.dma_read(c.dbr_iova, dbr)) return {kBadAddress, 10};
  Qp qp;
  qp.cfg = c;
  qp.attrs.port = special || raw ? c.port : 0;
  std::optional<uint32_t> qpn;
  if (special) {  // §6.10: one SMI and one GSI per port, at fixed QPNs
    const uint32_t n = special_qpn(c.port, c.type == kQpGsi);
    if (tables_.qps.alloc_at(n, qp)) qpn = n;
  } else {
    qpn = tables_.qps.alloc(qp);
  }
  if (!qpn) return {kNoResources, 0};
  ++pd->users;
  ++scq->users;
  ++rcq->users;
  if (srq) ++srq->users;
  uar_ref(c.uar, +1);
  uar_link_qp(*qpn, *tables_.qps.get(*qpn));
  if (raw) port_at(c.port).raw_qps.push_back(*qpn);  // §16.5: the port's frames not for RoCE
  out = number_out(*qpn);
  return {};
}

Outcome Hca::cmd_modify_qp(ByteView in) {
  SIMHCA_DECODE(m, decode_modify_qp(in));
  Qp* qp = tables_.qps.get(m.qpn);
  if (!qp) return {kBadResource, 0};  // §8.3 step 1
  const PortInfo& pi = port_at(1).info;  // every port has the same limits
  QpLimits lim{opts_.caps.num_ports, pi.max_mtu, pi.pkey_table_len, pi.gid_table_len,
               opts_.caps.max_rd_atomic, opts_.caps.max_dest_rd_atomic, pi.link_layer == kLinkLayerEthernet};
  const uint8_t cur = qp->attrs.state;
  Verdict v = check_modify(qp->cfg.type, cur, m, lim);
  // §16.5: a raw QP's port is the one it was created on; INIT may name it, no other.
  if (v.ok() && qp->cfg.type == kQpRaw && (m.mask & attr::kPort) && m.attrs.port != qp->cfg.port)
    v = {kBadParam, kSynBadValue | attr::kPort};
  if (!v.ok()) {
    log_->debug("simhca: MODIFY_QP {:#x} {} -> {} mask {:#x}: {} syndrome {:#x}", m.qpn,
                qp_state_name(cur), qp_state_name(target_state(cur, m)), m.mask,
                status_name(v.status), v.syndrome);
    return {v.status, v.syndrome};
  }
  const bool fixed = qp->cfg.type == kQpSmi || qp->cfg.type == kQpGsi || qp->cfg.type == kQpRaw;
  const uint8_t fixed_port = fixed ? qp->cfg.port : 0;
  apply_modify(qp->attrs, m, fixed_port);
  queues_.on_qp_transition(m.qpn, *qp, cur, m);  // §12: PSNs, flush on ERR, clear on RESET
  queues_.track_live(m.qpn, qp);
  // §8.3: RTS->SQD with notify raises SQ_DRAINED once drained (at once here).
  if (cur == kRts && qp->attrs.state == kSqd && (m.mask & attr::kEnSqdAsyncNotify) &&
      m.attrs.sqd_notify) {
    PendingEvent ev;
    ev.type = kEvSqDrained;
    put32(ev.data, 0, m.qpn);
    events_.post(ev);  // a command runs: after its completion (§9.4)
  }
  return {};
}

Outcome Hca::cmd_query_qp(ByteView in, Bytes& out) {
  const Qp* qp = tables_.qps.get(get32(in, 0));
  if (!qp) return {kBadResource, 0};
  out.assign(kQpAttrsSize + 64, std::byte{0});  // §6.10: the attributes, then CREATE_QP's input
  encode_qp_attrs(std::span<std::byte>(out).first(kQpAttrsSize), qp->attrs);
  encode_create_qp(std::span<std::byte>(out).subspan(kQpAttrsSize), qp->cfg);
  return {};
}

Outcome Hca::cmd_destroy_qp(ByteView in) {
  const uint32_t qpn = get32(in, 0);
  Qp* qp = tables_.qps.get(qpn);
  if (!qp) return {kBadResource, 0};
  --tables_.pds.get(qp->cfg.pdn)->users;
  --tables_.cqs.get(qp->cfg.send_cqn)->users;
  --tables_.cqs.get(qp->cfg.recv_cqn)->users;
  if (qp->cfg.use_srq()) --tables_.srqs.get(qp->cfg.srqn)->users;
  if (qp->mcast_groups) tables_.mcgs.detach_all(qpn);  // §6.11
  if (qp->cfg.type == kQpRaw) std::erase(port_at(qp->cfg.port).raw_qps, qpn);
  uar_unlink_qp(qpn, *qp);
  uar_ref(qp->cfg.uar, -1);
  tables_.qps.free(qpn);
  queues_.track_live(qpn, nullptr);
  return {};
}

}  // namespace openib::simhca
