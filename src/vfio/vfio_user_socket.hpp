// Message framing of vfio-user over a UNIX stream socket: whole messages
// in and out, with file descriptors as SCM_RIGHTS ancillary data (spec
// "Socket" and "Header"). Shared by the client and the server framework.
//
// Errors: ENODEV when the peer is gone (EOF, ECONNRESET, EPIPE),
// ETIMEDOUT when the deadline passes, EPROTO for a header that cannot be
// framed (bad size, oversized) or ancillary data that was cut off.
#pragma once

#include <span>
#include <vector>

#include "common/fd.hpp"
#include "common/result.hpp"
#include "vfio/vfio_user_proto.hpp"

namespace openib::vfio::user {

struct Received {
  Bytes bytes;                 // the whole message, header included
  std::vector<UniqueFd> fds;   // every fd that came with it (CLOEXEC)
};

// Sends `msg` with `fds` attached; waits at most timeout_ms (< 0: forever)
// for the socket to take all of it. Never raises SIGPIPE.
Result<void> send_message(int sock, ByteSpan msg, std::span<const int> fds, int timeout_ms);

// Receives exactly one message no larger than max_size, within timeout_ms
// (< 0: forever) from the call.
Result<Received> recv_message(int sock, size_t max_size, int timeout_ms);

}  // namespace openib::vfio::user
