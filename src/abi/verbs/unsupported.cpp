// The exports of libibverbs.so.1 that ibd's devices do not have (docs/library.md
// "Verbs ABI", the table of what fails and how). Each fails as a provider
// without the feature fails: NULL with errno EOPNOTSUPP, or EOPNOTSUPP
// returned; never a crash.
//  - Provider-internal entry points (IBVERBS_PRIVATE_34: ibv_cmd_*, the
//    ioctl and context helpers): only providers call them, and this
//    library loads none.
//  - Importing objects from another process's uverbs fd (IBVERBS_1.10,
//    1.13), dma-buf MRs (1.12), ECE (1.10), multicast attach without the
//    RDMA CM, MR re-registration, the RoCE L2 resolver.
//  - The compat twins of IBVERBS_1.0 (rdma-core's pre-2006 ABI with other
//    struct layouts, reached only by binaries linked before libibverbs
//    1.1): ENOSYS.
#include <cstdarg>

#include "abi/verbs/objects.hpp"

using namespace openib::verbs;

namespace {
template <class T = void> T* null_eopnotsupp(const char* verb) {
  return fail_null<T>(verb, openib::err(EOPNOTSUPP, "not supported by ibd's devices"));
}
}  // namespace

extern "C" {

// ---- IBVERBS_1.1 and later: features these devices lack -------------------------

int ibv_attach_mcast(ibv_qp* qp, const ibv_gid*, uint16_t) { return qp ? EOPNOTSUPP : EINVAL; }
OPENIB_VERBS_1_1(ibv_attach_mcast);
int ibv_detach_mcast(ibv_qp* qp, const ibv_gid*, uint16_t) { return qp ? EOPNOTSUPP : EINVAL; }
OPENIB_VERBS_1_1(ibv_detach_mcast);
int ibv_rereg_mr(ibv_mr* mr, int, ibv_pd*, void*, size_t, int) { return mr ? EOPNOTSUPP : EINVAL; }
int ibv_resolve_eth_l2_from_gid(ibv_context*, ibv_ah_attr*, uint8_t[6], uint16_t*) { return EOPNOTSUPP; }
ibv_qp_ex* ibv_qp_to_qp_ex(ibv_qp*) { return null_eopnotsupp<ibv_qp_ex>("ibv_qp_to_qp_ex"); }
ibv_context* ibv_import_device(int) { return null_eopnotsupp<ibv_context>("ibv_import_device"); }
ibv_pd* ibv_import_pd(ibv_context*, uint32_t) { return null_eopnotsupp<ibv_pd>("ibv_import_pd"); }
ibv_mr* ibv_import_mr(ibv_pd*, uint32_t) { return null_eopnotsupp<ibv_mr>("ibv_import_mr"); }
ibv_dm* ibv_import_dm(ibv_context*, uint32_t) { return null_eopnotsupp<ibv_dm>("ibv_import_dm"); }
void ibv_unimport_pd(ibv_pd*) {}
void ibv_unimport_mr(ibv_mr*) {}
void ibv_unimport_dm(ibv_dm*) {}
int ibv_query_ece(ibv_qp*, ibv_ece*) { return EOPNOTSUPP; }
int ibv_set_ece(ibv_qp*, ibv_ece*) { return EOPNOTSUPP; }
ibv_mr* ibv_reg_dmabuf_mr(ibv_pd*, uint64_t, size_t, uint64_t, int, int) {
  return null_eopnotsupp<ibv_mr>("ibv_reg_dmabuf_mr");
}

// ibv_register_driver@IBVERBS_1.1 (not the default version): providers of
// libibverbs 1.1 registered themselves with it. Nothing is loaded here.
void ibv_register_driver_1_1(const char*, void*) __asm__("ibv_register_driver_1_1");
void ibv_register_driver_1_1(const char*, void*) {}
__asm__(".symver ibv_register_driver_1_1, ibv_register_driver@IBVERBS_1.1");

// ---- IBVERBS_PRIVATE_34: the provider interface --------------------------------

#define OPENIB_PROVIDER_CMD(name) \
  int name(...) { return EOPNOTSUPP; }

OPENIB_PROVIDER_CMD(ibv_cmd_advise_mr)
OPENIB_PROVIDER_CMD(ibv_cmd_alloc_dm)
OPENIB_PROVIDER_CMD(ibv_cmd_alloc_mw)
OPENIB_PROVIDER_CMD(ibv_cmd_alloc_pd)
OPENIB_PROVIDER_CMD(ibv_cmd_attach_mcast)
OPENIB_PROVIDER_CMD(ibv_cmd_close_xrcd)
OPENIB_PROVIDER_CMD(ibv_cmd_create_ah)
OPENIB_PROVIDER_CMD(ibv_cmd_create_counters)
OPENIB_PROVIDER_CMD(ibv_cmd_create_cq)
OPENIB_PROVIDER_CMD(ibv_cmd_create_cq_ex)
OPENIB_PROVIDER_CMD(ibv_cmd_create_flow)
OPENIB_PROVIDER_CMD(ibv_cmd_create_flow_action_esp)
OPENIB_PROVIDER_CMD(ibv_cmd_create_qp)
OPENIB_PROVIDER_CMD(ibv_cmd_create_qp_ex)
OPENIB_PROVIDER_CMD(ibv_cmd_create_qp_ex2)
OPENIB_PROVIDER_CMD(ibv_cmd_create_rwq_ind_table)
OPENIB_PROVIDER_CMD(ibv_cmd_create_srq)
OPENIB_PROVIDER_CMD(ibv_cmd_create_srq_ex)
OPENIB_PROVIDER_CMD(ibv_cmd_create_wq)
OPENIB_PROVIDER_CMD(ibv_cmd_dealloc_mw)
OPENIB_PROVIDER_CMD(ibv_cmd_dealloc_pd)
OPENIB_PROVIDER_CMD(ibv_cmd_dereg_mr)
OPENIB_PROVIDER_CMD(ibv_cmd_destroy_ah)
OPENIB_PROVIDER_CMD(ibv_cmd_destroy_counters)
OPENIB_PROVIDER_CMD(ibv_cmd_destroy_cq)
OPENIB_PROVIDER_CMD(ibv_cmd_destroy_flow)
OPENIB_PROVIDER_CMD(ibv_cmd_destroy_flow_action)
OPENIB_PROVIDER_CMD(ibv_cmd_destroy_qp)
OPENIB_PROVIDER_CMD(ibv_cmd_destroy_rwq_ind_table)
OPENIB_PROVIDER_CMD(ibv_cmd_destroy_srq)
OPENIB_PROVIDER_CMD(ibv_cmd_destroy_wq)
OPENIB_PROVIDER_CMD(ibv_cmd_detach_mcast)
OPENIB_PROVIDER_CMD(ibv_cmd_free_dm)
OPENIB_PROVIDER_CMD(ibv_cmd_get_context)
OPENIB_PROVIDER_CMD(ibv_cmd_modify_cq)
OPENIB_PROVIDER_CMD(ibv_cmd_modify_flow_action_esp)
OPENIB_PROVIDER_CMD(ibv_cmd_modify_qp)
OPENIB_PROVIDER_CMD(ibv_cmd_modify_qp_ex)
OPENIB_PROVIDER_CMD(ibv_cmd_modify_srq)
OPENIB_PROVIDER_CMD(ibv_cmd_modify_wq)
OPENIB_PROVIDER_CMD(ibv_cmd_open_qp)
OPENIB_PROVIDER_CMD(ibv_cmd_open_xrcd)
OPENIB_PROVIDER_CMD(ibv_cmd_poll_cq)
OPENIB_PROVIDER_CMD(ibv_cmd_post_recv)
OPENIB_PROVIDER_CMD(ibv_cmd_post_send)
OPENIB_PROVIDER_CMD(ibv_cmd_post_srq_recv)
OPENIB_PROVIDER_CMD(ibv_cmd_query_context)
OPENIB_PROVIDER_CMD(ibv_cmd_query_device_any)
OPENIB_PROVIDER_CMD(ibv_cmd_query_mr)
OPENIB_PROVIDER_CMD(ibv_cmd_query_port)
OPENIB_PROVIDER_CMD(ibv_cmd_query_qp)
OPENIB_PROVIDER_CMD(ibv_cmd_query_srq)
OPENIB_PROVIDER_CMD(ibv_cmd_read_counters)
OPENIB_PROVIDER_CMD(ibv_cmd_reg_dm_mr)
OPENIB_PROVIDER_CMD(ibv_cmd_reg_dmabuf_mr)
OPENIB_PROVIDER_CMD(ibv_cmd_reg_mr)
OPENIB_PROVIDER_CMD(ibv_cmd_req_notify_cq)
OPENIB_PROVIDER_CMD(ibv_cmd_rereg_mr)
OPENIB_PROVIDER_CMD(ibv_cmd_resize_cq)
#undef OPENIB_PROVIDER_CMD

int execute_ioctl(...) { return EOPNOTSUPP; }
unsigned int __ioctl_final_num_attrs(unsigned int num_attrs, ...) { return num_attrs; }
void __verbs_log(void*, const char*, ...) {}
void* _verbs_init_and_alloc_context(...) { return null_eopnotsupp("_verbs_init_and_alloc_context"); }
void* verbs_open_device(...) { return null_eopnotsupp("verbs_open_device"); }
void verbs_register_driver_34(const void*) {}
void verbs_init_cq(...) {}
void verbs_set_ops(...) {}
void verbs_uninit_context(...) {}
int ibv_read_ibdev_sysfs_file(char*, size_t, void*, const char*, ...) {
  errno = ENOSYS;
  return -1;
}
bool verbs_allow_disassociate_destroy = false;

// ---- IBVERBS_1.0: the compat twins -----------------------------------------------
// Each NAME@IBVERBS_1.0 is a function named NAME_1_0 here, versioned by .symver.

#define OPENIB_COMPAT_1_0(type, name, value) \
  type name##_1_0(...) __asm__(#name "_1_0"); \
  type name##_1_0(...) {                       \
    errno = ENOSYS;                            \
    return value;                              \
  }                                            \
  __asm__(".symver " #name "_1_0, " #name "@IBVERBS_1.0");
#define OPENIB_COMPAT_1_0_VOID(name)          \
  void name##_1_0(...) __asm__(#name "_1_0"); \
  void name##_1_0(...) {}                     \
  __asm__(".symver " #name "_1_0, " #name "@IBVERBS_1.0");

OPENIB_COMPAT_1_0(void*, ibv_alloc_pd, nullptr)
OPENIB_COMPAT_1_0(void*, ibv_create_ah, nullptr)
OPENIB_COMPAT_1_0(void*, ibv_create_cq, nullptr)
OPENIB_COMPAT_1_0(void*, ibv_create_qp, nullptr)
OPENIB_COMPAT_1_0(void*, ibv_create_srq, nullptr)
OPENIB_COMPAT_1_0(void*, ibv_get_device_list, nullptr)
OPENIB_COMPAT_1_0(void*, ibv_get_device_name, nullptr)
OPENIB_COMPAT_1_0(void*, ibv_open_device, nullptr)
OPENIB_COMPAT_1_0(void*, ibv_reg_mr, nullptr)
OPENIB_COMPAT_1_0(int, ibv_attach_mcast, ENOSYS)
OPENIB_COMPAT_1_0(int, ibv_close_device, ENOSYS)
OPENIB_COMPAT_1_0(int, ibv_dealloc_pd, ENOSYS)
OPENIB_COMPAT_1_0(int, ibv_dereg_mr, ENOSYS)
OPENIB_COMPAT_1_0(int, ibv_destroy_ah, ENOSYS)
OPENIB_COMPAT_1_0(int, ibv_destroy_cq, ENOSYS)
OPENIB_COMPAT_1_0(int, ibv_destroy_qp, ENOSYS)
OPENIB_COMPAT_1_0(int, ibv_destroy_srq, ENOSYS)
OPENIB_COMPAT_1_0(int, ibv_detach_mcast, ENOSYS)
OPENIB_COMPAT_1_0(int, ibv_get_async_event, ENOSYS)
OPENIB_COMPAT_1_0(int, ibv_get_cq_event, ENOSYS)
OPENIB_COMPAT_1_0(int, ibv_modify_qp, ENOSYS)
OPENIB_COMPAT_1_0(int, ibv_modify_srq, ENOSYS)
OPENIB_COMPAT_1_0(int, ibv_query_device, ENOSYS)
OPENIB_COMPAT_1_0(int, ibv_query_gid, ENOSYS)
OPENIB_COMPAT_1_0(int, ibv_query_pkey, ENOSYS)
OPENIB_COMPAT_1_0(int, ibv_query_port, ENOSYS)
OPENIB_COMPAT_1_0(int, ibv_query_qp, ENOSYS)
OPENIB_COMPAT_1_0(int, ibv_query_srq, ENOSYS)
OPENIB_COMPAT_1_0(int, ibv_resize_cq, ENOSYS)
OPENIB_COMPAT_1_0(uint64_t, ibv_get_device_guid, 0)
OPENIB_COMPAT_1_0_VOID(ibv_ack_async_event)
OPENIB_COMPAT_1_0_VOID(ibv_ack_cq_events)
OPENIB_COMPAT_1_0_VOID(ibv_free_device_list)
#undef OPENIB_COMPAT_1_0
#undef OPENIB_COMPAT_1_0_VOID

}  // extern "C"
