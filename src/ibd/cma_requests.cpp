// CMA_*: the RDMA CM's requests (docs/cma.md, docs/client-protocol.md
// "RDMA CM"): ids owned by the connection; QPs named must be the client's.
#include "ibd/server.hpp"

namespace openib::ibd {

Result<void> Server::op_cma(Client&, proto::Message&, Respond&) {
  return err(EOPNOTSUPP, "this ibd runs no RDMA CM");
}

}  // namespace openib::ibd
