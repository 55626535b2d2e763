// What the join and service-registration components stand on (DESIGN.md:
// a small interface below, a fake in the tests): something that sends one
// SA request on a port and hands back the answer, and that knows the
// port's GID. ibd implements it over its per-port SaClient
// (src/ibd/sa_service.cpp); test/unit/test_sa_regs.cpp over a fake SA.
#pragma once

#include <cstdint>
#include <functional>

#include "common/result.hpp"
#include "sa/sa_mad.hpp"

namespace openib::sa {

// The whole answer MAD (or reassembled message), whatever its status, or
// the transport's error (timeout, BUSY after retries, no SM, device gone).
// Who a join or a registration is for (ibd: the client's id).
using Owner = std::uint32_t;

using SaAnswerFn = std::function<void(Result<ByteVec>)>;

class SaRequester {
 public:
  virtual ~SaRequester() = default;
  // One SA request (`req.tid` is the requester's) with `record` in its
  // data area; `done` once, now or later, on the caller's thread.
  virtual void sa_request(std::uint8_t port, const SaRequest& req, ByteVec record, SaAnswerFn done) = 0;
  // The port's GID 0 (IBA 4.1.1), as the PortGID / ServiceGID of the
  // port's requests.
  virtual void port_gid(std::uint8_t port, std::function<void(Result<Gid>)> done) = 0;
};

}  // namespace openib::sa
