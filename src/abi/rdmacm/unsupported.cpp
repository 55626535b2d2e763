// What librdmacm.so.1 exports and we do not implement: each fails cleanly
// and reads none of its arguments. rsockets (<rdma/rsocket.h>): -1 with
// ENOSYS (riowrite: 0, riomap: -1 as off_t); ECE (rdma-core 44's
// Enhanced Connection Establishment): EOPNOTSUPP, as librdmacm on a device
// without ECE; rdma_reject_ece is rdma_reject.
#include <poll.h>
#include <sys/select.h>
#include <sys/uio.h>

#include <rdma/rsocket.h>

#include "abi/rdmacm/objects.hpp"

using namespace openib::rdmacm;

namespace {
int nosys(const char* call) { return fail(call, ENOSYS, "rsockets are not implemented"); }
}  // namespace

extern "C" {

int rsocket(int, int, int) { return nosys("rsocket"); }
int rbind(int, const sockaddr*, socklen_t) { return nosys("rbind"); }
int rlisten(int, int) { return nosys("rlisten"); }
int raccept(int, sockaddr*, socklen_t*) { return nosys("raccept"); }
int rconnect(int, const sockaddr*, socklen_t) { return nosys("rconnect"); }
int rshutdown(int, int) { return nosys("rshutdown"); }
int rclose(int) { return nosys("rclose"); }
ssize_t rrecv(int, void*, size_t, int) { return nosys("rrecv"); }
ssize_t rrecvfrom(int, void*, size_t, int, sockaddr*, socklen_t*) { return nosys("rrecvfrom"); }
ssize_t rrecvmsg(int, msghdr*, int) { return nosys("rrecvmsg"); }
ssize_t rsend(int, const void*, size_t, int) { return nosys("rsend"); }
ssize_t rsendto(int, const void*, size_t, int, const sockaddr*, socklen_t) { return nosys("rsendto"); }
ssize_t rsendmsg(int, const msghdr*, int) { return nosys("rsendmsg"); }
ssize_t rread(int, void*, size_t) { return nosys("rread"); }
ssize_t rreadv(int, const iovec*, int) { return nosys("rreadv"); }
ssize_t rwrite(int, const void*, size_t) { return nosys("rwrite"); }
ssize_t rwritev(int, const iovec*, int) { return nosys("rwritev"); }
int rpoll(pollfd*, nfds_t, int) { return nosys("rpoll"); }
int rselect(int, fd_set*, fd_set*, fd_set*, timeval*) { return nosys("rselect"); }
int rgetpeername(int, sockaddr*, socklen_t*) { return nosys("rgetpeername"); }
int rgetsockname(int, sockaddr*, socklen_t*) { return nosys("rgetsockname"); }
int rsetsockopt(int, int, int, const void*, socklen_t) { return nosys("rsetsockopt"); }
int rgetsockopt(int, int, int, void*, socklen_t*) { return nosys("rgetsockopt"); }
int rfcntl(int, int, ...) { return nosys("rfcntl"); }
off_t riomap(int, void*, size_t, int, int, off_t) { return nosys("riomap"); }
int riounmap(int, void*, size_t) { return nosys("riounmap"); }
size_t riowrite(int, const void*, size_t, off_t, int) {
  nosys("riowrite");
  return 0;  // size_t: nothing written
}

int rdma_set_local_ece(rdma_cm_id* id, ibv_ece*) {
  return fail("rdma_set_local_ece", id ? EOPNOTSUPP : EINVAL, "ECE");
}
int rdma_get_remote_ece(rdma_cm_id* id, ibv_ece*) {
  return fail("rdma_get_remote_ece", id ? EOPNOTSUPP : EINVAL, "ECE");
}
int rdma_reject_ece(rdma_cm_id* id, const void* private_data, uint8_t len) {
  return rdma_reject(id, private_data, len);
}

}  // extern "C"
