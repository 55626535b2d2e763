// The driver's reading of docs/simhca.md (the programmer's reference
// manual) for the command path. The manual's register map, opcodes, status
// codes and event types are named once, in src/prm/registers.hpp, which
// simhca reads too; the data-path layouts (UAR page, WQEs, CQE) are
// src/prm's, named here too so the command path reads them as before; the
// byte helpers are common/byte_order.hpp's. What the driver does with
// them, and its encoders and decoders of the command layouts (verbs.cpp),
// stay its own: the manual is the contract.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "common/byte_order.hpp"
#include "prm/cqe.hpp"
#include "prm/registers.hpp"
#include "prm/uar.hpp"

namespace openib::hca::prm {

// §2 PCI identity, §3 the initialization segment and its values, §4 the
// UAR regions, §5.2 the command entry, §5.5 status codes, §6 opcodes, §9
// event types: the manual's names, shared with simhca (src/prm/registers.hpp).
using namespace ::openib::regmap;
using namespace ::openib::regmap::reg;
// The interface revision this driver is written against (§3 INTERFACE_REV).
inline constexpr uint32_t kSupportedInterfaceRev = kInterfaceRevValue;

// §4 UAR pages (src/prm/uar.hpp).
using ::openib::dp::kUarCqArm;
using ::openib::dp::kUarEqDoorbell;
using ::openib::dp::kUarPageSize;
using ::openib::dp::kUarSqDoorbell;

// §12.4 (src/prm/cqe.hpp)
using ::openib::dp::kCqeSize;

// Big-endian fields of host-memory structures (§1): the tree's helpers.
using ::openib::bytes::get16;
using ::openib::bytes::get32;
using ::openib::bytes::get64;
using ::openib::bytes::get8;
using ::openib::bytes::put16;
using ::openib::bytes::put32;
using ::openib::bytes::put64;
using ::openib::bytes::put8;

const char* status_name(uint8_t status);

}  // namespace openib::hca::prm
