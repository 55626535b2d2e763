// rdma-core's address vector, QP attributes and QP types against
// libopenib's (IBA 11.2.4: the fields are the spec's; libopenib's enums
// keep libibverbs' values except the QP type).
#include <cstring>

#include "abi/verbs/objects.hpp"

namespace openib::verbs {

openib::AddressVector to_av(const ibv_ah_attr& a) {
  openib::AddressVector av;
  av.dlid = a.dlid;
  av.sl = a.sl;
  av.src_path_bits = a.src_path_bits;
  av.static_rate = a.static_rate;
  av.port = a.port_num;
  av.grh = a.is_global != 0;
  if (av.grh) {
    std::memcpy(av.dgid.raw.data(), a.grh.dgid.raw, 16);
    av.flow_label = a.grh.flow_label;
    av.sgid_index = a.grh.sgid_index;
    av.hop_limit = a.grh.hop_limit;
    av.traffic_class = a.grh.traffic_class;
  }
  return av;
}

ibv_ah_attr from_av(const openib::AddressVector& av) {
  ibv_ah_attr a{};
  a.dlid = av.dlid;
  a.sl = av.sl;
  a.src_path_bits = av.src_path_bits;
  a.static_rate = av.static_rate;
  a.port_num = av.port;
  a.is_global = av.grh;
  if (av.grh) {
    std::memcpy(a.grh.dgid.raw, av.dgid.raw.data(), 16);
    a.grh.flow_label = av.flow_label;
    a.grh.sgid_index = av.sgid_index;
    a.grh.hop_limit = av.hop_limit;
    a.grh.traffic_class = av.traffic_class;
  }
  return a;
}

openib::QpAttr to_qp_attr(const ibv_qp_attr& a) {
  openib::QpAttr q;
  q.state = openib::QpState(a.qp_state);
  q.cur_state = openib::QpState(a.cur_qp_state);
  q.path_mtu = openib::Mtu(a.path_mtu);
  q.qkey = a.qkey;
  q.rq_psn = a.rq_psn;
  q.sq_psn = a.sq_psn;
  q.dest_qpn = a.dest_qp_num;
  q.access = a.qp_access_flags;
  q.av = to_av(a.ah_attr);
  q.pkey_index = a.pkey_index;
  q.port = a.port_num;
  q.timeout = a.timeout;
  q.retry_cnt = a.retry_cnt;
  q.rnr_retry = a.rnr_retry;
  q.min_rnr_timer = a.min_rnr_timer;
  q.max_rd_atomic = a.max_rd_atomic;
  q.max_dest_rd_atomic = a.max_dest_rd_atomic;
  q.en_sqd_async_notify = a.en_sqd_async_notify != 0;
  return q;
}

void from_qp_attr(const openib::QpAttr& q, ibv_qp_attr& a) {
  a.qp_state = ibv_qp_state(q.state);
  a.cur_qp_state = ibv_qp_state(q.cur_state);
  a.path_mtu = ibv_mtu(q.path_mtu);
  a.qkey = q.qkey;
  a.rq_psn = q.rq_psn;
  a.sq_psn = q.sq_psn;
  a.dest_qp_num = q.dest_qpn;
  a.qp_access_flags = q.access;
  a.ah_attr = from_av(q.av);
  a.pkey_index = q.pkey_index;
  a.port_num = q.port;
  a.timeout = q.timeout;
  a.retry_cnt = q.retry_cnt;
  a.rnr_retry = q.rnr_retry;
  a.min_rnr_timer = q.min_rnr_timer;
  a.max_rd_atomic = q.max_rd_atomic;
  a.max_dest_rd_atomic = q.max_dest_rd_atomic;
  a.sq_draining = q.en_sqd_async_notify;
}

int to_qp_type(ibv_qp_type t, openib::QpType& out) {
  switch (t) {
    case IBV_QPT_RC: out = openib::QpType::kRc; return 0;
    case IBV_QPT_UC: out = openib::QpType::kUc; return 0;
    case IBV_QPT_UD: out = openib::QpType::kUd; return 0;
    default: return EOPNOTSUPP;  // raw packet, XRC, driver QPs: not on this device
  }
}

ibv_qp_type from_qp_type(openib::QpType t) {
  switch (t) {
    case openib::QpType::kRc: return IBV_QPT_RC;
    case openib::QpType::kUc: return IBV_QPT_UC;
    case openib::QpType::kUd: return IBV_QPT_UD;
  }
  return IBV_QPT_RC;
}

}  // namespace openib::verbs
