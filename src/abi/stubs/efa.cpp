// Stub libefa.so.1 (docs/library.md "Verbs ABI"). Debian's perftest binaries
// are linked against rdma-core's EFA provider library for its direct verbs
// (efadv_*); with LD_LIBRARY_PATH on our build they load this one instead. It
// exports every symbol Debian's rdma-core 44 exports, with its versions
// (EFA_1.0 to 1.2, libefa.map), and answers as rdma-core does for a device
// that is not an EFA: NULL with errno EOPNOTSUPP, or EOPNOTSUPP. No argument
// is ever read. The signatures are the installed header's: a definition that
// differed from its extern "C" declaration would not compile.
#include <infiniband/efadv.h>

#include <cerrno>

#include "abi/stubs/no_device.hpp"

using openib::abi::no_device;

extern "C" {
// EFA_1.0
ibv_qp* efadv_create_driver_qp(ibv_pd*, ibv_qp_init_attr*, uint32_t) { return no_device(); }

// EFA_1.1
ibv_qp* efadv_create_qp_ex(ibv_context*, ibv_qp_init_attr_ex*, efadv_qp_init_attr*, uint32_t) {
  return no_device();
}
int efadv_query_ah(ibv_ah*, efadv_ah_attr*, uint32_t) { return EOPNOTSUPP; }
int efadv_query_device(ibv_context*, efadv_device_attr*, uint32_t) { return EOPNOTSUPP; }

// EFA_1.2
efadv_cq* efadv_cq_from_ibv_cq_ex(ibv_cq_ex*) { return no_device(); }
ibv_cq_ex* efadv_create_cq(ibv_context*, ibv_cq_init_attr_ex*, efadv_cq_init_attr*, uint32_t) {
  return no_device();
}

}  // extern "C"
