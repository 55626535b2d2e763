// The QP state machine of IBA 10.3.1 with the attribute rules of IBA
// 11.2.4.2 (Modify QP), as docs/simhca.md §8 tabulates them. Pure: given a
// QP's type and state and a MODIFY_QP request, says whether it is legal and
// what it does.
#pragma once

#include <cstdint>

#include "sim/simhca/codec.hpp"

namespace openib::simhca {

// Device limits the attribute values are checked against (§7.7).
struct QpLimits {
  uint8_t num_ports = 1;
  uint8_t max_mtu = 5;
  uint16_t pkey_table_len = 1;
  uint16_t gid_table_len = 1;
  uint8_t max_rd_atomic = 16;
  uint8_t max_dest_rd_atomic = 16;
  bool ethernet = false;  // §16: the ports are Ethernet: paths have a GRH and no LID
};

struct Verdict {
  uint8_t status = kOk;
  uint32_t syndrome = 0;  // §8.3: reason << 24 | attribute bits
  bool ok() const { return status == kOk; }
};

// §8.3 syndrome reasons.
inline constexpr uint32_t kSynMissing = 0x01u << 24;
inline constexpr uint32_t kSynNotAllowed = 0x02u << 24;
inline constexpr uint32_t kSynBadValue = 0x03u << 24;
inline constexpr uint32_t kSynReservedBits = 0x04u << 24;

// §8.1: is cur -> next a legal MODIFY_QP transition for this type?
bool transition_legal(uint8_t type, uint8_t cur, uint8_t next);
// §8.2 tables: required and optional attribute bits (STATE excluded).
uint32_t required_attrs(uint8_t type, uint8_t cur, uint8_t next);
uint32_t optional_attrs(uint8_t type, uint8_t cur, uint8_t next);

// §8.3 steps 2-9 (step 1, the QP's existence, is the caller's).
Verdict check_modify(uint8_t type, uint8_t cur, const ModifyQp& m, const QpLimits& lim);

// The state a checked request moves to.
inline uint8_t target_state(uint8_t cur, const ModifyQp& m) {
  return (m.mask & attr::kState) ? m.attrs.state : cur;
}

// Applies a checked request to the stored attributes (§8.3 "Effects"):
// copies the selected fields, clears everything on ->RESET. `fixed_port`
// is the creation port of SMI/GSI QPs (0 otherwise).
void apply_modify(QpAttrs& stored, const ModifyQp& m, uint8_t fixed_port);

const char* qp_state_name(uint8_t s);

}  // namespace openib::simhca
