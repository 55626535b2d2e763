// The daemon's one address vector and one set of QP attributes (IBA
// 11.2.2.1 Create Address Handle, 11.2.5.2 Modify Queue Pair), device
// neutral: the driver (src/hca, which encodes them as docs/simhca.md §7.6,
// §7.7 say), the services in ibd and the CM engine (src/cm, Linux's
// ib_cm_init_qp_attr) all use these. Header-only, so layers that do not
// link the driver can name them. The client protocol's twins and the field
// list the converters walk are clientproto/messages.hpp's (docs/library.md
// "Types").
#pragma once

#include <array>
#include <cstdint>

namespace openib::verbs {

// IBA 11.2.2.1 address vector (struct ibv_ah_attr).
struct AddressVector {
  uint16_t dlid = 0;
  uint8_t sl = 0, src_path_bits = 0, static_rate = 0, port = 1;
  bool grh = false;
  uint8_t hop_limit = 0;
  uint32_t flow_label = 0;
  uint8_t sgid_index = 0, traffic_class = 0;
  std::array<uint8_t, 16> dgid{};
  // An Ethernet port's destination MAC (RoCE: the next hop's, resolved
  // from the DGID by the driver as Linux's ib_resolve_eth_dmac does; no
  // field of struct ibv_ah_attr, which leaves it to the kernel).
  std::array<uint8_t, 6> dmac{};
};

// IBA 10.3.1 QP states (enum ibv_qp_state values).
enum class QpState : uint8_t { kReset = 0, kInit = 1, kRtr = 2, kRts = 3, kSqd = 4, kSqe = 5, kErr = 6 };

// The attribute mask: enum ibv_qp_attr_mask values.
namespace qp_attr {
inline constexpr uint32_t kState = 1u << 0, kCurState = 1u << 1, kEnSqdAsyncNotify = 1u << 2;
inline constexpr uint32_t kAccessFlags = 1u << 3, kPkeyIndex = 1u << 4, kPort = 1u << 5;
inline constexpr uint32_t kQkey = 1u << 6, kAv = 1u << 7, kPathMtu = 1u << 8, kTimeout = 1u << 9;
inline constexpr uint32_t kRetryCnt = 1u << 10, kRnrRetry = 1u << 11, kRqPsn = 1u << 12;
inline constexpr uint32_t kMaxQpRdAtomic = 1u << 13, kAltPath = 1u << 14, kMinRnrTimer = 1u << 15;
inline constexpr uint32_t kSqPsn = 1u << 16, kMaxDestRdAtomic = 1u << 17;
inline constexpr uint32_t kPathMigState = 1u << 18, kCap = 1u << 19, kDestQpn = 1u << 20;
}  // namespace qp_attr

// Access flags (IBA 11.2.5.2 access control), the values of enum ibv_access_flags.
inline constexpr uint32_t kAccessLocalWrite = 1, kAccessRemoteWrite = 2, kAccessRemoteRead = 4,
                          kAccessRemoteAtomic = 8;

// IBA 11.2.5.2 QP attributes (struct ibv_qp_attr, the fields the stack supports).
struct QpAttr {
  QpState state = QpState::kReset;
  QpState cur_state = QpState::kReset;
  uint8_t port = 0, path_mtu = 0;
  uint16_t pkey_index = 0;
  uint8_t access = 0;
  bool en_sqd_async_notify = false;  // query: sq_draining
  uint32_t qkey = 0, dest_qpn = 0, rq_psn = 0, sq_psn = 0;
  uint8_t timeout = 0, retry_cnt = 0, rnr_retry = 0, min_rnr_timer = 0;
  uint8_t max_rd_atomic = 0, max_dest_rd_atomic = 0;
  AddressVector av;
};

}  // namespace openib::verbs
