// ibdctl's pieces shared between its files (ibdctl.cpp: INFO and paths;
// ibdctl_sa.cpp: multicast joins and service registrations).
#pragma once

#include <string>

#include "clientproto/messages.hpp"
#include "common/fd.hpp"
#include "common/result.hpp"

namespace openib::ibdctl {

// A connection to ibd's client socket.
Result<UniqueFd> connect_to(const std::string& path);
// One request and its reply's payload (an error reply is its errno and text).
Result<proto::Bytes> call(int fd, proto::Op op, uint32_t seq, const proto::Bytes& body);
// `ibdctl mcast ...` and `ibdctl service ...` (argv[1] names which).
int sa_member_main(int argc, char** argv, const std::string& socket);

}  // namespace openib::ibdctl
