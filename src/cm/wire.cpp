// The CM MAD codec (wire.hpp). Each message's layout is written once, as a
// list of fields at "Byte[Bit]" positions of its IBA table (the spec's
// notation: byte offset in the 232-byte CM data area, bit 0 the most
// significant); encode() and decode() walk the same list. Layouts: IBA
// 12.6.5 (REQ), 12.6.6 (MRA), 12.6.7 (REJ), 12.6.8 (REP), 12.6.9 (RTU),
// 12.6.10 (DREQ), 12.6.11 (DREP), 12.8.1 (LAP), 12.8.2 (APR), 12.11.1
// (SIDR_REQ), 12.11.2 (SIDR_REP), class version 2. Reserved bits are
// written 0 and ignored on reading (IBA 13.4.2: receivers ignore them).
#include "cm/wire.hpp"

#include <cerrno>
#include <concepts>
#include <type_traits>

#include "mad/mad.hpp"

namespace openib::cm {

namespace {

// Bit position of Byte[Bit] in the data area.
constexpr std::size_t at(std::size_t byte, unsigned bit = 0) { return byte * 8 + bit; }

// The two walkers over a field list: Put writes the fields of a message
// into the data area, Get reads them back.
class Put {
 public:
  explicit Put(MutBytes data) : d_(data) {}
  template <typename T>
  void u(std::size_t bit, unsigned len, const T& v) {
    mad::put_bits(d_, bit, len, static_cast<std::uint64_t>(v));
  }
  template <std::size_t N>
  void raw(std::size_t byte, const std::array<std::uint8_t, N>& a) {
    for (std::size_t i = 0; i < N; ++i) mad::put8(d_, byte + i, a[i]);
  }

 private:
  MutBytes d_;
};

class Get {
 public:
  explicit Get(ConstBytes data) : d_(data) {}
  template <typename T>
  void u(std::size_t bit, unsigned len, T& v) {
    v = static_cast<T>(mad::get_bits(d_, bit, len));
  }
  template <std::size_t N>
  void raw(std::size_t byte, std::array<std::uint8_t, N>& a) {
    for (std::size_t i = 0; i < N; ++i) a[i] = mad::get8(d_, byte + i);
  }

 private:
  ConstBytes d_;
};

// M is T or const T: one field list serves both walkers.
template <typename M, typename T>
concept Is = std::same_as<std::remove_const_t<M>, T>;

// The two communication IDs that open every connection message but REQ
// (Byte[0] local, Byte[4] remote: IBA 12.6.6 - 12.6.11, 12.8.1, 12.8.2).
template <typename V, typename M>
void comm_ids(V& v, M& m) {
  v.u(at(0), 32, m.local_comm_id);
  v.u(at(4), 32, m.remote_comm_id);
}

// A REQ path (IBA 12.6.5: primary at byte 52, alternate at byte 96; 44
// bytes each, the same layout).
template <typename V, Is<CmPath> P>
void req_path(V& v, std::size_t b, P& p) {
  v.u(at(b + 0), 16, p.local_lid);
  v.u(at(b + 2), 16, p.remote_lid);
  v.raw(b + 4, p.local_gid);
  v.raw(b + 20, p.remote_gid);
  v.u(at(b + 36), 20, p.flow_label);
  v.u(at(b + 39, 2), 6, p.packet_rate);
  v.u(at(b + 40), 8, p.traffic_class);
  v.u(at(b + 41), 8, p.hop_limit);
  v.u(at(b + 42), 4, p.sl);
  v.u(at(b + 42, 4), 1, p.subnet_local);
  v.u(at(b + 43), 5, p.local_ack_timeout);
}

// REQ, IBA 12.6.5. The alternate path is walked by the caller (it is
// there only when its local LID is not 0).
template <typename V, Is<Req> M>
void fields(V& v, M& m) {
  v.u(at(0), 32, m.local_comm_id);
  v.u(at(8), 64, m.service_id);
  v.u(at(16), 64, m.local_ca_guid);
  v.u(at(28), 32, m.local_qkey);
  v.u(at(32), 24, m.local_qpn);
  v.u(at(35), 8, m.responder_resources);
  v.u(at(36), 24, m.local_eecn);
  v.u(at(39), 8, m.initiator_depth);
  v.u(at(40), 24, m.remote_eecn);
  v.u(at(43), 5, m.remote_cm_response_timeout);
  v.u(at(43, 5), 2, m.transport_service_type);
  v.u(at(43, 7), 1, m.end_to_end_flow_control);
  v.u(at(44), 24, m.starting_psn);
  v.u(at(47), 5, m.local_cm_response_timeout);
  v.u(at(47, 5), 3, m.retry_count);
  v.u(at(48), 16, m.pkey);
  v.u(at(50), 4, m.path_mtu);
  v.u(at(50, 4), 1, m.rdc_exists);
  v.u(at(50, 5), 3, m.rnr_retry_count);
  v.u(at(51), 4, m.max_cm_retries);
  v.u(at(51, 4), 1, m.srq);
  v.u(at(51, 5), 3, m.extended_transport_type);
  req_path(v, 52, m.primary);
  v.u(at(139, 5), 1, m.sap_supported);
  v.raw(140, m.private_data);
}
constexpr std::size_t kReqAltOff = 96;

// MRA, IBA 12.6.6.
template <typename V, Is<Mra> M>
void fields(V& v, M& m) {
  comm_ids(v, m);
  v.u(at(8), 2, m.message_mraed);
  v.u(at(9), 5, m.service_timeout);
  v.raw(10, m.private_data);
}

// REJ, IBA 12.6.7.
template <typename V, Is<Rej> M>
void fields(V& v, M& m) {
  comm_ids(v, m);
  v.u(at(8), 2, m.message_rejected);
  v.u(at(9), 7, m.ari_length);
  v.u(at(10), 16, m.reason);
  v.raw(12, m.ari);
  v.raw(84, m.private_data);
}

// REP, IBA 12.6.8.
template <typename V, Is<Rep> M>
void fields(V& v, M& m) {
  comm_ids(v, m);
  v.u(at(8), 32, m.local_qkey);
  v.u(at(12), 24, m.local_qpn);
  v.u(at(16), 24, m.local_eecn);
  v.u(at(20), 24, m.starting_psn);
  v.u(at(24), 8, m.responder_resources);
  v.u(at(25), 8, m.initiator_depth);
  v.u(at(26), 5, m.target_ack_delay);
  v.u(at(26, 5), 2, m.failover_accepted);
  v.u(at(26, 7), 1, m.end_to_end_flow_control);
  v.u(at(27), 3, m.rnr_retry_count);
  v.u(at(27, 3), 1, m.srq);
  v.u(at(28), 64, m.local_ca_guid);
  v.raw(36, m.private_data);
}

// RTU, IBA 12.6.9; DREP, IBA 12.6.11: the two IDs and private data.
template <typename V, typename M>
  requires Is<M, Rtu> || Is<M, Drep>
void fields(V& v, M& m) {
  comm_ids(v, m);
  v.raw(8, m.private_data);
}

// DREQ, IBA 12.6.10.
template <typename V, Is<Dreq> M>
void fields(V& v, M& m) {
  comm_ids(v, m);
  v.u(at(8), 24, m.remote_qpn_eecn);
  v.raw(12, m.private_data);
}

// SIDR_REQ, IBA 12.11.1.
template <typename V, Is<SidrReq> M>
void fields(V& v, M& m) {
  v.u(at(0), 32, m.request_id);
  v.u(at(4), 16, m.pkey);
  v.u(at(8), 64, m.service_id);
  v.raw(16, m.private_data);
}

// SIDR_REP, IBA 12.11.2.
template <typename V, Is<SidrRep> M>
void fields(V& v, M& m) {
  v.u(at(0), 32, m.request_id);
  v.u(at(4), 8, m.status);
  v.u(at(5), 8, m.add_info_length);
  v.u(at(8), 24, m.qpn);
  v.u(at(12), 64, m.service_id);
  v.u(at(20), 32, m.qkey);
  v.raw(24, m.class_port_info);
  v.raw(96, m.private_data);
}

// LAP, IBA 12.8.1: its alternate path is laid out unlike a REQ's (the
// traffic class before the hop limit, the packet rate after it).
template <typename V, Is<Lap> M>
void fields(V& v, M& m) {
  comm_ids(v, m);
  v.u(at(12), 24, m.remote_qpn_eecn);
  v.u(at(15), 5, m.remote_cm_response_timeout);
  auto& p = m.alternate;
  v.u(at(20), 16, p.local_lid);
  v.u(at(22), 16, p.remote_lid);
  v.raw(24, p.local_gid);
  v.raw(40, p.remote_gid);
  v.u(at(56), 20, p.flow_label);
  v.u(at(59), 8, p.traffic_class);
  v.u(at(60), 8, p.hop_limit);
  v.u(at(61, 2), 6, p.packet_rate);
  v.u(at(62), 4, p.sl);
  v.u(at(62, 4), 1, p.subnet_local);
  v.u(at(63), 5, p.local_ack_timeout);
  v.raw(64, m.private_data);
}

// APR, IBA 12.8.2.
template <typename V, Is<Apr> M>
void fields(V& v, M& m) {
  comm_ids(v, m);
  v.u(at(8), 8, m.add_info_length);
  v.u(at(9), 8, m.status);
  v.raw(12, m.add_info);
  v.raw(84, m.private_data);
}

// The attribute ID of each message type.
template <typename T> constexpr std::uint16_t kAttrOf = 0;
template <> constexpr std::uint16_t kAttrOf<Req> = attr::kReq;
template <> constexpr std::uint16_t kAttrOf<Mra> = attr::kMra;
template <> constexpr std::uint16_t kAttrOf<Rej> = attr::kRej;
template <> constexpr std::uint16_t kAttrOf<Rep> = attr::kRep;
template <> constexpr std::uint16_t kAttrOf<Rtu> = attr::kRtu;
template <> constexpr std::uint16_t kAttrOf<Dreq> = attr::kDreq;
template <> constexpr std::uint16_t kAttrOf<Drep> = attr::kDrep;
template <> constexpr std::uint16_t kAttrOf<SidrReq> = attr::kSidrReq;
template <> constexpr std::uint16_t kAttrOf<SidrRep> = attr::kSidrRep;
template <> constexpr std::uint16_t kAttrOf<Lap> = attr::kLap;
template <> constexpr std::uint16_t kAttrOf<Apr> = attr::kApr;

// ---- checks on a decoded message ----------------------------------------
// The values the spec reserves or forbids; each is EBADMSG naming the field.

Result<void> bad(const char* msg, const char* field, std::uint64_t v) {
  return err(EBADMSG, "CM {}: {} {} is not allowed", msg, field, v);
}

Result<void> check(const Req& m) {
  // IBA 12.6.5: the primary path's ports have LIDs (LID 0 is reserved,
  // IBA 4.1.3); an alternate path is present iff its local LID is not 0,
  // and then its remote LID must be a LID too.
  if (m.primary.local_lid == 0) return bad("REQ", "primary local port LID", 0);
  if (m.primary.remote_lid == 0) return bad("REQ", "primary remote port LID", 0);
  if (m.has_alternate && m.alternate.remote_lid == 0) return bad("REQ", "alternate remote port LID", 0);
  // TransportServiceType 3 is "extended": only ExtendedTransportType 1
  // (XRC, IBA Annex A14) is defined.
  if (m.transport_service_type == transport::kExtended && m.extended_transport_type != transport::kExtXrc)
    return bad("REQ", "extended transport type (of transport service type 3)", m.extended_transport_type);
  // Path MTU: 1 (256) .. 5 (4096), IBA 9.7.1 / 14.2.5.6; 0 and 6..15 are reserved.
  if (m.path_mtu < 1 || m.path_mtu > 5) return bad("REQ", "path packet payload MTU", m.path_mtu);
  return {};
}
Result<void> check(const Mra& m) {
  if (static_cast<unsigned>(m.message_mraed) > 2) return bad("MRA", "message MRAed (reserved)", 3);
  return {};
}
Result<void> check(const Rej& m) {
  if (static_cast<unsigned>(m.message_rejected) > 2) return bad("REJ", "message rejected (reserved)", 3);
  if (m.ari_length > kAriBytes) return bad("REJ", "ARI length (> 72)", m.ari_length);
  return {};
}
Result<void> check(const SidrRep& m) {
  if (m.add_info_length > kAriBytes) return bad("SIDR_REP", "additional information length (> 72)", m.add_info_length);
  return {};
}
Result<void> check(const Lap& m) {
  // IBA 12.8.1: a LAP loads a path; its ports must have LIDs.
  if (m.alternate.local_lid == 0) return bad("LAP", "alternate local port LID", 0);
  if (m.alternate.remote_lid == 0) return bad("LAP", "alternate remote port LID", 0);
  return {};
}
Result<void> check(const Apr& m) {
  if (m.add_info_length > kAriBytes) return bad("APR", "additional information length (> 72)", m.add_info_length);
  return {};
}
template <typename T>
Result<void> check(const T&) {
  return {};
}

template <typename T>
void encode_fields(MutBytes data, const T& m) {
  Put p(data);
  fields(p, m);
  if constexpr (std::is_same_v<T, Req>) {
    if (m.has_alternate && m.alternate.local_lid != 0) req_path(p, kReqAltOff, m.alternate);
  }
}

template <typename T>
Result<Message> decode_fields(ConstBytes data) {
  T m;
  Get g(data);
  fields(g, m);
  if constexpr (std::is_same_v<T, Req>) {
    m.has_alternate = mad::get16(data, kReqAltOff) != 0;
    if (m.has_alternate) req_path(g, kReqAltOff, m.alternate);
  }
  if (auto r = check(m); !r) return r.take_error();
  return Message{std::move(m)};
}

// Header checks shared by decode() and class_port_info_response().
Result<mad::MadHeader> cm_header(ConstBytes mad, std::uint8_t method) {
  if (mad.size() < mad::kMadBytes) return err(EBADMSG, "CM MAD: {} bytes, need {}", mad.size(), mad::kMadBytes);
  auto h = mad::decode_header(mad);
  if (!h) return err(EBADMSG, "CM MAD: {}", h.error().message);
  if (h->base_version != mad::kBaseVersion) return err(EBADMSG, "CM MAD: base version {}, need 1", h->base_version);
  if (h->mgmt_class != kMgmtClass) return err(EBADMSG, "CM MAD: management class {:#04x}, need 0x07", h->mgmt_class);
  if (h->class_version != kClassVersion)
    return err(EBADMSG, "CM MAD: class version {}, need {}", h->class_version, kClassVersion);
  if (h->method != method) return err(EBADMSG, "CM MAD: method {:#04x}, need {:#04x}", h->method, method);
  return h;
}

}  // namespace

const char* attr_name(std::uint16_t id) {
  switch (id) {
    case attr::kClassPortInfo: return "ClassPortInfo";
    case attr::kReq: return "REQ";
    case attr::kMra: return "MRA";
    case attr::kRej: return "REJ";
    case attr::kRep: return "REP";
    case attr::kRtu: return "RTU";
    case attr::kDreq: return "DREQ";
    case attr::kDrep: return "DREP";
    case attr::kSidrReq: return "SIDR_REQ";
    case attr::kSidrRep: return "SIDR_REP";
    case attr::kLap: return "LAP";
    case attr::kApr: return "APR";
    default: return "unknown";
  }
}

const char* rej_reason_name(std::uint16_t reason) {
  static constexpr const char* kNames[] = {
      nullptr,
      "no QP available",
      "no EEC available",
      "no resources available",
      "timeout",
      "unsupported request",
      "invalid communication ID",
      "invalid communication instance",
      "invalid service ID",
      "invalid transport service type",
      "stale connection",
      "RDC does not exist",
      "primary remote port GID rejected",
      "primary remote port LID rejected",
      "invalid primary SL",
      "invalid primary traffic class",
      "invalid primary hop limit",
      "invalid primary packet rate",
      "alternate remote port GID rejected",
      "alternate remote port LID rejected",
      "invalid alternate SL",
      "invalid alternate traffic class",
      "invalid alternate hop limit",
      "invalid alternate packet rate",
      "port and CM redirection",
      "port redirection",
      "invalid path MTU",
      "insufficient responder resources",
      "consumer reject",
      "invalid RNR NAK retry count",
      "duplicate local communication ID",
      "unsupported class version",
      "invalid primary flow label",
      "invalid alternate flow label",
      nullptr,
      "vendor option not supported",
  };
  if (reason >= std::size(kNames) || kNames[reason] == nullptr) return "unknown";
  return kNames[reason];
}

std::uint16_t attr_id_of(const Message& m) {
  return std::visit([](const auto& x) { return kAttrOf<std::decay_t<decltype(x)>>; }, m);
}

ByteVec encode(const Message& m, std::uint64_t tid) {
  mad::MadHeader h;
  h.mgmt_class = kMgmtClass;
  h.class_version = kClassVersion;
  h.method = kMethodSend;
  h.tid = tid;
  h.attr_id = attr_id_of(m);
  const mad::Mad buf = mad::make_mad(h);
  ByteVec out(buf.begin(), buf.end());
  const MutBytes data = MutBytes(out).subspan(kDataOff, kDataBytes);
  std::visit([&](const auto& x) { encode_fields(data, x); }, m);
  return out;
}

Result<Decoded> decode(ConstBytes mad) {
  auto h = cm_header(mad, kMethodSend);
  if (!h) return h.take_error();
  const ConstBytes data = mad.subspan(kDataOff, kDataBytes);
  Result<Message> msg = err(EPROTONOSUPPORT, "CM MAD: attribute {:#06x} is no CM message", h->attr_id);
  switch (h->attr_id) {
    case attr::kReq: msg = decode_fields<Req>(data); break;
    case attr::kMra: msg = decode_fields<Mra>(data); break;
    case attr::kRej: msg = decode_fields<Rej>(data); break;
    case attr::kRep: msg = decode_fields<Rep>(data); break;
    case attr::kRtu: msg = decode_fields<Rtu>(data); break;
    case attr::kDreq: msg = decode_fields<Dreq>(data); break;
    case attr::kDrep: msg = decode_fields<Drep>(data); break;
    case attr::kSidrReq: msg = decode_fields<SidrReq>(data); break;
    case attr::kSidrRep: msg = decode_fields<SidrRep>(data); break;
    case attr::kLap: msg = decode_fields<Lap>(data); break;
    case attr::kApr: msg = decode_fields<Apr>(data); break;
    default: break;
  }
  if (!msg) return msg.take_error();
  return Decoded{h->tid, h->attr_id, std::move(*msg)};
}

Result<ByteVec> class_port_info_response(ConstBytes get_request, std::uint8_t resp_time_value,
                                         std::uint16_t capability_mask) {
  auto h = cm_header(get_request, kMethodGet);
  if (!h) return h.take_error();
  if (h->attr_id != attr::kClassPortInfo)
    return err(EBADMSG, "CM Get: attribute {:#06x}, only ClassPortInfo can be read", h->attr_id);
  mad::MadHeader rh = *h;  // same TID, attribute and modifier (IBA 13.4.5)
  rh.method = kMethodGetResp;
  rh.status = mad::status::kOk;
  rh.class_specific = 0;
  const mad::Mad buf = mad::make_mad(rh);
  ByteVec out(buf.begin(), buf.end());
  mad::ClassPortInfo cpi;
  cpi.base_version = mad::kBaseVersion;
  cpi.class_version = kClassVersion;
  cpi.capability_mask = capability_mask;
  cpi.resp_time_value = static_cast<std::uint8_t>(resp_time_value & 0x1F);
  mad::encode_class_port_info(MutBytes(out).subspan(kDataOff, mad::kClassPortInfoBytes), cpi);
  return out;
}

}  // namespace openib::cm
