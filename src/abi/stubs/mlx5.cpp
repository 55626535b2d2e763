// Stub libmlx5.so.1 (docs/library.md "Verbs ABI"). Debian's perftest binaries
// are linked against rdma-core's mlx5 provider library for its direct verbs
// (mlx5dv_*); with LD_LIBRARY_PATH on our build they load this one instead. It
// exports every symbol Debian's rdma-core 44 exports, with its versions
// (MLX5_1.0 to 1.24, libmlx5.map), and answers as rdma-core does for a device
// that is not an mlx5: NULL with errno EOPNOTSUPP, EOPNOTSUPP, false, nothing.
// No argument is ever read. The signatures are the installed header's: a
// definition that differed from its extern "C" declaration would not compile.
#include <infiniband/mlx5dv.h>

#include <cerrno>

#include "abi/stubs/no_device.hpp"

using openib::abi::no_device;
using openib::abi::no_device_minus_one;

extern "C" {
// MLX5_1.0
int mlx5dv_query_device(ibv_context*, mlx5dv_context*) { return EOPNOTSUPP; }

// MLX5_1.1
ibv_cq_ex* mlx5dv_create_cq(ibv_context*, ibv_cq_init_attr_ex*, mlx5dv_cq_init_attr*) { return no_device(); }

// MLX5_1.2
// mlx5dv_init_obj is exported twice, as Debian's: @@MLX5_1.2, the default, and
// @MLX5_1.0 for binaries linked against ABI 1.0. Both versions are named here
// (libmlx5.map lists it in both nodes); "remove" drops the unversioned name.
int mlx5dv_init_obj(mlx5dv_obj*, uint64_t) { return EOPNOTSUPP; }
__asm__(".symver mlx5dv_init_obj, mlx5dv_init_obj@@MLX5_1.2, remove");
int mlx5dv_init_obj_1_0(mlx5dv_obj*, uint64_t) { return EOPNOTSUPP; }
__asm__(".symver mlx5dv_init_obj_1_0, mlx5dv_init_obj@MLX5_1.0");
int mlx5dv_set_context_attr(ibv_context*, mlx5dv_set_ctx_attr_type, void*) { return EOPNOTSUPP; }

// MLX5_1.3
ibv_qp* mlx5dv_create_qp(ibv_context*, ibv_qp_init_attr_ex*, mlx5dv_qp_init_attr*) { return no_device(); }
ibv_wq* mlx5dv_create_wq(ibv_context*, ibv_wq_init_attr*, mlx5dv_wq_init_attr*) { return no_device(); }

// MLX5_1.4
int mlx5dv_get_clock_info(ibv_context*, mlx5dv_clock_info*) { return EOPNOTSUPP; }

// MLX5_1.5
ibv_flow_action* mlx5dv_create_flow_action_esp(ibv_context*, ibv_flow_action_esp_attr*,
                                               mlx5dv_flow_action_esp*) {
  return no_device();
}

// MLX5_1.6
ibv_flow* mlx5dv_create_flow(mlx5dv_flow_matcher*, mlx5dv_flow_match_parameters*, size_t,
                             mlx5dv_flow_action_attr*) {
  return no_device();
}
mlx5dv_flow_matcher* mlx5dv_create_flow_matcher(ibv_context*, mlx5dv_flow_matcher_attr*) {
  return no_device();
}
int mlx5dv_destroy_flow_matcher(mlx5dv_flow_matcher*) { return EOPNOTSUPP; }

// MLX5_1.7
ibv_flow_action* mlx5dv_create_flow_action_modify_header(ibv_context*, size_t, uint64_t*,
                                                         mlx5dv_flow_table_type) {
  return no_device();
}
ibv_flow_action* mlx5dv_create_flow_action_packet_reformat(ibv_context*, size_t, void*,
                                                           mlx5dv_flow_action_packet_reformat_type,
                                                           mlx5dv_flow_table_type) {
  return no_device();
}
mlx5dv_devx_uar* mlx5dv_devx_alloc_uar(ibv_context*, uint32_t) { return no_device(); }
void mlx5dv_devx_free_uar(mlx5dv_devx_uar*) {}
int mlx5dv_devx_general_cmd(ibv_context*, const void*, size_t, void*, size_t) { return EOPNOTSUPP; }
mlx5dv_devx_obj* mlx5dv_devx_obj_create(ibv_context*, const void*, size_t, void*, size_t) {
  return no_device();
}
int mlx5dv_devx_obj_destroy(mlx5dv_devx_obj*) { return EOPNOTSUPP; }
int mlx5dv_devx_obj_modify(mlx5dv_devx_obj*, const void*, size_t, void*, size_t) { return EOPNOTSUPP; }
int mlx5dv_devx_obj_query(mlx5dv_devx_obj*, const void*, size_t, void*, size_t) { return EOPNOTSUPP; }
int mlx5dv_devx_query_eqn(ibv_context*, uint32_t, uint32_t*) { return EOPNOTSUPP; }
int mlx5dv_devx_umem_dereg(mlx5dv_devx_umem*) { return EOPNOTSUPP; }
mlx5dv_devx_umem* mlx5dv_devx_umem_reg(ibv_context*, void*, size_t, uint32_t) { return no_device(); }
ibv_context* mlx5dv_open_device(ibv_device*, mlx5dv_context_attr*) { return no_device(); }

// MLX5_1.8
int mlx5dv_devx_cq_modify(ibv_cq*, const void*, size_t, void*, size_t) { return EOPNOTSUPP; }
int mlx5dv_devx_cq_query(ibv_cq*, const void*, size_t, void*, size_t) { return EOPNOTSUPP; }
int mlx5dv_devx_ind_tbl_modify(ibv_rwq_ind_table*, const void*, size_t, void*, size_t) { return EOPNOTSUPP; }
int mlx5dv_devx_ind_tbl_query(ibv_rwq_ind_table*, const void*, size_t, void*, size_t) { return EOPNOTSUPP; }
int mlx5dv_devx_qp_modify(ibv_qp*, const void*, size_t, void*, size_t) { return EOPNOTSUPP; }
int mlx5dv_devx_qp_query(ibv_qp*, const void*, size_t, void*, size_t) { return EOPNOTSUPP; }
int mlx5dv_devx_srq_modify(ibv_srq*, const void*, size_t, void*, size_t) { return EOPNOTSUPP; }
int mlx5dv_devx_srq_query(ibv_srq*, const void*, size_t, void*, size_t) { return EOPNOTSUPP; }
int mlx5dv_devx_wq_modify(ibv_wq*, const void*, size_t, void*, size_t) { return EOPNOTSUPP; }
int mlx5dv_devx_wq_query(ibv_wq*, const void*, size_t, void*, size_t) { return EOPNOTSUPP; }
// Whether a device is an mlx5: none is.
bool mlx5dv_is_supported(ibv_device*) { return false; }

// MLX5_1.9
mlx5dv_devx_cmd_comp* mlx5dv_devx_create_cmd_comp(ibv_context*) { return no_device(); }
void mlx5dv_devx_destroy_cmd_comp(mlx5dv_devx_cmd_comp*) {}
int mlx5dv_devx_get_async_cmd_comp(mlx5dv_devx_cmd_comp*, mlx5dv_devx_async_cmd_hdr*, size_t) {
  return EOPNOTSUPP;
}
int mlx5dv_devx_obj_query_async(mlx5dv_devx_obj*, const void*, size_t, size_t, uint64_t,
                                mlx5dv_devx_cmd_comp*) {
  return EOPNOTSUPP;
}

// MLX5_1.10
ibv_dm* mlx5dv_alloc_dm(ibv_context*, ibv_alloc_dm_attr*, mlx5dv_alloc_dm_attr*) { return no_device(); }
mlx5dv_mkey* mlx5dv_create_mkey(mlx5dv_mkey_init_attr*) { return no_device(); }
int mlx5dv_destroy_mkey(mlx5dv_mkey*) { return EOPNOTSUPP; }
mlx5dv_dr_action* mlx5dv_dr_action_create_dest_ibv_qp(ibv_qp*) { return no_device(); }
mlx5dv_dr_action* mlx5dv_dr_action_create_dest_table(mlx5dv_dr_table*) { return no_device(); }
mlx5dv_dr_action* mlx5dv_dr_action_create_dest_vport(mlx5dv_dr_domain*, uint32_t) { return no_device(); }
mlx5dv_dr_action* mlx5dv_dr_action_create_drop() { return no_device(); }
mlx5dv_dr_action* mlx5dv_dr_action_create_flow_counter(mlx5dv_devx_obj*, uint32_t) { return no_device(); }
mlx5dv_dr_action* mlx5dv_dr_action_create_modify_header(mlx5dv_dr_domain*, uint32_t, size_t, __be64*) {
  return no_device();
}
mlx5dv_dr_action* mlx5dv_dr_action_create_packet_reformat(mlx5dv_dr_domain*, uint32_t,
                                                          mlx5dv_flow_action_packet_reformat_type, size_t,
                                                          void*) {
  return no_device();
}
mlx5dv_dr_action* mlx5dv_dr_action_create_tag(uint32_t) { return no_device(); }
int mlx5dv_dr_action_destroy(mlx5dv_dr_action*) { return EOPNOTSUPP; }
mlx5dv_dr_domain* mlx5dv_dr_domain_create(ibv_context*, mlx5dv_dr_domain_type) { return no_device(); }
int mlx5dv_dr_domain_destroy(mlx5dv_dr_domain*) { return EOPNOTSUPP; }
int mlx5dv_dr_domain_sync(mlx5dv_dr_domain*, uint32_t) { return EOPNOTSUPP; }
mlx5dv_dr_matcher* mlx5dv_dr_matcher_create(mlx5dv_dr_table*, uint16_t, uint8_t,
                                            mlx5dv_flow_match_parameters*) {
  return no_device();
}
int mlx5dv_dr_matcher_destroy(mlx5dv_dr_matcher*) { return EOPNOTSUPP; }
mlx5dv_dr_rule* mlx5dv_dr_rule_create(mlx5dv_dr_matcher*, mlx5dv_flow_match_parameters*, size_t,
                                      mlx5dv_dr_action**) {
  return no_device();
}
int mlx5dv_dr_rule_destroy(mlx5dv_dr_rule*) { return EOPNOTSUPP; }
mlx5dv_dr_table* mlx5dv_dr_table_create(mlx5dv_dr_domain*, uint32_t) { return no_device(); }
int mlx5dv_dr_table_destroy(mlx5dv_dr_table*) { return EOPNOTSUPP; }
mlx5dv_qp_ex* mlx5dv_qp_ex_from_ibv_qp_ex(ibv_qp_ex*) { return no_device(); }

// MLX5_1.11
mlx5dv_devx_event_channel* mlx5dv_devx_create_event_channel(ibv_context*,
                                                            mlx5dv_devx_create_event_channel_flags) {
  return no_device();
}
void mlx5dv_devx_destroy_event_channel(mlx5dv_devx_event_channel*) {}
// A byte count: -1 and errno (mlx5dv_devx_get_event(3)).
ssize_t mlx5dv_devx_get_event(mlx5dv_devx_event_channel*, mlx5dv_devx_async_event_hdr*, size_t) {
  return no_device_minus_one();
}
int mlx5dv_devx_subscribe_devx_event(mlx5dv_devx_event_channel*, mlx5dv_devx_obj*, uint16_t, uint16_t*,
                                     uint64_t) {
  return EOPNOTSUPP;
}
int mlx5dv_devx_subscribe_devx_event_fd(mlx5dv_devx_event_channel*, int, mlx5dv_devx_obj*, uint16_t) {
  return EOPNOTSUPP;
}

// MLX5_1.12
mlx5dv_var* mlx5dv_alloc_var(ibv_context*, uint32_t) { return no_device(); }
mlx5dv_dr_action* mlx5dv_dr_action_create_flow_meter(mlx5dv_dr_flow_meter_attr*) { return no_device(); }
int mlx5dv_dr_action_modify_flow_meter(mlx5dv_dr_action*, mlx5dv_dr_flow_meter_attr*, __be64) {
  return EOPNOTSUPP;
}
// The dumps fail with -errno, as rdma-core's dr_dbg.c does.
int mlx5dv_dump_dr_domain(FILE*, mlx5dv_dr_domain*) { return -EOPNOTSUPP; }
int mlx5dv_dump_dr_matcher(FILE*, mlx5dv_dr_matcher*) { return -EOPNOTSUPP; }
int mlx5dv_dump_dr_rule(FILE*, mlx5dv_dr_rule*) { return -EOPNOTSUPP; }
int mlx5dv_dump_dr_table(FILE*, mlx5dv_dr_table*) { return -EOPNOTSUPP; }
void mlx5dv_free_var(mlx5dv_var*) {}

// MLX5_1.13
mlx5dv_pp* mlx5dv_pp_alloc(ibv_context*, size_t, const void*, uint32_t) { return no_device(); }
void mlx5dv_pp_free(mlx5dv_pp*) {}

// MLX5_1.14
mlx5dv_dr_action* mlx5dv_dr_action_create_default_miss() { return no_device(); }
void mlx5dv_dr_domain_set_reclaim_device_memory(mlx5dv_dr_domain*, bool) {}
int mlx5dv_modify_qp_lag_port(ibv_qp*, uint8_t) { return EOPNOTSUPP; }
int mlx5dv_query_qp_lag_port(ibv_qp*, uint8_t*, uint8_t*) { return EOPNOTSUPP; }

// MLX5_1.15
mlx5dv_dr_action* mlx5dv_dr_action_create_dest_devx_tir(mlx5dv_devx_obj*) { return no_device(); }

// MLX5_1.16
mlx5dv_dr_action* mlx5dv_dr_action_create_dest_array(mlx5dv_dr_domain*, size_t,
                                                     mlx5dv_dr_action_dest_attr**) {
  return no_device();
}
mlx5dv_dr_action* mlx5dv_dr_action_create_flow_sampler(mlx5dv_dr_flow_sampler_attr*) { return no_device(); }

// MLX5_1.17
mlx5dv_dr_action* mlx5dv_dr_action_create_aso(mlx5dv_dr_domain*, mlx5dv_devx_obj*, uint32_t, uint32_t,
                                              uint8_t) {
  return no_device();
}
mlx5dv_dr_action* mlx5dv_dr_action_create_pop_vlan() { return no_device(); }
mlx5dv_dr_action* mlx5dv_dr_action_create_push_vlan(mlx5dv_dr_domain*, __be32) { return no_device(); }
int mlx5dv_dr_action_modify_aso(mlx5dv_dr_action*, uint32_t, uint32_t, uint8_t) { return EOPNOTSUPP; }
int mlx5dv_modify_qp_sched_elem(ibv_qp*, const mlx5dv_sched_leaf*, const mlx5dv_sched_leaf*) {
  return EOPNOTSUPP;
}
int mlx5dv_modify_qp_udp_sport(ibv_qp*, uint16_t) { return EOPNOTSUPP; }
mlx5dv_sched_leaf* mlx5dv_sched_leaf_create(ibv_context*, const mlx5dv_sched_attr*) { return no_device(); }
int mlx5dv_sched_leaf_destroy(mlx5dv_sched_leaf*) { return EOPNOTSUPP; }
int mlx5dv_sched_leaf_modify(mlx5dv_sched_leaf*, const mlx5dv_sched_attr*) { return EOPNOTSUPP; }
mlx5dv_sched_node* mlx5dv_sched_node_create(ibv_context*, const mlx5dv_sched_attr*) { return no_device(); }
int mlx5dv_sched_node_destroy(mlx5dv_sched_node*) { return EOPNOTSUPP; }
int mlx5dv_sched_node_modify(mlx5dv_sched_node*, const mlx5dv_sched_attr*) { return EOPNOTSUPP; }

// MLX5_1.18
int mlx5dv_reserved_qpn_alloc(ibv_context*, uint32_t*) { return EOPNOTSUPP; }
int mlx5dv_reserved_qpn_dealloc(ibv_context*, uint32_t) { return EOPNOTSUPP; }

// MLX5_1.19
int _mlx5dv_query_port(ibv_context*, uint32_t, mlx5dv_port*, size_t) { return EOPNOTSUPP; }
mlx5dv_devx_umem* mlx5dv_devx_umem_reg_ex(ibv_context*, mlx5dv_devx_umem_in*) { return no_device(); }
void* mlx5dv_dm_map_op_addr(ibv_dm*, uint8_t) { return no_device(); }

// MLX5_1.20
int _mlx5dv_mkey_check(mlx5dv_mkey*, mlx5dv_mkey_err*, size_t) { return EOPNOTSUPP; }
void mlx5dv_dr_domain_allow_duplicate_rules(mlx5dv_dr_domain*, bool) {}
int mlx5dv_map_ah_to_qp(ibv_ah*, uint32_t) { return EOPNOTSUPP; }
// A count of canceled work requests, or -errno (mlx5dv_qp_cancel_posted_send_wrs(3)).
int mlx5dv_qp_cancel_posted_send_wrs(mlx5dv_qp_ex*, uint64_t) { return -EOPNOTSUPP; }

// MLX5_1.21
int mlx5dv_crypto_login(ibv_context*, mlx5dv_crypto_login_attr*) { return EOPNOTSUPP; }
int mlx5dv_crypto_login_query_state(ibv_context*, mlx5dv_crypto_login_state*) { return EOPNOTSUPP; }
int mlx5dv_crypto_logout(ibv_context*) { return EOPNOTSUPP; }
int mlx5dv_dci_stream_id_reset(ibv_qp*, uint16_t) { return EOPNOTSUPP; }
mlx5dv_dek* mlx5dv_dek_create(ibv_context*, mlx5dv_dek_init_attr*) { return no_device(); }
int mlx5dv_dek_destroy(mlx5dv_dek*) { return EOPNOTSUPP; }
int mlx5dv_dek_query(mlx5dv_dek*, mlx5dv_dek_attr*) { return EOPNOTSUPP; }
mlx5dv_dr_action* mlx5dv_dr_action_create_dest_ib_port(mlx5dv_dr_domain*, uint32_t) { return no_device(); }
int mlx5dv_dr_matcher_set_layout(mlx5dv_dr_matcher*, mlx5dv_dr_matcher_layout*) { return EOPNOTSUPP; }
ibv_device** mlx5dv_get_vfio_device_list(mlx5dv_vfio_context_attr*) { return no_device(); }
// A descriptor: -1 and errno, never a number that could be an fd.
int mlx5dv_vfio_get_events_fd(ibv_context*) { return no_device_minus_one(); }
int mlx5dv_vfio_process_events(ibv_context*) { return EOPNOTSUPP; }

// MLX5_1.22
int mlx5dv_dr_aso_other_domain_link(mlx5dv_devx_obj*, mlx5dv_dr_domain*, mlx5dv_dr_domain*, uint32_t,
                                    uint8_t) {
  return EOPNOTSUPP;
}
int mlx5dv_dr_aso_other_domain_unlink(mlx5dv_devx_obj*, mlx5dv_dr_domain*) { return EOPNOTSUPP; }

// MLX5_1.23
mlx5dv_devx_msi_vector* mlx5dv_devx_alloc_msi_vector(ibv_context*) { return no_device(); }
mlx5dv_devx_eq* mlx5dv_devx_create_eq(ibv_context*, const void*, size_t, void*, size_t) {
  return no_device();
}
int mlx5dv_devx_destroy_eq(mlx5dv_devx_eq*) { return EOPNOTSUPP; }
int mlx5dv_devx_free_msi_vector(mlx5dv_devx_msi_vector*) { return EOPNOTSUPP; }

// MLX5_1.24
mlx5dv_steering_anchor* mlx5dv_create_steering_anchor(ibv_context*, mlx5dv_steering_anchor_attr*) {
  return no_device();
}
mlx5dv_crypto_login_obj* mlx5dv_crypto_login_create(ibv_context*, mlx5dv_crypto_login_attr_ex*) {
  return no_device();
}
int mlx5dv_crypto_login_destroy(mlx5dv_crypto_login_obj*) { return EOPNOTSUPP; }
int mlx5dv_crypto_login_query(mlx5dv_crypto_login_obj*, mlx5dv_crypto_login_query_attr*) {
  return EOPNOTSUPP;
}
int mlx5dv_destroy_steering_anchor(mlx5dv_steering_anchor*) { return EOPNOTSUPP; }
mlx5dv_dr_action* mlx5dv_dr_action_create_dest_root_table(mlx5dv_dr_table*, uint16_t) { return no_device(); }

}  // extern "C"
