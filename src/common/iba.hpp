// InfiniBand Architecture constants that more than one part of the driver
// side needs (mad today; sa, cm and the client library next), defined once
// here so none of them depends on another for a number. The emulator
// (src/sim) keeps its own copies on purpose: it is the other reading of the
// specification that the driver is tested against.
#pragma once

#include <cstdint>

namespace openib::iba {

// The well-known Q_Key of QP1, the GSI (IBA 13.5.3.1): GMPs are sent and
// accepted with it.
inline constexpr uint32_t kGsiQkey = 0x80010000;

// The permissive LID (IBA 4.1.5): a DLID every port accepts, used by
// directed-route SMPs before (or instead of) LID routing.
inline constexpr uint16_t kPermissiveLid = 0xFFFF;

}  // namespace openib::iba
