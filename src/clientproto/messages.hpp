// The client protocol between libopenib and ibd (docs/client-protocol.md):
// message layouts and their pure codecs. One message per SOCK_SEQPACKET
// datagram: a 16-byte header, then the body. File descriptors travel as
// SCM_RIGHTS ancillary data of the same datagram; the header says how many.
//
// All integers are little-endian (the socket never leaves the host, but the
// layout is fixed, not "whatever the compiler does"). Each body is a fixed
// sequence of fields, listed once in the struct's visit(); encode() and
// decode() walk that list, and decode() accepts only an exact length.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/byte_order.hpp"
#include "common/result.hpp"

namespace openib::proto {

using Bytes = std::vector<std::byte>;

inline constexpr uint32_t kMagic = 0x4442494f;  // "OIBD" as bytes on the wire
// The header's version: the framing (docs/client-protocol.md §1.1, §2),
// 1 in every protocol version so far.
inline constexpr uint16_t kVersion = 1;
// The protocol versions HELLO negotiates (§2): 2 adds the device status
// page to HelloRep (§6.2); 3 the P_Key and DGID of each AsyncEvent
// (AsyncEventsRep3) and the PATH_CHANGED event; 4 the data-path provider's
// name to HelloRep (§4.1); 5 the largest MR to DeviceRep (DeviceRep5).
// 7 the RDMA CM's own-QP mode (CMA_INIT_QP_ATTR .. CMA_ESTABLISH); 8
// MAP_MEM_SHARED (shared mappings of the client's, mapped by ibd itself).
inline constexpr uint32_t kProtocolMin = 1, kProtocolMax = 9;
inline constexpr uint32_t kProtocolStatusPage = 2;
inline constexpr uint32_t kProtocolPathEvents = 3;
inline constexpr uint32_t kProtocolProvider = 4;
inline constexpr uint32_t kProtocolMrSize = 5;
inline constexpr uint32_t kProtocolMapRange = 6;
inline constexpr uint32_t kProtocolCmaOwnQp = 7;
inline constexpr uint32_t kProtocolMapShared = 8;
inline constexpr uint32_t kProtocolIpoibMode = 9;
inline constexpr size_t kHeaderSize = 16;
inline constexpr size_t kMaxMessage = 65536;  // header included
inline constexpr size_t kMaxFds = 2;          // per message
inline constexpr uint16_t kReplyBit = 0x8000;
inline constexpr const char* kDefaultSocket = "/run/ibd/ibd.sock";

// Request operations. A reply carries op | kReplyBit.
enum class Op : uint16_t {
  kHello = 1,           // HelloReq [+ async eventfd] -> HelloRep + UAR fd
  kQueryDevice = 2,     // Empty -> DeviceRep
  kQueryPort = 3,       // PortReq -> PortRep
  kAllocPd = 4,         // Empty -> HandleRep
  kDeallocPd = 5,       // HandleReq -> Empty
  kMapMem = 6,          // MapMemReq + memfd -> MapMemRep
  kUnmapMem = 7,        // HandleReq -> Empty
  kRegMr = 8,           // RegMrReq -> RegMrRep
  kDeregMr = 9,         // HandleReq -> Empty
  kCreateCq = 10,       // CreateCqReq [+ eventfd] -> ObjRep (handle, cqn)
  kDestroyCq = 11,      // HandleReq -> Empty
  kCreateSrq = 12,      // CreateSrqReq -> ObjRep (handle, srqn)
  kModifySrq = 13,      // ModifySrqReq -> Empty
  kDestroySrq = 14,     // HandleReq -> Empty
  kCreateQp = 15,       // CreateQpReq -> ObjRep (handle, qpn)
  kModifyQp = 16,       // ModifyQpReq -> Empty
  kQueryQp = 17,        // HandleReq -> QueryQpRep
  kDestroyQp = 18,      // HandleReq -> Empty
  kCreateAh = 19,       // CreateAhReq -> ObjRep (handle, ahn)
  kDestroyAh = 20,      // HandleReq -> Empty
  kGetAsyncEvents = 21, // Empty -> AsyncEventsRep
  kInfo = 22,           // InfoReq -> UTF-8 JSON text (docs/client-protocol.md)
  // User MADs (docs/client-protocol.md "User MADs"), used by libibumad.so.3.
  kUmadPort = 23,       // PortReq -> UmadPortRep
  kUmadOpen = 24,       // PortReq -> Empty + the MAD socket (SOCK_SEQPACKET)
  kUmadRegister = 25,   // UmadRegReq -> HandleRep (agent id)
  kUmadUnregister = 26, // HandleReq (agent id) -> Empty
  // Path records (docs/client-protocol.md "Path records"; docs/sa.md).
  kPathQuery = 27,      // PathQueryReq -> PathRep
  kPathTable = 28,      // Empty -> PathTableRep + the shared path table's fd (read-only)
  // Multicast joins and service registrations (docs/client-protocol.md
  // "Multicast joins and services"; docs/sa.md), owned by the connection.
  kMcastJoin = 31,      // McastJoinReq -> McastJoinRep
  kMcastLeave = 32,     // McastLeaveReq -> Empty
  kServiceSet = 33,     // ServiceReq -> ServiceRep (the SA's echo)
  kServiceDelete = 34,  // ServiceReq -> Empty
  kPathList = 29,       // PathListReq -> UTF-8 JSON text, one page
  kPathFlush = 30,      // PathFlushReq -> PathFlushRep (root or CAP_NET_ADMIN)
  // IPoIB (docs/ipoib.md): the interface, its neighbours, groups, counters.
  kIpoibInfo = 35,      // Empty -> UTF-8 JSON text
  // The IB connection manager (docs/cm.md, docs/client-protocol.md
  // "Connection manager"): ids owned by the connection, events on the CM
  // socket CM_OPEN hands over (one per connection).
  kCmOpen = 36,         // Empty -> Empty + the CM event socket (SOCK_SEQPACKET, read-only)
  kCmListen = 37,       // CmListenReq -> HandleRep (the listening id)
  kCmConnect = 38,      // CmConnectReq -> HandleRep (the id)
  kCmAccept = 39,       // CmAcceptReq -> Empty
  kCmReject = 40,       // CmRejectReq -> Empty
  kCmDisconnect = 41,   // CmDisconnectReq -> Empty
  kCmDestroy = 42,      // HandleReq (the id) -> Empty
  kCmSidrQuery = 43,    // CmSidrQueryReq -> HandleRep (the id)
  kCmSidrReply = 44,    // CmSidrReplyReq -> Empty
  kCmInitQpAttr = 45,   // CmInitQpAttrReq -> CmInitQpAttrRep
  kCmInfo = 46,         // Empty -> UTF-8 JSON text (ibdctl cm)
  // The RDMA CM (docs/cma.md, docs/client-protocol.md "RDMA CM"):
  // connections by IP address and port, as librdmacm's. Ids owned by the
  // connection, events on the socket CMA_OPEN hands over (one per connection).
  kCmaOpen = 47,          // Empty -> Empty + the event socket (SOCK_SEQPACKET, read-only)
  kCmaCreateId = 48,      // CmaCreateIdReq -> HandleRep (the id)
  kCmaBind = 49,          // CmaAddrReq -> CmaAddrRep (the address bound; port chosen if 0)
  kCmaResolveAddr = 50,   // CmaResolveAddrReq -> Empty; event kAddrResolved / kAddrError
  kCmaResolveRoute = 51,  // CmaIdTimeoutReq -> Empty; event kRouteResolved / kRouteError
  kCmaListen = 52,        // CmaListenReq -> Empty
  kCmaInitQp = 53,        // CmaQpReq -> Empty (a UD QP: to RTS with the id's Q_Key)
  kCmaConnect = 54,       // CmaConnReq -> Empty; event kEstablished / kRejected / kUnreachable ...
  kCmaAccept = 55,        // CmaConnReq -> Empty; event kEstablished (RC), none (UD)
  kCmaReject = 56,        // CmaRejectReq -> Empty
  kCmaDisconnect = 57,    // HandleReq (the id) -> Empty; event kDisconnected
  kCmaDestroyId = 58,     // HandleReq (the id) -> Empty
  kCmaJoin = 59,          // CmaJoinReq -> Empty; event kMulticastJoin / kMulticastError
  kCmaLeave = 60,         // CmaJoinReq -> Empty
  kCmaQuery = 61,         // HandleReq (the id) -> CmaIdRep
  kCmaInfo = 62,          // Empty -> UTF-8 JSON text (ibdctl cma)
  // A port's GID table entry, with its type and the port's link layer
  // (docs/client-protocol.md §3, "GidRep").
  kQueryGid = 63,         // GidReq -> GidRep
  // A port's P_Key table entry (docs/client-protocol.md §3, "PkeyRep").
  kQueryPkey = 64,        // PkeyReq -> PkeyRep
  // Protocol 6: a page-aligned range of a memfd, not only its start
  // (docs/client-protocol.md §3, "MAP_MEM_RANGE").
  kMapMemRange = 65,      // MapMemRangeReq + memfd -> MapMemRep
  // Protocol 7: the RDMA CM with a QP the client moves itself (rdma_cm's
  // rdma_init_qp_attr, rdma_establish; docs/cma.md "Own QPs").
  kCmaInitQpAttr = 66,    // CmaInitQpAttrReq -> CmInitQpAttrRep
  kCmaConnectOwnQp = 67,  // CmaConnReq (qp: the QP's number) -> Empty; event kConnectResponse
  kCmaAcceptOwnQp = 68,   // CmaConnReq (qp: the QP's number) -> Empty; event kEstablished
  kCmaEstablish = 69,     // HandleReq (the id) -> Empty: the RTU after kConnectResponse
  // Protocol 8: [offset, offset + length) of the client's own address
  // space, where it maps a tmpfs or hugetlbfs file shared and read-write
  // (MAP_SHARED|MAP_ANONYMOUS, memfd, /dev/shm, hugetlb): ibd opens that
  // file itself (docs/client-protocol.md §3, "MAP_MEM_SHARED").
  kMapMemShared = 70,     // MapMemRangeReq (offset: the address) -> MapMemRep
  // Protocol 9: IPoIB's mode (docs/ipoib.md "Connected mode"; root or
  // CAP_NET_ADMIN), as Linux's /sys/class/net/ib0/mode.
  kIpoibSetMode = 71,     // IpoibModeReq -> Empty
};
const char* op_name(uint16_t op);

struct Header {
  uint32_t magic = kMagic;
  uint16_t version = kVersion;
  uint16_t op = 0;
  uint32_t seq = 0;    // echoed in the reply
  uint8_t nfds = 0;    // SCM_RIGHTS fds that came with this message
  uint8_t reserved[3] = {0, 0, 0};
};
void encode_header(std::span<std::byte, kHeaderSize> out, const Header& h);
// Checks magic, version, reserved bytes and nfds <= kMaxFds.
Result<Header> decode_header(std::span<const std::byte> in);

// ---- bodies -------------------------------------------------------------
struct Empty {
  template <class V> void visit(V&) {}
};

struct HelloReq {
  uint32_t version_min = kVersion, version_max = kVersion;
  uint32_t flags = 0;  // bit 0: an async-event eventfd is attached
  template <class V> void visit(V& v) { v(version_min); v(version_max); v(flags); }
};
inline constexpr uint32_t kHelloAsyncFd = 1;
// A management-only client (libibumad): no UAR, no doorbell fd in the reply.
inline constexpr uint32_t kHelloNoUar = 2;

// Doorbell modes (docs/client-protocol.md "Doorbells").
inline constexpr uint8_t kDoorbellMmap = 0;  // the UAR page is mmap-ed from the attached fd
inline constexpr uint8_t kDoorbellRelay = 1; // no fd: ibd would relay doorbells (not implemented)
// The device status page (docs/client-protocol.md §6.2): a read-only page
// ibd shares with every client of one device generation; a client's data
// path reads `state` (kDeviceLost once that device is gone).
inline constexpr size_t kStatusPageSize = 4096;
inline constexpr size_t kStatusGenerationOffset = 0;  // u64, native byte order
inline constexpr size_t kStatusStateOffset = 8;       // u32, native byte order
inline constexpr uint32_t kDeviceRunning = 0, kDeviceLost = 1;

// The data-path provider of a device kind (docs/client-protocol.md §4.1):
// its name, NUL-padded (no NUL when all 16 bytes are used).
inline constexpr size_t kProviderNameSize = 16;
using ProviderName = std::array<uint8_t, kProviderNameSize>;
constexpr ProviderName provider_name(std::string_view s) {
  ProviderName n{};
  for (size_t i = 0; i < s.size() && i < n.size(); ++i) n[i] = static_cast<uint8_t>(s[i]);
  return n;
}
// The name's bytes up to the first NUL.
inline std::string_view provider_name_view(const ProviderName& n) {
  size_t len = 0;
  while (len < n.size() && n[len] != 0) ++len;
  return {reinterpret_cast<const char*>(n.data()), len};
}

struct HelloRep {
  uint32_t version = 0, client_id = 0;
  uint32_t uar = 0;              // the client's UAR index (docs/simhca.md §4)
  uint64_t uar_mmap_offset = 0;  // where to mmap the attached fd for that page
  uint32_t uar_size = 0;         // bytes (4096)
  uint8_t doorbell_mode = kDoorbellMmap;
  uint8_t num_ports = 0;
  // From version 4 (§2): the provider of the device's kind. simhca's
  // unless the daemon says otherwise; a reply of versions 1 to 3 does not
  // carry it and leaves this default, the only kind those versions knew.
  ProviderName provider = provider_name("simhca");
  // The layout depends on `version`, read first: decode() takes the
  // length that version says, encode() writes it.
  template <class V> void visit(V& v) {
    v(version); v(client_id); v(uar); v(uar_mmap_offset); v(uar_size); v(doorbell_mode); v(num_ports);
    if (version >= kProtocolProvider) v(provider);
  }
};

// DeviceRep.cap_flags: what the device can do, in the protocol's own
// words (the device's own flags are its driver's business). Bits 0 to 7
// have the values ibd sent before they were named here
// (docs/client-protocol.md "DeviceRep"); the other bits are 0.
inline constexpr uint32_t kDeviceCapRc = 1u << 0, kDeviceCapUc = 1u << 1, kDeviceCapUd = 1u << 2,
                          kDeviceCapSrq = 1u << 3, kDeviceCapAtomics = 1u << 4, kDeviceCapDataPath = 1u << 5,
                          kDeviceCapPortEvents = 1u << 6, kDeviceCapUdMulticast = 1u << 7;
struct DeviceRep {
  uint64_t node_guid = 0, sys_image_guid = 0;
  uint32_t fw_rev = 0, vendor_id = 0, vendor_part_id = 0, hw_ver = 0;
  uint32_t max_qp = 0, max_cq = 0, max_srq = 0, max_pd = 0, max_mr = 0, max_ah = 0;
  uint32_t max_msg_size = 0, cap_flags = 0;
  uint16_t max_sge = 0, max_inline = 0;
  uint8_t log_max_qp_wr = 0, log_max_cqe = 0, log_max_srq_wr = 0, num_ports = 0;
  uint8_t max_rd_atomic = 0, max_dest_rd_atomic = 0, local_ca_ack_delay = 0;
  std::array<uint8_t, 32> name{};  // NUL-padded device name, e.g. "simhca0"
  template <class V> void visit(V& v) {
    v(node_guid); v(sys_image_guid); v(fw_rev); v(vendor_id); v(vendor_part_id); v(hw_ver);
    v(max_qp); v(max_cq); v(max_srq); v(max_pd); v(max_mr); v(max_ah); v(max_msg_size);
    v(cap_flags); v(max_sge); v(max_inline); v(log_max_qp_wr); v(log_max_cqe);
    v(log_max_srq_wr); v(num_ports); v(max_rd_atomic); v(max_dest_rd_atomic);
    v(local_ca_ack_delay); v(name);
  }
};
// The same to a client of protocol 5: with the bytes one MR may cover
// (REG_MR's limit, docs/client-protocol.md "DeviceRep").
struct DeviceRep5 : DeviceRep {
  uint64_t max_mr_size = 0;
  template <class V> void visit(V& v) { DeviceRep::visit(v); v(max_mr_size); }
};

struct PortReq {
  uint8_t port = 1;
  template <class V> void visit(V& v) { v(port); }
};
struct PortRep {
  uint8_t state = 0, phys_state = 0;
  uint16_t lid = 0, sm_lid = 0;
  uint8_t lmc = 0, sm_sl = 0, max_mtu = 0, active_mtu = 0, active_width = 0, active_speed = 0;
  uint16_t pkey_table_len = 0, gid_table_len = 0;
  uint64_t gid_prefix = 0, port_guid = 0;
  uint32_t cap_flags = 0;
  template <class V> void visit(V& v) {
    v(state); v(phys_state); v(lid); v(sm_lid); v(lmc); v(sm_sl); v(max_mtu); v(active_mtu);
    v(active_width); v(active_speed); v(pkey_table_len); v(gid_table_len); v(gid_prefix);
    v(port_guid); v(cap_flags);
  }
};

// QUERY_GID: entry `index` of port `port`'s GID table.
struct GidReq {
  uint8_t port = 1;
  uint8_t reserved = 0;
  uint16_t index = 0;
  template <class V> void visit(V& v) { v(port); v(reserved); v(index); }
};
// The entry's GID and type (enum ibv_gid_type: 0 IB, 1 RoCE v1, 2 RoCE
// v2), and the port's link layer (enum ibv_port_attr.link_layer: 1
// InfiniBand, 2 Ethernet), which PortRep does not carry.
inline constexpr uint8_t kGidTypeIb = 0, kGidTypeRoceV1 = 1, kGidTypeRoceV2 = 2;
inline constexpr uint8_t kLinkLayerInfiniBand = 1, kLinkLayerEthernet = 2;
struct GidRep {
  std::array<uint8_t, 16> gid{};
  uint8_t gid_type = kGidTypeIb, link_layer = kLinkLayerInfiniBand;
  uint16_t reserved = 0;
  template <class V> void visit(V& v) { v(gid); v(gid_type); v(link_layer); v(reserved); }
};

// QUERY_PKEY: entry `index` of port `port`'s P_Key table (ibv_query_pkey).
struct PkeyReq {
  uint8_t port = 1;
  uint8_t reserved = 0;
  uint16_t index = 0;
  template <class V> void visit(V& v) { v(port); v(reserved); v(index); }
};
struct PkeyRep {
  uint16_t pkey = 0;  // bit 15 full membership, bits 14:0 the partition (IBA 10.9.1.2)
  uint16_t reserved = 0;
  template <class V> void visit(V& v) { v(pkey); v(reserved); }
};

struct HandleReq {
  uint32_t handle = 0;
  template <class V> void visit(V& v) { v(handle); }
};
struct HandleRep {
  uint32_t handle = 0;
  template <class V> void visit(V& v) { v(handle); }
};
// A created object: the client's handle and the device's number for it
// (CQN, SRQN, QPN, AHN).
struct ObjRep {
  uint32_t handle = 0, number = 0;
  template <class V> void visit(V& v) { v(handle); v(number); }
};

// A memfd (attached) whose first `length` bytes ibd maps for DMA. The fd
// must be a memfd at least `length` long; length a multiple of 4096.
struct MapMemReq {
  uint64_t length = 0;
  template <class V> void visit(V& v) { v(length); }
};
// MAP_MEM_RANGE: [offset, offset + length) of the attached memfd, both
// multiples of 4096 (protocol 6).
struct MapMemRangeReq {
  uint64_t offset = 0, length = 0;
  template <class V> void visit(V& v) { v(offset); v(length); }
};
struct MapMemRep {
  uint32_t handle = 0;
  uint64_t iova = 0;
  template <class V> void visit(V& v) { v(handle); v(iova); }
};

// A memory region over [offset, offset+length) of a mapped memfd, seen by
// the client at virtual address `va` (docs/simhca.md §12.6).
struct RegMrReq {
  uint32_t pd = 0, mem = 0;
  uint64_t offset = 0, length = 0, va = 0;
  uint32_t access = 0;  // enum ibv_access_flags bits 0..3
  template <class V> void visit(V& v) { v(pd); v(mem); v(offset); v(length); v(va); v(access); }
};
struct RegMrRep {
  uint32_t handle = 0, lkey = 0, rkey = 0;
  template <class V> void visit(V& v) { v(handle); v(lkey); v(rkey); }
};

// Rings and doorbell records live in a mapped memfd (`mem`) at the offsets
// given; the sizes follow docs/simhca.md §6.5, §6.9, §6.10.
struct CreateCqReq {
  uint32_t mem = 0;
  uint64_t ring_offset = 0, dbr_offset = 0;
  uint8_t log_size = 0;
  uint8_t flags = 0;  // bit 0: an eventfd is attached (completion events)
  template <class V> void visit(V& v) { v(mem); v(ring_offset); v(dbr_offset); v(log_size); v(flags); }
};
inline constexpr uint8_t kCqEventFd = 1;

struct CreateSrqReq {
  uint32_t pd = 0, mem = 0;
  uint64_t ring_offset = 0, dbr_offset = 0;
  uint8_t log_size = 0, log_stride = 0;
  uint32_t limit = 0;
  template <class V> void visit(V& v) {
    v(pd); v(mem); v(ring_offset); v(dbr_offset); v(log_size); v(log_stride); v(limit);
  }
};
struct ModifySrqReq {
  uint32_t srq = 0, limit = 0;  // arms the SRQ limit event (IBA 11.2.3.3)
  template <class V> void visit(V& v) { v(srq); v(limit); }
};

struct CreateQpReq {
  uint32_t pd = 0, send_cq = 0, recv_cq = 0, srq = 0;  // srq 0: none
  uint8_t type = 0;  // 0 RC, 1 UC, 2 UD (docs/simhca.md §6.10)
  uint8_t sig_all = 0;
  uint8_t log_sq_size = 0, log_sq_stride = 0, log_rq_size = 0, log_rq_stride = 0;
  uint32_t mem = 0;
  uint64_t sq_offset = 0, rq_offset = 0, dbr_offset = 0;
  template <class V> void visit(V& v) {
    v(pd); v(send_cq); v(recv_cq); v(srq); v(type); v(sig_all); v(log_sq_size);
    v(log_sq_stride); v(log_rq_size); v(log_rq_stride); v(mem); v(sq_offset); v(rq_offset);
    v(dbr_offset);
  }
};

// The address vector's and the QP attributes' fields, listed once: the
// wire's order (docs/client-protocol.md, docs/simhca.md §7.6, §7.7), and
// the fields the two converters copy, ibd's (wire <-> hca/verbs.hpp's
// types) and libopenib's (wire <-> include/openib/verbs.hpp's), whose
// types name their fields as these do (docs/library.md "Types").
// f(t.field...) once per field, in order, over every t at once.
template <class F, class... T> void av_fields(F&& f, T&... t) {
  f(t.dlid...); f(t.sl...); f(t.src_path_bits...); f(t.static_rate...); f(t.port...); f(t.grh...);
  f(t.hop_limit...); f(t.flow_label...); f(t.sgid_index...); f(t.traffic_class...); f(t.dgid...);
}
// Without the mask, which only the wire carries (hca::encode_modify_qp takes it apart).
template <class F, class... T> void qp_attr_fields(F&& f, T&... t) {
  f(t.state...); f(t.cur_state...); f(t.port...); f(t.path_mtu...); f(t.pkey_index...); f(t.access...);
  f(t.en_sqd_async_notify...); f(t.qkey...); f(t.dest_qpn...); f(t.rq_psn...); f(t.sq_psn...);
  f(t.timeout...); f(t.retry_cnt...); f(t.rnr_retry...); f(t.min_rnr_timer...); f(t.max_rd_atomic...);
  f(t.max_dest_rd_atomic...);
  av_fields(f, t.av...);
}

// docs/simhca.md §7.6
struct Av {
  uint16_t dlid = 0;
  uint8_t sl = 0, src_path_bits = 0, static_rate = 0, port = 1, grh = 0, hop_limit = 0;
  uint32_t flow_label = 0;
  uint8_t sgid_index = 0, traffic_class = 0;
  std::array<uint8_t, 16> dgid{};
  template <class V> void visit(V& v) { av_fields(v, *this); }
};

// docs/simhca.md §7.7; mask bits are enum ibv_qp_attr_mask's.
struct QpAttr {
  uint32_t mask = 0;
  uint8_t state = 0, cur_state = 0, port = 0, path_mtu = 0;
  uint16_t pkey_index = 0;
  uint8_t access = 0, en_sqd_async_notify = 0;
  uint32_t qkey = 0, dest_qpn = 0, rq_psn = 0, sq_psn = 0;
  uint8_t timeout = 0, retry_cnt = 0, rnr_retry = 0, min_rnr_timer = 0;
  uint8_t max_rd_atomic = 0, max_dest_rd_atomic = 0;
  Av av;
  template <class V> void visit(V& v) {
    v(mask);
    qp_attr_fields(v, *this);
  }
};
struct ModifyQpReq {
  uint32_t qp = 0;
  QpAttr attr;
  template <class V> void visit(V& v) { v(qp); attr.visit(v); }
};
struct QueryQpRep {
  QpAttr attr;  // mask unused
  uint8_t type = 0, sig_all = 0;
  uint8_t log_sq_size = 0, log_rq_size = 0;
  uint32_t qpn = 0;
  template <class V> void visit(V& v) {
    attr.visit(v); v(type); v(sig_all); v(log_sq_size); v(log_rq_size); v(qpn);
  }
};

struct CreateAhReq {
  uint32_t pd = 0;
  Av av;
  template <class V> void visit(V& v) { v(pd); av.visit(v); }
};

// Asynchronous events (IBA 11.6.3), queued per client: the async eventfd
// (HELLO) is signalled and the client fetches them with GET_ASYNC_EVENTS.
enum class ObjKind : uint8_t { kNone = 0, kPort = 1, kCq = 2, kQp = 3, kSrq = 4, kDevice = 5 };
// openib's own event types, above libibverbs' enum ibv_event_type.
// kEventPathChanged (docs/client-protocol.md "Path records"): a path ibd had
// cached to `dgid` within `pkey` on `port` revalidated to another record or
// to none; sent to the clients that used PATH_QUERY or PATH_TABLE.
inline constexpr uint8_t kEventPathChanged = 64;
struct AsyncEvent {
  uint8_t type = 0;  // enum ibv_event_type value, or kEventPathChanged
  uint8_t kind = 0;  // ObjKind
  uint8_t port = 0;
  uint32_t handle = 0;  // the client's handle of the object (0 for port/device)
  uint16_t pkey = 0;    // protocol 3, kEventPathChanged only (0 otherwise), as the dgid
  std::array<uint8_t, 16> dgid{};
  template <class V> void visit(V& v) { v(type); v(kind); v(port); v(handle); }  // versions 1, 2
  template <class V> void visit3(V& v) { visit(v); v(pkey); v(dgid); }
};
inline constexpr size_t kMaxEventsPerReply = 32;
// GET_ASYNC_EVENTS' reply to a client of protocol 1 or 2: 7-byte events.
struct AsyncEventsRep {
  uint32_t count = 0;    // valid entries in events
  uint32_t dropped = 0;  // events lost to a full queue since the last fetch
  std::array<AsyncEvent, kMaxEventsPerReply> events{};
  template <class V> void visit(V& v) {
    v(count); v(dropped);
    for (auto& e : events) e.visit(v);
  }
};
// The same to a client of protocol 3: 25-byte events (pkey, dgid).
struct AsyncEventsRep3 : AsyncEventsRep {
  template <class V> void visit(V& v) {
    v(count); v(dropped);
    for (auto& e : events) e.visit3(v);
  }
};

struct InfoReq {
  uint32_t flags = 0;  // bit 0: include every client's objects (root only)
  template <class V> void visit(V& v) { v(flags); }
};
inline constexpr uint32_t kInfoObjects = 1;

// ---- user MADs --------------------------------------------------------------
// The live attributes libibumad reports in struct umad_port (IBA 14.2.5.6
// PortInfo, through QUERY_PORT) and the port's P_Key table.
inline constexpr size_t kUmadMaxPkeys = 32;
struct UmadPortRep {
  uint8_t state = 0, phys_state = 0;
  uint16_t lid = 0, sm_lid = 0;
  uint8_t lmc = 0, sm_sl = 0, active_width = 0, active_speed = 0;
  uint32_t cap_flags = 0;
  uint64_t gid_prefix = 0, port_guid = 0;
  uint16_t num_pkeys = 0;
  std::array<uint8_t, 2 * kUmadMaxPkeys> pkeys{};  // little-endian u16 each
  template <class V> void visit(V& v) {
    v(state); v(phys_state); v(lid); v(sm_lid); v(lmc); v(sm_sl); v(active_width);
    v(active_speed); v(cap_flags); v(gid_prefix); v(port_guid); v(num_pkeys); v(pkeys);
  }
};
// umad_register2()'s struct umad_reg_attr.
struct UmadRegReq {
  uint8_t mgmt_class = 0, class_version = 0, rmpp_version = 0;
  uint32_t flags = 0, oui = 0;
  uint64_t method_mask_lo = 0, method_mask_hi = 0;
  template <class V> void visit(V& v) {
    v(mgmt_class); v(class_version); v(rmpp_version); v(flags); v(oui); v(method_mask_lo);
    v(method_mask_hi);
  }
};

// ---- path records (docs/sa.md "In ibd") ----------------------------------
// A PathRecord to `dgid` from the port's GID 0 within P_Key `pkey` (0: the
// port's P_Key at index 0), through ibd's path cache, or from the SA itself
// with kPathFresh (around the cache: it is neither read nor filled).
inline constexpr uint32_t kPathFresh = 1;
struct PathQueryReq {
  uint8_t port = 1;
  uint16_t pkey = 0;
  uint32_t flags = 0;
  std::array<uint8_t, 16> dgid{};
  template <class V> void visit(V& v) { v(port); v(pkey); v(flags); v(dgid); }
};
// Where the answer came from.
inline constexpr uint8_t kPathFromSa = 0, kPathFromCache = 1;
struct PathRep {
  uint8_t source = kPathFromSa;
  std::array<uint8_t, 64> record{};  // the PathRecord as on the wire (IBA 15.2.5.16)
  template <class V> void visit(V& v) { v(source); v(record); }
};

// The shared path table (docs/sa.md "Shared table", src/sa/path_table.hpp):
// its size; the fd comes with the reply, read-only and sealed.
struct PathTableRep {
  uint64_t bytes = 0;
  uint32_t slots = 0;
  template <class V> void visit(V& v) { v(bytes); v(slots); }
};
// ---- multicast joins and services (docs/sa.md "Multicast joins") --------
// Join the group `mgid` on `port` with JoinState `join_state` (IBA
// 15.2.5.17: 1 FullMember, 2 NonMember, 4 SendOnlyNonMember). With
// kMcastCreate the group's parameters (Q_Key, P_Key, SL, FlowLabel,
// TClass; MTU, rate, HopLimit when not 0) go along, so the SA creates the
// group if it does not exist. pkey 0: the port's P_Key at index 0.
inline constexpr uint32_t kMcastCreate = 1;
struct McastJoinReq {
  uint8_t port = 1;
  uint8_t join_state = 1;
  uint16_t pkey = 0;
  uint32_t flags = 0;
  std::array<uint8_t, 16> mgid{};
  uint32_t qkey = 0;
  uint32_t flow_label = 0;
  uint8_t mtu = 0, rate = 0, sl = 0, tclass = 0, hop_limit = 0;
  template <class V> void visit(V& v) {
    v(port); v(join_state); v(pkey); v(flags); v(mgid); v(qkey); v(flow_label); v(mtu); v(rate); v(sl);
    v(tclass); v(hop_limit);
  }
};
struct McastJoinRep {
  std::array<uint8_t, 52> record{};  // the SA's MCMemberRecord as on the wire (MLID, Q_Key, MTU, ...)
  template <class V> void visit(V& v) { v(record); }
};
struct McastLeaveReq {
  uint8_t port = 1;
  std::array<uint8_t, 16> mgid{};
  template <class V> void visit(V& v) { v(port); v(mgid); }
};
// SERVICE_SET registers the ServiceRecord (IBA 15.2.5.14; ServiceGID 0:
// the port's GID 0; a finite ServiceLease is renewed by ibd while the
// connection lives); SERVICE_DELETE removes the registration named by the
// record's ServiceID, ServiceGID and ServiceP_Key.
struct ServiceReq {
  uint8_t port = 1;
  std::array<uint8_t, 176> record{};  // the ServiceRecord as on the wire
  template <class V> void visit(V& v) { v(port); v(record); }
};
struct ServiceRep {
  std::array<uint8_t, 176> record{};
  template <class V> void visit(V& v) { v(record); }
};
// PATH_LIST: the path cache's entries (port 0: every port's) in (port,
// DGID, P_Key, key) order, from index `start` on, as JSON; the reply says
// where the next page starts (docs/client-protocol.md "Path records").
struct PathListReq {
  uint8_t port = 0;
  uint32_t start = 0;
  template <class V> void visit(V& v) { v(port); v(start); }
};
// PATH_FLUSH: drops the port's entries (port 0: every port's), only those
// for `dgid` with kPathFlushDgid.
inline constexpr uint32_t kPathFlushDgid = 1;
// IPOIB_SET_MODE: 0 datagram, 1 connected (RFC 4755).
struct IpoibModeReq {
  uint8_t connected = 0;
  template <class V> void visit(V& v) { v(connected); }
};
struct PathFlushReq {
  uint8_t port = 0;
  uint32_t flags = 0;
  std::array<uint8_t, 16> dgid{};
  template <class V> void visit(V& v) { v(port); v(flags); v(dgid); }
};
struct PathFlushRep {
  uint32_t dropped = 0;  // entries dropped
  template <class V> void visit(V& v) { v(dropped); }
};

// ---- the connection manager (docs/cm.md) ---------------------------------
// Private data travels as a length and the bytes; the wire carries each
// message's fixed size (IBA 12.6), zero-padded.
inline constexpr size_t kCmMaxPrivate = 224;
using CmPrivate = std::array<uint8_t, kCmMaxPrivate>;
// CmListenReq.flags: the listener takes SIDR_REQs (UD service) instead of REQs.
inline constexpr uint8_t kCmListenSidr = 1;
struct CmListenReq {
  uint8_t port = 1;
  uint8_t flags = 0;
  uint64_t service_id = 0, service_mask = ~uint64_t{0};
  template <class V> void visit(V& v) { v(port); v(flags); v(service_id); v(service_mask); }
};
// CmConnectReq/CmAcceptReq.flags: ibd leaves the QP alone; the client moves
// it itself with CM_INIT_QP_ATTR's attributes (as ib_cm_init_qp_attr).
inline constexpr uint8_t kCmManualQp = 1;
struct CmConnectReq {
  uint8_t port = 1;
  uint8_t flags = 0;
  uint32_t qp = 0;  // the client's QP handle (RC or UC), in RESET or INIT
  uint64_t service_id = 0;
  std::array<uint8_t, 64> path{};  // the primary PathRecord as on the wire (IBA 15.2.5.16)
  uint8_t responder_resources = 0, initiator_depth = 0, retry_count = 7, rnr_retry_count = 7;
  uint8_t max_cm_retries = 15, cm_response_timeout = 20;
  uint8_t private_len = 0;  // at most 92 (REQ)
  CmPrivate private_data{};
  template <class V> void visit(V& v) {
    v(port); v(flags); v(qp); v(service_id); v(path); v(responder_resources); v(initiator_depth);
    v(retry_count); v(rnr_retry_count); v(max_cm_retries); v(cm_response_timeout); v(private_len);
    v(private_data);
  }
};
struct CmAcceptReq {
  uint32_t id = 0, qp = 0;
  uint8_t flags = 0;
  uint8_t responder_resources = 0, initiator_depth = 0, rnr_retry_count = 7;
  uint8_t private_len = 0;  // at most 196 (REP)
  CmPrivate private_data{};
  template <class V> void visit(V& v) {
    v(id); v(qp); v(flags); v(responder_resources); v(initiator_depth); v(rnr_retry_count); v(private_len);
    v(private_data);
  }
};
struct CmRejectReq {
  uint32_t id = 0;
  uint16_t reason = 28;  // IBA 12.6.7.2: 28 consumer reject
  uint8_t ari_len = 0;   // at most 72
  std::array<uint8_t, 72> ari{};
  uint8_t private_len = 0;  // at most 148 (REJ)
  CmPrivate private_data{};
  template <class V> void visit(V& v) { v(id); v(reason); v(ari_len); v(ari); v(private_len); v(private_data); }
};
struct CmDisconnectReq {
  uint32_t id = 0;
  uint8_t private_len = 0;  // at most 220 (DREQ)
  CmPrivate private_data{};
  template <class V> void visit(V& v) { v(id); v(private_len); v(private_data); }
};
struct CmSidrQueryReq {
  uint8_t port = 1;
  uint8_t max_cm_retries = 3, cm_response_timeout = 18;
  uint64_t service_id = 0;
  std::array<uint8_t, 64> path{};
  uint8_t private_len = 0;  // at most 216 (SIDR_REQ)
  CmPrivate private_data{};
  template <class V> void visit(V& v) {
    v(port); v(max_cm_retries); v(cm_response_timeout); v(service_id); v(path); v(private_len); v(private_data);
  }
};
struct CmSidrReplyReq {
  uint32_t id = 0;
  uint8_t status = 0;  // IBA 12.11.2: 0 valid, 2 rejected, ...
  uint32_t qp = 0;     // the client's UD QP handle (status 0)
  uint32_t qkey = 0;
  uint8_t private_len = 0;  // at most 136 (SIDR_REP)
  CmPrivate private_data{};
  template <class V> void visit(V& v) { v(id); v(status); v(qp); v(qkey); v(private_len); v(private_data); }
};
struct CmInitQpAttrReq {
  uint32_t id = 0;
  uint8_t state = 0;  // 1 INIT, 2 RTR, 3 RTS
  template <class V> void visit(V& v) { v(id); v(state); }
};
struct CmInitQpAttrRep {
  QpAttr attr;  // mask: the attributes the transition takes
  template <class V> void visit(V& v) { attr.visit(v); }
};
// Events on the CM socket, one CmEventMsg per datagram (no header).
enum class CmEventType : uint8_t {
  kRequest = 1,            // a REQ for a listener: `id` is new, `listen_id` the listener
  kReply = 2,              // the REP to a connect (its private data); established follows
  kEstablished = 3,
  kRejected = 4,           // `reason` (IBA 12.6.7.2), ARI, private data
  kMraReceived = 5,        // the peer asked for more time
  kDisconnectRequest = 6,  // the peer's DREQ (its private data); ibd answered DREP
  kDisconnected = 7,       // our DREQ answered (or timed out: status ETIMEDOUT)
  kTimewaitExit = 8,       // the id's QP may be reused
  kTimeout = 9,            // REQ/REP/SIDR_REQ retries exhausted (status ETIMEDOUT)
  kSidrRequest = 10,       // a SIDR_REQ for a SIDR listener: answer with CM_SIDR_REPLY
  kSidrReply = 11,         // the answer to CM_SIDR_QUERY: sidr_status, QPN, Q_Key
  kError = 12,             // ibd failed the id (status: an errno; e.g. the QP transition)
};
struct CmEventMsg {
  uint8_t type = 0;
  uint32_t id = 0, listen_id = 0;
  int32_t status = 0;
  uint16_t reason = 0;
  uint8_t port = 0, sidr_status = 0;
  uint64_t service_id = 0;
  uint32_t remote_qpn = 0, starting_psn = 0, qkey = 0;
  uint8_t responder_resources = 0, initiator_depth = 0, rnr_retry_count = 0, srq = 0;
  uint16_t remote_lid = 0;
  std::array<uint8_t, 16> remote_gid{};
  uint8_t ari_len = 0;
  std::array<uint8_t, 72> ari{};
  uint8_t private_len = 0;
  CmPrivate private_data{};
  template <class V> void visit(V& v) {
    v(type); v(id); v(listen_id); v(status); v(reason); v(port); v(sidr_status); v(service_id);
    v(remote_qpn); v(starting_psn); v(qkey); v(responder_resources); v(initiator_depth);
    v(rnr_retry_count); v(srq); v(remote_lid); v(remote_gid); v(ari_len); v(ari); v(private_len);
    v(private_data);
  }
};

// ---- the RDMA CM (docs/cma.md) ---------------------------------------------
// Port spaces (enum rdma_port_space): the service ID of a port is
// (ps << 16) + port, as rdma_get_service_id (docs/cma.md "Service IDs").
inline constexpr uint16_t kRdmaPsIpoib = 0x0002, kRdmaPsTcp = 0x0106, kRdmaPsUdp = 0x0111, kRdmaPsIb = 0x013F;
// An IP address and port (a sockaddr_in / sockaddr_in6 without the
// padding): family AF_INET (the address in addr[0..3]), AF_INET6, or 0 (none).
struct CmaAddr {
  uint16_t family = 0;
  uint16_t port = 0;  // host order
  std::array<uint8_t, 16> addr{};
  uint32_t scope_id = 0;
  template <class V> void visit(V& v) { v(family); v(port); v(addr); v(scope_id); }
};
struct CmaCreateIdReq {
  uint16_t ps = kRdmaPsTcp;
  template <class V> void visit(V& v) { v(ps); }
};
struct CmaAddrReq {
  uint32_t id = 0;
  CmaAddr addr;
  template <class V> void visit(V& v) { v(id); addr.visit(v); }
};
struct CmaAddrRep {
  CmaAddr addr;
  template <class V> void visit(V& v) { addr.visit(v); }
};
struct CmaResolveAddrReq {
  uint32_t id = 0;
  CmaAddr src;  // family 0: any (the route's source)
  CmaAddr dst;
  uint32_t timeout_ms = 2000;
  template <class V> void visit(V& v) { v(id); src.visit(v); dst.visit(v); v(timeout_ms); }
};
struct CmaIdTimeoutReq {
  uint32_t id = 0;
  uint32_t timeout_ms = 2000;
  template <class V> void visit(V& v) { v(id); v(timeout_ms); }
};
struct CmaListenReq {
  uint32_t id = 0;
  uint32_t backlog = 0;  // 0: the default (1024)
  template <class V> void visit(V& v) { v(id); v(backlog); }
};
struct CmaQpReq {
  uint32_t id = 0, qp = 0;  // the client's QP handle
  template <class V> void visit(V& v) { v(id); v(qp); }
};
struct CmaInitQpAttrReq {
  uint32_t id = 0;
  uint8_t state = 0;  // 1 INIT, 2 RTR, 3 RTS
  template <class V> void visit(V& v) { v(id); v(state); }
};
// The private data a consumer may give (the CM message's less the CMA
// header where one is carried: REQ 92 - 36 = 56, SIDR_REQ 216 - 36 = 180).
inline constexpr size_t kCmaReqPrivate = 56, kCmaSidrReqPrivate = 180;
struct CmaConnReq {  // struct rdma_conn_param
  uint32_t id = 0, qp = 0;  // qp: the client's QP handle (0 for an accept of a UD id without one)
  uint8_t responder_resources = 1, initiator_depth = 1, retry_count = 7, rnr_retry_count = 7;
  uint8_t private_len = 0;
  CmPrivate private_data{};
  template <class V> void visit(V& v) {
    v(id); v(qp); v(responder_resources); v(initiator_depth); v(retry_count); v(rnr_retry_count);
    v(private_len); v(private_data);
  }
};
struct CmaRejectReq {
  uint32_t id = 0;
  uint8_t private_len = 0;  // at most 148 (REJ), 136 (SIDR_REP)
  CmPrivate private_data{};
  template <class V> void visit(V& v) { v(id); v(private_len); v(private_data); }
};
struct CmaJoinReq {
  uint32_t id = 0;
  uint32_t qp = 0;  // kCmaJoin: the client's UD QP, attached to the group
  CmaAddr group;    // an IPv4 or IPv6 multicast address
  template <class V> void visit(V& v) { v(id); v(qp); group.visit(v); }
};
// rdma_cm_id's state (enum rdma_cm_state's order).
enum class CmaState : uint8_t {
  kIdle = 0, kAddrQuery = 1, kAddrResolved = 2, kRouteQuery = 3, kRouteResolved = 4, kConnect = 5,
  kDisconnect = 6, kAddrBound = 7, kListen = 8, kDeviceRemoval = 9, kDestroying = 10,
};
struct CmaIdRep {
  uint8_t state = 0, port = 0;
  uint16_t ps = 0, pkey = 0;
  CmaAddr src, dst;
  std::array<uint8_t, 16> sgid{}, dgid{};
  uint8_t have_path = 0;
  std::array<uint8_t, 64> path{};  // the route's PathRecord as on the wire
  uint32_t qpn = 0;                // the id's QP (CMA_INIT_QP, connect, accept), or 0
  template <class V> void visit(V& v) {
    v(state); v(port); v(ps); v(pkey); src.visit(v); dst.visit(v); v(sgid); v(dgid); v(have_path); v(path);
    v(qpn);
  }
};
// Events on the CMA socket, one CmaEventMsg per datagram (no header);
// the types are enum rdma_cm_event_type's values.
enum class CmaEventType : uint8_t {
  kAddrResolved = 0, kAddrError = 1, kRouteResolved = 2, kRouteError = 3, kConnectRequest = 4,
  kConnectResponse = 5, kConnectError = 6, kUnreachable = 7, kRejected = 8, kEstablished = 9,
  kDisconnected = 10, kDeviceRemoval = 11, kMulticastJoin = 12, kMulticastError = 13, kAddrChange = 14,
  kTimewaitExit = 15,
};
struct CmaEventMsg {
  uint8_t type = 0;
  uint32_t id = 0;         // kConnectRequest: the new id
  uint32_t listen_id = 0;  // kConnectRequest: the listener
  int32_t status = 0;      // as rdma_cm's: a negative errno, or the REJ reason (kRejected)
  uint8_t port = 0;
  CmaAddr src, dst;        // kConnectRequest: the peer's (dst) and ours (src) as the CMA header says
  // struct rdma_conn_param (connections)
  uint8_t responder_resources = 0, initiator_depth = 0, rnr_retry_count = 0, srq = 0;
  uint32_t qp_num = 0;     // the peer's QPN (connections; UD: the remote QP, 0xFFFFFF for a group)
  // struct rdma_ud_param (UD: kEstablished of a UD connect, kMulticastJoin)
  uint32_t qkey = 0;
  Av ah;                   // to the peer or the group
  uint8_t private_len = 0;
  CmPrivate private_data{};
  template <class V> void visit(V& v) {
    v(type); v(id); v(listen_id); v(status); v(port); src.visit(v); dst.visit(v); v(responder_resources);
    v(initiator_depth); v(rnr_retry_count); v(srq); v(qp_num); v(qkey); ah.visit(v); v(private_len);
    v(private_data);
  }
};

// ---- codec ----------------------------------------------------------------
namespace detail {
struct Sizer {
  size_t n = 0;
  template <class T> void operator()(const T&) { n += sizeof(T); }
  template <size_t N> void operator()(const std::array<uint8_t, N>&) { n += N; }
};
struct Writer {
  bytes::MutSpan out;
  size_t off = 0;
  template <class T> void operator()(const T& x) {
    bytes::put_le(out, off, sizeof(T), static_cast<uint64_t>(x));
    off += sizeof(T);
  }
  template <size_t N> void operator()(const std::array<uint8_t, N>& a) {
    for (uint8_t b : a) out[off++] = static_cast<std::byte>(b);
  }
};
// Reads the fields that fit; `off` ends at the layout's length either way
// (for a layout that depends on a field read first, the length it says).
struct Reader {
  bytes::ConstSpan in;
  size_t off = 0;
  template <class T> void operator()(T& x) {
    if (off + sizeof(T) <= in.size()) x = static_cast<T>(bytes::get_le(in, off, sizeof(T)));
    off += sizeof(T);
  }
  template <size_t N> void operator()(std::array<uint8_t, N>& a) {
    for (uint8_t& b : a) {
      if (off < in.size()) b = static_cast<uint8_t>(in[off]);
      ++off;
    }
  }
};
}  // namespace detail

// The length of a default M (of a versioned layout such as HelloRep's: the
// oldest version's).
template <class M> size_t body_size() {
  M m{};
  detail::Sizer s;
  m.visit(s);
  return s.n;
}
template <class M> Bytes encode(const M& msg) {
  M copy = msg;  // visit() is non-const so that one list serves both ways
  detail::Sizer s;
  copy.visit(s);
  Bytes out(s.n);
  detail::Writer w{out};
  copy.visit(w);
  return out;
}
// Exact length (the one the fields read say) or EPROTO.
template <class M> Result<M> decode(std::span<const std::byte> in) {
  M m{};
  detail::Reader r{in};
  m.visit(r);
  if (r.off != in.size()) return err(EPROTO, "body of {} bytes, expected {}", in.size(), r.off);
  return m;
}

// A reply body: i32 status (0 or an errno value), then the payload (status
// 0) or a UTF-8 message (status != 0).
Bytes encode_reply(int status, std::span<const std::byte> payload);
Bytes encode_error_reply(int status, std::string_view message);
struct ReplyView {
  int status = 0;
  std::span<const std::byte> payload;
};
Result<ReplyView> decode_reply(std::span<const std::byte> in);

// A whole datagram: header then body.
Bytes frame(const Header& h, std::span<const std::byte> body);

}  // namespace openib::proto
