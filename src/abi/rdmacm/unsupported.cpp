// What librdmacm.so.1 exports and we do not implement: each fails cleanly
// and reads none of its arguments. ECE (rdma-core 44's
// Enhanced Connection Establishment): EOPNOTSUPP, as librdmacm on a device
// without ECE; rdma_reject_ece is rdma_reject.
#include "abi/rdmacm/objects.hpp"

using namespace openib::rdmacm;

extern "C" {

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
