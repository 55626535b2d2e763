// Common MAD header codec, IBA 13.4.2.
#include "mad/mad.hpp"

namespace openib::mad {

Result<MadHeader> decode_header(ConstBytes in) {
  if (in.size() < kMadHeaderBytes) return err(EPROTO, "MAD header: {} bytes, need {}", in.size(), kMadHeaderBytes);
  MadHeader h;
  h.base_version = get8(in, 0);
  h.mgmt_class = get8(in, 1);
  h.class_version = get8(in, 2);
  h.method = get8(in, 3);
  h.status = get16(in, 4);
  h.class_specific = get16(in, 6);
  h.tid = get64(in, 8);
  h.attr_id = get16(in, 16);
  h.resv = get16(in, 18);
  h.attr_mod = get32(in, 20);
  return h;
}

void encode_header(MutBytes out, const MadHeader& h) {
  put8(out, 0, h.base_version);
  put8(out, 1, h.mgmt_class);
  put8(out, 2, h.class_version);
  put8(out, 3, h.method);
  put16(out, 4, h.status);
  put16(out, 6, h.class_specific);
  put64(out, 8, h.tid);
  put16(out, 16, h.attr_id);
  put16(out, 18, h.resv);
  put32(out, 20, h.attr_mod);
}

Mad make_mad(const MadHeader& h) {
  Mad m{};
  encode_header(m, h);
  return m;
}

void make_response(MutBytes mad, std::uint16_t status) {
  put8(mad, 3, response_method(get8(mad, 3)));
  put16(mad, 4, status);
}

std::string_view class_name(std::uint8_t c) {
  switch (c) {
    case mgmt_class::kSubnLid: return "SubnMgmt";
    case mgmt_class::kSubnDirected: return "SubnMgmtDR";
    case mgmt_class::kSubnAdm: return "SubnAdm";
    case mgmt_class::kPerfMgmt: return "PerfMgmt";
    case mgmt_class::kBm: return "BM";
    case mgmt_class::kDevMgt: return "DevMgt";
    case mgmt_class::kComMgt: return "ComMgt";
    case mgmt_class::kSnmp: return "SNMP";
    case mgmt_class::kCongMgmt: return "CongMgmt";
    default: break;
  }
  if (c >= mgmt_class::kVendorRange1Start && c <= mgmt_class::kVendorRange1End) return "Vendor1";
  if (c >= mgmt_class::kVendorRange2Start && c <= mgmt_class::kVendorRange2End) return "Vendor2";
  return "Unknown";
}

std::string_view method_name(std::uint8_t m) {
  switch (m) {
    case method::kGet: return "Get";
    case method::kSet: return "Set";
    case method::kSend: return "Send";
    case method::kTrap: return "Trap";
    case method::kReport: return "Report";
    case method::kTrapRepress: return "TrapRepress";
    case method::kGetTable: return "GetTable";
    case method::kGetTraceTable: return "GetTraceTable";
    case method::kGetMulti: return "GetMulti";
    case method::kDelete: return "Delete";
    case method::kGetResp: return "GetResp";
    case method::kReportResp: return "ReportResp";
    case method::kGetTableResp: return "GetTableResp";
    case method::kGetTraceTableResp: return "GetTraceTableResp";
    case method::kGetMultiResp: return "GetMultiResp";
    case method::kDeleteResp: return "DeleteResp";
    default: return "Unknown";
  }
}

std::string_view smp_attr_name(std::uint16_t a) {
  switch (a) {
    case attr::kClassPortInfo: return "ClassPortInfo";
    case attr::kNotice: return "Notice";
    case attr::kInformInfo: return "InformInfo";
    case attr::kNodeDescription: return "NodeDescription";
    case attr::kNodeInfo: return "NodeInfo";
    case attr::kSwitchInfo: return "SwitchInfo";
    case attr::kGuidInfo: return "GUIDInfo";
    case attr::kPortInfo: return "PortInfo";
    case attr::kPKeyTable: return "P_KeyTable";
    case attr::kSlToVlTable: return "SLtoVLMappingTable";
    case attr::kVlArbTable: return "VLArbitrationTable";
    case attr::kLinearFwdTable: return "LinearForwardingTable";
    case attr::kRandomFwdTable: return "RandomForwardingTable";
    case attr::kMulticastFwdTable: return "MulticastForwardingTable";
    case attr::kSmInfo: return "SMInfo";
    case attr::kVendorDiag: return "VendorDiag";
    case attr::kLedInfo: return "LedInfo";
    default: return "Unknown";
  }
}

}  // namespace openib::mad
