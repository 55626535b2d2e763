// What libopenib's CM channels share (cm.cpp's CmChannel, cma.cpp's
// RdmaEventChannel): reading one event datagram from the socket ibd hands
// over with CM_OPEN / CMA_OPEN, and private data put into a request.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "clientproto/messages.hpp"
#include "openib/result.hpp"

namespace openib::lib {

// Waits up to timeout_ms (-1: forever) for one datagram on `fd` and reads it
// into `buf`; its length. ETIMEDOUT, ECONNRESET (ibd closed the socket).
// `what` names the socket in errors ("CM", "RDMA CM").
Result<size_t> recv_event(int fd, std::span<std::byte> buf, int timeout_ms, const char* what);

// Copies `in` into `out`; its length. EINVAL when longer than `max` (`msg`
// names the message: "a REQ").
Result<uint8_t> put_private(proto::CmPrivate& out, std::span<const uint8_t> in, size_t max, const char* msg);

}  // namespace openib::lib
