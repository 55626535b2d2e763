// Between the client protocol's QP attributes and address vectors
// (clientproto/messages.hpp, docs/client-protocol.md) and the driver's
// (hca/verbs.hpp, docs/simhca.md §7.6, §7.7): the wire <-> daemon
// boundary's one converter, walking clientproto's one field list
// (proto::av_fields, proto::qp_attr_fields), nothing checked here.
// MODIFY_QP, QUERY_QP and CREATE_AH use them, and the CM service's
// CM_INIT_QP_ATTR.
#pragma once

#include "clientproto/messages.hpp"
#include "hca/verbs.hpp"

namespace openib::ibd {

hca::AddressVector to_hca(const proto::Av& a);
proto::Av to_proto(const hca::AddressVector& v);
// The mask is not part of hca::QpAttr: the result's mask is 0.
hca::QpAttr to_hca(const proto::QpAttr& a);
proto::QpAttr to_proto(const hca::QpAttr& h);

}  // namespace openib::ibd
