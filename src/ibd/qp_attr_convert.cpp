#include "ibd/qp_attr_convert.hpp"

namespace openib::ibd {

hca::AddressVector to_hca(const proto::Av& a) {
  hca::AddressVector v;
  v.dlid = a.dlid;
  v.sl = a.sl;
  v.src_path_bits = a.src_path_bits;
  v.static_rate = a.static_rate;
  v.port = a.port;
  v.grh = a.grh != 0;
  v.hop_limit = a.hop_limit;
  v.flow_label = a.flow_label;
  v.sgid_index = a.sgid_index;
  v.traffic_class = a.traffic_class;
  v.dgid = a.dgid;
  return v;
}

proto::Av to_proto(const hca::AddressVector& v) {
  proto::Av a;
  a.dlid = v.dlid;
  a.sl = v.sl;
  a.src_path_bits = v.src_path_bits;
  a.static_rate = v.static_rate;
  a.port = v.port;
  a.grh = v.grh ? 1 : 0;
  a.hop_limit = v.hop_limit;
  a.flow_label = v.flow_label;
  a.sgid_index = v.sgid_index;
  a.traffic_class = v.traffic_class;
  a.dgid = v.dgid;
  return a;
}

hca::QpAttr to_hca(const proto::QpAttr& a) {
  hca::QpAttr h;
  h.state = static_cast<hca::QpState>(a.state);
  h.cur_state = static_cast<hca::QpState>(a.cur_state);
  h.port = a.port;
  h.path_mtu = a.path_mtu;
  h.pkey_index = a.pkey_index;
  h.access = a.access;
  h.en_sqd_async_notify = a.en_sqd_async_notify != 0;
  h.qkey = a.qkey;
  h.dest_qpn = a.dest_qpn;
  h.rq_psn = a.rq_psn;
  h.sq_psn = a.sq_psn;
  h.timeout = a.timeout;
  h.retry_cnt = a.retry_cnt;
  h.rnr_retry = a.rnr_retry;
  h.min_rnr_timer = a.min_rnr_timer;
  h.max_rd_atomic = a.max_rd_atomic;
  h.max_dest_rd_atomic = a.max_dest_rd_atomic;
  h.av = to_hca(a.av);
  return h;
}

proto::QpAttr to_proto(const hca::QpAttr& h) {
  proto::QpAttr a;
  a.state = static_cast<uint8_t>(h.state);
  a.cur_state = static_cast<uint8_t>(h.cur_state);
  a.port = h.port;
  a.path_mtu = h.path_mtu;
  a.pkey_index = h.pkey_index;
  a.access = h.access;
  a.en_sqd_async_notify = h.en_sqd_async_notify ? 1 : 0;
  a.qkey = h.qkey;
  a.dest_qpn = h.dest_qpn;
  a.rq_psn = h.rq_psn;
  a.sq_psn = h.sq_psn;
  a.timeout = h.timeout;
  a.retry_cnt = h.retry_cnt;
  a.rnr_retry = h.rnr_retry;
  a.min_rnr_timer = h.min_rnr_timer;
  a.max_rd_atomic = h.max_rd_atomic;
  a.max_dest_rd_atomic = h.max_dest_rd_atomic;
  a.av = to_proto(h.av);
  return a;
}

}  // namespace openib::ibd
