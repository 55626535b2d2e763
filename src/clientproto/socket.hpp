// Sending and receiving one client-protocol message (docs/client-protocol.md)
// over a SOCK_SEQPACKET UNIX socket, with its fds as SCM_RIGHTS.
#pragma once

#include <string>
#include <vector>

#include "clientproto/messages.hpp"
#include "common/fd.hpp"

namespace openib::proto {

struct Message {
  Header header;
  Bytes body;
  std::vector<UniqueFd> fds;  // as many as header.nfds
};

// A SOCK_SEQPACKET connection to ibd's socket at `path` (close-on-exec).
// A path too long for sun_path is ENAMETOOLONG; connect's errno otherwise.
Result<UniqueFd> connect_socket(const std::string& path);

// Sends header + body with `fds` attached (header.nfds is set from fds).
// MSG_NOSIGNAL: a closed peer is EPIPE, not a signal.
Result<void> send_message(int sock, Header h, std::span<const std::byte> body,
                          std::span<const int> fds = {});

// Receives one message. A datagram larger than kMaxMessage (MSG_TRUNC), fds
// cut off (MSG_CTRUNC), a bad header, or fds that do not match header.nfds
// are EPROTO (any fds received are closed). A closed peer is ECONNRESET.
// With `nonblocking`, an empty socket is EAGAIN. The control buffer holds
// as many fds as one message can carry (SCM_MAX_FD), so the kernel never
// releases cut-off fds inside this call. With `rejected`, the fds of a
// message that is an error are moved there instead of closed (ibd closes
// them where a blocking close cannot stall it).
Result<Message> recv_message(int sock, bool nonblocking = false, std::vector<UniqueFd>* rejected = nullptr);

}  // namespace openib::proto
