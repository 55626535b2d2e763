#include "ibd/qp_attr_convert.hpp"

namespace openib::ibd {

namespace {

// One field of each side: integers, bools and enums by value (a wire
// byte other than 0 is true), the DGID as it is.
struct Assign {
  template <class To, class From> void operator()(To& to, const From& from) const { to = static_cast<To>(from); }
};

template <class To, class From> To av_copy(const From& from) {
  To to;
  proto::av_fields(Assign{}, to, from);
  return to;
}

template <class To, class From> To qp_attr_copy(const From& from) {
  To to;
  proto::qp_attr_fields(Assign{}, to, from);
  return to;
}

}  // namespace

hca::AddressVector to_hca(const proto::Av& a) { return av_copy<hca::AddressVector>(a); }
proto::Av to_proto(const hca::AddressVector& v) { return av_copy<proto::Av>(v); }
hca::QpAttr to_hca(const proto::QpAttr& a) { return qp_attr_copy<hca::QpAttr>(a); }
proto::QpAttr to_proto(const hca::QpAttr& h) { return qp_attr_copy<proto::QpAttr>(h); }

}  // namespace openib::ibd
